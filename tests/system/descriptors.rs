//! File descriptors: one allowed user opening connection after connection must not lock
//! everyone out. gpud caps sessions below its open-file limit and keeps room for admins.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpud_tests::Daemon;

/// Opens `n` connections to `socket` as uid 65534 and holds them; prints how many it got.
const FLOOD: &str = r#"
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    try:
        c = socket.socket(socket.AF_UNIX)
        c.connect(sys.argv[1])
        held.append(c)
    except OSError:
        break
print(len(held), flush=True)
time.sleep(60)
"#;

#[test]
fn a_connection_flood_leaves_room_for_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "SKIPPED a_connection_flood_leaves_room_for_root: needs root (runs a flood as uid 65534)"
        );
        return;
    }
    let daemon = Daemon::start_with_nofile(
        "16GiB",
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n",
        256,
    );
    assert!(
        daemon.log().contains("limits.max_sessions lowered"),
        "gpud did not fit its sessions under 256 descriptors:\n{}",
        daemon.log()
    );
    let mut flood = Command::new("python3")
        .arg("-c")
        .arg(FLOOD)
        .arg(&daemon.socket)
        .arg("400")
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(flood.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.trim().parse::<u32>().is_ok(), "flood: {line:?}");
    // Let gpud take in (and refuse) what it will.
    std::thread::sleep(Duration::from_millis(500));
    let out = daemon
        .gpudctl_command(&["status", "--json"])
        .output()
        .expect("gpudctl");
    let _ = flood.kill();
    let _ = flood.wait();
    assert!(
        out.status.success(),
        "root's status failed during the flood: {}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon
            .log()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let cap = format!("gpud serves at most {} sessions", 256 - 64 - 16);
    assert!(
        daemon.log().contains(&cap),
        "the flood was not refused by the session cap ({cap})"
    );
}
