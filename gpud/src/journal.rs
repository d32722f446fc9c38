//! The lease journal: every lease, on disk, so that a restarted gpud knows what is held.
//!
//! An append-only file of JSON lines (`grant`, `resize`, `release`), compacted into a snapshot
//! at start-up and whenever it grows to several times the live set. Appends are written before
//! any client hears of the change they record, with one `write` per batch of changes.
//!
//! Durability: nothing is fsynced. The journal protects against gpud's own death (crash,
//! kill -9, upgrade); what `write` returned is in the kernel's page cache and survives that. A
//! kernel crash or power loss also kills every process that held a lease, so their leases
//! have nothing left to protect, while an fsync (milliseconds) would stall every client of the
//! daemon. Compactions are written to a temporary file and renamed into place, so the file is
//! always a complete journal.
//!
//! What replay trusts: a write that fails (full disk, I/O error) is cut back to the last
//! complete write and retried whole, so only the last line can ever be incomplete, and a torn
//! last line (gpud died inside a write, before announcing what it carried) is ignored. Every
//! other entry is checked (it parses, its sizes are possible, it names a device and a token);
//! one that fails could hide a live lease, and gpud refuses to start on it rather than grant
//! that lease's memory twice. Releases and resizes of leases the journal does not hold are
//! harmless and only counted. Replay streams the file, one line in memory at a time. The state
//! directory is locked for the daemon's lifetime ([`crate::state_dir`]), so two daemons never
//! share a journal.
//!
//! Grants and resizes are written before the reply that announces them; releases ride with the
//! next write, or are written within 20 ms, because a restart that missed a release only keeps
//! the memory reserved until the grace period ends.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gpud_proto::{Class, LeaseId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::state_dir::{StateDir, StateDirError};

/// What is known of one lease: one journal line's record, as the hub core makes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Lease id.
    pub id: LeaseId,
    /// Secret the owner presents to re-adopt the lease after a restart.
    pub token: String,
    /// Device UUID.
    pub device_uuid: String,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Holds the compute slot.
    pub compute: bool,
    /// Class.
    pub class: Class,
    /// Owner's pid.
    pub pid: u32,
    /// Owner's start time (clock ticks since boot), so a reused pid is not taken for the owner.
    pub pid_start: u64,
    /// Owner's uid.
    pub uid: u32,
    /// Grant time, milliseconds since the Unix epoch.
    pub granted_unix_ms: u64,
    /// The client's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The budget it was granted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<LeaseId>,
    /// When the lease is a budget: whose and what it grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetRecord>,
    /// Warm state that gives its memory back on notice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evictable: bool,
    /// The group (lease of several devices) it is a part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRecord>,
    /// A CPU part's CPUs (kernel numbers): a re-adopted lease keeps them. Its `device_uuid`
    /// names the NUMA node's pool (`numa0`), its `vram_bytes` counts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
}

/// What a journal line adds for a part of a group: a restart restores the group only whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The group's id (its first lease's).
    pub id: LeaseId,
    /// How many parts it has.
    pub parts: u32,
}

/// What a journal line adds for a budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRecord {
    /// Compute slots its members may hold at once.
    pub compute_slots: u32,
    /// The job.
    pub job: String,
    /// The uid whose processes lease from it.
    pub owner_uid: u32,
    /// Its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

/// The journal's file name inside the state directory.
pub const FILE_NAME: &str = "leases.journal";

/// Compact when the file holds this many entries more than four times the live leases.
const COMPACT_SLACK: u64 = 4096;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Entry {
    Grant(LeaseRecord),
    Resize { id: LeaseId, vram_bytes: u64 },
    Release { id: LeaseId },
}

/// A journal failure.
#[derive(Debug, Error)]
pub enum JournalError {
    /// The state directory cannot be used (unsafe, or another gpud holds it).
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// A system call failed.
    #[error("lease journal {}: {what}: {source}", path.display())]
    Io {
        /// The journal file.
        path: PathBuf,
        /// What gpud was doing.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A complete entry that cannot be trusted: it could hide a live lease, so starting would
    /// risk granting that lease's memory twice.
    #[error(
        "lease journal {} line {line}: {reason}; it may hide a live lease, so gpud will not start \
         on it. Once no process from before the restart holds a GPU, move the file aside \
         (gpud then starts with no leases)",
        path.display()
    )]
    Untrusted {
        /// The journal file.
        path: PathBuf,
        /// The entry's line number (from 1).
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    dir: StateDir,
    file: File,
    /// The file's length up to its last complete write: a failed append is cut back to it.
    good_len: u64,
    entries: u64,
    live: BTreeMap<LeaseId, LeaseRecord>,
    pending: Vec<u8>,
    /// The pending entries include a grant or a resize: write them before any reply.
    urgent: bool,
    /// Entries replay skipped as harmless (a release or resize of a lease it does not know).
    skipped: u64,
}

