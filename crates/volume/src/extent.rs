//! [`Extent`]: one run of an allocation map, as a store or a backing
//! device tells it.

/// One run of bytes with the same allocation state, as
/// [`crate::BlockStore::extents`] and [`crate::BackingDevice::allocation`]
/// answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes.
    pub len: u64,
    /// Not allocated in the backing store (a hole).
    pub hole: bool,
    /// Reads as zeros.
    pub zero: bool,
}
