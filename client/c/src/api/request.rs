//! `gpud_request`: what to ask for, built with setters and reused as often as wanted.

use std::ffi::c_char;

use gpud_client::{Class, LeaseRequest, NumaPlacement, Placement};

use crate::code::{GpudClass, GpudCode};
use crate::error::{Error, Result, boundary, boundary_void};
use crate::ptr;

/// A lease request: VRAM bytes and/or the compute slot, on a device (any by default), and/or
/// host resources (host memory, page-locked memory, CPUs of a NUMA node), in a class (normal
/// by default), with an optional label and timeout. Made by `gpud_request_new`, freed by
/// `gpud_request_free`. A request is a plain value: it may be used by several threads'
/// acquires at once, but not changed while one uses it.
#[derive(Debug, Clone, Default)]
pub struct GpudRequest {
    vram_bytes: u64,
    compute: bool,
    device: Placement,
    class: Class,
    timeout_ms: Option<u64>,
    label: Option<String>,
    host_memory: u64,
    pinned: u64,
    cpus: u32,
    numa: NumaPlacement,
}

impl GpudRequest {
    /// The Rust client's request.
    pub(crate) fn to_lease_request(&self) -> LeaseRequest {
        let mut r = LeaseRequest::new()
            .vram(self.vram_bytes)
            .with_compute(self.compute)
            .device(self.device.clone())
            .class(self.class);
        if let Some(ms) = self.timeout_ms {
            r = r.timeout(std::time::Duration::from_millis(ms));
        }
        if let Some(label) = &self.label {
            r = r.label(label.clone());
        }
        // Host resources go on the wire only when asked for: a daemon that does not book
        // them would not understand the field.
        if self.host_memory != 0 {
            r = r.host_memory(self.host_memory);
        }
        if self.pinned != 0 {
            r = r.pinned(self.pinned);
        }
        if self.cpus != 0 {
            r = r.cpus(self.cpus);
        }
        if self.numa != NumaPlacement::Any {
            r = r.numa(self.numa);
        }
        r
    }
}

/// A device selector as gpudctl reads one: `any`, an index (`0`) or a UUID (`GPU-…`).
pub(crate) fn placement(device: &str) -> Result<Placement> {
    device
        .parse()
        .map_err(|e: gpud_client::proto::class::PlacementError| {
            Error::InvalidRequest(e.to_string())
        })
}

/// Makes an empty request (no VRAM, no compute, no host resources: set at least one), stored
/// in `*out`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_new(out: *mut *mut GpudRequest) -> GpudCode {
    boundary(|| {
        ptr::out(out, "out")?.set(ptr::give(GpudRequest::default()));
        Ok(())
    })
}

/// Frees a request. NULL is allowed (nothing happens).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_free(request: *mut GpudRequest) {
    boundary_void(|| ptr::take_back(request));
}

/// Sets the bytes of device memory to reserve (0 by default).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_vram(request: *mut GpudRequest, bytes: u64) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.vram_bytes = bytes;
        Ok(())
    })
}

/// Asks for the device's compute slot, or not (not by default).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_compute(request: *mut GpudRequest, compute: bool) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.compute = compute;
        Ok(())
    })
}

/// Lets gpud choose the device (the default).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_device_any(request: *mut GpudRequest) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.device = Placement::Any;
        Ok(())
    })
}

/// Asks for the device with gpud index `index`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_device_index(request: *mut GpudRequest, index: u32) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.device = Placement::Index(index);
        Ok(())
    })
}

/// Asks for a device named as gpudctl names one: `"any"`, an index (`"0"`) or a UUID
/// (`"GPU-…"`). Anything else is `GPUD_E_INVALID_REQUEST` (the request is unchanged).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_device(
    request: *mut GpudRequest,
    device: *const c_char,
) -> GpudCode {
    boundary(|| {
        let request = ptr::handle_mut(request, "request")?;
        request.device = placement(ptr::text(device, "device")?)?;
        Ok(())
    })
}

/// Sets the priority class, a `gpud_class` value (`GPUD_CLASS_NORMAL` by default). Another
/// number is `GPUD_E_INVALID_ARGUMENT`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_class(
    request: *mut GpudRequest,
    priority_class: i32,
) -> GpudCode {
    boundary(|| {
        let request = ptr::handle_mut(request, "request")?;
        let class = GpudClass::from_i32(priority_class).ok_or_else(|| {
            Error::InvalidArgument(format!("{priority_class} is no gpud_class (0 to 3)"))
        })?;
        request.class = class.into();
        Ok(())
    })
}

/// Sets the priority class by name: `critical`, `high`, `normal` or `background`. Another
/// name is `GPUD_E_INVALID_REQUEST`, the daemon's answer to an unknown class.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_class_name(
    request: *mut GpudRequest,
    name: *const c_char,
) -> GpudCode {
    boundary(|| {
        let request = ptr::handle_mut(request, "request")?;
        let name = ptr::text(name, "name")?;
        request.class = name
            .parse()
            .map_err(|e: gpud_client::proto::class::ClassError| {
                Error::InvalidRequest(e.to_string())
            })?;
        Ok(())
    })
}

