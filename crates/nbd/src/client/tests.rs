//! The pipelined connection against a scripted server on a socket pair
//! (replies out of order, interleaved structured chunks, an unknown cookie,
//! a connection that drops with requests in flight, block status replies
//! good and hostile), and the client against the crate's own server
//! (stopped and restarted mid-write; its allocation map).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::conn::Conn;
use super::handshake::ExportInfo;
use super::pipe::Op;
use super::reply::{is_status_error, MAX_STATUS_EXTENTS};
use super::session::runs;
use super::transport::Split;
use super::{Client, Options, Uri};
use crate::proto::{cmd, reply, tflag, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};
use crate::server::{serve, BlockStore, Endpoint, Export, Limits};
use crate::stream::Stream;
use crate::Error;
use cryptkeep_volume::Extent;

/// A request as the scripted server sees it.
#[derive(Debug)]
struct Req {
    kind: u16,
    cookie: u64,
    offset: u64,
    len: u32,
}

/// The `base:allocation` context's id on the scripted connections.
const ALLOCATION_ID: u32 = 3;

fn conn(structured: bool) -> (Conn, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    let info = ExportInfo {
        size: 1 << 20,
        flags: tflag::HAS_FLAGS | tflag::SEND_FLUSH,
        min_block: 512,
        pref_block: 4096,
        max_payload: 1 << 20,
        structured,
        allocation: structured.then_some(ALLOCATION_ID),
    };
    let c = Conn::over(Stream::Unix(a).split().unwrap(), info);
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (c, b)
}

/// Reads one request (discarding a write's payload).
fn next_request(s: &mut UnixStream) -> std::io::Result<Req> {
    let mut h = [0u8; 28];
    s.read_exact(&mut h)?;
    let r = Req {
        kind: u16::from_be_bytes([h[6], h[7]]),
        cookie: u64::from_be_bytes(h[8..16].try_into().unwrap()),
        offset: u64::from_be_bytes(h[16..24].try_into().unwrap()),
        len: u32::from_be_bytes(h[24..28].try_into().unwrap()),
    };
    if r.kind == cmd::WRITE {
        let mut p = vec![0u8; r.len as usize];
        s.read_exact(&mut p)?;
    }
    Ok(r)
}

/// Reads `n` requests.
fn requests(s: &mut UnixStream, n: usize) -> Vec<Req> {
    (0..n).map(|_| next_request(s).unwrap()).collect()
}

fn simple(s: &mut UnixStream, error: u32, cookie: u64, data: &[u8]) {
    let mut v = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
    v.extend(error.to_be_bytes());
    v.extend(cookie.to_be_bytes());
    v.extend(data);
    s.write_all(&v).unwrap();
}

fn chunk(s: &mut UnixStream, flags: u16, kind: u16, cookie: u64, payload: &[u8]) {
    let mut v = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
    v.extend(flags.to_be_bytes());
    v.extend(kind.to_be_bytes());
    v.extend(cookie.to_be_bytes());
    v.extend((payload.len() as u32).to_be_bytes());
    v.extend(payload);
    s.write_all(&v).unwrap();
}

fn data(at: u64, d: &[u8]) -> Vec<u8> {
    let mut p = at.to_be_bytes().to_vec();
    p.extend(d);
    p
}

/// What the read of `len` bytes at `offset` must return.
fn fill(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i) / 512 + (offset + i) % 7) as u8)
        .collect()
}

fn read(c: &Conn, offset: u64, len: usize) -> Result<Vec<u8>, Error> {
    let mut b = vec![0u8; len];
    c.one(Op::Read {
        offset,
        buf: &mut b,
    })?;
    Ok(b)
}

#[test]
fn replies_out_of_order_reach_their_callers() {
    let (c, mut s) = conn(false);
    std::thread::scope(|sc| {
        let callers: Vec<_> = (0..3u64)
            .map(|i| {
                let c = &c;
                sc.spawn(move || read(c, i * 4096, 4096).unwrap())
            })
            .collect();
        let mut reqs = requests(&mut s, 3);
        reqs.sort_by_key(|r| std::cmp::Reverse(r.offset));
        for r in &reqs {
            simple(&mut s, 0, r.cookie, &fill(r.offset, r.len as usize));
        }
        for (i, h) in callers.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), fill(i as u64 * 4096, 4096));
        }
    });
    assert_eq!(c.load(), 0);
}

