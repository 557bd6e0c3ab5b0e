//! [`Budget`]: a counting semaphore. Bytes of requests in flight on one
//! connection (the reader takes before it reads a payload or queues a
//! read; workers give back when the reply is sent), and store calls at
//! once over all connections (one each).

use std::sync::{Condvar, Mutex};

/// A counting semaphore in bytes.
pub(crate) struct Budget {
    used: Mutex<usize>,
    freed: Condvar,
    cap: usize,
}

impl Budget {
    /// A budget of `cap` bytes.
    pub(crate) fn new(cap: usize) -> Budget {
        Budget {
            used: Mutex::new(0),
            freed: Condvar::new(),
            cap,
        }
    }

    /// Waits until `n` bytes fit (a request larger than the whole budget
    /// runs alone), then takes them.
    pub(crate) fn take(&self, n: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && *used + n > self.cap {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
    }

    /// Gives `n` bytes back and wakes one waiter. One is enough where
    /// every waiter takes the same amount (the store calls of all
    /// connections, one each) or only one thread takes (a connection's
    /// reader); waking them all made every finished store call wake every
    /// worker waiting for one, to find one slot free.
    pub(crate) fn give(&self, n: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(n);
        drop(used);
        self.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waits_for_room() {
        let b = Arc::new(Budget::new(10));
        b.take(8);
        let b2 = b.clone();
        let t = std::thread::spawn(move || b2.take(5));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished());
        b.give(8);
        t.join().unwrap();
        // A request above the cap runs alone.
        b.give(5);
        b.take(100);
    }
}
