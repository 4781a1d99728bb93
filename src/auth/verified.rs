//! Tokens already verified, so a client that sends the same token with
//! every request (all of them do) pays for its signature once, not per
//! request.
//!
//! An entry is the [`Principal`] a token verified as, kept until the
//! token's `exp` (without the leeway: past it the token is verified again,
//! and the leeway applies then). A tenant's configured keys do not change
//! while the process runs; its JWKS keys do, so an entry verified while a
//! JWKS key set was current holds that set and counts only while it is
//! still the current one: a refresh that drops a key drops what it
//! verified. The cache is bounded: when full, expired entries go, and if
//! that is not enough, all of them.

use std::sync::Arc;

use dashmap::DashMap;

use super::keys::VerifyKey;
use crate::principal::Principal;

/// Entries kept at most.
pub(super) const CAPACITY: usize = 10_000;

/// What one token verified as.
struct Entry {
    principal: Principal,
    /// The token's `exp`, in seconds since the epoch.
    exp: u64,
    /// The tenant's JWKS key set when it was verified (none: the tenant has
    /// no JWKS).
    jwks: Option<Arc<Vec<VerifyKey>>>,
}

/// Verified tokens, keyed by the token.
pub(super) struct Verified {
    entries: DashMap<Box<str>, Entry>,
    capacity: usize,
}

impl Verified {
    pub(super) fn new(capacity: usize) -> Self {
        Self { entries: DashMap::new(), capacity }
    }

    /// The principal `token` verified as, if it did, has not expired at
    /// `now`, and the JWKS key set it was verified with is still `current`
    /// for its tenant.
    pub(super) fn get(
        &self,
        token: &str,
        now: u64,
        current: impl Fn(&str) -> Option<Arc<Vec<VerifyKey>>>,
    ) -> Option<Principal> {
        let valid = |entry: &Entry| {
            now < entry.exp
                && entry.jwks.as_ref().is_none_or(|verified_with| {
                    current(&entry.principal.tenant).is_some_and(|set| Arc::ptr_eq(verified_with, &set))
                })
        };
        let entry = self.entries.get(token)?;
        if valid(&entry) {
            return Some(entry.principal.clone());
        }
        drop(entry);
        // Only if still stale: a request may have verified it again meanwhile.
        self.entries.remove_if(token, |_, entry| !valid(entry));
        None
    }

    /// Remembers that `token` verified as `principal` until `exp`.
    pub(super) fn insert(
        &self,
        token: &str,
        principal: &Principal,
        exp: u64,
        jwks: Option<Arc<Vec<VerifyKey>>>,
        now: u64,
    ) {
        if exp <= now {
            return;
        }
        if self.entries.len() >= self.capacity {
            self.entries.retain(|_, entry| now < entry.exp);
            if self.entries.len() >= self.capacity {
                self.entries.clear();
            }
        }
        self.entries.insert(token.into(), Entry { principal: principal.clone(), exp, jwks });
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The tenant an entry for `token` names, if there is one (for tests).
    #[cfg(test)]
    pub(super) fn tenant_of(&self, token: &str) -> Option<Arc<str>> {
        self.entries.get(token).map(|e| e.principal.tenant.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(tenant: &str) -> Principal {
        Principal { tenant: Arc::from(tenant), subject: "s".into(), scopes: vec!["a".into()] }
    }

    #[test]
    fn an_entry_counts_until_its_exp() {
        let cache = Verified::new(10);
        cache.insert("t1", &principal("acme"), 100, None, 10);
        assert_eq!(cache.get("t1", 99, |_| None), Some(principal("acme")));
        assert_eq!(cache.get("t1", 100, |_| None), None);
        assert_eq!(cache.len(), 0, "an expired entry is dropped when found");
        assert_eq!(cache.get("t2", 10, |_| None), None);
    }

    #[test]
    fn an_entry_verified_with_a_jwks_key_set_counts_only_while_that_set_is_current() {
        let cache = Verified::new(10);
        let (old, new) = (Arc::new(Vec::new()), Arc::new(Vec::new()));
        cache.insert("t", &principal("acme"), 100, Some(old.clone()), 10);
        assert_eq!(cache.get("t", 11, |tenant| (tenant == "acme").then(|| old.clone())), Some(principal("acme")));
        assert_eq!(cache.get("t", 11, |_| Some(new.clone())), None, "a refreshed key set verifies again");
        assert_eq!(cache.get("t", 11, |_| Some(old.clone())), None);
    }

    #[test]
    fn a_full_cache_drops_the_expired_entries_first_then_all() {
        let cache = Verified::new(3);
        cache.insert("a", &principal("x"), 5, None, 1);
        cache.insert("b", &principal("x"), 50, None, 1);
        cache.insert("c", &principal("x"), 50, None, 1);
        cache.insert("d", &principal("x"), 50, None, 10);
        assert_eq!(cache.len(), 3, "the expired one made room");
        assert_eq!(cache.tenant_of("a"), None);
        cache.insert("e", &principal("x"), 50, None, 10);
        assert_eq!(cache.len(), 1, "nothing expired: all went");
        assert!(cache.tenant_of("e").is_some());
    }
}
