//! Several requests in flight on one connection.
//!
//! Requests go out under a writer lock, each with a cookie unique among
//! those in flight. Replies may come in any order, and the chunks of
//! different requests' structured replies may interleave, so there is no
//! reader thread: the reply stream is a baton. A caller waiting for
//! replies takes it when it is free and reads reply headers; a header for
//! one of its own requests is handled on the spot (the payload goes
//! straight into the caller's buffer), a header for another caller's
//! request is handed over, with the baton, to that caller, which reads the
//! payload into its own buffer. A caller whose requests are all answered
//! puts the baton back for the others. Reads only happen while requests
//! are in flight, so the socket's receive timeout means "no byte from the
//! server for that long while it owes replies".
//!
//! A reply with an unknown cookie, a malformed reply or a broken stream
//! kills the connection: everyone waiting on it gets a lost-connection
//! error (and sends again elsewhere), and the transport is hung up so a
//! blocked sender returns too.

use std::collections::HashMap;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::reply::{Expect, Pending, Target};
use super::transport::{Halves, Hangup};
use super::wire::{self, reply_head, ReplyHead};
use crate::proto::cmd;
use crate::Error;

/// The most requests one connection has in flight.
pub(crate) const MAX_REQUESTS: usize = 16;
/// The most bytes of data (read or written) one connection has in flight.
const MAX_BYTES: u64 = 64 << 20;
/// Read buffer of the reply stream (larger payloads bypass it).
const READ_BUFFER: usize = 64 << 10;

/// The reply stream.
type Rx = BufReader<Box<dyn Read + Send>>;

/// One request of a batch.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    Read {
        /// Byte offset in the export.
        offset: u64,
        /// Where the data goes.
        buf: &'a mut [u8],
    },
    /// Write `buf` at `offset`.
    Write {
        /// Byte offset in the export.
        offset: u64,
        /// The data.
        buf: &'a [u8],
    },
    /// Write `len` zeros at `offset` (the server may punch a hole).
    WriteZeroes {
        /// Byte offset in the export.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// `len` bytes at `offset` are no longer needed.
    Trim {
        /// Byte offset in the export.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Make every completed write durable.
    Flush,
    /// The allocation of `len` bytes at `offset` (`NBD_CMD_BLOCK_STATUS`).
    BlockStatus {
        /// Byte offset in the export.
        offset: u64,
        /// Length in bytes.
        len: u32,
        /// The `base:allocation` context's id on this connection.
        context: u32,
        /// Where the extents go: (length, `NBD_STATE_*` flags).
        out: &'a mut Vec<(u32, u32)>,
    },
}

impl<'a> Op<'a> {
    /// Command, offset, length and payload.
    fn wire(&self) -> Result<(u16, u64, u32, &'a [u8]), Error> {
        Ok(match self {
            Op::Read { offset, buf } => (cmd::READ, *offset, len32(buf.len())?, &[][..]),
            Op::Write { offset, buf } => (cmd::WRITE, *offset, len32(buf.len())?, *buf),
            Op::WriteZeroes { offset, len } => (cmd::WRITE_ZEROES, *offset, *len, &[][..]),
            Op::Trim { offset, len } => (cmd::TRIM, *offset, *len, &[][..]),
            Op::Flush => (cmd::FLUSH, 0, 0, &[][..]),
            Op::BlockStatus { offset, len, .. } => (cmd::BLOCK_STATUS, *offset, *len, &[][..]),
        })
    }

    fn bytes(&self) -> u64 {
        match self {
            Op::Read { buf, .. } => buf.len() as u64,
            Op::Write { buf, .. } => buf.len() as u64,
            _ => 0,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::WriteZeroes { .. } => "write zeroes",
            Op::Trim { .. } => "trim",
            Op::Flush => "flush",
            Op::BlockStatus { .. } => "block status",
        }
    }
}

fn len32(n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::protocol("request longer than 4 GiB"))
}

