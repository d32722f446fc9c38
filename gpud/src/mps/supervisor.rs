//! The MPS control daemon's life as a pure state machine: when to start it, when it counts
//! as up, how long to wait before starting it again, how to stop it. No clock and no
//! processes inside: the shell ([`super::run`]) reports what happened through `handle_*` with
//! the time, carries out [`Supervisor::poll_action`], and wakes at
//! [`Supervisor::next_timeout`].
//!
//! Order for the shell: after every `handle_*` call, drain `poll_action` until `None`, then
//! read [`Supervisor::availability`] and `next_timeout`. [`Supervisor::is_finished`] says when
//! the daemon is stopped for good.

use std::time::{Duration, Instant};

/// Timing of the supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A daemon still running this long after its start is up (one that ends sooner "exited at
    /// once": a missing GPU or driver, another daemon on the pipe directory).
    pub settle: Duration,
    /// The wait before the first restart after a failure; doubled after each further failure.
    pub first_backoff: Duration,
    /// The longest wait between two starts.
    pub max_backoff: Duration,
    /// A daemon that ran this long had no trouble: the next failure waits `first_backoff`
    /// again.
    pub stable_after: Duration,
    /// How long the daemon has after `quit` before it is killed.
    pub stop_timeout: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            settle: Duration::from_millis(500),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            stable_after: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(5),
        }
    }
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start the control daemon in the foreground; answer with `handle_spawned` or
    /// `handle_spawn_failed`.
    Spawn,
    /// Ask the running daemon (this pid) to end, through the control program's `quit`.
    Quit(u32),
    /// Kill the daemon (this pid) and whatever it started.
    Kill(u32),
}

/// Where the daemon is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// A start is due now.
    Due,
    /// Started; up once it has run for `settle`.
    Starting { pid: u32, since: Instant },
    /// Up: clients may use it.
    Up { pid: u32, since: Instant },
    /// It failed; the next start is at `until`, `wait` after the failure.
    Waiting { until: Instant, wait: Duration },
    /// Asked to quit; killed at `deadline` if still there.
    Stopping { pid: u32, deadline: Instant },
    /// Killed; waiting for it to be gone.
    Killed { pid: u32 },
    /// Stopped for good.
    Stopped,
}

/// Whether clients can use MPS now, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// The daemon is up.
    pub up: bool,
    /// Its pid, while it runs.
    pub pid: Option<u32>,
    /// Why it is not up (the last failure, or that it is starting or stopping).
    pub reason: Option<String>,
    /// Starts after the first.
    pub restarts: u32,
}

/// The control daemon's supervision.
#[derive(Debug)]
pub struct Supervisor {
    policy: Policy,
    phase: Phase,
    actions: Vec<Action>,
    /// Failures since the daemon last ran stably.
    failures: u32,
    /// Starts in all.
    starts: u32,
    /// What went wrong last.
    last_failure: Option<String>,
    /// A stop was asked.
    stopping: bool,
}

