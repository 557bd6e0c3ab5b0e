//! The rings between two real processes: this test binary re-executes
//! itself as the keep side (`child_server`), which creates and seals the
//! arena, serves a checkable handler and hands the arena over the control
//! socket, as the real keep does.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_keep::proto::{STATUS_BAD_DESCRIPTOR, STATUS_FAILED};
use cryptkeep_keep::rings::{serve, Arena, ArenaConfig, Client, Handler};
use cryptkeep_keep::{control, spawn, Error};

const CHILD_ENV: &str = "KEEP_RINGS_CHILD";
const OP_XOR: u32 = 100;
const OP_FAIL: u32 = 101;
const OP_SLOW: u32 = 102;
const OP_GROW: u32 = 103;
const OP_CPU: u32 = 104;
const OP_AFFINITY: u32 = 105;

/// XORs with 0x5a (OP_XOR), fails (OP_FAIL), sleeps 300 ms (OP_SLOW),
/// answers one byte more than its input (OP_GROW), answers the CPU the
/// worker runs on (OP_CPU, 4 bytes) or how many CPUs it may run on
/// (OP_AFFINITY, 4 bytes).
struct TestHandler;

impl Handler for TestHandler {
    fn handle(&self, op: u32, _arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        match op {
            0 => Ok(0),
            OP_XOR => {
                for b in &mut buf[..in_len] {
                    *b ^= 0x5a;
                }
                Ok(in_len)
            }
            OP_SLOW => {
                std::thread::sleep(Duration::from_millis(300));
                Ok(0)
            }
            OP_CPU => {
                // SAFETY: sched_getcpu(3) takes no arguments.
                let cpu = unsafe { libc::sched_getcpu() } as u32;
                buf[..4].copy_from_slice(&cpu.to_le_bytes());
                Ok(4)
            }
            OP_AFFINITY => {
                let n = allowed_cpus() as u32;
                buf[..4].copy_from_slice(&n.to_le_bytes());
                Ok(4)
            }
            OP_GROW => {
                if in_len < buf.len() {
                    buf[in_len] = 0xee;
                    Ok(in_len + 1)
                } else {
                    Err(STATUS_FAILED)
                }
            }
            _ => Err(STATUS_FAILED),
        }
    }
}

