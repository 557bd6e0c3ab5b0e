//! We format, cryptsetup reads: luksDump succeeds, `open --test-passphrase`
//! accepts our passphrase and rejects a wrong one, and the volume key it
//! dumps is ours. Also with a detached header.

use crate::common::*;
use cryptkeep_crypto::{Backend, Pbkdf};
use cryptkeep_luks::{Luks, LuksVersion};

fn case(
    version: LuksVersion,
    cipher: &str,
    key_bits: usize,
    sector: u32,
    kdf: Pbkdf,
    detached: bool,
) {
    need!(tool "cryptsetup");
    let dir = TempDir::new("us2cs");
    let img = sparse(&dir.join("img"), 20);
    let hdr = dir.join("hdr");
    let kf = keyfile(&dir, "key", b"our passphrase");
    let bad = keyfile(&dir, "bad", b"not our passphrase");
    let key = random_key(key_bits / 8);
    let mut o = opts(version, cipher, key_bits / 8, sector);
    o.detached_header = detached;
    let meta_path = if detached {
        std::fs::File::create(&hdr).unwrap();
        hdr.clone()
    } else {
        img.clone()
    };
    let f = open_rw(&meta_path);
    let l = Luks::format(&f, &o, &key, b"our passphrase", &kdf, Backend::default()).unwrap();
    assert_eq!(l.version(), version);
    drop(f);
    let header = detached.then_some(hdr.as_path());

    let mut dump_args = vec!["luksDump"];
    if let Some(h) = header {
        dump_args.extend(["--header", s(h)]);
    }
    dump_args.push(s(&img));
    let dump = cryptsetup_ok(&dump_args);
    assert_eq!(dump_field(&dump, "UUID:"), l.uuid());
    if version == LuksVersion::V2 {
        assert_eq!(dump_field(&dump, "cipher:"), cipher);
        assert_eq!(dump_field(&dump, "sector:"), sector.to_string());
        assert_eq!(dump_field(&dump, "offset:"), l.data_offset().to_string());
    }
    assert!(
        test_passphrase(&img, &kf, header, None),
        "cryptsetup rejects our passphrase\n{dump}"
    );
    assert!(
        !test_passphrase(&img, &bad, header, None),
        "cryptsetup accepts a wrong passphrase"
    );
    assert_eq!(dump_volume_key(&img, &kf, header), key);

    // And we read back what we wrote.
    let f = open_rw(&meta_path);
    let back = Luks::load(&f).unwrap();
    assert!(back.notices.is_empty(), "{:?}", back.notices);
    let (_, k2) = back
        .luks
        .unlock(&f, b"our passphrase", None, Backend::Portable)
        .unwrap();
    assert_eq!(k2.as_slice(), &key[..]);
}

macro_rules! cases {
    ($($name:ident: $v:expr, $c:expr, $bits:expr, $ss:expr, $kdf:expr, $det:expr;)*) => {
        $( #[test] fn $name() { case($v, $c, $bits, $ss, $kdf, $det); } )*
    };
}

cases! {
    v2_xts64_512_s512_pbkdf2: LuksVersion::V2, "aes-xts-plain64", 512, 512, pbkdf2(), false;
    v2_xts64_512_s4096_argon2id: LuksVersion::V2, "aes-xts-plain64", 512, 4096, argon2id(), false;
    v2_xts64_256_s4096_argon2i: LuksVersion::V2, "aes-xts-plain64", 256, 4096, argon2i(), false;
    v2_xtsplain_512_s512_argon2id: LuksVersion::V2, "aes-xts-plain", 512, 512, argon2id(), false;
    v2_cbc_essiv_256_s4096_pbkdf2: LuksVersion::V2, "aes-cbc-essiv:sha256", 256, 4096, pbkdf2(), false;
    v2_cbc_plain64_256_s512_argon2i: LuksVersion::V2, "aes-cbc-plain64", 256, 512, argon2i(), false;
    v2_detached_xts64_512: LuksVersion::V2, "aes-xts-plain64", 512, 4096, argon2id(), true;
    v1_xts64_512: LuksVersion::V1, "aes-xts-plain64", 512, 512, pbkdf2(), false;
    v1_xts64_256: LuksVersion::V1, "aes-xts-plain64", 256, 512, pbkdf2(), false;
    v1_xtsplain_512: LuksVersion::V1, "aes-xts-plain", 512, 512, pbkdf2(), false;
    v1_cbc_essiv_256: LuksVersion::V1, "aes-cbc-essiv:sha256", 256, 512, pbkdf2(), false;
    v1_cbc_plain64_256: LuksVersion::V1, "aes-cbc-plain64", 256, 512, pbkdf2(), false;
    v1_detached_xts64_512: LuksVersion::V1, "aes-xts-plain64", 512, 512, pbkdf2(), true;
}

/// Layout pinned against cryptsetup defaults: changing it changes the format.
#[test]
fn defaults_match_cryptsetup_layout() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("layout");
    let img = sparse(&dir.join("img"), 20);
    let f = open_rw(&img);
    let key = random_key(64);
    let l = Luks::format(
        &f,
        &opts(LuksVersion::V2, "aes-xts-plain64", 64, 4096),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    assert_eq!(l.data_offset(), 16 << 20);
    assert_eq!(l.header_len(), 16 << 20);
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(dump_field(&dump, "Metadata area:"), "16384");
    assert_eq!(dump_field(&dump, "Keyslots area:"), "16744448");
    assert_eq!(dump_field(&dump, "Area offset:"), "32768");
    assert_eq!(dump_field(&dump, "Area length:"), "258048");
    let img1 = sparse(&dir.join("img1"), 20);
    let f1 = open_rw(&img1);
    let l1 = Luks::format(
        &f1,
        &opts(LuksVersion::V1, "aes-xts-plain64", 64, 512),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    assert_eq!(l1.data_offset(), 4096 * 512);
    let dump = cryptsetup_ok(&["luksDump", s(&img1)]);
    assert_eq!(dump_field(&dump, "Payload offset:"), "4096");
}

/// Non-default LUKS2 metadata and keyslots sizes, read by cryptsetup.
#[test]
fn v2_custom_metadata_and_keyslots_size() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("us2cs-md");
    let img = sparse(&dir.join("img"), 8);
    let kf = keyfile(&dir, "key", b"pw");
    let key = random_key(64);
    let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 4096);
    o.luks2_metadata_size = Some(65536);
    o.luks2_keyslots_size = Some(2 << 20);
    let f = open_rw(&img);
    let l = Luks::format(&f, &o, &key, b"pw", &pbkdf2(), Backend::default()).unwrap();
    assert_eq!(l.data_offset(), 3 << 20);
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(dump_field(&dump, "Metadata area:"), "65536");
    assert_eq!(dump_field(&dump, "Keyslots area:"), "2097152");
    assert_eq!(dump_field(&dump, "offset:"), "3145728");
    assert_eq!(dump_field(&dump, "Area offset:"), "131072");
    assert!(test_passphrase(&img, &kf, None, None));
    assert_eq!(dump_volume_key(&img, &kf, None), key);
}