impl Supervisor {
    /// A supervisor that starts the daemon at once.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            phase: Phase::Due,
            actions: vec![Action::Spawn],
            failures: 0,
            starts: 0,
            last_failure: None,
            stopping: false,
        }
    }

    /// The next thing to do, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        (!self.actions.is_empty()).then(|| self.actions.remove(0))
    }

    /// When `handle_timeout` must be called next.
    pub fn next_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Starting { since, .. } => Some(since + self.policy.settle),
            Phase::Waiting { until, .. } => Some(until),
            Phase::Stopping { deadline, .. } => Some(deadline),
            Phase::Due | Phase::Up { .. } | Phase::Killed { .. } | Phase::Stopped => None,
        }
    }

    /// The daemon was started, as process `pid`.
    pub fn handle_spawned(&mut self, now: Instant, pid: u32) {
        self.starts += 1;
        self.phase = Phase::Starting { pid, since: now };
        if self.stopping {
            // A stop asked while the start was under way.
            self.quit(now, pid);
        }
    }

    /// The daemon could not be started (no such program, not executable, no directory).
    pub fn handle_spawn_failed(&mut self, now: Instant, why: String) {
        self.fail(now, why);
    }

    /// The daemon's process ended; `how` says how (its status, or the signal).
    pub fn handle_exited(&mut self, now: Instant, how: String) {
        match self.phase {
            Phase::Starting { .. } => self.fail(now, format!("exited at once: {how}")),
            Phase::Up { since, .. } => {
                if now.saturating_duration_since(since) >= self.policy.stable_after {
                    self.failures = 0;
                }
                self.fail(now, format!("exited: {how}"));
            }
            Phase::Stopping { .. } | Phase::Killed { .. } => self.phase = Phase::Stopped,
            Phase::Due | Phase::Waiting { .. } | Phase::Stopped => {}
        }
    }

    /// Time passed: up after the settle time, a start after a backoff, a kill after `quit`.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Starting { pid, since } if now >= since + self.policy.settle => {
                self.phase = Phase::Up { pid, since };
                self.last_failure = None;
            }
            Phase::Waiting { until, .. } if now >= until => {
                self.phase = Phase::Due;
                self.actions.push(Action::Spawn);
            }
            Phase::Stopping { pid, deadline } if now >= deadline => {
                self.phase = Phase::Killed { pid };
                self.actions.push(Action::Kill(pid));
            }
            _ => {}
        }
    }

    /// gpud is stopping: end the daemon (quit, then kill), and start it no more.
    pub fn handle_stop(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        match self.phase {
            Phase::Starting { pid, .. } | Phase::Up { pid, .. } => self.quit(now, pid),
            // A start asked of the shell is answered before this call; nothing runs otherwise.
            Phase::Waiting { .. } => {
                self.actions.retain(|a| *a != Action::Spawn);
                self.phase = Phase::Stopped;
            }
            Phase::Due => {
                if self.actions.contains(&Action::Spawn) {
                    self.actions.retain(|a| *a != Action::Spawn);
                    self.phase = Phase::Stopped;
                }
                // Else the spawn is under way: `handle_spawned` quits it at once.
            }
            Phase::Stopping { .. } | Phase::Killed { .. } | Phase::Stopped => {}
        }
    }

    /// The daemon is stopped and will not be started again.
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// What status and the welcome say.
    pub fn availability(&self) -> Availability {
        let (up, pid, reason) = match &self.phase {
            Phase::Up { pid, .. } => (true, Some(*pid), None),
            Phase::Starting { pid, .. } => (
                false,
                Some(*pid),
                Some(self.with_last("starting".to_string())),
            ),
            Phase::Due => (false, None, Some(self.with_last("starting".to_string()))),
            Phase::Waiting { wait, .. } => (
                false,
                None,
                self.last_failure
                    .as_ref()
                    .map(|why| format!("{why}; next try in {}", short(*wait))),
            ),
            Phase::Stopping { pid, .. } | Phase::Killed { pid } => {
                (false, Some(*pid), Some("gpud is stopping".to_string()))
            }
            Phase::Stopped => (false, None, Some("gpud is stopping".to_string())),
        };
        Availability {
            up,
            pid,
            reason,
            restarts: self.starts.saturating_sub(1),
        }
    }

    /// `what`, with the failure before it when there was one.
    fn with_last(&self, what: String) -> String {
        match &self.last_failure {
            Some(last) => format!("{what} again after: {last}"),
            None => what,
        }
    }

    fn quit(&mut self, now: Instant, pid: u32) {
        self.phase = Phase::Stopping {
            pid,
            deadline: now + self.policy.stop_timeout,
        };
        self.actions.push(Action::Quit(pid));
    }

    fn fail(&mut self, now: Instant, why: String) {
        if self.stopping {
            self.phase = Phase::Stopped;
            self.last_failure = Some(why);
            return;
        }
        self.failures += 1;
        let wait = self.backoff();
        self.last_failure = Some(why);
        self.phase = Phase::Waiting {
            until: now + wait,
            wait,
        };
    }

    /// The wait after the current run of failures: doubling, capped.
    fn backoff(&self) -> Duration {
        let doublings = self.failures.saturating_sub(1).min(16);
        self.policy
            .first_backoff
            .saturating_mul(1 << doublings)
            .min(self.policy.max_backoff)
    }
}

