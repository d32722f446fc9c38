//! Client errors.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::proto::{ErrorBody, ErrorCode};

/// What can go wrong talking to gpud.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No daemon answers on the socket.
    #[error(
        "cannot connect to gpud at {}: {source} (is gpud running? the socket is chosen with --socket or GPUD_SOCKET)",
        path.display()
    )]
    Connect {
        /// The socket path tried.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The daemon refused the session (not allowed, limits, version).
    #[error("gpud at {} refused the session: {}", path.display(), body.message)]
    Refused {
        /// The socket path.
        path: PathBuf,
        /// The daemon's reason.
        body: ErrorBody,
    },
    /// The daemon answered a request with an error.
    #[error("{}", .0.message)]
    Daemon(ErrorBody),
    /// The connection ended.
    #[error("the connection to gpud was lost")]
    Disconnected,
    /// The daemon sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The daemon's error code, when the daemon gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Daemon(b) | ClientError::Refused { body: b, .. } => Some(b.code),
            _ => None,
        }
    }
}

/// Results of client calls.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;
