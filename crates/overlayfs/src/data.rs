//! File contents: one [`CipherFile`] per open inode, shared by all its
//! handles behind one read-write lock: reads run side by side, a write
//! (read-modify-write of partial blocks, header creation) runs alone;
//! plus truncation for `setattr`.
//!
//! A write that fails (a full disk) is remembered on the open inode: until
//! the file is truncated or closed, no later write may start past the end
//! of the file. With the kernel's write cache, write-back runs after
//! `write()` returned (the kernel reports its failure to `close()` and
//! `fsync()` itself), so a writer that ignores errors would otherwise
//! leave holes that read back as zeros where its data never landed, and
//! could grow a huge sparse file on a full disk.

use cryptkeep_fuse::ops::Errno;
use cryptkeep_overlay::{at, CipherFile};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::attr::{errno, io_errno};
use super::fs::OverlayFs;
use super::open_files::{Open, OpenInode};

type R<T> = Result<T, Errno>;

impl OverlayFs {
    /// Opens inode `ino` (its cipher file read-write when possible) and
    /// returns a new handle.
    pub(crate) fn open_file(&self, ino: u64) -> R<u64> {
        self.new_handle(ino, || {
            let f = self.open_cipher_file(ino)?;
            Ok((f, self.shown_ino(ino)))
        })
    }

