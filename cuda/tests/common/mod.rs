//! Shared by the host tests that run kernel headers compiled with g++ as a stdin/stdout harness.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// Compiles `tests/host/<name>.cpp` into the test's temporary folder (`CXX`, default g++), once
/// per test process: tests run on parallel threads, and one that executes the binary while
/// another's compiler still writes it fails ("text file busy"). The compiler writes a private
/// name that is renamed into place, so no other process sees a partial binary either.
pub fn compile_harness(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(bin) = built.get(name) {
        return bin.clone();
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/host/{name}.cpp"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = dir.join(name);
    let partial = dir.join(format!("{name}.{}.partial", std::process::id()));
    let status = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        .args(["-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&partial)
        .arg(&src)
        .status()
        .expect("a C++ compiler (g++) is needed for the host tests");
    assert!(status.success(), "compiling {} failed", src.display());
    std::fs::rename(&partial, &out).expect("harness binary renamed into place");
    built.insert(name.to_owned(), out.clone());
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
