//! [`OverlayFs`]: the `fuser::Filesystem` of the gocryptfs-format overlay.
//! This file only dispatches and replies; the work is in `entries.rs`
//! (names), `data.rs` (contents), `xattr.rs` and `attr.rs`.

use cryptkeep_overlay::CipherDir;
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::data::OpenFiles;
use super::dirfds::DirFds;
use super::listings::Listings;
use super::nodes::Nodes;
use super::ops::{SetAttr, XattrAnswer};
use super::prefetch::Prefetch;
use super::reaper::Reaper;

/// Directory IVs by directory inode, with when each was read.
pub(crate) type DirIvCache =
    HashMap<u64, (cryptkeep_overlay::DirIv, std::time::Instant), foldhash::fast::RandomState>;

/// The overlay file system over one opened cipher directory. Clones share
/// all state, so the `/dev/fuse` session and the io_uring queues can serve
/// the same file system.
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
    pub(crate) is_root: bool,
    pub(crate) writeback_cache: bool,
    /// How long the kernel may cache entries and attributes.
    pub(crate) ttl: Duration,
    /// Ask the kernel for FUSE over io_uring at INIT.
    pub(crate) io_uring: bool,
    /// The `/dev/fuse` request the last FORGET came with (see
    /// [`FORGET_PAUSE`]).
    forget_read: Arc<AtomicU64>,
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
            io_uring: false,
            space: Arc::default(),
            forget_read: Arc::default(),
            read_only,
            writeback_cache: writeback_cache && !read_only,
            root_ino,
            // SAFETY: geteuid has no preconditions and cannot fail.
            is_root: unsafe { libc::geteuid() } == 0,
            cd,
        })
    }
}

/// How long the `/dev/fuse` thread of an io_uring mount pauses before it
/// handles the FORGETs one read brought. Every FORGET queued while a
/// reader waits on `/dev/fuse` wakes it: a cross-CPU wake-up, paid in the
/// process that removed or evicted the file, per file. While nobody waits
/// the kernel only queues them, and the next read takes them all as one
/// BATCH_FORGET. Only INIT, FORGET and INTERRUPT come that way then.
const FORGET_PAUSE: Duration = Duration::from_millis(10);

fn ts(t: TimeOrNow) -> Option<(i64, i64)> {
    match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(st) => Some(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
            Err(e) => (-(e.duration().as_secs() as i64), 0),
        }),
    }
}

impl Filesystem for OverlayFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(n) = config.set_max_write(1 << 20) {
            let _ = config.set_max_write(n);
        }
        if let Err(n) = config.set_max_readahead(1 << 20) {
            let _ = config.set_max_readahead(n);
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Files opened while space is low bypass the page cache (see
        // `space.rs`); mmap of them still works.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        if self.io_uring {
            // Requests then come through the per-CPU queues of crate::uring;
            // the mount checked that the kernel offers it.
            let _ = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING);
        }
        // Every listing carries attributes (READDIRPLUS, not _AUTO: with
        // _AUTO the kernel asks for them only in a directory's first chunk,
        // and each entry of a large directory's later chunks then costs a
        // LOOKUP when du, rsync or ls -l stats it).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if self.writeback_cache {
            // The kernel batches small writes into large ones and keeps
            // size/mtime itself; every cipher file is opened read-write, so
            // the partial-page reads it needs always work.
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
            // We clear set-id bits on writes ourselves; the kernel then
            // asks for security.capability only once per inode.
            let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent.0, name) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        // (fuser's BATCH_FORGET calls this per node, with the same request.)
        let read = req.unique().0;
        if self.io_uring && self.forget_read.swap(read, Ordering::Relaxed) != read {
            std::thread::sleep(FORGET_PAUSE);
        }
        let gone = self
            .nodes
            .lock()
            .is_ok_and(|mut t| t.forget(ino.0, nlookup));
        if gone {
            self.dir_fds.forget(ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.do_setattr(
            ino.0,
            SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(ts),
                mtime: mtime.map(ts),
            },
        );
        match r {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.do_readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match self.do_mknod(parent.0, name, mode & !umask, rdev, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.do_mkdir(parent.0, name, mode & !umask, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.do_unlink(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.do_rmdir(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self.do_symlink(parent.0, link_name, target, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.do_rename(parent.0, name, newparent.0, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.do_link(ino.0, newparent.0, newname) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != fuser::OpenAccMode::O_RDONLY;
        match self.do_open(ino.0, write) {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), FopenFlags::from_bits_retain(flags)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read_with(fh.0, offset, size, |r| match r {
            Ok(d) => reply.data(d),
            Err(e) => reply.error(e),
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.do_write_killing(fh.0, offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes reach the cipher file before they are acknowledged, and
        // the kernel reports a failed write-back to close() itself (it
        // checks the page cache's errors before it would send FLUSH), so
        // a close has nothing to do here: ENOSYS tells the kernel to stop
        // sending FLUSH at all (one round trip less per close).
        reply.error(Errno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.release_file(fh.0);
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.do_fsync(fh.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Not implemented: the kernel stops sending OPENDIR and RELEASEDIR
    /// and caches listings itself (see `listings.rs`).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let (l, pos) = match self.dir_items(ino.0, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        for (i, it) in l.items.iter().enumerate().skip(pos) {
            if reply.add(INodeNo(it.ino), l.offset_after(i), it.kind, &it.name) {
                break;
            }
        }
        self.dir_read_done(&l, pos);
        reply.ok()
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let (l, pos) = match self.dir_items(ino.0, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let r = self.fill_readdirplus(&l, pos, &mut reply);
        self.dir_read_done(&l, pos);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.do_setxattr(ino.0, name, value, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(self.do_getxattr(ino.0, name), size, reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(self.do_listxattr(ino.0), size, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.do_removexattr(ino.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.do_fallocate(ino.0, fh.0, offset, length, mode);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Only asked when the kernel does not check permissions itself (a
    /// mount for its owner only; see `mount.rs`).
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.do_access(ino.0, req.uid(), req.gid(), mask.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.do_create(parent.0, name, mode, umask, flags, req.uid(), req.gid());
        match r {
            Ok((a, fh, flags)) => reply.created(
                &self.ttl,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::from_bits_retain(flags),
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn reply_xattr(v: Result<Vec<u8>, Errno>, size: u32, reply: ReplyXattr) {
    match v.and_then(|v| XattrAnswer::for_size(v, size)) {
        Ok(XattrAnswer::Size(n)) => reply.size(n),
        Ok(XattrAnswer::Data(d)) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}
