//! Daemonizing `open`: fork while single-threaded, a readiness pipe from
//! the child to the parent (errors in the child become the parent's exit
//! code), the session and standard streams detached by the one
//! [`cryptkeep_keep::detach`] every daemon uses, and signal handling by
//! `sigwait` on a dedicated thread.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::exit::{CliError, CliResult, Code};
use crate::interrupt::Signals;

/// The child's end of the readiness pipe, and the parent's pid.
pub struct Notifier(File, i32);

impl Notifier {
    /// Tells the parent the volume is served. False if the parent is gone
    /// (then nobody will report the mount, and the caller should undo it).
    pub fn ready(mut self) -> bool {
        self.0.write_all(b"OK\n").is_ok()
    }

    /// Until now the child was killed with its parent (it unlocks on the
    /// parent's behalf); from here on it serves on its own and outlives
    /// the parent. False if the parent is already gone.
    pub fn outlive_parent(&self) -> bool {
        crate::interrupt::outlive_parent(self.1)
    }

    /// Sends an error to the parent, which exits with its code.
    pub fn fail(mut self, e: &CliError) {
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        let line = format!(
            "ERR\t{}\t{}\t{}\t{}\n",
            e.code.as_i32(),
            clean(&e.what),
            clean(&e.place),
            clean(&e.hint)
        );
        let _ = self.0.write_all(line.as_bytes());
    }
}

/// Which side of the fork we are on.
pub enum Forked {
    /// The original process: the child's pid and the pipe's read end.
    Parent {
        /// The daemon's pid.
        child: i32,
        /// Read end of the readiness pipe.
        rx: File,
    },
    /// The daemon.
    Child(Notifier),
}

/// Number of threads of this process (from /proc/self/status).
pub fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(1)
}

/// Forks. Must be called while the process has one thread: the child
/// continues with only the calling thread. The child is killed when the
/// parent dies until it calls [`Notifier::outlive_parent`], and ignores
/// SIGPIPE (a parent gone before reading the readiness line shows as a
/// failed [`Notifier::ready`], not as a dead daemon).
pub fn fork() -> CliResult<Forked> {
    let threads = thread_count();
    if threads != 1 {
        return Err(CliError::new(
            Code::Unexpected,
            format!("cannot fork the daemon: the process has {threads} threads"),
            "open",
            "use --foreground, and please report this bug",
        ));
    }
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::new(
            Code::Daemon,
            format!("cannot create a pipe: {e}"),
            "open",
            "retry",
        ));
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the process is single-threaded (checked above), so the child
    // may continue running Rust code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: closing the descriptors pipe2 just returned.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return Err(CliError::new(
            Code::Daemon,
            format!("cannot fork: {e}"),
            "open",
            "free some memory or processes and retry",
        ));
    }
    if pid == 0 {
        crate::interrupt::die_with_parent(parent);
        // SAFETY: closing our copy of the read end; fds[1] is owned by the
        // File. SIG_IGN is a valid disposition for SIGPIPE.
        unsafe {
            libc::close(fds[0]);
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        // SAFETY: fds[1] is a valid descriptor we own from here on.
        let tx = unsafe { File::from_raw_fd(fds[1]) };
        return Ok(Forked::Child(Notifier(tx, parent)));
    }
    // SAFETY: closing the parent's copy of the write end.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is a valid descriptor we own from here on.
    let rx = unsafe { File::from_raw_fd(fds[0]) };
    Ok(Forked::Parent { child: pid, rx })
}

