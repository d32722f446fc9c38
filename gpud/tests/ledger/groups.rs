//! Leases of several devices (groups) and placement policies: a group is granted whole or not
//! at all, each part on its own device, never over capacity; every group is served once the
//! others release; each policy places as documented.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, Class, Decision, DeviceIdx, LeaseId, Ledger, LedgerConfig, LedgerError, Part,
    Placement, PlacementPolicy, RevokeReason, SessionId, Ticket, Topology,
};
use proptest::prelude::*;

use crate::{GIB, churn, sim_devices};

/// Four 16 GiB devices with one compute slot each: devices 0 and 1 are one NVLink island,
/// 2 and 3 another.
fn ledger(max_overtakes: u32) -> Ledger {
    let mut devices = sim_devices(4, 1);
    for (i, d) in devices.iter_mut().enumerate() {
        d.topology = Topology {
            numa_node: Some(i as u32 / 2),
            nvlink_island: Some(i as u32 / 2),
        };
    }
    let config = LedgerConfig {
        max_overtakes,
        ..LedgerConfig::default()
    };
    Ledger::new(config, devices)
}

fn single(placement: Placement, gib: u64, compute: bool, policy: PlacementPolicy) -> AcquireSpec {
    AcquireSpec {
        placement,
        vram_bytes: gib * GIB,
        compute,
        class: Class::Normal,
        timeout: None,
        label: None,
        within: None,
        budget: None,
        evictable: false,
        parts: Vec::new(),
        policy,
    }
}

fn part(placement: Placement, gib: u64, compute: bool) -> Part {
    Part::gpu(placement, gib * GIB, compute)
}

fn group(parts: Vec<Part>, policy: PlacementPolicy) -> AcquireSpec {
    AcquireSpec {
        parts,
        ..single(Placement::Any, 0, false, policy)
    }
}

/// `n` parts of `gib` GiB each, on any device.
fn same(n: usize, gib: u64, policy: PlacementPolicy) -> AcquireSpec {
    group(vec![part(Placement::Any, gib, false); n], policy)
}

fn ticket(session: SessionId, request: u64) -> Ticket {
    Ticket { session, request }
}

fn decisions(l: &mut Ledger) -> Vec<Decision> {
    std::iter::from_fn(|| l.poll_decision()).collect()
}

/// The devices of group `id`'s parts, in the parts' order.
fn devices_of(l: &Ledger, id: LeaseId) -> Vec<DeviceIdx> {
    l.group_of(id)
        .iter()
        .map(|p| l.lease(*p).unwrap().device)
        .collect()
}

/// Fills device `d` with `gib` GiB for session 100 + `d`.
fn fill(l: &mut Ledger, now: Instant, d: u32, gib: u64) -> LeaseId {
    let spec = single(Placement::Index(d), gib, false, PlacementPolicy::BestFit);
    l.acquire(now, ticket(100 + u64::from(d), u64::from(d)), spec)
        .unwrap()
        .unwrap()
}

#[test]
fn a_group_waits_while_one_part_does_not_fit_and_is_granted_whole_when_it_does() {
    let mut l = ledger(4);
    let now = Instant::now();
    let taken = fill(&mut l, now, 1, 10);
    let asked = ticket(1, 1);
    let spec = group(
        vec![
            part(Placement::Index(0), 8, true),
            part(Placement::Index(1), 8, true),
        ],
        PlacementPolicy::BestFit,
    );
    assert_eq!(
        l.acquire(now, asked, spec),
        Ok(None),
        "device 1 has 6 GiB free"
    );
    // Nothing of it is held while it waits: device 0 is still whole.
    assert_eq!(l.device(0).unwrap().reserved(), 0);
    assert_eq!(l.device(0).unwrap().compute_holders().count(), 0);
    l.release(now, 101, taken).unwrap();
    let ds = decisions(&mut l);
    let [Decision::Granted { ticket, lease }] = ds.as_slice() else {
        panic!("one grant for the group: {ds:?}")
    };
    assert_eq!(*ticket, asked);
    assert_eq!(devices_of(&l, *lease), vec![0, 1]);
    for p in l.group_of(*lease) {
        let part = l.lease(p).unwrap();
        assert_eq!((part.vram_bytes, part.compute), (8 * GIB, true));
        assert_eq!(part.group, Some(*lease));
    }
    l.check_invariants().unwrap();
}