impl Journal {
    /// Locks the state directory `dir` (creating it), replays its journal, and compacts it.
    /// Returns the journal and the leases it holds.
    pub fn open(dir: &Path) -> Result<(Self, Vec<LeaseRecord>), JournalError> {
        let dir = StateDir::lock(dir)?;
        let path = dir.path().join(FILE_NAME);
        let err = |what| {
            let path = path.clone();
            move |source| JournalError::Io { path, what, source }
        };
        let replayed = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => replay(BufReader::new(file), &path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Replayed::default(),
            Err(e) => return Err(err("cannot read")(e)),
        };
        if replayed.torn_tail {
            tracing::warn!(journal = %path.display(), "lease journal: ignoring a torn last entry (gpud died inside a write)");
        }
        if replayed.skipped > 0 {
            tracing::warn!(journal = %path.display(), skipped = replayed.skipped, "lease journal: skipped entries about leases it does not hold");
        }
        let live = replayed.live;
        let (file, good_len) =
            write_snapshot(dir.path(), &live).map_err(err("cannot write a snapshot"))?;
        let records = live.values().cloned().collect();
        Ok((
            Self {
                dir,
                file,
                good_len,
                entries: live.len() as u64,
                live,
                pending: Vec::new(),
                urgent: false,
                skipped: replayed.skipped,
            },
            records,
        ))
    }

    /// Records a grant (or a new owner for a lease).
    pub fn grant(&mut self, record: LeaseRecord) {
        self.urgent = true;
        self.push(&Entry::Grant(record.clone()));
        self.live.insert(record.id, record);
    }

    /// Records a new size.
    pub fn resize(&mut self, id: LeaseId, vram_bytes: u64) {
        if let Some(r) = self.live.get_mut(&id) {
            r.vram_bytes = vram_bytes;
            self.urgent = true;
            self.push(&Entry::Resize { id, vram_bytes });
        }
    }

    /// Records the end of a lease.
    pub fn release(&mut self, id: LeaseId) {
        if self.live.remove(&id).is_some() {
            self.push(&Entry::Release { id });
        }
    }

    /// A live lease's record.
    pub fn record(&self, id: LeaseId) -> Option<&LeaseRecord> {
        self.live.get(&id)
    }

    /// Whether recorded entries must be written before anyone hears of them (grants, resizes).
    pub fn urgent(&self) -> bool {
        self.urgent
    }

    /// Whether anything recorded is not written yet.
    pub fn pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Leases the journal holds.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Entries that replay skipped at start-up as harmless.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Whether the journal holds no lease.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn push(&mut self, entry: &Entry) {
        // Entries are plain data: serialization cannot fail.
        if serde_json::to_writer(&mut self.pending, entry).is_ok() {
            self.pending.push(b'\n');
            self.entries += 1;
        }
    }

    /// Writes what was recorded since the last flush, in one write; compacts when the file has
    /// grown to several times the live set.
    ///
    /// A write that fails (a full disk, an I/O error) is cut back to the last complete write,
    /// so the file never holds half an entry that a later write would follow, and what was
    /// pending stays pending, to be written whole by the next flush. Until a flush succeeds,
    /// nothing it carries may be announced.
    pub fn flush(&mut self) -> Result<(), JournalError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let path = self.dir.path().join(FILE_NAME);
        let err = |what| {
            let path = path.clone();
            move |source| JournalError::Io { path, what, source }
        };
        if let Err(e) = self.file.write_all(&self.pending) {
            // The cut cannot make things worse: on success the next append starts at a
            // clean line; on failure it is tried again before the next write.
            let cut = self.file.set_len(self.good_len);
            return Err(match cut {
                Ok(()) => err("cannot append (the partial entry was removed)")(e),
                Err(_) => err("cannot append, nor remove the partial entry")(e),
            });
        }
        self.good_len += self.pending.len() as u64;
        self.pending.clear();
        self.urgent = false;
        if self.entries > 4 * self.live.len() as u64 + COMPACT_SLACK {
            let (file, len) =
                write_snapshot(self.dir.path(), &self.live).map_err(err("cannot compact"))?;
            self.file = file;
            self.good_len = len;
            self.entries = self.live.len() as u64;
        }
        Ok(())
    }
}

