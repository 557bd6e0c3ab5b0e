//! End-to-end tests of the server over a unix socket, with a store in
//! memory: negotiation, requests in flight, errors that keep the
//! connection, and stopping.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use super::testutil::MemStore;
use super::{serve, Endpoint, Export, Limits, Server};
use crate::proto::{cmd, err, opt, IHAVEOPT, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC};

fn server(dir: &std::path::Path) -> (Server, std::path::PathBuf) {
    let path = dir.join("s.sock");
    let store = Arc::new(MemStore(Mutex::new(vec![0u8; 1 << 20])));
    let export = Export {
        name: "vol".into(),
        description: None,
        read_only: false,
        allow_trim: false,
    };
    let s = serve(
        &Endpoint::Unix(path.clone()),
        store,
        export,
        Limits::default(),
    )
    .unwrap();
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
