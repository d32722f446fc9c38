//! The blocking client, for programs that are not async (provers, tools).
//!
//! The connection is driven by a thread of its own, so yield notices and revocations arrive
//! while the program computes; the calls here block only the calling thread.

use std::path::Path;
use std::time::Duration;

use crate::connection::{Answer, ClientOptions, Handle, connect, timed_out_is_none};
use crate::error::{ClientError, Result};
use crate::lease::{LeaseCore, impl_reservation, lease_accessors};
use crate::proto::{Op, Placement, Reply, StatusReport};
use crate::request::LeaseRequest;
use crate::reservation::LeaseId;

/// A session with gpud (blocking API).
///
/// ```no_run
/// use gpud_client::{LeaseRequest, blocking::Client};
/// let client = Client::connect_default()?;
/// let lease = client.acquire(&LeaseRequest::new().vram(12 << 30).compute())?;
/// // ... GPU work on lease.cuda_visible_devices() ...
/// lease.release()?;
/// # Ok::<(), gpud_client::ClientError>(())
/// ```
#[derive(Clone)]
pub struct Client {
    handle: Handle,
}

impl Client {
    /// Connects to gpud at `socket` and starts the connection's thread.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Self> {
        Self::connect_with(socket, ClientOptions::default())
    }

    /// Connects with explicit options (reconnection window, client name).
    pub fn connect_with(socket: impl AsRef<Path>, options: ClientOptions) -> Result<Self> {
        let socket = socket.as_ref().to_path_buf();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = socket.clone();
        std::thread::Builder::new()
            .name("gpud-client".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(ClientError::Connect { path, source: e }));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match connect(&path, options).await {
                        Ok((handle, driver)) => {
                            if ready_tx.send(Ok(handle)).is_ok() {
                                driver.await;
                            }
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(|source| ClientError::Connect {
                path: socket,
                source,
            })?;
        let handle = ready_rx.recv().map_err(|_| ClientError::Disconnected)??;
        Ok(Self { handle })
    }

    /// Connects to the socket named by `GPUD_SOCKET`, or the default path.
    pub fn connect_default() -> Result<Self> {
        Self::connect(crate::default_socket_path())
    }

    /// This session's id.
    pub fn session(&self) -> u64 {
        self.handle.session()
    }

    fn call(&self, op: Op) -> Result<Answer> {
        let id = self.handle.next_id();
        self.handle
            .call(id, op)?
            .blocking_recv()
            .map_err(|_| ClientError::Disconnected)?
    }

    fn reply(&self, op: Op) -> Result<Reply> {
        match self.call(op)? {
            Answer::Reply(r) => Ok(r),
            Answer::Granted(..) => Err(ClientError::Protocol("unexpected grant".into())),
        }
    }

    /// Blocks until the lease is granted (or refused).
    pub fn acquire(&self, request: &LeaseRequest) -> Result<Lease> {
        match self.call(Op::Acquire(request.args().clone()))? {
            Answer::Granted(info, channel) => Ok(Lease {
                core: LeaseCore::new(info, self.handle.clone(), channel),
            }),
            Answer::Reply(_) => Err(ClientError::Protocol(
                "acquire answered without a grant".into(),
            )),
        }
    }

    /// Like [`Client::acquire`], but gives up after `timeout` and returns `None`.
    pub fn try_acquire(&self, request: &LeaseRequest, timeout: Duration) -> Result<Option<Lease>> {
        timed_out_is_none(self.acquire(&request.clone().timeout(timeout)))
    }

    /// The daemon's devices, leases and queues.
    pub fn status(&self) -> Result<StatusReport> {
        match self.reply(Op::Status)? {
            Reply::Status(s) => Ok(*s),
            _ => Err(ClientError::Protocol("unexpected answer to status".into())),
        }
    }

    /// The daemon's metrics in the Prometheus text format.
    pub fn metrics(&self) -> Result<String> {
        match self.reply(Op::Metrics)? {
            Reply::Metrics { text } => Ok(text),
            _ => Err(ClientError::Protocol("unexpected answer to metrics".into())),
        }
    }

    /// Round trip with no effect.
    pub fn ping(&self) -> Result<()> {
        self.reply(Op::Ping).map(drop)
    }

    /// Stops grants on a device (admin).
    pub fn drain(&self, device: Placement) -> Result<()> {
        self.reply(Op::Drain { device }).map(drop)
    }

    /// Resumes grants on a device (admin).
    pub fn undrain(&self, device: Placement) -> Result<()> {
        self.reply(Op::Undrain { device }).map(drop)
    }

    /// Takes a lease away from its holder (admin).
    pub fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.reply(Op::Revoke { lease }).map(drop)
    }
}

/// A granted lease (blocking API). Released when dropped.
pub struct Lease {
    core: LeaseCore,
}

impl Lease {
    lease_accessors!();

    /// Releases the lease and waits until the daemon has freed it.
    pub fn release(mut self) -> Result<()> {
        self.core.released = true;
        let id = self.core.handle.next_id();
        let rx = self
            .core
            .handle
            .call(id, Op::Release { lease: self.id() })?;
        match rx
            .blocking_recv()
            .map_err(|_| ClientError::Disconnected)??
        {
            Answer::Reply(Reply::Released { .. }) => Ok(()),
            _ => Err(ClientError::Protocol("unexpected answer to release".into())),
        }
    }

    /// Changes the reserved VRAM; see [`crate::Lease::resize`].
    pub fn resize(&mut self, vram_bytes: u64, timeout: Option<Duration>) -> Result<u64> {
        let id = self.core.handle.next_id();
        let rx = self
            .core
            .handle
            .call(id, self.core.resize_op(vram_bytes, timeout))?;
        let answer = rx.blocking_recv().map_err(|_| ClientError::Disconnected)?;
        self.core.resized(answer)
    }

    /// Blocks until the next event; `None` when the connection is gone.
    pub fn wait_event(&mut self) -> Option<crate::proto::Event> {
        self.core.events.blocking_recv()
    }
}

impl_reservation!(Lease);

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Lease")
            .field("info", &self.core.info)
            .finish()
    }
}
