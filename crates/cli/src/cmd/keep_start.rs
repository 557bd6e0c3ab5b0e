//! Starting a keep: for `open --keep process`, spawn `cryptkeep __keep
//! volume ...` with the terminal and key file options (for `fs mount
//! --keep`, `__keep overlay ...`), wait for it to unlock (it asks for the
//! passphrase itself), and take the shared-memory arena it hands over. The
//! I/O daemon then reaches the keep only through the arena.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Child;

use cryptkeep_keep::keep::{recv_hello, Hello};
use cryptkeep_keep::spawn;

use crate::daemon::Stdio3;
use crate::exit::{CliError, CliResult, Code};
use crate::interrupt::{self, Signals};
use crate::state::KeepState;

/// A keep that unlocked the volume and serves it.
pub struct KeepStarted {
    /// The shared-memory arena it created.
    pub arena: OwnedFd,
    /// Our end of its control socket (closing every copy stops the keep).
    pub control: OwnedFd,
    /// Its process id.
    pub pid: i32,
    /// What `status` shows about it.
    pub state: KeepState,
}

/// Spawns `cryptkeep ARGS...` as a keep and waits until it has unlocked
/// `what` (or failed: its error, with its exit code, becomes ours). `log`
/// is where the keep writes once it serves. The keep dies with the calling
/// thread (see [`spawn::spawn`]); SIGTERM, SIGINT or SIGHUP while
/// it derives the key kill it and give [`interrupt::interrupted`].
pub fn spawn_and_wait(
    args: Vec<OsString>,
    log: &Path,
    what: &str,
    stdio: Option<Stdio3>,
) -> CliResult<KeepStarted> {
    let signals = Signals::block()?;
    let cfg = spawn::SpawnConfig {
        args,
        stdio: stdio.map(Stdio3::into_fds),
        ..spawn::SpawnConfig::default()
    };
    let sp = spawn::spawn(cfg).map_err(|e| {
        CliError::new(
            Code::Daemon,
            format!("cannot start the keep: {e}"),
            "keep",
            "check that /proc is mounted",
        )
    })?;
    // Reaped by us only when it fails; once it serves it lives as long as
    // this process (it is killed when we die) and exits when its channel
    // closes.
    let mut child: Child = sp.child;
    let pid = child.id() as i32;
    if let Err(sig) = signals.wait(sp.control.as_fd()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(interrupt::interrupted(sig, what));
    }
    match recv_hello(&sp.control) {
        Ok(Hello::Ready { arena, facts }) => {
            let fact = |k: &str| {
                facts
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let state = KeepState {
                mode: "process".into(),
                pid: Some(pid),
                pid_start: crate::procid::start_time(pid),
                secret_mem: fact("secret_mem"),
                sandbox: fact("sandbox"),
            };
            Ok(KeepStarted {
                arena,
                control: sp.control,
                pid,
                state,
            })
        }
        Ok(Hello::Failed(f)) => {
            let _ = child.wait();
            Err(CliError::new(
                Code::from_i32(f.code),
                f.what,
                f.place,
                f.hint,
            ))
        }
        Err(e) => {
            let status = child.wait().ok();
            Err(CliError::new(
                Code::Daemon,
                format!("the keep ended without unlocking {what} ({e}; exit {status:?})"),
                "keep",
                format!("see {}", log.display()),
            ))
        }
    }
}

/// What the process that started a keep needs to end it in order: a
/// second descriptor of its control socket and its pid. The keep is killed
/// when that process dies (it was spawned with a parent-death signal), so
/// before exiting it closes the channel and waits for the keep to wipe its
/// keys and exit.
pub struct KeepGuard {
    control: OwnedFd,
    pid: i32,
}

impl KeepGuard {
    /// A guard for the keep `k`.
    pub fn new(k: &KeepStarted) -> CliResult<KeepGuard> {
        let control = k.control.try_clone().map_err(|e| {
            CliError::new(
                Code::Daemon,
                format!("cannot duplicate the keep's control socket: {e}"),
                "keep",
                "free some descriptors and retry",
            )
        })?;
        Ok(KeepGuard {
            control,
            pid: k.pid,
        })
    }

    /// Shuts the channel down (for every descriptor of it, so the keep
    /// sees it closed even while others are open), then reaps the keep,
    /// killing it if it has not exited within 5 s.
    pub fn close_and_wait(self) {
        // SAFETY: shutdown on a socket descriptor we own.
        unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        if !crate::daemon::terminate_after(self.pid, 5, false) {
            crate::daemon::stop(self.pid);
        }
    }
}