/// Whose a cookie in flight is.
enum Owner {
    /// A read or block status query: its payload goes to the batch's
    /// buffer, so its headers are handed to that batch.
    Read {
        /// The batch.
        batch: u64,
        /// Bytes read.
        bytes: u64,
    },
    /// A request without reply data: whoever holds the reply stream reads
    /// its reply (small) and leaves the outcome in [`State::done`].
    Plain {
        /// The batch.
        batch: u64,
        /// Its index in the batch.
        index: usize,
        /// Bytes written.
        bytes: u64,
        /// The reply so far (`None` while a holder reads a chunk of it).
        reply: Option<Pending<'static>>,
    },
}

impl Owner {
    fn bytes(&self) -> u64 {
        match self {
            Owner::Read { bytes, .. } | Owner::Plain { bytes, .. } => *bytes,
        }
    }
}

/// A request's index in its batch and how it went.
type Outcome = (usize, Result<(), Error>);

/// Who waits for what.
struct State {
    /// The reply stream when no caller holds it.
    rx: Option<Rx>,
    /// Cookie in flight → whose it is.
    owner: HashMap<u64, Owner>,
    /// Batch → a header of one of its reads, handed over with the stream.
    handed: HashMap<u64, (ReplyHead, Rx)>,
    /// Batch → outcomes of its plain requests read by another holder.
    done: HashMap<u64, Vec<Outcome>>,
    /// Why the connection died, once it did.
    dead: Option<String>,
    requests: usize,
    bytes: u64,
    next_batch: u64,
    next_cookie: u64,
}

impl State {
    /// Forgets a cookie that is answered (or abandoned), freeing its room.
    fn finish(&mut self, cookie: u64) -> Option<Owner> {
        let o = self.owner.remove(&cookie)?;
        self.requests -= 1;
        self.bytes -= o.bytes();
        Some(o)
    }
}

/// One connection's requests and replies.
pub(crate) struct Pipe {
    tx: Mutex<Box<dyn Write + Send>>,
    st: Mutex<State>,
    changed: Condvar,
    hangup: Hangup,
    structured: bool,
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipe")
            .field("structured", &self.structured)
            .finish_non_exhaustive()
    }
}

/// One caller's requests, waiting for their replies.
struct Batch<'a> {
    id: u64,
    cookies: Vec<u64>,
    /// Reads not yet answered: cookie → index, reply.
    reads: HashMap<u64, (usize, Pending<'a>)>,
    /// Plain requests not yet answered.
    plain_left: usize,
    results: Vec<Option<Result<(), Error>>>,
}

impl Batch<'_> {
    fn complete(&self) -> bool {
        self.reads.is_empty() && self.plain_left == 0
    }

    /// Takes the outcomes other holders left for it.
    fn gather(&mut self, s: &mut State) {
        for (i, r) in s.done.remove(&self.id).unwrap_or_default() {
            self.results[i] = Some(r);
            self.plain_left -= 1;
        }
    }
}

/// What a batch did with the reply stream.
enum Holding {
    /// All its replies are in; the stream is back for others.
    Done,
    /// It handed the stream to another batch; wait again.
    Handed,
}

