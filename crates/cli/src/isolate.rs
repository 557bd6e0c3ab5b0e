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
//!
//! And no header is written for a command that has gone: the child writes
//! only through a [`HeaderIo`], which before each write checks that the
//! parent that asked for it is still there. For the keyslot verbs the first
//! write also blocks the stop signals and takes one that already came
//! ([`Writes::Whole`]): a stop before it ends the child with nothing
//! written, one after it waits until the header is whole.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use cryptkeep_luks::BlockIo;

use crate::exit::{CliError, CliResult, Code};
use crate::interrupt::{self, Signals};

/// How a verb's writes may be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// A few header writes that must land together (the keyslot verbs): a
    /// stop signal that comes once they began waits for them to end.
    Whole,
    /// Long writes (format's wipe): a stop signal ends them at once.
    Stoppable,
}

/// The pid of the command this key-work child works for (0: not a child).
static PARENT: AtomicI32 = AtomicI32::new(0);
/// The kind of writes the child makes (true: [`Writes::Whole`]).
static WHOLE: AtomicBool = AtomicBool::new(false);

/// Runs `verb` in a hardened child process and returns its outcome. The
/// child prints its own error (so the message is the same as in-process)
/// and exits with its code; the parent then exits with that code too.
pub fn run_isolated(writes: Writes, verb: impl FnOnce() -> CliResult) -> CliResult {
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
        PARENT.store(parent, Ordering::SeqCst);
        WHOLE.store(writes == Writes::Whole, Ordering::SeqCst);
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
        if libc::WIFEXITED(status) {
            // The header writes had begun, with the stop signals blocked:
            // the child finished them and said so (or why not).
            crate::cmd::common::warn(&format!(
                "{} came while the header was being written; the write was finished first",
                interrupt::signal_name(sig)
            ));
            return match libc::WEXITSTATUS(status) {
                0 => Ok(()),
                n => std::process::exit(n),
            };
        }
        e.what = e
            .what
            .replace("while unlocking", "while the key process ran");
        e.hint = match writes {
            Writes::Whole => "stopped before anything was written; nothing is left running".into(),
            Writes::Stoppable => "the key process was stopped; if it had started writing, check \
                                  the volume with cryptkeep dump"
                .into(),
        };
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

/// The header (or volume) file of a key-work verb: reads as the file does,
/// and writes only while the command that asked for them still runs (see
/// the module documentation). Outside a key-work child it is the file.
pub struct HeaderIo {
    file: crate::store::Store,
    writing: AtomicBool,
}

/// Wraps the file a key-work verb writes its header to.
pub fn header_io(file: crate::store::Store) -> HeaderIo {
    HeaderIo {
        file,
        writing: AtomicBool::new(false),
    }
}

impl std::ops::Deref for HeaderIo {
    type Target = crate::store::Store;
    fn deref(&self) -> &crate::store::Store {
        &self.file
    }
}

impl HeaderIo {
    /// Called before every write: ends this child, with nothing (more)
    /// written, if its parent is gone or a stop signal came before the
    /// first write of a [`Writes::Whole`] verb.
    fn before_write(&self) {
        let parent = PARENT.load(Ordering::SeqCst);
        if parent == 0 {
            return;
        }
        let first = !self.writing.swap(true, Ordering::SeqCst);
        if first && WHOLE.load(Ordering::SeqCst) {
            interrupt::block_in_this_thread();
            if let Some(sig) = interrupt::pending() {
                // Nothing written yet: die of it, as the parent expects.
                interrupt::unblock();
                // SAFETY: _exit ends the process; reached only if the
                // pending signal was somehow not fatal.
                unsafe { libc::_exit(128 + sig) };
            }
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            // The command that asked for this write is gone: write nothing.
            // SAFETY: _exit ends this process at once.
            unsafe { libc::_exit(Code::Daemon.as_i32()) };
        }
    }
}

impl BlockIo for HeaderIo {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.file.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.before_write();
        self.file.write_at(buf, off)
    }

    fn size(&self) -> std::io::Result<u64> {
        self.file.size()
    }

    fn sync(&self) -> std::io::Result<()> {
        self.file.sync()
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
