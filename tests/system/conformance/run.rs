//! Runs one scenario with the Rust client (`gpud-client`, blocking API) against a real daemon.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::io::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpud_client::blocking::{Client, Lease};
use gpud_client::proto::LeaseId;
use gpud_client::{Class, ClientError, ClientOptions, LeaseRequest, NumaPlacement, Placement};
use gpud_tests::{Daemon, frame, wait_until};

use super::corpus::{Request, Scenario, Step, Verb};

/// How long `await` (and `acquire`) wait for an answer.
const AWAIT: Duration = Duration::from_secs(10);
/// `pending`: still waiting this much later.
const PENDING: Duration = Duration::from_millis(200);
/// `yield -> yes` and `revoked`: the notice arrives within this.
const NOTICE: Duration = Duration::from_secs(2);
/// `yield -> no`: no notice within this.
const NO_NOTICE: Duration = Duration::from_millis(300);

/// The word an answer is compared with: `granted`/`ok`, or the error's snake_case code.
fn word<T>(result: &Result<T, ClientError>, ok: &str) -> String {
    match result {
        Ok(_) => ok.to_string(),
        Err(e) => match e.code() {
            Some(code) => serde_json::to_value(code)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_else(|| format!("{code:?}")),
            None => format!("client error ({e})"),
        },
    }
}

/// Refusals the client library makes itself (a class or device it cannot even express) carry
/// the code the daemon would give: `invalid_request`.
const CLIENT_REFUSAL: &str = "invalid_request";

fn expect(step: &Step, seen: &str) -> Result<(), String> {
    match &step.expect {
        Some(e) if e == seen => Ok(()),
        Some(e) => Err(format!("expected {e}, saw {seen}")),
        None => Ok(()),
    }
}

/// A lease name's state within the scenario.
enum Slot {
    /// A `begin` (or `acquire`) whose answer has not been taken yet.
    Waiting(mpsc::Receiver<Result<Lease, ClientError>>),
    Held(Box<Lease>),
    /// Released (or refused a release): only its id is left, for `revoke`.
    Gone,
}

struct Named {
    /// The lease id, once granted.
    id: Option<LeaseId>,
    slot: Slot,
}

struct Connection {
    client: Client,
    /// The connection's socket in this process, found when it was opened: `drop` shuts it
    /// down, so the daemon sees the connection end without any release.
    fd: RawFd,
    dropped: bool,
}

/// The sockets of this process connected to `path` (the daemon's socket is each one's peer).
fn sockets_to(path: &Path) -> HashSet<RawFd> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return HashSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| {
            nix::sys::socket::getpeername::<nix::sys::socket::UnixAddr>(fd)
                .is_ok_and(|a| a.path() == Some(path))
        })
        .collect()
}

/// A scenario in progress: its daemon, connections and leases.
pub struct Run {
    daemon: Daemon,
    clients: HashMap<String, Connection>,
    leases: HashMap<String, Named>,
}

impl Run {
    pub fn start(scenario: &Scenario) -> Self {
        let mut config = scenario.config.join("\n");
        config.push('\n');
        Self {
            daemon: Daemon::start_with(&scenario.simulate, &config),
            clients: HashMap::new(),
            leases: HashMap::new(),
        }
    }

    /// The daemon's log, for failure reports.
    pub fn log(&self) -> String {
        self.daemon.log()
    }

    /// The named client's connection, opened on first use.
    fn client(&mut self, name: &str) -> Result<Client, String> {
        if !self.clients.contains_key(name) {
            let before = sockets_to(&self.daemon.socket);
            // No reconnection: the daemon never restarts within a scenario, and a dropped
            // connection must stay dropped (a reconnecting client would open a new session).
            let options = ClientOptions {
                reconnect_for: None,
                name: Some(format!("conformance-{name}")),
            };
            let client = Client::connect_with(&self.daemon.socket, options)
                .map_err(|e| format!("connect: {e}"))?;
            let fresh: Vec<RawFd> = sockets_to(&self.daemon.socket)
                .difference(&before)
                .copied()
                .collect();
            let [fd] = fresh[..] else {
                return Err(format!(
                    "cannot tell the new connection's socket among {fresh:?}"
                ));
            };
            self.clients.insert(
                name.to_string(),
                Connection {
                    client,
                    fd,
                    dropped: false,
                },
            );
        }
        let c = &self.clients[name];
        if c.dropped {
            return Err(format!("client {name} dropped its connection earlier"));
        }
        Ok(c.client.clone())
    }

    fn named(&mut self, name: &str) -> Result<&mut Named, String> {
        self.leases
            .get_mut(name)
            .ok_or_else(|| format!("no lease named {name} in this scenario"))
    }

    fn held(&mut self, name: &str) -> Result<&mut Lease, String> {
        match &mut self.named(name)?.slot {
            Slot::Held(lease) => Ok(lease),
            Slot::Waiting(_) => Err(format!("lease {name} was begun but not awaited")),
            Slot::Gone => Err(format!("lease {name} was released")),
        }
    }

