//! Directory read-ahead. A tree walk (`du`, `rsync`, `find`, `ls -lR`)
//! reads a directory, then each of its subdirectories, one request at a
//! time: without help, listing, decrypting names and stat'ing entries all
//! wait in line behind the walker. When a directory is listed, its
//! subdirectories are queued here, and one worker thread lists them (names
//! decrypted, entries stat'ed) ahead of the walker, on another CPU: last
//! queued first, which in a depth-first walk is the one read next. The
//! worker queues the subdirectories of what it lists too, so it runs ahead
//! of the walk by up to [`READY`] listings, not by one directory; it lists
//! several queued directories per round ([`Prefetch::next`]'s `max`), their
//! names decrypted in one key-holder request. A reader that asks for a
//! directory the worker is listing at that moment waits for it rather
//! than listing it a second time.
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
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::items::DirItem;

/// How long after the last change through the mount read-ahead resumes.
const QUIET: Duration = Duration::from_millis(50);

/// Directories queued at most (the oldest are dropped first).
const QUEUED: usize = 1024;

/// Prefetched listings kept at most. When this many fresh ones wait, the
/// worker pauses until one is taken.
const READY: usize = 256;

/// How many more directories the worker lists than readers have asked
/// for: it runs this far ahead of a walk, and a single listing that
/// nobody follows up (an `ls`) costs at most this many in the background.
const AHEAD: usize = 64;

/// Directory links remembered at most (past that they start over).
const LINKS: usize = 4 * QUEUED;

/// The longest a reader waits for a listing the worker is taking.
const WAIT_INFLIGHT: Duration = Duration::from_millis(100);

/// One directory listed ahead of its reader.
pub(crate) struct Ready {
    /// "." and "..", then the entries.
    pub(crate) items: Vec<DirItem>,
    /// Each entry's attributes (`None` for "." and "..", and for entries
    /// gone before they were stat'ed).
    pub(crate) stats: Prestat,
    /// The directory listed, held open while the listing waits: its inode
    /// number cannot go to another directory meanwhile.
    pub(crate) _pin: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
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
    /// Wakes the worker: something queued, taken, or the end.
    wake: Condvar,
    /// Wakes readers waiting for a listing the worker is taking.
    done: Condvar,
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

type Map<V> = HashMap<u64, V, foldhash::fast::RandomState>;

#[derive(Default)]
struct State {
    /// Queued directories with the number of their latest queueing; an
    /// entry whose number is not the one in `queued` is a stale duplicate.
    wanted: VecDeque<(u64, u64)>,
    queued: Map<u64>,
    /// How many times a directory was queued so far.
    pushes: u64,
    /// Being listed by the worker now.
    inflight: Map<()>,
    /// Where each queued directory was listed: its parent and cipher name
    /// (the kernel may not know it yet, so the inode table cannot say).
    links: Map<(u64, OsString)>,
    ready: Map<Ready>,
    /// Listings made by the worker less directories asked for by readers
    /// (never below 0): the worker stops at [`AHEAD`].
    ahead: usize,
    /// When a reader last asked for a listing: a cache time-out after
    /// that, the walk is over, and what it left queued is dropped.
    last_ask: Option<Instant>,
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
    /// still fresh; waits (at most [`WAIT_INFLIGHT`]) while the worker is
    /// listing it. When there is none, the caller lists it, and the worker
    /// will not.
    pub(crate) fn take(&self, ino: u64) -> Option<Ready> {
        let mut st = self.state.lock().ok()?;
        // A reader's request lets the worker list one more.
        st.ahead = st.ahead.saturating_sub(1);
        st.last_ask = Some(Instant::now());
        self.wake.notify_one();
        let deadline = Instant::now() + WAIT_INFLIGHT;
        while st.inflight.contains_key(&ino) {
            let left = deadline.checked_duration_since(Instant::now())?;
            st = self.done.wait_timeout(st, left).ok()?.0;
        }
        st.queued.remove(&ino);
        let r = st.ready.remove(&ino)?;
        r.stats.fresh(self).then_some(r)
    }

    /// Where directory `ino`, queued here, was listed: its parent and its
    /// cipher name there.
    pub(crate) fn link(&self, ino: u64) -> Option<(u64, OsString)> {
        self.state.lock().ok()?.links.get(&ino).cloned()
    }

