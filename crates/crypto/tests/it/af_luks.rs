//! The AF splitter: fixed merge vectors (hand-derived with a separate
//! implementation), split→merge round trips, and the real thing: a LUKS1
//! keyslot written by cryptsetup is opened with our PBKDF2 + sector cipher +
//! AF merge, and a keyslot we write with split is accepted by cryptsetup.

use crate::common::{field, read_vectors, unhex};
use cryptkeep_crypto::kdf::{derive, Pbkdf};
use cryptkeep_crypto::{af, new_sector_cipher, Backend, CipherSpec, HashAlg};
use cryptkeep_testkit::{need, random_key, TempDir};
use std::path::Path;
use std::process::Command;

#[test]
fn merge_vectors() {
    for v in read_vectors("af_merge.txt") {
        let hash = HashAlg::parse(field(&v, "Hash")).unwrap();
        let key_len: usize = field(&v, "KeyLen").parse().unwrap();
        let stripes: u32 = field(&v, "Stripes").parse().unwrap();
        let material = unhex(field(&v, "Material"));
        let key = af::merge(&material, key_len, stripes, hash).unwrap();
        assert_eq!(key.as_slice(), &unhex(field(&v, "Key"))[..], "{v:?}");
    }
}

#[test]
fn split_merge_round_trip() {
    for hash in HashAlg::ALL {
        for (key_len, stripes) in [(16usize, 4000u32), (32, 4000), (64, 4000), (33, 7), (5, 2)] {
            let key = random_key(key_len);
            let m = af::split(&key, stripes, hash).unwrap();
            assert_eq!(m.len(), af::material_len(key_len, stripes));
            let back = af::merge(m.as_slice(), key_len, stripes, hash).unwrap();
            assert_eq!(back.as_slice(), &key[..], "{hash} {key_len}x{stripes}");
            // Any damaged stripe destroys the key.
            let mut bad = m.as_slice().to_vec();
            bad[key_len / 2] ^= 1;
            let wrong = af::merge(&bad, key_len, stripes, hash).unwrap();
            assert_ne!(wrong.as_slice(), &key[..]);
            // Splitting twice gives different material (random stripes).
            if stripes > 1 {
                assert_ne!(
                    af::split(&key, stripes, hash).unwrap().as_slice(),
                    m.as_slice()
                );
            }
        }
    }
}

/// The fields of a LUKS1 header (on-disk-format.pdf §2) this test needs.
struct Luks1 {
    cipher: CipherSpec,
    hash: HashAlg,
    key_bytes: usize,
    mk_digest: Vec<u8>,
    mk_salt: Vec<u8>,
    mk_iter: u32,
    slot_iter: u32,
    slot_salt: Vec<u8>,
    slot_offset: u64,
    stripes: u32,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn cstr(b: &[u8]) -> String {
    String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap()).into_owned()
}

fn parse_luks1(h: &[u8]) -> Luks1 {
    assert_eq!(&h[..6], b"LUKS\xba\xbe");
    assert_eq!(u16::from_be_bytes([h[6], h[7]]), 1, "version 1");
    let slot = 208;
    assert_eq!(be32(h, slot), 0x00AC_71F3, "key slot 0 active");
    Luks1 {
        cipher: CipherSpec::parse_luks1(&cstr(&h[8..40]), &cstr(&h[40..72])).unwrap(),
        hash: HashAlg::parse(&cstr(&h[72..104])).unwrap(),
        key_bytes: be32(h, 108) as usize,
        mk_digest: h[112..132].to_vec(),
        mk_salt: h[132..164].to_vec(),
        mk_iter: be32(h, 164),
        slot_iter: be32(h, slot + 4),
        slot_salt: h[slot + 8..slot + 40].to_vec(),
        slot_offset: u64::from(be32(h, slot + 40)) * 512,
        stripes: be32(h, slot + 44),
    }
}

