//! The client against a real server: qemu-nbd on a Unix socket over an
//! image file (skipped, with a note, when qemu-nbd is not installed).

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cryptkeep_nbd::client::{Client, Options, Uri};
use cryptkeep_nbd::Error;

const SIZE: u64 = 8 << 20;

/// A qemu-nbd serving `img` on `sock` as export "vol".
struct Server {
    dir: PathBuf,
    child: Option<Child>,
    read_only: bool,
}

impl Server {
    fn new(name: &str, read_only: bool) -> Option<Server> {
        if Command::new("qemu-nbd")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("skipped: qemu-nbd is not installed (scripts/install-deps.sh)");
            return None;
        }
        let base =
            std::env::var_os("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
        let dir = base.join(format!("nbdc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = std::fs::File::create(dir.join("img")).unwrap();
        f.set_len(SIZE).unwrap();
        let mut s = Server {
            dir,
            child: None,
            read_only,
        };
        s.start();
        Some(s)
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("sock")
    }

    fn img(&self) -> PathBuf {
        self.dir.join("img")
    }

    fn uri(&self, export: &str) -> Uri {
        Uri::parse(&format!(
            "nbd+unix:///{export}?socket={}",
            self.sock().display()
        ))
        .unwrap()
    }

    fn start(&mut self) {
        let _ = std::fs::remove_file(self.sock());
        let mut c = Command::new("qemu-nbd");
        c.args(["-f", "raw", "-x", "vol", "-t", "-e", "4", "-k"])
            .arg(self.sock());
        if self.read_only {
            c.arg("-r");
        }
        c.arg(self.img())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(c.spawn().unwrap());
        let t = Instant::now();
        // The socket file appears at bind, a moment before qemu-nbd
        // listens: wait until a connection is taken.
        while std::os::unix::net::UnixStream::connect(self.sock()).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "qemu-nbd did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn opts(timeout_s: u64) -> Options {
    Options {
        timeout: Duration::from_secs(timeout_s),
        connections: 4,
        ..Options::default()
    }
}

fn pattern(n: usize, first: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(first))
        .collect()
}

fn file_bytes(p: &Path, off: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    std::fs::File::open(p)
        .unwrap()
        .read_exact_at(&mut v, off)
        .unwrap();
    v
}

#[test]
fn reads_writes_zeroes_and_flushes() {
    let Some(s) = Server::new("rw", false) else {
        return;
    };
    let c = Client::connect(&s.uri("vol"), opts(10)).unwrap();
    assert_eq!(c.size(), SIZE);
    // Unaligned, and larger than one request of some servers.
    let a = pattern(3 << 20, 7);
    c.write_at(&a, 12345).unwrap();
    let b = pattern(777, 9);
    c.write_at(&b, SIZE - 777).unwrap();
    c.flush().unwrap();
    let mut back = vec![0; a.len()];
    c.read_at(&mut back, 12345).unwrap();
    assert_eq!(back, a);
    assert_eq!(file_bytes(&s.img(), 12345, a.len()), a);
    assert_eq!(file_bytes(&s.img(), SIZE - 777, 777), b);
    c.write_zeroes(1 << 20, 1 << 20).unwrap();
    let mut z = vec![1; 1 << 20];
    c.read_at(&mut z, 1 << 20).unwrap();
    assert!(z.iter().all(|&x| x == 0));
    // A trim is accepted; what the range reads as is up to the server.
    c.trim(4 << 20, 1 << 20).unwrap();
    c.read_at(&mut z, 4 << 20).unwrap();
    // Past the end: refused, nothing sent.
    assert!(c.write_at(&[1], SIZE).is_err());
    assert!(c.read_at(&mut [0; 2], SIZE - 1).is_err());
}

#[test]
fn concurrent_requests_use_several_connections() {
    let Some(s) = Server::new("multi", false) else {
        return;
    };
    let c = std::sync::Arc::new(Client::connect(&s.uri("vol"), opts(10)).unwrap());
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let d = pattern(256 << 10, t);
                for i in 0..4u64 {
                    let off = (u64::from(t) * 4 + i) * (256 << 10);
                    c.write_at(&d, off).unwrap();
                    let mut back = vec![0; d.len()];
                    c.read_at(&mut back, off).unwrap();
                    assert_eq!(back, d);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    c.flush().unwrap();
}

#[test]
fn a_restarted_server_gets_unflushed_writes_again() {
    let Some(mut s) = Server::new("restart", false) else {
        return;
    };
    let c = Client::connect(&s.uri("vol"), opts(20)).unwrap();
    let flushed = pattern(64 << 10, 1);
    c.write_at(&flushed, 0).unwrap();
    c.flush().unwrap();
    let unflushed = pattern(64 << 10, 2);
    c.write_at(&unflushed, 1 << 20).unwrap();
    // The server dies and comes back having lost what was not flushed.
    s.kill();
    std::fs::File::options()
        .write(true)
        .open(s.img())
        .unwrap()
        .write_all_at(&vec![0; 64 << 10], 1 << 20)
        .unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(700));
            s.start();
        });
        // This write waits for the server, then goes out.
        let later = pattern(4096, 3);
        c.write_at(&later, 2 << 20).unwrap();
    });
    c.flush().unwrap();
    assert_eq!(file_bytes(&s.img(), 0, 64 << 10), flushed);
    assert_eq!(file_bytes(&s.img(), 1 << 20, 64 << 10), unflushed);
    assert_eq!(file_bytes(&s.img(), 2 << 20, 4096), pattern(4096, 3));
}

