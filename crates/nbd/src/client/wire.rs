//! Big-endian reads and writes of the protocol's fields, the transmission
//! request header, and the reply headers (simple and structured), each
//! checked for its magic before anything is trusted.

use std::io::{self, Read};

use crate::proto::{REQUEST_MAGIC, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};
use crate::Error;

/// Reads exactly `N` bytes.
pub(crate) fn bytes<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// A big-endian u16.
pub(crate) fn u16_of(r: &mut impl Read) -> io::Result<u16> {
    bytes::<2>(r).map(u16::from_be_bytes)
}

/// A big-endian u32.
pub(crate) fn u32_of(r: &mut impl Read) -> io::Result<u32> {
    bytes::<4>(r).map(u32::from_be_bytes)
}

/// A big-endian u64.
pub(crate) fn u64_of(r: &mut impl Read) -> io::Result<u64> {
    bytes::<8>(r).map(u64::from_be_bytes)
}

/// Reads `len` bytes into a new buffer, refusing more than `max` before
/// allocating anything.
pub(crate) fn vec_of(
    r: &mut impl Read,
    len: usize,
    max: usize,
    what: &str,
) -> Result<Vec<u8>, Error> {
    if len > max {
        return Err(Error::protocol(format!(
            "{what} of {len} bytes (at most {max} allowed)"
        )));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Discards `len` bytes.
pub(crate) fn skip(r: &mut impl Read, len: u64) -> io::Result<()> {
    let n = io::copy(&mut r.take(len), &mut io::sink())?;
    if n < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The 28-byte header of a transmission request.
pub(crate) fn request(flags: u16, kind: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&kind.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&len.to_be_bytes());
    h
}

/// The header of one reply from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyHead {
    /// A simple reply (`error` 0 = success); a successful read's data follows.
    Simple {
        /// The errno, 0 for success.
        error: u32,
        /// The request's cookie.
        cookie: u64,
    },
    /// One chunk of a structured reply; `length` bytes of payload follow.
    Chunk {
        /// `NBD_REPLY_FLAG_*`.
        flags: u16,
        /// `NBD_REPLY_TYPE_*`.
        kind: u16,
        /// The request's cookie.
        cookie: u64,
        /// Payload length.
        length: u32,
    },
}

impl ReplyHead {
    /// The cookie it answers.
    pub(crate) fn cookie(&self) -> u64 {
        match *self {
            ReplyHead::Simple { cookie, .. } | ReplyHead::Chunk { cookie, .. } => cookie,
        }
    }
}

/// Reads a reply header; a wrong magic is a protocol error.
pub(crate) fn reply_head(r: &mut impl Read) -> Result<ReplyHead, Error> {
    let magic = u32_of(r)?;
    match magic {
        SIMPLE_REPLY_MAGIC => {
            let error = u32_of(r)?;
            let cookie = u64_of(r)?;
            Ok(ReplyHead::Simple { error, cookie })
        }
        STRUCTURED_REPLY_MAGIC => {
            let flags = u16_of(r)?;
            let kind = u16_of(r)?;
            let cookie = u64_of(r)?;
            let length = u32_of(r)?;
            Ok(ReplyHead::Chunk {
                flags,
                kind,
                cookie,
                length,
            })
        }
        m => Err(Error::protocol(format!("reply with bad magic {m:#010x}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn request_header_layout() {
        let h = request(1, 2, 0x0102_0304_0506_0708, 0x1122, 0x3344);
        assert_eq!(&h[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(&h[4..8], &[0, 1, 0, 2]);
        assert_eq!(&h[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&h[16..24], &[0, 0, 0, 0, 0, 0, 0x11, 0x22]);
        assert_eq!(&h[24..], &[0, 0, 0x33, 0x44]);
    }

    #[test]
    fn reply_heads_and_bad_magic() {
        let mut b = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        b.extend(5u32.to_be_bytes());
        b.extend(9u64.to_be_bytes());
        assert_eq!(
            reply_head(&mut Cursor::new(b)).unwrap(),
            ReplyHead::Simple {
                error: 5,
                cookie: 9
            }
        );
        let e = reply_head(&mut Cursor::new(vec![0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0])).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        // Truncated: an I/O error (the connection is lost), not a panic.
        let e = reply_head(&mut Cursor::new(
            STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec(),
        ))
        .unwrap_err();
        assert!(matches!(e, Error::Connection(_)), "{e}");
    }

    #[test]
    fn oversized_payloads_are_refused_before_allocating() {
        let e = vec_of(&mut Cursor::new(vec![]), usize::MAX, 4096, "message").unwrap_err();
        assert!(e.to_string().contains("at most 4096"), "{e}");
    }
}
