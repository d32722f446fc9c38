//! What the lease latency benchmarks share (`gpud-bench-lease`, `gpud-bench-clients`): the
//! kernel's round-trip floor and the daemon they measure.
//!
//! The floor is one byte to a child process and back over a Unix socket pair, nothing else:
//! two wake-ups of a sleeping process, the least any request to a daemon can cost. On a
//! virtual machine with idle vCPUs that alone can cost tens of µs and varies from hour to
//! hour, so a benchmark measures it in the same run as what it compares with it.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gpud_tests::Daemon;

use crate::stats::{Summary, summarize};

/// The argument that makes a benchmark binary the echo child of [`kernel_round_trip`]: a
/// binary that measures the floor answers it with [`echo`] before anything else.
pub const ECHO_ARG: &str = "--echo";

/// The echo child: copies every byte from stdin to stdout until EOF.
pub fn echo() -> Result<()> {
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut b = [0u8; 1];
    while input.read(&mut b)? == 1 {
        output.write_all(&b)?;
        output.flush()?;
    }
    Ok(())
}

/// `n` round trips of one byte to a child process (this binary, run with [`ECHO_ARG`]) and
/// back over a Unix socket pair, after `n / 10` not counted.
pub fn kernel_round_trip_samples(n: usize) -> Result<Vec<Duration>> {
    let (mut ours, theirs) = UnixStream::pair()?;
    let theirs_out = theirs.try_clone()?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg(ECHO_ARG)
        .stdin(OwnedFd::from(theirs))
        .stdout(OwnedFd::from(theirs_out))
        .spawn()
        .context("starting the echo process")?;
    let mut samples = Vec::with_capacity(n);
    let mut b = [0u8; 1];
    for i in 0..n + n / 10 {
        let t = Instant::now();
        ours.write_all(&[i as u8])?;
        ours.read_exact(&mut b)?;
        if i >= n / 10 {
            samples.push(t.elapsed());
        }
    }
    drop(ours);
    child.wait()?;
    Ok(samples)
}

/// [`kernel_round_trip_samples`], summarized.
pub fn kernel_round_trip(n: usize) -> Result<Summary> {
    Ok(summarize(&mut kernel_round_trip_samples(n)?))
}

/// Config for a daemon under a latency benchmark: one client sends tens of thousands of
/// requests a second, above the default per-session rate limit, which would pace it (that is
/// what the limit is for).
pub const DAEMON_CONFIG: &str = "[limits]\nrequests_per_second = 10000000\n";

/// A real `gpud` (the binary beside this one) on simulated devices (`16GiB`, `1x16GiB`) with
/// [`DAEMON_CONFIG`], logging warnings only.
pub fn start_daemon(simulate: &str) -> Daemon {
    Daemon::start_logging(simulate, DAEMON_CONFIG, "warn")
}
