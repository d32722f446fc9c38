//! Shared by the host tests that run kernel headers compiled with g++ as a stdin/stdout harness.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

/// Compiles `tests/host/<name>.cpp` with the default flags: see [`compile`].
pub fn compile_harness(name: &str) -> PathBuf {
    compile(name, &format!("{name}.cpp"), &["-O2"])
}

/// Compiles `tests/host/<source>` (with `kernels/` on the include path, warnings as errors and
/// `flags` added) into the binary `name` in the test's temporary folder (`CXX`, default g++),
/// once per test process: tests run on parallel threads, and one that executes the binary
/// while another's compiler still writes it fails ("text file busy"). The compiler writes a
/// private name that is renamed into place, so another test process (a runner that starts one
/// per test) never sees a partial binary either.
pub fn compile(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    // One cell per binary, so different binaries still compile in parallel.
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let cell = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(name.to_owned())
        .or_default()
        .clone();
    cell.get_or_init(|| build(name, source, flags)).clone()
}

fn build(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/host").join(source);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join(name);
    let partial = dir.join(format!("{name}.{}.partial", std::process::id()));
    let status = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg("-I")
        .arg(root.join("kernels"))
        .arg("-o")
        .arg(&partial)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run a C++ compiler (install build-essential): {e}"));
    assert!(
        status.success(),
        "compiling {} as {name} failed",
        src.display()
    );
    std::fs::rename(&partial, &out).expect("harness binary renamed into place");
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
    let status = child.wait().expect("harness exits");
    assert!(status.success(), "harness failed: {status}");
    out
}
