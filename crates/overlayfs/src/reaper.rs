//! Deferred release of removed files. Unlinking the last name of a backing
//! file makes the backing file system free its data there and then (tmpfs
//! returns every page, ext4 truncates its extents), inside the UNLINK
//! request the caller waits for. The overlay instead opens the file
//! `O_PATH` before unlinking it, so the unlink only drops the name, and
//! hands the descriptor to this reaper, whose thread closes it and so does
//! the freeing on another CPU, off the request path (as XFS defers inode
//! inactivation to a background worker).
//!
//! Nothing is lost if the daemon dies: the kernel closes the descriptors and
//! frees the files then. At most [`MAX_PENDING`] descriptors wait; beyond
//! that the caller closes its own, as a plain unlink would. A change that
//! finds the backing file system full calls [`Reaper::flush`] and tries
//! once more (`room.rs`), so space freed by a removal is there
//! for the next write as it would be without the reaper (XFS likewise
//! flushes its deferred inactivations on ENOSPC).

use cryptkeep_overlay::at;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most descriptors waiting to be closed at once.
pub(crate) const MAX_PENDING: usize = 1024;

/// How long the thread sleeps between batches while removals keep coming;
/// it blocks (and must be woken) only after a pass that found nothing.
const BATCH_PAUSE: Duration = Duration::from_millis(2);

/// Opens entry `name` of the open directory `dir` itself (`O_PATH |
/// O_NOFOLLOW`: no access needed, a symlink is not followed), which keeps
/// its inode alive after the last name is removed.
pub(crate) fn pin_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    at::open_at(dir, name, libc::O_PATH, 0)
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Vec<OwnedFd>>,
    /// Held by the thread while it closes a batch it took out of `pending`.
    closing: Mutex<()>,
    wake: Condvar,
    /// The thread is blocked on `wake` (not merely pausing between batches).
    blocked: AtomicBool,
    stop: AtomicBool,
}

/// The background closer of removed files' descriptors; [`Reaper::stop`]
/// (or drop) closes what is left and joins the thread.
pub(crate) struct Reaper {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// [`MAX_PENDING`], smaller in tests.
    max_pending: usize,
}

