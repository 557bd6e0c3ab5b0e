//! Directory read-ahead. A tree walk (`du`, `rsync`, `find`, `ls -lR`)
//! reads a directory, then each of its subdirectories, one request at a
//! time: without help, listing, decrypting names and stat'ing entries all
//! wait in line behind the walker. When a directory is listed, its
//! subdirectories are queued here, and one worker thread lists them (names
//! decrypted, entries stat'ed) ahead of the walker, on another CPU: last
//! queued first, which in a depth-first walk is the one read next.
//!
//! A prefetched listing is served only while it is as fresh as what the
//! kernel's own caches promise: younger than the mount's cache time-out
//! ([`super::OverlayOptions::cache_ttl`]), and with no change made through
//! the mount since it was taken (every create, remove, rename, write,
//! truncate, attribute or xattr change counts as one). Changes made behind
//! the mount's back are seen within the same time the kernel's attribute
//! and entry caches allow; with no caching (`--sharedstorage`) nothing is
//! read ahead. While the mount is being changed (within [`QUIET`] of the last
//! change), nothing is prefetched: the work would be thrown away.

use cryptkeep_fuse::ops::FileAttr;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::items::DirItem;

/// How long after the last change through the mount read-ahead resumes.
const QUIET: Duration = Duration::from_millis(50);

/// Directories queued at most (the oldest are dropped first).
const QUEUED: usize = 1024;

/// Prefetched listings kept at most.
const READY: usize = 512;

/// One directory listed ahead of its reader.
pub(crate) struct Ready {
    /// "." and "..", then the entries.
    pub(crate) items: Vec<DirItem>,
    /// Each entry's attributes (`None` for "." and "..", and for entries
    /// gone before they were stat'ed).
    pub(crate) stats: Prestat,
}

/// Attributes taken with a listing, and when.
pub(crate) struct Prestat {
    pub(crate) attrs: Vec<Option<FileAttr>>,
    /// The change count read before the listing was taken.
    generation: u64,
    /// When the listing started.
    taken: Instant,
}

/// The read-ahead state of one mount.
#[derive(Default)]
pub(crate) struct Prefetch {
    /// Changes made through the mount.
    changes: AtomicU64,
    /// Milliseconds since `epoch` of the last change.
    last_change_ms: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
    state: Mutex<State>,
    wake: Condvar,
    /// The mount's cache time-out: how long a listing stays fresh.
    ttl: Duration,
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetch")
            .field("changes", &self.generation())
            .finish_non_exhaustive()
    }
}

/// See [`Prefetch::changing`].
pub(crate) struct Changing<'a>(&'a Prefetch);

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.changed();
    }
}

#[derive(Default)]
struct State {
    wanted: VecDeque<u64>,
    ready: HashMap<u64, Ready, foldhash::fast::RandomState>,
    started: bool,
    stopped: bool,
}

impl Prestat {
    /// Whether these attributes may still be handed to the kernel.
    pub(crate) fn fresh(&self, p: &Prefetch) -> bool {
        self.generation == p.generation() && self.taken.elapsed() < p.ttl
    }
}