/// What replay found.
#[derive(Debug, Default)]
struct Replayed {
    live: BTreeMap<LeaseId, LeaseRecord>,
    /// Harmless entries skipped: releases and resizes of leases not held.
    skipped: u64,
    /// The last entry was cut short (gpud died inside a write) and was ignored.
    torn_tail: bool,
}

/// Replays a journal, one line at a time (never the whole file in memory), checking every
/// entry. Only the last line may be incomplete: a write is cut back when it fails, so a line
/// that ends but does not parse, or describes a lease that cannot be, is corruption that could
/// hide a live lease, and replay refuses it.
fn replay(mut reader: impl BufRead, path: &Path) -> Result<Replayed, JournalError> {
    let mut out = Replayed::default();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| JournalError::Io {
                path: path.to_path_buf(),
                what: "cannot read",
                source,
            })?;
        if n == 0 {
            return Ok(out);
        }
        number += 1;
        let complete = line.last() == Some(&b'\n');
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let untrusted = |reason: String| JournalError::Untrusted {
            path: path.to_path_buf(),
            line: number,
            reason,
        };
        let entry = match serde_json::from_slice::<Entry>(text) {
            Ok(entry) => entry,
            Err(_) if !complete => {
                out.torn_tail = true;
                return Ok(out);
            }
            Err(e) => return Err(untrusted(format!("unreadable entry ({e})"))),
        };
        match entry {
            Entry::Grant(r) => {
                r.check().map_err(untrusted)?;
                out.live.insert(r.id, r);
            }
            Entry::Resize { id, vram_bytes } => match out.live.get_mut(&id) {
                Some(r) => {
                    check_bytes(vram_bytes).map_err(untrusted)?;
                    r.vram_bytes = vram_bytes;
                }
                None => out.skipped += 1,
            },
            Entry::Release { id } => {
                if out.live.remove(&id).is_none() {
                    out.skipped += 1;
                }
            }
        }
    }
}

/// Largest lease a journal entry may describe: no device has 2^53 bytes, and sums of leases
/// stay far from overflowing a u64.
const MAX_LEASE_BYTES: u64 = 1 << 53;

fn check_bytes(vram_bytes: u64) -> Result<(), String> {
    if vram_bytes > MAX_LEASE_BYTES {
        return Err(format!(
            "a lease of {vram_bytes} bytes is larger than any device"
        ));
    }
    Ok(())
}

impl LeaseRecord {
    /// Whether the record can describe a lease gpud granted.
    fn check(&self) -> Result<(), String> {
        check_bytes(self.vram_bytes)?;
        if self.id == 0 {
            return Err("lease id 0 is never granted".into());
        }
        if self.device_uuid.is_empty() {
            return Err(format!("lease {} names no device", self.id));
        }
        if self.token.is_empty() {
            return Err(format!("lease {} has no adoption token", self.id));
        }
        Ok(())
    }
}

