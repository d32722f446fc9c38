// The driver's free/total memory is a device-global reading: it takes a token.
fn main() -> gpud_cuda::Result<()> {
    let device = gpud_cuda::Device::open("GPU-00000000-0000-0000-0000-000000000001")?;
    let (_free, _total) = device.mem_info()?;
    Ok(())
}
