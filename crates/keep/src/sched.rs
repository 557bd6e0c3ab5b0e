//! How the keep's workers are scheduled. Each worker runs the crypto of an
//! I/O that a thread of the daemon sleeps on, so under contention the pair
//! gets one thread's share of the CPU plus two wake-ups per request, where
//! `--keep inline` gets one thread's share and none. Four knobs, read
//! from the environment when the workers start, change that:
//!
//! - `CRYPTKEEP_KEEP_RTPRIO` (default 1 for a volume's keep; for an
//!   overlay's, 1 for its pinned workers only, the floating ones polling
//!   for its stream of small requests; 0 for a plain volume's keep that
//!   serves only the loop device's large requests, whose ordinary pinned
//!   workers shared a busy machine better (`open` says so with
//!   `--ordinary-workers`), and for the runtime keep, whose timed repeats
//!   run for seconds; set, it applies to every worker, and 0 turns it
//!   off): the workers run under `SCHED_FIFO` at this real-time priority
//!   (1–99), and the slice and nice value below do not apply. A woken
//!   worker then runs at once instead of waiting for a busy task's turn.
//!   It needs `CAP_SYS_NICE` (a root daemon has it) or an `RLIMIT_RTPRIO`
//!   that allows it, and a cgroup with a real-time budget. A real-time
//!   worker never polls for more than a few microseconds
//!   (`rings/server.rs`): its polls would keep ordinary threads, the
//!   daemon's among them, off the CPU. What a flood of requests can take
//!   from other work is bounded by the kernel's real-time throttling
//!   (`/proc/sys/kernel/sched_rt_runtime_us`: 95 % of each second by
//!   default, no bound at -1).
//! - `CRYPTKEEP_KEEP_SLICE_US`: the worker's time slice for the kernel's
//!   EEVDF scheduler (`sched_setattr`, `SCHED_OTHER` with `sched_runtime`,
//!   Linux 6.12 and later). A short slice makes a woken worker run soon
//!   rather than after a busy task's slice; its share of the CPU is the
//!   same.
//! - `CRYPTKEEP_KEEP_NICE`: the worker's nice value (lower is a larger
//!   share; below 0 needs `CAP_SYS_NICE`, which a root daemon has).
//! - `CRYPTKEEP_KEEP_PIN` (1 for a volume's keep, `mixed` for an
//!   overlay's, 0 for the runtime keep; `1`, `0` or `mixed` chooses): each
//!   worker is pinned to one CPU of those the keep may use
//!   ([`pin_to_nth_cpu`]), and a daemon thread whose last request was
//!   large sends the next to the worker on the CPU it runs on
//!   (`rings/client.rs`). That crypto then runs where the request's data
//!   is in the cache, while the requester sleeps, leaving the other CPUs
//!   to other work. It speeds up streams of large requests; many small
//!   ones are served best by workers that float and poll, which `mixed`
//!   adds beside the pinned ones (docs/guide/performance.md).
//!
//! All are best effort: a kernel or a user that refuses them leaves the
//! worker as it was (a refused real-time priority falls back to the other
//! two), and says so in the keep's log.

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
    /// `SCHED_FIFO` priority (`None`: the ordinary scheduler).
    pub realtime: Option<u32>,
    /// The priority is for pinned workers only; the others stay ordinary.
    pub pinned_only: bool,
}

/// Which workers ask for a real-time policy when `CRYPTKEEP_KEEP_RTPRIO`
/// is not set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealtimeDefault {
    /// None of them.
    None,
    /// All of them.
    All,
    /// The pinned ones (they take the large requests, each of whose
    /// callers sleeps until it is done); the floating ones stay ordinary
    /// and poll for the small requests.
    Pinned,
}

/// The real-time priority the workers ask for when the environment does not
/// say: the lowest, above every ordinary thread and below every real-time
/// thread a user set up.
pub const DEFAULT_REALTIME_PRIORITY: u32 = 1;

