//! Helpers of the engine's tests: engines over a real AES-XTS cipher on
//! files (temporary directories and test data come from the testkit).

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec, SectorCipher};
pub use cryptkeep_testkit::{random_key, Rng, TempDir};
use cryptkeep_volume::{Engine, InlineCrypt};

/// The cipher every test uses: LUKS2's default.
pub const SPEC: &str = "aes-xts-plain64";

/// An aes-xts-plain64 sector cipher with `key`.
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

/// Opens an engine on an existing backing file.
pub fn open(path: &Path, key: &[u8], g: Geo, read_only: bool) -> Engine {
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(path)
        .unwrap();
    let crypt = Arc::new(InlineCrypt::new(cipher(key), g.sector_size, g.iv_tweak));
    Engine::new(file, g.data_offset, g.data_size, crypt, read_only).unwrap()
}

/// The whole of a file.
pub fn read_file(path: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut File::open(path).unwrap(), &mut v).unwrap();
    v
}
