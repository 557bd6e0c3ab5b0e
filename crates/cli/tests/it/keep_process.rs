//! The process keep, tested as the real `cryptkeep` binary runs it: typed
//! operations agree with the host, hostile descriptors fail only their own
//! request, the keep is sandboxed (seccomp, no new privileges, secret memory
//! unreadable, ptrace refused without CAP_SYS_PTRACE), and a forbidden
//! system call kills it.

use cryptkeep_testkit::need;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::{recv_hello, Hello, Keep, ProcessKeep};
use cryptkeep_keep::{ops, proto, spawn};

const BIN: &str = env!("CARGO_BIN_EXE_cryptkeep");

/// A runtime keep.
fn runtime() -> ProcessKeep {
    start(&["__keep", "runtime"])
}

/// A volume keep with a random aes-xts-plain64 512-bit key.
fn scratch_volume() -> ProcessKeep {
    start(&["__keep", "scratch-volume", "--cipher", "aes-xts-plain64"])
}

fn start(args: &[&str]) -> ProcessKeep {
    let (k, facts) = ProcessKeep::spawn(spawn::SpawnConfig::new(BIN, args)).expect("keep starts");
    assert!(
        facts
            .iter()
            .any(|(k, v)| k == "sandbox" && v.contains("seccomp")),
        "facts: {facts:?}"
    );
    k
}

fn random(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    cryptkeep_crypto::rand::fill_random(&mut v).unwrap();
    v
}

#[test]
fn operations_in_the_keep_agree_with_the_host() {
    let k = runtime();
    k.null_call().unwrap();
    // Larger than one request, so the SHA-256 stream has several updates.
    let data = random(3 * k.max_request() + 12345);
    assert_eq!(k.sha256(&data).unwrap(), ops::sha256(&data));
    assert_eq!(k.sha256(b"abc").unwrap(), ops::sha256(b"abc"));

    let blob = k.seal(b"a secret for later").unwrap();
    assert_eq!(k.unseal(&blob).unwrap(), b"a secret for later");
    let mut bad = blob.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(k.unseal(&bad).is_err(), "a tampered sealed blob opened");

    let ct = k.gcm_encrypt(b"23 bytes of plain text!").unwrap();
    assert_eq!(ct.len(), 23 + 28);
    assert_eq!(k.gcm_decrypt(&ct).unwrap(), b"23 bytes of plain text!");

    assert!(k.rsa_sign(b"x").is_err(), "signing before a key exists");
    let public = k.rsa_generate().unwrap();
    let sig = k.rsa_sign(b"signed in the keep").unwrap();
    assert!(ops::rsa::verify_pss_sha256(&public, b"signed in the keep", &sig).unwrap_or(false));
    assert!(!ops::rsa::verify_pss_sha256(&public, b"something else", &sig).unwrap_or(false));
    let rct = ops::rsa::encrypt_oaep_sha256(&public, b"for the keep only").unwrap();
    assert_eq!(k.rsa_decrypt(&rct).unwrap(), b"for the keep only");
    let own = k.rsa_encrypt(b"round trip").unwrap();
    assert_eq!(k.rsa_decrypt(&own).unwrap(), b"round trip");
    k.destroy().unwrap();
}

#[test]
fn sealed_blobs_do_not_open_in_another_keep() {
    let a = runtime();
    let b = runtime();
    let blob = a.seal(b"bound to keep a").unwrap();
    assert!(b.unseal(&blob).is_err());
    a.destroy().unwrap();
    b.destroy().unwrap();
}

