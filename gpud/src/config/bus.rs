//! Which bus the D-Bus service uses (`--dbus`, `[dbus] bus`).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Which bus to serve on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` or its standard path).
    System,
    /// The session bus (`DBUS_SESSION_BUS_ADDRESS`).
    Session,
    /// A bus at this address (`unix:path=/run/…`).
    Address(String),
    /// No D-Bus service.
    None,
}

/// A `--dbus` value that is none of the choices.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{0:?} is not system, session, none, or a D-Bus address such as unix:path=/run/dbus/system_bus_socket"
)]
pub struct BusChoiceError(String);

impl FromStr for BusChoice {
    type Err = BusChoiceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "system" => Ok(Self::System),
            "session" => Ok(Self::Session),
            "none" => Ok(Self::None),
            // Addresses are `transport:key=value,…`.
            a if a.contains(':') && a.contains('=') => Ok(Self::Address(a.to_string())),
            other => Err(BusChoiceError(other.to_string())),
        }
    }
}

impl fmt::Display for BusChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system"),
            Self::Session => f.write_str("session"),
            Self::Address(a) => f.write_str(a),
            Self::None => f.write_str("none"),
        }
    }
}
