//! Resident bases as warm state: kept on the device in an *evictable* lease between phases,
//! given back when gpud reclaims the memory, and uploaded again when it fits.
//!
//! A prover that keeps its proving key's bases resident skips their upload in every phase,
//! but on a shared card that memory belongs to whoever really needs it. So the resident lease
//! is evictable: gpud counts it against the device, and when a request that is not evictable
//! cannot fit otherwise it sends a reclaim notice with a deadline. Then:
//!
//! - **Between phases** (the GPU thread waits for its next phase lease, or proves on the CPU):
//!   a reclaimer thread, woken by the notice, frees the bases at once and releases the lease.
//! - **During a phase** (the bases are in use): the GPU thread frees them when the phase ends,
//!   still under the phase's compute lease, so the pool is trimmed and checked.
//! - **After an eviction** each phase first tries to get the bases back, waiting at most
//!   [`WarmOptions::rewarm_wait`]: an evictable request is granted only when nothing that is
//!   not evictable wants the memory, so re-warming never takes memory from a real request.
//!   While it does not fit the phase runs *cold*: its own lease includes the bases (the engine
//!   sizes it, [`Engine::vram_bytes`]) and it uploads them.
//!
//! What stays across an eviction is what is cheap to keep: the CUDA context and the bases
//! page-locked in host memory (a direct DMA when they go up again).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpud_client::Reservation;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::Result;
use crate::lease::{LeaseRequest, Leaser};
use crate::params::ProvingKey;

/// How a prover keeps its resident bases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmOptions {
    /// Keep them in an evictable lease (default). Off: a plain VRAM-only lease that gpud never
    /// reclaims, held for the whole run.
    pub evictable: bool,
    /// After an eviction, how long a phase waits for the bases' lease before it runs cold.
    pub rewarm_wait: Duration,
}

impl Default for WarmOptions {
    fn default() -> Self {
        Self {
            evictable: true,
            rewarm_wait: Duration::ZERO,
        }
    }
}

/// What the resident bases went through in a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WarmReport {
    /// Bytes of the resident lease.
    pub vram_bytes: u64,
    /// Whether it was evictable.
    pub evictable: bool,
    /// Uploads of the bases (the first one included).
    pub loads: u32,
    /// Seconds spent uploading them, all loads together.
    pub load_seconds: f64,
    /// Reclaims answered by freeing the bases.
    pub evictions: u32,
    /// From each reclaim notice to the lease's release, in seconds.
    pub reclaim_answer_seconds: Vec<f64>,
    /// Phases that ran cold (their lease included the bases) after an eviction.
    pub cold_phases: u32,
    /// Phase leases given back unused because the bases were evicted while the lease was
    /// awaited (it was sized for resident bases).
    pub phase_retries: u32,
}

/// The resident lease and what happened to it, behind one lock: the GPU thread holds it for a
/// whole phase, so the reclaimer never frees bases a phase is using.
pub struct WarmState<Z> {
    lease: Option<Z>,
    report: WarmReport,
}

impl<Z: Reservation> WarmState<Z> {
    /// The device of the resident bases, when they are there.
    pub fn device(&self) -> Option<String> {
        self.lease.as_ref().map(|l| l.device_uuid().to_owned())
    }

    /// Whether the bases are on the device.
    pub fn is_warm(&self) -> bool {
        self.lease.is_some()
    }
}

/// The warm state, locked (for the length of a phase).
pub type WarmGuard<'w, Z> = MutexGuard<'w, WarmState<Z>>;

/// The resident bases of one run: the engine's, under a lease from the leaser.
pub struct Warm<'a, E: Engine, L: Leaser> {
    engine: &'a E,
    leaser: &'a L,
    key: &'a ProvingKey,
    request: LeaseRequest,
    opts: WarmOptions,
    state: Mutex<WarmState<L::Lease>>,
    /// Raised by notices on the resident lease (and at the end), for the reclaimer.
    wake: Arc<Wake>,
    done: AtomicBool,
}

/// A notice's arrival, for the reclaimer thread.
#[derive(Default)]
struct Wake {
    /// When the first notice not yet answered arrived.
    noticed: Mutex<Option<Instant>>,
    cv: Condvar,
}

impl Wake {
    fn noticed(&self) -> MutexGuard<'_, Option<Instant>> {
        self.noticed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn raise(&self, at: Instant) {
        self.noticed().get_or_insert(at);
        self.cv.notify_one();
    }
}

