//! Fuzzing of the LUKS1 and LUKS2 header parsers, as a plain test on stable
//! Rust: a mutational loop over valid headers for a bounded time. Each case
//! edits a header the way a hostile image would — a field set to an
//! interesting value (0, 1, a power of two, all ones, just past a limit),
//! random bytes, LUKS2 JSON leaves replaced or removed with the checksums
//! fixed so the validator is reached — then loads it and, when it loads,
//! runs everything a read-only command does plus a keyslot add and remove.
//!
//! What must hold for every case:
//! - no panic, no abort;
//! - no single allocation above [`ALLOC_LIMIT`] (a global allocator counts
//!   them): every size taken from a header is bounded before allocating;
//! - loading never writes, and a refused keyslot add or remove writes
//!   nothing (every check comes before the first write).
//!
//! `CRYPTKEEP_FUZZ_SECS` (default 4 per test) sets the time budget and
//! `CRYPTKEEP_FUZZ_SEED` the first seed; a failure names the seed and case,
//! which replay with `CRYPTKEEP_FUZZ_SEED=S CRYPTKEEP_FUZZ_CASE=N`. The
//! longer run is documented in docs/testing.md.

// A binary of its own: its global allocator counts every allocation of the
// process, which the other header tests would disturb.
#[path = "it/common.rs"]
#[allow(dead_code, unused_imports)]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use cryptkeep_crypto::{Backend, HashAlg, Pbkdf};
use cryptkeep_luks::{backup, Error, Luks, LuksVersion, MemIo};
use cryptkeep_testkit::Rng;
use serde_json::Value;

/// Largest single allocation a header may cause: the 4 MiB LUKS2 metadata
/// limit and 1 MiB copy chunks fit with room to spare; a size taken from a
/// header unchecked does not.
const ALLOC_LIMIT: usize = 64 << 20;

/// Counts allocations above [`ALLOC_LIMIT`]; refuses (so the test aborts
/// with "memory allocation failed") any above 1 GiB.
struct Bounded;

static OVERSIZE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged, except
// that a request above 1 GiB returns null, which GlobalAlloc permits.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_LIMIT {
            OVERSIZE.fetch_max(l.size(), Ordering::Relaxed);
            if l.size() > 1 << 30 {
                return std::ptr::null_mut();
            }
        }
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_LIMIT {
            OVERSIZE.fetch_max(l.size(), Ordering::Relaxed);
            if l.size() > 1 << 30 {
                return std::ptr::null_mut();
            }
        }
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from System with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > ALLOC_LIMIT {
            OVERSIZE.fetch_max(new, Ordering::Relaxed);
            if new > 1 << 30 {
                return std::ptr::null_mut();
            }
        }
        // SAFETY: `p` came from System with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Bounded = Bounded;

/// Picks from [`Rng`] (deterministic, so a failing case replays).
trait Pick {
    /// An index in `0..n`, 0 when `n` is 0.
    fn pick(&mut self, n: usize) -> usize;
    /// A value worth trying for an integer field of `bits` bits.
    fn interesting(&mut self, bits: u32, current: u64) -> u64;
}

impl Pick for Rng {
    fn pick(&mut self, n: usize) -> usize {
        self.index(n.max(1))
    }
    fn interesting(&mut self, bits: u32, current: u64) -> u64 {
        let max = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let v = match self.pick(12) {
            0 => 0,
            1 => 1,
            2 => max,
            3 => max / 2,
            4 => max / 2 + 1,
            5 => 1u64 << self.pick(bits as usize),
            6 => (1u64 << self.pick(bits as usize)).wrapping_sub(1),
            7 => current.wrapping_add(1 + self.pick(8) as u64),
            8 => current.wrapping_sub(1 + self.pick(8) as u64),
            9 => current.wrapping_mul(2),
            10 => [8, 512, 4096, 4000, 16384, 1 << 20, 1 << 24, 33, 48][self.pick(9)],
            _ => self.next(),
        };
        v & max
    }
}

