//! The blocking client, for programs that are not async (provers, tools).
//!
//! It is the async [`crate::Client`] with a runtime of its own: the connection is driven by a
//! thread that runs that runtime, so yield notices and revocations arrive while the program
//! computes, and each call here runs the async call's future on the calling thread, blocking
//! only that thread. (The futures only wait on channels that the connection's thread fills.)

use std::path::Path;
use std::time::Duration;

use tokio::runtime::Handle as Runtime;

use crate::connection::{ClientOptions, connect};
use crate::error::{ClientError, Result};
use crate::proto::{Event, LeaseInfo, Placement, StatusReport};
use crate::request::LeaseRequest;
use crate::reservation::{ComputeToken, LeaseId, Reservation};

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
    inner: crate::Client,
    runtime: Runtime,
}

impl Client {
    /// Connects to gpud at `socket` and starts the connection's thread.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Self> {
        Self::connect_with(socket, ClientOptions::default())
    }

    /// Connects with explicit options (reconnection window, client name).
    pub fn connect_with(socket: impl AsRef<Path>, options: ClientOptions) -> Result<Self> {
        let path = socket.as_ref().to_path_buf();
        let thread_failed = |source| ClientError::Connect {
            path: path.clone(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(thread_failed)?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let socket = path.clone();
        // The thread owns the runtime and lives as long as the connection: the driver ends
        // when the last client and lease are gone, after sending what they left (releases).
        std::thread::Builder::new()
            .name("gpud-client".into())
            .spawn(move || {
                block_sigpipe();
                let handle = runtime.handle().clone();
                runtime.block_on(async move {
                    match connect(&socket, options).await {
                        Ok((connection, driver)) => {
                            let client = crate::Client::from_handle(connection);
                            if ready_tx.send(Ok((client, handle))).is_ok() {
                                driver.await;
                            }
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(thread_failed)?;
        let (inner, runtime) = ready_rx.recv().map_err(|_| ClientError::Disconnected)??;
        Ok(Self { inner, runtime })
    }

    /// Connects to the socket named by `GPUD_SOCKET`, or the default path.
    pub fn connect_default() -> Result<Self> {
        Self::connect(crate::default_socket_path())
    }

    /// This session's id.
    pub fn session(&self) -> u64 {
        self.inner.session()
    }

    /// Whether the daemon's last welcome listed MPS ([`crate::Client::offers_mps`]).
    pub fn offers_mps(&self) -> bool {
        self.inner.offers_mps()
    }

    /// Whether the daemon books host resources ([`crate::Client::offers_host`]).
    pub fn offers_host(&self) -> bool {
        self.inner.offers_host()
    }

    /// Blocks until the lease is granted (or refused).
    pub fn acquire(&self, request: &LeaseRequest) -> Result<Lease> {
        let inner = self.runtime.block_on(self.inner.acquire(request))?;
        Ok(self.lease(inner))
    }

    /// Like [`Client::acquire`], calling `on_place` with the request's place in the queue
    /// while it waits (1 is next; see [`crate::Client::acquire_hearing_places`]).
    pub fn acquire_hearing_places(
        &self,
        request: &LeaseRequest,
        mut on_place: impl FnMut(u32),
    ) -> Result<Lease> {
        let (places, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let inner = self.runtime.block_on(async {
            let acquire = self.inner.acquire_hearing_places(request, places);
            tokio::pin!(acquire);
            loop {
                tokio::select! {
                    lease = &mut acquire => break lease,
                    Some(place) = heard.recv() => on_place(place),
                }
            }
        })?;
        Ok(self.lease(inner))
    }

    /// Like [`Client::acquire`], but gives up after `timeout` and returns `None`.
    pub fn try_acquire(&self, request: &LeaseRequest, timeout: Duration) -> Result<Option<Lease>> {
        let inner = self
            .runtime
            .block_on(self.inner.try_acquire(request, timeout))?;
        Ok(inner.map(|inner| self.lease(inner)))
    }

    fn lease(&self, inner: crate::Lease) -> Lease {
        Lease {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The daemon's devices, leases and queues.
    pub fn status(&self) -> Result<StatusReport> {
        self.runtime.block_on(self.inner.status())
    }

    /// The daemon's metrics in the Prometheus text format.
    pub fn metrics(&self) -> Result<String> {
        self.runtime.block_on(self.inner.metrics())
    }

    /// Round trip with no effect.
    pub fn ping(&self) -> Result<()> {
        self.runtime.block_on(self.inner.ping())
    }

    /// Stops grants on a device (admin).
    pub fn drain(&self, device: Placement) -> Result<()> {
        self.runtime.block_on(self.inner.drain(device))
    }

    /// Resumes grants on a device (admin).
    pub fn undrain(&self, device: Placement) -> Result<()> {
        self.runtime.block_on(self.inner.undrain(device))
    }

    /// Takes a lease away from its holder (admin).
    pub fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.runtime.block_on(self.inner.revoke(lease))
    }

    /// Reserves a job's budget (admin); see [`crate::Client::create_budget`].
    pub fn create_budget(
        &self,
        args: crate::proto::BudgetArgs,
    ) -> Result<crate::proto::BudgetInfo> {
        self.runtime.block_on(self.inner.create_budget(args))
    }

    /// Ends a budget or a job's budgets (admin).
    pub fn end_budget(&self, args: crate::proto::EndBudgetArgs) -> Result<()> {
        self.runtime.block_on(self.inner.end_budget(args))
    }

    /// The budgets, or one job's.
    pub fn budgets(&self, job: Option<String>) -> Result<Vec<crate::proto::BudgetInfo>> {
        self.runtime.block_on(self.inner.budgets(job))
    }

    /// Closes the session now; see [`crate::Client::close`].
    pub fn close(&self) {
        self.inner.close();
    }
}

/// Blocks SIGPIPE on the calling thread. A write to a socket the daemon has closed (a refused
/// session, a daemon that died) raises SIGPIPE, which ends a process that has not ignored it:
/// Rust binaries ignore it, but C programs over libgpud and Python do not. Blocked on the
/// connection's thread, the only one that touches the socket, the write fails with EPIPE
/// instead, which the driver handles as a lost connection.
fn block_sigpipe() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut set = SigSet::empty();
    set.add(Signal::SIGPIPE);
    // It cannot fail with a valid `how` and set; if it did, SIGPIPE would keep its default.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// A granted lease (blocking API): the async [`crate::Lease`] and the runtime that waits for
/// its answers. Released when dropped.
pub struct Lease {
    inner: crate::Lease,
    runtime: Runtime,
}

impl Lease {
    /// The lease's id.
    pub fn id(&self) -> LeaseId {
        self.inner.id()
    }

    /// Everything the daemon said about the grant.
    pub fn info(&self) -> &LeaseInfo {
        self.inner.info()
    }

    /// The value for `CUDA_VISIBLE_DEVICES` (for a lease of several devices, all of them in
    /// the parts' order).
    pub fn cuda_visible_devices(&self) -> &str {
        self.inner.cuda_visible_devices()
    }

    /// For a lease of several devices, its parts in the order asked; empty otherwise.
    pub fn parts(&self) -> &[crate::LeasePart] {
        self.inner.parts()
    }

    /// The host resources granted with the lease, when it asked for any.
    pub fn host(&self) -> Option<&crate::HostGrant> {
        self.inner.host()
    }

    /// Whether the daemon asked this lease to yield its compute slot.
    pub fn yield_requested(&self) -> bool {
        self.inner.yield_requested()
    }

    /// Whether the daemon asked this evictable lease to give its memory back.
    pub fn reclaim_requested(&self) -> bool {
        self.inner.reclaim_requested()
    }

    /// Whether the lease was revoked or its connection lost: it protects nothing now.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// The next event, if one has arrived.
    pub fn try_event(&mut self) -> Option<Event> {
        self.inner.try_event()
    }

    /// The lease's flags and notice hook, for another thread; see [`crate::LeaseWatch`].
    pub fn watch(&self) -> crate::LeaseWatch {
        self.inner.watch()
    }

    /// Releases the lease and waits until the daemon has freed it.
    pub fn release(self) -> Result<()> {
        self.runtime.block_on(self.inner.release())
    }

    /// Whether the daemon records which program uses a lease; see [`crate::Lease::can_attach`].
    pub fn can_attach(&self) -> bool {
        self.inner.can_attach()
    }

    /// Tells the daemon which program uses the lease; see [`crate::Lease::attach`].
    pub fn attach(
        &self,
        pid: u32,
        enforced_by: crate::proto::EnforcedBy,
        end_with_session: bool,
    ) -> Result<()> {
        self.runtime
            .block_on(self.inner.attach(pid, enforced_by, end_with_session))
    }

    /// Changes the reserved VRAM; see [`crate::Lease::resize`].
    pub fn resize(&mut self, vram_bytes: u64, timeout: Option<Duration>) -> Result<u64> {
        self.runtime
            .block_on(self.inner.resize(vram_bytes, timeout))
    }

    /// Changes the reserved host memory; see [`crate::Lease::resize_host_memory`].
    pub fn resize_host_memory(&mut self, bytes: u64, timeout: Option<Duration>) -> Result<u64> {
        self.runtime
            .block_on(self.inner.resize_host_memory(bytes, timeout))
    }

    /// Blocks until the next event; `None` when the connection is gone.
    pub fn wait_event(&mut self) -> Option<Event> {
        self.runtime.block_on(self.inner.next_event())
    }
}

impl Reservation for Lease {
    fn lease_id(&self) -> LeaseId {
        self.inner.lease_id()
    }
    fn device_uuid(&self) -> &str {
        self.inner.device_uuid()
    }
    fn device_index(&self) -> u32 {
        self.inner.device_index()
    }
    fn vram_bytes(&self) -> u64 {
        self.inner.vram_bytes()
    }
    fn compute_token(&self) -> Option<ComputeToken<'_>> {
        self.inner.compute_token()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Lease")
            .field("info", self.info())
            .finish()
    }
}
