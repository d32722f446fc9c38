//! What no handle owns: errors and their names, versions, sizes, strings the library gave out.

use std::ffi::c_char;

use gpud_client::proto::{PROTOCOL_VERSION, parse_size};

use crate::code::GpudCode;
use crate::error::{Error, boundary, boundary_value, boundary_void, last_error};
use crate::ptr;

/// Passed as a timeout: wait for ever.
pub const GPUD_NO_TIMEOUT: i64 = -1;

/// `gpud_lease_numa_node`'s answer for a lease that holds no CPUs.
pub const GPUD_NO_NUMA_NODE: i32 = -1;

/// The library's version, `MAJOR.MINOR.PATCH`; the major is the soname's (`libgpud.so.1`).
const VERSION: &std::ffi::CStr = c"1.0.0";

/// The message of the last call on this thread that failed (never NULL; empty before the
/// first failure). Valid until the next failing call on this thread; calls that succeed
/// leave it alone.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_last_error() -> *const c_char {
    // The thread's storage is gone only while the thread exits.
    boundary_value(c"".as_ptr(), last_error)
}

/// A code's snake_case name (`"timed_out"`: the protocol's name for the protocol's codes),
/// static; `"unknown"` for a number that is no `gpud_code`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_code_name(code: i32) -> *const c_char {
    boundary_value(c"unknown".as_ptr(), || {
        GpudCode::from_i32(code).map_or(c"unknown".as_ptr(), |c| c.c_name().as_ptr())
    })
}

/// The protocol version this library speaks (the hello's `version`); equal to the library's
/// major version (`libgpud.so.1` speaks protocol 1).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_protocol_version() -> u32 {
    boundary_value(PROTOCOL_VERSION, || PROTOCOL_VERSION)
}

/// The library's version (`"1.0.0"`), static.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_version() -> *const c_char {
    boundary_value(VERSION.as_ptr(), || VERSION.as_ptr())
}

/// Reads a byte size as gpudctl does (`12GiB`, `512MiB`, `1.5GiB`, `4096`) into `*out`;
/// `GPUD_E_INVALID_ARGUMENT` for text that is no size.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_parse_size(text: *const c_char, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let text = ptr::text(text, "text")?;
        out.set(parse_size(text).map_err(|e| Error::InvalidArgument(e.to_string()))?);
        Ok(())
    })
}

/// Frees a string the library returned (`gpud_status_json`, `gpud_metrics_text`). NULL is
/// allowed.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_string_free(s: *mut c_char) {
    boundary_void(|| ptr::take_back_string(s));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: *const c_char) -> String {
        ptr::text(p, "text").unwrap().to_string()
    }

    #[test]
    fn the_version_is_the_package_s_and_its_major_the_protocol_s() {
        assert_eq!(text(gpud_version()), env!("CARGO_PKG_VERSION"));
        assert_eq!(
            env!("CARGO_PKG_VERSION_MAJOR").parse::<u32>().unwrap(),
            gpud_protocol_version()
        );
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(text(gpud_code_name(14)), "timed_out");
        assert_eq!(text(gpud_code_name(0)), "ok");
        assert_eq!(text(gpud_code_name(999)), "unknown");
        let mut n = 0;
        assert_eq!(
            gpud_parse_size(c"10GiB".as_ptr(), &mut n),
            GpudCode::GPUD_OK
        );
        assert_eq!(n, 10 << 30);
        assert_eq!(
            gpud_parse_size(c"ten".as_ptr(), &mut n),
            GpudCode::GPUD_E_INVALID_ARGUMENT
        );
        assert!(text(gpud_last_error()).contains("invalid size"));
        assert_eq!(
            gpud_parse_size(std::ptr::null(), &mut n),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(text(gpud_last_error()), "text is NULL");
        gpud_string_free(std::ptr::null_mut());
    }
}
