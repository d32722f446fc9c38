//! What /proc tells about a process: its name, groups, parent, start time and liveness.
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

#[cfg(test)]
mod tests {
    use super::*;

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
