//! The fixed-newstyle handshake: magic check, flags, structured replies,
//! then `NBD_OPT_GO` asking for the export's size, flags and block sizes
//! (`NBD_INFO_BLOCK_SIZE`), with the `base:allocation` metadata context
//! asked for first (`NBD_OPT_SET_META_CONTEXT`, so `NBD_CMD_BLOCK_STATUS`
//! can tell holes). Servers without `NBD_OPT_GO` get
//! `NBD_OPT_EXPORT_NAME`. With TLS, [`greet`] and [`starttls`] run on the
//! plain socket first (see `secure.rs`), the rest inside TLS. Every length
//! the server sends is bounded before it is used.

use std::io::{Read, Write};

use super::wire::{self, u16_of, u32_of, u64_of};
use crate::proto::{self, client_flags, handshake, info, opt, rep};
use crate::Error;

/// The historic old-style magic (`cliserv_magic`), refused.
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// The largest option reply payload accepted (an info item or a message).
const MAX_OPTION_REPLY: usize = proto::MAX_STRING + 64;
/// The maximum payload a server must accept when it says nothing (2^25).
pub const DEFAULT_MAX_PAYLOAD: u32 = 1 << 25;
/// The most `NBD_REP_META_CONTEXT` replies taken for one query (one is
/// expected; a server that sends more is broken).
const MAX_META_REPLIES: usize = 16;

/// What the server told about the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags (`NBD_FLAG_*`).
    pub flags: u16,
    /// Minimum block size (requests should be multiples of it).
    pub min_block: u32,
    /// Preferred block size.
    pub pref_block: u32,
    /// Largest payload of one read or write.
    pub max_payload: u32,
    /// Whether structured replies are in use.
    pub structured: bool,
    /// The id the server gave the `base:allocation` metadata context, when
    /// it agreed to one (then `NBD_CMD_BLOCK_STATUS` tells holes).
    pub allocation: Option<u32>,
}

impl ExportInfo {
    /// Whether transmission flag `f` is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

/// Who the handshake is with, for messages.
pub(crate) struct Peer<'a> {
    /// The server's address.
    pub server: &'a str,
    /// The export name.
    pub export: &'a str,
}

/// What the server's greeting settled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Greeting {
    /// The server speaks fixed newstyle (options may be refused and retried).
    fixed: bool,
    /// Neither side sends the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
    no_zeroes: bool,
}

/// Runs the handshake on `s` and enters transmission.
#[cfg(test)]
pub(crate) fn negotiate<S: Read + Write>(s: &mut S, peer: &Peer<'_>) -> Result<ExportInfo, Error> {
    negotiate_after(s, peer, None)
}

/// Reads the server's greeting and answers it with the client's flags.
pub(crate) fn greet<S: Read + Write>(s: &mut S, peer: &Peer<'_>) -> Result<Greeting, Error> {
    let magic = u64_of(s)?;
    if magic != proto::NBD_MAGIC {
        return Err(Error::protocol(format!(
            "{} is not an NBD server (magic {magic:#x})",
            peer.server
        )));
    }
    let second = u64_of(s)?;
    if second == OLDSTYLE_MAGIC {
        return Err(Error::protocol(format!(
            "{} speaks the old-style handshake, which has no export names; use a newstyle server",
            peer.server
        )));
    }
    if second != proto::IHAVEOPT {
        return Err(Error::protocol(format!("bad newstyle magic {second:#x}")));
    }
    let hflags = u16_of(s)?;
    let fixed = hflags & handshake::FIXED_NEWSTYLE != 0;
    let no_zeroes = hflags & handshake::NO_ZEROES != 0;
    let mut cflags = 0u32;
    if fixed {
        cflags |= client_flags::FIXED_NEWSTYLE;
    }
    if no_zeroes {
        cflags |= client_flags::NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes())?;
    s.flush()?;
    Ok(Greeting { fixed, no_zeroes })
}

/// `NBD_OPT_STARTTLS` as the first option (after [`greet`]): Ok once the
/// server acknowledged it, when the TLS handshake must follow at once.
/// A server that does not speak fixed newstyle, or refuses, fails: a
/// client that asked for TLS never falls back to plaintext.
pub(crate) fn starttls<S: Read + Write>(
    s: &mut S,
    peer: &Peer<'_>,
    greeting: Greeting,
) -> Result<(), Error> {
    if !greeting.fixed {
        return Err(Error::Tls {
            peer: peer.server.into(),
            reason: "the server does not speak fixed newstyle, so it cannot start TLS".into(),
        });
    }
    send_option(s, opt::STARTTLS, &[])?;
    let r = option_reply(s, opt::STARTTLS)?;
    match r.kind {
        rep::ACK if r.data.is_empty() => Ok(()),
        rep::ACK => Err(Error::protocol("NBD_OPT_STARTTLS acknowledged with data")),
        k if k & rep::FLAG_ERROR != 0 => Err(Error::Refused {
            server: peer.server.into(),
            what: "TLS (NBD_OPT_STARTTLS; the server may not be configured for TLS)".into(),
            code: k,
            message: message(&r.data),
        }),
        k => Err(Error::protocol(format!(
            "unexpected reply {k} to NBD_OPT_STARTTLS"
        ))),
    }
}

