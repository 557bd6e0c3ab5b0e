//! [`Client`]: an NBD export as positioned byte I/O, over a pool of
//! connections, surviving a server that goes away and comes back.
//!
//! - Connections: N when the server sets `NBD_FLAG_CAN_MULTI_CONN` (one
//!   consistent store behind all of them, and a flush on one covers writes
//!   completed on any), else one. Each connection carries up to
//!   16 requests at once (`pipe.rs`); a caller uses the least busy one.
//! - Large reads and writes are split into pieces of at most [`PIECE`]
//!   bytes (and the server's maximum payload), sent a few at a time back
//!   to back; requests that break the minimum block size are widened
//!   (reads) or read-modify-written (writes, header code only).
//! - Reconnect: a broken connection (reset, EOF, protocol error, a reply
//!   slower than the timeout) is dropped and the request is sent again on a
//!   new one, after reconnecting with exponential backoff for up to
//!   [`Options::timeout`]; then the request fails with `EIO`, and later
//!   requests fail after one quick attempt until the server is back.
//! - Durability: a write is acknowledged to the caller only after the
//!   server acknowledged it. Writes acknowledged but not yet flushed are
//!   kept (see `unflushed.rs`) and, after any reconnect, written again and
//!   flushed before anything else is sent, so a server that crashed and
//!   lost its cache gets them back; a flush then covers them. Every connect
//!   happens with all other requests paused, so a replay never overwrites
//!   a newer write.
//! - Flush: a flush is sent only after the writes it must cover were
//!   acknowledged (the caller's writes returned), which is what the
//!   protocol's flush covers: every write the server completed before it
//!   received the flush.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::handshake::ExportInfo;
use super::pipe::Op;
use super::pool::Pool;
use super::reply::is_status_error;
use super::unflushed::{Change, Unflushed};
use super::uri::Uri;
use crate::proto::{alloc, err, tflag};
use crate::Error;
use cryptkeep_volume::Extent;

/// Flush on our own once this many bytes of acknowledged writes wait for
/// a flush (bounds the memory of the replay log).
const MAX_UNFLUSHED: usize = 64 << 20;
/// The largest single request (also if the server allows more).
const MAX_REQUEST: u32 = 1 << 25;
/// Reads and writes are split into requests of at most this many bytes,
/// so one caller's large request keeps the server busy on several pieces.
/// (The loop device's requests are at most 1 MiB and are not split: on a
/// local server, 256 KiB pieces cost more in per-request overhead than
/// they gained.)
const PIECE: usize = 1 << 20;
/// The most pieces one caller sends back to back before waiting for their
/// replies (a quarter of a connection's requests in flight).
const BATCH: usize = 4;
/// How long an extra connection may take to get through the handshake (a
/// server that limits its clients keeps it waiting).
const EXTRA_HANDSHAKE: Duration = Duration::from_secs(3);
/// First and longest wait between reconnect attempts.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// How to connect.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long a lost server may stay away before requests fail with `EIO`.
    pub timeout: Duration,
    /// Connections to open when the server allows several (`CAN_MULTI_CONN`);
    /// a server that limits its clients may leave fewer.
    pub connections: usize,
    /// Whether writes will be made (a read-only export is then refused).
    pub write: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs(60),
            connections: 1,
            write: true,
        }
    }
}

/// A connected NBD export.
#[derive(Debug)]
pub struct Client {
    uri: Uri,
    opts: Options,
    info: ExportInfo,
    /// Requests hold it shared; a reconnect holds it exclusively.
    gate: RwLock<()>,
    pool: Pool,
    log: Mutex<Unflushed>,
    /// Set when the server stayed away past the timeout.
    down: Mutex<bool>,
    /// Held across the read-modify-write of a write narrower than the
    /// minimum block size, so two of them never undo each other.
    rmw: Mutex<()>,
    /// Set once the server broke the protocol answering block status.
    status_off: AtomicBool,
}

