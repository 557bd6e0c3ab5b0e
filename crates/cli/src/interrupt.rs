//! Stopping promptly on SIGTERM, SIGINT or SIGHUP while a key derivation
//! runs, and tying key-work children to their parent.
//!
//! The three signals are blocked and read from a `signalfd`, so a process
//! can wait for "the work is done" and "a signal came" at once: a KDF runs
//! on a helper thread ([`run`]), a child is waited for through its pidfd
//! ([`Signals::wait_child`]), a pipe or socket through [`Signals::wait`].
//! An interrupted command exits with 128 + the signal's number (the
//! shells' convention, and a row of the exit-code table) after stopping
//! what it started. Children doing key work get `PR_SET_PDEATHSIG(SIGKILL)`
//! ([`die_with_parent`]), so none outlives a parent that is killed outright.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::exit::{CliError, Code};

/// The signals that stop a command: SIGTERM, SIGINT and SIGHUP.
fn stop_set() -> libc::sigset_t {
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

/// The stop signals, blocked in this thread (and in the threads and
/// children it starts later) and readable from a `signalfd`.
pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and opens a
    /// `signalfd` for them (close-on-exec).
    pub fn block() -> Result<Signals, CliError> {
        let set = stop_set();
        // SAFETY: set is initialized; the old mask is not wanted.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        // SAFETY: -1 asks for a new descriptor; set is initialized.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(CliError::new(
                Code::Unexpected,
                format!("cannot open a signalfd: {e}"),
                "signals",
                "please report this bug",
            ));
        }
        // SAFETY: fd was just returned by signalfd and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Signals { fd })
    }

    /// Waits until `fd` is readable (or hung up): `Ok`, or `Err(signal)`
    /// if a stop signal came first.
    pub fn wait(&self, fd: BorrowedFd<'_>) -> Result<(), i32> {
        let mut fds = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: fds is a valid array of two pollfd.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Polling itself failed: let the caller read and find out.
                return Ok(());
            }
            if fds[1].revents != 0 {
                if let Some(sig) = self.take() {
                    return Err(sig);
                }
            }
            if fds[0].revents != 0 {
                return Ok(());
            }
        }
    }

    /// Waits for child `pid` to exit (it is not reaped): `Ok`, or
    /// `Err(signal)` if a stop signal came first.
    pub fn wait_child(&self, pid: i32) -> Result<(), i32> {
        // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if fd < 0 {
            // No pidfd (Linux < 5.3): wait without noticing signals.
            return Ok(());
        }
        // SAFETY: fd was just returned by pidfd_open and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        use std::os::fd::AsFd;
        self.wait(fd.as_fd())
    }

    /// Reads one pending stop signal, if any.
    fn take(&self) -> Option<i32> {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let len = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: info is a valid buffer of `len` bytes.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                len,
            )
        };
        (n == len as isize).then_some(info.ssi_signo as i32)
    }
}

/// Unblocks the stop signals in this thread (a child that inherited a
/// blocked mask and must die of them, as the default action says).
pub fn unblock() {
    let set = stop_set();
    // SAFETY: set is initialized; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
}

/// Blocks the stop signals in this thread only (a helper thread that must
/// never be the one a stop signal kills, or a writer that must finish).
pub fn block_in_this_thread() {
    let set = stop_set();
    // SAFETY: set is initialized; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// A stop signal pending for this thread or process, if any (it stays
/// pending).
pub fn pending() -> Option<i32> {
    // SAFETY: sigset_t is plain data, filled by sigpending.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid out-pointer.
    if unsafe { libc::sigpending(&mut set) } != 0 {
        return None;
    }
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP]
        .into_iter()
        // SAFETY: set was filled by sigpending.
        .find(|&s| unsafe { libc::sigismember(&set, s) } == 1)
}

/// The name of a stop signal ("SIGTERM"), or "a signal".
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Runs `work` (a key derivation) on a helper thread while this thread
/// waits for it or for a stop signal, whichever comes first: its result,
/// or [`interrupted`] for `place` (the helper is then left to end with the
/// process, which the caller exits).
pub fn run<T, F>(place: &str, work: F) -> Result<T, CliError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let signals = Signals::block()?;
    let mut p = [0i32; 2];
    // SAFETY: p is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Ok(work());
    }
    // SAFETY: both descriptors were just returned by pipe2 and are owned
    // by nothing else.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let helper = std::thread::Builder::new()
        .name("ck-kdf".into())
        .spawn(move || {
            let r = work();
            // Closing the write end wakes the waiter.
            drop(tx);
            r
        })
        .map_err(|e| {
            CliError::new(
                Code::NoMemory,
                format!("cannot start a thread for the key derivation: {e}"),
                place,
                "free some memory or processes and retry",
            )
        })?;
    use std::os::fd::AsFd;
    if let Err(sig) = signals.wait(rx.as_fd()) {
        return Err(interrupted(sig, place));
    }
    match helper.join() {
        Ok(r) => Ok(r),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// The error of a command stopped by signal `sig` while unlocking `place`:
/// exit code 128 + `sig`.
pub fn interrupted(sig: i32, place: &str) -> CliError {
    let name = signal_name(sig);
    CliError::new(
        Code::for_signal(sig),
        format!("interrupted by {name} while unlocking"),
        place,
        "stopped before anything was opened or mounted; nothing is left running",
    )
}

/// In a child just forked from `parent`: be killed (SIGKILL) when the
/// parent thread that forked us ends, and exit now if it already has.
pub fn die_with_parent(parent: i32) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) with a valid signal number.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // SAFETY: _exit ends this process at once, which is all we want
        // from a child whose parent is already gone.
        unsafe { libc::_exit(Code::Daemon.as_i32()) };
    }
}

/// In a child that [`die_with_parent`]: from now on it outlives its parent
/// (a daemon that serves after `open` or `mount` returned). Returns whether
/// the parent is still `parent` (false: it is gone, and so should we be).
pub fn outlive_parent(parent: i32) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG, 0) clears the parent-death signal.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) };
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() == parent }
}

/// The terminal settings of standard input when the command started, put
/// back when it is interrupted: a key process killed while it asked for a
/// passphrase would otherwise leave the terminal without echo.
pub struct TtyState(Option<libc::termios>);

impl TtyState {
    /// Saves the settings of descriptor 0, if it is a terminal.
    pub fn save() -> TtyState {
        // SAFETY: termios is plain data; tcgetattr fills it for a valid fd.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: t is a valid termios to fill; fd 0 may be anything.
        let ok = unsafe { libc::tcgetattr(0, &mut t) } == 0;
        TtyState(ok.then_some(t))
    }

    /// Puts the saved settings back.
    pub fn restore(&self) {
        if let Some(t) = &self.0 {
            // SAFETY: sets descriptor 0's attributes from a termios read from it.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}
