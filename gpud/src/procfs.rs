//! What /proc tells about a process: its name, groups, parent, children, start time,
//! liveness and memory use.
//!
//! The shell's only window on other processes; the hub core gets these as facts.

use std::fs;

/// A process's `comm`, or `?`.
pub fn process_name(pid: u32) -> String {
    if pid == 0 {
        return "?".into();
    }
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A process's supplementary groups (empty when unreadable).
pub fn supplementary_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The fields of /proc/PID/stat after the command name, from the state (field 3) on. The
/// name is in parentheses and may hold anything, spaces and ')' included: the fields start
/// after the last ')'.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Field `n` (1-based, as proc(5) numbers them; 3 or more) of /proc/PID/stat.
fn stat_field<T: std::str::FromStr>(pid: u32, n: usize) -> Option<T> {
    stat_fields(pid)?.get(n.checked_sub(3)?)?.parse().ok()
}

/// The parent of a process (field 4 of /proc/PID/stat).
pub fn parent_pid(pid: u32) -> Option<u32> {
    stat_field(pid, 4)
}

/// The process group of a process (field 5 of /proc/PID/stat).
pub fn process_group(pid: u32) -> Option<u32> {
    stat_field(pid, 5)
}

/// A process's real and effective uids (the `Uid:` line of /proc/PID/status).
pub fn uids(pid: u32) -> Option<(u32, u32)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|x| x.parse::<u32>());
    Some((ids.next()?.ok()?, ids.next()?.ok()?))
}

/// Whether `pid` is `ancestor` or descends from it (within 32 generations).
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    lineage(pid).contains(&ancestor)
}

/// A process's state letter and start time in clock ticks since boot (fields 3 and 22 of
/// /proc/PID/stat).
fn process_stat(pid: u32) -> Option<(char, u64)> {
    let fields = stat_fields(pid)?;
    let state = fields.first()?.chars().next()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((state, start))
}

/// The cgroup paths of a process, one per hierarchy (`0::/slurm/job_5` gives `/slurm/job_5`);
/// empty when unknown.
pub fn cgroups(pid: u32) -> Vec<String> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let mut paths: Vec<String> = text
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// A process's start time in clock ticks since boot.
pub fn process_start(pid: u32) -> Option<u64> {
    process_stat(pid).map(|(_, start)| start)
}

/// Whether the process that owned a lease is still the one running under its pid. A zombie
/// (killed, not yet reaped by its parent) has stopped using the GPU: it counts as gone.
pub fn owner_alive(pid: u32, start: u64) -> bool {
    pid != 0
        && process_stat(pid).is_some_and(|(state, s)| s == start && !matches!(state, 'Z' | 'X'))
}

/// Whether the process started at `start` under `pid` is stopped: state `T` (by a signal:
/// SIGSTOP, SIGTSTP, a suspended job) or `t` (by a tracer). `None` when it is gone or the pid
/// now names another process.
pub fn stopped(pid: u32, start: u64) -> Option<bool> {
    if pid == 0 {
        return None;
    }
    let (state, s) = process_stat(pid)?;
    (s == start).then_some(matches!(state, 'T' | 't'))
}

/// The effective gid of a process, from /proc.
pub fn primary_gid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Gid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Every process id /proc lists now.
pub fn all_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// A process and its ancestors, nearest first, within 32 generations.
pub fn lineage(pid: u32) -> Vec<u32> {
    let mut line = vec![pid];
    let mut at = pid;
    while line.len() < 32 {
        match parent_pid(at) {
            Some(p) if p != 0 && p != at => {
                line.push(p);
                at = p;
            }
            _ => break,
        }
    }
    line
}

/// What a process keeps in host memory, from /proc/PID/status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUse {
    /// Resident bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// Locked bytes: `VmLck` (mlock) plus `VmPin` (pages pinned for devices, e.g. registered
    /// for DMA), which the kernel counts apart.
    pub locked_bytes: u64,
}