/// Runs the rest of the handshake (the greeting first, unless `greeting`
/// says it was done, before TLS) and enters transmission.
pub(crate) fn negotiate_after<S: Read + Write>(
    s: &mut S,
    peer: &Peer<'_>,
    greeting: Option<Greeting>,
) -> Result<ExportInfo, Error> {
    let Greeting { fixed, no_zeroes } = match greeting {
        Some(g) => g,
        None => greet(s, peer)?,
    };
    if !fixed {
        return export_name(s, peer, no_zeroes, false);
    }
    send_option(s, opt::STRUCTURED_REPLY, &[])?;
    let structured = match option_reply(s, opt::STRUCTURED_REPLY)?.kind {
        rep::ACK => true,
        k if k & rep::FLAG_ERROR != 0 => false,
        k => {
            return Err(Error::protocol(format!(
                "unexpected reply {k} to NBD_OPT_STRUCTURED_REPLY"
            )))
        }
    };
    let allocation = if structured {
        set_meta_context(s, peer)?
    } else {
        None
    };
    match go(s, peer, structured)? {
        Some(i) => Ok(ExportInfo { allocation, ..i }),
        None => export_name(s, peer, no_zeroes, structured),
    }
}

/// `NBD_OPT_SET_META_CONTEXT` for `base:allocation`: the context's id, or
/// None when the server has no such context or refuses the option (block
/// status is then not asked for).
fn set_meta_context<S: Read + Write>(s: &mut S, peer: &Peer<'_>) -> Result<Option<u32>, Error> {
    let name = peer.export.as_bytes();
    let query = proto::alloc::CONTEXT.as_bytes();
    let mut d = Vec::with_capacity(12 + name.len() + query.len());
    d.extend((name.len() as u32).to_be_bytes());
    d.extend(name);
    d.extend(1u32.to_be_bytes());
    d.extend((query.len() as u32).to_be_bytes());
    d.extend(query);
    send_option(s, opt::SET_META_CONTEXT, &d)?;
    let mut id = None;
    for _ in 0..MAX_META_REPLIES {
        let r = option_reply(s, opt::SET_META_CONTEXT)?;
        match r.kind {
            rep::META_CONTEXT => {
                if r.data.len() < 4 {
                    return Err(Error::protocol("NBD_REP_META_CONTEXT shorter than its id"));
                }
                // A context other than the one asked for is not used.
                if &r.data[4..] == query {
                    if id.is_some() {
                        return Err(Error::protocol(
                            "two ids for the base:allocation metadata context",
                        ));
                    }
                    id = Some(u32::from_be_bytes(r.data[..4].try_into().expect("4 bytes")));
                }
            }
            rep::ACK => return Ok(id),
            rep::ERR_SHUTDOWN => {
                return Err(Error::Refused {
                    server: peer.server.into(),
                    what: "the connection (it is shutting down)".into(),
                    code: rep::ERR_SHUTDOWN,
                    message: message(&r.data),
                })
            }
            k if k & rep::FLAG_ERROR != 0 => return Ok(None),
            k => {
                return Err(Error::protocol(format!(
                    "unexpected reply {k} to NBD_OPT_SET_META_CONTEXT"
                )))
            }
        }
    }
    Err(Error::protocol(format!(
        "more than {MAX_META_REPLIES} metadata contexts for one query"
    )))
}

/// One option reply.
struct OptReply {
    kind: u32,
    data: Vec<u8>,
}

fn send_option<S: Write>(s: &mut S, option: u32, data: &[u8]) -> Result<(), Error> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend(proto::IHAVEOPT.to_be_bytes());
    m.extend(option.to_be_bytes());
    m.extend((data.len() as u32).to_be_bytes());
    m.extend(data);
    s.write_all(&m)?;
    s.flush()?;
    Ok(())
}

