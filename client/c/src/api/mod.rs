//! The exported functions, by the handle they work on. No `unsafe` here: pointers go through
//! [`crate::ptr`], and every body runs behind [`crate::error::boundary`].
//!
//! Each function carries `#[unsafe(no_mangle)]` (the symbol is its C name; the `gpud_` prefix
//! keeps it apart from other libraries'), which is the only `unsafe` these modules write.

pub mod client;
pub mod lease;
pub mod misc;
pub mod request;
