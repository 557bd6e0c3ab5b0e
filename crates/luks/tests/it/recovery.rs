//! LUKS2 metadata copies: a corrupt primary is recovered from the secondary
//! (reported, not written), and the next write repairs it.

use crate::common::*;
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{BlockIo, Luks};

#[test]
fn corrupt_primary_json_recovers_from_secondary() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("recov");
    let img = sparse(&dir.join("img"), 20);
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
    let key = dump_volume_key(&img, &k0, None);
    let f = open_rw(&img);
    // Flip a byte inside the primary JSON text.
    let mut b = [0u8; 1];
    f.read_at(&mut b, 4096 + 10).unwrap();
    b[0] ^= 0x20;
    f.write_at(&b, 4096 + 10).unwrap();
    let before = std::fs::read(&img).unwrap();

    let loaded = Luks::load(&f).unwrap();
    assert_eq!(loaded.notices.len(), 1, "{:?}", loaded.notices);
    let n = &loaded.notices[0];
    assert!(
        n.contains("primary")
            && n.contains("secondary")
            && n.contains("16384")
            && n.contains("checksum"),
        "{n}"
    );
    assert_eq!(std::fs::read(&img).unwrap(), before, "load must not write");
    let mut l = loaded.luks;
    let (_, k) = l.unlock(&f, b"zero", None, Backend::default()).unwrap();
    assert_eq!(k.as_slice(), &key[..]);

    // The next write repairs the primary; cryptsetup and we agree again.
    let slot = l
        .add_keyslot(&f, &key, b"one", None, &pbkdf2(), Backend::default())
        .unwrap();
    let again = Luks::load(&f).unwrap();
    assert!(again.notices.is_empty(), "{:?}", again.notices);
    let k1 = keyfile(&dir, "k1", b"one");
    assert!(test_passphrase(&img, &k1, None, Some(slot)));
    let seqid = again.luks.as_luks2().unwrap().seqid;
    let dump = cryptsetup_ok(&["luksDump", s(&img)]);
    assert_eq!(dump_field(&dump, "Epoch:"), seqid.to_string());
}

#[test]
fn corrupt_secondary_is_reported_and_primary_used() {
    let dir = TempDir::new("recov2");
    let img = sparse(&dir.join("img"), 20);
    let f = open_rw(&img);
    let key = random_key(64);
    Luks::format(
        &f,
        &opts(cryptkeep_luks::LuksVersion::V2, "aes-xts-plain64", 64, 512),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    f.write_at(&[0xff], 16384 + 4096 + 3).unwrap();
    let loaded = Luks::load(&f).unwrap();
    assert!(
        loaded.notices[0].contains("secondary"),
        "{:?}",
        loaded.notices
    );
    assert!(loaded.luks.verify_volume_key(&key).unwrap());
}

#[test]
fn wiped_primary_magic_recovers_and_stale_copy_is_noticed() {
    let dir = TempDir::new("recov3");
    let img = sparse(&dir.join("img"), 20);
    let f = open_rw(&img);
    let key = random_key(64);
    let mut l = Luks::format(
        &f,
        &opts(cryptkeep_luks::LuksVersion::V2, "aes-xts-plain64", 64, 512),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    // Keep the old primary, write a newer header, put the old primary back:
    // the primary is now valid but stale.
    let mut old = vec![0u8; 16384];
    f.read_at(&mut old, 0).unwrap();
    l.add_keyslot(&f, &key, b"q", None, &pbkdf2(), Backend::default())
        .unwrap();
    f.write_at(&old, 0).unwrap();
    let loaded = Luks::load(&f).unwrap();
    assert!(loaded.notices[0].contains("stale"), "{:?}", loaded.notices);
    assert_eq!(
        loaded.luks.keyslots().len(),
        2,
        "the newer (secondary) copy must win"
    );

    // No magic at all in the primary: found through the secondary.
    f.write_at(&[0u8; 8], 0).unwrap();
    let loaded = Luks::load(&f).unwrap();
    assert!(
        loaded.notices[0].contains("recovered from the secondary"),
        "{:?}",
        loaded.notices
    );
    assert!(loaded
        .luks
        .unlock(&f, b"q", None, Backend::default())
        .is_ok());
}
