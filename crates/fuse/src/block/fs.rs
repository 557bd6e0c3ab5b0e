//! [`BlockFs`]: the `fuser::Filesystem` of the block file. Metadata
//! operations are here; data operations are in `data.rs`, the INIT
//! negotiation in `init.rs`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::sync::Arc;
use std::time::SystemTime;

use cryptkeep_volume::Engine;
use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::attr::{file_attr, root_attr, FILE, ROOT, TTL};
use super::{BlockFileOptions, BlockFileTuning};

/// The block file system: one engine behind one file.
pub(crate) struct BlockFs {
    pub(crate) engine: Arc<Engine>,
    pub(crate) read_only: bool,
    pub(crate) allow_discards: bool,
    file_name: OsString,
    pub(crate) tuning: BlockFileTuning,
    mounted_at: SystemTime,
}

impl BlockFs {
    /// With `allow_discards` the engine is switched to reading holes as
    /// zeros, because the loop driver sends "write zeroes" as a hole punch.
    pub(crate) fn new(
        engine: Arc<Engine>,
        opts: &BlockFileOptions,
        tuning: BlockFileTuning,
    ) -> BlockFs {
        if opts.allow_discards {
            engine.set_holes_read_as_zero(true);
        }
        BlockFs {
            read_only: opts.read_only || engine.read_only(),
            allow_discards: opts.allow_discards,
            file_name: OsString::from(&opts.file_name),
            tuning,
            mounted_at: SystemTime::now(),
            engine,
        }
    }

    fn attr_of(&self, ino: INodeNo) -> Option<FileAttr> {
        match ino {
            ROOT => Some(root_attr(self.mounted_at)),
            FILE => Some(file_attr(
                self.engine.size(),
                self.engine.sector_size(),
                self.mounted_at,
            )),
            _ => None,
        }
    }
}

/// The errno a FUSE reply carries for an engine error.
pub(crate) fn errno_of(e: &cryptkeep_volume::Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl Filesystem for BlockFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        super::init::negotiate(config, &self.tuning);
        Ok(())
    }

    fn destroy(&mut self) {
        // Best effort: the kernel is gone, nobody could hear an error.
        let _ = self.engine.flush();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        match self.attr_of(FILE) {
            Some(a) if name == self.file_name.as_os_str() => reply.entry(&TTL, &a, Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
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
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(a) = self.attr_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        // The volume has a fixed size and fixed ownership; timestamps are
        // accepted and ignored (so `touch` works).
        if mode.is_some() || uid.is_some() || gid.is_some() {
            return reply.error(Errno::EPERM);
        }
        if let Some(s) = size {
            if s != a.size {
                return reply.error(if self.read_only {
                    Errno::EROFS
                } else {
                    Errno::EPERM
                });
            }
        }
        reply.attr(&TTL, &a)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino != FILE {
            return reply.error(Errno::EISDIR);
        }
        if self.read_only && flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        )
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != FILE {
            return reply.error(Errno::EISDIR);
        }
        self.read_data(offset, size, reply)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != FILE {
            return reply.error(Errno::EISDIR);
        }
        self.write_data(offset, data, reply)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.sync(reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(reply)
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != FILE {
            return reply.error(Errno::EISDIR);
        }
        self.allocate(offset, length, mode, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries: [(INodeNo, FileType, &OsStr); 3] = [
            (ROOT, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
            (FILE, FileType::RegularFile, self.file_name.as_os_str()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // One 4 KiB block size: the loop device takes its discard
        // granularity from f_bsize.
        let blocks = self.engine.size() / 4096;
        reply.statfs(blocks, 0, 0, 2, 0, 4096, 255, 4096)
    }
}
