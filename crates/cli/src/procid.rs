//! Telling whether a recorded pid is still the cryptkeep process that was
//! recorded: its start time (field 22 of `/proc/PID/stat`, clock ticks
//! since boot) must equal the one written down when it started, and its
//! `/proc/PID/exe` must be this binary. A pid alone may have been reused
//! by any process since; only a process passing both checks is signalled.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

/// What a recorded (pid, start time) names now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The recorded process, running this binary.
    Ours,
    /// No such process (or a zombie), or one started at another time.
    Gone,
    /// A process started at the recorded time that runs another program:
    /// never ours; the text says which program.
    Foreign(String),
    /// Cannot tell (a record without a start time, or /proc unreadable);
    /// the text says why.
    Unknown(String),
}

/// Whether a process with this pid exists. A zombie counts as gone only
/// once its whole thread group has exited: until then its other threads
/// still hold its open files (a cipher directory, a backing image).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => !exited_whole(&s),
        Err(_) => false,
    }
}

/// Whether a `/proc/PID/status` text is of a zombie with no thread left
/// but its (exited) leader.
fn exited_whole(status: &str) -> bool {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let zombie = field("State:").is_some_and(|v| v.starts_with('Z') || v.starts_with('X'));
    let threads: Option<u32> = field("Threads:").and_then(|v| v.parse().ok());
    zombie && threads.is_none_or(|n| n <= 1)
}

/// The start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`); `None` if there is no such process or it is a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// The start time of this process.
pub fn own_start_time() -> Option<u64> {
    start_time(std::process::id() as i32)
}

/// Field 22 of a `/proc/PID/stat` line; `None` for a zombie. The command
/// name (field 2) may hold spaces and parentheses: fields are counted
/// after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    // Field 3 is the state; field 22 is 19 further.
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Whether `pid` runs this binary: `/proc/PID/exe` is the same file as
/// `/proc/self/exe`, or (after an upgrade replaced it) was deleted from
/// the path this binary has. `Err` says why it cannot be told, `Ok(Err)`
/// what it runs instead.
pub fn runs_this_binary(pid: i32) -> Result<Result<(), String>, String> {
    let theirs = format!("/proc/{pid}/exe");
    let t = std::fs::metadata(&theirs).map_err(|e| format!("cannot read {theirs}: {e}"))?;
    let m = std::fs::metadata("/proc/self/exe")
        .map_err(|e| format!("cannot read /proc/self/exe: {e}"))?;
    if (t.dev(), t.ino()) == (m.dev(), m.ino()) {
        return Ok(Ok(()));
    }
    let link = std::fs::read_link(&theirs)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "another program".into());
    let own = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    match link.strip_suffix(" (deleted)") {
        Some(old) if !own.is_empty() && old == own => Ok(Ok(())),
        _ => Ok(Err(link)),
    }
}

/// What the record (`pid`, `start`) names now (see [`Liveness`]).
pub fn check(pid: i32, start: Option<u64>) -> Liveness {
    let Some(now) = start_time(pid) else {
        return Liveness::Gone;
    };
    let Some(start) = start else {
        return Liveness::Unknown(format!(
            "its record has no start time (written by an older cryptkeep), so pid {pid} may \
             have been reused"
        ));
    };
    if now != start {
        return Liveness::Gone;
    }
    let mut result = runs_this_binary(pid);
    // A process that still has its start time but no readable
    // `/proc/PID/exe` is exiting (its memory is already released, e.g. a
    // daemon just killed with SIGKILL whose threads are still ending): wait
    // up to a second for it to become a zombie or vanish.
    for _ in 0..40 {
        if result.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
        if start_time(pid) != Some(start) {
            return Liveness::Gone;
        }
        result = runs_this_binary(pid);
    }
    match result {
        Ok(Ok(())) => Liveness::Ours,
        Ok(Err(prog)) => Liveness::Foreign(prog),
        Err(why) => Liveness::Unknown(why),
    }
}

/// A recorded process found to be ours, held by a pidfd opened before it
/// was checked: a signal through it reaches that process even if it has
/// exited since and its pid was reused.
pub struct Checked {
    pid: i32,
    fd: Option<OwnedFd>,
}

