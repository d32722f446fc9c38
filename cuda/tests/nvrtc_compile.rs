//! Every kernel module compiles with NVRTC 13 to sm_90 CUBIN, on a machine without a GPU, and
//! the disk cache returns the same image. A kernel that does not compile fails here.
//!
//! NVRTC comes from the PyPI wheel `nvidia-cuda-nvrtc==13.0.88` (`eval "$(cuda/ci-setup.sh)"`).
//! NVRTC is found through the loader path; when it is not on it, the test looks for the wheel's
//! folder (`GPUD_NVRTC_LIB_DIR`, else python3's `nvidia` package) and reruns itself with that
//! folder on `LD_LIBRARY_PATH`. If neither works the test fails with the fix to apply.

use std::path::PathBuf;
use std::process::Command;

use gpud_cuda::driver::nvrtc_present;
use gpud_cuda::kernels::ALL_MODULES;
use gpud_cuda::nvrtc;

const REEXEC: &str = "GPUD_CUDA_NVRTC_REEXEC";

fn wheel_lib_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GPUD_NVRTC_LIB_DIR") {
        return Some(PathBuf::from(d));
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, nvidia\nfor b in nvidia.__path__:\n d=os.path.join(b,'cu13','lib')\n if os.path.exists(os.path.join(d,'libnvrtc.so.13')): print(d); break",
        ])
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| PathBuf::from(s))
}

/// Runs `body` with NVRTC loadable, rerunning this test in a child process if needed.
fn with_nvrtc(test_name: &str, body: impl FnOnce()) {
    if nvrtc_present() {
        return body();
    }
    let hint = "NVRTC 13 is required: run `eval \"$(cuda/ci-setup.sh)\"` (installs the \
                nvidia-cuda-nvrtc==13.0.88 wheel and puts it on LD_LIBRARY_PATH)";
    assert!(
        std::env::var_os(REEXEC).is_none(),
        "{hint} (libnvrtc.so.13 still not loadable)"
    );
    let dir = wheel_lib_dir().unwrap_or_else(|| panic!("{hint}"));
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(p) if !p.is_empty() => format!("{}:{}", dir.display(), p.to_string_lossy()),
        _ => dir.display().to_string(),
    };
    let status = Command::new(std::env::current_exe().expect("test binary"))
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", path)
        .env(REEXEC, "1")
        .status()
        .expect("rerun test binary");
    assert!(
        status.success(),
        "{test_name} failed with NVRTC from {}",
        dir.display()
    );
}

#[test]
fn every_kernel_module_compiles_for_sm_90() {
    with_nvrtc("every_kernel_module_compiles_for_sm_90", || {
        let (major, minor) = nvrtc::version().expect("NVRTC version");
        assert_eq!(
            major, 13,
            "NVRTC {major}.{minor}: the kernels target CUDA 13"
        );
        for module in ALL_MODULES {
            let compiled = nvrtc::compile(module, "sm_90").unwrap_or_else(|e| panic!("{e}"));
            assert!(
                compiled.cubin.starts_with(b"\x7fELF"),
                "{}: not an ELF CUBIN",
                module.name
            );
            // ptxas' resource report (registers, spills) for the record.
            println!(
                "== {} ({} bytes)\n{}",
                module.name,
                compiled.cubin.len(),
                compiled.log.trim()
            );
        }
    });
}

#[test]
fn the_disk_cache_returns_what_was_compiled() {
    with_nvrtc("the_disk_cache_returns_what_was_compiled", || {
        let dir = tempfile::tempdir().expect("tempdir");
        let module = ALL_MODULES[0];
        let first = nvrtc::load_or_compile_in(module, "sm_90", Some(dir.path())).expect("compile");
        assert!(!first.from_cache);
        let second = nvrtc::load_or_compile_in(module, "sm_90", Some(dir.path())).expect("cached");
        assert!(second.from_cache);
        assert_eq!(first.cubin, second.cubin);
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "one cache entry, no temporary left behind");
    });
}

#[test]
fn a_kernel_that_does_not_compile_is_a_typed_error() {
    with_nvrtc("a_kernel_that_does_not_compile_is_a_typed_error", || {
        static BROKEN: gpud_cuda::kernels::KernelModule = gpud_cuda::kernels::KernelModule {
            name: "broken",
            source: "#include \"fr.cuh\"\nextern \"C\" __global__ void k(fr_t *x) { x[0] = fr_mul(x[0]); }\n",
            headers: &[gpud_cuda::kernels::FR_CUH],
            kernels: &["k"],
        };
        match nvrtc::compile(&BROKEN, "sm_90") {
            Err(gpud_cuda::Error::Compile { module, log }) => {
                assert_eq!(module, "broken");
                assert!(log.contains("error"), "log: {log}");
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    });
}
