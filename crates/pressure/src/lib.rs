//! Whether this machine's CPUs are oversubscribed right now: the share of
//! the last [`WINDOW`] in which some runnable task waited for a CPU, from
//! the kernel's pressure stall information (`/proc/pressure/cpu`, the
//! `some` line's `total`; Linux `Documentation/accounting/psi.rst`).
//!
//! cryptkeep's waiting loops ask it before they poll. Polling for the next
//! request or for an answer pays while CPUs would otherwise idle: a
//! sleeping thread is slow to wake on a virtual machine. When tasks queue
//! for the CPUs, a polling thread only takes its turn from the very thread
//! it waits for, and from other work; then sleeping (and, for the keep's
//! callers, routing to real-time workers) wins. The waiting loops of the
//! FUSE transport and of the keep's client both follow it.
//!
//! `CRYPTKEEP_CPU_BUSY` overrides the reading: `yes` (always busy), `no`
//! (never), anything else or unset: the pressure decides. Without a
//! readable `/proc/pressure/cpu` (a kernel without PSI, or booted with
//! `psi=0`) the machine counts as not busy: the loops poll as before.

#![forbid(unsafe_code)]

mod reading;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reading::some_total_us;

/// How often the pressure is read: the busy state holds for this long.
pub const WINDOW: Duration = Duration::from_millis(100);

/// The share of [`WINDOW`], in percent, in which some task waited for a
/// CPU, from which on the machine counts as busy. On a two-CPU virtual
/// machine a tar extract through `cryptkeep fs` stalled 10–39 % of each
/// 100 ms on an otherwise quiet machine (its own polling threads); with
/// one `stress-ng --cpu` process per CPU beside it, a tenth of the
/// windows stalled less than 59–66 % and half less than 66–93 % (two
/// runs; docs/design/keep-rings.md).
pub const BUSY_PERCENT: u64 = 50;

/// The override in `CRYPTKEEP_CPU_BUSY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Measure,
    Always,
    Never,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("CRYPTKEEP_CPU_BUSY").as_deref() {
        Ok("yes") => Mode::Always,
        Ok("no") => Mode::Never,
        _ => Mode::Measure,
    })
}

/// The shared reading: the last sample and the state it gave.
struct State {
    epoch: Instant,
    /// Nanoseconds since `epoch` of the last sample, or `u64::MAX` while
    /// one thread takes a sample.
    sampled_at: AtomicU64,
    /// The `some` total (µs) at the last sample.
    total: AtomicU64,
    busy: AtomicBool,
    /// False when the file could not be read at the start: never busy.
    readable: AtomicBool,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let total = some_total_us();
        State {
            epoch: Instant::now(),
            sampled_at: AtomicU64::new(0),
            total: AtomicU64::new(total.unwrap_or(0)),
            busy: AtomicBool::new(false),
            readable: AtomicBool::new(total.is_some()),
        }
    })
}

/// Reads the pressure once, so that [`busy`] works after the process
/// lost access to `/proc` (a sandbox applied later keeps the open file).
pub fn prepare() {
    if mode() == Mode::Measure {
        let _ = state();
    }
}

/// Whether some task waited for a CPU at least [`BUSY_PERCENT`] of the
/// last [`WINDOW`] (or as `CRYPTKEEP_CPU_BUSY` says). Cheap: one thread
/// reads the file once per window; the others see its answer.
pub fn busy() -> bool {
    match mode() {
        Mode::Always => return true,
        Mode::Never => return false,
        Mode::Measure => {}
    }
    let s = state();
    if !s.readable.load(Ordering::Relaxed) {
        return false;
    }
    let now = s.epoch.elapsed().as_nanos() as u64;
    let last = s.sampled_at.load(Ordering::Acquire);
    let window = WINDOW.as_nanos() as u64;
    if last == u64::MAX || now < last.saturating_add(window) {
        return s.busy.load(Ordering::Relaxed);
    }
    // This thread takes the sample; the others keep the last answer.
    if s.sampled_at
        .compare_exchange(last, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return s.busy.load(Ordering::Relaxed);
    }
    // The time is taken after the read: a sampler preempted between the
    // claim and the read would otherwise count the stall against too
    // short an interval.
    let total = some_total_us();
    let now = s.epoch.elapsed().as_nanos() as u64;
    let elapsed = now.saturating_sub(last);
    let busy = match total {
        Some(total) => {
            let before = s.total.swap(total, Ordering::Relaxed);
            let stalled_ns = total.saturating_sub(before).saturating_mul(1000);
            // After a gap in which no one asked, the average over the gap
            // says little about now: this sample starts a new window.
            elapsed <= window.saturating_mul(MAX_GAP_WINDOWS) && is_busy(stalled_ns, elapsed)
        }
        // Not busy for this window; the next one reads again.
        None => false,
    };
    s.busy.store(busy, Ordering::Relaxed);
    s.sampled_at.store(now, Ordering::Release);
    busy
}

/// A sample further than this many windows from the last one only starts
/// a new window.
const MAX_GAP_WINDOWS: u64 = 4;

/// Whether `stalled_ns` of stall in `elapsed_ns` is [`BUSY_PERCENT`] or
/// more.
fn is_busy(stalled_ns: u64, elapsed_ns: u64) -> bool {
    elapsed_ns > 0 && stalled_ns.saturating_mul(100) >= elapsed_ns.saturating_mul(BUSY_PERCENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs in this thread's affinity mask, from
    /// `/proc/self/status` (`Cpus_allowed_list`, e.g. `0-3,6`).
    fn allowed_cpus() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        list.split(',')
            .map(|r| match r.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    }

    #[test]
    fn half_the_window_stalled_is_busy() {
        assert!(is_busy(50_000_000, 100_000_000));
        assert!(!is_busy(49_999_999, 100_000_000));
        assert!(is_busy(150_000_000, 100_000_000));
        assert!(!is_busy(0, 100_000_000));
        assert!(!is_busy(10, 0));
    }

    #[test]
    fn a_cpu_hog_per_cpu_makes_the_machine_busy() {
        if some_total_us().is_none() || mode() != Mode::Measure {
            eprintln!("skipped: no /proc/pressure/cpu, or CRYPTKEEP_CPU_BUSY set");
            return;
        }
        // The CPUs this process may run on (the pressure is the whole
        // machine's, not a CPU quota's).
        let cpus = allowed_cpus();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        // Two spinning threads per CPU: some always wait for a CPU.
        let hogs: Vec<_> = (0..2 * cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = false;
        while Instant::now() < deadline && !seen {
            std::thread::sleep(WINDOW / 2);
            seen = busy();
        }
        stop.store(true, Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        assert!(seen, "twice as many spinning threads as CPUs, and not busy");
    }
}
