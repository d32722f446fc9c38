//! Fuzzing the journal's replay: any sequence of entries, damaged lines, blank lines and a torn
//! last line. Replay never panics; it refuses exactly what could hide a live lease (a complete
//! line that does not parse, or describes what no lease can be), skips (and counts) what is
//! harmless, and otherwise brings back exactly the leases a straight reading of the entries
//! leaves live.
//!
//! CI runs a bounded number of cases; for a long run:
//! `GPUD_FUZZ_CASES=10000000 cargo test --release -p gpud fuzz -- --nocapture`.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use proptest::prelude::*;

use super::{Entry, JournalError, LeaseRecord, MAX_LEASE_BYTES, replay};
use crate::ledger::LeaseId;

fn cases() -> u32 {
    std::env::var("GPUD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

/// One line of a journal, as a damaged or hostile disk could hold it.
#[derive(Debug, Clone)]
enum Line {
    Entry(serde_json::Value),
    /// Bytes that are no JSON at all (they start with `#`).
    Garbage(Vec<u8>),
    Blank,
}

fn bytes() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4096,
        Just(MAX_LEASE_BYTES),
        Just(MAX_LEASE_BYTES + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn line() -> impl Strategy<Value = Line> {
    let id = prop_oneof![0u64..6, Just(u64::MAX)];
    let grant = (id.clone(), bytes(), any::<bool>(), any::<bool>()).prop_map(
        |(id, vram_bytes, no_token, no_device)| {
            Line::Entry(serde_json::json!({
                "op": "grant", "id": id,
                "token": if no_token { "" } else { "t" },
                "device_uuid": if no_device { "" } else { "GPU-0" },
                "vram_bytes": vram_bytes, "compute": false, "class": "normal",
                "pid": 1, "pid_start": 2, "uid": 0, "granted_unix_ms": 3,
            }))
        },
    );
    let resize = (id.clone(), bytes()).prop_map(|(id, vram_bytes)| {
        Line::Entry(serde_json::json!({"op": "resize", "id": id, "vram_bytes": vram_bytes}))
    });
    let release = id.prop_map(|id| Line::Entry(serde_json::json!({"op": "release", "id": id})));
    prop_oneof![
        4 => grant,
        2 => resize,
        3 => release,
        1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(|mut b| {
            b.retain(|&c| c != b'\n');
            b.insert(0, b'#');
            Line::Garbage(b)
        }),
        1 => Just(Line::Blank),
    ]
}

fn encode(line: &Line) -> Vec<u8> {
    match line {
        Line::Entry(v) => serde_json::to_vec(v).unwrap_or_default(),
        Line::Garbage(b) => b.clone(),
        Line::Blank => b"  ".to_vec(),
    }
}

/// What a straight reading of the lines says: the live leases and the skipped entries, or the
/// (1-based) line that must be refused.
fn model(lines: &[Line], torn: Option<&[u8]>) -> Result<(BTreeMap<LeaseId, u64>, u64), u64> {
    let mut live = BTreeMap::new();
    let mut skipped = 0;
    let sane = |v: &serde_json::Value| v.as_u64().is_some_and(|b| b <= MAX_LEASE_BYTES);
    let mut apply = |v: &serde_json::Value, n: u64| -> Result<(), u64> {
        let id = v["id"].as_u64().unwrap_or(0);
        match v["op"].as_str() {
            Some("grant") => {
                if id == 0 || !sane(&v["vram_bytes"]) || v["token"] == "" || v["device_uuid"] == ""
                {
                    return Err(n);
                }
                live.insert(id, v["vram_bytes"].as_u64().unwrap_or(0));
            }
            Some("resize") => match live.get_mut(&id) {
                Some(size) if sane(&v["vram_bytes"]) => {
                    *size = v["vram_bytes"].as_u64().unwrap_or(0)
                }
                Some(_) => return Err(n),
                None => skipped += 1,
            },
            _ => {
                if live.remove(&id).is_none() {
                    skipped += 1;
                }
            }
        }
        Ok(())
    };
    for (i, line) in lines.iter().enumerate() {
        let n = i as u64 + 1;
        match line {
            Line::Entry(v) => apply(v, n)?,
            Line::Garbage(_) => return Err(n),
            Line::Blank => {}
        }
    }
    // A torn last line counts only when what was written of it is a whole entry.
    if let Some(t) = torn {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(t) {
            if serde_json::from_slice::<Entry>(t).is_ok() {
                apply(&v, lines.len() as u64 + 1)?;
            }
        }
    }
    Ok((live, skipped))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn fuzz_journal_replay(
        lines in proptest::collection::vec(line(), 0..24),
        torn in proptest::option::of((line(), any::<prop::sample::Index>())),
    ) {
        let mut text = Vec::new();
        for l in &lines {
            text.extend(encode(l));
            text.push(b'\n');
        }
        let torn = torn.map(|(l, at)| {
            let whole = encode(&l);
            let cut = at.index(whole.len() + 1);
            whole[..cut].to_vec()
        });
        if let Some(t) = &torn {
            text.extend(t);
        }
        let expected = model(&lines, torn.as_deref().filter(|t| !t.iter().all(u8::is_ascii_whitespace)));
        match (replay(Cursor::new(&text), Path::new("fuzz")), expected) {
            (Ok(got), Ok((live, skipped))) => {
                let sizes: BTreeMap<LeaseId, u64> =
                    got.live.iter().map(|(&id, r): (&LeaseId, &LeaseRecord)| (id, r.vram_bytes)).collect();
                prop_assert_eq!(sizes, live);
                prop_assert_eq!(got.skipped, skipped);
                for r in got.live.values() {
                    prop_assert!(r.check().is_ok(), "{:?}", r);
                }
            }
            (Err(JournalError::Untrusted { line, .. }), Err(n)) => prop_assert_eq!(line, n),
            (got, want) => prop_assert!(false, "replay {:?}, a straight reading {:?}", got.map(|r| r.live.len()), want),
        }
    }
}
