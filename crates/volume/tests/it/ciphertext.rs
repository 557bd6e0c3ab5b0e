//! The bytes the engine leaves in the backing store are exactly dm-crypt's:
//! sector k of the data segment is the cipher applied to that sector alone
//! with IV k * (sector_size / 512) + iv_tweak.

use crate::common::*;

fn check_layout(sector_size: usize, iv_tweak: u64) {
    let dir = TempDir::new("ct");
    let path = dir.join("vol.img");
    let key = random_key(64);
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
    let key = random_key(64);
    let c = InlineCrypt::new(cipher(&key), 4096, 10);
    assert_eq!(c.iv_step(), 8);
    assert_eq!(c.iv_of(0), 10);
    assert_eq!(c.iv_of(3), 34);
    let c = InlineCrypt::new(cipher(&key), 512, 0);
    assert_eq!(c.iv_of(3), 3);
    assert_eq!(cryptkeep_volume::IV_SECTOR, 512);
}

/// An oracle outside our code: `openssl enc -aes-256-cbc` with dm-crypt's
/// plain64 IV (le64 sector number, zero padded) for the sector number the
/// engine must use, k * (sector_size / 512) + iv_tweak.
fn check_against_openssl(sector_size: usize, iv_tweak: u64) {
    cryptkeep_testkit::need!(tool "openssl");
    let dir = TempDir::new("openssl");
    let path = dir.join("vol.img");
    let mut key = vec![0u8; 32];
    cryptkeep_crypto::rand::fill_random(&mut key).unwrap();
    let g = Geo {
        sector_size,
        iv_tweak,
        data_offset: 4096,
        data_size: 64 * 4096,
        trailer: 0,
    };
    std::fs::write(&path, vec![0u8; (g.data_offset + g.data_size) as usize]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let spec = cryptkeep_crypto::CipherSpec::parse("aes-cbc-plain64").unwrap();
    let cipher =
        cryptkeep_crypto::new_sector_cipher(&spec, &key, cryptkeep_crypto::Backend::default())
            .unwrap();
    let crypt = std::sync::Arc::new(cryptkeep_volume::InlineCrypt::new(
        cipher,
        sector_size,
        iv_tweak,
    ));
    let eng =
        cryptkeep_volume::Engine::new(file, g.data_offset, g.data_size, crypt, false).unwrap();
    let mut plain = vec![0u8; g.data_size as usize];
    Rng(99).fill(&mut plain);
    eng.write_at(&plain, 0).unwrap();
    let raw = read_file(&path);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let n = g.data_size as usize / sector_size;
    for k in [0, 1, 2, n / 2, n - 1] {
        let iv_sector = k as u64 * (sector_size / 512) as u64 + iv_tweak;
        let mut iv = [0u8; 16];
        iv[..8].copy_from_slice(&iv_sector.to_le_bytes());
        let pt = dir.join("pt");
        std::fs::write(&pt, &plain[k * sector_size..(k + 1) * sector_size]).unwrap();
        let out = std::process::Command::new("openssl")
            .args([
                "enc",
                "-aes-256-cbc",
                "-nopad",
                "-K",
                &hex(&key),
                "-iv",
                &hex(&iv),
                "-in",
            ])
            .arg(&pt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let at = g.data_offset as usize + k * sector_size;
        assert!(
            out.stdout[..] == raw[at..at + sector_size],
            "sector {k}: ciphertext is not AES-CBC with plain64 IV {iv_sector}"
        );
    }
}

#[test]
fn openssl_agrees_512() {
    check_against_openssl(512, 0);
}

#[test]
fn openssl_agrees_4096_with_tweak() {
    check_against_openssl(4096, 77);
}
