//! The Unix-socket adapter: the listening socket, one task per connection (credentials,
//! handshake, frames in and out), and the metrics listener. Sessions speak to the hub through
//! [`Command`](crate::hub::Command)s, as the D-Bus adapter does.

pub mod listener;
pub mod peer_groups;
pub mod scrape;
pub mod session;
