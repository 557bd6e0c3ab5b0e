//! Large READs of one io_uring queue, decrypted by a helper thread that is
//! kept off the queue's CPU.
//!
//! A queue thread is pinned to the CPU of the processes it serves, which
//! makes metadata requests cheap (no cross-CPU wake-up). For a streaming
//! read it means the decryption and the reader's own copying share one
//! CPU while the other idles: on 2 vCPUs, 1.2 GB/s against 1.6 GB/s with
//! unpinned queues (issue 4's note). So a READ of at least
//! [`OFFLOAD_MIN`] bytes goes to this helper, which decrypts straight into
//! the entry's payload buffer and reports through an eventfd that the
//! queue's ring reads; the queue thread then sleeps instead of polling, so
//! the reader keeps its CPU.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ring::SQE_LEN;
use crate::overlay::fs::OverlayFs;

/// READs this large or larger are offloaded (a kernel readahead request is
/// 128 KiB here; small reads are cheaper answered in place).
pub(crate) const OFFLOAD_MIN: usize = 32 << 10;

/// `IORING_OP_READ`.
const OP_READ: u8 = 22;

/// One offloaded READ: where its answer goes and what to read.
pub(crate) struct Job {
    /// The ring entry (its index in the queue).
    pub(crate) entry: usize,
    pub(crate) unique: u64,
    pub(crate) commit_id: u64,
    pub(crate) fh: u64,
    pub(crate) off: u64,
    /// The entry's payload buffer and how much of it the read may fill.
    pub(crate) buf: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: `buf` is an entry's payload buffer, which nobody else touches
// while the job is out: the kernel hands an entry back only after its
// commit, and the queue thread commits it only after the job is done.
unsafe impl Send for Job {}

/// A finished READ: the job's entry, its ids, and the bytes read or an
/// errno (negative).
pub(crate) struct Done {
    pub(crate) entry: usize,
    pub(crate) unique: u64,
    pub(crate) commit_id: u64,
    pub(crate) result: Result<usize, i32>,
}

struct Shared {
    /// Jobs waiting, and whether the helper should stop.
    jobs: Mutex<(VecDeque<Job>, bool)>,
    wake: Condvar,
    done: Mutex<Vec<Done>>,
}

/// The helper of one queue.
pub(crate) struct Reader {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    efd: OwnedFd,
    /// Where the ring's eventfd read puts the counter (leaked: the kernel
    /// may hold a read into it until the ring is gone).
    efd_buf: *mut u64,
}

impl Reader {
    /// Starts the helper of queue `qid`, allowed on every CPU but `qid`;
    /// like the queue thread it polls for `spin` before it sleeps.
    pub(crate) fn start(fs: &OverlayFs, qid: usize, spin: Duration) -> io::Result<Reader> {
        // SAFETY: eventfd(2) with valid flags; the new fd is owned here.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(raw) };
        let shared = Arc::new(Shared {
            jobs: Mutex::new((VecDeque::new(), false)),
            wake: Condvar::new(),
            done: Mutex::new(Vec::new()),
        });
        let (fs, sh, efd_raw) = (fs.clone(), shared.clone(), efd.as_raw_fd());
        let thread = std::thread::Builder::new()
            .name(format!("ck-uring-{qid}-rd"))
            .spawn(move || {
                avoid_cpu(qid);
                serve(&fs, &sh, efd_raw, spin);
            })?;
        Ok(Reader {
            shared,
            thread: Some(thread),
            efd,
            efd_buf: Box::leak(Box::new(0u64)),
        })
    }

    /// Hands `job` to the helper.
    pub(crate) fn submit(&self, job: Job) {
        if let Ok(mut g) = self.shared.jobs.lock() {
            g.0.push_back(job);
            self.shared.wake.notify_one();
        }
    }

    /// The READs finished since the last call.
    pub(crate) fn take_done(&self, out: &mut Vec<Done>) {
        if let Ok(mut d) = self.shared.done.lock() {
            out.append(&mut d);
        }
    }

    /// The SQE that reads the eventfd (completes once a job is done).
    pub(crate) fn eventfd_sqe(&self, user_data: u64) -> [u8; SQE_LEN] {
        let mut s = [0u8; SQE_LEN];
        s[0] = OP_READ;
        s[4..8].copy_from_slice(&self.efd.as_raw_fd().to_le_bytes());
        // Offset -1: the file's own position (an eventfd has none).
        s[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        s[16..24].copy_from_slice(&(self.efd_buf as u64).to_le_bytes());
        s[24..28].copy_from_slice(&8u32.to_le_bytes());
        s[32..40].copy_from_slice(&user_data.to_le_bytes());
        s
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Ok(mut g) = self.shared.jobs.lock() {
            g.1 = true;
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The helper's loop: take a job, read into its buffer, report it.
fn serve(fs: &OverlayFs, sh: &Shared, efd: i32, spin: Duration) {
    loop {
        // The next readahead request usually follows within microseconds:
        // poll briefly before sleeping (a sleeping vCPU is slow to wake).
        let t0 = Instant::now();
        let mut job = None;
        while job.is_none() && t0.elapsed() < spin {
            job = sh.jobs.lock().ok().and_then(|mut g| g.0.pop_front());
            std::thread::yield_now();
        }
        let job = if let Some(j) = job {
            j
        } else {
            let Ok(mut g) = sh.jobs.lock() else { return };
            loop {
                if let Some(j) = g.0.pop_front() {
                    break j;
                }
                if g.1 {
                    return;
                }
                g = match sh.wake.wait(g) {
                    Ok(g) => g,
                    Err(_) => return,
                };
            }
        };
        // SAFETY: see `impl Send for Job`: the buffer is this job's alone
        // until it is reported done, and `len` is within it.
        let buf = unsafe { std::slice::from_raw_parts_mut(job.buf, job.len) };
        let result = fs.do_read_into(job.fh, job.off, buf).map_err(|e| -e.code());
        if let Ok(mut d) = sh.done.lock() {
            d.push(Done {
                entry: job.entry,
                unique: job.unique,
                commit_id: job.commit_id,
                result,
            });
        }
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(efd, &one as *const u64 as *const libc::c_void, 8) };
    }
}

/// Restricts this thread to every allowed CPU except `cpu` (when there is
/// another one).
fn avoid_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_* stay within it for indices
    // below CPU_SETSIZE; sched_{get,set}affinity read and write only it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return;
        }
        if cpu < libc::CPU_SETSIZE as usize && libc::CPU_COUNT(&set) > 1 {
            libc::CPU_CLR(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }
}
