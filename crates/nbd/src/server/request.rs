//! Transmission requests: the 28-byte header, and the checks that decide
//! whether a request runs or is answered with an error at once.

use crate::proto::{cmd, cmd_flag, err, REQUEST_MAGIC};

use super::{Session, Shape};

/// The size of a request header.
pub(crate) const HEADER: usize = 28;

/// A request header as it came from the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// `NBD_CMD_FLAG_*`.
    pub(crate) flags: u16,
    /// `NBD_CMD_*`.
    pub(crate) typ: u16,
    /// The client's cookie, echoed in the reply.
    pub(crate) cookie: u64,
    /// Byte offset into the export.
    pub(crate) offset: u64,
    /// Length in bytes.
    pub(crate) len: u32,
}

impl Header {
    /// Parses a header; `None` when the magic is wrong (the connection
    /// cannot be resynchronized and is closed).
    pub(crate) fn parse(b: &[u8; HEADER]) -> Option<Header> {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
        if u32_at(0) != REQUEST_MAGIC {
            return None;
        }
        Some(Header {
            flags: u16_at(4),
            typ: u16_at(6),
            cookie: u64_at(8),
            offset: u64_at(16),
            len: u32_at(24),
        })
    }

    /// Bytes of payload that follow the header on the wire.
    pub(crate) fn payload(&self) -> u32 {
        if self.typ == cmd::WRITE {
            self.len
        } else {
            0
        }
    }

    /// Whether a flag is set.
    pub(crate) fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// What a checked request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// `NBD_CMD_READ`.
    Read,
    /// `NBD_CMD_WRITE`.
    Write,
    /// `NBD_CMD_DISC`.
    Disc,
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim,
    /// `NBD_CMD_CACHE`.
    Cache,
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes,
    /// `NBD_CMD_BLOCK_STATUS`.
    BlockStatus,
}