/// Block `i`'s bytes in generation `g` (each 512-byte sector distinct).
fn generation(i: u64, g: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i * 31 + g * 7 + (k as u64 / 512) * 3 + (k as u64 % 512) / 64) as u8)
        .collect()
}

#[test]
fn a_server_killed_mid_write_with_requests_in_flight_loses_nothing_acknowledged() {
    let Some(mut s) = Server::new("inflight", false) else {
        return;
    };
    const BLOCK: usize = 1 << 20;
    let blocks = (SIZE as usize / BLOCK) as u64;
    // One connection: every request of the four writers shares it.
    let c = Client::connect(
        &s.uri("vol"),
        Options {
            connections: 1,
            ..opts(20)
        },
    )
    .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acked: Vec<std::sync::atomic::AtomicU64> = (0..blocks)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    let ord = std::sync::atomic::Ordering::SeqCst;
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let (c, stop, acked) = (&c, &stop, &acked);
            sc.spawn(move || {
                let mut g = 0;
                while !stop.load(ord) {
                    g += 1;
                    for i in (t..blocks).step_by(4) {
                        c.write_at(&generation(i, g, BLOCK), i * BLOCK as u64)
                            .unwrap();
                        acked[i as usize].store(g, ord);
                    }
                    if g % 4 == 0 {
                        c.flush().unwrap();
                    }
                }
            });
        }
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(400));
            s.kill();
            std::thread::sleep(Duration::from_millis(300));
            s.start();
        }
        std::thread::sleep(Duration::from_millis(400));
        stop.store(true, ord);
    });
    c.flush().unwrap();
    for (i, g) in acked.iter().enumerate() {
        let g = g.load(ord);
        assert!(g > 0, "block {i} was never written");
        let got = file_bytes(&s.img(), (i * BLOCK) as u64, BLOCK);
        let want = generation(i as u64, g, BLOCK);
        for (k, (a, b)) in got.chunks(512).zip(want.chunks(512)).enumerate() {
            assert!(a == b, "block {i} sector {k}: not generation {g}");
        }
    }
}

