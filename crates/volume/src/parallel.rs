//! Splitting the crypto of one large request over the cores.
//!
//! A request's buffer is cut into chunks of whole sectors; the calling thread
//! and idle helpers take chunks from a shared counter until none is left.
//! With [`Parallelism::Pool`] the helpers are long-lived threads of one
//! process-wide pool (one per core beyond the first). A helper busy with
//! someone else's request is simply not waited for: the caller does the
//! remaining chunks itself, so concurrent requests (many FUSE threads) cost
//! nothing extra. [`Parallelism::Scoped`] spawns helpers with
//! `std::thread::scope` per request instead (kept to measure against).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use crate::Error;

/// How the engine spreads the sector crypto of one large request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Parallelism {
    /// Everything on the calling thread.
    None,
    /// A persistent pool of helper threads (the default).
    Pool,
    /// Helper threads spawned per request with `std::thread::scope`.
    Scoped,
}

/// When and how finely requests are split.
#[derive(Clone, Copy, Debug)]
pub struct ParallelConfig {
    /// The splitting strategy.
    pub mode: Parallelism,
    /// Requests shorter than this many bytes are never split.
    pub min_split: usize,
    /// Target chunk length in bytes (rounded to whole sectors).
    pub chunk: usize,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        ParallelConfig {
            mode: Parallelism::Pool,
            min_split: 128 * 1024,
            chunk: 64 * 1024,
        }
    }
}

/// Number of helper threads worth using: the cores beyond the caller's.
pub(crate) fn helpers() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .saturating_sub(1)
    })
}

/// A buffer cut into `n` chunks of `chunk` bytes (the last may be shorter),
/// handed out by index to several threads.
struct Chunks {
    ptr: *mut u8,
    len: usize,
    chunk: usize,
    n: usize,
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

type ChunkFn<'a> = dyn Fn(usize, &mut [u8]) -> Result<(), Error> + Sync + 'a;

/// One parallel run: chunks, the work to do on each, and its outcome.
struct Job<'a> {
    chunks: Chunks,
    f: &'a ChunkFn<'a>,
    next: AtomicUsize,
    /// Helpers currently inside this job; changed only under the pool mutex.
    entered: AtomicUsize,
    error: Mutex<Option<Error>>,
}

