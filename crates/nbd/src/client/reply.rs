//! The reply to one request: a simple reply, or the chunks of a structured
//! reply reassembled into the read buffer, taken one header at a time (the
//! chunks of several requests' replies may interleave). Every chunk is
//! checked against the request (offset range, overlap, lengths) before its
//! payload is read, so a hostile server can neither make the client
//! allocate without bound nor write outside the caller's buffer.

use std::collections::BTreeMap;
use std::io::Read;

#[cfg(test)]
use super::wire::reply_head;
use super::wire::{self, u16_of, u32_of, u64_of, ReplyHead};
use crate::proto::{self, reply};
use crate::Error;

/// The most chunks one reply may have (a server that splits finer is
/// treated as broken).
const MAX_CHUNKS: usize = 1 << 16;
/// The longest error chunk payload: errno, message length, message, offset.
const MAX_ERROR_CHUNK: u32 = 6 + proto::MAX_STRING as u32 + 8;
/// The longest block status chunk: the context id and 2^20 extents (8 MiB;
/// the protocol says a server should not send more, and nbdkit sends up to
/// that many).
const MAX_STATUS_CHUNK: u32 = 4 + 8 * (1 << 20);
/// The most extents of one block status reply kept; the rest are read and
/// dropped (the caller asks again from where the kept ones end).
pub(crate) const MAX_STATUS_EXTENTS: usize = 4096;
/// How the message of a protocol error in a block status reply starts.
const STATUS_BROKEN: &str = "block status reply: ";

/// A protocol error in a block status reply itself (not in the stream
/// around it).
fn status_error(msg: impl std::fmt::Display) -> Error {
    Error::protocol(format!("{STATUS_BROKEN}{msg}"))
}

/// Whether `e` is a protocol error of a block status reply itself.
pub(crate) fn is_status_error(e: &Error) -> bool {
    matches!(e, Error::Protocol(m) if m.starts_with(STATUS_BROKEN))
}

/// The request a reply answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect {
    /// Its cookie.
    pub cookie: u64,
    /// What it was, for messages.
    pub what: &'static str,
    /// Whether structured replies were negotiated.
    pub structured: bool,
}

/// What a request expects back: data into a buffer, or nothing.
pub(crate) enum Target<'a> {
    /// A read of `buf.len()` bytes at `offset`.
    Read {
        /// Where the read started.
        offset: u64,
        /// Where its data goes.
        buf: &'a mut [u8],
    },
    /// A block status query of `len` bytes: its extents come back.
    Status {
        /// The metadata context asked for (`base:allocation`'s id).
        context: u32,
        /// Where the extents go: (length, `NBD_STATE_*` flags), as sent.
        out: &'a mut Vec<(u32, u32)>,
    },
    /// A write, flush, trim or write zeroes: no data comes back.
    Plain,
}

/// The reply to one request, as its chunks arrive (between them, chunks
/// of other requests' replies may come).
pub(crate) struct Pending<'a> {
    ex: Expect,
    target: Target<'a>,
    covered: Coverage,
    failed: Option<Error>,
}

