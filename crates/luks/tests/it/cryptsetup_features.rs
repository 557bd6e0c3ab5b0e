//! Headers cryptsetup writes with non-default features: larger metadata,
//! detached headers, tokens, labels, an interrupted reencryption.

use crate::common::*;
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{Error, Luks};

#[test]
fn larger_metadata_and_small_keyslots_area() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("feat-md");
    let img = sparse(&dir.join("img"), 20);
    let k0 = keyfile(&dir, "k0", b"zero");
    let k1 = keyfile(&dir, "k1", b"one");
    let mut a = vec![
        "luksFormat",
        "--batch-mode",
        "--type",
        "luks2",
        "--luks2-metadata-size",
        "64k",
        "--luks2-keyslots-size",
        "2m",
        "--label",
        "big",
        "--subsystem",
        "sub",
        "--key-file",
        s(&k0),
    ];
    a.extend(cs_kdf_args("pbkdf2"));
    a.push(s(&img));
    cryptsetup_ok(&a);
    let f = open_rw(&img);
    let mut l = Luks::load(&f).unwrap().luks;
    let v2 = l.as_luks2().unwrap();
    assert_eq!(v2.hdr_size, 65536);
    assert_eq!(v2.meta.config.keyslots_size.0, 2 << 20);
    assert_eq!((l.label(), v2.subsystem.as_str()), (Some("big"), "sub"));
    let key = dump_volume_key(&img, &k0, None);
    assert_eq!(
        l.unlock(&f, b"zero", None, Backend::default())
            .unwrap()
            .1
            .as_slice(),
        &key[..]
    );
    // Our write of a 64 KiB header is read by cryptsetup.
    let slot = l
        .add_keyslot(&f, &key, b"one", None, &argon2id(), Backend::default())
        .unwrap();
    assert!(test_passphrase(&img, &k1, None, Some(slot)));
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(dump_field(&dump, "Metadata area:"), "65536");
    assert_eq!(dump_field(&dump, "Label:"), "big");
    assert_eq!(Luks::load(&f).unwrap().luks.dump(), dump);
    // 2 MiB of keyslots area holds 8 areas of 258048 bytes: the 9th does not fit.
    let mut l = Luks::load(&f).unwrap().luks;
    for _ in 2..8 {
        l.add_keyslot(&f, &key, b"x", None, &pbkdf2(), Backend::default())
            .unwrap();
    }
    assert!(matches!(
        l.add_keyslot(&f, &key, b"x", None, &pbkdf2(), Backend::default()),
        Err(Error::NoFreeKeyslot)
    ));
    assert!(test_passphrase(&img, &k1, None, None));
}

#[test]
fn detached_header_from_cryptsetup() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("feat-det");
    let img = sparse(&dir.join("img"), 4);
    let hdr = dir.join("hdr");
    let k0 = keyfile(&dir, "k0", b"zero");
    for ty in ["luks1", "luks2"] {
        let _ = std::fs::remove_file(&hdr);
        let mut a = vec![
            "luksFormat",
            "--batch-mode",
            "--type",
            ty,
            "--header",
            s(&hdr),
            "--key-file",
            s(&k0),
        ];
        if ty == "luks2" {
            a.extend(cs_kdf_args("argon2i"));
        } else {
            a.extend(["--pbkdf-force-iterations", "1000"]);
        }
        a.push(s(&img));
        cryptsetup_ok(&a);
        let key = dump_volume_key(&img, &k0, Some(&hdr));
        let f = open_rw(&hdr);
        let l = Luks::load(&f).unwrap().luks;
        assert_eq!(l.data_offset(), 0, "{ty}");
        assert_eq!(
            l.unlock(&f, b"zero", None, Backend::default())
                .unwrap()
                .1
                .as_slice(),
            &key[..]
        );
        assert!(l.header_len() <= std::fs::metadata(&hdr).unwrap().len());
    }
}

