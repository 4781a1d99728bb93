//! Who is calling: the verified identity a request acts as.
//!
//! [`crate::auth`] makes one from a token, an API key or the `[anonymous]`
//! routes; the sessions service and the limits read it to scope what the
//! caller may see and spend. It sits in a module of its own, below both, so
//! the sessions service does not depend on how callers are authenticated.

use std::sync::Arc;

/// Who is calling, from a verified credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: Arc<str>,
    pub subject: String,
    pub scopes: Vec<String>,
}

impl Principal {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// Headers of the request a turn started from that tools pass on
/// (`[[mcp_servers]] forward_headers`: a caller's own credentials). The
/// middleware sets them for the request's task, the turn it starts keeps
/// them for as long as it runs here; they are never stored, logged or
/// sent to a client, so a turn taken over by another replica has none.
#[derive(Clone, Default)]
pub struct Forwarded(Arc<Vec<(String, String)>>);

tokio::task_local! {
    static FORWARDED: Forwarded;
}

impl Forwarded {
    /// `headers`: (lower-case name, value).
    pub fn new(headers: Vec<(String, String)>) -> Self {
        Self(Arc::new(headers))
    }

    /// Those of the current request or turn; none elsewhere.
    pub fn current() -> Self {
        FORWARDED.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `future` with these as the current ones.
    pub async fn scope<F: std::future::Future>(self, future: F) -> F::Output {
        FORWARDED.scope(self, future).await
    }

    /// The value of header `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl std::fmt::Debug for Forwarded {
    /// Names only: the values are credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(name, _)| name)).finish()
    }
}