impl Pipe {
    /// A pipe over `h`, in transmission mode (`structured`: structured
    /// replies were agreed).
    pub(crate) fn new(h: Halves, structured: bool) -> Pipe {
        Pipe {
            tx: Mutex::new(h.writer),
            st: Mutex::new(State {
                rx: Some(BufReader::with_capacity(READ_BUFFER, h.reader)),
                owner: HashMap::new(),
                handed: HashMap::new(),
                done: HashMap::new(),
                dead: None,
                requests: 0,
                bytes: 0,
                next_batch: 0,
                next_cookie: 1,
            }),
            changed: Condvar::new(),
            hangup: h.hangup,
            structured,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'g>(&self, g: MutexGuard<'g, State>) -> MutexGuard<'g, State> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Requests in flight now (to pick the least busy connection).
    pub(crate) fn load(&self) -> usize {
        self.state().requests
    }

    /// Whether the connection died.
    pub(crate) fn is_dead(&self) -> bool {
        self.state().dead.is_some()
    }

    /// Sends `ops` back to back and waits for all their replies. `Err`: the
    /// connection is lost (every request must be sent again elsewhere);
    /// `Ok`: each request's outcome, in order (a server error fails only
    /// its own request).
    pub(crate) fn exchange(&self, ops: &mut [Op<'_>]) -> Result<Vec<Result<(), Error>>, Error> {
        let wires = ops.iter().map(Op::wire).collect::<Result<Vec<_>, _>>()?;
        let mut b = self.register(ops)?;
        let sent = self.send(&b.cookies, &wires);
        let outcome = match sent {
            Ok(()) => self.collect(&mut b),
            Err(e) => Err(e),
        };
        if let Err(e) = &outcome {
            self.kill(e);
        }
        let mut s = self.state();
        for c in &b.cookies {
            s.finish(*c);
        }
        s.done.remove(&b.id);
        if let Some((_, rx)) = s.handed.remove(&b.id) {
            // Only on a dead connection, whose stream is useless.
            drop(rx);
        }
        self.changed.notify_all();
        drop(s);
        outcome?;
        Ok(b.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::protocol("request without a reply"))))
            .collect())
    }

    /// Waits for room (always room when nothing is in flight), then gives
    /// each op a cookie and registers it.
    fn register<'a>(&self, ops: &'a mut [Op<'_>]) -> Result<Batch<'a>, Error> {
        let n = ops.len();
        let bytes: u64 = ops.iter().map(|o| o.bytes()).sum();
        let mut s = self.state();
        loop {
            if let Some(why) = &s.dead {
                return Err(lost(why));
            }
            let fits = s.requests + n <= MAX_REQUESTS && s.bytes + bytes <= MAX_BYTES;
            if s.requests == 0 || fits {
                break;
            }
            s = self.wait(s);
        }
        s.next_batch += 1;
        let id = s.next_batch;
        let mut b = Batch {
            id,
            cookies: Vec::with_capacity(n),
            reads: HashMap::new(),
            plain_left: 0,
            results: (0..n).map(|_| None).collect(),
        };
        for (index, op) in ops.iter_mut().enumerate() {
            let cookie = s.next_cookie;
            s.next_cookie = s.next_cookie.wrapping_add(1);
            let ex = Expect {
                cookie,
                what: op.what(),
                structured: self.structured,
            };
            let bytes = op.bytes();
            let owner = match op {
                Op::Read { offset, buf } => {
                    let target = Target::Read {
                        offset: *offset,
                        buf: &mut buf[..],
                    };
                    b.reads.insert(cookie, (index, Pending::new(ex, target)));
                    Owner::Read { batch: id, bytes }
                }
                Op::BlockStatus { context, out, .. } => {
                    let target = Target::Status {
                        context: *context,
                        out,
                    };
                    b.reads.insert(cookie, (index, Pending::new(ex, target)));
                    Owner::Read { batch: id, bytes }
                }
                _ => {
                    b.plain_left += 1;
                    Owner::Plain {
                        batch: id,
                        index,
                        bytes,
                        reply: Some(Pending::new(ex, Target::Plain)),
                    }
                }
            };
            s.owner.insert(cookie, owner);
            s.requests += 1;
            s.bytes += bytes;
            b.cookies.push(cookie);
        }
        Ok(b)
    }

    /// Writes the requests.
    fn send(&self, cookies: &[u64], wires: &[(u16, u64, u32, &[u8])]) -> Result<(), Error> {
        let mut w = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        for (&(kind, offset, len, payload), &cookie) in wires.iter().zip(cookies) {
            let h = wire::request(0, kind, cookie, offset, len);
            write_both(&mut *w, &h, payload)?;
        }
        Ok(())
    }
    /// Waits until every request of `b` is answered.
    fn collect(&self, b: &mut Batch<'_>) -> Result<(), Error> {
        loop {
            let (first, rx) = {
                let mut s = self.state();
                loop {
                    b.gather(&mut s);
                    if b.complete() {
                        return Ok(());
                    }
                    if let Some((head, rx)) = s.handed.remove(&b.id) {
                        break (Some(head), rx);
                    }
                    if let Some(why) = &s.dead {
                        return Err(lost(why));
                    }
                    if let Some(rx) = s.rx.take() {
                        break (None, rx);
                    }
                    s = self.wait(s);
                }
            };
            match self.hold(b, rx, first)? {
                Holding::Done => return Ok(()),
                Holding::Handed => {}
            }
        }
    }

    /// Reads replies while holding the stream (`first`: a header already
    /// read for one of `b`'s reads) until `b` is answered or the stream
    /// goes to another batch.
    fn hold(
        &self,
        b: &mut Batch<'_>,
        mut rx: Rx,
        first: Option<ReplyHead>,
    ) -> Result<Holding, Error> {
        let mut next = first;
        loop {
            let head = match next.take() {
                Some(h) => h,
                None => reply_head(&mut rx)?,
            };
            let cookie = head.cookie();
            if let Some((index, p)) = b.reads.get_mut(&cookie) {
                if let Some(result) = p.take(&mut rx, head)? {
                    b.results[*index] = Some(result);
                    b.reads.remove(&cookie);
                    self.state().finish(cookie);
                }
            } else {
                let mut s = self.state();
                let reply = match s.owner.get_mut(&cookie) {
                    Some(Owner::Read { batch, .. }) if *batch != b.id => {
                        let other = *batch;
                        s.handed.insert(other, (head, rx));
                        self.changed.notify_all();
                        return Ok(Holding::Handed);
                    }
                    Some(Owner::Plain { reply, .. }) => reply.take(),
                    _ => None,
                };
                drop(s);
                let Some(mut reply) = reply else {
                    return Err(Error::protocol(format!(
                        "reply for cookie {cookie}, which no request in flight has"
                    )));
                };
                let outcome = reply.take(&mut rx, head)?;
                let mut s = self.state();
                match outcome {
                    None => {
                        if let Some(Owner::Plain { reply: slot, .. }) = s.owner.get_mut(&cookie) {
                            *slot = Some(reply);
                        }
                    }
                    Some(result) => {
                        if let Some(Owner::Plain { batch, index, .. }) = s.finish(cookie) {
                            s.done.entry(batch).or_default().push((index, result));
                            if batch != b.id {
                                self.changed.notify_all();
                            }
                        }
                    }
                }
            }
            let mut s = self.state();
            b.gather(&mut s);
            if b.complete() {
                s.rx = Some(rx);
                self.changed.notify_all();
                return Ok(Holding::Done);
            }
        }
    }

    /// Marks the connection dead and hangs up, waking everyone.
    fn kill(&self, e: &Error) {
        let mut s = self.state();
        if s.dead.is_none() {
            s.dead = Some(match e {
                Error::Connection(io) => io.to_string(),
                e => e.to_string(),
            });
        }
        s.rx = None;
        s.handed.clear();
        drop(s);
        (self.hangup)();
        self.changed.notify_all();
    }

    /// Sends `NBD_CMD_DISC` (best effort) and hangs up.
    pub(crate) fn disconnect(&self) {
        if !self.is_dead() {
            let cookie = self.state().next_cookie;
            let h = wire::request(0, cmd::DISC, cookie, 0, 0);
            let mut w = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            let _ = w.write_all(&h);
        }
        (self.hangup)();
    }
}

/// The error of a request on a connection that died under it.
fn lost(why: &str) -> Error {
    Error::Connection(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        why.to_owned(),
    ))
}

/// Writes a request header and its payload, in as few system calls as the
/// socket allows.
fn write_both(w: &mut impl Write, head: &[u8], payload: &[u8]) -> io::Result<()> {
    let (mut h, mut p) = (head, payload);
    while !h.is_empty() {
        let n = w.write_vectored(&[IoSlice::new(h), IoSlice::new(p)])?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_h = n.min(h.len());
        h = &h[from_h..];
        p = &p[n - from_h..];
    }
    w.write_all(p)
}
