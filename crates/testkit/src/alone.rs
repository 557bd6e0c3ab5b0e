//! A per-binary lock for tests that must not run beside others.
//!
//! All of a crate's integration tests run as threads of one process. A test
//! that measures the whole process (its peak memory, its threads) or
//! changes it (the environment) takes `alone!()`; tests that would disturb
//! such a measurement take `alone!(shared)`: they run beside each other, but
//! never beside an `alone!()` test.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static ALONE: RwLock<()> = RwLock::new(());

/// Holds the rest of the test apart from every other `alone!` test of the
/// binary: `alone!()` runs by itself, `alone!(shared)` beside other shared
/// ones. The lock is released when the enclosing block ends.
#[macro_export]
macro_rules! alone {
    () => {
        let _alone = $crate::alone::exclusive();
    };
    (shared) => {
        let _alone = $crate::alone::shared();
    };
}

/// Waits until no other `alone!` test runs (for [`alone!`](crate::alone!)`()`).
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    ALONE.write().unwrap_or_else(|e| e.into_inner())
}

/// Waits until no `alone!()` test runs (for [`alone!`](crate::alone!)`(shared)`).
pub fn shared() -> RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|e| e.into_inner())
}
