//! The binary's error messages for the common mistakes.

mod common;

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-prover"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_daemon_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let (ok, err) = run(&[
        "prove",
        "--circuit",
        "synthetic",
        "--log-size",
        "8",
        "--socket",
        socket.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("cannot connect to gpud"), "{err}");
}

#[test]
fn missing_parameters_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = run(&[
        "prove",
        "--no-daemon",
        "--circuit",
        "synthetic",
        "--log-size",
        "8",
        "--params-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("no parameters for synthetic-k8"), "{err}");
    assert!(err.contains("gpud-prover params"), "{err}");
}

#[test]
fn size_out_of_range_is_a_clear_error() {
    let (ok, err) = run(&[
        "prove",
        "--no-daemon",
        "--circuit",
        "sha256",
        "--log-size",
        "10",
    ]);
    assert!(!ok);
    assert!(
        err.contains("out of range for circuit sha256 (supported: 15..=24)"),
        "{err}"
    );
    let (ok, err) = run(&["params", "--circuit", "md5", "--log-size", "10"]);
    assert!(!ok);
    assert!(err.contains("unknown circuit"), "{err}");
    let (ok, err) = run(&[
        "prove",
        "--no-daemon",
        "--class",
        "urgent",
        "--log-size",
        "8",
    ]);
    assert!(!ok);
    assert!(err.contains("unknown class"), "{err}");
}

#[test]
fn no_daemon_run_proves_and_verifies() {
    common::key("synthetic", 9);
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-prover"))
        .args([
            "prove",
            "--no-daemon",
            "--circuit",
            "synthetic",
            "--log-size",
            "9",
        ])
        .args(["--partitions", "2", "--proofs", "2", "--params-dir"])
        .arg(common::cache_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("all 4 partition proofs verified"),
        "{stdout}"
    );
    assert!(stdout.contains("GPU phase"), "{stdout}");
}

#[test]
fn the_cuda_engine_without_a_gpu_is_a_clear_error_not_a_panic() {
    if gpud_cuda::driver::driver_present() {
        return; // a GPU machine: the engine may start; tests/prover_gpu.rs covers it
    }
    let (ok, err) = run(&[
        "prove",
        "--no-daemon",
        "--engine",
        "cuda",
        "--circuit",
        "synthetic",
        "--log-size",
        "8",
    ]);
    assert!(!ok);
    assert!(err.contains("starting the CUDA engine"), "{err}");
    assert!(err.contains("no CUDA driver"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The engine itself reports the missing driver as an error value.
    assert!(matches!(
        gpud_prover::engine::CudaEngine::new(Default::default()),
        Err(gpud_prover::ProverError::Cuda(gpud_cuda::Error::NoDriver))
    ));
}
