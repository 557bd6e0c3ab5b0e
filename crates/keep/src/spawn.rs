//! Starting a keep process: fork + exec of a program (normally the host
//! binary itself, `/proc/self/exe`) described by a [`SpawnConfig`], with
//! one end of a control socket on descriptor [`CONTROL_FD`] and the
//! standard streams inherited (or given), so the keep can ask for a
//! passphrase on the terminal itself.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};

use crate::control;
use crate::Error;

/// The descriptor number on which a keep finds its end of the control socket.
pub const CONTROL_FD: i32 = 3;

/// A keep process just started: its process handle and our end of the
/// control socket.
pub struct Spawned {
    /// The keep's process (reap it with `wait`, or let it be reparented).
    pub child: Child,
    /// Our end of the control socket.
    pub control: OwnedFd,
}

/// How to start a keep: a plain struct. The program must be a host of
/// [`crate::server`] (it calls `run_volume`, `run_overlay` or
/// `run_runtime` when it finds itself started with these arguments).
#[derive(Debug)]
pub struct SpawnConfig {
    /// The program; [`SpawnConfig::default`] is this program again,
    /// `/proc/self/exe` (a fresh exec of the same binary).
    pub program: PathBuf,
    /// Its arguments (which kind of keep, and the host's own options).
    pub args: Vec<OsString>,
    /// Environment variables set in the keep besides the inherited ones.
    pub env: Vec<(OsString, OsString)>,
    /// The keep's standard input, output and error; `None` inherits ours
    /// (so a keep can ask for a passphrase on our terminal).
    pub stdio: Option<[OwnedFd; 3]>,
}

impl Default for SpawnConfig {
    fn default() -> Self {
        SpawnConfig {
            program: PathBuf::from("/proc/self/exe"),
            args: Vec::new(),
            env: Vec::new(),
            stdio: None,
        }
    }
}

impl SpawnConfig {
    /// `program args...` with our environment and standard streams.
    pub fn new<I, S>(program: impl Into<PathBuf>, args: I) -> SpawnConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        SpawnConfig {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..SpawnConfig::default()
        }
    }
}

/// Starts a keep as `cfg` says. The child gets its end of a fresh control
/// socket as descriptor [`CONTROL_FD`] (not close-on-exec); every other
/// descriptor we hold is close-on-exec (Rust opens them so) and does not
/// reach it.
///
/// The keep never outlives the thread that spawns it: it gets
/// `PR_SET_PDEATHSIG(SIGKILL)` right after the fork (kept across exec),
/// and exits at once if that parent is already gone. A key derivation in
/// it therefore stops when its parent is killed; spawn it from the thread
/// that lives as long as the keep should (the daemon's main thread).
pub fn spawn(cfg: SpawnConfig) -> Result<Spawned, Error> {
    let mut cmd = Command::new(&cfg.program);
    cmd.args(&cfg.args);
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    if let Some([i, o, e]) = cfg.stdio {
        cmd.stdin(i).stdout(o).stderr(e);
    }
    spawn_command(cmd)
}

fn spawn_command(mut cmd: Command) -> Result<Spawned, Error> {
    let (ours, theirs) = control::socketpair()?;
    let raw = theirs.as_raw_fd();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl,
    // getppid, dup2, fcntl) on descriptors that exist in the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // The spawner is gone (no allocation here, after fork).
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if raw == CONTROL_FD {
                let flags = libc::fcntl(raw, libc::F_GETFD);
                if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, CONTROL_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|source| Error::Sys {
        what: "spawning the keep",
        source,
    })?;
    drop(theirs);
    Ok(Spawned {
        child,
        control: ours,
    })
}
