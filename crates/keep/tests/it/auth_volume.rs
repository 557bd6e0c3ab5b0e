//! The keep of an authenticated volume, as a real process: this test
//! binary re-executes itself as a volume keep (`server::run_volume` with an
//! `AuthVolumeKey`, or a plain `VolumeKey` for comparison) and talks to it
//! through `KeepAuthCrypt` and raw requests. What the keep seals opens
//! here with the same key and the other way round; a flipped bit in a
//! sector or its tuple is reported as exactly that sector, also past the
//! first request of a batch; malformed requests are refused and the keep
//! serves on; each kind of volume keep refuses the other's operations; a
//! dead keep is `KeepGone`.

use std::sync::Arc;

use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_crypto::{CipherSpec, SecretBytes};
use cryptkeep_keep::auth_crypt::KeepAuthCrypt;
use cryptkeep_keep::keep::{Keep, ProcessKeep};
use cryptkeep_keep::proto::*;
use cryptkeep_keep::server::{self, AuthVolumeKey, VolumeKey};
use cryptkeep_keep::spawn::SpawnConfig;
use cryptkeep_keep::Error;
use cryptkeep_testkit::need;
use cryptkeep_volume::{AuthCrypt, Error as VolumeError};

const KIND_ENV: &str = "KEEP_AUTH_VOLUME_CHILD";
const SECTOR: usize = 4096;
/// Deterministic (IV from the sector number): the keep's output must be
/// byte for byte the in-process one.
const XTS_HMAC: (&str, &str) = ("aes-xts-plain64", "hmac(sha256)");
/// Random IVs, stored in the tuple.
const GCM: (&str, &str) = ("aes-gcm-random", "aead");

fn spec_of(kind: &str) -> AuthSpec {
    let (e, i) = if kind == "gcm" { GCM } else { XTS_HMAC };
    AuthSpec::parse(e, i).unwrap()
}

/// The key both sides use: fixed bytes of the mode's default size.
fn key_of(spec: &AuthSpec) -> Vec<u8> {
    (0..spec.default_key_bytes())
        .map(|i| (i * 29 + 7) as u8)
        .collect()
}

/// Entry point of the keep processes; does nothing in a normal run.
#[test]
fn child() {
    let Ok(kind) = std::env::var(KIND_ENV) else {
        return;
    };
    let cfg = server::ServerConfig {
        // This binary installs no secret heap (see tests/server.rs for a
        // host that does).
        rust_heap: server::RustHeap::Ordinary,
        workers: 2,
        ..server::ServerConfig::default()
    };
    let r = if kind == "plain" {
        server::run_volume(cfg, || {
            VolumeKey::random(CipherSpec::parse("aes-xts-plain64").unwrap(), 512, SECTOR)
        })
    } else {
        server::run_volume(cfg, || {
            let spec = spec_of(&kind);
            Ok(AuthVolumeKey {
                key: SecretBytes::from_slice(&key_of(&spec)),
                spec,
                sector_size: SECTOR,
                place: "test".into(),
                facts: vec![("unlocked", "a test key".into())],
            })
        })
    };
    std::process::exit(r.map_or_else(|f| f.code, |()| 0));
}

fn spawn(kind: &str) -> (ProcessKeep, Vec<(String, String)>) {
    let mut cfg = SpawnConfig::new(
        std::env::current_exe().unwrap(),
        [
            "--exact",
            "auth_volume::child",
            "--nocapture",
            "--test-threads=1",
        ],
    );
    cfg.env.push((KIND_ENV.into(), kind.into()));
    ProcessKeep::spawn(cfg).unwrap()
}

/// A keep of mode `kind`, its client seam and the same mode in process.
fn auth_keep(kind: &str) -> (Arc<ProcessKeep>, KeepAuthCrypt, SectorAead) {
    let (k, facts) = spawn(kind);
    let spec = spec_of(kind);
    let integrity = facts.iter().find(|(f, _)| f == "integrity");
    assert_eq!(
        integrity.map(|(_, v)| v.as_str()),
        Some(format!("{} {}", spec.encryption(), spec.integrity()).as_str()),
        "{facts:?}"
    );
    let k = Arc::new(k);
    let crypt = KeepAuthCrypt::new(k.clone(), SECTOR, spec.tuple_bytes()).unwrap();
    let local = SectorAead::new(&spec, &key_of(&spec), SECTOR).unwrap();
    (k, crypt, local)
}

