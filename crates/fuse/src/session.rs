//! [`Session`]: a file system's [`Ops`] served as a `fuser::Filesystem`
//! (requests read from `/dev/fuse`). It also holds what belongs to the
//! transport rather than to the file system: whether requests come over
//! io_uring (then `/dev/fuse` carries only INIT, FORGET and INTERRUPT)
//! and the pause that batches FORGETs.

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ops::{DirPlusSink, DirSink, FileType, Ops, SetAttr, XattrAnswer, R};

/// How long the `/dev/fuse` thread of an io_uring mount pauses before it
/// handles the FORGETs one read brought. Every FORGET queued while a
/// reader waits on `/dev/fuse` wakes it: a cross-CPU wake-up, paid in the
/// process that removed or evicted the file, per file. While nobody waits
/// the kernel only queues them, and the next read takes them all as one
/// BATCH_FORGET. Only INIT, FORGET and INTERRUPT come that way then.
const FORGET_PAUSE: Duration = Duration::from_millis(10);

/// Largest request or answer payload: max_write and max_pages (see
/// `Session::init`) are at most 1 MiB.
pub(crate) const MAX_PAYLOAD: usize = 1 << 20;

/// A file system served over `/dev/fuse`.
pub(crate) struct Session<F> {
    pub(crate) fs: Arc<F>,
    /// Ask the kernel for FUSE over io_uring at INIT.
    pub(crate) io_uring: bool,
    /// Set when io_uring was asked for and the kernel (or fuser) refused.
    pub(crate) uring_refused: Arc<AtomicBool>,
    /// The `/dev/fuse` request the last FORGET came with.
    forget_read: AtomicU64,
}

impl<F: Ops> Session<F> {
    pub(crate) fn new(fs: Arc<F>, io_uring: bool) -> Session<F> {
        Session {
            fs,
            io_uring,
            uring_refused: Arc::default(),
            forget_read: AtomicU64::new(0),
        }
    }
}

fn ts(t: TimeOrNow) -> Option<(i64, i64)> {
    match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(st) => Some(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
            Err(e) => (-(e.duration().as_secs() as i64), 0),
        }),
    }
}

fn empty(r: R<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl<F: Ops> Filesystem for Session<F> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wants = self.fs.wants();
        // Whatever the kernel refuses is left at the nearest value it
        // accepts; fuser derives max_pages from max(max_write, max_readahead).
        let max_io = match wants.max_io {
            0 => MAX_PAYLOAD as u32,
            n => n.clamp(4096, MAX_PAYLOAD as u32),
        };
        if let Err(n) = config.set_max_write(max_io) {
            let _ = config.set_max_write(n);
        }
        if let Err(n) = config.set_max_readahead(max_io) {
            let _ = config.set_max_readahead(n);
        }
        if wants.async_dio {
            let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        }
        if wants.max_background > 0 {
            let _ = config.set_max_background(wants.max_background);
            let congestion = (u32::from(wants.max_background) * 3 / 4).max(1) as u16;
            let _ = config.set_congestion_threshold(congestion);
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // A file system may answer FOPEN_DIRECT_IO; mmap of such files
        // still works.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        if self.io_uring
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_err()
        {
            // The mount sees this and refuses, saying why.
            self.uring_refused.store(true, Ordering::Release);
        }
        if wants.readdirplus {
            // Every listing carries attributes (READDIRPLUS, not _AUTO:
            // with _AUTO the kernel asks for them only in a directory's
            // first chunk, and each entry of a large directory's later
            // chunks then costs a LOOKUP when du, rsync or ls -l stats it).
            let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        }
        if wants.writeback_cache {
            // The kernel batches small writes into large ones and keeps
            // size/mtime itself.
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
            // The file system clears set-id bits on writes itself; the
            // kernel then asks for security.capability only once per inode.
            let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.fs.destroy();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name) {
            Ok(a) => reply.entry(&self.fs.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        // (fuser's BATCH_FORGET calls this per node, with the same request.)
        let read = req.unique().0;
        if self.io_uring && self.forget_read.swap(read, Ordering::Relaxed) != read {
            std::thread::sleep(FORGET_PAUSE);
        }
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.fs.ttl(), &a),
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
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(ts),
            mtime: mtime.map(ts),
        };
        match self.fs.setattr(ino.0, s) {
            Ok(a) => reply.attr(&self.fs.ttl(), &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
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
        let r = self
            .fs
            .mknod(parent.0, name, mode & !umask, rdev, req.uid(), req.gid());
        match r {
            Ok(a) => reply.entry(&self.fs.ttl(), &a, Generation(0)),
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
        match self
            .fs
            .mkdir(parent.0, name, mode & !umask, req.uid(), req.gid())
        {
            Ok(a) => reply.entry(&self.fs.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.unlink(parent.0, name), reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.rmdir(parent.0, name), reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self
            .fs
            .symlink(parent.0, link_name, target, req.uid(), req.gid())
        {
            Ok(a) => reply.entry(&self.fs.ttl(), &a, Generation(0)),
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
        empty(
            self.fs.rename(parent.0, name, newparent.0, newname, flags),
            reply,
        )
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.fs.link(ino.0, newparent.0, newname) {
            Ok(a) => reply.entry(&self.fs.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.open(ino.0, flags.0) {
            Ok((fh, f)) => reply.opened(FileHandle(fh), FopenFlags::from_bits_retain(f)),
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
        let mut reply = Some(reply);
        let mut send = |data: &[u8]| {
            if let Some(r) = reply.take() {
                r.data(data)
            }
        };
        match self
            .fs
            .read_borrowed(fh.0, offset, size as usize, &mut send)
        {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                if let Some(r) = reply.take() {
                    r.error(e)
                }
            }
            None => {
                let Some(reply) = reply.take() else { return };
                crate::read_buf::with(size as usize, |buf| match self.fs.read(fh.0, offset, buf) {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(e),
                })
            }
        }
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
        match self.fs.write(fh.0, offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        empty(self.fs.flush(fh.0), reply)
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
        self.fs.release(fh.0);
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.fs.fsync(fh.0, datasync), reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(ino.0) {
            Ok((fh, f)) => reply.opened(FileHandle(fh), FopenFlags::from_bits_retain(f)),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.fs.readdir(ino.0, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.fs.readdirplus(ino.0, offset, &mut reply) {
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
        match self.fs.statfs() {
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
        empty(self.fs.setxattr(ino.0, name, value, flags), reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(self.fs.getxattr(ino.0, name), size, reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(self.fs.listxattr(ino.0), size, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.fs.removexattr(ino.0, name), reply)
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
        empty(self.fs.fallocate(ino.0, fh.0, offset, length, mode), reply)
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        empty(
            self.fs.access(ino.0, req.uid(), req.gid(), mask.bits()),
            reply,
        )
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
        let r = self
            .fs
            .create(parent.0, name, mode, umask, flags, req.uid(), req.gid());
        match r {
            Ok((a, fh, f)) => reply.created(
                &self.fs.ttl(),
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::from_bits_retain(f),
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

impl DirSink for ReplyDirectory {
    fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool {
        ReplyDirectory::add(self, INodeNo(ino), offset, kind, name)
    }
}

impl DirPlusSink for ReplyDirectoryPlus {
    fn add(
        &mut self,
        ino: u64,
        offset: u64,
        name: &OsStr,
        attr: &fuser::FileAttr,
        ttl: Duration,
    ) -> bool {
        ReplyDirectoryPlus::add(self, INodeNo(ino), offset, name, &ttl, attr, Generation(0))
    }
}
