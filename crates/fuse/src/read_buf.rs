//! Each `/dev/fuse` dispatcher thread's read buffer: a READ is answered
//! from it with no allocation and no zeroing per request.

use std::cell::RefCell;

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's buffer, at least `size` bytes long.
pub(crate) fn with<T>(size: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    READ_BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() < size {
            b.resize(size, 0);
        }
        f(&mut b[..size])
    })
}
