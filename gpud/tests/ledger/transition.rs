//! The inputs of a random run: one [`Transition`] per ledger input, and the strategies that
//! generate them.
//!
//! A transition names its target loosely (`pick` among the leases or waiting requests of a
//! session); the [reference model](crate::reference) resolves it against its own state, so
//! that only steps that make sense there reach the ledger. The strategies keep the shape they
//! had when the seeds in `proptest-regressions/main.txt` were recorded, so those seeds still
//! replay the cases they were recorded for.

use gpud::ledger::Class;
use proptest::prelude::*;

/// One input to the ledger.
#[derive(Debug, Clone)]
pub enum Transition {
    /// A session asks for a lease (`device: None` is placement "any").
    Acquire {
        session: u64,
        device: Option<usize>,
        vram_gib: u64,
        compute: bool,
        class: Class,
        timeout_ms: Option<u64>,
    },
    /// A session resizes one of its leases (nothing happens when it holds none).
    Resize {
        session: u64,
        pick: usize,
        vram_gib: u64,
        timeout_ms: Option<u64>,
    },
    /// A session releases one of its leases (one it does not hold, when it holds none).
    Release { session: u64, pick: usize },
    /// A session withdraws one of its waiting requests (nothing happens when it has none).
    Cancel { session: u64, pick: usize },
    /// A session ends.
    Disconnect { session: u64 },
    /// An operator stops grants on a device.
    Drain { device: usize },
    /// An operator resumes grants on a device.
    Undrain { device: usize },
    /// An operator revokes one live lease (nothing happens when there is none).
    Revoke { pick: usize },
    /// Memory used outside the ledger changes on a device.
    Unmanaged { device: usize, gib: u64 },
    /// A configuration reload changes every device's slots.
    Slots { compute: u32, critical: u32 },
    /// Virtual time passes and due timers fire.
    Advance { ms: u64 },
}

impl Transition {
    /// How many kinds of transition there are (to check that a long run saw all of them).
    pub const KINDS: usize = 11;
}

/// Sessions a random run uses.
pub const SESSIONS: std::ops::Range<u64> = 1..6;

/// Devices of the simulated host.
pub const DEVICES: usize = 3;

/// A class, normal most often.
pub fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        1 => Just(Class::Critical),
        2 => Just(Class::High),
        4 => Just(Class::Normal),
        2 => Just(Class::Background),
    ]
}

/// One transition, weighted so that acquires and releases dominate.
pub fn transition() -> impl Strategy<Value = Transition> {
    let session = SESSIONS;
    let timeout = proptest::option::weighted(0.4, 1..400u64);
    prop_oneof![
        8 => (session.clone(), proptest::option::weighted(0.6, 0..DEVICES), 0..20u64, any::<bool>(), class(), timeout.clone())
            .prop_map(|(session, device, vram_gib, compute, class, timeout_ms)| Transition::Acquire {
                session, device, vram_gib, compute, class, timeout_ms
            }),
        2 => (session.clone(), any::<usize>(), 0..20u64, timeout).prop_map(|(session, pick, vram_gib, timeout_ms)| {
            Transition::Resize { session, pick, vram_gib, timeout_ms }
        }),
        6 => (session.clone(), any::<usize>()).prop_map(|(session, pick)| Transition::Release { session, pick }),
        1 => (session.clone(), any::<usize>()).prop_map(|(session, pick)| Transition::Cancel { session, pick }),
        1 => session.prop_map(|session| Transition::Disconnect { session }),
        1 => (0..DEVICES).prop_map(|device| Transition::Drain { device }),
        2 => (0..DEVICES).prop_map(|device| Transition::Undrain { device }),
        1 => any::<usize>().prop_map(|pick| Transition::Revoke { pick }),
        1 => (0..DEVICES, 0..8u64).prop_map(|(device, gib)| Transition::Unmanaged { device, gib }),
        1 => (1..3u32, 0..2u32).prop_map(|(compute, critical)| Transition::Slots { compute, critical }),
        4 => (1..300u64).prop_map(|ms| Transition::Advance { ms }),
    ]
}

/// A list of transitions.
pub fn transitions(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Transition>> {
    proptest::collection::vec(transition(), len)
}