    /// Queues subdirectories `dirs` (inode and cipher name) of directory
    /// `parent`, the one to be read first first. Returns true when the
    /// caller must start the worker (the first time).
    pub(crate) fn want(&self, parent: u64, dirs: Vec<(u64, OsString)>) -> bool {
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
        self.end_idle_walk(&mut st);
        let mut added = false;
        if st.links.len() + dirs.len() > LINKS {
            st.links.clear();
        }
        // Only the first QUEUED can stay queued (the rest would be dropped
        // at once): no link is kept for the others.
        for (d, name) in dirs.into_iter().take(QUEUED).rev() {
            if st.ready.contains_key(&d) || st.inflight.contains_key(&d) {
                continue;
            }
            st.links.insert(d, (parent, name));
            st.pushes += 1;
            let n = st.pushes;
            st.queued.insert(d, n);
            st.wanted.push_back((d, n));
            added = true;
        }
        while st.wanted.len() > QUEUED {
            if let Some((d, n)) = st.wanted.pop_front() {
                if st.queued.get(&d) == Some(&n) {
                    st.queued.remove(&d);
                }
            }
        }
        if !added {
            return false;
        }
        self.wake.notify_one();
        !std::mem::replace(&mut st.started, true)
    }

    /// The next directories to list, at most `max` (1 or more), the one to
    /// list first first; waits while none is queued or [`READY`] fresh
    /// listings wait to be taken. They count as being listed until
    /// [`Self::put`] or [`Self::drop_inflight`]. `None` once stopped (the
    /// worker ends).
    pub(crate) fn next(&self, max: usize) -> Option<Vec<u64>> {
        let mut st = self.state.lock().ok()?;
        loop {
            if st.stopped {
                return None;
            }
            // Stale listings go (and the directories they hold open).
            st.ready.retain(|_, r| r.stats.fresh(self));
            self.end_idle_walk(&mut st);
            let mut out = Vec::new();
            let room = AHEAD.saturating_sub(st.ahead).min(max.max(1));
            while st.ready.len() + out.len() < READY && out.len() < room {
                let Some((d, n)) = st.wanted.pop_back() else {
                    break;
                };
                if st.queued.get(&d) != Some(&n) {
                    continue;
                }
                st.queued.remove(&d);
                st.inflight.insert(d, ());
                out.push(d);
            }
            if !out.is_empty() {
                return Some(out);
            }
            // Woken by a reader's request or something queued; listings go
            // stale and walks end, so look again after the time-out.
            if st.ready.is_empty() && st.last_ask.is_none() {
                st = self.wake.wait(st).ok()?;
            } else {
                st = self.wake.wait_timeout(st, self.ttl).ok()?.0;
            }
        }
    }

    /// When no reader has asked for a cache time-out, the walk is over:
    /// what it left queued is dropped (a listing nobody followed up costs
    /// no more), and the next walk gets the whole lead.
    fn end_idle_walk(&self, st: &mut State) {
        if st.last_ask.is_some_and(|t| t.elapsed() > self.ttl) {
            st.last_ask = None;
            st.wanted.clear();
            st.queued.clear();
            st.links.clear();
            st.ahead = 0;
        }
    }

    /// Keeps a listing the worker took.
    pub(crate) fn put(&self, ino: u64, r: Ready) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        st.inflight.remove(&ino);
        if !st.stopped {
            st.ready.insert(ino, r);
            st.ahead += 1;
        }
        self.done.notify_all();
    }

    /// Hands directories `inos`, taken by [`Self::next`] but not listed,
    /// back to the front of the queue, in the same order.
    pub(crate) fn give_back(&self, inos: &[u64]) {
        if let Ok(mut st) = self.state.lock() {
            for &d in inos.iter().rev() {
                if st.inflight.remove(&d).is_some() && !st.stopped {
                    st.pushes += 1;
                    let n = st.pushes;
                    st.queued.insert(d, n);
                    st.wanted.push_back((d, n));
                }
            }
        }
        self.done.notify_all();
    }