#[test]
fn releasing_or_revoking_one_part_ends_the_whole_group() {
    let mut l = ledger(4);
    let now = Instant::now();
    let g = l
        .acquire(now, ticket(1, 1), same(3, 4, PlacementPolicy::BestFit))
        .unwrap()
        .unwrap();
    let parts = l.group_of(g);
    assert_eq!(parts.len(), 3);
    l.release(now, 1, parts[2]).unwrap();
    assert_eq!(l.leases().count(), 0, "every part ended with the last one");
    assert!(l.group_of(g).is_empty());

    let g = l
        .acquire(now, ticket(1, 2), same(2, 4, PlacementPolicy::BestFit))
        .unwrap()
        .unwrap();
    let parts = l.group_of(g);
    l.revoke(now, parts[1]).unwrap();
    let revoked: BTreeSet<LeaseId> = decisions(&mut l)
        .into_iter()
        .filter_map(|d| match d {
            Decision::Revoked {
                lease,
                reason: RevokeReason::Admin,
                ..
            } => Some(lease),
            _ => None,
        })
        .collect();
    assert_eq!(
        revoked,
        parts.iter().copied().collect(),
        "each part hears it"
    );
    assert_eq!(l.leases().count(), 0);

    l.acquire(now, ticket(1, 3), same(2, 4, PlacementPolicy::BestFit))
        .unwrap()
        .unwrap();
    assert_eq!(l.disconnect(now, 1).leases.len(), 2);
    l.check_invariants().unwrap();
}

#[test]
fn nonsense_groups_are_refused() {
    let mut l = ledger(4);
    let now = Instant::now();
    let mut n = 0;
    let mut ask = |l: &mut Ledger, spec| {
        n += 1;
        l.acquire(now, ticket(1, n), spec)
    };
    let refused = |r: Result<Option<LeaseId>, LedgerError>| {
        assert!(
            matches!(
                r,
                Err(LedgerError::Invalid(_) | LedgerError::NeverFits { .. })
            ),
            "{r:?}"
        )
    };
    refused(ask(&mut l, same(5, 1, PlacementPolicy::BestFit)));
    refused(ask(
        &mut l,
        group(
            vec![
                part(Placement::Index(2), 1, false),
                part(Placement::Uuid("gpu-2".into()), 1, false),
            ],
            PlacementPolicy::BestFit,
        ),
    ));
    refused(ask(&mut l, same(2, 17, PlacementPolicy::BestFit)));
    refused(ask(&mut l, same(2, 0, PlacementPolicy::BestFit)));
    // Three parts on one island of two devices never fit.
    refused(ask(&mut l, same(3, 1, PlacementPolicy::Near)));
    let mut evictable = same(2, 1, PlacementPolicy::BestFit);
    evictable.evictable = true;
    refused(ask(&mut l, evictable));
    let mut both = same(2, 1, PlacementPolicy::BestFit);
    both.vram_bytes = GIB;
    refused(ask(&mut l, both));
    // Near needs a topology.
    let mut plain = Ledger::new(LedgerConfig::default(), sim_devices(2, 1));
    assert!(matches!(
        plain.acquire(now, ticket(1, 99), same(2, 1, PlacementPolicy::Near)),
        Err(LedgerError::Invalid(_))
    ));
    assert_eq!(l.waiters().len(), 0);
    assert_eq!(l.leases().count(), 0);
}

/// Devices 0..4 holding 6, 0, 10 and 2 GiB: the policies disagree on every request.
fn loaded() -> (Ledger, Instant) {
    let mut l = ledger(4);
    let now = Instant::now();
    for (d, gib) in [(0, 6), (2, 10), (3, 2)] {
        fill(&mut l, now, d, gib);
    }
    (l, now)
}

#[test]
fn single_device_policies_place_as_documented() {
    let place = |policy, gib| {
        let (mut l, now) = loaded();
        let id = l
            .acquire(
                now,
                ticket(1, 1),
                single(Placement::Any, gib, false, policy),
            )
            .unwrap()
            .unwrap();
        l.lease(id).unwrap().device
    };
    // Free: 10, 16, 6, 14 GiB.
    assert_eq!(place(PlacementPolicy::BestFit, 5), 2, "least left over");
    assert_eq!(place(PlacementPolicy::Spread, 5), 1, "most free");
    assert_eq!(place(PlacementPolicy::Pack, 5), 2, "most reserved");
    assert_eq!(
        place(PlacementPolicy::BestFit, 8),
        0,
        "least left over of those it fits"
    );
    assert_eq!(
        place(PlacementPolicy::Pack, 8),
        0,
        "most reserved it fits on"
    );
    assert_eq!(place(PlacementPolicy::Near, 5), 2, "one device: best fit");
}

