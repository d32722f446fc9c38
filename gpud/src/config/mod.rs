//! The daemon's configuration: `/etc/gpud/gpud.toml`, every key optional.
//!
//! Errors name the key (and, for syntax and type errors, the line). systemd/gpud.toml is the
//! documented example of every key.
//!
//! A leaf: the config owns the types of its values (bus choice, metrics address, audit
//! policy, simulation spec) and imports only the ledger's policy types; the adapters and the
//! hub read it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpud_proto::{parse_duration, parse_size};
use serde::Deserialize;
use thiserror::Error;

use crate::ledger::{LedgerConfig, PerClass};

pub mod audit;
pub mod bus;
pub mod enforce;
pub mod host;
pub mod listen;
pub mod simulate;

pub use audit::{AuditConfig, Policy};
pub use bus::{BusChoice, BusChoiceError};
pub use enforce::EnforceConfig;
pub use host::{Headroom, HostConfig};
pub use listen::{ListenParseError, MetricsListen};

/// Default path of the config file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpud/gpud.toml";

/// A config that could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// TOML syntax or an unknown key or a wrong type (the message has the line).
    #[error("config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A key has a value that makes no sense.
    #[error("config {path}: key `{key}`: {message}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// Why.
        message: String,
    },
}

/// The config file's structure, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    socket_group: Option<String>,
    state_dir: Option<PathBuf>,
    readopt_grace: Option<String>,
    #[serde(default)]
    devices: RawDevices,
    #[serde(default)]
    scheduler: RawScheduler,
    #[serde(default)]
    access: RawAccess,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    dbus: RawDbus,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    enforce: RawEnforce,
    #[serde(default)]
    supervision: RawSupervision,
    #[serde(default)]
    host: RawHost,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    enabled: Option<bool>,
    memory: Option<String>,
    memory_headroom: Option<String>,
    pinned: Option<String>,
    cpu_headroom: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnforce {
    mps: Option<bool>,
    mps_control: Option<PathBuf>,
    mps_directory: Option<PathBuf>,
    mps_stop_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSupervision {
    kill_grace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    policy: Option<String>,
    tolerance: Option<String>,
    grace: Option<String>,
    kill: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDbus {
    bus: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevices {
    headroom: Option<String>,
    compute_slots: Option<u32>,
    critical_slots: Option<u32>,
    simulate: Option<String>,
    nvlink_islands: Option<Vec<Vec<u32>>>,
    numa_nodes: Option<Vec<u32>>,
    poll_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    max_overtakes: Option<u32>,
    max_scan: Option<usize>,
    revoke_after_yield: Option<String>,
    reclaim_grace: Option<String>,
    kill_ignored_yield: Option<bool>,
    memory_revoke_after_yield: Option<String>,
    stopped_grace: Option<String>,
    stopped_poll_interval: Option<String>,
    #[serde(default)]
    max_hold: RawMaxHold,
}

/// `[scheduler.max_hold]`: compute leases per class, and memory leases in its `memory` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaxHold {
    critical: Option<String>,
    high: Option<String>,
    normal: Option<String>,
    background: Option<String>,
    #[serde(default)]
    memory: RawPerClass,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPerClass {
    critical: Option<String>,
    high: Option<String>,
    normal: Option<String>,
    background: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccess {
    allowed_uids: Option<Vec<u32>>,
    allowed_groups: Option<Vec<GroupRef>>,
    admin_uids: Option<Vec<u32>>,
    admin_groups: Option<Vec<GroupRef>>,
    critical_uids: Option<Vec<u32>>,
    critical_groups: Option<Vec<GroupRef>>,
}

/// A group named by name or by number.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum GroupRef {
    /// A gid.
    Id(u32),
    /// A group name, looked up in the group database.
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_frame_bytes: Option<usize>,
    max_outstanding_requests: Option<usize>,
    max_leases_per_session: Option<usize>,
    max_sessions: Option<usize>,
    max_sessions_per_uid: Option<usize>,
    event_queue: Option<usize>,
    session_buffer: Option<String>,
    session_buffer_total: Option<String>,
    max_entries_per_uid: Option<usize>,
    requests_per_second: Option<usize>,
}

/// Who may connect and who may administer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// Uids that may connect (root always may).
    pub allowed_uids: Vec<u32>,
    /// Groups whose members may connect.
    pub allowed_groups: Vec<GroupRef>,
    /// Uids that may drain, undrain and revoke (root always may).
    pub admin_uids: Vec<u32>,
    /// Groups whose members may drain, undrain and revoke.
    pub admin_groups: Vec<GroupRef>,
    /// Uids that may ask for the `critical` class (root always may). Critical requests overtake
    /// everyone and make holders yield (and, with `revoke_after_yield`, lose their leases), so
    /// by default only the admins may.
    pub critical_uids: Vec<u32>,
    /// Groups whose members may ask for the `critical` class.
    pub critical_groups: Vec<GroupRef>,
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            allowed_uids: vec![0],
            allowed_groups: vec![GroupRef::Name("gpud".into())],
            admin_uids: vec![0],
            admin_groups: vec![GroupRef::Name("gpud-admin".into())],
            critical_uids: vec![0],
            critical_groups: vec![GroupRef::Name("gpud-admin".into())],
        }
    }
}