/// Gives up waiting after `timeout_ms` milliseconds (the acquire then fails with
/// `GPUD_E_TIMED_OUT`); `GPUD_NO_TIMEOUT` (or any negative number) waits for ever, the
/// default.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_timeout_ms(
    request: *mut GpudRequest,
    timeout_ms: i64,
) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.timeout_ms = u64::try_from(timeout_ms).ok();
        Ok(())
    })
}

/// Sets a label shown in `gpudctl status` (at most 256 bytes of printable text, else the
/// daemon refuses the acquire with `GPUD_E_INVALID_REQUEST`); NULL removes it.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_label(
    request: *mut GpudRequest,
    label: *const c_char,
) -> GpudCode {
    boundary(|| {
        let request = ptr::handle_mut(request, "request")?;
        request.label = if label.is_null() {
            None
        } else {
            Some(ptr::text(label, "label")?.to_string())
        };
        Ok(())
    })
}

/// Sets the bytes of host memory to reserve with the lease (0 by default): what the lease's
/// processes keep resident, page-locked memory included (gpud books at least the pinned
/// bytes here). A request with host resources and no VRAM or compute is a lease of the host
/// alone. Host resources need a daemon that books them (docs/HOST.md); an older one refuses
/// the acquire with `GPUD_E_INVALID_REQUEST`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_host_memory(request: *mut GpudRequest, bytes: u64) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.host_memory = bytes;
        Ok(())
    })
}

/// Sets the bytes of page-locked (pinned) host memory to reserve (0 by default): CUDA staging
/// buffers, registered bases.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_pinned(request: *mut GpudRequest, bytes: u64) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.pinned = bytes;
        Ok(())
    })
}

/// Sets the number of CPUs to take, all of one NUMA node (0 by default); the grant names them
/// (`gpud_lease_cpus`).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_cpus(request: *mut GpudRequest, count: u32) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.cpus = count;
        Ok(())
    })
}

/// Says which NUMA node the CPUs come from, as gpudctl reads it: `"any"` (a node with room,
/// the default), `"near"` (the node of the lease's device: the request must ask for VRAM or
/// compute too, else the daemon refuses it with `GPUD_E_INVALID_REQUEST`), or a node's number
/// (`"1"`). Anything else is `GPUD_E_INVALID_REQUEST` (the request is unchanged).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_numa(
    request: *mut GpudRequest,
    numa: *const c_char,
) -> GpudCode {
    boundary(|| {
        let request = ptr::handle_mut(request, "request")?;
        request.numa = ptr::text(numa, "numa")?
            .parse()
            .map_err(Error::InvalidRequest)?;
        Ok(())
    })
}

