// Only gpud-client makes compute tokens (from a compute lease, or an unshared claim under its
// explicit name): its constructor is not reachable from outside.
use gpud_client::ComputeToken;

fn main() -> gpud_cuda::Result<()> {
    let device = gpud_cuda::Device::open("GPU-00000000-0000-0000-0000-000000000001")?;
    let forged = ComputeToken::new(1, "GPU-00000000-0000-0000-0000-000000000001", None);
    device.synchronize(&forged)
}
