//! [`OverlayFs`]: the gocryptfs-format overlay's state, and its
//! [`Ops`] for the transports of `cryptkeep_fuse`. This file only
//! forwards; the work is in `entries.rs` (names), `data.rs` (contents),
//! `snapshot.rs` (listings), `xattr.rs`, `ops.rs` and `attr.rs`.

use cryptkeep_fuse::ops::{
    DirPlusSink, DirSink, Errno, FileAttr, Ops, RenameFlags, SetAttr, Statfs, Wants,
};
use cryptkeep_overlay::CipherDir;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::dirfds::DirFds;
use super::listings::Listings;
use super::nodes::Nodes;
use super::open_files::OpenFiles;
use super::prefetch::Prefetch;
use super::reaper::Reaper;

type R<T> = Result<T, Errno>;

/// Directory IVs by directory inode, with when each was read.
pub(crate) type DirIvCache =
    HashMap<u64, (cryptkeep_overlay::DirIv, std::time::Instant), foldhash::fast::RandomState>;

/// The overlay file system over one opened cipher directory. Clones share
/// all state.
#[derive(Clone)]
pub(crate) struct OverlayFs {
    pub(crate) cd: Arc<CipherDir>,
    /// Inodes and the names they were looked up by.
    pub(crate) nodes: Arc<Mutex<Nodes>>,
    /// Directory IVs read, and when: served for as long as the kernel
    /// caches entries (a directory recreated behind the mount's back gets
    /// a new IV; gocryptfs's cache likewise expires after its 1 s).
    pub(crate) dir_ivs: Arc<Mutex<DirIvCache>>,
    pub(crate) files: Arc<OpenFiles>,
    pub(crate) listings: Arc<Mutex<Listings>>,
    pub(crate) prefetch: Arc<Prefetch>,
    /// Frees removed files off the request path (`reaper.rs`).
    pub(crate) reaper: Option<Arc<Reaper>>,
    /// The cipher directory's descriptor and those of recently used
    /// directories: every call on the backing store starts from one
    /// (`dirfds.rs`).
    pub(crate) dir_fds: Arc<DirFds>,
    /// Whether the backing file system is low on space (`space.rs`).
    pub(crate) space: Arc<super::space::Space>,
    pub(crate) read_only: bool,
    pub(crate) root_ino: u64,
    /// The device the cipher directory is on: the read-ahead stays on it.
    pub(crate) root_dev: u64,
    pub(crate) is_root: bool,
    pub(crate) writeback_cache: bool,
    /// How long the kernel may cache entries and attributes.
    pub(crate) ttl: Duration,
}

impl OverlayFs {
    pub(crate) fn new(
        cd: Arc<CipherDir>,
        read_only: bool,
        writeback_cache: bool,
        ttl: Duration,
    ) -> std::io::Result<OverlayFs> {
        use std::os::unix::fs::OpenOptionsExt;
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(cd.root())?;
        let root_ino = root.metadata()?.ino();
        let root_dev = root.metadata()?.dev();
        Ok(OverlayFs {
            nodes: Arc::new(Mutex::new(Nodes::new())),
            dir_ivs: Arc::default(),
            files: Arc::default(),
            listings: Arc::default(),
            prefetch: Arc::new(Prefetch::new(ttl)),
            dir_fds: Arc::new(DirFds::new(root.into(), ttl)),
            ttl,
            reaper: if read_only {
                None
            } else {
                Reaper::start().map(Arc::new)
            },
            space: Arc::default(),
            read_only,
            writeback_cache: writeback_cache && !read_only,
            root_ino,
            root_dev,
            // SAFETY: geteuid has no preconditions and cannot fail.
            is_root: unsafe { libc::geteuid() } == 0,
            cd,
        })
    }
}

impl Ops for OverlayFs {
    fn wants(&self) -> Wants {
        Wants {
            // Every cipher file is opened read-write, so the partial-page
            // reads the kernel's write cache needs always work.
            writeback_cache: self.writeback_cache,
            readdirplus: true,
            ..Wants::default()
        }
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        self.do_lookup(parent, name)
    }

    fn forget(&self, ino: u64, nlookup: u64) {
        let gone = self.nodes.lock().is_ok_and(|mut t| t.forget(ino, nlookup));
        if gone {
            self.dir_fds.forget(ino);
        }
    }

