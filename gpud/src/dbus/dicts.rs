//! The `a{sv}` dictionaries of the interface: options in (`AcquireWith`, `Resize`), a lease's
//! description out (`AcquireWith`, `Adopt`). A dictionary lets the interface take new options
//! without new methods; a key gpud does not know, or a value of the wrong type, is refused with
//! `InvalidArgs` naming the key, never ignored.

use std::collections::HashMap;

use gpud_proto::{AcquireArgs, Class, LeaseInfo, PartArgs, Placement, PlacementPolicy};
use zbus::{OwnedVariant, Variant};

use super::error::BusError;

/// The options of `AcquireWith`, as the method receives them.
pub type Options = HashMap<String, OwnedVariant>;

/// Longest request name a caller may choose (as long as a label).
const MAX_REQUEST_NAME: usize = 256;

/// The keys `AcquireWith` takes.
const ACQUIRE_KEYS: &[&str] = &[
    "device",
    "vram",
    "compute",
    "class",
    "timeout_ms",
    "label",
    "evictable",
    "budget",
    "request",
    "queued_events",
    "devices",
    "placement",
];

/// The keys `Resize` takes.
const RESIZE_KEYS: &[&str] = &["timeout_ms", "request"];

/// An acquire as a bus caller asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireOptions {
    /// The request as the hub takes it.
    pub args: AcquireArgs,
    /// The caller's name for the waiting request, for `Cancel` and `Queued`.
    pub request: Option<String>,
}

/// A resize as a bus caller asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResizeOptions {
    /// Give up growing after this long.
    pub timeout_ms: Option<u64>,
    /// The caller's name for the waiting resize, for `Cancel`.
    pub request: Option<String>,
}

/// The options of `AcquireWith`.
pub fn acquire(options: &Options) -> Result<AcquireOptions, BusError> {
    known(options, ACQUIRE_KEYS)?;
    let device = match string(options, "device")? {
        Some(d) => d
            .parse::<Placement>()
            .map_err(|e| BusError::invalid_args(format!("option \"device\": {e}")))?,
        None => Placement::Any,
    };
    let class = match string(options, "class")? {
        Some(c) if !c.is_empty() => c
            .parse::<Class>()
            .map_err(|e| BusError::invalid_args(format!("option \"class\": {e}")))?,
        _ => Class::default(),
    };
    let request = request_name(options)?;
    let queued_events = flag(options, "queued_events")?.unwrap_or(false);
    if queued_events && request.is_none() {
        return Err(BusError::invalid_args(
            "option \"queued_events\" needs option \"request\": the Queued signal names the request by it",
        ));
    }
    let placement = match string(options, "placement")? {
        Some(p) => Some(
            p.parse::<PlacementPolicy>()
                .map_err(|e| BusError::invalid_args(format!("option \"placement\": {e}")))?,
        ),
        None => None,
    };
    let vram_bytes = unsigned(options, "vram")?.unwrap_or(0);
    let compute = flag(options, "compute")?.unwrap_or(false);
    // A lease of several devices: that many parts, each with the request's VRAM and compute,
    // on distinct devices the placement policy picks (the socket's `parts`).
    let parts = match unsigned(options, "devices")? {
        None | Some(1) => Vec::new(),
        Some(0) => {
            return Err(BusError::invalid_args(
                "option \"devices\" must be at least 1",
            ));
        }
        Some(_) if device != Placement::Any => {
            return Err(BusError::invalid_args(
                "option \"devices\" takes no \"device\": the placement policy picks the devices",
            ));
        }
        Some(n) => (0..n)
            .map(|_| PartArgs {
                device: Placement::Any,
                vram_bytes,
                compute,
            })
            .collect(),
    };
    // With parts, the needs are the parts' only (the hub refuses both).
    let (vram_bytes, compute) = if parts.is_empty() {
        (vram_bytes, compute)
    } else {
        (0, false)
    };
    // A field the protocol gains keeps its default here until an option names it.
    #[allow(clippy::needless_update)]
    let args = AcquireArgs {
        device,
        vram_bytes,
        compute,
        class,
        timeout_ms: unsigned(options, "timeout_ms")?,
        label: string(options, "label")?.map(str::to_string),
        budget: string(options, "budget")?.map(str::to_string),
        evictable: flag(options, "evictable")?.unwrap_or(false),
        queued_events,
        parts,
        placement,
        ..AcquireArgs::default()
    };
    Ok(AcquireOptions { args, request })
}

/// The options of `Resize`.
pub fn resize(options: &Options) -> Result<ResizeOptions, BusError> {
    known(options, RESIZE_KEYS)?;
    Ok(ResizeOptions {
        timeout_ms: unsigned(options, "timeout_ms")?,
        request: request_name(options)?,
    })
}

