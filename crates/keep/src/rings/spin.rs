//! [`SpinBudget`]: how long a waiting side of the rings stays awake before
//! it sleeps on its futex: its whole ceiling, or, with
//! `CRYPTKEEP_KEEP_SPIN_ADAPT=1`, a budget learned from how its recent
//! waits ended.
//!
//! Spinning pays when the answer (or the next request) comes within a few
//! microseconds: a sleep and a wake-up cost tens of microseconds on a VM.
//! It is waste when the other side is not running: on a busy machine a
//! spinning thread takes the CPU from the very thread it waits for, and
//! from everyone else. So the budget follows the waits: a wait that ended
//! while spinning after `w` pulls it towards `2w`; a wait that outlasted
//! it halves it, unless the whole wait was short enough that a longer
//! spin would have caught it. It never goes below a short hot spin (the
//! null call's round trip) nor above the configured ceiling.

use std::time::Duration;

/// An adaptive spin budget between `floor` and `ceiling`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpinBudget {
    now: Duration,
    floor: Duration,
    ceiling: Duration,
    adapt: bool,
}

/// Whether budgets adapt: only with `CRYPTKEEP_KEEP_SPIN_ADAPT=1`. By
/// default every wait spins its whole ceiling: on a quiet machine a tar
/// extract through `fs mount --keep` ran 12 % faster that way (the worker
/// catches requests that come 50–150 µs apart, where an adapted budget
/// sleeps and pays a wake-up each time); adapting saves the keep's CPU on
/// a busy machine (a third of it on the same extract).
fn adapting() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CRYPTKEEP_KEEP_SPIN_ADAPT").as_deref() == Ok("1"))
}

impl SpinBudget {
    /// Starts at `ceiling`: a quiet machine keeps it there.
    pub(crate) fn new(floor: Duration, ceiling: Duration) -> SpinBudget {
        let floor = floor.min(ceiling);
        SpinBudget {
            now: ceiling,
            floor,
            ceiling,
            adapt: adapting(),
        }
    }

    /// How long to spin for the next wait.
    pub(crate) fn get(&self) -> Duration {
        self.now
    }

    /// The wait ended while spinning, after `waited`.
    pub(crate) fn caught(&mut self, waited: Duration) {
        self.towards(waited * 2);
    }

    /// The budget ran out and the waiter slept; the whole wait took
    /// `waited`.
    pub(crate) fn missed(&mut self, waited: Duration) {
        if waited < self.ceiling {
            // A longer spin would have caught it.
            self.towards(waited * 2);
        } else if self.adapt {
            self.now = (self.now / 2).max(self.floor);
        }
    }

    fn towards(&mut self, want: Duration) {
        if !self.adapt {
            return;
        }
        let want = want.clamp(self.floor, self.ceiling);
        self.now = ((self.now + want) / 2).clamp(self.floor, self.ceiling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn adaptive(floor: Duration, ceiling: Duration) -> SpinBudget {
        SpinBudget {
            adapt: true,
            ..SpinBudget::new(floor, ceiling)
        }
    }

    #[test]
    fn fixed_unless_asked() {
        let mut b = SpinBudget {
            adapt: false,
            ..SpinBudget::new(2 * US, 50 * US)
        };
        b.missed(500 * US);
        b.caught(US);
        assert_eq!(b.get(), 50 * US);
    }

    #[test]
    fn long_waits_shrink_it_to_the_floor() {
        let mut b = adaptive(2 * US, 50 * US);
        assert_eq!(b.get(), 50 * US);
        for _ in 0..10 {
            b.missed(500 * US);
        }
        assert_eq!(b.get(), 2 * US);
    }

    #[test]
    fn short_waits_bring_it_back() {
        let mut b = adaptive(2 * US, 50 * US);
        for _ in 0..10 {
            b.missed(500 * US);
        }
        // Waits of 10 µs that a 2 µs spin missed: the next spins cover them.
        for _ in 0..10 {
            b.missed(10 * US);
        }
        assert!(b.get() >= 15 * US && b.get() <= 20 * US, "{:?}", b.get());
        // Answers in 1 µs while spinning: the budget settles near the floor.
        for _ in 0..20 {
            b.caught(US);
        }
        assert!(b.get() <= 3 * US, "{:?}", b.get());
    }

    #[test]
    fn stays_within_its_bounds() {
        let mut b = adaptive(2 * US, 50 * US);
        for _ in 0..10 {
            b.caught(Duration::from_secs(1));
        }
        assert_eq!(b.get(), 50 * US);
        b.caught(Duration::ZERO);
        assert!(b.get() >= 2 * US);
    }
}
