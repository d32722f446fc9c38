// A context synchronize waits for every stream of every lease on the device: only the holder
// of the compute slot may do it, so it takes a token.
fn main() -> gpud_cuda::Result<()> {
    let device = gpud_cuda::Device::open("GPU-00000000-0000-0000-0000-000000000001")?;
    device.synchronize()
}
