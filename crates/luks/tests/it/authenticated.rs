//! Authenticated LUKS2 volumes (`cryptsetup luksFormat --integrity`):
//! headers we format are read by cryptsetup (luksDump byte for byte, the
//! passphrase, the volume key); malformed `integrity` objects are refused
//! naming the field. (Headers cryptsetup formats are read by us in
//! tests/kernel/luks2-integrity.sh, where the kernel can make them.)

use std::path::Path;

use crate::common::*;
use crate::malformed::edit_json;
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{AuthFormat, AuthSegment, Error, Luks, LuksVersion};

/// Formats `img` (20 MiB) as an authenticated volume with our code.
fn format_ours(img: &Path, encryption: &str, integrity: &str, key: &[u8], sector: u32) -> Luks {
    let mut o = opts(LuksVersion::V2, "aes-xts-plain64", key.len(), sector);
    o.auth = Some(AuthFormat {
        encryption: encryption.into(),
        integrity: integrity.into(),
    });
    let f = open_rw(img);
    Luks::format(&f, &o, key, b"auth pass", &pbkdf2(), Backend::default()).unwrap()
}

/// Every line of a luksDump but the first (cryptsetup's title names the device).
fn body(t: &str) -> Vec<String> {
    t.lines().skip(1).map(str::to_owned).collect()
}

fn us_to_cryptsetup(encryption: &str, integrity: &str, key_bits: usize, ik: usize, sector: u32) {
    need!(tool "cryptsetup");
    let dir = TempDir::new("auth-us2cs");
    let img = sparse(&dir.join("img"), 20);
    let kf = keyfile(&dir, "key", b"auth pass");
    let bad = keyfile(&dir, "bad", b"other pass");
    let key = random_key(key_bits / 8);
    let l = format_ours(&img, encryption, integrity, &key, sector);
    assert!(l.is_authenticated());

    // cryptsetup reads the header and shows what we show, byte for byte.
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(
        body(&l.dump()),
        body(&dump),
        "ours:\n{}\ncryptsetup:\n{dump}",
        l.dump()
    );
    assert_eq!(dump_field(&dump, "cipher:"), encryption);
    assert_eq!(dump_field(&dump, "integrity:"), integrity);
    assert_eq!(dump_field(&dump, "sector:"), sector.to_string());
    // Keyslots use cryptsetup's default keyslot cipher, whatever the segment's.
    assert_eq!(dump_field(&dump, "Cipher:"), "aes-xts-plain64");
    assert_eq!(dump_field(&dump, "Cipher key:"), "512");
    assert_eq!(dump_field(&dump, "Key:"), key_bits.to_string());
    assert!(
        test_passphrase(&img, &kf, None, None),
        "cryptsetup rejects our passphrase\n{dump}"
    );
    assert!(!test_passphrase(&img, &bad, None, None));
    assert_eq!(dump_volume_key(&img, &kf, None), key);

    // And we read back what we wrote.
    let f = open_rw(&img);
    let back = Luks::load(&f).unwrap().luks;
    assert_eq!(
        back.authenticated_segment().unwrap(),
        AuthSegment {
            offset: 16 << 20,
            size: None,
            sector_size: sector,
            iv_tweak: 0,
            encryption: encryption.into(),
            integrity: integrity.into(),
            journal_encryption: "none".into(),
            journal_integrity: "none".into(),
            key_bytes: key_bits / 8,
            integrity_key_bytes: ik,
        }
    );
    let e = back.segment().unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("authenticated volume"), "{e}");
    let (_, k2) = back
        .unlock(&f, b"auth pass", None, Backend::Portable)
        .unwrap();
    assert_eq!(k2.as_slice(), &key[..]);
    // A second keyslot also uses the keyslot cipher, and cryptsetup opens it.
    let mut back = back;
    let slot = back
        .add_keyslot(&f, &key, b"second", None, &pbkdf2(), Backend::default())
        .unwrap();
    let kf2 = keyfile(&dir, "key2", b"second");
    assert!(test_passphrase(&img, &kf2, None, Some(slot)));
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(body(&back.dump()), body(&dump));
    assert_eq!(
        dump.matches("Cipher:     aes-xts-plain64").count(),
        2,
        "{dump}"
    );
}

