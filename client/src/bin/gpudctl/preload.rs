//! `gpudctl run --enforce preload`: the program runs with libgpud_preload.so loaded
//! (`LD_PRELOAD`) and its settings in `GPUD_*` variables; every CUDA process of it leases its
//! own memory at its first CUDA call (and with --compute the interlock around its kernel
//! launches, given back when idle), so gpudctl holds no lease: it starts the program,
//! forwards SIGINT and SIGTERM, and passes its exit status through.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use gpud_client::{Client, Placement};
use nix::sys::signal::{Signal, killpg};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{Enforce, GrowPolicy, RunArgs};
use crate::exit::{self, Fail};

/// The interposer's file name.
const LIBRARY: &str = "libgpud_preload.so";

/// Where the interposer is looked for when `--preload-lib` is not given: beside gpudctl (a
/// build directory), then in `../lib/gpud` from it (an installation under a prefix).
fn library_candidates(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    vec![dir.join(LIBRARY), dir.join("../lib/gpud").join(LIBRARY)]
}

fn find_library(given: Option<&Path>) -> Result<PathBuf, Fail> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Fail::new(
                exit::USAGE,
                format!("--preload-lib {}: no such file", path.display()),
            ))
        };
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let candidates = library_candidates(&exe);
    candidates
        .iter()
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            Fail::new(
                exit::USAGE,
                format!(
                    "{LIBRARY} not found (looked at {}): give --preload-lib PATH",
                    looked.join(", ")
                ),
            )
        })
}

/// The variables the program gets: the interposer first in `LD_PRELOAD` (after nothing the
/// caller preloads already is lost), and the lease's settings.
fn environment(
    args: &RunArgs,
    socket: &Path,
    library: &Path,
    existing_preload: Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut preload = library.as_os_str().to_owned();
    if let Some(old) = existing_preload.filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    let mut env = vec![
        ("LD_PRELOAD".to_string(), preload),
        ("GPUD_SOCKET".to_string(), socket.into_os_string()),
        ("GPUD_CLASS".to_string(), args.class.as_str().into()),
        (
            "GPUD_POLICY".to_string(),
            match args.policy.unwrap_or(GrowPolicy::Grow) {
                GrowPolicy::Grow => "grow",
                GrowPolicy::Fail => "fail",
            }
            .into(),
        ),
        (
            "GPUD_LABEL".to_string(),
            args.label
                .clone()
                .unwrap_or_else(|| args.command[0].clone())
                .into(),
        ),
    ];
    if let Some(vram) = args.vram {
        env.push(("GPUD_VRAM".into(), vram.to_string().into()));
    }
    if let Some(t) = args.timeout {
        env.push(("GPUD_TIMEOUT".into(), format!("{}ms", t.as_millis()).into()));
    }
    if args.compute {
        // The interlock around kernel launches, given back when the program is idle.
        env.push(("GPUD_COMPUTE".into(), "auto".into()));
    }
    env
}