impl<'a, E: Engine, L: Leaser> Warm<'a, E, L>
where
    L: Sync,
    L::Lease: Send,
{
    /// The resident bases of `key`, `bytes` of them, not yet loaded.
    pub fn new(
        engine: &'a E,
        leaser: &'a L,
        key: &'a ProvingKey,
        mut request: LeaseRequest,
        opts: WarmOptions,
    ) -> Self {
        request.evictable = opts.evictable;
        let report = WarmReport {
            vram_bytes: request.vram_bytes,
            evictable: opts.evictable,
            ..WarmReport::default()
        };
        Self {
            engine,
            leaser,
            key,
            request,
            opts,
            state: Mutex::new(WarmState {
                lease: None,
                report,
            }),
            wake: Arc::default(),
            done: AtomicBool::new(false),
        }
    }

    /// The state, for a phase: held across it, so that the bases stay while it runs.
    pub fn lock(&self) -> MutexGuard<'_, WarmState<L::Lease>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first load: waits as long as it takes (the run starts warm).
    pub fn load_first(&self) -> Result<()> {
        let lease = self.leaser.acquire(&self.request)?;
        let mut state = self.lock();
        self.load(&mut state, lease)
    }

    /// Before a phase: when the bases were evicted, tries to get them back within
    /// `rewarm_wait`. Returns whether they are on the device now.
    pub fn rewarm(&self) -> Result<bool> {
        {
            let mut state = self.lock();
            if self.lost(&state) {
                // Revoked (a reclaim not answered in time, or an admin): the memory is no longer
                // ours to use. No phase runs now, so it goes without a compute lease.
                self.evict(&mut state, None)?;
            }
            if state.is_warm() {
                return Ok(true);
            }
        }
        // Not under the lock: the wait must not hold the reclaimer back.
        let Some(lease) = self
            .leaser
            .try_acquire(&self.request, self.opts.rewarm_wait)?
        else {
            return Ok(false);
        };
        let mut state = self.lock();
        self.load(&mut state, lease)?;
        Ok(true)
    }

    fn load(&self, state: &mut WarmState<L::Lease>, lease: L::Lease) -> Result<()> {
        let start = Instant::now();
        self.engine.load_resident(self.key, &lease)?;
        state.report.loads += 1;
        state.report.load_seconds += start.elapsed().as_secs_f64();
        // A notice wakes the reclaimer; it must be quick, so it only notes the time.
        *self.wake.noticed() = None;
        let wake = self.wake.clone();
        self.leaser
            .on_notice(&lease, Box::new(move || wake.raise(Instant::now())));
        state.lease = Some(lease);
        Ok(())
    }

    /// After a phase, still under its compute lease (`compute`) and the state lock: answers a
    /// reclaim that came during the phase by freeing the bases, trimmed and checked.
    pub fn after_phase(
        &self,
        state: &mut WarmState<L::Lease>,
        compute: &dyn Reservation,
    ) -> Result<()> {
        let asked = state
            .lease
            .as_ref()
            .is_some_and(|l| self.leaser.reclaim_requested(l));
        if asked && state.lease.as_ref().map(|l| l.device_uuid()) == Some(compute.device_uuid()) {
            self.evict(state, Some(compute))?;
        }
        Ok(())
    }

    /// A phase's lease, with the state locked for the phase: the bases are put back up first
    /// when they fit ([`Warm::rewarm`]); `request` makes the lease's request for the device of
    /// the resident bases (`None`: cold, anywhere), sized by the engine as they are now. A
    /// lease sized for resident bases that were evicted while it was awaited is given back and
    /// asked for again, larger. Counts retries and cold phases.
    pub fn phase_lease(
        &self,
        mut request: impl FnMut(Option<String>) -> LeaseRequest,
    ) -> Result<(L::Lease, LeaseRequest, WarmGuard<'_, L::Lease>)> {
        loop {
            let warm_device = if self.rewarm()? {
                self.lock().device()
            } else {
                None
            };
            let asked = request(warm_device.clone());
            let lease = self.leaser.acquire(&asked)?;
            let mut state = self.lock();
            if warm_device.is_none() || state.is_warm() {
                if !state.is_warm() {
                    state.report.cold_phases += 1;
                }
                return Ok((lease, asked, state));
            }
            state.report.phase_retries += 1;
            drop(state);
            drop(lease);
        }
    }

    fn evict(
        &self,
        state: &mut WarmState<L::Lease>,
        compute: Option<&dyn Reservation>,
    ) -> Result<()> {
        let noticed = self.wake.noticed().take().unwrap_or_else(Instant::now);
        let unloaded = self.engine.unload_resident(self.key, compute);
        // Released even when the unload failed: the memory is gone with the arena either way.
        state.lease = None;
        state.report.evictions += 1;
        state
            .report
            .reclaim_answer_seconds
            .push(noticed.elapsed().as_secs_f64());
        unloaded
    }

    /// The reclaimer thread: frees the bases when a reclaim notice comes while no phase uses
    /// them. Returns when [`Warm::finish`] is called.
    pub fn reclaimer(&self) -> Result<()> {
        loop {
            {
                let mut noticed = self.wake.noticed();
                while noticed.is_none() && !self.done.load(Ordering::Acquire) {
                    noticed = self
                        .wake
                        .cv
                        .wait(noticed)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
            if self.done.load(Ordering::Acquire) {
                return Ok(());
            }
            let mut state = self.lock();
            let asked = state.lease.as_ref().is_some_and(|l| {
                // A yield notice on warm state is gpud's maximum hold for memory leases:
                // given back like a reclaim, and the next phase takes a fresh lease.
                self.leaser.reclaim_requested(l)
                    || self.leaser.yield_requested(l)
                    || self.leaser.lost(l)
            });
            if asked {
                // No phase runs (this thread has the lock), so nothing of this process is in
                // flight on the device: the arena can go without a compute lease.
                self.evict(&mut state, None)?;
            } else {
                // Another notice (a yield, a revocation), or a reclaim a phase answered.
                *self.wake.noticed() = None;
            }
        }
    }

    /// Stops the reclaimer and hands back the lease (if the bases are still there) for the
    /// final unload, with the run's record.
    pub fn finish(&self) -> (Option<L::Lease>, WarmReport) {
        self.done.store(true, Ordering::Release);
        {
            // Under the lock the reclaimer waits on, so that the wake-up cannot be missed.
            let _guard = self.wake.noticed();
            self.wake.cv.notify_one();
        }
        let mut state = self.lock();
        (state.lease.take(), state.report.clone())
    }

    /// The record so far (the run goes on).
    pub fn report(&self) -> WarmReport {
        self.lock().report.clone()
    }

    /// Whether the resident lease was revoked (it ignored a reclaim, or an admin took it).
    pub fn lost(&self, state: &WarmState<L::Lease>) -> bool {
        state.lease.as_ref().is_some_and(|l| self.leaser.lost(l))
    }
}
