//! Transmission replies: simple replies, and structured reply chunks
//! (data, error, block status), each built whole so one locked write
//! sends it.

use cryptkeep_volume::Extent;

use crate::proto::{alloc, err, reply, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};

/// Bytes before the data of a simple read reply.
pub(crate) const SIMPLE_HEAD: usize = 16;
/// Bytes before the data of an `OFFSET_DATA` chunk (header and offset).
pub(crate) const DATA_HEAD: usize = 28;

/// A simple reply's header: magic, error, cookie.
pub(crate) fn simple(cookie: u64, error: u32) -> [u8; SIMPLE_HEAD] {
    let mut b = [0u8; SIMPLE_HEAD];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured chunk's 20-byte header.
fn chunk_head(out: &mut Vec<u8>, flags: u16, typ: u16, cookie: u64, len: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&typ.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// Bytes before the data of a read reply: the data of a read goes at
/// `buf[read_head(..)..]`, then [`seal_read`] writes the header.
pub(crate) fn read_head(structured: bool) -> usize {
    if structured {
        DATA_HEAD
    } else {
        SIMPLE_HEAD
    }
}

/// Writes the header of a successful read reply of `len` bytes into `buf`
/// (the data already at `buf[read_head(..)..]`); answers the bytes to
/// send from `buf`. A structured reply of no data is a `NONE` chunk.
pub(crate) fn seal_read(
    buf: &mut [u8],
    structured: bool,
    cookie: u64,
    offset: u64,
    len: usize,
) -> usize {
    if !structured {
        buf[..SIMPLE_HEAD].copy_from_slice(&simple(cookie, 0));
        return SIMPLE_HEAD + len;
    }
    let mut h = Vec::with_capacity(DATA_HEAD);
    if len == 0 {
        chunk_head(&mut h, reply::FLAG_DONE, reply::NONE, cookie, 0);
        buf[..h.len()].copy_from_slice(&h);
        return h.len();
    }
    chunk_head(
        &mut h,
        reply::FLAG_DONE,
        reply::OFFSET_DATA,
        cookie,
        len as u32 + 8,
    );
    h.extend_from_slice(&offset.to_be_bytes());
    buf[..DATA_HEAD].copy_from_slice(&h);
    DATA_HEAD + len
}

/// A structured `ERROR` chunk (the last of its reply), with no message.
pub(crate) fn structured_error(cookie: u64, error: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(26);
    chunk_head(&mut out, reply::FLAG_DONE, reply::ERROR, cookie, 6);
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out
}

/// An error reply in the form the session uses for the command: reads and
/// block status answer with a structured chunk when structured replies
/// were negotiated, everything else with a simple reply.
pub(crate) fn error_reply(structured_cmd: bool, cookie: u64, error: u32) -> Vec<u8> {
    if structured_cmd {
        structured_error(cookie, error)
    } else {
        simple(cookie, error).to_vec()
    }
}

/// A `BLOCK_STATUS` chunk for `base:allocation` (context `id`).
pub(crate) fn block_status(cookie: u64, id: u32, extents: &[Extent]) -> Vec<u8> {
    let len = 4 + 8 * extents.len();
    let mut out = Vec::with_capacity(20 + len);
    chunk_head(
        &mut out,
        reply::FLAG_DONE,
        reply::BLOCK_STATUS,
        cookie,
        len as u32,
    );
    out.extend_from_slice(&id.to_be_bytes());
    for e in extents {
        let mut flags = 0;
        if e.hole {
            flags |= alloc::STATE_HOLE;
        }
        if e.zero {
            flags |= alloc::STATE_ZERO;
        }
        out.extend_from_slice(&(e.len as u32).to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

/// The NBD error value for an errno (the protocol knows only a few).
pub(crate) fn wire_errno(errno: i32) -> u32 {
    match errno {
        libc::EPERM | libc::EROFS => err::EPERM,
        libc::ENOMEM => err::ENOMEM,
        libc::EINVAL => err::EINVAL,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => err::ENOSPC,
        libc::EOVERFLOW => err::EOVERFLOW,
        libc::EOPNOTSUPP => err::ENOTSUP,
        libc::ESHUTDOWN => err::ESHUTDOWN,
        _ => err::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_replies() {
        let head = read_head(true);
        let mut b = vec![0u8; head + 3];
        b[head..].copy_from_slice(b"abc");
        assert_eq!(seal_read(&mut b, true, 7, 512, 3), 31);
        assert_eq!(&b[..4], &STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&b[4..8], &[0, 1, 0, 1]);
        assert_eq!(&b[16..20], &11u32.to_be_bytes());
        assert_eq!(&b[20..28], &512u64.to_be_bytes());
        assert_eq!(&b[28..], b"abc");
        let mut b = vec![0u8; 28];
        assert_eq!(seal_read(&mut b, true, 7, 0, 0), 20);
        assert_eq!(&b[6..8], &[0, 0]);
        let mut b = vec![0u8; 18];
        assert_eq!(seal_read(&mut b, false, 9, 0, 2), 18);
        assert_eq!(read_head(false), 16);
        assert_eq!(&b[..16], &simple(9, 0));
    }

    #[test]
    fn errors_map_to_the_protocols() {
        assert_eq!(wire_errno(libc::EROFS), err::EPERM);
        assert_eq!(wire_errno(libc::EFBIG), err::ENOSPC);
        assert_eq!(wire_errno(libc::EBADMSG), err::EIO);
        assert_eq!(structured_error(1, err::EIO).len(), 26);
    }

    #[test]
    fn block_status_chunk() {
        let e = [
            Extent {
                len: 4096,
                hole: false,
                zero: false,
            },
            Extent {
                len: 8192,
                hole: true,
                zero: true,
            },
        ];
        let b = block_status(5, 1, &e);
        assert_eq!(b.len(), 20 + 4 + 16);
        assert_eq!(&b[36..40], &3u32.to_be_bytes());
    }
}
