//! A socket peer's supplementary groups as the kernel recorded them when it connected
//! (`SO_PEERGROUPS`, Linux 4.13+), so that access checks never read them later from
//! `/proc/PID`, where a reused pid could lend another user's groups.

use std::os::fd::{AsRawFd, BorrowedFd};

/// `SO_PEERGROUPS` from the kernel's asm-generic socket options (the value on x86_64 and
/// aarch64); the libc crate does not export it for these targets.
const SO_PEERGROUPS: libc::c_int = 59;

/// The peer's groups, or `None` when the kernel cannot say (then the caller falls back).
pub fn peer_groups(socket: BorrowedFd<'_>) -> Option<Vec<u32>> {
    let width = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    for _ in 0..4 {
        let mut len = libc::socklen_t::try_from(groups.len() * width).ok()?;
        // SAFETY: `groups` is valid for writes of `len` bytes and the kernel writes at most
        // `len`; the descriptor is a live socket, borrowed for the duration of the call.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = usize::try_from(len).ok()?;
        if rc == 0 {
            groups.truncate(len / width);
            return Some(groups);
        }
        // Too small a buffer: the kernel said how large it must be.
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE)
            && len > groups.len() * width
        {
            groups.resize(len.div_ceil(width), 0);
            continue;
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn the_peer_groups_are_the_connecting_process_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let got: BTreeSet<u32> = peer_groups(a.as_fd())
            .expect("SO_PEERGROUPS")
            .into_iter()
            .collect();
        let mine: BTreeSet<u32> = nix::unistd::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        assert_eq!(got, mine);
    }
}
