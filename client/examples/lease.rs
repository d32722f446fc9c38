//! Acquire a lease, watch for yield notices while "working", release.
//!
//! ```text
//! gpud --simulate 2x16GiB --socket /tmp/gpud.sock &
//! GPUD_SOCKET=/tmp/gpud.sock cargo run -p gpud-client --example lease -- 4GiB 2s
//! ```

use std::time::{Duration, Instant};

use gpud_client::proto::{parse_duration, parse_size};
use gpud_client::{LeaseRequest, blocking::Client};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let vram = parse_size(&args.next().unwrap_or_else(|| "1GiB".into()))?;
    let work = parse_duration(&args.next().unwrap_or_else(|| "1s".into()))?;

    let client = Client::connect_default()?;
    let started = Instant::now();
    let mut lease = client.acquire(&LeaseRequest::new().vram(vram).compute().label("example"))?;
    println!(
        "lease {} granted after {:?}: {} of device {} (CUDA_VISIBLE_DEVICES={})",
        lease.id(),
        started.elapsed(),
        gpud_client::proto::Bytes(lease.info().vram_bytes),
        lease.info().device_index,
        lease.cuda_visible_devices()
    );
    // The "GPU phase": check for a yield notice at every safe point.
    let deadline = Instant::now() + work;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if lease.yield_requested() {
            println!("asked to yield: releasing early");
            break;
        }
        if let Some(event) = lease.try_event() {
            println!("event: {event:?}");
        }
    }
    lease.release()?;
    println!("released");
    Ok(())
}