impl WorkerSched {
    /// Reads `CRYPTKEEP_KEEP_SLICE_US`, `CRYPTKEEP_KEEP_NICE` and
    /// `CRYPTKEEP_KEEP_RTPRIO`. A slice or nice value that does not parse
    /// or is out of the kernel's range is ignored; a priority that is set
    /// but is not a number from 1 to 99 (0 among them) turns real-time
    /// scheduling off.
    ///
    /// `by_default`: which workers get [`DEFAULT_REALTIME_PRIORITY`] when
    /// the variable is not set; a priority set in it applies to all.
    pub fn from_env(by_default: RealtimeDefault) -> WorkerSched {
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        let rtprio = std::env::var("CRYPTKEEP_KEEP_RTPRIO");
        WorkerSched {
            // The kernel takes 0.1 ms to 100 ms.
            slice: num("CRYPTKEEP_KEEP_SLICE_US")
                .filter(|us| (100..=100_000).contains(us))
                .map(|us| Duration::from_micros(us as u64)),
            nice: num("CRYPTKEEP_KEEP_NICE")
                .filter(|n| (-20..=19).contains(n))
                .map(|n| n as i32),
            pinned_only: by_default == RealtimeDefault::Pinned
                && matches!(rtprio, Err(std::env::VarError::NotPresent)),
            realtime: match rtprio {
                Err(std::env::VarError::NotPresent) => {
                    (by_default != RealtimeDefault::None).then_some(DEFAULT_REALTIME_PRIORITY)
                }
                // Set, but not a priority: off.
                Err(std::env::VarError::NotUnicode(_)) => None,
                Ok(v) => v
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|p| (1..=99).contains(p)),
            },
        }
    }

    /// Applies this to the calling thread (`pinned`: a worker that will
    /// be pinned to a CPU); an error names what the kernel refused. A
    /// refused real-time priority is reported and the other settings are
    /// applied instead.
    pub fn apply_to_this_thread(&self, pinned: bool) -> Result<(), String> {
        let Some(priority) = self.realtime.filter(|_| pinned || !self.pinned_only) else {
            return self.apply_ordinary();
        };
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: libc::SCHED_FIFO as u32,
            sched_priority: priority,
            ..SchedAttr::default()
        };
        match set_attr(&attr) {
            Ok(()) => Ok(()),
            Err(e) => {
                let rt = format!("SCHED_FIFO priority {priority} refused: {e}");
                match self.apply_ordinary() {
                    Ok(()) => Err(rt),
                    Err(other) => Err(format!("{rt}; {other}")),
                }
            }
        }
    }

    /// Applies the slice and nice value (the ordinary scheduler).
    fn apply_ordinary(&self) -> Result<(), String> {
        if self.slice.is_none() && self.nice.is_none() {
            return Ok(());
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_nice: self.nice.unwrap_or_else(current_nice),
            sched_runtime: self.slice.map_or(0, |s| s.as_nanos() as u64),
            ..SchedAttr::default()
        };
        set_attr(&attr).map_err(|e| {
            format!(
                "slice {:?} and nice {:?} refused: {e}",
                self.slice, self.nice
            )
        })
    }
}