/// Runs the program under the interposer; returns its exit status (128 + signal when killed).
pub async fn run(client: &Client, args: RunArgs, socket: &Path) -> Result<ExitCode> {
    match args.enforce {
        Enforce::Preload => {}
        // main dispatches the other modes to run::run.
        Enforce::Mps | Enforce::None => {
            return Err(Fail::new(exit::USAGE, "not an --enforce preload run").into());
        }
    }
    if args.devices.is_some() || args.placement.is_some() {
        return Err(Fail::new(
            exit::USAGE,
            "--enforce preload leases each device the program uses: leave out --devices and \
             --placement (--device picks one)",
        )
        .into());
    }
    let library = find_library(args.preload_lib.as_deref())?;
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).envs(environment(
        &args,
        socket,
        &library,
        std::env::var_os("LD_PRELOAD"),
    ));
    if args.device != Placement::Any {
        // Show the program the one device, by UUID: its leases are then taken there.
        let status = client.status().await.context("status")?;
        let uuid = status
            .devices
            .iter()
            .find(|d| match &args.device {
                Placement::Index(i) => d.index == *i,
                Placement::Uuid(u) => &d.uuid == u,
                Placement::Any => false,
            })
            .map(|d| d.uuid.clone())
            .ok_or_else(|| Fail::new(exit::REFUSED, format!("no device {}", args.device)))?;
        command.env("CUDA_VISIBLE_DEVICES", uuid);
    }
    let mut interrupt = signal(SignalKind::interrupt()).context("signal handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("signal handler")?;
    // Its own process group under a parent-death signal, as in a supervised run: the leases
    // are the program's own (they end with its processes), and the program never outlives
    // gpudctl.
    let mut program = match crate::child::spawn(command) {
        Ok(program) => program,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::NOT_EXECUTABLE,
            };
            return Err(anyhow::Error::new(e)
                .context(Fail::new(code, format!("cannot run {:?}", args.command[0]))));
        }
    };
    let group = program.pid;
    let forward = |sig: Signal| {
        let _ = killpg(group, sig);
    };
    let status = loop {
        tokio::select! {
            status = program.child.wait() => break status.context("wait for the program")?,
            _ = interrupt.recv() => forward(Signal::SIGINT),
            _ = terminate.recv() => forward(Signal::SIGTERM),
        }
    };
    program.done();
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(line: &[&str]) -> RunArgs {
        let mut argv = vec!["gpudctl", "run"];
        argv.extend_from_slice(line);
        match crate::cli::Args::parse_from(argv).command {
            crate::cli::Command::Run(r) => r,
            other => panic!("not run: {other:?}"),
        }
    }

    fn lookup(env: &[(String, OsString)], key: &str) -> Option<String> {
        env.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn the_options_become_the_interposer_s_variables() {
        let args = run_args(&[
            "--enforce",
            "preload",
            "--vram",
            "20GiB",
            "--class",
            "high",
            "--policy",
            "fail",
            "--timeout",
            "5s",
            "--compute",
            "--",
            "python3",
            "train.py",
        ]);
        let env = environment(
            &args,
            Path::new("/run/gpud/gpud.sock"),
            Path::new("/usr/lib/gpud/libgpud_preload.so"),
            Some("libother.so".into()),
        );
        assert_eq!(
            lookup(&env, "LD_PRELOAD").as_deref(),
            Some("/usr/lib/gpud/libgpud_preload.so:libother.so")
        );
        assert_eq!(
            lookup(&env, "GPUD_SOCKET").as_deref(),
            Some("/run/gpud/gpud.sock")
        );
        assert_eq!(
            lookup(&env, "GPUD_VRAM").as_deref(),
            Some((20u64 << 30).to_string().as_str())
        );
        assert_eq!(lookup(&env, "GPUD_CLASS").as_deref(), Some("high"));
        assert_eq!(lookup(&env, "GPUD_POLICY").as_deref(), Some("fail"));
        assert_eq!(lookup(&env, "GPUD_TIMEOUT").as_deref(), Some("5000ms"));
        assert_eq!(lookup(&env, "GPUD_LABEL").as_deref(), Some("python3"));
        assert_eq!(lookup(&env, "GPUD_COMPUTE").as_deref(), Some("auto"));
    }

    #[test]
    fn the_defaults_grow_and_leave_the_size_to_the_interposer() {
        let args = run_args(&["--enforce", "preload", "--", "prog"]);
        let env = environment(&args, Path::new("s.sock"), Path::new("/l.so"), None);
        assert_eq!(lookup(&env, "LD_PRELOAD").as_deref(), Some("/l.so"));
        assert_eq!(lookup(&env, "GPUD_POLICY").as_deref(), Some("grow"));
        assert_eq!(lookup(&env, "GPUD_VRAM"), None);
        assert_eq!(lookup(&env, "GPUD_COMPUTE"), None);
        assert!(
            lookup(&env, "GPUD_SOCKET").unwrap().ends_with("/s.sock"),
            "made absolute: the program may change directory"
        );
    }

    #[test]
    fn the_library_is_looked_for_beside_gpudctl_then_under_lib() {
        assert_eq!(
            library_candidates(Path::new("/usr/bin/gpudctl")),
            vec![
                PathBuf::from("/usr/bin/libgpud_preload.so"),
                PathBuf::from("/usr/bin/../lib/gpud/libgpud_preload.so")
            ]
        );
        assert!(find_library(Some(Path::new("/nonexistent/lib.so"))).is_err());
    }
}
