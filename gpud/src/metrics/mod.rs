//! Metrics in the Prometheus text format (version 0.0.4).
//!
//! [`Metrics`] holds counters and histograms fed by the hub's observer; gauges (memory,
//! queues, sessions) are read from the ledger at scrape time and passed in as
//! [`DeviceSample`]s. docs/METRICS.md lists every name. The server's scrape listener and the
//! socket's `metrics` request serve the text.

pub mod histogram;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use gpud_proto::{Class, QueueCounts};

use histogram::{HOLD_BUCKETS, Histogram, WAIT_BUCKETS};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One device as the ledger shows it at scrape time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSample {
    /// gpud index.
    pub index: usize,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total_bytes: u64,
    /// Memory never handed out.
    pub headroom_bytes: u64,
    /// What leases may reserve.
    pub capacity_bytes: u64,
    /// Reserved by leases.
    pub reserved_bytes: u64,
    /// Reserved by evictable leases (warm state a reclaim gives back).
    pub evictable_bytes: u64,
    /// Used by processes that hold no lease.
    pub unmanaged_bytes: u64,
    /// Used by lease holders beyond what they reserved (the memory audit).
    pub over_use_bytes: u64,
    /// Grants stopped.
    pub drained: bool,
    /// Compute slots.
    pub compute_slots: u32,
    /// Compute slots only the critical class may take.
    pub critical_slots: u32,
    /// Leases holding a compute slot.
    pub compute_holders: usize,
    /// Leases on the device.
    pub leases: usize,
    /// Waiters this device could serve, per class.
    pub queued: QueueCounts,
}

/// Time during which a device had at least one compute holder.
#[derive(Debug, Clone, Default)]
pub struct Busy {
    since: Option<Instant>,
    total: Duration,
}

impl Busy {
    /// Records whether the device is busy as of `now`.
    pub fn update(&mut self, now: Instant, busy: bool) {
        match (self.since, busy) {
            (None, true) => self.since = Some(now),
            (Some(since), false) => {
                self.total += now.saturating_duration_since(since);
                self.since = None;
            }
            _ => {}
        }
    }