/// The keep side, run in a child process.
#[test]
fn child_server() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    // SAFETY: the spawner put our end of the control socket on fd 3.
    let control = unsafe { OwnedFd::from_raw_fd(spawn::CONTROL_FD) };
    let cfg = ArenaConfig {
        queues: 4,
        slot_bytes: 256 * 1024,
        depth: 4,
    };
    let arena = Arc::new(Arena::create(cfg).unwrap());
    let workers = std::env::var("CK_TEST_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let server = serve(arena.clone(), Arc::new(TestHandler), workers).unwrap();
    control::send(control.as_fd(), b"READY", Some(arena.fd())).unwrap();
    loop {
        match control::recv(control.as_fd()) {
            Ok((m, _)) if m == b"SHUTDOWN" => {
                server.shutdown();
                // Stay alive: the client must learn from the arena alone.
                std::thread::sleep(Duration::from_secs(5));
                return;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    server.shutdown();
}

struct Peer {
    child: Child,
    client: Client,
    control: OwnedFd,
    arena: OwnedFd,
}

fn start() -> Peer {
    start_with(&[])
}

/// [`start`], the keep side with `env` added to its environment.
fn start_with(env: &[(&str, &str)]) -> Peer {
    let mut all = vec![(CHILD_ENV.into(), "1".into())];
    all.extend(env.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    let sp = spawn::spawn(spawn::SpawnConfig {
        env: all,
        ..spawn::SpawnConfig::new(
            std::env::current_exe().unwrap(),
            ["--exact", "rings::child_server", "--nocapture"],
        )
    })
    .unwrap();
    let (msg, fd) = control::recv(sp.control.as_fd()).unwrap();
    assert_eq!(msg, b"READY");
    let fd = fd.expect("the arena comes with READY");
    let arena = fd.try_clone().unwrap();
    let control = sp.control.try_clone().unwrap();
    let client = Client::connect(fd, sp.control).unwrap();
    Peer {
        child: sp.child,
        client,
        control,
        arena,
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn many_threads_get_their_own_answers() {
    let p = start();
    let max = p.client.max_request();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let c = &p.client;
            s.spawn(move || {
                for i in 0..150u64 {
                    let n = (pattern(1, t * 1000 + i)[0] as usize * 997 + 1) % max;
                    let want = pattern(n, t << 32 | i);
                    let mut buf = want.clone();
                    assert_eq!(c.call(OP_XOR, 0, &mut buf, n).unwrap(), n);
                    assert!(buf.iter().zip(&want).all(|(a, b)| *a == b ^ 0x5a));
                }
            });
        }
    });
    // Answers may be longer than the input, up to the buffer.
    let mut b = vec![1u8, 2, 3, 0];
    assert_eq!(p.client.call(OP_GROW, 0, &mut b, 3).unwrap(), 4);
    assert_eq!(b, [1, 2, 3, 0xee]);
    // A handler error is that request's error only.
    assert!(matches!(
        p.client.call(OP_FAIL, 0, &mut [0u8; 8], 8),
        Err(Error::Refused {
            status: STATUS_FAILED,
            ..
        })
    ));
    assert!(p
        .client
        .call(OP_XOR, 0, &mut vec![0u8; max + 1], 1)
        .is_err());
    p.client.call(0, 0, &mut [], 0).unwrap();
}

/// With pinned workers, a thread whose last request was large (64 KiB of
/// input) is served on its own CPU, whichever CPU that is; one whose last
/// request was small is served on another CPU, where there is one.
#[test]
fn pinned_workers_serve_large_requests_on_the_callers_cpu() {
    let p = start_with(&[("CRYPTKEEP_KEEP_PIN", "1")]);
    let cpus = allowed_cpus();
    let served_on = |len: usize| ask(&p, OP_CPU, len);
    for n in 0..cpus.min(2) {
        std::thread::scope(|s| {
            s.spawn(|| {
                let cpu = cryptkeep_keep::sched::pin_to_nth_cpu(n).unwrap() as u32;
                served_on(64 << 10);
                for _ in 0..20 {
                    assert_eq!(served_on(64 << 10), cpu, "a large request elsewhere");
                }
                served_on(0);
                for _ in 0..20 {
                    let on = served_on(16);
                    if cpus > 1 {
                        assert_ne!(on, cpu, "a small request on the caller's CPU");
                    }
                }
            });
        });
    }
}

/// With mixed placement (`CRYPTKEEP_KEEP_PIN=mixed`), a thread whose
/// last request was large is served by the pinned worker on its own CPU,
/// and one whose last request was small by a floating worker (one that
/// may run on every CPU).
#[test]
fn mixed_workers_serve_small_requests_on_floating_ones() {
    let p = start_with(&[("CRYPTKEEP_KEEP_PIN", "mixed")]);
    let cpus = allowed_cpus();
    let ask = |op: u32, len: usize| ask(&p, op, len);
    for n in 0..cpus.min(2) {
        std::thread::scope(|s| {
            s.spawn(|| {
                let cpu = cryptkeep_keep::sched::pin_to_nth_cpu(n).unwrap() as u32;
                ask(OP_CPU, 64 << 10);
                for _ in 0..20 {
                    assert_eq!(ask(OP_CPU, 64 << 10), cpu, "a large request elsewhere");
                    assert_eq!(ask(OP_AFFINITY, 64 << 10), 1, "a large request, floating");
                }
                ask(OP_CPU, 0);
                for _ in 0..20 {
                    // Unless the machine was busy just before or after
                    // (tasks queued for the CPUs, or a floating worker
                    // answered late: then small requests go pinned).
                    let busy = p.client.contended();
                    let on = ask(OP_AFFINITY, 16) as usize;
                    if !busy && !p.client.contended() {
                        assert_eq!(on, cpus, "a small request on a pinned worker");
                    }
                }
            });
        });
    }
}

/// With mixed placement, a small request that a floating worker answers
/// late (on a busy machine; here an operation that takes 300 ms) sends
/// the next small requests to the pinned worker on the caller's CPU for
/// 100 ms, and then to floating workers again (unless tasks queue for the
/// CPUs then: a busy machine by its CPU pressure). It runs in a
/// re-executed test process with `CRYPTKEEP_CPU_BUSY=no`, as on a kernel
/// without the pressure file: the late answer is then the only trigger,
/// and the slow request goes to a floating worker whatever the parallel
/// tests do to the machine.
#[test]
fn mixed_small_requests_go_pinned_while_floating_workers_answer_late() {
    let cpus = allowed_cpus();
    if cpus < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    if std::env::var("CRYPTKEEP_CPU_BUSY").as_deref() != Ok("no") {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "rings::mixed_small_requests_go_pinned_while_floating_workers_answer_late",
                "--nocapture",
            ])
            .env("CRYPTKEEP_CPU_BUSY", "no")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("test result: ok. 1 passed"),
            "the run without the pressure did not run: {text}"
        );
        return;
    }
    let p = start_with(&[("CRYPTKEEP_KEEP_PIN", "mixed")]);
    std::thread::scope(|s| {
        s.spawn(|| {
            let cpu = cryptkeep_keep::sched::pin_to_nth_cpu(0).unwrap() as u32;
            let mut b = [0u8; 4];
            p.client.call(OP_SLOW, 0, &mut b, 0).unwrap();
            assert!(
                p.client.contended(),
                "a 300 ms answer did not count as late"
            );
            // Within the 100 ms (a busy test machine may end them early:
            // only requests that start within them are checked).
            let mut checked = 0;
            // A request counts when the client was late before and after
            // it (so while it was routed).
            for _ in 0..5 {
                if !p.client.contended() {
                    break;
                }
                let on = ask(&p, OP_CPU, 16);
                if !p.client.contended() {
                    break;
                }
                assert_eq!(on, cpu, "a small request off the caller's CPU while late");
                let allowed = ask(&p, OP_AFFINITY, 16);
                if !p.client.contended() {
                    break;
                }
                assert_eq!(allowed, 1, "a small request floated while late");
                checked += 1;
            }
            assert!(
                checked > 0,
                "no request started within 100 ms of the late answer"
            );
            std::thread::sleep(Duration::from_millis(150));
            let busy_before = cryptkeep_pressure::busy();
            let late = p.client.contended();
            let allowed = ask(&p, OP_AFFINITY, 16) as usize;
            if busy_before || cryptkeep_pressure::busy() {
                eprintln!("the machine is busy: the return to floating workers is not checked");
                return;
            }
            assert!(!late, "still late after 150 ms");
            assert_eq!(
                allowed, cpus,
                "a small request on a pinned worker after the machine calmed down"
            );
        });
    });
}

