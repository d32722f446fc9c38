//! The wire protocol: vocabulary (classes, placements, sizes), messages, and framing.

pub mod class;
pub mod frame;
pub mod message;
pub mod size;

pub use class::{Class, Placement};
pub use message::*;
pub use size::{Bytes, parse_size};
