//! The C enums: result codes (one per protocol error code, then the library's own) and
//! priority classes.

use std::ffi::CStr;

use gpud_client::proto::ErrorCode;
use gpud_client::{Class, ClientError};

/// The result of every libgpud call: `GPUD_OK` (0), a protocol error code (1–18, the daemon's
/// `ErrorCode`s one to one, docs/PROTOCOL.md), or an error of the library itself (100 and
/// up). `gpud_code_name` gives a code's snake_case name, the protocol's name for protocol
/// codes; `gpud_last_error` the message of the last failure on the calling thread.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum GpudCode {
    /// Success.
    GPUD_OK = 0,
    /// `bad_frame`: the daemon could not read a frame (a client bug).
    GPUD_E_BAD_FRAME = 1,
    /// `frame_too_large`: a frame was over the daemon's limit.
    GPUD_E_FRAME_TOO_LARGE = 2,
    /// `unsupported_version`: the daemon does not speak this protocol version.
    GPUD_E_UNSUPPORTED_VERSION = 3,
    /// `hello_required`: a request came before the hello.
    GPUD_E_HELLO_REQUIRED = 4,
    /// `not_allowed`: this user may not use gpud, or may not ask for the critical class.
    GPUD_E_NOT_ALLOWED = 5,
    /// `permission_denied`: an admin operation (drain, undrain, revoke) without admin rights.
    GPUD_E_PERMISSION_DENIED = 6,
    /// `invalid_request`: a value makes no sense (nothing asked, an unknown class, a bad
    /// device name, a timeout over a year, a label too long or not printable).
    GPUD_E_INVALID_REQUEST = 7,
    /// `unknown_device`: no such device index or UUID.
    GPUD_E_UNKNOWN_DEVICE = 8,
    /// `never_fits`: larger than any matching device's capacity.
    GPUD_E_NEVER_FITS = 9,
    /// `unknown_lease`: no such lease (released already, revoked, or another session's).
    GPUD_E_UNKNOWN_LEASE = 10,
    /// `unknown_request`: a cancel of a request that is not waiting.
    GPUD_E_UNKNOWN_REQUEST = 11,
    /// `duplicate_request`: a request id in use.
    GPUD_E_DUPLICATE_REQUEST = 12,
    /// `resize_pending`: the lease already has a grow waiting.
    GPUD_E_RESIZE_PENDING = 13,
    /// `timed_out`: the request waited longer than its timeout.
    GPUD_E_TIMED_OUT = 14,
    /// `cancelled`: the request was withdrawn (a waiting resize whose lease ended).
    GPUD_E_CANCELLED = 15,
    /// `limit_exceeded`: a session or user limit was reached.
    GPUD_E_LIMIT_EXCEEDED = 16,
    /// `shutting_down`: the daemon is stopping.
    GPUD_E_SHUTTING_DOWN = 17,
    /// `internal`: a bug in the daemon.
    GPUD_E_INTERNAL = 18,
    /// `grow_deadlock`: a waiting grow failed because its lease and others each waited to
    /// grow into memory only the others hold (the lease keeps its size).
    GPUD_E_GROW_DEADLOCK = 19,
    /// `no_such_process`: `attach` of a pid no process has.
    GPUD_E_NO_SUCH_PROCESS = 20,
    /// `not_process_owner`: `attach` of another user's process by a caller that is not root.
    GPUD_E_NOT_PROCESS_OWNER = 21,
    /// `not_descendant`: `attach` of a process that is neither the caller nor its descendant.
    GPUD_E_NOT_DESCENDANT = 22,
    /// `connect_failed`: no daemon answers on the socket (wrong path, gpud not running, no
    /// permission on the socket).
    GPUD_E_CONNECT_FAILED = 100,
    /// `connection_lost`: the connection ended (the daemon did not come back within the
    /// reconnect window, or `gpud_disconnect` closed it).
    GPUD_E_CONNECTION_LOST = 101,
    /// `null_argument`: a pointer argument was NULL.
    GPUD_E_NULL_ARGUMENT = 102,
    /// `invalid_argument`: an argument the library cannot use (a string that is not UTF-8, a
    /// class number that is no `gpud_class`, a negative wait, an unreadable size).
    GPUD_E_INVALID_ARGUMENT = 103,
    /// `protocol_error`: the daemon said something this library does not understand.
    GPUD_E_PROTOCOL = 104,
    /// `library_bug`: a bug in libgpud (a panic, caught at the boundary).
    GPUD_E_LIBRARY = 105,
    /// `system_error`: the system refused the library a resource (a descriptor, a thread).
    GPUD_E_SYSTEM = 106,
}

