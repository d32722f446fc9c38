//! Running a thread on the CPUs a host lease granted: the calling thread's CPU affinity is set
//! to them for as long as a [`Pinned`] guard lives, and put back when it drops.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::error::{ProverError, Result};

/// The calling thread pinned to some CPUs; its previous affinity comes back on drop.
#[derive(Debug)]
pub struct Pinned {
    previous: Option<CpuSet>,
}

/// Pins the calling thread to `cpus` (kernel numbers) until the guard drops. No CPUs (a leaser
/// without a daemon grants none): nothing changes.
pub fn pin_thread(cpus: &[u32]) -> Result<Pinned> {
    if cpus.is_empty() {
        return Ok(Pinned { previous: None });
    }
    let failed =
        |what: &str, e: nix::Error| ProverError::Affinity(format!("{what} for CPUs {cpus:?}: {e}"));
    // Pid 0: the calling thread (Linux applies the call to one thread).
    let me = Pid::from_raw(0);
    let previous = sched_getaffinity(me).map_err(|e| failed("reading the affinity", e))?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize)
            .map_err(|e| failed("CPU number out of range", e))?;
    }
    sched_setaffinity(me, &set).map_err(|e| failed("sched_setaffinity", e))?;
    Ok(Pinned {
        previous: Some(previous),
    })
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // Back to where the thread could run before; a failure leaves it on the lease's
            // CPUs, which are still valid ones.
            let _ = sched_setaffinity(Pid::from_raw(0), &previous);
        }
    }
}

/// The CPUs the calling thread may run on now.
pub fn current_cpus() -> Result<Vec<u32>> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| ProverError::Affinity(format!("reading the affinity: {e}")))?;
    Ok((0..CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .map(|i| i as u32)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_and_gets_its_affinity_back() {
        let before = current_cpus().unwrap();
        let cpu = *before.first().expect("some CPU");
        {
            let _pinned = pin_thread(&[cpu]).unwrap();
            assert_eq!(current_cpus().unwrap(), vec![cpu]);
        }
        assert_eq!(current_cpus().unwrap(), before);
        // No CPUs granted: nothing changes.
        drop(pin_thread(&[]).unwrap());
        assert_eq!(current_cpus().unwrap(), before);
        // A CPU beyond the kernel's set is a typed error, and the affinity stays.
        assert!(matches!(
            pin_thread(&[u32::MAX]),
            Err(ProverError::Affinity(_))
        ));
        assert_eq!(current_cpus().unwrap(), before);
    }
}