#[test]
fn pack_fills_loaded_devices_where_best_fit_takes_the_tightest() {
    // A small device free and a large one in use: best fit takes the small one, pack keeps it
    // whole.
    let mut devices = sim_devices(2, 1);
    devices[1].total_bytes = 40 * GIB;
    let now = Instant::now();
    let place = |policy| {
        let mut l = Ledger::new(LedgerConfig::default(), devices.clone());
        l.acquire(
            now,
            ticket(9, 1),
            single(Placement::Index(1), 4, false, policy),
        )
        .unwrap();
        let id = l
            .acquire(now, ticket(1, 1), single(Placement::Any, 12, false, policy))
            .unwrap()
            .unwrap();
        l.lease(id).unwrap().device
    };
    assert_eq!(place(PlacementPolicy::BestFit), 0);
    assert_eq!(place(PlacementPolicy::Pack), 1);
}

#[test]
fn group_policies_place_as_documented() {
    let place = |policy, n, gib| {
        let (mut l, now) = loaded();
        l.acquire(now, ticket(1, 1), same(n, gib, policy))
            .unwrap()
            .map(|g| devices_of(&l, g))
    };
    // Free: 10, 16, 6, 14 GiB; reserved 6, 0, 10, 2.
    assert_eq!(place(PlacementPolicy::Spread, 2, 4), Some(vec![1, 3]));
    assert_eq!(place(PlacementPolicy::Pack, 2, 4), Some(vec![2, 0]));
    assert_eq!(place(PlacementPolicy::BestFit, 2, 4), Some(vec![2, 0]));
    assert_eq!(place(PlacementPolicy::Spread, 3, 8), Some(vec![1, 3, 0]));
    // Near: island {0, 1} has 26 GiB free, {2, 3} 20: the tighter one fits 2 × 4 GiB.
    assert_eq!(place(PlacementPolicy::Near, 2, 4), Some(vec![2, 3]));
    // 2 × 8 GiB fits only island {0, 1}; spread would cross islands.
    assert_eq!(place(PlacementPolicy::Near, 2, 8), Some(vec![0, 1]));
    assert_eq!(place(PlacementPolicy::Spread, 2, 12), Some(vec![1, 3]));
    // 2 × 12 GiB fits on no island now: near waits where spread is granted.
    assert_eq!(place(PlacementPolicy::Near, 2, 12), None);
}

#[test]
fn an_old_group_pins_its_devices_and_is_not_starved_by_small_requests() {
    let mut l = ledger(1);
    let now = Instant::now();
    // Devices 0 and 1 each have a holder; the group needs both whole.
    let a = fill(&mut l, now, 0, 4);
    let b = fill(&mut l, now, 1, 4);
    let g = ticket(1, 1);
    let spec = group(
        vec![
            part(Placement::Index(0), 16, false),
            part(Placement::Index(1), 16, false),
        ],
        PlacementPolicy::BestFit,
    );
    assert_eq!(l.acquire(now, g, spec), Ok(None));
    // One small request overtakes it; after that the group pins its devices.
    let small = || single(Placement::Index(0), 1, false, PlacementPolicy::BestFit);
    assert!(l.acquire(now, ticket(2, 1), small()).unwrap().is_some());
    assert_eq!(l.acquire(now, ticket(2, 2), small()), Ok(None), "pinned");
    l.release(now, 100, a).unwrap();
    l.release(now, 101, b).unwrap();
    let small_lease = l.session_leases(2)[0];
    l.release(now, 2, small_lease).unwrap();
    let granted: Vec<Ticket> = decisions(&mut l)
        .into_iter()
        .filter_map(|d| match d {
            Decision::Granted { ticket, .. } => Some(ticket),
            _ => None,
        })
        .collect();
    assert_eq!(granted.first(), Some(&g), "the group first: {granted:?}");
    l.check_invariants().unwrap();
}

