//! The bytes the engine leaves in the backing store are exactly dm-crypt's:
//! sector k of the data segment is the cipher applied to that sector alone
//! with IV k * (sector_size / 512) + iv_tweak.

mod common;
use common::*;

fn check_layout(sector_size: usize, iv_tweak: u64) {
    let dir = TempDir::new("ct");
    let path = dir.path("vol.img");
    let key = random_key();
    let g = Geo {
        sector_size,
        iv_tweak,
        data_offset: 16 * 1024,
        data_size: 1 << 20,
        trailer: 0,
    };
    let eng = engine(&path, &key, g, false, 0);
    let mut plain = vec![0u8; g.data_size as usize];
    Rng(sector_size as u64 ^ iv_tweak ^ 0x5555).fill(&mut plain);
    // One big write (encrypted in split chunks) and a few unaligned ones.
    eng.write_at(&plain, 0).unwrap();
    for (off, len) in [(1000usize, 3000usize), (70_001, 9_999), (500_000, 1)] {
        for b in &mut plain[off..off + len] {
            *b ^= 0xA5;
        }
        eng.write_at(&plain[off..off + len], off as u64).unwrap();
    }
    let raw = read_file(&path);
    let cipher = cipher(&key);
    let step = (sector_size / 512) as u64;
    for (k, sector) in plain.chunks(sector_size).enumerate() {
        let mut expect = sector.to_vec();
        let iv = k as u64 * step + iv_tweak;
        // A single sector: iv_step cannot matter here.
        cipher.encrypt(&mut expect, sector_size, iv, 1).unwrap();
        let at = g.data_offset as usize + k * sector_size;
        assert!(
            raw[at..at + sector_size] == expect[..],
            "sector {k} ({sector_size}-byte sectors, iv_tweak {iv_tweak}) is not encrypted with IV {iv}"
        );
    }
}

#[test]
fn sectors_512_no_tweak() {
    check_layout(512, 0);
}

#[test]
fn sectors_512_with_tweak() {
    check_layout(512, 123_456);
}

#[test]
fn sectors_4096_step_by_eight() {
    check_layout(4096, 0);
}

#[test]
fn sectors_4096_with_tweak() {
    check_layout(4096, 77);
}

#[test]
fn iv_numbering_is_pinned() {
    // Changing these numbers changes the on-disk format (LUKS2 never sets
    // dm-crypt's iv_large_sectors).
    use cryptkeep_volume::InlineCrypt;
    let key = random_key();
    let c = InlineCrypt::new(cipher(&key), 4096, 10);
    assert_eq!(c.iv_step(), 8);
    assert_eq!(c.iv_of(0), 10);
    assert_eq!(c.iv_of(3), 34);
    let c = InlineCrypt::new(cipher(&key), 512, 0);
    assert_eq!(c.iv_of(3), 3);
    assert_eq!(cryptkeep_volume::IV_SECTOR, 512);
}
