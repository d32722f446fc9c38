//! Live status on long work: a spinner on stderr, hidden when the output is for machines.

use std::time::Duration;

use indicatif::ProgressBar;

/// A spinner with `msg`, ticking until it is finished; hidden when `quiet` (`--json`).
pub fn spinner(msg: String, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner().with_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