/// Small images keep the loop fast: LUKS2 with a 256 KiB keyslots area
/// (data at 1 MiB) and a second keyslot, LUKS1 with its 2 MiB payload.
fn image(version: LuksVersion) -> Vec<u8> {
    let v2 = version == LuksVersion::V2;
    let io = MemIo::new(if v2 { 2 << 20 } else { 3 << 20 });
    let mut o = opts(version, "aes-xts-plain64", 64, if v2 { 4096 } else { 512 });
    if v2 {
        o.luks2_keyslots_size = Some(768 << 10);
    }
    let mut l = Luks::format(&io, &o, &KEY, b"p", &pbkdf2(), Backend::Portable).unwrap();
    l.add_keyslot(&io, &KEY, b"q", None, &pbkdf2(), Backend::Portable)
        .unwrap();
    io.to_vec()
}

const KEY: [u8; 64] = [7; 64];

fn fix_csum(img: &mut [u8], base: usize) {
    let hdr_size = u64::from_be_bytes(img[base + 8..base + 16].try_into().unwrap());
    let hdr_size = (hdr_size.min((img.len() - base) as u64) as usize).max(512);
    let mut copy = img[base..base + hdr_size].to_vec();
    copy[448..512].fill(0);
    let sum = HashAlg::Sha256.digest(&copy);
    img[base + 448..base + 512].fill(0);
    img[base + 448..base + 480].copy_from_slice(&sum);
}

/// (offset, width in bytes) of every LUKS1 integer field: version,
/// payload-offset, key-bytes, mk-digest-iter, and per keyslot active,
/// iterations, key-material-offset, stripes.
fn luks1_fields() -> Vec<(usize, usize)> {
    let mut f = vec![(6, 2), (104, 4), (108, 4), (168, 4)];
    for s in 0..8 {
        let b = 208 + 48 * s;
        f.extend([(b, 4), (b + 4, 4), (b + 40, 4), (b + 44, 4)]);
    }
    f
}

fn put_be(img: &mut [u8], off: usize, width: usize, v: u64) {
    let bytes = v.to_be_bytes();
    img[off..off + width].copy_from_slice(&bytes[8 - width..]);
}

fn get_be(img: &[u8], off: usize, width: usize) -> u64 {
    let mut b = [0u8; 8];
    b[8 - width..].copy_from_slice(&img[off..off + width]);
    u64::from_be_bytes(b)
}

fn mutate_luks1(rng: &mut Rng, img: &mut [u8]) {
    let fields = luks1_fields();
    for _ in 0..=rng.pick(3) {
        match rng.pick(4) {
            0 | 1 => {
                let (off, w) = fields[rng.pick(fields.len())];
                let v = rng.interesting(8 * w as u32, get_be(img, off, w));
                put_be(img, off, w, v);
            }
            2 => {
                // Strings: cipher name, mode, hash spec, UUID.
                let (off, len) = [(8, 32), (40, 32), (72, 32), (112, 40)][rng.pick(4)];
                let pos = off + rng.pick(len);
                img[pos] = [0, b'-', b':', 0xff, b'a', b'x'][rng.pick(6)];
            }
            _ => {
                let pos = rng.pick(592);
                img[pos] = rng.next() as u8;
            }
        }
    }
}

