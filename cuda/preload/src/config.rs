//! The interposer's settings, from `GPUD_*` environment variables (read once, at the first
//! CUDA call that needs them). A value that does not parse is reported and its default used:
//! a typo must not stop a program that merely wanted a lease.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use gpud_proto::{Class, parse_duration, parse_size};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What an allocation past the lease does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Ask gpud to grow the lease and wait in its queue (up to the grow timeout).
    Grow,
    /// Fail with `CUDA_ERROR_OUT_OF_MEMORY` at once.
    Fail,
}

/// What happens when gpud cannot be reached, or the connection to it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Allocations beyond what the process held fail.
    Fail,
    /// Log once and stop enforcing: the program runs on unmanaged.
    Continue,
}

/// Every setting, with the variable that sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `GPUD_SOCKET` (default `/run/gpud/gpud.sock`).
    pub socket: PathBuf,
    /// `GPUD_VRAM`: the lease's size at the device's first use. Unset: the context's footprint
    /// rounded up to the grow step.
    pub initial_vram: Option<u64>,
    /// `GPUD_CLASS` (default `normal`).
    pub class: Class,
    /// `GPUD_LABEL` (default: the process's name).
    pub label: Option<String>,
    /// `GPUD_TIMEOUT`: the longest wait for the first grant (default: no limit).
    pub acquire_timeout: Option<Duration>,
    /// `GPUD_POLICY`: `grow` (default) or `fail`.
    pub policy: Policy,
    /// `GPUD_GROW_TIMEOUT`: the longest wait for a grow (default 10 min).
    pub grow_timeout: Duration,
    /// `GPUD_SETTLE`: how long an allocation the lease just grew for is retried while the
    /// driver still says out-of-memory (default 10 s): the memory came from a process whose
    /// lease ended with its connection, before the driver freed its device memory.
    pub settle: Duration,
    /// `GPUD_GROW_STEP`: leases grow and shrink to multiples of this (default 1 GiB).
    pub grow_step: u64,
    /// `GPUD_SHRINK_ABOVE`: a lease shrinks only once its unused part exceeds this (default
    /// 4 GiB).
    pub shrink_above: u64,
    /// `GPUD_CONTEXT_OVERHEAD`: what a CUDA context itself takes on its device, counted as used
    /// from the context's creation (default 512 MiB, about what a Hopper context takes).
    pub context_overhead: u64,
    /// `GPUD_ON_LOST`: `fail` (default) or `continue`.
    pub on_lost: OnLost,
    /// `GPUD_PRELOAD_QUIET=1`: no log lines but errors.
    pub quiet: bool,
    /// `GPUD_COMPUTE=auto`: the compute lease around kernel launches (default off).
    pub compute: bool,
    /// `GPUD_COMPUTE_IDLE`: the compute lease goes back after this long without launches
    /// (default 200 ms).
    pub compute_idle: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: gpud_proto::DEFAULT_SOCKET.into(),
            initial_vram: None,
            class: Class::Normal,
            label: None,
            acquire_timeout: None,
            policy: Policy::Grow,
            grow_timeout: Duration::from_secs(600),
            settle: Duration::from_secs(10),
            grow_step: GIB,
            shrink_above: 4 * GIB,
            context_overhead: 512 * MIB,
            on_lost: OnLost::Fail,
            quiet: false,
            compute: false,
            compute_idle: Duration::from_millis(200),
        }
    }
}

