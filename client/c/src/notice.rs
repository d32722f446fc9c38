//! A lease's notice descriptor: an eventfd that becomes readable when a yield notice or a
//! revocation (or loss) of the lease arrives, for callers that `poll()` it beside their own
//! descriptors.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The eventfd; its descriptor number stays valid until [`NoticeFd::close`].
pub(crate) struct NoticeFd {
    file: Mutex<Option<File>>,
    raw: RawFd,
}

impl NoticeFd {
    /// A fresh eventfd (counter 0: not readable), non-blocking and close-on-exec.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor eventfd just opened, owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            raw: owned.as_raw_fd(),
            file: Mutex::new(Some(File::from(owned))),
        })
    }

    /// The descriptor to poll.
    pub fn raw(&self) -> RawFd {
        self.raw
    }

    /// Makes the descriptor readable (adds 1 to the counter). Never blocks: the counter would
    /// have to reach 2^64 − 1 first. After [`NoticeFd::close`] it does nothing.
    pub fn signal(&self) {
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut file) = guard.as_ref() {
            let _ = file.write(&1u64.to_ne_bytes());
        }
    }

    /// Closes the descriptor (the lease is being freed).
    pub fn close(&self) {
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        guard.take();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, and the count says one.
        unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
    }

    #[test]
    fn the_descriptor_becomes_readable_when_signalled_and_stays_so_until_read() {
        let n = NoticeFd::new().unwrap();
        assert!(!readable(n.raw()));
        n.signal();
        n.signal();
        assert!(readable(n.raw()));
        assert!(readable(n.raw()));
        let mut count = [0u8; 8];
        let guard = n.file.lock().unwrap();
        guard.as_ref().unwrap().read_exact(&mut count).unwrap();
        drop(guard);
        assert_eq!(u64::from_ne_bytes(count), 2);
        assert!(!readable(n.raw()));
        n.close();
        n.signal();
    }
}
