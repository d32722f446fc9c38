//! A lock file that names its holder: an exclusive `flock`, held for as long as the value
//! lives, with the holder's pid written inside for the one who is refused.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// The lock, held until dropped.
#[derive(Debug)]
pub struct PidLock(#[allow(dead_code)] Flock<File>);

/// What taking the lock came to.
#[derive(Debug)]
pub enum Taken {
    /// It is ours now.
    Held(PidLock),
    /// Another process holds it: its pid, as the file says.
    Busy(Option<u32>),
}

impl PidLock {
    /// Opens (or creates, mode 0600, never through a link) `path` and tries to lock it without
    /// waiting. When it is ours, this process's pid is written into it.
    pub fn take(path: &Path) -> io::Result<Taken> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Ok(Taken::Busy(holder));
            }
            Err((_, errno)) => return Err(io::Error::from(errno)),
        };
        lock.set_len(0)?;
        lock.rewind()?;
        writeln!(&mut *lock, "{}", std::process::id())?;
        Ok(Taken::Held(PidLock(lock)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_told_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let Taken::Held(first) = PidLock::take(&path).unwrap() else {
            panic!("free at first")
        };
        assert!(matches!(
            PidLock::take(&path).unwrap(),
            Taken::Busy(Some(p)) if p == std::process::id()
        ));
        drop(first);
        assert!(matches!(PidLock::take(&path).unwrap(), Taken::Held(_)));
    }

    #[test]
    fn a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("x.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(PidLock::take(&link).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }
}