/// With mixed placement on a busy machine (`CRYPTKEEP_CPU_BUSY=yes` in a
/// re-executed test process: the CPU pressure says tasks queue for the
/// CPUs), small requests go to the pinned worker on the caller's CPU, and
/// large ones still do.
#[test]
fn mixed_small_requests_go_to_the_pinned_worker_here_on_a_busy_machine() {
    if std::env::var("CRYPTKEEP_CPU_BUSY").as_deref() != Ok("yes") {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "rings::mixed_small_requests_go_to_the_pinned_worker_here_on_a_busy_machine",
                "--nocapture",
            ])
            .env("CRYPTKEEP_CPU_BUSY", "yes")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("test result: ok. 1 passed"),
            "the busy run did not run: {text}"
        );
        return;
    }
    let p = start_with(&[("CRYPTKEEP_KEEP_PIN", "mixed")]);
    assert!(p.client.contended(), "CRYPTKEEP_CPU_BUSY=yes is not busy");
    let cpus = allowed_cpus();
    for n in 0..cpus.min(2) {
        std::thread::scope(|s| {
            s.spawn(|| {
                let cpu = cryptkeep_keep::sched::pin_to_nth_cpu(n).unwrap() as u32;
                for len in [16, 64 << 10, 0] {
                    for _ in 0..10 {
                        assert_eq!(
                            ask(&p, OP_CPU, len),
                            cpu,
                            "{len} bytes off the caller's CPU"
                        );
                        assert_eq!(ask(&p, OP_AFFINITY, len), 1, "{len} bytes, floating");
                    }
                }
            });
        });
    }
}

