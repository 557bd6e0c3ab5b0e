//! One connection to the server: connected, through the handshake, then
//! in transmission mode with several requests in flight (`pipe.rs`).

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::handshake::{self, ExportInfo, Peer};
use super::pipe::{Op, Pipe};
use super::secure;
use super::transport::{Halves, Split};
use super::uri::{Transport, Uri};
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
    /// What the handshake told.
    pub info: ExportInfo,
    pipe: Pipe,
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
        crate::sockbuf::grow(&stream);
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
        drop(w);
        if !r.buffer().is_empty() {
            return Err(Error::protocol(
                "the server sent data before the first request",
            ));
        }
        Ok(Conn::over(r.into_inner().split()?, info))
    }

    /// A connection over `halves`, already in transmission mode.
    pub(crate) fn over(halves: Halves, info: ExportInfo) -> Conn {
        Conn {
            pipe: Pipe::new(halves, info.structured),
            info,
        }
    }

    /// Sends `ops` together and waits for their replies: see
    /// [`Pipe::exchange`].
    pub(crate) fn exchange(&self, ops: &mut [Op<'_>]) -> Result<Vec<Result<(), Error>>, Error> {
        self.pipe.exchange(ops)
    }

    /// One request alone; its outcome.
    pub(crate) fn one(&self, op: Op<'_>) -> Result<(), Error> {
        let mut ops = [op];
        let mut r = self.exchange(&mut ops)?;
        r.pop()
            .unwrap_or_else(|| Err(Error::protocol("request without a reply")))
    }

    /// Requests in flight.
    pub(crate) fn load(&self) -> usize {
        self.pipe.load()
    }

    /// Whether the connection died.
    pub(crate) fn is_dead(&self) -> bool {
        self.pipe.is_dead()
    }
}

impl Drop for Conn {
    /// Tells the server the connection ends (best effort) and hangs up.
    fn drop(&mut self) {
        self.pipe.disconnect();
    }
}