    /// Starts an acquire on a thread of its own. Returns the client's own refusal, if any.
    fn begin(&mut self, step: &Step, name: &str, r: &Request) -> Result<Option<String>, String> {
        if let Some(Named {
            slot: Slot::Held(_) | Slot::Waiting(_),
            ..
        }) = self.leases.get(name)
        {
            return Err(format!("lease name {name} is in use"));
        }
        let client = self.client(&step.client)?;
        let mut request = LeaseRequest::new().vram(r.vram).with_compute(r.compute);
        if let Some(class) = &r.class {
            match class.parse::<Class>() {
                Ok(c) => request = request.class(c),
                Err(_) => return Ok(Some(CLIENT_REFUSAL.into())),
            }
        }
        if let Some(device) = &r.device {
            match device.parse::<Placement>() {
                Ok(d) => request = request.device(d),
                Err(_) => return Ok(Some(CLIENT_REFUSAL.into())),
            }
        }
        if let Some(ms) = r.timeout_ms {
            request = request.timeout(Duration::from_millis(ms));
        }
        if let Some(label) = &r.label {
            request = request.label(label.clone());
        }
        if r.host_mem != 0 {
            request = request.host_memory(r.host_mem);
        }
        if r.pinned != 0 {
            request = request.pinned(r.pinned);
        }
        if r.cpus != 0 {
            request = request.cpus(r.cpus);
        }
        if let Some(numa) = &r.numa {
            match numa.parse::<NumaPlacement>() {
                Ok(n) => request = request.numa(n),
                Err(_) => return Ok(Some(CLIENT_REFUSAL.into())),
            }
        }
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            // When nobody awaits any more, the lease is released as it drops.
            let _ = tx.send(client.acquire(&request));
        });
        self.leases.insert(
            name.to_string(),
            Named {
                id: None,
                slot: Slot::Waiting(rx),
            },
        );
        Ok(None)
    }

    /// Takes a begun acquire's answer, waiting up to [`AWAIT`].
    fn await_lease(&mut self, name: &str) -> Result<String, String> {
        let named = self.named(name)?;
        let Slot::Waiting(rx) = &named.slot else {
            return Err(format!("lease {name} was not begun"));
        };
        let answer = rx
            .recv_timeout(AWAIT)
            .map_err(|_| format!("no answer within {AWAIT:?}"))?;
        let seen = word(&answer, "granted");
        match answer {
            Ok(lease) => {
                named.id = Some(lease.id());
                named.slot = Slot::Held(Box::new(lease));
            }
            Err(_) => {
                named.slot = Slot::Gone;
            }
        }
        Ok(seen)
    }

    /// Carries out one step.
    pub fn step(&mut self, step: &Step) -> Result<(), String> {
        match &step.verb {
            Verb::Acquire(name, r) => {
                let seen = match self.begin(step, name, r)? {
                    Some(refusal) => refusal,
                    None => self.await_lease(name)?,
                };
                expect(step, &seen)
            }
            Verb::Begin(name, r) => match self.begin(step, name, r)? {
                Some(refusal) => Err(format!("the client refused the request: {refusal}")),
                None => Ok(()),
            },
            Verb::Pending(name) => {
                let Slot::Waiting(rx) = &self.named(name)?.slot else {
                    return Err(format!("lease {name} was not begun"));
                };
                thread::sleep(PENDING);
                match rx.try_recv() {
                    Err(mpsc::TryRecvError::Empty) => Ok(()),
                    Ok(answer) => Err(format!(
                        "still waiting expected, but it was answered: {}",
                        word(&answer, "granted")
                    )),
                    Err(mpsc::TryRecvError::Disconnected) => {
                        Err("the acquire's thread ended without an answer".into())
                    }
                }
            }
            Verb::Await(name) => {
                let seen = self.await_lease(name)?;
                expect(step, &seen)
            }
            Verb::Release(name) => {
                let named = self.named(name)?;
                let Slot::Held(lease) = std::mem::replace(&mut named.slot, Slot::Gone) else {
                    return Err(format!("lease {name} is not held"));
                };
                expect(step, &word(&lease.release(), "ok"))
            }
            Verb::Resize {
                lease,
                vram,
                host,
                timeout_ms,
            } => {
                let timeout = timeout_ms.map(Duration::from_millis);
                let held = self.held(lease)?;
                let result = if *host {
                    held.resize_host_memory(*vram, timeout)
                } else {
                    held.resize(*vram, timeout)
                };
                expect(step, &word(&result, "ok"))
            }
            Verb::Check {
                lease,
                vram,
                compute,
                device,
                host_mem,
                pinned,
                cpus,
                numa_node,
            } => {
                let held = self.held(lease)?;
                let host = held.host().cloned().unwrap_or_default();
                let info = held.info().clone();
                let mut wrong = Vec::new();
                if vram.is_some_and(|v| v != info.vram_bytes) {
                    wrong.push(format!(
                        "vram {} (not {})",
                        info.vram_bytes,
                        vram.unwrap_or(0)
                    ));
                }
                if compute.is_some_and(|c| c != info.compute) {
                    wrong.push(format!("compute {}", info.compute));
                }
                if device.is_some_and(|d| d != info.device_index) {
                    wrong.push(format!("device {}", info.device_index));
                }
                if host_mem.is_some_and(|m| m != host.mem_bytes) {
                    wrong.push(format!("host memory {}", host.mem_bytes));
                }
                if pinned.is_some_and(|p| p != host.pinned_bytes) {
                    wrong.push(format!("page-locked memory {}", host.pinned_bytes));
                }
                if cpus.is_some_and(|c| c != host.cpus.len()) {
                    wrong.push(format!("CPUs {:?}", host.cpus));
                }
                if numa_node.is_some_and(|n| n != host.numa_node) {
                    wrong.push(format!("NUMA node {:?}", host.numa_node));
                }
                if wrong.is_empty() {
                    Ok(())
                } else {
                    Err(format!("the lease has {}", wrong.join(", ")))
                }
            }
            Verb::Yield(name) => {
                let lease = self.held(name)?;
                let seen = if step.expect.as_deref() == Some("yes") {
                    wait_until(NOTICE, || lease.yield_requested())
                } else {
                    thread::sleep(NO_NOTICE);
                    lease.yield_requested()
                };
                expect(step, if seen { "yes" } else { "no" })
            }
            Verb::Revoked(name) => {
                let lease = self.held(name)?;
                let seen = wait_until(NOTICE, || lease.is_lost());
                expect(step, if seen { "yes" } else { "no" })
            }
            Verb::Drop => {
                self.client(&step.client)?;
                let c = self
                    .clients
                    .get_mut(&step.client)
                    .ok_or("the client is gone")?;
                nix::sys::socket::shutdown(c.fd, nix::sys::socket::Shutdown::Both)
                    .map_err(|e| format!("shutdown: {e}"))?;
                c.dropped = true;
                Ok(())
            }
            Verb::Status {
                leases,
                waiters,
                devices,
            } => {
                let status = self
                    .client(&step.client)?
                    .status()
                    .map_err(|e| format!("status: {e}"))?;
                let counts = [
                    ("leases", *leases, status.leases.len()),
                    ("waiters", *waiters, status.waiters.len()),
                    ("devices", *devices, status.devices.len()),
                ];
                let wrong: Vec<String> = counts
                    .iter()
                    .filter(|(_, want, _)| want.is_some())
                    .filter(|(_, want, got)| *want != Some(*got))
                    .map(|(what, want, got)| format!("{what}={got} (not {})", want.unwrap_or(0)))
                    .collect();
                if wrong.is_empty() {
                    Ok(())
                } else {
                    Err(format!("status has {}", wrong.join(", ")))
                }
            }
            Verb::Drain(device) | Verb::Undrain(device) => {
                let client = self.client(&step.client)?;
                let seen = match device.parse::<Placement>() {
                    Err(_) => CLIENT_REFUSAL.to_string(),
                    Ok(d) if matches!(step.verb, Verb::Drain(_)) => word(&client.drain(d), "ok"),
                    Ok(d) => word(&client.undrain(d), "ok"),
                };
                expect(step, &seen)
            }
            Verb::Revoke(name) => {
                let id = self
                    .named(name)?
                    .id
                    .ok_or_else(|| format!("lease {name} was never granted"))?;
                let client = self.client(&step.client)?;
                expect(step, &word(&client.revoke(id), "ok"))
            }
            Verb::Raw { hello, code, frame } => raw(&self.daemon.socket, *hello, code, frame),
            Verb::Sleep(ms) => {
                thread::sleep(Duration::from_millis(*ms));
                Ok(())
            }
        }
    }
}