/// The memory lines of /proc/PID/status text (`VmRSS:   1234 kB`). A line that is missing
/// (a kernel thread has none) or unreadable counts as 0.
pub fn parse_memory_use(status: &str) -> MemoryUse {
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| {
                let mut words = v.split_whitespace();
                let n: u64 = words.next()?.parse().ok()?;
                // proc(5) writes every such line in kB (KiB).
                matches!(words.next(), Some("kB") | None).then_some(n)
            })
            .unwrap_or(0)
            .saturating_mul(1024)
    };
    MemoryUse {
        rss_bytes: kib("VmRSS"),
        locked_bytes: kib("VmLck").saturating_add(kib("VmPin")),
    }
}

/// A process's memory use; `None` when it is gone.
pub fn memory_use(pid: u32) -> Option<MemoryUse> {
    if pid == 0 {
        return None;
    }
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .map(|s| parse_memory_use(&s))
}

/// The children of a process, from every thread's `/proc/PID/task/TID/children`; `None`
/// when the kernel does not provide those files (CONFIG_PROC_CHILDREN) or the process is gone.
fn children(pid: u32) -> Option<Vec<u32>> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    let mut any = false;
    for task in tasks.flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            any = true;
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    any.then_some(out)
}

/// The parent of every process on the host (a scan of /proc).
fn parents() -> Vec<(u32, u32)> {
    all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, parent_pid(pid)?)))
        .collect()
}

/// Most processes [`with_descendants`] returns: a fork bomb under a lease is not followed
/// into every corner.
const MAX_TREE: usize = 4096;

/// A process and its descendants (breadth first, the process first; at most 4096). Uses the
/// kernel's children lists, or a scan of /proc where there are none.
pub fn with_descendants(pid: u32) -> Vec<u32> {
    let Some(first) = children(pid) else {
        // Without children lists (or for a process gone already) the tree comes from a scan.
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return vec![pid];
        }
        return tree_in(&parents(), pid);
    };
    // The root's children are read already; a child gone since its parent listed it has no
    // children to follow.
    let mut first = Some(first);
    tree(pid, |at| {
        first
            .take()
            .unwrap_or_else(|| children(at).unwrap_or_default())
    })
}

/// `pid` and its descendants in a table of (process, parent) pairs.
fn tree_in(parents: &[(u32, u32)], pid: u32) -> Vec<u32> {
    tree(pid, |at| {
        parents
            .iter()
            .filter(|&&(_, p)| p == at)
            .map(|&(c, _)| c)
            .collect()
    })
}

