//! The writes the server acknowledged since the last successful flush, in
//! the order it acknowledged them. A server that restarts may have lost
//! them (NBD only promises durability after `NBD_CMD_FLUSH`), so after a
//! reconnect they are written again, in order, and flushed, before any
//! other request goes out. NBD writes land at fixed offsets, so writing one
//! again cannot tear anything; replaying in acknowledgement order leaves
//! every byte as the last acknowledged write left it.

use std::collections::VecDeque;

/// Most bytes of flushed buffers kept for reuse (a fresh megabyte costs
/// page faults on every write; a reused one only its copy).
const MAX_SPARE: usize = 64 << 20;

/// One acknowledged, not yet flushed change.
#[derive(Debug)]
pub(crate) enum Change {
    /// Data written at an offset.
    Data {
        /// Byte offset in the export.
        offset: u64,
        /// The bytes (ciphertext).
        bytes: Vec<u8>,
    },
    /// Zeros written (or a hole punched) at an offset.
    Zeroes {
        /// Byte offset in the export.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
}

/// The log of un-flushed changes.
#[derive(Debug, Default)]
pub(crate) struct Unflushed {
    entries: VecDeque<(u64, Change)>,
    next_seq: u64,
    bytes: usize,
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
}

impl Unflushed {
    /// Records a change the server acknowledged.
    pub(crate) fn push(&mut self, c: Change) {
        if let Change::Data { bytes, .. } = &c {
            self.bytes += bytes.len();
        }
        self.entries.push_back((self.next_seq, c));
        self.next_seq += 1;
    }

    /// The mark a flush sent now covers: every change recorded before it.
    pub(crate) fn mark(&self) -> u64 {
        self.next_seq
    }

    /// Forgets the changes a successful flush sent at `mark` made durable
    /// (keeping their buffers for [`Unflushed::buffer`]).
    pub(crate) fn flushed(&mut self, mark: u64) {
        while self.entries.front().is_some_and(|(s, _)| *s < mark) {
            if let Some((_, Change::Data { bytes, .. })) = self.entries.pop_front() {
                self.bytes -= bytes.len();
                if self.spare_bytes + bytes.capacity() <= MAX_SPARE {
                    self.spare_bytes += bytes.capacity();
                    self.spare.push(bytes);
                }
            }
        }
    }

    /// An empty buffer with room for `len` bytes, reused when one is spare.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.iter().rposition(|b| b.capacity() >= len) {
            Some(i) => {
                let mut b = self.spare.swap_remove(i);
                self.spare_bytes -= b.capacity();
                b.clear();
                b
            }
            None => Vec::with_capacity(len),
        }
    }

    /// Bytes of data held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of changes held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The changes, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Change> {
        self.entries.iter().map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_forgets_only_what_it_covers() {
        let mut u = Unflushed::default();
        u.push(Change::Data {
            offset: 0,
            bytes: vec![1; 10],
        });
        u.push(Change::Zeroes { offset: 5, len: 3 });
        let m = u.mark();
        u.push(Change::Data {
            offset: 9,
            bytes: vec![2; 4],
        });
        assert_eq!((u.len(), u.bytes()), (3, 14));
        u.flushed(m);
        assert_eq!((u.len(), u.bytes()), (1, 4));
        assert!(matches!(
            u.iter().next(),
            Some(Change::Data { offset: 9, .. })
        ));
        u.flushed(u.mark());
        assert_eq!((u.len(), u.bytes()), (0, 0));
        // Flushed buffers come back for reuse.
        let b = u.buffer(4);
        assert!(b.is_empty() && b.capacity() >= 4);
        assert_eq!(u.buffer(1 << 20).capacity(), 1 << 20);
    }
}
