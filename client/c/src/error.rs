//! The library's errors, the per-thread last error message, and the boundary every entry
//! point runs behind (no panic crosses into C).

use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};

use gpud_client::ClientError;
use thiserror::Error;

use crate::code::GpudCode;

/// What a call can fail with, before it becomes a [`GpudCode`] and a message.
#[derive(Debug, Error)]
pub(crate) enum Error {
    /// The Rust client's error (the daemon's code, connect, disconnect, protocol).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A pointer argument was NULL.
    #[error("{0} is NULL")]
    Null(&'static str),
    /// A string argument is not UTF-8.
    #[error("{0} is not valid UTF-8")]
    Utf8(&'static str),
    /// An argument the library cannot use.
    #[error("{0}")]
    InvalidArgument(String),
    /// A request the daemon would refuse as `invalid_request`; refused here first.
    #[error("{0}")]
    InvalidRequest(String),
    /// A lease this handle no longer holds (it was released through it).
    #[error("lease {0} was already released")]
    Released(u64),
    /// The daemon sent what the library cannot pass on (a NUL byte in a text).
    #[error("{0}")]
    Protocol(String),
    /// A system call failed (out of descriptors, say).
    #[error("{0}")]
    System(String),
    /// A panic inside the library.
    #[error("libgpud bug: {0}")]
    Panic(String),
}

impl Error {
    /// The code C sees.
    pub fn code(&self) -> GpudCode {
        match self {
            Error::Client(e) => GpudCode::from_client(e),
            Error::Null(_) => GpudCode::GPUD_E_NULL_ARGUMENT,
            Error::Utf8(_) | Error::InvalidArgument(_) => GpudCode::GPUD_E_INVALID_ARGUMENT,
            Error::InvalidRequest(_) => GpudCode::GPUD_E_INVALID_REQUEST,
            Error::Released(_) => GpudCode::GPUD_E_UNKNOWN_LEASE,
            Error::Protocol(_) => GpudCode::GPUD_E_PROTOCOL,
            Error::System(_) => GpudCode::GPUD_E_SYSTEM,
            Error::Panic(_) => GpudCode::GPUD_E_LIBRARY,
        }
    }
}

/// Results inside the library.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `error` as the calling thread's last error and returns its code.
fn fail(error: &Error) -> GpudCode {
    // A message with a NUL in it (from the daemon) is cut there rather than lost.
    let text = error.to_string();
    let text = text.split('\0').next().unwrap_or_default();
    let message = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    error.code()
}

/// The calling thread's last error message: valid until the next failing call on this
/// thread; empty before the first.
pub(crate) fn last_error() -> *const std::ffi::c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// The calling thread's last error message, as text (for the library's tests).
#[cfg(test)]
pub(crate) fn last_error_text() -> String {
    LAST_ERROR.with(|last| last.borrow().to_string_lossy().into_owned())
}

/// Runs an entry point's body: `GPUD_OK`, or the code of its error or panic (the message goes
/// to `gpud_last_error`).
pub(crate) fn boundary(body: impl FnOnce() -> Result<()>) -> GpudCode {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => GpudCode::GPUD_OK,
        Ok(Err(e)) => fail(&e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            fail(&Error::Panic(what))
        }
    }
}

/// Runs an entry point that returns nothing (the free functions): a panic is swallowed, since
/// there is no code to return it with.
pub(crate) fn boundary_void(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// Runs an entry point that returns a value rather than a code (names, versions): `fallback`
/// if it panics.
pub(crate) fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_library_code_with_its_message() {
        let code = boundary(|| panic!("boom {}", 7));
        assert_eq!(code, GpudCode::GPUD_E_LIBRARY);
        assert_eq!(last_error_text(), "libgpud bug: boom 7");
        boundary_void(|| panic!("quiet"));
        assert_eq!(boundary_value(7, || panic!("value")), 7);
        assert_eq!(boundary_value(7, || 8), 8);
    }

    /// Every exported function runs its body behind one of the boundaries above.
    #[test]
    fn every_entry_point_catches_panics() {
        let mut exports = 0;
        for file in ["client.rs", "lease.rs", "misc.rs", "request.rs"] {
            let path = format!("{}/src/api/{file}", env!("CARGO_MANIFEST_DIR"));
            let source = std::fs::read_to_string(&path).unwrap();
            let source = source.split("#[cfg(test)]").next().unwrap();
            for function in source.split("pub extern \"C\" fn ").skip(1) {
                exports += 1;
                let name = function.split('(').next().unwrap();
                let body = function.split("#[unsafe(no_mangle)]").next().unwrap();
                assert!(
                    body.contains("boundary(")
                        || body.contains("boundary_void(")
                        || body.contains("boundary_value("),
                    "{name} in {file} has no boundary"
                );
            }
        }
        assert!(exports >= 40, "{exports}");
    }

    #[test]
    fn errors_set_the_thread_s_message_and_success_keeps_it() {
        assert_eq!(
            boundary(|| Err(Error::Null("client"))),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(last_error_text(), "client is NULL");
        assert_eq!(boundary(|| Ok(())), GpudCode::GPUD_OK);
        assert_eq!(last_error_text(), "client is NULL");
        // Another thread has its own.
        std::thread::spawn(|| assert_eq!(last_error_text(), ""))
            .join()
            .unwrap();
        let nul = Error::InvalidArgument("before\0after".into());
        assert_eq!(boundary(|| Err(nul)), GpudCode::GPUD_E_INVALID_ARGUMENT);
        assert_eq!(last_error_text(), "before");
    }
}
