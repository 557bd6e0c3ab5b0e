//! The fixed newstyle negotiation: the greeting, the client's flags, then
//! options until the client chooses the export (`NBD_OPT_EXPORT_NAME` or
//! `NBD_OPT_GO`) or leaves.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::proto::{alloc, client_flags, handshake, opt, rep, IHAVEOPT, MAX_STRING, NBD_MAGIC};
use crate::Error;

use super::options::{parse_info, parse_meta, selects_alloc};
use super::optreply::{ack, error, infos, meta_context, server};
use super::{Session, Shape, ALLOC_ID};
use crate::tls::TlsMode;

/// Option payloads above this are not even drained: the connection closes.
const DRAIN_LIMIT: u32 = 16 << 20;

/// How a negotiation ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The client chose the export: transmission starts.
    Transmission(Session),
    /// The client aborted (`NBD_OPT_ABORT`).
    Aborted,
    /// `NBD_OPT_STARTTLS` was acknowledged: the TLS handshake comes next,
    /// then [`options`] again inside TLS.
    StartTls,
}

/// A negotiation under way: what the greeting settled and what the
/// options did so far.
#[derive(Debug)]
pub(crate) struct Nego {
    no_zeroes: bool,
    sess: Session,
    /// TLS is up on the connection.
    tls: bool,
    /// Options handled so far (bounded over the whole negotiation).
    options: u32,
}

