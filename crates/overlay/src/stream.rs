//! Streaming reads of a cipher file on a disk: the ciphertext is read
//! directly (`O_DIRECT`) into buffers of our own, ahead of the reader, and
//! opened from there.
//!
//! A buffered `pread` of a cold cipher file has the kernel allocate
//! page-cache pages, read the disk into them in its own read-ahead window
//! and copy them out; the pages then sit in the cache, to be reclaimed
//! later, although the plaintext is what the reader's page cache keeps. A
//! direct read has the disk write into our buffer: the copy and the
//! page-cache work are gone, and how much is read ahead, and how many reads
//! are in flight, is ours to choose.
//!
//! A file read sequentially (from its start, or after two reads in a row
//! that follow each other) is read in chunks of [`CHUNK_BYTES`] (as many
//! whole content blocks as fit), up to [`AHEAD`] chunks ahead of the
//! reader, by a small pool of
//! threads that only wait for the disk; a reader that finds its chunk not
//! started yet reads it itself. Every other read goes through the page
//! cache as before. The decryption, and so the authentication of every
//! block, is the same either way: a chunk is only ciphertext.
//!
//! Coherence: every change made through the [`crate::CipherFile`] drops the
//! chunks read so far (the caller holds it exclusively then), and a change
//! made behind its back is seen as a new size, modification or change time
//! of the cipher file, which every read checks first. The kernel writes
//! dirty cached pages of a range back before it reads the range directly,
//! so buffered writes are always seen.
//!
//! A chunk is one request to the device: its buffer is backed by huge
//! pages where the kernel has them (`MADV_HUGEPAGE`), so the request is
//! not split at the device's segment limit (254 pages on virtio), and the
//! device sees 4 MiB reads, a few in flight.
//!
//! Bounded: at most [`MAX_CHUNKS`] chunk buffers ([`CHUNK_BYTES`] each) exist
//! in the process; past that, reads go through the page cache. Direct
//! reads are not used on file systems in memory (tmpfs, ramfs: nothing to
//! bypass), after the file system refused one, or when
//! `CRYPTKEEP_DIRECT_READS=0` is in the environment.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::content::{ContentCipher, PLAIN_BS};
use crate::error::Result;
use crate::header::{FileId, HEADER_LEN};

/// The bytes of a chunk buffer, and the most one direct read asks for
/// (the largest request a disk commonly takes, `max_sectors_kb`).
pub(crate) const CHUNK_BYTES: usize = 4 << 20;
/// Chunks read ahead of the one a reader is in.
pub(crate) const AHEAD: u64 = 2;
/// Chunk buffers in the whole process, at most (64 MiB).
pub(crate) const MAX_CHUNKS: usize = 16;
/// Alignment of a chunk buffer: a huge page.
const HUGE: usize = 2 << 20;
/// Threads that read chunks ahead (they only wait for the disk).
const READERS: usize = 3;
/// Alignment of a direct read's buffer, offset and length.
const ALIGN: usize = 4096;

/// Chunk buffers alive in the process.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A chunk buffer: its own anonymous mapping, aligned to a huge page and
/// advised to be backed by huge pages, counted against [`MAX_CHUNKS`]
/// while it lives. (Not from the allocator: a recycled heap area has its
/// small pages already, and would be zeroed for nothing.)
struct AlignedBuf {
    /// The mapping, and its length.
    map: *mut libc::c_void,
    map_len: usize,
    /// The aligned part used: `len` bytes from `at`.
    at: *mut u8,
    len: usize,
}

