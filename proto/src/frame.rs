//! Framing: every message is a 4-byte big-endian length followed by that many bytes of JSON.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::codec::LengthDelimitedCodec;

/// Default upper bound on one frame's payload. Requests are tiny; status replies of a busy
/// daemon are the largest messages (the client accepts larger frames than the daemon does).
pub const MAX_REQUEST_FRAME: usize = 64 * 1024;
/// Upper bound on a frame the client accepts from the daemon.
pub const MAX_SERVER_FRAME: usize = 64 * 1024 * 1024;

/// A length-delimited codec with the given payload limit.
pub fn codec(max_frame: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(max_frame)
        .new_codec()
}

/// Encodes a message as a JSON payload (the codec adds the length).
pub fn to_payload<T: Serialize>(message: &T) -> bytes::Bytes {
    // Serializing our own message types cannot fail: they hold no maps with non-string keys
    // and no types with fallible Serialize impls.
    bytes::Bytes::from(serde_json::to_vec(message).unwrap_or_default())
}

/// Decodes a JSON payload.
pub fn from_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(payload)
}
