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
use super::wire::{
    parse, AccessIn, CreateIn, FallocateIn, FlushIn, FsyncIn, GetxattrIn, GetxattrOut, InHeader,
    LinkIn, MkdirIn, MknodIn, OpenIn, ReadIn, ReleaseIn, Rename2In, RenameIn, SetattrIn,
    SetxattrIn, WriteIn, WriteOut,
};
use crate::ops::{DirPlusSink, DirSink, FileType, Ops, SetAttr, XattrAnswer};

type R<T> = Result<T, Errno>;

/// Answers one request: the out arguments, or an errno. `op_in` is the
/// request's fixed argument struct, `payload` its names and data; a
/// request too short for its struct is EINVAL.
pub(crate) fn handle(fs: &Arc<dyn Ops>, h: &InHeader, op_in: &[u8], payload: &[u8]) -> R<Vec<u8>> {
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
            let a: SetattrIn = parse(op_in)?;
            let has = |bit: u32| a.valid & bit != 0;
            let time = |set: u32, now: u32, secs: u64, nsecs: u32| {
                if has(now) {
                    Some(None)
                } else if has(set) {
                    Some(Some((secs as i64, i64::from(nsecs))))
                } else {
                    None
                }
            };
            let s = SetAttr {
                mode: has(FATTR_MODE).then_some(a.mode),
                uid: has(FATTR_UID).then_some(a.uid),
                gid: has(FATTR_GID).then_some(a.gid),
                size: has(FATTR_SIZE).then_some(a.size),
                atime: time(FATTR_ATIME, FATTR_ATIME_NOW, a.atime, a.atimensec),
                mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, a.mtime, a.mtimensec),
            };
            o.attr_out(&fs.setattr(ino, s)?, ttl);
        }
        READLINK => o.0 = fs.readlink(ino)?,
        SYMLINK => {
            let n = name(2)?;
            o.entry(&fs.symlink(ino, n[0], Path::new(n[1]), h.uid, h.gid)?, ttl);
        }
        MKNOD => {
            let a: MknodIn = parse(op_in)?;
            let e = fs.mknod(ino, name(1)?[0], a.mode & !a.umask, a.rdev, h.uid, h.gid)?;
            o.entry(&e, ttl);
        }
        MKDIR => {
            let a: MkdirIn = parse(op_in)?;
            o.entry(
                &fs.mkdir(ino, name(1)?[0], a.mode & !a.umask, h.uid, h.gid)?,
                ttl,
            );
        }
        UNLINK => fs.unlink(ino, name(1)?[0])?,
        RMDIR => fs.rmdir(ino, name(1)?[0])?,
        RENAME | RENAME2 => {
            let (newdir, flags) = if h.opcode == RENAME2 {
                let a: Rename2In = parse(op_in)?;
                (a.newdir, a.flags)
            } else {
                (parse::<RenameIn>(op_in)?.newdir, 0)
            };
            let n = name(2)?;
            let flags = RenameFlags::from_bits(flags).ok_or(Errno::EINVAL)?;
            fs.rename(ino, n[0], newdir, n[1], flags)?;
        }
        LINK => {
            let a: LinkIn = parse(op_in)?;
            o.entry(&fs.link(a.oldnodeid, ino, name(1)?[0])?, ttl);
        }
        OPEN => {
            let a: OpenIn = parse(op_in)?;
            let (fh, flags) = fs.open(ino, a.flags as i32)?;
            o.open_out(fh, flags);
        }
        // READ is answered in place by the queue (queue.rs).
        WRITE => {
            let a: WriteIn = parse(op_in)?;
            let data = payload.get(..a.size as usize).ok_or(Errno::EINVAL)?;
            let kill = a.write_flags & WRITE_KILL_SUIDGID != 0;
            let n = fs.write(a.fh, a.offset, data, kill)?;
            o.put(&WriteOut {
                size: n,
                padding: 0,
            });
        }
        STATFS => {
            o.statfs(&fs.statfs()?);
        }
        RELEASE => fs.release(parse::<ReleaseIn>(op_in)?.fh),
        FSYNC => {
            let a: FsyncIn = parse(op_in)?;
            fs.fsync(a.fh, a.fsync_flags & 1 != 0)?;
        }
        SETXATTR => {
            let a: SetxattrIn = parse(op_in)?;
            let value = after_cstrs(payload, 1)
                .get(..a.size as usize)
                .ok_or(Errno::EINVAL)?;
            fs.setxattr(ino, name(1)?[0], value, a.flags as i32)?;
        }
        GETXATTR | LISTXATTR => {
            let a: GetxattrIn = parse(op_in)?;
            let v = if h.opcode == GETXATTR {
                fs.getxattr(ino, name(1)?[0])?
            } else {
                fs.listxattr(ino)?
            };
            match XattrAnswer::for_size(v, a.size)? {
                XattrAnswer::Size(n) => {
                    o.put(&GetxattrOut {
                        size: n,
                        padding: 0,
                    });
                }
                XattrAnswer::Data(d) => o.0 = d,
            }
        }
        REMOVEXATTR => fs.removexattr(ino, name(1)?[0])?,
        FLUSH => fs.flush(parse::<FlushIn>(op_in)?.fh)?,
        OPENDIR => {
            let (fh, flags) = fs.opendir(ino)?;
            o.open_out(fh, flags);
        }
        READDIR => {
            let a: ReadIn = parse(op_in)?;
            let mut sink = Sink {
                out: Out::default(),
                size: a.size as usize,
            };
            fs.readdir(ino, a.offset, &mut sink)?;
            o = sink.out;
        }
        READDIRPLUS => {
            let a: ReadIn = parse(op_in)?;
            // Room for the whole answer is made at its first entry (none
            // for the empty answer that ends a listing).
            let mut sink = Sink {
                out: Out::default(),
                size: a.size as usize,
            };
            fs.readdirplus(ino, a.offset, &mut sink)?;
            o = sink.out;
        }
        RELEASEDIR | FSYNCDIR | DESTROY => {}
        ACCESS => fs.access(ino, h.uid, h.gid, parse::<AccessIn>(op_in)?.mask as i32)?,
        CREATE => {
            let a: CreateIn = parse(op_in)?;
            let (attr, fh, open) = fs.create(
                ino,
                name(1)?[0],
                a.mode,
                a.umask,
                a.flags as i32,
                h.uid,
                h.gid,
            )?;
            o.entry(&attr, ttl).open_out(fh, open);
        }
        FALLOCATE => {
            let a: FallocateIn = parse(op_in)?;
            fs.fallocate(ino, a.fh, a.offset, a.length, a.mode as i32)?;
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
