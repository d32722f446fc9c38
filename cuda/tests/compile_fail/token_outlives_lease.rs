// A token borrows its lease: once the lease is released (or dropped), no token of it is left
// to present.
use gpud_client::{ExclusiveDevice, Reservation, blocking};

fn released(device: &gpud_cuda::Device, lease: blocking::Lease) -> gpud_cuda::Result<()> {
    let token = lease.compute_token().expect("a compute lease");
    lease.release().expect("released");
    device.synchronize(&token)
}

fn dropped(device: &gpud_cuda::Device) -> gpud_cuda::Result<()> {
    let token = {
        let lease = ExclusiveDevice::assume_unshared("GPU-00000000-0000-0000-0000-000000000001", 0, 1 << 20);
        lease.compute_token().expect("an unshared claim holds the slot")
    };
    device.synchronize(&token)
}

fn main() {
    let _ = (released, dropped);
}
