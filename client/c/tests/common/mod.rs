//! What the C-program tests share: libgpud staged into a prefix by the install script, C and
//! C++ programs built against it through pkg-config, and those programs run with their
//! output read line by line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, SystemTime};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The newest modification time under `dir`, leaving out binaries' sources (`src/bin`):
/// libgpud links the client library, not gpudctl, so an edit there does not make it stale.
fn newest(dir: &Path) -> SystemTime {
    let mut t = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() && path.ends_with("src/bin") {
            continue;
        }
        let m = if path.is_dir() {
            newest(&path)
        } else {
            entry.metadata().unwrap().modified().unwrap()
        };
        t = t.max(m);
    }
    t
}

/// The built libraries' folder (`target/debug`), checked to hold a libgpud at least as new
/// as its sources: cargo builds the cdylib and staticlib with `cargo build -p gpud-c` (or
/// the workspace build of scripts/test.sh), not for this crate's tests.
pub fn lib_dir() -> PathBuf {
    let dir = gpud_tests::bin_dir();
    let sources = [
        repo().join("client/c/src"),
        repo().join("client/src"),
        repo().join("proto/src"),
    ]
    .iter()
    .map(|d| newest(d))
    .max()
    .unwrap();
    for lib in ["libgpud.so", "libgpud.a"] {
        let path = dir.join(lib);
        let built = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| panic!("{} is missing: run cargo build -p gpud-c", path.display()));
        assert!(
            built >= sources,
            "{} is older than its sources: run cargo build -p gpud-c",
            path.display()
        );
    }
    dir
}

/// libgpud installed by scripts/install-libgpud.sh into a prefix of its own (under the target
/// folder, made again by each test run).
pub struct Install {
    pub prefix: PathBuf,
    /// Where the test programs are built.
    pub bin: PathBuf,
}

impl Install {
    pub fn lib(&self) -> PathBuf {
        self.prefix.join("lib")
    }
    pub fn pkg_config_path(&self) -> PathBuf {
        self.prefix.join("lib/pkgconfig")
    }
}

/// The staged install, made once per test run.
pub fn install() -> &'static Install {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    INSTALL.get_or_init(|| {
        let libs = lib_dir();
        let root = libs.join("gpud-c-tests");
        let _ = std::fs::remove_dir_all(&root);
        let prefix = root.join("prefix");
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let out = Command::new("bash")
            .arg(repo().join("scripts/install-libgpud.sh"))
            .arg("--lib-dir")
            .arg(&libs)
            .arg(&prefix)
            .output()
            .expect("run scripts/install-libgpud.sh");
        assert!(
            out.status.success(),
            "install-libgpud.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Install { prefix, bin }
    })
}

/// How a test program links libgpud.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// `cc prog.c $(pkg-config --cflags --libs gpud)`: against libgpud.so.1.
    Shared,
    /// Against libgpud.a and what `pkg-config --static` adds.
    Static,
}

/// Builds `client/c/tests/c/NAME` (`.c` with cc, `.cpp` with c++) against the staged install;
/// returns the program's path.
pub fn build(name: &str, link: Link) -> PathBuf {
    build_file(&repo().join("client/c/tests/c").join(name), link)
}

/// Builds the C or C++ program `src` against the staged install.
pub fn build_file(src: &Path, link: Link) -> PathBuf {
    let install = install();
    let name = src.file_name().unwrap().to_str().unwrap();
    let stem = src.file_stem().unwrap().to_str().unwrap();
    let suffix = if link == Link::Static { "-static" } else { "" };
    let out = install.bin.join(format!("{stem}{suffix}"));
    let (compiler, std) = if name.ends_with(".cpp") {
        ("c++", "-std=c++17")
    } else {
        ("cc", "-std=c11")
    };
    let libs = match link {
        Link::Shared => "$(pkg-config --libs gpud)",
        Link::Static => {
            "-Wl,-Bstatic -lgpud -Wl,-Bdynamic $(pkg-config --static --libs gpud | sed 's/-lgpud//')"
        }
    };
    let script = format!(
        "{compiler} {std} -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -o \"$1\" \"$2\" \
         $(pkg-config --cflags gpud) {libs}"
    );
    let result = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg("sh")
        .arg(&out)
        .arg(src)
        .env("PKG_CONFIG_PATH", install.pkg_config_path())
        .output()
        .expect("run the compiler");
    assert!(
        result.status.success(),
        "{script} failed for {name}:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// A command for a built program, finding libgpud.so.1 in the staged install.
pub fn command(program: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", install().lib());
    c
}

/// Runs a program to its end; panics with its output unless it exits 0. Returns stdout.
pub fn run_ok(mut command: Command) -> String {
    let out = command.output().expect("run the test program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A running program whose stdout lines arrive on a channel.
pub struct Running {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Running {
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the test program");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The next line, within `limit`; panics on another line or none.
    pub fn expect(&self, prefix: &str, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) if line.starts_with(prefix) => line,
            Ok(line) => panic!("expected {prefix:?}, got {line:?}"),
            Err(e) => panic!("expected {prefix:?} within {limit:?}: {e:?}"),
        }
    }

    /// Whether no line comes within `limit`.
    pub fn silent_for(&self, limit: Duration) -> bool {
        matches!(
            self.lines.recv_timeout(limit),
            Err(RecvTimeoutError::Timeout)
        )
    }

    /// Closes the program's stdin (the holder then releases and exits).
    pub fn close_stdin(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
    }

    /// Waits for the exit; panics unless it is 0.
    pub fn wait_ok(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
