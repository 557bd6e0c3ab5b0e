//! The per-thread scratch buffer that holds ciphertext on its way to the
//! backing store (and partial sectors on their way to the caller).
//!
//! One buffer per thread, grown to the largest request seen and reused, so
//! requests do not allocate.

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's scratch buffer, `len` bytes long. Contents on
/// entry are unspecified. Not reentrant: `f` must not call `with_scratch`.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0);
            }
            f(&mut v[..len])
        }
        // Only reachable if someone nests calls; stay correct with a fresh buffer.
        Err(_) => f(&mut vec![0u8; len]),
    })
}
