//! C and C++ programs built against an installed libgpud (pkg-config, shared and static),
//! run against real `gpud --simulate 1x16GiB` daemons.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Link, Running, build, command, install, run_ok};
use gpud_client::{Class, LeaseRequest};
use gpud_tests::{Daemon, wait_until};

const GIB: u64 = 1 << 30;

fn socket(daemon: &Daemon) -> &str {
    daemon.socket.to_str().unwrap()
}

fn readelf(program: &std::path::Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(program)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_install_has_versioned_libraries_headers_and_a_pkg_config_file() {
    let install = install();
    let lib = install.lib();
    for f in ["libgpud.so.1.0.0", "libgpud.a", "pkgconfig/gpud.pc"] {
        assert!(lib.join(f).is_file(), "{f}");
    }
    assert_eq!(
        std::fs::read_link(lib.join("libgpud.so.1")).unwrap(),
        std::path::Path::new("libgpud.so.1.0.0")
    );
    assert_eq!(
        std::fs::read_link(lib.join("libgpud.so")).unwrap(),
        std::path::Path::new("libgpud.so.1")
    );
    for h in ["gpud.h", "gpud.hpp"] {
        assert!(install.prefix.join("include").join(h).is_file(), "{h}");
    }
    assert!(readelf(&lib.join("libgpud.so.1.0.0")).contains("Library soname: [libgpud.so.1]"));
    let pc = |args: &[&str]| {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("gpud")
            .env("PKG_CONFIG_PATH", install.pkg_config_path())
            .output()
            .unwrap();
        assert!(out.status.success(), "pkg-config {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(pc(&["--modversion"]), "1.0.0");
    let prefix = install.prefix.display().to_string();
    assert_eq!(pc(&["--cflags"]), format!("-I{prefix}/include"));
    assert_eq!(pc(&["--libs"]), format!("-L{prefix}/lib -lgpud"));
}

#[test]
fn a_c_program_built_with_pkg_config_acquires_and_releases() {
    let program = build("acquire_release.c", Link::Shared);
    assert!(readelf(&program).contains("Shared library: [libgpud.so.1]"));
    let daemon = Daemon::start("1x16GiB");
    let out = run_ok({
        let mut c = command(&program);
        c.arg(socket(&daemon));
        c
    });
    assert!(out.ends_with("ok\n"), "{out}");
}

#[test]
fn a_program_linked_with_libgpud_a_needs_no_shared_library() {
    let program = build("acquire_release.c", Link::Static);
    assert!(!readelf(&program).contains("libgpud"));
    let daemon = Daemon::start("1x16GiB");
    let mut c = Command::new(&program);
    c.arg(socket(&daemon)).env_remove("LD_LIBRARY_PATH");
    assert!(run_ok(c).ends_with("ok\n"));
}

#[test]
fn two_processes_asking_10_gib_each_on_16_gib_are_serialized() {
    let program = build("holder.c", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let start = |vram: &str| {
        let mut c = command(&program);
        c.arg(socket(&daemon)).arg(vram);
        Running::start(c)
    };
    let mut first = start("10GiB");
    first.expect("granted", Duration::from_secs(5));
    let second = start("10GiB");
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        probe.status().unwrap().waiters.len() == 1
    }));
    assert!(
        second.silent_for(Duration::from_millis(300)),
        "granted while held"
    );
    assert_eq!(probe.status().unwrap().devices[0].reserved_bytes, 10 * GIB);
    first.close_stdin();
    first.expect("released", Duration::from_secs(5));
    second.expect("granted", Duration::from_secs(5));
    first.wait_ok();
    assert_eq!(probe.status().unwrap().leases.len(), 1);
}

#[test]
fn kill_9_of_a_holder_frees_its_lease_for_the_waiter() {
    let program = build("holder.c", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let start = |vram: &str| {
        let mut c = command(&program);
        c.arg(socket(&daemon)).arg(vram).arg("compute");
        Running::start(c)
    };
    let mut holder = start("10GiB");
    holder.expect("granted", Duration::from_secs(5));
    let waiter = start("10GiB");
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        probe.status().unwrap().waiters.len() == 1
    }));
    let killed = Instant::now();
    holder.child.kill().unwrap(); // SIGKILL
    waiter.expect("granted", Duration::from_secs(5));
    println!("kill -9 to grant in C: {:?}", killed.elapsed());
    let _ = holder.child.wait();
}