    fn getattr(&self, ino: u64) -> R<FileAttr> {
        self.attr_of(ino)
    }

    fn setattr(&self, ino: u64, s: SetAttr) -> R<FileAttr> {
        self.do_setattr(ino, s)
    }

    fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        self.do_readlink(ino)
    }

    fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        self.do_mknod(parent, name, mode, rdev, uid, gid)
    }

    fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, uid: u32, gid: u32) -> R<FileAttr> {
        self.do_mkdir(parent, name, mode, uid, gid)
    }

    fn unlink(&self, parent: u64, name: &OsStr) -> R<()> {
        self.do_unlink(parent, name)
    }

    fn rmdir(&self, parent: u64, name: &OsStr) -> R<()> {
        self.do_rmdir(parent, name)
    }

    fn symlink(&self, parent: u64, name: &OsStr, target: &Path, uid: u32, gid: u32) -> R<FileAttr> {
        self.do_symlink(parent, name, target, uid, gid)
    }

    fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        self.do_rename(parent, name, newparent, newname, flags)
    }

    fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        self.do_link(ino, newparent, newname)
    }

    fn open(&self, ino: u64, flags: i32) -> R<(u64, u32)> {
        self.do_open(ino, flags & libc::O_ACCMODE != libc::O_RDONLY)
    }

    fn read(&self, fh: u64, off: u64, out: &mut [u8]) -> R<usize> {
        self.do_read_into(fh, off, out)
    }

    fn write(&self, fh: u64, off: u64, data: &[u8], kill_suidgid: bool) -> R<u32> {
        self.do_write_killing(fh, off, data, kill_suidgid)
    }

    /// Writes reach the cipher file before they are acknowledged, and the
    /// kernel reports a failed write-back to `close()` itself (it checks
    /// the page cache's errors before it would send FLUSH), so a close has
    /// nothing to do here: ENOSYS tells the kernel to stop sending FLUSH
    /// at all (one round trip less per close).
    fn flush(&self, _fh: u64) -> R<()> {
        Err(Errno::ENOSYS)
    }

    fn release(&self, fh: u64) {
        self.release_file(fh)
    }

    fn fsync(&self, fh: u64, _datasync: bool) -> R<()> {
        self.do_fsync(fh)
    }

    /// Not implemented: the kernel stops sending OPENDIR and RELEASEDIR
    /// and caches listings itself (see `listings.rs`).
    fn opendir(&self, _ino: u64) -> R<(u64, u32)> {
        Err(Errno::ENOSYS)
    }

    fn readdir(&self, ino: u64, offset: u64, sink: &mut dyn DirSink) -> R<()> {
        let (l, pos) = self.dir_items(ino, offset)?;
        for (i, it) in l.items.iter().enumerate().skip(pos) {
            if sink.add(it.ino, l.offset_after(i), it.kind, &it.name) {
                break;
            }
        }
        self.dir_read_done(&l, pos);
        Ok(())
    }

    fn readdirplus(&self, ino: u64, offset: u64, sink: &mut dyn DirPlusSink) -> R<()> {
        let (l, pos) = self.dir_items(ino, offset)?;
        let r = self.fill_readdirplus(&l, pos, sink);
        self.dir_read_done(&l, pos);
        r
    }

    fn statfs(&self) -> R<Statfs> {
        self.do_statfs()
    }

    fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        self.do_setxattr(ino, name, value, flags)
    }

    fn getxattr(&self, ino: u64, name: &OsStr) -> R<Vec<u8>> {
        self.do_getxattr(ino, name)
    }

    fn listxattr(&self, ino: u64) -> R<Vec<u8>> {
        self.do_listxattr(ino)
    }

    fn removexattr(&self, ino: u64, name: &OsStr) -> R<()> {
        self.do_removexattr(ino, name)
    }

    /// Only asked when the kernel does not check permissions itself (a
    /// mount for its owner only).
    fn access(&self, ino: u64, uid: u32, gid: u32, mask: i32) -> R<()> {
        self.do_access(ino, uid, gid, mask)
    }

    fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64, u32)> {
        self.do_create(parent, name, mode, umask, flags, uid, gid)
    }

    fn fallocate(&self, ino: u64, fh: u64, off: u64, len: u64, mode: i32) -> R<()> {
        self.do_fallocate(ino, fh, off, len, mode)
    }

    fn destroy(&self) {
        self.prefetch.stop();
    }
}
