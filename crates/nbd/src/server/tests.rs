//! End-to-end tests of the server over a unix socket, with a store in
//! memory: negotiation, requests in flight, errors that keep the
//! connection, and stopping.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use super::testutil::{LendingStore, MemStore};
use super::{serve, Endpoint, Export, Limits, Server};
use crate::proto::{cmd, err, opt, IHAVEOPT, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC};

fn server(dir: &std::path::Path) -> (Server, std::path::PathBuf) {
    server_with(dir, Limits::default())
}

fn server_with(dir: &std::path::Path, limits: Limits) -> (Server, std::path::PathBuf) {
    let path = dir.join("s.sock");
    let store = Arc::new(MemStore(Mutex::new(vec![0u8; 1 << 20])));
    let export = Export {
        name: "vol".into(),
        description: None,
        read_only: false,
        allow_trim: false,
    };
    let s = serve(&Endpoint::Unix(path.clone()), store, export, limits).unwrap();
    (s, path)
}

/// Connects and sends `NBD_OPT_EXPORT_NAME` (no structured replies).
fn connect(path: &std::path::Path) -> UnixStream {
    let mut c = UnixStream::connect(path).unwrap();
    let mut hello = [0u8; 18];
    c.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..8], b"NBDMAGIC");
    let mut o = 3u32.to_be_bytes().to_vec();
    o.extend(IHAVEOPT.to_be_bytes());
    o.extend(opt::EXPORT_NAME.to_be_bytes());
    o.extend(3u32.to_be_bytes());
    o.extend(b"vol");
    c.write_all(&o).unwrap();
    let mut ex = [0u8; 10];
    c.read_exact(&mut ex).unwrap();
    assert_eq!(u64::from_be_bytes(ex[..8].try_into().unwrap()), 1 << 20);
    c
}

fn request(c: &mut UnixStream, typ: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
    let mut r = REQUEST_MAGIC.to_be_bytes().to_vec();
    r.extend(0u16.to_be_bytes());
    r.extend(typ.to_be_bytes());
    r.extend(cookie.to_be_bytes());
    r.extend(offset.to_be_bytes());
    r.extend(len.to_be_bytes());
    r.extend(data);
    c.write_all(&r).unwrap();
}

/// Reads a simple reply: (error, cookie).
fn reply(c: &mut UnixStream) -> (u32, u64) {
    let mut b = [0u8; 16];
    c.read_exact(&mut b).unwrap();
    assert_eq!(
        u32::from_be_bytes(b[..4].try_into().unwrap()),
        SIMPLE_REPLY_MAGIC
    );
    (
        u32::from_be_bytes(b[4..8].try_into().unwrap()),
        u64::from_be_bytes(b[8..].try_into().unwrap()),
    )
}

