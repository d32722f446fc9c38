//! The journal's rules: what is recorded when, and the leases a restart brings back.
//!
//! Grants and resizes are recorded before the frames that announce them and written at once
//! (a restart must never forget a lease its holder was told about); a release may wait for the
//! next write, at most [`JOURNAL_DELAY`](super::JOURNAL_DELAY). Leases restored from the
//! journal wait in the [`ORPHANS`] session, for their owners to re-adopt them with their
//! tokens, until the grace period ends.

use std::collections::HashMap;
use std::time::Duration;

use gpud_proto::LeaseId;
use rand::Rng;
use tracing::{info, warn};

use super::budgets::{BUDGETS, BudgetOwner};
use super::timers::Timer;
use super::{Action, Core, JournalEntry, Now, ORPHANS};
pub use crate::journal::LeaseRecord;
use crate::journal::{BudgetRecord, GroupRecord};
use crate::ledger::{LeaseChange, RestoredLease};

/// A journaled lease, with what the shell found out about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restorable {
    /// The record.
    pub record: LeaseRecord,
    /// Whether the owner (pid and start time) still runs.
    pub owner_alive: bool,
}

/// What the core has told the journal and not yet had written.
#[derive(Debug, Default)]
pub(super) struct JournalState {
    /// Journaling is on (the daemon has a state directory).
    on: bool,
    /// Entries are recorded but not written.
    pub(super) unwritten: bool,
    /// Among them a grant or a resize: written before any frame goes out.
    pub(super) urgent: bool,
    /// The owners' uids of restored leases, which only they may re-adopt.
    pub(super) orphan_uids: HashMap<LeaseId, u32>,
    /// Entries the journal's replay skipped as harmless (status shows it).
    pub(super) skipped: u64,
    /// Journaled leases of live owners that the ledger refused to restore (status shows it).
    pub(super) refused: u64,
    /// During a restore: how many parts each journaled group had.
    group_sizes: HashMap<LeaseId, u32>,
}