    /// The worker could not list `ino` (gone, or unreadable): its reader
    /// lists it.
    pub(crate) fn drop_inflight(&self, ino: u64) {
        if let Ok(mut st) = self.state.lock() {
            st.inflight.remove(&ino);
        }
        self.done.notify_all();
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
        self.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(p: &Prefetch) -> Ready {
        Ready {
            items: Vec::new(),
            stats: Prefetch::stats(Vec::new(), p.start_stats()),
            _pin: None,
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
    fn a_reader_waits_for_what_the_worker_is_listing_and_takes_what_it_is_not() {
        let p = std::sync::Arc::new(Prefetch::new(Duration::from_secs(5)));
        let dirs = |n: &[u64]| n.iter().map(|&d| (d, OsString::from("x"))).collect();
        assert!(p.want(7, dirs(&[1])));
        assert_eq!(p.next(8).unwrap(), [1]);
        // 1 is being listed: a reader waits for it instead of listing it too.
        let p2 = p.clone();
        let reader = std::thread::spawn(move || {
            let t = Instant::now();
            (p2.take(1).is_some(), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        p.put(1, ready(&p));
        let (got, waited) = reader.join().unwrap();
        assert!(got, "the listing the worker finished");
        assert!(waited >= Duration::from_millis(15), "{waited:?}");
        // One the worker gave up on: the reader lists it, at once.
        p.want(7, dirs(&[2]));
        assert_eq!(p.next(8).unwrap(), [2]);
        p.drop_inflight(2);
        let t = Instant::now();
        assert!(p.take(2).is_none());
        assert!(t.elapsed() < WAIT_INFLIGHT);
        // One queued but not started, which its reader lists itself: the
        // worker skips it.
        p.want(7, dirs(&[3, 4]));
        assert!(p.take(3).is_none());
        assert_eq!(p.next(8).unwrap(), [4]);
        // Queued twice: listed once.
        p.want(7, dirs(&[5, 6]));
        p.want(7, dirs(&[5]));
        assert_eq!(p.next(8).unwrap(), [5, 6]);
        // Taken but not listed: back at the front, in order.
        p.want(7, dirs(&[8]));
        p.give_back(&[5, 6]);
        assert_eq!(p.next(8).unwrap(), [5, 6, 8]);
        p.stop();
    }

    /// Lists (as the worker would) until the worker may list no more;
    /// returns how many it listed.
    fn list_the_whole_lead(p: &Prefetch) -> usize {
        let mut listed = 0;
        while listed < AHEAD {
            for d in p.next(8).unwrap() {
                p.put(d, ready(p));
                listed += 1;
            }
        }
        listed
    }

    #[test]
    fn the_worker_stays_within_reach_of_its_readers() {
        let p = Prefetch::new(Duration::from_secs(5));
        let many: Vec<(u64, OsString)> = (1..=500).map(|d| (d, OsString::from("x"))).collect();
        p.want(0, many);
        assert_eq!(list_the_whole_lead(&p), AHEAD);
        // Nobody asked: the worker may list no more (next() would wait),
        // however long those listings wait or go stale.
        assert_eq!(p.state.lock().unwrap().ahead, AHEAD);
        assert!(p.state.lock().unwrap().last_ask.is_none());
        // Each directory a reader asks for lets the worker list one more.
        assert!(p.take(1).is_some());
        assert!(p.take(9999).is_none());
        assert_eq!(p.next(8).unwrap().len(), 2);
        // Links are kept only for what can stay queued.
        let wide: Vec<(u64, OsString)> = (10_000..10_000 + 5 * QUEUED as u64)
            .map(|d| (d, OsString::from("y")))
            .collect();
        p.want(0, wide);
        assert!(p.state.lock().unwrap().links.len() <= LINKS + QUEUED);
        p.stop();
    }

    #[test]
    fn what_a_finished_walk_left_queued_is_dropped() {
        let ttl = Duration::from_millis(300);
        let p = std::sync::Arc::new(Prefetch::new(ttl));
        let many: Vec<(u64, OsString)> = (1..=200).map(|d| (d, OsString::from("x"))).collect();
        assert!(p.take(5000).is_none(), "a reader asks for something");
        p.want(0, many);
        list_the_whole_lead(&p);
        // No reader for longer than the time-out: a new walk starts clean,
        // with the whole lead and none of the old queue.
        std::thread::sleep(ttl * 2);
        p.want(0, vec![(9000, OsString::from("y"))]);
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        std::thread::spawn(move || tx.send(p2.next(8)).unwrap());
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the worker stalled");
        assert_eq!(got.unwrap(), [9000]);
        assert_eq!(
            p.state.lock().unwrap().ready.len(),
            0,
            "stale listings dropped"
        );
        p.stop();
    }

    #[test]
    fn the_last_queued_is_listed_first_and_nothing_while_changing() {
        let p = Prefetch::new(Duration::from_secs(1));
        let dirs = |n: &[u64]| {
            n.iter()
                .map(|&d| (d, OsString::from(format!("n{d}"))))
                .collect()
        };
        assert!(p.want(7, dirs(&[1, 2, 3])), "first want starts the worker");
        assert_eq!(p.link(2), Some((7, "n2".into())));
        assert_eq!(p.next(1).unwrap(), [1]);
        assert!(!p.want(1, dirs(&[4, 5])));
        assert_eq!(p.next(2).unwrap(), [4, 5]);
        assert_eq!(p.next(8).unwrap(), [2, 3], "what is queued, no more");
        assert!(!p.want(7, dirs(&[6])));
        p.changed();
        assert!(!p.want(7, dirs(&[9])));
        assert_eq!(p.next(8).unwrap(), [6]);
        p.stop();
        assert!(p.next(8).is_none());
    }
}