macro_rules! us_cases {
    ($($name:ident: $enc:expr, $int:expr, $bits:expr, $ik:expr, $ss:expr;)*) => {
        $( #[test] fn $name() { us_to_cryptsetup($enc, $int, $bits, $ik, $ss); } )*
    };
}

us_cases! {
    us_xts_plain64_hmac_sha256: "aes-xts-plain64", "hmac(sha256)", 768, 32, 4096;
    us_xts_random_hmac_sha256: "aes-xts-random", "hmac(sha256)", 768, 32, 512;
    us_xts_plain64_hmac_sha512: "aes-xts-plain64", "hmac(sha512)", 1024, 64, 4096;
    us_cbc_essiv_hmac_sha1: "aes-cbc-essiv:sha256", "hmac(sha1)", 416, 20, 512;
    us_gcm_random_aead: "aes-gcm-random", "aead", 256, 0, 4096;
    us_aegis128_random_aead: "aegis128-random", "aead", 128, 0, 4096;
    us_chacha20_random_poly1305: "chacha20-random", "poly1305", 256, 0, 512;
}

// Headers `cryptsetup luksFormat --integrity` makes need the kernel's
// device-mapper to format: tests/kernel/luks2-integrity.sh makes them in
// the kernel and compares them with ours there (luksDump, the volume key,
// the segment and keyslot shape).

/// A change to the JSON metadata.
type Edit = fn(&mut serde_json::Value);

/// An authenticated header of ours as an image to damage.
fn auth_image(dir: &TempDir) -> (std::path::PathBuf, Vec<u8>) {
    let img = sparse(&dir.join("img"), 20);
    format_ours(
        &img,
        "aes-xts-plain64",
        "hmac(sha256)",
        &random_key(96),
        4096,
    );
    let bytes = std::fs::read(&img).unwrap();
    (img, bytes)
}

/// Malformed `integrity` objects fail `load` with one line naming the field,
/// as cryptsetup refuses them (`hdr_validate_crypt_segment`).
#[test]
fn malformed_integrity_objects_are_refused() {
    let dir = TempDir::new("auth-bad");
    let (img, clean) = auth_image(&dir);
    let cases: Vec<(&str, Edit)> = vec![
        ("segments.0.integrity.type is missing", |v| {
            v["segments"]["0"]["integrity"]
                .as_object_mut()
                .unwrap()
                .remove("type");
        }),
        ("segments.0.integrity.type is not a string", |v| {
            v["segments"]["0"]["integrity"]["type"] = 32.into()
        }),
        ("segments.0.integrity.journal_encryption is missing", |v| {
            v["segments"]["0"]["integrity"]
                .as_object_mut()
                .unwrap()
                .remove("journal_encryption");
        }),
        (
            "segments.0.integrity.journal_integrity is not a string",
            |v| v["segments"]["0"]["integrity"]["journal_integrity"] = serde_json::Value::Null,
        ),
        ("segments.0.integrity is not an object", |v| {
            v["segments"]["0"]["integrity"] = "hmac(sha256)".into()
        }),
        ("segments.0.integrity.key_size", |v| {
            v["segments"]["0"]["integrity"]["key_size"] = "32".into()
        }),
    ];
    for (expect, f) in cases {
        let mut bytes = clean.clone();
        edit_json(&mut bytes, &f);
        std::fs::write(&img, &bytes).unwrap();
        let e = Luks::load(&open_rw(&img)).unwrap_err().to_string();
        assert!(e.contains(expect), "expected '{expect}' in: {e}");
        assert!(!e.contains('\n'), "{e}");
        // cryptsetup refuses the same headers (but for key_size, which it
        // reads only when activating).
        if expect != "segments.0.integrity.key_size" && cryptkeep_testkit::need::tool("cryptsetup")
        {
            assert!(
                !cryptsetup(&["luksDump", s(&img)]).status.success(),
                "{expect}"
            );
        }
    }
}

/// Valid headers cryptsetup would not activate: loaded and dumped, refused
/// by `authenticated_segment` naming the field.
#[test]
fn unusable_integrity_objects_are_refused_where_used() {
    let dir = TempDir::new("auth-unusable");
    let (img, clean) = auth_image(&dir);
    let cases: Vec<(&str, Edit)> = vec![
        ("segments.0.integrity.journal_encryption 'aes'", |v| {
            v["segments"]["0"]["integrity"]["journal_encryption"] = "aes".into()
        }),
        (
            "segments.0.integrity.journal_integrity 'hmac(sha256)'",
            |v| v["segments"]["0"]["integrity"]["journal_integrity"] = "hmac(sha256)".into(),
        ),
        ("segments.0.integrity.type 'crc32c'", |v| {
            v["segments"]["0"]["integrity"]["type"] = "crc32c".into()
        }),
        ("segments.0.integrity.key_size 8 is below", |v| {
            v["segments"]["0"]["integrity"]["key_size"] = 8.into()
        }),
        (
            "segments.0.encryption 'aes-xts-plain64' cannot use a 16-byte",
            |v| v["segments"]["0"]["integrity"]["key_size"] = 80.into(),
        ),
        ("'aead' needs an AEAD cipher", |v| {
            v["segments"]["0"]["integrity"]["type"] = "aead".into()
        }),
    ];
    for (expect, f) in cases {
        let mut bytes = clean.clone();
        edit_json(&mut bytes, &f);
        std::fs::write(&img, &bytes).unwrap();
        let l = Luks::load(&open_rw(&img)).unwrap().luks;
        assert!(l.is_authenticated());
        let e = l.authenticated_segment().unwrap_err().to_string();
        assert!(e.contains(expect), "expected '{expect}' in: {e}");
        assert!(!e.contains('\n'), "{e}");
        if cryptkeep_testkit::need::tool("cryptsetup") {
            let dump = cryptsetup_ok(&["luksDump", s(&img)]);
            assert_eq!(body(&l.dump()), body(&dump));
        }
    }
}

/// Format options that cannot make a working volume are refused before
/// anything is written.
#[test]
fn bad_auth_format_options_are_refused() {
    let dir = TempDir::new("auth-opts");
    let img = sparse(&dir.join("img"), 20);
    let f = open_rw(&img);
    for (enc, int, key_len, expect) in [
        (
            "aes-xts-plain64",
            "hmac(sha256)",
            48,
            "cannot use a 16-byte cipher key",
        ),
        (
            "aes-xts-plain64",
            "hmac(sha256)",
            32,
            "leaves no cipher key",
        ),
        (
            "aegis128-random",
            "aead",
            32,
            "cannot use a 32-byte cipher key",
        ),
        ("aes-xts-plain64", "aead", 64, "needs an AEAD cipher"),
        ("aes-xts-plain64", "hmac(md5)", 80, "hmac(md5)"),
    ] {
        let mut o = opts(LuksVersion::V2, "aes-xts-plain64", key_len, 4096);
        o.auth = Some(AuthFormat {
            encryption: enc.into(),
            integrity: int.into(),
        });
        let e = Luks::format(
            &f,
            &o,
            &random_key(key_len),
            b"p",
            &pbkdf2(),
            Backend::default(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(
            e.to_string().contains(expect),
            "expected '{expect}' in: {e}"
        );
    }
    let mut o = opts(LuksVersion::V1, "aes-xts-plain64", 96, 512);
    o.auth = Some(AuthFormat {
        encryption: "aes-xts-plain64".into(),
        integrity: "hmac(sha256)".into(),
    });
    let e = Luks::format(&f, &o, &random_key(96), b"p", &pbkdf2(), Backend::default()).unwrap_err();
    assert!(e.to_string().contains("needs LUKS2"), "{e}");
    assert!(
        std::fs::read(&img).unwrap().iter().all(|&b| b == 0),
        "something was written"
    );
}
