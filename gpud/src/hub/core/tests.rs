//! The hub core on virtual time: admission, adoption after a restart, the journal's order and
//! timer, and the audit (unmanaged memory lowers capacity; over-use is reported, revoked and
//! its processes killed) — with no process, socket, file or sleep.

use std::time::Duration;

use gpud_proto::{ErrorCode, Event, Op, Outcome, Reply, RevokeReason, ServerFrame};

use super::bench::{Bench, DAEMON_PID, GIB, outcome, peer, sent_to};
use super::{Action, JournalEntry, KillReason, ProcessSample, Restorable, Signal};
use crate::config::{AuditConfig, Config, Limits, Policy};
use crate::ledger::{LedgerConfig, PerClass};

fn sample(pid: u32, used_bytes: u64, lineage: &[u32]) -> ProcessSample {
    ProcessSample {
        pid,
        used_bytes,
        lineage: lineage.to_vec(),
        name: format!("p{pid}"),
        start: u64::from(pid) * 10,
    }
}

fn code(o: Option<&Outcome>) -> Option<ErrorCode> {
    match o {
        Some(Outcome::Error(e)) => Some(e.code),
        _ => None,
    }
}

#[test]
fn admission_checks_access_then_the_session_limits() {
    let config = Config {
        limits: Limits {
            max_sessions: 4,
            max_sessions_per_uid: 2,
            ..Limits::default()
        },
        ..Config::default()
    };
    let mut b = Bench::new(&config);
    let stranger = b.open(1, peer(10, 4242)).unwrap_err();
    assert_eq!(stranger.code, ErrorCode::NotAllowed);
    let mut member = peer(11, 4243);
    member.groups = vec![500];
    b.open(2, member)
        .expect("a member of an allowed group may connect");
    b.open(3, peer(12, 1000)).unwrap();
    b.open(4, peer(13, 1000)).unwrap();
    let third = b.open(5, peer(14, 1000)).unwrap_err();
    assert_eq!(third.code, ErrorCode::LimitExceeded);
    assert!(third.message.contains("max_sessions_per_uid"), "{third:?}");
    b.open(6, peer(15, 2000)).unwrap();
    let full = b.open(8, peer(16, 2000)).unwrap_err();
    assert_eq!(full.code, ErrorCode::LimitExceeded);
    assert!(full.message.contains("(limits.max_sessions)"), "{full:?}");
    assert_eq!(b.core.sessions(), 4);
    // An admin may pass the cap, by a few sessions, so that an operator can always act.
    b.open(9, peer(17, 0))
        .expect("an admin session beyond max_sessions");
    assert_eq!(b.core.sessions(), 5);
    let now = b.now();
    b.core.close(now, 9);
    // A refused session's requests are not served.
    b.request(5, 1, Op::Ping);
    assert!(b.frames(5).is_empty());
    // Once one of uid 1000's sessions ends, it may open another.
    let now = b.now();
    b.core.close(now, 3);
    b.open(7, peer(14, 1000)).unwrap();
}

