//! [`Stream`]: one connection, over a unix or a TCP socket, in plaintext
//! or (after `NBD_OPT_STARTTLS`) over TLS: accepted by the server, or made
//! by the client.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::tls::{Socket, TlsStream};

/// A connected socket of either family, plain or under TLS.
#[derive(Debug)]
pub(crate) enum Stream {
    /// A unix-domain socket.
    Unix(UnixStream),
    /// A TCP socket (with `TCP_NODELAY`).
    Tcp(TcpStream),
    /// A TLS session over one of the above (its handles share it).
    Tls(TlsStream),
}

impl Stream {
    /// A second handle on the same socket (for the reply writer).
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Tls(s) => Stream::Tls(s.clone()),
        })
    }

    /// The peer's IP address (TCP; `None` for a unix-domain socket, whose
    /// clients are local and admitted by the socket's permissions). An
    /// IPv4 address mapped into IPv6 is given as the IPv4 address.
    pub(crate) fn peer_ip(&self) -> Option<std::net::IpAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.ip().to_canonical()),
            _ => None,
        }
    }

    /// Ends both directions: blocked reads and writes on every handle
    /// return.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(s) => {
                s.shutdown();
                Ok(())
            }
        };
    }

    /// Sends what of `head` then `data` the socket takes at once, without
    /// waiting (`MSG_DONTWAIT`): the bytes sent, 0 when it is full. `None`
    /// under TLS, whose records are built from a copy anyway.
    #[allow(unsafe_code)]
    pub(crate) fn send_now(&self, head: &[u8], data: &[u8]) -> Option<io::Result<usize>> {
        let fd = match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(_) => return None,
        };
        let mut iov = [
            libc::iovec {
                iov_base: head.as_ptr() as *mut libc::c_void,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            },
        ];
        // SAFETY: a zeroed msghdr is valid; it points at two iovecs that
        // describe live slices, which sendmsg only reads.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        loop {
            // SAFETY: `fd` is this stream's open socket; `msg` is valid
            // for the call.
            let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Some(Ok(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // Full, or short of memory for a buffer now: the caller
                // copies and sends the rest in the ordinary way.
                io::ErrorKind::WouldBlock => return Some(Ok(0)),
                _ if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ENOMEM)) => {
                    return Some(Ok(0))
                }
                _ => return Some(Err(e)),
            }
        }
    }

    /// Read timeout (`None`: wait forever).
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Tls(s) => {
                s.set_read_timeout(t);
                Ok(())
            }
        }
    }

    /// Read and write timeouts (`None`: wait forever).
    pub(crate) fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }

    /// Write timeout (`None`: wait forever).
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Tls(s) => {
                s.set_write_timeout(t);
                Ok(())
            }
        }
    }

    /// Switches the socket between blocking and non-blocking mode (for
    /// every handle on it).
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Reads from the socket through a shared reference (plain sockets
    /// only; the TLS layer reads its records this way).
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => (&*s).read(buf),
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Writes to the socket through a shared reference (plain sockets
    /// only; the TLS layer writes its records this way).
    pub(crate) fn send(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => (&*s).write(buf),
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }
}

impl Socket for Stream {
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        Stream::recv(self, buf)
    }
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        Stream::send(self, buf)
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        Stream::set_nonblocking(self, on)
    }
    fn shutdown(&self) {
        Stream::shutdown(self)
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}