#[test]
fn interleaved_structured_chunks_are_reassembled() {
    let (c, mut s) = conn(true);
    std::thread::scope(|sc| {
        // One caller with two reads in one batch, one with a read, one
        // with a write.
        let batch = sc.spawn(|| {
            let (mut a, mut b) = (vec![0u8; 1024], vec![1u8; 1024]);
            let mut ops = [
                Op::Read {
                    offset: 0,
                    buf: &mut a,
                },
                Op::Read {
                    offset: 8192,
                    buf: &mut b,
                },
            ];
            let r = c.exchange(&mut ops).unwrap();
            assert!(r.iter().all(Result::is_ok));
            (a, b)
        });
        let single = sc.spawn(|| read(&c, 4096, 2048).unwrap());
        let write = sc.spawn(|| {
            c.one(Op::Write {
                offset: 65536,
                buf: &[9; 512],
            })
        });
        let reqs = requests(&mut s, 4);
        let at = |o: u64| reqs.iter().find(|r| r.offset == o).unwrap().cookie;
        let (r1, r2, r3, w) = (at(0), at(8192), at(4096), at(65536));
        chunk(
            &mut s,
            0,
            reply::OFFSET_DATA,
            r3,
            &data(4096, &fill(4096, 1024)),
        );
        chunk(
            &mut s,
            0,
            reply::OFFSET_DATA,
            r1,
            &data(512, &fill(512, 512)),
        );
        chunk(&mut s, reply::FLAG_DONE, reply::NONE, w, &[]);
        let mut hole = 8192u64.to_be_bytes().to_vec();
        hole.extend(1024u32.to_be_bytes());
        chunk(&mut s, reply::FLAG_DONE, reply::OFFSET_HOLE, r2, &hole);
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            r3,
            &data(5120, &fill(5120, 1024)),
        );
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            r1,
            &data(0, &fill(0, 512)),
        );
        let (a, b) = batch.join().unwrap();
        assert_eq!(a, fill(0, 1024));
        assert_eq!(b, vec![0; 1024]);
        assert_eq!(single.join().unwrap(), fill(4096, 2048));
        write.join().unwrap().unwrap();
    });
    assert_eq!(c.load(), 0);
}

#[test]
fn a_server_error_fails_only_its_own_request() {
    let (c, mut s) = conn(false);
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let mut ops = [
                Op::Write {
                    offset: 0,
                    buf: &[1; 512],
                },
                Op::Write {
                    offset: 512,
                    buf: &[2; 512],
                },
            ];
            c.exchange(&mut ops).unwrap()
        });
        let reqs = requests(&mut s, 2);
        simple(&mut s, 28, reqs[1].cookie, &[]);
        simple(&mut s, 0, reqs[0].cookie, &[]);
        let r = h.join().unwrap();
        assert!(r[0].is_ok());
        assert_eq!(r[1].as_ref().unwrap_err().errno(), libc::ENOSPC);
    });
    // The connection is still good.
    std::thread::scope(|sc| {
        let h = sc.spawn(|| c.one(Op::Flush));
        let r = requests(&mut s, 1);
        assert_eq!(r[0].kind, cmd::FLUSH);
        simple(&mut s, 0, r[0].cookie, &[]);
        h.join().unwrap().unwrap();
    });
}

#[test]
fn a_reply_with_an_unknown_cookie_kills_the_connection() {
    let (c, mut s) = conn(true);
    std::thread::scope(|sc| {
        let callers: Vec<_> = (0..3u64)
            .map(|i| {
                let c = &c;
                sc.spawn(move || read(c, i * 512, 512))
            })
            .collect();
        let reqs = requests(&mut s, 3);
        let unknown = reqs.iter().map(|r| r.cookie).max().unwrap() + 100;
        chunk(&mut s, reply::FLAG_DONE, reply::NONE, unknown, &[]);
        for h in callers {
            let e = h.join().unwrap().unwrap_err();
            assert!(e.is_lost(), "{e}");
        }
    });
    assert!(c.is_dead());
    // Later requests fail at once, and the transport was hung up.
    assert!(read(&c, 0, 512).unwrap_err().is_lost());
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap(), 0);
}

