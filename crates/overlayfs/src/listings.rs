//! Directory listings served without OPENDIR. OPENDIR answers ENOSYS, so
//! the kernel (Linux ≥ 5.1, `FUSE_NO_OPENDIR_SUPPORT`) sends neither
//! OPENDIR nor RELEASEDIR again and keeps a listing in its page cache as
//! if `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE` had been answered: a tree walk
//! pays two round trips per directory instead of four.
//!
//! With no handle to hang a listing on, the offsets carry it: a read at
//! offset 0 takes a snapshot of the directory, and every entry's offset
//! holds the snapshot's number in bits 32..63 and the entry's position in
//! bits 0..31, so the next chunk continues in the same snapshot (entries
//! created or removed meanwhile neither repeat nor go missing). A snapshot
//! is dropped when a read finds nothing left, or, for readers that stop
//! early, once [`KEPT`] newer ones exist; a read whose snapshot is gone
//! lists again and resumes at the same position.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::items::DirItem;
use super::prefetch::Prestat;

/// Snapshots kept for readers that have not reached the end.
const KEPT: usize = 256;

/// One snapshot of a directory.
#[derive(Clone)]
pub(crate) struct Listing {
    /// The directory's inode.
    pub(crate) ino: u64,
    /// Its number, the upper half of its entries' offsets (never 0).
    id: u32,
    /// "." and "..", then the entries.
    pub(crate) items: Arc<Vec<DirItem>>,
    /// The entries' attributes, when the listing was read ahead.
    pub(crate) stats: Option<Arc<Prestat>>,
}

impl Listing {
    /// The offset a read resumes at after entry `i`.
    pub(crate) fn offset_after(&self, i: usize) -> u64 {
        (u64::from(self.id) << 32) | (i as u64 + 1)
    }
}

/// The snapshot number and position an offset names.
pub(crate) fn split_offset(offset: u64) -> (u32, usize) {
    ((offset >> 32) as u32, (offset & 0xffff_ffff) as usize)
}

/// Snapshots being read, by number.
#[derive(Default)]
pub(crate) struct Listings {
    by_id: HashMap<u32, Listing>,
    order: VecDeque<u32>,
    last: u32,
}

impl Listings {
    /// Snapshot `id` of directory `ino`, if it is still kept.
    pub(crate) fn get(&self, ino: u64, id: u32) -> Option<Listing> {
        self.by_id.get(&id).filter(|l| l.ino == ino).cloned()
    }

    /// Keeps a new snapshot of `ino`, dropping the oldest beyond [`KEPT`].
    pub(crate) fn insert(
        &mut self,
        ino: u64,
        items: Vec<DirItem>,
        stats: Option<Prestat>,
    ) -> Listing {
        // Numbers stay within 31 bits, so offsets stay positive (loff_t).
        self.last = self.last % 0x7fff_ffff + 1;
        let l = Listing {
            ino,
            id: self.last,
            items: Arc::new(items),
            stats: stats.map(Arc::new),
        };
        self.by_id.insert(l.id, l.clone());
        self.order.push_back(l.id);
        while self.order.len() > KEPT {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
        l
    }

    /// A reader reached the end of `l`.
    pub(crate) fn finish(&mut self, l: &Listing) {
        if self.by_id.remove(&l.id).is_some() {
            self.order.retain(|&i| i != l.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cryptkeep_fuse::ops::FileType;

    fn item(name: &str) -> DirItem {
        DirItem {
            ino: 7,
            kind: FileType::RegularFile,
            name: name.into(),
            cipher: name.into(),
        }
    }

    #[test]
    fn offsets_name_the_snapshot_and_the_position() {
        let mut t = Listings::default();
        let a = t.insert(5, vec![item("a"), item("b")], None);
        let b = t.insert(5, vec![item("c")], None);
        let (id, pos) = split_offset(a.offset_after(1));
        assert_eq!(pos, 2);
        assert_eq!(t.get(5, id).unwrap().items[0].name, "a");
        assert!(t.get(6, id).is_none(), "another directory's offset");
        let (id, pos) = split_offset(b.offset_after(0));
        assert_eq!(
            (t.get(5, id).unwrap().items[0].name.to_str(), pos),
            (Some("c"), 1)
        );
        t.finish(&a);
        assert!(t.get(5, split_offset(a.offset_after(0)).0).is_none());
        assert!(t.get(5, split_offset(b.offset_after(0)).0).is_some());
    }

    #[test]
    fn readers_that_stop_early_do_not_pile_up() {
        let mut t = Listings::default();
        let first = t.insert(1, vec![item("x")], None);
        for _ in 0..KEPT {
            t.insert(1, vec![], None);
        }
        assert!(t.get(1, split_offset(first.offset_after(0)).0).is_none());
        assert_eq!(t.by_id.len(), KEPT);
        assert_eq!(t.order.len(), KEPT);
    }

    #[test]
    fn numbers_wrap_within_31_bits_and_skip_zero() {
        let mut t = Listings {
            last: 0x7fff_fffe,
            ..Listings::default()
        };
        assert_eq!(t.insert(1, vec![], None).id, 0x7fff_ffff);
        let l = t.insert(1, vec![], None);
        assert_eq!(l.id, 1);
        assert!(l.offset_after(usize::MAX >> 33) < 1 << 63);
    }
}
