//! Pointers from C: the one place (with `notice`) where this crate dereferences memory it did
//! not allocate, or frees what it gave out.
//!
//! The contract each function relies on is gpud.h's: a pointer argument is NULL or points to
//! what its type says (a handle this library made and has not freed, a NUL-terminated string,
//! writable storage for the out value), for the duration of the call. NULL is checked here and
//! becomes `GPUD_E_NULL_ARGUMENT`; what cannot be checked from a pointer (a dangling or forged
//! one) is the caller's to get right, as with any C library.

use std::ffi::{CStr, CString, c_char};
use std::mem::MaybeUninit;

use crate::error::{Error, Result};

/// Borrows a handle (client, lease, request) for the call.
pub(crate) fn handle<'a, T>(p: *const T, what: &'static str) -> Result<&'a T> {
    // SAFETY: per gpud.h, a non-NULL handle points to a live `T` this library boxed and has
    // not freed; we only read through it, and handles are shared (`Sync`) types.
    unsafe { p.as_ref() }.ok_or(Error::Null(what))
}

/// Borrows a handle for a change (a request's setters).
pub(crate) fn handle_mut<'a, T>(p: *mut T, what: &'static str) -> Result<&'a mut T> {
    // SAFETY: as `handle`; gpud.h tells callers not to change a request while another call
    // uses it, so this borrow is the only one.
    unsafe { p.as_mut() }.ok_or(Error::Null(what))
}

/// A string argument as UTF-8 text.
pub(crate) fn text<'a>(p: *const c_char, what: &'static str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::Null(what));
    }
    // SAFETY: non-NULL, so per gpud.h a NUL-terminated string that lives for the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| Error::Utf8(what))
}

/// Storage for an out value, checked before the call does its work (so that a NULL out
/// pointer never costs a lease or a round trip).
pub(crate) struct Out<'a, T>(&'a mut MaybeUninit<T>);

impl<T> Out<'_, T> {
    /// Stores the value.
    pub fn set(self, value: T) {
        self.0.write(value);
    }
}

/// The out pointer as storage to write once.
pub(crate) fn out<'a, T>(p: *mut T, what: &'static str) -> Result<Out<'a, T>> {
    // SAFETY: per gpud.h, a non-NULL out pointer points to writable storage for a `T`
    // (possibly uninitialised, hence `MaybeUninit`, which has `T`'s layout).
    unsafe { p.cast::<MaybeUninit<T>>().as_mut() }
        .map(Out)
        .ok_or(Error::Null(what))
}

/// Hands a new handle to C.
pub(crate) fn give<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back and drops a handle that C frees; NULL is nothing to free.
pub(crate) fn take_back<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: per gpud.h, a non-NULL pointer given to a free function came from `give`
        // (`Box::into_raw`) for this `T` and is freed once, by no other thread meanwhile.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Hands a new string to C (freed with `gpud_string_free`).
pub(crate) fn give_string(s: String) -> Result<*mut c_char> {
    CString::new(s)
        .map(CString::into_raw)
        .map_err(|_| Error::Protocol("the daemon's text holds a NUL byte".into()))
}

/// Takes back and drops a string from `give_string`; NULL is nothing to free.
pub(crate) fn take_back_string(p: *mut c_char) {
    if !p.is_null() {
        // SAFETY: per gpud.h, only strings this library returned (`CString::into_raw`) are
        // given to `gpud_string_free`, once each.
        drop(unsafe { CString::from_raw(p) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_errors_not_crashes() {
        assert!(matches!(
            handle::<u8>(std::ptr::null(), "x"),
            Err(Error::Null("x"))
        ));
        assert!(matches!(
            handle_mut::<u8>(std::ptr::null_mut(), "x"),
            Err(Error::Null("x"))
        ));
        assert!(matches!(text(std::ptr::null(), "s"), Err(Error::Null("s"))));
        assert!(matches!(
            out::<u64>(std::ptr::null_mut(), "o"),
            Err(Error::Null("o"))
        ));
        take_back::<u8>(std::ptr::null_mut());
        take_back_string(std::ptr::null_mut());
    }

    #[test]
    fn strings_must_be_utf8() {
        let bad = [0xffu8, 0xfe, 0];
        assert!(matches!(
            text(bad.as_ptr().cast(), "label"),
            Err(Error::Utf8("label"))
        ));
        assert_eq!(text(c"0".as_ptr(), "d").unwrap(), "0");
    }

    #[test]
    fn handles_and_strings_round_trip() {
        let p = give(41u32);
        assert_eq!(*handle(p, "p").unwrap(), 41);
        *handle_mut(p, "p").unwrap() += 1;
        let mut slot = 0u32;
        out(&mut slot, "o").unwrap().set(*handle(p, "p").unwrap());
        assert_eq!(slot, 42);
        take_back(p);
        let s = give_string("status".into()).unwrap();
        assert_eq!(text(s, "s").unwrap(), "status");
        take_back_string(s);
        assert!(give_string("a\0b".into()).is_err());
    }
}
