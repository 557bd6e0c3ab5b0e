//! The I/O side of the rings. A [`Client`] is shared by all the threads of
//! the I/O process; a call takes a free queue (its ring pair and data slot)
//! for its duration, so each ring has one producer and one consumer. The
//! caller spins briefly for the answer, then sleeps on the completion
//! word; while it sleeps it checks every 10 ms whether the keep is still
//! there (hang-up on the control socket, or the arena's shutdown word), so
//! a dead keep turns every call into [`Error::Gone`], never a hang.

use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::arena::{Arena, MAX_WORKERS};
use super::entry::{read_cqe, write_sqe, Submission};
use super::futex;
use super::spin::SpinBudget;
use crate::proto::{op_name, status_text, STATUS_OK, STATUS_SHUTDOWN};
use crate::{control, Error};

/// How long the caller of a large request waits for its answer without
/// sleeping (`CRYPTKEEP_KEEP_CLIENT_SPIN_US`, default 5 µs): the first
/// 2 µs spinning, the rest yielding the CPU between checks. Short on
/// purpose: a large request keeps a worker busy for hundreds of
/// microseconds, and on few cores a waiting caller leaves the CPU to the
/// keep's workers and to other work. (Before workers were pinned, longer
/// client spins cut sector throughput through the keep by a third on two
/// cores; with pinned workers `cryptkeep bench keep` measured 200 µs
/// within a few percent of 5 µs, docs/design/keep-rings.md.) Small
/// requests wait longer ([`small_spin_window`]).
fn spin_window() -> Duration {
    micros_from_env("CRYPTKEEP_KEEP_CLIENT_SPIN_US", 5)
}

/// How long a caller waits for the answer to a small request (less than
/// [`LARGE_REQUEST`] of input: a name, a small file's block, the null
/// call) without sleeping (`CRYPTKEEP_KEEP_CLIENT_SMALL_SPIN_US`, default
/// 200 µs), yielding the CPU between checks after the first 2 µs. A
/// worker answers such a request within microseconds once it runs, and a
/// caller that slept pays a wake-up of tens of microseconds on a VM on
/// top: a tar extract through `fs mount --keep`, two small requests per
/// file, took 1.08× the time of `fs mount` with the 5 µs of large
/// requests and 0.97× with 200 µs (docs/guide/performance.md).
fn small_spin_window() -> Duration {
    micros_from_env("CRYPTKEEP_KEEP_CLIENT_SMALL_SPIN_US", 200)
}

/// The whole microseconds in environment variable `name`, or `default`
/// when it is unset or not a number.
fn micros_from_env(name: &str, default: u64) -> Duration {
    let us = std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_micros(us)
}

/// How long a caller waits awake after waking a sleeping worker (the
/// ceiling of its budget when budgets adapt, `spin.rs`).
const WAKE_SPIN: Duration = Duration::from_micros(200);

/// Busy-polling without yielding lasts this long.
pub(crate) const HOT_SPIN: Duration = Duration::from_micros(2);

/// The client's own indices of one queue.
struct QueueState {
    sq_tail: u32,
    cq_head: u32,
    next_tag: u64,
    /// The last submission had to wake a sleeping worker.
    woke_worker: bool,
    /// How long to wait awake for an answer after waking a worker.
    after_wake: SpinBudget,
    /// Leased by a thread on the CPU this queue's worker is pinned to: the
    /// caller polls only briefly ([`HOT_SPIN`]) before it sleeps, since
    /// longer polls would only keep an ordinary worker off that CPU.
    local: bool,
}

