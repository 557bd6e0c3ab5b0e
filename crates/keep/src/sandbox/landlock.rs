//! Landlock (Documentation/userspace-api/landlock.rst): a ruleset that
//! handles every file system right this kernel knows, with no rule that
//! grants any, so the process can open no file and no directory; from ABI 4
//! also TCP bind/connect, from ABI 6 abstract Unix sockets and signals to
//! processes outside the domain. Raw system calls; no wrapper crate.

use std::fmt;

use crate::Error;

const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_RESTRICT_SELF: libc::c_long = 446;
const CREATE_RULESET_VERSION: u32 = 1;

/// `struct landlock_ruleset_attr` (ABI 6 layout; the kernel takes the size).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// Whether Landlock took effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Enforced with this ABI version.
    Enforced {
        /// The kernel's Landlock ABI version.
        abi: i64,
    },
    /// The kernel has no Landlock (or it is disabled); why.
    Unavailable {
        /// The error of `landlock_create_ruleset`.
        reason: String,
    },
}

impl fmt::Display for LandlockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LandlockStatus::Enforced { abi } => write!(f, "Landlock ABI {abi}: no file access"),
            LandlockStatus::Unavailable { reason } => write!(f, "no Landlock ({reason})"),
        }
    }
}

/// The kernel's Landlock ABI version, or the error that says it has none.
pub fn abi_version() -> Result<i64, std::io::Error> {
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe {
        libc::syscall(
            SYS_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Every file system access right of ABI `abi`.
fn fs_rights(abi: i64) -> u64 {
    let mut bits = (1u64 << 13) - 1; // ABI 1: execute .. make_sym
    if abi >= 2 {
        bits |= 1 << 13; // refer
    }
    if abi >= 3 {
        bits |= 1 << 14; // truncate
    }
    if abi >= 5 {
        bits |= 1 << 15; // ioctl_dev
    }
    bits
}

/// Restricts this process (all its threads, present and future) so it can
/// access no file. `Unavailable` (not an error) where the kernel has no
/// Landlock.
pub fn restrict_all() -> Result<LandlockStatus, Error> {
    let abi = match abi_version() {
        Ok(v) => v,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
            ) =>
        {
            return Ok(LandlockStatus::Unavailable {
                reason: e.to_string(),
            })
        }
        Err(e) => {
            return Err(Error::Sys {
                what: "landlock_create_ruleset",
                source: e,
            })
        }
    };
    let attr = RulesetAttr {
        handled_access_fs: fs_rights(abi),
        handled_access_net: if abi >= 4 { 0b11 } else { 0 },
        scoped: if abi >= 6 { 0b11 } else { 0 },
    };
    let size = if abi >= 6 {
        24
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // SAFETY: attr is a valid ruleset attribute of at least `size` bytes.
    let fd = unsafe {
        libc::syscall(
            SYS_CREATE_RULESET,
            &attr as *const RulesetAttr,
            size as usize,
            0u32,
        )
    };
    if fd < 0 {
        return Err(Error::last_os("landlock_create_ruleset"));
    }
    // Landlock applies to every thread only via the TSYNC flag on new
    // kernels; we restrict the calling thread, and threads created later
    // inherit it. The keep's workers are already running, so we rely on
    // them never opening files (seccomp forbids open anyway).
    // SAFETY: fd is the ruleset just created; flags 0.
    let r = unsafe { libc::syscall(SYS_RESTRICT_SELF, fd as i32, 0u32) };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing the ruleset descriptor.
    unsafe { libc::close(fd as i32) };
    if r != 0 {
        return Err(Error::Sys {
            what: "landlock_restrict_self",
            source: err,
        });
    }
    Ok(LandlockStatus::Enforced { abi })
}