impl Reaper {
    /// Starts the thread (`ck-reaper`); `None` if it cannot be spawned, and
    /// then every removal frees its file itself.
    pub(crate) fn start() -> Option<Reaper> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ck-reaper".into())
            .spawn(move || run(&s))
            .ok()?;
        Some(Reaper {
            shared,
            thread: Mutex::new(Some(thread)),
            max_pending: MAX_PENDING,
        })
    }

    /// Queues `fd` to be closed on the reaper's thread, or closes it here
    /// when [`MAX_PENDING`] already wait or the reaper has stopped.
    pub(crate) fn release(&self, fd: OwnedFd) {
        if self.shared.stop.load(Ordering::Acquire) {
            return drop(fd);
        }
        let Ok(mut p) = self.shared.pending.lock() else {
            return drop(fd);
        };
        if p.len() >= self.max_pending {
            drop(p);
            return drop(fd);
        }
        p.push(fd);
        drop(p);
        if self.shared.blocked.load(Ordering::Acquire) {
            self.shared.wake.notify_one();
        }
    }

    /// Closes, on this thread, everything queued, and waits for the batch
    /// the reaper thread may be closing; returns whether anything was
    /// queued or being closed (so that space may have come back).
    pub(crate) fn flush(&self) -> bool {
        let queued = self
            .shared
            .pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let mut freed = !queued.is_empty();
        drop(queued);
        match self.shared.closing.try_lock() {
            Ok(_) => {}
            Err(_) => {
                freed = true;
                drop(self.shared.closing.lock());
            }
        }
        freed
    }

    /// Closes what is pending and joins the thread.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
        if let Ok(mut p) = self.shared.pending.lock() {
            p.clear();
        }
    }

    /// A reaper without a thread: what is queued stays until flushed.
    #[cfg(test)]
    pub(crate) fn threadless(max_pending: usize) -> Reaper {
        Reaper {
            shared: Arc::default(),
            thread: Mutex::new(None),
            max_pending,
        }
    }

    /// The descriptors waiting (for tests).
    #[cfg(test)]
    pub(crate) fn pending_raw(&self) -> Vec<i32> {
        use std::os::fd::AsRawFd;
        self.shared
            .pending
            .lock()
            .map_or(Vec::new(), |p| p.iter().map(|f| f.as_raw_fd()).collect())
    }

    /// How many descriptors wait (for tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.shared.pending.lock().map_or(0, |p| p.len())
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(s: &Shared) {
    loop {
        let Ok(closing) = s.closing.lock() else {
            return;
        };
        let batch = match s.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => return,
        };
        let found = !batch.is_empty();
        drop(batch);
        drop(closing);
        if s.stop.load(Ordering::Acquire) {
            // Whatever was queued after the last take.
            if let Ok(mut p) = s.pending.lock() {
                p.clear();
            }
            return;
        }
        if found {
            std::thread::sleep(BATCH_PAUSE);
            continue;
        }
        let Ok(p) = s.pending.lock() else { return };
        s.blocked.store(true, Ordering::Release);
        // Re-checked under the lock: a release that saw `blocked` false
        // pushed before we took the lock, so the queue is not empty.
        let p = s
            .wake
            .wait_while(p, |p| p.is_empty() && !s.stop.load(Ordering::Acquire));
        s.blocked.store(false, Ordering::Release);
        drop(p);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;

    /// A pipe: the read end sees end-of-file once the write end is closed.
    pub(crate) fn pipe() -> (std::fs::File, OwnedFd) {
        let (r, w) = std::io::pipe().unwrap();
        (OwnedFd::from(r).into(), OwnedFd::from(w))
    }

    /// Whether `r`'s write end is closed (read returns end-of-file).
    pub(crate) fn closed(r: &mut std::fs::File) -> bool {
        r.read(&mut [0u8; 1]).unwrap() == 0
    }

    #[test]
    fn released_descriptors_are_closed_in_the_background() {
        let r = Reaper::start().unwrap();
        for round in 0..3 {
            let (mut readers, writers): (Vec<_>, Vec<_>) = (0..50).map(|_| pipe()).unzip();
            for w in writers {
                r.release(w);
            }
            // Each read blocks until the reaper closes that write end.
            assert!(
                readers.iter_mut().all(closed),
                "round {round}: a write end was left open"
            );
            assert_eq!(r.pending(), 0);
            // Let the thread block, so the next round needs a wake-up.
            std::thread::sleep(BATCH_PAUSE * 3);
        }
    }

    #[test]
    fn a_stopped_reaper_closes_at_once() {
        let r = Reaper::start().unwrap();
        r.stop();
        let (mut rd, w) = pipe();
        r.release(w);
        assert!(closed(&mut rd), "a stopped reaper must close at once");
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn flush_closes_the_queue_here() {
        let r = Reaper::threadless(MAX_PENDING);
        assert!(!r.flush(), "nothing queued, nothing freed");
        let (mut rd, w) = pipe();
        r.release(w);
        assert_eq!(r.pending(), 1);
        assert!(r.flush());
        assert_eq!(r.pending(), 0);
        assert!(closed(&mut rd));
    }

    #[test]
    fn beyond_the_limit_the_caller_closes() {
        // No thread: what is queued stays queued.
        let r = Reaper::threadless(2);
        let (mut readers, writers): (Vec<_>, Vec<_>) = (0..3).map(|_| pipe()).unzip();
        for w in writers {
            r.release(w);
        }
        assert_eq!(r.pending(), 2);
        assert!(closed(&mut readers[2]), "the third must be closed at once");
        r.stop();
        assert!(readers[..2].iter_mut().all(closed));
    }
}