impl GpudCode {
    /// Every code, in numeric order.
    pub(crate) const ALL: [GpudCode; 26] = [
        GpudCode::GPUD_OK,
        GpudCode::GPUD_E_BAD_FRAME,
        GpudCode::GPUD_E_FRAME_TOO_LARGE,
        GpudCode::GPUD_E_UNSUPPORTED_VERSION,
        GpudCode::GPUD_E_HELLO_REQUIRED,
        GpudCode::GPUD_E_NOT_ALLOWED,
        GpudCode::GPUD_E_PERMISSION_DENIED,
        GpudCode::GPUD_E_INVALID_REQUEST,
        GpudCode::GPUD_E_UNKNOWN_DEVICE,
        GpudCode::GPUD_E_NEVER_FITS,
        GpudCode::GPUD_E_UNKNOWN_LEASE,
        GpudCode::GPUD_E_UNKNOWN_REQUEST,
        GpudCode::GPUD_E_DUPLICATE_REQUEST,
        GpudCode::GPUD_E_RESIZE_PENDING,
        GpudCode::GPUD_E_TIMED_OUT,
        GpudCode::GPUD_E_CANCELLED,
        GpudCode::GPUD_E_LIMIT_EXCEEDED,
        GpudCode::GPUD_E_SHUTTING_DOWN,
        GpudCode::GPUD_E_INTERNAL,
        GpudCode::GPUD_E_CONNECT_FAILED,
        GpudCode::GPUD_E_CONNECTION_LOST,
        GpudCode::GPUD_E_NULL_ARGUMENT,
        GpudCode::GPUD_E_INVALID_ARGUMENT,
        GpudCode::GPUD_E_PROTOCOL,
        GpudCode::GPUD_E_LIBRARY,
        GpudCode::GPUD_E_SYSTEM,
    ];

