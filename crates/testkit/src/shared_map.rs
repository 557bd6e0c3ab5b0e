//! One memory region mapped twice, as the keep's shared slot is mapped in
//! the keep and in the I/O process: code under test works on one mapping
//! while a [`Rewriter`] thread, standing in for a hostile peer, keeps
//! writing through the other, or a [`Watcher`] thread keeps reading it.
//! The compiler sees two unrelated regions, as it does across the two
//! processes, so the race is the real one.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A memfd of `len` bytes mapped twice; unmapped when the map and its
/// rewriters are gone.
pub struct SharedMap {
    maps: Arc<Maps>,
}

/// The two mappings.
struct Maps {
    mine: *mut u8,
    peer: *mut u8,
    len: usize,
}

// SAFETY: plain shared memory; `mine` is handed out only through
// `&mut SharedMap`, and `peer` only to rewriter threads that write bytes.
unsafe impl Send for Maps {}
// SAFETY: as above.
unsafe impl Sync for Maps {}

impl SharedMap {
    /// Maps `len` zeroed bytes twice. Panics if the system refuses.
    pub fn new(len: usize) -> SharedMap {
        // SAFETY: a plain memfd_create with a NUL-terminated name.
        let fd =
            unsafe { libc::memfd_create(c"cryptkeep-test-shared".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: fd was just created and is owned here alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        use std::os::fd::AsRawFd;
        // SAFETY: ftruncate on our own memfd.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0, "ftruncate: {}", std::io::Error::last_os_error());
        let map = || {
            // SAFETY: a new shared mapping of our memfd; nothing else refers to it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(
                p,
                libc::MAP_FAILED,
                "mmap: {}",
                std::io::Error::last_os_error()
            );
            p.cast::<u8>()
        };
        SharedMap {
            maps: Arc::new(Maps {
                mine: map(),
                peer: map(),
                len,
            }),
        }
    }

    /// The mapping the code under test uses.
    ///
    /// # Safety
    ///
    /// A [`Rewriter`] of this map writes the same memory while the slice
    /// is borrowed: the caller accepts that, as code working on the keep's
    /// shared slot must, and does not rely on what it reads staying put.
    pub unsafe fn mine(&mut self) -> &mut [u8] {
        // SAFETY: `len` mapped bytes, borrowed mutably through `self`; the
        // caller accepts the peer's writes.
        unsafe { std::slice::from_raw_parts_mut(self.maps.mine, self.maps.len) }
    }

    /// Starts a thread that writes `bytes` at each of `offsets`, through
    /// the other mapping, over and over until the [`Rewriter`] drops;
    /// returns once the thread runs.
    pub fn rewrite(&self, offsets: Vec<usize>, bytes: Vec<u8>) -> Rewriter {
        let fits = |&o: &usize| {
            o.checked_add(bytes.len())
                .is_some_and(|e| e <= self.maps.len)
        };
        assert!(offsets.iter().all(fits), "a rewrite outside the map");
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicUsize::new(0));
        let (s, p, maps) = (stop.clone(), passes.clone(), self.maps.clone());
        let (started, running) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = started.send(());
            while !s.load(Ordering::Relaxed) {
                p.fetch_add(1, Ordering::Relaxed);
                for &o in &offsets {
                    for (i, &b) in bytes.iter().enumerate() {
                        // SAFETY: inside the mapping (checked above), which
                        // the thread keeps alive through `maps`.
                        unsafe { std::ptr::write_volatile(maps.peer.add(o + i), b) };
                    }
                }
            }
        });
        let _ = running.recv();
        Rewriter {
            stop,
            passes,
            thread: Some(thread),
        }
    }
}

impl SharedMap {
    /// Starts a thread that reads `pattern.len()` bytes at `offset` through
    /// the other mapping over and over until the [`Watcher`] drops, and
    /// counts the reads that found `pattern` there; returns once the
    /// thread runs.
    pub fn watch(&self, offset: usize, pattern: Vec<u8>) -> Watcher {
        let fits = offset
            .checked_add(pattern.len())
            .is_some_and(|e| e <= self.maps.len);
        assert!(fits, "a watch outside the map");
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, reads) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, n, r, maps) = (stop.clone(), seen.clone(), reads.clone(), self.maps.clone());
        let (started, running) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = started.send(());
            let mut got = vec![0u8; pattern.len()];
            while !s.load(Ordering::Relaxed) {
                for (i, g) in got.iter_mut().enumerate() {
                    // SAFETY: inside the mapping (checked above), which the
                    // thread keeps alive through `maps`.
                    *g = unsafe { std::ptr::read_volatile(maps.peer.add(offset + i)) };
                }
                if got == pattern {
                    n.fetch_add(1, Ordering::Relaxed);
                }
                r.fetch_add(1, Ordering::Relaxed);
            }
        });
        let _ = running.recv();
        Watcher {
            stop,
            seen,
            reads,
            thread: Some(thread),
        }
    }
}

/// A thread reading a [`SharedMap`]; stopped and joined on drop.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// How many reads so far found the pattern.
    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::Relaxed)
    }

    /// How many reads the thread has made: a test checks that the peer
    /// really ran while the code under test did.
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Maps {
    fn drop(&mut self) {
        // SAFETY: the two mappings made in new(), each unmapped once.
        unsafe {
            libc::munmap(self.mine.cast(), self.len);
            libc::munmap(self.peer.cast(), self.len);
        }
    }
}

/// A thread writing into a [`SharedMap`]; stopped and joined on drop.
pub struct Rewriter {
    stop: Arc<AtomicBool>,
    passes: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Rewriter {
    /// How many passes over its offsets the thread has begun: a test
    /// checks that the peer really ran while the code under test did.
    pub fn passes(&self) -> usize {
        self.passes.load(Ordering::Relaxed)
    }
}

impl Drop for Rewriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
