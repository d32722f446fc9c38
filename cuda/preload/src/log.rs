//! Log lines on stderr, each prefixed `gpud-preload:` (the program's own output is not ours to
//! format; a prefix lets its owner grep for ours).

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `GPUD_PRELOAD_QUIET`: keep only errors.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// What the interposer did (a lease granted, grown, shrunk).
pub fn info(message: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        eprintln!("gpud-preload: {message}");
    }
}

/// Something failed or a policy applied (always shown).
pub fn error(message: &str) {
    eprintln!("gpud-preload: {message}");
}
