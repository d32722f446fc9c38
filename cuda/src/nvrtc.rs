//! Run-time compilation of kernel modules to CUBIN with NVRTC, cached on disk.
//!
//! The cache key is a SHA-256 over the module's source, every header (name and text), the
//! compile options (target architecture included) and the NVRTC version, so a changed kernel,
//! header, option or compiler never loads a stale binary. Cache files are written to a temporary
//! name and renamed, so concurrent processes never read a half-written CUBIN.

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::sys;
use sha2::{Digest, Sha256};

use crate::driver::nvrtc_present;
use crate::error::{Error, Result};
use crate::kernels::KernelModule;

/// Environment variable naming the cache directory (default: `$XDG_CACHE_HOME/gpud-cuda`, else
/// `$HOME/.cache/gpud-cuda`). Set it to an empty string to disable the disk cache.
pub const CACHE_DIR_ENV: &str = "GPUD_CUDA_CACHE_DIR";

/// A compiled module.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The CUBIN image.
    pub cubin: Vec<u8>,
    /// NVRTC's log (ptxas resource usage: registers, shared memory, spills). Empty when the
    /// image came from the cache.
    pub log: String,
    /// Whether the image came from the disk cache.
    pub from_cache: bool,
}

/// NVRTC's version (major, minor).
pub fn version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        return Err(Error::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; both out-pointers are valid.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    check(r, "nvrtcVersion")?;
    Ok((major, minor))
}

/// The options a module is compiled with for `arch` (e.g. `sm_90`).
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        // Line tables for compute-sanitizer reports; no effect on the generated code.
        "--generate-line-info".into(),
        "--ptxas-options=-v".into(),
        "-DNDEBUG".into(),
    ]
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::Nvrtc(format!("{what}: {r:?}")))
    }
}

/// The cache key of a module compiled with `opts` by NVRTC `version`.
pub fn cache_key(module: &KernelModule, opts: &[String], version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(module.name.as_bytes());
    field(module.source.as_bytes());
    for header in module.headers {
        field(header.name.as_bytes());
        field(header.source.as_bytes());
    }
    for o in opts {
        field(o.as_bytes());
    }
    field(&version.0.to_le_bytes());
    field(&version.1.to_le_bytes());
    hex::encode(h.finalize())
}

/// The cache directory in effect, if any.
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(|d| PathBuf::from(d).join("gpud-cuda"))
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/gpud-cuda"))
            }),
    }
}

/// Compiles `module` for `arch` with NVRTC, bypassing the cache.
pub fn compile(module: &KernelModule, arch: &str) -> Result<Compiled> {
    if !nvrtc_present() {
        return Err(Error::NoNvrtc);
    }
    let cstr =
        |s: &str| CString::new(s).map_err(|_| Error::InvalidArgument(format!("NUL in {s:?}")));
    let src = cstr(module.source)?;
    let name = cstr(&format!("{}.cu", module.name))?;
    let header_src: Vec<CString> = module
        .headers
        .iter()
        .map(|h| cstr(h.source))
        .collect::<Result<_>>()?;
    let header_names: Vec<CString> = module
        .headers
        .iter()
        .map(|h| cstr(h.name))
        .collect::<Result<_>>()?;
    let header_src_ptrs: Vec<*const c_char> = header_src.iter().map(|s| s.as_ptr()).collect();
    let header_name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let opts: Vec<CString> = options(arch)
        .iter()
        .map(|o| cstr(o))
        .collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all strings are NUL-terminated and outlive the call; the header arrays have
    // `headers.len()` entries each.
    let r = unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            header_src_ptrs.len() as c_int,
            header_src_ptrs.as_ptr(),
            header_name_ptrs.as_ptr(),
        )
    };
    check(r, "nvrtcCreateProgram")?;
    let out = compile_program(module, prog, &opt_ptrs);
    // SAFETY: `prog` was created above and is destroyed exactly once.
    unsafe { sys::nvrtcDestroyProgram(&mut prog) };
    out
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is a live program; `size` is a valid out-pointer.
    if unsafe { sys::nvrtcGetProgramLogSize(prog, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` has the size NVRTC asked for.
    if unsafe { sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) }
        != sys::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    CStr::from_bytes_until_nul(&buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn compile_program(
    module: &KernelModule,
    prog: sys::nvrtcProgram,
    opts: &[*const c_char],
) -> Result<Compiled> {
    // SAFETY: `prog` is live; `opts` holds NUL-terminated strings that outlive the call.
    let r = unsafe { sys::nvrtcCompileProgram(prog, opts.len() as c_int, opts.as_ptr()) };
    let log = program_log(prog);
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Compile {
            module: module.name,
            log: if log.is_empty() {
                format!("{r:?}")
            } else {
                log
            },
        });
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
    check(
        unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) },
        "nvrtcGetCUBINSize",
    )?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has exactly the size NVRTC reported.
    check(
        unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char) },
        "nvrtcGetCUBIN",
    )?;
    if cubin.is_empty() {
        return Err(Error::Compile {
            module: module.name,
            log: "NVRTC produced no CUBIN (was a real sm_XX architecture given?)".into(),
        });
    }
    for kernel in module.kernels {
        if !contains(&cubin, kernel.as_bytes()) {
            return Err(Error::MissingKernel {
                module: module.name,
                kernel,
            });
        }
    }
    Ok(Compiled {
        cubin,
        log,
        from_cache: false,
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Cache {
        path: path.to_path_buf(),
        source,
    }
}

/// The CUBIN of `module` for `arch`: from `dir` when a matching entry exists, else compiled and
/// stored there. With no directory, always compiles.
pub fn load_or_compile_in(
    module: &KernelModule,
    arch: &str,
    dir: Option<&Path>,
) -> Result<Compiled> {
    let Some(dir) = dir else {
        return compile(module, arch);
    };
    let key = cache_key(module, &options(arch), version()?);
    let path = dir.join(format!("{}-{}.cubin", module.name, &key[..32]));
    if let Ok(cubin) = std::fs::read(&path) {
        if !cubin.is_empty() {
            return Ok(Compiled {
                cubin,
                log: String::new(),
                from_cache: true,
            });
        }
    }
    let compiled = compile(module, arch)?;
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = dir.join(format!(
        ".{}-{}.{}.tmp",
        module.name,
        &key[..32],
        std::process::id()
    ));
    std::fs::write(&tmp, &compiled.cubin).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    Ok(compiled)
}

/// [`load_or_compile_in`] with the directory from [`cache_dir`].
pub fn load_or_compile(module: &KernelModule, arch: &str) -> Result<Compiled> {
    load_or_compile_in(module, arch, cache_dir().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{FR_CUH, Header};

    static A: KernelModule = KernelModule {
        name: "a",
        source: "x",
        headers: &[FR_CUH],
        kernels: &[],
    };
    static B: KernelModule = KernelModule {
        name: "a",
        source: "x",
        headers: &[Header {
            name: "fr.cuh",
            source: "changed",
        }],
        kernels: &[],
    };

    #[test]
    fn the_cache_key_covers_headers_options_and_version() {
        let o = options("sm_90");
        let k = cache_key(&A, &o, (13, 0));
        assert_eq!(k, cache_key(&A, &o, (13, 0)));
        assert_ne!(k, cache_key(&B, &o, (13, 0)));
        assert_ne!(k, cache_key(&A, &options("sm_80"), (13, 0)));
        assert_ne!(k, cache_key(&A, &o, (13, 1)));
    }
}