impl<'a> Pending<'a> {
    /// Waits for the reply to the request `ex`.
    pub(crate) fn new(ex: Expect, target: Target<'a>) -> Pending<'a> {
        Pending {
            ex,
            target,
            covered: Coverage::default(),
            failed: None,
        }
    }

    /// Takes one reply header for this request (its cookie already
    /// matched) and reads its payload from `r`. `Ok(None)`: more chunks
    /// follow; `Ok(Some(result))`: the reply is complete, with the
    /// request's outcome (the server's error, if any). `Err`: the server
    /// broke the protocol or the connection broke; the connection is
    /// unusable.
    pub(crate) fn take<R: Read>(
        &mut self,
        r: &mut R,
        head: ReplyHead,
    ) -> Result<Option<Result<(), Error>>, Error> {
        let ex = self.ex;
        if head.cookie() != ex.cookie {
            return Err(Error::protocol(format!(
                "reply for cookie {} taken by the request with cookie {}",
                head.cookie(),
                ex.cookie
            )));
        }
        let (flags, kind, length) = match head {
            ReplyHead::Simple { error, .. } => {
                if error != 0 {
                    return Ok(Some(Err(server_error(ex.what, error, String::new()))));
                }
                if let Target::Status { .. } = self.target {
                    return Err(status_error("a simple reply, not a structured one"));
                }
                if let Target::Read { buf, .. } = &mut self.target {
                    if ex.structured {
                        return Err(Error::protocol(
                            "simple reply with data to a read after structured replies were agreed",
                        ));
                    }
                    r.read_exact(buf)?;
                }
                return Ok(Some(Ok(())));
            }
            ReplyHead::Chunk {
                flags,
                kind,
                length,
                ..
            } => (flags, kind, length),
        };
        if !ex.structured {
            return Err(Error::protocol(
                "structured reply chunk that was not agreed",
            ));
        }
        match (&mut self.target, kind) {
            (_, reply::NONE) => {
                if length != 0 || flags & reply::FLAG_DONE == 0 {
                    return Err(Error::protocol("NONE chunk with a payload or not the last"));
                }
            }
            (_, k) if k & reply::FLAG_ERROR != 0 => {
                let e = error_chunk(r, ex.what, length)?;
                self.failed.get_or_insert(e);
            }
            (Target::Read { offset, buf }, reply::OFFSET_DATA) => {
                let len = buf.len() as u64;
                if length < 8 || u64::from(length - 8) > len {
                    return Err(Error::protocol(format!(
                        "data chunk of {length} bytes for a read of {len} bytes"
                    )));
                }
                let at = u64_of(r)?;
                let n = u64::from(length - 8);
                let start = self.covered.claim(*offset, len, at, n)?;
                r.read_exact(&mut buf[start..start + n as usize])?;
            }
            (Target::Read { offset, buf }, reply::OFFSET_HOLE) => {
                if length != 12 {
                    return Err(Error::protocol(format!(
                        "hole chunk of {length} bytes (12 expected)"
                    )));
                }
                let len = buf.len() as u64;
                let at = u64_of(r)?;
                let n = u64::from(u32_of(r)?);
                let start = self.covered.claim(*offset, len, at, n)?;
                buf[start..start + n as usize].fill(0);
            }
            (Target::Status { context, out }, reply::BLOCK_STATUS) => {
                status_chunk(r, *context, out, length)?;
            }
            (Target::Status { .. }, k) => {
                return Err(status_error(format!(
                    "a chunk of type {k} ({length} bytes)"
                )))
            }
            (Target::Read { .. }, k) => {
                return Err(Error::protocol(format!(
                    "unknown reply chunk type {k} to a read"
                )))
            }
            (Target::Plain, k) => {
                return Err(Error::protocol(format!(
                    "reply chunk type {k} ({length} bytes) to a {}",
                    ex.what
                )))
            }
        }
        if flags & reply::FLAG_DONE == 0 {
            return Ok(None);
        }
        if let Some(e) = self.failed.take() {
            return Ok(Some(Err(e)));
        }
        match &self.target {
            Target::Read { buf, .. } => {
                let len = buf.len() as u64;
                if self.covered.total != len {
                    return Err(Error::protocol(format!(
                        "read reply covers {} of {len} bytes",
                        self.covered.total
                    )));
                }
            }
            Target::Status { out, .. } if out.is_empty() => {
                return Err(status_error("no extents"));
            }
            _ => {}
        }
        Ok(Some(Ok(())))
    }
}

/// One `NBD_REPLY_TYPE_BLOCK_STATUS` chunk's payload: the context id, then
/// (length, flags) pairs. Only one chunk, for the context asked for, and
/// no empty extent; the chunk's size is bounded before anything is read,
/// and only the first [`MAX_STATUS_EXTENTS`] extents are kept.
fn status_chunk<R: Read>(
    r: &mut R,
    context: u32,
    out: &mut Vec<(u32, u32)>,
    length: u32,
) -> Result<(), Error> {
    if length < 12 || !(length - 4).is_multiple_of(8) || length > MAX_STATUS_CHUNK {
        return Err(status_error(format!("a chunk of {length} bytes")));
    }
    let id = u32_of(r)?;
    if id != context {
        return Err(status_error(format!(
            "metadata context {id}, asked for {context}"
        )));
    }
    if !out.is_empty() {
        return Err(status_error("two chunks for one context"));
    }
    let n = ((length - 4) / 8) as usize;
    out.reserve_exact(n.min(MAX_STATUS_EXTENTS));
    for _ in 0..n {
        let len = u32_of(r)?;
        let flags = u32_of(r)?;
        if len == 0 {
            return Err(status_error("an extent of length 0"));
        }
        if out.len() < MAX_STATUS_EXTENTS {
            out.push((len, flags));
        }
    }
    Ok(())
}

/// Reads a whole reply to the one request `ex` from `r`: chunks of other
/// requests are a protocol error here.
#[cfg(test)]
fn whole_reply<R: Read>(r: &mut R, ex: Expect, target: Target<'_>) -> Result<(), Error> {
    let mut p = Pending::new(ex, target);
    loop {
        let head = reply_head(r)?;
        check_cookie(&head, ex)?;
        if let Some(result) = p.take(r, head)? {
            return result;
        }
    }
}

/// Reads the reply to a read of `buf.len()` bytes at `offset` into `buf`.
#[cfg(test)]
fn read_reply<R: Read>(r: &mut R, ex: Expect, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
    whole_reply(r, ex, Target::Read { offset, buf })
}

/// Reads the reply to a request that returns no data.
#[cfg(test)]
fn plain_reply<R: Read>(r: &mut R, ex: Expect) -> Result<(), Error> {
    whole_reply(r, ex, Target::Plain)
}

#[cfg(test)]
fn check_cookie(head: &ReplyHead, ex: Expect) -> Result<(), Error> {
    if head.cookie() != ex.cookie {
        return Err(Error::protocol(format!(
            "reply for cookie {} while waiting for cookie {} ({})",
            head.cookie(),
            ex.cookie,
            ex.what
        )));
    }
    Ok(())
}

fn server_error(what: &'static str, errno: u32, message: String) -> Error {
    Error::Server {
        what,
        errno,
        message,
    }
}

/// An error chunk's payload: errno, message, and (ERROR_OFFSET) an offset.
fn error_chunk<R: Read>(r: &mut R, what: &'static str, length: u32) -> Result<Error, Error> {
    if !(6..=MAX_ERROR_CHUNK).contains(&length) {
        return Err(Error::protocol(format!("error chunk of {length} bytes")));
    }
    let errno = u32_of(r)?;
    let mlen = u32::from(u16_of(r)?);
    if mlen > length - 6 {
        return Err(Error::protocol("error message longer than its chunk"));
    }
    let msg = wire::vec_of(r, mlen as usize, proto::MAX_STRING, "error message")?;
    wire::skip(r, u64::from(length - 6 - mlen))?;
    if errno == 0 {
        return Err(Error::protocol("error chunk with errno 0"));
    }
    Ok(server_error(
        what,
        errno,
        String::from_utf8_lossy(&msg).into_owned(),
    ))
}

/// Which parts of a read's range the chunks so far covered (ranges
/// relative to the request, adjacent ones merged).
#[derive(Default)]
struct Coverage {
    ranges: BTreeMap<u64, u64>,
    total: u64,
    chunks: usize,
}

impl Coverage {
    /// Checks a chunk of `n` bytes at absolute offset `at` lies inside the
    /// request `[offset, offset + len)` and overlaps no earlier chunk;
    /// records it and returns its start in the buffer.
    fn claim(&mut self, offset: u64, len: u64, at: u64, n: u64) -> Result<usize, Error> {
        let rel = at
            .checked_sub(offset)
            .filter(|&s| n >= 1 && s <= len && n <= len - s)
            .ok_or_else(|| {
                Error::protocol(format!(
                    "chunk of {n} bytes at {at} outside the read of {len} bytes at {offset}"
                ))
            })?;
        let end = rel + n;
        self.chunks += 1;
        if self.chunks > MAX_CHUNKS {
            return Err(Error::protocol("read reply split into too many chunks"));
        }
        let before = self.ranges.range(..=rel).next_back().map(|(&s, &e)| (s, e));
        let after = self.ranges.range(rel..).next().map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, e)| e > rel) || after.is_some_and(|(s, _)| s < end) {
            return Err(Error::protocol(format!("overlapping chunk at {at}")));
        }
        let (mut s, mut e) = (rel, end);
        if let Some((bs, be)) = before.filter(|&(_, be)| be == rel) {
            self.ranges.remove(&bs);
            s = bs;
            let _ = be;
        }
        if let Some((as_, ae)) = after.filter(|&(as_, _)| as_ == end) {
            self.ranges.remove(&as_);
            e = ae;
        }
        self.ranges.insert(s, e);
        self.total += n;
        Ok(rel as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};
    use std::io::Cursor;

