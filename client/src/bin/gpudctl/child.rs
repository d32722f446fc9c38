//! Starting the program of `gpudctl run` under supervision: its own process group, so that a
//! signal reaches everything it started; a parent-death signal, so that it does not outlive a
//! gpudctl killed with SIGKILL; and the terminal, when gpudctl had it, so that an interactive
//! program can read it from its own group. A program that stops on the terminal (Ctrl-Z) stops
//! gpudctl too, so that the shell gets its terminal back, and continues when gpudctl does.
//! A program granted CPUs is pinned to them before it runs (its children inherit the mask).
//!
//! The one unsafe call of gpudctl, `pre_exec`, is here.

use std::io::IsTerminal;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;

use nix::sched::{CpuSet, sched_setaffinity};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, raise, sigprocmask};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgrp, getpid, getppid, tcgetpgrp, tcsetpgrp};

/// The signal the program gets when gpudctl dies: the same as on a revocation, so that it can
/// clean up; gpud (which heard of it through `attach`) sends SIGKILL after its grace.
const PARENT_DEATH_SIGNAL: Signal = Signal::SIGTERM;

/// A started program: the process and whether it was given the terminal.
pub struct Started {
    pub child: tokio::process::Child,
    /// Its pid, which is also its process group's id.
    pub pid: Pid,
    /// gpudctl handed it the terminal's foreground and takes it back with [`Started::done`].
    took_terminal: bool,
}

/// Starts `command` in a process group of its own with a parent-death signal.
pub fn spawn(command: std::process::Command) -> std::io::Result<Started> {
    spawn_pinned(command, &[])
}

/// The CPU mask of the CPUs a lease granted; an empty list gives no mask (nothing pinned).
pub fn cpu_mask(cpus: &[u32]) -> std::io::Result<Option<CpuSet>> {
    if cpus.is_empty() {
        return Ok(None);
    }
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "CPU {cpu} is beyond the {} CPUs sched_setaffinity takes",
                    CpuSet::count()
                ),
            )
        })?;
    }
    Ok(Some(set))
}

/// Like [`spawn`], pinned to `cpus` (sched_setaffinity in the child, before exec) when the
/// list is not empty.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process.
/// gpudctl runs a current-thread runtime on its main thread, so the fork happens on the main
/// thread, which lives exactly as long as gpudctl; it must stay so (spawning from a worker or
/// blocking-pool thread would kill the program when that thread idles out).
pub fn spawn_pinned(mut command: std::process::Command, cpus: &[u32]) -> std::io::Result<Started> {
    let mask = cpu_mask(cpus)?;
    let parent = getpid();
    // The terminal goes to the program only if gpudctl has it now (not when run with `&`).
    let took_terminal =
        std::io::stdin().is_terminal() && tcgetpgrp(terminal()).is_ok_and(|g| g == getpgrp());
    command.process_group(0);
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl, getppid, getpid, sigprocmask, tcsetpgrp and sched_setaffinity
    // are system calls that neither allocate nor take locks (the mask was built before the
    // fork and is copied in), and the error path builds an io::Error from a raw errno without
    // allocating.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(PARENT_DEATH_SIGNAL).map_err(errno)?;
            // gpudctl died before the prctl took effect: the signal will never come.
            if getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            if took_terminal {
                with_sigttou_blocked(|| tcsetpgrp(terminal(), getpid())).map_err(errno)?;
            }
            if let Some(mask) = &mask {
                sched_setaffinity(Pid::from_raw(0), mask).map_err(errno)?;
            }
            Ok(())
        });
    }
    let child = tokio::process::Command::from(command).spawn()?;
    let pid = child
        .id()
        .map(|p| Pid::from_raw(p as i32))
        .ok_or_else(|| std::io::Error::other("the program exited before its pid was read"))?;
    Ok(Started {
        child,
        pid,
        took_terminal,
    })
}

impl Started {
    /// Whether gpudctl gave the program the terminal (job control then follows it).
    pub fn has_terminal(&self) -> bool {
        self.took_terminal
    }

    /// Whether the program has stopped since the last look (the stop is reported once).
    /// Waits only for stops: its exit stays for [`tokio::process::Child::wait`].
    pub fn stopped(&self) -> bool {
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG;
        matches!(
            waitid(Id::Pid(self.pid), flags),
            Ok(WaitStatus::Stopped(..))
        )
    }

    /// The program stopped on the terminal, as a job does at Ctrl-Z: gpudctl takes the
    /// terminal back and stops itself, so that the shell sees its job stopped. Once continued
    /// (`fg`, `bg`), it gives the terminal back if it is in the foreground again, and continues
    /// the program's group.
    pub fn follow_stop(&self) {
        self.done();
        // SIGSTOP cannot be caught: gpudctl stops here until a SIGCONT.
        let _ = raise(Signal::SIGSTOP);
        if tcgetpgrp(terminal()).is_ok_and(|g| g == getpgrp()) {
            let _ = with_sigttou_blocked(|| tcsetpgrp(terminal(), self.pid));
        }
        let _ = killpg(self.pid, Signal::SIGCONT);
    }

    /// The program ended: gpudctl's own group takes the terminal back.
    pub fn done(&self) {
        if self.took_terminal {
            // gpudctl is in the background now; SIGTTOU would stop it.
            let _ = with_sigttou_blocked(|| tcsetpgrp(terminal(), getpgrp()));
        }
    }
}

/// Runs `f` with SIGTTOU blocked: a background process group may then set the terminal's
/// foreground group.
fn with_sigttou_blocked<T>(f: impl FnOnce() -> nix::Result<T>) -> nix::Result<T> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
    let result = f();
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None)?;
    result
}

/// Standard input, which is the terminal when [`Started::took_terminal`] is set.
fn terminal() -> BorrowedFd<'static> {
    // SAFETY: descriptor 0 is open for the whole life of the process (gpudctl never closes
    // it), and this borrow is used only for tcgetpgrp and tcsetpgrp, which do not close it.
    unsafe { BorrowedFd::borrow_raw(0) }
}

fn errno(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

#[cfg(test)]
mod tests {
    use super::cpu_mask;

    #[test]
    fn the_mask_holds_the_granted_cpus_and_no_list_pins_nothing() {
        assert!(cpu_mask(&[]).unwrap().is_none());
        let mask = cpu_mask(&[0, 3]).unwrap().unwrap();
        assert!(mask.is_set(0).unwrap() && mask.is_set(3).unwrap());
        assert!(!mask.is_set(1).unwrap());
        let e = cpu_mask(&[1 << 20]).unwrap_err();
        assert!(e.to_string().contains("CPU 1048576"), "{e}");
    }
}
