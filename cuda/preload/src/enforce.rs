//! The process's side of its leases: one memory lease per device, acquired at the device's
//! first use, grown when an allocation needs more (policy `grow`) and shrunk lazily when much
//! of it lies unused; what happens when gpud cannot be reached; what the program is told about
//! its memory. The wrapped entry points (`exports`) call in here around the real driver calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use gpud_proto::{ErrorCode, Event, LeaseId};

use crate::account::{Admit, Books, Ordinal, Sizing};
use crate::compute::{Compute, Interlock};
use crate::config::{Config, OnLost, Policy};
use crate::driver::{self, CUDA_ERROR_OUT_OF_MEMORY, CuResult};
use crate::gpud::{ClientError, Connection, Notice};
use crate::log;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One device's lease.
#[derive(Default)]
struct Slot {
    /// The lease, while one is held.
    lease: Option<LeaseId>,
    /// The first use was handled (a lease asked for, granted or not).
    started: bool,
    /// Held while the lease is acquired or resized, so that one grow serves concurrent
    /// allocations and a shrink never crosses a grow.
    changing: Arc<Mutex<()>>,
}

enum Link {
    Untried,
    Up(Arc<Connection>),
    Down,
}

/// The interposer's state in this process.
pub struct Enforcer {
    config: Config,
    sizing: Sizing,
    books: Mutex<Books>,
    slots: Mutex<HashMap<Ordinal, Slot>>,
    link: Mutex<Link>,
    lost: AtomicBool,
    compute: Compute,
}

static ENFORCER: OnceLock<Enforcer> = OnceLock::new();

/// An admitted allocation: whether the lease grew for it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted {
    grew: bool,
}

