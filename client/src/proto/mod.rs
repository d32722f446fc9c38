//! The wire protocol: vocabulary (classes, placements, sizes), messages, and framing.

pub mod class;
pub mod duration;
pub mod frame;
pub mod message;
pub mod size;

pub use class::{Class, Placement};
pub use duration::parse_duration;
pub use message::*;
pub use size::{Bytes, parse_size};
