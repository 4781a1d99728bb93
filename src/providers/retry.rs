//! Retries with backoff before the first event (being written).