// SAFETY: the buffer owns its mapping; access goes through `&`/`&mut self`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` only hands out shared slices.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A new buffer of `len` usable bytes, if the budget (and the kernel)
    /// allows one.
    fn new(len: usize) -> Option<AlignedBuf> {
        let prev = LIVE.fetch_add(1, Ordering::AcqRel);
        if prev >= MAX_CHUNKS {
            LIVE.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let map_len = len + HUGE;
        // SAFETY: a new private anonymous mapping; no existing memory is
        // touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            LIVE.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let skip = (HUGE - map as usize % HUGE) % HUGE;
        // SAFETY: `skip + len <= map_len`: inside the mapping.
        let at = unsafe { (map as *mut u8).add(skip) };
        // SAFETY: advice on pages of our own mapping; it changes no
        // contents (fresh anonymous pages read as zeros either way).
        unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        Some(AlignedBuf {
            map,
            map_len,
            at,
            len,
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `at..at + len` is inside the mapping, which lives as long
        // as `self`, and initialised (anonymous pages read as zeros).
        unsafe { std::slice::from_raw_parts(self.at, self.len) }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.at, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it
        // outlives `self`.
        unsafe { libc::munmap(self.map, self.map_len) };
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a chunk is.
enum Slot {
    /// Not started: whoever comes first (a read-ahead thread or a reader)
    /// reads it into this buffer.
    Queued(AlignedBuf),
    /// Being read.
    Reading,
    /// Read: `len` bytes of the buffer hold the cipher file from `start`.
    Done(Arc<AlignedBuf>, usize),
    /// The read failed: readers go through the page cache.
    Failed(i32),
}

/// One chunk of a cipher file: plaintext blocks `index * per` onwards,
/// `per` of them, where `per` is [`chunk_blocks`] of the file's cipher.
struct Chunk {
    index: u64,
    /// The first cipher byte read ([`ALIGN`]ed).
    start: u64,
    /// Bytes to read from `start` ([`ALIGN`]ed).
    len: usize,
    file: Arc<File>,
    slot: Mutex<Slot>,
    done: Condvar,
}

impl Chunk {
    /// Reads the chunk if nobody started it yet; returns at once otherwise.
    fn fill(&self) {
        let Ok(mut s) = self.slot.lock() else { return };
        let mut buf = match std::mem::replace(&mut *s, Slot::Reading) {
            Slot::Queued(b) => b,
            other => {
                *s = other;
                return;
            }
        };
        drop(s);
        let r = read_full(&self.file, &mut buf.as_mut()[..self.len], self.start);
        let next = match r {
            Ok(n) => Slot::Done(Arc::new(buf), n),
            Err(e) => Slot::Failed(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        if let Ok(mut s) = self.slot.lock() {
            *s = next;
        }
        self.done.notify_all();
    }

    /// Waits until the chunk is read (reading it here if nobody started
    /// it) and calls `f` with its bytes; `Err(errno)` if the read failed.
    fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> Option<std::result::Result<T, i32>> {
        self.fill();
        let mut s = self.slot.lock().ok()?;
        loop {
            match &*s {
                Slot::Done(b, n) => {
                    // Opened without the lock: readers of one chunk run
                    // side by side.
                    let (b, n) = (b.clone(), *n);
                    drop(s);
                    return Some(Ok(f(&b.as_slice()[..n])));
                }
                Slot::Failed(e) => return Some(Err(*e)),
                Slot::Reading => s = self.done.wait(s).ok()?,
                // Only `fill` (above) takes a queued chunk.
                Slot::Queued(_) => return None,
            }
        }
    }

    /// Its buffer back, if it is the last holder and the chunk is read.
    fn into_buf(self) -> Option<AlignedBuf> {
        match self.slot.into_inner().ok()? {
            Slot::Done(b, _) => Arc::try_unwrap(b).ok(),
            Slot::Queued(b) => Some(b),
            _ => None,
        }
    }
}

/// The read-ahead threads: a queue of chunks to read.
struct Pool {
    jobs: Mutex<VecDeque<Arc<Chunk>>>,
    ready: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let p: &'static Pool = Box::leak(Box::new(Pool {
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        }));
        for i in 0..READERS {
            // A pool that could not start leaves every chunk to its reader.
            let _ = std::thread::Builder::new()
                .name(format!("ck-readahead-{i}"))
                .stack_size(64 << 10)
                .spawn(move || p.serve());
        }
        p
    })
}

impl Pool {
    fn serve(&self) {
        loop {
            let job = {
                let Ok(mut q) = self.jobs.lock() else { return };
                loop {
                    if let Some(j) = q.pop_front() {
                        break j;
                    }
                    q = match self.ready.wait(q) {
                        Ok(q) => q,
                        Err(_) => return,
                    };
                }
            };
            job.fill();
        }
    }

    fn push(&self, c: Arc<Chunk>) {
        if let Ok(mut q) = self.jobs.lock() {
            q.push_back(c);
            self.ready.notify_one();
        }
    }
}

/// What the cipher file looked like when its chunks were read: size,
/// modification and change time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Stamp([i64; 5]);

impl Stamp {
    /// The stamp of `m`.
    pub(crate) fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp([
            m.len() as i64,
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ])
    }
}

