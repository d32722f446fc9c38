//! A simulated device memory shared by processes: the CPU-only stand-in for a GPU's VRAM, so
//! that uncoordinated provers run out of memory in the test as they do on a real card.
//!
//! The state is a small text file, one line per live allocation (`pid id bytes`), changed only
//! under an exclusive `flock` of the file itself. An allocation that would take the total past
//! the capacity fails, like `cuMemAlloc` with `CUDA_ERROR_OUT_OF_MEMORY`. Allocations of dead
//! processes are dropped on the next change, as the driver frees a dead process's memory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::{FarmError, FarmResult, io_err};

/// One simulated device's memory.
#[derive(Debug)]
pub struct SimVram {
    path: PathBuf,
    capacity: u64,
}

/// Allocation ids, unique in the process (an allocation is `pid id`).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What [`SimVram::alloc`] says.
#[derive(Debug, PartialEq, Eq)]
pub enum SimAlloc {
    /// Allocated; freed when the guard drops.
    Granted(SimAllocation),
    /// Out of memory: `in_use` bytes of `capacity` were taken.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Bytes allocated by live processes.
        in_use: u64,
        /// The device's memory.
        capacity: u64,
    },
}

/// A live simulated allocation; freed on drop.
#[derive(Debug, PartialEq, Eq)]
pub struct SimAllocation {
    path: PathBuf,
    pid: u32,
    id: u64,
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(Errno::ESRCH)
    )
}

/// Runs `f` on the file's live entries (dead processes' dropped) under its lock, and writes
/// back what `f` leaves.
fn update<T>(path: &Path, f: impl FnOnce(&mut Vec<(u32, u64, u64)>) -> T) -> FarmResult<T> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    let mut file = {
        let mut file = file;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => break lock,
                Err((f, Errno::EINTR)) => file = f,
                Err((_, e)) => {
                    return Err(FarmError::Io {
                        path: path.to_path_buf(),
                        source: e.into(),
                    });
                }
            }
        }
    };
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io_err(path))?;
    let mut entries: Vec<(u32, u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().map(str::parse::<u64>);
            match (it.next(), it.next(), it.next()) {
                (Some(Ok(pid)), Some(Ok(id)), Some(Ok(bytes))) => {
                    Some((u32::try_from(pid).ok()?, id, bytes))
                }
                _ => None,
            }
        })
        .filter(|(pid, _, _)| alive(*pid))
        .collect();
    let out = f(&mut entries);
    let text: String = entries
        .iter()
        .map(|(pid, id, bytes)| format!("{pid} {id} {bytes}\n"))
        .collect();
    file.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    file.set_len(0).map_err(io_err(path))?;
    file.write_all(text.as_bytes()).map_err(io_err(path))?;
    Ok(out)
}

impl SimVram {
    /// A device of `capacity` bytes whose state lives in `path` (shared by every process
    /// given the same path and capacity).
    pub fn new(path: impl Into<PathBuf>, capacity: u64) -> Self {
        Self {
            path: path.into(),
            capacity,
        }
    }

    /// Parses `PATH:SIZE` (e.g. `/tmp/farm:16GiB`, the workers' `--sim-vram`).
    pub fn parse_spec(spec: &str) -> Option<(PathBuf, u64)> {
        let (path, bytes) = spec.rsplit_once(':')?;
        let bytes = gpud_client::proto::parse_size(bytes).ok()?;
        (!path.is_empty()).then(|| (PathBuf::from(path), bytes))
    }

    /// The device's memory.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes allocated by live processes.
    pub fn in_use(&self) -> FarmResult<u64> {
        update(&self.path, |e| e.iter().map(|x| x.2).sum())
    }

    /// Allocates `bytes`, or says it is out of memory.
    pub fn alloc(&self, bytes: u64) -> FarmResult<SimAlloc> {
        let pid = std::process::id();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let capacity = self.capacity;
        update(&self.path, |entries| {
            let in_use: u64 = entries.iter().map(|x| x.2).sum();
            if in_use.saturating_add(bytes) > capacity {
                SimAlloc::OutOfMemory {
                    requested: bytes,
                    in_use,
                    capacity,
                }
            } else {
                entries.push((pid, id, bytes));
                SimAlloc::Granted(SimAllocation {
                    path: self.path.clone(),
                    pid,
                    id,
                })
            }
        })
    }
}

impl Drop for SimAllocation {
    fn drop(&mut self) {
        let (pid, id) = (self.pid, self.id);
        // A failure here leaves the entry until this process exits (then it is dropped).
        let _ = update(&self.path, |e| e.retain(|x| (x.0, x.1) != (pid, id)));
    }
}

/// Empties a simulated device's state (the driver, before a cell).
pub fn reset(path: &Path) -> FarmResult<()> {
    let mut f = File::create(path).map_err(io_err(path))?;
    f.flush().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_past_capacity_fail_and_frees_return_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vram");
        let (p, cap) = SimVram::parse_spec(&format!("{}:16GiB", path.display())).unwrap();
        let v = SimVram::new(p, cap);
        assert_eq!(v.capacity(), 16 << 30);
        let SimAlloc::Granted(a) = v.alloc(10 << 30).unwrap() else {
            panic!("first fits")
        };
        assert_eq!(
            v.alloc(7 << 30).unwrap(),
            SimAlloc::OutOfMemory {
                requested: 7 << 30,
                in_use: 10 << 30,
                capacity: 16 << 30
            }
        );
        // Another handle on the same file (another process) sees the same memory.
        let other = SimVram::new(&path, 16 << 30);
        let SimAlloc::Granted(b) = other.alloc(6 << 30).unwrap() else {
            panic!("6 GiB still fit")
        };
        assert_eq!(v.in_use().unwrap(), 16 << 30);
        drop(a);
        assert_eq!(v.in_use().unwrap(), 6 << 30);
        drop(b);
        assert_eq!(v.in_use().unwrap(), 0);
        // A dead process's allocation is dropped.
        std::fs::write(&path, "999999999 1 1073741824\n").unwrap();
        assert_eq!(v.in_use().unwrap(), 0);
        assert!(SimVram::parse_spec("nopath").is_none());
        assert!(SimVram::parse_spec(":1GiB").is_none());
    }
}
