//! The zero-copy staging path (what the keep's shared slots use) gives the
//! same bytes as the copying path: the same ciphertext on disk for the same
//! writes, the same plaintext for every read, holes read as zeros, and
//! requests larger than a lease fall back to the copying path.

use crate::common::*;

use std::fs::OpenOptions;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cryptkeep_volume::{Engine, Error, InlineCrypt, SectorCrypt, Staging};

const LEASE: usize = 256 * 1024;

/// InlineCrypt with staging leases from a small pool of buffers, counting
/// the requests that used them.
struct Staged {
    inner: InlineCrypt,
    pool: Vec<Mutex<Vec<u8>>>,
    staged_calls: AtomicUsize,
}

struct Lease<'a> {
    buf: &'a mut [u8],
    inner: &'a InlineCrypt,
    calls: &'a AtomicUsize,
}

impl Staging for Lease<'_> {
    fn buf(&mut self) -> &mut [u8] {
        self.buf
    }
    fn encrypt(&mut self, sector: u64, r: Range<usize>) -> Result<(), Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.encrypt(sector, &mut self.buf[r])
    }
    fn decrypt(&mut self, sector: u64, r: Range<usize>) -> Result<(), Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.decrypt(sector, &mut self.buf[r])
    }
}

impl SectorCrypt for Staged {
    fn sector_size(&self) -> usize {
        self.inner.sector_size()
    }
    fn encrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.inner.encrypt(sector, buf)
    }
    fn decrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.inner.decrypt(sector, buf)
    }
    fn staging_len(&self) -> usize {
        LEASE
    }
    fn with_staging(
        &self,
        f: &mut dyn FnMut(&mut dyn Staging) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut i = 0;
        let mut guard = loop {
            if let Ok(g) = self.pool[i % self.pool.len()].try_lock() {
                break g;
            }
            i += 1;
            std::thread::yield_now();
        };
        // Leases come with stale bytes, as shared slots do.
        guard.fill(0xA5);
        let mut lease = Lease {
            buf: &mut guard[..],
            inner: &self.inner,
            calls: &self.staged_calls,
        };
        f(&mut lease)
    }
}

fn staged_engine(path: &std::path::Path, key: &[u8], g: Geo) -> (Engine, Arc<Staged>) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let crypt = Arc::new(Staged {
        inner: InlineCrypt::new(cipher(key), g.sector_size, g.iv_tweak),
        pool: (0..3).map(|_| Mutex::new(vec![0u8; LEASE])).collect(),
        staged_calls: AtomicUsize::new(0),
    });
    let eng = Engine::new(file, g.data_offset, g.data_size, crypt.clone(), false).unwrap();
    (eng, crypt)
}

fn same_writes_same_ciphertext(sector_size: usize) {
    let dir = TempDir::new("staging");
    let (pa, pb) = (dir.join("a.img"), dir.join("b.img"));
    let key = random_key(64);
    let g = Geo {
        sector_size,
        iv_tweak: 5,
        data_offset: 4096,
        data_size: 2 << 20,
        trailer: 512,
    };
    let plain = engine(&pa, &key, g, false, 0x11);
    std::fs::write(
        &pb,
        vec![0x11u8; (g.data_offset + g.data_size + g.trailer) as usize],
    )
    .unwrap();
    let (staged, counter) = staged_engine(&pb, &key, g);
    let size = g.data_size as usize;
    let mut model = vec![0u8; size];
    let mut rng = Rng(0x5eed ^ sector_size as u64);
    rng.fill(&mut model);
    plain.write_at(&model, 0).unwrap();
    staged.write_at(&model, 0).unwrap();
    let mut buf = vec![0u8; 600 * 1024];
    let mut other = vec![0u8; buf.len()];
    for i in 0..300 {
        // Small unaligned, lease-sized and larger-than-a-lease requests.
        let max = [3 * sector_size, LEASE, 600 * 1024][i % 3];
        let len = 1 + rng.below(max as u64) as usize;
        let off = rng.below((size - len) as u64 + 1) as usize;
        if rng.below(2) == 0 {
            rng.fill(&mut buf[..len]);
            plain.write_at(&buf[..len], off as u64).unwrap();
            staged.write_at(&buf[..len], off as u64).unwrap();
            model[off..off + len].copy_from_slice(&buf[..len]);
        } else {
            staged.read_at(&mut buf[..len], off as u64).unwrap();
            plain.read_at(&mut other[..len], off as u64).unwrap();
            assert!(
                buf[..len] == model[off..off + len],
                "staged read {i} differs"
            );
            assert!(
                other[..len] == model[off..off + len],
                "plain read {i} differs"
            );
            // The borrowed read hands out the same bytes from the lease,
            // or declines (requests larger than a lease).
            let mut got = None;
            let r = staged.read_borrowed(off as u64, len, &mut |b| got = Some(b.to_vec()));
            match r {
                Some(r) => {
                    r.unwrap();
                    assert!(
                        got.as_deref() == Some(&model[off..off + len]),
                        "borrowed read {i} differs"
                    );
                }
                None => assert!(
                    len + 2 * sector_size > LEASE,
                    "borrowed read {i} of {len} declined"
                ),
            }
        }
    }
    // At the end of the volume: nothing; across it: the bytes up to it.
    let mut got = None;
    let end = g.data_size;
    staged
        .read_borrowed(end, 10, &mut |b| got = Some(b.len()))
        .unwrap()
        .unwrap();
    assert_eq!(got, Some(0));
    staged
        .read_borrowed(end - 100, 4096, &mut |b| got = Some(b.len()))
        .unwrap()
        .unwrap();
    assert_eq!(got, Some(100));
    plain.flush().unwrap();
    staged.flush().unwrap();
    assert!(
        read_file(&pa) == read_file(&pb),
        "the two paths wrote different ciphertext"
    );
    assert!(
        counter.staged_calls.load(Ordering::Relaxed) > 100,
        "the staging path was not used"
    );
}

#[test]
fn staging_matches_copying_512() {
    same_writes_same_ciphertext(512);
}

#[test]
fn staging_matches_copying_4096() {
    same_writes_same_ciphertext(4096);
}

#[test]
fn staged_reads_keep_holes_zero() {
    let dir = TempDir::new("staging-holes");
    let path = dir.join("v.img");
    let key = random_key(64);
    let g = Geo {
        sector_size: 4096,
        iv_tweak: 0,
        data_offset: 4096,
        data_size: 1 << 20,
        trailer: 0,
    };
    drop(engine(&path, &key, g, false, 0));
    let (eng, _) = staged_engine(&path, &key, g);
    eng.set_holes_read_as_zero(true);
    let data = vec![0x77u8; 64 * 1024];
    eng.write_at(&data, 128 * 1024).unwrap();
    eng.discard(128 * 1024 + 16 * 1024, 16 * 1024).unwrap();
    // A partial write next to the hole keeps the hole's sectors zero.
    eng.write_at(&[0x55u8; 100], 128 * 1024 + 16 * 1024 - 50)
        .unwrap();
    let mut back = vec![0u8; 256 * 1024];
    eng.read_at(&mut back, 0).unwrap();
    let mut want = vec![0u8; 256 * 1024];
    want[128 * 1024..192 * 1024].fill(0x77);
    want[144 * 1024..160 * 1024].fill(0);
    want[144 * 1024 - 50..144 * 1024 + 50].fill(0x55);
    assert!(back == want, "holes or data wrong through the staging path");
}