#[test]
fn a_server_that_stays_away_fails_io_with_eio_then_recovers() {
    let Some(mut s) = Server::new("down", false) else {
        return;
    };
    let c = Client::connect(&s.uri("vol"), opts(1)).unwrap();
    c.write_at(&[5; 4096], 0).unwrap();
    s.kill();
    let t = Instant::now();
    let e = c.write_at(&[6; 4096], 4096).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(e.errno(), libc_eio(), "{e}");
    assert!(matches!(e, Error::TimedOut { .. }), "{e}");
    // While down, requests fail fast.
    let t = Instant::now();
    assert!(c.flush().is_err());
    assert!(t.elapsed() < Duration::from_secs(1));
    s.start();
    c.write_at(&[7; 4096], 4096).unwrap();
    c.flush().unwrap();
    assert_eq!(file_bytes(&s.img(), 0, 4096), vec![5; 4096]);
    assert_eq!(file_bytes(&s.img(), 4096, 4096), vec![7; 4096]);
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn clear_errors_for_unknown_exports_dead_sockets_and_read_only_exports() {
    let Some(s) = Server::new("errors", true) else {
        return;
    };
    let e = Client::connect(&s.uri("nope"), opts(2)).unwrap_err();
    assert!(matches!(e, Error::UnknownExport { .. }), "{e}");
    assert!(e.to_string().contains("\"nope\""), "{e}");
    let e = Client::connect(&s.uri("vol"), opts(2)).unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    let ro = Client::connect(
        &s.uri("vol"),
        Options {
            write: false,
            ..opts(2)
        },
    )
    .unwrap();
    let mut b = [1u8; 512];
    ro.read_at(&mut b, 0).unwrap();
    assert_eq!(b, [0; 512]);
    assert!(matches!(ro.write_at(&b, 0), Err(Error::ReadOnly { .. })));
    let dead = Uri::parse(&format!("nbd+unix:///vol?socket={}/none", s.dir.display())).unwrap();
    let e = Client::connect(&dead, opts(2)).unwrap_err();
    assert!(matches!(e, Error::Unreachable { .. }), "{e}");
}

/// Throughput of 1 MiB reads and writes, 4 threads, over 1 and over 4
/// connections (run by hand:
/// `cargo test --release -p cryptkeep-nbd --test client_qemu_nbd -- --ignored --nocapture`).
#[test]
#[ignore]
fn throughput() {
    let Some(s) = Server::new("speed", false) else {
        return;
    };
    for connections in [1, 4] {
        let c = std::sync::Arc::new(
            Client::connect(
                &s.uri("vol"),
                Options {
                    connections,
                    ..opts(10)
                },
            )
            .unwrap(),
        );
        throughput_of(&c, connections);
    }
}

fn throughput_of(c: &std::sync::Arc<Client>, connections: usize) {
    for write in [true, false] {
        let t = Instant::now();
        let threads: Vec<_> = (0..4u64)
            .map(|k| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut b = vec![k as u8; 1 << 20];
                    for round in 0..128u64 {
                        for i in 0..2u64 {
                            let off = (k * 2 + i) << 20;
                            let _ = round;
                            if write {
                                c.write_at(&b, off).unwrap();
                            } else {
                                c.read_at(&mut b, off).unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mib = 4.0 * 128.0 * 2.0;
        eprintln!(
            "{connections} connection(s), {}: {:.0} MiB/s",
            if write { "write" } else { "read" },
            mib / t.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn a_server_that_never_answers_the_handshake_is_a_clear_timeout() {
    let dir = std::env::temp_dir().join(format!("nbdc-silent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let uri = Uri::parse(&format!("nbd+unix:///vol?socket={}", sock.display())).unwrap();
    let t = Instant::now();
    let e = Client::connect(&uri, opts(1)).unwrap_err();
    assert!(matches!(e, Error::HandshakeTimeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Forwards what `from` sends to `to`, each piece delivered `delay` after
/// it arrived: one direction of a link with that latency (and no
/// bandwidth limit but the copies).
fn delayed(mut from: UnixStream, mut to: UnixStream, delay: Duration) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut b = vec![0u8; 256 << 10];
        while let Ok(n @ 1..) = from.read(&mut b) {
            if tx.send((Instant::now() + delay, b[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for (due, v) in rx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&v).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

/// Throughput of 1 MiB reads and writes, 4 threads, through a proxy that
/// adds 1 ms each way (run by hand:
/// `cargo test --release -p cryptkeep-nbd --test client_qemu_nbd -- --ignored --nocapture`).
#[test]
#[ignore]
fn throughput_over_a_link_with_latency() {
    let Some(s) = Server::new("latency", false) else {
        return;
    };
    let proxy = s.dir.join("proxy");
    let listener = std::os::unix::net::UnixListener::bind(&proxy).unwrap();
    let target = s.sock();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(c) = c else { break };
            let Ok(up) = UnixStream::connect(&target) else {
                continue;
            };
            let d = Duration::from_millis(1);
            delayed(c.try_clone().unwrap(), up.try_clone().unwrap(), d);
            delayed(up, c, d);
        }
    });
    let uri = Uri::parse(&format!("nbd+unix:///vol?socket={}", proxy.display())).unwrap();
    for connections in [1, 4] {
        let c = std::sync::Arc::new(
            Client::connect(
                &uri,
                Options {
                    connections,
                    ..opts(10)
                },
            )
            .unwrap(),
        );
        eprint!("1 ms each way: ");
        throughput_of(&c, connections);
    }
}