/// Bounds that keep one client from hurting the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame a client may send.
    pub max_frame_bytes: usize,
    /// Waiting acquires and resizes per session.
    pub max_outstanding_requests: usize,
    /// Leases one session may hold.
    pub max_leases_per_session: usize,
    /// Connected sessions in all.
    pub max_sessions: usize,
    /// Connected sessions per uid.
    pub max_sessions_per_uid: usize,
    /// Frames queued to a session that does not read; past it the session is closed.
    pub event_queue: usize,
    /// Bytes of frames queued to a session that does not read; past it the session is closed
    /// (one frame alone may be larger).
    pub session_buffer_bytes: usize,
    /// Bytes queued to all sessions together; past it, sessions that do not read are closed.
    pub session_buffer_total_bytes: usize,
    /// Leases and waiting requests of all of one uid's sessions together.
    pub max_entries_per_uid: usize,
    /// Requests per second one session may send (with a burst of as many); past it gpud reads
    /// from that session more slowly.
    pub requests_per_second: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: gpud_proto::frame::MAX_REQUEST_FRAME,
            max_outstanding_requests: 64,
            max_leases_per_session: 64,
            max_sessions: 4096,
            max_sessions_per_uid: 1024,
            event_queue: 1024,
            session_buffer_bytes: 16 << 20,
            session_buffer_total_bytes: 256 << 20,
            max_entries_per_uid: 4096,
            requests_per_second: 5000,
        }
    }
}

/// The daemon's configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where to listen, unless overridden on the command line.
    pub socket: Option<PathBuf>,
    /// Permission bits of the socket file.
    pub socket_mode: u32,
    /// Group that owns the socket file (when it exists and gpud runs as root).
    pub socket_group: Option<String>,
    /// Where the daemon keeps its lease journal.
    pub state_dir: Option<PathBuf>,
    /// After a restart, how long leases of live owners wait to be re-adopted.
    pub readopt_grace: Duration,
    /// Memory kept back on every device.
    pub headroom_bytes: u64,
    /// Compute slots per device.
    pub compute_slots: u32,
    /// Compute slots per device beyond `compute_slots` that only the critical class may take.
    pub critical_slots: u32,
    /// Simulated devices (`2x16GiB`, `16GiB,24GiB`) instead of NVML.
    pub simulate: Option<String>,
    /// The NVLink islands and NUMA nodes of simulated devices.
    pub simulated_topology: simulate::SimulatedTopology,
    /// How often NVML is read for unmanaged usage.
    pub poll_interval: Duration,
    /// How often lease holders' processes are checked for being stopped.
    pub stopped_poll_interval: Duration,
    /// Scheduling policy.
    pub scheduler: LedgerConfig,
    /// Access control.
    pub access: AccessConfig,
    /// Abuse limits.
    pub limits: Limits,
    /// Kill a compute holder's process when its lease is revoked for ignoring a yield notice.
    pub kill_ignored_yield: bool,
    /// What to do when processes use more device memory than they reserved.
    pub audit: AuditConfig,
    /// The bus for `org.gpud.Manager1`. `None`: the system bus when it can be reached.
    pub dbus: Option<BusChoice>,
    /// Where to serve metrics; off when `None`.
    pub metrics: Option<MetricsListen>,
    /// Enforcement gpud provides to programs that never ask it (the MPS control daemon).
    pub enforce: EnforceConfig,
    /// Programs attached to leases.
    pub supervision: SupervisionConfig,
    /// The host's memory, page-locked memory and CPUs (`[host]`).
    pub host: HostConfig,
}