impl Core {
    /// Journals every lease from now on, and puts back the leases whose owners still run: they
    /// stay reserved for `grace`, for their owners to re-adopt.
    pub fn restore(&mut self, now: Now, journaled: Vec<Restorable>, grace: Duration) {
        self.ledger.record_changes(true);
        self.journal.on = true;
        let mut kept = 0;
        // Budgets first: their members are restored into them.
        let mut journaled = journaled;
        journaled.sort_by_key(|r| (r.record.budget.is_none(), r.record.id));
        for Restorable {
            record: r,
            owner_alive: alive,
        } in journaled
        {
            self.ledger.reserve_lease_ids(r.id + 1);
            if let Some(g) = r.group {
                self.journal.group_sizes.insert(g.id, g.parts);
            }
            // A device, or a host pool (`host-memory`, `numa0`): their names are distinct.
            let device = self
                .ledger
                .devices()
                .chain(self.ledger.host_pools())
                .find(|d| d.spec().uuid == r.device_uuid)
                .map(|d| d.index());
            // A CPU part comes back with its CPUs, or not at all.
            let cpus_ok = device.is_none_or(|d| match self.pool_kind(d) {
                crate::ledger::PoolKind::Cpus => self
                    .host
                    .as_ref()
                    .is_some_and(|b| b.restorable(&self.ledger, d, r.vram_bytes, &r.cpus)),
                _ => r.cpus.is_empty(),
            });
            let age = Duration::from_millis(now.unix_ms.saturating_sub(r.granted_unix_ms));
            // A budget outlives the process that asked for it: it waits for its epilog.
            let alive = alive || r.budget.is_some();
            let restored = device.filter(|_| alive).map(|device| RestoredLease {
                id: r.id,
                device,
                vram_bytes: r.vram_bytes,
                compute: r.compute,
                class: r.class.into(),
                granted_at: now.at.checked_sub(age).unwrap_or(now.at),
                label: r.label.clone(),
                within: r.within,
                budget_compute_slots: r.budget.as_ref().map(|b| b.compute_slots),
                evictable: r.evictable,
                group: r.group.map(|g| g.id),
            });
            let holder = if r.budget.is_some() { BUDGETS } else { ORPHANS };
            let restored = restored.map(|l| {
                if cpus_ok {
                    self.ledger.restore(holder, l)
                } else {
                    Err(crate::ledger::LedgerError::Invalid(
                        "its CPUs are not the node's, are taken, or are not as many as it counts",
                    ))
                }
            });
            if let (Some(Ok(())), Some(book)) = (&restored, self.host.as_mut()) {
                if !r.cpus.is_empty() {
                    book.cpus.insert(r.id, r.cpus.clone());
                }
            }
            match restored {
                Some(Err(e)) => {
                    // Never over-commit: a lease that does not fit what is restored already
                    // (or names what cannot be) is dropped, and counted.
                    warn!(lease = r.id, pid = r.pid, error = %e, "journaled lease refused");
                    self.journal.refused += 1;
                    self.record(JournalEntry::Release(r.id));
                }
                Some(Ok(())) if r.budget.is_some() => {
                    if let Some(b) = &r.budget {
                        info!(budget = r.id, job = b.job, "budget restored");
                        self.budgets.owners.insert(
                            r.id,
                            BudgetOwner {
                                job: b.job.clone(),
                                uid: b.owner_uid,
                                cgroup: b.cgroup.clone(),
                            },
                        );
                    }
                    self.tokens.insert(r.id, r.token.clone());
                    self.record(JournalEntry::Grant(r));
                }
                Some(Ok(())) => {
                    info!(
                        lease = r.id,
                        pid = r.pid,
                        "lease restored; waiting for its owner to re-adopt it"
                    );
                    self.tokens.insert(r.id, r.token.clone());
                    self.journal.orphan_uids.insert(r.id, r.uid);
                    self.record(JournalEntry::Grant(r));
                    kept += 1;
                }
                _ => {
                    info!(
                        lease = r.id,
                        pid = r.pid,
                        alive,
                        "journaled lease dropped: its owner is gone or its device is missing"
                    );
                    self.record(JournalEntry::Release(r.id));
                }
            }
        }
        self.drop_partial_groups(now);
        self.flush_journal();
        if kept > 0 {
            self.timers.set(Timer::Orphans, Some(now.at + grace));
        }
        self.end_step(now);
    }

    /// Ends restored groups that lost a part (its device is gone, or it did not fit): a group is
    /// whole or not held at all. Their journal entries are released with the next changes.
    fn drop_partial_groups(&mut self, now: Now) {
        let mut whole: HashMap<LeaseId, u32> = HashMap::new();
        for lease in self.ledger.leases() {
            if let Some(g) = lease.group {
                *whole.entry(g).or_default() += 1;
            }
        }
        for (group, restored) in whole {
            let expected = self.journal.group_sizes.get(&group).copied().unwrap_or(0);
            if restored != expected {
                warn!(
                    group,
                    restored, expected, "restored group is missing parts; dropped"
                );
                let holder = self.ledger.lease(group).map(|l| l.session);
                let any_part = self.ledger.group_of(group);
                if let (Some(holder), Some(&part)) = (holder, any_part.first()) {
                    let _ = self.ledger.release(now.at, holder, part);
                }
            }
        }
        self.journal.group_sizes.clear();
        self.journal_changes(now);
    }

    /// Notes how many entries the journal's replay skipped, for status.
    pub fn journal_skipped(&mut self, entries: u64) {
        self.journal.skipped = entries;
    }

    /// What the journal left out at start-up: skipped entries and refused leases.
    pub(super) fn journal_left_out(&self) -> (u64, u64) {
        (self.journal.skipped, self.journal.refused)
    }