#[test]
fn tokens_survive_our_writes_and_follow_keyslot_removal() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("feat-tok");
    let img = sparse(&dir.join("img"), 20);
    let k0 = keyfile(&dir, "k0", b"zero");
    let k1 = keyfile(&dir, "k1", b"one");
    let mut a = vec![
        "luksFormat",
        "--batch-mode",
        "--type",
        "luks2",
        "--key-file",
        s(&k0),
    ];
    a.extend(cs_kdf_args("pbkdf2"));
    a.push(s(&img));
    cryptsetup_ok(&a);
    let mut a = vec!["luksAddKey", "--batch-mode", "--key-file", s(&k0)];
    a.extend(cs_kdf_args("pbkdf2"));
    a.extend([s(&img), s(&k1)]);
    cryptsetup_ok(&a);
    let tok = dir.join("tok.json");
    std::fs::write(
        &tok,
        br#"{"type":"acme-hsm","keyslots":["0","1"],"acme-blob":"AAEC","nested":{"a":[1,2]}}"#,
    )
    .unwrap();
    cryptsetup_ok(&[
        "token",
        "import",
        "--json-file",
        s(&tok),
        "--token-id",
        "3",
        s(&img),
    ]);
    let export = || cryptsetup_ok(&["token", "export", "--token-id", "3", s(&img)]);
    let before: serde_json::Value = serde_json::from_str(&export()).unwrap();

    let f = open_rw(&img);
    let mut l = Luks::load(&f).unwrap().luks;
    let key = dump_volume_key(&img, &k0, None);
    l.add_keyslot(&f, &key, b"two", Some(2), &pbkdf2(), Backend::default())
        .unwrap();
    let after: serde_json::Value = serde_json::from_str(&export()).unwrap();
    assert_eq!(before, after, "token changed by our write");
    l.remove_keyslot(&f, 0).unwrap();
    let after: serde_json::Value = serde_json::from_str(&export()).unwrap();
    assert_eq!(after["keyslots"], serde_json::json!(["1"]));
    assert_eq!(after["acme-blob"], "AAEC");
    let l = Luks::load(&f).unwrap().luks;
    assert_eq!(l.dump(), cryptsetup_ok(&["luksDump", s(&img)]));
    assert!(test_passphrase(&img, &k1, None, None));
}

#[test]
fn interrupted_reencryption_is_loaded_but_not_used() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("feat-reenc");
    let img = sparse(&dir.join("img"), 40);
    let k0 = keyfile(&dir, "k0", b"zero");
    let mut a = vec![
        "luksFormat",
        "--batch-mode",
        "--type",
        "luks2",
        "--key-file",
        s(&k0),
    ];
    a.extend(cs_kdf_args("pbkdf2"));
    a.push(s(&img));
    cryptsetup_ok(&a);
    let mut a = vec![
        "reencrypt",
        "--init-only",
        "--batch-mode",
        "--key-file",
        s(&k0),
    ];
    a.extend(cs_kdf_args("pbkdf2"));
    a.push(s(&img));
    cryptsetup_ok(&a);
    let f = open_rw(&img);
    let mut l = Luks::load(&f).unwrap().luks;
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(l.dump(), dump, "dump differs from cryptsetup's");
    match l.segment() {
        Err(Error::UnmetRequirement(r)) => assert_eq!(r, "online-reencrypt-v2"),
        other => panic!("expected UnmetRequirement, got {other:?}"),
    }
    let before = std::fs::read(&img).unwrap();
    let key = dump_volume_key(&img, &k0, None);
    assert!(matches!(
        l.add_keyslot(&f, &key, b"x", None, &pbkdf2(), Backend::default()),
        Err(Error::UnmetRequirement(_))
    ));
    assert!(matches!(
        l.remove_keyslot(&f, 0),
        Err(Error::UnmetRequirement(_))
    ));
    assert_eq!(
        std::fs::read(&img).unwrap(),
        before,
        "header with unmet requirement was modified"
    );
}
