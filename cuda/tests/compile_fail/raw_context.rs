// The cudarc context (and the stream, which hands out its context) would let anyone
// synchronize without a token: neither is reachable from the device, an arena or a buffer.
use gpud_client::{ExclusiveDevice, Reservation};

fn main() -> gpud_cuda::Result<()> {
    let lease = ExclusiveDevice::assume_unshared("GPU-00000000-0000-0000-0000-000000000001", 0, 1 << 20);
    let device = gpud_cuda::Device::open(lease.device_uuid())?;
    device.context().synchronize()?;
    device.stream().context().synchronize()?;
    let arena = device.reserve(&lease)?;
    arena.stream().synchronize()?;
    let buffer = arena.alloc::<u64>(1)?;
    buffer.device().context().synchronize()?;
    Ok(())
}