/// Every leaf of `v` as a JSON pointer.
fn leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            out.push(at.clone());
            for (k, x) in m {
                leaves(x, format!("{at}/{k}"), out);
            }
        }
        Value::Array(a) => {
            out.push(at.clone());
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

fn json_value(rng: &mut Rng, old: &Value) -> Value {
    let n = match old {
        Value::String(s) => s.parse::<u64>().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    };
    let num = rng.interesting(64, n.unwrap_or(0));
    match rng.pick(10) {
        0..=3 if matches!(old, Value::String(_)) => Value::String(num.to_string()),
        0..=3 => Value::from(num),
        4 => Value::from(rng.interesting(32, n.unwrap_or(0))),
        5 => Value::String("18446744073709551616".into()),
        6 => Value::from(-1),
        7 => Value::String(String::new()),
        8 => serde_json::json!([]),
        _ => Value::Null,
    }
}

fn mutate_luks2(rng: &mut Rng, img: &mut [u8]) {
    const HDR: usize = 16384;
    let area = &img[4096..HDR];
    let end = area.iter().position(|&b| b == 0).unwrap_or(area.len());
    let mut v: Value = match serde_json::from_slice(&area[..end]) {
        Ok(v) => v,
        Err(_) => return,
    };
    let mut bin_edits = Vec::new();
    let mut raw_json = false;
    for _ in 0..=rng.pick(3) {
        match rng.pick(8) {
            0..=3 => {
                let mut all = Vec::new();
                leaves(&v, String::new(), &mut all);
                let p = all[rng.pick(all.len())].clone();
                if p.is_empty() {
                    continue;
                }
                let old = v.pointer(&p).cloned().unwrap_or(Value::Null);
                let new = json_value(rng, &old);
                *v.pointer_mut(&p).unwrap() = new;
            }
            4 => {
                // Remove a member.
                let mut all = Vec::new();
                leaves(&v, String::new(), &mut all);
                let p = all[rng.pick(all.len())].clone();
                if let Some((parent, key)) = p.rsplit_once('/') {
                    if let Some(Value::Object(m)) = v.pointer_mut(parent) {
                        m.remove(key);
                    }
                }
            }
            5 => {
                // Binary header: hdr_size, seqid, hdr_offset, version.
                let (off, w) = [(8, 8), (16, 8), (256, 8), (6, 2)][rng.pick(4)];
                let val = rng.interesting(8 * w as u32, get_be(img, off, w));
                bin_edits.push((off, w, val));
            }
            6 => {
                // Copy a keyslot to another id (overlaps, duplicates).
                if let Some(ks) = v["keyslots"]["0"].clone().as_object().cloned() {
                    let id = rng.pick(40).to_string();
                    v["keyslots"][id.as_str()] = Value::Object(ks);
                }
            }
            _ => raw_json = true,
        }
    }
    let mut text = serde_json::to_vec(&v).unwrap();
    if raw_json && !text.is_empty() {
        let pos = rng.pick(text.len());
        let specials = b"{}[]\":,0123456789-e\\ \xff";
        text[pos] = specials[rng.pick(specials.len())];
    }
    text.truncate(HDR - 4096 - 1);
    for base in [0, HDR] {
        let area = &mut img[base + 4096..base + HDR];
        area.fill(0);
        area[..text.len()].copy_from_slice(&text);
        for &(off, w, val) in &bin_edits {
            // Mostly both copies alike, sometimes only the primary.
            if base == 0 || rng.pick(3) != 0 {
                put_be(img, base + off, w, val);
            }
        }
        fix_csum(img, base);
    }
}

/// Whether unlocking with this KDF costs little enough to try in a loop.
fn cheap(k: &Option<Pbkdf>) -> bool {
    match k {
        Some(Pbkdf::Pbkdf2 { iterations, .. }) => *iterations <= 20_000,
        Some(Pbkdf::Argon2i {
            time, memory_kib, ..
        })
        | Some(Pbkdf::Argon2id {
            time, memory_kib, ..
        }) => u64::from(*time) * u64::from(*memory_kib) <= 1 << 16,
        _ => true,
    }
}

/// Loads a mutated image and does everything a command may do with it.
/// Returns a failure description, if any property broke.
fn exercise(img: &[u8]) -> Option<String> {
    let io = MemIo::from_vec(img.to_vec());
    let loaded = match Luks::load(&io) {
        Ok(l) => l,
        Err(e) => {
            if e.to_string().is_empty() {
                return Some("empty error message".into());
            }
            return (io.to_vec() != img).then(|| "load wrote to the device".into());
        }
    };
    if io.to_vec() != img {
        return Some("load wrote to the device".into());
    }
    let luks = loaded.luks;
    let _ = luks.dump();
    let _ = luks.dump_json();
    let _ = luks.segment();
    let _ = luks.check_attached();
    if luks.header_len() > img.len() as u64 {
        return Some(format!(
            "header_len {} is past the device end {}",
            luks.header_len(),
            img.len()
        ));
    }
    let out = MemIo::new(backup::backup_len(&luks) as usize);
    if let Err(e) = backup::write_backup(&luks, &io, &out) {
        return Some(format!("backup failed: {e}"));
    }
    let slots = luks.keyslots();
    // Unlocking and adding a keyslot check the volume key's digest: with
    // the iterations a hostile header may ask for, that takes hours (as in
    // cryptsetup), which is not what this loop looks for.
    let digest_iterations = match (luks.as_luks1(), luks.as_luks2()) {
        (Some(l), _) => l.phdr.mk_digest_iter,
        (_, Some(l)) => l
            .meta
            .digests
            .values()
            .map(|d| d.iterations)
            .max()
            .unwrap_or(0),
        _ => 0,
    };
    if digest_iterations > 20_000 {
        return None;
    }
    if slots.iter().filter(|s| s.active).all(|s| cheap(&s.kdf)) {
        let _ = luks.unlock(&io, b"wrong", None, Backend::Portable);
        let _ = luks.unlock(&io, b"p", None, Backend::Portable);
    }
    // Keyslot add and remove: refused ones must write nothing.
    let mut l = luks.clone();
    let before = io.to_vec();
    match l.add_keyslot(&io, &KEY, b"r", None, &pbkdf2(), Backend::Portable) {
        Ok(_) => {}
        Err(Error::Io { .. }) => {}
        Err(e) => {
            if io.to_vec() != before {
                return Some(format!("a refused keyslot add wrote to the device: {e}"));
            }
        }
    }
    let mut l = luks.clone();
    let before = io.to_vec();
    if let Some(s) = slots.iter().find(|s| s.active) {
        match l.remove_keyslot(&io, s.slot) {
            Ok(()) | Err(Error::Io { .. }) => {}
            Err(e) => {
                if io.to_vec() != before {
                    return Some(format!("a refused keyslot remove wrote to the device: {e}"));
                }
            }
        }
    }
    None
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn run(version: LuksVersion, default_seed: u64) {
    let base = image(version);
    let secs = env_u64("CRYPTKEEP_FUZZ_SECS").unwrap_or(4);
    let seed = env_u64("CRYPTKEEP_FUZZ_SEED").unwrap_or(default_seed);
    let only = env_u64("CRYPTKEEP_FUZZ_CASE");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut failures = Vec::new();
    let mut case = 0u64;
    while Instant::now() < deadline || only.is_some() {
        if only.is_none_or(|n| n == case) {
            let mut rng = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut img = base.clone();
            match version {
                LuksVersion::V1 => mutate_luks1(&mut rng, &mut img),
                _ => mutate_luks2(&mut rng, &mut img),
            }
            OVERSIZE.store(0, Ordering::Relaxed);
            let t = Instant::now();
            let mut why = exercise(&img);
            if t.elapsed() > Duration::from_secs(2) {
                eprintln!("seed {seed} case {case}: slow ({:?})", t.elapsed());
            }
            let big = OVERSIZE.load(Ordering::Relaxed);
            if big > 0 {
                why = Some(format!("allocated {big} bytes at once"));
            }
            if let Some(w) = why {
                failures.push(format!("seed {seed} case {case}: {w}"));
                if failures.len() >= 5 {
                    break;
                }
            }
            if only.is_some() {
                break;
            }
        }
        case += 1;
    }
    eprintln!("{version:?}: {case} cases from seed {seed}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn luks1_header_fuzz() {
    run(LuksVersion::V1, 0x1u64 << 40 | 0x0be1);
}

#[test]
fn luks2_header_fuzz() {
    run(LuksVersion::V2, 0x2u64 << 40 | 0x0be2);
}