/// Takes the CPUs from NUMA node `node`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_request_set_numa_node(request: *mut GpudRequest, node: u32) -> GpudCode {
    boundary(|| {
        ptr::handle_mut(request, "request")?.numa = NumaPlacement::Node(node);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new() -> *mut GpudRequest {
        let mut r = std::ptr::null_mut();
        assert_eq!(gpud_request_new(&mut r), GpudCode::GPUD_OK);
        r
    }

    #[test]
    fn setters_build_the_rust_request() {
        let r = new();
        assert_eq!(gpud_request_set_vram(r, 10 << 30), GpudCode::GPUD_OK);
        assert_eq!(gpud_request_set_compute(r, true), GpudCode::GPUD_OK);
        assert_eq!(gpud_request_set_device(r, c"0".as_ptr()), GpudCode::GPUD_OK);
        assert_eq!(
            gpud_request_set_class(r, GpudClass::GPUD_CLASS_HIGH as i32),
            GpudCode::GPUD_OK
        );
        assert_eq!(gpud_request_set_timeout_ms(r, 1500), GpudCode::GPUD_OK);
        assert_eq!(
            gpud_request_set_label(r, c"proof 7".as_ptr()),
            GpudCode::GPUD_OK
        );
        let args = ptr::handle(r, "r").unwrap().to_lease_request();
        let args = args.args();
        assert_eq!(args.vram_bytes, 10 << 30);
        assert!(args.compute);
        assert_eq!(args.device, Placement::Index(0));
        assert_eq!(args.class, Class::High);
        assert_eq!(args.timeout_ms, Some(1500));
        assert_eq!(args.label.as_deref(), Some("proof 7"));
        assert_eq!(gpud_request_set_timeout_ms(r, -1), GpudCode::GPUD_OK);
        assert_eq!(
            gpud_request_set_label(r, std::ptr::null()),
            GpudCode::GPUD_OK
        );
        assert_eq!(
            gpud_request_set_class_name(r, c"background".as_ptr()),
            GpudCode::GPUD_OK
        );
        let args = ptr::handle(r, "r").unwrap().to_lease_request();
        assert_eq!(args.args().timeout_ms, None);
        assert_eq!(args.args().label, None);
        assert_eq!(args.args().class, Class::Background);
        // No host resources asked: none on the wire.
        assert_eq!(args.args().host, None);
        gpud_request_free(r);
        gpud_request_free(std::ptr::null_mut());
    }

    #[test]
    fn host_setters_build_the_rust_request() {
        let r = new();
        assert_eq!(gpud_request_set_host_memory(r, 64 << 30), GpudCode::GPUD_OK);
        assert_eq!(gpud_request_set_pinned(r, 2 << 30), GpudCode::GPUD_OK);
        assert_eq!(gpud_request_set_cpus(r, 8), GpudCode::GPUD_OK);
        assert_eq!(
            gpud_request_set_numa(r, c"near".as_ptr()),
            GpudCode::GPUD_OK
        );
        let request = ptr::handle(r, "r").unwrap().to_lease_request();
        let host = request.args().host.clone().expect("host resources asked");
        assert_eq!(
            (host.mem_bytes, host.pinned_bytes, host.cpus, host.numa),
            (64 << 30, 2 << 30, 8, NumaPlacement::Near)
        );
        // A host-only request: no device part.
        assert_eq!(request.args().vram_bytes, 0);
        assert!(!request.args().compute);
        assert_eq!(gpud_request_set_numa(r, c" 3 ".as_ptr()), GpudCode::GPUD_OK);
        let numa = |r: *mut GpudRequest| {
            let request = ptr::handle(r, "r").unwrap().to_lease_request();
            request.args().host.as_ref().map(|h| h.numa)
        };
        assert_eq!(numa(r), Some(NumaPlacement::Node(3)));
        assert_eq!(gpud_request_set_numa_node(r, 1), GpudCode::GPUD_OK);
        assert_eq!(numa(r), Some(NumaPlacement::Node(1)));
        assert_eq!(gpud_request_set_numa(r, c"any".as_ptr()), GpudCode::GPUD_OK);
        assert_eq!(numa(r), Some(NumaPlacement::Any));
        // Each amount alone is a host request; all zero is none.
        for (mem, pinned, cpus) in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
            gpud_request_set_host_memory(r, mem);
            gpud_request_set_pinned(r, pinned);
            gpud_request_set_cpus(r, cpus);
            let request = ptr::handle(r, "r").unwrap().to_lease_request();
            let host = request.args().host.clone().expect("host resources asked");
            assert_eq!(
                (host.mem_bytes, host.pinned_bytes, host.cpus),
                (mem, pinned, cpus)
            );
        }
        gpud_request_set_cpus(r, 0);
        let request = ptr::handle(r, "r").unwrap().to_lease_request();
        assert_eq!(request.args().host, None);
        gpud_request_free(r);
    }

    #[test]
    fn bad_host_arguments_are_codes() {
        let r = new();
        assert_eq!(
            gpud_request_set_host_memory(std::ptr::null_mut(), 1),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_cpus(std::ptr::null_mut(), 1),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_numa(r, std::ptr::null()),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(gpud_request_set_numa(r, c"1".as_ptr()), GpudCode::GPUD_OK);
        for bad in [c"far", c"-1", c"node1", c""] {
            assert_eq!(
                gpud_request_set_numa(r, bad.as_ptr()),
                GpudCode::GPUD_E_INVALID_REQUEST,
                "{bad:?}"
            );
            let message = ptr::text(crate::api::misc::gpud_last_error(), "message").unwrap();
            assert!(message.contains("NUMA placement"), "{message:?}");
        }
        // A refused change leaves the request as it was.
        gpud_request_set_cpus(r, 2);
        let request = ptr::handle(r, "r").unwrap().to_lease_request();
        assert_eq!(
            request.args().host.as_ref().map(|h| h.numa),
            Some(NumaPlacement::Node(1))
        );
        gpud_request_free(r);
    }

    #[test]
    fn bad_arguments_are_codes() {
        let r = new();
        assert_eq!(
            gpud_request_new(std::ptr::null_mut()),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_vram(std::ptr::null_mut(), 1),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_device(r, std::ptr::null()),
            GpudCode::GPUD_E_NULL_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_device(r, c"../etc".as_ptr()),
            GpudCode::GPUD_E_INVALID_REQUEST
        );
        assert_eq!(
            gpud_request_set_class(r, 4),
            GpudCode::GPUD_E_INVALID_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_class(r, -1),
            GpudCode::GPUD_E_INVALID_ARGUMENT
        );
        assert_eq!(
            gpud_request_set_class_name(r, c"urgent".as_ptr()),
            GpudCode::GPUD_E_INVALID_REQUEST
        );
        let bad = [b'x', 0xc3, 0];
        assert_eq!(
            gpud_request_set_label(r, bad.as_ptr().cast()),
            GpudCode::GPUD_E_INVALID_ARGUMENT
        );
        // A refused change leaves the request as it was.
        let args = ptr::handle(r, "r").unwrap().to_lease_request();
        assert_eq!(args.args().device, Placement::Any);
        assert_eq!(args.args().class, Class::Normal);
        gpud_request_free(r);
    }
}
