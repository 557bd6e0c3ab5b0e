//! Splitting the crypto of one large request over the cores.
//!
//! A request's buffer is cut into chunks of whole sectors; the calling thread
//! and idle helpers take chunks from a shared counter until none is left.
//! With [`Parallelism::Pool`] the helpers are long-lived threads of one
//! process-wide pool (one per core beyond the first). A helper busy with
//! someone else's request is simply not waited for: the caller does the
//! remaining chunks itself, so concurrent requests (many FUSE threads) cost
//! nothing extra. [`Parallelism::Scoped`] spawns helpers with
//! `std::thread::scope` per request instead (kept to measure against:
//! `tests/bench_engine.rs` shows spawning per request costs a factor 2–4 at
//! 128–256 KiB on two cores, and is only competitive at 1 MiB with several
//! concurrent callers, so the pool is the default).

use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use crate::job::{ChunkFn, Chunks, Job};
use crate::pool::{helpers, Pool};
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