/// `pid` and what `children_of` leads to from it, breadth first, each once, at most
/// [`MAX_TREE`].
fn tree(pid: u32, mut children_of: impl FnMut(u32) -> Vec<u32>) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut seen = std::collections::HashSet::from([pid]);
    let mut i = 0;
    while i < tree.len() && tree.len() < MAX_TREE {
        for k in children_of(tree[i]) {
            if tree.len() < MAX_TREE && seen.insert(k) {
                tree.push(k);
            }
        }
        i += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_lines_are_read_in_kib_and_locked_adds_pinned() {
        let text = "Name:\tprover\nVmPeak:\t 9000 kB\nVmLck:\t     100 kB\nVmPin:\t      28 kB\n\
                    VmHWM:\t 5000 kB\nVmRSS:\t    4096 kB\nThreads:\t4\n";
        assert_eq!(
            parse_memory_use(text),
            MemoryUse {
                rss_bytes: 4096 * 1024,
                locked_bytes: 128 * 1024,
            }
        );
        // A kernel thread has no Vm lines; a garbled number counts as nothing.
        assert_eq!(parse_memory_use("Name:\tkthreadd\n"), MemoryUse::default());
        assert_eq!(
            parse_memory_use("VmRSS:\t12x kB\nVmLck:\t1 MB\n"),
            MemoryUse::default()
        );
        // VmRSSx is another key, not VmRSS.
        assert_eq!(parse_memory_use("VmRSSx:\t5 kB\n").rss_bytes, 0);
    }

    #[test]
    fn a_tree_is_read_from_a_parent_table_breadth_first_and_bounded() {
        let table = [(2, 1), (3, 1), (4, 2), (5, 4), (6, 9), (7, 3)];
        assert_eq!(tree_in(&table, 1), vec![1, 2, 3, 4, 7, 5]);
        assert_eq!(tree_in(&table, 4), vec![4, 5]);
        assert_eq!(tree_in(&table, 8), vec![8], "no children: itself");
        // A loop in a torn read (a pid reused mid-scan) ends; a huge tree is cut off.
        assert_eq!(tree_in(&[(2, 1), (1, 2)], 1), vec![1, 2]);
        let wide: Vec<(u32, u32)> = (2..10_000).map(|c| (c, 1)).collect();
        assert_eq!(tree_in(&wide, 1).len(), MAX_TREE);
    }

    #[test]
    fn this_process_has_resident_memory_and_its_child_is_its_descendant() {
        let me = std::process::id();
        assert!(memory_use(me).unwrap().rss_bytes > 0);
        assert_eq!(memory_use(0), None);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let tree = with_descendants(me);
        assert_eq!(tree[0], me);
        assert!(tree.contains(&child.id()), "{tree:?}");
        assert_eq!(with_descendants(child.id()), vec![child.id()]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            with_descendants(child.id()),
            vec![child.id()],
            "gone: itself only"
        );
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert_ne!(process_name(me), "?");
        assert!(process_start(me).is_some());
        assert!(owner_alive(me, process_start(me).unwrap_or(0)));
        assert!(descends_from(me, me));
        assert!(all_pids().contains(&me));
        let uid = nix::unistd::getuid().as_raw();
        assert_eq!(uids(me), Some((uid, nix::unistd::geteuid().as_raw())));
        assert_eq!(
            process_group(me),
            Some(nix::unistd::getpgrp().as_raw() as u32)
        );
        let parent = parent_pid(me).expect("a parent");
        assert!(descends_from(me, parent));
        assert!(!descends_from(parent, me));
    }

    #[test]
    fn reads_this_process_cgroups_as_paths() {
        let mine = cgroups(std::process::id());
        assert!(!mine.is_empty(), "every Linux process is in a cgroup");
        assert!(mine.iter().all(|p| p.starts_with('/')), "{mine:?}");
        assert!(cgroups(0).is_empty(), "pid 0 is unknown");
    }

    #[test]
    fn a_zombie_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = process_start(pid);
        // Not reaped yet: a zombie once it has exited.
        std::thread::sleep(std::time::Duration::from_millis(200));
        if let Some(start) = start {
            assert!(!owner_alive(pid, start));
        }
        child.wait().unwrap();
    }

    #[test]
    fn a_stopped_process_reads_as_stopped_and_a_continued_one_as_running() {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = process_start(pid).expect("a start time");
        let read_until = |want: bool| {
            (0..200).any(|_| {
                let got = stopped(pid, start);
                std::thread::sleep(std::time::Duration::from_millis(10));
                got == Some(want)
            })
        };
        assert!(read_until(false), "a sleeping process is not stopped");
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
        assert!(read_until(true), "SIGSTOP stops it");
        assert_eq!(
            stopped(pid, start + 1),
            None,
            "another start is another process"
        );
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
        assert!(read_until(false), "SIGCONT runs it again");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(stopped(pid, start), None, "a reaped process is gone");
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_is_not() {
        let me = std::process::id();
        let start = process_start(me).expect("start time");
        assert!(owner_alive(me, start));
        assert!(!owner_alive(me, start + 1));
        assert!(!owner_alive(0, start));
    }
}
