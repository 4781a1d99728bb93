//! The caller as a handler argument: `principal: Principal` reads what
//! [`crate::auth::require_auth`] put in the request's extensions. A route
//! that the middleware let through without a credential (a public one) has
//! none, and a handler asking for it answers 401.

use axum::{extract::FromRequestParts, http::request::Parts};

use crate::{auth::AuthError, error::ApiError, principal::Principal};

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized(AuthError::Missing.to_string()))
    }
}
