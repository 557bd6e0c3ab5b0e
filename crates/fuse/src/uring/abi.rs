//! The FUSE protocol's constants, the strings in request payloads, and
//! answers built from the typed wire structures of `wire.rs`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType};
use zerocopy::IntoBytes;

use super::wire::{
    Attr, AttrOutHead, DirentHead, EntryOutHead, InHeader, OpenOut, OutHeader, StatfsOut,
};

// Opcodes (enum fuse_opcode).
pub(crate) const LOOKUP: u32 = 1;
pub(crate) const GETATTR: u32 = 3;
pub(crate) const SETATTR: u32 = 4;
pub(crate) const READLINK: u32 = 5;
pub(crate) const SYMLINK: u32 = 6;
pub(crate) const MKNOD: u32 = 8;
pub(crate) const MKDIR: u32 = 9;
pub(crate) const UNLINK: u32 = 10;
pub(crate) const RMDIR: u32 = 11;
pub(crate) const RENAME: u32 = 12;
pub(crate) const LINK: u32 = 13;
pub(crate) const OPEN: u32 = 14;
pub(crate) const READ: u32 = 15;
pub(crate) const WRITE: u32 = 16;
pub(crate) const STATFS: u32 = 17;
pub(crate) const RELEASE: u32 = 18;
pub(crate) const FSYNC: u32 = 20;
pub(crate) const SETXATTR: u32 = 21;
pub(crate) const GETXATTR: u32 = 22;
pub(crate) const LISTXATTR: u32 = 23;
pub(crate) const REMOVEXATTR: u32 = 24;
pub(crate) const FLUSH: u32 = 25;
pub(crate) const OPENDIR: u32 = 27;
pub(crate) const READDIR: u32 = 28;
pub(crate) const RELEASEDIR: u32 = 29;
pub(crate) const FSYNCDIR: u32 = 30;
pub(crate) const ACCESS: u32 = 34;
pub(crate) const CREATE: u32 = 35;
pub(crate) const DESTROY: u32 = 38;
pub(crate) const FALLOCATE: u32 = 43;
pub(crate) const READDIRPLUS: u32 = 44;
pub(crate) const RENAME2: u32 = 45;

// fuse_setattr_in.valid bits.
pub(crate) const FATTR_MODE: u32 = 1 << 0;
pub(crate) const FATTR_UID: u32 = 1 << 1;
pub(crate) const FATTR_GID: u32 = 1 << 2;
pub(crate) const FATTR_SIZE: u32 = 1 << 3;
pub(crate) const FATTR_ATIME: u32 = 1 << 4;
pub(crate) const FATTR_MTIME: u32 = 1 << 5;
pub(crate) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(crate) const FATTR_MTIME_NOW: u32 = 1 << 8;
/// fuse_write_in.write_flags: clear set-id bits.
pub(crate) const WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// `sizeof(struct fuse_in_header)`.
pub(crate) const IN_HEADER_LEN: usize = std::mem::size_of::<InHeader>();
/// `sizeof(struct fuse_out_header)`.
pub(crate) const OUT_HEADER_LEN: usize = std::mem::size_of::<OutHeader>();
/// `sizeof(struct fuse_entry_out)`.
pub(crate) const ENTRY_OUT_LEN: usize =
    std::mem::size_of::<EntryOutHead>() + std::mem::size_of::<Attr>();

/// The NUL-terminated strings at the start of a payload (names, targets).
pub(crate) fn cstrs(payload: &[u8], n: usize) -> Option<Vec<&OsStr>> {
    let mut out = Vec::with_capacity(n);
    let mut rest = payload;
    for _ in 0..n {
        let end = rest.iter().position(|&b| b == 0)?;
        out.push(OsStr::from_bytes(&rest[..end]));
        rest = &rest[end + 1..];
    }
    Some(out)
}

/// What follows the first `n` NUL-terminated strings of a payload.
pub(crate) fn after_cstrs(payload: &[u8], n: usize) -> &[u8] {
    let mut rest = payload;
    for _ in 0..n {
        match rest.iter().position(|&b| b == 0) {
            Some(end) => rest = &rest[end + 1..],
            None => return &[],
        }
    }
    rest
}

/// An answer being built.
#[derive(Default)]
pub(crate) struct Out(pub(crate) Vec<u8>);

impl Out {
    /// Appends a wire struct.
    pub(crate) fn put<T: IntoBytes + zerocopy::Immutable>(&mut self, v: &T) -> &mut Out {
        self.0.extend_from_slice(v.as_bytes());
        self
    }

    /// `struct fuse_attr` (88 bytes).
    pub(crate) fn attr(&mut self, a: &FileAttr) -> &mut Out {
        let (atime, atimensec) = time(a.atime);
        let (mtime, mtimensec) = time(a.mtime);
        let (ctime, ctimensec) = time(a.ctime);
        self.put(&Attr {
            ino: a.ino.0,
            size: a.size,
            blocks: a.blocks,
            atime,
            mtime,
            ctime,
            atimensec,
            mtimensec,
            ctimensec,
            mode: mode(a.kind, a.perm),
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: a.blksize,
            flags: 0,
        })
    }

