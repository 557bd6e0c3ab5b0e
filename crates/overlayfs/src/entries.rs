//! Name operations: lookup, mkdir, mknod, symlink, link, unlink, rmdir,
//! rename, readlink. Each plaintext name is mapped to its cipher name in
//! the parent's cipher directory (with a `.name` file for hashed long
//! names), and every call on the backing store is relative to the
//! parent's descriptor and never follows a symlink (`resolve.rs`).

use cryptkeep_fuse::ops::{Errno, FileAttr, RenameFlags};
use cryptkeep_overlay::diriv::{DIRIV_LEN, DIRIV_NAME};
use cryptkeep_overlay::{at, NameMode};
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use super::attr::{attr, errno, ino_of, io_errno};
use super::fs::OverlayFs;
use super::reaper;
use super::resolve::shown;

type R<T> = Result<T, Errno>;

/// What a create callback made: nothing opened, or the new regular file
/// opened read-write and whether it existed already (a non-exclusive
/// create that found one keeps its owner).
pub(crate) type Made = Option<(std::fs::File, bool)>;

/// An overlay error as an I/O error, keeping its errno (a full disk stays
/// ENOSPC).
fn to_io(e: cryptkeep_overlay::Error) -> std::io::Error {
    match e {
        cryptkeep_overlay::Error::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    }
}