/// How gpud ends a program attached to a lease whose session ended without releasing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisionConfig {
    /// From SIGTERM to SIGKILL of the program's process group.
    pub kill_grace: Duration,
}

impl Default for SupervisionConfig {
    fn default() -> Self {
        Self {
            kill_grace: Duration::from_secs(10),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: None,
            socket_mode: 0o660,
            socket_group: Some("gpud".into()),
            state_dir: None,
            readopt_grace: Duration::from_secs(10),
            headroom_bytes: 512 << 20,
            compute_slots: 1,
            critical_slots: 0,
            simulate: None,
            simulated_topology: simulate::SimulatedTopology::default(),
            poll_interval: Duration::from_secs(1),
            stopped_poll_interval: Duration::from_secs(1),
            scheduler: LedgerConfig::default(),
            access: AccessConfig::default(),
            limits: Limits::default(),
            audit: AuditConfig::default(),
            kill_ignored_yield: false,
            dbus: None,
            metrics: None,
            enforce: EnforceConfig::default(),
            supervision: SupervisionConfig::default(),
            host: HostConfig::default(),
        }
    }
}

impl Config {
    /// Simulated device `i`'s NUMA node and NVLink island, as `[devices]` sets them.
    pub fn simulated_topology(&self, i: usize) -> crate::ledger::Topology {
        self.simulated_topology.of(i)
    }

    /// The keys that differ between `self` and `new` and take effect only at a start (a
    /// SIGHUP applies the scheduler, slots, access, limits and audit, not these).
    pub fn start_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |changed: bool, key| {
            if changed {
                keys.push(key);
            }
        };
        check(self.socket != new.socket, "socket");
        check(self.socket_mode != new.socket_mode, "socket_mode");
        check(self.socket_group != new.socket_group, "socket_group");
        check(self.state_dir != new.state_dir, "state_dir");
        check(self.readopt_grace != new.readopt_grace, "readopt_grace");
        check(
            self.headroom_bytes != new.headroom_bytes,
            "devices.headroom",
        );
        check(self.simulate != new.simulate, "devices.simulate");
        check(
            self.simulated_topology != new.simulated_topology,
            "devices.nvlink_islands",
        );
        check(
            self.poll_interval != new.poll_interval,
            "devices.poll_interval",
        );
        check(
            self.stopped_poll_interval != new.stopped_poll_interval,
            "scheduler.stopped_poll_interval",
        );
        check(self.dbus != new.dbus, "dbus.bus");
        check(self.metrics != new.metrics, "metrics.listen");
        check(self.enforce != new.enforce, "enforce");
        check(self.host != new.host, "host");
        keys
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Reads the config at `path` if given, else the default path if it exists, else defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<Self, ConfigError> {
        match path {
            Some(p) => Self::load(p),
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => {
                Self::load(Path::new(DEFAULT_CONFIG_PATH))
            }
            None => Ok(Self::default()),
        }
    }