#[test]
fn hostile_descriptors_fail_alone() {
    let k = scratch_volume();
    let c = k.client();
    let slot = c.max_request() as u64;
    let cases: [(u64, u32, u32); 5] = [
        (u64::MAX - 10, 0, 4096),                // offset overflows
        (0, 8192, 4096),                         // in_len > cap
        (0, 0, (slot as u32).saturating_mul(2)), // cap beyond the slot
        (slot * 3, 0, 4096),                     // another queue's slot
        (slot * 1000, 0, 16),                    // far outside the arena
    ];
    for (off, in_len, cap) in cases {
        let (status, _) = c
            .submit_raw(0, proto::OP_ENCRYPT_SECTORS, 0, off, in_len, cap)
            .unwrap();
        assert_eq!(
            status,
            proto::STATUS_BAD_DESCRIPTOR,
            "offset {off} in {in_len} cap {cap}"
        );
    }
    // Not a whole sector: refused by the handler, not a crash.
    let mut odd = vec![0u8; 1000];
    assert!(k
        .call(proto::OP_ENCRYPT_SECTORS, 0, &mut odd, 1000)
        .is_err());
    // Unknown operation.
    assert!(k.call(999, 0, &mut [0u8; 16], 0).is_err());
    // The keep still serves, and sector crypto round-trips.
    k.null_call().unwrap();
    let plain = random(64 << 10);
    let mut buf = plain.clone();
    k.call(proto::OP_ENCRYPT_SECTORS, 7, &mut buf, plain.len())
        .unwrap();
    assert_ne!(buf, plain);
    k.call(proto::OP_DECRYPT_SECTORS, 7, &mut buf, plain.len())
        .unwrap();
    assert_eq!(buf, plain);
    assert!(k.is_alive());
    k.destroy().unwrap();
}

fn status_field(pid: i32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// (start, end) of the keep's memfd_secret mapping, from /proc/PID/maps.
fn secretmem_range(pid: i32) -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines().find(|l| l.contains("secretmem")).map(|l| {
        let (a, b) = l
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        )
    })
}

#[test]
fn the_keep_is_sandboxed_and_its_key_pages_unreadable() {
    need!(root);
    use std::os::unix::fs::FileExt;
    let k = scratch_volume();
    let pid = k.pid();
    assert_eq!(status_field(pid, "Seccomp:"), "2", "seccomp filter mode");
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
    // Every thread (the workers too): filtered, without capabilities.
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(tasks.len() >= 2, "workers: {tasks:?}");
    for t in tasks {
        let st = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status")).unwrap();
        assert!(
            st.contains("CapEff:\t0000000000000000"),
            "thread {t} keeps capabilities"
        );
        assert!(st.contains("Seccomp:\t2"), "thread {t} is not filtered");
    }
    let (start, end) = secretmem_range(pid).expect("a memfd_secret mapping in the keep");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = vec![0u8; (end - start) as usize];
    let r = mem.read_at(&mut b, start);
    assert!(
        !matches!(r, Ok(n) if n > 0),
        "read of secret memory gave {r:?}"
    );
    // Ordinary memory of the same process reads fine as root (so the read
    // above could have succeeded).
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let heap = maps
        .lines()
        .find(|l| l.ends_with("[heap]") || l.ends_with("[stack]"))
        .unwrap();
    let a = u64::from_str_radix(heap.split('-').next().unwrap(), 16).unwrap();
    let mut one = [0u8; 16];
    assert_eq!(mem.read_at(&mut one, a).unwrap(), 16);
    k.destroy().unwrap();
}

/// (policy, real-time priority) of every `keep-worker-*` thread of `pid`,
/// from `/proc/PID/task/TID/stat` (fields 41 and 40, counted after the
/// command name, which may hold spaces).
fn worker_policies(pid: i32) -> Vec<(u32, u32)> {
    crate::common::keep_worker_tids(pid)
        .iter()
        .map(|t| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat")).unwrap();
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            // `after` starts at field 3 (state).
            let f: Vec<&str> = after.split(' ').collect();
            (f[41 - 3].parse().unwrap(), f[40 - 3].parse().unwrap())
        })
        .collect()
}

