//! Inode numbers and attributes of the block file system's two inodes.

use std::time::{Duration, SystemTime};

use crate::ops::{FileAttr, FileType, INodeNo};

/// The root directory.
pub(crate) const ROOT: u64 = INodeNo::ROOT.0;
/// The volume file.
pub(crate) const FILE: u64 = 2;
/// How long the kernel may cache names and attributes: nothing ever changes.
pub(crate) const TTL: Duration = Duration::from_secs(3600);

fn base(ino: u64, kind: FileType, perm: u16, size: u64, blksize: u32, t: SystemTime) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize,
        flags: 0,
    }
}

/// Attributes of the root directory.
pub(crate) fn root_attr(t: SystemTime) -> FileAttr {
    base(ROOT, FileType::Directory, 0o755, 0, 4096, t)
}

/// Attributes of the volume file: mode 0600, owned by root, the volume's size.
pub(crate) fn file_attr(size: u64, sector_size: usize, t: SystemTime) -> FileAttr {
    base(
        FILE,
        FileType::RegularFile,
        0o600,
        size,
        sector_size as u32,
        t,
    )
}
