//! The checks a request's arguments get before the ledger sees them. The client library has
//! user-facing checks of its own; the daemon checks here, once, whatever the client.

use std::time::Duration;

use gpud_proto::{ErrorBody, ErrorCode};

/// Longest wait a request may ask for (a year): beyond it, "for ever" is the honest request.
const MAX_TIMEOUT_MS: u64 = 365 * 24 * 3600 * 1000;
/// Longest label kept.
const MAX_LABEL: usize = 256;

/// A wait of at most a year, or none.
pub(super) fn timeout(timeout_ms: Option<u64>) -> Result<Option<Duration>, ErrorBody> {
    match timeout_ms {
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("timeout_ms {ms} is over a year; omit it to wait without a timeout"),
        )),
        t => Ok(t.map(Duration::from_millis)),
    }
}

/// Whether `value` is at most [`MAX_LABEL`] bytes of printable text.
fn printable(value: &str) -> bool {
    value.len() <= MAX_LABEL && !value.chars().any(char::is_control)
}

/// A label of printable text, not too long.
pub(super) fn label(label: Option<&str>) -> Result<(), ErrorBody> {
    match label {
        Some(l) if !printable(l) => Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("label must be at most {MAX_LABEL} bytes of printable text"),
        )),
        _ => Ok(()),
    }
}

/// A name (a job id, a cgroup path): non-empty printable text, not too long.
pub(super) fn name(what: &str, value: &str) -> Result<(), ErrorBody> {
    if value.is_empty() || !printable(value) {
        return Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("{what} must be 1 to {MAX_LABEL} bytes of printable text"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_labels_are_bounded() {
        assert_eq!(timeout(None), Ok(None));
        assert_eq!(timeout(Some(5)), Ok(Some(Duration::from_millis(5))));
        assert!(timeout(Some(MAX_TIMEOUT_MS + 1)).is_err());
        assert!(label(Some("prover 1")).is_ok());
        assert!(label(Some("a\nb")).is_err());
        assert!(label(Some(&"x".repeat(MAX_LABEL + 1))).is_err());
        assert!(name("job", "4711").is_ok());
        assert!(name("job", "").is_err());
        assert!(name("job", "a\tb").is_err());
    }
}
