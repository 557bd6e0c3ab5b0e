//! How long a keyslot's key derivation will take, said before it starts.
//!
//! A header may ask for PBKDF2 iterations or Argon2 passes near 2^32
//! (hours or days, and cryptsetup just runs them). Before a KDF, its
//! duration is estimated from a short probe of this machine's speed
//! (`cryptkeep_crypto::kdf::estimate`); past [`ANNOUNCE_AFTER`] one line
//! says how long and how to stop it, and on a terminal a progress line
//! counts the time. The KDF itself is stopped by SIGINT or SIGTERM (see
//! `interrupt.rs` and `isolate.rs`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_crypto::Pbkdf;
use cryptkeep_luks::Luks;

/// Estimates above this are announced.
pub const ANNOUNCE_AFTER: Duration = Duration::from_secs(5);

/// The expected duration of the key derivations about to run.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// The longest it may take (a passphrase no keyslot takes tries them all).
    pub total: Duration,
    /// What dominates it: "keyslot 0 (pbkdf2-sha256, 4294967280 iterations)".
    pub what: String,
    /// How many keyslots may be tried.
    pub slots: usize,
}

/// "pbkdf2-sha256, N iterations" or "argon2id, T passes over M KiB, P lanes".
pub fn describe(p: &Pbkdf) -> String {
    match p {
        Pbkdf::Pbkdf2 { hash, iterations } => {
            format!("pbkdf2-{}, {iterations} iterations", hash.name())
        }
        Pbkdf::Argon2i {
            time,
            memory_kib,
            parallel,
        } => format!("argon2i, {time} passes over {memory_kib} KiB, {parallel} lanes"),
        Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        } => format!("argon2id, {time} passes over {memory_kib} KiB, {parallel} lanes"),
    }
}

/// The estimate for unlocking `luks` (only keyslot `slot`, if given): the
/// sum over the keyslots that may be tried. `None` if nothing can be
/// estimated (no active keyslot with a known KDF, or the probe failed).
pub fn for_unlock(luks: &Luks, slot: Option<usize>) -> Option<Estimate> {
    let out_len = luks.segment().map(|s| s.key_bytes).unwrap_or(32);
    let mut total = Duration::ZERO;
    let mut worst: Option<(Duration, String)> = None;
    let mut slots = 0;
    for k in luks.keyslots() {
        if !k.active || slot.is_some_and(|s| s != k.slot) || k.priority == Some(0) && slot.is_none()
        {
            continue;
        }
        let Some(kdf) = &k.kdf else { continue };
        let Ok(d) = cryptkeep_crypto::kdf::estimate(kdf, out_len) else {
            continue;
        };
        slots += 1;
        total = total.saturating_add(d);
        if worst.as_ref().is_none_or(|(w, _)| d > *w) {
            worst = Some((d, format!("keyslot {} ({})", k.slot, describe(kdf))));
        }
    }
    worst.map(|(_, what)| Estimate { total, what, slots })
}

/// The estimate for one derivation with `p` (a new keyslot's KDF).
pub fn for_kdf(p: &Pbkdf, out_len: usize, what: &str) -> Option<Estimate> {
    let total = cryptkeep_crypto::kdf::estimate(p, out_len).ok()?;
    Some(Estimate {
        total,
        what: format!("{what} ({})", describe(p)),
        slots: 1,
    })
}

/// A duration as people read it: "45 s", "12 min 5 s", "3 h 20 min",
/// "52 days".
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        3600..=172_799 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} days", s / 86_400),
    }
}

impl Estimate {
    /// Whether it is long enough to be announced.
    pub fn is_long(&self) -> bool {
        self.total > ANNOUNCE_AFTER
    }

    /// The announcement: one line on standard error.
    pub fn line(&self) -> String {
        let up_to = if self.slots > 1 {
            format!(
                "up to about {} (trying {} keyslots)",
                human(self.total),
                self.slots
            )
        } else {
            format!("about {}", human(self.total))
        };
        format!(
            "cryptkeep: the key derivation will take {up_to} on this machine: {}; \
             SIGINT (Ctrl-C) or SIGTERM stops it",
            self.what
        )
    }

    /// Prints [`Estimate::line`] if the derivation is long.
    pub fn print(&self) {
        if self.is_long() {
            eprintln!("{}", self.line());
        }
    }

    /// If the derivation is long and standard error is a terminal, starts
    /// a progress line, erased when the returned guard is dropped.
    pub fn progress(&self) -> Option<Progress> {
        if self.is_long() && crate::passphrase::stderr_is_tty() {
            Progress::start(self.total)
        } else {
            None
        }
    }

    /// [`Estimate::print`], then [`Estimate::progress`] if `show_progress`
    /// (nobody is about to ask for a passphrase on the terminal).
    pub fn announce(&self, show_progress: bool) -> Option<Progress> {
        self.print();
        if show_progress {
            self.progress()
        } else {
            None
        }
    }
}

/// Announces the estimate for unlocking `luks`, if it is long (see
/// [`Estimate::announce`]).
pub fn announce_unlock(luks: &Luks, slot: Option<usize>, show_progress: bool) -> Option<Progress> {
    for_unlock(luks, slot).and_then(|e| e.announce(show_progress))
}

/// A progress line on the terminal ("deriving the key: 1 min 5 s of about
/// 3 h 20 min"), redrawn every second by a thread that has the stop
/// signals blocked (they are for the thread that waits or derives).
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(total: Duration) -> Option<Progress> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let began = Instant::now();
        let thread = std::thread::Builder::new()
            .name("ck-progress".into())
            .spawn(move || {
                crate::interrupt::block_in_this_thread();
                let mut err = std::io::stderr();
                while !flag.load(Ordering::Relaxed) {
                    let _ = write!(
                        err,
                        "\r\x1b[Kcryptkeep: deriving the key: {} of about {}",
                        human(began.elapsed()),
                        human(total)
                    );
                    let _ = err.flush();
                    for _ in 0..10 {
                        if flag.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                let _ = write!(err, "\r\x1b[K");
                let _ = err.flush();
            })
            .ok()?;
        Some(Progress {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cryptkeep_crypto::HashAlg;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(725)), "12 min 5 s");
        assert_eq!(human(Duration::from_secs(12_000)), "3 h 20 min");
        assert_eq!(human(Duration::from_secs(52 * 86_400 + 5)), "52 days");
    }

    #[test]
    fn near_2_32_iterations_is_announced_and_a_normal_slot_is_not() {
        let huge = Pbkdf::Pbkdf2 {
            hash: HashAlg::Sha256,
            iterations: u32::MAX - 15,
        };
        let e = for_kdf(&huge, 64, "keyslot 0").unwrap();
        assert!(e.is_long(), "{e:?}");
        assert!(e.total > Duration::from_secs(60), "{e:?}");
        assert!(e.line().contains("4294967280 iterations"), "{}", e.line());
        let small = Pbkdf::Pbkdf2 {
            hash: HashAlg::Sha256,
            iterations: 1000,
        };
        assert!(!for_kdf(&small, 64, "keyslot 0").unwrap().is_long());
    }
}