    /// Busy time up to `now`.
    pub fn total(&self, now: Instant) -> Duration {
        self.total
            + self
                .since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

/// Counters and histograms. Label values that come from the protocol (`code`, `reason`,
/// `how`) are its snake_case names.
#[derive(Debug, Clone)]
pub struct Metrics {
    grants: [u64; 4],
    releases: BTreeMap<(Class, &'static str), u64>,
    refusals: BTreeMap<(Class, String), u64>,
    yields: BTreeMap<(Class, String), u64>,
    reclaims: BTreeMap<(Class, String), u64>,
    revocations: BTreeMap<(Class, String), u64>,
    wait: [Histogram; 4],
    hold: [Histogram; 4],
    busy: Vec<Busy>,
}

impl Metrics {
    /// Empty metrics for `devices` devices.
    pub fn new(devices: usize) -> Self {
        Self {
            grants: [0; 4],
            releases: BTreeMap::new(),
            refusals: BTreeMap::new(),
            yields: BTreeMap::new(),
            reclaims: BTreeMap::new(),
            revocations: BTreeMap::new(),
            wait: std::array::from_fn(|_| Histogram::new(WAIT_BUCKETS)),
            hold: std::array::from_fn(|_| Histogram::new(HOLD_BUCKETS)),
            busy: vec![Busy::default(); devices],
        }
    }

    /// A lease was granted after waiting `waited`.
    pub fn granted(&mut self, class: Class, waited: Duration) {
        self.grants[class.rank()] += 1;
        self.wait[class.rank()].observe(waited);
    }

    /// A lease ended by its holder (`how`: `released` or `disconnected`) after `held`.
    pub fn released(&mut self, class: Class, how: &'static str, held: Duration) {
        *self.releases.entry((class, how)).or_default() += 1;
        self.hold[class.rank()].observe(held);
    }

    /// A lease was taken away (`reason`: the protocol's revoke reason) after `held`.
    pub fn revoked(&mut self, class: Class, reason: String, held: Duration) {
        *self.revocations.entry((class, reason)).or_default() += 1;
        self.hold[class.rank()].observe(held);
    }

    /// An acquire was refused or gave up (`code`: the protocol's error code).
    pub fn refused(&mut self, class: Class, code: String) {
        *self.refusals.entry((class, code)).or_default() += 1;
    }

    /// A holder was asked to yield.
    pub fn yield_requested(&mut self, class: Class, reason: String) {
        *self.yields.entry((class, reason)).or_default() += 1;
    }

    /// Records a reclaim notice to an evictable lease of `class`.
    pub fn reclaim_requested(&mut self, class: Class) {
        *self
            .reclaims
            .entry((class, "memory_needed".into()))
            .or_default() += 1;
    }

    /// Records whether device `index` has a compute holder as of `now`.
    pub fn compute_busy(&mut self, now: Instant, index: usize, busy: bool) {
        if let Some(b) = self.busy.get_mut(index) {
            b.update(now, busy);
        }
    }

    /// Grants so far in `class`.
    pub fn grants(&self, class: Class) -> u64 {
        self.grants[class.rank()]
    }

    /// The whole exposition.
    pub fn render(&self, now: Instant, devices: &[DeviceSample], sessions: usize) -> String {
        let mut out = String::with_capacity(8192);
        let o = &mut out;
        header(
            o,
            "gpud_sessions",
            "gauge",
            "Connected sessions (socket connections and D-Bus callers).",
        );
        let _ = writeln!(o, "gpud_sessions {sessions}");

        header(
            o,
            "gpud_device_info",
            "gauge",
            "Devices gpud manages (value 1), with their names.",
        );
        for d in devices {
            let _ = writeln!(
                o,
                "gpud_device_info{{{},name=\"{}\"}} 1",
                dev(d),
                escape(&d.name)
            );
        }
        let gauges: [Gauge; 12] = [
            (
                "gpud_device_memory_total_bytes",
                "Total device memory.",
                |d| d.total_bytes,
            ),
            (
                "gpud_device_memory_headroom_bytes",
                "Memory never handed out (devices.headroom).",
                |d| d.headroom_bytes,
            ),
            (
                "gpud_device_memory_capacity_bytes",
                "Memory leases may reserve: total - headroom - unmanaged.",
                |d| d.capacity_bytes,
            ),
            (
                "gpud_device_memory_reserved_bytes",
                "Memory reserved by leases.",
                |d| d.reserved_bytes,
            ),
            (
                "gpud_device_memory_evictable_bytes",
                "Memory reserved by evictable leases (warm state a reclaim gives back).",
                |d| d.evictable_bytes,
            ),
            (
                "gpud_device_memory_unmanaged_bytes",
                "Memory used by processes that hold no lease on the device (NVML).",
                |d| d.unmanaged_bytes,
            ),
            (
                "gpud_device_memory_over_use_bytes",
                "Memory lease holders use beyond their reservations (NVML audit).",
                |d| d.over_use_bytes,
            ),
            (
                "gpud_device_drained",
                "1 when the device is drained (no new grants).",
                |d| u64::from(d.drained),
            ),
            (
                "gpud_device_compute_slots",
                "Compute slots of the device.",
                |d| u64::from(d.compute_slots),
            ),
            (
                "gpud_device_critical_slots",
                "Further compute slots only the critical class may take.",
                |d| u64::from(d.critical_slots),
            ),
            (
                "gpud_device_compute_holders",
                "Leases holding a compute slot.",
                |d| d.compute_holders as u64,
            ),
            ("gpud_device_leases", "Leases granted on the device.", |d| {
                d.leases as u64
            }),
        ];
        for (name, help, value) in gauges {
            header(o, name, "gauge", help);
            for d in devices {
                let _ = writeln!(o, "{name}{{{}}} {}", dev(d), value(d));
            }
        }
        header(
            o,
            "gpud_device_compute_busy_seconds_total",
            "counter",
            "Time during which at least one lease held a compute slot of the device.",
        );
        for d in devices {
            let busy = self
                .busy
                .get(d.index)
                .map_or(Duration::ZERO, |b| b.total(now));
            let _ = writeln!(
                o,
                "gpud_device_compute_busy_seconds_total{{{}}} {}",
                dev(d),
                busy.as_secs_f64()
            );
        }
        header(
            o,
            "gpud_queue_depth",
            "gauge",
            "Waiting requests this device could serve, per class (a request for any device counts on each candidate).",
        );
        for d in devices {
            for class in Class::ALL {
                let n = by_class(&d.queued, class);
                let _ = writeln!(o, "gpud_queue_depth{{{},class=\"{class}\"}} {n}", dev(d));
            }
        }

        header(o, "gpud_lease_grants_total", "counter", "Leases granted.");
        for class in Class::ALL {
            let _ = writeln!(
                o,
                "gpud_lease_grants_total{{class=\"{class}\"}} {}",
                self.grants[class.rank()]
            );
        }
        header(
            o,
            "gpud_lease_releases_total",
            "counter",
            "Leases ended by their holder: released, or freed when the session ended.",
        );
        for class in Class::ALL {
            for how in ["released", "disconnected"] {
                let n = self.releases.get(&(class, how)).copied().unwrap_or(0);
                let _ = writeln!(
                    o,
                    "gpud_lease_releases_total{{class=\"{class}\",how=\"{how}\"}} {n}"
                );
            }
        }
        labelled(
            o,
            "gpud_lease_refusals_total",
            "Acquires refused or given up, by error code.",
            "code",
            &self.refusals,
        );
        labelled(
            o,
            "gpud_lease_yield_requests_total",
            "Yield notices sent to compute holders, by reason.",
            "reason",
            &self.yields,
        );
        labelled(
            o,
            "gpud_lease_reclaim_requests_total",
            "Reclaim notices sent to evictable leases, by reason.",
            "reason",
            &self.reclaims,
        );
        labelled(
            o,
            "gpud_lease_revocations_total",
            "Leases taken away, by reason.",
            "reason",
            &self.revocations,
        );

        header(
            o,
            "gpud_lease_wait_seconds",
            "histogram",
            "Time from an acquire to its grant.",
        );
        for class in Class::ALL {
            self.wait[class.rank()].render(
                o,
                "gpud_lease_wait_seconds",
                &format!("class=\"{class}\""),
            );
        }
        header(
            o,
            "gpud_lease_hold_seconds",
            "histogram",
            "Time from a grant to the lease's end.",
        );
        for class in Class::ALL {
            self.hold[class.rank()].render(
                o,
                "gpud_lease_hold_seconds",
                &format!("class=\"{class}\""),
            );
        }
        out
    }
}

/// Appends the leases with an attached program, by how the program's use is enforced (every
/// way is written, with 0 when none).
pub fn render_enforced(out: &mut String, counts: &[(gpud_proto::EnforcedBy, usize)]) {
    header(
        out,
        "gpud_leases_enforced",
        "gauge",
        "Granted leases with an attached program, by what enforces its use (attach).",
    );
    for (by, n) in counts {
        let _ = writeln!(out, "gpud_leases_enforced{{enforced_by=\"{by}\"}} {n}");
    }
}

/// What the host audit measured beyond host leases at the last poll (docs/HOST.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostOverUse {
    /// Resident memory of host-lease holders beyond their host memory.
    pub memory_bytes: u64,
    /// Locked memory of host-lease holders beyond their page-locked memory.
    pub pinned_bytes: u64,
}

/// Appends the host's pools (memory, page-locked memory, each NUMA node's CPUs), their queues
/// and the host audit's over-use.
pub fn render_host(out: &mut String, host: &gpud_proto::HostStatus, over_use: HostOverUse) {
    let pools = [("memory", &host.memory), ("pinned", &host.pinned)];
    type PoolGauge = (
        &'static str,
        &'static str,
        fn(&gpud_proto::HostPoolStatus) -> u64,
    );
    let gauges: [PoolGauge; 5] = [
        (
            "total_bytes",
            "What the host has (MemTotal or [host] memory; [host] pinned).",
            |p| p.total_bytes,
        ),
        (
            "headroom_bytes",
            "Never handed out ([host] memory_headroom).",
            |p| p.headroom_bytes,
        ),
        (
            "unmanaged_bytes",
            "Used by processes that hold no host lease.",
            |p| p.unmanaged_bytes,
        ),
        (
            "capacity_bytes",
            "What host leases may reserve: total - headroom - unmanaged.",
            |p| p.capacity_bytes,
        ),
        ("reserved_bytes", "Reserved by host leases.", |p| {
            p.reserved_bytes
        }),
    ];
    for (pool, p) in pools {
        let noun = if pool == "memory" {
            "Host memory"
        } else {
            "Page-locked host memory"
        };
        for (suffix, help, value) in gauges {
            let name = format!("gpud_host_{pool}_{suffix}");
            header(out, &name, "gauge", &format!("{noun}: {help}"));
            let _ = writeln!(out, "{name} {}", value(p));
        }
    }
    header(
        out,
        "gpud_host_queue_depth",
        "gauge",
        "Waiting requests for host memory or page-locked memory, per pool and class.",
    );
    for (pool, p) in pools {
        for class in Class::ALL {
            let _ = writeln!(
                out,
                "gpud_host_queue_depth{{pool=\"{pool}\",class=\"{class}\"}} {}",
                by_class(&p.queued, class)
            );
        }
    }
    type NodeGauge = (
        &'static str,
        &'static str,
        fn(&gpud_proto::NumaStatus) -> usize,
    );
    let node_gauges: [NodeGauge; 2] = [
        (
            "gpud_host_cpus",
            "CPUs of the NUMA node that gpud hands out.",
            |n| n.cpus.len(),
        ),
        (
            "gpud_host_cpus_granted",
            "CPUs of the NUMA node granted to leases.",
            |n| n.granted.len(),
        ),
    ];
    for (name, help, value) in node_gauges {
        header(out, name, "gauge", help);
        for n in &host.numa {
            let _ = writeln!(out, "{name}{{numa=\"{}\"}} {}", n.node, value(n));
        }
    }
    header(
        out,
        "gpud_host_cpu_queue_depth",
        "gauge",
        "Waiting requests for CPUs of the NUMA node, per class.",
    );
    for n in &host.numa {
        for class in Class::ALL {
            let _ = writeln!(
                out,
                "gpud_host_cpu_queue_depth{{numa=\"{}\",class=\"{class}\"}} {}",
                n.node,
                by_class(&n.queued, class)
            );
        }
    }
    header(
        out,
        "gpud_host_memory_over_use_bytes",
        "gauge",
        "Resident memory (VmRSS) host-lease holders use beyond their host memory (audit).",
    );
    let _ = writeln!(
        out,
        "gpud_host_memory_over_use_bytes {}",
        over_use.memory_bytes
    );
    header(
        out,
        "gpud_host_pinned_over_use_bytes",
        "gauge",
        "Locked memory (VmLck + VmPin) host-lease holders use beyond their page-locked memory (audit).",
    );
    let _ = writeln!(
        out,
        "gpud_host_pinned_over_use_bytes {}",
        over_use.pinned_bytes
    );
}

/// One class's count.
fn by_class(q: &QueueCounts, class: Class) -> u32 {
    match class {
        Class::Critical => q.critical,
        Class::High => q.high,
        Class::Normal => q.normal,
        Class::Background => q.background,
    }
}

/// A per-device gauge: name, help, and how to read it from a sample.
type Gauge = (&'static str, &'static str, fn(&DeviceSample) -> u64);

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn dev(d: &DeviceSample) -> String {
    format!("device=\"{}\",uuid=\"{}\"", d.index, escape(&d.uuid))
}

/// Counters keyed by class and one more label: only the pairs that occurred are written (the
/// family's HELP and TYPE always are).
fn labelled(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: &BTreeMap<(Class, String), u64>,
) {
    header(out, name, "counter", help);
    for ((class, value), n) in values {
        let _ = writeln!(
            out,
            "{name}{{class=\"{class}\",{label}=\"{}\"}} {n}",
            escape(value)
        );
    }
}

/// Escapes a label value: backslash, double quote and newline.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DeviceSample {
        DeviceSample {
            index: 0,
            uuid: "GPU-x".into(),
            name: "sim \"16\" GiB".into(),
            total_bytes: 16 << 30,
            headroom_bytes: 0,
            capacity_bytes: 16 << 30,
            reserved_bytes: 4 << 30,
            evictable_bytes: 0,
            unmanaged_bytes: 0,
            over_use_bytes: 0,
            drained: false,
            compute_slots: 1,
            critical_slots: 0,
            compute_holders: 1,
            leases: 1,
            queued: QueueCounts::default(),
        }
    }