/// A volume keep's workers run under SCHED_FIFO at priority 1 by default
/// (a root keep may), a runtime keep's and those of a volume keep told
/// `--ordinary-workers` (`open` of a plain volume without an NBD export)
/// under the ordinary scheduler; every keep's at the priority
/// `CRYPTKEEP_KEEP_RTPRIO` names, and under the ordinary scheduler with
/// `CRYPTKEEP_KEEP_RTPRIO=0` or a value that is not a priority.
#[test]
fn the_keeps_workers_run_at_a_real_time_priority_unless_told_not_to() {
    need!(root);
    let volume = ["__keep", "scratch-volume", "--cipher", "aes-xts-plain64"];
    let ordinary = [&volume[..], &["--ordinary-workers"]].concat();
    let auth = [
        "__keep",
        "scratch-volume",
        "--cipher",
        "aes-gcm-random",
        "--integrity",
        "aead",
    ];
    let with = |args: &[&str], prio: Option<&str>| {
        let mut cfg = spawn::SpawnConfig::new(BIN, args);
        if let Some(p) = prio {
            cfg.env.push(("CRYPTKEEP_KEEP_RTPRIO".into(), p.into()));
        }
        let (k, _) = ProcessKeep::spawn(cfg).expect("keep starts");
        let got = worker_policies(k.pid());
        k.destroy().unwrap();
        assert!(!got.is_empty(), "no keep-worker threads");
        got
    };
    let fifo = libc::SCHED_FIFO as u32;
    let all = |got: Vec<(u32, u32)>, want: (u32, u32), what: &str| {
        assert!(got.iter().all(|&p| p == want), "{what}: {got:?}");
    };
    all(with(&volume, None), (fifo, 1), "volume, default");
    all(with(&volume, Some("7")), (fifo, 7), "volume, priority 7");
    all(with(&volume, Some("0")), (0, 0), "volume, turned off");
    all(with(&volume, Some("off")), (0, 0), "volume, not a priority");
    all(
        with(&auth, None),
        (fifo, 1),
        "authenticated volume, default",
    );
    all(with(&ordinary, None), (0, 0), "volume, --ordinary-workers");
    all(
        with(&ordinary, Some("3")),
        (fifo, 3),
        "--ordinary-workers, priority 3",
    );
    let runtime = ["__keep", "runtime"];
    all(with(&runtime, None), (0, 0), "runtime, default");
    all(with(&runtime, Some("2")), (fifo, 2), "runtime, priority 2");
}

/// A volume keep's workers are each pinned to one CPU, a different one
/// for each (one worker per CPU by default), unless
/// `CRYPTKEEP_KEEP_PIN=0`; a runtime keep's may run on every CPU unless
/// `CRYPTKEEP_KEEP_PIN=1`, or half its workers pinned with
/// `CRYPTKEEP_KEEP_PIN=mixed`.
#[test]
fn volume_keep_workers_are_pinned_unless_told_not_to() {
    let volume = ["__keep", "scratch-volume", "--cipher", "aes-xts-plain64"];
    let runtime = ["__keep", "runtime"];
    let with = |args: &[&str], pin: Option<&str>| {
        let mut cfg = spawn::SpawnConfig::new(BIN, args);
        if let Some(p) = pin {
            cfg.env.push(("CRYPTKEEP_KEEP_PIN".into(), p.into()));
        }
        let (k, _) = ProcessKeep::spawn(cfg).expect("keep starts");
        let got = crate::common::keep_worker_cpus(k.pid());
        k.destroy().unwrap();
        assert!(!got.is_empty(), "no keep-worker threads");
        got
    };
    let pinned = |got: Vec<String>, what: &str| {
        assert!(
            got.iter().all(|c| c.parse::<usize>().is_ok()),
            "{what}: {got:?}"
        );
        let mut distinct = got.clone();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            got.len(),
            "{what}: one worker per CPU: {got:?}"
        );
    };
    let all = crate::common::own_cpus();
    if all.parse::<usize>().is_ok() {
        eprintln!("one CPU ({all}): pinned and unpinned workers look alike; skipped");
        return;
    }
    let free = |got: Vec<String>, what: &str| {
        assert!(got.iter().all(|c| *c == all), "{what}: {got:?} vs {all}");
    };
    pinned(with(&volume, None), "volume, default");
    free(with(&volume, Some("0")), "volume, turned off");
    free(with(&runtime, None), "runtime, default");
    pinned(with(&runtime, Some("1")), "runtime, asked");
    crate::common::assert_mixed_placement(&with(&runtime, Some("mixed")), "runtime, mixed");
}