/// Writes the live set as a fresh journal (a temporary file renamed into place) and returns it
/// opened for appending, with its length. The temporary file is created new (never through a
/// link someone planted) and the journal is opened without following links.
fn write_snapshot(dir: &Path, live: &BTreeMap<LeaseId, LeaseRecord>) -> io::Result<(File, u64)> {
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let mut out = Vec::new();
    for r in live.values() {
        serde_json::to_writer(&mut out, &Entry::Grant(r.clone())).map_err(io::Error::other)?;
        out.push(b'\n');
    }
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        if let Err(e) = f.write_all(&out) {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    fs::rename(&tmp, &path)?;
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    Ok((file, out.len() as u64))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn record(id: LeaseId) -> LeaseRecord {
        LeaseRecord {
            id,
            token: format!("t{id}"),
            device_uuid: "GPU-x".into(),
            vram_bytes: id * 10,
            compute: id % 2 == 0,
            class: Class::Normal,
            pid: 1,
            pid_start: 2,
            uid: 0,
            granted_unix_ms: 3,
            label: None,
            within: None,
            budget: None,
            evictable: false,
            group: None,
            cpus: Vec::new(),
        }
    }

    #[test]
    fn replays_grants_resizes_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, old) = Journal::open(dir.path()).unwrap();
        assert!(old.is_empty());
        j.grant(record(1));
        j.grant(record(2));
        j.grant(record(3));
        j.resize(2, 999);
        j.release(1);
        j.flush().unwrap();
        drop(j);
        let (j, live) = Journal::open(dir.path()).unwrap();
        assert_eq!(live.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(live[0].vram_bytes, 999);
        assert_eq!(j.len(), 2);
        // Reopening compacted it: one line per live lease.
        let text = fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text.lines().count(), 2);
        let mode = fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        j.grant(record(1));
        j.grant(record(2));
        j.flush().unwrap();
        drop(j);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE_NAME))
            .unwrap();
        f.write_all(br#"{"op":"release","i"#).unwrap();
        drop(f);
        let (_, live) = Journal::open(dir.path()).unwrap();
        assert_eq!(live.len(), 2);
    }

    fn journal_with(dir: &Path, lines: &[&str]) {
        fs::write(dir.join(FILE_NAME), lines.join("")).unwrap();
    }

    fn grant_line(id: LeaseId, vram_bytes: u64) -> String {
        let mut r = record(id);
        r.vram_bytes = vram_bytes;
        let mut line = serde_json::to_string(&Entry::Grant(r)).unwrap();
        line.push('\n');
        line
    }

    #[test]
    fn an_unreadable_entry_in_the_middle_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (grant_line(1, 10), grant_line(2, 20));
        journal_with(dir.path(), &[&a, "{\"op\":\"grant\",\"id\":3,\"tok\n", &b]);
        let err = Journal::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, JournalError::Untrusted { line: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("move the file aside"), "{err}");
        // Nothing was rewritten: the operator still has the whole file to look at.
        let text = fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn an_impossible_size_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        journal_with(dir.path(), &[&grant_line(1, u64::MAX)]);
        let err = Journal::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("larger than any device"), "{err}");
        let resize = format!(
            "{}{}\n",
            grant_line(1, 10),
            serde_json::to_string(&Entry::Resize {
                id: 1,
                vram_bytes: u64::MAX
            })
            .unwrap()
        );
        journal_with(dir.path(), &[&resize]);
        let err = Journal::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn entries_about_unknown_leases_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let release = format!(
            "{}\n",
            serde_json::to_string(&Entry::Release { id: 9 }).unwrap()
        );
        let resize = format!(
            "{}\n",
            serde_json::to_string(&Entry::Resize {
                id: 8,
                vram_bytes: 5
            })
            .unwrap()
        );
        journal_with(dir.path(), &[&grant_line(1, 10), &release, &resize]);
        let (j, live) = Journal::open(dir.path()).unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(j.skipped(), 2);
    }

    #[test]
    fn a_second_daemon_cannot_open_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (mut first, _) = Journal::open(dir.path()).unwrap();
        first.grant(record(1));
        first.flush().unwrap();
        let err = Journal::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, JournalError::StateDir(StateDirError::InUse { .. })),
            "{err}"
        );
        // The first one's journal was left alone.
        first.grant(record(2));
        first.flush().unwrap();
        drop(first);
        let (_, live) = Journal::open(dir.path()).unwrap();
        assert_eq!(live.len(), 2);
    }

    #[test]
    fn a_planted_temporary_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = tempfile::NamedTempFile::new().unwrap();
        fs::write(victim.path(), "precious").unwrap();
        std::os::unix::fs::symlink(victim.path(), dir.path().join(format!("{FILE_NAME}.tmp")))
            .unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        j.grant(record(1));
        j.flush().unwrap();
        assert_eq!(fs::read_to_string(victim.path()).unwrap(), "precious");
    }

    #[test]
    fn compacts_when_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        for i in 0..(COMPACT_SLACK + 10) {
            j.grant(record(i + 100));
            j.release(i + 100);
        }
        j.grant(record(7));
        j.flush().unwrap();
        let text = fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text.lines().count(), 1, "compacted to the one live lease");
    }
}