fn option_reply<S: Read>(s: &mut S, option: u32) -> Result<OptReply, Error> {
    let magic = u64_of(s)?;
    if magic != proto::OPTION_REPLY_MAGIC {
        return Err(Error::protocol(format!(
            "option reply with bad magic {magic:#x}"
        )));
    }
    let got = u32_of(s)?;
    if got != option {
        return Err(Error::protocol(format!(
            "reply to option {got} while waiting for option {option}"
        )));
    }
    let kind = u32_of(s)?;
    let len = u32_of(s)? as usize;
    let data = wire::vec_of(s, len, MAX_OPTION_REPLY, "option reply")?;
    Ok(OptReply { kind, data })
}

/// `NBD_OPT_GO`; None when the server does not know it.
fn go<S: Read + Write>(
    s: &mut S,
    peer: &Peer<'_>,
    structured: bool,
) -> Result<Option<ExportInfo>, Error> {
    let name = peer.export.as_bytes();
    let mut d = Vec::with_capacity(8 + name.len());
    d.extend((name.len() as u32).to_be_bytes());
    d.extend(name);
    d.extend(1u16.to_be_bytes());
    d.extend(info::BLOCK_SIZE.to_be_bytes());
    send_option(s, opt::GO, &d)?;
    let mut export = None;
    let mut blocks = None;
    loop {
        let r = option_reply(s, opt::GO)?;
        match r.kind {
            rep::INFO => parse_info(&r.data, &mut export, &mut blocks)?,
            rep::ACK => {
                let (size, flags) = export.ok_or_else(|| {
                    Error::protocol("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT")
                })?;
                let (min_block, pref_block, max_payload) =
                    blocks.unwrap_or((1, 4096, DEFAULT_MAX_PAYLOAD));
                return Ok(Some(ExportInfo {
                    size,
                    flags,
                    min_block,
                    pref_block,
                    max_payload,
                    structured,
                    allocation: None,
                }));
            }
            rep::ERR_UNSUP => return Ok(None),
            rep::ERR_UNKNOWN => {
                return Err(Error::UnknownExport {
                    server: peer.server.into(),
                    export: peer.export.into(),
                    message: message(&r.data),
                })
            }
            k if k & rep::FLAG_ERROR != 0 => {
                let what = match k {
                    rep::ERR_TLS_REQD => {
                        "the connection without TLS (it requires TLS: use nbds://)".to_string()
                    }
                    rep::ERR_POLICY => format!("access to export {:?}", peer.export),
                    _ => format!("export {:?}", peer.export),
                };
                return Err(Error::Refused {
                    server: peer.server.into(),
                    what,
                    code: k,
                    message: message(&r.data),
                });
            }
            k => {
                return Err(Error::protocol(format!(
                    "unexpected reply {k} to NBD_OPT_GO"
                )))
            }
        }
    }
}

/// Parses one `NBD_REP_INFO` payload into what it tells.
fn parse_info(
    d: &[u8],
    export: &mut Option<(u64, u16)>,
    blocks: &mut Option<(u32, u32, u32)>,
) -> Result<(), Error> {
    if d.len() < 2 {
        return Err(Error::protocol("NBD_REP_INFO shorter than its type"));
    }
    let kind = u16::from_be_bytes([d[0], d[1]]);
    let be32 = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
    match kind {
        info::EXPORT => {
            if d.len() != 12 {
                return Err(Error::protocol("NBD_INFO_EXPORT of the wrong length"));
            }
            let size = u64::from_be_bytes(d[2..10].try_into().expect("8 bytes"));
            let flags = u16::from_be_bytes([d[10], d[11]]);
            *export = Some((size, flags));
        }
        info::BLOCK_SIZE => {
            if d.len() != 14 {
                return Err(Error::protocol("NBD_INFO_BLOCK_SIZE of the wrong length"));
            }
            let (min, pref, max) = (be32(2), be32(6), be32(10));
            let pow2 = |v: u32| v != 0 && v.is_power_of_two();
            if !pow2(min) || min > 65536 || !pow2(pref) || pref < min || max < min {
                return Err(Error::protocol(format!(
                    "unusable block sizes: minimum {min}, preferred {pref}, maximum {max}"
                )));
            }
            *blocks = Some((min, pref, max));
        }
        // Names, descriptions and anything newer: not needed.
        _ => {}
    }
    Ok(())
}

/// `NBD_OPT_EXPORT_NAME`: the server's only way to refuse is to hang up.
fn export_name<S: Read + Write>(
    s: &mut S,
    peer: &Peer<'_>,
    no_zeroes: bool,
    structured: bool,
) -> Result<ExportInfo, Error> {
    send_option(s, opt::EXPORT_NAME, peer.export.as_bytes())?;
    let size = u64_of(s).map_err(|_| Error::UnknownExport {
        server: peer.server.into(),
        export: peer.export.into(),
        message: "the server closed the connection".into(),
    })?;
    let flags = u16_of(s)?;
    if !no_zeroes {
        wire::skip(s, 124)?;
    }
    Ok(ExportInfo {
        size,
        flags,
        min_block: 1,
        pref_block: 4096,
        max_payload: DEFAULT_MAX_PAYLOAD,
        structured,
        allocation: None,
    })
}

