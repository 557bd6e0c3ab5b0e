//! How the keep's workers are scheduled. Each worker runs the crypto of an
//! I/O that a thread of the daemon sleeps on, so under contention the pair
//! gets one thread's share of the CPU plus two wake-ups per request, where
//! `--keep inline` gets one thread's share and none. Two knobs, read from
//! the environment when the workers start, change that:
//!
//! - `CRYPTKEEP_KEEP_SLICE_US`: the worker's time slice for the kernel's
//!   EEVDF scheduler (`sched_setattr`, `SCHED_OTHER` with `sched_runtime`,
//!   Linux 6.12 and later). A short slice makes a woken worker run soon
//!   rather than after a busy task's slice; its share of the CPU is the
//!   same.
//! - `CRYPTKEEP_KEEP_NICE`: the worker's nice value (lower is a larger
//!   share; below 0 needs `CAP_SYS_NICE`, which a root daemon has).
//!
//! Both are best effort: a kernel or a user that refuses them leaves the
//! worker as it was, and says so in the keep's log.

use std::time::Duration;

/// The kernel's `struct sched_attr` (`include/uapi/linux/sched/types.h`,
/// its first version with utilization clamps).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// The workers' scheduling, as the environment asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerSched {
    /// EEVDF slice (`None`: the kernel's default).
    pub slice: Option<Duration>,
    /// Nice value (`None`: inherited).
    pub nice: Option<i32>,
}

impl WorkerSched {
    /// Reads `CRYPTKEEP_KEEP_SLICE_US` and `CRYPTKEEP_KEEP_NICE`; values
    /// that do not parse, or are out of the kernel's range, are ignored.
    pub fn from_env() -> WorkerSched {
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        WorkerSched {
            // The kernel takes 0.1 ms to 100 ms.
            slice: num("CRYPTKEEP_KEEP_SLICE_US")
                .filter(|us| (100..=100_000).contains(us))
                .map(|us| Duration::from_micros(us as u64)),
            nice: num("CRYPTKEEP_KEEP_NICE")
                .filter(|n| (-20..=19).contains(n))
                .map(|n| n as i32),
        }
    }

    /// Applies this to the calling thread; an error names what the kernel
    /// refused.
    pub fn apply_to_this_thread(&self) -> Result<(), String> {
        if *self == WorkerSched::default() {
            return Ok(());
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_nice: self.nice.unwrap_or_else(current_nice),
            sched_runtime: self.slice.map_or(0, |s| s.as_nanos() as u64),
            ..SchedAttr::default()
        };
        // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads
        // `attr`, a properly sized and initialised struct that outlives
        // the call.
        let r =
            unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
        if r == 0 {
            Ok(())
        } else {
            Err(format!(
                "sched_setattr({self:?}) refused: {}",
                std::io::Error::last_os_error()
            ))
        }
    }
}

/// The calling thread's nice value.
fn current_nice() -> i32 {
    // SAFETY: getpriority(2) with constant arguments (this thread).
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice within the kernel's range is taken by the kernel (6.12+),
    /// and the nice value stays as it was.
    #[test]
    fn a_slice_applies_to_a_thread() {
        std::thread::spawn(|| {
            let before = current_nice();
            let s = WorkerSched {
                slice: Some(Duration::from_micros(200)),
                nice: None,
            };
            s.apply_to_this_thread().unwrap();
            assert_eq!(current_nice(), before);
            let mut attr = SchedAttr::default();
            // SAFETY: sched_getattr(2) of this thread into `attr`, whose
            // size is passed.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_sched_getattr,
                    0,
                    &mut attr as *mut SchedAttr,
                    std::mem::size_of::<SchedAttr>() as u32,
                    0u32,
                )
            };
            assert_eq!(r, 0);
            assert_eq!(attr.sched_runtime, 200_000);
        })
        .join()
        .unwrap();
    }
}
