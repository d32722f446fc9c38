//! The lease journal under a full disk: gpud never announces a lease it could not record, so a
//! kill -9 and a restart never forget a lease a client holds (and never grant its memory
//! twice). The state directory is a tiny tmpfs, which needs root to mount; without it the test
//! says SKIPPED and passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use gpud_client::{LeaseRequest, blocking::Client};
use gpud_tests::{Daemon, wait_until};

/// A tmpfs mounted for the test; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).ok()?;
        std::fs::set_permissions(at, std::os::unix::fs::PermissionsExt::from_mode(0o700)).ok()?;
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(at.to_path_buf()))
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remount {}", self.0.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_never_loses_an_announced_lease() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED a_full_disk_never_loses_an_announced_lease: needs root (tmpfs mount)");
        return;
    }
    let mut tmpfs = None;
    let mut daemon = Daemon::start_prepared("1x16GiB", "", "info", |state| {
        tmpfs = Tmpfs::mount(state, "12k");
    });
    let Some(tmpfs) = tmpfs else {
        eprintln!("SKIPPED a_full_disk_never_loses_an_announced_lease: cannot mount a tmpfs here");
        return;
    };
    let client = Client::connect(&daemon.socket).unwrap();
    let label = "x".repeat(200);
    let lease_bytes: u64 = 128 << 20;
    // Acquire until a grant does not come: the disk is full and gpud holds the grant back.
    let mut held = Vec::new();
    let mut withheld = None;
    for i in 0..60 {
        let (tx, rx) = mpsc::channel();
        let c = client.clone();
        let request = LeaseRequest::new()
            .vram(lease_bytes)
            .label(format!("{i}-{label}"));
        std::thread::spawn(move || {
            let _ = tx.send(c.acquire(&request));
        });
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(lease) => held.push(lease.expect("granted")),
            Err(_) => {
                withheld = Some(rx);
                break;
            }
        }
    }
    assert!(
        withheld.is_some(),
        "60 grants announced on a 12 KiB tmpfs (room for about 25): announced without being journaled"
    );
    assert!(!held.is_empty(), "no grant at all fit the journal");
    // gpud still answers other sessions while it cannot write (the holder's own answers queue
    // behind its grant).
    let other = Client::connect(&daemon.socket).unwrap();
    other.ping().expect("gpud answers while the disk is full");
    drop(other);

    // gpud dies; the operator frees space; gpud comes back on the same journal.
    daemon.kill_and_restart_with(|| tmpfs.resize("1m"));
    let probe = Client::connect(&daemon.socket).unwrap();
    let ids: Vec<u64> = held.iter().map(|l| l.id()).collect();
    let back = wait_until(Duration::from_secs(10), || {
        let s = probe.status().unwrap();
        ids.iter().all(|id| s.leases.iter().any(|l| l.id == *id))
    });
    let status = probe.status().unwrap();
    assert!(
        back,
        "announced leases forgotten after the restart: held {ids:?}, gpud has {:?}\nlog:\n{}",
        status.leases.iter().map(|l| l.id).collect::<Vec<_>>(),
        daemon.log()
    );
    for lease in &held {
        assert!(!lease.is_lost(), "lease {} was lost", lease.id());
    }
    let device = &status.devices[0];
    assert!(
        device.reserved_bytes <= device.capacity_bytes,
        "over-committed: {} of {} bytes reserved",
        device.reserved_bytes,
        device.capacity_bytes
    );
    // Nothing the holders have can be granted to anyone else.
    let rest = device.capacity_bytes - held.len() as u64 * lease_bytes;
    let over = probe
        .try_acquire(
            &LeaseRequest::new().vram(rest + (1 << 20)),
            Duration::from_millis(100),
        )
        .unwrap();
    assert!(over.is_none(), "granted memory that announced leases hold");
}
