//! Large READs of one io_uring queue, served by a helper thread that is
//! kept off the queue's CPU and answers on a ring of its own.
//!
//! A queue thread is pinned to the CPU of the processes it serves, which
//! makes metadata requests cheap (no cross-CPU wake-up). For a streaming
//! read it would put the decryption, the kernel's copy of the answer into
//! the page cache and the reader's own copying on one CPU while the other
//! idles. So a READ of at least [`OFFLOAD_MIN`] bytes goes to this helper,
//! which decrypts straight into the entry's payload buffer and commits it
//! on its own ring: COMMIT_AND_FETCH copies the answer in the context of
//! the thread that submits it, so that copy runs on the helper's CPU too.
//!
//! The kernel answers a command on the ring that sent it, so an entry the
//! helper committed delivers its next request to the helper. The helper
//! serves that one itself if it is a large READ (a streaming reader's
//! next request usually is), and otherwise hands the entry back to the
//! queue thread, whose commit brings it home: after a stream, metadata
//! requests are answered on the caller's CPU again after one hand-over
//! per entry.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::entry::{cmd_sqe, write_out_header, Entry, ReadRequest, CMD_COMMIT_AND_FETCH};
use super::ring::{Completion, Ring};
use super::wire::Sqe128;
use crate::ops::Ops;

/// READs this large or larger are served by the helper (a kernel
/// readahead request is 128 KiB or more; small reads are cheaper answered
/// in place).
pub(crate) const OFFLOAD_MIN: usize = 32 << 10;

/// `IORING_OP_READ`.
const OP_READ: u8 = 22;
/// `user_data` of the helper's eventfd read (entries use their index).
const JOBS_READY: u64 = u64::MAX;

/// What the queue thread and its helper share.
struct Shared {
    /// Large READs handed over by the queue thread, as entry numbers.
    jobs: Mutex<Vec<usize>>,
    /// Entries the helper received a request in that it leaves to the
    /// queue thread.
    handed_back: Mutex<Vec<usize>>,
    /// READs handed over and not committed yet.
    outstanding: AtomicUsize,
    /// Entries the kernel still holds, on either ring.
    live: AtomicUsize,
    /// Why the helper stopped, if it failed.
    failure: Mutex<Option<String>>,
    stop: AtomicBool,
}

/// The helper of one queue, seen from the queue thread.
pub(crate) struct Reader {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Wakes the helper (its ring reads it).
    jobs_efd: Arc<OwnedFd>,
    /// Wakes the queue thread (its ring reads it).
    back_efd: Arc<OwnedFd>,
    /// Where the queue ring's eventfd read puts the counter (leaked: the
    /// kernel may hold a read into it until the ring is gone).
    back_buf: *mut u64,
}

/// What the helper thread needs to serve its queue.
pub(crate) struct HelperSetup {
    /// The file system.
    pub(crate) fs: Arc<dyn Ops>,
    /// The `/dev/fuse` descriptor the entries were registered on.
    pub(crate) dev: Arc<OwnedFd>,
    /// The queue (and the CPU to stay off).
    pub(crate) qid: u16,
    /// A copy of the queue's entries.
    pub(crate) entries: Vec<Entry>,
    /// How long to poll before sleeping.
    pub(crate) spin: Duration,
}