impl Client {
    /// Connects to `uri` (all connections at once). Fails at once, without
    /// retrying, if the server is unreachable, does not know the export, or
    /// exports it read-only while `opts.write` is set.
    pub fn connect(uri: &Uri, opts: Options) -> Result<Client, Error> {
        let first = Conn::connect(uri, Some(opts.timeout))?;
        let info = first.info;
        if opts.write && info.has(tflag::READ_ONLY) {
            drop(first);
            return Err(Error::ReadOnly {
                server: uri.server(),
                export: uri.export.clone(),
            });
        }
        let n = if info.has(tflag::CAN_MULTI_CONN) {
            opts.connections.max(1)
        } else {
            1
        };
        let mut conns = vec![first];
        for _ in 1..n {
            match Conn::connect_within(uri, Some(opts.timeout), EXTRA_HANDSHAKE) {
                Ok(c) => conns.push(c),
                // A server that limits clients: use what we have.
                Err(_) => break,
            }
        }
        Ok(Client {
            uri: uri.clone(),
            opts,
            info,
            gate: RwLock::new(()),
            pool: Pool::new(conns),
            log: Mutex::new(Unflushed::default()),
            down: Mutex::new(false),
            rmw: Mutex::new(()),
            status_off: AtomicBool::new(false),
        })
    }

    /// What the server told about the export.
    pub fn info(&self) -> ExportInfo {
        self.info
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.info.size
    }

