//! [`Ops`]: the operations a file system offers the transports of this
//! crate (the `fuser` session reading `/dev/fuse`, and FUSE over
//! io_uring), with their arguments decoded and their answers as values.
//! A file system implements it and knows nothing of how requests arrive;
//! the transports know nothing of what the file system is. The
//! vocabulary types are `fuser`'s, re-exported, so file systems need no
//! dependency on it.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

pub use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};

/// An operation's outcome: the answer, or the errno for the caller.
pub type R<T> = Result<T, Errno>;

/// A time to set: `None` is "now", else seconds and nanoseconds.
pub type SetTime = Option<(i64, i64)>;

/// What `setattr` may change (absent fields stay).
#[derive(Debug, Default, Clone, Copy)]
pub struct SetAttr {
    /// Permission bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<SetTime>,
    /// Modification time.
    pub mtime: Option<SetTime>,
}

/// `statfs` of a file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct Statfs {
    /// Blocks in all.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Inodes in all.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}

/// What a file system asks of the kernel at INIT, beyond what every
/// mount of this crate gets.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// The kernel's write cache (`FUSE_WRITEBACK_CACHE`, with
    /// `FUSE_HANDLE_KILLPRIV_V2`: the file system clears set-id bits on
    /// writes that ask it to).
    pub writeback_cache: bool,
    /// Listings with attributes (`FUSE_DO_READDIRPLUS`).
    pub readdirplus: bool,
    /// Direct I/O submitted asynchronously (`FUSE_ASYNC_DIO`): the kernel
    /// keeps many requests of one direct-I/O stream in flight (a loop
    /// device with `--direct-io=on`).
    pub async_dio: bool,
    /// Largest read or write request, in bytes; 0 is 1 MiB. The kernel
    /// grants at most `max_pages` pages (1 MiB by default).
    pub max_io: u32,
    /// Largest number of asynchronous requests in flight (FUSE's
    /// `max_background`, congestion at three quarters); 0 leaves the
    /// kernel's default.
    pub max_background: u16,
}

/// Where `readdir` puts its entries; `add` returns true when full.
pub trait DirSink {
    /// Adds entry `name` (inode `ino`, type `kind`) that a later read
    /// resumes after at `offset`.
    fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool;
}

/// Where `readdirplus` puts its entries, each with attributes the kernel
/// may cache for `ttl` (every entry but "." and ".." counts as a lookup);
/// `add` returns true when full (and the entry was not added).
pub trait DirPlusSink {
    /// Adds entry `name` with attributes `attr`.
    fn add(&mut self, ino: u64, offset: u64, name: &OsStr, attr: &FileAttr, ttl: Duration) -> bool;
}

/// The answer to getxattr/listxattr: the size asked for, or the bytes.
#[derive(Debug)]
pub enum XattrAnswer {
    /// The caller asked for the size only.
    Size(u32),
    /// The value (or the NUL-separated list).
    Data(Vec<u8>),
}

impl XattrAnswer {
    /// The answer for a caller's buffer of `size` bytes (0: size only).
    pub fn for_size(v: Vec<u8>, size: u32) -> R<XattrAnswer> {
        if size == 0 {
            Ok(XattrAnswer::Size(v.len() as u32))
        } else if v.len() > size as usize {
            Err(Errno::ERANGE)
        } else {
            Ok(XattrAnswer::Data(v))
        }
    }
}

