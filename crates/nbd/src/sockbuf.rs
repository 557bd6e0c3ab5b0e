//! Socket buffers large enough for several 1 MiB requests or replies in
//! flight, for the client's connections and the server's.

use std::os::fd::AsRawFd;

use crate::stream::Stream;

/// Bytes asked for (the kernel caps them at `net.core.[rw]mem_max`;
/// failure just leaves the defaults).
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// Asks for send and receive buffers of [`SOCKET_BUFFER`] bytes: fewer
/// wake-ups per megabyte read or written.
#[allow(unsafe_code)]
pub(crate) fn grow(s: &Stream) {
    let fd = s.as_raw_fd();
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        let v: libc::c_int = SOCKET_BUFFER;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&v`,
        // which lives across the call; the fd is borrowed from `s`.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}
