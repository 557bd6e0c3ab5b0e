//! The process-wide pool of crypto helper threads (one per core beyond the
//! first). A caller offers its job; idle helpers join in; the caller never
//! waits for a helper that has not started, and returns only once no
//! helper references its job any more.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use crate::job::Job;

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
pub(crate) struct Pool {
    state: Mutex<PoolState>,
    work_cv: Condvar,
    done_cv: Condvar,
}

impl Pool {
    pub(crate) fn global() -> &'static Pool {
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
    pub(crate) fn run(&self, job: &Job<'_>) {
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