/// A lease as `AcquireWith` and `Adopt` describe it to its holder; `token` is the secret that
/// re-adopts it after a daemon restart.
pub fn lease(info: LeaseInfo) -> HashMap<String, OwnedVariant> {
    let mut out: HashMap<String, OwnedVariant> = HashMap::new();
    let mut put = |key: &str, value: Variant<'_>| {
        // Only file descriptors can fail to be owned, and none is put here.
        if let Ok(v) = value.try_into_owned() {
            out.insert(key.to_string(), v);
        }
    };
    put("lease", info.lease.into());
    put("device_uuid", info.device_uuid.into());
    put("device_index", info.device_index.into());
    put("device_name", info.device_name.into());
    put("vram", info.vram_bytes.into());
    put("compute", info.compute.into());
    put("class", info.class.as_str().into());
    put("cuda_visible_devices", info.cuda_visible_devices.into());
    put("token", info.token.into());
    if let Some(budget) = info.within {
        put("within", budget.into());
    }
    if !info.parts.is_empty() {
        // A lease of several devices: (lease, device index, device UUID, bytes, compute) per
        // part, in granted order.
        let parts: Vec<(u64, u32, String, u64, bool)> = info
            .parts
            .into_iter()
            .map(|p| {
                (
                    p.lease,
                    p.device_index,
                    p.device_uuid,
                    p.vram_bytes,
                    p.compute,
                )
            })
            .collect();
        put("parts", Variant::from(parts));
    }
    out
}