/// With mixed placement and fewer pinned workers than CPUs, a large
/// request from a CPU without a pinned worker goes to a floating one,
/// which polls, rather than to a pinned worker elsewhere, which would
/// sleep after it.
#[test]
fn mixed_large_requests_from_a_cpu_without_a_pinned_worker_float() {
    let cpus = allowed_cpus();
    if cpus < 2 {
        eprintln!("one CPU: every CPU has the pinned worker; skipped");
        return;
    }
    // One worker asked for: one pinned (to the first CPU), one floating.
    let p = start_with(&[("CRYPTKEEP_KEEP_PIN", "mixed"), ("CK_TEST_WORKERS", "1")]);
    let ask = |op: u32, len: usize| ask(&p, op, len);
    std::thread::scope(|s| {
        s.spawn(|| {
            cryptkeep_keep::sched::pin_to_nth_cpu(1).unwrap();
            ask(OP_AFFINITY, 64 << 10);
            for _ in 0..20 {
                assert_eq!(
                    ask(OP_AFFINITY, 64 << 10) as usize,
                    cpus,
                    "a large request from a CPU without a worker went to a pinned one"
                );
            }
        });
    });
}

/// One request of `len` input bytes whose answer is a 4-byte number
/// (`OP_CPU`, `OP_AFFINITY`).
fn ask(p: &Peer, op: u32, len: usize) -> u32 {
    let mut buf = vec![0u8; len.max(4)];
    let got = p.client.call(op, 0, &mut buf, len).unwrap();
    assert_eq!(got, 4);
    u32::from_le_bytes(buf[..4].try_into().unwrap())
}

/// How many CPUs the calling thread may run on (its affinity mask, not
/// the cgroup's quota).
fn allowed_cpus() -> usize {
    // SAFETY: cpu_set_t is plain data (all zeros is the empty set).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes at most the size passed into a local set.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(r, 0);
    // SAFETY: counts the bits of a local set.
    unsafe { libc::CPU_COUNT(&set) as usize }
}

#[test]
fn zero_copy_slots() {
    let p = start();
    p.client.with_slot(|slot| {
        slot.buf()[..4].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(slot.call(OP_XOR, 0, 4).unwrap(), 4);
        assert_eq!(&slot.buf()[..4], &[1 ^ 0x5a, 2 ^ 0x5a, 3 ^ 0x5a, 4 ^ 0x5a]);
        // A sub-range.
        slot.buf()[100..102].copy_from_slice(&[9, 9]);
        assert_eq!(slot.call_at(OP_XOR, 0, 100, 2, 2).unwrap(), 2);
        assert_eq!(&slot.buf()[100..102], &[9 ^ 0x5a, 9 ^ 0x5a]);
        assert!(slot.call_at(OP_XOR, 0, usize::MAX - 1, 4, 2).is_err());
    });
}

#[test]
fn hostile_descriptors_fail_alone() {
    let p = start();
    let slot = p.client.max_request() as u64;
    let cases: [(u64, u32, u32); 6] = [
        (slot * 2, 0, 16),        // queue 1's descriptor pointing into queue 2's slot
        (0, 0, 16),               // into queue 0's slot
        (slot + slot - 8, 0, 16), // running past the end of its slot
        (u64::MAX - 4, 0, 16),    // offset + cap overflows
        (slot, 32, 16),           // in_len > cap
        (slot * 1000, 0, 16),     // far outside the arena
    ];
    for (off, in_len, cap) in cases {
        let (status, n) = p.client.submit_raw(1, OP_XOR, 0, off, in_len, cap).unwrap();
        assert_eq!(
            (status, n),
            (STATUS_BAD_DESCRIPTOR, 0),
            "offset {off} in {in_len} cap {cap}"
        );
    }
    // A good descriptor on the same queue still works.
    let (status, n) = p.client.submit_raw(1, OP_XOR, 0, slot, 8, 16).unwrap();
    assert_eq!((status, n), (0, 8));
    let mut b = vec![7u8; 1000];
    p.client.call(OP_XOR, 0, &mut b, 1000).unwrap();
    assert!(b.iter().all(|&x| x == 7 ^ 0x5a));
}