    /// The code's snake_case name (the protocol's name for the protocol's codes), for C.
    pub const fn c_name(self) -> &'static CStr {
        match self {
            GpudCode::GPUD_OK => c"ok",
            GpudCode::GPUD_E_BAD_FRAME => c"bad_frame",
            GpudCode::GPUD_E_FRAME_TOO_LARGE => c"frame_too_large",
            GpudCode::GPUD_E_UNSUPPORTED_VERSION => c"unsupported_version",
            GpudCode::GPUD_E_HELLO_REQUIRED => c"hello_required",
            GpudCode::GPUD_E_NOT_ALLOWED => c"not_allowed",
            GpudCode::GPUD_E_PERMISSION_DENIED => c"permission_denied",
            GpudCode::GPUD_E_INVALID_REQUEST => c"invalid_request",
            GpudCode::GPUD_E_UNKNOWN_DEVICE => c"unknown_device",
            GpudCode::GPUD_E_NEVER_FITS => c"never_fits",
            GpudCode::GPUD_E_UNKNOWN_LEASE => c"unknown_lease",
            GpudCode::GPUD_E_UNKNOWN_REQUEST => c"unknown_request",
            GpudCode::GPUD_E_DUPLICATE_REQUEST => c"duplicate_request",
            GpudCode::GPUD_E_RESIZE_PENDING => c"resize_pending",
            GpudCode::GPUD_E_TIMED_OUT => c"timed_out",
            GpudCode::GPUD_E_CANCELLED => c"cancelled",
            GpudCode::GPUD_E_LIMIT_EXCEEDED => c"limit_exceeded",
            GpudCode::GPUD_E_SHUTTING_DOWN => c"shutting_down",
            GpudCode::GPUD_E_INTERNAL => c"internal",
            GpudCode::GPUD_E_GROW_DEADLOCK => c"grow_deadlock",
            GpudCode::GPUD_E_NO_SUCH_PROCESS => c"no_such_process",
            GpudCode::GPUD_E_NOT_PROCESS_OWNER => c"not_process_owner",
            GpudCode::GPUD_E_NOT_DESCENDANT => c"not_descendant",
            GpudCode::GPUD_E_CONNECT_FAILED => c"connect_failed",
            GpudCode::GPUD_E_CONNECTION_LOST => c"connection_lost",
            GpudCode::GPUD_E_NULL_ARGUMENT => c"null_argument",
            GpudCode::GPUD_E_INVALID_ARGUMENT => c"invalid_argument",
            GpudCode::GPUD_E_PROTOCOL => c"protocol_error",
            GpudCode::GPUD_E_LIBRARY => c"library_bug",
            GpudCode::GPUD_E_SYSTEM => c"system_error",
        }
    }

    /// The code's snake_case name.
    pub fn name(self) -> &'static str {
        // The names are ASCII.
        self.c_name().to_str().unwrap_or("?")
    }

    /// The code with this number, if there is one.
    pub fn from_i32(n: i32) -> Option<GpudCode> {
        GpudCode::ALL.into_iter().find(|c| *c as i32 == n)
    }

    /// The C code of a protocol error code. Codes a later daemon may add (the enum is
    /// non-exhaustive) are the library's protocol error.
    pub fn from_protocol(code: ErrorCode) -> GpudCode {
        match code {
            ErrorCode::BadFrame => GpudCode::GPUD_E_BAD_FRAME,
            ErrorCode::FrameTooLarge => GpudCode::GPUD_E_FRAME_TOO_LARGE,
            ErrorCode::UnsupportedVersion => GpudCode::GPUD_E_UNSUPPORTED_VERSION,
            ErrorCode::HelloRequired => GpudCode::GPUD_E_HELLO_REQUIRED,
            ErrorCode::NotAllowed => GpudCode::GPUD_E_NOT_ALLOWED,
            ErrorCode::PermissionDenied => GpudCode::GPUD_E_PERMISSION_DENIED,
            ErrorCode::InvalidRequest => GpudCode::GPUD_E_INVALID_REQUEST,
            ErrorCode::UnknownDevice => GpudCode::GPUD_E_UNKNOWN_DEVICE,
            ErrorCode::NeverFits => GpudCode::GPUD_E_NEVER_FITS,
            ErrorCode::UnknownLease => GpudCode::GPUD_E_UNKNOWN_LEASE,
            ErrorCode::UnknownRequest => GpudCode::GPUD_E_UNKNOWN_REQUEST,
            ErrorCode::DuplicateRequest => GpudCode::GPUD_E_DUPLICATE_REQUEST,
            ErrorCode::ResizePending => GpudCode::GPUD_E_RESIZE_PENDING,
            ErrorCode::TimedOut => GpudCode::GPUD_E_TIMED_OUT,
            ErrorCode::Cancelled => GpudCode::GPUD_E_CANCELLED,
            ErrorCode::LimitExceeded => GpudCode::GPUD_E_LIMIT_EXCEEDED,
            ErrorCode::ShuttingDown => GpudCode::GPUD_E_SHUTTING_DOWN,
            ErrorCode::Internal => GpudCode::GPUD_E_INTERNAL,
            ErrorCode::GrowDeadlock => GpudCode::GPUD_E_GROW_DEADLOCK,
            ErrorCode::NoSuchProcess => GpudCode::GPUD_E_NO_SUCH_PROCESS,
            ErrorCode::NotProcessOwner => GpudCode::GPUD_E_NOT_PROCESS_OWNER,
            ErrorCode::NotDescendant => GpudCode::GPUD_E_NOT_DESCENDANT,
            _ => GpudCode::GPUD_E_PROTOCOL,
        }
    }

    /// The C code of a client error.
    pub fn from_client(error: &ClientError) -> GpudCode {
        match error {
            ClientError::Connect { .. } => GpudCode::GPUD_E_CONNECT_FAILED,
            ClientError::Disconnected => GpudCode::GPUD_E_CONNECTION_LOST,
            ClientError::Protocol(_) => GpudCode::GPUD_E_PROTOCOL,
            other => other
                .code()
                .map_or(GpudCode::GPUD_E_PROTOCOL, GpudCode::from_protocol),
        }
    }
}

/// Priority classes, lowest first (`GPUD_CLASS_NORMAL` is the default).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum GpudClass {
    /// Batch work that may wait for everything else.
    GPUD_CLASS_BACKGROUND = 0,
    /// Regular work.
    GPUD_CLASS_NORMAL = 1,
    /// Time-bound work.
    GPUD_CLASS_HIGH = 2,
    /// Deadline-critical work; its waiting asks compute holders to yield. Only for the users
    /// gpud's `access.critical_uids`/`critical_groups` name (`GPUD_E_NOT_ALLOWED` otherwise).
    GPUD_CLASS_CRITICAL = 3,
}

