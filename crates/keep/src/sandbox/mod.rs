//! What the keep does to itself before it serves: [`harden`] (not
//! dumpable, no core file, no new privileges), [`close_fds_except`], then
//! [`lock_down`]: Landlock (no file system access; [`landlock`]) and a
//! seccomp allowlist whose default is to kill the process ([`seccomp`]),
//! applied to every thread.

pub mod landlock;
pub mod seccomp;

use std::fmt;

use crate::Error;

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, `/proc/PID/mem` and ptrace
/// closed to processes without CAP_SYS_PTRACE; RLIMIT_CORE 0;
/// PR_SET_NO_NEW_PRIVS (also required for unprivileged seccomp).
pub fn harden() -> Result<(), Error> {
    // SAFETY: prctl/setrlimit with valid arguments have no memory-safety
    // preconditions.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            return Err(Error::last_os("prctl(PR_SET_DUMPABLE)"));
        }
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &zero) != 0 {
            return Err(Error::last_os("setrlimit(RLIMIT_CORE)"));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(Error::last_os("prctl(PR_SET_NO_NEW_PRIVS)"));
        }
    }
    Ok(())
}

/// Closes every descriptor of the process except those in `keep`
/// (close_range(2) over the gaps; `/proc/self/fd` where the kernel lacks it).
pub fn close_fds_except(keep: &[i32]) -> Result<(), Error> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|&&f| f >= 0)
        .map(|&f| f as u32)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = 0u32;
    for &k in keep.iter().chain(std::iter::once(&u32::MAX)) {
        if k > from {
            let to = if k == u32::MAX { u32::MAX } else { k - 1 };
            // SAFETY: close_range closes descriptors by number; none of
            // them is one we still use (the caller listed those in keep).
            let r = unsafe { libc::syscall(libc::SYS_close_range, from, to, 0u32) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    return close_listed_except(&keep);
                }
                return Err(Error::Sys {
                    what: "close_range",
                    source: e,
                });
            }
        }
        if k == u32::MAX {
            break;
        }
        from = k + 1;
    }
    Ok(())
}

/// Fallback for kernels without close_range (before 5.9): closes what
/// `/proc/self/fd` lists, except `keep` (sorted).
fn close_listed_except(keep: &[u32]) -> Result<(), Error> {
    let dir = std::fs::read_dir("/proc/self/fd").map_err(|source| Error::Sys {
        what: "read_dir(/proc/self/fd)",
        source,
    })?;
    // Collect first: the directory's own descriptor is in the listing.
    let fds: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if keep.binary_search(&fd).is_err() {
            // SAFETY: closing a descriptor the caller did not ask to keep;
            // the directory stream's own one is already closed (EBADF then).
            unsafe { libc::close(fd as i32) };
        }
    }
    Ok(())
}

/// Drops every capability (effective, permitted, inheritable; capset(2)
/// with version 3): a keep that serves needs none, and without them a
/// root-owned keep is no stronger than any other process of its user
/// (ptrace by a same-user process that lacks CAP_SYS_PTRACE is then
/// decided by the keep being non-dumpable).
///
/// Capabilities are per thread: this drops them for the calling thread
/// and threads it creates afterwards only. Call it before the workers are
/// spawned. (Dropping them also makes the kernel clear "dumpable".)
pub fn drop_capabilities() -> Result<(), Error> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: h and d are valid capset arguments (version 3 takes two
    // data structs) that outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &h as *const Header, d.as_ptr()) };
    if r != 0 {
        return Err(Error::last_os("capset"));
    }
    Ok(())
}

/// What [`lock_down`] put in place, for the log and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReport {
    /// Landlock's state.
    pub landlock: landlock::LandlockStatus,
    /// Number of system calls the seccomp filter allows.
    pub seccomp_allowed: usize,
}

impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seccomp allowlist of {} system calls (others kill the keep), {}, no capabilities",
            self.seccomp_allowed, self.landlock
        )
    }
}

/// Landlock first (its own system calls are not on the allowlist), then
/// the seccomp filter on every thread.
///
/// Only seccomp (TSYNC) reaches threads that already run; Landlock
/// (ABI <= 7) and capabilities are per thread, so a caller with worker
/// threads should also call [`drop_capabilities`] and
/// [`landlock::restrict_all`] before spawning them (both are harmless to
/// repeat here).
pub fn lock_down(allow: &seccomp::Allowlist) -> Result<SandboxReport, Error> {
    let landlock = landlock::restrict_all()?;
    drop_capabilities()?;
    seccomp::install(allow)?;
    Ok(SandboxReport {
        landlock,
        seccomp_allowed: allow.len(),
    })
}
