//! Key work in a short-lived keep: `format` and the keyslot verbs run in a
//! forked child that is made non-dumpable, gets no core file and no new
//! privileges before it reads a passphrase or makes a key. The volume key
//! is generated and used only there; the parent just waits and passes the
//! exit status on. (Long-lived keys — `open` — live in the process keep,
//! see cmd/keep_serve.rs and docs/threat-model.md.)
//!
//! The child is killed when the parent dies (`PR_SET_PDEATHSIG`); a stop
//! signal to the parent (SIGTERM, SIGINT, SIGHUP) is passed on to the
//! child, waited for, and becomes exit 128 + its number.

use crate::exit::{CliError, CliResult, Code};
use crate::interrupt::{self, Signals};

/// Runs `verb` in a hardened child process and returns its outcome. The
/// child prints its own error (so the message is the same as in-process)
/// and exits with its code; the parent then exits with that code too.
pub fn run_isolated(verb: impl FnOnce() -> CliResult) -> CliResult {
    if crate::daemon::thread_count() != 1 {
        // fork is only sound single-threaded; stay in process rather than risk it.
        return verb();
    }
    let signals = Signals::block()?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the process is single-threaded (checked above), so the child
    // may go on running Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::new(
            Code::NoMemory,
            format!("cannot fork the key process: {e}"),
            "keep",
            "free some memory or processes and retry",
        ));
    }
    if pid == 0 {
        interrupt::die_with_parent(parent);
        drop(signals);
        // The stop signals end the child as they would have ended us.
        interrupt::unblock();
        harden_child();
        let code = match verb() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cryptkeep: {e}");
                e.code.as_i32()
            }
        };
        std::process::exit(code);
    }
    if let Err(sig) = signals.wait_child(pid) {
        // SAFETY: passing the signal on to our own child.
        unsafe { libc::kill(pid, sig) };
        let mut status = 0;
        // SAFETY: waiting for our own child; status is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let mut e = interrupt::interrupted(sig, "keep");
        e.what = e
            .what
            .replace("while unlocking", "while the key process ran");
        e.hint = "the key process was stopped; if it had started writing, check the \
                  volume with cryptkeep dump"
            .into();
        return Err(e);
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child; status is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(CliError::new(
                Code::Unexpected,
                "lost track of the key process",
                "keep",
                "please report this bug",
            ));
        }
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            // The child already printed its message.
            n => std::process::exit(n),
        }
    } else {
        let sig = libc::WTERMSIG(status);
        Err(CliError::new(
            Code::Unexpected,
            format!("the key process was killed by signal {sig}"),
            "keep",
            "nothing was written after that point; check the volume with cryptkeep dump",
        ))
    }
}

fn harden_child() {
    // SAFETY: prctl and setrlimit with valid arguments have no memory-safety
    // preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
    }
}
