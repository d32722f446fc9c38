//! `GPUD_COMPUTE=auto`: the compute lease (the device's interlock) taken before the first
//! kernel launch after idle and given back once the process has launched nothing for
//! `GPUD_COMPUTE_IDLE` and a synchronisation of its context succeeded, so that an unmodified
//! program holds the interlock only while it computes. Device-global calls (a context
//! synchronisation, a pool trim, a primary context reset) run under it too.
//!
//! Each device has a gate: launches pass under its read side (many threads at once, only
//! while the lease is held), and the idle watcher takes its write side to synchronise and
//! release, so no launch slips between the check and the release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError, RwLock};
use std::time::{Duration, Instant};

use gpud_proto::LeaseId;

use crate::account::Ordinal;
use crate::driver::CuResult;
use crate::log;

/// Takes and gives back compute leases; what it needs from the enforcer (gpud, the driver).
pub trait Interlock: Send + Sync {
    /// Acquires the compute lease of `dev` (waiting in gpud's queue).
    fn acquire_compute(&self, dev: Ordinal) -> Result<LeaseId, String>;
    /// Gives `lease` back.
    fn release_compute(&self, lease: LeaseId);
    /// The calling thread's current context.
    fn current_context(&self) -> usize;
    /// Synchronises `ctx` from the calling thread: true when it succeeded.
    fn synchronize(&self, ctx: usize) -> bool;
}

#[derive(Default)]
struct Gate {
    lease: Option<LeaseId>,
    /// The context launches came from, synchronised before the release.
    ctx: usize,
}

#[derive(Default)]
struct DeviceCompute {
    gate: RwLock<Gate>,
    /// Milliseconds since the start of the process at the last launch.
    last_launch_ms: AtomicU64,
    /// A yield notice came: give the lease back at the next safe point.
    yield_asked: AtomicBool,
}

/// The compute leases of the process.
pub struct Compute {
    idle: Duration,
    started: Instant,
    devices: Mutex<HashMap<Ordinal, Arc<DeviceCompute>>>,
    watcher: Once,
    /// gpud could not be asked: launches go ahead without the interlock (logged once).
    bypass: AtomicBool,
}

impl Compute {
    /// Gives leases back after `idle` without launches.
    pub fn new(idle: Duration) -> Self {
        Self {
            idle,
            started: Instant::now(),
            devices: Mutex::new(HashMap::new()),
            watcher: Once::new(),
            bypass: AtomicBool::new(false),
        }
    }