fn destroy(k: Arc<ProcessKeep>) {
    Arc::into_inner(k)
        .expect("the last reference")
        .destroy()
        .unwrap();
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

/// Sectors per request for this keep: more than this in one batch is
/// split.
fn per_request(k: &ProcessKeep, ts: usize) -> usize {
    let room = k.slot_len();
    let mut n = room / (SECTOR + ts);
    while open_reply_len(n, SECTOR, ts).unwrap() > room {
        n -= 1;
    }
    n
}

fn round_trips(kind: &str) {
    let (k, crypt, local) = auth_keep(kind);
    let ts = crypt.tuple_size();
    assert_eq!(crypt.sector_size(), SECTOR);
    // Three requests' worth and a bit, so the batch is split.
    let n = per_request(&k, ts) * 3 + 5;
    let plain = pattern(n * SECTOR, 1);
    let first = 1000u64;

    // Sealed in the keep, opened here.
    let mut data = plain.clone();
    let mut tuples = vec![0u8; n * ts];
    crypt.seal(first, &mut data, &mut tuples).unwrap();
    assert_ne!(data, plain);
    let sealed = (data.clone(), tuples.clone());
    assert_eq!(
        local.open(first, &mut data, &tuples).unwrap(),
        Vec::<usize>::new()
    );
    assert_eq!(data, plain);

    // Sealed here, opened in the keep.
    let mut data = plain.clone();
    let mut local_tuples = vec![0u8; n * ts];
    local.seal(first, &mut data, &mut local_tuples).unwrap();
    if spec_of(kind).iv_bytes() == 0 {
        // Deterministic: the same bytes on both sides.
        assert!(sealed.0 == data, "ciphertexts differ");
        assert!(sealed.1 == local_tuples, "tuples differ");
    }
    assert_eq!(
        crypt.open(first, &mut data, &local_tuples).unwrap(),
        Vec::<usize>::new()
    );
    assert_eq!(data, plain);

    // Sealed from a separate source and opened from a fill callback (the
    // paths that read and write straight through the keep's buffers):
    // the same result, batch by batch, across request boundaries.
    let mut into = vec![0u8; n * SECTOR];
    let mut into_tuples = vec![0u8; n * ts];
    crypt
        .seal_into(first, &plain, &mut into, &mut into_tuples)
        .unwrap();
    if spec_of(kind).iv_bytes() == 0 {
        assert!(into == sealed.0 && into_tuples == sealed.1);
    }
    let mut out = vec![0u8; n * SECTOR];
    let mut calls = Vec::new();
    let failed = crypt
        .open_from(first, &mut out, &mut |i, d, t| {
            calls.push((i, d.len() / SECTOR));
            d.copy_from_slice(&into[i * SECTOR..i * SECTOR + d.len()]);
            t.copy_from_slice(&into_tuples[i * ts..i * ts + t.len()]);
            Ok(())
        })
        .unwrap();
    assert_eq!(failed, Vec::<usize>::new());
    assert!(out == plain, "open_from gave other bytes");
    assert!(calls.len() >= 4, "one request per batch: {calls:?}");
    assert_eq!(calls.iter().map(|c| c.1).sum::<usize>(), n);
    into[(n - 2) * SECTOR + 9] ^= 4;
    let failed = crypt
        .open_from(first, &mut out, &mut |i, d, t| {
            d.copy_from_slice(&into[i * SECTOR..i * SECTOR + d.len()]);
            t.copy_from_slice(&into_tuples[i * ts..i * ts + t.len()]);
            Ok(())
        })
        .unwrap();
    assert_eq!(failed, vec![n - 2]);
    assert!(out[(n - 2) * SECTOR..(n - 1) * SECTOR]
        .iter()
        .all(|&b| b == 0));

    // The sector number is bound: the same bytes at another place fail.
    let (mut data, tuples) = sealed;
    let failed = crypt.open(first + 1, &mut data[..SECTOR], &tuples[..ts]);
    assert_eq!(failed.unwrap(), vec![0]);
    assert!(data[..SECTOR].iter().all(|&b| b == 0));

    // Empty batches are fine; broken geometry never reaches the keep.
    crypt.seal(0, &mut [], &mut []).unwrap();
    assert_eq!(crypt.open(0, &mut [], &[]).unwrap(), Vec::<usize>::new());
    for (d, t) in [
        (SECTOR - 1, 0),
        (SECTOR, ts + 1),
        (SECTOR, ts - 1),
        (2 * SECTOR, ts),
    ] {
        let mut data = vec![0u8; d];
        let mut tuples = vec![0u8; t];
        assert!(matches!(
            crypt.seal(0, &mut data, &mut tuples),
            Err(VolumeError::Crypt(_))
        ));
        assert!(matches!(
            crypt.open(0, &mut data, &tuples),
            Err(VolumeError::Crypt(_))
        ));
    }
    drop(crypt);
    destroy(k);
}

#[test]
fn deterministic_mode_seals_in_the_keep_as_here() {
    need!(root);
    round_trips("xts_hmac");
}

#[test]
fn random_iv_mode_seals_in_the_keep_and_opens_here() {
    need!(root);
    round_trips("gcm");
}

#[test]
fn a_flipped_bit_names_exactly_its_sector() {
    need!(root);
    for kind in ["gcm", "xts_hmac"] {
        let (k, crypt, _) = auth_keep(kind);
        let ts = crypt.tuple_size();
        let per = per_request(&k, ts);
        let n = per * 2 + 3;
        let plain = pattern(n * SECTOR, 2);
        let mut data = plain.clone();
        let mut tuples = vec![0u8; n * ts];
        crypt.seal(7, &mut data, &mut tuples).unwrap();
        // First, last, and either side of the first split.
        for i in [0, per - 1, per, per + 1, n - 1] {
            for in_tuple in [false, true] {
                let (mut d, mut t) = (data.clone(), tuples.clone());
                if in_tuple {
                    t[i * ts + (i % ts)] ^= 0x10;
                } else {
                    d[i * SECTOR + 123] ^= 0x01;
                }
                let failed = crypt.open(7, &mut d, &t).unwrap();
                assert_eq!(failed, vec![i], "{kind}: sector {i}, tuple {in_tuple}");
                for (j, s) in d.chunks(SECTOR).enumerate() {
                    if j == i {
                        assert!(s.iter().all(|&b| b == 0), "{kind}: sector {i} not zeroed");
                    } else {
                        assert!(
                            s == &plain[j * SECTOR..(j + 1) * SECTOR],
                            "{kind}: sector {j}"
                        );
                    }
                }
            }
        }
        // Several at once, in two requests.
        let (mut d, mut t) = (data.clone(), tuples.clone());
        d[3 * SECTOR] ^= 0x80;
        t[(per + 2) * ts] ^= 0x80;
        assert_eq!(crypt.open(7, &mut d, &t).unwrap(), vec![3, per + 2]);
        drop(crypt);
        destroy(k);
    }
}

/// One raw request on a slot: `in_len` input bytes, `cap` bytes of room.
fn raw(k: &ProcessKeep, op: u32, arg: u64, in_len: usize, cap: usize) -> Result<usize, Error> {
    let mut r = Err(Error::Gone);
    k.with_slot(&mut |slot| {
        slot.buf()[..cap].fill(0xa5);
        r = slot.call_cap(op, arg, 0, cap, in_len);
        Ok(())
    })
    .unwrap();
    r
}

fn status(r: Result<usize, Error>) -> u32 {
    match r {
        Err(Error::Refused { status, .. }) => status,
        r => panic!("not refused: {r:?}"),
    }
}

#[test]
fn malformed_requests_are_refused_and_the_keep_serves_on() {
    need!(root);
    let (k, crypt, _) = auth_keep("gcm");
    let ts = crypt.tuple_size();
    let pair = SECTOR + ts;
    let slot = k.slot_len();
    let bad = STATUS_BAD_DESCRIPTOR;
    for op in [OP_SEAL_SECTORS, OP_OPEN_SECTORS] {
        // Not whole (sector, tuple) pairs.
        for in_len in [1, SECTOR, pair - 1, pair + 1, 2 * pair + SECTOR] {
            assert_eq!(status(raw(&k, op, 0, in_len, slot)), bad, "{in_len}");
        }
        // Sectors past the end of the sector space.
        for first in [u64::MAX, u64::MAX - 1, u64::MAX / 8] {
            assert_eq!(status(raw(&k, op, first, pair, slot)), bad, "{first}");
        }
    }
    // Open needs room for its bitmap.
    for n in [1, 8, 9] {
        let in_len = n * pair;
        assert_eq!(status(raw(&k, OP_OPEN_SECTORS, 0, in_len, in_len)), bad);
        let cap = open_reply_len(n, SECTOR, ts).unwrap();
        assert_eq!(status(raw(&k, OP_OPEN_SECTORS, 0, in_len, cap - 1)), bad);
        // Garbage opens as garbage: every sector flagged, an answer.
        assert_eq!(raw(&k, OP_OPEN_SECTORS, 0, in_len, cap).unwrap(), cap);
    }
    // The whole slot of garbage: an answer too.
    let n = slot / pair;
    let mut n_fit = n;
    while open_reply_len(n_fit, SECTOR, ts).unwrap() > slot {
        n_fit -= 1;
    }
    assert_eq!(
        raw(&k, OP_SEAL_SECTORS, 0, n * pair, slot).unwrap(),
        n * pair
    );
    let reply = open_reply_len(n_fit, SECTOR, ts).unwrap();
    // Asked and read in one lease: another lease may be another queue's
    // slot (the queue follows the CPU the thread runs on).
    let slot_len = slot;
    k.with_slot(&mut |slot| {
        slot.buf()[..slot_len].fill(0xa5);
        let got = slot.call_cap(OP_OPEN_SECTORS, 0, 0, slot_len, n_fit * pair);
        assert_eq!(got.unwrap(), reply);
        let b = slot.buf();
        let bitmap = &b[n_fit * pair..reply];
        for i in 0..n_fit {
            assert_ne!(
                bitmap[i / 8] & (1 << (i % 8)),
                0,
                "garbage sector {i} passed"
            );
        }
        assert!(b[..n_fit * SECTOR].iter().all(|&x| x == 0));
        Ok(())
    })
    .unwrap();
    // Descriptors outside queue 1's slot, or input longer than the room.
    let slot_bytes = k.client().max_request() as u64;
    let p = pair as u32;
    for (off, in_len, cap) in [
        (2 * slot_bytes, p, p),
        (0, p, p),
        (2 * slot_bytes - 8, p, p),
        (u64::MAX - 4, 0, 16),
        (slot_bytes, p, p - 1),
    ] {
        let (st, n) = k
            .client()
            .submit_raw(1, OP_OPEN_SECTORS, 0, off, in_len, cap)
            .unwrap();
        assert_eq!((st, n), (bad, 0), "{off}");
    }
    // Still serving, and still right.
    let plain = pattern(4 * SECTOR, 3);
    let mut data = plain.clone();
    let mut tuples = vec![0u8; 4 * ts];
    crypt.seal(5, &mut data, &mut tuples).unwrap();
    assert_eq!(
        crypt.open(5, &mut data, &tuples).unwrap(),
        Vec::<usize>::new()
    );
    assert_eq!(data, plain);
    drop(crypt);
    destroy(k);
}

#[test]
fn each_volume_keep_refuses_the_other_kinds_sector_crypto() {
    need!(root);
    let (k, crypt, _) = auth_keep("gcm");
    for op in [OP_ENCRYPT_SECTORS, OP_DECRYPT_SECTORS] {
        let mut b = vec![0u8; SECTOR];
        let r = k.call(op, 0, &mut b, SECTOR);
        assert_eq!(status(r), STATUS_UNSUPPORTED, "{}", op_name(op));
    }
    k.call(OP_NULL, 0, &mut [], 0).unwrap();
    drop(crypt);
    destroy(k);

    let (k, facts) = spawn("plain");
    assert!(!facts.iter().any(|(f, _)| f == "integrity"), "{facts:?}");
    let k = Arc::new(k);
    let pair = SECTOR + 28;
    for op in [OP_SEAL_SECTORS, OP_OPEN_SECTORS] {
        let r = raw(&k, op, 0, pair, pair + 1);
        assert_eq!(status(r), STATUS_UNSUPPORTED, "{}", op_name(op));
    }
    // Through the seam: an error, not a silent pass.
    let crypt = KeepAuthCrypt::new(k.clone(), SECTOR, 28).unwrap();
    let mut data = vec![0u8; SECTOR];
    assert!(matches!(
        crypt.seal(0, &mut data, &mut [0u8; 28]),
        Err(VolumeError::Crypt(_))
    ));
    assert!(matches!(
        crypt.open(0, &mut data, &[0u8; 28]),
        Err(VolumeError::Crypt(_))
    ));
    drop(crypt);
    destroy(k);
}

#[test]
fn a_dead_keep_is_keep_gone() {
    need!(root);
    let (k, crypt, _) = auth_keep("gcm");
    let ts = crypt.tuple_size();
    let mut data = vec![0u8; 2 * SECTOR];
    let mut tuples = vec![0u8; 2 * ts];
    crypt.seal(0, &mut data, &mut tuples).unwrap();
    // SAFETY: killing our own child.
    assert_eq!(unsafe { libc::kill(k.pid(), libc::SIGKILL) }, 0);
    let t = std::time::Instant::now();
    loop {
        match crypt.open(0, &mut data, &tuples) {
            Err(VolumeError::KeepGone) => break,
            Ok(_) if t.elapsed() < std::time::Duration::from_secs(2) => continue,
            r => panic!("after SIGKILL: {r:?}"),
        }
    }
    assert!(matches!(
        crypt.seal(0, &mut data, &mut tuples),
        Err(VolumeError::KeepGone)
    ));
    drop(crypt);
    destroy(k);
}

#[test]
fn a_seam_needs_room_for_one_sector() {
    need!(root);
    let (k, crypt, _) = auth_keep("gcm");
    let room = k.slot_len();
    assert!(matches!(
        KeepAuthCrypt::new(k.clone(), room, 1),
        Err(VolumeError::Crypt(_))
    ));
    assert!(matches!(
        KeepAuthCrypt::new(k.clone(), 0, 28),
        Err(VolumeError::Crypt(_))
    ));
    drop(crypt);
    destroy(k);
}