    /// Drops restored leases that were not re-adopted in time.
    pub(super) fn drop_orphans(&mut self, now: Now) {
        self.timers.set(Timer::Orphans, None);
        for id in self.ledger.session_leases(ORPHANS) {
            info!(
                lease = id,
                "restored lease not re-adopted within the grace period; dropped"
            );
            let _ = self.ledger.release(now.at, ORPHANS, id);
        }
    }

    /// Records the ledger's lease changes since the last step.
    pub(super) fn journal_changes(&mut self, now: Now) {
        while let Some(change) = self.ledger.poll_change() {
            match change {
                LeaseChange::Granted(id) => self.journal_grant(now, id),
                LeaseChange::Resized { lease, vram_bytes } => self.record(JournalEntry::Resize {
                    id: lease,
                    vram_bytes,
                }),
                LeaseChange::Ended(id) => {
                    if let Some(book) = self.host.as_mut() {
                        book.cpus.remove(&id);
                    }
                    self.tokens.remove(&id);
                    self.journal.orphan_uids.remove(&id);
                    self.record(JournalEntry::Release(id));
                }
            }
        }
    }

    /// Has what was recorded written.
    pub(super) fn flush_journal(&mut self) {
        if self.journal.on {
            self.actions.push_back(Action::FlushJournal);
        }
        self.journal.unwritten = false;
        self.journal.urgent = false;
        self.timers.set(Timer::Journal, None);
    }

    /// Records a lease as its holder now has it.
    pub(super) fn journal_grant(&mut self, now: Now, id: LeaseId) {
        if let Some(record) = self.lease_record(now, id) {
            self.record(JournalEntry::Grant(record));
        }
    }

    fn record(&mut self, entry: JournalEntry) {
        if !self.journal.on {
            return;
        }
        self.journal.urgent |= !matches!(entry, JournalEntry::Release(_));
        self.journal.unwritten = true;
        self.actions.push_back(Action::Journal(entry));
    }

    /// The journal record of a lease, from the ledger and its owner's session.
    fn lease_record(&mut self, now: Now, id: LeaseId) -> Option<LeaseRecord> {
        let token = self.token(id);
        let cpus = match self.ledger.lease(id).map(|l| self.pool_kind(l.device)) {
            Some(crate::ledger::PoolKind::Cpus) => self.cpus_of(id),
            _ => Vec::new(),
        };
        let lease = self.ledger.lease(id)?;
        let device = self.ledger.pool(lease.device)?;
        let age = now.at.saturating_duration_since(lease.granted_at);
        // A budget has no process behind it: its owner is the job's uid.
        let budget = match (&lease.budget, self.budgets.owners.get(&id)) {
            (Some(books), Some(owner)) => Some(BudgetRecord {
                compute_slots: books.compute_slots,
                job: owner.job.clone(),
                owner_uid: owner.uid,
                cgroup: owner.cgroup.clone(),
            }),
            _ => None,
        };
        let (pid, pid_start, uid) = match &budget {
            Some(b) => (0, 0, b.owner_uid),
            None => {
                let peer = self.sessions.get(&lease.session)?;
                (peer.pid, peer.start, peer.uid)
            }
        };
        Some(LeaseRecord {
            id,
            token,
            device_uuid: device.spec().uuid.clone(),
            vram_bytes: lease.vram_bytes,
            compute: lease.compute,
            class: lease.class.into(),
            pid,
            pid_start,
            uid,
            granted_unix_ms: now.unix_ms.saturating_sub(age.as_millis() as u64),
            label: lease.label.clone(),
            within: lease.within,
            budget,
            evictable: lease.evictable,
            group: lease.group.map(|id| GroupRecord {
                id,
                parts: self.ledger.group_of(id).len() as u32,
            }),
            cpus,
        })
    }

    /// The lease's re-adoption secret, made on first use.
    pub(super) fn token(&mut self, id: LeaseId) -> String {
        let rng = &mut self.rng;
        self.tokens
            .entry(id)
            .or_insert_with(|| format!("{:032x}", rng.r#gen::<u128>()))
            .clone()
    }
}
