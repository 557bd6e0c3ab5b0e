//! Backing `stat` → plaintext attributes, and overlay errors → errno.

use cryptkeep_fuse::ops::{Errno, FileAttr, FileType, INodeNo};
use cryptkeep_overlay::{CipherDir, Error};
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::nodes::ROOT_INO;

/// Attribute and entry cache time of the reverse view, whose plaintext
/// directory is changed directly, not through the mount (gocryptfs: 1 s).
pub(crate) const REVERSE_TTL: Duration = Duration::from_secs(1);

fn time(s: i64, ns: i64) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
    }
}

/// The FUSE inode number of a backing file (`root_ino` maps to 1).
pub(crate) fn ino_of(st_ino: u64, root_ino: u64) -> u64 {
    if st_ino == root_ino {
        ROOT_INO
    } else {
        st_ino
    }
}

/// The plaintext attributes of an open backing file with metadata `m`
/// (regular files report their plaintext size).
pub(crate) fn attr(cd: &CipherDir, m: &Metadata, root_ino: u64) -> FileAttr {
    attr_stat(cd, &raw_stat(m), root_ino, OsStr::new(""), || None)
}

/// The plaintext attributes of the backing entry `name` whose `stat(2)`
/// is `st`: regular files report their plaintext size, symlinks their
/// decrypted target's length (`target` reads the stored one).
pub(crate) fn attr_stat(
    cd: &CipherDir,
    st: &libc::stat,
    root_ino: u64,
    name: &OsStr,
    target: impl FnOnce() -> Option<OsString>,
) -> FileAttr {
    let k = kind_of_mode(st.st_mode);
    let len = st.st_size as u64;
    let size = match k {
        FileType::RegularFile => cd.content().plain_size(len),
        FileType::Symlink => target()
            .and_then(|t| cd.decrypt_symlink_target(&t, Path::new(name)).ok())
            .map_or(len, |t| t.len() as u64),
        _ => len,
    };
    FileAttr {
        ino: INodeNo(ino_of(st.st_ino, root_ino)),
        size,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: time(st.st_ctime, st.st_ctime_nsec),
        kind: k,
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes sent with the "." and ".." entries of a READDIRPLUS
/// answer: the kernel takes only their inode number and type from it
/// (`fuse_direntplus_link` skips dot entries), so nothing is stat'ed.
pub(crate) fn dot_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The `stat(2)` fields of `m` that [`attr_stat`] reads.
fn raw_stat(m: &Metadata) -> libc::stat {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = m.mode();
    st.st_ino = m.ino();
    st.st_size = m.size() as i64;
    st.st_blocks = m.blocks() as i64;
    (st.st_atime, st.st_atime_nsec) = (m.atime(), m.atime_nsec());
    (st.st_mtime, st.st_mtime_nsec) = (m.mtime(), m.mtime_nsec());
    (st.st_ctime, st.st_ctime_nsec) = (m.ctime(), m.ctime_nsec());
    st.st_nlink = m.nlink();
    st.st_uid = m.uid();
    st.st_gid = m.gid();
    st.st_rdev = m.rdev();
    st
}

/// The FUSE file type of a directory entry's `d_type` (`None` for
/// `DT_UNKNOWN`: the file system does not say, ask `fstatat`).
pub(crate) fn kind_of_dtype(d: u8) -> Option<FileType> {
    Some(match d {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_REG => FileType::RegularFile,
        _ => return None,
    })
}

/// The FUSE file type of a `st_mode`.
pub(crate) fn kind_of_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Whether a caller with `uid`/`gid` may access a file with attributes `a`
/// for `mask` (`R_OK|W_OK|X_OK` bits), by the owner/group/other mode bits
/// as POSIX `access(2)` defines them; root passes except for execute,
/// which needs an execute bit somewhere (directories always pass).
/// Supplementary groups are not known here and not consulted.
pub(crate) fn permits(a: &FileAttr, uid: u32, gid: u32, mask: i32) -> bool {
    let want = (mask & 7) as u16;
    if uid == 0 {
        return want & 1 == 0 || a.kind == FileType::Directory || a.perm & 0o111 != 0;
    }
    let bits = if a.uid == uid {
        a.perm >> 6
    } else if a.gid == gid {
        a.perm >> 3
    } else {
        a.perm
    } & 7;
    bits & want == want
}

/// The errno for an overlay error. Integrity failures are EIO and logged
/// (file and block), as gocryptfs does.
pub(crate) fn errno(e: &Error) -> Errno {
    match e {
        Error::Io { source, .. } => source.raw_os_error().map_or(Errno::EIO, Errno::from_i32),
        Error::InvalidName { name, .. } if name.len() > 255 => Errno::ENAMETOOLONG,
        Error::InvalidName { .. } => Errno::EINVAL,
        Error::InvalidArgument(_) => Errno::EINVAL,
        _ => {
            eprintln!("cryptkeep fs: {e}");
            Errno::EIO
        }
    }
}

/// The errno of an I/O error.
pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EIO, Errno::from_i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(kind: FileType, perm: u16) -> FileAttr {
        FileAttr {
            kind,
            perm,
            nlink: 1,
            uid: 1000,
            gid: 100,
            ..dot_attr(2)
        }
    }

    #[test]
    fn access_follows_the_mode_bits() {
        let (r, w, x) = (libc::R_OK, libc::W_OK, libc::X_OK);
        let f = a(FileType::RegularFile, 0o640);
        assert!(permits(&f, 1000, 1, r | w));
        assert!(!permits(&f, 1000, 1, x));
        assert!(permits(&f, 2000, 100, r));
        assert!(!permits(&f, 2000, 100, w));
        assert!(!permits(&f, 2000, 7, r));
        assert!(permits(&f, 2000, 7, libc::F_OK));
        // root: everything but executing a file without any x bit
        assert!(permits(&f, 0, 0, r | w));
        assert!(!permits(&f, 0, 0, x));
        assert!(permits(&a(FileType::RegularFile, 0o001), 0, 0, x));
        assert!(permits(&a(FileType::Directory, 0o000), 0, 0, r | w | x));
    }
}