/// The I/O process's handle on a keep's arena.
pub struct Client {
    arena: Arena,
    peer: OwnedFd,
    queues: Vec<Mutex<QueueState>>,
    gone: AtomicBool,
    /// How long a caller of a large request waits awake.
    spin: Duration,
    /// How long a caller of a small request waits awake.
    small_spin: Duration,
    /// Worker threads of the keep (queue q is served by worker q mod this).
    workers: usize,
    /// For each worker, 1 + the CPU it is pinned to, or 0.
    worker_cpu: Vec<u32>,
    /// Whether any worker is pinned.
    pinned: bool,
    /// Whether any worker floats (with pinned ones: the small requests'
    /// workers).
    floating: bool,
    /// Until when (nanoseconds since `epoch`) small requests go to a
    /// pinned worker: a floating worker was slow to answer
    /// ([`CONTENDED_WAIT`]).
    contended_until: AtomicU64,
    epoch: Instant,
}

/// A small request a floating worker answered this late means the machine
/// is busy: the worker waited for a turn on a CPU (a polling or woken
/// worker answers within tens of microseconds otherwise). For the next
/// [`CONTENDED_HOLD`], small requests go to a pinned worker (the one on
/// the caller's CPU, where there is one), which runs at once when woken
/// if it is real-time; then a floating worker is tried again. This
/// catches a busy machine where the CPU pressure cannot be read
/// (`cryptkeep_pressure`).
const CONTENDED_WAIT: Duration = Duration::from_millis(2);
/// See [`CONTENDED_WAIT`].
const CONTENDED_HOLD: Duration = Duration::from_millis(100);

/// CPU numbers past this (the kernel's default `NR_CPUS` ceiling) are
/// taken as "not pinned".
const MAX_CPUS: u32 = 8192;

thread_local! {
    static START: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The calling thread's last request was a large one.
    static LAST_LARGE: Cell<bool> = const { Cell::new(false) };
}

/// Requests with at least this many bytes of input are large: a stream's
/// runs of content blocks, not names or single small blocks. With pinned
/// workers, a thread whose last request was large sends the next to the
/// worker on its own CPU.
pub(crate) const LARGE_REQUEST: usize = 64 << 10;
static NEXT_START: AtomicUsize = AtomicUsize::new(0);

