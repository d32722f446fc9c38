//! The state as `status` and the metrics report it.

use std::collections::BTreeMap;
use std::time::Instant;

use gpud_proto::{
    ComputeHolder, DaemonInfo, DeviceStatus, LeaseStatus, ProcessStatus, StatusReport, WaiterStatus,
};

use super::{Core, Now, Peer};
use crate::ledger::SessionId;

impl Core {
    /// The whole state, as `status` reports it.
    pub fn status(&self, now: Now) -> StatusReport {
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
                    free_bytes: d.free(),
                    drained: d.drained(),
                    compute_slots: spec.compute_slots,
                    critical_slots: spec.critical_slots,
                    compute_holder: holders.first().cloned(),
                    compute_holders: holders,
                    queued: d.queued().into(),
                    processes: self.process_status(d.index()),
                }
            })
            .collect();
        let leases = self
            .ledger
            .leases()
            .map(|l| {
                let p = peer(l.session);
                LeaseStatus {
                    id: l.id,
                    device: self
                        .ledger
                        .device(l.device)
                        .map(|d| d.spec().uuid.clone())
                        .unwrap_or_default(),
                    device_index: l.device as u32,
                    vram_bytes: l.vram_bytes,
                    compute: l.compute,
                    class: l.class.into(),
                    pid: pid(p),
                    uid: p.map_or(0, |p| p.uid),
                    process: process(p),
                    session: l.session,
                    held_ms: since(l.granted_at),
                    yield_requested: l.yield_requested.is_some(),
                    label: l.label.clone(),
                }
            })
            .collect();
        let waiters = self
            .ledger
            .waiters()
            .into_iter()
            .map(|w| WaiterStatus {
                session: w.ticket.session,
                request: w.ticket.request,
                pid: pid(peer(w.ticket.session)),
                class: w.class.into(),
                device: w.placement.clone().into(),
                vram_bytes: w.need.vram_bytes,
                compute: w.need.compute,
                grows_lease: w.grows,
                waited_ms: since(w.arrived),
                label: w.label.clone(),
            })
            .collect();
        StatusReport {
            daemon: DaemonInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: self.facts.pid,
                uptime_ms: since(self.started),
                sessions: self.sessions.len() as u32,
                backend: self.facts.backend.into(),
            },
            devices,
            leases,
            waiters,
        }
    }

    /// The metrics exposition (Prometheus text format).
    pub fn metrics(&self, now: Now) -> String {
        let over_use: Vec<u64> = (0..self.names.len())
            .map(|d| {
                self.footprints
                    .iter()
                    .filter(|f| f.device == d && self.auditor.is_over(f.owner, d))
                    .map(|f| f.used_bytes.saturating_sub(f.reserved_bytes))
                    .sum()
            })
            .collect();
        self.observer.render(
            now.at,
            &self.ledger,
            &self.names,
            self.sessions.len(),
            &over_use,
        )
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