/// `raw`/`rawfirst`: a connection of its own sends (a hello and) one frame of text, and must
/// see an error with `code`, as a reply's outcome or a session error frame.
fn raw(socket: &Path, hello: bool, code: &str, text: &str) -> Result<(), String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    let mut out = Vec::new();
    if hello {
        out.extend(frame(
            &serde_json::json!({"type": "hello", "version": 1, "client": "conformance-raw"}),
        ));
    }
    out.extend((text.len() as u32).to_be_bytes());
    out.extend(text.as_bytes());
    // The daemon may close before reading everything (an oversized frame): what it answered
    // before closing is still there to read.
    let _ = stream.write_all(&out);
    let deadline = Instant::now() + NOTICE;
    let mut buf = Vec::new();
    let mut seen = Vec::new();
    loop {
        // Complete frames first.
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let value: serde_json::Value = serde_json::from_slice(&buf[4..4 + len])
                .map_err(|e| format!("the daemon sent a frame that is not JSON: {e}"))?;
            buf.drain(..4 + len);
            let got = if value["type"] == "error" {
                value["error"]["code"].as_str().map(String::from)
            } else {
                value["outcome"]["error"]["code"].as_str().map(String::from)
            };
            if got.as_deref() == Some(code) {
                return Ok(());
            }
            seen.push(value.to_string());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 65536];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Err(format!(
        "expected an error {code}, saw {}",
        if seen.is_empty() {
            "no frame with an error".to_string()
        } else {
            seen.join(" ")
        }
    ))
}
