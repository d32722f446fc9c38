//! A D-Bus client of gpud for the system tests: acquires a lease over the bus, prints it, and
//! holds it until killed (the lease is freed when its unique name leaves the bus).
//!
//! Usage: `gpud-dbus-client ADDRESS DEVICE VRAM_BYTES COMPUTE(true|false) CLASS`
//! Prints `name <unique name>` once connected, then `granted <lease>` or `error <message>`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use zbus::proxy;

#[proxy(
    interface = "org.gpud.Manager1",
    default_service = "org.gpud.Manager1",
    default_path = "/org/gpud/Manager1"
)]
trait Manager1 {
    fn acquire(
        &self,
        device: &str,
        vram: u64,
        compute: bool,
        class: &str,
    ) -> zbus::Result<(u64, String, u32, String)>;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, device, vram, compute, class] = args.as_slice() else {
        bail!("usage: gpud-dbus-client ADDRESS DEVICE VRAM_BYTES COMPUTE CLASS");
    };
    let conn = zbus::connection::Builder::address(address.as_str())
        .method_timeout(std::time::Duration::from_secs(3600))
        .build()
        .await
        .context("connect to the bus")?;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(format!(
        "name {}",
        conn.unique_name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    ));
    let manager = Manager1Proxy::new(&conn).await?;
    match manager
        .acquire(device, vram.parse()?, compute.parse()?, class)
        .await
    {
        Ok((lease, ..)) => say(format!("granted {lease}")),
        Err(e) => {
            say(format!("error {e}"));
            return Ok(());
        }
    }
    // Hold the lease (and the connection) until killed.
    std::future::pending::<()>().await;
    Ok(())
}