/// The read-ahead state of one cipher file.
struct State {
    /// Chunks `lo..lo + chunks.len()`, in order.
    lo: u64,
    chunks: VecDeque<Arc<Chunk>>,
    /// The file as it was when the chunks were read.
    stamp: Option<Stamp>,
    /// The block after the last read.
    next: u64,
    /// Reads in a row that each began where the one before ended.
    run: u32,
}

/// Streaming reads of one cipher file (see the module documentation).
pub(crate) struct Stream {
    /// The direct descriptor: opened on the first streaming read; `None`
    /// where direct reads are not to be used.
    direct: OnceLock<Option<Arc<File>>>,
    state: Mutex<State>,
    /// The file system refused a direct read: none are tried again.
    refused: AtomicBool,
    /// Reads served from chunks.
    served: AtomicU64,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

impl Stream {
    pub(crate) fn new() -> Stream {
        Stream {
            direct: OnceLock::new(),
            state: Mutex::new(State {
                lo: 0,
                chunks: VecDeque::new(),
                stamp: None,
                next: 0,
                // A read from the start streams at once.
                run: 1,
            }),
            refused: AtomicBool::new(false),
            served: AtomicU64::new(0),
        }
    }

    /// Forgets every chunk read (the file is about to change).
    pub(crate) fn reset(&mut self) {
        if let Ok(s) = self.state.get_mut() {
            s.chunks.clear();
            s.stamp = None;
        }
    }

    /// Opens plaintext blocks `first..first + n` of the file into `out`
    /// (room for `n` blocks) from chunks read directly, when the read is
    /// part of a sequential stream; `None` when it is not (or cannot be
    /// served so): the caller reads through the page cache. `cipher_len`
    /// and `stamp` are of the file as the caller just saw it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &self,
        file: &File,
        c: &ContentCipher,
        id: &FileId,
        first: u64,
        n: u64,
        cipher_len: u64,
        stamp: Stamp,
        out: &mut [u8],
    ) -> Option<Result<usize>> {
        if self.refused.load(Ordering::Relaxed) || n == 0 {
            return None;
        }
        let direct = self.direct.get_or_init(|| open_direct(file)).clone()?;
        let cbs = c.cipher_bs() as u64;
        let per = chunk_blocks(cbs);
        let (ka, kb) = (first / per, (first + n - 1) / per);
        let want: Vec<Arc<Chunk>> = {
            let mut s = self.state.lock().ok()?;
            if s.stamp != Some(stamp) {
                s.chunks.clear();
                s.stamp = Some(stamp);
            }
            let sequential = first == s.next;
            let in_window =
                !s.chunks.is_empty() && ka >= s.lo && ka <= s.lo + s.chunks.len() as u64;
            s.next = s.next.max(first + n);
            if !in_window {
                if sequential {
                    s.run = s.run.saturating_add(1);
                } else if !s.chunks.is_empty() && ka < s.lo && ka + AHEAD >= s.lo {
                    // A read that arrived behind its successor: not a seek.
                    return None;
                } else {
                    s.run = 0;
                    s.next = first + n;
                }
                if s.run < 2 {
                    return None;
                }
                s.chunks.clear();
                s.lo = ka;
            }
            // Chunks more than one behind this read are done with.
            while s.lo + 1 < ka {
                let Some(old) = s.chunks.pop_front() else {
                    break;
                };
                s.lo += 1;
                recycle(old);
            }
            if s.chunks.is_empty() {
                s.lo = ka;
            }
            // The last chunk with data in it.
            let blocks = c.plain_size(cipher_len).div_ceil(PLAIN_BS as u64);
            let last_chunk = blocks.saturating_sub(1) / per;
            let upto = (kb + AHEAD).min(last_chunk.max(kb));
            while s.lo + (s.chunks.len() as u64) <= upto {
                let index = s.lo + s.chunks.len() as u64;
                let (start, len) = chunk_range(index, cbs);
                let buf = FREE
                    .lock()
                    .ok()
                    .and_then(|mut f| f.pop())
                    .or_else(|| AlignedBuf::new(CHUNK_BYTES));
                let Some(buf) = buf else { break };
                let ch = Arc::new(Chunk {
                    index,
                    start,
                    len,
                    file: direct.clone(),
                    slot: Mutex::new(Slot::Queued(buf)),
                    done: Condvar::new(),
                });
                s.chunks.push_back(ch.clone());
                if index > kb {
                    pool().push(ch);
                }
            }
            if s.lo > ka || s.lo + (s.chunks.len() as u64) <= kb {
                return None;
            }
            let from = (ka - s.lo) as usize;
            s.chunks
                .range(from..from + (kb - ka + 1) as usize)
                .cloned()
                .collect()
        };
        let mut done = 0usize;
        for ch in want {
            let b0 = first.max(ch.index * per);
            let b1 = (first + n).min((ch.index + 1) * per);
            let cstart = HEADER_LEN as u64 + b0 * cbs;
            let cend = (HEADER_LEN as u64 + b1 * cbs).min(cipher_len);
            if cend <= cstart {
                break;
            }
            let at = ((b0 - first) as usize) * PLAIN_BS;
            let dst = out.get_mut(at..)?;
            let r = ch.with_bytes(|bytes| {
                let (lo, hi) = ((cstart - ch.start) as usize, (cend - ch.start) as usize);
                // Short: the file ended before the chunk (it has grown since).
                let src = bytes.get(lo..hi)?;
                Some(c.decrypt_blocks_into(b0, id, src, dst))
            })?;
            let r = match r {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.forget();
                    return None;
                }
                Err(errno) => {
                    if errno == libc::EINVAL {
                        // The file system takes no direct reads after all.
                        self.refused.store(true, Ordering::Relaxed);
                    }
                    self.forget();
                    return None;
                }
            };
            match r {
                Ok(k) => done = at + k,
                Err(e) => return Some(Err(e)),
            }
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        Some(Ok(done))
    }

