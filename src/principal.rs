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