/// `sched_setattr(2)` of the calling thread.
fn set_attr(attr: &SchedAttr) -> std::io::Result<()> {
    // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads `attr`, a
    // properly sized and initialised struct that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *const SchedAttr, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the calling thread runs under a real-time policy
/// (`SCHED_FIFO` or `SCHED_RR`).
pub fn this_thread_is_realtime() -> bool {
    // SAFETY: sched_getscheduler(2) of the calling thread; no memory passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR
}

/// The calling thread's nice value.
fn current_nice() -> i32 {
    // SAFETY: getpriority(2) with constant arguments (this thread).
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// Where a keep's workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Wherever the scheduler puts them (`CRYPTKEEP_KEEP_PIN=0`).
    Floating,
    /// One worker pinned to each CPU (`CRYPTKEEP_KEEP_PIN=1`).
    Pinned,
    /// One worker pinned to each CPU (up to half the arena's queues) for
    /// large requests, and as many more that float, for small ones
    /// (`CRYPTKEEP_KEEP_PIN=mixed`).
    Mixed,
}

/// Where the workers run: `CRYPTKEEP_KEEP_PIN` (`1` pinned, `0`
/// floating, `mixed` both), `default` (the handler's choice) when it is
/// unset or anything else.
pub fn placement_from_env(default: Placement) -> Placement {
    match std::env::var("CRYPTKEEP_KEEP_PIN")
        .as_deref()
        .map(str::trim)
    {
        Ok("1") => Placement::Pinned,
        Ok("0") => Placement::Floating,
        Ok("mixed") => Placement::Mixed,
        _ => default,
    }
}

/// Pins the calling thread to the `n`-th (modulo their number) of the
/// CPUs it may run on (`sched_setaffinity(2)`); returns that CPU.
pub fn pin_to_nth_cpu(n: usize) -> std::io::Result<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data (all zeros is the empty set).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity(2) of this thread writes at most `size`
    // bytes into `set`, a local of that size.
    let got = unsafe { libc::sched_getaffinity(0, size, &mut set) };
    if got != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `c` of `set`; `c` < CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    let Some(&cpu) = cpus.get(n % cpus.len().max(1)) else {
        return Err(std::io::Error::other("no CPU to run on"));
    };
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET sets bit `cpu` (< CPU_SETSIZE) of a local set.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: sched_setaffinity(2) of this thread reads `size` bytes of a
    // local set.
    let set_ok = unsafe { libc::sched_setaffinity(0, size, &one) };
    if set_ok != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cpu)
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
                realtime: None,
                pinned_only: false,
            };
            s.apply_to_this_thread(false).unwrap();
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

    /// A pinned thread runs on the CPU it was pinned to, and only there.
    #[test]
    fn a_pinned_thread_runs_on_its_cpu() {
        for n in 0..3 {
            std::thread::spawn(move || {
                let cpu = pin_to_nth_cpu(n).unwrap();
                for _ in 0..100 {
                    std::thread::yield_now();
                    // SAFETY: no arguments.
                    assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
                }
                // SAFETY: cpu_set_t is plain data (all zeros is the empty set).
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: writes at most the size passed into a local set.
                let r = unsafe {
                    libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
                };
                assert_eq!(r, 0);
                // SAFETY: counts the bits of a local set.
                let count = unsafe { libc::CPU_COUNT(&set) };
                assert_eq!(count, 1);
            })
            .join()
            .unwrap();
        }
    }

    /// A real-time priority puts the thread under SCHED_FIFO (the tests run
    /// as root, which may); one the kernel refuses leaves it ordinary and
    /// says so.
    #[test]
    fn a_realtime_priority_applies_and_a_refused_one_falls_back() {
        cryptkeep_testkit::need!(root);
        std::thread::spawn(|| {
            assert!(!this_thread_is_realtime());
            let refused = WorkerSched {
                slice: None,
                nice: None,
                realtime: Some(100),
                pinned_only: false,
            };
            let e = refused.apply_to_this_thread(false).unwrap_err();
            assert!(e.contains("SCHED_FIFO priority 100 refused"), "{e}");
            assert!(!this_thread_is_realtime());
            let rt = WorkerSched {
                realtime: Some(DEFAULT_REALTIME_PRIORITY),
                ..refused
            };
            // Pinned only: not for a floating worker.
            let pinned_rt = WorkerSched {
                pinned_only: true,
                ..rt
            };
            pinned_rt.apply_to_this_thread(false).unwrap();
            assert!(!this_thread_is_realtime());
            pinned_rt.apply_to_this_thread(true).unwrap();
            assert!(this_thread_is_realtime());
            let mut p = libc::sched_param { sched_priority: 0 };
            // SAFETY: sched_getparam(2) of this thread into a local.
            let r = unsafe { libc::sched_getparam(0, &mut p) };
            assert_eq!(r, 0);
            assert_eq!(p.sched_priority, DEFAULT_REALTIME_PRIORITY as i32);
        })
        .join()
        .unwrap();
    }
}
