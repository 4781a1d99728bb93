//! The small checks every part of the configuration's validation uses,
//! in a leaf module: the MCP servers' validation (`config/mcp.rs`) takes
//! them from here without importing the rest of `validate`, which imports
//! it back through the raw configuration.

use std::time::Duration;

use crate::config::ConfigErrors;

/// `value`, unless it is zero or less: then an error at `path`, and `None`.
pub(in crate::config) fn positive<T: Copy + Default + PartialOrd>(
    errors: &mut ConfigErrors,
    path: &str,
    value: Option<T>,
) -> Option<T> {
    match value {
        Some(v) if v <= T::default() => {
            errors.push(path, "must be a positive integer");
            None
        }
        other => other,
    }
}

/// `value` seconds, or `default` when absent.
pub(in crate::config) fn secs(value: Option<u64>, default: u64) -> Duration {
    Duration::from_secs(value.unwrap_or(default))
}
