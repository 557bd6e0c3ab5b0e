//! The striped sector lock that makes concurrent read-modify-write safe.
//!
//! Sectors are grouped into 64 KiB regions of the data segment and regions
//! map onto [`STRIPES`] stripes. A write claims every stripe its sectors
//! touch: exclusively the stripes holding a sector it must read-modify-write
//! (a partially written sector), shared for the stripes it only overwrites
//! whole. So whole-sector writes (all that the loop device sends) never wait
//! for each other, and a partial-sector update never interleaves with any
//! other write to the same sector. All stripes of a request are taken at
//! once under one mutex, so there is no lock ordering and no deadlock.
//! There is no writer preference (it could deadlock claims that mix shared
//! and exclusive stripes), so a partial-sector write may wait while
//! whole-sector writes keep its stripe busy; the loop device only sends
//! whole sectors.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Number of stripes; regions `r` and `r + STRIPES` share a stripe.
pub(crate) const STRIPES: usize = 256;
/// log2 of the region size in bytes (64 KiB).
const REGION_SHIFT: u32 = 16;

#[derive(Clone, Copy, Default)]
struct Stripe {
    shared: u32,
    exclusive: bool,
}

struct Table {
    stripes: [Stripe; STRIPES],
    waiters: usize,
}

/// The lock table of one engine.
pub(crate) struct StripeLocks {
    table: Mutex<Table>,
    cv: Condvar,
}

/// What a request claims: the byte range `[start, end)` of the data segment
/// (sector aligned), and up to two bytes offsets whose sectors are claimed
/// exclusively (or all of them with `all_exclusive`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    pub start: u64,
    pub end: u64,
    pub exclusive_at: [Option<u64>; 2],
    pub all_exclusive: bool,
}

impl Claim {
    fn for_each(&self, mut f: impl FnMut(usize, bool)) {
        if self.end <= self.start {
            return;
        }
        let first = self.start >> REGION_SHIFT;
        let last = (self.end - 1) >> REGION_SHIFT;
        let excl: [Option<usize>; 2] = self.exclusive_at.map(|o| o.map(stripe_of));
        let is_excl = |s: usize| self.all_exclusive || excl.contains(&Some(s));
        if last - first >= STRIPES as u64 - 1 {
            (0..STRIPES).for_each(|s| f(s, is_excl(s)));
        } else {
            (first..=last).for_each(|r| {
                let s = (r % STRIPES as u64) as usize;
                f(s, is_excl(s))
            });
        }
    }
}

fn stripe_of(byte: u64) -> usize {
    ((byte >> REGION_SHIFT) % STRIPES as u64) as usize
}

/// Releases its claim when dropped.
pub(crate) struct ClaimGuard<'a> {
    locks: &'a StripeLocks,
    claim: Claim,
}

impl StripeLocks {
    pub(crate) fn new() -> StripeLocks {
        StripeLocks {
            table: Mutex::new(Table {
                stripes: [Stripe::default(); STRIPES],
                waiters: 0,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the table cannot leave it inconsistent
        // (updates are plain counters done after all checks), so recover.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until every stripe of `claim` is available, then takes them all.
    pub(crate) fn acquire(&self, claim: Claim) -> ClaimGuard<'_> {
        let mut t = self.lock();
        loop {
            let mut free = true;
            claim.for_each(|s, excl| {
                let st = t.stripes[s];
                free &= !st.exclusive && (!excl || st.shared == 0);
            });
            if free {
                break;
            }
            t.waiters += 1;
            t = self.cv.wait(t).unwrap_or_else(|p| p.into_inner());
            t.waiters -= 1;
        }
        claim.for_each(|s, excl| {
            let st = &mut t.stripes[s];
            if excl {
                st.exclusive = true;
            } else {
                st.shared += 1;
            }
        });
        ClaimGuard { locks: self, claim }
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        let mut t = self.locks.lock();
        self.claim.for_each(|s, excl| {
            let st = &mut t.stripes[s];
            if excl {
                st.exclusive = false;
            } else {
                st.shared -= 1;
            }
        });
        if t.waiters > 0 {
            self.locks.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn claim(start: u64, end: u64, excl: Option<u64>) -> Claim {
        Claim {
            start,
            end,
            exclusive_at: [excl, None],
            all_exclusive: false,
        }
    }

    #[test]
    fn shared_claims_coexist_exclusive_waits() {
        let locks = Arc::new(StripeLocks::new());
        let a = locks.acquire(claim(0, 1 << 20, None));
        let _b = locks.acquire(claim(0, 1 << 20, None));
        let got = Arc::new(AtomicBool::new(false));
        let t = {
            let (locks, got) = (locks.clone(), got.clone());
            std::thread::spawn(move || {
                let _c = locks.acquire(claim(4096, 8192, Some(4096)));
                got.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !got.load(Ordering::SeqCst),
            "exclusive claim went through a shared one"
        );
        drop(a);
        drop(_b);
        t.join().unwrap();
        assert!(got.load(Ordering::SeqCst));
    }

    #[test]
    fn huge_claim_touches_every_stripe_once() {
        let c = Claim {
            start: 0,
            end: (STRIPES as u64 + 3) << REGION_SHIFT,
            exclusive_at: [None, None],
            all_exclusive: true,
        };
        let mut seen = [0u32; STRIPES];
        c.for_each(|s, e| {
            assert!(e);
            seen[s] += 1
        });
        assert!(seen.iter().all(|&n| n == 1));
    }
}