#[test]
fn a_dropped_connection_fails_every_request_in_flight() {
    let (c, mut s) = conn(false);
    std::thread::scope(|sc| {
        let callers: Vec<_> = (0..4u64)
            .map(|i| {
                let c = &c;
                sc.spawn(move || {
                    if i % 2 == 0 {
                        read(c, i * 512, 512).map(drop)
                    } else {
                        c.one(Op::Write {
                            offset: i * 512,
                            buf: &[3; 512],
                        })
                    }
                })
            })
            .collect();
        let reqs = requests(&mut s, 4);
        // One answered, then the server goes away mid-reply.
        let r = reqs.iter().find(|r| r.kind == cmd::WRITE).unwrap();
        simple(&mut s, 0, r.cookie, &[]);
        s.write_all(&SIMPLE_REPLY_MAGIC.to_be_bytes()).unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
        let outcomes: Vec<_> = callers.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(outcomes.iter().filter(|r| r.is_ok()).count(), 1);
        for e in outcomes.iter().filter_map(|r| r.as_ref().err()) {
            assert!(e.is_lost(), "{e}");
        }
    });
    assert!(c.is_dead());
}

/// A block status query of `len` bytes at `offset` on `c`.
fn status(c: &Conn, offset: u64, len: u32) -> Result<Vec<(u32, u32)>, Error> {
    let mut out = Vec::new();
    c.one(Op::BlockStatus {
        offset,
        len,
        context: ALLOCATION_ID,
        out: &mut out,
    })?;
    Ok(out)
}

/// A block status chunk's payload for context `id`.
fn extents(id: u32, e: &[(u32, u32)]) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    for &(len, flags) in e {
        p.extend(len.to_be_bytes());
        p.extend(flags.to_be_bytes());
    }
    p
}

#[test]
fn block_status_replies_are_taken_and_hostile_ones_refused() {
    // A good reply, interleaved with a read's.
    let (c, mut s) = conn(true);
    std::thread::scope(|sc| {
        let q = sc.spawn(|| status(&c, 4096, 65536).unwrap());
        let r = sc.spawn(|| read(&c, 0, 512).unwrap());
        let reqs = requests(&mut s, 2);
        let st = reqs.iter().find(|r| r.kind == cmd::BLOCK_STATUS).unwrap();
        assert_eq!((st.offset, st.len), (4096, 65536));
        let rd = reqs.iter().find(|r| r.kind == cmd::READ).unwrap();
        let e = [(8192, 3), (57344, 0)];
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::BLOCK_STATUS,
            st.cookie,
            &extents(ALLOCATION_ID, &e),
        );
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            rd.cookie,
            &data(0, &fill(0, 512)),
        );
        assert_eq!(q.join().unwrap(), e);
        assert_eq!(r.join().unwrap(), fill(0, 512));
    });
    // A reply with more extents than are kept: the first ones are taken,
    // the rest read past, and the connection stays in step.
    let (c, mut s) = conn(true);
    std::thread::scope(|sc| {
        let q = sc.spawn(|| status(&c, 0, 1 << 20).unwrap());
        let reqs = requests(&mut s, 1);
        let many: Vec<(u32, u32)> = (0..MAX_STATUS_EXTENTS as u32 + 10)
            .map(|i| (512, i % 2))
            .collect();
        let p = extents(ALLOCATION_ID, &many);
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::BLOCK_STATUS,
            reqs[0].cookie,
            &p,
        );
        assert_eq!(q.join().unwrap(), many[..MAX_STATUS_EXTENTS]);
        let r = sc.spawn(|| read(&c, 0, 512).unwrap());
        let reqs = requests(&mut s, 1);
        let d = data(0, &fill(0, 512));
        chunk(
            &mut s,
            reply::FLAG_DONE,
            reply::OFFSET_DATA,
            reqs[0].cookie,
            &d,
        );
        assert_eq!(r.join().unwrap(), fill(0, 512));
    });
    assert!(!c.is_dead());
    // Each of these breaks the protocol: the query fails and the
    // connection is dropped (another one would be used).
    type Reply = fn(&mut UnixStream, u64);
    let hostile: [(&str, Reply); 6] = [
        ("another context", |s, k| {
            chunk(
                s,
                reply::FLAG_DONE,
                reply::BLOCK_STATUS,
                k,
                &extents(9, &[(512, 0)]),
            )
        }),
        ("an empty extent", |s, k| {
            chunk(
                s,
                reply::FLAG_DONE,
                reply::BLOCK_STATUS,
                k,
                &extents(ALLOCATION_ID, &[(0, 0)]),
            )
        }),
        ("no extent", |s, k| {
            chunk(s, reply::FLAG_DONE, reply::NONE, k, &[])
        }),
        ("a simple reply", |s, k| simple(s, 0, k, &[])),
        ("a data chunk", |s, k| {
            chunk(
                s,
                reply::FLAG_DONE,
                reply::OFFSET_DATA,
                k,
                &data(0, &[0; 512]),
            )
        }),
        ("an oversized chunk", |s, k| {
            // Only the header: the length alone must be refused.
            let mut v = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
            v.extend(reply::FLAG_DONE.to_be_bytes());
            v.extend(reply::BLOCK_STATUS.to_be_bytes());
            v.extend(k.to_be_bytes());
            v.extend(u32::MAX.to_be_bytes());
            s.write_all(&v).unwrap();
        }),
    ];
    for (what, send) in hostile {
        let (c, mut s) = conn(true);
        std::thread::scope(|sc| {
            let q = sc.spawn(|| status(&c, 0, 4096));
            let reqs = requests(&mut s, 1);
            send(&mut s, reqs[0].cookie);
            let e = q.join().unwrap().unwrap_err();
            assert!(is_status_error(&e), "{what}: {e}");
        });
        assert!(c.is_dead(), "{what}");
    }
    // A server error is the query's own failure; the connection lives.
    let (c, mut s) = conn(true);
    std::thread::scope(|sc| {
        let q = sc.spawn(|| status(&c, 0, 4096));
        let reqs = requests(&mut s, 1);
        simple(&mut s, 22, reqs[0].cookie, &[]);
        assert_eq!(q.join().unwrap().unwrap_err().errno(), libc::EINVAL);
    });
    assert!(!c.is_dead());
}