#[test]
fn write_read_errors_and_stop() {
    let dir = std::env::temp_dir().join(format!("ck-nbd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (s, path) = server(&dir);
    let mut c = connect(&path);
    request(&mut c, cmd::WRITE, 1, 1000, 5, b"hello");
    assert_eq!(reply(&mut c), (0, 1));
    request(&mut c, cmd::READ, 2, 998, 9, &[]);
    assert_eq!(reply(&mut c), (0, 2));
    let mut d = [0u8; 9];
    c.read_exact(&mut d).unwrap();
    assert_eq!(&d, b"\0\0hello\0\0");
    // Out of range, too long, trim not allowed: errors, connection kept.
    request(&mut c, cmd::READ, 3, 1 << 20, 1, &[]);
    assert_eq!(reply(&mut c), (err::EINVAL, 3));
    request(&mut c, cmd::WRITE, 4, 1 << 20, 3, b"xyz");
    assert_eq!(reply(&mut c), (err::ENOSPC, 4));
    request(&mut c, cmd::READ, 5, 0, u32::MAX, &[]);
    assert_eq!(reply(&mut c), (err::EINVAL, 5));
    request(&mut c, cmd::TRIM, 6, 0, 512, &[]);
    assert_eq!(reply(&mut c), (err::EINVAL, 6));
    request(&mut c, cmd::FLUSH, 7, 0, 0, &[]);
    assert_eq!(reply(&mut c), (0, 7));
    // Many in flight: every cookie answered once.
    for i in 0..64u64 {
        request(&mut c, cmd::READ, 100 + i, i * 4096, 4096, &[]);
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..64 {
        let (e, cookie) = reply(&mut c);
        assert_eq!(e, 0);
        let mut d = vec![0u8; 4096];
        c.read_exact(&mut d).unwrap();
        assert!(seen.insert(cookie));
    }
    // A second client while the first is open; then a bad magic closes
    // only that connection.
    let mut c2 = connect(&path);
    c2.write_all(&[0u8; 28]).unwrap();
    assert_eq!(c2.read(&mut [0u8; 1]).unwrap(), 0);
    request(&mut c, cmd::DISC, 8, 0, 0, &[]);
    assert_eq!(c.read(&mut [0u8; 1]).unwrap(), 0);
    let mut c3 = connect(&path);
    s.stop();
    assert_eq!(c3.read(&mut [0u8; 1]).unwrap_or(0), 0);
    assert!(!path.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endpoints_parse() {
    assert_eq!(
        "unix:/run/x.sock".parse::<Endpoint>().unwrap(),
        Endpoint::Unix("/run/x.sock".into())
    );
    assert_eq!(
        "tcp:[::1]:10809".parse::<Endpoint>().unwrap(),
        Endpoint::Tcp("[::1]:10809".into())
    );
    for bad in ["unix:", "tcp:host", "tcp::80", "tcp:h:99999", "nbd://x", ""] {
        assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
    }
}

/// Negotiates structured replies and `base:allocation`, then `NBD_OPT_GO`.
fn connect_structured(path: &std::path::Path) -> UnixStream {
    let mut c = UnixStream::connect(path).unwrap();
    let mut hello = [0u8; 18];
    c.read_exact(&mut hello).unwrap();
    let opt_msg = |o: u32, data: &[u8]| {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend(o.to_be_bytes());
        v.extend((data.len() as u32).to_be_bytes());
        v.extend(data);
        v
    };
    let mut meta = 3u32.to_be_bytes().to_vec();
    meta.extend(b"vol");
    meta.extend(1u32.to_be_bytes());
    meta.extend(15u32.to_be_bytes());
    meta.extend(b"base:allocation");
    let mut go = 3u32.to_be_bytes().to_vec();
    go.extend(b"vol");
    go.extend(0u16.to_be_bytes());
    let mut out = 3u32.to_be_bytes().to_vec();
    out.extend(opt_msg(opt::STRUCTURED_REPLY, &[]));
    out.extend(opt_msg(opt::SET_META_CONTEXT, &meta));
    out.extend(opt_msg(opt::GO, &go));
    c.write_all(&out).unwrap();
    // Replies until the ACK of GO.
    loop {
        let mut h = [0u8; 20];
        c.read_exact(&mut h).unwrap();
        let o = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let t = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let n = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut d = vec![0u8; n];
        c.read_exact(&mut d).unwrap();
        assert_eq!(t & 0x8000_0000, 0, "option {o} refused");
        if o == opt::GO && t == crate::proto::rep::ACK {
            return c;
        }
    }
}

/// Reads one structured chunk: (flags, type, cookie, payload).
fn chunk(c: &mut UnixStream) -> (u16, u16, u64, Vec<u8>) {
    let mut h = [0u8; 20];
    c.read_exact(&mut h).unwrap();
    assert_eq!(&h[..4], &crate::proto::STRUCTURED_REPLY_MAGIC.to_be_bytes());
    let n = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut d = vec![0u8; n];
    c.read_exact(&mut d).unwrap();
    (
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
        d,
    )
}

#[test]
fn structured_reads_and_block_status() {
    use crate::proto::reply;
    let dir = std::env::temp_dir().join(format!("ck-nbd-s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (s, path) = server(&dir);
    let mut c = connect_structured(&path);
    request(&mut c, cmd::WRITE, 1, 4096, 3, b"abc");
    assert_eq!(reply(&mut c), (0, 1));
    request(&mut c, cmd::READ, 2, 4095, 5, &[]);
    let (flags, typ, cookie, d) = chunk(&mut c);
    assert_eq!(
        (flags, typ, cookie),
        (reply::FLAG_DONE, reply::OFFSET_DATA, 2)
    );
    assert_eq!(&d[..8], &4095u64.to_be_bytes());
    assert_eq!(&d[8..], b"\0abc\0");
    // A read error is a structured error chunk; the connection goes on.
    request(&mut c, cmd::READ, 3, 1 << 20, 1, &[]);
    let (flags, typ, cookie, d) = chunk(&mut c);
    assert_eq!((flags, typ, cookie), (reply::FLAG_DONE, reply::ERROR, 3));
    assert_eq!(&d[..4], &err::EINVAL.to_be_bytes());
    // Block status: the in-memory store is all data.
    request(&mut c, cmd::BLOCK_STATUS, 4, 0, 1 << 20, &[]);
    let (flags, typ, cookie, d) = chunk(&mut c);
    assert_eq!(
        (flags, typ, cookie),
        (reply::FLAG_DONE, reply::BLOCK_STATUS, 4)
    );
    assert_eq!(&d[..4], &super::ALLOC_ID.to_be_bytes());
    assert_eq!(&d[4..8], &(1u32 << 20).to_be_bytes());
    assert_eq!(&d[8..12], &0u32.to_be_bytes());
    // A zero-length read is a NONE chunk.
    request(&mut c, cmd::READ, 5, 0, 0, &[]);
    let (flags, typ, cookie, d) = chunk(&mut c);
    assert_eq!(
        (flags, typ, cookie, d.len()),
        (reply::FLAG_DONE, reply::NONE, 5, 0)
    );
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dripping_negotiation_is_cut_off() {
    let dir = std::env::temp_dir().join(format!("ck-nbd-d-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let limits = Limits {
        negotiation_limit: std::time::Duration::from_millis(600),
        ..Limits::default()
    };
    let (s, path) = server_with(&dir, limits);
    let mut c = UnixStream::connect(&path).unwrap();
    let mut hello = [0u8; 18];
    c.read_exact(&mut hello).unwrap();
    let t = std::time::Instant::now();
    // One byte every 100 ms: each step is well within the step timeout.
    let mut cut = false;
    // A valid start: flags, then an NBD_OPT_GO of 100 bytes, dripped.
    let mut drip = vec![0u8, 0, 0, 3];
    drip.extend(IHAVEOPT.to_be_bytes());
    drip.extend(opt::GO.to_be_bytes());
    drip.extend(100u32.to_be_bytes());
    drip.extend([0u8; 40]);
    for b in drip {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if c.write_all(&[b]).is_err() {
            cut = true;
            break;
        }
    }
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    cut = cut || c.read(&mut [0u8; 1]).map(|n| n == 0).unwrap_or(true);
    assert!(cut, "the connection was not cut off");
    // Cut off by the limit (0.6 s, checked every 0.25 s), long before the
    // drip would end (6 s).
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    // Others still get in.
    drop(connect(&path));
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads the store lends are sent from the lent buffer while the client
/// reads nothing for a while (the socket fills: partial sends, writers
/// waiting on each other), without a lend ever waiting for the client;
/// then every reply reads back whole and right, both as simple and as
/// structured replies.
#[test]
fn lent_reads_survive_a_client_that_reads_late() {
    use crate::proto::reply;
    let dir = std::env::temp_dir().join(format!("ck-nbd-l-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let store = Arc::new(LendingStore {
        mem: MemStore(Mutex::new(data.clone())),
        lent: Default::default(),
        longest_us: Default::default(),
    });
    let export = Export {
        name: "vol".into(),
        description: None,
        read_only: false,
        allow_trim: false,
    };
    let s = serve(
        &Endpoint::Unix(path.clone()),
        store.clone(),
        export,
        Limits::default(),
    )
    .unwrap();
    // 96 reads of 256 KiB at odd offsets: 24 MiB of replies queued at once,
    // three times what the server's socket buffer holds.
    let span = |i: u64| ((i * 77_777) % ((1 << 20) - (256 << 10)), 256u32 << 10);
    for structured in [false, true] {
        let mut c = if structured {
            connect_structured(&path)
        } else {
            connect(&path)
        };
        for i in 0..96u64 {
            let (off, len) = span(i);
            request(&mut c, cmd::READ, 1000 + i, off, len, &[]);
        }
        // Long enough that a lend waiting on the client shows below.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..96 {
            let (cookie, d) = if structured {
                let (flags, typ, cookie, d) = chunk(&mut c);
                assert_eq!((flags, typ), (reply::FLAG_DONE, reply::OFFSET_DATA));
                let off = u64::from_be_bytes(d[..8].try_into().unwrap());
                assert_eq!(off, span(cookie - 1000).0);
                (cookie, d[8..].to_vec())
            } else {
                let (e, cookie) = reply(&mut c);
                assert_eq!(e, 0);
                let mut d = vec![0u8; span(cookie - 1000).1 as usize];
                c.read_exact(&mut d).unwrap();
                (cookie, d)
            };
            let (off, len) = span(cookie - 1000);
            assert!(seen.insert(cookie), "cookie {cookie} answered twice");
            assert_eq!(d.len(), len as usize);
            assert!(
                d == data[off as usize..off as usize + len as usize],
                "read {cookie} at {off} came back wrong"
            );
        }
        request(&mut c, cmd::DISC, 1, 0, 0, &[]);
    }
    use std::sync::atomic::Ordering::Relaxed;
    assert!(store.lent.load(Relaxed) >= 192);
    let longest = store.longest_us.load(Relaxed);
    assert!(
        longest < 750_000,
        "a lend waited {longest} µs for the client"
    );
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
