//! Host resources in the ledger (docs/HOST.md): host memory, page-locked memory and CPUs of
//! NUMA nodes are pools after the GPUs; a request with host parts is a group, granted whole
//! or not at all; nothing is over-committed on any pool; compute is only ever on GPUs; CPUs
//! asked `near` are on the node of the group's GPUs; everything waiting is served once the
//! holders let go.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, Class, Decision, DeviceIdx, DeviceSpec, LeaseId, Ledger, LedgerConfig,
    LedgerError, Part, Placement, PlacementPolicy, PoolKind, ResizeOutcome, RestoredLease,
    SessionId, Ticket, Topology,
};
use proptest::prelude::*;

use crate::{GIB, churn, sim_devices};

/// Ledger indices of the pools of [`ledger`].
const MEMORY: DeviceIdx = 2;
const PINNED: DeviceIdx = 3;
const NUMA0: DeviceIdx = 4;
const NUMA1: DeviceIdx = 5;

/// Two 16 GiB GPUs with one compute slot (GPU 0 on NUMA node 0, GPU 1 on node 1), 32 GiB of
/// host memory, 8 GiB page-locked, 4 CPUs per node. The host pools are given first: the
/// ledger puts them after the GPUs.
fn ledger(max_overtakes: u32) -> Ledger {
    let mut pools = vec![
        DeviceSpec::host_pool(PoolKind::HostMemory, "host-memory", 34 * GIB, 2 * GIB, None),
        DeviceSpec::host_pool(PoolKind::Pinned, "host-pinned", 8 * GIB, 0, None),
        DeviceSpec::host_pool(PoolKind::Cpus, "numa0", 4, 0, Some(0)),
        DeviceSpec::host_pool(PoolKind::Cpus, "numa1", 4, 0, Some(1)),
    ];
    let mut gpus = sim_devices(2, 1);
    for (i, d) in gpus.iter_mut().enumerate() {
        d.topology = Topology {
            numa_node: Some(i as u32),
            nvlink_island: None,
        };
    }
    pools.extend(gpus);
    let config = LedgerConfig {
        max_overtakes,
        ..LedgerConfig::default()
    };
    Ledger::new(config, pools)
}

fn ticket(session: SessionId, request: u64) -> Ticket {
    Ticket { session, request }
}

fn spec(parts: Vec<Part>) -> AcquireSpec {
    AcquireSpec {
        placement: Placement::Any,
        vram_bytes: 0,
        compute: false,
        parts,
        policy: PlacementPolicy::BestFit,
        class: Class::Normal,
        timeout: None,
        label: None,
        within: None,
        budget: None,
        evictable: false,
    }
}

fn mem(gib: u64) -> Part {
    Part::host(PoolKind::HostMemory, Placement::Any, gib * GIB)
}

fn pinned(gib: u64) -> Part {
    Part::host(PoolKind::Pinned, Placement::Any, gib * GIB)
}

fn cpus(n: u64, at: Placement, near: bool) -> Part {
    let mut p = Part::host(PoolKind::Cpus, at, n);
    p.same_node = near;
    p
}

fn gpu(at: Placement, gib: u64, compute: bool) -> Part {
    Part::gpu(at, gib * GIB, compute)
}

fn decisions(l: &mut Ledger) -> Vec<Decision> {
    std::iter::from_fn(|| l.poll_decision()).collect()
}

fn reserved(l: &Ledger, d: DeviceIdx) -> u64 {
    l.pool(d).unwrap().reserved()
}

