//! The table of open files: file handles to inodes, and each open inode's
//! one cipher file shared by all its handles (`data.rs` works on it).

use cryptkeep_overlay::CipherFile;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

/// An inode's open cipher file, with whether a write to it failed.
pub(crate) struct Open {
    pub(crate) cf: RwLock<CipherFile>,
    /// The errno of a failed write (0: none): no later write may start
    /// past the end of the file until a truncation or the last close.
    pub(crate) failed: AtomicI32,
}

impl Open {
    pub(crate) fn new(cf: CipherFile) -> Open {
        Open {
            cf: RwLock::new(cf),
            failed: AtomicI32::new(0),
        }
    }
}

/// An inode's open cipher file and how many handles use it.
pub(crate) struct OpenInode {
    pub(crate) file: Arc<Open>,
    pub(crate) handles: u64,
}

/// File handles → inodes, inodes → their shared cipher file.
#[derive(Default)]
pub(crate) struct OpenFiles {
    pub(crate) next: AtomicU64,
    pub(crate) handles: Mutex<HashMap<u64, u64>>,
    pub(crate) inodes: Mutex<HashMap<u64, OpenInode>>,
}
