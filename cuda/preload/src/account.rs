//! The books: what the process holds on each device (its lease) and uses there (its contexts,
//! live allocations, VMM handles, stream-ordered pools' reservations), and the decisions drawn
//! from them: does an allocation fit, to what should the lease grow, when should it shrink.
//! Pure: no FFI, no I/O.

use std::collections::HashMap;

/// A CUDA device ordinal, as the driver numbers the devices this process sees.
pub type Ordinal = i32;

/// `x` rounded up to a multiple of `step` (saturating).
pub fn round_up(x: u64, step: u64) -> u64 {
    if step <= 1 {
        return x;
    }
    x.div_ceil(step).saturating_mul(step)
}

/// How leases are sized: grown to a multiple of `step`, shrunk only once the unused part
/// exceeds `shrink_above` (hysteresis: a program that frees and allocates again around one
/// size does not talk to gpud each time), never below `floor` (the size asked up front).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// Growth and shrinking go in multiples of this.
    pub step: u64,
    /// The unused part that makes a lease shrink.
    pub shrink_above: u64,
    /// The smallest lease after a shrink.
    pub floor: u64,
}

impl Sizing {
    /// The lease that holds `needed` bytes: `needed` rounded up to the step.
    pub fn grown(&self, needed: u64) -> u64 {
        round_up(needed, self.step)
    }

    /// The smaller lease a device should shrink to, if any: only when the unused part
    /// (`lease − used`) exceeds `shrink_above`, to `used` rounded up to the step, at least the
    /// floor.
    pub fn shrunk(&self, lease: u64, used: u64) -> Option<u64> {
        if lease.saturating_sub(used) <= self.shrink_above {
            return None;
        }
        let target = round_up(used, self.step).max(self.floor);
        (target < lease).then_some(target)
    }
}

/// Whether an allocation may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// It fits in the lease; its bytes are counted as used (pending) until settled.
    Fits,
    /// It does not fit: the lease must grow to `to` first.
    Grow {
        /// The lease that would hold it.
        to: u64,
    },
    /// It does not fit and may not grow: `CUDA_ERROR_OUT_OF_MEMORY`.
    Refuse,
}

/// One device's side of the books.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceBooks {
    /// Bytes the lease reserves (0 when none is held).
    pub lease: u64,
    /// Bytes counted as used: context footprint, live blocks, VMM handles, pool reservations,
    /// and admitted allocations not yet settled.
    pub used: u64,
    /// Whether the context's footprint has been counted.
    pub context_counted: bool,
}

impl DeviceBooks {
    /// What the lease has left (what `cuMemGetInfo` reports free).
    pub fn unused(&self) -> u64 {
        self.lease.saturating_sub(self.used)
    }
}

/// The books of every device and every allocation of the process.
#[derive(Debug, Default)]
pub struct Books {
    devices: HashMap<Ordinal, DeviceBooks>,
    /// Device pointer → (device, bytes): cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, and
    /// stream-ordered blocks whose pool cannot be asked for its reservation.
    blocks: HashMap<u64, (Ordinal, u64)>,
    /// VMM allocation handle → (device, bytes): cuMemCreate.
    handles: HashMap<u64, (Ordinal, u64)>,
    /// Memory pool → (device, bytes it reserves, as the driver last reported).
    pools: HashMap<usize, (Ordinal, u64)>,
}

impl Books {
    /// One device's books.
    pub fn device(&self, dev: Ordinal) -> DeviceBooks {
        self.devices.get(&dev).copied().unwrap_or_default()
    }

    fn entry(&mut self, dev: Ordinal) -> &mut DeviceBooks {
        self.devices.entry(dev).or_default()
    }

    /// The lease of `dev` is now `bytes` (granted, grown, shrunk, or 0 when lost).
    pub fn set_lease(&mut self, dev: Ordinal, bytes: u64) {
        self.entry(dev).lease = bytes;
    }

    /// Whether `size` more bytes fit on `dev`. `may_grow`: the lease may be grown (policy
    /// `grow`, gpud reachable); otherwise an allocation past it is refused. When it fits, the
    /// bytes are counted as used at once, so that concurrent allocations cannot both pass; the
    /// caller settles them ([`Books::settle_block`] and friends) or takes them back
    /// ([`Books::cancel`]).
    pub fn admit(&mut self, dev: Ordinal, size: u64, may_grow: bool, sizing: &Sizing) -> Admit {
        let d = self.entry(dev);
        let needed = d.used.saturating_add(size);
        if needed <= d.lease {
            d.used = needed;
            Admit::Fits
        } else if may_grow {
            Admit::Grow {
                to: sizing.grown(needed),
            }
        } else {
            Admit::Refuse
        }
    }