#[test]
fn host_pools_come_after_the_gpus_and_devices_lists_only_gpus() {
    let l = ledger(4);
    let gpus: Vec<String> = l.devices().map(|d| d.spec().uuid.clone()).collect();
    assert_eq!(gpus, vec!["GPU-0", "GPU-1"]);
    let pools: Vec<(DeviceIdx, PoolKind)> =
        l.host_pools().map(|p| (p.index(), p.spec().kind)).collect();
    assert_eq!(
        pools,
        vec![
            (MEMORY, PoolKind::HostMemory),
            (PINNED, PoolKind::Pinned),
            (NUMA0, PoolKind::Cpus),
            (NUMA1, PoolKind::Cpus)
        ]
    );
    assert!(l.device(MEMORY).is_none(), "a host pool is no device");
    assert_eq!(l.pool(MEMORY).unwrap().capacity(), 32 * GIB);
    assert_eq!(l.host_pool(PoolKind::Cpus, Some("numa1")), Some(NUMA1));
    assert_eq!(l.host_pool(PoolKind::Pinned, None), Some(PINNED));
    assert_eq!(l.pool(NUMA0).unwrap().spec().slots_for(Class::Critical), 0);
}

#[test]
fn host_memory_requests_that_do_not_fit_together_are_served_one_after_the_other() {
    let mut l = ledger(4);
    let now = Instant::now();
    let first = l
        .acquire(
            now,
            ticket(1, 1),
            spec(vec![mem(20), cpus(2, Placement::Any, false)]),
        )
        .unwrap()
        .expect("fits");
    assert_eq!(l.group_of(first).len(), 2);
    assert_eq!(reserved(&l, MEMORY), 20 * GIB);
    assert_eq!(
        l.acquire(now, ticket(2, 1), spec(vec![mem(20)])),
        Ok(None),
        "20 + 20 > 32"
    );
    // A single device lease is not held back by it.
    let plain = AcquireSpec {
        vram_bytes: 4 * GIB,
        ..spec(Vec::new())
    };
    assert!(l.acquire(now, ticket(3, 1), plain).unwrap().is_some());
    l.release(now, 1, first).unwrap();
    let ds = decisions(&mut l);
    assert!(
        matches!(ds.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == ticket_of(2)),
        "{ds:?}"
    );
    assert_eq!(reserved(&l, MEMORY), 20 * GIB);
    assert_eq!(reserved(&l, NUMA0) + reserved(&l, NUMA1), 0);
    l.check_invariants().unwrap();
}

fn ticket_of(session: SessionId) -> Ticket {
    ticket(session, 1)
}

#[test]
fn a_device_and_host_lease_is_all_or_nothing() {
    let mut l = ledger(4);
    let now = Instant::now();
    let full = AcquireSpec {
        vram_bytes: 16 * GIB,
        placement: Placement::Index(0),
        ..spec(Vec::new())
    };
    let filler = l.acquire(now, ticket(9, 1), full).unwrap().unwrap();
    let asked = spec(vec![
        gpu(Placement::Index(0), 8, true),
        mem(4),
        pinned(2),
        cpus(1, Placement::Any, false),
    ]);
    assert_eq!(l.acquire(now, ticket(1, 1), asked), Ok(None));
    for d in [MEMORY, PINNED, NUMA0, NUMA1] {
        assert_eq!(
            reserved(&l, d),
            0,
            "nothing of the host is held while it waits"
        );
    }
    l.release(now, 9, filler).unwrap();
    let ds = decisions(&mut l);
    let [Decision::Granted { lease, .. }] = ds.as_slice() else {
        panic!("{ds:?}")
    };
    let parts: Vec<DeviceIdx> = l
        .group_of(*lease)
        .iter()
        .map(|p| l.lease(*p).unwrap().device)
        .collect();
    assert_eq!(parts[..3], [0, MEMORY, PINNED]);
    assert!(parts[3] == NUMA0 || parts[3] == NUMA1);
    assert_eq!(
        l.group_of(*lease)[0],
        *lease,
        "the group's id is its device part's"
    );
    // Ending any part ends them all.
    let cpu_part = l.group_of(*lease)[3];
    l.release(now, 1, cpu_part).unwrap();
    assert_eq!(l.leases().count(), 0);
    for d in [0, MEMORY, PINNED, NUMA0, NUMA1] {
        assert_eq!(reserved(&l, d), 0);
    }
    l.check_invariants().unwrap();
}