#[derive(Debug, Clone)]
enum Step {
    Single {
        session: SessionId,
        device: Option<u32>,
        gib: u64,
        compute: bool,
        class: Class,
        policy: PlacementPolicy,
    },
    Group {
        session: SessionId,
        parts: Vec<(Option<u32>, u64, bool)>,
        class: Class,
        policy: PlacementPolicy,
    },
    Release {
        pick: usize,
    },
    Revoke {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
    Disconnect {
        session: SessionId,
    },
}

fn policy() -> impl Strategy<Value = PlacementPolicy> {
    prop::sample::select(PlacementPolicy::ALL.to_vec())
}

fn class() -> impl Strategy<Value = Class> {
    prop::sample::select(Class::ALL.to_vec())
}

fn step() -> impl Strategy<Value = Step> {
    let device = prop::option::weighted(0.2, 0..4u32);
    prop_oneof![
        3 => (1..6u64, device.clone(), 1..17u64, any::<bool>(), class(), policy()).prop_map(
            |(session, device, gib, compute, class, policy)| Step::Single { session, device, gib, compute, class, policy }
        ),
        3 => (1..6u64, prop::collection::vec((device, 1..17u64, any::<bool>()), 2..5), class(), policy()).prop_map(
            |(session, parts, class, policy)| Step::Group { session, parts, class, policy }
        ),
        3 => any::<usize>().prop_map(|pick| Step::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Step::Revoke { pick }),
        1 => any::<usize>().prop_map(|pick| Step::Cancel { pick }),
        1 => (1..6u64).prop_map(|session| Step::Disconnect { session }),
    ]
}

/// What a run knows of its groups: per group, the parts it asked for and its policy.
#[derive(Default)]
struct Books {
    /// Waiting group requests.
    asked: BTreeMap<Ticket, (Vec<Part>, PlacementPolicy)>,
    /// Granted groups by id.
    granted: BTreeMap<LeaseId, (Vec<Part>, PlacementPolicy)>,
    /// Requests still waiting.
    waiting: BTreeSet<Ticket>,
}

impl Books {
    fn granted(&mut self, l: &Ledger, t: Ticket, id: LeaseId) {
        assert!(
            self.waiting.remove(&t),
            "{t:?} answered twice or never waited"
        );
        if let Some(asked) = self.asked.remove(&t) {
            self.check_grant(l, id, &asked.0, asked.1);
            self.granted.insert(id, asked);
        }
    }

    /// A group as granted: every part, each on its own device, as asked.
    fn check_grant(&self, l: &Ledger, id: LeaseId, parts: &[Part], policy: PlacementPolicy) {
        let leases = l.group_of(id);
        assert_eq!(leases.len(), parts.len(), "group {id} granted whole");
        let devices: BTreeSet<DeviceIdx> = devices_of(l, id).into_iter().collect();
        assert_eq!(
            devices.len(),
            parts.len(),
            "group {id}: one device per part"
        );
        for (lease, asked) in leases.iter().zip(parts) {
            let got = l.lease(*lease).unwrap();
            assert_eq!(
                (got.vram_bytes, got.compute),
                (asked.vram_bytes, asked.compute)
            );
            if let Placement::Index(d) = asked.placement {
                assert_eq!(got.device, d as usize, "a part on the device it named");
            }
        }
        if policy == PlacementPolicy::Near {
            let islands: BTreeSet<_> = devices
                .iter()
                .map(|&d| l.device(d).unwrap().spec().topology.island())
                .collect();
            assert_eq!(
                islands.len(),
                1,
                "group {id}: near puts every part on one island"
            );
        }
    }