    /// Counts `size` bytes as used without asking (the context footprint, a pool that reserved
    /// more than admitted, books kept while not enforcing).
    pub fn charge(&mut self, dev: Ordinal, size: u64) {
        let d = self.entry(dev);
        d.used = d.used.saturating_add(size);
    }

    /// Takes back bytes admitted for an allocation that the driver refused.
    pub fn cancel(&mut self, dev: Ordinal, size: u64) {
        let d = self.entry(dev);
        d.used = d.used.saturating_sub(size);
    }

    /// Counts the context's footprint once per device; true when this call counted it.
    pub fn charge_context(&mut self, dev: Ordinal, overhead: u64) -> bool {
        let d = self.entry(dev);
        if d.context_counted {
            return false;
        }
        d.context_counted = true;
        d.used = d.used.saturating_add(overhead);
        true
    }

    /// An admitted allocation of `admitted` bytes came back as block `ptr` of `actual` bytes
    /// (a pitched allocation may be larger than estimated).
    pub fn settle_block(&mut self, dev: Ordinal, ptr: u64, admitted: u64, actual: u64) {
        let d = self.entry(dev);
        d.used = d.used.saturating_sub(admitted).saturating_add(actual);
        if let Some((old_dev, old)) = self.blocks.insert(ptr, (dev, actual)) {
            // The driver reused an address we still counted: the old block was freed behind
            // our back (a path we do not see); stop counting it.
            self.cancel(old_dev, old);
        }
    }

    /// Block `ptr` was freed: its device, once its bytes are no longer counted (None for a
    /// pointer the books never saw).
    pub fn free_block(&mut self, ptr: u64) -> Option<Ordinal> {
        let (dev, size) = self.blocks.remove(&ptr)?;
        self.cancel(dev, size);
        Some(dev)
    }

    /// Whether `ptr` is a block the books count (stream-ordered frees: a block counted alone,
    /// not through its pool).
    pub fn has_block(&self, ptr: u64) -> bool {
        self.blocks.contains_key(&ptr)
    }

    /// An admitted VMM allocation came back as `handle`.
    pub fn settle_handle(&mut self, dev: Ordinal, handle: u64, size: u64) {
        if let Some((old_dev, old)) = self.handles.insert(handle, (dev, size)) {
            self.cancel(old_dev, old);
        }
    }

    /// VMM handle `handle` was released: its device (None for a handle never seen).
    pub fn release_handle(&mut self, handle: u64) -> Option<Ordinal> {
        let (dev, size) = self.handles.remove(&handle)?;
        self.cancel(dev, size);
        Some(dev)
    }

    /// Pool `pool` of device `dev` reserves `reserved` bytes now (the driver's
    /// `RESERVED_MEM_CURRENT`): the books follow it, up or down.
    pub fn set_pool(&mut self, dev: Ordinal, pool: usize, reserved: u64) {
        let old = self.pools.insert(pool, (dev, reserved));
        if let Some((old_dev, old_bytes)) = old {
            self.cancel(old_dev, old_bytes);
        }
        self.charge(dev, reserved);
    }

    /// What the books last knew pool `pool` to reserve.
    #[cfg(test)]
    pub fn pool_reserved(&self, pool: usize) -> u64 {
        self.pools.get(&pool).map_or(0, |&(_, r)| r)
    }

