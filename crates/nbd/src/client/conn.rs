//! One connection to the server in transmission mode: requests sent and
//! their replies read in turn, each with a fresh cookie that the reply
//! must carry.

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::handshake::{self, ExportInfo, Peer};
use super::reply::{self, Expect};
use super::secure;
use super::uri::{Transport, Uri};
use super::wire;
use crate::proto::cmd;
use crate::stream::Stream;
use crate::Error;

/// The longest a handshake may take (a server that keeps a new client
/// waiting, e.g. because it serves one at a time, is not waited for longer).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A stream for the handshake: reads buffered, writes direct.
struct Duplex<'a> {
    r: &'a mut BufReader<Stream>,
    w: &'a mut Stream,
}

impl Read for Duplex<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.r.read(b)
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.w.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection in transmission mode.
#[derive(Debug)]
pub(crate) struct Conn {
    r: BufReader<Stream>,
    w: Stream,
    /// What the handshake told.
    pub info: ExportInfo,
    next_cookie: u64,
}

impl Conn {
    /// Connects to `uri` and runs the handshake; `io_timeout` bounds every
    /// later send and receive (a server that stops answering counts as a
    /// lost connection).
    pub(crate) fn connect(uri: &Uri, io_timeout: Option<Duration>) -> Result<Conn, Error> {
        let handshake = io_timeout.map_or(HANDSHAKE, |t| t.min(HANDSHAKE));
        Conn::connect_within(uri, io_timeout, handshake)
    }

    /// [`Conn::connect`] with the handshake bounded by `handshake`.
    pub(crate) fn connect_within(
        uri: &Uri,
        io_timeout: Option<Duration>,
        handshake: Duration,
    ) -> Result<Conn, Error> {
        let server = uri.server();
        let unreachable = |source: io::Error| Error::Unreachable {
            server: server.clone(),
            source,
        };
        let stream = match &uri.transport {
            Transport::Tcp { host, port } => {
                let addrs = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(unreachable)?;
                let mut last =
                    io::Error::new(io::ErrorKind::NotFound, "the host name has no address");
                let mut got = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                        Ok(s) => {
                            got = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = got.ok_or_else(|| unreachable(last))?;
                s.set_nodelay(true).map_err(unreachable)?;
                Stream::Tcp(s)
            }
            Transport::Unix { path } => {
                Stream::Unix(UnixStream::connect(path).map_err(unreachable)?)
            }
        };
        grow_buffers(&stream);
        // The handshake is bounded too: a server that accepts and says
        // nothing must not hang the caller.
        stream.set_timeouts(Some(handshake))?;
        let peer = Peer {
            server: &server,
            export: &uri.export,
        };
        let timed_out = |e| match e {
            Error::Connection(io)
                if matches!(
                    io.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Error::HandshakeTimeout {
                    server: server.clone(),
                    seconds: handshake.as_secs().max(1),
                }
            }
            e => e,
        };
        // nbds: STARTTLS and the TLS handshake first.
        let (stream, greeting) = secure::open(stream, uri, &peer, handshake).map_err(timed_out)?;
        let mut w = stream.try_clone()?;
        let mut r = BufReader::with_capacity(64 * 1024, stream);
        let info = handshake::negotiate_after(
            &mut Duplex {
                r: &mut r,
                w: &mut w,
            },
            &peer,
            greeting,
        )
        .map_err(|e| secure::explain(timed_out(e), uri, &peer))?;
        w.set_timeouts(io_timeout)?;
        Ok(Conn {
            r,
            w,
            info,
            next_cookie: 1,
        })
    }

    fn send(
        &mut self,
        flags: u16,
        kind: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> Result<Expect, Error> {
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        let h = wire::request(flags, kind, cookie, offset, len);
        self.w.write_all(&h)?;
        if !payload.is_empty() {
            self.w.write_all(payload)?;
        }
        let what = match kind {
            cmd::READ => "read",
            cmd::WRITE => "write",
            cmd::FLUSH => "flush",
            cmd::TRIM => "trim",
            cmd::WRITE_ZEROES => "write zeroes",
            _ => "request",
        };
        Ok(Expect {
            cookie,
            what,
            structured: self.info.structured,
        })
    }

    /// Reads `buf.len()` (at most the maximum payload) bytes at `offset`.
    pub(crate) fn read(&mut self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let ex = self.send(0, cmd::READ, offset, len32(buf.len())?, &[])?;
        reply::read_reply(&mut self.r, ex, offset, buf)
    }

    /// Writes `buf` (at most the maximum payload) at `offset`.
    pub(crate) fn write(&mut self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let ex = self.send(0, cmd::WRITE, offset, len32(buf.len())?, buf)?;
        reply::plain_reply(&mut self.r, ex)
    }

    /// Writes `len` zero bytes at `offset`, letting the server punch a hole.
    pub(crate) fn write_zeroes(&mut self, offset: u64, len: u32) -> Result<(), Error> {
        let ex = self.send(0, cmd::WRITE_ZEROES, offset, len, &[])?;
        reply::plain_reply(&mut self.r, ex)
    }

    /// Tells the server `len` bytes at `offset` are no longer needed.
    pub(crate) fn trim(&mut self, offset: u64, len: u32) -> Result<(), Error> {
        let ex = self.send(0, cmd::TRIM, offset, len, &[])?;
        reply::plain_reply(&mut self.r, ex)
    }

    /// Makes every completed write durable.
    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        let ex = self.send(0, cmd::FLUSH, 0, 0, &[])?;
        reply::plain_reply(&mut self.r, ex)
    }

    /// Tells the server the connection ends (best effort).
    pub(crate) fn disconnect(mut self) {
        let h = wire::request(0, cmd::DISC, self.next_cookie, 0, 0);
        let _ = self.w.write_all(&h);
    }
}

/// Socket buffers for 1 MiB requests in flight (the kernel caps them at
/// `net.core.[rw]mem_max`; failure just leaves the defaults).
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// Asks for send and receive buffers of [`SOCKET_BUFFER`] bytes: fewer
/// wake-ups per megabyte read or written.
#[allow(unsafe_code)]
fn grow_buffers(s: &Stream) {
    use std::os::fd::AsRawFd;
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

fn len32(n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::protocol("request longer than 4 GiB"))
}
