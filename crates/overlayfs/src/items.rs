//! What a directory listing holds: one [`DirItem`] per entry, shared by
//! the listings READDIR pages through and the prefetched snapshots.

use cryptkeep_fuse::ops::FileType;
use std::ffi::OsString;

/// One entry of a directory snapshot.
pub(crate) struct DirItem {
    pub(crate) ino: u64,
    pub(crate) kind: FileType,
    /// The plaintext name.
    pub(crate) name: OsString,
    /// The name on disk (empty for "." and "..").
    pub(crate) cipher: OsString,
}
