//! The keep's server side, as a library: a program becomes a keep by
//! calling one of [`run_volume`], [`run_overlay`] or [`run_runtime`] from
//! its main thread, in the process a spawner started with the control
//! socket on descriptor [`CONTROL_FD`] (see [`crate::spawn`]). Like
//! age-plugin's `run_state_machine`, the host provides only what is its
//! own (how to read a passphrase and unlock a volume); the library does
//! everything that makes the process a keep, in this order:
//!
//! 1. checks that the host installed the secret heap
//!    ([`install_secret_heap!`](crate::install_secret_heap)), routes
//!    AWS-LC's allocations through it, wipes ordinary frees from here on,
//!    takes the control socket and hardens the process
//!    ([`crate::sandbox::harden`]);
//! 2. runs the host's unlock step (volume, overlay) in frames below its
//!    own, switches the heap to `memfd_secret`, copies the key there and
//!    builds the kind's ciphers;
//! 3. wipes every stack frame the unlock used and the vector registers;
//! 4. detaches from the terminal (log file), locks its memory, and serves
//!    ([`crate::service::run`]: arena, Landlock, seccomp, READY) until the
//!    peer closes the channel; then the keys are dropped and wiped.
//!
//! Each kind answers only its own operations ([`crate::proto::VOLUME_OPS`],
//! or [`crate::proto::AUTH_VOLUME_OPS`] for a volume keep given an
//! [`AuthVolumeKey`], [`crate::proto::OVERLAY_OPS`],
//! [`crate::proto::RUNTIME_OPS`]); every
//! other code is [`crate::proto::STATUS_UNSUPPORTED`]. A failure before
//! READY is sent to the spawner as FAILED with an exit code and returned.

mod auth_volume;
mod overlay;
mod runtime;
mod volume;

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

pub use auth_volume::{AuthVolumeHandler, AuthVolumeKey};
pub use overlay::{run_overlay, OverlayHandler, OverlayKey};
pub use runtime::{run_runtime, RuntimeHandler, MAX_REPEAT};
pub use volume::{run_volume, UnlockedVolume, VolumeHandler, VolumeKey};

use crate::keep::{send_failed, Failure};
use crate::secret_heap;
use crate::secret_mem::{SecretKind, SecretMem};
use crate::service::{self, ServiceOptions, SELFTEST_ENV};
use crate::shm::{ArenaConfig, Handler};
pub use crate::spawn::CONTROL_FD;

/// Exit code of a keep that could not get memory (cryptkeep's table: 3).
pub const EXIT_NO_MEMORY: i32 = 3;
/// Exit code of a keep that failed for its own reasons: sandbox, arena,
/// a missing secret heap, a cipher it cannot build (cryptkeep's table: 7).
pub const EXIT_KEEP: i32 = 7;
/// Exit code of a keep started without its control socket (cryptkeep's
/// table: 1, wrong parameters).
pub const EXIT_USAGE: i32 = 1;

/// Facts for the READY message and the log (`key`, `value`).
pub type Facts = Vec<(&'static str, String)>;

/// Where a keep's Rust allocations live once it holds keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RustHeap {
    /// In `memfd_secret` memory: the host must have installed
    /// [`SwitchAlloc`](crate::secret_heap::SwitchAlloc) with
    /// [`install_secret_heap!`](crate::install_secret_heap); the server
    /// refuses to start otherwise.
    #[default]
    Secret,
    /// Accept a host without it: Rust's allocations (key schedules of the
    /// portable ciphers, the overlay's keys, temporaries) stay in the
    /// ordinary heap, locked (`mlockall`) and non-dumpable, but readable
    /// by root through `/proc/PID/mem`, and blocks freed before unlocking
    /// are not wiped. AWS-LC's allocations and the volume key still go to
    /// `memfd_secret`. READY's `heap` fact says which one a keep got.
    Ordinary,
}

