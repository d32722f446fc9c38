//! Budgets through the hub core: who may create, lease from and end them, what the answers
//! say, and how the journal brings them back.

use std::time::Duration;

use gpud_proto::{
    AcquireArgs, BudgetArgs, BudgetInfo, EndBudgetArgs, ErrorCode, Event, Op, Outcome, Reply,
    RevokeReason, ServerFrame,
};

use super::bench::{Bench, GIB, outcome, peer, sent_to};
use super::{Action, JournalEntry, Restorable};
use crate::config::Config;

fn budget_args(job: &str, uid: u32, vram_gib: u64, compute_slots: u32) -> BudgetArgs {
    BudgetArgs {
        vram_bytes: vram_gib * GIB,
        compute_slots,
        job: job.into(),
        uid,
        ..BudgetArgs::default()
    }
}

fn member(handle: &str, vram_gib: u64, compute: bool) -> Op {
    Op::Acquire(AcquireArgs {
        vram_bytes: vram_gib * GIB,
        compute,
        budget: Some(handle.into()),
        ..AcquireArgs::default()
    })
}

/// A bench with root on session 1, and the budget it created for job 7 (uid 1000, 8 GiB).
fn with_budget(config: &Config) -> (Bench, BudgetInfo) {
    let mut b = Bench::new(config);
    b.open(1, peer(10, 0)).unwrap();
    b.request(1, 1, Op::CreateBudget(budget_args("7", 1000, 8, 1)));
    let frames = b.frames(1);
    let Some(Outcome::Ok(Reply::Budgets(budgets))) = outcome(&frames, 1) else {
        panic!("{frames:?}")
    };
    (b, budgets[0].clone())
}

fn error(frames: &[ServerFrame], id: u64) -> (ErrorCode, String) {
    match outcome(frames, id) {
        Some(Outcome::Error(e)) => (e.code, e.message.clone()),
        other => panic!("{other:?} in {frames:?}"),
    }
}

#[test]
fn only_admins_create_or_end_budgets() {
    let mut b = Bench::new(&Config::default());
    b.open(1, peer(10, 1000)).unwrap();
    b.request(1, 1, Op::CreateBudget(budget_args("7", 1000, 8, 1)));
    b.request(
        1,
        2,
        Op::EndBudget(EndBudgetArgs {
            job: Some("7".into()),
            budget: None,
        }),
    );
    let frames = b.frames(1);
    assert_eq!(error(&frames, 1).0, ErrorCode::PermissionDenied);
    assert_eq!(error(&frames, 2).0, ErrorCode::PermissionDenied);
    assert_eq!(b.core.ledger().leases().count(), 0);
}

#[test]
fn the_jobs_uid_leases_from_the_budget_with_its_handle_and_others_cannot() {
    let (mut b, budget) = with_budget(&Config::default());
    let handle = budget.handle.clone().expect("root sees the handle");
    assert_eq!(
        (budget.vram_bytes, budget.compute_slots, budget.job.as_str()),
        (8 * GIB, 1, "7")
    );
    b.open(2, peer(20, 1000)).unwrap();
    b.request(2, 1, member(&handle, 6, true));
    b.request(2, 2, member(&handle, 6, false));
    b.request(2, 3, member(&handle, 9, false));
    b.request(2, 4, member("1:wrong", 1, false));
    b.request(2, 5, member("nonsense", 1, false));
    let frames = b.frames(2);
    let Some(Outcome::Ok(Reply::Granted(info))) = outcome(&frames, 1) else {
        panic!("{frames:?}")
    };
    assert_eq!(info.within, Some(budget.budget));
    assert!(outcome(&frames, 2).is_none(), "6 + 6 > 8: the second waits");
    let (code, message) = error(&frames, 3);
    assert_eq!(code, ErrorCode::NeverFits);
    assert!(
        message.contains(&format!("budget {}", budget.budget)) && message.contains("job 7"),
        "{message}"
    );
    assert!(error(&frames, 4).1.contains("secret does not match"));
    assert!(error(&frames, 5).1.contains("no ':'"));
    // Another uid, even with the handle, may not.
    b.open(3, peer(30, 2000)).unwrap();
    b.request(3, 1, member(&handle, 1, false));
    assert_eq!(error(&b.frames(3), 1).0, ErrorCode::PermissionDenied);
    // The device's reservations are the budget's 8 GiB, not 8 + 6.
    assert_eq!(
        b.core.status(b.now()).devices[budget.device_index as usize].reserved_bytes,
        8 * GIB
    );
    assert_eq!(b.core.status(b.now()).budgets[0].used_bytes, 6 * GIB);
    assert_eq!(
        b.core.status(b.now()).budgets[0].handle,
        None,
        "status never shows handles"
    );
}

