//! The structured values of the `Devices` and `Leases` properties.

use std::collections::HashMap;

use gpud_proto::StatusReport;
use serde::Serialize;
use zbus::Type;

use crate::ledger::SessionId;

/// One device: `(usstttttbuuu)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Type)]
pub struct DeviceRow {
    /// gpud index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total_bytes: u64,
    /// total − headroom − unmanaged.
    pub capacity_bytes: u64,
    /// Reserved by leases.
    pub reserved_bytes: u64,
    /// capacity − reserved.
    pub free_bytes: u64,
    /// Used by processes without a lease.
    pub unmanaged_bytes: u64,
    /// No new grants.
    pub drained: bool,
    /// Compute slots.
    pub compute_slots: u32,
    /// Leases holding a compute slot.
    pub compute_holders: u32,
    /// Waiting requests this device could serve.
    pub queued: u32,
}

/// One lease: `(tustbsuusstbs)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Type)]
pub struct LeaseRow {
    /// Lease id.
    pub id: u64,
    /// Device index.
    pub device_index: u32,
    /// Device UUID.
    pub device_uuid: String,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Holds a compute slot.
    pub compute: bool,
    /// Class name.
    pub class: String,
    /// Holder's pid.
    pub pid: u32,
    /// Holder's uid.
    pub uid: u32,
    /// Holder's process name.
    pub process: String,
    /// The holder's unique bus name, or empty for a socket client.
    pub owner: String,
    /// Milliseconds since the grant.
    pub held_ms: u64,
    /// A yield notice is outstanding.
    pub yield_requested: bool,
    /// The client's note, or empty.
    pub label: String,
}

/// The devices of a status report.
pub fn devices(status: &StatusReport) -> Vec<DeviceRow> {
    status
        .devices
        .iter()
        .map(|d| DeviceRow {
            index: d.index,
            uuid: d.uuid.clone(),
            name: d.name.clone(),
            total_bytes: d.total_bytes,
            capacity_bytes: d.capacity_bytes,
            reserved_bytes: d.reserved_bytes,
            free_bytes: d.free_bytes,
            unmanaged_bytes: d.unmanaged_bytes,
            drained: d.drained,
            compute_slots: d.compute_slots,
            compute_holders: d.compute_holders.len() as u32,
            queued: d.queued.critical + d.queued.high + d.queued.normal + d.queued.background,
        })
        .collect()
}

/// The leases of a status report; `owners` names the bus sessions.
pub fn leases(status: &StatusReport, owners: &HashMap<SessionId, String>) -> Vec<LeaseRow> {
    status
        .leases
        .iter()
        .map(|l| LeaseRow {
            id: l.id,
            device_index: l.device_index,
            device_uuid: l.device.clone(),
            vram_bytes: l.vram_bytes,
            compute: l.compute,
            class: l.class.to_string(),
            pid: l.pid,
            uid: l.uid,
            process: l.process.clone(),
            owner: owners.get(&l.session).cloned().unwrap_or_default(),
            held_ms: l.held_ms,
            yield_requested: l.yield_requested,
            label: l.label.clone().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_the_documented_ones() {
        assert_eq!(DeviceRow::SIGNATURE.to_string(), "(usstttttbuuu)");
        assert_eq!(LeaseRow::SIGNATURE.to_string(), "(tustbsuusstbs)");
    }
}
