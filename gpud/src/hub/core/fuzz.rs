//! Fuzzing the untrusted edge: arbitrary bytes through the frame decoder, and every request
//! that parses through the core's validation and the ledger, on virtual time. Nothing may
//! panic, every request gets exactly one answer (a reply now, or later as a decision: never
//! none, never two), and the ledger's books stay straight.
//!
//! CI runs a bounded number of cases; for a long run:
//! `GPUD_FUZZ_CASES=1000000 cargo test --release -p gpud fuzz -- --nocapture`.

use std::collections::HashMap;
use std::time::Duration;

use bytes::BytesMut;
use gpud_proto::frame::{codec, from_payload};
use gpud_proto::{ClientFrame, RequestId, ServerFrame};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio_util::codec::Decoder;

use super::bench::{Bench, peer};
use crate::config::Config;
use crate::ledger::Ticket;

fn cases() -> u32 {
    std::env::var("GPUD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
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
        Just("status_page"),
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
        Just("leases"),
        Just("waiters"),
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

/// Every request id's count of requests sent must equal its answers so far plus its
/// requests still waiting (at most one: the ledger refuses a second with the same id).
fn check_answers(
    bench: &Bench,
    sent: &HashMap<RequestId, usize>,
    answered: &HashMap<RequestId, usize>,
) -> Result<(), TestCaseError> {
    for (&id, &n) in sent {
        let waiting = usize::from(
            bench
                .core
                .ledger()
                .waiter(Ticket {
                    session: 1,
                    request: id,
                })
                .is_some(),
        );
        let got = answered.get(&id).copied().unwrap_or(0);
        prop_assert_eq!(
            got + waiting,
            n,
            "request id {}: {} sent, {} answered, {} waiting",
            id,
            n,
            got,
            waiting
        );
    }
    for id in answered.keys() {
        prop_assert!(
            sent.contains_key(id),
            "an answer to {} that nobody asked",
            id
        );
    }
    Ok(())
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

    /// Request-shaped JSON through parsing, validation, the core and the ledger, with time
    /// passing between requests: exactly one answer per request.
    #[test]
    fn fuzz_requests_through_the_hub(
        requests in proptest::collection::vec((request(), 0u64..60), 1..40),
    ) {
        let mut bench = Bench::new(&Config::default());
        bench.open(1, peer(4242, 0)).map_err(|e| TestCaseError::fail(e.message))?;
        let mut sent: HashMap<RequestId, usize> = HashMap::new();
        let mut answered: HashMap<RequestId, usize> = HashMap::new();
        for (r, pause_ms) in requests {
            let payload = serde_json::to_vec(&r).unwrap();
            if let Ok(ClientFrame::Request { id, op }) = from_payload::<ClientFrame>(&payload) {
                *sent.entry(id).or_default() += 1;
                bench.request(1, id, op);
            }
            bench.advance(Duration::from_millis(pause_ms));
            for frame in bench.frames(1) {
                if let ServerFrame::Reply { id, .. } = frame {
                    *answered.entry(id).or_default() += 1;
                }
            }
            check_answers(&bench, &sent, &answered)?;
            bench.core.ledger().check_invariants().map_err(TestCaseError::fail)?;
        }
        let now = bench.now();
        bench.core.close(now, 1);
        bench.core.ledger().check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(bench.core.ledger().leases().count(), 0, "closing the session frees everything");
    }

    /// Arbitrary bytes as a payload: parsing never panics.
    #[test]
    fn fuzz_payload_parser(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = from_payload::<ClientFrame>(&bytes);
    }
}