#[test]
fn corrupt_ring_indices_do_not_bring_the_keep_down() {
    let mut p = start();
    // Map the arena ourselves and write an impossible tail into queue 0.
    let len = 4096 * 5 + 4 * 256 * 1024;
    // SAFETY: mapping the arena memfd (len bytes, as the child made it).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            p.arena.as_raw_fd(),
            0,
        )
    } as *mut u8;
    assert_ne!(base as *mut libc::c_void, libc::MAP_FAILED);
    // SAFETY: queue 0's sq_tail word is at 4096 in the mapping.
    unsafe {
        let tail = base.add(4096) as *mut u32;
        std::ptr::write_volatile(tail, std::ptr::read_volatile(tail).wrapping_add(1000));
        // Queue 2: ask for completions the client never consumes (cq_head far behind).
        let cq_head = base.add(4096 * 3 + 192) as *mut u32;
        std::ptr::write_volatile(cq_head, std::ptr::read_volatile(cq_head).wrapping_sub(1000));
    }
    std::thread::sleep(Duration::from_millis(50));
    // Other queues keep working, and the keep is alive.
    let (status, _) = p.client.submit_raw(1, 0, 0, 256 * 1024, 0, 0).unwrap();
    assert_eq!(status, 0);
    let (status, _) = p.client.submit_raw(3, 0, 0, 3 * 256 * 1024, 0, 0).unwrap();
    assert_eq!(status, 0);
    assert!(p.child.try_wait().unwrap().is_none(), "the keep side died");
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}

#[test]
fn a_killed_keep_fails_calls_in_flight_and_after() {
    let mut p = start();
    let pid = p.child.id() as i32;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let t = Instant::now();
    let r = p.client.call(OP_SLOW, 0, &mut [0u8; 8], 0);
    assert!(matches!(r, Err(Error::Gone)), "{r:?}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    killer.join().unwrap();
    let _ = p.child.wait();
    let t = Instant::now();
    assert!(matches!(p.client.call(0, 0, &mut [], 0), Err(Error::Gone)));
    assert!(t.elapsed() < Duration::from_millis(100));
    assert!(p.client.is_gone());
}

#[test]
fn a_keep_killed_while_idle_is_noticed() {
    let mut p = start();
    p.client.call(0, 0, &mut [], 0).unwrap();
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let t = Instant::now();
    assert!(matches!(
        p.client.call(OP_XOR, 0, &mut [1u8; 4], 4),
        Err(Error::Gone)
    ));
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn shutdown_is_seen_through_the_arena() {
    let p = start();
    p.client.call(0, 0, &mut [], 0).unwrap();
    control::send(p.control.as_fd(), b"SHUTDOWN", None).unwrap();
    let t = Instant::now();
    loop {
        match p.client.call(0, 0, &mut [], 0) {
            Err(Error::Gone) => break,
            Ok(_) if t.elapsed() < Duration::from_secs(2) => continue,
            r => panic!("after shutdown: {r:?}"),
        }
    }
}

fn memfd(len: i64, seal: bool) -> OwnedFd {
    // SAFETY: plain memfd_create/ftruncate/fcntl on a new descriptor.
    unsafe {
        let fd = libc::memfd_create(c"t".as_ptr(), libc::MFD_ALLOW_SEALING);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len), 0);
        if seal {
            libc::fcntl(
                fd,
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            );
        }
        OwnedFd::from_raw_fd(fd)
    }
}

#[test]
fn only_sealed_well_formed_arenas_are_accepted() {
    assert!(matches!(
        Arena::from_fd(memfd(1 << 20, false)),
        Err(Error::Layout(_))
    ));
    assert!(matches!(
        Arena::from_fd(memfd(100, true)),
        Err(Error::Layout(_))
    ));
    assert!(matches!(
        Arena::from_fd(memfd(1 << 20, true)),
        Err(Error::Layout(_))
    ));
    let good = Arena::create(ArenaConfig::default()).unwrap();
    let dup = good.fd().try_clone_to_owned().unwrap();
    let other = Arena::from_fd(dup).unwrap();
    assert_eq!(other.config(), ArenaConfig::default());
    assert!(Arena::create(ArenaConfig {
        queues: 0,
        ..ArenaConfig::default()
    })
    .is_err());
    assert!(Arena::create(ArenaConfig {
        depth: 3,
        ..ArenaConfig::default()
    })
    .is_err());
}
