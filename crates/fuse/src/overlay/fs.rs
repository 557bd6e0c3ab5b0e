//! [`OverlayFs`]: the `fuser::Filesystem` of the gocryptfs-format overlay.
//! This file only dispatches and replies; the work is in `entries.rs`
//! (names), `data.rs` (contents), `xattr.rs` and `attr.rs`.

use cryptkeep_overlay::{sys, CipherDir};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::attr::{io_errno, permits, TTL};
use super::data::OpenFiles;
use super::entries::DirItem;
use super::inodes::Inodes;

/// The overlay file system over one opened cipher directory.
pub(crate) struct OverlayFs {
    pub(crate) cd: Arc<CipherDir>,
    pub(crate) inodes: Mutex<Inodes>,
    pub(crate) dir_ivs: Mutex<HashMap<std::path::PathBuf, cryptkeep_overlay::DirIv>>,
    pub(crate) files: OpenFiles,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirItem>>>>,
    next_dir: AtomicU64,
    pub(crate) read_only: bool,
    pub(crate) root_ino: u64,
    pub(crate) is_root: bool,
    writeback_cache: bool,
}

impl OverlayFs {
    pub(crate) fn new(
        cd: Arc<CipherDir>,
        read_only: bool,
        writeback_cache: bool,
    ) -> std::io::Result<OverlayFs> {
        let root_ino = std::fs::metadata(cd.root())?.ino();
        Ok(OverlayFs {
            inodes: Mutex::new(Inodes::new(cd.root())),
            dir_ivs: Mutex::new(HashMap::new()),
            files: OpenFiles::default(),
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            read_only,
            writeback_cache: writeback_cache && !read_only,
            root_ino,
            // SAFETY: geteuid has no preconditions and cannot fail.
            is_root: unsafe { libc::geteuid() } == 0,
            cd,
        })
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

impl Filesystem for OverlayFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(n) = config.set_max_write(1 << 20) {
            let _ = config.set_max_write(n);
        }
        if let Err(n) = config.set_max_readahead(1 << 20) {
            let _ = config.set_max_readahead(n);
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Listings carry attributes (READDIRPLUS), when the kernel sees
        // lookups follow a listing or it is the first read of a directory.
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
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
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Ok(mut t) = self.inodes.lock() {
            t.forget(ino.0, nlookup);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
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
        let r = (|| {
            if self.read_only {
                return Err(Errno::EROFS);
            }
            if let Some(s) = size {
                self.truncate(ino.0, s)?;
            }
            let meta = mode.is_some()
                || uid.is_some()
                || gid.is_some()
                || atime.is_some()
                || mtime.is_some();
            if !meta {
                return self.attr_of(ino.0);
            }
            // An open file (maybe already unlinked) through its descriptor.
            if let Some(r) = self.set_meta_open(ino.0, mode, uid, gid, atime.map(ts), mtime.map(ts))
            {
                r?;
                return self.attr_of(ino.0);
            }
            let p = self.path_of(ino.0)?;
            if let Some(m) = mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(|e| io_errno(&e))?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&p, uid, gid).map_err(|e| io_errno(&e))?;
            }
            if atime.is_some() || mtime.is_some() {
                sys::set_times_opt(&p, atime.map(ts), mtime.map(ts)).map_err(|e| io_errno(&e))?;
            }
            self.attr_of(ino.0)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
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
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
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
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
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
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
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
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.read_only && flags.acc_mode() != fuser::OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        match self.open_file(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
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
        match self.do_read(fh.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
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
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            self.kill_suid(fh.0);
        }
        match self.do_write(fh.0, offset, data) {
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
        // Writes reach the cipher file before they are acknowledged, so a
        // close has nothing to flush: ENOSYS tells the kernel to stop
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

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.snapshot_dir(ino.0) {
            Ok(items) => {
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
                match self.dirs.lock() {
                    Ok(mut d) => {
                        d.insert(fh, Arc::new(items));
                        reply.opened(FileHandle(fh), FopenFlags::empty())
                    }
                    Err(_) => reply.error(Errno::EIO),
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let items = match self.dirs.lock().ok().and_then(|d| d.get(&fh.0).cloned()) {
            Some(i) => i,
            None => return reply.error(Errno::EBADF),
        };
        for (i, it) in items.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(it.ino), i as u64 + 1, it.kind, &it.name) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let items = match self.dirs.lock().ok().and_then(|d| d.get(&fh.0).cloned()) {
            Some(i) => i,
            None => return reply.error(Errno::EBADF),
        };
        match self.fill_readdirplus(ino.0, &items, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut d) = self.dirs.lock() {
            d.remove(&fh.0);
        }
        reply.ok()
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
        match sys::statvfs(self.cd.root()) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                255,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(io_errno(&e)),
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
        match self.do_getxattr(ino.0, name) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.do_listxattr(ino.0) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
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
        match self.attr_of(ino.0) {
            Ok(a) if permits(&a, req.uid(), req.gid(), mask.bits()) => reply.ok(),
            Ok(_) => reply.error(Errno::EACCES),
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
        let r = (|| {
            let perm = mode & !umask & 0o7777;
            let excl = flags & libc::O_EXCL != 0;
            let (path, a, f) = self.create_entry_fd(parent.0, name, req.uid(), req.gid(), |p| {
                use std::os::unix::fs::OpenOptionsExt;
                let new = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(perm)
                    .open(p);
                match new {
                    Ok(f) => {
                        // The mode exactly, whatever our umask.
                        f.set_permissions(std::fs::Permissions::from_mode(perm))?;
                        Ok(Some((f, false)))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && !excl => {
                        let f = std::fs::OpenOptions::new().read(true).write(true).open(p)?;
                        Ok(Some((f, true)))
                    }
                    Err(e) => Err(e),
                }
            })?;
            let f = f.ok_or(Errno::EIO)?;
            let fh = self.open_file_with(a.ino.0, f, &path)?;
            Ok::<_, Errno>((a, fh))
        })();
        match r {
            Ok((a, fh)) => {
                reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }
}