impl GpudClass {
    /// The class with this number, if there is one (C may pass any int).
    pub fn from_i32(n: i32) -> Option<GpudClass> {
        [
            GpudClass::GPUD_CLASS_BACKGROUND,
            GpudClass::GPUD_CLASS_NORMAL,
            GpudClass::GPUD_CLASS_HIGH,
            GpudClass::GPUD_CLASS_CRITICAL,
        ]
        .into_iter()
        .find(|c| *c as i32 == n)
    }
}

impl From<GpudClass> for Class {
    fn from(c: GpudClass) -> Class {
        match c {
            GpudClass::GPUD_CLASS_BACKGROUND => Class::Background,
            GpudClass::GPUD_CLASS_NORMAL => Class::Normal,
            GpudClass::GPUD_CLASS_HIGH => Class::High,
            GpudClass::GPUD_CLASS_CRITICAL => Class::Critical,
        }
    }
}

impl From<Class> for GpudClass {
    fn from(c: Class) -> GpudClass {
        match c {
            Class::Background => GpudClass::GPUD_CLASS_BACKGROUND,
            Class::Normal => GpudClass::GPUD_CLASS_NORMAL,
            Class::High => GpudClass::GPUD_CLASS_HIGH,
            Class::Critical => GpudClass::GPUD_CLASS_CRITICAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol's error codes as docs/PROTOCOL.md's table lists them.
    fn documented_codes() -> Vec<String> {
        let doc = include_str!("../../../docs/PROTOCOL.md");
        let table = doc
            .split("## Error codes")
            .nth(1)
            .expect("PROTOCOL.md has an error code table");
        // The table's section only: later sections have tables of their own.
        let table = table.split("\n## ").next().unwrap_or(table);
        let mut codes: Vec<String> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_string)
            .collect();
        codes.dedup();
        codes
    }

    #[test]
    fn every_protocol_code_has_its_own_c_code_of_the_same_name() {
        let documented = documented_codes();
        assert_eq!(documented.len(), 22, "{documented:?}");
        let mut seen = std::collections::HashSet::new();
        for name in &documented {
            let code: ErrorCode = serde_json::from_value(serde_json::json!(name))
                .unwrap_or_else(|e| panic!("{name} is no ErrorCode: {e}"));
            let c = GpudCode::from_protocol(code);
            assert_eq!(c.name(), name, "{code:?}");
            assert!((1..100).contains(&(c as i32)), "{c:?}");
            assert!(seen.insert(c), "{c:?} twice");
        }
        // And the other way: every C code below 100 is one of the protocol's.
        for c in GpudCode::ALL {
            let n = c as i32;
            if (1..100).contains(&n) {
                assert!(documented.iter().any(|d| d == c.name()), "{c:?}");
            }
        }
    }

    #[test]
    fn codes_are_numbered_in_order_and_found_by_number() {
        for c in GpudCode::ALL {
            assert_eq!(GpudCode::from_i32(c as i32), Some(c));
        }
        assert_eq!(GpudCode::from_i32(19), None);
        assert_eq!(GpudCode::from_i32(-1), None);
        let names: std::collections::HashSet<_> = GpudCode::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), GpudCode::ALL.len());
    }

    #[test]
    fn client_errors_map_to_their_codes() {
        let daemon = ClientError::Daemon(gpud_client::proto::ErrorBody::new(
            ErrorCode::NeverFits,
            "too big",
        ));
        assert_eq!(GpudCode::from_client(&daemon), GpudCode::GPUD_E_NEVER_FITS);
        assert_eq!(
            GpudCode::from_client(&ClientError::Disconnected),
            GpudCode::GPUD_E_CONNECTION_LOST
        );
        let connect = ClientError::Connect {
            path: "/nowhere".into(),
            source: std::io::ErrorKind::NotFound.into(),
        };
        assert_eq!(
            GpudCode::from_client(&connect),
            GpudCode::GPUD_E_CONNECT_FAILED
        );
        let refused = ClientError::Refused {
            path: "/s".into(),
            body: gpud_client::proto::ErrorBody::new(ErrorCode::NotAllowed, "no"),
        };
        assert_eq!(
            GpudCode::from_client(&refused),
            GpudCode::GPUD_E_NOT_ALLOWED
        );
        assert_eq!(
            GpudCode::from_client(&ClientError::Protocol("?".into())),
            GpudCode::GPUD_E_PROTOCOL
        );
    }

    #[test]
    fn classes_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::from(GpudClass::from(c)), c);
        }
        assert_eq!(GpudClass::from_i32(4), None);
        assert_eq!(GpudClass::from_i32(1), Some(GpudClass::GPUD_CLASS_NORMAL));
    }
}