impl Prefetch {
    /// Read-ahead for a mount whose kernel caches keep entries and
    /// attributes for `ttl` (none when `ttl` is zero).
    pub(crate) fn new(ttl: Duration) -> Prefetch {
        Prefetch {
            ttl,
            ..Prefetch::default()
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    /// Counts a change made through the mount (called after it is made).
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.last_change_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Counts a change when the returned guard drops: hold it across the
    /// change (`let _c = prefetch.changing();`), so every way out of the
    /// changing operation, errors included, counts after the change.
    pub(crate) fn changing(&self) -> Changing<'_> {
        Changing(self)
    }

    /// The number of changes made through the mount so far.
    pub(crate) fn generation(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Starts a [`Prestat`]: call before listing.
    pub(crate) fn start_stats(&self) -> (u64, Instant) {
        (self.generation(), Instant::now())
    }

    /// Finishes a [`Prestat`] begun with [`Self::start_stats`].
    pub(crate) fn stats(attrs: Vec<Option<FileAttr>>, start: (u64, Instant)) -> Prestat {
        Prestat {
            attrs,
            generation: start.0,
            taken: start.1,
        }
    }

    /// The prefetched listing of directory `ino`, if one is ready and
    /// still fresh.
    pub(crate) fn take(&self, ino: u64) -> Option<Ready> {
        let mut st = self.state.lock().ok()?;
        let r = st.ready.remove(&ino)?;
        r.stats.fresh(self).then_some(r)
    }

    /// Queues directories `dirs`, the one to be read first last. Returns
    /// true when the caller must start the worker (the first time).
    pub(crate) fn want(&self, dirs: impl DoubleEndedIterator<Item = u64>) -> bool {
        let quiet = self
            .now_ms()
            .saturating_sub(self.last_change_ms.load(Ordering::Relaxed));
        if self.generation() != 0 && quiet < QUIET.as_millis() as u64 {
            return false;
        }
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        if st.stopped || self.ttl.is_zero() {
            return false;
        }
        let before = st.wanted.len();
        for d in dirs.rev() {
            if !st.ready.contains_key(&d) {
                st.wanted.push_back(d);
            }
        }
        while st.wanted.len() > QUEUED {
            st.wanted.pop_front();
        }
        if st.wanted.len() == before {
            return false;
        }
        self.wake.notify_one();
        !std::mem::replace(&mut st.started, true)
    }

    /// The next directory to list; `None` once stopped (the worker ends).
    pub(crate) fn next(&self) -> Option<u64> {
        let mut st = self.state.lock().ok()?;
        loop {
            if st.stopped {
                return None;
            }
            if let Some(d) = st.wanted.pop_back() {
                return Some(d);
            }
            st = self.wake.wait(st).ok()?;
        }
    }

    /// Keeps a listing the worker took.
    pub(crate) fn put(&self, ino: u64, r: Ready) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.ready.len() >= READY {
            st.ready.retain(|_, r| r.stats.fresh(self));
            if st.ready.len() >= READY {
                return;
            }
        }
        st.ready.insert(ino, r);
    }

    /// Whether a listing of `ino` is ready (tests wait for the worker).
    #[cfg(test)]
    pub(crate) fn is_ready(&self, ino: u64) -> bool {
        self.state
            .lock()
            .is_ok_and(|st| st.ready.contains_key(&ino))
    }

    /// Ends the worker and drops everything queued or kept (unmount).
    pub(crate) fn stop(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.stopped = true;
            st.wanted.clear();
            st.ready.clear();
        }
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(p: &Prefetch) -> Ready {
        Ready {
            items: Vec::new(),
            stats: Prefetch::stats(Vec::new(), p.start_stats()),
        }
    }

    #[test]
    fn a_change_through_the_mount_spoils_what_was_taken_before_it() {
        let p = Prefetch::new(Duration::from_secs(1));
        p.put(5, ready(&p));
        p.put(6, ready(&p));
        assert!(p.take(5).is_some());
        assert!(p.take(5).is_none(), "taken once");
        p.changed();
        assert!(p.take(6).is_none());
    }

    #[test]
    fn the_last_queued_is_listed_first_and_nothing_while_changing() {
        let p = Prefetch::new(Duration::from_secs(1));
        let dirs = |n: &[u64]| n.to_vec();
        assert!(
            p.want(dirs(&[1, 2, 3]).into_iter()),
            "first want starts the worker"
        );
        assert_eq!(p.next().unwrap(), 1);
        assert!(!p.want(dirs(&[4]).into_iter()));
        assert_eq!(p.next().unwrap(), 4);
        assert_eq!(p.next().unwrap(), 2);
        p.changed();
        assert!(!p.want(dirs(&[9]).into_iter()));
        assert_eq!(p.next().unwrap(), 3);
        p.stop();
        assert!(p.next().is_none());
    }
}
