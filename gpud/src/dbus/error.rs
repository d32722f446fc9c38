//! D-Bus errors: the socket protocol's error codes under standard or `org.gpud.Error.*` names.

use gpud_proto::{ErrorBody, ErrorCode};
use zbus::message::{Header, Message};
use zbus::names::ErrorName;
use zbus::{DBusError, fdo};

/// Prefix of gpud's own error names.
const PREFIX: &str = "org.gpud.Error";

/// An error reply with a name and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusError {
    name: String,
    message: String,
}

impl BusError {
    /// `org.freedesktop.DBus.Error.AccessDenied`.
    pub fn access_denied(message: impl Into<String>) -> Self {
        Self::standard("AccessDenied", message)
    }

    /// `org.freedesktop.DBus.Error.InvalidArgs`.
    pub fn invalid_args(message: impl Into<String>) -> Self {
        Self::standard("InvalidArgs", message)
    }

    /// `org.freedesktop.DBus.Error.Failed`.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::standard("Failed", message)
    }

    fn standard(name: &str, message: impl Into<String>) -> Self {
        Self {
            name: format!("org.freedesktop.DBus.Error.{name}"),
            message: message.into(),
        }
    }

    /// The error's name.
    pub fn name_str(&self) -> &str {
        &self.name
    }
}

impl From<ErrorBody> for BusError {
    /// Refusals of rights and arguments take the standard names clients already handle; the
    /// rest are `org.gpud.Error.<Code>` (`NeverFits`, `UnknownLease`, `TimedOut`, …).
    fn from(e: ErrorBody) -> Self {
        match e.code {
            ErrorCode::PermissionDenied | ErrorCode::NotAllowed => Self::access_denied(e.message),
            ErrorCode::InvalidRequest => Self::invalid_args(e.message),
            ErrorCode::LimitExceeded => Self::standard("LimitsExceeded", e.message),
            code => Self {
                // Debug of a unit variant is its CamelCase name, a valid error name element.
                name: format!("{PREFIX}.{code:?}"),
                message: e.message,
            },
        }
    }
}

impl From<zbus::Error> for BusError {
    fn from(e: zbus::Error) -> Self {
        Self::failed(e.to_string())
    }
}

impl From<fdo::Error> for BusError {
    fn from(e: fdo::Error) -> Self {
        Self::failed(e.to_string())
    }
}

impl std::fmt::Display for BusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for BusError {}

impl DBusError for BusError {
    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        Message::error(call, self.name.as_str()).build(&(self.message.as_str(),))
    }

    fn name(&self) -> ErrorName<'_> {
        // Names are built from constants and ErrorCode variants, which are valid.
        ErrorName::try_from(self.name.as_str()).unwrap_or_else(|_| {
            ErrorName::from_static_str_unchecked("org.freedesktop.DBus.Error.Failed")
        })
    }

    fn description(&self) -> Option<&str> {
        Some(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_names() {
        let name = |code| {
            BusError::from(ErrorBody::new(code, "x"))
                .name_str()
                .to_string()
        };
        assert_eq!(
            name(ErrorCode::PermissionDenied),
            "org.freedesktop.DBus.Error.AccessDenied"
        );
        assert_eq!(
            name(ErrorCode::NotAllowed),
            "org.freedesktop.DBus.Error.AccessDenied"
        );
        assert_eq!(name(ErrorCode::NeverFits), "org.gpud.Error.NeverFits");
        assert_eq!(name(ErrorCode::UnknownLease), "org.gpud.Error.UnknownLease");
        assert_eq!(name(ErrorCode::Cancelled), "org.gpud.Error.Cancelled");
        assert_eq!(name(ErrorCode::TimedOut), "org.gpud.Error.TimedOut");
        assert_eq!(
            name(ErrorCode::UnknownRequest),
            "org.gpud.Error.UnknownRequest"
        );
        assert_eq!(
            name(ErrorCode::DuplicateRequest),
            "org.gpud.Error.DuplicateRequest"
        );
        assert_eq!(
            name(ErrorCode::ResizePending),
            "org.gpud.Error.ResizePending"
        );
        // The socket's message travels unchanged.
        let e = BusError::from(ErrorBody::new(ErrorCode::TimedOut, "gave up waiting"));
        assert_eq!(e.to_string(), "org.gpud.Error.TimedOut: gave up waiting");
        for code in [
            ErrorCode::TimedOut,
            ErrorCode::ShuttingDown,
            ErrorCode::Internal,
        ] {
            let e = BusError::from(ErrorBody::new(code, "x"));
            assert!(ErrorName::try_from(e.name_str()).is_ok(), "{e}");
        }
    }
}
