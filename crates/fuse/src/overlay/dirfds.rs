//! Open descriptors of the cipher directories entries were recently
//! removed from, keyed by the directory's FUSE inode number. A removal
//! then resolves one name in the open directory (`unlinkat`, `openat`)
//! instead of walking the whole cipher path from `/` again for each call:
//! `rm -rf` removes every entry of a directory in a row.
//!
//! A descriptor follows its directory through renames, so only a
//! directory's end invalidates it: its removal through the mount
//! ([`DirFds::forget`] from rmdir and rename-over) and the kernel
//! forgetting the inode. A directory replaced behind the mount's back is
//! seen once its descriptor expires, after the mount's cache time-out,
//! as the kernel's own entries and the directory IVs are. With no caching
//! (`--sharedstorage`) nothing is kept.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Directories kept open at most; past that the table starts over.
const KEPT: usize = 64;

/// The descriptor table of one mount.
#[derive(Debug)]
pub(crate) struct DirFds {
    /// Inode → descriptor and when it was opened.
    fds: Mutex<HashMap<u64, (Arc<OwnedFd>, Instant)>>,
    /// How long a descriptor is used; zero keeps nothing (the cipher
    /// dir is shared with other writers).
    ttl: Duration,
}

impl DirFds {
    /// A table whose descriptors serve for `ttl` (the mount's cache
    /// time-out); zero keeps nothing and opens every time.
    pub(crate) fn new(ttl: Duration) -> DirFds {
        DirFds {
            fds: Mutex::default(),
            ttl,
        }
    }

    /// An `O_PATH` descriptor of directory `ino`, found at cipher path
    /// `dir` when not already open.
    pub(crate) fn get(&self, ino: u64, dir: &Path) -> io::Result<Arc<OwnedFd>> {
        let keep = !self.ttl.is_zero();
        if keep {
            if let Some((fd, at)) = self.lock().get(&ino) {
                if at.elapsed() < self.ttl {
                    return Ok(fd.clone());
                }
            }
        }
        let fd = Arc::new(open_dir_path(dir)?);
        if keep {
            let mut t = self.lock();
            if t.len() >= KEPT {
                t.clear();
            }
            t.insert(ino, (fd.clone(), Instant::now()));
        }
        Ok(fd)
    }

    /// Directory `ino` is gone (removed, or forgotten by the kernel).
    pub(crate) fn forget(&self, ino: u64) {
        if !self.ttl.is_zero() {
            self.lock().remove(&ino);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Arc<OwnedFd>, Instant)>> {
        // The table holds no invariant a panicking holder could break.
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `open(dir, O_PATH | O_DIRECTORY)`.
fn open_dir_path(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    Ok(OwnedFd::from(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cryptkeep_overlay::sys;
    use std::ffi::OsStr;
    use std::path::PathBuf;

    /// A scratch directory removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("ck-dirfds-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_kept_descriptor_follows_its_directory_and_is_dropped_on_forget() {
        let t = Scratch::new("follow");
        let a = t.path().join("a");
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("f"), b"x").unwrap();
        let fds = DirFds::new(Duration::from_secs(10));
        let fd = fds.get(7, &a).unwrap();
        // Renamed: the kept descriptor still names the directory.
        let b = t.path().join("b");
        std::fs::rename(&a, &b).unwrap();
        let again = fds.get(7, &a).unwrap();
        assert!(Arc::ptr_eq(&fd, &again));
        sys::unlink_at(&*again, OsStr::new("f"), 0).unwrap();
        assert!(!b.join("f").exists());
        // Forgotten: the next get opens the path anew (gone now).
        fds.forget(7);
        assert_eq!(fds.get(7, &a).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn disabled_table_opens_every_time() {
        let t = Scratch::new("off");
        let fds = DirFds::new(Duration::ZERO);
        let one = fds.get(1, t.path()).unwrap();
        let two = fds.get(1, t.path()).unwrap();
        assert!(!Arc::ptr_eq(&one, &two));
    }

    #[test]
    fn descriptors_expire_with_the_cache_time_out() {
        let t = Scratch::new("expire");
        let fds = DirFds::new(Duration::from_millis(20));
        let one = fds.get(3, t.path()).unwrap();
        assert!(Arc::ptr_eq(&one, &fds.get(3, t.path()).unwrap()));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!Arc::ptr_eq(&one, &fds.get(3, t.path()).unwrap()));
    }

    #[test]
    fn the_table_is_bounded() {
        let t = Scratch::new("bounded");
        let fds = DirFds::new(Duration::from_secs(10));
        for ino in 0..(KEPT as u64 * 2 + 3) {
            fds.get(ino, t.path()).unwrap();
        }
        assert!(fds.lock().len() <= KEPT);
    }
}