/// Refuses keys that are not in `keys`.
fn known(options: &Options, keys: &[&str]) -> Result<(), BusError> {
    let mut unknown: Vec<&str> = options
        .keys()
        .map(String::as_str)
        .filter(|k| !keys.contains(k))
        .collect();
    unknown.sort_unstable();
    match unknown.first() {
        Some(key) => Err(BusError::invalid_args(format!(
            "unknown option {key:?}; the options are {}",
            keys.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The value of `key`, looking through a variant wrapped in a variant (some bindings send
/// `v` inside `v`).
fn value<'o>(options: &'o Options, key: &str) -> Option<&'o Variant<'static>> {
    let mut v: &Variant<'static> = options.get(key)?;
    while let Variant::Variant(inner) = v {
        v = inner;
    }
    Some(v)
}

fn wrong_type(key: &str, want: &str, got: &Variant<'_>) -> BusError {
    BusError::invalid_args(format!(
        "option {key:?} must be {want}, not {}",
        got.value_signature()
    ))
}

/// A byte count or milliseconds: any integer type, as long as it is not negative (bindings of
/// dynamic languages send `i` or `x` for a plain number).
fn unsigned(options: &Options, key: &str) -> Result<Option<u64>, BusError> {
    let Some(v) = value(options, key) else {
        return Ok(None);
    };
    let signed = |n: i64| {
        u64::try_from(n)
            .map_err(|_| BusError::invalid_args(format!("option {key:?} must not be negative")))
    };
    match v {
        Variant::U8(n) => Ok(Some(u64::from(*n))),
        Variant::U16(n) => Ok(Some(u64::from(*n))),
        Variant::U32(n) => Ok(Some(u64::from(*n))),
        Variant::U64(n) => Ok(Some(*n)),
        Variant::I16(n) => signed(i64::from(*n)).map(Some),
        Variant::I32(n) => signed(i64::from(*n)).map(Some),
        Variant::I64(n) => signed(*n).map(Some),
        other => Err(wrong_type(key, "an unsigned integer (t)", other)),
    }
}

fn flag(options: &Options, key: &str) -> Result<Option<bool>, BusError> {
    match value(options, key) {
        None => Ok(None),
        Some(Variant::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(key, "a boolean (b)", other)),
    }
}

fn string<'o>(options: &'o Options, key: &str) -> Result<Option<&'o str>, BusError> {
    match value(options, key) {
        None => Ok(None),
        Some(Variant::Str(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(key, "a string (s)", other)),
    }
}

/// The caller's name for its waiting request: printable text, not too long.
fn request_name(options: &Options) -> Result<Option<String>, BusError> {
    match string(options, "request")? {
        None => Ok(None),
        Some(r)
            if r.is_empty() || r.len() > MAX_REQUEST_NAME || r.chars().any(char::is_control) =>
        {
            Err(BusError::invalid_args(format!(
                "option \"request\" must be 1 to {MAX_REQUEST_NAME} bytes of printable text"
            )))
        }
        Some(r) => Ok(Some(r.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, Variant<'static>)]) -> Options {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.try_to_owned().unwrap()))
            .collect()
    }

    #[test]
    fn every_acquire_option_reaches_the_request() {
        let asked = acquire(&options(&[
            ("device", "1".into()),
            ("vram", (4u64 << 30).into()),
            ("compute", true.into()),
            ("class", "high".into()),
            ("timeout_ms", 500u32.into()),
            ("label", "proof 17".into()),
            ("evictable", false.into()),
            ("budget", "12:ab".into()),
            ("request", "job-1".into()),
            ("queued_events", true.into()),
        ]))
        .unwrap();
        assert_eq!(asked.request.as_deref(), Some("job-1"));
        let a = asked.args;
        assert_eq!(a.device, Placement::Index(1));
        assert_eq!(
            (a.vram_bytes, a.compute, a.class),
            (4 << 30, true, Class::High)
        );
        assert_eq!(a.timeout_ms, Some(500));
        assert_eq!(a.label.as_deref(), Some("proof 17"));
        assert_eq!(a.budget.as_deref(), Some("12:ab"));
        assert!(a.queued_events && !a.evictable);
        let empty = acquire(&Options::new()).unwrap();
        assert_eq!(empty.args, AcquireArgs::default());
        assert_eq!(empty.request, None);
    }

    #[test]
    fn a_refused_option_is_named() {
        let refusal = |pairs: &[(&str, Variant<'static>)]| {
            let e = acquire(&options(pairs)).unwrap_err();
            assert_eq!(e.name_str(), "org.freedesktop.DBus.Error.InvalidArgs");
            e.to_string()
        };
        let e = refusal(&[("vram", 1u64.into()), ("colour", "red".into())]);
        assert!(e.contains("\"colour\"") && e.contains("vram"), "{e}");
        let e = refusal(&[("vram", "1 GiB".into())]);
        assert!(e.contains("\"vram\"") && e.contains("not s"), "{e}");
        let e = refusal(&[("compute", 1u32.into())]);
        assert!(e.contains("\"compute\"") && e.contains("boolean"), "{e}");
        let e = refusal(&[("timeout_ms", (-5i32).into())]);
        assert!(
            e.contains("\"timeout_ms\"") && e.contains("negative"),
            "{e}"
        );
        let e = refusal(&[("class", "urgent".into())]);
        assert!(e.contains("\"class\""), "{e}");
        let e = refusal(&[("request", "a\nb".into())]);
        assert!(e.contains("\"request\""), "{e}");
        let e = refusal(&[("queued_events", true.into())]);
        assert!(e.contains("\"request\""), "{e}");
        let e = resize(&options(&[("evictable", true.into())])).unwrap_err();
        assert!(e.to_string().contains("\"evictable\""), "{e}");
    }

    #[test]
    fn numbers_may_come_as_any_integer_type_and_inside_a_variant() {
        let nested = Variant::Variant(Box::new(Variant::I64(3)));
        let asked = resize(&options(&[("timeout_ms", nested)])).unwrap();
        assert_eq!(asked.timeout_ms, Some(3));
        let asked = acquire(&options(&[("vram", 7i32.into())])).unwrap();
        assert_eq!(asked.args.vram_bytes, 7);
    }

    #[test]
    fn a_lease_is_described_with_its_token() {
        let info = LeaseInfo {
            lease: 4,
            device_uuid: "GPU-x".into(),
            device_index: 0,
            device_name: "test".into(),
            vram_bytes: 1 << 30,
            compute: true,
            class: Class::Normal,
            cuda_visible_devices: "GPU-x".into(),
            token: "secret".into(),
            within: None,
            parts: Vec::new(),
            host: None,
        };
        let out = lease(info);
        assert_eq!(*out["lease"], Variant::U64(4));
        assert_eq!(*out["token"], Variant::from("secret"));
        assert_eq!(*out["class"], Variant::from("normal"));
        assert!(!out.contains_key("within"));
        assert!(!out.contains_key("parts"));
    }

    #[test]
    fn several_devices_become_parts_with_a_placement() {
        let asked = acquire(&options(&[
            ("devices", 2u32.into()),
            ("vram", (1u64 << 30).into()),
            ("compute", true.into()),
            ("placement", "spread".into()),
        ]))
        .unwrap();
        assert_eq!(asked.args.parts.len(), 2);
        assert!(
            asked
                .args
                .parts
                .iter()
                .all(|p| p.vram_bytes == 1 << 30 && p.compute)
        );
        assert_eq!(asked.args.placement, Some(PlacementPolicy::Spread));
        let e = acquire(&options(&[("devices", 0u32.into())])).unwrap_err();
        assert!(e.to_string().contains("devices"), "{e}");
        let e = acquire(&options(&[
            ("devices", 2u32.into()),
            ("device", "0".into()),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("placement policy"), "{e}");
        let e = acquire(&options(&[("placement", "scatter".into())])).unwrap_err();
        assert!(e.to_string().contains("placement"), "{e}");
        let info = LeaseInfo {
            lease: 4,
            device_uuid: "GPU-a".into(),
            device_index: 0,
            device_name: "test".into(),
            vram_bytes: 1 << 30,
            compute: true,
            class: Class::Normal,
            cuda_visible_devices: "GPU-a,GPU-b".into(),
            token: "secret".into(),
            within: None,
            parts: vec![
                gpud_proto::LeasePart {
                    lease: 4,
                    device_index: 0,
                    device_uuid: "GPU-a".into(),
                    vram_bytes: 1 << 30,
                    compute: true,
                },
                gpud_proto::LeasePart {
                    lease: 5,
                    device_index: 1,
                    device_uuid: "GPU-b".into(),
                    vram_bytes: 1 << 30,
                    compute: true,
                },
            ],
            host: None,
        };
        let out = lease(info);
        let parts: Vec<(u64, u32, String, u64, bool)> = out["parts"].clone().try_into().unwrap();
        assert_eq!(parts[1], (5, 1, "GPU-b".to_string(), 1 << 30, true));
    }
}