    /// Validates config text (`path` is only used in messages).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(String::new(), |span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {column}: ")
            });
            ConfigError::Parse {
                path: path.to_path_buf(),
                message: format!("{at}{}", e.message()),
            }
        })?;
        let value_err = |key: &str, message: String| ConfigError::Value {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        let mut c = Config {
            socket: raw.socket,
            ..Config::default()
        };
        if let Some(mode) = raw.socket_mode {
            c.socket_mode = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| {
                    value_err(
                        "socket_mode",
                        format!("{mode:?} is not an octal mode such as \"0660\""),
                    )
                })?;
        }
        if let Some(group) = raw.socket_group {
            c.socket_group = (!group.is_empty()).then_some(group);
        }
        c.state_dir = raw.state_dir;
        if let Some(g) = raw.readopt_grace {
            c.readopt_grace = parse_duration(&g).map_err(|e| value_err("readopt_grace", e))?;
        }
        if let Some(h) = raw.devices.headroom {
            c.headroom_bytes =
                parse_size(&h).map_err(|e| value_err("devices.headroom", e.to_string()))?;
        }
        if let Some(s) = raw.devices.compute_slots {
            if !(1..=64).contains(&s) {
                return Err(value_err(
                    "devices.compute_slots",
                    format!("{s} is not in 1..=64"),
                ));
            }
            c.compute_slots = s;
        }
        if let Some(s) = raw.devices.critical_slots {
            if s > 64 {
                return Err(value_err(
                    "devices.critical_slots",
                    format!("{s} is not in 0..=64"),
                ));
            }
            c.critical_slots = s;
        }
        if let Some(sim) = raw.devices.simulate {
            simulate::parse_spec(&sim).map_err(|e| value_err("devices.simulate", e.to_string()))?;
            c.simulate = Some(sim);
        }
        let (islands, numa) = (raw.devices.nvlink_islands, raw.devices.numa_nodes);
        if islands.is_some() || numa.is_some() {
            let key = if islands.is_some() {
                "devices.nvlink_islands"
            } else {
                "devices.numa_nodes"
            };
            c.simulated_topology = simulate::SimulatedTopology::new(
                islands.unwrap_or_default(),
                numa.unwrap_or_default(),
            )
            .map_err(|e| value_err(key, e))?;
        }
        if let Some(p) = raw.devices.poll_interval {
            let d = parse_duration(&p).map_err(|e| value_err("devices.poll_interval", e))?;
            if d < Duration::from_millis(50) {
                return Err(value_err(
                    "devices.poll_interval",
                    "must be at least 50ms".into(),
                ));
            }
            c.poll_interval = d;
        }
        let s = raw.scheduler;
        if let Some(m) = s.max_overtakes {
            c.scheduler.max_overtakes = m;
        }
        if let Some(m) = s.max_scan {
            if m == 0 {
                return Err(value_err("scheduler.max_scan", "must be at least 1".into()));
            }
            c.scheduler.max_scan = m;
        }
        if let Some(k) = s.kill_ignored_yield {
            c.kill_ignored_yield = k;
        }
        // A limit or grace that may be "none"; unset keeps the default.
        let limit = |key: &str, v: Option<String>, default: Option<Duration>| match v {
            None => Ok(default),
            Some(t) if t.trim() == "none" => Ok(None),
            Some(t) => parse_duration(&t)
                .map(Some)
                .map_err(|e| value_err(key, format!("{e}, or \"none\""))),
        };
        c.scheduler.revoke_after_yield = limit(
            "scheduler.revoke_after_yield",
            s.revoke_after_yield,
            c.scheduler.revoke_after_yield,
        )?;
        let live = &mut c.scheduler.liveness;
        live.memory_revoke_after_yield = limit(
            "scheduler.memory_revoke_after_yield",
            s.memory_revoke_after_yield,
            live.memory_revoke_after_yield,
        )?;
        if let Some(g) = s.stopped_grace {
            live.stopped_grace =
                parse_duration(&g).map_err(|e| value_err("scheduler.stopped_grace", e))?;
        }
        if let Some(p) = s.stopped_poll_interval {
            let d =
                parse_duration(&p).map_err(|e| value_err("scheduler.stopped_poll_interval", e))?;
            if d < Duration::from_millis(50) {
                return Err(value_err(
                    "scheduler.stopped_poll_interval",
                    "must be at least 50ms".into(),
                ));
            }
            c.stopped_poll_interval = d;
        }
        if let Some(r) = s.reclaim_grace {
            c.scheduler.reclaim_grace =
                parse_duration(&r).map_err(|e| value_err("scheduler.reclaim_grace", e))?;
        }
        let per_class = |prefix: &str,
                         raw: RawPerClass,
                         default: PerClass<Option<Duration>>|
         -> Result<PerClass<Option<Duration>>, ConfigError> {
            Ok(PerClass {
                critical: limit(
                    &format!("{prefix}.critical"),
                    raw.critical,
                    default.critical,
                )?,
                high: limit(&format!("{prefix}.high"), raw.high, default.high)?,
                normal: limit(&format!("{prefix}.normal"), raw.normal, default.normal)?,
                background: limit(
                    &format!("{prefix}.background"),
                    raw.background,
                    default.background,
                )?,
            })
        };
        let m = s.max_hold;
        let compute = RawPerClass {
            critical: m.critical,
            high: m.high,
            normal: m.normal,
            background: m.background,
        };
        c.scheduler.max_hold = per_class("scheduler.max_hold", compute, c.scheduler.max_hold)?;
        c.scheduler.liveness.memory_max_hold = per_class(
            "scheduler.max_hold.memory",
            m.memory,
            c.scheduler.liveness.memory_max_hold,
        )?;
        let a = raw.access;
        if let Some(v) = a.allowed_uids {
            c.access.allowed_uids = v;
        }
        if let Some(v) = a.allowed_groups {
            c.access.allowed_groups = v;
        }
        if let Some(v) = a.admin_uids {
            c.access.admin_uids = v;
        }
        if let Some(v) = a.admin_groups {
            c.access.admin_groups = v;
        }
        if let Some(v) = a.critical_uids {
            c.access.critical_uids = v;
        }
        if let Some(v) = a.critical_groups {
            c.access.critical_groups = v;
        }
        let l = raw.limits;
        // Every limit has a ceiling: past it a value is a typo or an attack on gpud itself (a
        // queue of 2^61 frames passed validation once and then every new session panicked).
        let bounded = |key: &str, v: Option<usize>, into: &mut usize, min: usize, max: usize| {
            match v {
                Some(n) if n < min || n > max => {
                    return Err(value_err(
                        key,
                        format!("must be from {min} to {max}, not {n}"),
                    ));
                }
                Some(n) => *into = n,
                None => {}
            }
            Ok(())
        };
        bounded(
            "limits.max_frame_bytes",
            l.max_frame_bytes,
            &mut c.limits.max_frame_bytes,
            1024,
            16 << 20,
        )?;
        bounded(
            "limits.max_outstanding_requests",
            l.max_outstanding_requests,
            &mut c.limits.max_outstanding_requests,
            1,
            1 << 16,
        )?;
        bounded(
            "limits.max_leases_per_session",
            l.max_leases_per_session,
            &mut c.limits.max_leases_per_session,
            1,
            1 << 16,
        )?;
        bounded(
            "limits.max_sessions",
            l.max_sessions,
            &mut c.limits.max_sessions,
            1,
            1 << 20,
        )?;
        bounded(
            "limits.max_sessions_per_uid",
            l.max_sessions_per_uid,
            &mut c.limits.max_sessions_per_uid,
            1,
            1 << 20,
        )?;
        bounded(
            "limits.event_queue",
            l.event_queue,
            &mut c.limits.event_queue,
            1,
            1 << 16,
        )?;
        let size = |key: &str, text: &Option<String>| -> Result<Option<usize>, ConfigError> {
            text.as_deref()
                .map(|t| {
                    parse_size(t)
                        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                        .map_err(|e| value_err(key, e.to_string()))
                })
                .transpose()
        };
        bounded(
            "limits.session_buffer",
            size("limits.session_buffer", &l.session_buffer)?,
            &mut c.limits.session_buffer_bytes,
            64 << 10,
            1 << 30,
        )?;
        bounded(
            "limits.session_buffer_total",
            size("limits.session_buffer_total", &l.session_buffer_total)?,
            &mut c.limits.session_buffer_total_bytes,
            1 << 20,
            64 << 30,
        )?;
        bounded(
            "limits.max_entries_per_uid",
            l.max_entries_per_uid,
            &mut c.limits.max_entries_per_uid,
            1,
            1 << 24,
        )?;
        bounded(
            "limits.requests_per_second",
            l.requests_per_second,
            &mut c.limits.requests_per_second,
            1,
            // A rate this high is "no limit" (the lease benchmark uses 10^7); the bucket's
            // floating-point arithmetic is safe far beyond it.
            1_000_000_000,
        )?;
        let a = raw.audit;
        if let Some(p) = a.policy {
            c.audit.policy = match p.as_str() {
                "warn" => Policy::Warn,
                "revoke" => Policy::Revoke,
                other => {
                    return Err(value_err(
                        "audit.policy",
                        format!("{other:?} is not \"warn\" or \"revoke\""),
                    ));
                }
            };
        }
        if let Some(t) = a.tolerance {
            c.audit.tolerance_bytes =
                parse_size(&t).map_err(|e| value_err("audit.tolerance", e.to_string()))?;
        }
        if let Some(g) = a.grace {
            c.audit.grace = parse_duration(&g).map_err(|e| value_err("audit.grace", e))?;
        }
        if let Some(k) = a.kill {
            c.audit.kill = k;
        }
        if let Some(bus) = raw.dbus.bus {
            c.dbus = Some(
                bus.parse()
                    .map_err(|e: BusChoiceError| value_err("dbus.bus", e.to_string()))?,
            );
        }
        let e = raw.enforce;
        if let Some(on) = e.mps {
            c.enforce.mps = on;
        }
        let absolute = |key: &str, p: Option<PathBuf>| match p {
            Some(p) if !p.is_absolute() => Err(value_err(
                key,
                format!("{} is not an absolute path", p.display()),
            )),
            p => Ok(p),
        };
        c.enforce.mps_control = absolute("enforce.mps_control", e.mps_control)?;
        c.enforce.mps_directory = absolute("enforce.mps_directory", e.mps_directory)?;
        if let Some(t) = e.mps_stop_timeout {
            c.enforce.mps_stop_timeout = parse_duration(&t)
                .ok()
                .filter(|d| (Duration::from_millis(100)..=Duration::from_secs(60)).contains(d))
                .ok_or_else(|| {
                    value_err(
                        "enforce.mps_stop_timeout",
                        format!("{t:?} is not a duration from 100ms to 60s"),
                    )
                })?;
        }
        if let Some(g) = raw.supervision.kill_grace {
            c.supervision.kill_grace =
                parse_duration(&g).map_err(|e| value_err("supervision.kill_grace", e))?;
        }
        let h = raw.host;
        if let Some(on) = h.enabled {
            c.host.enabled = on;
        }
        if let Some(m) = h.memory {
            c.host.memory_bytes =
                Some(parse_size(&m).ok().filter(|&b| b > 0).ok_or_else(|| {
                    value_err(
                        "host.memory",
                        format!("{m:?} is not a size above 0 such as \"64GiB\""),
                    )
                })?);
        }
        if let Some(m) = h.memory_headroom {
            c.host.memory_headroom =
                host::parse_headroom(&m).map_err(|e| value_err("host.memory_headroom", e))?;
        }
        if let Some(p) = h.pinned {
            c.host.pinned_bytes =
                Some(parse_size(&p).map_err(|e| value_err("host.pinned", e.to_string()))?);
        }
        if let Some(n) = h.cpu_headroom {
            if n > 4096 {
                return Err(value_err(
                    "host.cpu_headroom",
                    format!("{n} is not in 0..=4096"),
                ));
            }
            c.host.cpu_headroom = n;
        }
        if let Some(listen) = raw.metrics.listen {
            c.metrics = Some(
                listen
                    .parse()
                    .map_err(|e: ListenParseError| value_err("metrics.listen", e.to_string()))?,
            );
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    #[test]
    fn the_documented_example_parses_to_the_defaults() {
        let text = include_str!("../../../systemd/gpud.toml");
        let c = parse(text).unwrap();
        let expected = Config {
            socket: Some("/run/gpud/gpud.sock".into()),
            ..Config::default()
        };
        assert_eq!(c, expected);
    }

    #[test]
    fn start_only_keys_that_changed_are_named_and_reloadable_ones_are_not() {
        let old = parse("[devices]\nheadroom = \"1GiB\"\ncompute_slots = 1\n").unwrap();
        let new = parse(
            "socket = \"/tmp/other.sock\"\n[devices]\nheadroom = \"2GiB\"\ncompute_slots = 2\n\
             [metrics]\nlisten = \"127.0.0.1:9464\"\n",
        )
        .unwrap();
        assert_eq!(
            old.start_only_changes(&new),
            ["socket", "devices.headroom", "metrics.listen"]
        );
        assert!(old.start_only_changes(&old.clone()).is_empty());
    }

    #[test]
    fn empty_config_gives_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.headroom_bytes, 512 << 20);
    }

    #[test]
    fn every_section_is_read() {
        let c = parse(
            r#"
socket = "/tmp/x.sock"
[devices]
headroom = "1GiB"
compute_slots = 2
critical_slots = 1
simulate = "2x16GiB"
nvlink_islands = [[0], [1]]
numa_nodes = [0, 1]
poll_interval = "250ms"
[scheduler]
max_overtakes = 7
revoke_after_yield = "30s"
reclaim_grace = "3s"
[scheduler.max_hold]
normal = "5m"
[access]
allowed_uids = [1000]
allowed_groups = ["provers", 1234]
[limits]
max_sessions = 10
"#,
        )
        .unwrap();
        assert_eq!(c.headroom_bytes, 1 << 30);
        assert_eq!(c.compute_slots, 2);
        assert_eq!(c.critical_slots, 1);
        assert_eq!(c.simulated_topology(1).nvlink_island, Some(1));
        assert_eq!(c.simulated_topology(1).numa_node, Some(1));
        assert_eq!(c.scheduler.max_overtakes, 7);
        assert_eq!(c.scheduler.max_hold.normal, Some(Duration::from_secs(300)));
        assert_eq!(
            c.scheduler.revoke_after_yield,
            Some(Duration::from_secs(30))
        );
        assert_eq!(c.scheduler.reclaim_grace, Duration::from_secs(3));
        assert_eq!(
            c.access.allowed_groups,
            vec![GroupRef::Name("provers".into()), GroupRef::Id(1234)]
        );
        assert_eq!(c.limits.max_sessions, 10);
        assert_eq!(c.poll_interval, Duration::from_millis(250));
    }

    #[test]
    fn the_supervision_kill_grace_defaults_to_ten_seconds_and_is_checked() {
        assert_eq!(
            parse("").unwrap().supervision.kill_grace,
            Duration::from_secs(10)
        );
        let c = parse("[supervision]\nkill_grace = \"1500ms\"\n").unwrap();
        assert_eq!(c.supervision.kill_grace, Duration::from_millis(1500));
        let e = parse("[supervision]\nkill_grace = \"soon\"\n").unwrap_err();
        assert!(e.to_string().contains("supervision.kill_grace"), "{e}");
    }

    #[test]
    fn every_lease_kind_has_a_maximum_hold_by_default_and_none_turns_one_off() {
        let c = parse("").unwrap().scheduler;
        for class in crate::ledger::Class::ALL {
            assert!(c.max_hold.get(class).is_some(), "compute {class:?}");
            assert!(
                c.liveness.memory_max_hold.get(class).is_some(),
                "memory {class:?}"
            );
        }
        assert!(c.revoke_after_yield.is_some() && c.liveness.memory_revoke_after_yield.is_some());
        let c = parse(
            r#"
[scheduler]
revoke_after_yield = "none"
memory_revoke_after_yield = "2m"
stopped_grace = "1500ms"
stopped_poll_interval = "200ms"
[scheduler.max_hold]
normal = "none"
high = "5m"
[scheduler.max_hold.memory]
background = "none"
critical = "90s"
"#,
        )
        .unwrap();
        let s = &c.scheduler;
        assert_eq!(s.revoke_after_yield, None);
        assert_eq!(s.max_hold.normal, None);
        assert_eq!(s.max_hold.high, Some(Duration::from_secs(300)));
        assert_eq!(
            s.max_hold.critical,
            LedgerConfig::default().max_hold.critical
        );
        assert_eq!(s.liveness.memory_max_hold.background, None);
        assert_eq!(
            s.liveness.memory_max_hold.critical,
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            s.liveness.memory_revoke_after_yield,
            Some(Duration::from_secs(120))
        );
        assert_eq!(s.liveness.stopped_grace, Duration::from_millis(1500));
        assert_eq!(c.stopped_poll_interval, Duration::from_millis(200));
        for (text, key) in [
            (
                "[scheduler.max_hold.memory]\nnormal = \"never\"\n",
                "scheduler.max_hold.memory.normal",
            ),
            (
                "[scheduler]\nstopped_grace = \"none\"\n",
                "scheduler.stopped_grace",
            ),
            (
                "[scheduler]\nstopped_poll_interval = \"1ms\"\n",
                "scheduler.stopped_poll_interval",
            ),
            (
                "[scheduler]\nmemory_revoke_after_yield = \"soon\"\n",
                "scheduler.memory_revoke_after_yield",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    /// Regression: `limits.event_queue = 2^61` passed validation, start and SIGHUP, and then
    /// every new session panicked inside tokio.
    #[test]
    fn every_limit_has_a_ceiling() {
        for key in [
            "max_frame_bytes",
            "max_outstanding_requests",
            "max_leases_per_session",
            "max_sessions",
            "max_sessions_per_uid",
            "event_queue",
            "max_entries_per_uid",
            "requests_per_second",
        ] {
            let e = parse(&format!("[limits]\n{key} = {}\n", 1u64 << 61))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("limits.{key}")) && e.contains("must be from"),
                "{e}"
            );
            let e = parse(&format!("[limits]\n{key} = 0\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("limits.{key}")), "{e}");
        }
        let c = parse("[limits]\nevent_queue = 65536\nmax_frame_bytes = 1024\n").unwrap();
        assert_eq!(c.limits.event_queue, 65536);
        for bad in ["\"2GiB\"", "\"1KiB\"", "\"lots\""] {
            let e = parse(&format!("[limits]\nsession_buffer = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("limits.session_buffer"), "{e}");
        }
        let c = parse("[limits]\nsession_buffer = \"1MiB\"\n").unwrap();
        assert_eq!(c.limits.session_buffer_bytes, 1 << 20);
        for bad in ["\"65GiB\"", "\"1KiB\"", "\"-1\""] {
            let e = parse(&format!("[limits]\nsession_buffer_total = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("limits.session_buffer_total"), "{e}");
        }
    }

    #[test]
    fn enforce_is_off_by_default_and_its_keys_are_read_and_checked() {
        let c = parse("").unwrap();
        assert!(!c.enforce.mps);
        let c = parse(
            "[enforce]\nmps = true\nmps_control = \"/opt/nv/nvidia-cuda-mps-control\"\n\
             mps_directory = \"/run/x/mps\"\nmps_stop_timeout = \"2s\"\n",
        )
        .unwrap();
        assert!(c.enforce.mps);
        assert_eq!(
            c.enforce.mps_control,
            Some(PathBuf::from("/opt/nv/nvidia-cuda-mps-control"))
        );
        assert_eq!(c.enforce.mps_directory, Some(PathBuf::from("/run/x/mps")));
        assert_eq!(c.enforce.mps_stop_timeout, Duration::from_secs(2));
        for (text, key) in [
            (
                "[enforce]\nmps_control = \"bin/mps\"\n",
                "enforce.mps_control",
            ),
            (
                "[enforce]\nmps_directory = \"mps\"\n",
                "enforce.mps_directory",
            ),
            (
                "[enforce]\nmps_stop_timeout = \"5m\"\n",
                "enforce.mps_stop_timeout",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        let e = parse("[enforce]\nmps = \"yes\"\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let on = parse("[enforce]\nmps = true\n").unwrap();
        assert_eq!(c.start_only_changes(&on), ["enforce"]);
    }

    #[test]
    fn dbus_and_metrics_are_read_and_checked() {
        let c =
            parse("[dbus]\nbus = \"session\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n").unwrap();
        assert_eq!(c.dbus, Some(BusChoice::Session));
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        let c = parse("[dbus]\nbus = \"unix:path=/tmp/bus\"\n").unwrap();
        assert_eq!(
            c.dbus,
            Some(BusChoice::Address("unix:path=/tmp/bus".into()))
        );
        let e = parse("[dbus]\nbus = \"sytem\"\n").unwrap_err().to_string();
        assert!(e.contains("dbus.bus"), "{e}");
        let e = parse("[metrics]\nlisten = \"0.0.0.0:9464\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("metrics.listen") && e.contains("loopback"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = parse("[devices]\nheadroom = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices.headroom"), "{e}");
        let e = parse("[devices]\n\nheadroomm = \"1GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("headroomm") && e.contains("line 3"), "{e}");
        let e = parse("[devices]\ncritical_slots = 65\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices.critical_slots"), "{e}");
        let e = parse("[devices]\ncompute_slots = \"two\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse("[devices]\ncompute_slots = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices.compute_slots"), "{e}");
        let e = parse("[scheduler.max_hold]\nnormal = \"5 fortnights\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scheduler.max_hold.normal"), "{e}");
        let e = parse("[devices]\nsimulate = \"2x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices.simulate"), "{e}");
    }

    #[test]
    fn the_host_section_is_read_and_each_bad_value_names_its_key() {
        let c = parse("").unwrap();
        assert_eq!(c.host, HostConfig::default());
        assert!(c.host.enabled);
        let c = parse(
            "[host]\nenabled = false\nmemory = \"8GiB\"\nmemory_headroom = \"10%\"\npinned = \"2GiB\"\ncpu_headroom = 1\n",
        )
        .unwrap();
        assert_eq!(
            c.host,
            HostConfig {
                enabled: false,
                memory_bytes: Some(8 << 30),
                memory_headroom: Headroom::Percent(10),
                pinned_bytes: Some(2 << 30),
                cpu_headroom: 1,
            }
        );
        for (text, key) in [
            ("memory = \"lots\"", "host.memory"),
            ("memory = \"0\"", "host.memory"),
            ("memory_headroom = \"200%\"", "host.memory_headroom"),
            ("pinned = \"-1\"", "host.pinned"),
            ("cpu_headroom = 5000", "host.cpu_headroom"),
        ] {
            let e = parse(&format!("[host]\n{text}\n")).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let e = parse("[host]\ncpus = 2\n").unwrap_err().to_string();
        assert!(e.contains("cpus"), "{e}");
        assert_eq!(
            Config::default().start_only_changes(&parse("[host]\ncpu_headroom = 1\n").unwrap()),
            vec!["host"]
        );
    }
}
