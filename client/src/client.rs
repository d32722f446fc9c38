//! The async client.

use std::path::Path;
use std::time::Duration;

use crate::connection::{Answer, ClientOptions, Handle, connect, timed_out_is_none};
use crate::error::{ClientError, Result};
use crate::lease::{Lease, LeaseCore};
use crate::proto::{BudgetArgs, BudgetInfo, EndBudgetArgs, Op, Placement, Reply, StatusReport};
use crate::request::LeaseRequest;
use crate::reservation::LeaseId;

/// A session with gpud (async API). Cheap to clone; the session ends when the last clone and
/// the last lease are dropped.
///
/// ```no_run
/// # async fn demo() -> gpud_client::Result<()> {
/// use gpud_client::{Client, LeaseRequest};
/// let client = Client::connect_default().await?;
/// let lease = client.acquire(&LeaseRequest::new().vram(4 << 30).compute()).await?;
/// println!("GPU {} until dropped", lease.cuda_visible_devices());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    handle: Handle,
}

/// Sends a cancel when an acquire is abandoned before its answer arrives.
struct CancelOnDrop<'a> {
    handle: &'a Handle,
    request: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.handle.fire(Op::Cancel {
                request: self.request,
            });
        }
    }
}

impl Client {
    /// Connects to gpud at `socket`. Must be called inside a tokio runtime, which then drives
    /// the connection.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Self> {
        Self::connect_with(socket, ClientOptions::default()).await
    }

    /// Connects with explicit options (reconnection window, client name).
    pub async fn connect_with(socket: impl AsRef<Path>, options: ClientOptions) -> Result<Self> {
        let (handle, driver) = connect(socket.as_ref(), options).await?;
        tokio::spawn(driver);
        Ok(Self::from_handle(handle))
    }

    /// A client over a connection whose driver runs elsewhere (the blocking client's thread).
    pub(crate) fn from_handle(handle: Handle) -> Self {
        Self { handle }
    }

    /// Connects to the socket named by `GPUD_SOCKET`, or the default path.
    pub async fn connect_default() -> Result<Self> {
        Self::connect(crate::default_socket_path()).await
    }

    /// This session's id, as `gpudctl status` shows it.
    pub fn session(&self) -> u64 {
        self.handle.session()
    }

    /// Whether the daemon's welcome (the last one, after a reconnect) listed
    /// [`FEATURE_MPS`](crate::proto::FEATURE_MPS): its MPS control daemon was up, and status's
    /// `enforcement.mps.pipe_directory` names the directory its clients need.
    pub fn offers_mps(&self) -> bool {
        self.handle.offers_mps()
    }

    /// Whether the daemon's welcome listed [`FEATURE_HOST`](crate::proto::FEATURE_HOST): it
    /// books host memory, page-locked memory and CPUs ([`LeaseRequest::host_memory`] and the
    /// rest; older daemons refuse them).
    ///
    /// [`LeaseRequest::host_memory`]: crate::LeaseRequest::host_memory
    pub fn offers_host(&self) -> bool {
        self.handle.offers_host()
    }

    async fn call(&self, op: Op) -> Result<Answer> {
        let id = self.handle.next_id();
        let rx = self.handle.call(id, op)?;
        rx.await.map_err(|_| ClientError::Disconnected)?
    }

    async fn reply(&self, op: Op) -> Result<Reply> {
        match self.call(op).await? {
            Answer::Reply(r) => Ok(r),
            Answer::Granted(..) => Err(ClientError::Protocol("unexpected grant".into())),
        }
    }

    /// Waits until the lease is granted (or refused).
    pub async fn acquire(&self, request: &LeaseRequest) -> Result<Lease> {
        self.acquire_inner(request, None).await
    }

    /// Like [`Client::acquire`], and while the request waits `places` hears its place in the
    /// queue: 1 for the next to be served, sent when it starts to wait and whenever it
    /// changes. A daemon that does not tell places (older than this client) sends none; the
    /// acquire works the same.
    pub async fn acquire_hearing_places(
        &self,
        request: &LeaseRequest,
        places: tokio::sync::mpsc::UnboundedSender<u32>,
    ) -> Result<Lease> {
        self.acquire_inner(request, Some(places)).await
    }

    async fn acquire_inner(
        &self,
        request: &LeaseRequest,
        places: Option<tokio::sync::mpsc::UnboundedSender<u32>>,
    ) -> Result<Lease> {
        let id = self.handle.next_id();
        let mut args = request.wire()?;
        if (!args.parts.is_empty() || args.placement.is_some())
            && !self.handle.speaks_multi_device()
        {
            return Err(ClientError::Invalid(
                "this gpud grants no leases of several devices and no placement policies \
                 (it is older than this client)"
                    .into(),
            ));
        }
        args.queued_events = places.is_some() && self.handle.speaks_queued();
        let rx = self
            .handle
            .call_hearing_places(id, Op::Acquire(args), places)?;
        let mut guard = CancelOnDrop {
            handle: &self.handle,
            request: id,
            armed: true,
        };
        let answer = rx.await.map_err(|_| ClientError::Disconnected);
        guard.armed = false;
        match answer?? {
            Answer::Granted(info, channel) => Ok(Lease {
                core: LeaseCore::new(info, self.handle.clone(), channel),
            }),
            Answer::Reply(_) => Err(ClientError::Protocol(
                "acquire answered without a grant".into(),
            )),
        }
    }

    /// Like [`Client::acquire`], but gives up after `timeout` and returns `None`.
    pub async fn try_acquire(
        &self,
        request: &LeaseRequest,
        timeout: Duration,
    ) -> Result<Option<Lease>> {
        timed_out_is_none(self.acquire(&request.clone().timeout(timeout)).await)
    }

    /// The daemon's devices, leases and queues, every page of them (see
    /// [`StatusReport::append`] for what paging means for consistency).
    pub async fn status(&self) -> Result<StatusReport> {
        let mut report = self.status_page(Op::Status).await?;
        while let Some(cursor) = report.more {
            let page = self.status_page(Op::StatusPage(cursor)).await?;
            // A daemon that hands back the cursor it was given would keep us here for ever.
            if page.more == Some(cursor) {
                return Err(ClientError::Protocol(
                    "status paging does not advance".into(),
                ));
            }
            report.append(page);
        }
        Ok(report)
    }

    async fn status_page(&self, op: Op) -> Result<StatusReport> {
        match self.reply(op).await? {
            Reply::Status(s) => Ok(*s),
            _ => Err(ClientError::Protocol("unexpected answer to status".into())),
        }
    }

    /// The daemon's metrics in the Prometheus text format.
    pub async fn metrics(&self) -> Result<String> {
        match self.reply(Op::Metrics).await? {
            Reply::Metrics { text } => Ok(text),
            _ => Err(ClientError::Protocol("unexpected answer to metrics".into())),
        }
    }

    /// Round trip with no effect.
    pub async fn ping(&self) -> Result<()> {
        self.reply(Op::Ping).await.map(drop)
    }

    /// Stops grants on a device (admin).
    pub async fn drain(&self, device: Placement) -> Result<()> {
        self.reply(Op::Drain { device }).await.map(drop)
    }

    /// Resumes grants on a device (admin).
    pub async fn undrain(&self, device: Placement) -> Result<()> {
        self.reply(Op::Undrain { device }).await.map(drop)
    }

    /// Takes a lease away from its holder (admin).
    pub async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.reply(Op::Revoke { lease }).await.map(drop)
    }

    /// Reserves a job's budget (admin), waiting until it is granted; the answer carries the
    /// handle the job's processes lease with.
    pub async fn create_budget(&self, args: BudgetArgs) -> Result<BudgetInfo> {
        match self.reply(Op::CreateBudget(args)).await? {
            Reply::Budgets(mut b) if b.len() == 1 => Ok(b.remove(0)),
            _ => Err(ClientError::Protocol(
                "unexpected answer to create_budget".into(),
            )),
        }
    }

    /// Ends a budget or a job's budgets (admin); what was inside is revoked.
    pub async fn end_budget(&self, args: EndBudgetArgs) -> Result<()> {
        self.reply(Op::EndBudget(args)).await.map(drop)
    }

    /// The budgets, or one job's (handles only for their uid and admins).
    pub async fn budgets(&self, job: Option<String>) -> Result<Vec<BudgetInfo>> {
        match self.reply(Op::Budgets { job }).await? {
            Reply::Budgets(b) => Ok(b),
            _ => Err(ClientError::Protocol("unexpected answer to budgets".into())),
        }
    }

    /// Closes the session now, for every clone of this client and every lease it granted, as
    /// if the process had exited: the daemon frees the session's leases and withdraws its
    /// waiting requests, nothing reconnects, every lease reports lost, waiting calls fail with
    /// [`ClientError::Disconnected`] and later calls fail at once. (Dropping the last clone and
    /// lease also ends the session, after sending their releases.)
    pub fn close(&self) {
        self.handle.close();
    }
}
