//! gpudctl's exit codes: docs/EXIT-CODES.md is the reference, `--help` repeats it.

use gpud_client::ClientError;
use gpud_client::proto::ErrorCode;
use thiserror::Error;

/// It worked.
pub const OK: u8 = 0;
/// Anything not listed below (an answer gpudctl does not understand, output that failed).
pub const FAILED: u8 = 1;
/// A bad command line (clap's code, and gpudctl's own checks of values).
pub const USAGE: u8 = 2;
/// No gpud answers at the socket.
pub const UNREACHABLE: u8 = 3;
/// This user may not: the socket's permissions, the access lists, or admin rights.
pub const PERMISSION: u8 = 4;
/// gpud refused the request: it can never fit, a limit, an unknown device or lease.
pub const REFUSED: u8 = 5;
/// `run --timeout` passed before the lease was granted.
pub const TIMED_OUT: u8 = 6;
/// The lease was revoked while the program ran (the program was stopped).
pub const REVOKED: u8 = 7;
/// The connection to gpud was lost and did not come back.
pub const LOST: u8 = 8;
/// `run --enforce`: that enforcement cannot run on this host now (for mps: gpud runs no MPS
/// control daemon, or it is not up); the message says why.
pub const ENFORCE_UNAVAILABLE: u8 = 10;
/// `run`: the program exists but cannot be executed (the shell's code).
pub const NOT_EXECUTABLE: u8 = 126;
/// `run`: the program was not found (the shell's code).
pub const NOT_FOUND: u8 = 127;

/// The table for `--help`.
pub const TABLE: &str = "\
Exit status:
  0    success
  1    any other failure
  2    usage: bad arguments or option values
  3    cannot connect: no gpud answers at the socket
  4    permission: the socket's permissions, gpud's access lists, or admin rights
  5    refused: the request can never fit, a limit, an unknown device or lease
  6    timed out: run --timeout passed before the grant
  7    revoked: the lease was taken away and the program stopped
  8    lost connection: gpud went away and did not come back
  10   run --enforce: that enforcement is not available on this host (the message says why)
  126  run: the program cannot be executed
  127  run: the program was not found
  128+N  run: signal N (HUP, INT, QUIT, TERM) reached gpudctl while it waited
  run otherwise exits with the program's status (128+N when killed by signal N)";

/// An outcome of gpudctl's own, with its code.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct Fail {
    /// The exit code.
    pub code: u8,
    /// What happened.
    pub message: String,
}

impl Fail {
    /// An outcome with `code`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The code for an error: its own [`Fail`], else what the client library's error means.
pub fn code_of(error: &anyhow::Error) -> u8 {
    // A `Fail` given as context is found by anyhow's downcast, not in the chain.
    if let Some(f) = error.downcast_ref::<Fail>() {
        return f.code;
    }
    for cause in error.chain() {
        if let Some(f) = cause.downcast_ref::<Fail>() {
            return f.code;
        }
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return client_code(c);
        }
    }
    FAILED
}

fn client_code(e: &ClientError) -> u8 {
    if e.is_permission() {
        return PERMISSION;
    }
    match e {
        ClientError::Connect { .. } => UNREACHABLE,
        ClientError::Disconnected => LOST,
        ClientError::Invalid(_) => REFUSED,
        _ => match e.code() {
            Some(ErrorCode::TimedOut) => TIMED_OUT,
            Some(ErrorCode::ShuttingDown) => LOST,
            Some(
                ErrorCode::NeverFits
                | ErrorCode::LimitExceeded
                | ErrorCode::UnknownDevice
                | ErrorCode::UnknownLease
                | ErrorCode::UnknownRequest
                | ErrorCode::InvalidRequest
                | ErrorCode::ResizePending,
            ) => REFUSED,
            _ => FAILED,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpud_client::proto::ErrorBody;

    fn daemon(code: ErrorCode) -> anyhow::Error {
        anyhow::Error::new(ClientError::Daemon(ErrorBody::new(code, "x"))).context("acquire")
    }

    #[test]
    fn each_outcome_has_its_code_through_context() {
        let connect = |kind| {
            anyhow::Error::new(ClientError::Connect {
                path: "/x".into(),
                source: std::io::Error::from(kind),
            })
        };
        assert_eq!(code_of(&connect(std::io::ErrorKind::NotFound)), UNREACHABLE);
        assert_eq!(
            code_of(&connect(std::io::ErrorKind::PermissionDenied)),
            PERMISSION
        );
        assert_eq!(code_of(&daemon(ErrorCode::PermissionDenied)), PERMISSION);
        assert_eq!(code_of(&daemon(ErrorCode::NotAllowed)), PERMISSION);
        assert_eq!(code_of(&daemon(ErrorCode::NeverFits)), REFUSED);
        assert_eq!(code_of(&daemon(ErrorCode::LimitExceeded)), REFUSED);
        assert_eq!(code_of(&daemon(ErrorCode::TimedOut)), TIMED_OUT);
        assert_eq!(code_of(&daemon(ErrorCode::Internal)), FAILED);
        assert_eq!(
            code_of(&anyhow::Error::new(ClientError::Disconnected)),
            LOST
        );
        let own = anyhow::Error::new(Fail::new(REVOKED, "revoked")).context("run");
        assert_eq!(code_of(&own), REVOKED);
        let as_context = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::NotFound))
            .context(Fail::new(NOT_FOUND, "cannot run"));
        assert_eq!(code_of(&as_context), NOT_FOUND);
        assert_eq!(code_of(&anyhow::anyhow!("other")), FAILED);
    }
}
