//! Detaching a daemon from its terminal, the one way every cryptkeep
//! daemon does it (the I/O daemon of `open`, and every keep): a new
//! session (`setsid(2)`), standard input and output on `/dev/null`,
//! standard error appended to a log.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `log` for appending as a daemon's standard error: created 0600,
/// never through a symlink (`O_NOFOLLOW`), never blocking on a FIFO, and
/// only if it is a regular file or `/dev/null` (the run directory it
/// lives in is checked by the caller, but a file planted in it is not
/// trusted).
pub fn open_log(log: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(log)?;
    let m = f.metadata()?;
    if m.is_file() || is_null_device(&m) {
        return Ok(f);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: not a regular file", log.display()),
    ))
}

/// Whether `m` is the null device (character device 1:3): a log nobody
/// keeps.
fn is_null_device(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    m.file_type().is_char_device() && m.rdev() == libc::makedev(1, 3)
}

/// Starts a new session (no controlling terminal: a hang-up or Ctrl-C of
/// the starting shell no longer reaches this process) and, with `log`,
/// puts standard input and output on `/dev/null` and appends standard
/// error to `log` ([`open_log`]). Without `log` the standard streams stay
/// as they are. A log that cannot be opened leaves standard error where
/// it was and is reported there.
pub fn detach(log: Option<&Path>) {
    // SAFETY: setsid has no memory-safety preconditions; it fails only
    // for a process group leader, which a forked child never is.
    unsafe { libc::setsid() };
    redirect(log);
}

/// Detaches a keep: like [`detach`], except that a keep whose parent is
/// already a session leader (an I/O daemon that detached itself) stays in
/// its parent's session. The kernel schedules a session as one group
/// (`CONFIG_SCHED_AUTOGROUP`), so the daemon's threads and the keep's
/// workers, which take turns on each request, share one group's CPU time
/// as `--keep inline`'s threads do, and a hand-off between them does not
/// wait for another group's time slice. A keep started from a terminal
/// (a daemon in the foreground, or a session leader that has one) still
/// gets a session of its own, so that Ctrl-C reaches the daemon, which
/// then stops the keep after its last write.
pub fn detach_keep(log: Option<&Path>) {
    // SAFETY: getsid, getppid, open, close and setsid have no
    // memory-safety preconditions; the path is a NUL-terminated literal.
    unsafe {
        let tty = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        );
        if tty >= 0 {
            libc::close(tty);
        }
        if tty >= 0 || libc::getsid(0) != libc::getppid() {
            libc::setsid();
        }
    }
    redirect(log);
}

/// Standard input and output on `/dev/null`, standard error appended to
/// `log`; nothing without a log.
fn redirect(log: Option<&Path>) {
    let Some(log) = log else {
        return;
    };
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        // SAFETY: dup2 onto the standard descriptors from a valid fd.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    match open_log(log) {
        // SAFETY: as above.
        Ok(f) => unsafe {
            libc::dup2(f.as_raw_fd(), 2);
        },
        Err(e) => eprintln!("cryptkeep: cannot log to {}: {e}", log.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_is_never_opened_through_a_symlink_or_as_a_fifo() {
        let dir = std::env::temp_dir().join(format!("ck-detach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"keep me\n").unwrap();
        let link = dir.join("link.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_log(&link).expect_err("a symlinked log must be refused");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me\n");

        let fifo = dir.join("fifo.log");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(open_log(&fifo).is_err(), "a FIFO log must be refused");

        open_log(Path::new("/dev/null")).expect("the null device is a log");

        let plain = dir.join("plain.log");
        open_log(&plain).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&plain).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