#[test]
fn block_status_extents_become_runs_of_what_was_asked() {
    let ext = |len, hole, zero| Extent { len, hole, zero };
    let raw = [(4096, 3), (4096, 3), (8192, 0), (4096, 1), (1 << 20, 3)];
    // All of it: alike neighbours merged, the last one cut at the length.
    assert_eq!(
        runs(&raw, 0, 20_480 + 100),
        vec![
            ext(8192, true, true),
            ext(8192, false, false),
            ext(4096, true, false),
            ext(100, true, true)
        ]
    );
    // The first bytes dropped (a request widened to whole blocks).
    assert_eq!(runs(&raw, 9000, 3000), vec![ext(3000, false, false)]);
    assert_eq!(
        runs(&raw, 1000, 8000),
        vec![ext(7192, true, true), ext(808, false, false)]
    );
    // An answer that ends before the bytes asked for: nothing.
    assert_eq!(runs(&[(512, 0)], 1024, 512), vec![]);
}

/// An empty directory of its own for a test named `tag`.
fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nbdc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The writable export "vol" the tests serve.
fn writable_export() -> Export {
    Export {
        name: "vol".into(),
        description: None,
        read_only: false,
        allow_trim: false,
    }
}

/// A store in memory that loses what was not flushed when it "crashes":
/// [`Disk::restart`] gives a store holding only the flushed bytes.
struct Disk {
    live: Mutex<Vec<u8>>,
    durable: Arc<Mutex<Vec<u8>>>,
}

impl Disk {
    fn new(bytes: Vec<u8>) -> Arc<Disk> {
        Arc::new(Disk {
            live: Mutex::new(bytes.clone()),
            durable: Arc::new(Mutex::new(bytes)),
        })
    }

    fn restart(&self) -> Arc<Disk> {
        Disk::new(self.durable.lock().unwrap().clone())
    }
}

impl BlockStore for Disk {
    fn size(&self) -> u64 {
        self.live.lock().unwrap().len() as u64
    }
    fn block_size(&self) -> usize {
        512
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        let d = self.live.lock().unwrap();
        let o = offset as usize;
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(buf.len())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        let mut d = self.live.lock().unwrap();
        let o = offset as usize;
        d[o..o + data.len()].copy_from_slice(data);
        Ok(data.len())
    }
    fn flush(&self) -> Result<(), cryptkeep_volume::Error> {
        let d = self.live.lock().unwrap().clone();
        *self.durable.lock().unwrap() = d;
        Ok(())
    }
    /// All-zero 4 KiB blocks are holes.
    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, cryptkeep_volume::Error> {
        let d = self.live.lock().unwrap();
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let n = (4096 - at % 4096).min(offset + len - at);
            let hole = d[at as usize..(at + n) as usize].iter().all(|&b| b == 0);
            match out.last_mut() {
                Some(l) if l.hole == hole => l.len += n,
                _ => out.push(Extent {
                    len: n,
                    hole,
                    zero: hole,
                }),
            }
            at += n;
        }
        Ok(out)
    }
}