    /// After every step: groups are whole or gone, never partial.
    fn check(&mut self, l: &Ledger) {
        self.granted.retain(|&id, (parts, _)| {
            let held = l.leases().filter(|x| x.group == Some(id)).count();
            assert!(
                held == 0 || held == parts.len(),
                "group {id} holds {held} of {} parts",
                parts.len()
            );
            held > 0
        });
        for lease in l.leases() {
            if let Some(g) = lease.group {
                assert!(
                    self.granted.contains_key(&g),
                    "lease {} of an ungranted group",
                    lease.id
                );
            }
        }
        for d in l.devices() {
            assert!(
                d.reserved() <= d.capacity(),
                "device {} over capacity",
                d.index()
            );
            assert!(d.compute_holders().count() <= d.spec().compute_slots as usize);
        }
        l.check_invariants().unwrap();
    }
}

/// Policy order for a part of `gib` GiB, from the public view (smaller first), as
/// docs/PROTOCOL.md states it.
fn documented_order(l: &Ledger, policy: PlacementPolicy, need: u64) -> Vec<DeviceIdx> {
    let mut devices: Vec<DeviceIdx> = l
        .devices()
        .filter(|d| d.free() >= need && !d.drained())
        .map(|d| d.index())
        .collect();
    let key = |d: DeviceIdx| {
        let v = l.device(d).unwrap();
        let holders = v.compute_holders().count() as u64;
        match policy {
            PlacementPolicy::BestFit | PlacementPolicy::Near => (v.free() - need, holders, 0, d),
            PlacementPolicy::Spread => (u64::MAX - v.free(), holders, 0, d),
            PlacementPolicy::Pack => (u64::MAX - v.reserved(), u64::MAX - holders, v.free(), d),
        }
    };
    devices.sort_by_key(|&d| key(d));
    devices
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random runs of single and group requests: groups are granted whole on distinct devices
    /// or not at all, devices are never over capacity, placements on an idle queue follow the
    /// documented order, and once everything held is released (round after round, with no new
    /// requests) every waiting request is served.
    #[test]
    fn groups_are_atomic_placed_as_documented_and_all_served(
        steps in prop::collection::vec(step(), 1..60),
        max_overtakes in 0..4u32,
    ) {
        let mut l = ledger(max_overtakes);
        let mut now = Instant::now();
        let mut request = 0;
        let mut books = Books::default();
        for s in &steps {
            now += Duration::from_millis(1);
            let idle = l.waiters().is_empty();
            match s.clone() {
                Step::Single { session, device, gib, compute, class, policy } => {
                    request += 1;
                    let t = ticket(session, request);
                    let placement = device.map_or(Placement::Any, Placement::Index);
                    let expected = documented_order(&l, policy, gib * GIB)
                        .into_iter()
                        .find(|&d| !compute || l.device(d).unwrap().compute_holders().count() == 0);
                    let spec = AcquireSpec { class, ..single(placement.clone(), gib, compute, policy) };
                    match l.acquire(now, t, spec) {
                        Ok(Some(id)) => {
                            if idle && placement == Placement::Any {
                                prop_assert_eq!(Some(l.lease(id).unwrap().device), expected);
                            }
                        }
                        Ok(None) => { books.waiting.insert(t); }
                        Err(_) => {}
                    }
                }
                Step::Group { session, parts, class, policy } => {
                    request += 1;
                    let t = ticket(session, request);
                    let parts: Vec<Part> = parts
                        .iter()
                        .map(|&(d, gib, compute)| part(d.map_or(Placement::Any, Placement::Index), gib, compute))
                        .collect();
                    let uniform = parts.iter().all(|p| p == &part(Placement::Any, parts[0].vram_bytes / GIB, false))
                        && policy != PlacementPolicy::Near;
                    let expected: Vec<DeviceIdx> = documented_order(&l, policy, parts[0].vram_bytes)
                        .into_iter()
                        .take(parts.len())
                        .collect();
                    let spec = AcquireSpec { class, ..group(parts.clone(), policy) };
                    match l.acquire(now, t, spec) {
                        Ok(Some(id)) => {
                            books.check_grant(&l, id, &parts, policy);
                            if idle && uniform {
                                prop_assert_eq!(devices_of(&l, id), expected.clone(), "documented order");
                            }
                            books.granted.insert(id, (parts, policy));
                        }
                        Ok(None) => {
                            if idle && uniform {
                                prop_assert!(expected.len() < parts.len(), "it could have been granted on {:?}", expected);
                            }
                            books.waiting.insert(t);
                            books.asked.insert(t, (parts, policy));
                        }
                        Err(_) => {}
                    }
                }
                Step::Release { pick } => churn::release_one(&mut l, now, pick),
                Step::Revoke { pick } => churn::revoke_one(&mut l, now, pick),
                Step::Cancel { pick } => {
                    churn::cancel_one(&mut l, now, pick, &mut books.waiting, &mut books.asked)
                }
                Step::Disconnect { session } => {
                    churn::disconnect(&mut l, now, session, &mut books.waiting, &mut books.asked)
                }
            }
            for d in decisions(&mut l) {
                if let Decision::Granted { ticket, lease } = d {
                    books.granted(&l, ticket, lease);
                }
            }
            books.check(&l);
        }
        // Everyone else lets go, round after round: each round serves someone.
        while !books.waiting.is_empty() {
            let before = books.waiting.len();
            let held: Vec<(LeaseId, SessionId)> = l.leases().map(|x| (x.id, x.session)).collect();
            for (id, session) in held {
                if l.lease(id).is_some_and(|x| x.session == session) {
                    l.release(now, session, id).unwrap();
                }
                for d in decisions(&mut l) {
                    if let Decision::Granted { ticket, lease } = d {
                        books.granted(&l, ticket, lease);
                    }
                }
                books.check(&l);
            }
            prop_assert!(books.waiting.len() < before, "no one served in a round: {:#?}", l.waiters());
        }
    }
}