/// Checks a request against the export and the session: the command and
/// its flags are known and allowed, writes go to a writable export, the
/// length is within the maximum block size and the range inside the
/// export. The error is the NBD error value to answer.
pub(crate) fn check(h: &Header, shape: &Shape, sess: &Session) -> Result<Cmd, u32> {
    let c = match h.typ {
        cmd::READ => Cmd::Read,
        cmd::WRITE => Cmd::Write,
        cmd::DISC => return Ok(Cmd::Disc),
        cmd::FLUSH => Cmd::Flush,
        cmd::TRIM => Cmd::Trim,
        cmd::CACHE => Cmd::Cache,
        cmd::WRITE_ZEROES => Cmd::WriteZeroes,
        cmd::BLOCK_STATUS => Cmd::BlockStatus,
        _ => return Err(err::EINVAL),
    };
    let allowed = cmd_flag::FUA
        | match c {
            Cmd::Read if sess.structured => cmd_flag::DF,
            Cmd::WriteZeroes => cmd_flag::NO_HOLE,
            Cmd::BlockStatus => cmd_flag::REQ_ONE,
            _ => 0,
        };
    if h.flags & !allowed != 0 {
        return Err(err::EINVAL);
    }
    let writes = matches!(c, Cmd::Write | Cmd::Trim | Cmd::WriteZeroes);
    if writes && shape.read_only {
        return Err(err::EPERM);
    }
    if c == Cmd::Trim && !shape.export.allow_trim {
        return Err(err::EINVAL);
    }
    if c == Cmd::BlockStatus && !sess.alloc {
        return Err(err::EINVAL);
    }
    if matches!(c, Cmd::Read | Cmd::Write) && h.len > shape.limits.max_block {
        return Err(if sess.structured {
            err::EOVERFLOW
        } else {
            err::EINVAL
        });
    }
    if c == Cmd::Flush {
        return Ok(c);
    }
    let inside = h
        .offset
        .checked_add(u64::from(h.len))
        .is_some_and(|end| end <= shape.size);
    if !inside {
        return Err(if matches!(c, Cmd::Write | Cmd::WriteZeroes) {
            err::ENOSPC
        } else {
            err::EINVAL
        });
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::testutil::shape;

    fn header(typ: u16, flags: u16, offset: u64, len: u32) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&flags.to_be_bytes());
        b[6..8].copy_from_slice(&typ.to_be_bytes());
        b[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        b[16..24].copy_from_slice(&offset.to_be_bytes());
        b[24..].copy_from_slice(&len.to_be_bytes());
        b
    }

    fn run(typ: u16, flags: u16, offset: u64, len: u32, ro: bool, s: Session) -> Result<Cmd, u32> {
        let h = Header::parse(&header(typ, flags, offset, len)).unwrap();
        check(&h, &shape(ro), &s)
    }

    const PLAIN: Session = Session {
        structured: false,
        alloc: false,
    };
    const RICH: Session = Session {
        structured: true,
        alloc: true,
    };

    #[test]
    fn parses_fields() {
        let h = Header::parse(&header(cmd::WRITE, 1, 4096, 512)).unwrap();
        assert_eq!(
            h,
            Header {
                flags: 1,
                typ: cmd::WRITE,
                cookie: 0x1122_3344_5566_7788,
                offset: 4096,
                len: 512
            }
        );
        assert_eq!(h.payload(), 512);
        let mut bad = header(cmd::READ, 0, 0, 0);
        bad[0] ^= 1;
        assert_eq!(Header::parse(&bad), None);
    }

    #[test]
    fn good_requests_pass() {
        assert_eq!(run(cmd::READ, 0, 0, 4096, false, PLAIN), Ok(Cmd::Read));
        assert_eq!(
            run(cmd::READ, cmd_flag::DF, 0, 1, false, RICH),
            Ok(Cmd::Read)
        );
        assert_eq!(
            run(cmd::WRITE, cmd_flag::FUA, (1 << 20) - 1, 1, false, PLAIN),
            Ok(Cmd::Write)
        );
        assert_eq!(run(cmd::FLUSH, 0, 0, 0, false, PLAIN), Ok(Cmd::Flush));
        assert_eq!(run(cmd::TRIM, 0, 0, 1 << 20, false, PLAIN), Ok(Cmd::Trim));
        assert_eq!(
            run(cmd::WRITE_ZEROES, cmd_flag::NO_HOLE, 0, 9, false, PLAIN),
            Ok(Cmd::WriteZeroes)
        );
        assert_eq!(
            run(
                cmd::BLOCK_STATUS,
                cmd_flag::REQ_ONE,
                0,
                1 << 20,
                false,
                RICH
            ),
            Ok(Cmd::BlockStatus)
        );
        assert_eq!(run(cmd::CACHE, 0, 0, 4096, false, PLAIN), Ok(Cmd::Cache));
        assert_eq!(run(cmd::DISC, 0, 0, 0, false, PLAIN), Ok(Cmd::Disc));
    }

    #[test]
    fn bad_requests_get_their_error() {
        use crate::proto::err::*;
        // Unknown command and flags.
        assert_eq!(run(42, 0, 0, 0, false, PLAIN), Err(EINVAL));
        assert_eq!(run(cmd::READ, 1 << 9, 0, 1, false, PLAIN), Err(EINVAL));
        assert_eq!(
            run(cmd::READ, cmd_flag::DF, 0, 1, false, PLAIN),
            Err(EINVAL)
        );
        assert_eq!(
            run(cmd::WRITE, cmd_flag::NO_HOLE, 0, 1, false, PLAIN),
            Err(EINVAL)
        );
        // Read-only.
        assert_eq!(run(cmd::WRITE, 0, 0, 1, true, PLAIN), Err(EPERM));
        assert_eq!(run(cmd::TRIM, 0, 0, 1, true, PLAIN), Err(EPERM));
        assert_eq!(run(cmd::WRITE_ZEROES, 0, 0, 1, true, PLAIN), Err(EPERM));
        assert_eq!(run(cmd::READ, 0, 0, 1, true, PLAIN), Ok(Cmd::Read));
        // Block status without the context.
        assert_eq!(run(cmd::BLOCK_STATUS, 0, 0, 1, false, PLAIN), Err(EINVAL));
        // Too long.
        assert_eq!(run(cmd::READ, 0, 0, u32::MAX, false, PLAIN), Err(EINVAL));
        assert_eq!(run(cmd::READ, 0, 0, u32::MAX, false, RICH), Err(EOVERFLOW));
        assert_eq!(
            run(cmd::WRITE, 0, 0, (32 << 20) + 1, false, RICH),
            Err(EOVERFLOW)
        );
        // Out of range, and offsets that overflow.
        assert_eq!(run(cmd::READ, 0, 1 << 20, 1, false, PLAIN), Err(EINVAL));
        assert_eq!(
            run(cmd::WRITE, 0, (1 << 20) - 1, 2, false, PLAIN),
            Err(ENOSPC)
        );
        assert_eq!(
            run(cmd::WRITE_ZEROES, 0, u64::MAX, 2, false, PLAIN),
            Err(ENOSPC)
        );
        assert_eq!(
            run(cmd::BLOCK_STATUS, 0, u64::MAX, 1, false, RICH),
            Err(EINVAL)
        );
        assert_eq!(
            run(cmd::CACHE, 0, u64::MAX - 1, 4, false, PLAIN),
            Err(EINVAL)
        );
    }
}