    /// Opens the cipher file of inode `ino`, read-write unless the mount
    /// is read-only or the file is not writable: relative to its parent's
    /// descriptor, never through a symlink (ELOOP), never a FIFO or device
    /// put in its place, and checked to be `ino` (ESTALE otherwise).
    pub(crate) fn open_cipher_file(&self, ino: u64) -> R<std::fs::File> {
        let a = self.at_of(ino)?;
        let open = |flags| at::open_regular_stat_at(&*a.dir, &a.name, flags);
        let f = if self.read_only {
            open(libc::O_RDONLY)
        } else {
            open(libc::O_RDWR).or_else(|e| match e.raw_os_error() {
                Some(libc::EACCES | libc::EPERM | libc::EROFS) => open(libc::O_RDONLY),
                _ => Err(e),
            })
        };
        let (f, st) = f.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => Errno::EIO,
            _ => io_errno(&e),
        })?;
        self.expect_ino(&st, ino)?;
        Ok(f)
    }

    /// How inode `ino`'s cipher file is named in errors and logs: its
    /// cipher name.
    fn shown_ino(&self, ino: u64) -> PathBuf {
        self.nodes
            .lock()
            .ok()
            .and_then(|t| t.link(ino))
            .map_or_else(|| PathBuf::from(format!("inode {ino}")), |l| l.name.into())
    }

    /// A new handle on inode `ino` using `f`, its cipher file just created
    /// and opened read-write (unless the inode is open already, then its
    /// cipher file is shared and `f` closed).
    pub(crate) fn open_file_with(&self, ino: u64, f: std::fs::File) -> R<u64> {
        self.new_handle(ino, || Ok((f, self.shown_ino(ino))))
    }

    /// A new handle on inode `ino`; its cipher file comes from `open` when
    /// the inode is not open yet.
    fn new_handle(&self, ino: u64, open: impl FnOnce() -> R<(std::fs::File, PathBuf)>) -> R<u64> {
        let mut inodes = self.files.inodes.lock().map_err(|_| Errno::EIO)?;
        match inodes.get_mut(&ino) {
            Some(o) => o.handles += 1,
            None => {
                let (f, p) = open()?;
                inodes.insert(
                    ino,
                    OpenInode {
                        file: Arc::new(Open::new(CipherFile::new(f, &p).with_streaming())),
                        handles: 1,
                    },
                );
            }
        }
        drop(inodes);
        let fh = self.files.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.files
            .handles
            .lock()
            .map_err(|_| Errno::EIO)?
            .insert(fh, ino);
        Ok(fh)
    }

    /// Drops handle `fh`; the cipher file closes with its last handle.
    pub(crate) fn release_file(&self, fh: u64) {
        let Ok(mut handles) = self.files.handles.lock() else {
            return;
        };
        let Some(ino) = handles.remove(&fh) else {
            return;
        };
        drop(handles);
        if let Ok(mut inodes) = self.files.inodes.lock() {
            if let Some(o) = inodes.get_mut(&ino) {
                o.handles -= 1;
                if o.handles == 0 {
                    inodes.remove(&ino);
                }
            }
        }
    }

    fn file_of(&self, fh: u64) -> R<Arc<Open>> {
        let ino = *self
            .files
            .handles
            .lock()
            .map_err(|_| Errno::EIO)?
            .get(&fh)
            .ok_or(Errno::EBADF)?;
        self.open_inode(ino).ok_or(Errno::EBADF)
    }

    /// The attributes of an open inode, from its descriptor.
    pub(crate) fn open_attr(&self, ino: u64) -> Option<cryptkeep_fuse::ops::FileAttr> {
        let f = self.open_inode(ino)?;
        let cf = f.cf.read().ok()?;
        let m = cf.file().metadata().ok()?;
        Some(super::attr::attr(&self.cd, &m, self.root_ino))
    }

    fn open_inode(&self, ino: u64) -> Option<Arc<Open>> {
        self.files
            .inodes
            .lock()
            .ok()?
            .get(&ino)
            .map(|o| o.file.clone())
    }

    /// Reads up to `out.len()` plaintext bytes of handle `fh` at `off`
    /// straight into `out`; returns how many (short at end of file).
    pub(crate) fn do_read_into(&self, fh: u64, off: u64, out: &mut [u8]) -> R<usize> {
        let f = self.file_of(fh)?;
        let cf = f.cf.read().map_err(|_| Errno::EIO)?;
        cf.read_at(self.cd.content(), out, off)
            .map_err(|e| errno(&e))
    }

    /// Writes `data` at `off` of handle `fh`.
    pub(crate) fn do_write(&self, fh: u64, off: u64, data: &[u8]) -> R<u32> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let f = self.file_of(fh)?;
        let mut cf = f.cf.write().map_err(|_| Errno::EIO)?;
        let c = self.cd.content();
        let failed = f.failed.load(Ordering::Acquire);
        if failed != 0 && off > cf.plain_size(c).map_err(|e| errno(&e))? {
            // Past the end after a failed write: it would leave a hole
            // where that write's data never landed.
            return Err(Errno::from_i32(failed));
        }
        let r = self.with_room(|| cf.write_at(c, data, off).map_err(|e| errno(&e)));
        if let Err(e) = r {
            f.failed.store(e.code(), Ordering::Release);
            return Err(e);
        }
        Ok(data.len() as u32)
    }

    /// Clears the set-user-ID and set-group-ID bits of handle `fh`'s file
    /// (a write by an unprivileged user, FUSE_HANDLE_KILLPRIV_V2).
    pub(crate) fn kill_suid(&self, fh: u64) {
        let _changing = self.prefetch.changing();
        use std::os::unix::fs::PermissionsExt;
        let Ok(f) = self.file_of(fh) else { return };
        let Ok(cf) = f.cf.read() else { return };
        if let Ok(m) = cf.file().metadata() {
            let mode = m.permissions().mode();
            if mode & 0o6000 != 0 {
                let _ = cf
                    .file()
                    .set_permissions(std::fs::Permissions::from_mode(mode & 0o1777));
            }
        }
    }

    pub(crate) fn do_fsync(&self, fh: u64) -> R<()> {
        let f = self.file_of(fh)?;
        let cf = f.cf.read().map_err(|_| Errno::EIO)?;
        cf.file().sync_all().map_err(|e| io_errno(&e))
    }

    /// Changes mode, owner and times of inode `ino` through its open
    /// descriptor, so it works after the file was unlinked (POSIX: an open
    /// file stays usable). `None` when the inode is not open.
    pub(crate) fn set_meta_open(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<Option<(i64, i64)>>,
        mtime: Option<Option<(i64, i64)>>,
    ) -> Option<R<()>> {
        use std::os::unix::fs::PermissionsExt;
        let f = self.open_inode(ino)?;
        let r = (|| {
            let cf = f.cf.read().map_err(|_| Errno::EIO)?;
            let file = cf.file();
            if let Some(m) = mode {
                file.set_permissions(std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(|e| io_errno(&e))?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::fchown(file, uid, gid).map_err(|e| io_errno(&e))?;
            }
            if atime.is_some() || mtime.is_some() {
                cryptkeep_overlay::sys::set_times_fd(file, atime, mtime)
                    .map_err(|e| io_errno(&e))?;
            }
            Ok(())
        })();
        Some(r)
    }

    /// `fallocate(2)` on handle `fh` of inode `ino`, with the modes tmpfs
    /// offers: 0 (reserve, and grow the file to `off + len`), KEEP_SIZE
    /// (reserve only) and PUNCH_HOLE|KEEP_SIZE (zero a range). Others are
    /// EOPNOTSUPP, as on tmpfs.
    pub(crate) fn do_fallocate(&self, ino: u64, fh: u64, off: u64, len: u64, mode: i32) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        if mode != 0 && mode != KEEP && mode != PUNCH {
            return Err(Errno::EOPNOTSUPP);
        }
        let f = self
            .file_of(fh)
            .or_else(|_| self.open_inode(ino).ok_or(Errno::EBADF))?;
        let mut cf = f.cf.write().map_err(|_| Errno::EIO)?;
        let c = self.cd.content();
        self.with_room(|| match mode {
            PUNCH => cf.punch_hole(c, off, len).map_err(|e| errno(&e)),
            _ => {
                let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
                if mode == 0 && end > cf.plain_size(c).map_err(|e| errno(&e))? {
                    cf.truncate(c, end).map_err(|e| errno(&e))?;
                }
                cf.reserve(c, off, len).map_err(|e| errno(&e))
            }
        })
    }

    /// Sets the plaintext size of inode `ino` (open or not).
    pub(crate) fn truncate(&self, ino: u64, size: u64) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let f = match self.open_inode(ino) {
            Some(f) => f,
            None => {
                let f = self.open_cipher_file(ino)?;
                Arc::new(Open::new(CipherFile::new(f, &self.shown_ino(ino))))
            }
        };
        let mut cf = f.cf.write().map_err(|_| Errno::EIO)?;
        cf.truncate(self.cd.content(), size)
            .map_err(|e| errno(&e))?;
        // A new end: writes past it no longer leave holes over lost data.
        f.failed.store(0, Ordering::Release);
        Ok(())
    }
}
