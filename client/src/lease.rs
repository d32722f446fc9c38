//! Lease guards: a granted lease that is released when dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::connection::{Answer, Handle, LeaseChannel, LeaseFlags};
use crate::error::{ClientError, Result};
use crate::proto::{Event, LeaseInfo, Op, Reply};

/// A granted lease's state: what the daemon said, and the channel its events arrive on.
pub(crate) struct LeaseCore {
    pub info: LeaseInfo,
    pub handle: Handle,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub flags: Arc<LeaseFlags>,
    pub released: bool,
}

/// The size a resize's answer gives (its `vram_bytes`, whichever pool was resized).
fn resized_to(answer: Result<Answer>) -> Result<u64> {
    match answer? {
        Answer::Reply(Reply::Resized { vram_bytes, .. }) => Ok(vram_bytes),
        _ => Err(ClientError::Protocol("unexpected answer to resize".into())),
    }
}

impl LeaseCore {
    pub fn new(info: LeaseInfo, handle: Handle, channel: LeaseChannel) -> Self {
        Self {
            info,
            handle,
            events: channel.events,
            flags: channel.flags,
            released: false,
        }
    }

    pub fn resize_op(&self, vram_bytes: u64, timeout: Option<Duration>) -> Op {
        self.resize_with(vram_bytes, None, timeout)
    }

    pub fn resize_host_op(&self, bytes: u64, timeout: Option<Duration>) -> Op {
        self.resize_with(0, Some(bytes), timeout)
    }

    fn resize_with(
        &self,
        vram_bytes: u64,
        host_mem_bytes: Option<u64>,
        timeout: Option<Duration>,
    ) -> Op {
        Op::Resize {
            lease: self.info.lease,
            vram_bytes,
            timeout_ms: timeout.map(|t| t.as_millis().min(u128::from(u64::MAX)) as u64),
            host_mem_bytes,
        }
    }

    /// Applies the answer to a resize of host memory.
    pub fn host_resized(&mut self, answer: Result<Answer>) -> Result<u64> {
        let size = resized_to(answer)?;
        if let Some(host) = self.info.host.as_mut() {
            host.mem_bytes = size;
        }
        Ok(size)
    }

    /// Applies a resize answer.
    pub fn resized(&mut self, answer: Result<Answer>) -> Result<u64> {
        let size = resized_to(answer)?;
        // A shrink answers a reclaim notice (a later notice raises the flag again).
        if size < self.info.vram_bytes {
            self.flags.reclaim_requested.store(false, Ordering::Release);
        }
        self.info.vram_bytes = size;
        Ok(size)
    }

    pub fn yield_requested(&self) -> bool {
        self.flags.yield_requested.load(Ordering::Acquire)
    }

    pub fn lost(&self) -> bool {
        self.flags.lost.load(Ordering::Acquire)
    }

    pub fn reclaim_requested(&self) -> bool {
        self.flags.reclaim_requested.load(Ordering::Acquire)
    }
}

impl Drop for LeaseCore {
    fn drop(&mut self) {
        if !self.released {
            self.handle.fire(Op::Release {
                lease: self.info.lease,
            });
        }
    }
}

/// A lease's notices seen from anywhere: whether it was asked to yield, whether it is lost, and
/// a hook run when either happens. Got from [`Lease::watch`] or
/// [`crate::blocking::Lease::watch`]; it may be kept on another thread than the lease, and
/// outlive it (then it reports what it saw last).
///
/// ```no_run
/// use gpud_client::{LeaseRequest, blocking::Client};
/// let client = Client::connect_default()?;
/// let lease = client.acquire(&LeaseRequest::new().compute())?;
/// let watch = lease.watch();
/// watch.on_notice(|| eprintln!("gpud: yield requested or lease lost"));
/// while !watch.yield_requested() && !watch.is_lost() {
///     // ... one more kernel ...
/// #   break;
/// }
/// # Ok::<(), gpud_client::ClientError>(())
/// ```
#[derive(Clone)]
pub struct LeaseWatch {
    flags: Arc<LeaseFlags>,
}

impl LeaseWatch {
    pub(crate) fn new(flags: &Arc<LeaseFlags>) -> Self {
        Self {
            flags: flags.clone(),
        }
    }

    /// Whether the daemon asked the lease to yield its compute slot.
    pub fn yield_requested(&self) -> bool {
        self.flags.yield_requested.load(Ordering::Acquire)
    }

    /// Whether the lease was revoked or lost with its connection.
    pub fn is_lost(&self) -> bool {
        self.flags.lost.load(Ordering::Acquire)
    }

    /// Runs `hook` each time a yield notice or a revocation (or loss) of the lease arrives,
    /// after the flags and the lease's event queue show it; at once as well when one already
    /// has. It runs on the connection's thread, so it must be quick and must not block (set a
    /// flag, write an eventfd, wake a condition variable). A second call replaces the hook.
    pub fn on_notice(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.flags.set_hook(Arc::new(hook));
    }
}

impl std::fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("yield_requested", &self.yield_requested())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A granted lease (async API). Released when dropped; [`Lease::release`] waits for the
/// daemon's confirmation instead.
pub struct Lease {
    pub(crate) core: LeaseCore,
}

