// Trimming a pool synchronizes the context first: it takes the compute slot's token, and a
// VRAM-only lease has none to lend.
use gpud_client::{ExclusiveDevice, Reservation};

fn main() -> gpud_cuda::Result<()> {
    let lease = ExclusiveDevice::assume_unshared("GPU-00000000-0000-0000-0000-000000000001", 0, 1 << 20);
    let device = gpud_cuda::Device::open(lease.device_uuid())?;
    let arena = device.reserve(&lease)?;
    arena.trim(0)?;
    Ok(())
}
