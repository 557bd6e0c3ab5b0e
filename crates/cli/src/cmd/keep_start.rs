//! Starting a keep: for `open --keep process`, spawn `cryptkeep __keep
//! volume ...` with the terminal and key file options (for `fs mount
//! --keep`, `__keep overlay ...`), wait for it to unlock (it asks for the
//! passphrase itself), and take the shared-memory arena it hands over. The
//! I/O daemon then reaches the keep only through the arena.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Child;

use cryptkeep_keep::keep::{recv_hello, Hello};
use cryptkeep_keep::spawn;

use super::open::Args;
use crate::exit::{CliError, CliResult, Code};
use crate::state::{self, KeepState};

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

fn keep_args(a: &Args, name: &str) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["__keep".into(), "volume".into(), a.volume.clone().into()];
    let mut opt = |k: &str, val: OsString| {
        v.push(k.into());
        v.push(val);
    };
    if let Some(h) = &a.header {
        opt("--header", h.clone().into());
    }
    if let Some(f) = &a.key.key_file {
        opt("--key-file", f.clone().into());
    }
    if let Some(n) = a.key.keyfile_size {
        opt("--keyfile-size", n.to_string().into());
    }
    opt("--keyfile-offset", a.key.keyfile_offset.to_string().into());
    if let Some(s) = a.key_slot {
        opt("--key-slot", s.to_string().into());
    }
    let backend = match a.crypto_backend {
        super::common::BackendArg::Accelerated => "accelerated",
        super::common::BackendArg::Portable => "portable",
    };
    opt("--crypto-backend", backend.into());
    opt("--log", state::log_path(name).into());
    v
}

/// Spawns the keep and waits until it has unlocked the volume (or failed:
/// its error, with its exit code, becomes ours).
pub fn start(a: &Args, name: &str) -> CliResult<KeepStarted> {
    spawn_and_wait(keep_args(a, name), &state::log_path(name), "the volume")
}

/// Spawns `cryptkeep ARGS...` as a keep and waits until it has unlocked
/// `what` (or failed: its error, with its exit code, becomes ours). `log`
/// is where the keep writes once it serves.
pub fn spawn_and_wait(args: Vec<OsString>, log: &Path, what: &str) -> CliResult<KeepStarted> {
    let exe = Path::new("/proc/self/exe");
    let sp = spawn::spawn(exe, args).map_err(|e| {
        CliError::new(
            Code::Daemon,
            format!("cannot start the keep: {e}"),
            "keep",
            "check that /proc is mounted",
        )
    })?;
    // Not reaped by us: the keep outlives `open`, and whoever it is
    // reparented to reaps it.
    let mut child: Child = sp.child;
    let pid = child.id() as i32;
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
