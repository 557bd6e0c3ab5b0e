//! [`TlsStream`]: a TLS session over a connected socket, shared by several
//! handles: one thread may block reading while others write.
//!
//! A rustls connection is one state machine for both directions, so it
//! sits under a mutex; the socket is non-blocking, and a handle holds the
//! lock only while it moves bytes between the socket and the session,
//! never while it waits: it waits in `poll(2)` with the lock released.
//! A write returns once its records are on the socket (as a blocking
//! socket write would), so nothing is left behind for a thread that is
//! not there. Timeouts are deadlines on those waits. Records are read from
//! the socket [`RECV_SIZE`] bytes at a time into a buffer rustls then
//! takes them from (it reads 4 KiB at a time itself). The plaintext path
//! does not come through here.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::Connection;

/// The plain socket a TLS session runs over: what the session needs of
/// it, through shared references (its handles share it).
pub(crate) trait Socket: AsRawFd + fmt::Debug + Send + Sync {
    /// Reads what is there (non-blocking once the handshake is done).
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes what the socket takes.
    fn send(&self, buf: &[u8]) -> io::Result<usize>;
    /// Switches between blocking and non-blocking mode.
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    /// Ends both directions.
    fn shutdown(&self);
}

/// Plaintext rustls accepts from one write before its records go out (a
/// 32 MiB reply is encrypted and sent a slice at a time).
const SEND_SLICE: usize = 256 << 10;
/// Bytes of records read from the socket at once.
const RECV_SIZE: usize = 128 << 10;

/// The socket as rustls reads and writes it.
struct Sock<'a>(&'a dyn Socket);

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

/// The session and the records read from the socket but not yet given to
/// it.
struct Session {
    conn: Connection,
    rx: Box<[u8]>,
    /// `rx[start..end]` is still to be given to rustls.
    start: usize,
    end: usize,
}

struct Inner {
    /// The plain socket (non-blocking once the handshake is done).
    sock: Box<dyn Socket>,
    conn: Mutex<Session>,
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
        sock: Box<dyn Socket>,
        mut conn: Connection,
        timeout: Option<Duration>,
    ) -> io::Result<TlsStream> {
        let mut io = Sock(&*sock);
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
                conn: Mutex::new(Session {
                    conn,
                    rx: vec![0; RECV_SIZE].into_boxed_slice(),
                    start: 0,
                    end: 0,
                }),
                timeouts: Mutex::new((timeout, timeout)),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
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
        if let Ok(mut s) = self.inner.conn.try_lock() {
            s.conn.send_close_notify();
            let _ = s.conn.write_tls(&mut Sock(&*self.inner.sock));
        }
        self.inner.sock.shutdown();
    }

    /// Writes queued records until none is left, waiting (unlocked) for
    /// the socket to take them.
    fn drain<'a>(
        &'a self,
        mut s: MutexGuard<'a, Session>,
        deadline: Option<Instant>,
    ) -> io::Result<MutexGuard<'a, Session>> {
        loop {
            self.push(&mut s.conn)?;
            if !s.conn.wants_write() {
                return Ok(s);
            }
            drop(s);
            wait(self.as_raw_fd(), libc::POLLOUT, deadline)?;
            s = self.lock();
        }
    }

    /// Writes what it can of the queued records without waiting.
    fn push(&self, c: &mut Connection) -> io::Result<()> {
        while c.wants_write() {
            match c.write_tls(&mut Sock(&*self.inner.sock)) {
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
                let mut guard = self.lock();
                let s = &mut *guard;
                match s.conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                self.push(&mut s.conn)?;
                if s.start < s.end {
                    // Records already read: rustls takes them.
                    let n = s.conn.read_tls(&mut &s.rx[s.start..s.end])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "TLS: record buffer full",
                        ));
                    }
                    s.start += n;
                    self.process(&mut s.conn)?;
                    continue;
                }
                match self.inner.sock.recv(&mut s.rx) {
                    Ok(0) => {
                        // The end of the socket: rustls tells a clean
                        // close from a truncation.
                        s.conn.read_tls(&mut io::empty())?;
                        self.process(&mut s.conn)?;
                        return match s.conn.reader().read(buf) {
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                Err(io::ErrorKind::UnexpectedEof.into())
                            }
                            r => r,
                        };
                    }
                    Ok(n) => {
                        (s.start, s.end) = (0, n);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if s.conn.wants_write() {
                    libc::POLLIN | libc::POLLOUT
                } else {
                    libc::POLLIN
                }
            };
            wait(self.as_raw_fd(), events, deadline)?;
        }
    }

    /// Decrypts the records rustls holds; on a TLS error, sends its alert
    /// if the socket takes it at once.
    fn process(&self, c: &mut Connection) -> io::Result<()> {
        if let Err(e) = c.process_new_packets() {
            let _ = self.push(c);
            return Err(tls_io(e));
        }
        Ok(())
    }

    /// Encrypts up to [`SEND_SLICE`] bytes of `buf` and sends them; returns
    /// once they are on the socket.
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let deadline = self.deadline(true);
        loop {
            let mut s = self.lock();
            let n = s.conn.writer().write(buf)?;
            drop(self.drain(s, deadline)?);
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