    /// The URI connected to.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        self.check_range(offset, buf.len() as u64, "read")?;
        let (start, end) = self.widen(offset, buf.len() as u64);
        if (start, end) != (offset, offset + buf.len() as u64) {
            let mut tmp = vec![0u8; (end - start) as usize];
            self.read_aligned(&mut tmp, start)?;
            let skip = (offset - start) as usize;
            buf.copy_from_slice(&tmp[skip..skip + buf.len()]);
            return Ok(());
        }
        self.read_aligned(buf, offset)
    }

    fn read_aligned(&self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let piece = self.piece();
        for (k, group) in buf.chunks_mut(piece * BATCH).enumerate() {
            let at = offset + (k * piece * BATCH) as u64;
            self.run(|c| {
                let mut ops: Vec<Op<'_>> = group
                    .chunks_mut(piece)
                    .enumerate()
                    .map(|(i, p)| Op::Read {
                        offset: at + (i * piece) as u64,
                        buf: p,
                    })
                    .collect();
                first_error(c.exchange(&mut ops)?)
            })?;
        }
        Ok(())
    }

    /// Writes `buf` at `offset`; returns once the server acknowledged all of it.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), Error> {
        self.check_writable()?;
        self.check_range(offset, buf.len() as u64, "write")?;
        let (start, end) = self.widen(offset, buf.len() as u64);
        if (start, end) != (offset, offset + buf.len() as u64) {
            let _rmw = self.rmw.lock().unwrap_or_else(|e| e.into_inner());
            let mut tmp = vec![0u8; (end - start) as usize];
            self.read_aligned(&mut tmp, start)?;
            let skip = (offset - start) as usize;
            tmp[skip..skip + buf.len()].copy_from_slice(buf);
            return self.write_aligned(&tmp, start);
        }
        self.write_aligned(buf, offset)
    }

    fn write_aligned(&self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let piece = self.piece();
        let keep = self.keeps_unflushed();
        for (k, group) in buf.chunks(piece * BATCH).enumerate() {
            let at = offset + (k * piece * BATCH) as u64;
            self.run(|c| {
                let mut ops: Vec<Op<'_>> = group
                    .chunks(piece)
                    .enumerate()
                    .map(|(i, p)| Op::Write {
                        offset: at + (i * piece) as u64,
                        buf: p,
                    })
                    .collect();
                let results = c.exchange(&mut ops)?;
                if keep {
                    for (op, r) in ops.iter().zip(&results) {
                        if let (Op::Write { offset, buf }, Ok(())) = (op, r) {
                            // Copied outside the lock: writers copy in parallel.
                            let mut bytes = self.log_lock().buffer(buf.len());
                            bytes.extend_from_slice(buf);
                            self.log_lock().push(Change::Data {
                                offset: *offset,
                                bytes,
                            });
                        }
                    }
                }
                first_error(results)
            })?;
        }
        self.bound_unflushed()
    }

    /// Makes `[offset, offset + len)` read as zeros, letting the server
    /// deallocate it (`NBD_CMD_WRITE_ZEROES` without `NO_HOLE`). Fails with
    /// [`Error::Unsupported`] if the export cannot write zeroes.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), Error> {
        self.check_writable()?;
        self.check_range(offset, len, "write zeroes")?;
        if !self.info.has(tflag::SEND_WRITE_ZEROES) {
            return Err(Error::Unsupported("writing zeroes (NBD_CMD_WRITE_ZEROES)"));
        }
        let keep = self.keeps_unflushed();
        let max = u64::from(self.max_request() as u32 / self.info.min_block * self.info.min_block);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(max) as u32;
            let at = offset + done;
            self.run(|c| {
                c.one(Op::WriteZeroes { offset: at, len: n })?;
                if keep {
                    self.log_lock().push(Change::Zeroes { offset: at, len: n });
                }
                Ok(())
            })?;
            done += u64::from(n);
        }
        Ok(())
    }

    /// Tells the server `[offset, offset + len)` is no longer needed
    /// (`NBD_CMD_TRIM`): it may deallocate it, and the range then reads as
    /// anything. (The volume engine's discards use
    /// [`Client::write_zeroes`] instead, whose zeros are promised.) Not
    /// replayed after a reconnect: a trim the server lost leaves the old
    /// data, which is one of the things a trimmed range may read as.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), Error> {
        self.check_writable()?;
        self.check_range(offset, len, "trim")?;
        if !self.info.has(tflag::SEND_TRIM) {
            return Err(Error::Unsupported("trim (NBD_CMD_TRIM)"));
        }
        let max = u64::from(self.max_request() as u32);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(max) as u32;
            let at = offset + done;
            self.run(|c| c.one(Op::Trim { offset: at, len: n }))?;
            done += u64::from(n);
        }
        Ok(())
    }

    /// The allocation map of `[offset, offset + len)` as the server tells
    /// it (`NBD_CMD_BLOCK_STATUS` in the `base:allocation` context): runs
    /// in order from `offset`, covering at least one byte and at most
    /// `len` (ask again for the rest). `Ok(None)` when the server agreed
    /// to no such context on the connection used: it cannot tell.
    pub fn allocation(&self, offset: u64, len: u64) -> Result<Option<Vec<Extent>>, Error> {
        if len == 0 {
            return Ok(Some(Vec::new()));
        }
        self.check_range(offset, len, "block status")?;
        if self.status_off.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Offset and length in whole blocks, as the protocol wants (the
        // length may end at the end of the export), at most 2^32 - 1
        // bytes; the bytes before `offset` are dropped from the answer.
        let (start, end) = self.widen(offset, len);
        let b = u64::from(self.info.min_block);
        let max = u64::from(u32::MAX) / b * b;
        let n = (end - start).min(max) as u32;
        // One attempt, never a reconnect loop: a map is optional. A lost
        // connection is dropped (the next read or write reconnects); a
        // block status reply that breaks the protocol stops the queries
        // for good. (A server that never answers holds this caller as a
        // never-answered read would, until the connection's timeout.)
        let _shared = self.gate.read().unwrap_or_else(|e| e.into_inner());
        let Some(c) = self.pool.pick() else {
            return Ok(None);
        };
        let Some(context) = c.info.allocation else {
            return Ok(None);
        };
        let mut raw = Vec::new();
        let op = Op::BlockStatus {
            offset: start,
            len: n,
            context,
            out: &mut raw,
        };
        match c.one(op) {
            Ok(()) => {
                let keep = len.min(start + u64::from(n) - offset);
                let map = runs(&raw, offset - start, keep);
                Ok((!map.is_empty()).then_some(map))
            }
            Err(e) if e.is_lost() => {
                self.pool.lose(&c);
                if is_status_error(&e) && !self.status_off.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "cryptkeep: the NBD server {} broke the protocol answering block status ({e}); its holes are no longer asked for",
                        self.uri.server()
                    );
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Makes every acknowledged write durable (`NBD_CMD_FLUSH`; nothing
    /// to do when the export has no flush).
    pub fn flush(&self) -> Result<(), Error> {
        if !self.info.has(tflag::SEND_FLUSH) {
            return Ok(());
        }
        self.run(|c| {
            let mark = self.log_lock().mark();
            c.one(Op::Flush)?;
            self.log_lock().flushed(mark);
            Ok(())
        })
    }

    fn keeps_unflushed(&self) -> bool {
        self.info.has(tflag::SEND_FLUSH)
    }

    fn log_lock(&self) -> std::sync::MutexGuard<'_, Unflushed> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flushes when too much waits for a flush.
    fn bound_unflushed(&self) -> Result<(), Error> {
        if self.log_lock().bytes() > MAX_UNFLUSHED {
            self.flush()?;
        }
        Ok(())
    }

    /// The size reads and writes are split at.
    fn piece(&self) -> usize {
        let b = self.info.min_block as usize;
        (self.max_request().min(PIECE) / b * b).max(b)
    }

    fn max_request(&self) -> usize {
        let m = self.info.max_payload.min(MAX_REQUEST);
        (m / self.info.min_block * self.info.min_block).max(self.info.min_block) as usize
    }

    /// `[offset, offset + len)` widened to the minimum block size.
    fn widen(&self, offset: u64, len: u64) -> (u64, u64) {
        let b = u64::from(self.info.min_block);
        let start = offset / b * b;
        let end = (offset + len).div_ceil(b) * b;
        (start, end.min(self.info.size.max(offset + len)))
    }

    fn check_writable(&self) -> Result<(), Error> {
        if !self.opts.write || self.info.has(tflag::READ_ONLY) {
            return Err(Error::ReadOnly {
                server: self.uri.server(),
                export: self.uri.export.clone(),
            });
        }
        Ok(())
    }

    fn check_range(&self, offset: u64, len: u64, what: &'static str) -> Result<(), Error> {
        if offset.checked_add(len).is_none_or(|e| e > self.info.size) {
            return Err(Error::Server {
                what,
                errno: if what == "read" {
                    err::EIO
                } else {
                    err::ENOSPC
                },
                message: format!(
                    "{len} bytes at {offset} reach past the end of the {}-byte export",
                    self.info.size
                ),
            });
        }
        Ok(())
    }

    /// Runs `op` on a connection; on a lost connection, reconnects (see the
    /// module documentation) and runs it again.
    fn run<T>(&self, mut op: impl FnMut(&Conn) -> Result<T, Error>) -> Result<T, Error> {
        let mut lost_at: Option<Instant> = None;
        let mut last = String::new();
        loop {
            {
                let _shared = self.gate.read().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = self.pool.pick() {
                    match op(&c) {
                        Ok(v) => return Ok(v),
                        Err(e) if e.is_lost() => {
                            last = e.to_string();
                            self.pool.lose(&c);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            let since = *lost_at.get_or_insert_with(Instant::now);
            self.reconnect(since, &last)?;
        }
    }

    /// Replaces the missing connections (at least one) with all requests
    /// paused, replays the un-flushed writes and flushes them.
    fn reconnect(&self, since: Instant, lost: &str) -> Result<(), Error> {
        let _exclusive = self.gate.write().unwrap_or_else(|e| e.into_inner());
        if self.pool.missing() == 0 {
            // Someone else reconnected meanwhile.
            return Ok(());
        }
        let server = self.uri.server();
        let was_down = *self.down.lock().unwrap_or_else(|e| e.into_inner());
        if !was_down {
            eprintln!(
                "cryptkeep: lost the connection to the NBD server {server} ({lost}); reconnecting for up to {} s",
                self.opts.timeout.as_secs()
            );
        }
        let mut wait = BACKOFF.0;
        loop {
            let last = match self.connect_and_replay() {
                Ok(n) => {
                    *self.down.lock().unwrap_or_else(|e| e.into_inner()) = false;
                    eprintln!("cryptkeep: reconnected to the NBD server {server}; wrote {n} un-flushed writes again and flushed them");
                    // Fill the other missing slots if the server lets us.
                    while self.pool.missing() > 0 {
                        match Conn::connect_within(
                            &self.uri,
                            Some(self.opts.timeout),
                            EXTRA_HANDSHAKE,
                        ) {
                            Ok(c) => self.pool.add(c),
                            Err(_) => break,
                        }
                    }
                    return Ok(());
                }
                Err(e) => e.to_string(),
            };
            if was_down || since.elapsed() + wait > self.opts.timeout {
                *self.down.lock().unwrap_or_else(|e| e.into_inner()) = true;
                let e = Error::TimedOut {
                    server,
                    seconds: self.opts.timeout.as_secs(),
                    last,
                };
                if !was_down {
                    eprintln!("cryptkeep: {e}; failing I/O with EIO until it is back");
                }
                return Err(e);
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(BACKOFF.1);
        }
    }

    /// One connection, the replay of the un-flushed log on it and a flush;
    /// the number of changes replayed.
    fn connect_and_replay(&self) -> Result<usize, Error> {
        let c = Conn::connect(&self.uri, Some(self.opts.timeout))?;
        if c.info.size != self.info.size {
            return Err(Error::protocol(format!(
                "the export is now {} bytes, it was {}",
                c.info.size, self.info.size
            )));
        }
        let mut log = self.log_lock();
        let n = log.len();
        for ch in log.iter() {
            match ch {
                Change::Data { offset, bytes } => c.one(Op::Write {
                    offset: *offset,
                    buf: bytes,
                })?,
                Change::Zeroes { offset, len } => c.one(Op::WriteZeroes {
                    offset: *offset,
                    len: *len,
                })?,
            }
        }
        if n > 0 {
            c.one(Op::Flush)?;
            let m = log.mark();
            log.flushed(m);
        }
        drop(log);
        self.pool.add(c);
        Ok(n)
    }
}

impl Drop for Client {
    /// Disconnects (each connection says goodbye as it is dropped).
    fn drop(&mut self) {
        drop(self.pool.drain());
    }
}

/// The server's extents (from the start of the request) as runs: the
/// first `skip` bytes dropped, then at most `len` bytes in all (the last
/// extent may reach past what was asked for), adjacent runs alike merged.
pub(super) fn runs(raw: &[(u32, u32)], skip: u64, len: u64) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::new();
    let (mut at, end) = (0u64, skip + len);
    for &(n, flags) in raw {
        let (from, to) = (at.max(skip), (at + u64::from(n)).min(end));
        at += u64::from(n);
        if to > from {
            let e = Extent {
                len: to - from,
                hole: flags & alloc::STATE_HOLE != 0,
                zero: flags & alloc::STATE_ZERO != 0,
            };
            match out.last_mut() {
                Some(l) if (l.hole, l.zero) == (e.hole, e.zero) => l.len += e.len,
                _ => out.push(e),
            }
        }
        if at >= end {
            break;
        }
    }
    out
}

/// The first failure among a batch's outcomes.
fn first_error(results: Vec<Result<(), Error>>) -> Result<(), Error> {
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}
