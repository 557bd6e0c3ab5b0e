//! [`Pool`]: the buffers of finished requests, kept for the next ones, so
//! that a request neither faults in fresh pages nor zeroes its buffer.

use std::sync::Mutex;

/// Buffers larger than this are not kept.
const KEEP_MAX: usize = 4 << 20;

/// Reusable byte buffers; a buffer's whole length is usable (its contents
/// are whatever the last request left).
pub(crate) struct Pool {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

impl Pool {
    /// A pool keeping at most `keep` buffers.
    pub(crate) fn new(keep: usize) -> Pool {
        Pool {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// A buffer of at least `n` bytes.
    pub(crate) fn take(&self, n: usize) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = free.iter().position(|b| b.len() >= n) {
            return free.swap_remove(i);
        }
        drop(free);
        vec![0u8; n]
    }

    /// Gives a buffer back (dropped when the pool is full or it is large).
    pub(crate) fn give(&self, b: Vec<u8>) {
        if b.is_empty() || b.len() > KEEP_MAX {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < self.keep {
            free.push(b);
        } else if let Some(small) = free.iter_mut().min_by_key(|x| x.len()) {
            // Keep the larger buffers: they fit more requests.
            if small.len() < b.len() {
                *small = b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_big_enough_buffers() {
        let p = Pool::new(2);
        let mut a = p.take(100);
        a[0] = 7;
        p.give(a);
        let b = p.take(50);
        assert_eq!((b.len(), b[0]), (100, 7));
        p.give(b);
        assert_eq!(p.take(200).len(), 200);
        p.give(vec![0; 10]);
        p.give(vec![0; 20]);
        p.give(vec![0; 30]);
        assert_eq!(p.take(25).len(), 100);
        assert_eq!(p.take(25).len(), 30);
    }
}
