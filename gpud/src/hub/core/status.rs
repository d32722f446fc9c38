//! The state as `status` and the metrics report it.

use std::collections::BTreeMap;
use std::time::Instant;

use gpud_proto::{
    ComputeHolder, DaemonInfo, DeviceStatus, LeaseStatus, PartArgs, ProcessStatus, StatusCursor,
    StatusReport, WaiterStatus,
};

use super::audit::over_use_bytes;
use super::{Core, Now, Peer};
use crate::ledger::SessionId;

impl Core {
    /// The whole state: every lease and waiter on one report (for the D-Bus service, the
    /// metrics and tests; clients get it in pages).
    pub fn status(&self, now: Now) -> StatusReport {
        self.status_page(now, None, usize::MAX)
    }

    /// One status page: every device, then at most `entries` leases (after the cursor's) and
    /// waiters (after the cursor's place), and where the next page starts.
    pub fn status_page(
        &self,
        now: Now,
        from: Option<StatusCursor>,
        entries: usize,
    ) -> StatusReport {
        let since = |t: Instant| now.at.saturating_duration_since(t).as_millis() as u64;
        let peer = |session: SessionId| self.sessions.get(&session);
        let pid = |p: Option<&Peer>| p.map_or(0, |p| p.pid);
        let process = |p: Option<&Peer>| p.map_or_else(|| "?".into(), |p| p.process.clone());
        let devices = self
            .ledger
            .devices()
            .map(|d| {
                let holders: Vec<ComputeHolder> = d
                    .compute_holders()
                    .map(|l| ComputeHolder {
                        lease: l.id,
                        pid: pid(peer(l.session)),
                        process: process(peer(l.session)),
                        class: l.class.into(),
                        held_ms: since(l.granted_at),
                    })
                    .collect();
                let spec = d.spec();
                DeviceStatus {
                    index: d.index() as u32,
                    uuid: spec.uuid.clone(),
                    name: self.names.get(d.index()).cloned().unwrap_or_default(),
                    total_bytes: spec.total_bytes,
                    headroom_bytes: spec.headroom_bytes,
                    unmanaged_bytes: spec.unmanaged_bytes,
                    capacity_bytes: d.capacity(),
                    reserved_bytes: d.reserved(),
                    evictable_bytes: d.evictable_bytes(),
                    free_bytes: d.free(),
                    drained: d.drained(),
                    compute_slots: spec.compute_slots,
                    critical_slots: spec.critical_slots,
                    compute_holder: holders.first().cloned(),
                    compute_holders: holders,
                    queued: d.queued().into(),
                    processes: self.process_status(d.index()),
                    numa_node: spec.topology.numa_node,
                    nvlink_island: spec.topology.nvlink_island,
                }
            })
            .collect();
        let leases_after = match from {
            None => Some(0),
            Some(StatusCursor::Leases { after }) => Some(after),
            Some(StatusCursor::Waiters { .. }) => None,
        };
        let leases: Vec<LeaseStatus> = leases_after
            .into_iter()
            .flat_map(|after| self.ledger.leases_after(after))
            .take(entries.max(1))
            .map(|l| {
                let p = peer(l.session);
                // A part of a group shows the program attached to the group's first lease.
                let attached = self.supervision.of(l.group.unwrap_or(l.id));
                // A host part's row names its pool and says what it holds.
                let host = self.host_row(l.id);
                let (device, device_index) = match &host {
                    Some((name, ..)) => (name.clone(), 0),
                    None => (
                        self.ledger
                            .device(l.device)
                            .map(|d| d.spec().uuid.clone())
                            .unwrap_or_default(),
                        l.device as u32,
                    ),
                };
                let (resource, host) = match host {
                    Some((_, resource, amount)) => (resource, Some(amount)),
                    None => (gpud_proto::Resource::Device, None),
                };
                LeaseStatus {
                    id: l.id,
                    device,
                    device_index,
                    vram_bytes: if host.is_some() { 0 } else { l.vram_bytes },
                    compute: l.compute,
                    class: l.class.into(),
                    pid: pid(p),
                    uid: p.map_or(0, |p| p.uid),
                    process: process(p),
                    session: l.session,
                    held_ms: since(l.granted_at),
                    yield_requested: l.yield_requested.is_some(),
                    label: l.label.clone(),
                    within: l.within,
                    evictable: l.evictable,
                    reclaim_requested: l.reclaim_by.is_some(),
                    holder_stopped_ms: self.ledger.stopped_since(l.session).map(since),
                    group: l.group,
                    program_pid: attached.map(|a| a.pid),
                    enforced_by: attached.map(|a| a.enforced_by),
                    resource,
                    host,
                }
            })
            .collect();
        // Past a full page of leases, the next page goes on with the leases.
        let room = entries.max(1) - leases.len();
        let more_leases = room == 0
            && leases
                .last()
                .is_some_and(|last| self.ledger.leases_after(last.id).next().is_some());
        let place = |w: &crate::ledger::Waiter| (w.class.rank() as u32, w.seq);
        let waiters_after = match from {
            Some(StatusCursor::Waiters { rank, seq }) => Some((rank, seq)),
            _ => None,
        };
        let queue: Vec<_> = if more_leases {
            Vec::new()
        } else {
            self.ledger
                .waiters()
                .into_iter()
                .filter(|w| waiters_after.is_none_or(|after| place(w) > after))
                .collect()
        };
        let more = if more_leases {
            leases.last().map(|l| StatusCursor::Leases { after: l.id })
        } else if queue.len() > room {
            // No room left: a page full of leases, with waiters still to come.
            Some(match room.checked_sub(1).map(|last| place(queue[last])) {
                Some((rank, seq)) => StatusCursor::Waiters { rank, seq },
                None => StatusCursor::Leases {
                    after: leases.last().map_or(0, |l| l.id),
                },
            })
        } else {
            None
        };
        let waiters = queue
            .into_iter()
            .take(room)
            .map(|w| {
                let host = self.waiter_host(w);
                // Of a group with host parts, the device parts are what `parts` and the
                // device fields say: one device part is the request's own fields.
                let gpu_parts: Vec<PartArgs> = w
                    .parts
                    .iter()
                    .filter(|p| p.kind.is_gpu())
                    .map(|p| PartArgs {
                        device: p.placement.clone().into(),
                        vram_bytes: p.need.vram_bytes,
                        compute: p.need.compute,
                    })
                    .collect();
                let hosted = host.is_some() && !w.parts.is_empty();
                let (device, vram_bytes, compute, parts) = match gpu_parts.as_slice() {
                    [one] if hosted => {
                        (one.device.clone(), one.vram_bytes, one.compute, Vec::new())
                    }
                    [] if hosted => (gpud_proto::Placement::Any, 0, false, Vec::new()),
                    _ if hosted => (
                        gpud_proto::Placement::Any,
                        gpu_parts.iter().map(|p| p.vram_bytes).max().unwrap_or(0),
                        gpu_parts.iter().any(|p| p.compute),
                        gpu_parts,
                    ),
                    _ if host.is_some() => (gpud_proto::Placement::Any, 0, false, Vec::new()),
                    _ => (
                        w.placement.clone().into(),
                        w.need.vram_bytes,
                        w.need.compute,
                        gpu_parts,
                    ),
                };
                WaiterStatus {
                    session: w.ticket.session,
                    request: w.ticket.request,
                    pid: pid(peer(w.ticket.session)),
                    class: w.class.into(),
                    device,
                    vram_bytes,
                    compute,
                    grows_lease: w.grows,
                    waited_ms: since(w.arrived),
                    label: w.label.clone(),
                    parts,
                    host,
                }
            })
            .collect();
        let (journal_skipped, journal_refused) = self.journal_left_out();
        StatusReport {
            daemon: DaemonInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: self.facts.pid,
                uptime_ms: since(self.started),
                sessions: self.sessions.len() as u32,
                backend: self.facts.backend.into(),
                journal_skipped,
                journal_refused,
            },
            devices,
            leases,
            waiters,
            budgets: if from.is_none() {
                self.budget_rows()
            } else {
                Vec::new()
            },
            enforcement: Some(self.enforcement.clone()),
            host: if from.is_none() {
                self.host_status()
            } else {
                None
            },
            more,
        }
    }

    /// The metrics exposition (Prometheus text format).
    pub fn metrics(&self, now: Now) -> String {
        let over_use: Vec<u64> = (0..self.names.len())
            .map(|d| over_use_bytes(&self.auditor, &self.footprints, d))
            .collect();
        let mut text = self.observer.render(
            now.at,
            &self.ledger,
            &self.names,
            self.sessions.len(),
            &over_use,
        );
        let ledger = &self.ledger;
        let enforced = self.supervision.counts(|id| ledger.lease(id).is_some());
        crate::metrics::render_enforced(&mut text, &enforced);
        if let Some(host) = self.host_status() {
            crate::metrics::render_host(&mut text, &host, self.host_over_use());
        }
        text
    }

    /// Processes using memory on a device at the last poll, with their owners.
    fn process_status(&self, d: usize) -> Vec<ProcessStatus> {
        let owners: BTreeMap<u32, u64> = self.owners(d);
        self.usage
            .get(d)
            .map(|procs| {
                procs
                    .iter()
                    .map(|p| {
                        let owner_pid = p.owner(&owners);
                        ProcessStatus {
                            pid: p.pid,
                            process: p.name.clone(),
                            used_bytes: p.used_bytes,
                            owner_pid,
                            over_use: owner_pid.is_some_and(|o| self.auditor.is_over(o, d)),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use gpud_proto::{AcquireArgs, Class, Op, StatusReport};

    use crate::config::Config;
    use crate::hub::core::bench::{Bench, GIB, peer};

    /// Leases 1..=6 (memory only) and five compute waiters of mixed classes behind the two
    /// compute holders.
    fn busy() -> Bench {
        let mut b = Bench::new(&Config::default());
        b.open(1, peer(10, 0)).unwrap();
        for id in 0..6 {
            b.acquire(1, id, GIB, false);
        }
        b.open(2, peer(20, 0)).unwrap();
        b.acquire(2, 0, 0, true);
        b.acquire(2, 1, 0, true);
        let classes = [
            Class::Background,
            Class::High,
            Class::Normal,
            Class::Critical,
        ];
        for (id, class) in (2..7).zip(classes.iter().cycle()) {
            let args = AcquireArgs {
                compute: true,
                class: *class,
                ..AcquireArgs::default()
            };
            b.request(2, id, Op::Acquire(args));
        }
        b.actions();
        b
    }

    fn keys(r: &StatusReport) -> (Vec<u64>, Vec<(u64, u64)>) {
        let leases = r.leases.iter().map(|l| l.id).collect();
        let waiters = r.waiters.iter().map(|w| (w.session, w.request)).collect();
        (leases, waiters)
    }

    #[test]
    fn pages_of_any_size_add_up_to_the_whole_status_in_order() {
        let b = busy();
        let now = b.now();
        let whole = b.core.status(now);
        assert_eq!((whole.leases.len(), whole.waiters.len()), (8, 5));
        assert_eq!(whole.more, None);
        for size in 1..=14 {
            let mut report = b.core.status_page(now, None, size);
            let mut pages = 1;
            while let Some(cursor) = report.more {
                let page = b.core.status_page(now, Some(cursor), size);
                assert!(page.leases.len() + page.waiters.len() <= size);
                assert!(
                    !page.leases.is_empty() || !page.waiters.is_empty(),
                    "{cursor:?}"
                );
                assert_eq!(page.devices.len(), 2, "every page shows the devices");
                report.append(page);
                pages += 1;
            }
            assert_eq!(keys(&report), keys(&whole), "pages of {size}");
            assert_eq!(pages, 13usize.div_ceil(size), "pages of {size}");
        }
    }

    #[test]
    fn a_waiter_served_between_pages_does_not_shift_the_next_page() {
        let mut b = busy();
        let now = b.now();
        let first = b.core.status_page(now, None, 10);
        let cursor = first.more.expect("three waiters left");
        // The critical waiter (first in the queue, shown on the first page) gets a slot.
        let (_, waiters) = keys(&first);
        assert_eq!(waiters, [(2, 5), (2, 3)]);
        b.request(2, 100, Op::Release { lease: 7 });
        let now = b.now();
        let next = b.core.status_page(now, Some(cursor), 10);
        let (_, rest) = keys(&next);
        assert_eq!(rest, [(2, 4), (2, 2), (2, 6)], "the rest, none skipped");
    }
}