#[test]
fn near_places_the_cpus_on_the_node_of_the_gpu() {
    let mut l = ledger(4);
    let now = Instant::now();
    let on_one = spec(vec![
        gpu(Placement::Index(1), 1, false),
        cpus(3, Placement::Any, true),
    ]);
    let id = l.acquire(now, ticket(1, 1), on_one).unwrap().unwrap();
    assert_eq!(l.lease(l.group_of(id)[1]).unwrap().device, NUMA1);
    // Node 1 has one CPU left: a GPU part on any device, with 2 CPUs near, goes to GPU 0.
    let any = spec(vec![
        gpu(Placement::Any, 1, false),
        cpus(2, Placement::Any, true),
    ]);
    let id = l.acquire(now, ticket(2, 1), any).unwrap().unwrap();
    let devices: Vec<DeviceIdx> = l
        .group_of(id)
        .iter()
        .map(|p| l.lease(*p).unwrap().device)
        .collect();
    assert_eq!(devices, vec![0, NUMA0]);
    // GPU 1 with 2 CPUs near must wait for node 1 even though node 0 has CPUs.
    let wait = spec(vec![
        gpu(Placement::Index(1), 1, false),
        cpus(2, Placement::Any, true),
    ]);
    assert_eq!(l.acquire(now, ticket(3, 1), wait), Ok(None));
    l.check_invariants().unwrap();
}

#[test]
fn nonsense_host_requests_are_refused_with_what_was_wrong() {
    let mut l = ledger(4);
    let now = Instant::now();
    let mut computing = mem(1);
    computing.compute = true;
    assert!(matches!(
        l.acquire(now, ticket(1, 1), spec(vec![computing])),
        Err(LedgerError::Invalid(m)) if m.contains("compute")
    ));
    let near_alone = spec(vec![cpus(1, Placement::Any, true)]);
    assert!(matches!(
        l.acquire(now, ticket(1, 2), near_alone),
        Err(LedgerError::Invalid(m)) if m.contains("device part")
    ));
    let e = l
        .acquire(
            now,
            ticket(1, 3),
            spec(vec![cpus(5, Placement::Any, false)]),
        )
        .unwrap_err();
    assert!(
        matches!(&e, LedgerError::HostNeverFits { pool, need: 5, capacity: 4, .. } if pool == "numa0"),
        "{e:?}"
    );
    assert!(e.to_string().contains("5 CPUs"), "{e}");
    let e = l
        .acquire(now, ticket(1, 4), spec(vec![mem(40)]))
        .unwrap_err();
    assert!(e.to_string().contains("host memory"), "{e}");
    // A host pool is not a device to name for device memory.
    let at_pool = AcquireSpec {
        vram_bytes: GIB,
        placement: Placement::Index(MEMORY as u32),
        ..spec(Vec::new())
    };
    assert!(matches!(
        l.acquire(now, ticket(1, 5), at_pool),
        Err(LedgerError::UnknownDevice(_))
    ));
    // A CPU part on the memory pool is on no pool of its kind.
    assert!(matches!(
        l.acquire(
            now,
            ticket(1, 6),
            spec(vec![cpus(1, Placement::Index(MEMORY as u32), false)])
        ),
        Err(LedgerError::UnknownDevice(_))
    ));
    // Near for CPUs on no node of the GPUs' (GPU 1 on node 1, CPUs named on node 0).
    let apart = spec(vec![
        gpu(Placement::Index(1), 1, false),
        cpus(1, Placement::Index(NUMA0 as u32), true),
    ]);
    assert!(matches!(
        l.acquire(now, ticket(1, 7), apart),
        Err(LedgerError::Invalid(m)) if m.contains("NUMA node")
    ));
    assert_eq!(l.leases().count(), 0);
    assert!(l.waiters().is_empty());
    l.check_invariants().unwrap();
}

