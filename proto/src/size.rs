//! Human byte sizes: `12GiB`, `512MiB`, `1.5GiB`, `4096` in; `12.0 GiB` out.

use std::fmt;

use thiserror::Error;

/// A size string that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid size {input:?}: {why} (examples: 12GiB, 512MiB, 1.5GiB, 4096)")]
pub struct SizeError {
    input: String,
    why: &'static str,
}

const UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1000),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1_000_000),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1_000_000_000),
    ("gib", 1 << 30),
    ("t", 1 << 40),
    ("tb", 1_000_000_000_000),
    ("tib", 1 << 40),
];

/// Parses a byte size: a number (integer or decimal) and an optional unit (`B`, `KiB`, `MiB`,
/// `GiB`, `TiB`, their decimal `KB`/`MB`/`GB`/`TB` forms, or bare `K`/`M`/`G`/`T` as binary).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |why| SizeError {
        input: input.to_string(),
        why,
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return Err(err("no number"));
    }
    let unit = unit.trim().to_ascii_lowercase();
    let multiplier = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| err("unknown unit"))?
    };
    if let Some((whole, frac)) = number.split_once('.') {
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("number too large"))?
        };
        if frac.len() > 9 {
            return Err(err("too many decimals"));
        }
        let frac_digits: u64 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| err("bad decimals"))?
        };
        let scale = 10u64.pow(frac.len() as u32);
        let whole_bytes = whole
            .checked_mul(multiplier)
            .ok_or_else(|| err("size too large"))?;
        let frac_bytes =
            (u128::from(frac_digits) * u128::from(multiplier) / u128::from(scale)) as u64;
        whole_bytes
            .checked_add(frac_bytes)
            .ok_or_else(|| err("size too large"))
    } else {
        let n: u64 = number.parse().map_err(|_| err("number too large"))?;
        n.checked_mul(multiplier)
            .ok_or_else(|| err("size too large"))
    }
}

/// Displays a byte count with a binary unit: `12.0 GiB`, `512.0 MiB`, `100 B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < NAMES.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.1} {}", NAMES[unit])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!(parse_size("12GiB"), Ok(12 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512 mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn rejects_bad_sizes_with_a_reason() {
        for bad in [
            "",
            "GiB",
            "12 parsecs",
            "1.2.3GiB",
            "99999999999999999999",
            "20000000TiB",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.to_string().contains("invalid size"), "{e}");
        }
    }

    #[test]
    fn displays_round_trip_readably() {
        assert_eq!(Bytes(12 << 30).to_string(), "12.0 GiB");
        assert_eq!(Bytes(512 << 20).to_string(), "512.0 MiB");
        assert_eq!(Bytes(100).to_string(), "100 B");
    }
}
