//! Authenticated volumes ([`AuthVolume`]) over a real dm-integrity image:
//! round trips through the journal and in place, and tampering: 1000
//! single-bit flips per mode, each in a random data or tag byte, fail
//! exactly the sector they hit (EIO, nothing of it returned) and nothing
//! else; restoring the bit heals it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_integrity::{format_external, Device, FormatOptions, Mode, TagHash};
use cryptkeep_testkit::{Rng, TempDir};
use cryptkeep_volume::{AuthVolume, Error, InlineAuthCrypt};

/// Every mode cryptsetup offers, with the sector size it is tested at.
const MODES: [(&str, &str, usize); 6] = [
    ("aes-xts-plain64", "hmac(sha256)", 4096),
    ("aes-xts-plain64", "hmac(sha1)", 512),
    ("aes-xts-plain64", "hmac(sha512)", 4096),
    ("aegis128-random", "aead", 512),
    ("chacha20-random", "poly1305", 4096),
    ("aes-gcm-random", "aead", 4096),
];

fn crypt(spec: &AuthSpec, key: &[u8], ss: usize) -> InlineAuthCrypt {
    InlineAuthCrypt::new(SectorAead::new(spec, key, ss).unwrap())
}

/// A formatted, wiped authenticated data area of `mib` MiB at 1 MiB into
/// the image, opened in `mode`.
fn volume(path: &Path, spec: &AuthSpec, key: &[u8], ss: usize, mode: Mode) -> AuthVolume {
    let start = 1 << 20;
    if !path.exists() {
        File::create(path)
            .unwrap()
            .set_len(start + (6 << 20))
            .unwrap();
        let o = FormatOptions {
            hash: TagHash::Crc32c,
            tag_size: None,
            sector_size: ss as u32,
            journal_bytes: Some(256 << 10),
            interleave_sectors: 0,
            wipe: true,
        };
        let aead = SectorAead::new(spec, key, ss).unwrap();
        let mut fill = |_: &cryptkeep_integrity::Superblock, s: u64, d: &mut [u8], t: &mut [u8]| {
            aead.seal(s * 512 / ss as u64, d, t)
                .map_err(|e| cryptkeep_integrity::Error::BadHash(e.to_string()))
        };
        let tag = spec.tuple_bytes() as u16;
        format_external(
            path,
            start,
            &o,
            tag,
            [0; 16],
            Some(&mut fill),
            &mut |_, _| {},
        )
        .unwrap();
    }
    let dev = Device::open_external(
        path,
        start,
        mode,
        cryptkeep_integrity::DEFAULT_BUFFER_SECTORS,
    )
    .unwrap();
    AuthVolume::new(dev, Arc::new(crypt(spec, key, ss))).unwrap()
}

