//! The host's own resources as gpud books them (`[host]`, docs/HOST.md).

/// Memory never handed out: a size, or a share of the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headroom {
    /// This many bytes.
    Bytes(u64),
    /// This percentage of the memory (0 to 100).
    Percent(u8),
    /// The smaller of 2 GiB and 5 % (the default).
    Auto,
}

impl Headroom {
    /// The bytes kept out of `total`.
    pub fn of(self, total: u64) -> u64 {
        let share = |p: u64| (u128::from(total) * u128::from(p) / 100) as u64;
        match self {
            Headroom::Bytes(b) => b.min(total),
            Headroom::Percent(p) => share(u64::from(p)),
            Headroom::Auto => share(5).min(2 << 30),
        }
    }
}

/// `[host]`: whether host resources are booked, and how much of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostConfig {
    /// Book host resources (acquire's `host`); when off, requests for them are refused.
    pub enabled: bool,
    /// The host memory gpud books, instead of `MemTotal` (a configured host capacity).
    pub memory_bytes: Option<u64>,
    /// Host memory never handed out.
    pub memory_headroom: Headroom,
    /// Page-locked memory gpud books; half the host memory's capacity when `None`.
    pub pinned_bytes: Option<u64>,
    /// CPUs of every NUMA node kept out (for the system and gpud itself).
    pub cpu_headroom: u32,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            memory_bytes: None,
            memory_headroom: Headroom::Auto,
            pinned_bytes: None,
            cpu_headroom: 0,
        }
    }
}

/// Reads a headroom: a size (`2GiB`) or a percentage (`5%`).
pub fn parse_headroom(text: &str) -> Result<Headroom, String> {
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%') {
        return p
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .map(Headroom::Percent)
            .ok_or_else(|| format!("{text:?} is not a percentage from 0% to 100%"));
    }
    gpud_proto::parse_size(t)
        .map(Headroom::Bytes)
        .map_err(|e| format!("{e} (give a size such as \"2GiB\" or a share such as \"5%\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headrooms_are_sizes_or_shares_and_the_default_is_the_smaller_of_2gib_and_5_percent() {
        let gib = 1u64 << 30;
        assert_eq!(parse_headroom("2GiB"), Ok(Headroom::Bytes(2 * gib)));
        assert_eq!(parse_headroom("10%"), Ok(Headroom::Percent(10)));
        assert!(parse_headroom("101%").is_err());
        assert!(parse_headroom("lots").is_err());
        assert_eq!(Headroom::Percent(10).of(100 * gib), 10 * gib);
        assert_eq!(Headroom::Auto.of(16 * gib), 16 * gib / 20);
        assert_eq!(Headroom::Auto.of(1024 * gib), 2 * gib);
        assert_eq!(Headroom::Bytes(8 * gib).of(4 * gib), 4 * gib);
    }
}