#[test]
fn per_session_limits_refuse_more_leases_and_waiters() {
    let config = Config {
        limits: Limits {
            max_leases_per_session: 1,
            max_outstanding_requests: 1,
            ..Limits::default()
        },
        ..Config::default()
    };
    let mut b = Bench::new(&config);
    b.open(1, peer(20, 0)).unwrap();
    b.acquire(1, 1, GIB, true);
    b.acquire(1, 2, GIB, false);
    let f = b.frames(1);
    assert!(matches!(
        outcome(&f, 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
    assert_eq!(code(outcome(&f, 2)), Some(ErrorCode::LimitExceeded));
    // With both compute slots held, session 2's first compute request waits.
    b.open(3, peer(22, 0)).unwrap();
    b.acquire(3, 1, 0, true);
    b.open(2, peer(21, 0)).unwrap();
    b.acquire(2, 1, 0, true);
    b.acquire(2, 2, 0, true);
    let f = b.frames(2);
    assert!(outcome(&f, 1).is_none(), "waits for a compute slot");
    assert_eq!(code(outcome(&f, 2)), Some(ErrorCode::LimitExceeded));
}

#[test]
fn one_uid_holds_and_waits_for_at_most_its_entries_across_sessions() {
    let config = Config {
        limits: Limits {
            max_entries_per_uid: 3,
            ..Limits::default()
        },
        ..Config::default()
    };
    let mut b = Bench::new(&config);
    b.open(1, peer(30, 1000)).unwrap();
    b.open(2, peer(31, 1000)).unwrap();
    b.open(3, peer(32, 2000)).unwrap();
    b.acquire(1, 1, GIB, false);
    b.acquire(1, 2, 0, true);
    // Another session of the same uid: its lease of the second device's compute is the uid's
    // third entry, and a fourth is refused.
    b.acquire(2, 1, 0, true);
    b.acquire(2, 3, GIB, false);
    let f = b.frames(2);
    assert_eq!(code(outcome(&f, 3)), Some(ErrorCode::LimitExceeded));
    let Some(Outcome::Error(e)) = outcome(&f, 3) else {
        unreachable!()
    };
    assert!(e.message.contains("limits.max_entries_per_uid"), "{e:?}");
    // Other uids are not held back by uid 1000's count.
    b.acquire(3, 1, GIB, false);
    assert!(matches!(
        outcome(&b.frames(3), 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
    // A release makes room again.
    b.request(1, 9, Op::Release { lease: 1 });
    b.acquire(2, 4, GIB, false);
    assert!(matches!(
        outcome(&b.frames(2), 4),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
}

#[test]
fn a_restored_lease_is_readopted_by_its_owner_with_its_token() {
    // Before the restart: a lease, journaled before its grant goes out.
    let mut before = Bench::new(&Config::default());
    let now = before.now();
    before
        .core
        .restore(now, Vec::new(), Duration::from_secs(10));
    before.actions();
    before.open(1, peer(77, 1000)).unwrap();
    before.acquire(1, 1, 2 * GIB, false);
    let actions = before.actions();
    let grant = actions
        .iter()
        .position(|a| matches!(a, Action::Journal(JournalEntry::Grant(_))))
        .expect("the grant is journaled");
    let flush = actions
        .iter()
        .position(|a| *a == Action::FlushJournal)
        .expect("and written");
    let reply = actions
        .iter()
        .position(|a| matches!(a, Action::Send { .. }))
        .expect("then announced");
    assert!(grant < flush && flush < reply, "{actions:?}");
    let Action::Journal(JournalEntry::Grant(record)) = actions[grant].clone() else {
        unreachable!()
    };
    let Some(Outcome::Ok(Reply::Granted(info))) = outcome(&sent_to(&actions, 1), 1).cloned() else {
        panic!("{actions:?}")
    };
    assert_eq!(record.token, info.token);
    assert_eq!((record.pid, record.pid_start, record.uid), (77, 770, 1000));

    // After it: the owner still runs; the owner of another lease is gone.
    let mut after = Bench::new(&Config::default());
    let mut gone = record.clone();
    gone.id = record.id + 1;
    let journaled = vec![
        Restorable {
            record: record.clone(),
            owner_alive: true,
        },
        Restorable {
            record: gone.clone(),
            owner_alive: false,
        },
    ];
    let now = after.now();
    after.core.restore(now, journaled, Duration::from_secs(10));
    let actions = after.actions();
    assert!(actions.contains(&Action::Journal(JournalEntry::Release(gone.id))));
    assert!(actions.contains(&Action::FlushJournal));
    assert_eq!(after.core.ledger().leases().count(), 1);
    assert_eq!(
        after.core.status(after.now()).devices[0].reserved_bytes,
        2 * GIB,
        "the restored lease keeps its memory reserved"
    );
    // Another uid with the token, and the owner with a wrong token, are refused alike.
    after.open(1, peer(90, 2000)).unwrap();
    after.request(
        1,
        1,
        Op::Adopt {
            lease: record.id,
            token: record.token.clone(),
        },
    );
    after.open(2, peer(78, 1000)).unwrap();
    after.request(
        2,
        1,
        Op::Adopt {
            lease: record.id,
            token: "0".repeat(32),
        },
    );
    after.request(
        2,
        2,
        Op::Adopt {
            lease: record.id,
            token: record.token.clone(),
        },
    );
    let actions = after.actions();
    assert_eq!(
        code(outcome(&sent_to(&actions, 1), 1)),
        Some(ErrorCode::UnknownLease)
    );
    let mine = sent_to(&actions, 2);
    assert_eq!(code(outcome(&mine, 1)), Some(ErrorCode::UnknownLease));
    assert!(
        matches!(outcome(&mine, 2), Some(Outcome::Ok(Reply::Adopted(i))) if i.lease == record.id),
        "{mine:?}"
    );
    // The new owner process is on file before it hears of the lease.
    assert!(actions.iter().any(
        |a| matches!(a, Action::Journal(JournalEntry::Grant(r)) if r.id == record.id && r.pid == 78)
    ));
    // Adopted: the grace period ends with nothing to drop (the lease's maximum hold is far).
    assert!(only_max_holds_left(&after));
    after.advance(Duration::from_secs(11));
    assert_eq!(after.core.ledger().leases().count(), 1);
}

#[test]
fn restored_leases_nobody_adopts_are_dropped_when_the_grace_ends() {
    let mut before = Bench::new(&Config::default());
    let now = before.now();
    before
        .core
        .restore(now, Vec::new(), Duration::from_secs(10));
    before.open(1, peer(77, 1000)).unwrap();
    before.acquire(1, 1, GIB, true);
    let record = before
        .actions()
        .into_iter()
        .find_map(|a| match a {
            Action::Journal(JournalEntry::Grant(r)) => Some(r),
            _ => None,
        })
        .unwrap();
    let mut after = Bench::new(&Config::default());
    let now = after.now();
    let journaled = vec![Restorable {
        record,
        owner_alive: true,
    }];
    after.core.restore(now, journaled, Duration::from_secs(10));
    assert_eq!(
        after.core.next_timeout(),
        Some(now.at + Duration::from_secs(10))
    );
    after.advance(Duration::from_millis(9_999));
    assert_eq!(after.core.ledger().leases().count(), 1);
    after.actions();
    after.advance(Duration::from_millis(1));
    assert_eq!(after.core.ledger().leases().count(), 0);
    // The release is written within the journal's delay, on the one timer table.
    let actions = after.actions();
    assert!(matches!(
        actions.as_slice(),
        [Action::Journal(JournalEntry::Release(_)), ..]
    ));
    assert!(!actions.contains(&Action::FlushJournal), "{actions:?}");
    after.advance(Duration::from_millis(20));
    assert_eq!(after.actions(), vec![Action::FlushJournal]);
    assert_eq!(after.core.next_timeout(), None);
}

/// A journal that says more than a device holds (written by a daemon with a larger device, or
/// tampered with): what does not fit is refused, never over-committed, and status counts it.
#[test]
fn journaled_leases_that_do_not_fit_are_refused_and_counted_in_status() {
    let record = |id: u64, vram_bytes: u64| crate::journal::LeaseRecord {
        id,
        token: format!("t{id}"),
        device_uuid: "GPU-fuzz-0".into(),
        vram_bytes,
        compute: false,
        class: gpud_proto::Class::Normal,
        pid: 77,
        pid_start: 770,
        uid: 1000,
        granted_unix_ms: 1_700_000_000_000,
        label: None,
        within: None,
        budget: None,
        evictable: false,
        group: None,
        cpus: Vec::new(),
    };
    let mut b = Bench::new(&Config::default());
    let now = b.now();
    b.core.journal_skipped(3);
    let journaled = [record(1, 10 * GIB), record(2, 10 * GIB), record(3, 6 * GIB)]
        .into_iter()
        .map(|record| Restorable {
            record,
            owner_alive: true,
        })
        .collect();
    b.core.restore(now, journaled, Duration::from_secs(10));
    let kept: Vec<u64> = b.core.ledger().leases().map(|l| l.id).collect();
    assert_eq!(kept, [1, 3], "the second does not fit beside the first");
    let device = b.core.ledger().devices().next().unwrap();
    assert!(device.reserved() <= 16 * GIB);
    let status = b.core.status(b.now());
    assert_eq!(status.daemon.journal_refused, 1);
    assert_eq!(status.daemon.journal_skipped, 3);
    let released: Vec<_> = b
        .actions()
        .into_iter()
        .filter(|a| matches!(a, Action::Journal(JournalEntry::Release(2))))
        .collect();
    assert_eq!(released.len(), 1, "the refused lease is journaled as gone");
}

/// A journaled lease of several devices comes back as a group only whole: one whose journal
/// names a device that is gone loses every part, one that is whole keeps its group.
#[test]
fn journaled_groups_are_restored_whole_or_not_at_all() {
    let part = |id: u64, device: usize, group: u64| crate::journal::LeaseRecord {
        id,
        token: format!("t{id}"),
        device_uuid: format!("GPU-fuzz-{device}"),
        vram_bytes: GIB,
        compute: true,
        class: gpud_proto::Class::Normal,
        pid: 77,
        pid_start: 770,
        uid: 1000,
        granted_unix_ms: 1_700_000_000_000,
        label: None,
        within: None,
        budget: None,
        evictable: false,
        group: Some(crate::journal::GroupRecord {
            id: group,
            parts: 2,
        }),
        cpus: Vec::new(),
    };
    let mut b = Bench::new(&Config::default());
    let now = b.now();
    // Group 1 is whole; group 3's second part was on a device this host no longer has.
    let journaled = [part(1, 0, 1), part(2, 1, 1), part(3, 0, 3), part(4, 7, 3)]
        .into_iter()
        .map(|record| Restorable {
            record,
            owner_alive: true,
        })
        .collect();
    b.core.restore(now, journaled, Duration::from_secs(10));
    let kept: Vec<(u64, Option<u64>)> = b.core.ledger().leases().map(|l| (l.id, l.group)).collect();
    assert_eq!(kept, [(1, Some(1)), (2, Some(1))]);
    assert_eq!(b.core.ledger().group_of(2), [1, 2]);
    let released: Vec<u64> = b
        .actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Journal(JournalEntry::Release(id)) => Some(id),
            _ => None,
        })
        .collect();
    assert!(
        released.contains(&3) && released.contains(&4),
        "{released:?}"
    );
}

#[test]
fn over_use_is_warned_revoked_and_killed_and_unmanaged_memory_lowers_capacity() {
    let config = Config {
        audit: AuditConfig {
            policy: Policy::Revoke,
            tolerance_bytes: 0,
            grace: Duration::ZERO,
            kill: true,
        },
        ..Config::default()
    };
    let mut b = Bench::new(&config);
    let pid = 4242;
    b.open(1, peer(pid, 0)).unwrap();
    b.acquire(1, 1, GIB, true);
    let granted = b.frames(1);
    assert!(matches!(
        granted.as_slice(),
        [ServerFrame::Reply {
            outcome: Outcome::Ok(Reply::Granted(_)),
            ..
        }]
    ));
    // The holder uses 2 GiB on device 0 against 1 GiB reserved (itself and a child of its);
    // a process without a lease that is no descendant of the holder uses 3 GiB.
    let stranger = 9999;
    let usage = vec![
        vec![
            sample(pid, GIB + GIB / 2, &[pid, 1]),
            sample(pid + 1, GIB / 2, &[pid + 1, pid, 1]),
            sample(stranger, 3 * GIB, &[stranger, 1]),
        ],
        vec![],
    ];
    let now = b.now();
    b.core.usage(now, usage.clone());
    let status = b.core.status(b.now());
    assert_eq!(status.devices[0].unmanaged_bytes, 3 * GIB);
    assert_eq!(status.devices[0].capacity_bytes, 13 * GIB);
    let procs = &status.devices[0].processes;
    assert!(
        procs
            .iter()
            .any(|p| p.pid == pid + 1 && p.owner_pid == Some(pid) && p.over_use)
    );
    assert!(
        procs
            .iter()
            .any(|p| p.pid == stranger && p.owner_pid.is_none() && !p.over_use)
    );
    // Warned, then (grace 0) revoked in the same poll.
    let got = b.frames(1);
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
    assert_eq!(b.core.ledger().leases().count(), 0);
    // Still holding the memory at the next poll: both processes are killed, once.
    let now = b.now();
    b.core.usage(now, usage.clone());
    let kills: Vec<(u32, u64)> = b
        .actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Signal {
                pid,
                start,
                signal: Signal::Kill,
                group: false,
                why:
                    KillReason::KeptMemory {
                        owner: 4242,
                        device: 0,
                    },
            } => Some((pid, start)),
            _ => None,
        })
        .collect();
    assert_eq!(kills, vec![(pid, 42420), (pid + 1, 42430)]);
    let now = b.now();
    b.core.usage(now, usage);
    assert!(
        !b.actions()
            .iter()
            .any(|a| matches!(a, Action::Signal { .. })),
        "killed once"
    );
    // Gone from the usage: resolved, and the unmanaged memory alone lowers capacity.
    let now = b.now();
    b.core.usage(
        now,
        vec![vec![sample(stranger, 3 * GIB, &[stranger, 1])], vec![]],
    );
    let status = b.core.status(b.now());
    assert_eq!(status.devices[0].capacity_bytes, 13 * GIB);
    assert!(status.devices[0].processes.iter().all(|p| !p.over_use));
}

#[test]
fn the_warn_policy_only_reports() {
    let mut b = Bench::new(&Config::default());
    let me = 4242;
    b.open(1, peer(me, 0)).unwrap();
    b.acquire(1, 1, GIB, false);
    b.frames(1);
    for _ in 0..3 {
        let now = b.now();
        b.core
            .usage(now, vec![vec![sample(me, 4 * GIB, &[me, 1])], vec![]]);
        b.advance(Duration::from_secs(1));
    }
    let got = b.frames(1);
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
        b.core.ledger().leases().count(),
        1,
        "the warn policy revokes nothing"
    );
    // Memory used by the holder itself is not unmanaged.
    assert_eq!(b.core.status(b.now()).devices[0].unmanaged_bytes, 0);
}

#[test]
fn a_compute_holder_over_its_max_hold_is_asked_to_yield_revoked_then_killed() {
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
    let mut b = Bench::new(&config);
    let holder = 4242;
    b.open(1, peer(holder, 0)).unwrap();
    // The daemon itself holds a lease too: it is never killed.
    b.open(2, peer(DAEMON_PID, 0)).unwrap();
    b.acquire(1, 1, 0, true);
    b.request(
        2,
        1,
        Op::Acquire(gpud_proto::AcquireArgs {
            compute: true,
            device: gpud_proto::Placement::Index(1),
            ..Default::default()
        }),
    );
    b.frames(1);
    b.advance(Duration::from_millis(99));
    assert!(b.frames(1).is_empty());
    b.advance(Duration::from_millis(1));
    let got = b.frames(1);
    assert!(
        matches!(
            got.as_slice(),
            [ServerFrame::Event {
                event: Event::YieldRequested {
                    revoke_in_ms: Some(50),
                    ..
                }
            }]
        ),
        "{got:?}"
    );
    b.advance(Duration::from_millis(50));
    let actions = b.actions();
    let got = sent_to(&actions, 1);
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
    let kills: Vec<u32> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Signal {
                pid,
                signal: Signal::Kill,
                why: KillReason::YieldIgnored { .. },
                ..
            } => Some(*pid),
            _ => None,
        })
        .collect();
    assert_eq!(
        kills,
        vec![holder],
        "the holder, not the daemon: {actions:?}"
    );
    assert_eq!(b.core.ledger().leases().count(), 0);
}

/// Carries out the actions as the shell does, reporting each journal write as `written`.
fn carry_out(b: &mut Bench, written: bool) -> Vec<Action> {
    let mut done = Vec::new();
    while let Some(action) = b.core.poll_action() {
        if action == Action::FlushJournal {
            let now = b.now();
            b.core.journal_flushed(now, written);
        }
        done.push(action);
    }
    done
}

/// Regression: with the disk full, grants were announced though the journal could not record
/// them, so a kill -9 and a restart forgot leases their holders had been told about.
#[test]
fn a_grant_the_journal_cannot_record_is_held_back_until_it_can() {
    let mut b = Bench::new(&Config::default());
    let now = b.now();
    b.core.restore(now, Vec::new(), Duration::from_secs(10));
    carry_out(&mut b, true);
    b.open(1, peer(30, 0)).unwrap();
    b.open(2, peer(31, 0)).unwrap();
    carry_out(&mut b, true);

    b.acquire(1, 1, 2 * GIB, false);
    let failed = carry_out(&mut b, false);
    assert!(
        failed.contains(&Action::FlushJournal),
        "the grant is written first"
    );
    assert!(sent_to(&failed, 1).is_empty(), "the grant is not announced");
    assert!(b.core.journal_stalled());
    // Another session is served; the holder's later answers queue behind its grant.
    b.request(2, 1, Op::Ping);
    b.request(1, 2, Op::Ping);
    let meanwhile = carry_out(&mut b, false);
    assert!(matches!(
        outcome(&sent_to(&meanwhile, 2), 1),
        Some(Outcome::Ok(Reply::Pong))
    ));
    assert!(sent_to(&meanwhile, 1).is_empty());
    // Retries that fail keep holding; the first that succeeds lets everything out, in order.
    b.advance(super::withheld::RETRY);
    assert!(sent_to(&carry_out(&mut b, false), 1).is_empty());
    b.advance(super::withheld::RETRY);
    let after = sent_to(&carry_out(&mut b, true), 1);
    assert!(
        matches!(
            after.as_slice(),
            [
                ServerFrame::Reply {
                    id: 1,
                    outcome: Outcome::Ok(Reply::Granted(_))
                },
                ServerFrame::Reply {
                    id: 2,
                    outcome: Outcome::Ok(Reply::Pong)
                },
            ]
        ),
        "{after:?}"
    );
    assert!(!b.core.journal_stalled());
    assert!(only_max_holds_left(&b), "no retry once written");
}

/// Whether the only deadlines left are leases' maximum holds (an hour away at least).
fn only_max_holds_left(b: &Bench) -> bool {
    let now = b.now().at;
    b.core
        .next_timeout()
        .is_none_or(|at| at >= now + Duration::from_secs(3600))
}

/// Regression: anyone allowed could ask for the critical class, and so have another user's
/// compute phase asked to yield, revoked and (with kill_ignored_yield) killed.
#[test]
fn only_those_listed_may_ask_for_the_critical_class() {
    let mut b = Bench::new(&Config::default());
    b.open(1, peer(40, 1000)).unwrap();
    b.open(2, peer(41, 0)).unwrap();
    let critical = |vram_bytes| gpud_proto::AcquireArgs {
        vram_bytes,
        class: gpud_proto::Class::Critical,
        ..gpud_proto::AcquireArgs::default()
    };
    b.request(1, 1, Op::Acquire(critical(GIB)));
    b.request(2, 1, Op::Acquire(critical(GIB)));
    let actions = b.actions();
    let user = sent_to(&actions, 1);
    assert_eq!(code(outcome(&user, 1)), Some(ErrorCode::NotAllowed));
    let root = sent_to(&actions, 2);
    assert!(matches!(
        outcome(&root, 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
}

/// The `queued` events of `frames`: (request, position).
fn places(frames: &[ServerFrame]) -> Vec<(u64, u32)> {
    frames
        .iter()
        .filter_map(|f| match f {
            ServerFrame::Event {
                event: Event::Queued { request, position },
            } => Some((*request, *position)),
            _ => None,
        })
        .collect()
}

#[test]
fn waiters_that_ask_hear_their_place_when_it_changes_and_others_hear_nothing() {
    let mut b = Bench::new(&Config::default());
    for (session, uid) in [(1, 1000), (2, 1000), (3, 2000), (4, 0), (5, 2000)] {
        b.open(session, peer(100 + session as u32, uid)).unwrap();
    }
    let on = |device| gpud_proto::AcquireArgs {
        vram_bytes: 16 * GIB,
        device: gpud_proto::Placement::Index(device),
        ..Default::default()
    };
    b.request(1, 1, Op::Acquire(on(0)));
    b.request(1, 2, Op::Acquire(on(1)));
    let lease = match outcome(&b.frames(1), 1) {
        Some(Outcome::Ok(Reply::Granted(info))) => info.lease,
        other => panic!("{other:?}"),
    };
    let watching = |class| gpud_proto::AcquireArgs {
        vram_bytes: GIB,
        class,
        queued_events: true,
        ..Default::default()
    };
    b.request(2, 1, Op::Acquire(watching(gpud_proto::Class::Normal)));
    assert_eq!(places(&b.frames(2)), [(1, 1)], "the first to wait is next");
    b.request(3, 7, Op::Acquire(watching(gpud_proto::Class::Normal)));
    assert_eq!(places(&b.frames(3)), [(7, 2)]);
    // One that did not ask is counted, and told nothing.
    b.acquire(5, 1, GIB, false);
    assert!(places(&b.frames(5)).is_empty());
    // A higher class goes first: the others move back.
    b.request(4, 1, Op::Acquire(watching(gpud_proto::Class::High)));
    let actions = b.actions();
    assert_eq!(places(&sent_to(&actions, 4)), [(1, 1)]);
    assert_eq!(places(&sent_to(&actions, 2)), [(1, 2)]);
    assert_eq!(places(&sent_to(&actions, 3)), [(7, 3)]);
    // A place that does not change is not told again.
    b.request(2, 9, Op::Ping);
    assert!(places(&b.frames(2)).is_empty());
    // One ahead leaves: the one behind moves up.
    b.request(2, 2, Op::Cancel { request: 1 });
    let actions = b.actions();
    assert!(
        places(&sent_to(&actions, 2)).is_empty(),
        "the cancelled one hears no more"
    );
    assert_eq!(places(&sent_to(&actions, 3)), [(7, 2)]);
    // A release grants the first; the next moves up, the granted one hears its grant only.
    b.request(1, 3, Op::Release { lease });
    let actions = b.actions();
    let first = sent_to(&actions, 4);
    assert!(matches!(
        outcome(&first, 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
    assert!(places(&first).is_empty(), "{first:?}");
    // 15 GiB are free on device 0 now: the next is granted as well, and hears no place.
    let got = sent_to(&actions, 3);
    assert!(
        matches!(outcome(&got, 7), Some(Outcome::Ok(Reply::Granted(_)))),
        "{got:?}"
    );
    assert!(places(&got).is_empty(), "{got:?}");
}
