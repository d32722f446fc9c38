//! Human-readable tables for status and leases.

use std::fmt::Write;

use gpud_client::proto::{Bytes, StatusReport};

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
    if !s.budgets.is_empty() {
        out.push_str("\nbudgets (jobs' shares, leased from by their processes):\n");
        for b in &s.budgets {
            out.push_str(&format!("  {}\n", crate::budget::describe(b)));
        }
    }
    out
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
    use super::{count, mps_line};
    use gpud_client::proto::MpsStatus;

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
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "lease"), "1 lease");
        assert_eq!(count(0, "lease"), "0 leases");
        assert_eq!(count(4, "session"), "4 sessions");
    }
}
