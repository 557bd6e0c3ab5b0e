//! [`Backing`]: where a volume's ciphertext lives. A local file or block
//! device is the fast path (positioned system calls, direct reads, hole
//! punching); anything else (an NBD export, a test double) is a
//! [`BackingDevice`]. The engine reads and writes only through here, so it
//! never knows which.

use std::fmt;
use std::fs::File;
use std::io;
use std::sync::Arc;

use crate::extent::Extent;

/// Positioned byte I/O on a backing store that is not a local file.
///
/// Implementations must be safe to call from many threads at once, and a
/// write must have been acknowledged by the store before `write_at` returns.
pub trait BackingDevice: Send + Sync + fmt::Debug {
    /// Fills `buf` from byte `pos`.
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `pos`.
    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<()>;
    /// Makes `[pos, pos + len)` read as zeros, deallocating it where the
    /// store can; `EOPNOTSUPP` if it cannot.
    fn discard(&self, pos: u64, len: u64) -> io::Result<()>;
    /// Makes every completed write durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Size in bytes.
    fn len(&self) -> io::Result<u64>;
    /// The allocation map of `[pos, pos + len)`: runs in order from `pos`
    /// (`hole`: not allocated; `zero`: reads as zeros), covering at least
    /// one byte and at most `len`. `Ok(None)` (the default): the store
    /// cannot tell, so all of it counts as data.
    fn allocation(&self, pos: u64, len: u64) -> io::Result<Option<Vec<Extent>>> {
        let _ = (pos, len);
        Ok(None)
    }
    /// Whether the store is empty (size 0).
    fn is_empty(&self) -> io::Result<bool> {
        self.len().map(|n| n == 0)
    }
}

/// The backing store of an [`crate::Engine`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Backing {
    /// A local image file or block device.
    File(File),
    /// Any other store.
    Device(Arc<dyn BackingDevice>),
}

impl From<File> for Backing {
    fn from(f: File) -> Backing {
        Backing::File(f)
    }
}

impl From<Arc<dyn BackingDevice>> for Backing {
    fn from(d: Arc<dyn BackingDevice>) -> Backing {
        Backing::Device(d)
    }
}