/// In the parent: waits for the child's readiness line. `Ok` when it
/// serves; its error otherwise (exit 7 if it died without a word), or
/// [`interrupt::interrupted`](crate::interrupt::interrupted) for `place`
/// when one of `signals` came first (the caller then stops the child).
pub fn wait_ready(mut rx: File, log: &Path, signals: &Signals, place: &str) -> CliResult<()> {
    let mut buf = Vec::new();
    let mut b = [0u8; 256];
    loop {
        if let Err(sig) = signals.wait(rx.as_fd()) {
            return Err(crate::interrupt::interrupted(sig, place));
        }
        match rx.read(&mut b) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&b[..n]);
                if buf.contains(&b'\n') {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or("");
    if line == "OK" {
        return Ok(());
    }
    let parts: Vec<&str> = line.split('\t').collect();
    if parts.len() == 5 && parts[0] == "ERR" {
        let code = Code::from_i32(parts[1].parse().unwrap_or(8));
        return Err(CliError::new(code, parts[2], parts[3], parts[4]));
    }
    let tail = crate::rundir::read_tail(log, 64 << 10)
        .ok()
        .map(|b| {
            let s = String::from_utf8_lossy(&b);
            s.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
        })
        .unwrap_or_default();
    Err(CliError::new(
        Code::Daemon,
        format!(
            "the daemon died before serving the volume{}",
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        ),
        log.display().to_string(),
        "run with --foreground to see its errors",
    ))
}

/// Copies of standard input, output and error, kept across
/// [`cryptkeep_keep::detach::detach`] for a keep that asks for a passphrase on them.
pub struct Stdio3([OwnedFd; 3]);

impl Stdio3 {
    /// Duplicates descriptors 0, 1 and 2 (close-on-exec); `None` if one
    /// is closed.
    pub fn save() -> Option<Stdio3> {
        let dup = |fd: i32| {
            // SAFETY: F_DUPFD_CLOEXEC on a descriptor number only duplicates it.
            let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
            // SAFETY: n was just returned by fcntl and is owned by nothing else.
            (n >= 0).then(|| unsafe { OwnedFd::from_raw_fd(n) })
        };
        Some(Stdio3([dup(0)?, dup(1)?, dup(2)?]))
    }

    /// The three descriptors, for a child's standard streams.
    pub fn into_fds(self) -> [OwnedFd; 3] {
        self.0
    }
}

/// Makes this process non-dumpable: no core dumps, no ptrace by
/// non-root, /proc/PID/mem closed — it will hold the volume key.
pub fn harden() {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) has no memory-safety preconditions.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// Locks the daemon's memory (mlockall, pages locked as they are touched):
/// the key never reaches swap, and serving the loop device cannot wait on
/// writeback through itself under memory pressure. Best effort: returns
/// the error for the log.
pub fn lock_memory() -> Result<(), std::io::Error> {
    // SAFETY: mlockall has no memory-safety preconditions.
    let r = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and the threads it
/// starts later), so that [`wait_signal`] receives them.
pub fn block_signals() {
    let set = signal_set();
    // SAFETY: set is an initialized sigset_t; old mask not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits for SIGTERM, SIGINT or SIGHUP (blocked with [`block_signals`]);
/// returns its number.
pub fn wait_signal() -> i32 {
    let set = signal_set();
    let mut sig = 0;
    loop {
        // SAFETY: set is initialized; sig is a valid out-pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            return sig;
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    set
}

/// Sends SIGTERM to `pid` and waits up to `secs` seconds for it to go.
/// Returns whether it is gone.
pub fn terminate(pid: i32, secs: u64) -> bool {
    terminate_after(pid, secs, true)
}

/// Waits up to `secs` seconds for `pid` to go (reaping it if it is our
/// child), after sending it SIGTERM if `signal`. Returns whether it is gone.
pub fn terminate_after(pid: i32, secs: u64, signal: bool) -> bool {
    if pid <= 0 {
        return true;
    }
    if !crate::state::pid_alive(pid) {
        // SAFETY: reaps our own child if it is a zombie; harmless otherwise.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        return true;
    }
    if signal {
        // SAFETY: kill with a positive pid and a valid signal.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let steps = secs * 100;
    for _ in 0..steps {
        // Reap it if it is our own child (the parent of a failed open).
        // SAFETY: waitpid with WNOHANG on a pid; status pointer may be null.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if !crate::state::pid_alive(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Stops child `pid`: SIGTERM, up to 5 s to exit, then SIGKILL; reaped.
pub fn stop(pid: i32) {
    if !terminate(pid, 5) {
        // SAFETY: kill and waitpid on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}
