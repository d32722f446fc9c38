//! Human-readable tables for status and leases.

use std::fmt::Write;

use gpud_client::proto::{
    Bytes, HostArgs, HostGrant, HostStatus, LeaseStatus, QueueCounts, Resource, StatusReport,
};

/// `1h02m`, `3m12s`, `4.2s`, `85ms`.
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let mut widths = vec![0; rows.iter().map(Vec::len).max().unwrap_or(0)];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// `n` and the noun, plural unless `n` is 1 ("1 lease", "3 leases").
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The device table, with a header line about the daemon.
pub fn status(s: &StatusReport) -> String {
    let d = &s.daemon;
    let mut out = format!(
        "gpud {} (pid {}, {} devices, up {}, {}, {}, {} waiting)\n",
        d.version,
        d.pid,
        d.backend,
        duration_ms(d.uptime_ms),
        count(d.sessions as usize, "session"),
        count(s.leases.len(), "lease"),
        s.waiters.len()
    );
    if d.journal_skipped > 0 || d.journal_refused > 0 {
        let _ = writeln!(
            out,
            "journal at start: {} entries skipped, {} leases refused (did not fit; see the log)",
            d.journal_skipped, d.journal_refused
        );
    }
    // MPS only where it is turned on: other hosts' screens stay as they were.
    if let Some(mps) = s.enforcement.as_ref().map(|e| &e.mps).filter(|m| m.enabled) {
        let _ = writeln!(out, "{}", mps_line(mps));
    }
    let mut rows = vec![
        [
            "DEV",
            "NAME",
            "UUID",
            "TOTAL",
            "CAPACITY",
            "RESERVED",
            "FREE",
            "SLOTS",
            "COMPUTE",
            "QUEUE c/h/n/b",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for dev in &s.devices {
        let compute = match &dev.compute_holder {
            None => "idle".to_string(),
            Some(h) => format!(
                "lease {} pid {} {} {} {}{}",
                h.lease,
                h.pid,
                h.process,
                h.class,
                duration_ms(h.held_ms),
                if dev.compute_holders.len() > 1 {
                    format!(" (+{})", dev.compute_holders.len() - 1)
                } else {
                    String::new()
                }
            ),
        };
        let q = dev.queued;
        rows.push(vec![
            format!(
                "{}{}",
                dev.index,
                if dev.drained { " (drained)" } else { "" }
            ),
            dev.name.clone(),
            dev.uuid.clone(),
            Bytes(dev.total_bytes).to_string(),
            Bytes(dev.capacity_bytes).to_string(),
            // Warm state (evictable leases) is part of what is reserved.
            if dev.evictable_bytes > 0 {
                format!(
                    "{} ({} warm)",
                    Bytes(dev.reserved_bytes),
                    Bytes(dev.evictable_bytes)
                )
            } else {
                Bytes(dev.reserved_bytes).to_string()
            },
            Bytes(dev.free_bytes).to_string(),
            // Ordinary slots, and the critical class's own after a `+`.
            if dev.critical_slots > 0 {
                format!("{}+{}c", dev.compute_slots, dev.critical_slots)
            } else {
                dev.compute_slots.to_string()
            },
            compute,
            format!("{}/{}/{}/{}", q.critical, q.high, q.normal, q.background),
        ]);
    }
    // Where the devices sit, for `--placement near`, when gpud knows it.
    if s.devices
        .iter()
        .any(|d| d.numa_node.is_some() || d.nvlink_island.is_some())
    {
        rows[0].push("TOPOLOGY".into());
        for (row, dev) in rows[1..].iter_mut().zip(&s.devices) {
            let mut at = Vec::new();
            if let Some(i) = dev.nvlink_island {
                at.push(format!("nvlink island {i}"));
            }
            if let Some(n) = dev.numa_node {
                at.push(format!("numa {n}"));
            }
            row.push(if at.is_empty() {
                "-".into()
            } else {
                at.join(", ")
            });
        }
    }
    out.push_str(&table(&rows));
    let procs: Vec<_> = s
        .devices
        .iter()
        .flat_map(|d| d.processes.iter().map(move |p| (d.index, p)))
        .collect();
    if !procs.is_empty() {
        let mut rows = vec![
            ["DEV", "PID", "PROCESS", "USED", "LEASE HOLDER", ""]
                .map(String::from)
                .to_vec(),
        ];
        for (dev, p) in procs {
            rows.push(vec![
                dev.to_string(),
                p.pid.to_string(),
                p.process.clone(),
                Bytes(p.used_bytes).to_string(),
                p.owner_pid
                    .map_or_else(|| "none (unmanaged)".into(), |o| format!("pid {o}")),
                if p.over_use {
                    "OVER ITS RESERVATION".into()
                } else {
                    String::new()
                },
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if let Some(host) = &s.host {
        out.push('\n');
        out.push_str(&host_section(host));
    }
    if !s.budgets.is_empty() {
        out.push_str("\nbudgets (jobs' shares, leased from by their processes):\n");
        for b in &s.budgets {
            out.push_str(&format!("  {}\n", crate::budget::describe(b)));
        }
    }
    out
}

/// Queued requests by class, `c/h/n/b`.
fn queue(q: &QueueCounts) -> String {
    format!("{}/{}/{}/{}", q.critical, q.high, q.normal, q.background)
}

/// The kernel's list format of CPU numbers: ascending runs as ranges (`0-3,8,10-11`); `-`
/// for none.
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        runs.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if runs.is_empty() {
        "-".into()
    } else {
        runs.join(",")
    }
}

/// The host's pools (memory, page-locked memory) and each NUMA node's CPUs.
pub fn host_section(h: &HostStatus) -> String {
    let mut rows = vec![
        [
            "HOST",
            "TOTAL",
            "HEADROOM",
            "UNMANAGED",
            "CAPACITY",
            "RESERVED",
            "FREE",
            "QUEUE c/h/n/b",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (name, pool) in [("memory", &h.memory), ("pinned", &h.pinned)] {
        rows.push(vec![
            name.into(),
            Bytes(pool.total_bytes).to_string(),
            Bytes(pool.headroom_bytes).to_string(),
            Bytes(pool.unmanaged_bytes).to_string(),
            Bytes(pool.capacity_bytes).to_string(),
            Bytes(pool.reserved_bytes).to_string(),
            Bytes(pool.capacity_bytes.saturating_sub(pool.reserved_bytes)).to_string(),
            queue(&pool.queued),
        ]);
    }
    let mut out = table(&rows);
    if !h.numa.is_empty() {
        let mut rows = vec![
            ["NUMA", "CPUS", "GRANTED", "FREE", "QUEUE c/h/n/b"]
                .map(String::from)
                .to_vec(),
        ];
        for n in &h.numa {
            let free: Vec<u32> = n
                .cpus
                .iter()
                .copied()
                .filter(|c| !n.granted.contains(c))
                .collect();
            rows.push(vec![
                n.node.to_string(),
                format!("{} ({})", cpu_list(&n.cpus), n.cpus.len()),
                format!("{}/{}", n.granted.len(), n.cpus.len()),
                cpu_list(&free),
                queue(&n.queued),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if !h.holders.is_empty() {
        let mut rows = vec![
            [
                "PID", "PROCESS", "RESIDENT", "HOST MEM", "LOCKED", "PINNED", "",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for u in &h.holders {
            let over: Vec<&str> = [
                (u.over_use, "OVER ITS HOST MEMORY"),
                (u.pinned_over_use, "OVER ITS PINNED MEMORY"),
            ]
            .into_iter()
            .filter_map(|(over, what)| over.then_some(what))
            .collect();
            rows.push(vec![
                u.pid.to_string(),
                u.process.clone(),
                Bytes(u.rss_bytes).to_string(),
                Bytes(u.mem_bytes).to_string(),
                Bytes(u.locked_bytes).to_string(),
                Bytes(u.pinned_bytes).to_string(),
                over.join(", "),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    out
}

/// What a lease holds of the host: `4.0 GiB host memory, 1.0 GiB pinned, CPUs 4-5 (numa 0)`.
pub fn host_grant(h: &HostGrant) -> String {
    let mut each = Vec::new();
    if h.mem_bytes > 0 {
        each.push(format!("{} host memory", Bytes(h.mem_bytes)));
    }
    if h.pinned_bytes > 0 {
        each.push(format!("{} pinned", Bytes(h.pinned_bytes)));
    }
    if !h.cpus.is_empty() {
        let node = h
            .numa_node
            .map(|n| format!(" (numa {n})"))
            .unwrap_or_default();
        each.push(format!("CPUs {}{node}", cpu_list(&h.cpus)));
    }
    if each.is_empty() {
        "nothing of the host".into()
    } else {
        each.join(", ")
    }
}

/// What a request asks of the host: `4.0 GiB mem, 1.0 GiB pinned, 2 CPUs (numa near)`.
fn host_ask(h: &HostArgs) -> String {
    let mut each = Vec::new();
    if h.mem_bytes > 0 {
        each.push(format!("{} mem", Bytes(h.mem_bytes)));
    }
    if h.pinned_bytes > 0 {
        each.push(format!("{} pinned", Bytes(h.pinned_bytes)));
    }
    if h.cpus > 0 {
        each.push(format!(
            "{} (numa {})",
            count(h.cpus as usize, "CPU"),
            h.numa
        ));
    }
    if each.is_empty() {
        "-".into()
    } else {
        each.join(", ")
    }
}

/// The amount a lease row reserves of its host part: memory, page-locked memory or CPUs.
fn host_part(l: &LeaseStatus) -> String {
    let h = l.host.clone().unwrap_or_default();
    match l.resource {
        Resource::Device => "-".into(),
        Resource::HostMemory => format!("{} mem", Bytes(h.mem_bytes)),
        Resource::Pinned => format!("{} pinned", Bytes(h.pinned_bytes)),
        Resource::Cpus => format!("CPUs {}", cpu_list(&h.cpus)),
    }
}

/// The lease and waiter tables.
/// The program attached to a lease and what enforces it (`4242 (supervised)`), or `-`.
fn program(l: &gpud_client::proto::LeaseStatus) -> String {
    match (l.program_pid, l.enforced_by) {
        (Some(pid), Some(by)) => format!("{pid} ({by})"),
        (Some(pid), None) => pid.to_string(),
        _ => "-".into(),
    }
}

pub fn leases(s: &StatusReport) -> String {
    let mut out = String::new();
    if s.leases.is_empty() {
        out.push_str("no leases\n");
    } else {
        let mut rows = vec![
            [
                "LEASE", "DEV", "VRAM", "COMPUTE", "CLASS", "PID", "PROCESS", "PROGRAM", "HELD",
                "LABEL",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for l in &s.leases {
            rows.push(vec![
                // The parts of a lease of several devices name their group (its first lease).
                match l.group {
                    Some(g) => format!("{} (group {g})", l.id),
                    None => l.id.to_string(),
                },
                l.device_index.to_string(),
                match (l.evictable, l.reclaim_requested) {
                    (true, true) => format!("{} (warm, reclaim asked)", Bytes(l.vram_bytes)),
                    (true, false) => format!("{} (warm)", Bytes(l.vram_bytes)),
                    _ => Bytes(l.vram_bytes).to_string(),
                },
                match (l.compute, l.yield_requested) {
                    (true, true) => "yes (yield asked)".into(),
                    (true, false) => "yes".into(),
                    _ => "-".into(),
                },
                l.class.to_string(),
                l.pid.to_string(),
                match l.holder_stopped_ms {
                    Some(ms) => format!("{} (stopped {})", l.process, duration_ms(ms)),
                    None => l.process.clone(),
                },
                program(l),
                duration_ms(l.held_ms),
                match (l.within, &l.label) {
                    (Some(b), Some(label)) => format!("{label} (budget {b})"),
                    (Some(b), None) => format!("budget {b}"),
                    (None, label) => label.clone().unwrap_or_default(),
                },
            ]);
        }
        // Host parts (memory, page-locked memory, a node's CPUs) only where a lease has one:
        // other hosts' screens stay as they were.
        if s.leases.iter().any(|l| !l.resource.is_device()) {
            rows[0].insert(3, "HOST".into());
            for (row, l) in rows[1..].iter_mut().zip(&s.leases) {
                row.insert(3, host_part(l));
                if !l.resource.is_device() {
                    // The device column names the pool (`host`, `numa0`); no VRAM there.
                    row[1] = l.device.clone();
                    row[2] = "-".into();
                }
            }
        }
        out.push_str(&table(&rows));
    }
    if !s.waiters.is_empty() {
        let mut rows = vec![
            [
                "WAITING", "DEVICE", "VRAM", "COMPUTE", "CLASS", "PID", "WAITED", "LABEL",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for w in &s.waiters {
            rows.push(vec![
                match w.grows_lease {
                    Some(l) => format!("grow of lease {l}"),
                    None => format!("session {} req {}", w.session, w.request),
                },
                if w.parts.is_empty() {
                    w.device.to_string()
                } else {
                    let each: Vec<String> = w.parts.iter().map(|p| p.device.to_string()).collect();
                    format!("{} devices: {}", w.parts.len(), each.join(","))
                },
                if w.parts.is_empty() {
                    Bytes(w.vram_bytes).to_string()
                } else {
                    let each: Vec<String> = w
                        .parts
                        .iter()
                        .map(|p| Bytes(p.vram_bytes).to_string())
                        .collect();
                    each.join("+")
                },
                if w.compute { "yes".into() } else { "-".into() },
                w.class.to_string(),
                w.pid.to_string(),
                duration_ms(w.waited_ms),
                w.label.clone().unwrap_or_default(),
            ]);
        }
        if s.waiters.iter().any(|w| w.host.is_some()) {
            rows[0].insert(4, "HOST".into());
            for (row, w) in rows[1..].iter_mut().zip(&s.waiters) {
                row.insert(4, w.host.as_ref().map_or_else(|| "-".into(), host_ask));
            }
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    out
}

/// `MPS: up (pid 4120, pipe directory /run/gpud/mps/pipe)`, or why it is not.
fn mps_line(m: &gpud_client::proto::MpsStatus) -> String {
    if m.available {
        format!(
            "MPS: up (pid {}, pipe directory {})",
            m.pid.map_or_else(|| "?".into(), |p| p.to_string()),
            m.pipe_directory.as_deref().unwrap_or("?")
        )
    } else {
        format!(
            "MPS: not available: {}",
            m.reason.as_deref().unwrap_or("not up")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpud_client::proto::{HostPoolStatus, HostUseStatus, MpsStatus, NumaStatus};

    #[test]
    fn the_mps_line_says_where_it_runs_or_why_not() {
        let up = MpsStatus {
            enabled: true,
            available: true,
            pid: Some(4120),
            pipe_directory: Some("/run/gpud/mps/pipe".into()),
            ..MpsStatus::default()
        };
        assert_eq!(
            mps_line(&up),
            "MPS: up (pid 4120, pipe directory /run/gpud/mps/pipe)"
        );
        let down = MpsStatus {
            available: false,
            reason: Some("exited at once: status 1; next try in 2s".into()),
            ..up
        };
        assert_eq!(
            mps_line(&down),
            "MPS: not available: exited at once: status 1; next try in 2s"
        );
    }

    #[test]
    fn cpu_lists_are_runs_in_the_kernels_format() {
        assert_eq!(cpu_list(&[]), "-");
        assert_eq!(cpu_list(&[3]), "3");
        assert_eq!(cpu_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(cpu_list(&[11, 0, 1, 8, 10, 1]), "0-1,8,10-11");
    }

    fn host() -> HostStatus {
        let pool = |total: u64, reserved: u64| HostPoolStatus {
            total_bytes: total << 30,
            headroom_bytes: 2 << 30,
            unmanaged_bytes: 1 << 30,
            capacity_bytes: (total - 3) << 30,
            reserved_bytes: reserved << 30,
            queued: QueueCounts {
                normal: 1,
                ..QueueCounts::default()
            },
        };
        HostStatus {
            memory: pool(64, 8),
            pinned: pool(32, 2),
            numa: vec![NumaStatus {
                node: 0,
                cpus: (0..8).collect(),
                granted: vec![2, 3],
                queued: QueueCounts::default(),
            }],
            holders: vec![HostUseStatus {
                pid: 77,
                process: "prover".into(),
                rss_bytes: 6 << 30,
                locked_bytes: 0,
                mem_bytes: 4 << 30,
                pinned_bytes: 0,
                over_use: true,
                pinned_over_use: false,
            }],
        }
    }

    #[test]
    fn the_host_section_shows_each_pool_and_each_nodes_cpus() {
        let text = host_section(&host());
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("HOST") && lines[0].contains("UNMANAGED"),
            "{text}"
        );
        let memory: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(memory[0], "memory", "{text}");
        assert!(
            lines[1].contains("64.0 GiB") && lines[1].contains("61.0 GiB"),
            "{text}"
        );
        // Free: capacity 61 − reserved 8.
        assert!(
            lines[1].contains("53.0 GiB") && lines[1].ends_with("0/0/1/0"),
            "{text}"
        );
        assert!(lines[2].starts_with("pinned"), "{text}");
        let node = lines.iter().find(|l| l.starts_with("0 ")).expect(&text);
        assert!(node.contains("0-7 (8)") && node.contains("2/8"), "{text}");
        assert!(node.contains("0-1,4-7"), "the free CPUs: {text}");
        let holder = lines.iter().find(|l| l.starts_with("77 ")).expect(&text);
        assert!(
            holder.contains("prover") && holder.contains("6.0 GiB"),
            "{text}"
        );
        assert!(holder.contains("OVER ITS HOST MEMORY"), "{text}");
    }

    /// A lease row: a plain one with `extra`'s fields over it.
    fn lease_row(extra: serde_json::Value) -> LeaseStatus {
        let mut row = serde_json::json!({
            "id": 1, "device": "GPU-a", "device_index": 0, "vram_bytes": 0, "compute": false,
            "class": "normal", "pid": 10, "uid": 0, "process": "p", "session": 1,
            "held_ms": 5, "yield_requested": false, "label": null,
        });
        if let (Some(row), Some(extra)) = (row.as_object_mut(), extra.as_object()) {
            row.extend(extra.clone());
        }
        serde_json::from_value(row).unwrap()
    }

    fn report(leases: Vec<LeaseStatus>) -> StatusReport {
        let mut s: StatusReport = serde_json::from_value(serde_json::json!({
            "daemon": {"version": "0", "pid": 1, "uptime_ms": 0, "sessions": 1, "backend": "simulated"},
            "devices": [], "leases": [], "waiters": [],
        }))
        .unwrap();
        s.leases = leases;
        s
    }

    #[test]
    fn host_parts_show_their_pool_and_amount() {
        let status = report(vec![
            lease_row(
                serde_json::json!({"id": 2, "device": "host", "resource": "host_memory",
                "group": 1, "host": {"mem_bytes": 4u64 << 30}}),
            ),
            lease_row(
                serde_json::json!({"id": 3, "device": "numa1", "resource": "cpus",
                "group": 1, "host": {"cpus": [4, 5], "numa_node": 1}}),
            ),
        ]);
        let text = leases(&status);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("HOST"), "{text}");
        assert!(
            lines[1].contains("host") && lines[1].contains("4.0 GiB mem"),
            "{text}"
        );
        assert!(
            lines[2].contains("numa1") && lines[2].contains("CPUs 4-5"),
            "{text}"
        );
        assert_eq!(
            host_grant(&HostGrant {
                mem_bytes: 4 << 30,
                pinned_bytes: 1 << 30,
                cpus: vec![4, 5],
                numa_node: Some(0),
                parts: Vec::new(),
            }),
            "4.0 GiB host memory, 1.0 GiB pinned, CPUs 4-5 (numa 0)"
        );
        // Without host parts the table keeps its columns.
        let plain = leases(&report(vec![lease_row(serde_json::json!({}))]));
        assert!(!plain.contains("HOST"), "{plain}");
        // A waiter's host ask has its column.
        let mut waiting = report(Vec::new());
        waiting.waiters = vec![
            serde_json::from_value(serde_json::json!({
                "session": 2, "request": 1, "pid": 10, "class": "normal", "device": "any",
                "vram_bytes": 0, "compute": false, "grows_lease": null, "waited_ms": 5,
                "label": null, "host": {"mem_bytes": 1u64 << 30, "cpus": 2},
            }))
            .unwrap(),
        ];
        let text = leases(&waiting);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].contains("HOST"), "{text}");
        assert!(
            lines[3].contains("1.0 GiB mem, 2 CPUs (numa any)"),
            "{text}"
        );
        // And the status screen has no host section from a daemon without one.
        assert!(!super::status(&report(Vec::new())).contains("HOST"));
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "lease"), "1 lease");
        assert_eq!(count(0, "lease"), "0 leases");
        assert_eq!(count(4, "session"), "4 sessions");
    }
}