#[test]
fn a_process_in_the_jobs_cgroup_leases_from_the_budget_without_naming_it() {
    let mut b = Bench::new(&Config::default());
    b.open(1, peer(10, 0)).unwrap();
    let mut args = budget_args("8", 1000, 4, 0);
    args.cgroup = Some("/slurm/uid_1000/job_8".into());
    b.request(1, 1, Op::CreateBudget(args));
    b.frames(1);
    let mut inside = peer(20, 1000);
    inside.cgroups = vec!["/slurm/uid_1000/job_8/step_0/task_0".into()];
    b.open(2, inside).unwrap();
    b.acquire(2, 1, 5 * GIB, false);
    let (code, message) = error(&b.frames(2), 1);
    assert_eq!(
        code,
        ErrorCode::NeverFits,
        "{message}: 5 GiB does not fit the job's 4"
    );
    b.acquire(2, 2, 3 * GIB, false);
    let frames = b.frames(2);
    assert!(
        matches!(outcome(&frames, 2), Some(Outcome::Ok(Reply::Granted(i))) if i.within.is_some())
    );
    let mut outside = peer(30, 1000);
    outside.cgroups = vec!["/slurm/uid_1000/job_80".into()];
    b.open(3, outside).unwrap();
    b.acquire(3, 1, 5 * GIB, false);
    assert!(
        matches!(outcome(&b.frames(3), 1), Some(Outcome::Ok(Reply::Granted(i))) if i.within.is_none())
    );
}

#[test]
fn ending_a_jobs_budgets_revokes_its_leases_and_fails_its_waiters() {
    let (mut b, budget) = with_budget(&Config::default());
    let handle = budget.handle.clone().unwrap();
    b.open(2, peer(20, 1000)).unwrap();
    b.request(2, 1, member(&handle, 6, false));
    b.request(2, 2, member(&handle, 6, false));
    b.frames(2);
    b.request(
        1,
        2,
        Op::EndBudget(EndBudgetArgs {
            job: Some("7".into()),
            budget: None,
        }),
    );
    b.request(
        1,
        3,
        Op::EndBudget(EndBudgetArgs {
            job: Some("7".into()),
            budget: None,
        }),
    );
    let actions = b.actions();
    let to_root = sent_to(&actions, 1);
    assert!(
        matches!(outcome(&to_root, 3), Some(Outcome::Ok(Reply::Done))),
        "again is fine: {to_root:?}"
    );
    let frames = sent_to(&actions, 2);
    assert!(
        frames.iter().any(|f| matches!(
            f,
            ServerFrame::Event {
                event: Event::Revoked {
                    reason: RevokeReason::BudgetEnded,
                    ..
                }
            }
        )),
        "{frames:?}"
    );
    let (code, message) = error(&frames, 2);
    assert_eq!(code, ErrorCode::Cancelled);
    assert!(message.contains("job 7"), "{message}");
    assert_eq!(b.core.ledger().leases().count(), 0);
    assert!(b.core.status(b.now()).budgets.is_empty());
}

#[test]
fn budgets_are_journaled_and_restored_without_their_creator() {
    let mut b = Bench::new(&Config::default());
    let now = b.now();
    b.core.restore(now, Vec::new(), Duration::from_secs(10));
    b.actions();
    b.open(1, peer(10, 0)).unwrap();
    b.request(1, 1, Op::CreateBudget(budget_args("9", 1000, 8, 1)));
    let actions = b.actions();
    let Some(Outcome::Ok(Reply::Budgets(budgets))) = outcome(&sent_to(&actions, 1), 1).cloned()
    else {
        panic!("{actions:?}")
    };
    let handle = budgets[0].handle.clone().unwrap();
    b.open(2, peer(20, 1000)).unwrap();
    b.request(2, 1, member(&handle, 2, true));
    let records: Vec<_> = b
        .actions()
        .into_iter()
        .chain(actions)
        .filter_map(|a| match a {
            Action::Journal(JournalEntry::Grant(r)) => Some(r),
            _ => None,
        })
        .collect();
    let budget = records
        .iter()
        .find(|r| r.budget.is_some())
        .expect("the budget is journaled")
        .clone();
    assert_eq!(budget.budget.as_ref().unwrap().job, "9");
    let member_record = records
        .iter()
        .find(|r| r.within == Some(budget.id))
        .expect("and its member")
        .clone();

    // After a restart: the prolog that asked is long gone; the member's owner still runs.
    let mut after = Bench::new(&Config::default());
    let now = after.now();
    let journaled = vec![
        Restorable {
            record: member_record.clone(),
            owner_alive: true,
        },
        Restorable {
            record: budget.clone(),
            owner_alive: false,
        },
    ];
    after.core.restore(now, journaled, Duration::from_secs(10));
    after.actions();
    let status = after.core.status(after.now());
    assert_eq!(status.budgets.len(), 1, "the budget is back");
    assert_eq!(
        status.budgets[0].used_bytes,
        2 * GIB,
        "with its member inside"
    );
    assert_eq!(
        status.devices[budget_device(&status)].reserved_bytes,
        8 * GIB
    );
    // The grace ends: the member nobody re-adopted goes, the budget stays for its epilog.
    after.advance(Duration::from_secs(11));
    let now = after.now();
    after.core.handle_timeout(now);
    let status = after.core.status(after.now());
    assert_eq!(status.budgets.len(), 1);
    assert_eq!(status.budgets[0].used_bytes, 0);
    // The same handle works again.
    after.open(2, peer(21, 1000)).unwrap();
    after.request(2, 1, member(&handle, 8, false));
    assert!(matches!(
        outcome(&after.frames(2), 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
}

fn budget_device(status: &gpud_proto::StatusReport) -> usize {
    status.budgets[0].device_index as usize
}