impl Enforcer {
    /// The process's enforcer, configured from the environment on first use.
    pub fn get() -> &'static Enforcer {
        ENFORCER.get_or_init(|| {
            let (config, problems) = Config::from_lookup(|k| std::env::var(k).ok());
            log::set_quiet(config.quiet);
            for p in problems {
                log::error(&p);
            }
            Enforcer::new(config)
        })
    }

    fn new(config: Config) -> Self {
        let sizing = Sizing {
            step: config.grow_step,
            shrink_above: config.shrink_above,
            floor: config.initial_lease(),
        };
        Self {
            compute: Compute::new(config.compute_idle),
            config,
            sizing,
            books: Mutex::new(Books::default()),
            slots: Mutex::new(HashMap::new()),
            link: Mutex::new(Link::Untried),
            lost: AtomicBool::new(false),
        }
    }

    /// Whether leases are enforced: always, except after gpud was lost under
    /// `GPUD_ON_LOST=continue`.
    pub fn enforcing(&self) -> bool {
        !(self.lost.load(Ordering::Acquire) && self.config.on_lost == OnLost::Continue)
    }

    fn may_grow(&self) -> bool {
        self.config.policy == Policy::Grow && !self.lost.load(Ordering::Acquire)
    }

    fn label(&self) -> String {
        self.config.label.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/self/comm")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "cuda".into())
        })
    }

    fn connection(&self) -> Option<Arc<Connection>> {
        let mut link = lock(&self.link);
        match &*link {
            Link::Up(c) => return Some(c.clone()),
            Link::Down => return None,
            Link::Untried => {}
        }
        let client = format!("gpud-preload {}", self.label());
        match Connection::connect(&self.config.socket, &client, |n| {
            Enforcer::get().on_notice(n)
        }) {
            Ok(c) => {
                let c = Arc::new(c);
                *link = Link::Up(c.clone());
                Some(c)
            }
            Err(e) => {
                *link = Link::Down;
                drop(link);
                self.lose(&format!(
                    "cannot reach gpud at {}: {e}",
                    self.config.socket.display()
                ));
                None
            }
        }
    }

    /// gpud is gone (or was never there): apply `GPUD_ON_LOST`, once.
    fn lose(&self, why: &str) {
        *lock(&self.link) = Link::Down;
        if self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        match self.config.on_lost {
            OnLost::Fail => log::error(&format!(
                "{why}; allocations beyond what this process held fail (GPUD_ON_LOST=fail)"
            )),
            OnLost::Continue => log::error(&format!(
                "{why}; leases are no longer enforced (GPUD_ON_LOST=continue)"
            )),
        }
    }

    fn on_notice(&self, notice: Notice) {
        match notice {
            Notice::Lost(why) => self.lose(&why),
            Notice::Event(Event::Revoked { lease, .. })
                if self.compute.on_lease_event(lease, true) =>
            {
                log::error(&format!(
                    "compute lease {lease} was revoked; the next launch asks for it again"
                ));
            }
            Notice::Event(Event::YieldRequested { lease, .. })
                if self.compute.on_lease_event(lease, false) =>
            {
                log::info(&format!(
                    "gpud asks for compute lease {lease}: given back once the context is idle"
                ));
            }
            Notice::Event(Event::Revoked { lease, reason }) => {
                let dev = self.device_of_lease(lease);
                if let Some(dev) = dev {
                    if let Some(slot) = lock(&self.slots).get_mut(&dev) {
                        slot.lease = None;
                    }
                    lock(&self.books).set_lease(dev, 0);
                }
                let reason = serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                let then = match self.config.policy {
                    Policy::Grow => "the next allocation there asks for a new lease",
                    Policy::Fail => "allocations there fail",
                };
                log::error(&format!("lease {lease} was revoked ({reason}); {then}"));
            }
            Notice::Event(Event::YieldRequested { lease, .. }) => log::error(&format!(
                "gpud asks this process to give lease {lease} back; a CUDA program cannot \
                 give memory back on request, so it keeps the lease"
            )),
            Notice::Event(Event::ShuttingDown) => log::info("gpud is shutting down"),
            Notice::Event(Event::OverUse {
                device_index,
                used_bytes,
                reserved_bytes,
                ..
            }) => log::error(&format!(
                "gpud sees {used_bytes} bytes used on its device {device_index} against \
                 {reserved_bytes} leased (memory allocated by a path the interposer does not see)"
            )),
            Notice::Event(_) => {}
        }
    }

    fn device_of_lease(&self, lease: LeaseId) -> Option<Ordinal> {
        lock(&self.slots)
            .iter()
            .find(|(_, s)| s.lease == Some(lease))
            .map(|(&d, _)| d)
    }

    fn changing(&self, dev: Ordinal) -> (Arc<Mutex<()>>, bool) {
        let mut slots = lock(&self.slots);
        let slot = slots.entry(dev).or_default();
        (slot.changing.clone(), slot.started)
    }

    /// The device's first use: acquire its lease (waiting in gpud's queue) and count the
    /// context's footprint. Later calls return at once.
    pub fn first_use(&self, dev: Ordinal) {
        let (changing, started) = self.changing(dev);
        if started {
            return;
        }
        let _changing = lock(&changing);
        if self.changing(dev).1 {
            return;
        }
        lock(&self.books).charge_context(dev, self.config.context_overhead);
        if self.enforcing() {
            let initial = self.config.initial_lease();
            match self.acquire(dev, initial) {
                Ok(bytes) => lock(&self.books).set_lease(dev, bytes),
                Err(e) => log::error(&format!(
                    "no lease on device {dev}: {e}; allocations there beyond what is held fail"
                )),
            }
        }
        if let Some(slot) = lock(&self.slots).get_mut(&dev) {
            slot.started = true;
        }
        let over = {
            let b = lock(&self.books).device(dev);
            (b.used > b.lease).then_some(b.used)
        };
        // A context larger than the lease asked for: grow to hold it (never fail the context).
        if let Some(used) = over
            && self.enforcing()
            && self.may_grow()
        {
            drop(_changing);
            self.grow(dev, self.sizing.grown(used));
        }
    }

    /// Acquires a lease of `bytes` on `dev`: its granted size. Caller holds the slot's lock.
    fn acquire(&self, dev: Ordinal, bytes: u64) -> Result<u64, String> {
        let uuid = driver::driver()
            .and_then(|d| d.device_uuid(dev))
            .ok_or_else(|| format!("the driver does not name device {dev}'s UUID"))?;
        let conn = self.connection().ok_or("gpud is not reachable")?;
        let timeout = self.config.acquire_timeout;
        match conn.acquire(
            &uuid,
            bytes,
            false,
            self.config.class,
            Some(self.label()),
            timeout,
        ) {
            Ok(info) => {
                if let Some(slot) = lock(&self.slots).get_mut(&dev) {
                    slot.lease = Some(info.lease);
                }
                log::info(&format!(
                    "lease {} of {} bytes on device {dev} ({uuid})",
                    info.lease, info.vram_bytes
                ));
                if conn.has_feature("attach")
                    && let Err(e) = conn.attach(info.lease)
                {
                    log::error(&format!("cannot attach to lease {}: {e}", info.lease));
                }
                Ok(info.vram_bytes)
            }
            Err(ClientError::Lost) => {
                self.lose("the connection to gpud ended");
                Err("the connection to gpud ended".into())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Grows `dev`'s lease to `to` bytes (acquiring one when none is held), waiting in gpud's
    /// queue up to the grow timeout. True when the lease holds `to` bytes now.
    fn grow(&self, dev: Ordinal, to: u64) -> bool {
        let (changing, _) = self.changing(dev);
        let _changing = lock(&changing);
        if lock(&self.books).device(dev).lease >= to {
            // Another thread grew it meanwhile.
            return true;
        }
        let Some(conn) = self.connection() else {
            return false;
        };
        let lease = lock(&self.slots).get(&dev).and_then(|s| s.lease);
        let grown = match lease {
            Some(id) => match conn.resize(id, to, Some(self.config.grow_timeout)) {
                Ok(bytes) => Ok(bytes),
                Err(ClientError::Lost) => {
                    self.lose("the connection to gpud ended");
                    Err("the connection to gpud ended".into())
                }
                Err(ClientError::Refused(e)) if e.code == ErrorCode::TimedOut => Err(format!(
                    "gpud did not grant it within {:?} (GPUD_GROW_TIMEOUT)",
                    self.config.grow_timeout
                )),
                Err(e) => Err(e.to_string()),
            },
            None => self.acquire(dev, to),
        };
        match grown {
            Ok(bytes) => {
                lock(&self.books).set_lease(dev, bytes);
                log::info(&format!("lease on device {dev} grown to {bytes} bytes"));
                bytes >= to
            }
            Err(e) => {
                log::error(&format!(
                    "the lease on device {dev} cannot grow to {to} bytes: {e}; the allocation \
                     fails with CUDA_ERROR_OUT_OF_MEMORY"
                ));
                false
            }
        }
    }

    /// Admits an allocation of `size` bytes on `dev`: counted as used when it may go ahead
    /// (settle or cancel it after the driver's answer), `CUDA_ERROR_OUT_OF_MEMORY` when it
    /// may not. Grows the lease first under policy `grow`.
    pub fn admit(&self, dev: Ordinal, size: u64) -> Result<Admitted, CuResult> {
        self.first_use(dev);
        let mut grew = false;
        loop {
            if !self.enforcing() {
                lock(&self.books).charge(dev, size);
                return Ok(Admitted { grew });
            }
            let may_grow = self.may_grow();
            let decision = lock(&self.books).admit(dev, size, may_grow, &self.sizing);
            match decision {
                Admit::Fits => return Ok(Admitted { grew }),
                Admit::Refuse => {
                    log::info(&format!(
                        "an allocation of {size} bytes on device {dev} is past the lease: \
                         CUDA_ERROR_OUT_OF_MEMORY"
                    ));
                    return Err(CUDA_ERROR_OUT_OF_MEMORY);
                }
                Admit::Grow { to } => {
                    if !self.grow(dev, to) {
                        return Err(CUDA_ERROR_OUT_OF_MEMORY);
                    }
                    grew = true;
                }
            }
        }
    }

    /// Runs an admitted allocation. When the lease grew for it and the driver still says
    /// out-of-memory, the memory gpud granted is most likely still held by a process that just
    /// ended (its lease ends when its connection closes, its device memory a moment later):
    /// the call is retried, with a growing pause, for up to `GPUD_SETTLE`.
    pub fn allocate(&self, admitted: Admitted, mut call: impl FnMut() -> CuResult) -> CuResult {
        let r = call();
        if !admitted.grew || r != CUDA_ERROR_OUT_OF_MEMORY {
            return r;
        }
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(5);
        log::info("the driver is still freeing memory the lease grew into: retrying");
        loop {
            std::thread::sleep(pause);
            let r = call();
            if r != CUDA_ERROR_OUT_OF_MEMORY || start.elapsed() >= self.config.settle {
                return r;
            }
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
        }
    }

    /// The driver refused an admitted allocation: its bytes are not used.
    pub fn cancel(&self, dev: Ordinal, size: u64) {
        lock(&self.books).cancel(dev, size);
    }

    /// An admitted allocation became block `ptr` of `actual` bytes.
    pub fn settle_block(&self, dev: Ordinal, ptr: u64, admitted: u64, actual: u64) {
        lock(&self.books).settle_block(dev, ptr, admitted, actual);
    }

    /// Block `ptr` was freed.
    pub fn freed_block(&self, ptr: u64) {
        let dev = lock(&self.books).free_block(ptr);
        if let Some(dev) = dev {
            self.maybe_shrink(dev);
        }
    }

    /// Whether the books count `ptr` as a block of its own.
    pub fn has_block(&self, ptr: u64) -> bool {
        lock(&self.books).has_block(ptr)
    }

    /// An admitted VMM allocation became `handle`.
    pub fn settle_handle(&self, dev: Ordinal, handle: u64, size: u64) {
        lock(&self.books).settle_handle(dev, handle, size);
    }

    /// VMM handle `handle` was released.
    pub fn released_handle(&self, handle: u64) {
        let dev = lock(&self.books).release_handle(handle);
        if let Some(dev) = dev {
            self.maybe_shrink(dev);
        }
    }

    /// The bytes an allocation of `size` from `pool` adds to the pool's reservation at most:
    /// what does not fit in the part of the reservation that live blocks leave free.
    pub fn pool_growth(&self, pool: usize, size: u64) -> u64 {
        let Some(d) = driver::driver() else {
            return size;
        };
        match (d.pool_reserved(pool), d.pool_used(pool)) {
            (Some(reserved), Some(used)) => size.saturating_sub(reserved.saturating_sub(used)),
            _ => size,
        }
    }

    /// A stream-ordered allocation from `pool` admitted with `admitted` bytes went ahead (or
    /// not): the books take the pool's reservation as the driver reports it. False when the
    /// driver cannot report it (the caller then counts the block alone).
    pub fn settle_pool(&self, dev: Ordinal, pool: usize, admitted: u64) -> bool {
        let reserved = driver::driver().and_then(|d| d.pool_reserved(pool));
        let mut books = lock(&self.books);
        books.cancel(dev, admitted);
        let Some(reserved) = reserved else {
            return false;
        };
        books.set_pool(dev, pool, reserved);
        let b = books.device(dev);
        drop(books);
        // The pool reserves in chunks and may have taken a little more than admitted.
        if b.used > b.lease && self.enforcing() && self.may_grow() {
            self.grow(dev, self.sizing.grown(b.used));
        }
        true
    }

    /// Reads every known pool's reservation again (frees shrink them only at the driver's
    /// next synchronisation or trim), then shrinks leases with much unused.
    pub fn refresh_pools(&self) {
        let Some(d) = driver::driver() else {
            return;
        };
        let pools = lock(&self.books).pools();
        let mut devices = Vec::new();
        for (pool, dev) in pools {
            if let Some(reserved) = d.pool_reserved(pool) {
                lock(&self.books).set_pool(dev, pool, reserved);
                devices.push(dev);
            }
        }
        devices.dedup();
        for dev in devices {
            self.maybe_shrink(dev);
        }
    }

    /// Gives memory back when the unused part of `dev`'s lease exceeds the hysteresis. The
    /// lease is lowered here at once and gpud told without waiting (a shrink is immediate
    /// there); skipped while a grow or acquire is under way.
    fn maybe_shrink(&self, dev: Ordinal) {
        if !self.enforcing() || self.lost.load(Ordering::Acquire) {
            return;
        }
        let (changing, _) = self.changing(dev);
        let Ok(_changing) = changing.try_lock() else {
            return;
        };
        let Some(lease) = lock(&self.slots).get(&dev).and_then(|s| s.lease) else {
            return;
        };
        let target = {
            let mut books = lock(&self.books);
            let b = books.device(dev);
            let target = self.sizing.shrunk(b.lease, b.used);
            if let Some(t) = target {
                books.set_lease(dev, t);
            }
            target
        };
        let Some(target) = target else { return };
        let Some(conn) = self.connection() else {
            return;
        };
        match conn.send(Connection::resize_op(lease, target, None)) {
            Ok(_answer) => log::info(&format!("lease {lease} shrunk to {target} bytes")),
            Err(e) => log::error(&format!("cannot shrink lease {lease}: {e}")),
        }
    }

    /// Whether kernel launches and device-global calls run under a compute lease.
    pub fn compute_enabled(&self) -> bool {
        self.config.compute
    }

    /// Runs `call`, a launch or device-global call on `dev`, under its compute lease
    /// (`GPUD_COMPUTE=auto`), or plainly.
    pub fn under_compute(&'static self, dev: Ordinal, call: impl FnOnce() -> CuResult) -> CuResult {
        if !self.config.compute {
            return call();
        }
        self.compute.under(self, dev, call)
    }

    /// What `cuMemGetInfo` reports for `dev` given the driver's answer: the lease's unused part
    /// (no more than the device really has free) and the lease as the total.
    pub fn mem_info(&self, dev: Ordinal, real_free: u64, real_total: u64) -> (u64, u64) {
        if !self.enforcing() {
            return (real_free, real_total);
        }
        self.first_use(dev);
        self.refresh_pools();
        if !self.enforcing() {
            return (real_free, real_total);
        }
        let b = lock(&self.books).device(dev);
        (b.unused().min(real_free), b.lease)
    }

    /// What `cuDeviceTotalMem` reports for `dev`: under policy `fail` the lease, or before the
    /// device's first use the lease it will start with (asking for none: programs enumerate
    /// every device). Under `grow` the device's own total, which the lease may grow to:
    /// frameworks read the total once and size for it (PyTorch's expandable segments reserve
    /// their address range from it, and a lease grown past that range crashed the program).
    pub fn total_mem(&self, dev: Ordinal, real_total: u64) -> u64 {
        if !self.enforcing() || self.may_grow() {
            return real_total;
        }
        let started = lock(&self.slots).get(&dev).is_some_and(|s| s.started);
        let lease = if started {
            lock(&self.books).device(dev).lease
        } else {
            self.config.initial_lease()
        };
        lease.min(real_total)
    }
}

impl Interlock for Enforcer {
    fn acquire_compute(&self, dev: Ordinal) -> Result<LeaseId, String> {
        let uuid = driver::driver()
            .and_then(|d| d.device_uuid(dev))
            .ok_or_else(|| format!("the driver does not name device {dev}'s UUID"))?;
        let conn = self.connection().ok_or("gpud is not reachable")?;
        let info = conn
            .acquire(&uuid, 0, true, self.config.class, Some(self.label()), None)
            .map_err(|e| e.to_string())?;
        if conn.has_feature("attach")
            && let Err(e) = conn.attach(info.lease)
        {
            log::error(&format!("cannot attach to lease {}: {e}", info.lease));
        }
        Ok(info.lease)
    }

    fn release_compute(&self, lease: LeaseId) {
        if let Some(conn) = self.connection()
            && let Err(e) = conn.send(Connection::release_op(lease))
        {
            log::error(&format!("cannot give compute lease {lease} back: {e}"));
        }
    }

    fn current_context(&self) -> usize {
        driver::driver().map_or(0, |d| d.current_context())
    }

    fn synchronize(&self, ctx: usize) -> bool {
        driver::driver().is_some_and(|d| d.synchronize_context(ctx))
    }
}
