//! Robustness: random byte changes to valid LUKS1 and LUKS2 headers (LUKS2
//! JSON edits with checksums fixed, so the JSON parser and validator are
//! reached). Loading must never panic and never write.

use crate::common::*;
use cryptkeep_crypto::{Backend, HashAlg};
use cryptkeep_luks::{Luks, LuksVersion, MemIo};
use cryptkeep_testkit::Rng;

fn fix_csum(img: &mut [u8], base: usize) {
    let mut copy = img[base..base + 16384].to_vec();
    copy[448..512].fill(0);
    let sum = HashAlg::Sha256.digest(&copy);
    img[base + 448..base + 512].fill(0);
    img[base + 448..base + 480].copy_from_slice(&sum);
}

/// Small images keep the loops fast: LUKS2 with a 256 KiB keyslots area
/// (data at 1 MiB), LUKS1 with its 2 MiB payload offset.
fn image(version: LuksVersion) -> Vec<u8> {
    let v2 = version == LuksVersion::V2;
    let io = MemIo::new(if v2 { 1 << 20 } else { 2 << 20 });
    let mut o = opts(version, "aes-xts-plain64", 64, if v2 { 4096 } else { 512 });
    if v2 {
        o.luks2_keyslots_size = Some(256 << 10);
    }
    let key = random_key(64);
    Luks::format(&io, &o, &key, b"p", &pbkdf2(), Backend::Portable).unwrap();
    io.to_vec()
}

#[test]
fn luks2_json_mutations_never_panic() {
    let base = image(LuksVersion::V2);
    let json_len = base[4096..16384].iter().position(|&b| b == 0).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let specials = b"{}[]\":,0123456789-ez\\ \x00\xff";
    let (mut ok, mut err) = (0, 0);
    for _ in 0..1500 {
        let mut img = base.clone();
        for _ in 0..=rng.index(3) {
            let pos = 4096 + rng.index(json_len + 1);
            let b = if rng.index(2) == 0 {
                specials[rng.index(specials.len())]
            } else {
                rng.next() as u8
            };
            for copy in [0, 16384] {
                img[copy + pos] = b;
            }
        }
        fix_csum(&mut img, 0);
        fix_csum(&mut img, 16384);
        let io = MemIo::from_vec(img.clone());
        match Luks::load(&io) {
            Ok(l) => {
                ok += 1;
                let _ = l.luks.dump();
                let _ = l.luks.segment();
                let _ = l.luks.keyslots();
            }
            Err(e) => {
                err += 1;
                assert!(!e.to_string().is_empty());
            }
        }
        assert!(io.to_vec() == img, "load wrote to the device");
    }
    assert!(err > 0 && ok > 0, "ok {ok} err {err}");
}

#[test]
fn binary_header_mutations_never_panic() {
    for version in [LuksVersion::V1, LuksVersion::V2] {
        let base = image(version);
        let mut rng = Rng(0xfeed_beef_0000_0002);
        let region = if version == LuksVersion::V1 { 592 } else { 512 };
        for _ in 0..1000 {
            let mut img = base.clone();
            for _ in 0..=rng.index(4) {
                let second = version == LuksVersion::V2 && rng.index(2) == 1;
                let pos = rng.index(region) + if second { 16384 } else { 0 };
                img[pos] = rng.next() as u8;
            }
            if version == LuksVersion::V2 {
                fix_csum(&mut img, 0);
            }
            let io = MemIo::from_vec(img);
            if let Ok(l) = Luks::load(&io) {
                let _ = l.luks.dump();
                let _ = l.luks.dump_json();
                let _ = l.luks.segment();
            }
        }
    }
}