impl Config {
    /// The settings `var` gives (`std::env::var` in the library, a map in tests); the
    /// problems found are returned for the caller to log.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> (Self, Vec<String>) {
        let mut c = Config::default();
        let mut problems = Vec::new();
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let size = |name: &str, problems: &mut Vec<String>| {
            get(name).and_then(|v| match parse_size(&v) {
                Ok(n) => Some(n),
                Err(e) => {
                    problems.push(format!("{name}={v:?} ignored: {e}"));
                    None
                }
            })
        };
        let duration = |name: &str, problems: &mut Vec<String>| {
            get(name).and_then(|v| match parse_duration(&v) {
                Ok(d) => Some(d),
                Err(e) => {
                    problems.push(format!("{name}={v:?} ignored: {e}"));
                    None
                }
            })
        };
        if let Some(v) = get("GPUD_SOCKET") {
            c.socket = v.into();
        }
        c.initial_vram = size("GPUD_VRAM", &mut problems);
        if let Some(n) = size("GPUD_GROW_STEP", &mut problems) {
            if n == 0 {
                problems.push("GPUD_GROW_STEP=0 ignored: the step must be positive".into());
            } else {
                c.grow_step = n;
            }
        }
        if let Some(n) = size("GPUD_SHRINK_ABOVE", &mut problems) {
            c.shrink_above = n;
        }
        if let Some(n) = size("GPUD_CONTEXT_OVERHEAD", &mut problems) {
            c.context_overhead = n;
        }
        c.acquire_timeout = duration("GPUD_TIMEOUT", &mut problems);
        if let Some(d) = duration("GPUD_GROW_TIMEOUT", &mut problems) {
            c.grow_timeout = d;
        }
        if let Some(d) = duration("GPUD_SETTLE", &mut problems) {
            c.settle = d;
        }
        if let Some(v) = get("GPUD_CLASS") {
            match Class::from_str(&v) {
                Ok(class) => c.class = class,
                Err(e) => problems.push(format!("GPUD_CLASS ignored: {e}")),
            }
        }
        c.label = get("GPUD_LABEL");
        if let Some(v) = get("GPUD_POLICY") {
            match v.trim() {
                "grow" => c.policy = Policy::Grow,
                "fail" => c.policy = Policy::Fail,
                other => problems.push(format!(
                    "GPUD_POLICY={other:?} ignored: expected grow or fail"
                )),
            }
        }
        if let Some(v) = get("GPUD_ON_LOST") {
            match v.trim() {
                "fail" => c.on_lost = OnLost::Fail,
                "continue" => c.on_lost = OnLost::Continue,
                other => problems.push(format!(
                    "GPUD_ON_LOST={other:?} ignored: expected fail or continue"
                )),
            }
        }
        if let Some(v) = get("GPUD_COMPUTE") {
            match v.trim() {
                "auto" => c.compute = true,
                "off" | "none" => c.compute = false,
                other => problems.push(format!(
                    "GPUD_COMPUTE={other:?} ignored: expected auto or off"
                )),
            }
        }
        if let Some(d) = duration("GPUD_COMPUTE_IDLE", &mut problems) {
            c.compute_idle = d;
        }
        c.quiet = get("GPUD_PRELOAD_QUIET").is_some_and(|v| v.trim() != "0");
        (c, problems)
    }

    /// The lease's size at a device's first use: `GPUD_VRAM`, or else the context's footprint
    /// rounded up to the step (an acquire must reserve something).
    pub fn initial_lease(&self) -> u64 {
        match self.initial_vram {
            Some(n) if n > 0 => n,
            _ => crate::account::round_up(self.context_overhead.max(1), self.grow_step),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_grow_and_fail_when_lost() {
        let (c, problems) = parse(&[]);
        assert!(problems.is_empty());
        assert_eq!(c.policy, Policy::Grow);
        assert_eq!(c.on_lost, OnLost::Fail);
        assert_eq!(c.socket, PathBuf::from("/run/gpud/gpud.sock"));
        assert_eq!(
            c.initial_lease(),
            GIB,
            "512 MiB of context, rounded to 1 GiB"
        );
    }

    #[test]
    fn every_variable_is_read() {
        let (c, problems) = parse(&[
            ("GPUD_SOCKET", "/tmp/s"),
            ("GPUD_VRAM", "20GiB"),
            ("GPUD_CLASS", "high"),
            ("GPUD_LABEL", "train"),
            ("GPUD_TIMEOUT", "5s"),
            ("GPUD_POLICY", "fail"),
            ("GPUD_GROW_TIMEOUT", "2m"),
            ("GPUD_GROW_STEP", "256MiB"),
            ("GPUD_SHRINK_ABOVE", "1GiB"),
            ("GPUD_CONTEXT_OVERHEAD", "0"),
            ("GPUD_ON_LOST", "continue"),
            ("GPUD_COMPUTE", "auto"),
            ("GPUD_COMPUTE_IDLE", "50ms"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.socket, PathBuf::from("/tmp/s"));
        assert_eq!(c.initial_lease(), 20 * GIB);
        assert_eq!(c.class, Class::High);
        assert_eq!(c.label.as_deref(), Some("train"));
        assert_eq!(c.acquire_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.policy, Policy::Fail);
        assert_eq!(c.grow_timeout, Duration::from_secs(120));
        assert_eq!(c.grow_step, 256 * MIB);
        assert_eq!(c.shrink_above, GIB);
        assert_eq!(c.context_overhead, 0);
        assert_eq!(c.on_lost, OnLost::Continue);
        assert!(c.compute);
        assert_eq!(c.compute_idle, Duration::from_millis(50));
    }

    #[test]
    fn bad_values_are_reported_and_defaulted() {
        let (c, problems) = parse(&[
            ("GPUD_VRAM", "lots"),
            ("GPUD_POLICY", "maybe"),
            ("GPUD_GROW_STEP", "0"),
            ("GPUD_CLASS", "urgent"),
        ]);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert_eq!(c.policy, Policy::Grow);
        assert_eq!(c.grow_step, GIB);
        assert_eq!(c.class, Class::Normal);
        assert_eq!(c.initial_vram, None);
    }
}
