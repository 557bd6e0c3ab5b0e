//! futex(2) on words in memory shared between processes (no
//! `FUTEX_PRIVATE_FLAG`: the arena is a `MAP_SHARED` memfd mapping, and the
//! kernel keys shared futexes by the backing page, so both processes meet).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. Returns on a
/// wake, a timeout, a signal, or at once if the value already differs.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: word points at a live, aligned u32; ts is a valid timespec;
    // FUTEX_WAIT reads the word and sleeps, touching nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes up to `n` sleepers on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: word points at a live, aligned u32; FUTEX_WAKE only uses it
    // as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