impl Reader {
    /// Starts the helper of queue `setup.qid`, allowed on every CPU but
    /// that one; like the queue thread it polls for `setup.spin` before it
    /// sleeps. Fails if its ring cannot be set up.
    pub(crate) fn start(setup: HelperSetup) -> io::Result<Reader> {
        let jobs_efd = Arc::new(eventfd()?);
        let back_efd = Arc::new(eventfd()?);
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Vec::new()),
            handed_back: Mutex::new(Vec::new()),
            outstanding: AtomicUsize::new(0),
            live: AtomicUsize::new(setup.entries.len()),
            failure: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let (sh, jobs, back) = (shared.clone(), jobs_efd.clone(), back_efd.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let qid = setup.qid;
        let thread = std::thread::Builder::new()
            .name(format!("ck-uring-{qid}-rd"))
            .spawn(move || {
                avoid_cpu(qid as usize);
                // Made here: a single-issuer ring belongs to its creator.
                let ring = match Ring::new(16) {
                    Ok(r) => {
                        let _ = ready_tx.send(Ok(()));
                        r
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut h = Helper {
                    setup,
                    sh: &sh,
                    ring,
                    jobs_efd: jobs.as_raw_fd(),
                    back_efd: back.as_raw_fd(),
                    jobs_buf: Box::leak(Box::new(0u64)),
                    owned: 0,
                };
                if let Err(e) = h.serve() {
                    // Its entries are gone with its ring; reads it had
                    // taken stay unanswered, so the queue stops too.
                    if let Ok(mut f) = sh.failure.lock() {
                        *f = Some(e.to_string());
                    }
                    sh.live.fetch_sub(h.owned, Ordering::AcqRel);
                    notify(h.back_efd);
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("read helper did not start"))??;
        Ok(Reader {
            shared,
            thread: Some(thread),
            jobs_efd,
            back_efd,
            back_buf: Box::leak(Box::new(0u64)),
        })
    }

    /// Hands the large READ in entry `entry` to the helper.
    pub(crate) fn submit(&self, entry: usize) {
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut g) = self.shared.jobs.lock() {
            g.push(entry);
        }
        notify(self.jobs_efd.as_raw_fd());
    }

    /// Whether reads handed over are still being decrypted (the queue
    /// thread then leaves the CPU to the reader instead of polling).
    pub(crate) fn busy(&self) -> bool {
        self.shared.outstanding.load(Ordering::Acquire) > 0
    }

    /// Entries handed back since the last call: each holds a request for
    /// the queue thread to answer and commit.
    pub(crate) fn take_handed_back(&self, out: &mut Vec<usize>) {
        if let Ok(mut d) = self.shared.handed_back.lock() {
            out.append(&mut d);
        }
    }

    /// Entries the kernel still holds on either ring.
    pub(crate) fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// Notes that the kernel gave back an entry of the queue thread's ring
    /// for good (the connection ended).
    pub(crate) fn entry_gone(&self) {
        self.shared.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// Why the helper stopped, if it failed.
    pub(crate) fn failure(&self) -> Option<String> {
        self.shared.failure.lock().ok().and_then(|f| f.clone())
    }

    /// The SQE that reads the queue thread's eventfd (completes when the
    /// helper hands an entry back, fails or sees the last entry go).
    pub(crate) fn eventfd_sqe(&self, user_data: u64) -> Sqe128 {
        eventfd_read_sqe(self.back_efd.as_raw_fd(), self.back_buf, user_data)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        notify(self.jobs_efd.as_raw_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The helper thread's state.
struct Helper<'a> {
    setup: HelperSetup,
    sh: &'a Shared,
    ring: Ring,
    jobs_efd: i32,
    back_efd: i32,
    jobs_buf: *mut u64,
    /// Entries whose last command is on this ring.
    owned: usize,
}

impl Helper<'_> {
    /// Serves until told to stop: reads handed over, and requests that
    /// arrive in the entries this ring holds.
    fn serve(&mut self) -> io::Result<()> {
        let mut done = Vec::new();
        let mut jobs = Vec::new();
        // SAFETY: the counter buffer is leaked: it outlives the ring.
        unsafe {
            self.ring
                .push(&eventfd_read_sqe(self.jobs_efd, self.jobs_buf, JOBS_READY))?
        };
        while !self.sh.stop.load(Ordering::Acquire) {
            // The next readahead request usually follows within
            // microseconds: poll briefly before sleeping (a sleeping vCPU
            // is slow to wake), unless tasks queue for the CPUs.
            let t0 = Instant::now();
            let spin = if cryptkeep_pressure::busy() {
                Duration::ZERO
            } else {
                self.setup.spin
            };
            loop {
                self.ring.submit_and_poll()?;
                self.ring.drain(&mut done);
                if let Ok(mut g) = self.sh.jobs.lock() {
                    jobs.append(&mut g);
                }
                if !done.is_empty() || !jobs.is_empty() || t0.elapsed() >= spin {
                    break;
                }
                std::thread::yield_now();
            }
            if done.is_empty() && jobs.is_empty() {
                self.ring.submit_and_wait()?;
                self.ring.drain(&mut done);
                if let Ok(mut g) = self.sh.jobs.lock() {
                    jobs.append(&mut g);
                }
            }
            for i in jobs.drain(..) {
                self.answer_read(i)?;
                self.owned += 1;
                self.sh.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
            for Completion { user_data, res } in done.drain(..) {
                if user_data == JOBS_READY {
                    if res != -libc::ECANCELED {
                        let sqe = eventfd_read_sqe(self.jobs_efd, self.jobs_buf, JOBS_READY);
                        // SAFETY: as above, a leaked counter buffer.
                        unsafe { self.ring.push(&sqe)? };
                    }
                    continue;
                }
                let i = user_data as usize;
                if res < 0 {
                    // The connection ended: the entry is the kernel's no more.
                    self.owned -= 1;
                    if self.sh.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                        notify(self.back_efd);
                    }
                    continue;
                }
                // SAFETY: its completion arrived on this ring: the helper
                // owns the entry until it commits or hands it back.
                if unsafe { self.setup.entries[i].large_read(OFFLOAD_MIN) }.is_some() {
                    self.answer_read(i)?;
                } else {
                    self.owned -= 1;
                    if let Ok(mut g) = self.sh.handed_back.lock() {
                        g.push(i);
                    }
                    notify(self.back_efd);
                }
            }
        }
        Ok(())
    }

    /// Decrypts the READ in entry `i` into its payload and queues its
    /// commit on this ring. The helper owns the entry: the queue handed it
    /// over, or its completion arrived on this ring.
    fn answer_read(&mut self, i: usize) -> io::Result<()> {
        let s = &mut self.setup;
        let e = &mut s.entries[i];
        // SAFETY: the helper owns the entry; so for every accessor below.
        let Some(ReadRequest {
            unique,
            commit_id,
            fh,
            off,
            size,
        }) = (unsafe { e.large_read(0) })
        else {
            return Err(io::Error::other(format!("io_uring entry {i}: not a READ")));
        };
        // SAFETY: the helper owns the entry.
        let payload = unsafe { e.payload() };
        let (error, n) = match s.fs.read(fh, off, &mut payload[..size]) {
            Ok(n) => (0, n),
            Err(errno) => (-errno.code(), 0),
        };
        // SAFETY: the helper owns the entry.
        write_out_header(unsafe { e.header() }, unique, error, n);
        super::served_one();
        let sqe = cmd_sqe(
            s.dev.as_raw_fd(),
            CMD_COMMIT_AND_FETCH,
            i,
            e,
            commit_id,
            s.qid,
        );
        // SAFETY: the kernel owns the entry's buffers until its next
        // completion; neither thread touches them meanwhile.
        unsafe { self.ring.push(&sqe) }
    }
}

/// A new eventfd.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with valid flags; the new fd is owned here.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Adds one to eventfd `efd` (wakes the ring that reads it).
fn notify(efd: i32) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd.
    unsafe { libc::write(efd, &one as *const u64 as *const libc::c_void, 8) };
}

/// The SQE that reads eventfd `efd`'s counter into `buf`.
fn eventfd_read_sqe(efd: i32, buf: *mut u64, user_data: u64) -> Sqe128 {
    Sqe128 {
        opcode: OP_READ,
        fd: efd,
        // Offset -1: the file's own position (an eventfd has none).
        off: u64::MAX,
        addr: buf as u64,
        len: 8,
        user_data,
        ..Sqe128::default()
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
