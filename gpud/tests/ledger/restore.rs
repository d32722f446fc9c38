//! Restoring leases from a journal after a restart: whatever the journal says, the books never
//! hold more than a device's memory, and a restored lease keeps the limits a granted one has.

use std::time::{Duration, Instant};

use gpud::ledger::{
    Class, Decision, DeviceSpec, Ledger, LedgerConfig, PerClass, RestoredLease, YieldReason,
};
use proptest::prelude::*;

use crate::GIB;

fn devices() -> Vec<DeviceSpec> {
    (0..2)
        .map(|i| DeviceSpec {
            kind: gpud::ledger::PoolKind::Gpu,
            uuid: format!("GPU-{i}"),
            name: "Simulated GPU".into(),
            total_bytes: 16 * GIB,
            headroom_bytes: GIB,
            unmanaged_bytes: 0,
            compute_slots: 1,
            critical_slots: 0,
            topology: Default::default(),
        })
        .collect()
}

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        Just(Class::Critical),
        Just(Class::High),
        Just(Class::Normal),
        Just(Class::Background),
    ]
}

/// Journal records as a damaged or hostile journal could hold them: any id (0, the largest,
/// repeats), any device index, any size up to u64::MAX.
fn record() -> impl Strategy<Value = (u64, usize, u64, bool, Class)> {
    (
        prop_oneof![0..8u64, Just(u64::MAX), any::<u64>()],
        0..3usize,
        prop_oneof![
            0..(20 * GIB),
            Just(u64::MAX),
            Just(u64::MAX / 2 + 1),
            any::<u64>()
        ],
        any::<bool>(),
        class(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Restoring arbitrary records never panics, never puts more than a device's memory in its
    /// books, and leaves the ledger consistent and usable.
    #[test]
    fn restoring_any_journal_never_exceeds_a_device(records in prop::collection::vec(record(), 0..24)) {
        let now = Instant::now();
        let mut l = Ledger::new(LedgerConfig::default(), devices());
        let mut accepted = [0u64; 2];
        for (id, device, vram_bytes, compute, class) in records {
            let lease = RestoredLease {
                id,
                device,
                vram_bytes,
                compute,
                class,
                granted_at: now,
                label: None,
                within: None,
                budget_compute_slots: None,
                evictable: false,
                group: None,
            };
            if l.restore(0, lease).is_ok() {
                accepted[device] += vram_bytes;
            }
        }
        for (d, bytes) in accepted.iter().enumerate() {
            let dev = l.device(d).expect("device");
            prop_assert_eq!(dev.reserved(), *bytes);
            prop_assert!(dev.reserved() <= 16 * GIB, "device {} holds {} bytes", d, dev.reserved());
        }
        l.check_invariants().map_err(TestCaseError::fail)?;
        l.handle_timeout(now + Duration::from_secs(3600));
        while l.poll_decision().is_some() {}
        l.check_invariants().map_err(TestCaseError::fail)?;
    }
}

/// Regression: a lease re-adopted after a restart never got its maximum-hold notice.
#[test]
fn a_restored_compute_lease_keeps_its_maximum_hold() {
    let now = Instant::now();
    let config = LedgerConfig {
        max_hold: PerClass {
            normal: Some(Duration::from_secs(10)),
            ..PerClass::default()
        },
        ..LedgerConfig::default()
    };
    let mut l = Ledger::new(config, devices());
    let lease = RestoredLease {
        id: 7,
        device: 0,
        vram_bytes: GIB,
        compute: true,
        class: Class::Normal,
        granted_at: now,
        label: None,
        within: None,
        budget_compute_slots: None,
        evictable: false,
        group: None,
    };
    l.restore(0, lease).unwrap();
    assert_eq!(l.poll_timeout(), Some(now + Duration::from_secs(10)));
    l.handle_timeout(now + Duration::from_secs(10));
    let yields: Vec<_> = std::iter::from_fn(|| l.poll_decision())
        .filter(|d| {
            matches!(
                d,
                Decision::YieldRequested {
                    lease: 7,
                    reason: YieldReason::MaxHold,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(yields.len(), 1);
}

/// Regression: a journaled size of 2^64 − 1 wrapped the device's reserved count around.
#[test]
fn a_restored_size_past_the_device_is_refused() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), devices());
    let lease = |id, vram_bytes| RestoredLease {
        id,
        device: 0,
        vram_bytes,
        compute: false,
        class: Class::Normal,
        granted_at: now,
        label: None,
        within: None,
        budget_compute_slots: None,
        evictable: false,
        group: None,
    };
    l.restore(0, lease(1, 2)).unwrap();
    assert!(l.restore(0, lease(2, u64::MAX)).is_err());
    assert_eq!(l.device(0).unwrap().reserved(), 2);
}
