//! The transmission phase of one connection: the reader parses and checks
//! requests and reads write payloads; workers run them on the store and
//! send each reply whole under the writer lock, in any order (the cookie
//! tells them apart).

use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use cryptkeep_volume::BlockStore;

use crate::proto::{cmd, cmd_flag, err};

use super::budget::Budget;
use super::pool::Pool;
use super::reply::{
    self, block_status, error_reply, read_head, seal_read, simple, wire_errno, DATA_HEAD,
};
use super::request::{check, Cmd, Header, HEADER};
use super::{Session, Shape, ALLOC_ID};
use crate::stream::Stream;

/// The smallest cost of a request against the in-flight budget, so a
/// flood of zero-length requests is bounded too.
const MIN_COST: usize = 4096;
/// The cost of a block status request (its reply can carry thousands of
/// extents).
const STATUS_COST: usize = 64 << 10;

/// One request for a worker.
struct Job {
    h: Header,
    cmd: Cmd,
    /// A write's payload in its first `h.len` bytes (a pooled buffer).
    payload: Vec<u8>,
    cost: usize,
}

/// What the workers of a connection share.
struct Ctx<S> {
    store: Arc<S>,
    shape: Shape,
    sess: Session,
    writer: Mutex<Stream>,
    budget: Budget,
    pool: Pool,
    /// Store operations at once, shared by every connection.
    gate: Arc<Budget>,
}

impl<S: BlockStore> Ctx<S> {
    /// The reply writer. `None` when a thread panicked while holding it:
    /// a reply may be half sent, so the connection is shut down rather
    /// than written on.
    fn writer(&self) -> Option<MutexGuard<'_, Stream>> {
        match self.writer.lock() {
            Ok(w) => Some(w),
            Err(p) => {
                p.into_inner().shutdown();
                None
            }
        }
    }

    /// Sends one reply; on failure the connection is shut down (the reader
    /// then stops).
    fn send(&self, bytes: &[u8]) {
        if let Some(mut w) = self.writer() {
            if w.write_all(bytes).is_err() {
                w.shutdown();
            }
        }
    }

    /// Starts a read reply whose data `plain` is lent by the store: sends
    /// what the socket takes at once, without waiting for it or for the
    /// writer lock, so a lent slot is never held while a client is slow
    /// to read. What is left is copied out and answered, with the writer
    /// (`None`: not taken yet), for [`Ctx::finish`] once the slot is back;
    /// `None` when all was sent or the connection is shut down.
    fn send_lent(
        &self,
        structured: bool,
        h: &Header,
        plain: &[u8],
    ) -> Option<(Option<MutexGuard<'_, Stream>>, Vec<u8>, usize)> {
        let mut hb = [0u8; DATA_HEAD];
        let n = seal_read(&mut hb, structured, h.cookie, h.offset, plain.len());
        let head = &hb[..n - plain.len()];
        let w = match self.writer.try_lock() {
            Ok(w) => Some(w),
            Err(TryLockError::Poisoned(p)) => {
                p.into_inner().shutdown();
                return None;
            }
            Err(TryLockError::WouldBlock) => None,
        };
        let sent = match w.as_deref().and_then(|s| s.send_now(head, plain)) {
            Some(Ok(k)) => k,
            Some(Err(_)) => {
                if let Some(s) = &w {
                    s.shutdown();
                }
                return None;
            }
            None => 0,
        };
        if sent == n {
            return None;
        }
        let mut buf = self.pool.take(n - sent);
        let from_head = head.len().saturating_sub(sent);
        buf[..from_head].copy_from_slice(&head[head.len() - from_head..]);
        buf[from_head..n - sent].copy_from_slice(&plain[plain.len() - (n - sent - from_head)..]);
        Some((w, buf, n - sent))
    }

    /// Sends the rest of a reply [`Ctx::send_lent`] began, under the writer
    /// lock it holds (or takes now).
    fn finish(&self, w: Option<MutexGuard<'_, Stream>>, rest: &[u8]) {
        if let Some(mut w) = w.or_else(|| self.writer()) {
            if w.write_all(rest).is_err() {
                w.shutdown();
            }
        }
    }

    /// Runs one request and sends its reply.
    fn run(&self, job: Job) {
        let h = job.h;
        let store = &*self.store;
        let done = |r: Result<(), cryptkeep_volume::Error>| match r {
            Ok(()) => simple(h.cookie, 0).to_vec(),
            Err(e) => simple(h.cookie, wire_errno(e.errno())).to_vec(),
        };
        let fua = |r: Result<(), cryptkeep_volume::Error>| {
            r.and_then(|()| {
                if h.has(cmd_flag::FUA) {
                    store.flush()
                } else {
                    Ok(())
                }
            })
        };
        if job.cmd != Cmd::Read {
            self.gate.take(1);
        }
        let out = match job.cmd {
            Cmd::Read => {
                self.read(&h);
                self.budget.give(job.cost);
                return;
            }
            Cmd::Write => done(fua(store
                .write_at(&job.payload[..h.len as usize], h.offset)
                .map(|_| ()))),
            Cmd::Flush => done(store.flush()),
            Cmd::Trim => done(fua(store.discard(h.offset, u64::from(h.len)))),
            Cmd::WriteZeroes => done(fua(store.write_zeroes(h.offset, u64::from(h.len)))),
            Cmd::Cache | Cmd::Disc => simple(h.cookie, 0).to_vec(),
            Cmd::BlockStatus => self.status(&h),
        };
        self.gate.give(1);
        self.pool.give(job.payload);
        self.send(&out);
        self.budget.give(job.cost);
    }

    /// A read: sent straight from where the store decrypted it (the
    /// keep's shared slot) when the store lends it, else decrypted into a
    /// pooled reply buffer and sent from there.
    fn read(&self, h: &Header) {
        let structured = self.sess.structured;
        let (head, len) = (read_head(structured), h.len as usize);
        self.gate.take(1);
        let mut left = None;
        let lent = self.store.read_borrowed(h.offset, len, &mut |plain| {
            // Never short (the range check keeps reads inside the export),
            // and one reply only, however often a store calls.
            if plain.len() == len && left.is_none() {
                left = Some(self.send_lent(structured, h, plain));
            }
        });
        match (lent, left) {
            // The reply has begun: it ends whole, whatever the store says
            // after lending (a second reply to one cookie would break the
            // stream).
            (_, Some(rest)) => {
                self.gate.give(1);
                if let Some((w, buf, n)) = rest {
                    self.finish(w, &buf[..n]);
                    self.pool.give(buf);
                }
                return;
            }
            (None, None) => {}
            (Some(r), None) => {
                self.gate.give(1);
                let errno = r.err().map_or(libc::EIO, |e| e.errno());
                self.send(&error_reply(structured, h.cookie, wire_errno(errno)));
                return;
            }
        }
        // The store does not lend this read: into a reply buffer, still
        // under the gate taken above.
        let mut buf = self.pool.take(head + len);
        let data = &mut buf[head..head + len];
        let r = self.store.read_at(data, h.offset);
        self.gate.give(1);
        match r {
            Ok(n) => {
                // Short only at the end, which the range check excludes.
                data[n.min(len)..].fill(0);
                let n = seal_read(&mut buf, structured, h.cookie, h.offset, len);
                self.send(&buf[..n]);
            }
            Err(e) => self.send(&error_reply(structured, h.cookie, wire_errno(e.errno()))),
        }
        self.pool.give(buf);
    }

    /// Block status: the store's allocation map of the range.
    fn status(&self, h: &Header) -> Vec<u8> {
        let len = u64::from(h.len).max(1).min(self.shape.size - h.offset);
        if len == 0 {
            return reply::structured_error(h.cookie, err::EINVAL);
        }
        match self.store.extents(h.offset, len) {
            Ok(mut ext) if !ext.is_empty() => {
                if h.has(cmd_flag::REQ_ONE) {
                    ext.truncate(1);
                }
                block_status(h.cookie, ALLOC_ID, &ext)
            }
            Ok(_) => reply::structured_error(h.cookie, err::EIO),
            Err(e) => reply::structured_error(h.cookie, wire_errno(e.errno())),
        }
    }
}