/// Checks the record (`pid`, `start`) like [`check`], holding the process
/// first; `Ok` with a handle only when it is [`Liveness::Ours`].
pub fn hold(pid: i32, start: Option<u64>) -> Result<Checked, Liveness> {
    if pid <= 0 {
        return Err(Liveness::Gone);
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    let fd = if raw >= 0 {
        // SAFETY: raw was just returned by pidfd_open and is owned by nothing else.
        Some(unsafe { OwnedFd::from_raw_fd(raw) })
    } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return Err(Liveness::Gone);
    } else {
        // No pidfd (Linux < 5.3): the check alone must do.
        None
    };
    match check(pid, start) {
        Liveness::Ours => Ok(Checked { pid, fd }),
        other => Err(other),
    }
}

/// A process being waited for until it has exited whole, held by a pidfd
/// (see [`Exiting::wait`]).
pub struct Exiting {
    pid: i32,
    fd: Option<OwnedFd>,
}

/// Holds `pid` if it runs this binary, or is a leader that has exited while
/// other threads of it are still ending (its `/proc/PID/exe` is unreadable
/// then); `None` for anything else. The pidfd is opened before the check,
/// so what is waited for is what was checked even if the pid is reused.
pub fn hold_exiting(pid: i32) -> Option<Exiting> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    let fd = if raw >= 0 {
        // SAFETY: raw was just returned by pidfd_open and is owned by nothing else.
        Some(unsafe { OwnedFd::from_raw_fd(raw) })
    } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return None;
    } else {
        None
    };
    let ours = matches!(runs_this_binary(pid), Ok(Ok(())))
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
    ours.then_some(Exiting { pid, fd })
}

impl Exiting {
    /// The pid held.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits up to `timeout` for the process to have exited whole: every
    /// thread gone, so every descriptor it held is closed. Returns whether
    /// it has. Through the pidfd (readable only then); without one (Linux
    /// < 5.3), by polling `/proc`.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        let Some(fd) = &self.fd else {
            while pid_alive(self.pid) {
                if std::time::Instant::now() >= end {
                    return false;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            return true;
        };
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd that lives across the call.
            let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if r > 0 {
                return true;
            }
            if r == 0 {
                return false;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return !pid_alive(self.pid);
            }
        }
    }
}

impl Checked {
    /// Sends `sig` to the process (if it still exists).
    pub fn signal(&self, sig: i32) {
        match &self.fd {
            // SAFETY: pidfd_send_signal on a pidfd we own, no siginfo.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            },
            // SAFETY: kill with a positive pid and a valid signal.
            None => unsafe {
                libc::kill(self.pid, sig);
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_is_gone_only_with_its_last_thread() {
        assert!(exited_whole("Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n"));
        assert!(!exited_whole("Name:\tx\nState:\tZ (zombie)\nThreads:\t2\n"));
        assert!(!exited_whole(
            "Name:\tx\nState:\tS (sleeping)\nThreads:\t1\n"
        ));
    }

    #[test]
    fn start_time_is_field_22() {
        let line = "123 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20";
        assert_eq!(parse_start_time(line), Some(4242));
        let zombie = "123 (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20";
        assert_eq!(parse_start_time(zombie), None);
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn this_process_is_ours_and_a_wrong_start_is_gone() {
        let me = std::process::id() as i32;
        let start = own_start_time().unwrap();
        assert_eq!(check(me, Some(start)), Liveness::Ours);
        assert_eq!(check(me, Some(start + 1)), Liveness::Gone);
        assert!(matches!(check(me, None), Liveness::Unknown(_)));
        assert_eq!(check(i32::MAX, Some(start)), Liveness::Gone);
        assert_eq!(check(0, Some(start)), Liveness::Gone);
    }

    #[test]
    fn a_child_running_this_binary_is_waited_for_until_it_exits() {
        assert!(hold_exiting(0).is_none());
        assert!(hold_exiting(1).is_none(), "init runs another program");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--list", "--format", "terse"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        match hold_exiting(pid) {
            // Held: the wait ends once it has exited (a zombie counts).
            Some(e) => assert!(e.wait(std::time::Duration::from_secs(20))),
            // It may already have exited (and not be this binary any more).
            None => assert!(!matches!(runs_this_binary(pid), Ok(Ok(())))),
        }
        child.wait().unwrap();
    }

    #[test]
    fn another_program_is_foreign() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until exec is done the child may still run this binary.
        let mut got = Liveness::Ours;
        for _ in 0..100 {
            got = check(pid, start_time(pid));
            if got != Liveness::Ours {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(&got, Liveness::Foreign(p) if p.contains("sleep")),
            "{got:?}"
        );
    }
}
