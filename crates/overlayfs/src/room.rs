//! Room on a full backing file system: a change that fails with ENOSPC
//! or EDQUOT while removed files wait in the reaper (`reaper.rs`) frees
//! them and runs once more, so space freed by a removal is there for the
//! next write as it would be without the reaper.

use super::fs::OverlayFs;
use cryptkeep_fuse::ops::Errno;

impl OverlayFs {
    /// Runs the change `f`; if the backing file system is full (ENOSPC,
    /// EDQUOT) while removed files wait in the reaper, frees them here and
    /// runs `f` once more. `f` must be safe to repeat after a failure.
    pub(crate) fn with_room<T>(&self, mut f: impl FnMut() -> Result<T, Errno>) -> Result<T, Errno> {
        match f() {
            Err(e) if e == Errno::ENOSPC || e == Errno::EDQUOT => {
                if self.reaper.as_ref().is_some_and(|r| r.flush()) {
                    f()
                } else {
                    Err(e)
                }
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reaper::tests::{closed, pipe};
    use super::super::reaper::{Reaper, MAX_PENDING};
    use super::*;
    use std::ffi::OsStr;
    use std::sync::Arc;
    use std::time::Duration;

    /// An overlay over a fresh cipher directory, with a threadless reaper.
    fn overlay(tag: &str) -> (OverlayFs, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("ck-reaper-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = cryptkeep_overlay::InitOptions {
            scrypt_log_n: 10,
            ..Default::default()
        };
        let (cd, _) = cryptkeep_overlay::CipherDir::init(&dir.join("c"), b"pw", &opts).unwrap();
        let mut fs = OverlayFs::new(Arc::new(cd), false, false, Duration::from_secs(1)).unwrap();
        fs.reaper = Some(Arc::new(Reaper::threadless(MAX_PENDING)));
        (fs, dir)
    }

    #[test]
    fn a_full_disk_frees_the_reaped_files_and_tries_again() {
        let (fs, dir) = overlay("full");
        let (mut rd, w) = pipe();
        fs.reaper.as_ref().unwrap().release(w);
        let mut calls = 0;
        let r = fs.with_room(|| {
            calls += 1;
            if calls == 1 {
                Err(Errno::ENOSPC)
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r, Ok(2));
        assert!(closed(&mut rd), "the queued descriptor was not closed");
        // Nothing left to free: a full disk is reported at once.
        calls = 0;
        let r: Result<(), Errno> = fs.with_room(|| {
            calls += 1;
            Err(Errno::EDQUOT)
        });
        assert_eq!((r, calls), (Err(Errno::EDQUOT), 1));
        // Other errors are not retried.
        let (_rd2, w2) = pipe();
        fs.reaper.as_ref().unwrap().release(w2);
        calls = 0;
        let r: Result<(), Errno> = fs.with_room(|| {
            calls += 1;
            Err(Errno::EIO)
        });
        assert_eq!((r, calls), (Err(Errno::EIO), 1));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_unlinked_file_lives_until_the_reaper_closes_it() {
        let (fs, dir) = overlay("unlink");
        let root = super::super::nodes::ROOT_INO;
        let a = fs
            .do_mknod(
                root,
                OsStr::new("f"),
                libc::S_IFREG | 0o644,
                0,
                u32::MAX,
                u32::MAX,
            )
            .unwrap();
        let name = fs.nodes.lock().unwrap().link(a.ino.0).unwrap().name;
        let backing = dir.join("c").join(name);
        std::fs::write(&backing, vec![7u8; 64 << 10]).unwrap();
        fs.do_unlink(root, OsStr::new("f")).unwrap();
        assert!(!backing.exists(), "the name must be gone at once");
        let r = fs.reaper.as_ref().unwrap();
        assert_eq!(r.pending(), 1, "the file should wait in the reaper");
        // The pinned descriptor still reaches the removed file.
        let pinned = std::fs::read_link(format!("/proc/self/fd/{}", r.pending_raw()[0]))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(pinned.ends_with("(deleted)"), "{pinned}");
        assert!(r.flush());
        assert_eq!(r.pending(), 0);
        let _ = std::fs::remove_dir_all(dir);
    }
}