/// How a keep runs: a plain struct, `ServerConfig::default()` for the
/// usual keep (control socket on descriptor 3, streams kept, a worker per
/// CPU, the default arena, the secret heap required).
#[derive(Debug)]
pub struct ServerConfig {
    /// The control socket; `None` takes descriptor [`CONTROL_FD`] (checked
    /// to be a socket).
    pub control: Option<OwnedFd>,
    /// Once unlocked, append standard error to this file and point stdin
    /// and stdout at `/dev/null`; the keep then also logs its sandbox and
    /// its shutdown. `None`: the streams stay as they are (quiet).
    pub log: Option<PathBuf>,
    /// Where Rust allocations live (see [`RustHeap`]).
    pub rust_heap: RustHeap,
    /// Worker threads (normally the number of CPUs).
    pub workers: usize,
    /// Arena geometry.
    pub arena: ArenaConfig,
    /// Try a forbidden system call right after READY (seccomp must kill
    /// the keep); defaults to [`SELFTEST_ENV`] = `forbidden-syscall`.
    pub selftest_forbidden_syscall: bool,
    /// See [`ServiceOptions::ordinary_workers`].
    pub ordinary_workers: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let s = ServiceOptions::default();
        ServerConfig {
            control: None,
            log: None,
            rust_heap: RustHeap::default(),
            workers: s.workers,
            arena: s.arena,
            selftest_forbidden_syscall: std::env::var(SELFTEST_ENV).as_deref()
                == Ok("forbidden-syscall"),
            ordinary_workers: false,
        }
    }
}

/// What a kind's preparation produced: the handler, the key page (if the
/// kind keeps one) and its facts.
struct Prepared<H> {
    handler: H,
    secret: Option<SecretMem>,
    facts: Facts,
}

/// A failure of the keep itself (not of the host's unlock step).
fn keep_failure(what: impl Into<String>, hint: &str) -> Failure {
    Failure {
        code: EXIT_KEEP,
        what: what.into(),
        place: "keep".into(),
        hint: hint.into(),
    }
}

/// Step 1: heap hooks, control socket, hardening. On failure the peer has
/// been told (when there is one).
fn start(cfg: &mut ServerConfig) -> Result<(OwnedFd, bool), Failure> {
    // Before AWS-LC allocates anything: its heap follows ours into secret
    // memory once the secret heap is active.
    let lc_hooked = secret_heap::install_aws_lc_hooks();
    // Until then (and for blocks from before then), what the ordinary heap
    // frees or outgrows is wiped first.
    secret_heap::wipe_ordinary_frees();
    let control = match cfg.control.take() {
        Some(fd) => fd,
        None => take_control_fd().inspect_err(|f| {
            // No peer to tell: say it here.
            eprintln!("cryptkeep: {} ({}): {}", f.what, f.place, f.hint);
        })?,
    };
    if cfg.rust_heap == RustHeap::Secret && !secret_heap::installed() {
        return Err(tell(
            &control,
            keep_failure(
                "this program runs a keep but has no secret heap: its key schedules would \
                 stay in ordinary memory",
                "add `cryptkeep_keep::install_secret_heap!();` at the top level of the program \
                 (it installs SwitchAlloc as the global allocator), or set \
                 ServerConfig::rust_heap to RustHeap::Ordinary to accept that",
            ),
        ));
    }
    if let Err(e) = crate::sandbox::harden() {
        return Err(tell(
            &control,
            keep_failure(e.to_string(), "report this bug"),
        ));
    }
    Ok((control, lc_hooked))
}

/// Sends `f` to the peer as FAILED (best effort) and gives it back.
fn tell(control: &OwnedFd, f: Failure) -> Failure {
    let _ = send_failed(control.as_fd(), &f);
    f
}