    fn device(&self, dev: Ordinal) -> Arc<DeviceCompute> {
        self.devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(dev)
            .or_default()
            .clone()
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Runs `call` (a launch or a device-global call on `dev`) under the compute lease,
    /// acquiring it first when it is not held. `interlock` is the enforcer; `'static` so that
    /// the idle watcher can keep it.
    pub fn under(
        &'static self,
        interlock: &'static dyn Interlock,
        dev: Ordinal,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let d = self.device(dev);
        loop {
            {
                let gate = d.gate.read().unwrap_or_else(PoisonError::into_inner);
                if gate.lease.is_some() || self.bypass.load(Ordering::Acquire) {
                    d.last_launch_ms.store(self.now_ms(), Ordering::Release);
                    return call();
                }
            }
            let mut gate = d.gate.write().unwrap_or_else(PoisonError::into_inner);
            if gate.lease.is_none() && !self.bypass.load(Ordering::Acquire) {
                match interlock.acquire_compute(dev) {
                    Ok(lease) => {
                        gate.lease = Some(lease);
                        gate.ctx = interlock.current_context();
                        d.yield_asked.store(false, Ordering::Release);
                        d.last_launch_ms.store(self.now_ms(), Ordering::Release);
                        self.watcher.call_once(|| self.start_watcher(interlock));
                    }
                    Err(e) => {
                        if !self.bypass.swap(true, Ordering::AcqRel) {
                            log::error(&format!(
                                "no compute lease on device {dev}: {e}; kernels are launched \
                                 without the interlock"
                            ));
                        }
                    }
                }
            }
        }
    }

    fn start_watcher(&'static self, interlock: &'static dyn Interlock) {
        let tick = (self.idle / 4).clamp(Duration::from_millis(5), Duration::from_millis(100));
        let spawned = std::thread::Builder::new()
            .name("gpud-preload-idle".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(tick);
                    self.release_idle(interlock);
                }
            });
        if let Err(e) = spawned {
            log::error(&format!(
                "cannot start the idle watcher ({e}): compute leases are kept until exit"
            ));
        }
    }

    /// Gives back every compute lease idle for long enough (or asked to yield) whose context
    /// synchronised.
    fn release_idle(&self, interlock: &dyn Interlock) {
        let devices: Vec<(Ordinal, Arc<DeviceCompute>)> = self
            .devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(&dev, d)| (dev, d.clone()))
            .collect();
        let idle_ms = self.idle.as_millis() as u64;
        for (dev, d) in devices {
            let due = |d: &DeviceCompute| {
                d.yield_asked.load(Ordering::Acquire)
                    || self
                        .now_ms()
                        .saturating_sub(d.last_launch_ms.load(Ordering::Acquire))
                        >= idle_ms
            };
            if d.gate
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .lease
                .is_none()
                || !due(&d)
            {
                continue;
            }
            // The write side: no launch is in flight, none starts until this is decided.
            let mut gate = d.gate.write().unwrap_or_else(PoisonError::into_inner);
            let Some(lease) = gate.lease else { continue };
            if !due(&d) {
                continue;
            }
            if interlock.synchronize(gate.ctx) {
                gate.lease = None;
                interlock.release_compute(lease);
                log::info(&format!(
                    "compute lease {lease} on device {dev} given back: idle and synchronised"
                ));
            }
        }
    }

    /// A yield notice or a revocation for `lease`: true when it is one of these.
    pub fn on_lease_event(&self, lease: LeaseId, revoked: bool) -> bool {
        let devices: Vec<Arc<DeviceCompute>> = self
            .devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for d in devices {
            if d.gate.read().unwrap_or_else(PoisonError::into_inner).lease != Some(lease) {
                continue;
            }
            if revoked {
                d.gate.write().unwrap_or_else(PoisonError::into_inner).lease = None;
            } else {
                d.yield_asked.store(true, Ordering::Release);
            }
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interlock that counts what it was asked.
    #[derive(Default)]
    struct Counting {
        acquired: AtomicU64,
        released: AtomicU64,
        sync_ok: AtomicBool,
    }

    impl Interlock for Counting {
        fn acquire_compute(&self, _dev: Ordinal) -> Result<LeaseId, String> {
            Ok(self.acquired.fetch_add(1, Ordering::SeqCst) + 1)
        }
        fn release_compute(&self, _lease: LeaseId) {
            self.released.fetch_add(1, Ordering::SeqCst);
        }
        fn current_context(&self) -> usize {
            7
        }
        fn synchronize(&self, ctx: usize) -> bool {
            assert_eq!(ctx, 7, "the launches' context");
            self.sync_ok.load(Ordering::SeqCst)
        }
    }

    fn leak<T>(t: T) -> &'static T {
        Box::leak(Box::new(t))
    }

    #[test]
    fn the_lease_is_taken_once_for_a_burst_and_given_back_after_idle() {
        let compute = leak(Compute::new(Duration::from_millis(40)));
        let lock = leak(Counting::default());
        lock.sync_ok.store(true, Ordering::SeqCst);
        for _ in 0..10 {
            assert_eq!(compute.under(lock, 0, || 0), 0);
        }
        assert_eq!(
            lock.acquired.load(Ordering::SeqCst),
            1,
            "one lease for the burst"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            lock.released.load(Ordering::SeqCst),
            1,
            "given back when idle"
        );
        compute.under(lock, 0, || 0);
        assert_eq!(
            lock.acquired.load(Ordering::SeqCst),
            2,
            "taken again after idle"
        );
    }

    #[test]
    fn a_context_that_does_not_synchronise_keeps_the_lease() {
        let compute = leak(Compute::new(Duration::from_millis(20)));
        let lock = leak(Counting::default());
        compute.under(lock, 0, || 0);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(lock.released.load(Ordering::SeqCst), 0);
        lock.sync_ok.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(lock.released.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_yield_notice_gives_the_lease_back_before_the_idle_time() {
        let compute = leak(Compute::new(Duration::from_secs(3600)));
        let lock = leak(Counting::default());
        lock.sync_ok.store(true, Ordering::SeqCst);
        compute.under(lock, 0, || 0);
        assert!(compute.on_lease_event(1, false));
        assert!(!compute.on_lease_event(99, false), "not a compute lease");
        let start = Instant::now();
        while lock.released.load(Ordering::SeqCst) == 0 && start.elapsed().as_secs() < 5 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(lock.released.load(Ordering::SeqCst), 1);
    }
}