/// Takes jobs until the reader hangs up.
fn work<S: BlockStore>(ctx: &Ctx<S>, jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = jobs.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        match job {
            Ok(j) => ctx.run(j),
            Err(_) => return,
        }
    }
}

/// Reads and drops `n` bytes of payload.
fn drain(r: &mut impl Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut r.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Serves requests on `stream` until the client disconnects, sends
/// `NBD_CMD_DISC` or breaks the protocol; requests already queued finish
/// first.
pub(crate) fn run<S: BlockStore>(
    stream: Stream,
    store: Arc<S>,
    shape: Shape,
    sess: Session,
    gate: Arc<Budget>,
) {
    crate::sockbuf::grow(&stream);
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let _ = stream.set_read_timeout(None);
    let _ = writer.set_write_timeout(Some(shape.limits.write_timeout));
    let workers = shape.limits.workers.max(1);
    let ctx = Arc::new(Ctx {
        budget: Budget::new(shape.limits.in_flight_bytes),
        pool: Pool::new(2 * workers),
        gate,
        store,
        shape,
        sess,
        writer: Mutex::new(writer),
    });
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (ctx, rx) = (ctx.clone(), rx.clone());
            std::thread::spawn(move || work(&ctx, &rx))
        })
        .collect();
    let mut reader = BufReader::with_capacity(256 << 10, stream);
    loop {
        let mut hb = [0u8; HEADER];
        if reader.read_exact(&mut hb).is_err() {
            break;
        }
        let Some(h) = Header::parse(&hb) else {
            break;
        };
        let cmd = match check(&h, &ctx.shape, &ctx.sess) {
            Ok(Cmd::Disc) => break,
            Ok(c) => c,
            Err(e) => {
                if drain(&mut reader, u64::from(h.payload())).is_err() {
                    break;
                }
                let structured =
                    ctx.sess.structured && matches!(h.typ, cmd::READ | cmd::BLOCK_STATUS);
                ctx.send(&error_reply(structured, h.cookie, e));
                continue;
            }
        };
        let cost = match cmd {
            Cmd::Read | Cmd::Write => (h.len as usize).max(MIN_COST),
            Cmd::BlockStatus => STATUS_COST,
            _ => MIN_COST,
        };
        ctx.budget.take(cost);
        let mut payload = Vec::new();
        if cmd == Cmd::Write {
            payload = ctx.pool.take(h.len as usize);
            if reader.read_exact(&mut payload[..h.len as usize]).is_err() {
                ctx.budget.give(cost);
                break;
            }
        }
        if tx
            .send(Job {
                h,
                cmd,
                payload,
                cost,
            })
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    for t in handles {
        let _ = t.join();
    }
    ctx.writer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .shutdown();
}
