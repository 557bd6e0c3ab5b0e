//! The control channel between the I/O side and the keep: a
//! `SOCK_SEQPACKET` Unix socket pair (unix(7)). Each message is one packet
//! of at most [`MAX_MESSAGE`] bytes and may carry one file descriptor
//! (`SCM_RIGHTS`), which is how the keep hands over the shared-memory arena.
//! End of file on it means the other process exited or closed its end.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::Error;

/// Largest control message in bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// A connected `SOCK_SEQPACKET` pair, both ends close-on-exec.
pub fn socketpair() -> Result<(OwnedFd, OwnedFd), Error> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints for socketpair to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(Error::last_os("socketpair"));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends one message, with `fd` attached when given.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<(), Error> {
    if msg.len() > MAX_MESSAGE {
        return Err(Error::BadRequest(format!(
            "control message of {} bytes exceeds {MAX_MESSAGE}",
            msg.len()
        )));
    }
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Room for one SCM_RIGHTS descriptor, aligned for cmsghdr.
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        hdr.msg_controllen = space;
        // SAFETY: msg_control points at cbuf, which is large enough for one
        // cmsghdr plus one int (space <= 64 bytes), and suitably aligned.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd.as_raw_fd());
        }
    }
    loop {
        // SAFETY: hdr points at valid iovec/control buffers for the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EPIPE) | Some(libc::ECONNRESET) => return Err(Error::Gone),
            _ => {
                return Err(Error::Sys {
                    what: "sendmsg",
                    source: e,
                })
            }
        }
    }
}

/// Receives one message and the descriptor attached to it, if any.
/// `Err(Error::Gone)` at end of file (the peer closed or exited).
pub fn recv(sock: BorrowedFd<'_>) -> Result<(Vec<u8>, Option<OwnedFd>), Error> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    loop {
        // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        hdr.msg_controllen = std::mem::size_of_val(&cbuf);
        // SAFETY: hdr points at buffers valid for the stated lengths.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECONNRESET) => return Err(Error::Gone),
                _ => {
                    return Err(Error::Sys {
                        what: "recvmsg",
                        source: e,
                    })
                }
            }
        }
        let mut fd = None;
        // SAFETY: the kernel filled hdr's control area; CMSG_* walk it
        // within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const RawFd);
                    if fd.is_none() {
                        fd = Some(OwnedFd::from_raw_fd(raw));
                    } else {
                        libc::close(raw);
                    }
                }
                c = libc::CMSG_NXTHDR(&hdr, c);
            }
        }
        if n == 0 && fd.is_none() {
            return Err(Error::Gone);
        }
        buf.truncate(n as usize);
        return Ok((buf, fd));
    }
}

/// Whether the peer of `sock` is gone: poll with no wait for hang-up or end
/// of file. A pending message does not count as gone.
pub fn peer_gone(sock: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: p is one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0
}
