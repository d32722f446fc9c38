//! Fuzzing the untrusted edge: arbitrary bytes through the frame decoder, and every request
//! that parses through the hub's validation and the ledger. Nothing may panic, every request
//! gets an answer or an error, and the ledger's books stay straight.
//!
//! CI runs a bounded number of cases; for a long run:
//! `GPUD_FUZZ_CASES=1000000 cargo test --release -p gpud fuzz -- --nocapture`.

use bytes::BytesMut;
use gpud_proto::frame::{codec, from_payload};
use gpud_proto::{ClientFrame, ServerFrame};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Decoder;

use super::hub::{Command, Hub};
use super::peer::Peer;
use crate::config::Config;
use crate::ledger::{DeviceSpec, Ledger};

fn cases() -> u32 {
    std::env::var("GPUD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

/// A hub over two simulated devices with one admitted root session (id 1).
fn hub() -> (Hub, mpsc::Receiver<ServerFrame>) {
    hub_with(&Config::default(), std::process::id())
}

/// A hub over two simulated 16 GiB devices with `config`, and session 1 admitted for a root
/// peer with pid `pid`.
pub(super) fn hub_with(config: &Config, pid: u32) -> (Hub, mpsc::Receiver<ServerFrame>) {
    let devices = (0..2)
        .map(|i| DeviceSpec {
            uuid: format!("GPU-fuzz-{i}"),
            name: "fuzz".into(),
            total_bytes: 16 << 30,
            headroom_bytes: 0,
            unmanaged_bytes: 0,
            compute_slots: config.compute_slots,
            critical_slots: config.critical_slots,
        })
        .collect();
    let mut hub = Hub::new(
        Ledger::new(config.scheduler.clone(), devices),
        vec!["fuzz".into(); 2],
        config,
        "simulated",
    );
    let (outbound, rx) = mpsc::channel(1 << 16);
    let (reply, _verdict) = oneshot::channel();
    let peer = Peer {
        pid,
        uid: 0,
        gid: 0,
        groups: vec![],
        process: "fuzz".into(),
        start: 0,
    };
    hub.apply(Command::Open {
        session: 1,
        peer,
        outbound,
        reply,
    });
    (hub, rx)
}

/// Numbers that probe the edges.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..40).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(1u64 << 30)),
        Just(json!(u64::MAX)),
        Just(json!(1.5)),
        Just(json!("12")),
        Just(Value::Null),
    ]
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("any")),
        Just(json!("0")),
        Just(json!("1")),
        Just(json!("7")),
        Just(json!("GPU-fuzz-1")),
        Just(json!("critical")),
        Just(json!("normal")),
        "[ -~]{0,12}".prop_map(Value::from),
        Just(json!("\u{0}\u{7}")),
        Just(Value::from("x".repeat(300))),
    ]
}

fn field() -> impl Strategy<Value = Value> {
    prop_oneof![number(), text(), any::<bool>().prop_map(Value::from)]
}

/// Requests shaped like the real ones, with fields of any value (or missing, or extra).
fn request() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        Just("acquire"),
        Just("resize"),
        Just("release"),
        Just("cancel"),
        Just("drain"),
        Just("undrain"),
        Just("revoke"),
        Just("adopt"),
        Just("status"),
        Just("ping"),
        Just("nope"),
    ];
    let keys = prop_oneof![
        Just("device"),
        Just("vram_bytes"),
        Just("compute"),
        Just("class"),
        Just("timeout_ms"),
        Just("label"),
        Just("lease"),
        Just("request"),
        Just("token"),
        Just("bogus"),
    ];
    (
        op,
        proptest::collection::vec((keys, field()), 0..6),
        number(),
    )
        .prop_map(|(op, fields, id)| {
            let args: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let op = if matches!(op, "status" | "ping") && args.is_empty() {
                json!(op)
            } else {
                json!({ op: args })
            };
            json!({"type": "request", "id": id, "op": op})
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Arbitrary bytes: the length-delimited decoder never panics and refuses oversized frames.
    #[test]
    fn fuzz_frame_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..4096), limit in 16usize..1024) {
        let mut codec = codec(limit);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            prop_assert!(frame.len() <= limit);
            let _ = from_payload::<ClientFrame>(&frame);
        }
    }

    /// Request-shaped JSON through parsing, validation, the hub and the ledger.
    #[test]
    fn fuzz_requests_through_the_hub(requests in proptest::collection::vec(request(), 1..40)) {
        let (mut hub, mut rx) = hub();
        for r in requests {
            let payload = serde_json::to_vec(&r).unwrap();
            if let Ok(ClientFrame::Request { id, op }) = from_payload::<ClientFrame>(&payload) {
                hub.apply(Command::Request { session: 1, id, op });
            }
            hub.ledger().check_invariants().map_err(TestCaseError::fail)?;
            while rx.try_recv().is_ok() {}
        }
        hub.apply(Command::Close { session: 1 });
        hub.ledger().check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(hub.ledger().leases().count(), 0, "closing the session frees everything");
    }

    /// Arbitrary bytes as a payload: parsing never panics.
    #[test]
    fn fuzz_payload_parser(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = from_payload::<ClientFrame>(&bytes);
    }
}