impl Job<'_> {
    /// Takes chunks until none is left.
    fn work(&self) {
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

    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.chunks.n
    }

    fn take_error(&self) -> Result<(), Error> {
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

/// A job pointer in the pool's queue, lifetime erased.
#[derive(Clone, Copy, PartialEq, Eq)]
struct JobRef(*const Job<'static>);

// SAFETY: the pointee is `Sync` and outlives its presence in the queue and
// every helper inside it (see `Pool::run`).
unsafe impl Send for JobRef {}

struct PoolState {
    queue: Vec<JobRef>,
    idle: usize,
}

/// The process-wide helper pool.
struct Pool {
    state: Mutex<PoolState>,
    work_cv: Condvar,
    done_cv: Condvar,
}

impl Pool {
    fn global() -> &'static Pool {
        static POOL: OnceLock<&'static Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let pool: &'static Pool = Box::leak(Box::new(Pool {
                state: Mutex::new(PoolState {
                    queue: Vec::with_capacity(64),
                    idle: 0,
                }),
                work_cv: Condvar::new(),
                done_cv: Condvar::new(),
            }));
            for i in 0..helpers() {
                // A helper that fails to start only costs parallelism.
                let _ = std::thread::Builder::new()
                    .name(format!("ck-crypt-{i}"))
                    .spawn(move || pool.helper());
            }
            pool
        })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn helper(&self) {
        let mut st = self.lock();
        st.idle += 1;
        loop {
            let Some(&jref) = st.queue.first() else {
                st = self.work_cv.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            // SAFETY: the job is in the queue, so its owner is still inside
            // `run` and will not return before `entered` drops back to zero.
            let job = unsafe { &*jref.0 };
            job.entered.fetch_add(1, Ordering::Relaxed);
            st.idle -= 1;
            drop(st);
            job.work();
            st = self.lock();
            st.idle += 1;
            if job.exhausted() {
                st.queue.retain(|&j| j != jref);
            }
            // After this the job may be gone: touch it no more.
            job.entered.fetch_sub(1, Ordering::Relaxed);
            self.done_cv.notify_all();
        }
    }

    /// Runs `job` on the caller and any idle helpers; returns when every
    /// chunk is done and no helper references the job any more.
    fn run(&self, job: &Job<'_>) {
        let jref = JobRef((job as *const Job<'_>).cast::<Job<'static>>());
        // Withdraws the job and waits for helpers even if `work` unwinds.
        struct Withdraw<'p> {
            pool: &'p Pool,
            jref: JobRef,
            entered: &'p AtomicUsize,
        }
        impl Drop for Withdraw<'_> {
            fn drop(&mut self) {
                let mut st = self.pool.lock();
                st.queue.retain(|&j| j != self.jref);
                while self.entered.load(Ordering::Relaxed) > 0 {
                    st = self
                        .pool
                        .done_cv
                        .wait(st)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        {
            let mut st = self.lock();
            if st.idle == 0 {
                drop(st);
                job.work();
                return;
            }
            st.queue.push(jref);
            self.work_cv.notify_all();
        }
        let _withdraw = Withdraw {
            pool: self,
            jref,
            entered: &job.entered,
        };
        job.work();
    }
}

/// Applies `f(chunk_index, chunk)` to `buf` cut into `chunk`-byte pieces,
/// in parallel according to `mode`. The first error wins.
pub(crate) fn for_each_chunk(
    mode: Parallelism,
    buf: &mut [u8],
    chunk: usize,
    f: &ChunkFn<'_>,
) -> Result<(), Error> {
    let chunk = chunk.max(1);
    let n = buf.len().div_ceil(chunk);
    if n <= 1 || mode == Parallelism::None || helpers() == 0 {
        for (i, c) in buf.chunks_mut(chunk).enumerate() {
            f(i, c)?;
        }
        return Ok(());
    }
    let job = Job {
        chunks: Chunks {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            chunk,
            n,
        },
        f,
        next: AtomicUsize::new(0),
        entered: AtomicUsize::new(0),
        error: Mutex::new(None),
    };
    match mode {
        Parallelism::Scoped => std::thread::scope(|s| {
            for _ in 0..helpers().min(n - 1) {
                s.spawn(|| job.work());
            }
            job.work();
        }),
        _ => Pool::global().run(&job),
    }
    job.take_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(mode: Parallelism, len: usize, chunk: usize) {
        let mut buf = vec![0u8; len];
        for_each_chunk(mode, &mut buf, chunk, &|i, c: &mut [u8]| {
            for (j, b) in c.iter_mut().enumerate() {
                *b = b.wrapping_add((i * chunk + j) as u8 ^ 0x5a);
            }
            Ok(())
        })
        .unwrap();
        for (k, b) in buf.iter().enumerate() {
            assert_eq!(*b, (k as u8) ^ 0x5a, "byte {k} done {} times", b);
        }
    }

    #[test]
    fn every_byte_exactly_once() {
        for mode in [Parallelism::None, Parallelism::Pool, Parallelism::Scoped] {
            fill(mode, 1 << 20, 4096);
            fill(mode, 100_000, 512 * 3);
            fill(mode, 512, 4096);
        }
    }

    #[test]
    fn concurrent_callers_share_the_pool() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        fill(Parallelism::Pool, 256 * 1024, 16 * 1024);
                    }
                });
            }
        });
    }

    #[test]
    fn first_error_is_reported() {
        let mut buf = vec![0u8; 64 * 1024];
        let r = for_each_chunk(Parallelism::Pool, &mut buf, 4096, &|i, _c: &mut [u8]| {
            if i == 7 {
                Err(Error::KeepGone)
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::KeepGone)));
    }
}
