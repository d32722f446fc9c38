// Only gpud-client makes compute tokens: its fields are private, so no literal builds one.
use gpud_client::ComputeToken;

fn main() -> gpud_cuda::Result<()> {
    let device = gpud_cuda::Device::open("GPU-00000000-0000-0000-0000-000000000001")?;
    let forged = ComputeToken {
        lease_id: 1,
        device_uuid: "GPU-00000000-0000-0000-0000-000000000001",
        lost: None,
        _not_send: std::marker::PhantomData,
    };
    device.synchronize(&forged)
}