impl Nego {
    /// TLS is now up: what was negotiated before it (in plaintext, open to
    /// tampering) is forgotten.
    pub(crate) fn tls_started(&mut self) {
        self.tls = true;
        self.sess = Session::default();
    }
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn protocol(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

fn net(e: io::Error) -> Error {
    Error::io("negotiation", e)
}

/// Reads and drops `n` bytes.
fn drain(r: &mut impl Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut r.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Runs the whole negotiation on `io` for the export `shape` (in
/// plaintext: it ends at `NBD_OPT_STARTTLS` with [`Outcome::StartTls`]).
#[cfg(test)]
pub(crate) fn negotiate<T: Read + Write>(io: &mut T, shape: &Shape) -> Result<Outcome, Error> {
    let mut nego = greet(io)?;
    options(io, shape, &mut nego, &AtomicBool::new(true))
}

/// Sends the greeting and reads the client's flags.
pub(crate) fn greet<T: Read + Write>(io: &mut T) -> Result<Nego, Error> {
    let mut hello = NBD_MAGIC.to_be_bytes().to_vec();
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes());
    io.write_all(&hello).map_err(net)?;
    io.flush().map_err(net)?;
    let cflags = u32::from_be_bytes(read_array(io).map_err(net)?);
    if cflags & !(client_flags::FIXED_NEWSTYLE | client_flags::NO_ZEROES) != 0 {
        return Err(protocol(format!("unknown client flags {cflags:#x}")));
    }
    if cflags & client_flags::FIXED_NEWSTYLE == 0 {
        return Err(protocol("the client does not speak fixed newstyle"));
    }
    Ok(Nego {
        no_zeroes: cflags & client_flags::NO_ZEROES != 0,
        sess: Session::default(),
        tls: false,
        options: 0,
    })
}

/// Reads options and answers them until the client chooses the export,
/// aborts, or starts TLS. `negotiating` is cleared before the reply that
/// starts transmission is sent: a client that has read it holds a session,
/// which a full server never ends to make room.
pub(crate) fn options<T: Read + Write>(
    io: &mut T,
    shape: &Shape,
    nego: &mut Nego,
    negotiating: &AtomicBool,
) -> Result<Outcome, Error> {
    let tls_required = shape.tls == Some(TlsMode::Require);
    while nego.options < shape.limits.max_options {
        nego.options += 1;
        let head: [u8; 16] = read_array(io).map_err(net)?;
        let magic = u64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let option = u32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(head[12..].try_into().unwrap_or_default());
        if magic != IHAVEOPT {
            return Err(protocol(format!("bad option magic {magic:#x}")));
        }
        if tls_required && !nego.tls && option == opt::EXPORT_NAME {
            // It cannot be refused: the spec has the server hang up.
            return Err(protocol(
                "NBD_OPT_EXPORT_NAME before the TLS this server requires",
            ));
        }
        if len > shape.limits.max_option {
            // Before a TLS this server requires, nothing large is read.
            if option == opt::EXPORT_NAME || len > DRAIN_LIMIT || (tls_required && !nego.tls) {
                return Err(protocol(format!("option {option} of {len} bytes")));
            }
            drain(io, len as u64).map_err(net)?;
            let msg = "option payload too large";
            io.write_all(&error(option, rep::ERR_TOO_BIG, msg))
                .map_err(net)?;
            io.flush().map_err(net)?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        io.read_exact(&mut data).map_err(net)?;
        let (out, done) =
            if tls_required && !nego.tls && option != opt::STARTTLS && option != opt::ABORT {
                let msg = "this server requires TLS: send NBD_OPT_STARTTLS first";
                (error(option, rep::ERR_TLS_REQD, msg), None)
            } else {
                option_reply(option, &data, shape, nego)?
            };
        if matches!(done, Some(Outcome::Transmission(_))) {
            negotiating.store(false, Ordering::Relaxed);
        }
        io.write_all(&out).map_err(net)?;
        io.flush().map_err(net)?;
        if let Some(outcome) = done {
            return Ok(outcome);
        }
    }
    Err(protocol("too many options"))
}

/// The reply to one option, and the outcome if the negotiation ends.
fn option_reply(
    option: u32,
    data: &[u8],
    shape: &Shape,
    nego: &mut Nego,
) -> Result<(Vec<u8>, Option<Outcome>), Error> {
    let (sess, no_zeroes) = (&mut nego.sess, nego.no_zeroes);
    let invalid = |msg: &str| Ok((error(option, rep::ERR_INVALID, msg), None));
    let unknown = || Ok((error(option, rep::ERR_UNKNOWN, "no such export"), None));
    match option {
        opt::EXPORT_NAME => {
            if data.len() > MAX_STRING || !shape.matches(data) {
                return Err(protocol("NBD_OPT_EXPORT_NAME of an unknown export"));
            }
            let mut out = shape.size.to_be_bytes().to_vec();
            out.extend_from_slice(&shape.tflags(sess.structured).to_be_bytes());
            if !no_zeroes {
                out.extend_from_slice(&[0u8; 124]);
            }
            Ok((out, Some(Outcome::Transmission(*sess))))
        }
        opt::ABORT => Ok((ack(option), Some(Outcome::Aborted))),
        opt::STARTTLS => {
            if shape.tls.is_none() {
                let msg = "TLS is not configured on this server";
                return Ok((error(option, rep::ERR_UNSUP, msg), None));
            }
            if !data.is_empty() {
                return invalid("NBD_OPT_STARTTLS takes no data");
            }
            if nego.tls {
                return invalid("TLS is already in use");
            }
            Ok((ack(option), Some(Outcome::StartTls)))
        }
        opt::LIST => {
            if !data.is_empty() {
                return invalid("NBD_OPT_LIST takes no data");
            }
            let mut out = server(option, shape);
            out.extend(ack(option));
            Ok((out, None))
        }
        opt::STRUCTURED_REPLY => {
            if !data.is_empty() {
                return invalid("NBD_OPT_STRUCTURED_REPLY takes no data");
            }
            sess.structured = true;
            Ok((ack(option), None))
        }
        opt::INFO | opt::GO => {
            let req = match parse_info(data) {
                Ok(r) => r,
                Err(m) => return invalid(m.0),
            };
            if !shape.matches(req.name) {
                return unknown();
            }
            let mut out = infos(option, shape, sess.structured, &req.infos);
            out.extend(ack(option));
            let done = (option == opt::GO).then_some(Outcome::Transmission(*sess));
            Ok((out, done))
        }
        opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
            let set = option == opt::SET_META_CONTEXT;
            let req = match parse_meta(data) {
                Ok(r) => r,
                Err(m) => return invalid(m.0),
            };
            if set && !sess.structured {
                return invalid("structured replies must be negotiated first");
            }
            if !shape.matches(req.name) {
                return unknown();
            }
            let chosen = selects_alloc(&req.queries, !set);
            if set {
                sess.alloc = chosen;
            }
            let mut out = Vec::new();
            if chosen {
                out.extend(meta_context(option, ALLOC_ID, alloc::CONTEXT));
            }
            out.extend(ack(option));
            Ok((out, None))
        }
        _ => Ok((error(option, rep::ERR_UNSUP, "option not supported"), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{info, tflag, OPTION_REPLY_MAGIC};
    use crate::server::testutil::{shape, Duplex};

    fn option(o: u32, data: &[u8]) -> Vec<u8> {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    fn start(flags: u32) -> Vec<u8> {
        flags.to_be_bytes().to_vec()
    }

    /// Splits the server's output after the 18-byte greeting into option
    /// replies (option, type, data).
    fn replies(out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut p = &out[18..];
        while p.len() >= 20 {
            assert_eq!(
                u64::from_be_bytes(p[..8].try_into().unwrap()),
                OPTION_REPLY_MAGIC
            );
            let o = u32::from_be_bytes(p[8..12].try_into().unwrap());
            let t = u32::from_be_bytes(p[12..16].try_into().unwrap());
            let n = u32::from_be_bytes(p[16..20].try_into().unwrap()) as usize;
            v.push((o, t, p[20..20 + n].to_vec()));
            p = &p[20 + n..];
        }
        v
    }

    fn go(name: &[u8], infos: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    #[test]
    fn greeting_and_go() {
        let mut input = start(3);
        input.extend(option(opt::STRUCTURED_REPLY, &[]));
        let mut meta = 0u32.to_be_bytes().to_vec();
        meta.extend_from_slice(&1u32.to_be_bytes());
        meta.extend_from_slice(&15u32.to_be_bytes());
        meta.extend_from_slice(b"base:allocation");
        input.extend(option(opt::SET_META_CONTEXT, &meta));
        input.extend(option(
            opt::GO,
            &go(b"vol", &[info::NAME, info::DESCRIPTION]),
        ));
        let mut io = Duplex::new(input);
        let out = negotiate(&mut io, &shape(false)).unwrap();
        assert_eq!(
            out,
            Outcome::Transmission(Session {
                structured: true,
                alloc: true
            })
        );
        assert_eq!(&io.out[..8], b"NBDMAGIC");
        assert_eq!(&io.out[8..16], b"IHAVEOPT");
        assert_eq!(&io.out[16..18], &[0, 3]);
        let r = replies(&io.out);
        assert_eq!(r[0], (opt::STRUCTURED_REPLY, rep::ACK, vec![]));
        assert_eq!(r[1].1, rep::META_CONTEXT);
        assert_eq!(&r[1].2[..4], &ALLOC_ID.to_be_bytes());
        assert_eq!(r[2].1, rep::ACK);
        // Export info: size and flags.
        assert_eq!(r[3].1, rep::INFO);
        assert_eq!(&r[3].2[2..10], &(1u64 << 20).to_be_bytes());
        let flags = u16::from_be_bytes([r[3].2[10], r[3].2[11]]);
        assert!(flags & tflag::CAN_MULTI_CONN != 0 && flags & tflag::READ_ONLY == 0);
        // Block sizes: min 512, preferred 4096, max 32 MiB.
        assert_eq!(
            r[4].2,
            [
                &[0, 3][..],
                &512u32.to_be_bytes(),
                &4096u32.to_be_bytes(),
                &(32u32 << 20).to_be_bytes()
            ]
            .concat()
        );
        assert_eq!(&r[5].2[2..], b"vol");
        assert_eq!(&r[6].2[2..], b"a test volume");
        assert_eq!(r[7], (opt::GO, rep::ACK, vec![]));
    }

    #[test]
    fn export_name_without_zeroes_and_with() {
        for (flags, len) in [(3u32, 18 + 10), (1, 18 + 10 + 124)] {
            let mut input = start(flags);
            input.extend(option(opt::EXPORT_NAME, b"vol"));
            let mut io = Duplex::new(input);
            let out = negotiate(&mut io, &shape(true)).unwrap();
            assert_eq!(out, Outcome::Transmission(Session::default()));
            assert_eq!(io.out.len(), len);
            let f = u16::from_be_bytes([io.out[26], io.out[27]]);
            assert!(f & tflag::READ_ONLY != 0);
        }
    }

    #[test]
    fn unknown_export_and_options() {
        let mut input = start(3);
        input.extend(option(opt::GO, &go(b"other", &[])));
        input.extend(option(99, b"xyz"));
        input.extend(option(opt::STARTTLS, &[]));
        input.extend(option(opt::LIST, b"x"));
        input.extend(option(opt::LIST, &[]));
        // SET_META_CONTEXT before structured replies.
        input.extend(option(opt::SET_META_CONTEXT, &[0, 0, 0, 0, 0, 0, 0, 0]));
        input.extend(option(opt::ABORT, &[]));
        let mut io = Duplex::new(input);
        assert_eq!(negotiate(&mut io, &shape(false)).unwrap(), Outcome::Aborted);
        let t: Vec<u32> = replies(&io.out).iter().map(|r| r.1).collect();
        assert_eq!(
            t,
            [
                rep::ERR_UNKNOWN,
                rep::ERR_UNSUP,
                rep::ERR_UNSUP,
                rep::ERR_INVALID,
                rep::SERVER,
                rep::ACK,
                rep::ERR_INVALID,
                rep::ACK
            ]
        );
    }

    fn tls_shape(mode: TlsMode) -> Shape {
        Shape {
            tls: Some(mode),
            ..shape(false)
        }
    }

    #[test]
    fn required_tls_refuses_options_until_starttls() {
        let mut input = start(3);
        input.extend(option(opt::STRUCTURED_REPLY, &[]));
        input.extend(option(opt::LIST, &[]));
        input.extend(option(opt::GO, &go(b"vol", &[])));
        input.extend(option(opt::INFO, &go(b"vol", &[])));
        input.extend(option(99, b"xyz"));
        input.extend(option(opt::STARTTLS, b"x"));
        input.extend(option(opt::STARTTLS, &[]));
        let mut io = Duplex::new(input);
        let shape = tls_shape(TlsMode::Require);
        assert_eq!(negotiate(&mut io, &shape).unwrap(), Outcome::StartTls);
        let t: Vec<u32> = replies(&io.out).iter().map(|r| r.1).collect();
        assert_eq!(
            t,
            [
                rep::ERR_TLS_REQD,
                rep::ERR_TLS_REQD,
                rep::ERR_TLS_REQD,
                rep::ERR_TLS_REQD,
                rep::ERR_TLS_REQD,
                rep::ERR_INVALID,
                rep::ACK
            ]
        );
        // NBD_OPT_EXPORT_NAME cannot be refused: the connection closes.
        let mut input = start(3);
        input.extend(option(opt::EXPORT_NAME, b"vol"));
        assert!(negotiate(&mut Duplex::new(input), &shape).is_err());
        // NBD_OPT_ABORT is answered.
        let mut input = start(3);
        input.extend(option(opt::ABORT, &[]));
        let mut io = Duplex::new(input);
        assert_eq!(negotiate(&mut io, &shape).unwrap(), Outcome::Aborted);
        assert_eq!(replies(&io.out)[0].1, rep::ACK);
    }

    #[test]
    fn after_starttls_the_negotiation_goes_on_and_forgets_what_came_before() {
        let shape = tls_shape(TlsMode::On);
        // Optional TLS: plaintext options work; structured replies asked for
        // before STARTTLS are forgotten after it.
        let mut input = start(3);
        input.extend(option(opt::STRUCTURED_REPLY, &[]));
        input.extend(option(opt::STARTTLS, &[]));
        let mut io = Duplex::new(input);
        let mut nego = greet(&mut io).unwrap();
        assert_eq!(
            options(&mut io, &shape, &mut nego, &AtomicBool::new(true)).unwrap(),
            Outcome::StartTls
        );
        let t: Vec<u32> = replies(&io.out).iter().map(|r| r.1).collect();
        assert_eq!(t, [rep::ACK, rep::ACK]);
        // What the TLS session carries (here in memory).
        nego.tls_started();
        let mut input = option(opt::STARTTLS, &[]);
        input.extend(option(opt::LIST, &[]));
        input.extend(option(opt::GO, &go(b"vol", &[])));
        let mut io = Duplex::new(input);
        io.out.extend([0u8; 18]);
        let out = options(&mut io, &shape, &mut nego, &AtomicBool::new(true)).unwrap();
        assert_eq!(out, Outcome::Transmission(Session::default()));
        let t: Vec<u32> = replies(&io.out).iter().map(|r| r.1).collect();
        assert_eq!(
            t,
            [
                rep::ERR_INVALID,
                rep::SERVER,
                rep::ACK,
                rep::INFO,
                rep::INFO,
                rep::ACK
            ]
        );
        // Required TLS, once up: GO works and no ERR_TLS_REQD is sent.
        let shape = tls_shape(TlsMode::Require);
        let mut io = Duplex::new(start(3));
        let mut nego = greet(&mut io).unwrap();
        nego.tls_started();
        let mut input = option(opt::STRUCTURED_REPLY, &[]);
        input.extend(option(opt::EXPORT_NAME, b"vol"));
        let mut io = Duplex::new(input);
        let out = options(&mut io, &shape, &mut nego, &AtomicBool::new(true)).unwrap();
        assert_eq!(
            out,
            Outcome::Transmission(Session {
                structured: true,
                alloc: false
            })
        );
    }

    #[test]
    fn oversized_option_is_drained_then_refused() {
        let mut input = start(3);
        input.extend(option(opt::INFO, &vec![0u8; 100 << 10]));
        input.extend(option(opt::ABORT, &[]));
        let mut io = Duplex::new(input);
        assert_eq!(negotiate(&mut io, &shape(false)).unwrap(), Outcome::Aborted);
        let r = replies(&io.out);
        assert_eq!(r[0].1, rep::ERR_TOO_BIG);
        assert_eq!(r[1].1, rep::ACK);
    }

    #[test]
    fn hostile_input_closes_without_allocating() {
        // Bad client flags; no fixed newstyle; bad option magic; a 4 GiB
        // option; an export name too long; a truncated option.
        let mut huge = start(3);
        huge.extend(IHAVEOPT.to_be_bytes());
        huge.extend(opt::INFO.to_be_bytes());
        huge.extend(u32::MAX.to_be_bytes());
        let mut long_name = start(3);
        long_name.extend(IHAVEOPT.to_be_bytes());
        long_name.extend(opt::EXPORT_NAME.to_be_bytes());
        long_name.extend(u32::MAX.to_be_bytes());
        let mut truncated = start(3);
        truncated.extend(&option(opt::GO, &go(b"vol", &[]))[..20]);
        for input in [
            start(0x80),
            start(0),
            [start(3), vec![0u8; 16]].concat(),
            huge,
            long_name,
            truncated,
            vec![],
        ] {
            let mut io = Duplex::new(input);
            assert!(negotiate(&mut io, &shape(false)).is_err());
        }
    }

    #[test]
    fn too_many_options_end_the_negotiation() {
        let mut input = start(3);
        for _ in 0..300 {
            input.extend(option(opt::LIST, &[]));
        }
        let mut io = Duplex::new(input);
        assert!(negotiate(&mut io, &shape(false)).is_err());
    }
}
