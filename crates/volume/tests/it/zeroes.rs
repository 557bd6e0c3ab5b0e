//! write_zeroes, and holes that read as zeros when asked to.

use crate::common::*;

fn geo() -> Geo {
    Geo {
        sector_size: 4096,
        iv_tweak: 5,
        data_offset: 8192,
        data_size: 1 << 20,
        trailer: 0,
    }
}

#[test]
fn write_zeroes_reads_back_zero_and_is_encrypted() {
    let dir = TempDir::new("wz");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = geo();
    let eng = engine(&path, &key, g, false, 0);
    let mut model = vec![0u8; g.data_size as usize];
    Rng(7).fill(&mut model);
    eng.write_at(&model, 0).unwrap();
    let (off, len) = (10_000usize, 600_000usize);
    eng.write_zeroes(off as u64, len as u64).unwrap();
    model[off..off + len].fill(0);
    let mut all = vec![0u8; model.len()];
    eng.read_at(&mut all, 0).unwrap();
    assert!(all == model);
    // Zeros are stored as ciphertext, not as zeros.
    let raw = read_file(&path);
    let seg = &raw[g.data_offset as usize..];
    assert!(seg[4 * 4096..5 * 4096].iter().any(|&b| b != 0));
}

#[test]
fn holes_read_as_zero_only_when_enabled() {
    let dir = TempDir::new("holes");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = geo();
    let eng = engine(&path, &key, g, false, 0);
    let mut model = vec![0u8; g.data_size as usize];
    Rng(8).fill(&mut model);
    eng.write_at(&model, 0).unwrap();
    eng.discard(40 * 4096, 20 * 4096).unwrap();
    let mut sector = vec![0u8; 4096];
    // dm-crypt semantics by default: a hole decrypts to noise.
    eng.read_at(&mut sector, 45 * 4096).unwrap();
    assert!(sector.iter().any(|&b| b != 0));
    eng.set_holes_read_as_zero(true);
    model[40 * 4096..60 * 4096].fill(0);
    let mut all = vec![0u8; model.len()];
    eng.read_at(&mut all, 0).unwrap();
    assert!(
        all == model,
        "holes do not read as zeros, or data around them changed"
    );
    // A partial write into a hole keeps the rest of the sector zero.
    eng.write_at(b"abc", 50 * 4096 + 100).unwrap();
    model[50 * 4096 + 100..50 * 4096 + 103].copy_from_slice(b"abc");
    eng.read_at(&mut all, 0).unwrap();
    assert!(all == model);
}
