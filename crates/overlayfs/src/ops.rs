//! The operations that need more than one of the overlay's parts:
//! setattr, open, write with set-id clearing, listings (with the
//! read-ahead), statfs, access and create.

use cryptkeep_fuse::ops::{Errno, FileAttr, SetAttr, Statfs};
use cryptkeep_overlay::at;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;

use super::attr::{io_errno, permits};
use super::fs::OverlayFs;
use super::listings::{split_offset, Listing};

type R<T> = Result<T, Errno>;

/// `FOPEN_DIRECT_IO` (include/uapi/linux/fuse.h): this handle bypasses
/// the page cache.
const FOPEN_DIRECT_IO: u32 = 1 << 0;

impl OverlayFs {
    /// Changes size, mode, owner and times; answers the new attributes.
    pub(crate) fn do_setattr(&self, ino: u64, s: SetAttr) -> R<FileAttr> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        if let Some(size) = s.size {
            self.with_room(|| self.truncate(ino, size))?;
        }
        let meta = s.mode.is_some()
            || s.uid.is_some()
            || s.gid.is_some()
            || s.atime.is_some()
            || s.mtime.is_some();
        if !meta {
            return self.attr_of(ino);
        }
        // An open file (maybe already unlinked) through its descriptor.
        if let Some(r) = self.set_meta_open(ino, s.mode, s.uid, s.gid, s.atime, s.mtime) {
            r?;
            return self.attr_of(ino);
        }
        // Otherwise through an O_PATH descriptor of the entry itself, checked
        // to be this inode: a symlink put in its place is never followed.
        let p = self.pin(ino)?;
        if let Some(m) = s.mode {
            if p.is_symlink() {
                return Err(Errno::EOPNOTSUPP);
            }
            at::chmod_fd(&*p.fd, m & 0o7777).map_err(|e| io_errno(&e))?;
        }
        if s.uid.is_some() || s.gid.is_some() {
            at::chown_at(&*p.fd, OsStr::new(""), s.uid, s.gid).map_err(|e| io_errno(&e))?;
        }
        if s.atime.is_some() || s.mtime.is_some() {
            let r = if p.is_symlink() {
                at::utimens_at(&*p.at.dir, &p.at.name, s.atime, s.mtime)
            } else {
                at::utimens_at(&*p.fd, OsStr::new(""), s.atime, s.mtime)
            };
            r.map_err(|e| io_errno(&e))?;
        }
        self.attr_of(ino)
    }

    /// Opens a file (`write`: for writing too); answers the handle and
    /// the `FOPEN_*` flags for the kernel.
    pub(crate) fn do_open(&self, ino: u64, write: bool) -> R<(u64, u32)> {
        if self.read_only && write {
            return Err(Errno::EROFS);
        }
        Ok((self.open_file(ino)?, self.open_flags(write)))
    }

    /// The `FOPEN_*` flags of a new handle: `FOPEN_DIRECT_IO` for writing
    /// while the backing file system is low on space (`space.rs`).
    fn open_flags(&self, write: bool) -> u32 {
        if write && self.writeback_cache && self.space.low(self.dir_fds.root()) {
            FOPEN_DIRECT_IO
        } else {
            0
        }
    }

    /// A write, clearing set-id bits first when the kernel asks.
    pub(crate) fn do_write_killing(&self, fh: u64, off: u64, data: &[u8], kill: bool) -> R<u32> {
        if kill {
            self.kill_suid(fh);
        }
        self.do_write(fh, off, data)
    }

    /// The listing a read of directory `ino` at `offset` continues, and
    /// the position in it: a new snapshot at offset 0 (or when the
    /// reader's is gone; read ahead if it was), else the one the offset
    /// names. A new snapshot queues its subdirectories for read-ahead.
    pub(crate) fn dir_items(&self, ino: u64, offset: u64) -> R<(Listing, usize)> {
        let (id, pos) = split_offset(offset);
        if offset != 0 {
            if let Some(l) = self.listings.lock().map_err(|_| Errno::EIO)?.get(ino, id) {
                return Ok((l, pos));
            }
        }
        // Listed without the lock held.
        let (items, stats) = match self.prefetch.take(ino) {
            Some(r) => (r.items, Some(r.stats)),
            None => (self.snapshot(ino, &*self.dir_fd(ino)?)?, None),
        };
        let l = self
            .listings
            .lock()
            .map_err(|_| Errno::EIO)?
            .insert(ino, items, stats);
        self.read_ahead(&l);
        Ok((l, pos))
    }

    /// A read of `l` from `pos` is answered: past the end, the reader is
    /// done with it.
    pub(crate) fn dir_read_done(&self, l: &Listing, pos: usize) {
        if pos >= l.items.len() {
            if let Ok(mut t) = self.listings.lock() {
                t.finish(l);
            }
        }
    }

    /// `statfs` of the backing file system (names up to 255 bytes).
    pub(crate) fn do_statfs(&self) -> R<Statfs> {
        let s = at::statvfs_fd(&**self.dir_fds.root()).map_err(|e| io_errno(&e))?;
        Ok(Statfs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: 255,
            frsize: s.f_frsize as u32,
        })
    }

    /// `access(2)` from the mode bits, for owner-only mounts (see `mount.rs`).
    pub(crate) fn do_access(&self, ino: u64, uid: u32, gid: u32, mask: i32) -> R<()> {
        if permits(&self.attr_of(ino)?, uid, gid, mask) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Creates (or with no `O_EXCL` opens an existing) file and opens it;
    /// answers its attributes, handle and `FOPEN_*` flags.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64, u32)> {
        let perm = mode & !umask & 0o7777;
        let excl = flags & libc::O_EXCL != 0;
        let (a, f) = self.create_entry(parent, name, uid, gid, |dir, on| {
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
            match at::open_regular_at(dir, on, flags, perm) {
                Ok(f) => {
                    // The mode exactly, whatever our umask.
                    f.set_permissions(std::fs::Permissions::from_mode(perm))?;
                    Ok(Some((f, false)))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && !excl => {
                    Ok(Some((at::open_regular_at(dir, on, libc::O_RDWR, 0)?, true)))
                }
                Err(e) => Err(e),
            }
        })?;
        let f = f.ok_or(Errno::EIO)?;
        let fh = self.open_file_with(a.ino.0, f)?;
        Ok((a, fh, self.open_flags(true)))
    }
}
