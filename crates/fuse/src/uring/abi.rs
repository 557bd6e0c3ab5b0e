//! The FUSE wire structures the io_uring queues read and write, as
//! `include/uapi/linux/fuse.h` (protocol 7.42+) lays them out: little
//! endian, no padding beyond what the header declares. Requests are read
//! with bounds-checked field getters; answers are built into byte vectors.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType};

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
pub(crate) const IN_HEADER_LEN: usize = 40;
/// `sizeof(struct fuse_out_header)`.
pub(crate) const OUT_HEADER_LEN: usize = 16;
/// `sizeof(struct fuse_entry_out)`.
pub(crate) const ENTRY_OUT_LEN: usize = 128;

/// A little-endian field reader over a byte slice; out-of-range reads
/// give 0 (the kernel always sends whole structs, and a short one must not
/// crash the daemon).
pub(crate) struct Fields<'a>(pub(crate) &'a [u8]);

impl Fields<'_> {
    pub(crate) fn u32(&self, off: usize) -> u32 {
        self.0
            .get(off..off + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&self, off: usize) -> u64 {
        self.0.get(off..off + 8).map_or(0, |b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    }
}

/// The request header (`struct fuse_in_header`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InHeader {
    pub(crate) opcode: u32,
    pub(crate) unique: u64,
    pub(crate) nodeid: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl InHeader {
    pub(crate) fn parse(b: &[u8]) -> InHeader {
        let f = Fields(b);
        InHeader {
            opcode: f.u32(4),
            unique: f.u64(8),
            nodeid: f.u64(16),
            uid: f.u32(24),
            gid: f.u32(28),
        }
    }
}

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
    pub(crate) fn u32(&mut self, v: u32) -> &mut Out {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Out {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// `struct fuse_attr` (88 bytes).
    pub(crate) fn attr(&mut self, a: &FileAttr) -> &mut Out {
        let (at, an) = time(a.atime);
        let (mt, mn) = time(a.mtime);
        let (ct, cn) = time(a.ctime);
        self.u64(a.ino.0).u64(a.size).u64(a.blocks);
        self.u64(at).u64(mt).u64(ct).u32(an).u32(mn).u32(cn);
        self.u32(mode(a.kind, a.perm))
            .u32(a.nlink)
            .u32(a.uid)
            .u32(a.gid);
        self.u32(a.rdev).u32(a.blksize).u32(0)
    }

    /// `struct fuse_entry_out` (128 bytes): node, generation 0, validity.
    pub(crate) fn entry(&mut self, a: &FileAttr, ttl_secs: u64) -> &mut Out {
        self.u64(a.ino.0)
            .u64(0)
            .u64(ttl_secs)
            .u64(ttl_secs)
            .u32(0)
            .u32(0);
        self.attr(a)
    }

    /// `struct fuse_attr_out` (104 bytes).
    pub(crate) fn attr_out(&mut self, a: &FileAttr, ttl_secs: u64) -> &mut Out {
        self.u64(ttl_secs).u32(0).u32(0);
        self.attr(a)
    }

    /// `struct fuse_open_out` (16 bytes).
    pub(crate) fn open_out(&mut self, fh: u64, open_flags: u32) -> &mut Out {
        self.u64(fh).u32(open_flags).u32(0)
    }

    /// `struct fuse_dirent` with its name, padded to 8 bytes.
    pub(crate) fn dirent(&mut self, ino: u64, off: u64, kind: FileType, name: &OsStr) -> &mut Out {
        let n = name.as_bytes();
        self.u64(ino)
            .u64(off)
            .u32(n.len() as u32)
            .u32(mode(kind, 0) >> 12);
        self.0.extend_from_slice(n);
        let pad = dirent_len(n.len()) - 24 - n.len();
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
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
        let f = Fields(b);
        assert_eq!(f.u64(0), 42);
        assert_eq!(f.u64(8), 5000);
        assert_eq!(f.u64(24), 1_700_000_000);
        assert_eq!(f.u64(32) as i64, -11);
        assert_eq!(f.u32(52), 750_000_000);
        assert_eq!(f.u32(48), 5);
        assert_eq!(f.u32(60), libc::S_IFREG | 0o640);
        assert_eq!(f.u32(64), 2);
        assert_eq!(f.u32(80), 4096);
        let mut e = Out::default();
        e.entry(&attr(), 1);
        assert_eq!(e.0.len(), ENTRY_OUT_LEN);
        assert_eq!(Fields(&e.0).u64(40), 42);
        let mut a = Out::default();
        a.attr_out(&attr(), 1);
        assert_eq!(a.0.len(), 104);
        let mut d = Out::default();
        d.dirent(7, 3, FileType::Directory, OsStr::new("abc"));
        assert_eq!(d.0.len(), 32);
        assert_eq!(Fields(&d.0).u32(20), libc::DT_DIR as u32);
        assert_eq!(&d.0[24..27], b"abc");
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