/// `1s`, `500ms`: a backoff in a status line.
fn short(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            settle: Duration::from_millis(500),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(8),
            stable_after: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(5),
        }
    }

    fn drain(s: &mut Supervisor) -> Vec<Action> {
        std::iter::from_fn(|| s.poll_action()).collect()
    }

    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    #[test]
    fn it_starts_at_once_and_is_up_only_after_the_settle_time() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        assert_eq!(drain(&mut s), [Action::Spawn]);
        assert!(!s.availability().up);
        s.handle_spawned(t0, 41);
        assert_eq!(s.next_timeout(), Some(t0 + secs(0.5)));
        s.handle_timeout(t0 + secs(0.2));
        assert!(!s.availability().up, "up before the settle time");
        s.handle_timeout(t0 + secs(0.5));
        let a = s.availability();
        assert!(a.up && a.pid == Some(41) && a.reason.is_none(), "{a:?}");
        assert_eq!(s.next_timeout(), None);
        assert!(drain(&mut s).is_empty());
    }

    #[test]
    fn a_daemon_that_exits_at_once_is_retried_with_a_doubling_capped_backoff() {
        let mut t = Instant::now();
        let mut s = Supervisor::new(policy());
        let mut waits = Vec::new();
        for pid in 1..=6 {
            assert_eq!(drain(&mut s), [Action::Spawn]);
            s.handle_spawned(t, pid);
            s.handle_exited(t + secs(0.1), "status 1".into());
            let a = s.availability();
            assert!(!a.up);
            let reason = a.reason.unwrap();
            assert!(reason.starts_with("exited at once: status 1"), "{reason}");
            let next = s.next_timeout().expect("a restart is planned");
            waits.push(next - (t + secs(0.1)));
            assert!(drain(&mut s).is_empty(), "no start before the backoff");
            s.handle_timeout(next);
            t = next;
        }
        assert_eq!(waits, [1.0, 2.0, 4.0, 8.0, 8.0, 8.0].map(secs));
        assert_eq!(s.availability().restarts, 5);
    }

    #[test]
    fn a_missing_program_is_reported_and_tried_again() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        assert_eq!(drain(&mut s), [Action::Spawn]);
        s.handle_spawn_failed(t0, "nvidia-cuda-mps-control not found in PATH".into());
        let a = s.availability();
        assert!(!a.up && a.pid.is_none());
        assert_eq!(
            a.reason.as_deref(),
            Some("nvidia-cuda-mps-control not found in PATH; next try in 1s")
        );
        s.handle_timeout(t0 + secs(1.0));
        assert_eq!(drain(&mut s), [Action::Spawn]);
        assert_eq!(
            s.availability().reason.as_deref(),
            Some("starting again after: nvidia-cuda-mps-control not found in PATH"),
            "the last failure stays visible while it starts again"
        );
    }

    #[test]
    fn a_daemon_that_dies_after_running_stably_restarts_after_the_first_backoff() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        let _ = drain(&mut s);
        // Two quick failures first: the backoff has grown to 4 s.
        s.handle_spawned(t0, 1);
        s.handle_exited(t0, "status 1".into());
        s.handle_timeout(t0 + secs(1.0));
        let _ = drain(&mut s);
        s.handle_spawned(t0 + secs(1.0), 2);
        s.handle_exited(t0 + secs(1.0), "status 1".into());
        s.handle_timeout(t0 + secs(3.0));
        let _ = drain(&mut s);
        // Then a daemon that runs for a minute and is killed.
        s.handle_spawned(t0 + secs(3.0), 3);
        s.handle_timeout(t0 + secs(3.5));
        assert!(s.availability().up);
        s.handle_exited(t0 + secs(63.0), "killed by SIGKILL".into());
        let a = s.availability();
        assert!(!a.up);
        assert!(
            a.reason.unwrap().starts_with("exited: killed by SIGKILL"),
            "a death after the start is not 'at once'"
        );
        assert_eq!(s.next_timeout(), Some(t0 + secs(64.0)));
        s.handle_timeout(t0 + secs(64.0));
        assert_eq!(drain(&mut s), [Action::Spawn]);
    }

    #[test]
    fn a_daemon_that_dies_soon_after_coming_up_keeps_the_grown_backoff() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        let _ = drain(&mut s);
        s.handle_spawned(t0, 1);
        s.handle_exited(t0, "status 1".into());
        s.handle_timeout(t0 + secs(1.0));
        let _ = drain(&mut s);
        s.handle_spawned(t0 + secs(1.0), 2);
        s.handle_timeout(t0 + secs(1.5));
        s.handle_exited(t0 + secs(5.0), "status 2".into());
        assert_eq!(s.next_timeout(), Some(t0 + secs(7.0)));
    }

    #[test]
    fn stop_quits_then_kills_after_the_timeout_and_then_is_finished() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        let _ = drain(&mut s);
        s.handle_spawned(t0, 7);
        s.handle_timeout(t0 + secs(1.0));
        s.handle_stop(t0 + secs(2.0));
        assert_eq!(drain(&mut s), [Action::Quit(7)]);
        assert!(!s.availability().up, "not offered while it stops");
        assert_eq!(s.next_timeout(), Some(t0 + secs(7.0)));
        s.handle_timeout(t0 + secs(6.9));
        assert!(drain(&mut s).is_empty());
        s.handle_timeout(t0 + secs(7.0));
        assert_eq!(drain(&mut s), [Action::Kill(7)]);
        assert!(!s.is_finished());
        s.handle_exited(t0 + secs(7.1), "killed by SIGKILL".into());
        assert!(s.is_finished());
        assert!(drain(&mut s).is_empty(), "no restart after a stop");
    }

    #[test]
    fn a_daemon_that_quits_in_time_is_not_killed() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        let _ = drain(&mut s);
        s.handle_spawned(t0, 7);
        s.handle_stop(t0);
        assert_eq!(drain(&mut s), [Action::Quit(7)]);
        s.handle_exited(t0 + secs(0.3), "status 0".into());
        assert!(s.is_finished());
        s.handle_timeout(t0 + secs(10.0));
        assert!(drain(&mut s).is_empty());
    }

    #[test]
    fn stop_during_a_backoff_or_before_the_start_ends_at_once() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        let _ = drain(&mut s);
        s.handle_spawn_failed(t0, "not found".into());
        s.handle_stop(t0);
        assert!(s.is_finished());
        s.handle_timeout(t0 + secs(100.0));
        assert!(drain(&mut s).is_empty());

        let mut s = Supervisor::new(policy());
        s.handle_stop(t0);
        assert!(s.is_finished(), "the start was never handed out");
        assert!(drain(&mut s).is_empty());
    }

    #[test]
    fn a_start_under_way_when_the_stop_comes_is_quit_once_it_runs() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(policy());
        assert_eq!(drain(&mut s), [Action::Spawn]);
        s.handle_stop(t0);
        assert!(!s.is_finished());
        s.handle_spawned(t0, 9);
        assert_eq!(drain(&mut s), [Action::Quit(9)]);
        s.handle_exited(t0 + secs(0.1), "status 0".into());
        assert!(s.is_finished());
    }
}
