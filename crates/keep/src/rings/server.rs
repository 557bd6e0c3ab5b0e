//! The keep's side of the rings: worker threads that take submissions,
//! check them, run the [`Handler`] on the request's bytes and post
//! completions. Everything in the arena is written by a process the keep
//! does not trust, so each worker keeps its own copy of the indices it
//! owns, re-reads the peer's indices once per pass, and answers a malformed
//! descriptor with `STATUS_BAD_DESCRIPTOR` without touching memory outside
//! that queue's slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::arena::Arena;
use super::entry::{read_sqe, write_cqe, Completion, Submission};
use super::futex;
use super::spin::SpinBudget;
use crate::proto::{STATUS_BAD_DESCRIPTOR, STATUS_OK, STATUS_SHUTDOWN};
use crate::sched::Placement;
use crate::Error;

/// What the keep does with one request: read `in_len` bytes of `buf`,
/// answer in place (at most `buf.len()` bytes), return the answer's length
/// or a `crate::proto::STATUS_*` code.
///
/// `buf` is shared memory the I/O process can write while the handler
/// runs; handlers must not rely on it staying unchanged between two reads
/// (copy out what must be checked, as the ring code does).
pub trait Handler: Send + Sync {
    /// Handles one request.
    fn handle(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32>;

    /// How long a worker polls for the next request before it sleeps,
    /// unless `CRYPTKEEP_KEEP_SPIN_US` says otherwise: 50 µs, enough for
    /// the back-to-back megabyte requests of a volume. An overlay keep
    /// answers many small requests that come tens to a few hundred
    /// microseconds apart, and a wake-up costs tens of microseconds on a
    /// VM; it polls longer.
    fn idle_spin(&self) -> Duration {
        Duration::from_micros(50)
    }

    /// Whether the workers ask for a real-time policy unless
    /// `CRYPTKEEP_KEEP_RTPRIO` says otherwise (`crate::sched`): yes for a
    /// volume, whose authenticated or NBD-exported requests (128 KiB
    /// pieces, an NBD client's requests) each pay a hand-off that a woken
    /// worker running at once makes short; the spawner turns it off for
    /// a plain volume's loop device alone, whose ordinary pinned workers
    /// shared a busy machine better (`ServiceOptions::ordinary_workers`).
    /// A real-time worker barely polls, so a handler whose requests come
    /// in a stream of small ones a polling worker catches says no.
    fn realtime_by_default(&self) -> bool {
        true
    }

    /// Which workers ask for a real-time policy unless
    /// `CRYPTKEEP_KEEP_RTPRIO` says otherwise: all of them or none, as
    /// [`Handler::realtime_by_default`] says, unless a handler chooses the
    /// pinned ones only.
    fn realtime_workers(&self) -> crate::sched::RealtimeDefault {
        if self.realtime_by_default() {
            crate::sched::RealtimeDefault::All
        } else {
            crate::sched::RealtimeDefault::None
        }
    }

    /// Where the workers run unless `CRYPTKEEP_KEEP_PIN` says otherwise
    /// (`crate::sched`): pinned, one per CPU, for a volume's large
    /// requests. A daemon thread whose last request was large sends the
    /// next to the worker on its own CPU, which runs it while the thread
    /// sleeps, where the data is in the cache and without taking a second
    /// CPU from other work; small requests go to a worker that polls for
    /// them: a floating one where there are such ([`Placement::Mixed`]),
    /// else a pinned one on another CPU (`rings/client.rs`). A handler
    /// whose requests are mostly small says [`Placement::Floating`].
    fn placement(&self) -> Placement {
        Placement::Pinned
    }
}

/// The longest a worker keeps polling after its last request before it
/// sleeps on its doorbell (`CRYPTKEEP_KEEP_SPIN_US`, default the handler's
/// [`Handler::idle_spin`]); past the first microseconds it yields the CPU
/// between polls. With `CRYPTKEEP_KEEP_SPIN_ADAPT=1` how long it really
/// polls follows how soon requests have been coming (`spin.rs`).
fn spin_window(default: Duration) -> Duration {
    std::env::var("CRYPTKEEP_KEEP_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, Duration::from_micros)
}

/// The longest a worker under a real-time policy polls for the next
/// request. Its yields would not let ordinary threads run (the daemon's
/// among them), and a real-time thread woken on its doorbell runs at once,
/// so it sleeps almost as soon as its queues are empty.
const REALTIME_SPIN: Duration = Duration::from_micros(8);

/// How many of the workers are pinned (workers `0..pinned`), and how many
/// there are in all, for `asked` workers (one per CPU) over `queues`
/// queues: [`Placement::Mixed`] adds as many floating workers as pinned
/// ones, within the queues (a worker serves at least one) and the
/// doorbells.
fn worker_counts(placement: Placement, asked: usize, queues: usize) -> (usize, usize) {
    let cap = queues.clamp(1, super::arena::MAX_WORKERS);
    let asked = asked.clamp(1, cap);
    match placement {
        Placement::Floating => (0, asked),
        Placement::Pinned => (asked, asked),
        Placement::Mixed => {
            let pinned = asked.min((cap / 2).max(1));
            (pinned, (2 * pinned).min(cap))
        }
    }
}

/// Running workers; [`Server::shutdown`] stops them.
pub struct Server {
    arena: Arc<Arena>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Starts `workers` threads serving `arena` with `handler` (queue `q` is
/// served by worker `q % workers`) and returns once they all run.
pub fn serve(
    arena: Arc<Arena>,
    handler: Arc<dyn Handler>,
    workers: usize,
) -> Result<Server, Error> {
    serve_with(arena, handler, workers, Arc::new(|_| Ok(())))
}

/// Per-thread set-up a worker runs before it serves (for what the kernel
/// applies per thread: capabilities, Landlock).
pub type ThreadInit = Arc<dyn Fn(bool) -> Result<(), Error> + Send + Sync>;

/// [`serve`], with `init` run first on every worker thread; fails if it
/// fails on any.
pub fn serve_with(
    arena: Arc<Arena>,
    handler: Arc<dyn Handler>,
    workers: usize,
    init: ThreadInit,
) -> Result<Server, Error> {
    let queues = arena.config().queues;
    let placement = crate::sched::placement_from_env(handler.placement());
    let (pinned_workers, workers) = worker_counts(placement, workers, queues);
    arena.workers().store(workers as u32, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let spin = spin_window(handler.idle_spin());
    // Return only once every worker runs: a thread's start-up system calls
    // (set_robust_list, rseq, its name) must be over before the caller
    // applies a seccomp filter.
    let started = Arc::new(std::sync::Barrier::new(workers + 1));
    let failed: Arc<std::sync::Mutex<Option<Error>>> = Arc::new(std::sync::Mutex::new(None));
    let mut threads = Vec::new();
    for w in 0..workers {
        let mine: Vec<usize> = (0..queues).filter(|q| q % workers == w).collect();
        let (a, h, s, b) = (
            arena.clone(),
            handler.clone(),
            stop.clone(),
            started.clone(),
        );
        let (init, failed) = (init.clone(), failed.clone());
        let t = std::thread::Builder::new()
            .name(format!("keep-worker-{w}"))
            .spawn(move || {
                // Pinned, and the CPU published, before the arena is
                // handed over (and before seccomp); first, so that `init`
                // knows whether it was.
                let pinned = w < pinned_workers
                    && match crate::sched::pin_to_nth_cpu(w) {
                        Ok(cpu) => {
                            a.worker_cpu(w).store(cpu as u32 + 1, Ordering::SeqCst);
                            true
                        }
                        Err(_) => false,
                    };
                let ok = match init(pinned) {
                    Ok(()) => true,
                    Err(e) => {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        false
                    }
                };
                // Asked before the barrier: the caller may forbid the
                // system call once every worker runs.
                let realtime = crate::sched::this_thread_is_realtime();
                b.wait();
                if ok {
                    let spin = if realtime {
                        spin.min(REALTIME_SPIN)
                    } else {
                        spin
                    };
                    // Beside floating workers, a pinned one serves threads
                    // on its own CPU: their large requests, and their small
                    // ones on a busy machine (`rings/client.rs`); small
                    // ones from elsewhere only when the CPU has no pinned
                    // worker, or every queue of the others is taken.
                    let only_local = pinned && pinned_workers < workers;
                    Worker::new(a, h, w, mine).run(&s, spin, realtime, pinned, only_local)
                }
            })
            .map_err(|source| Error::Sys {
                what: "spawning a keep worker",
                source,
            })?;
        threads.push(t);
    }
    started.wait();
    let server = Server {
        arena,
        stop,
        threads,
    };
    let err = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(e) = err {
        server.shutdown();
        return Err(e);
    }
    Ok(server)
}

impl Server {
    /// Stops the workers: sets the arena's shutdown word (clients waiting
    /// or calling get [`Error::Gone`]), wakes everyone, joins the threads.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.arena.shutdown().store(1, Ordering::SeqCst);
        for w in 0..self.threads.len() {
            self.arena.doorbell_seq(w).fetch_add(1, Ordering::SeqCst);
            futex::wake(self.arena.doorbell_seq(w), i32::MAX);
        }
        for q in 0..self.arena.config().queues {
            let off = self.arena.queue_off(q);
            self.arena.word(off + 128).fetch_add(0, Ordering::SeqCst);
            futex::wake(self.arena.word(off + 128), i32::MAX);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A worker's private view of its queues: the indices it owns.
struct Worker {
    arena: Arc<Arena>,
    handler: Arc<dyn Handler>,
    id: usize,
    queues: Vec<usize>,
    sq_head: Vec<u32>,
    cq_tail: Vec<u32>,
    /// The last request served carried at least
    /// [`super::client::LARGE_REQUEST`] bytes of input.
    last_large: bool,
}

impl Worker {
    fn new(arena: Arc<Arena>, handler: Arc<dyn Handler>, id: usize, queues: Vec<usize>) -> Worker {
        let n = queues.len();
        Worker {
            arena,
            handler,
            id,
            queues,
            sq_head: vec![0; n],
            cq_tail: vec![0; n],
            last_large: false,
        }
    }

    /// Serves until `stop`. Between requests the worker polls for its spin
    /// budget (`spin`, or less when it adapts; see `spin.rs`), yielding the
    /// CPU past the first microseconds (unless `realtime`: a real-time
    /// thread's yield lets no ordinary thread run), then sleeps on its
    /// doorbell. A `pinned` worker does not poll after a large request,
    /// nor after any request when it serves `only_local` (beside floating
    /// workers): those come mostly from threads on its own CPU, which its
    /// polls would only keep waiting (the others, from a CPU without a
    /// pinned worker or when every queue of theirs is taken, pay a
    /// wake-up).
    fn run(
        mut self,
        stop: &AtomicBool,
        spin: Duration,
        realtime: bool,
        pinned: bool,
        only_local: bool,
    ) {
        let mut budget = SpinBudget::new(super::client::HOT_SPIN * 4, spin);
        // The end of the last request (for the budget), and when this
        // round of polling began (after a request, or after a sleep that
        // returned with nothing served: a timeout, or a queue whose
        // completion ring its peer does not empty).
        let mut last_work = Instant::now();
        let mut polling_since = last_work;
        let mut slept = false;
        let mut polls = 0u32;
        while !stop.load(Ordering::Relaxed) {
            if self.pass() {
                let gap = last_work.elapsed();
                if slept {
                    budget.missed(gap);
                } else {
                    budget.caught(gap);
                }
                slept = false;
                last_work = Instant::now();
                polling_since = last_work;
                continue;
            }
            polls = polls.wrapping_add(1);
            if !polls.is_multiple_of(16) {
                std::hint::spin_loop();
                continue;
            }
            let idle = polling_since.elapsed();
            let limit = if only_local || (pinned && self.last_large) {
                Duration::ZERO
            } else {
                budget.get()
            };
            if idle < limit {
                if !realtime && idle > super::client::HOT_SPIN * 4 {
                    std::thread::yield_now();
                }
                continue;
            }
            self.sleep(stop);
            slept = true;
            polling_since = Instant::now();
        }
    }

    /// Sleeps on the doorbell until a client rings it (or 100 ms pass).
    fn sleep(&mut self, stop: &AtomicBool) {
        let seq = self.arena.doorbell_seq(self.id).load(Ordering::SeqCst);
        self.arena
            .doorbell_sleeping(self.id)
            .store(1, Ordering::SeqCst);
        if !self.any_pending() && !stop.load(Ordering::SeqCst) {
            futex::wait(
                self.arena.doorbell_seq(self.id),
                seq,
                Duration::from_millis(100),
            );
        }
        self.arena
            .doorbell_sleeping(self.id)
            .store(0, Ordering::SeqCst);
    }

    /// Whether a queue has a request this worker could serve now: one
    /// whose completion ring is full (a peer that does not take its
    /// answers; ours never lets it fill) does not count, so such a peer
    /// gets the 100 ms sleep, not a worker polling for it without pause.
    fn any_pending(&self) -> bool {
        let depth = self.arena.config().depth as u32;
        self.queues.iter().enumerate().any(|(i, &q)| {
            let off = self.arena.queue_off(q);
            let tail = self.arena.word(off).load(Ordering::SeqCst);
            let cq_head = self.arena.word(off + 192).load(Ordering::SeqCst);
            tail != self.sq_head[i] && self.cq_tail[i].wrapping_sub(cq_head) < depth
        })
    }

    /// One pass over this worker's queues; true if any request was served.
    fn pass(&mut self) -> bool {
        let mut did = false;
        for i in 0..self.queues.len() {
            did |= self.serve_queue(i);
        }
        did
    }

    fn serve_queue(&mut self, i: usize) -> bool {
        let q = self.queues[i];
        let a: &Arena = &self.arena;
        let off = a.queue_off(q);
        let depth = a.config().depth as u32;
        let sq_tail = a.word(off).load(Ordering::Acquire);
        let pending = sq_tail.wrapping_sub(self.sq_head[i]);
        if pending == 0 {
            return false;
        }
        if pending > depth {
            // The peer wrote an impossible tail: skip whatever it claims is
            // there rather than read entries twice or out of order.
            self.sq_head[i] = sq_tail;
            a.word(off + 64).store(sq_tail, Ordering::Release);
            return true;
        }
        let mut did = false;
        while self.sq_head[i] != sq_tail {
            // Room in the completion ring? A peer that never consumes only
            // stalls its own queue.
            let cq_head = a.word(off + 192).load(Ordering::Acquire);
            if self.cq_tail[i].wrapping_sub(cq_head) >= depth {
                break;
            }
            // SAFETY: the entry index is masked into this queue's ring.
            let s = unsafe { read_sqe(a.sqe(q, self.sq_head[i])) };
            self.sq_head[i] = self.sq_head[i].wrapping_add(1);
            a.word(off + 64).store(self.sq_head[i], Ordering::Release);
            self.last_large = s.in_len as usize >= super::client::LARGE_REQUEST;
            let c = execute(a, &*self.handler, q, &s);
            // SAFETY: masked into this queue's completion ring.
            unsafe { write_cqe(a.cqe(q, self.cq_tail[i]), &c) };
            self.cq_tail[i] = self.cq_tail[i].wrapping_add(1);
            a.word(off + 128).store(self.cq_tail[i], Ordering::SeqCst);
            if a.word(off + 256).load(Ordering::SeqCst) != 0 {
                futex::wake(a.word(off + 128), 1);
            }
            did = true;
        }
        did
    }
}

/// Checks a submission against queue `q`'s slot and runs it.
fn execute(arena: &Arena, handler: &dyn Handler, q: usize, s: &Submission) -> Completion {
    let done = |status, out_len| Completion {
        tag: s.tag,
        status,
        out_len,
    };
    if arena.shutdown().load(Ordering::Relaxed) != 0 {
        return done(STATUS_SHUTDOWN, 0);
    }
    let slot = arena.config().slot_bytes as u64;
    let start = q as u64 * slot;
    let fits = s
        .offset
        .checked_add(s.cap as u64)
        .is_some_and(|end| s.offset >= start && end <= start + slot);
    if !fits || s.in_len > s.cap {
        return done(STATUS_BAD_DESCRIPTOR, 0);
    }
    // SAFETY: [offset, offset + cap) lies inside queue q's slot (checked
    // above), which only this worker touches on the keep's side while the
    // request is in flight. The I/O process may write it too; the bytes are
    // plain data and every handler treats them as untrusted.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(arena.data_ptr(s.offset as usize), s.cap as usize)
    };
    match handler.handle(s.op, s.arg, buf, s.in_len as usize) {
        Ok(n) if n <= s.cap as usize => done(STATUS_OK, n as u32),
        Ok(_) => done(crate::proto::STATUS_FAILED, 0),
        Err(status) => done(status.max(1), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_placement_adds_floating_workers_within_the_queues() {
        use Placement::*;
        assert_eq!(worker_counts(Floating, 2, 8), (0, 2));
        assert_eq!(worker_counts(Pinned, 2, 8), (2, 2));
        assert_eq!(worker_counts(Mixed, 2, 8), (2, 4));
        // Eight CPUs over eight queues: four of each.
        assert_eq!(worker_counts(Mixed, 8, 8), (4, 8));
        assert_eq!(worker_counts(Pinned, 16, 8), (8, 8));
        // One queue: one worker, pinned.
        assert_eq!(worker_counts(Mixed, 4, 1), (1, 1));
        assert_eq!(worker_counts(Mixed, 0, 3), (1, 2));
    }
}