/// Descriptor [`CONTROL_FD`], checked to be a socket.
fn take_control_fd() -> Result<OwnedFd, Failure> {
    // SAFETY: fstat on a descriptor number only reads its metadata.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer.
    let ok = unsafe { libc::fstat(CONTROL_FD, &mut st) } == 0;
    if !ok || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(Failure {
            code: EXIT_USAGE,
            what: "the keep needs its control socket on descriptor 3".into(),
            place: "keep".into(),
            hint: "a keep is started by a spawner (cryptkeep_keep::spawn), not by hand".into(),
        });
    }
    // SAFETY: descriptor 3 is an open socket that nothing else in this
    // process owns (the spawner placed it there).
    Ok(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) })
}

/// From here on every allocation of the keep is in secret memory (where
/// the kernel has `memfd_secret`).
fn activate_heap() {
    if let Err(e) = secret_heap::activate() {
        eprintln!(
            "cryptkeep keep: warning: no secret heap ({e}); cipher state stays in mlocked memory"
        );
    }
}

/// A key page of `len` bytes.
fn new_secret(len: usize) -> Result<SecretMem, Failure> {
    SecretMem::new(len).map_err(|e| Failure {
        code: EXIT_NO_MEMORY,
        what: e.to_string(),
        place: "keep".into(),
        hint: "raise RLIMIT_MEMLOCK".into(),
    })
}

/// The `secret_mem` fact for `s` (and a warning on the fallback).
fn secret_kind(s: &SecretMem) -> &'static str {
    match s.kind() {
        SecretKind::MemfdSecret => "memfd_secret",
        SecretKind::LockedFallback => {
            eprintln!(
                "cryptkeep keep: warning: memfd_secret is not available; the key is in mlocked, \
                 non-dumpable memory instead (root can read it through /proc/PID/mem)"
            );
            "mlock+MADV_DONTDUMP (memfd_secret unavailable)"
        }
    }
}

/// The `secret_mem` fact of a kind that keeps its keys in the heap.
fn heap_kind() -> &'static str {
    if secret_heap::is_active() {
        "memfd_secret"
    } else {
        "mlock (memfd_secret unavailable)"
    }
}

/// Steps 3 and 4, common to every kind: called by `run_*` right after
/// the preparation returned (the stack wipe must be inlined into their
/// frame, so it is theirs), with the prepared handler.
fn serve<H: Handler + 'static>(
    cfg: ServerConfig,
    control: OwnedFd,
    lc_hooked: bool,
    p: Prepared<H>,
) -> Result<(), Failure> {
    let Prepared {
        handler,
        secret,
        mut facts,
    } = p;
    facts.push((
        "heap",
        match (
            secret_heap::is_active(),
            lc_hooked,
            secret_heap::installed(),
        ) {
            (true, true, true) => "memfd_secret (Rust and AWS-LC)".to_string(),
            (true, false, true) => "memfd_secret (Rust only)".to_string(),
            (true, true, false) => "memfd_secret (AWS-LC only; Rust heap ordinary)".to_string(),
            _ => "ordinary (mlocked)".to_string(),
        },
    ));
    crate::detach::detach_keep(cfg.log.as_deref());
    if cfg.log.is_some() {
        let summary: Vec<String> = facts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        eprintln!(
            "cryptkeep keep: pid {}; {}",
            std::process::id(),
            summary.join("; ")
        );
    }
    // SAFETY: mlockall has no memory-safety preconditions.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) } != 0 {
        eprintln!(
            "cryptkeep keep: warning: cannot lock memory (mlockall): {}",
            std::io::Error::last_os_error()
        );
    }
    let opts = ServiceOptions {
        workers: cfg.workers,
        arena: cfg.arena,
        facts,
        selftest_forbidden_syscall: cfg.selftest_forbidden_syscall,
        verbose: cfg.log.is_some(),
        ordinary_workers: cfg.ordinary_workers,
    };
    let r = service::run(control, Arc::new(handler), opts);
    drop(secret);
    r.map_err(|e| {
        eprintln!("cryptkeep keep: {e}");
        keep_failure(e.to_string(), "see the keep's log")
    })
}