/// The operations of a file system served by this crate's transports, in
/// FUSE's terms (inode numbers, file handles; the root is inode 1). Every
/// operation a file system leaves out answers ENOSYS, which for some
/// (OPENDIR, FLUSH) tells the kernel to stop sending it.
#[allow(unused_variables)]
pub trait Ops: Send + Sync + 'static {
    /// What to ask of the kernel at INIT.
    fn wants(&self) -> Wants {
        Wants::default()
    }

    /// How long the kernel may cache entries and attributes.
    fn ttl(&self) -> Duration;

    /// The entry `name` in directory `parent` (a kernel lookup to count).
    fn lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr>;

    /// The kernel dropped `nlookup` lookups of `ino`.
    fn forget(&self, ino: u64, nlookup: u64) {}

    /// Attributes of `ino`.
    fn getattr(&self, ino: u64) -> R<FileAttr>;

    /// Changes attributes of `ino`; answers the new ones.
    fn setattr(&self, ino: u64, s: SetAttr) -> R<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// A symlink's target.
    fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        Err(Errno::ENOSYS)
    }

    /// Creates a node (`mode`: type and permissions, umask applied).
    fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Creates a directory (`mode`: umask applied).
    fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, uid: u32, gid: u32) -> R<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Removes a non-directory.
    fn unlink(&self, parent: u64, name: &OsStr) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// Removes an empty directory.
    fn rmdir(&self, parent: u64, name: &OsStr) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// Creates a symlink to `target`.
    fn symlink(&self, parent: u64, name: &OsStr, target: &Path, uid: u32, gid: u32) -> R<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Renames (`flags`: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
    fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// A new name for `ino`.
    fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// Opens `ino` (`flags`: the `open(2)` flags); answers a handle and
    /// `FOPEN_*` flags.
    fn open(&self, ino: u64, flags: i32) -> R<(u64, u32)> {
        Err(Errno::ENOSYS)
    }

    /// Reads up to `out.len()` bytes of handle `fh` at `off` into `out`;
    /// answers how many (short only at the end of the file).
    fn read(&self, fh: u64, off: u64, out: &mut [u8]) -> R<usize> {
        Err(Errno::ENOSYS)
    }

    /// Answers a READ of up to `size` bytes of handle `fh` at `off` by
    /// handing the bytes to `send` from wherever they were decrypted, with
    /// no copy into the transport's buffer; `send` is called at most once,
    /// and not on error. `None` (the default): this file system has no
    /// such path for the request, and the transport calls [`Ops::read`].
    fn read_borrowed(
        &self,
        fh: u64,
        off: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<R<()>> {
        None
    }

    /// Writes `data` at `off` of handle `fh` (`kill_suidgid`: clear the
    /// set-id bits first); answers how many bytes.
    fn write(&self, fh: u64, off: u64, data: &[u8], kill_suidgid: bool) -> R<u32> {
        Err(Errno::ENOSYS)
    }

    /// A `close()` of handle `fh`.
    fn flush(&self, fh: u64) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// The last close of handle `fh`.
    fn release(&self, fh: u64) {}

    /// `fsync(2)` of handle `fh`.
    fn fsync(&self, fh: u64, datasync: bool) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// Opens directory `ino` for listing; answers a handle and flags.
    /// ENOSYS (the default) makes the kernel list without OPENDIR.
    fn opendir(&self, ino: u64) -> R<(u64, u32)> {
        Err(Errno::ENOSYS)
    }

    /// Lists directory `ino` from `offset` into `sink`.
    fn readdir(&self, ino: u64, offset: u64, sink: &mut dyn DirSink) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// Lists directory `ino` from `offset`, with attributes, into `sink`.
    fn readdirplus(&self, ino: u64, offset: u64, sink: &mut dyn DirPlusSink) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// `statfs` of the file system.
    fn statfs(&self) -> R<Statfs> {
        Err(Errno::ENOSYS)
    }

    /// Sets xattr `name` of `ino` (`flags`: `XATTR_CREATE`/`XATTR_REPLACE`).
    fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// The value of xattr `name` of `ino`.
    fn getxattr(&self, ino: u64, name: &OsStr) -> R<Vec<u8>> {
        Err(Errno::ENOSYS)
    }

    /// The NUL-separated xattr names of `ino`.
    fn listxattr(&self, ino: u64) -> R<Vec<u8>> {
        Err(Errno::ENOSYS)
    }

    /// Removes xattr `name` of `ino`.
    fn removexattr(&self, ino: u64, name: &OsStr) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// `access(2)` of `ino` by `uid`/`gid` for `mask`.
    fn access(&self, ino: u64, uid: u32, gid: u32, mask: i32) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// Creates and opens a file; answers its attributes, a handle and
    /// `FOPEN_*` flags.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64, u32)> {
        Err(Errno::ENOSYS)
    }

    /// `fallocate(2)` on handle `fh` of `ino`.
    fn fallocate(&self, ino: u64, fh: u64, off: u64, len: u64, mode: i32) -> R<()> {
        Err(Errno::ENOSYS)
    }

    /// The session ended (unmounted): stop background work.
    fn destroy(&self) {}
}
