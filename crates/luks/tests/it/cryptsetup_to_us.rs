//! cryptsetup formats, we load and unlock: the key must equal what
//! `luksDump --dump-volume-key` prints, and the segment must match luksDump.

use crate::common::*;
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{Error, Luks, LuksVersion};

fn case(version: LuksVersion, cipher: &str, key_bits: usize, sector: u32, kdf: &str) {
    need!(tool "cryptsetup");
    let dir = TempDir::new("cs2us");
    let img = sparse(&dir.join("img"), 20);
    let kf = keyfile(&dir, "key", b"correct horse");
    let key_bits_s = key_bits.to_string();
    let sector_s = sector.to_string();
    let ty = if version == LuksVersion::V1 {
        "luks1"
    } else {
        "luks2"
    };
    let mut args = vec![
        "luksFormat",
        "--batch-mode",
        "--type",
        ty,
        "--cipher",
        cipher,
        "--key-size",
        &key_bits_s,
        "--key-file",
        s(&kf),
    ];
    if version == LuksVersion::V2 {
        args.extend(["--sector-size", &sector_s]);
        args.extend(cs_kdf_args(kdf));
    } else {
        args.extend(["--pbkdf-force-iterations", "1000"]);
    }
    args.push(s(&img));
    cryptsetup_ok(&args);
    let expect = dump_volume_key(&img, &kf, None);
    assert_eq!(expect.len(), key_bits / 8);

    let f = open_rw(&img);
    let loaded = Luks::load(&f).unwrap();
    assert!(loaded.notices.is_empty(), "{:?}", loaded.notices);
    let l = loaded.luks;
    assert_eq!(l.version(), version);
    let (slot, key) = l
        .unlock(&f, b"correct horse", None, Backend::default())
        .unwrap();
    assert_eq!(slot, 0);
    assert_eq!(key.as_slice(), &expect[..]);
    let (_, key_p) = l
        .unlock(&f, b"correct horse", Some(0), Backend::Portable)
        .unwrap();
    assert_eq!(key_p.as_slice(), &expect[..]);
    assert!(l.verify_volume_key(&expect).unwrap());
    assert!(matches!(
        l.unlock(&f, b"wrong horse", None, Backend::default()),
        Err(Error::WrongPassphrase)
    ));

    // parse → serialise gives back cryptsetup's bytes exactly.
    let raw = std::fs::read(&img).unwrap();
    if let Some(v1) = l.as_luks1() {
        assert_eq!(&v1.phdr.to_bytes().unwrap()[..], &raw[..592]);
    }
    if let Some(v2) = l.as_luks2() {
        let json = v2.meta.to_json().unwrap();
        assert_eq!(
            &raw[4096..4096 + json.len()],
            &json[..],
            "JSON differs from cryptsetup's"
        );
        assert_eq!(raw[4096 + json.len()], 0);
    }
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    let seg = l.segment().unwrap();
    assert_eq!(seg.key_bytes, key_bits / 8);
    assert_eq!(seg.size, None);
    assert_eq!(seg.iv_tweak, 0);
    if version == LuksVersion::V2 {
        assert_eq!(seg.offset.to_string(), dump_field(&dump, "offset:"));
        assert_eq!(seg.cipher.to_string(), dump_field(&dump, "cipher:"));
        assert_eq!(seg.sector_size.to_string(), dump_field(&dump, "sector:"));
        assert_eq!(seg.sector_size, sector);
        let ours = l.dump();
        for field in [
            "UUID:",
            "offset:",
            "cipher:",
            "sector:",
            "Area offset:",
            "Area length:",
            "PBKDF:",
            "Digest:",
        ] {
            assert_eq!(
                dump_field(&ours, field),
                dump_field(&dump, field),
                "field {field}\n{ours}\n{dump}"
            );
        }
    } else {
        assert_eq!(
            (seg.offset / 512).to_string(),
            dump_field(&dump, "Payload offset:")
        );
        assert_eq!(seg.cipher.to_string(), cipher);
        assert_eq!(seg.sector_size, 512);
        let ours = l.dump();
        for field in [
            "UUID:",
            "Payload offset:",
            "Cipher mode:",
            "MK digest:",
            "Key material offset:",
            "MK iterations:",
        ] {
            assert_eq!(
                dump_field(&ours, field),
                dump_field(&dump, field),
                "field {field}\n{ours}\n{dump}"
            );
        }
    }
    assert_eq!(l.uuid(), dump_field(&dump, "UUID:"));
    // The whole dump matches cryptsetup's (LUKS1: but for the device path in the title).
    let skip_title = |t: &str| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        skip_title(&l.dump()),
        skip_title(&dump),
        "ours:\n{}\ncryptsetup:\n{dump}",
        l.dump()
    );
}

macro_rules! cases {
    ($($name:ident: $v:expr, $c:expr, $bits:expr, $ss:expr, $kdf:expr;)*) => {
        $( #[test] fn $name() { case($v, $c, $bits, $ss, $kdf); } )*
    };
}

cases! {
    v2_xts64_512_s512_pbkdf2: LuksVersion::V2, "aes-xts-plain64", 512, 512, "pbkdf2";
    v2_xts64_512_s4096_argon2id: LuksVersion::V2, "aes-xts-plain64", 512, 4096, "argon2id";
    v2_xts64_256_s4096_argon2i: LuksVersion::V2, "aes-xts-plain64", 256, 4096, "argon2i";
    v2_xts64_256_s512_argon2id: LuksVersion::V2, "aes-xts-plain64", 256, 512, "argon2id";
    v2_xtsplain_512_s512_pbkdf2: LuksVersion::V2, "aes-xts-plain", 512, 512, "pbkdf2";
    v2_xtsplain_512_s4096_argon2i: LuksVersion::V2, "aes-xts-plain", 512, 4096, "argon2i";
    v2_cbc_essiv_256_s512_argon2id: LuksVersion::V2, "aes-cbc-essiv:sha256", 256, 512, "argon2id";
    v2_cbc_essiv_256_s4096_pbkdf2: LuksVersion::V2, "aes-cbc-essiv:sha256", 256, 4096, "pbkdf2";
    v2_cbc_plain64_256_s512_argon2i: LuksVersion::V2, "aes-cbc-plain64", 256, 512, "argon2i";
    v2_cbc_plain64_256_s4096_pbkdf2: LuksVersion::V2, "aes-cbc-plain64", 256, 4096, "pbkdf2";
    v1_xts64_512: LuksVersion::V1, "aes-xts-plain64", 512, 512, "pbkdf2";
    v1_xts64_256: LuksVersion::V1, "aes-xts-plain64", 256, 512, "pbkdf2";
    v1_xtsplain_512: LuksVersion::V1, "aes-xts-plain", 512, 512, "pbkdf2";
    v1_cbc_essiv_256: LuksVersion::V1, "aes-cbc-essiv:sha256", 256, 512, "pbkdf2";
    v1_cbc_plain64_256: LuksVersion::V1, "aes-cbc-plain64", 256, 512, "pbkdf2";
}