#[test]
fn a_critical_request_makes_a_compute_holder_yield_through_flag_and_descriptor() {
    let program = build("notices.c", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let mut c = command(&program);
    c.arg(socket(&daemon));
    let holder = Running::start(c);
    holder.expect("granted", Duration::from_secs(5));
    // Root may ask for the critical class.
    let critical = daemon.client();
    let lease = critical
        .acquire(
            &LeaseRequest::new()
                .compute()
                .class(Class::Critical)
                .timeout(Duration::from_secs(10)),
        )
        .expect("granted once the holder yields");
    holder.expect("yield", Duration::from_secs(1));
    drop(lease);
    // The holder's second lease, revoked by an admin: lost, through flag and descriptor.
    let second = holder.expect("granted", Duration::from_secs(5));
    let id: u64 = second["granted ".len()..].parse().unwrap();
    daemon.client().revoke(id).unwrap();
    holder.expect("lost", Duration::from_secs(5));
    holder.wait_ok();
}

#[test]
fn resize_grows_wait_and_time_out_shrinks_free_at_once() {
    let program = build("resize.c", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let mut c = command(&program);
    c.arg(socket(&daemon));
    assert!(run_ok(c).ends_with("ok\n"));
}

#[test]
fn every_error_code_a_client_can_meet_is_produced_and_mapped() {
    let program = build("errors.c", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let mut c = command(&program);
    c.arg("root").arg(socket(&daemon));
    println!("{}", run_ok(c));

    let limited = Daemon::start_with("1x16GiB", "[limits]\nmax_leases_per_session = 1\n");
    let mut c = command(&program);
    c.arg("limits").arg(socket(&limited));
    run_ok(c);

    // As another user: a static build, so that nothing is looked up in the staged install.
    let program = build("errors.c", Link::Static);
    let dir = gpud_tests::ops::tempdir("gpud-c-user");
    let copy = dir.path().join("errors");
    std::fs::copy(&program, &copy).unwrap();
    let as_nobody = |daemon: &Daemon, mode: &str| {
        let mut c = Command::new(&copy);
        // std drops root's supplementary groups too when it sets the uid.
        c.arg(mode).arg(socket(daemon)).uid(65534).gid(65534);
        run_ok(c);
    };
    let open = Daemon::start_with(
        "1x16GiB",
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n",
    );
    as_nobody(&open, "user");
    let closed = Daemon::start_with("1x16GiB", "socket_mode = \"0666\"\n");
    as_nobody(&closed, "refused");
}

#[test]
fn a_cxx_program_leases_through_gpud_hpp() {
    let program = build("lease.cpp", Link::Shared);
    let daemon = Daemon::start("1x16GiB");
    let mut c = command(&program);
    c.arg(socket(&daemon));
    assert!(run_ok(c).ends_with("ok\n"));
}

/// A daemon that books 16 GiB of host memory, no headroom, and the machine's CPUs.
const HOST: &str = "[host]\nmemory = \"16GiB\"\nmemory_headroom = \"0\"\n";

#[test]
fn host_resources_are_asked_granted_with_their_cpus_refused_and_resized() {
    let program = build("host.c", Link::Shared);
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let mut c = command(&program);
    c.arg(socket(&daemon));
    assert!(run_ok(c).ends_with("ok\n"));
    // Everything the program leased went back with it.
    let status = daemon.client().status().unwrap();
    let host = status.host.expect("a host section");
    assert_eq!(
        (host.memory.reserved_bytes, host.pinned.reserved_bytes),
        (0, 0)
    );
    assert!(host.numa.iter().all(|n| n.granted.is_empty()));
}

#[test]
fn a_cxx_program_leases_host_resources_through_gpud_hpp() {
    let program = build("host_lease.cpp", Link::Shared);
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let mut c = command(&program);
    c.arg(socket(&daemon));
    assert!(run_ok(c).ends_with("ok\n"));
}

#[test]
fn a_write_to_a_daemon_that_stopped_reading_does_not_kill_the_program_with_sigpipe() {
    use std::io::{Read, Write};
    let program = build("sigpipe.c", Link::Shared);
    let dir = gpud_tests::ops::tempdir("gpud-c-sigpipe");
    let path = dir.path().join("fake.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let socket = path.clone();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        // No reconnection finds it again.
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).unwrap();
        let mut hello = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut hello).unwrap();
        stream.shutdown(std::net::Shutdown::Read).unwrap();
        let welcome = serde_json::json!({
            "type": "welcome", "version": 1, "session": 1, "daemon": "fake"
        });
        stream.write_all(&gpud_tests::frame(&welcome)).unwrap();
        std::thread::sleep(Duration::from_secs(2));
    });
    let running = Running::start({
        let mut c = command(&program);
        c.arg(&path);
        c
    });
    running.expect("alive", Duration::from_secs(5));
    running.wait_ok();
    fake.join().unwrap();
}