impl Client {
    /// Maps the arena the keep sent and watches `peer` (our end of the
    /// control socket) for the keep's death.
    pub fn connect(arena_fd: OwnedFd, peer: OwnedFd) -> Result<Client, Error> {
        let arena = Arena::from_fd(arena_fd)?;
        cryptkeep_pressure::prepare();
        let n = arena.config().queues;
        let spin = spin_window();
        let queues = (0..n)
            .map(|q| {
                let off = arena.queue_off(q);
                Mutex::new(QueueState {
                    sq_tail: arena.word(off).load(Ordering::SeqCst),
                    cq_head: arena.word(off + 192).load(Ordering::SeqCst),
                    next_tag: 1,
                    woke_worker: false,
                    after_wake: SpinBudget::new(HOT_SPIN, spin.max(WAKE_SPIN)),
                    local: false,
                })
            })
            .collect();
        let workers =
            (arena.workers().load(Ordering::SeqCst) as usize).clamp(1, MAX_WORKERS.min(n));
        let worker_cpu: Vec<u32> = (0..workers)
            .map(|w| arena.worker_cpu(w).load(Ordering::SeqCst))
            .map(|c| if c <= MAX_CPUS { c } else { 0 })
            .collect();
        let pinned = worker_cpu.iter().any(|&c| c != 0);
        let floating = worker_cpu.contains(&0);
        Ok(Client {
            arena,
            peer,
            queues,
            gone: AtomicBool::new(false),
            spin,
            small_spin: small_spin_window(),
            workers,
            worker_cpu,
            pinned,
            floating,
            contended_until: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// Whether small requests go to a pinned worker for now (a busy
    /// machine): tasks queue for the CPUs
    /// (`cryptkeep_pressure::busy`), or a floating worker answered one
    /// 2 ms late or later within the last 100 ms. Public for the tests of
    /// the routing.
    #[doc(hidden)]
    pub fn contended(&self) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        now < self.contended_until.load(Ordering::Relaxed) || cryptkeep_pressure::busy()
    }

    /// Notes how long a small request on queue `q` waited, when a
    /// floating worker serves that queue.
    fn note_small_wait(&self, q: usize, waited: Duration) {
        if waited >= CONTENDED_WAIT && self.worker_cpu[q % self.workers] == 0 {
            let until = self.epoch.elapsed() + CONTENDED_HOLD;
            self.contended_until
                .fetch_max(until.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// The largest buffer one call may carry (a queue's slot).
    pub fn max_request(&self) -> usize {
        self.arena.config().slot_bytes
    }

    /// Number of queues (requests that can be in flight at once).
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// True once the keep is known to be gone.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// One request: copies `buf[..in_len]` into a slot, waits for the
    /// answer and copies it back into `buf`; returns its length.
    pub fn call(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, Error> {
        if buf.len() > self.max_request() || in_len > buf.len() {
            return Err(Error::BadRequest(format!(
                "{} of {} bytes (input {in_len}) does not fit a {}-byte slot",
                op_name(op),
                buf.len(),
                self.max_request()
            )));
        }
        self.with_slot(|slot| {
            slot.buf()[..in_len].copy_from_slice(&buf[..in_len]);
            let n = slot.call_at(op, arg, 0, buf.len(), in_len)?;
            buf[..n].copy_from_slice(&slot.buf()[..n]);
            Ok(n)
        })
    }

    /// Runs `f` with a queue's slot leased: the caller fills the shared
    /// buffer itself and calls [`Slot::call`] on it (no copies).
    pub fn with_slot<R>(&self, f: impl FnOnce(&mut Slot<'_>) -> R) -> R {
        let (q, guard) = self.take_queue();
        let mut slot = Slot {
            client: self,
            q,
            state: guard,
            pending: std::collections::VecDeque::new(),
        };
        f(&mut slot)
    }

    /// A queue for the calling thread. With pinned workers: after a large
    /// request, one of a worker on the CPU the thread runs on (a floating
    /// one where no worker is pinned there); after a small one, one of a
    /// floating worker if there are such, else of a pinned worker on
    /// another CPU. On a busy machine ([`Client::contended`]) a small
    /// request leaves the floating workers for the pinned worker on the
    /// thread's own CPU (where there is one), a real-time thread that
    /// takes that CPU over when woken: no wake-up across CPUs, and the
    /// other CPUs stay with the other work.
    /// Otherwise, or with those busy, the
    /// first free one from the thread's own starting point, or, all busy,
    /// its starting queue once free. The lease is `local` when the
    /// queue's worker is pinned to the thread's CPU, whichever way it was
    /// chosen.
    fn take_queue(&self) -> (usize, MutexGuard<'_, QueueState>) {
        let n = self.queues.len();
        let start = START.with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_START.fetch_add(1, Ordering::Relaxed));
            }
            s.get()
        });
        let here = self.cpu_here();
        let cpu_of = |q: usize| self.worker_cpu[q % self.workers];
        let on_here = |q: usize| here.is_some_and(|c| cpu_of(q) == c);
        let order = || (0..n).map(move |i| (start + i) % n);
        let chosen = if here.is_some() {
            // Large: the worker on this CPU (on a CPU without one, which
            // would only pay a wake-up elsewhere, as small). Small: a
            // floating worker where there are such, else a pinned one on
            // another CPU; on a busy machine, the pinned one here.
            let pinned_here = here.is_some_and(|c| self.worker_cpu.contains(&c));
            let large = LAST_LARGE.get() && pinned_here;
            // Only small requests leave the floating workers.
            let busy = self.floating && !LAST_LARGE.get() && self.contended();
            let wanted = |q: usize| match (large, self.floating && !busy) {
                (true, _) => on_here(q),
                (false, true) => cpu_of(q) == 0,
                (false, false) if busy && pinned_here => on_here(q),
                (false, false) => cpu_of(q) != 0 && !on_here(q),
            };
            order()
                .filter(|&q| wanted(q))
                .find_map(|q| self.queues[q].try_lock().ok().map(|g| (q, g)))
        } else {
            None
        };
        let (q, mut g) = chosen
            .or_else(|| order().find_map(|q| self.queues[q].try_lock().ok().map(|g| (q, g))))
            .unwrap_or_else(|| {
                let q = start % n;
                (q, self.queues[q].lock().unwrap_or_else(|p| p.into_inner()))
            });
        g.local = on_here(q);
        (q, g)
    }

    /// Whether queue `q`'s worker is pinned to a CPU other than the one
    /// the calling thread runs on now.
    fn pinned_elsewhere(&self, q: usize) -> bool {
        let cpu = self.worker_cpu[q % self.workers];
        cpu != 0 && self.cpu_here() != Some(cpu)
    }

    /// 1 + the CPU the calling thread runs on, when some worker is pinned.
    fn cpu_here(&self) -> Option<u32> {
        if !self.pinned {
            return None;
        }
        // SAFETY: sched_getcpu(3) takes no arguments (vDSO or getcpu(2)).
        let cpu = u32::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        Some(cpu + 1)
    }

    /// Pushes an arbitrary descriptor on `queue` and waits for its
    /// completion: for tests of the keep's checks against hostile input.
    #[doc(hidden)]
    pub fn submit_raw(
        &self,
        queue: usize,
        op: u32,
        arg: u64,
        offset: u64,
        in_len: u32,
        cap: u32,
    ) -> Result<(u32, u32), Error> {
        let q = queue % self.queues.len();
        let mut st = self.queues[q].lock().unwrap_or_else(|p| p.into_inner());
        st.local = false;
        let s = Submission {
            tag: st.next_tag,
            op,
            arg,
            offset,
            in_len,
            cap,
        };
        let c = self.round_trip(q, &mut st, s)?;
        Ok((c.status, c.out_len))
    }

    fn check_gone(&self) -> Result<(), Error> {
        if self.gone.load(Ordering::Relaxed) {
            return Err(Error::Gone);
        }
        if self.arena.shutdown().load(Ordering::Relaxed) != 0
            || control::peer_gone(self.peer.as_fd())
        {
            self.gone.store(true, Ordering::Relaxed);
            return Err(Error::Gone);
        }
        Ok(())
    }

    /// Submits `s` on queue `q` and waits for its completion.
    fn round_trip(
        &self,
        q: usize,
        st: &mut QueueState,
        s: Submission,
    ) -> Result<super::entry::Completion, Error> {
        self.submit(q, st, &s)?;
        self.complete(q, st, s.tag)
    }

    /// Pushes `s` on queue `q` and rings its worker's doorbell.
    fn submit(&self, q: usize, st: &mut QueueState, s: &Submission) -> Result<(), Error> {
        LAST_LARGE.set(s.in_len as usize >= LARGE_REQUEST);
        if self.gone.load(Ordering::Relaxed) {
            return Err(Error::Gone);
        }
        let a = &self.arena;
        let off = a.queue_off(q);
        let depth = a.config().depth as u32;
        let sq_head = a.word(off + 64).load(Ordering::Acquire);
        if st.sq_tail.wrapping_sub(sq_head) >= depth {
            // Our own ring is full only if the keep stopped taking requests.
            self.check_gone()?;
            return Err(Error::BadRequest("the submission ring is full".into()));
        }
        st.next_tag = st.next_tag.wrapping_add(1);
        // SAFETY: masked into queue q's submission ring, which this thread
        // owns while it holds the queue's lock.
        unsafe { write_sqe(a.sqe(q, st.sq_tail), s) };
        st.sq_tail = st.sq_tail.wrapping_add(1);
        a.word(off).store(st.sq_tail, Ordering::SeqCst);
        let w = q % self.workers;
        a.doorbell_seq(w).fetch_add(1, Ordering::SeqCst);
        if a.doorbell_sleeping(w).load(Ordering::SeqCst) != 0 {
            futex::wake(a.doorbell_seq(w), 1);
            // The worker needs a wake-up (tens of µs on a VM); wait for it
            // awake rather than pay a second wake-up for ourselves.
            st.woke_worker = true;
        }
        Ok(())
    }

    /// Waits for the completion of request `tag` on queue `q` and takes it.
    fn complete(
        &self,
        q: usize,
        st: &mut QueueState,
        tag: u64,
    ) -> Result<super::entry::Completion, Error> {
        let a = &self.arena;
        let off = a.queue_off(q);
        // While tasks queue for the CPUs a yield would hand this CPU to
        // them for a whole turn, long after the answer came: a caller
        // whose worker is pinned to another CPU polls without yielding
        // for its whole budget, then sleeps. Not for a worker that may
        // run on this CPU, which the poll would keep waiting.
        let hot = cryptkeep_pressure::busy() && self.pinned_elsewhere(q);
        if st.local {
            // The worker runs on this CPU: a real-time one took it over
            // when it was woken and has answered by the time this thread
            // runs again (no sleep, so no wake-up to wait for on a busy
            // CPU); an ordinary one runs once this thread sleeps.
            st.woke_worker = false;
            self.wait_completion(q, st, HOT_SPIN, false)?;
        } else {
            let waited = if std::mem::take(&mut st.woke_worker) {
                let budget = st.after_wake.get();
                let (waited, slept) = self.wait_completion(q, st, budget, hot)?;
                if slept {
                    st.after_wake.missed(waited);
                } else {
                    st.after_wake.caught(waited);
                }
                waited
            } else {
                let budget = if LAST_LARGE.get() {
                    self.spin
                } else {
                    self.small_spin
                };
                self.wait_completion(q, st, budget, hot)?.0
            };
            if !LAST_LARGE.get() {
                self.note_small_wait(q, waited);
            }
        }
        // SAFETY: masked into queue q's completion ring.
        let c = unsafe { read_cqe(a.cqe(q, st.cq_head)) };
        st.cq_head = st.cq_head.wrapping_add(1);
        a.word(off + 192).store(st.cq_head, Ordering::Release);
        if c.tag != tag {
            self.gone.store(true, Ordering::Relaxed);
            return Err(Error::BadRequest(format!(
                "the keep answered tag {} to request {tag}",
                c.tag
            )));
        }
        Ok(c)
    }

    /// Waits until queue `q`'s completion ring has an entry for us, awake
    /// for up to `budget` (yielding the CPU between checks past
    /// [`HOT_SPIN`], unless `hot`), then asleep; answers how long it
    /// waited and whether it slept.
    fn wait_completion(
        &self,
        q: usize,
        st: &QueueState,
        budget: Duration,
        hot: bool,
    ) -> Result<(Duration, bool), Error> {
        let a = &self.arena;
        let tail = a.word(a.queue_off(q) + 128);
        let waiting = a.word(a.queue_off(q) + 256);
        let ready = || tail.load(Ordering::Acquire) != st.cq_head;
        let start = Instant::now();
        let mut spins = 0u32;
        while !ready() {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(16) {
                let t = start.elapsed();
                if t > budget {
                    break;
                }
                if t > HOT_SPIN && !hot {
                    std::thread::yield_now();
                    continue;
                }
            }
            std::hint::spin_loop();
        }
        let slept = !ready();
        while !ready() {
            let seen = tail.load(Ordering::SeqCst);
            waiting.store(1, Ordering::SeqCst);
            if seen == st.cq_head && tail.load(Ordering::SeqCst) == seen {
                futex::wait(tail, seen, Duration::from_millis(10));
            }
            waiting.store(0, Ordering::SeqCst);
            if !ready() {
                self.check_gone()?;
            }
        }
        Ok((start.elapsed(), slept))
    }
}

/// A leased queue: its data slot and its rings, for one thread.
pub struct Slot<'a> {
    client: &'a Client,
    q: usize,
    state: MutexGuard<'a, QueueState>,
    /// Started requests, oldest first: (tag, op, cap). The queue's one
    /// worker answers them in order.
    pending: std::collections::VecDeque<(u64, u32, usize)>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // Requests still in flight must be collected before the queue is
        // lent to another thread.
        while !self.pending.is_empty() {
            if self.finish().is_err() {
                break;
            }
        }
    }
}

impl Slot<'_> {
    /// The whole data slot (shared with the keep; contents on lease are
    /// whatever the last request left).
    pub fn buf(&mut self) -> &mut [u8] {
        let a = &self.client.arena;
        let len = a.config().slot_bytes;
        // SAFETY: the slot of queue q lies inside the data area; this thread
        // holds the queue's lock, so no other thread of ours uses it, and
        // the keep only touches it while a request of ours is in flight
        // (during which we do not use this slice).
        unsafe { std::slice::from_raw_parts_mut(a.data_ptr(self.q * len), len) }
    }

