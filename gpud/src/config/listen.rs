//! Where the metrics listener serves (`[metrics] listen`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// Where metrics are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A loopback TCP address.
    Tcp(SocketAddr),
}

/// An address that cannot serve metrics.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} is neither an absolute socket path nor a loopback address such as 127.0.0.1:9464 or [::1]:9464"
)]
pub struct ListenParseError(String);

impl FromStr for MetricsListen {
    type Err = ListenParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with('/') {
            return Ok(Self::Unix(s.into()));
        }
        match s.parse::<SocketAddr>() {
            // Metrics tell who uses which GPU: not for the network at large.
            Ok(addr) if addr.ip().is_loopback() => Ok(Self::Tcp(addr)),
            _ => Err(ListenParseError(s.to_string())),
        }
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(p) => write!(f, "{}", p.display()),
            Self::Tcp(a) => write!(f, "{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_addresses_are_accepted() {
        assert_eq!(
            "/run/gpud/metrics.sock".parse(),
            Ok(MetricsListen::Unix("/run/gpud/metrics.sock".into()))
        );
        assert!(matches!(
            "127.0.0.1:9464".parse(),
            Ok(MetricsListen::Tcp(_))
        ));
        assert!(matches!("[::1]:9464".parse(), Ok(MetricsListen::Tcp(_))));
        assert!("0.0.0.0:9464".parse::<MetricsListen>().is_err());
        assert!("10.1.2.3:9464".parse::<MetricsListen>().is_err());
        assert!("metrics.sock".parse::<MetricsListen>().is_err());
    }
}