fn run(cmd: &mut Command) -> bool {
    let out = cmd.output().expect("spawn");
    if !out.status.success() {
        eprintln!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

fn format_luks1(dir: &Path, cipher: &str, key_bits: usize, hash: &str, vk: &[u8]) -> Vec<u8> {
    let img = dir.join("luks1.img");
    std::fs::write(dir.join("vk"), vk).unwrap();
    std::fs::write(dir.join("pass"), b"correct horse").unwrap();
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(4 << 20).unwrap();
    assert!(run(Command::new("cryptsetup")
        .args([
            "luksFormat",
            "--type",
            "luks1",
            "--batch-mode",
            "--cipher",
            cipher
        ])
        .args(["--key-size", &key_bits.to_string(), "--hash", hash])
        .args(["--pbkdf-force-iterations", "1000"])
        .arg("--volume-key-file")
        .arg(dir.join("vk"))
        .arg("--key-file")
        .arg(dir.join("pass"))
        .arg(&img)));
    std::fs::read(&img).unwrap()
}

#[test]
fn luks1_keyslot_from_cryptsetup_both_ways() {
    need!(tool "cryptsetup");
    let cases = [
        ("aes-xts-plain64", 512usize, "sha256"),
        ("aes-cbc-essiv:sha256", 256, "sha1"),
        ("aes-xts-plain64", 256, "sha512"),
    ];
    for (cipher, bits, hash) in cases {
        let tmp = TempDir::new("crypto-af");
        let dir = tmp.path();
        let vk = random_key(bits / 8);
        let mut image = format_luks1(dir, cipher, bits, hash, &vk);
        let h = parse_luks1(&image);
        assert_eq!(h.cipher.to_string(), cipher);
        assert_eq!(h.key_bytes, vk.len());
        let slot_key = derive(
            &Pbkdf::Pbkdf2 {
                hash: h.hash,
                iterations: h.slot_iter,
            },
            b"correct horse",
            &h.slot_salt,
            h.key_bytes,
        )
        .unwrap();
        let len = af::material_len(h.key_bytes, h.stripes);
        let area = len.div_ceil(512) * 512;
        let at = h.slot_offset as usize;
        for backend in Backend::ALL {
            let c = new_sector_cipher(&h.cipher, slot_key.as_slice(), backend).unwrap();
            let mut material = image[at..at + area].to_vec();
            c.decrypt(&mut material, 512, 0, 1).unwrap();
            let key = af::merge(&material[..len], h.key_bytes, h.stripes, h.hash).unwrap();
            assert_eq!(key.as_slice(), &vk[..], "{cipher} {bits} {hash} {backend}");
            // The header's master-key digest agrees too.
            let d = derive(
                &Pbkdf::Pbkdf2 {
                    hash: h.hash,
                    iterations: h.mk_iter,
                },
                key.as_slice(),
                &h.mk_salt,
                20,
            )
            .unwrap();
            assert_eq!(d.as_slice(), &h.mk_digest[..]);
        }

        // Now write the keyslot ourselves: fresh AF stripes, encrypted with
        // the slot key; cryptsetup must still accept the passphrase.
        let mut fresh = af::split(&vk, h.stripes, h.hash)
            .unwrap()
            .as_slice()
            .to_vec();
        fresh.resize(area, 0);
        let c = new_sector_cipher(&h.cipher, slot_key.as_slice(), Backend::Accelerated).unwrap();
        c.encrypt(&mut fresh, 512, 0, 1).unwrap();
        assert_ne!(&image[at..at + area], &fresh[..]);
        image[at..at + area].copy_from_slice(&fresh);
        let img = dir.join("luks1.img");
        std::fs::write(&img, &image).unwrap();
        assert!(
            run(Command::new("cryptsetup")
                .args(["open", "--test-passphrase", "--key-file"])
                .arg(dir.join("pass"))
                .arg(&img)),
            "cryptsetup rejected our keyslot ({cipher})"
        );
        // Tampering with one byte of the material must make it fail.
        image[at + 100] ^= 0x40;
        std::fs::write(&img, &image).unwrap();
        assert!(!run(Command::new("cryptsetup")
            .args(["open", "--test-passphrase", "--key-file"])
            .arg(dir.join("pass"))
            .arg(&img)));
    }
}