#[test]
fn host_memory_grows_when_there_is_room_and_shrinks_at_once() {
    let mut l = ledger(4);
    let now = Instant::now();
    let a = l
        .acquire(now, ticket(1, 1), spec(vec![mem(16)]))
        .unwrap()
        .unwrap();
    let b = l
        .acquire(now, ticket(2, 1), spec(vec![mem(16)]))
        .unwrap()
        .unwrap();
    assert_eq!(
        l.resize(now, ticket(1, 2), a, 20 * GIB, None),
        Ok(ResizeOutcome::Waiting)
    );
    assert_eq!(
        l.resize(now, ticket(2, 2), b, 12 * GIB, None),
        Ok(ResizeOutcome::Done {
            vram_bytes: 12 * GIB
        })
    );
    let ds = decisions(&mut l);
    assert!(
        ds.iter().any(|d| matches!(d, Decision::Grew { lease, vram_bytes, .. } if *lease == a && *vram_bytes == 20 * GIB)),
        "{ds:?}"
    );
    assert_eq!(reserved(&l, MEMORY), 32 * GIB);
    l.check_invariants().unwrap();
}

#[test]
fn a_disconnect_frees_every_host_part() {
    let mut l = ledger(4);
    let now = Instant::now();
    l.acquire(
        now,
        ticket(1, 1),
        spec(vec![
            gpu(Placement::Any, 2, true),
            mem(8),
            pinned(4),
            cpus(4, Placement::Any, true),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(l.acquire(now, ticket(2, 1), spec(vec![mem(30)])), Ok(None));
    l.disconnect(now, 1);
    let ds = decisions(&mut l);
    assert!(
        matches!(ds.as_slice(), [Decision::Granted { ticket, .. }] if ticket.session == 2),
        "{ds:?}"
    );
    assert_eq!(
        reserved(&l, PINNED) + reserved(&l, NUMA0) + reserved(&l, NUMA1),
        0
    );
    l.check_invariants().unwrap();
}

#[test]
fn restored_host_parts_are_a_group_again_and_no_restored_host_part_computes() {
    let mut l = ledger(4);
    let now = Instant::now();
    let part = |id, device, amount| RestoredLease {
        id,
        device,
        vram_bytes: amount,
        compute: false,
        class: Class::Normal,
        granted_at: now,
        label: None,
        within: None,
        budget_compute_slots: None,
        evictable: false,
        group: Some(7),
    };
    l.restore(0, part(7, 0, GIB)).unwrap();
    l.restore(0, part(8, MEMORY, 4 * GIB)).unwrap();
    l.restore(0, part(9, NUMA1, 2)).unwrap();
    assert_eq!(l.group_of(9), vec![7, 8, 9]);
    assert_eq!(reserved(&l, NUMA1), 2);
    let computing = RestoredLease {
        compute: true,
        ..part(10, NUMA0, 1)
    };
    assert!(l.restore(0, computing).is_err());
    l.check_invariants().unwrap();
}

// ------------------------------------------------------------------ random runs

#[derive(Debug, Clone)]
enum Step {
    Ask {
        session: SessionId,
        /// A GPU part: which GPU, GiB, compute.
        gpu: Option<(Option<u32>, u64, bool)>,
        mem: Option<u64>,
        pinned: Option<u64>,
        /// CPUs: how many, and where (None: any; Some(None): near; Some(Some(n)): node n).
        cpus: Option<(u64, Option<Option<u32>>)>,
        class: Class,
    },
    Grow {
        pick: usize,
        gib: u64,
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

fn step() -> impl Strategy<Value = Step> {
    let gpu = prop::option::weighted(
        0.5,
        (
            prop::option::weighted(0.3, 0..2u32),
            1..17u64,
            any::<bool>(),
        ),
    );
    let cpus = prop::option::weighted(
        0.6,
        (
            1..5u64,
            prop::option::weighted(0.5, prop::option::weighted(0.5, 0..2u32)),
        ),
    );
    prop_oneof![
        4 => (
            1..6u64,
            gpu,
            prop::option::weighted(0.6, 1..33u64),
            prop::option::weighted(0.3, 1..9u64),
            cpus,
            prop::sample::select(Class::ALL.to_vec()),
        )
            .prop_map(|(session, gpu, mem, pinned, cpus, class)| Step::Ask {
                session,
                gpu,
                mem,
                pinned,
                cpus,
                class
            }),
        1 => (any::<usize>(), 1..33u64).prop_map(|(pick, gib)| Step::Grow { pick, gib }),
        3 => any::<usize>().prop_map(|pick| Step::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Step::Revoke { pick }),
        1 => any::<usize>().prop_map(|pick| Step::Cancel { pick }),
        1 => (1..6u64).prop_map(|session| Step::Disconnect { session }),
    ]
}

/// The parts of an `Ask`, as the hub builds them (page-locked memory counts as host memory).
fn parts_of(step: &Step) -> Vec<Part> {
    let Step::Ask {
        gpu: g,
        mem: m,
        pinned: p,
        cpus: c,
        ..
    } = step
    else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    if let Some((d, gib, compute)) = *g {
        parts.push(gpu(
            d.map_or(Placement::Any, Placement::Index),
            gib,
            compute,
        ));
    }
    let memory = m.unwrap_or(0).max(p.unwrap_or(0));
    if memory > 0 {
        parts.push(mem(memory));
    }
    if let Some(gib) = *p {
        parts.push(pinned(gib));
    }
    if let Some((n, at)) = *c {
        parts.push(match at {
            None => cpus(n, Placement::Any, false),
            Some(None) => cpus(n, Placement::Any, true),
            Some(Some(node)) => cpus(n, Placement::Index((NUMA0 as u32) + node), false),
        });
    }
    parts
}

/// What a run knows: the groups asked and granted, and what is still waiting.
#[derive(Default)]
struct Books {
    asked: BTreeMap<Ticket, Vec<Part>>,
    granted: BTreeMap<LeaseId, Vec<Part>>,
    waiting: BTreeSet<Ticket>,
}

impl Books {
    fn granted(&mut self, l: &Ledger, t: Ticket, id: LeaseId) {
        assert!(
            self.waiting.remove(&t),
            "{t:?} answered twice or never waited"
        );
        if let Some(parts) = self.asked.remove(&t) {
            check_grant(l, id, &parts);
            self.granted.insert(id, parts);
        }
    }

    /// After every step: groups whole or gone; no pool over its capacity; compute only on
    /// GPUs, within their slots.
    fn check(&mut self, l: &Ledger) {
        self.granted.retain(|&id, parts| {
            let held = l.leases().filter(|x| x.group == Some(id)).count();
            assert!(
                held == 0 || held == parts.len(),
                "group {id} holds {held} of {} parts",
                parts.len()
            );
            held > 0
        });
        for p in l.devices().chain(l.host_pools()) {
            assert!(
                p.reserved() <= p.capacity(),
                "pool {} over capacity: {} > {}",
                p.index(),
                p.reserved(),
                p.capacity()
            );
            let holders = p.compute_holders().count();
            if p.spec().kind.is_gpu() {
                assert!(holders <= p.spec().compute_slots as usize);
            } else {
                assert_eq!(holders, 0, "compute on host pool {}", p.index());
            }
        }
        for lease in l.leases() {
            let kind = l.pool(lease.device).unwrap().spec().kind;
            assert!(
                kind.is_gpu() || !lease.compute,
                "lease {} computes on a host pool",
                lease.id
            );
        }
        l.check_invariants().unwrap();
    }
}

/// A granted group: every part as asked, on a pool of its kind, near CPUs on the GPU's node.
fn check_grant(l: &Ledger, id: LeaseId, parts: &[Part]) {
    let leases = l.group_of(id);
    assert_eq!(leases.len(), parts.len(), "group {id} granted whole");
    let gpu_node = leases
        .iter()
        .map(|p| l.lease(*p).unwrap().device)
        .find(|&d| l.pool(d).unwrap().spec().kind.is_gpu())
        .and_then(|d| l.pool(d).unwrap().spec().topology.numa_node);
    for (lease, asked) in leases.iter().zip(parts) {
        let got = l.lease(*lease).unwrap();
        let pool = l.pool(got.device).unwrap();
        assert_eq!(pool.spec().kind, asked.kind, "part on a pool of its kind");
        assert_eq!(
            (got.vram_bytes, got.compute),
            (asked.vram_bytes, asked.compute)
        );
        if let Placement::Index(d) = asked.placement {
            assert_eq!(got.device, d as usize);
        }
        if asked.same_node {
            assert_eq!(
                pool.spec().topology.numa_node,
                gpu_node,
                "near CPUs on the GPU's node"
            );
        }
    }
}

fn served(l: &mut Ledger, books: &mut Books) {
    for d in decisions(l) {
        match d {
            Decision::Granted { ticket, lease } => books.granted(l, ticket, lease),
            Decision::TimedOut { ticket } => {
                books.waiting.remove(&ticket);
            }
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Random runs of requests mixing GPU and host parts: no pool is over-committed, groups
    /// are granted whole or not at all, compute stays on GPUs, near CPUs share the GPU's node,
    /// and once everything held is released (round after round) every request is served.
    #[test]
    fn host_and_device_parts_are_atomic_never_over_committed_and_all_served(
        steps in prop::collection::vec(step(), 1..60),
        max_overtakes in 0..4u32,
    ) {
        let mut l = ledger(max_overtakes);
        let mut now = Instant::now();
        let mut request = 0;
        let mut books = Books::default();
        for s in &steps {
            now += Duration::from_millis(1);
            match s {
                Step::Ask { session, class, .. } => {
                    let parts = parts_of(s);
                    if parts.is_empty() {
                        continue;
                    }
                    request += 1;
                    let t = ticket(*session, request);
                    let asked = AcquireSpec { class: *class, ..spec(parts.clone()) };
                    match l.acquire(now, t, asked) {
                        Ok(Some(id)) => {
                            if parts.len() > 1 || !parts[0].kind.is_gpu() {
                                check_grant(&l, id, &parts);
                                books.granted.insert(id, parts);
                            }
                        }
                        Ok(None) => {
                            books.waiting.insert(t);
                            books.asked.insert(t, parts);
                        }
                        Err(_) => {}
                    }
                }
                Step::Grow { pick, gib } => {
                    let memory: Vec<(LeaseId, SessionId)> = l
                        .leases()
                        .filter(|x| x.device == MEMORY && x.pending_grow.is_none())
                        .map(|x| (x.id, x.session))
                        .collect();
                    if !memory.is_empty() {
                        let (id, session) = memory[pick % memory.len()];
                        request += 1;
                        let t = ticket(session, request);
                        let timeout = Some(Duration::from_millis(5));
                        // A grow waits (and times out) like a request; its answer is not a grant.
                        let _ = l.resize(now, t, id, gib * GIB, timeout);
                    }
                }
                Step::Release { pick } => churn::release_one(&mut l, now, *pick),
                Step::Revoke { pick } => churn::revoke_one(&mut l, now, *pick),
                Step::Cancel { pick } => {
                    churn::cancel_one(&mut l, now, *pick, &mut books.waiting, &mut books.asked)
                }
                Step::Disconnect { session } => {
                    churn::disconnect(&mut l, now, *session, &mut books.waiting, &mut books.asked)
                }
            }
            l.handle_timeout(now);
            served(&mut l, &mut books);
            books.check(&l);
        }
        // Everyone lets go, round after round: each round serves someone.
        while !books.waiting.is_empty() {
            let before = books.waiting.len();
            now += Duration::from_millis(10);
            let held: Vec<(LeaseId, SessionId)> = l.leases().map(|x| (x.id, x.session)).collect();
            for (id, session) in held {
                if l.lease(id).is_some_and(|x| x.session == session) {
                    l.release(now, session, id).unwrap();
                }
                served(&mut l, &mut books);
                books.check(&l);
            }
            l.handle_timeout(now);
            served(&mut l, &mut books);
            prop_assert!(books.waiting.len() < before, "no one served in a round: {:#?}", l.waiters());
        }
        // Grows still waiting time out.
        now += Duration::from_millis(10);
        l.handle_timeout(now);
        served(&mut l, &mut books);
        prop_assert!(l.waiters().is_empty(), "waiting at the end: {:#?}", l.waiters());
    }
}
