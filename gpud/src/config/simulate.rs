//! Simulated devices (`--simulate`, `[devices] simulate`): `2x16GiB`, `16GiB,24GiB`.

use gpud_proto::parse_size;
use thiserror::Error;

/// A simulation spec that names no devices.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid simulation spec {spec:?}: {why} (examples: 2x16GiB, 16GiB,24GiB)")]
pub struct SimulationError {
    /// The spec.
    pub spec: String,
    /// Why.
    pub why: String,
}

/// At most this many simulated devices.
const MAX_DEVICES: usize = 64;

/// Parses a simulation spec into device sizes: comma-separated groups of `[Nx]SIZE`.
pub fn parse_spec(spec: &str) -> Result<Vec<u64>, SimulationError> {
    let bad = |why: String| SimulationError {
        spec: spec.to_string(),
        why,
    };
    let mut sizes = Vec::new();
    for group in spec.split(',') {
        let group = group.trim();
        if group.is_empty() {
            return Err(bad("empty device group".into()));
        }
        let (count, size) = match group.split_once(['x', 'X']) {
            Some((n, size)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let n: usize = n.parse().map_err(|_| bad(format!("bad count {n:?}")))?;
                (n, size)
            }
            _ => (1, group),
        };
        let bytes = parse_size(size).map_err(|e| bad(e.to_string()))?;
        if bytes < (1 << 20) {
            return Err(bad(format!("device size {size:?} is under 1 MiB")));
        }
        if count == 0 || sizes.len() + count > MAX_DEVICES {
            return Err(bad(format!("between 1 and {MAX_DEVICES} devices")));
        }
        sizes.extend(std::iter::repeat_n(bytes, count));
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(parse_spec("2x16GiB").unwrap(), vec![16 << 30, 16 << 30]);
        assert_eq!(parse_spec("16GiB,24GiB").unwrap(), vec![16 << 30, 24 << 30]);
        assert_eq!(parse_spec("1x8GiB, 2X1GiB").unwrap().len(), 3);
        for bad in [
            "",
            "2x",
            "0x16GiB",
            "16GiB,",
            "100x1GiB",
            "2x16 parsecs",
            "512",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?} accepted");
        }
    }
}