impl Lease {
    /// The lease's id.
    pub fn id(&self) -> crate::reservation::LeaseId {
        self.core.info.lease
    }
    /// Everything the daemon said about the grant.
    pub fn info(&self) -> &crate::proto::LeaseInfo {
        &self.core.info
    }
    /// The value for `CUDA_VISIBLE_DEVICES`: the lease's device, or for a lease of several
    /// devices every part's, in the parts' order.
    pub fn cuda_visible_devices(&self) -> &str {
        &self.core.info.cuda_visible_devices
    }
    /// For a lease of several devices, its parts in the order asked (the first is this lease
    /// itself); empty for a lease of one device. They are released together.
    pub fn parts(&self) -> &[crate::LeasePart] {
        &self.core.info.parts
    }
    /// The host resources granted with the lease (memory, page-locked memory, CPUs by
    /// number), when it asked for any.
    pub fn host(&self) -> Option<&crate::HostGrant> {
        self.core.info.host.as_deref()
    }
    /// Whether the daemon asked this lease to yield its compute slot.
    pub fn yield_requested(&self) -> bool {
        self.core.yield_requested()
    }
    /// Whether the lease was revoked or its connection lost: it protects nothing now.
    pub fn is_lost(&self) -> bool {
        self.core.lost()
    }
    /// Whether the daemon asked this evictable lease to give its memory back (shrink or
    /// release it) and it has not shrunk since.
    pub fn reclaim_requested(&self) -> bool {
        self.core.reclaim_requested()
    }
    /// The next event, if one has arrived.
    pub fn try_event(&mut self) -> Option<crate::proto::Event> {
        self.core.events.try_recv().ok()
    }
    /// The lease's flags and notice hook, for another thread.
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch::new(&self.core.flags)
    }

    /// Releases the lease and waits until the daemon has freed it.
    pub async fn release(mut self) -> Result<()> {
        self.core.released = true;
        let id = self.core.handle.next_id();
        let rx = self
            .core
            .handle
            .call(id, Op::Release { lease: self.id() })?;
        match rx.await.map_err(|_| ClientError::Disconnected)?? {
            Answer::Reply(Reply::Released { .. }) => Ok(()),
            _ => Err(ClientError::Protocol("unexpected answer to release".into())),
        }
    }

    /// Changes the reserved VRAM. Shrinking is immediate; growing waits (up to `timeout`) and,
    /// when it times out, leaves the lease as it was and returns the daemon's `timed_out` error.
    pub async fn resize(&mut self, vram_bytes: u64, timeout: Option<Duration>) -> Result<u64> {
        let answer = self
            .call_resize(self.core.resize_op(vram_bytes, timeout))
            .await;
        self.core.resized(answer)
    }

    /// Changes the reserved host memory (docs/HOST.md) to `bytes`, like [`Lease::resize`]
    /// does device memory: shrinking is immediate, growing waits up to `timeout`. Never below
    /// the lease's page-locked memory. Returns the host memory reserved now.
    pub async fn resize_host_memory(
        &mut self,
        bytes: u64,
        timeout: Option<Duration>,
    ) -> Result<u64> {
        let answer = self
            .call_resize(self.core.resize_host_op(bytes, timeout))
            .await;
        self.core.host_resized(answer)
    }

    /// Sends a resize and waits for its answer.
    async fn call_resize(&self, op: Op) -> Result<Answer> {
        let id = self.core.handle.next_id();
        let rx = self.core.handle.call(id, op)?;
        rx.await.map_err(|_| ClientError::Disconnected)?
    }

    /// Whether the daemon records which program uses a lease (its welcome lists `attach`):
    /// [`Lease::attach`] works only then.
    pub fn can_attach(&self) -> bool {
        self.core.handle.speaks_attach()
    }

    /// Tells the daemon that program `pid` (this process or one of its descendants, of this
    /// user) uses the lease, and how its use is enforced. With `end_with_session` the daemon
    /// ends the program's process group (SIGTERM, then SIGKILL after its
    /// `supervision.kill_grace`) if this session ends without releasing the lease: a
    /// supervisor killed with SIGKILL does not leave its program running. After a reconnect the
    /// attach is made again. Refused with [`ClientError::Invalid`] by a daemon too old for it
    /// (see [`Lease::can_attach`]).
    pub async fn attach(
        &self,
        pid: u32,
        enforced_by: crate::proto::EnforcedBy,
        end_with_session: bool,
    ) -> Result<()> {
        if !self.can_attach() {
            return Err(ClientError::Invalid(
                "this gpud does not record programs of leases (attach; it is older than this client)"
                    .into(),
            ));
        }
        let op = Op::Attach(crate::proto::AttachArgs {
            lease: self.id(),
            pid,
            enforced_by,
            end_with_session,
        });
        let id = self.core.handle.next_id();
        let rx = self.core.handle.call(id, op)?;
        match rx.await.map_err(|_| ClientError::Disconnected)?? {
            Answer::Reply(Reply::Attached { .. }) => Ok(()),
            _ => Err(ClientError::Protocol("unexpected answer to attach".into())),
        }
    }

    /// Waits for the next event (yield request, revocation, shutdown). `None` when the
    /// connection is gone.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.core.events.recv().await
    }
}

impl crate::reservation::Reservation for Lease {
    fn lease_id(&self) -> crate::reservation::LeaseId {
        self.core.info.lease
    }
    fn device_uuid(&self) -> &str {
        &self.core.info.device_uuid
    }
    fn device_index(&self) -> u32 {
        self.core.info.device_index
    }
    fn vram_bytes(&self) -> u64 {
        self.core.info.vram_bytes
    }
    fn compute_token(&self) -> Option<crate::reservation::ComputeToken<'_>> {
        (self.core.info.compute && !self.core.lost()).then(|| {
            crate::reservation::ComputeToken::new(
                self.core.info.lease,
                &self.core.info.device_uuid,
                Some(&self.core.flags.lost),
            )
        })
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("info", &self.core.info)
            .finish()
    }
}