    #[test]
    fn exposition_has_every_family_and_escapes_labels() {
        let mut m = Metrics::new(1);
        let t0 = Instant::now();
        m.compute_busy(t0, 0, true);
        m.granted(Class::High, Duration::from_millis(3));
        m.refused(Class::Normal, "never_fits".into());
        m.released(Class::High, "released", Duration::from_secs(2));
        let text = m.render(t0 + Duration::from_secs(3), &[sample()], 2);
        assert!(text.contains("gpud_sessions 2\n"), "{text}");
        assert!(text.contains("name=\"sim \\\"16\\\" GiB\""), "{text}");
        assert!(text.contains(
            "gpud_device_memory_reserved_bytes{device=\"0\",uuid=\"GPU-x\"} 4294967296\n"
        ));
        assert!(
            text.contains(
                "gpud_device_compute_busy_seconds_total{device=\"0\",uuid=\"GPU-x\"} 3\n"
            )
        );
        assert!(text.contains("gpud_lease_grants_total{class=\"high\"} 1\n"));
        assert!(
            text.contains("gpud_lease_refusals_total{class=\"normal\",code=\"never_fits\"} 1\n")
        );
        assert!(text.contains("gpud_lease_releases_total{class=\"high\",how=\"released\"} 1\n"));
        assert!(text.contains("gpud_lease_hold_seconds_count{class=\"high\"} 1\n"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split_whitespace().nth(2).unwrap();
            let counter = line.ends_with("counter");
            assert_eq!(counter, name.ends_with("_total"), "{line}");
        }
    }

    #[test]
    fn the_host_families_show_each_pool_node_and_over_use() {
        let pool = |total: u64, reserved: u64| gpud_proto::HostPoolStatus {
            total_bytes: total,
            headroom_bytes: 1,
            unmanaged_bytes: 2,
            capacity_bytes: total - 3,
            reserved_bytes: reserved,
            queued: QueueCounts {
                high: 2,
                ..QueueCounts::default()
            },
        };
        let host = gpud_proto::HostStatus {
            memory: pool(64 << 30, 8 << 30),
            pinned: pool(32 << 30, 1 << 30),
            numa: vec![
                gpud_proto::NumaStatus {
                    node: 0,
                    cpus: (0..8).collect(),
                    granted: vec![1, 2],
                    queued: QueueCounts::default(),
                },
                gpud_proto::NumaStatus {
                    node: 1,
                    cpus: (8..16).collect(),
                    granted: Vec::new(),
                    queued: QueueCounts {
                        normal: 1,
                        ..QueueCounts::default()
                    },
                },
            ],
            holders: Vec::new(),
        };
        let mut text = String::new();
        render_host(
            &mut text,
            &host,
            HostOverUse {
                memory_bytes: 5,
                pinned_bytes: 0,
            },
        );
        for line in [
            "gpud_host_memory_total_bytes 68719476736",
            "gpud_host_memory_capacity_bytes 68719476733",
            "gpud_host_memory_reserved_bytes 8589934592",
            "gpud_host_memory_unmanaged_bytes 2",
            "gpud_host_pinned_capacity_bytes 34359738365",
            "gpud_host_pinned_reserved_bytes 1073741824",
            "gpud_host_queue_depth{pool=\"memory\",class=\"high\"} 2",
            "gpud_host_cpus{numa=\"1\"} 8",
            "gpud_host_cpus_granted{numa=\"0\"} 2",
            "gpud_host_cpu_queue_depth{numa=\"1\",class=\"normal\"} 1",
            "gpud_host_memory_over_use_bytes 5",
            "gpud_host_pinned_over_use_bytes 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // Every sample's family has its HELP and TYPE.
        for name in text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
        {
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{name}");
        }
    }

    #[test]
    fn busy_time_accumulates_across_holds() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Busy::default();
        b.update(t0, true);
        b.update(t0 + s(2), true);
        b.update(t0 + s(3), false);
        b.update(t0 + s(10), true);
        assert_eq!(b.total(t0 + s(11)), s(4));
    }
}