/// Opening `/proc/PID/mem` (what ptrace-based readers need: ptrace
/// attach access) as root without CAP_SYS_PTRACE (setpriv drops it from
/// the inheritable and bounding sets before exec).
fn read_without_ptrace_cap(pid: u32) -> bool {
    Command::new("setpriv")
        .args([
            "--inh-caps=-all",
            "--bounding-set=-sys_ptrace",
            "--",
            "dd",
            "bs=1",
            "count=0",
        ])
        .arg(format!("if=/proc/{pid}/mem"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn without_cap_sys_ptrace_the_keep_cannot_be_inspected() {
    need!(root);
    need!(tool "setpriv");
    // Control: an ordinary (dumpable) process without capabilities, like
    // the keep after it drops them, can be inspected.
    let mut plain = Command::new("setpriv")
        .args([
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        read_without_ptrace_cap(plain.id()),
        "control: an ordinary process must be readable"
    );
    let _ = plain.kill();
    let _ = plain.wait();
    let k = runtime();
    assert_eq!(
        status_field(k.pid(), "CapEff:"),
        "0000000000000000",
        "the keep kept capabilities"
    );
    assert!(
        !read_without_ptrace_cap(k.pid() as u32),
        "the keep was readable without CAP_SYS_PTRACE"
    );
    k.destroy().unwrap();
}

#[test]
fn a_forbidden_syscall_kills_the_keep() {
    let sp = spawn::spawn(spawn::SpawnConfig {
        env: vec![(
            cryptkeep_keep::service::SELFTEST_ENV.into(),
            "forbidden-syscall".into(),
        )],
        ..spawn::SpawnConfig::new(BIN, ["__keep", "runtime"])
    })
    .unwrap();
    let mut child = sp.child;
    assert!(matches!(recv_hello(&sp.control), Ok(Hello::Ready { .. })));
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGSYS), "keep ended with {st:?}");
}

#[test]
fn timed_repeats_run_inside_the_keep() {
    // The runtime keep's heap is secret memory: RSA keys are made there.
    let k = runtime();
    k.rsa_generate().unwrap();
    let mut rsa_ct = Vec::new();
    for (op, input, cap) in [
        (proto::OP_SHA256, &b"abc"[..], 64usize),
        (proto::OP_GCM_ENCRYPT, &b"23 bytes of plain text!"[..], 64),
        (proto::OP_RSA_GENERATE, &b""[..], 1024),
        (proto::OP_RSA_ENCRYPT, &b"23 bytes of plain text!"[..], 512),
    ] {
        let mut buf = vec![0u8; 4 + cap];
        buf[..4].copy_from_slice(&op.to_le_bytes());
        buf[4..4 + input.len()].copy_from_slice(input);
        let n = k.call(proto::OP_REPEAT, 2, &mut buf, 4 + input.len());
        assert_eq!(
            n.as_ref().ok(),
            Some(&16),
            "repeat of {}: {n:?}",
            proto::op_name(op)
        );
        let done = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        assert_eq!(done, 2);
        // Key generation replaced the key: encrypt for the decrypt case now.
        rsa_ct = k.rsa_encrypt(b"x").unwrap();
    }
    let mut buf = vec![0u8; 4 + 512];
    buf[..4].copy_from_slice(&proto::OP_RSA_DECRYPT.to_le_bytes());
    buf[4..4 + rsa_ct.len()].copy_from_slice(&rsa_ct);
    assert_eq!(
        k.call(proto::OP_REPEAT, 2, &mut buf, 4 + rsa_ct.len())
            .unwrap(),
        16
    );
    // Repeats of repeats and absurd counts are refused.
    let mut buf = vec![0u8; 64];
    buf[..4].copy_from_slice(&proto::OP_REPEAT.to_le_bytes());
    assert!(k.call(proto::OP_REPEAT, 2, &mut buf, 4).is_err());
    buf[..4].copy_from_slice(&proto::OP_NULL.to_le_bytes());
    assert!(k.call(proto::OP_REPEAT, u64::MAX, &mut buf, 4).is_err());
    k.destroy().unwrap();
}

/// The wire status of `op` with an empty request (`None`: it was answered).
fn status_of(k: &ProcessKeep, op: u32) -> Option<u32> {
    let mut buf = vec![0u8; 4096];
    match k.call(op, 0, &mut buf, 0) {
        Ok(_) => None,
        Err(cryptkeep_keep::Error::Refused { status, .. }) => Some(status),
        Err(e) => panic!("{}: {e}", proto::op_name(op)),
    }
}

/// Every operation code outside `own` is refused as unsupported; none in
/// `own` is; the keep stays up throughout and reports its kind.
fn answers_only(k: ProcessKeep, kind: &str, own: &[u32], facts: &[(String, String)]) {
    assert!(
        facts.iter().any(|(f, v)| f == "keep" && v == kind),
        "{facts:?}"
    );
    assert!(
        facts
            .iter()
            .any(|(f, v)| f == "heap" && v == "memfd_secret (Rust and AWS-LC)"),
        "{facts:?}"
    );
    for op in (0..64).chain([99, 1000, u32::MAX]) {
        let s = status_of(&k, op);
        if own.contains(&op) {
            assert_ne!(
                s,
                Some(proto::STATUS_UNSUPPORTED),
                "{kind} keep refused its own {}",
                proto::op_name(op)
            );
        } else {
            assert_eq!(
                s,
                Some(proto::STATUS_UNSUPPORTED),
                "{kind} keep answered {} ({op})",
                proto::op_name(op)
            );
        }
    }
    k.null_call().unwrap();
    k.destroy().unwrap();
}

fn run_ok(args: &[&str]) {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn each_kind_of_keep_answers_only_its_own_operations() {
    need!(root);
    let dir = std::env::temp_dir().join(format!("ck-kinds.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = |n: &str| dir.join(n).to_str().unwrap().to_string();
    std::fs::write(dir.join("key"), random(64)).unwrap();
    std::fs::write(dir.join("pass"), "a password\n").unwrap();

    // A volume keep that unlocked a real LUKS2 volume from its key file.
    run_ok(&[
        "format",
        &d("vol"),
        "--size",
        "20M",
        "--key-file",
        &d("key"),
        "--pbkdf",
        "pbkdf2",
        "--iter-time",
        "10",
        "--batch-mode",
    ]);
    let (k, facts) = ProcessKeep::spawn(spawn::SpawnConfig::new(
        BIN,
        ["__keep", "volume", &d("vol"), "--key-file", &d("key")],
    ))
    .expect("volume keep starts");
    answers_only(k, "volume", proto::VOLUME_OPS, &facts);

    // An overlay keep that unlocked a gocryptfs-format directory.
    std::fs::create_dir_all(dir.join("cipher")).unwrap();
    run_ok(&[
        "fs",
        "init",
        &d("cipher"),
        "--scryptn",
        "10",
        "--passfile",
        &d("pass"),
    ]);
    let conf = dir.join("cipher/gocryptfs.conf");
    let (k, facts) = ProcessKeep::spawn(spawn::SpawnConfig::new(
        BIN,
        [
            "__keep",
            "overlay",
            &d("cipher"),
            "--config",
            conf.to_str().unwrap(),
            "--passfile",
            &d("pass"),
        ],
    ))
    .expect("overlay keep starts");
    // Its pinned workers (one CPU each) are real-time where the kernel
    // allows it (root), its floating ones ordinary.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: geteuid(2) takes no arguments.
    if cpus > 1 && unsafe { libc::geteuid() } == 0 {
        let pid = k.pid();
        let tids = crate::common::keep_worker_tids(pid);
        let policies = worker_policies(pid);
        assert_eq!(tids.len(), policies.len());
        let (mut pinned, mut floating) = (0, 0);
        for (t, policy) in tids.iter().zip(policies) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status")).unwrap();
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap()
                .trim()
                .to_string();
            if allowed.parse::<u32>().is_ok() {
                assert_eq!(policy, (libc::SCHED_FIFO as u32, 1), "pinned worker {t}");
                pinned += 1;
            } else {
                assert_eq!(policy, (0, 0), "floating worker {t} ({allowed})");
                floating += 1;
            }
        }
        assert!(
            pinned > 0 && floating > 0,
            "{pinned} pinned, {floating} floating"
        );
    }
    answers_only(k, "overlay", proto::OVERLAY_OPS, &facts);

    // The runtime keep: everything else, but no sector or file-system crypto.
    let (k, facts) =
        ProcessKeep::spawn(spawn::SpawnConfig::new(BIN, ["__keep", "runtime"])).unwrap();
    answers_only(k, "runtime", proto::RUNTIME_OPS, &facts);
    let _ = std::fs::remove_dir_all(&dir);
}
