//! From FUSE inode numbers and plaintext names to the backing store:
//! a directory's descriptor (`dirfds.rs`), its name tweak, a child's
//! cipher name, and an inode's own entry (its parent's descriptor and
//! its cipher name), each checked to still be the inode the kernel knows.

use cryptkeep_fuse::ops::{Errno, FileAttr};
use cryptkeep_overlay::{at, CipherName, DirIv, NameMode};
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use super::attr::{attr_stat, errno, ino_of, io_errno};
use super::fs::OverlayFs;
use super::nodes::ROOT_INO;

type R<T> = Result<T, Errno>;

/// An inode's entry: cipher name `name` in the directory open as `dir`;
/// for the root, the root's descriptor and an empty name (the `*_at`
/// calls then act on the descriptor itself).
pub(crate) struct At {
    pub(crate) dir: Arc<OwnedFd>,
    pub(crate) name: OsString,
}

/// An inode's entry pinned by an `O_PATH` descriptor of its own (for the
/// root, the root's), with what `fstat` said of it.
pub(crate) struct Pin {
    pub(crate) at: At,
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) st: libc::stat,
}

impl Pin {
    /// Whether the pinned file is a symlink.
    pub(crate) fn is_symlink(&self) -> bool {
        self.st.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

/// The name to show for cipher name `name` in errors and logs.
pub(crate) fn shown(name: &OsStr) -> &Path {
    Path::new(name)
}

impl OverlayFs {
    /// The descriptor of directory `ino`.
    pub(crate) fn dir_fd(&self, ino: u64) -> R<Arc<OwnedFd>> {
        self.dir_fds.get(ino, &self.nodes).map_err(|e| io_errno(&e))
    }

    /// The name tweak of directory `ino`, open as `dir`; cached for the
    /// mount's cache time-out (a directory's IV never changes; one
    /// recreated behind the mount's back has a new one).
    pub(crate) fn dir_iv(&self, ino: u64, dir: &OwnedFd) -> R<DirIv> {
        if self.cd.names().mode() != (NameMode::Eme { diriv: true }) {
            return self.cd.dir_iv_at(dir, Path::new("")).map_err(|e| errno(&e));
        }
        if let Some((iv, read)) = self.dir_ivs.lock().map_err(|_| Errno::EIO)?.get(&ino) {
            if read.elapsed() < self.ttl {
                return Ok(*iv);
            }
        }
        let iv = self
            .cd
            .dir_iv_at(dir, Path::new(""))
            .map_err(|e| errno(&e))?;
        let mut c = self.dir_ivs.lock().map_err(|_| Errno::EIO)?;
        if c.len() > 100_000 {
            c.clear();
        }
        c.insert(ino, (iv, std::time::Instant::now()));
        Ok(iv)
    }

    /// Drops the cached IV of the removed directory `ino`.
    pub(crate) fn forget_dir_iv(&self, ino: u64) {
        if let Ok(mut c) = self.dir_ivs.lock() {
            c.remove(&ino);
        }
    }

    /// The descriptor of directory `parent` and the cipher name of
    /// plaintext `name` in it.
    pub(crate) fn child(&self, parent: u64, name: &OsStr) -> R<(Arc<OwnedFd>, CipherName)> {
        if parent == ROOT_INO
            && self.cd.names().mode() == NameMode::Plain
            && self.cd.is_internal_name(true, name)
        {
            return Err(Errno::EPERM);
        }
        let dir = self.dir_fd(parent)?;
        let iv = self.dir_iv(parent, &dir)?;
        let cn = self.cd.encrypt_entry(&iv, name).map_err(|e| errno(&e))?;
        Ok((dir, cn))
    }

    /// The entry of inode `ino`: its parent's descriptor and its cipher
    /// name there (the root: its own descriptor).
    pub(crate) fn at_of(&self, ino: u64) -> R<At> {
        if ino == ROOT_INO {
            return Ok(At {
                dir: self.dir_fds.root().clone(),
                name: OsString::new(),
            });
        }
        let link = self
            .nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .link(ino)
            .ok_or(Errno::ENOENT)?;
        Ok(At {
            dir: self.dir_fd(link.parent)?,
            name: link.name,
        })
    }

    /// Whether `st` is still inode `ino`: ELOOP when a symlink took its
    /// place, ESTALE when another file did (the kernel then looks the
    /// name up again).
    pub(crate) fn expect_ino(&self, st: &libc::stat, ino: u64) -> R<()> {
        if ino_of(st.st_ino, self.root_ino) == ino {
            Ok(())
        } else if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            Err(Errno::ELOOP)
        } else {
            Err(Errno::ESTALE)
        }
    }

    /// The entry of inode `ino` and its `stat`, checked to be `ino`.
    pub(crate) fn stat_of(&self, ino: u64) -> R<(At, libc::stat)> {
        let at = self.at_of(ino)?;
        let st = at::stat_at(&*at.dir, &at.name).map_err(|e| io_errno(&e))?;
        self.expect_ino(&st, ino)?;
        Ok((at, st))
    }

    /// The entry of inode `ino` pinned by an `O_PATH` descriptor (a
    /// symlink's is the link itself), checked to be `ino`.
    pub(crate) fn pin(&self, ino: u64) -> R<Pin> {
        let at = self.at_of(ino)?;
        let fd = if at.name.is_empty() {
            at.dir.clone()
        } else {
            Arc::new(at::open_at(&*at.dir, &at.name, libc::O_PATH, 0).map_err(|e| io_errno(&e))?)
        };
        let st = at::fstat(&*fd).map_err(|e| io_errno(&e))?;
        self.expect_ino(&st, ino)?;
        Ok(Pin { at, fd, st })
    }

    /// Attributes of inode `ino` (no lookup recorded). An open file is
    /// stat'ed through its descriptor, so it keeps working after unlink.
    pub(crate) fn attr_of(&self, ino: u64) -> R<FileAttr> {
        if let Some(a) = self.open_attr(ino) {
            return Ok(a);
        }
        let (a, st) = self.stat_of(ino)?;
        Ok(self.attr_at(&a.dir, &a.name, &st))
    }

    /// The plaintext attributes of entry `name` of the directory open as
    /// `dir`, whose `stat` is `st` (a symlink's target is read for its
    /// plaintext length).
    pub(crate) fn attr_at(&self, dir: &OwnedFd, name: &OsStr, st: &libc::stat) -> FileAttr {
        attr_stat(&self.cd, st, self.root_ino, name, || {
            at::readlink_at(dir, name).ok()
        })
    }

    /// Records a kernel lookup of `ino` as cipher name `name` in `parent`.
    pub(crate) fn record(&self, ino: u64, parent: u64, name: &OsStr) -> R<()> {
        self.nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .looked_up(ino, parent, name);
        Ok(())
    }
}
