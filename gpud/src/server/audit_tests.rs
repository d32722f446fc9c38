//! The audit as the hub applies it: unmanaged memory lowers capacity, over-use is reported to
//! the holder, revoked, and its processes killed.

use std::process::Command as Process;
use std::time::Duration;

use gpud_proto::{AcquireArgs, Event, Op, Outcome, Reply, RevokeReason, ServerFrame};
use tokio::sync::mpsc;

use super::fuzz::hub_with;
use super::hub::Command;
use crate::backend::ProcessUsage;
use crate::config::Config;
use crate::server::audit::{AuditConfig, Policy};

const GIB: u64 = 1 << 30;

fn frames(rx: &mut mpsc::Receiver<ServerFrame>) -> Vec<ServerFrame> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[test]
fn over_use_is_warned_revoked_and_killed_and_unmanaged_memory_lowers_capacity() {
    // The lease holder is a real process of our own, so that the kill hits it and nothing else.
    let mut owner = Process::new("sleep").arg("30").spawn().unwrap();
    let pid = owner.id();
    let config = Config {
        audit: AuditConfig {
            policy: Policy::Revoke,
            tolerance_bytes: 0,
            grace: Duration::ZERO,
            kill: true,
        },
        ..Config::default()
    };
    let (mut hub, mut rx) = hub_with(&config, pid);
    let acquire = AcquireArgs {
        vram_bytes: GIB,
        compute: true,
        ..AcquireArgs::default()
    };
    hub.apply(Command::Request {
        session: 1,
        id: 1,
        op: Op::Acquire(acquire),
    });
    let granted = frames(&mut rx);
    assert!(matches!(
        granted.as_slice(),
        [ServerFrame::Reply {
            outcome: Outcome::Ok(Reply::Granted(_)),
            ..
        }]
    ));
    // The holder uses 2 GiB on device 0 against 1 GiB reserved; a process without a lease (a pid
    // that is no descendant of the holder) uses 3 GiB.
    let stranger = u32::MAX - 1;
    let usage = vec![
        vec![
            ProcessUsage {
                pid,
                used_bytes: 2 * GIB,
            },
            ProcessUsage {
                pid: stranger,
                used_bytes: 3 * GIB,
            },
        ],
        vec![],
    ];
    hub.apply(Command::Usage(usage.clone()));
    let status = hub.status(std::time::Instant::now());
    assert_eq!(status.devices[0].unmanaged_bytes, 3 * GIB);
    assert_eq!(status.devices[0].capacity_bytes, 13 * GIB);
    let procs = &status.devices[0].processes;
    assert!(
        procs
            .iter()
            .any(|p| p.pid == pid && p.owner_pid == Some(pid) && p.over_use)
    );
    assert!(
        procs
            .iter()
            .any(|p| p.pid == stranger && p.owner_pid.is_none() && !p.over_use)
    );
    // Warned, then (grace 0) revoked in the same poll.
    let got = frames(&mut rx);
    assert!(
        got.iter().any(|f| matches!(f, ServerFrame::Event { event: Event::OverUse { used_bytes, reserved_bytes, .. } } if *used_bytes == 2 * GIB && *reserved_bytes == GIB)),
        "{got:?}"
    );
    assert!(
        got.iter().any(|f| matches!(
            f,
            ServerFrame::Event {
                event: Event::Revoked {
                    reason: RevokeReason::OverUse,
                    ..
                }
            }
        )),
        "{got:?}"
    );
    assert_eq!(hub.ledger().leases().count(), 0);
    // Still holding the memory at the next poll: killed.
    hub.apply(Command::Usage(usage));
    let status = owner.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "the over-using process was killed"
    );
    // Gone from the usage: resolved, and the unmanaged memory alone lowers capacity.
    hub.apply(Command::Usage(vec![
        vec![ProcessUsage {
            pid: stranger,
            used_bytes: 3 * GIB,
        }],
        vec![],
    ]));
    let status = hub.status(std::time::Instant::now());
    assert_eq!(status.devices[0].capacity_bytes, 13 * GIB);
    assert!(status.devices[0].processes.iter().all(|p| !p.over_use));
}

#[test]
fn the_warn_policy_only_reports() {
    let (mut hub, mut rx) = hub_with(&Config::default(), std::process::id());
    let acquire = AcquireArgs {
        vram_bytes: GIB,
        ..AcquireArgs::default()
    };
    hub.apply(Command::Request {
        session: 1,
        id: 1,
        op: Op::Acquire(acquire),
    });
    frames(&mut rx);
    let me = std::process::id();
    for _ in 0..3 {
        hub.apply(Command::Usage(vec![
            vec![ProcessUsage {
                pid: me,
                used_bytes: 4 * GIB,
            }],
            vec![],
        ]));
    }
    let got = frames(&mut rx);
    let warnings = got
        .iter()
        .filter(|f| {
            matches!(
                f,
                ServerFrame::Event {
                    event: Event::OverUse { .. }
                }
            )
        })
        .count();
    assert_eq!(warnings, 1, "warned once: {got:?}");
    assert_eq!(
        hub.ledger().leases().count(),
        1,
        "the warn policy revokes nothing"
    );
    // Memory used by the holder itself is not unmanaged.
    assert_eq!(
        hub.status(std::time::Instant::now()).devices[0].unmanaged_bytes,
        0
    );
}

#[test]
fn a_compute_holder_over_its_max_hold_is_asked_to_yield_revoked_then_killed() {
    use crate::ledger::{LedgerConfig, PerClass};
    let mut holder = Process::new("sleep").arg("30").spawn().unwrap();
    let config = Config {
        scheduler: LedgerConfig {
            max_hold: PerClass {
                normal: Some(Duration::from_millis(100)),
                ..PerClass::default()
            },
            revoke_after_yield: Some(Duration::from_millis(50)),
            ..LedgerConfig::default()
        },
        kill_ignored_yield: true,
        ..Config::default()
    };
    let (mut hub, mut rx) = hub_with(&config, holder.id());
    let start = std::time::Instant::now();
    let acquire = AcquireArgs {
        compute: true,
        ..AcquireArgs::default()
    };
    hub.apply(Command::Request {
        session: 1,
        id: 1,
        op: Op::Acquire(acquire),
    });
    frames(&mut rx);
    hub.tick(start + Duration::from_millis(99));
    assert!(frames(&mut rx).is_empty());
    hub.tick(start + Duration::from_millis(150));
    let got = frames(&mut rx);
    assert!(
        matches!(
            got.as_slice(),
            [ServerFrame::Event {
                event: Event::YieldRequested {
                    revoke_in_ms: Some(_),
                    ..
                }
            }]
        ),
        "{got:?}"
    );
    hub.tick(start + Duration::from_secs(1));
    let got = frames(&mut rx);
    assert!(
        matches!(
            got.as_slice(),
            [ServerFrame::Event {
                event: Event::Revoked {
                    reason: RevokeReason::YieldIgnored,
                    ..
                }
            }]
        ),
        "{got:?}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(holder.wait().unwrap().signal(), Some(9));
    assert_eq!(hub.ledger().leases().count(), 0);
}
