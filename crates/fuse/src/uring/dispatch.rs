//! One FUSE request from an io_uring queue, answered with the file
//! system's [`Ops`]: the request's fixed argument struct is in `op_in`,
//! names and data in the payload; the answer is the out arguments,
//! concatenated. Opcodes the file system does not implement get ENOSYS,
//! as from the `/dev/fuse` front end.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use fuser::{Errno, RenameFlags};

use super::abi::*;
use crate::ops::{DirPlusSink, DirSink, FileType, Ops, SetAttr, XattrAnswer};

type R<T> = Result<T, Errno>;

/// Answers one request: the out arguments, or an errno.
pub(crate) fn handle(fs: &Arc<dyn Ops>, h: &InHeader, op_in: &[u8], payload: &[u8]) -> R<Vec<u8>> {
    let f = Fields(op_in);
    let ttl = fs.ttl().as_secs();
    let ino = h.nodeid;
    let name = |n: usize| -> R<Vec<&OsStr>> { cstrs(payload, n).ok_or(Errno::EINVAL) };
    let mut o = Out::default();
    match h.opcode {
        LOOKUP => {
            o.entry(&fs.lookup(ino, name(1)?[0])?, ttl);
        }
        GETATTR => {
            o.attr_out(&fs.getattr(ino)?, ttl);
        }
        SETATTR => {
            let valid = f.u32(0);
            let has = |bit: u32| valid & bit != 0;
            let time = |set: u32, now: u32, secs: usize, nsecs: usize| {
                if has(now) {
                    Some(None)
                } else if has(set) {
                    Some(Some((f.u64(secs) as i64, i64::from(f.u32(nsecs)))))
                } else {
                    None
                }
            };
            let s = SetAttr {
                mode: has(FATTR_MODE).then(|| f.u32(68)),
                uid: has(FATTR_UID).then(|| f.u32(76)),
                gid: has(FATTR_GID).then(|| f.u32(80)),
                size: has(FATTR_SIZE).then(|| f.u64(16)),
                atime: time(FATTR_ATIME, FATTR_ATIME_NOW, 32, 56),
                mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, 40, 60),
            };
            o.attr_out(&fs.setattr(ino, s)?, ttl);
        }
        READLINK => o.0 = fs.readlink(ino)?,
        SYMLINK => {
            let n = name(2)?;
            o.entry(&fs.symlink(ino, n[0], Path::new(n[1]), h.uid, h.gid)?, ttl);
        }
        MKNOD => {
            let (mode, rdev, umask) = (f.u32(0), f.u32(4), f.u32(8));
            let a = fs.mknod(ino, name(1)?[0], mode & !umask, rdev, h.uid, h.gid)?;
            o.entry(&a, ttl);
        }
        MKDIR => {
            let (mode, umask) = (f.u32(0), f.u32(4));
            o.entry(
                &fs.mkdir(ino, name(1)?[0], mode & !umask, h.uid, h.gid)?,
                ttl,
            );
        }
        UNLINK => fs.unlink(ino, name(1)?[0])?,
        RMDIR => fs.rmdir(ino, name(1)?[0])?,
        RENAME | RENAME2 => {
            let flags = if h.opcode == RENAME2 { f.u32(8) } else { 0 };
            let n = name(2)?;
            let flags = RenameFlags::from_bits(flags).ok_or(Errno::EINVAL)?;
            fs.rename(ino, n[0], f.u64(0), n[1], flags)?;
        }
        LINK => {
            o.entry(&fs.link(f.u64(0), ino, name(1)?[0])?, ttl);
        }
        OPEN => {
            let (fh, flags) = fs.open(ino, f.u32(0) as i32)?;
            o.open_out(fh, flags);
        }
        // READ is answered in place by the queue (queue.rs).
        WRITE => {
            let size = f.u32(16) as usize;
            let data = payload.get(..size).ok_or(Errno::EINVAL)?;
            let kill = f.u32(20) & WRITE_KILL_SUIDGID != 0;
            let n = fs.write(f.u64(0), f.u64(8), data, kill)?;
            o.u32(n).u32(0);
        }
        STATFS => {
            let s = fs.statfs()?;
            o.u64(s.blocks)
                .u64(s.bfree)
                .u64(s.bavail)
                .u64(s.files)
                .u64(s.ffree);
            o.u32(s.bsize).u32(s.namelen).u32(s.frsize).u32(0);
            o.0.extend_from_slice(&[0u8; 24]);
        }
        RELEASE => fs.release(f.u64(0)),
        FSYNC => fs.fsync(f.u64(0), f.u32(8) & 1 != 0)?,
        SETXATTR => {
            let (size, flags) = (f.u32(0) as usize, f.u32(4) as i32);
            let value = after_cstrs(payload, 1).get(..size).ok_or(Errno::EINVAL)?;
            fs.setxattr(ino, name(1)?[0], value, flags)?;
        }
        GETXATTR | LISTXATTR => {
            let v = if h.opcode == GETXATTR {
                fs.getxattr(ino, name(1)?[0])?
            } else {
                fs.listxattr(ino)?
            };
            match XattrAnswer::for_size(v, f.u32(0))? {
                XattrAnswer::Size(n) => {
                    o.u32(n).u32(0);
                }
                XattrAnswer::Data(d) => o.0 = d,
            }
        }
        REMOVEXATTR => fs.removexattr(ino, name(1)?[0])?,
        FLUSH => fs.flush(f.u64(0))?,
        OPENDIR => {
            let (fh, flags) = fs.opendir(ino)?;
            o.open_out(fh, flags);
        }
        READDIR => {
            let size = f.u32(16) as usize;
            let mut sink = Sink {
                out: Out::default(),
                size,
            };
            fs.readdir(ino, f.u64(8), &mut sink)?;
            o = sink.out;
        }
        READDIRPLUS => {
            let size = f.u32(16) as usize;
            // Room for the whole answer is made at its first entry (none
            // for the empty answer that ends a listing).
            let mut sink = Sink {
                out: Out::default(),
                size,
            };
            fs.readdirplus(ino, f.u64(8), &mut sink)?;
            o = sink.out;
        }
        RELEASEDIR | FSYNCDIR | DESTROY => {}
        ACCESS => fs.access(ino, h.uid, h.gid, f.u32(0) as i32)?,
        CREATE => {
            let (flags, mode, umask) = (f.u32(0) as i32, f.u32(4), f.u32(8));
            let (a, fh, open) = fs.create(ino, name(1)?[0], mode, umask, flags, h.uid, h.gid)?;
            o.entry(&a, ttl).open_out(fh, open);
        }
        FALLOCATE => {
            let (fh, off, len, mode) = (f.u64(0), f.u64(8), f.u64(16), f.u32(24) as i32);
            fs.fallocate(ino, fh, off, len, mode)?;
        }
        _ => return Err(Errno::ENOSYS),
    }
    Ok(o.0)
}

/// `fuse_dirent` or `fuse_direntplus` records into a buffer of `size`
/// bytes.
struct Sink {
    out: Out,
    size: usize,
}

impl DirSink for Sink {
    fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool {
        if self.out.0.len() + dirent_len(name.len()) > self.size {
            return true;
        }
        self.out.dirent(ino, offset, kind, name);
        false
    }
}

impl DirPlusSink for Sink {
    fn add(
        &mut self,
        ino: u64,
        offset: u64,
        name: &OsStr,
        attr: &fuser::FileAttr,
        ttl: std::time::Duration,
    ) -> bool {
        let len = ENTRY_OUT_LEN + dirent_len(name.len());
        if self.out.0.len() + len > self.size {
            return true;
        }
        if self.out.0.capacity() == 0 {
            self.out.0.reserve(self.size.min(1 << 20));
        }
        self.out
            .entry(attr, ttl.as_secs())
            .dirent(ino, offset, attr.kind, name);
        false
    }
}
