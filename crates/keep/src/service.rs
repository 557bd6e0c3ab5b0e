//! The keep's serving phase, common to every keep process: create the
//! arena, start the workers, lock the process down (fds closed, Landlock,
//! seccomp), hand the arena over, then wait on the control socket. End of
//! file there (the I/O process closed its end or died) or a `CLOSE` message
//! ends the service: workers stop, the handler (and with it every key) is
//! dropped and wiped.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::keep::send_ready;
use crate::sandbox;
use crate::sched::{RealtimeDefault, WorkerSched};
use crate::shm::{self, Arena, ArenaConfig, Handler};
use crate::{control, Error};

/// How a keep serves.
pub struct ServiceOptions {
    /// Worker threads (the number of CPUs, or `CRYPTKEEP_KEEP_WORKERS`).
    pub workers: usize,
    /// Arena geometry.
    pub arena: ArenaConfig,
    /// Facts sent with READY (for `status` and the log).
    pub facts: Vec<(&'static str, String)>,
    /// Self-test of the sandbox: right after READY, try a forbidden system
    /// call (create a socket). seccomp must kill the keep with SIGSYS; if it
    /// does not, the keep logs that and goes on. Set from the environment
    /// variable [`SELFTEST_ENV`] = `forbidden-syscall` by the keep's main.
    pub selftest_forbidden_syscall: bool,
    /// Log the sandbox and the shutdown to standard error.
    pub verbose: bool,
    /// Keep every worker under the ordinary scheduler unless
    /// `CRYPTKEEP_KEEP_RTPRIO` says otherwise, whatever the handler would
    /// choose ([`Handler::realtime_workers`](crate::shm::Handler::realtime_workers)): the
    /// spawner knows the I/O comes in large requests that ordinary
    /// workers serve better on a busy machine (`crate::sched`).
    pub ordinary_workers: bool,
}

/// Environment variable that turns on [`ServiceOptions::selftest_forbidden_syscall`].
pub const SELFTEST_ENV: &str = "CRYPTKEEP_KEEP_SELFTEST";

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            workers: workers_from_env().unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            }),
            arena: ArenaConfig::default(),
            facts: Vec::new(),
            selftest_forbidden_syscall: std::env::var(SELFTEST_ENV).as_deref()
                == Ok("forbidden-syscall"),
            verbose: true,
            ordinary_workers: false,
        }
    }
}

/// `CRYPTKEEP_KEEP_WORKERS`: the number of worker threads (1 to 64), if set.
fn workers_from_env() -> Option<usize> {
    std::env::var("CRYPTKEEP_KEEP_WORKERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| (1..=64).contains(n))
}

/// Serves `handler` to the peer on `control` until it goes away. Returns
/// after the workers stopped; the caller then drops its keys and exits.
/// What the sandbox achieved is written to standard error (the keep's log).
pub fn run(control: OwnedFd, handler: Arc<dyn Handler>, opts: ServiceOptions) -> Result<(), Error> {
    let arena = Arc::new(Arena::create(opts.arena)?);
    // Landlock binds the calling thread and the threads it starts later:
    // before the workers. Capabilities are per thread too, but dropping them
    // first would subject thread creation to RLIMIT_NPROC (root's process
    // count): each worker drops its own instead, then this thread. seccomp
    // is synchronised to every thread after.
    let landlock = sandbox::landlock::restrict_all()?;
    // Scheduling first: a nice value below 0 needs CAP_SYS_NICE.
    let sched = WorkerSched::from_env(if opts.ordinary_workers {
        RealtimeDefault::None
    } else {
        handler.realtime_workers()
    });
    let verbose = opts.verbose;
    let init: shm::ThreadInit = Arc::new(move |pinned| {
        if let Err(e) = sched.apply_to_this_thread(pinned) {
            if verbose {
                eprintln!("cryptkeep keep: {e}; the worker keeps the default scheduling");
            }
        }
        sandbox::drop_capabilities()
    });
    let server = shm::serve_with(arena.clone(), handler, opts.workers.max(1), init)?;
    sandbox::drop_capabilities()?;
    let keep_fds = [2, control.as_raw_fd(), arena.fd().as_raw_fd()];
    sandbox::close_fds_except(&keep_fds)?;
    let allow = sandbox::seccomp::keep_serving();
    sandbox::seccomp::install(&allow)?;
    let report = sandbox::SandboxReport {
        landlock,
        seccomp_allowed: allow.len(),
    };
    let mut facts = opts.facts;
    facts.push(("sandbox", report.to_string()));
    facts.push(("pid", std::process::id().to_string()));
    if opts.verbose {
        eprintln!("cryptkeep keep: serving ({report})");
    }
    send_ready(control.as_fd(), arena.fd(), &facts)?;
    if opts.selftest_forbidden_syscall {
        // SAFETY: socket(2) with constant arguments; any descriptor it
        // returned would simply be leaked.
        let r = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
        eprintln!("cryptkeep keep: SANDBOX FAILURE: socket() after lock-down returned {r}");
    }
    loop {
        match control::recv(control.as_fd()) {
            Ok((msg, _)) if msg == b"CLOSE" => break,
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    server.shutdown();
    if opts.verbose {
        eprintln!("cryptkeep keep: channel closed; wiping keys and exiting");
    }
    Ok(())
}
