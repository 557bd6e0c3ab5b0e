//! Shared helpers for the engine's integration tests: temp files, a small
//! deterministic PRNG, and engines over a real AES-XTS cipher.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec, SectorCipher};
use cryptkeep_volume::{Engine, InlineCrypt};

/// The cipher every test uses: LUKS2's default.
pub const SPEC: &str = "aes-xts-plain64";

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let mut r = [0u8; 8];
        cryptkeep_crypto::rand::fill_random(&mut r).unwrap();
        let p = std::env::temp_dir().join(format!(
            "ck-volume-{tag}-{}-{:016x}",
            std::process::id(),
            u64::from_le_bytes(r)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// xorshift64*: deterministic test data and offsets.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

pub fn random_key() -> Vec<u8> {
    let mut k = vec![0u8; 64];
    cryptkeep_crypto::rand::fill_random(&mut k).unwrap();
    k
}

pub fn cipher(key: &[u8]) -> Box<dyn SectorCipher> {
    let spec = CipherSpec::parse(SPEC).unwrap();
    new_sector_cipher(&spec, key, Backend::default()).unwrap()
}

/// Geometry of a test volume.
#[derive(Clone, Copy)]
pub struct Geo {
    pub sector_size: usize,
    pub iv_tweak: u64,
    pub data_offset: u64,
    pub data_size: u64,
    /// Bytes of backing store after the data segment.
    pub trailer: u64,
}

/// Creates the backing file filled with `fill` bytes (so bytes outside the
/// segment can be checked) and opens an engine on it.
pub fn engine(path: &Path, key: &[u8], g: Geo, read_only: bool, fill: u8) -> Engine {
    let total = g.data_offset + g.data_size + g.trailer;
    if !path.exists() {
        std::fs::write(path, vec![fill; total as usize]).unwrap();
    }
    open(path, key, g, read_only)
}

pub fn open(path: &Path, key: &[u8], g: Geo, read_only: bool) -> Engine {
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(path)
        .unwrap();
    let crypt = Arc::new(InlineCrypt::new(cipher(key), g.sector_size, g.iv_tweak));
    Engine::new(file, g.data_offset, g.data_size, crypt, read_only).unwrap()
}

pub fn read_file(path: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut File::open(path).unwrap(), &mut v).unwrap();
    v
}