    /// One request on the slot's first `in_len` bytes; the answer is left
    /// in the slot. Returns its length.
    pub fn call(&mut self, op: u32, arg: u64, in_len: usize) -> Result<usize, Error> {
        let cap = self.client.max_request();
        self.call_at(op, arg, 0, cap, in_len)
    }

    /// One request on `buf()[offset..offset + cap]`, whose first `in_len`
    /// bytes are the input. Returns the answer's length.
    pub fn call_at(
        &mut self,
        op: u32,
        arg: u64,
        offset: usize,
        cap: usize,
        in_len: usize,
    ) -> Result<usize, Error> {
        self.start_at(op, arg, offset, cap, in_len)?;
        self.finish()
    }

    /// Starts a request like [`Slot::call_at`] without waiting for it; the
    /// caller must not touch `buf()[offset..offset + cap]` until
    /// [`Slot::finish`] returned it. Several may be in flight (up to the
    /// ring's depth, on disjoint ranges); they are answered in order.
    pub fn start_at(
        &mut self,
        op: u32,
        arg: u64,
        offset: usize,
        cap: usize,
        in_len: usize,
    ) -> Result<(), Error> {
        let slot = self.client.max_request();
        if offset.checked_add(cap).is_none_or(|e| e > slot) || in_len > cap {
            return Err(Error::BadRequest(format!(
                "range {offset}+{cap} (input {in_len}) is outside the {slot}-byte slot"
            )));
        }
        if self.pending.len() + 1 >= self.client.arena.config().depth {
            return Err(Error::BadRequest(
                "too many requests in flight on this slot".into(),
            ));
        }
        let s = Submission {
            tag: self.state.next_tag,
            op,
            arg,
            offset: (self.q * slot + offset) as u64,
            in_len: in_len as u32,
            cap: cap as u32,
        };
        self.client.submit(self.q, &mut self.state, &s)?;
        self.pending.push_back((s.tag, op, cap));
        Ok(())
    }

    /// Waits for the oldest request [`Slot::start_at`] began; returns the
    /// answer's length.
    pub fn finish(&mut self) -> Result<usize, Error> {
        let Some((tag, op, cap)) = self.pending.pop_front() else {
            return Err(Error::BadRequest(
                "no request in flight on this slot".into(),
            ));
        };
        let c = self.client.complete(self.q, &mut self.state, tag)?;
        match c.status {
            STATUS_OK if c.out_len as usize <= cap => Ok(c.out_len as usize),
            STATUS_OK => Err(Error::BadRequest(format!(
                "the keep answered {} bytes into a {cap}-byte buffer",
                c.out_len
            ))),
            STATUS_SHUTDOWN => Err(Error::Gone),
            status => Err(Error::Refused {
                op: op_name(op),
                status,
                detail: status_text(status).into(),
            }),
        }
    }
}