#[test]
fn every_mode_round_trips_through_the_journal_and_in_place() {
    let dir = TempDir::new("authvol-rt");
    let mut rng = Rng(7);
    for (i, (enc, integ, ss)) in MODES.iter().enumerate() {
        let spec = AuthSpec::parse(enc, integ).unwrap();
        let key = rng.bytes(spec.default_key_bytes());
        let p = dir.path().join(format!("rt-{i}.img"));
        let mut model = Vec::new();
        for mode in [Mode::Journal, Mode::Direct] {
            let v = volume(&p, &spec, &key, *ss, mode);
            if model.is_empty() {
                model = vec![0u8; v.size() as usize];
                let mut fresh = vec![1u8; v.size() as usize];
                v.read_at(&mut fresh, 0).unwrap();
                assert!(fresh == model, "{spec}: a wiped volume reads as zeros");
            }
            for (off, len) in [
                (0u64, 8192usize),
                (4096 * 3 + 100, 70_000),
                (1 << 20, 1 << 20),
                (777, 5),
            ] {
                let data = rng.bytes(len);
                v.write_at(&data, off).unwrap();
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            v.flush().unwrap();
        }
        let v = volume(&p, &spec, &key, *ss, Mode::ReadOnly);
        let mut back = vec![0u8; v.size() as usize];
        assert_eq!(v.read_at(&mut back, 0).unwrap(), back.len());
        assert!(back == model, "{spec}: read back differs");
        assert_eq!(v.mismatches(), 0);
        // Another key fails every sector it reads.
        let other = rng.bytes(spec.default_key_bytes());
        let dev = Device::open_external(
            &p,
            1 << 20,
            Mode::ReadOnly,
            cryptkeep_integrity::DEFAULT_BUFFER_SECTORS,
        )
        .unwrap();
        let wrong = AuthVolume::new(dev, Arc::new(crypt(&spec, &other, *ss))).unwrap();
        let mut b = vec![0u8; *ss];
        assert!(matches!(
            wrong.read_at(&mut b, 0),
            Err(Error::Authentication { sector: 0 })
        ));
    }
}

#[test]
fn a_thousand_flipped_bits_per_mode_each_fail_exactly_their_sector() {
    let dir = TempDir::new("authvol-flip");
    let mut rng = Rng(1000);
    for (i, (enc, integ, ss)) in MODES.iter().enumerate() {
        let spec = AuthSpec::parse(enc, integ).unwrap();
        let key = rng.bytes(spec.default_key_bytes());
        let p = dir.path().join(format!("flip-{i}.img"));
        let v = volume(&p, &spec, &key, *ss, Mode::Direct);
        let data = rng.bytes(v.size() as usize);
        v.write_at(&data, 0).unwrap();
        let g = v.device().geometry().clone();
        let ss64 = *ss as u64;
        let sectors = v.size() / ss64;
        let raw = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let mut buf = vec![0u8; *ss];
        for flip in 0..1000u64 {
            let s = rng.below(sectors);
            let s512 = s * ss64 / 512;
            let at = if rng.below(2) == 0 {
                g.data_sector(s512) * 512 + rng.below(ss64)
            } else {
                g.tag_offset(s512) + rng.below(spec.tuple_bytes() as u64)
            };
            let bit = 1u8 << rng.below(8);
            let mut byte = [0u8; 1];
            raw.read_exact_at(&mut byte, at).unwrap();
            raw.write_all_at(&[byte[0] ^ bit], at).unwrap();
            buf.fill(0xee);
            let r = v.read_at(&mut buf, s * ss64);
            assert!(
                matches!(r, Err(Error::Authentication { sector }) if sector == s),
                "{spec}: flip {flip} at byte {at} (sector {s}) read as {r:?}"
            );
            assert_eq!(r.as_ref().err().map(Error::errno), Some(libc::EIO));
            // A large read around it (cut into pieces opened on several
            // threads) names the same sector.
            let window = (512 << 10) / ss64;
            let from = (s / window * window).min(sectors - window);
            let mut big = vec![0u8; (window * ss64) as usize];
            let r = v.read_at(&mut big, from * ss64);
            assert!(
                matches!(r, Err(Error::Authentication { sector }) if sector == s),
                "{spec}: a large read over flip {flip} (sector {s}) gave {r:?}"
            );
            for n in [s.wrapping_sub(1), s + 1] {
                if n < sectors {
                    v.read_at(&mut buf, n * ss64).unwrap();
                    assert!(buf[..] == data[(n * ss64) as usize..((n + 1) * ss64) as usize]);
                }
            }
            raw.write_all_at(&byte, at).unwrap();
            v.read_at(&mut buf, s * ss64).unwrap();
            assert!(buf[..] == data[(s * ss64) as usize..((s + 1) * ss64) as usize]);
        }
        assert_eq!(v.mismatches(), 2000, "{spec}: every failed read counted");
        let mut all = vec![0u8; v.size() as usize];
        v.read_at(&mut all, 0).unwrap();
        assert!(all == data, "{spec}: the data changed");
    }
}