impl OverlayFs {
    pub(crate) fn do_lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let (dir, cn) = self.child(parent, name)?;
        let on = OsStr::new(&cn.on_disk);
        let st = at::stat_at(&*dir, on).map_err(|e| io_errno(&e))?;
        let a = self.attr_at(&dir, on, &st);
        self.record(a.ino.0, parent, on)?;
        Ok(a)
    }

    /// Creates entry `name` in `parent` with `make` (given the parent's
    /// descriptor and the cipher name), handling the `.name` file of a
    /// long name and the owner; `make` may hand back the new regular file
    /// opened, whose owner and attributes are then set and read through
    /// that descriptor, and which is returned for the file handle.
    pub(crate) fn create_entry(
        &self,
        parent: u64,
        name: &OsStr,
        uid: u32,
        gid: u32,
        mut make: impl FnMut(&OwnedFd, &OsStr) -> std::io::Result<Made>,
    ) -> R<(FileAttr, Option<std::fs::File>)> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let on = OsStr::new(&cn.on_disk);
        self.with_room(|| {
            self.cd
                .write_long_name_at(&*dir, shown(on), &cn)
                .map_err(|e| errno(&e))
        })?;
        let made = match self.with_room(|| make(&dir, on).map_err(|e| io_errno(&e))) {
            Ok(m) => m,
            Err(e) => {
                let _ = self.cd.remove_long_name_at(&*dir, &cn);
                return Err(e);
            }
        };
        // New entries belong to the caller (as root); u32::MAX = keep the
        // owner (hard links share the existing inode's).
        let chown = self.is_root && uid != u32::MAX;
        let Some((f, existed)) = made else {
            if chown {
                let _ = at::chown_at(&*dir, on, Some(uid), Some(gid));
            }
            let st = at::stat_at(&*dir, on).map_err(|e| io_errno(&e))?;
            let a = self.attr_at(&dir, on, &st);
            self.record(a.ino.0, parent, on)?;
            return Ok((a, None));
        };
        if chown && !existed {
            let _ = std::os::unix::fs::fchown(&f, Some(uid), Some(gid));
        }
        let m = f.metadata().map_err(|e| io_errno(&e))?;
        let a = attr(&self.cd, &m, self.root_ino);
        self.record(a.ino.0, parent, on)?;
        Ok((a, Some(f)))
    }

    pub(crate) fn do_mkdir(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let cd = self.cd.clone();
        let (a, _) = self.create_entry(parent, name, uid, gid, |dir, on| {
            at::mkdir_at(dir, on, 0o700)?;
            let made = at::open_dir_at(dir, on).and_then(|new| {
                cd.init_dir_at(&new, shown(on)).map_err(to_io)?;
                at::chmod_fd(&new, mode & 0o7777)
            });
            if let Err(e) = made {
                // Nothing half-made stays: the diriv if it went in, then
                // the directory.
                if let Ok(new) = at::open_dir_at(dir, on) {
                    let _ = at::unlink_at(&new, OsStr::new(DIRIV_NAME), 0);
                }
                let _ = at::unlink_at(dir, on, libc::AT_REMOVEDIR);
                return Err(e);
            }
            Ok(None)
        })?;
        Ok(a)
    }

    pub(crate) fn do_symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let stored = self
            .cd
            .encrypt_symlink_target(target.as_os_str())
            .map_err(|e| errno(&e))?;
        let (a, _) = self.create_entry(parent, name, uid, gid, |dir, on| {
            at::symlink_at(&stored, dir, on).map(|()| None)
        })?;
        Ok(a)
    }

    pub(crate) fn do_mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let (a, _) = self.create_entry(parent, name, uid, gid, |dir, on| {
            if mode & libc::S_IFMT == libc::S_IFREG {
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
                let f = at::open_regular_at(dir, on, flags, mode & 0o7777)?;
                // The mode exactly, whatever our umask.
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
                Ok(None)
            } else {
                at::mknod_at(dir, on, mode, u64::from(rdev)).map(|()| None)
            }
        })?;
        Ok(a)
    }

    pub(crate) fn do_link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        let (src, _) = self.stat_of(ino)?;
        let (a, _) = self.create_entry(newparent, newname, u32::MAX, u32::MAX, |dir, on| {
            at::link_at(&*src.dir, &src.name, dir, on).map(|()| None)
        })?;
        Ok(a)
    }

    pub(crate) fn do_readlink(&self, ino: u64) -> R<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let a = self.at_of(ino)?;
        let t = at::readlink_at(&*a.dir, &a.name).map_err(|e| io_errno(&e))?;
        let plain = self
            .cd
            .decrypt_symlink_target(&t, shown(&a.name))
            .map_err(|e| errno(&e))?;
        Ok(plain.as_bytes().to_vec())
    }

    pub(crate) fn do_unlink(&self, parent: u64, name: &OsStr) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let on = OsStr::new(&cn.on_disk);
        // Held open across the unlink, the file is freed by the reaper.
        let pinned = self
            .reaper
            .as_ref()
            .and_then(|_| reaper::pin_at(&*dir, on).ok());
        at::unlink_at(&*dir, on, 0).map_err(|e| io_errno(&e))?;
        if let (Some(r), Some(fd)) = (&self.reaper, pinned) {
            r.release(fd);
        }
        let _ = self.cd.remove_long_name_at(&*dir, &cn);
        self.nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .remove(parent, on);
        Ok(())
    }

    /// Removes the (plaintext-)empty cipher directory `name` of the open
    /// directory `parent`: its diriv, then itself (the diriv is put back
    /// when the directory cannot go). Answers the removed directory's
    /// FUSE inode number.
    fn remove_dir_at(&self, parent: &impl AsFd, name: &OsStr) -> R<u64> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let dir = at::open_at(parent, name, flags, 0).map_err(|e| io_errno(&e))?;
        let ino = at::fstat(&dir).map_err(|e| io_errno(&e))?.st_ino;
        let diriv = OsStr::new(DIRIV_NAME);
        let mut has_diriv = false;
        for e in at::read_entries(&dir).map_err(|e| io_errno(&e))? {
            if e.name == diriv && self.cd.names().mode() == (NameMode::Eme { diriv: true }) {
                has_diriv = true;
            } else {
                return Err(Errno::ENOTEMPTY);
            }
        }
        let saved = if has_diriv {
            // Whatever it holds, at most what a diriv may (a planted FIFO
            // or a huge file is refused, not read).
            let b = at::read_small_at(&dir, diriv, DIRIV_LEN).map_err(|e| io_errno(&e))?;
            at::unlink_at(&dir, diriv, 0).map_err(|e| io_errno(&e))?;
            Some(b)
        } else {
            None
        };
        if let Err(e) = at::unlink_at(parent, name, libc::AT_REMOVEDIR) {
            if let Some(b) = saved {
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
                if let Ok(mut f) = at::open_regular_at(&dir, diriv, flags, 0o444) {
                    let _ = f.write_all(&b);
                }
            }
            return Err(io_errno(&e));
        }
        Ok(ino_of(ino, self.root_ino))
    }

    /// Removes directory `name` of the open directory `dir` (`parent`) and
    /// forgets what was kept of it.
    fn remove_dir_entry(&self, dir: &Arc<OwnedFd>, name: &OsStr) -> R<u64> {
        let gone = self.remove_dir_at(&**dir, name)?;
        self.dir_fds.forget(gone);
        self.forget_dir_iv(gone);
        Ok(gone)
    }

    pub(crate) fn do_rmdir(&self, parent: u64, name: &OsStr) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let on = OsStr::new(&cn.on_disk);
        self.remove_dir_entry(&dir, on)?;
        let _ = self.cd.remove_long_name_at(&*dir, &cn);
        self.nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .remove(parent, on);
        Ok(())
    }

    pub(crate) fn do_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (odir, ocn) = self.child(parent, name)?;
        let (ndir, ncn) = self.child(newparent, newname)?;
        let (on, nn) = (OsStr::new(&ocn.on_disk), OsStr::new(&ncn.on_disk));
        let same = parent == newparent && on == nn;
        let is_dir = |st: &libc::stat| st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let old = at::stat_at(&*odir, on).map_err(|e| io_errno(&e))?;
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            // Both names stay where they are (and so do their `.name`
            // files); only what they point at is swapped. Directory IVs
            // belong to the directories, so none changes.
            at::stat_at(&*ndir, nn).map_err(|e| io_errno(&e))?;
            at::rename_at(&*odir, on, &*ndir, nn, flags.bits()).map_err(|e| io_errno(&e))?;
            self.nodes
                .lock()
                .map_err(|_| Errno::EIO)?
                .exchange((parent, on), (newparent, nn));
            return Ok(());
        }
        let target = at::stat_at(&*ndir, nn).ok();
        if let Some(t) = &target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if same {
                return Ok(());
            }
            // An empty target directory still holds its diriv: remove it first.
            if is_dir(t) && is_dir(&old) {
                self.remove_dir_entry(&ndir, nn)?;
            }
        }
        if ncn.long.is_some() {
            // Same name, same content: replace a target's .name file (it
            // is read-only, so remove and create rather than overwrite).
            let _ = self.cd.remove_long_name_at(&*ndir, &ncn);
            self.cd
                .write_long_name_at(&*ndir, shown(nn), &ncn)
                .map_err(|e| errno(&e))?;
        }
        if let Err(e) = at::rename_at(&*odir, on, &*ndir, nn, flags.bits()) {
            if target.is_none() {
                let _ = self.cd.remove_long_name_at(&*ndir, &ncn);
            }
            return Err(io_errno(&e));
        }
        if !same {
            let _ = self.cd.remove_long_name_at(&*odir, &ocn);
        }
        self.nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .rename(parent, on, newparent, nn);
        Ok(())
    }
}