#[test]
fn the_allocation_map_comes_from_the_servers_block_status() {
    let dir = fresh_dir("status");
    let sock = dir.join("s.sock");
    let export = writable_export();
    let disk = Disk::new(vec![0; 1 << 20]);
    let server = serve(
        &Endpoint::Unix(sock.clone()),
        disk,
        export,
        Limits::default(),
    )
    .unwrap();
    let uri = Uri::parse(&format!("nbd+unix:///vol?socket={}", sock.display())).unwrap();
    let client = Client::connect(&uri, Options::default()).unwrap();
    assert!(client.info().allocation.is_some());
    client.write_at(&[7; 8192], 65536).unwrap();
    let map = client.allocation(0, 1 << 20).unwrap().unwrap();
    let ext = |len, hole| Extent {
        len,
        hole,
        zero: hole,
    };
    assert_eq!(
        map,
        vec![
            ext(65536, true),
            ext(8192, false),
            ext((1 << 20) - 73728, true)
        ]
    );
    // A range inside one run, and an empty one.
    assert_eq!(
        client.allocation(66000, 100).unwrap().unwrap(),
        vec![ext(100, false)]
    );
    assert_eq!(client.allocation(0, 0).unwrap().unwrap(), vec![]);
    // Past the end: an error, nothing sent.
    assert!(client.allocation(1 << 20, 512).is_err());
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Block `i`'s content in generation `g` (every sector says both).
fn block(i: u64, g: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i * 31 + g * 7 + (k as u64 % 512) / 64) as u8)
        .collect()
}

#[test]
fn a_server_restarted_mid_write_gets_every_acknowledged_write() {
    const SIZE: usize = 8 << 20;
    const BLOCK: usize = 512 << 10;
    let dir = fresh_dir("pipe");
    let sock = dir.join("s.sock");
    let export = writable_export();
    let disk = Mutex::new(Disk::new(vec![0; SIZE]));
    let start = |d: Arc<Disk>| {
        serve(
            &Endpoint::Unix(sock.clone()),
            d,
            export.clone(),
            Limits::default(),
        )
        .unwrap()
    };
    let server = Mutex::new(Some(start(disk.lock().unwrap().clone())));
    let uri = Uri::parse(&format!("nbd+unix:///vol?socket={}", sock.display())).unwrap();
    let client = Client::connect(
        &uri,
        Options {
            timeout: Duration::from_secs(20),
            ..Options::default()
        },
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    // Per block: the last generation acknowledged.
    let acked: Vec<AtomicU64> = (0..SIZE / BLOCK).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let (client, stop, acked) = (&client, &stop, &acked);
            sc.spawn(move || {
                let mut g = 0;
                while !stop.load(Ordering::SeqCst) {
                    g += 1;
                    for i in (t..(SIZE / BLOCK) as u64).step_by(4) {
                        client
                            .write_at(&block(i, g, BLOCK), i * BLOCK as u64)
                            .unwrap();
                        acked[i as usize].store(g, Ordering::SeqCst);
                    }
                    if g % 3 == 0 {
                        client.flush().unwrap();
                    }
                }
            });
        }
        // Twice: the server goes away mid-write, having lost what was not
        // flushed, and comes back a little later.
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(300));
            let s = server.lock().unwrap().take().unwrap();
            s.stop();
            let next = disk.lock().unwrap().restart();
            std::thread::sleep(Duration::from_millis(200));
            *disk.lock().unwrap() = next.clone();
            *server.lock().unwrap() = Some(start(next));
        }
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
    });
    client.flush().unwrap();
    let d = disk.lock().unwrap().clone();
    let live = d.live.lock().unwrap();
    for (i, g) in acked.iter().enumerate() {
        let g = g.load(Ordering::SeqCst);
        assert!(g > 0);
        let at = i * BLOCK;
        assert!(
            live[at..at + BLOCK] == block(i as u64, g, BLOCK)[..],
            "block {i} is not generation {g}"
        );
    }
    drop(live);
    drop(client);
    drop(server.lock().unwrap().take());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server whose block status replies name another metadata context:
/// handshake as a real one (structured replies, `base:allocation` as
/// context 1), reads answered with zeros. Returns the number of block
/// status queries it saw.
fn broken_status_server(l: std::os::unix::net::UnixListener, stop: &AtomicBool) -> usize {
    use crate::proto::{handshake, info, opt, rep, IHAVEOPT, NBD_MAGIC, OPTION_REPLY_MAGIC};
    let mut queries = 0;
    l.set_nonblocking(true).unwrap();
    while !stop.load(Ordering::SeqCst) {
        let mut s = match l.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut g = NBD_MAGIC.to_be_bytes().to_vec();
        g.extend(IHAVEOPT.to_be_bytes());
        g.extend((handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes());
        s.write_all(&g).unwrap();
        let mut b4 = [0u8; 4];
        s.read_exact(&mut b4).unwrap();
        let orep = |s: &mut UnixStream, o: u32, kind: u32, d: &[u8]| {
            let mut v = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
            v.extend(o.to_be_bytes());
            v.extend(kind.to_be_bytes());
            v.extend((d.len() as u32).to_be_bytes());
            v.extend(d);
            s.write_all(&v).unwrap();
        };
        loop {
            let mut h = [0u8; 16];
            s.read_exact(&mut h).unwrap();
            let o = u32::from_be_bytes(h[8..12].try_into().unwrap());
            let mut d = vec![0u8; u32::from_be_bytes(h[12..16].try_into().unwrap()) as usize];
            s.read_exact(&mut d).unwrap();
            match o {
                opt::SET_META_CONTEXT => {
                    let mut m = 1u32.to_be_bytes().to_vec();
                    m.extend(b"base:allocation");
                    orep(&mut s, o, rep::META_CONTEXT, &m);
                    orep(&mut s, o, rep::ACK, &[]);
                }
                opt::GO => {
                    let mut e = info::EXPORT.to_be_bytes().to_vec();
                    e.extend((1u64 << 20).to_be_bytes());
                    e.extend(tflag::HAS_FLAGS.to_be_bytes());
                    orep(&mut s, o, rep::INFO, &e);
                    orep(&mut s, o, rep::ACK, &[]);
                    break;
                }
                _ => orep(&mut s, o, rep::ACK, &[]),
            }
        }
        while let Ok(r) = next_request(&mut s) {
            match r.kind {
                cmd::READ => chunk(
                    &mut s,
                    reply::FLAG_DONE,
                    reply::OFFSET_DATA,
                    r.cookie,
                    &data(r.offset, &vec![0; r.len as usize]),
                ),
                cmd::BLOCK_STATUS => {
                    queries += 1;
                    let p = extents(9, &[(r.len, 0)]);
                    chunk(&mut s, reply::FLAG_DONE, reply::BLOCK_STATUS, r.cookie, &p);
                }
                _ => break,
            }
        }
    }
    queries
}

#[test]
fn a_broken_block_status_neither_stalls_io_nor_is_asked_again() {
    let dir = fresh_dir("badstatus");
    let sock = dir.join("s.sock");
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let stop = AtomicBool::new(false);
    let uri = Uri::parse(&format!("nbd+unix:///?socket={}", sock.display())).unwrap();
    let queries = std::thread::scope(|sc| {
        let server = sc.spawn(|| broken_status_server(l, &stop));
        let c = Client::connect(
            &uri,
            Options {
                write: false,
                ..Options::default()
            },
        )
        .unwrap();
        // The broken reply: no map (all data), no error, no hang.
        assert_eq!(c.allocation(0, 65536).unwrap(), None);
        // Reads go on, on a new connection.
        let mut b = vec![1u8; 4096];
        c.read_at(&mut b, 8192).unwrap();
        assert_eq!(b, vec![0; 4096]);
        // Not asked again.
        assert_eq!(c.allocation(0, 65536).unwrap(), None);
        drop(c);
        stop.store(true, Ordering::SeqCst);
        server.join().unwrap()
    });
    assert_eq!(queries, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