/// An error reply's message (lossy UTF-8).
fn message(d: &[u8]) -> String {
    String::from_utf8_lossy(d).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A scripted server: what it sends, and what the client wrote.
    struct Script {
        from_server: Cursor<Vec<u8>>,
        sent: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.from_server.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.sent.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn greeting(flags: u16) -> Vec<u8> {
        let mut v = proto::NBD_MAGIC.to_be_bytes().to_vec();
        v.extend(proto::IHAVEOPT.to_be_bytes());
        v.extend(flags.to_be_bytes());
        v
    }

    fn reply(v: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
        v.extend(proto::OPTION_REPLY_MAGIC.to_be_bytes());
        v.extend(option.to_be_bytes());
        v.extend(kind.to_be_bytes());
        v.extend((data.len() as u32).to_be_bytes());
        v.extend(data);
    }

    fn run(server: Vec<u8>) -> Result<ExportInfo, Error> {
        let mut s = Script {
            from_server: Cursor::new(server),
            sent: vec![],
        };
        negotiate(
            &mut s,
            &Peer {
                server: "test",
                export: "vol",
            },
        )
    }

    fn export_info(size: u64, flags: u16) -> Vec<u8> {
        let mut d = info::EXPORT.to_be_bytes().to_vec();
        d.extend(size.to_be_bytes());
        d.extend(flags.to_be_bytes());
        d
    }

    #[test]
    fn go_with_block_sizes() {
        let mut v = greeting(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        // Another context first (not used), then the one asked for.
        reply(
            &mut v,
            opt::SET_META_CONTEXT,
            rep::META_CONTEXT,
            b"\0\0\0\x09qemu:dirty-bitmap:x",
        );
        let mut m = 5u32.to_be_bytes().to_vec();
        m.extend(b"base:allocation");
        reply(&mut v, opt::SET_META_CONTEXT, rep::META_CONTEXT, &m);
        reply(&mut v, opt::SET_META_CONTEXT, rep::ACK, &[]);
        reply(&mut v, opt::GO, rep::INFO, &export_info(1 << 30, 0x1ed));
        let mut b = info::BLOCK_SIZE.to_be_bytes().to_vec();
        for x in [512u32, 4096, 1 << 22] {
            b.extend(x.to_be_bytes());
        }
        reply(&mut v, opt::GO, rep::INFO, &b);
        reply(&mut v, opt::GO, rep::INFO, &[0, 2, b'h', b'i']);
        reply(&mut v, opt::GO, rep::ACK, &[]);
        let i = run(v).unwrap();
        assert_eq!(
            i,
            ExportInfo {
                size: 1 << 30,
                flags: 0x1ed,
                min_block: 512,
                pref_block: 4096,
                max_payload: 1 << 22,
                structured: true,
                allocation: Some(5),
            }
        );
    }

    #[test]
    fn unknown_export_and_refusals() {
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ERR_UNSUP, &[]);
        reply(&mut v, opt::GO, rep::ERR_UNKNOWN, b"no such export");
        let e = run(v).unwrap_err();
        assert!(matches!(e, Error::UnknownExport { .. }), "{e}");
        assert!(e.to_string().contains("no such export"));

        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        reply(&mut v, opt::SET_META_CONTEXT, rep::ERR_UNSUP, &[]);
        reply(&mut v, opt::GO, rep::ERR_TLS_REQD, b"");
        let e = run(v).unwrap_err();
        assert!(e.to_string().contains("TLS"), "{e}");
    }

    #[test]
    fn starttls_is_sent_first_and_never_falls_back() {
        let peer = Peer {
            server: "test",
            export: "vol",
        };
        let script = |v: Vec<u8>| Script {
            from_server: Cursor::new(v),
            sent: vec![],
        };
        // Acknowledged: the client sent its flags, then STARTTLS with no data.
        let mut v = greeting(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES);
        reply(&mut v, opt::STARTTLS, rep::ACK, &[]);
        let mut s = script(v);
        let g = greet(&mut s, &peer).unwrap();
        starttls(&mut s, &peer, g).unwrap();
        let mut want = 3u32.to_be_bytes().to_vec();
        want.extend(proto::IHAVEOPT.to_be_bytes());
        want.extend(opt::STARTTLS.to_be_bytes());
        want.extend(0u32.to_be_bytes());
        assert_eq!(s.sent, want);
        // Refused (a server without TLS): an error, not plaintext.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STARTTLS, rep::ERR_UNSUP, b"no TLS here");
        let mut s = script(v);
        let g = greet(&mut s, &peer).unwrap();
        let e = starttls(&mut s, &peer, g).unwrap_err();
        assert!(matches!(e, Error::Refused { .. }), "{e}");
        assert!(e.to_string().contains("no TLS here"), "{e}");
        // Not fixed newstyle: no STARTTLS possible.
        let mut s = script(greeting(0));
        let g = greet(&mut s, &peer).unwrap();
        assert!(matches!(starttls(&mut s, &peer, g), Err(Error::Tls { .. })));
        // An acknowledgement with data is a protocol error.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STARTTLS, rep::ACK, b"x");
        let mut s = script(v);
        let g = greet(&mut s, &peer).unwrap();
        assert!(matches!(
            starttls(&mut s, &peer, g),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn falls_back_to_export_name() {
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ERR_UNSUP, &[]);
        reply(&mut v, opt::GO, rep::ERR_UNSUP, &[]);
        v.extend(4096u64.to_be_bytes());
        v.extend(3u16.to_be_bytes());
        v.extend([0u8; 124]);
        let i = run(v).unwrap();
        assert_eq!((i.size, i.flags, i.structured), (4096, 3, false));
    }

    #[test]
    fn hostile_handshakes_fail_cleanly() {
        // Wrong magic.
        assert!(matches!(
            run(b"HTTP/1.1 200 OK\r\n".to_vec()),
            Err(Error::Protocol(_))
        ));
        // Old style.
        let mut v = proto::NBD_MAGIC.to_be_bytes().to_vec();
        v.extend(OLDSTYLE_MAGIC.to_be_bytes());
        assert!(run(v).unwrap_err().to_string().contains("old-style"));
        // A 4 GiB option reply: refused without allocating it.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        v.extend(proto::OPTION_REPLY_MAGIC.to_be_bytes());
        v.extend(opt::STRUCTURED_REPLY.to_be_bytes());
        v.extend(rep::ACK.to_be_bytes());
        v.extend(u32::MAX.to_be_bytes());
        assert!(run(v).unwrap_err().to_string().contains("at most"));
        // A reply to another option.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::GO, rep::ACK, &[]);
        assert!(matches!(run(v), Err(Error::Protocol(_))));
        // GO acknowledged without the export's size.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        reply(&mut v, opt::SET_META_CONTEXT, rep::ACK, &[]);
        reply(&mut v, opt::GO, rep::ACK, &[]);
        assert!(matches!(run(v), Err(Error::Protocol(_))));
        // Nonsense block sizes.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        reply(&mut v, opt::SET_META_CONTEXT, rep::ACK, &[]);
        let mut b = info::BLOCK_SIZE.to_be_bytes().to_vec();
        for x in [3u32, 4096, 1 << 22] {
            b.extend(x.to_be_bytes());
        }
        reply(&mut v, opt::GO, rep::INFO, &b);
        assert!(run(v).unwrap_err().to_string().contains("block sizes"));
        // A metadata context reply too short for its id, and endless ones.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        reply(&mut v, opt::SET_META_CONTEXT, rep::META_CONTEXT, &[0, 1]);
        assert!(matches!(run(v), Err(Error::Protocol(_))));
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        for _ in 0..=MAX_META_REPLIES {
            reply(&mut v, opt::SET_META_CONTEXT, rep::META_CONTEXT, &[0; 8]);
        }
        assert!(run(v)
            .unwrap_err()
            .to_string()
            .contains("metadata contexts"));
        // Two ids for the one context asked for; a server shutting down.
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        let mut m = 5u32.to_be_bytes().to_vec();
        m.extend(b"base:allocation");
        reply(&mut v, opt::SET_META_CONTEXT, rep::META_CONTEXT, &m);
        reply(&mut v, opt::SET_META_CONTEXT, rep::META_CONTEXT, &m);
        assert!(run(v).unwrap_err().to_string().contains("two ids"));
        let mut v = greeting(handshake::FIXED_NEWSTYLE);
        reply(&mut v, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        reply(&mut v, opt::SET_META_CONTEXT, rep::ERR_SHUTDOWN, b"bye");
        assert!(matches!(run(v), Err(Error::Refused { .. })));
        // Truncated mid-handshake.
        let v = greeting(handshake::FIXED_NEWSTYLE);
        assert!(matches!(run(v), Err(Error::Connection(_))));
    }
}
