//! `acquire`: a lease of memory, compute, or both — within the session's limits.

use gpud_proto::{AcquireArgs, ErrorBody, ErrorCode};

use super::{Answered, ledger_error, validate};
use crate::hub::core::{Core, Now};
use crate::ledger::{AcquireSpec, Decision, Part, Ticket};

impl Core {
    pub(super) fn acquire(&mut self, now: Now, ticket: Ticket, args: AcquireArgs) -> Answered {
        let class = args.class;
        let watch = args.queued_events;
        let asked = self.checked_acquire(ticket, args).and_then(|spec| {
            let within = spec.within;
            self.ledger
                .acquire(now.at, ticket, spec)
                .map_err(|e| self.budget_error(within, ledger_error(e)))
        });
        match asked {
            Ok(Some(lease)) => {
                self.decided(now, Decision::Granted { ticket, lease });
                None
            }
            Ok(None) => {
                self.observer.waiting(now.at, ticket, class);
                if watch {
                    self.places.watch(ticket);
                }
                None
            }
            Err(e) => {
                self.observer.refused(class, e.code);
                Some(Err(e))
            }
        }
    }

    /// The request as the ledger takes it, if its arguments and the session's limits allow.
    fn checked_acquire(&self, ticket: Ticket, args: AcquireArgs) -> Result<AcquireSpec, ErrorBody> {
        let timeout = validate::timeout(args.timeout_ms)?;
        validate::label(args.label.as_deref())?;
        let peer = self.peer(ticket.session);
        let within = match peer {
            Some(p) => self.budget_of_request(p, args.budget.as_deref())?,
            None => None,
        };
        // Inside a budget the budget's class applies, which an admin chose.
        if within.is_none() && !peer.is_some_and(|p| self.settings.access.may_use(p, args.class)) {
            return Err(ErrorBody::new(
                ErrorCode::NotAllowed,
                format!(
                    "uid {} may not ask for the {} class: add it to access.critical_uids or a group in access.critical_groups",
                    peer.map_or(0, |p| p.uid),
                    args.class.as_str()
                ),
            ));
        }
        self.check_parts(&args, within)?;
        let host = self.checked_host(&args, within)?;
        let limits = &self.settings.limits;
        let (leases, waiters) = self.ledger.session_counts(ticket.session);
        // A group is a lease per part, its host parts included.
        let device_parts = if args.parts.is_empty() {
            usize::from(host.is_empty() || args.vram_bytes > 0 || args.compute)
        } else {
            args.parts.len()
        };
        if leases + device_parts + host.len() > limits.max_leases_per_session {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may hold at most {} leases (limits.max_leases_per_session)",
                    limits.max_leases_per_session
                ),
            ));
        }
        if waiters >= limits.max_outstanding_requests {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may have at most {} waiting requests (limits.max_outstanding_requests)",
                    limits.max_outstanding_requests
                ),
            ));
        }
        if let Some(p) = peer {
            let mine = self.uid_entries(p.uid);
            if mine >= limits.max_entries_per_uid {
                return Err(ErrorBody::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "uid {} already holds or waits for {mine} leases (limits.max_entries_per_uid)",
                        p.uid
                    ),
                ));
            }
        }
        let mut spec = AcquireSpec {
            placement: args.device.into(),
            vram_bytes: args.vram_bytes,
            compute: args.compute,
            class: args.class.into(),
            timeout,
            label: args.label,
            within,
            budget: None,
            evictable: args.evictable,
            parts: args
                .parts
                .into_iter()
                .map(|p| Part::gpu(p.device.into(), p.vram_bytes, p.compute))
                .collect(),
            policy: args.placement.unwrap_or_default().into(),
        };
        if !host.is_empty() {
            // With host parts the request is a group: the device part (if any) first, so that
            // the group's id is the device part's.
            if spec.parts.is_empty() && (spec.vram_bytes > 0 || spec.compute) {
                spec.parts.push(Part::gpu(
                    std::mem::replace(&mut spec.placement, crate::ledger::Placement::Any),
                    std::mem::take(&mut spec.vram_bytes),
                    std::mem::take(&mut spec.compute),
                ));
            }
            spec.parts.extend(host);
        }
        Ok(spec)
    }

    /// The host parts of a request (none without `host`), after the checks: host resources
    /// are booked here, and neither a budget nor warm state has them.
    fn checked_host(
        &self,
        args: &AcquireArgs,
        within: Option<gpud_proto::LeaseId>,
    ) -> Result<Vec<Part>, ErrorBody> {
        let Some(host) = args.host.as_ref().filter(|h| !h.is_empty()) else {
            if args.host.as_ref().is_some_and(|h| !h.numa.is_any()) {
                return Err(ErrorBody::new(
                    ErrorCode::InvalidRequest,
                    "host.numa places CPUs, and host.cpus is 0",
                ));
            }
            return Ok(Vec::new());
        };
        let invalid = |m: &str| Err(ErrorBody::new(ErrorCode::InvalidRequest, m.to_string()));
        if within.is_some() {
            return invalid(
                "host resources are not taken from a budget (a budget is device memory): ask them in a lease of their own",
            );
        }
        if args.evictable {
            return invalid(
                "an evictable lease holds device memory only: ask host resources apart",
            );
        }
        let devices = !args.parts.is_empty() || args.vram_bytes > 0 || args.compute;
        if !devices && args.device != gpud_proto::Placement::Any {
            return invalid(
                "the request names a device and reserves nothing there: give vram_bytes or compute, or leave the device out for a lease of the host alone",
            );
        }
        super::super::host::host_parts(self.host.as_ref(), host, devices)
    }

    /// The parts of a lease of several devices make sense on this host: at most one per
    /// device, no device named twice, and for `near`, a topology to go by.
    fn check_parts(
        &self,
        args: &AcquireArgs,
        within: Option<gpud_proto::LeaseId>,
    ) -> Result<(), ErrorBody> {
        let invalid = |message: String| Err(ErrorBody::new(ErrorCode::InvalidRequest, message));
        let devices = self.ledger.devices().len();
        if args.parts.is_empty() {
            return Ok(());
        }
        if args.vram_bytes != 0 || args.compute || args.device != gpud_proto::Placement::Any {
            return invalid(
                "a request with parts gives device, vram_bytes and compute for each part, not for \
                 the request"
                    .into(),
            );
        }
        if args.parts.len() > devices {
            return invalid(format!(
                "{} parts need {} devices of their own; this host has {devices}",
                args.parts.len(),
                args.parts.len()
            ));
        }
        if within.is_some() {
            return invalid(
                "a lease of several devices cannot be taken from a budget (a budget is one device)"
                    .into(),
            );
        }
        if args.evictable {
            return invalid(
                "an evictable lease is on one device: ask for each device's warm state apart"
                    .into(),
            );
        }
        let mut named: Vec<(usize, crate::ledger::DeviceIdx)> = Vec::new();
        for (i, part) in args.parts.iter().enumerate() {
            if part.vram_bytes == 0 && !part.compute {
                return invalid(format!(
                    "part {} reserves nothing: give it vram_bytes, compute, or both",
                    i + 1
                ));
            }
            if part.device == gpud_proto::Placement::Any {
                continue;
            }
            let d = self
                .ledger
                .resolve_one(&part.device.clone().into())
                .map_err(ledger_error)?;
            if let Some((j, _)) = named.iter().find(|(_, e)| *e == d) {
                return invalid(format!(
                    "parts {} and {} both name device {d}: every part needs a device of its own",
                    j + 1,
                    i + 1
                ));
            }
            named.push((i, d));
        }
        if args.placement == Some(gpud_proto::PlacementPolicy::Near) && args.parts.len() > 1 {
            let unknown: Vec<String> = self
                .ledger
                .devices()
                .filter(|d| d.spec().topology.island().is_none())
                .map(|d| d.index().to_string())
                .collect();
            if unknown.len() == devices {
                return invalid(
                    "placement near needs the devices' NVLink islands or NUMA nodes, and gpud \
                     knows neither for any device (gpudctl status shows them)"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// A refusal of a request inside a budget names the budget's job too.
    pub(in crate::hub::core) fn budget_error(
        &self,
        within: Option<gpud_proto::LeaseId>,
        mut e: ErrorBody,
    ) -> ErrorBody {
        if let Some(owner) = within.and_then(|b| self.budgets.owners.get(&b)) {
            e.message = format!("{} (the budget of job {})", e.message, owner.job);
        }
        e
    }

    /// Leases and waiting requests of all of `uid`'s sessions.
    fn uid_entries(&self, uid: u32) -> usize {
        self.sessions
            .iter()
            .filter(|(_, p)| p.uid == uid)
            .map(|(&s, _)| {
                let (leases, waiters) = self.ledger.session_counts(s);
                leases + waiters
            })
            .sum()
    }
}