    /// `struct fuse_entry_out` (128 bytes): node, generation 0, validity.
    pub(crate) fn entry(&mut self, a: &FileAttr, ttl_secs: u64) -> &mut Out {
        self.put(&EntryOutHead {
            nodeid: a.ino.0,
            generation: 0,
            entry_valid: ttl_secs,
            attr_valid: ttl_secs,
            ..EntryOutHead::default()
        });
        self.attr(a)
    }

    /// `struct fuse_attr_out` (104 bytes).
    pub(crate) fn attr_out(&mut self, a: &FileAttr, ttl_secs: u64) -> &mut Out {
        self.put(&AttrOutHead {
            attr_valid: ttl_secs,
            ..AttrOutHead::default()
        });
        self.attr(a)
    }

    /// `struct fuse_open_out` (16 bytes).
    pub(crate) fn open_out(&mut self, fh: u64, open_flags: u32) -> &mut Out {
        self.put(&OpenOut {
            fh,
            open_flags,
            backing_id: 0,
        })
    }

    /// `struct fuse_statfs_out` (80 bytes).
    pub(crate) fn statfs(&mut self, s: &crate::ops::Statfs) -> &mut Out {
        self.put(&StatfsOut {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.frsize,
            ..StatfsOut::default()
        })
    }

    /// `struct fuse_dirent` with its name, padded to 8 bytes.
    pub(crate) fn dirent(&mut self, ino: u64, off: u64, kind: FileType, name: &OsStr) -> &mut Out {
        let n = name.as_bytes();
        self.put(&DirentHead {
            ino,
            off,
            namelen: n.len() as u32,
            kind: mode(kind, 0) >> 12,
        });
        self.0.extend_from_slice(n);
        let pad = dirent_len(n.len()) - std::mem::size_of::<DirentHead>() - n.len();
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
    }
}

/// The answer header (`fuse_out_header`) for an answer of `out_len` bytes.
pub(crate) fn out_header(unique: u64, error: i32, out_len: usize) -> OutHeader {
    OutHeader {
        len: (OUT_HEADER_LEN + out_len) as u32,
        error,
        unique,
    }
}

/// Bytes a `fuse_dirent` with a name of `n` bytes takes.
pub(crate) fn dirent_len(n: usize) -> usize {
    (24 + n).div_ceil(8) * 8
}

/// `st_mode` of a kind and permission bits.
pub(crate) fn mode(kind: FileType, perm: u16) -> u32 {
    (match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }) | u32::from(perm)
}

/// Seconds (two's complement before 1970) and nanoseconds.
fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                ((-(d.as_secs() as i64)) as u64, 0)
            } else {
                (
                    (-(d.as_secs() as i64) - 1) as u64,
                    1_000_000_000 - d.subsec_nanos(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::INodeNo;
    use std::time::Duration;

    fn attr() -> FileAttr {
        FileAttr {
            ino: INodeNo(42),
            size: 5000,
            blocks: 16,
            atime: UNIX_EPOCH + Duration::new(1_700_000_000, 5),
            mtime: UNIX_EPOCH - Duration::new(10, 250_000_000),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0o640,
            nlink: 2,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The layouts against their C offsets (fuse.h).
    #[test]
    fn structs_have_the_kernel_layout() {
        let mut o = Out::default();
        o.attr(&attr());
        let b = &o.0;
        assert_eq!(b.len(), 88);
        let u64_at = |b: &[u8], o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u64_at(b, 0), 42);
        assert_eq!(u64_at(b, 8), 5000);
        assert_eq!(u64_at(b, 24), 1_700_000_000);
        assert_eq!(u64_at(b, 32) as i64, -11);
        assert_eq!(u32_at(b, 52), 750_000_000);
        assert_eq!(u32_at(b, 48), 5);
        assert_eq!(u32_at(b, 60), libc::S_IFREG | 0o640);
        assert_eq!(u32_at(b, 64), 2);
        assert_eq!(u32_at(b, 80), 4096);
        let mut e = Out::default();
        e.entry(&attr(), 1);
        assert_eq!(e.0.len(), ENTRY_OUT_LEN);
        assert_eq!(ENTRY_OUT_LEN, 128);
        assert_eq!(u64_at(&e.0, 40), 42);
        let mut a = Out::default();
        a.attr_out(&attr(), 1);
        assert_eq!(a.0.len(), 104);
        let mut d = Out::default();
        d.dirent(7, 3, FileType::Directory, OsStr::new("abc"));
        assert_eq!(d.0.len(), 32);
        assert_eq!(u32_at(&d.0, 20), libc::DT_DIR as u32);
        assert_eq!(&d.0[24..27], b"abc");
        let mut s = Out::default();
        s.statfs(&crate::ops::Statfs::default());
        assert_eq!(s.0.len(), 80);
    }

    #[test]
    fn strings_in_payloads() {
        let p = b"old\0new\0rest";
        let v = cstrs(p, 2).unwrap();
        assert_eq!(v, [OsStr::new("old"), OsStr::new("new")]);
        assert_eq!(after_cstrs(p, 2), b"rest");
        assert!(cstrs(b"no terminator", 1).is_none());
        assert_eq!(after_cstrs(b"x", 1), b"");
    }
}
