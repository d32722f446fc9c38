//! Bad input closes only the session that sent it.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_tests::{Daemon, frame, frames, read_until_eof};
use serde_json::json;

fn error_code(frames: &[serde_json::Value]) -> Option<String> {
    frames
        .iter()
        .find(|f| f["type"] == "error")
        .and_then(|f| f["error"]["code"].as_str().map(String::from))
}

#[test]
fn garbage_and_oversized_frames_close_only_their_session() {
    let daemon = Daemon::start("16GiB");
    let good = daemon.client();
    let lease = good
        .acquire(&LeaseRequest::new().vram(1 << 30).compute())
        .unwrap();

    // Garbage: a small length prefix followed by bytes that are not JSON.
    let mut bad = UnixStream::connect(&daemon.socket).unwrap();
    bad.write_all(&[0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4])
        .unwrap();
    let got = frames(&read_until_eof(&mut bad, Duration::from_secs(5)));
    assert_eq!(error_code(&got).as_deref(), Some("bad_frame"), "{got:?}");
    good.ping().unwrap();

    // A 1 GiB length prefix, after a valid hello.
    let mut big = UnixStream::connect(&daemon.socket).unwrap();
    big.write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    big.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    big.write_all(&[b'{'; 64]).unwrap();
    let got = frames(&read_until_eof(&mut big, Duration::from_secs(5)));
    assert_eq!(got[0]["type"], "welcome");
    assert_eq!(
        error_code(&got).as_deref(),
        Some("frame_too_large"),
        "{got:?}"
    );

    // A valid JSON frame of the wrong shape, and a request before the hello.
    let mut shape = UnixStream::connect(&daemon.socket).unwrap();
    shape
        .write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    shape
        .write_all(&frame(
            &json!({"type": "request", "id": 1, "op": {"acquire": {"vram": "lots"}}}),
        ))
        .unwrap();
    let got = frames(&read_until_eof(&mut shape, Duration::from_secs(5)));
    assert_eq!(error_code(&got).as_deref(), Some("bad_frame"), "{got:?}");
    let mut early = UnixStream::connect(&daemon.socket).unwrap();
    early
        .write_all(&frame(&json!({"type": "request", "id": 1, "op": "status"})))
        .unwrap();
    let got = frames(&read_until_eof(&mut early, Duration::from_secs(5)));
    assert_eq!(
        error_code(&got).as_deref(),
        Some("hello_required"),
        "{got:?}"
    );

    // A wrong protocol version.
    let mut old = UnixStream::connect(&daemon.socket).unwrap();
    old.write_all(&frame(&json!({"type": "hello", "version": 99})))
        .unwrap();
    let got = frames(&read_until_eof(&mut old, Duration::from_secs(5)));
    assert_eq!(
        error_code(&got).as_deref(),
        Some("unsupported_version"),
        "{got:?}"
    );

    // Through all of it the good client kept its lease and is served.
    good.ping().unwrap();
    let status = good.status().unwrap();
    assert_eq!(status.leases.len(), 1);
    assert_eq!(status.leases[0].id, lease.id());
    assert_eq!(status.daemon.sessions, 1, "only the good session is left");
}

#[test]
fn a_uid_that_is_not_allowed_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test drops to another uid and must run as root (as CI does)"
    );
    let daemon = Daemon::start_with("16GiB", "socket_mode = \"0666\"\n");
    // A child process that drops to `nobody` before connecting.
    let out = daemon
        .gpudctl_command(&["status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refused the session") && stderr.contains("uid 65534"),
        "{stderr}"
    );
    // Root still gets in, and the refused session left nothing behind.
    let status = daemon.client().status().unwrap();
    assert_eq!(status.daemon.sessions, 1);
    // An allowed uid (by config) gets in.
    let allowed = Daemon::start_with(
        "16GiB",
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n",
    );
    let out = allowed
        .gpudctl_command(&["status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // But it is not an administrator.
    let out = allowed
        .gpudctl_command(&["drain", "0"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs root"));
}