    /// The pools the books follow, with their devices.
    pub fn pools(&self) -> Vec<(usize, Ordinal)> {
        self.pools.iter().map(|(&p, &(d, _))| (p, d)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn sizing() -> Sizing {
        Sizing {
            step: GIB,
            shrink_above: 2 * GIB,
            floor: GIB,
        }
    }

    #[test]
    fn rounding_goes_up_to_the_step() {
        assert_eq!(round_up(0, GIB), 0);
        assert_eq!(round_up(1, GIB), GIB);
        assert_eq!(round_up(GIB, GIB), GIB);
        assert_eq!(round_up(GIB + 1, GIB), 2 * GIB);
        assert_eq!(round_up(7, 0), 7);
        assert_eq!(round_up(u64::MAX, GIB), u64::MAX, "saturates");
    }

    #[test]
    fn allocations_within_the_lease_fit_and_count_at_once() {
        let mut b = Books::default();
        b.set_lease(0, 2 * GIB);
        assert_eq!(b.admit(0, GIB, true, &sizing()), Admit::Fits);
        assert_eq!(b.device(0).used, GIB, "counted before the driver answers");
        assert_eq!(b.admit(0, GIB, true, &sizing()), Admit::Fits);
        assert_eq!(b.device(0).unused(), 0);
        // Concurrent callers see the pending bytes: a third does not fit.
        assert_eq!(b.admit(0, 1, false, &sizing()), Admit::Refuse);
        b.cancel(0, GIB);
        assert_eq!(b.device(0).used, GIB);
    }

    #[test]
    fn past_the_lease_it_grows_to_the_rounded_need_or_is_refused() {
        let mut b = Books::default();
        b.set_lease(0, GIB);
        b.charge_context(0, 512 * MIB);
        assert_eq!(
            b.admit(0, 3 * GIB, true, &sizing()),
            Admit::Grow { to: 4 * GIB },
            "3 GiB + 512 MiB of context, to the next GiB"
        );
        assert_eq!(b.device(0).used, 512 * MIB, "nothing counted for a grow");
        assert_eq!(b.admit(0, 3 * GIB, false, &sizing()), Admit::Refuse);
        b.set_lease(0, 4 * GIB);
        assert_eq!(b.admit(0, 3 * GIB, true, &sizing()), Admit::Fits);
    }

    #[test]
    fn the_context_is_counted_once_per_device() {
        let mut b = Books::default();
        assert!(b.charge_context(0, 100));
        assert!(!b.charge_context(0, 100));
        assert!(b.charge_context(1, 100));
        assert_eq!(b.device(0).used, 100);
        assert_eq!(b.device(1).used, 100);
    }

    #[test]
    fn blocks_settle_at_their_actual_size_and_free_by_pointer() {
        let mut b = Books::default();
        b.set_lease(0, 4 * GIB);
        assert_eq!(b.admit(0, 1000, true, &sizing()), Admit::Fits);
        b.settle_block(0, 0xa000, 1000, 1024);
        assert_eq!(b.device(0).used, 1024);
        assert!(b.has_block(0xa000));
        assert_eq!(b.free_block(0xa000), Some(0));
        assert_eq!(b.device(0).used, 0);
        assert_eq!(b.free_block(0xa000), None, "a second free counts nothing");
        assert_eq!(b.device(0).used, 0);
    }

    #[test]
    fn handles_count_until_released() {
        let mut b = Books::default();
        b.set_lease(1, 4 * GIB);
        assert_eq!(b.admit(1, 2 * GIB, true, &sizing()), Admit::Fits);
        b.settle_handle(1, 77, 2 * GIB);
        assert_eq!(b.device(1).used, 2 * GIB);
        assert_eq!(b.release_handle(77), Some(1));
        assert_eq!(b.device(1).used, 0);
        assert_eq!(b.release_handle(77), None);
    }

    #[test]
    fn pools_follow_the_driver_s_reservation_up_and_down() {
        let mut b = Books::default();
        b.set_lease(0, 8 * GIB);
        b.set_pool(0, 0x55, 2 * GIB);
        assert_eq!(b.device(0).used, 2 * GIB);
        b.set_pool(0, 0x55, 3 * GIB);
        assert_eq!(b.device(0).used, 3 * GIB, "replaced, not added");
        assert_eq!(b.pool_reserved(0x55), 3 * GIB);
        b.set_pool(0, 0x55, 0);
        assert_eq!(b.device(0).used, 0, "a trimmed pool gives its bytes back");
        assert_eq!(b.pools(), vec![(0x55, 0)]);
    }

    #[test]
    fn leases_shrink_only_past_the_hysteresis_and_never_below_the_floor() {
        let s = sizing();
        // 2 GiB unused is not more than 2 GiB: keep.
        assert_eq!(s.shrunk(4 * GIB, 2 * GIB), None);
        // 3 GiB unused: shrink to the used part, rounded up.
        assert_eq!(s.shrunk(5 * GIB, 2 * GIB - MIB), Some(2 * GIB));
        // Nothing used: down to the floor, not to 0.
        assert_eq!(s.shrunk(8 * GIB, 0), Some(GIB));
        // A lease at the floor stays.
        let big_floor = Sizing {
            floor: 8 * GIB,
            ..s
        };
        assert_eq!(big_floor.shrunk(8 * GIB, 0), None);
        assert_eq!(s.grown(3 * GIB + 1), 4 * GIB);
    }
}
