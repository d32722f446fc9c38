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
//! always a complete journal. A torn last line (gpud died inside a write) is ignored.
//!
//! Grants and resizes are written before the reply that announces them; releases ride with the
//! next write, or are written within 20 ms, because a restart that missed a release only keeps
//! the memory reserved until the grace period ends.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gpud_proto::LeaseId;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use crate::hub::core::LeaseRecord;

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
#[error("lease journal {}: {what}: {source}", path.display())]
pub struct JournalError {
    path: PathBuf,
    what: &'static str,
    source: io::Error,
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    file: File,
    entries: u64,
    live: BTreeMap<LeaseId, LeaseRecord>,
    pending: Vec<u8>,
    /// The pending entries include a grant or a resize: write them before any reply.
    urgent: bool,
}

impl Journal {
    /// Opens (creating) the journal in `dir`, replays it, and compacts it. Returns the journal
    /// and the leases it holds.
    pub fn open(dir: &Path) -> Result<(Self, Vec<LeaseRecord>), JournalError> {
        let err = |what| {
            move |source| JournalError {
                path: dir.to_path_buf(),
                what,
                source,
            }
        };
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(err("cannot create the state directory"))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(err("cannot set permissions"))?;
        }
        let path = dir.join(FILE_NAME);
        let live = match fs::read(&path) {
            Ok(bytes) => replay(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(err("cannot read")(e)),
        };
        let file = write_snapshot(dir, &live).map_err(err("cannot write a snapshot"))?;
        let records = live.values().cloned().collect();
        Ok((
            Self {
                dir: dir.to_path_buf(),
                file,
                entries: live.len() as u64,
                live,
                pending: Vec::new(),
                urgent: false,
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
    pub fn flush(&mut self) -> Result<(), JournalError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let err = |what| {
            let path = self.dir.join(FILE_NAME);
            move |source| JournalError { path, what, source }
        };
        self.file
            .write_all(&self.pending)
            .map_err(err("cannot append"))?;
        self.pending.clear();
        self.urgent = false;
        if self.entries > 4 * self.live.len() as u64 + COMPACT_SLACK {
            self.file = write_snapshot(&self.dir, &self.live).map_err(err("cannot compact"))?;
            self.entries = self.live.len() as u64;
        }
        Ok(())
    }
}

/// Replays journal bytes into the live set. Stops at the first line that does not parse: only
/// the last line can be torn, by a crash in the middle of a write.
fn replay(bytes: &[u8]) -> BTreeMap<LeaseId, LeaseRecord> {
    let mut live = BTreeMap::new();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Entry>(line) {
            Ok(Entry::Grant(r)) => {
                live.insert(r.id, r);
            }
            Ok(Entry::Resize { id, vram_bytes }) => {
                if let Some(r) = live.get_mut(&id) {
                    r.vram_bytes = vram_bytes;
                }
            }
            Ok(Entry::Release { id }) => {
                live.remove(&id);
            }
            Err(e) => {
                tracing::warn!("lease journal: ignoring an unreadable entry and what follows: {e}");
                break;
            }
        }
    }
    live
}

/// Writes the live set as a fresh journal (a temporary file renamed into place) and returns it
/// opened for appending.
fn write_snapshot(dir: &Path, live: &BTreeMap<LeaseId, LeaseRecord>) -> io::Result<File> {
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let mut out = Vec::new();
    for r in live.values() {
        serde_json::to_writer(&mut out, &Entry::Grant(r.clone())).map_err(io::Error::other)?;
        out.push(b'\n');
    }
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&out)?;
    }
    fs::rename(&tmp, &path)?;
    OpenOptions::new().append(true).open(&path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpud_proto::Class;

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
