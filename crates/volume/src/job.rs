//! One parallel run over a buffer: the buffer cut into chunks, the work to
//! do on each chunk, a shared counter handing chunks out, the first error.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::Error;

/// A buffer cut into `n` chunks of `chunk` bytes (the last may be shorter),
/// handed out by index to several threads.
pub(crate) struct Chunks {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) chunk: usize,
    pub(crate) n: usize,
}

// SAFETY: `Chunks` is only a view of a `&mut [u8]` borrowed for the whole
// parallel run; each chunk index is claimed exactly once through the atomic
// counter in `Job`, so no two threads ever touch the same bytes.
unsafe impl Sync for Chunks {}

impl Chunks {
    /// # Safety
    /// `i < self.n`, and each `i` is used by at most one thread at a time
    /// while the buffer the view came from is borrowed.
    #[allow(clippy::mut_from_ref)] // disjoint chunks of a buffer borrowed mutably by `for_each_chunk`
    unsafe fn get(&self, i: usize) -> &mut [u8] {
        let start = i * self.chunk;
        let len = self.chunk.min(self.len - start);
        // SAFETY: start + len <= self.len, inside the borrowed buffer, and the
        // caller guarantees exclusive use of chunk i.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

pub(crate) type ChunkFn<'a> = dyn Fn(usize, &mut [u8]) -> Result<(), Error> + Sync + 'a;

/// One parallel run: chunks, the work to do on each, and its outcome.
pub(crate) struct Job<'a> {
    pub(crate) chunks: Chunks,
    pub(crate) f: &'a ChunkFn<'a>,
    pub(crate) next: AtomicUsize,
    /// Helpers currently inside this job; changed only under the pool mutex.
    pub(crate) entered: AtomicUsize,
    pub(crate) error: Mutex<Option<Error>>,
}

impl Job<'_> {
    /// Takes chunks until none is left.
    pub(crate) fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks.n {
                return;
            }
            // SAFETY: i < n and the counter hands each i out exactly once.
            let chunk = unsafe { self.chunks.get(i) };
            let r = catch_unwind(AssertUnwindSafe(|| (self.f)(i, chunk)));
            let r = r.unwrap_or_else(|p| Err(Error::Crypt(panic_message(&p))));
            if let Err(e) = r {
                let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
        }
    }

    pub(crate) fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.chunks.n
    }

    pub(crate) fn take_error(&self) -> Result<(), Error> {
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn panic_message(p: &Box<dyn Any + Send>) -> String {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("sector crypto panicked: {msg}")
}
