//! [`BlockFs`]: the block file's [`Ops`]. Metadata operations are here;
//! data operations are in `data.rs`.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::attr::{file_attr, root_attr, FILE, ROOT, TTL};
use super::store::{BlockStore, Errnos};
use super::{BlockFileOptions, BlockFileTuning};
use crate::ops::{DirSink, Errno, FileAttr, FileType, Ops, SetAttr, Statfs, Wants, R};

/// The block file system: one store behind one file.
pub(crate) struct BlockFs<S> {
    pub(crate) engine: Errnos<S>,
    pub(crate) read_only: bool,
    pub(crate) allow_discards: bool,
    file_name: OsString,
    tuning: BlockFileTuning,
    mounted_at: SystemTime,
}

impl<S: BlockStore> BlockFs<S> {
    /// With `allow_discards` the engine is switched to reading holes as
    /// zeros, because the loop driver sends "write zeroes" as a hole punch.
    pub(crate) fn new(
        engine: Arc<S>,
        opts: &BlockFileOptions,
        tuning: BlockFileTuning,
    ) -> BlockFs<S> {
        if opts.allow_discards {
            engine.allow_discards();
        }
        BlockFs {
            read_only: opts.read_only || engine.read_only(),
            allow_discards: opts.allow_discards,
            file_name: OsString::from(&opts.file_name),
            tuning,
            mounted_at: SystemTime::now(),
            engine: Errnos(engine),
        }
    }

    fn attr_of(&self, ino: u64) -> R<FileAttr> {
        match ino {
            ROOT => Ok(root_attr(self.mounted_at)),
            FILE => Ok(file_attr(
                self.engine.size(),
                self.engine.block_size(),
                self.mounted_at,
            )),
            _ => Err(Errno::ENOENT),
        }
    }
}

impl<S: BlockStore> Ops for BlockFs<S> {
    /// Big requests, asynchronous direct I/O, many requests in flight.
    ///
    /// The loop driver's queue allows 128 segments, so with scattered
    /// pages a 1 MiB direct I/O usually reaches the file as 512 KiB
    /// requests (sometimes merged up to 1 MiB); `max_pages` is not the
    /// limit then.
    fn wants(&self) -> Wants {
        Wants {
            async_dio: true,
            max_io: self.tuning.max_io.max(4096),
            max_background: self.tuning.max_background,
            ..Wants::default()
        }
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    fn destroy(&self) {
        // Best effort: the kernel is gone, nobody could hear an error.
        let _ = self.engine.flush();
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        if parent != ROOT {
            return Err(Errno::ENOTDIR);
        }
        if name != self.file_name.as_os_str() {
            return Err(Errno::ENOENT);
        }
        self.attr_of(FILE)
    }

    fn getattr(&self, ino: u64) -> R<FileAttr> {
        self.attr_of(ino)
    }

    fn setattr(&self, ino: u64, s: SetAttr) -> R<FileAttr> {
        let a = self.attr_of(ino)?;
        // The volume has a fixed size and fixed ownership; timestamps are
        // accepted and ignored (so `touch` works).
        if s.mode.is_some() || s.uid.is_some() || s.gid.is_some() {
            return Err(Errno::EPERM);
        }
        match s.size {
            Some(n) if n != a.size && self.read_only => Err(Errno::EROFS),
            Some(n) if n != a.size => Err(Errno::EPERM),
            _ => Ok(a),
        }
    }

    fn open(&self, ino: u64, flags: i32) -> R<(u64, u32)> {
        if ino != FILE {
            return Err(Errno::EISDIR);
        }
        if self.read_only && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EROFS);
        }
        let direct =
            fuser::FopenFlags::FOPEN_DIRECT_IO | fuser::FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        Ok((FILE, direct.bits()))
    }

    fn read(&self, fh: u64, off: u64, out: &mut [u8]) -> R<usize> {
        if fh != FILE {
            return Err(Errno::EISDIR);
        }
        self.read_data(off, out)
    }

    fn read_borrowed(
        &self,
        fh: u64,
        off: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<R<()>> {
        if fh != FILE {
            return Some(Err(Errno::EISDIR));
        }
        super::flusher::mark_thread();
        self.engine.read_borrowed(off, size, send)
    }

    fn write(&self, fh: u64, off: u64, data: &[u8], _kill_suidgid: bool) -> R<u32> {
        if fh != FILE {
            return Err(Errno::EISDIR);
        }
        self.write_data(off, data)
    }

    fn flush(&self, _fh: u64) -> R<()> {
        self.sync()
    }

    fn fsync(&self, _fh: u64, _datasync: bool) -> R<()> {
        self.sync()
    }

    fn fallocate(&self, ino: u64, _fh: u64, off: u64, len: u64, mode: i32) -> R<()> {
        if ino != FILE {
            return Err(Errno::EISDIR);
        }
        self.allocate(off, len, mode)
    }

    fn readdir(&self, ino: u64, offset: u64, sink: &mut dyn DirSink) -> R<()> {
        if ino != ROOT {
            return Err(Errno::ENOTDIR);
        }
        let entries: [(u64, FileType, &OsStr); 3] = [
            (ROOT, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
            (FILE, FileType::RegularFile, self.file_name.as_os_str()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if sink.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        Ok(())
    }

    fn statfs(&self) -> R<Statfs> {
        // One 4 KiB block size: the loop device takes its discard
        // granularity from f_bsize.
        Ok(Statfs {
            blocks: self.engine.size() / 4096,
            bfree: 0,
            bavail: 0,
            files: 2,
            ffree: 0,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }
}
