//! [`Budget`]: bytes of requests in flight on one connection. The reader
//! takes from it before it reads a payload or queues a read; workers give
//! back when the reply is sent.

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

    /// Gives `n` bytes back.
    pub(crate) fn give(&self, n: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(n);
        self.freed.notify_all();
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
