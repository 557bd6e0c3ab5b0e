//! [`TlsStream`]: a TLS session over a connected socket, shared by several
//! handles: one thread may block reading while others write.
//!
//! A rustls connection is one state machine for both directions, so it
//! sits under a mutex; the socket is non-blocking, and a handle holds the
//! lock only while it moves bytes between the socket and the session,
//! never while it waits: it waits in `poll(2)` with the lock released.
//! A write returns once its records are on the socket (as a blocking
//! socket write would), so nothing is left behind for a thread that is
//! not there. Timeouts are deadlines on those waits. The plaintext path
//! does not come through here.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::Connection;

use crate::stream::Stream;

/// Plaintext rustls accepts from one write before its records go out (a
/// 32 MiB reply is encrypted and sent a slice at a time).
const SEND_SLICE: usize = 256 << 10;

/// The socket as rustls reads and writes it.
struct Sock<'a>(&'a Stream);

impl Read for Sock<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.0.recv(b)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.send(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Inner {
    /// The plain socket (non-blocking once the handshake is done).
    sock: Stream,
    conn: Mutex<Connection>,
    /// Read and write timeouts.
    timeouts: Mutex<(Option<Duration>, Option<Duration>)>,
}

/// A handle on a TLS session (clones share it).
#[derive(Clone)]
pub(crate) struct TlsStream {
    inner: Arc<Inner>,
}

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("sock", &self.inner.sock)
            .finish_non_exhaustive()
    }
}

/// A rustls error as an I/O error (the peer broke TLS: the connection is
/// lost).
fn tls_io(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl TlsStream {
    /// Runs the TLS handshake of `conn` on `sock`, which must be blocking
    /// with its timeouts set (a peer that stalls fails the handshake);
    /// then the session keeps those timeouts.
    pub(crate) fn handshake(
        sock: Stream,
        mut conn: Connection,
        timeout: Option<Duration>,
    ) -> io::Result<TlsStream> {
        let mut io = Sock(&sock);
        while conn.is_handshaking() {
            match conn.complete_io(&mut io) {
                Ok((0, 0)) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) => {
                    // Tell the peer why, if rustls has an alert queued.
                    let _ = conn.write_tls(&mut io);
                    return Err(e);
                }
            }
        }
        while conn.wants_write() {
            conn.write_tls(&mut io)?;
        }
        conn.set_buffer_limit(Some(SEND_SLICE));
        sock.set_nonblocking(true)?;
        Ok(TlsStream {
            inner: Arc::new(Inner {
                sock,
                conn: Mutex::new(conn),
                timeouts: Mutex::new((timeout, timeout)),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.inner.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn deadline(&self, write: bool) -> Option<Instant> {
        let t = *self
            .inner
            .timeouts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let t = if write { t.1 } else { t.0 };
        t.map(|t| Instant::now() + t)
    }

    /// Read timeout of every handle (`None`: wait forever).
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) {
        self.inner
            .timeouts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0 = t;
    }

    /// Write timeout of every handle (`None`: wait forever).
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) {
        self.inner
            .timeouts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1 = t;
    }

    /// Sends `close_notify` if the socket takes it at once, then shuts the
    /// socket down: every handle's reads and writes end.
    pub(crate) fn shutdown(&self) {
        if let Ok(mut c) = self.inner.conn.try_lock() {
            c.send_close_notify();
            let _ = c.write_tls(&mut Sock(&self.inner.sock));
        }
        self.inner.sock.shutdown();
    }

    /// Writes queued records until none is left, waiting (unlocked) for
    /// the socket to take them.
    fn drain<'a>(
        &'a self,
        mut c: MutexGuard<'a, Connection>,
        deadline: Option<Instant>,
    ) -> io::Result<MutexGuard<'a, Connection>> {
        loop {
            while c.wants_write() {
                match c.write_tls(&mut Sock(&self.inner.sock)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if !c.wants_write() {
                return Ok(c);
            }
            drop(c);
            wait(self.as_raw_fd(), libc::POLLOUT, deadline)?;
            c = self.lock();
        }
    }

    /// Writes what it can of the queued records without waiting.
    fn push(&self, c: &mut Connection) -> io::Result<()> {
        while c.wants_write() {
            match c.write_tls(&mut Sock(&self.inner.sock)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads plaintext: what the session holds, else records from the
    /// socket, waiting (unlocked) until some arrive. 0 after the peer's
    /// `close_notify`; `UnexpectedEof` if the socket closed without it.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.deadline(false);
        loop {
            let events = {
                let mut c = self.lock();
                match c.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                self.push(&mut c)?;
                match c.read_tls(&mut Sock(&self.inner.sock)) {
                    Ok(n) => {
                        if let Err(e) = c.process_new_packets() {
                            let _ = self.push(&mut c);
                            return Err(tls_io(e));
                        }
                        if n == 0 {
                            // End of the socket: the reader now tells a
                            // clean close from a truncation.
                            return match c.reader().read(buf) {
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                    Err(io::ErrorKind::UnexpectedEof.into())
                                }
                                r => r,
                            };
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                if c.wants_write() {
                    libc::POLLIN | libc::POLLOUT
                } else {
                    libc::POLLIN
                }
            };
            wait(self.as_raw_fd(), events, deadline)?;
        }
    }

    /// Encrypts up to [`SEND_SLICE`] bytes of `buf` and sends them; returns
    /// once they are on the socket.
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let deadline = self.deadline(true);
        loop {
            let mut c = self.lock();
            let n = c.writer().write(buf)?;
            drop(self.drain(c, deadline)?);
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
        }
    }

    /// Sends every queued record.
    pub(crate) fn flush(&self) -> io::Result<()> {
        let deadline = self.deadline(true);
        drop(self.drain(self.lock(), deadline)?);
        Ok(())
    }
}

impl AsRawFd for TlsStream {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.sock.as_raw_fd()
    }
}

/// Waits until `fd` has one of `events` (or an error or hang-up, which the
/// next read or write reports), at most until `deadline` (then
/// `WouldBlock`, as a socket timeout).
#[allow(unsafe_code)]
fn wait(fd: RawFd, events: libc::c_short, deadline: Option<Instant>) -> io::Result<()> {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int
            }
        };
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: `p` is one valid pollfd that lives across the call.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        match r {
            1.. => return Ok(()),
            0 => {}
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}
