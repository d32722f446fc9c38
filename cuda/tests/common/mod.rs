//! Shared by the host tests that run kernel headers compiled with g++ as a stdin/stdout harness.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Compiles `tests/host/<name>.cpp` into the test's temporary folder (`CXX`, default g++).
pub fn compile_harness(name: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/host/{name}.cpp"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        .args(["-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("a C++ compiler (g++) is needed for the host tests");
    assert!(status.success(), "compiling {} failed", src.display());
    out
}

/// Runs the harness on `input` and returns its output; the harness must exit successfully.
pub fn run_harness(bin: &Path, input: Vec<u8>) -> Vec<u8> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("harness starts");
    let mut stdin = child.stdin.take().expect("stdin");
    // Written from another thread: the harness may fill its stdout before reading all input.
    let writer =
        std::thread::spawn(move || stdin.write_all(&input).expect("harness reads its input"));
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("harness output");
    writer.join().expect("writer thread");
    assert!(
        child.wait().expect("harness exits").success(),
        "harness failed"
    );
    out
}