    const EX: Expect = Expect {
        cookie: 7,
        what: "read",
        structured: true,
    };

    fn chunk(v: &mut Vec<u8>, flags: u16, kind: u16, cookie: u64, payload: &[u8]) {
        v.extend(STRUCTURED_REPLY_MAGIC.to_be_bytes());
        v.extend(flags.to_be_bytes());
        v.extend(kind.to_be_bytes());
        v.extend(cookie.to_be_bytes());
        v.extend((payload.len() as u32).to_be_bytes());
        v.extend(payload);
    }

    fn data(at: u64, d: &[u8]) -> Vec<u8> {
        let mut p = at.to_be_bytes().to_vec();
        p.extend(d);
        p
    }

    fn hole(at: u64, n: u32) -> Vec<u8> {
        let mut p = at.to_be_bytes().to_vec();
        p.extend(n.to_be_bytes());
        p
    }

    fn read(v: Vec<u8>, off: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0xaa; len];
        read_reply(&mut Cursor::new(v), EX, off, &mut buf).map(|()| buf)
    }

    #[test]
    fn chunks_out_of_order_and_holes_reassemble() {
        let mut v = vec![];
        chunk(&mut v, 0, reply::OFFSET_DATA, 7, &data(1004, b"world"));
        chunk(&mut v, 0, reply::OFFSET_HOLE, 7, &hole(1009, 3));
        chunk(&mut v, 0, reply::OFFSET_DATA, 7, &data(1000, b"hell"));
        chunk(&mut v, reply::FLAG_DONE, reply::NONE, 7, &[]);
        assert_eq!(read(v, 1000, 12).unwrap(), b"hellworld\0\0\0");
    }

    #[test]
    fn simple_replies() {
        let mut v = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend(0u32.to_be_bytes());
        v.extend(7u64.to_be_bytes());
        v.extend(b"abc");
        let mut buf = [0u8; 3];
        let ex = Expect {
            structured: false,
            ..EX
        };
        read_reply(&mut Cursor::new(v.clone()), ex, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        // With structured replies agreed, a simple data reply is refused.
        assert!(matches!(read(v, 0, 3), Err(Error::Protocol(_))));
        // An error in a simple reply is the server's errno.
        let mut v = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend(28u32.to_be_bytes());
        v.extend(7u64.to_be_bytes());
        let e = plain_reply(
            &mut Cursor::new(v),
            Expect {
                what: "write",
                ..EX
            },
        )
        .unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
    }

    #[test]
    fn error_chunks_fail_the_read_with_the_servers_errno() {
        let mut v = vec![];
        let mut p = 5u32.to_be_bytes().to_vec();
        p.extend(4u16.to_be_bytes());
        p.extend(b"oops");
        p.extend(1000u64.to_be_bytes());
        chunk(&mut v, 0, reply::ERROR_OFFSET, 7, &p);
        chunk(&mut v, reply::FLAG_DONE, reply::NONE, 7, &[]);
        let e = read(v, 1000, 8).unwrap_err();
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("oops"), "{e}");
    }

    #[test]
    fn hostile_replies_are_protocol_errors() {
        let bad = |v: Vec<u8>| {
            let e = read(v, 1000, 16).unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{e}");
        };
        // Wrong cookie.
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            8,
            &data(1000, &[0; 16]),
        );
        bad(v);
        // Oversized data chunk (claims 4 GiB; nothing is allocated or read).
        let mut v = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend(reply::FLAG_DONE.to_be_bytes());
        v.extend(reply::OFFSET_DATA.to_be_bytes());
        v.extend(7u64.to_be_bytes());
        v.extend(u32::MAX.to_be_bytes());
        bad(v);
        // Data outside the request.
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(1008, &[0; 16]),
        );
        bad(v);
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(999, &[0; 4]),
        );
        bad(v);
        // A hole whose size wraps.
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_HOLE,
            7,
            &hole(u64::MAX, u32::MAX),
        );
        bad(v);
        // Overlapping chunks.
        let mut v = vec![];
        chunk(&mut v, 0, reply::OFFSET_DATA, 7, &data(1000, &[1; 10]));
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(1008, &[1; 8]),
        );
        bad(v);
        // Done before the whole range was covered.
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(1000, &[1; 8]),
        );
        bad(v);
        // Unknown non-error chunk type.
        let mut v = vec![];
        chunk(&mut v, reply::FLAG_DONE, 99, 7, &[]);
        bad(v);
        // Error chunk whose message overruns it, or is huge.
        let mut v = vec![];
        let mut p = 5u32.to_be_bytes().to_vec();
        p.extend(100u16.to_be_bytes());
        chunk(&mut v, reply::FLAG_DONE, reply::ERROR, 7, &p);
        bad(v);
        let mut v = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend(reply::FLAG_DONE.to_be_bytes());
        v.extend(reply::ERROR.to_be_bytes());
        v.extend(7u64.to_be_bytes());
        v.extend(u32::MAX.to_be_bytes());
        bad(v);
        // Bad magic.
        bad(vec![0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 0]);
        // NONE that is not the last.
        let mut v = vec![];
        chunk(&mut v, 0, reply::NONE, 7, &[]);
        bad(v);
    }

    #[test]
    fn truncated_replies_are_lost_connections() {
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(1000, &[1; 16]),
        );
        v.truncate(v.len() - 3);
        let e = read(v, 1000, 16).unwrap_err();
        assert!(matches!(e, Error::Connection(_)), "{e}");
    }

    #[test]
    fn plain_replies() {
        let mut v = vec![];
        chunk(&mut v, reply::FLAG_DONE, reply::NONE, 7, &[]);
        plain_reply(&mut Cursor::new(v), EX).unwrap();
        let mut v = vec![];
        chunk(
            &mut v,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            7,
            &data(0, &[1]),
        );
        assert!(matches!(
            plain_reply(&mut Cursor::new(v), EX),
            Err(Error::Protocol(_))
        ));
    }
}