    /// How many reads were served from chunks read directly.
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Drops the chunks (after a failed or short one): the next reads go
    /// through the page cache until a stream starts again.
    fn forget(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.chunks.clear();
            s.run = 0;
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(s) = self.state.get_mut() {
            for c in s.chunks.drain(..) {
                recycle(c);
            }
        }
    }
}

/// Chunk buffers kept for the next chunks (of any file), at most
/// [`KEPT`]: a new buffer costs a mapping and the zeroing of its pages.
static FREE: Mutex<Vec<AlignedBuf>> = Mutex::new(Vec::new());
/// Free chunk buffers kept, at most: one stream's worth.
const KEPT: usize = AHEAD as usize + 1;

/// Keeps the buffer of a chunk gone by, if nobody else holds the chunk
/// and fewer than [`KEPT`] are kept (else it is unmapped).
fn recycle(c: Arc<Chunk>) {
    let Some(b) = Arc::try_unwrap(c).ok().and_then(Chunk::into_buf) else {
        return;
    };
    if let Ok(mut f) = FREE.lock() {
        if f.len() < KEPT {
            f.push(b);
        }
    }
}

/// The cipher bytes chunk `index` reads: from the page holding its first
/// block's first byte to the end of the page holding its last block's last.
fn chunk_range(index: u64, cbs: u64) -> (u64, usize) {
    let per = chunk_blocks(cbs);
    let a = HEADER_LEN as u64 + index * per * cbs;
    let b = a + per * cbs;
    let start = a / ALIGN as u64 * ALIGN as u64;
    let end = b.div_ceil(ALIGN as u64) * ALIGN as u64;
    (start, (end - start) as usize)
}

/// Content blocks per chunk for cipher blocks of `cbs` bytes: as many as
/// fit in [`CHUNK_BYTES`] wherever they start in a page (1014 for
/// AES-GCM).
pub(crate) fn chunk_blocks(cbs: u64) -> u64 {
    ((CHUNK_BYTES - 2 * ALIGN) as u64 / cbs).max(1)
}

/// A direct descriptor on `file`, if direct reads are to be used on it.
fn open_direct(file: &File) -> Option<Arc<File>> {
    if std::env::var("CRYPTKEEP_DIRECT_READS").is_ok_and(|v| v.trim() == "0")
        || crate::sys::in_memory(file)
    {
        return None;
    }
    direct_descriptor(file)
}

/// `file` opened again, read-only and `O_DIRECT`, through its descriptor.
fn direct_descriptor(file: &File) -> Option<Arc<File>> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .map(Arc::new)
}

/// Reads directly until `buf` is full or end of file (a read that ends
/// inside a page has reached the end of the file).
fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) if (n + k) % ALIGN != 0 => return Ok(n + k),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
