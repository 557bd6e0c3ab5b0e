//! Keyslot changes both ways: ours seen by cryptsetup, cryptsetup's seen by us.

use crate::common::*;
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{Error, Luks, LuksVersion};

fn we_add_and_remove(version: LuksVersion) {
    need!(tool "cryptsetup");
    let dir = TempDir::new("ks-ours");
    let img = sparse(&dir.join("img"), 20);
    let k0 = keyfile(&dir, "k0", b"first");
    let k1 = keyfile(&dir, "k1", b"second");
    let key = random_key(64);
    let f = open_rw(&img);
    let mut l = Luks::format(
        &f,
        &opts(version, "aes-xts-plain64", 64, 512),
        &key,
        b"first",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    let kdf = if version == LuksVersion::V2 {
        argon2id()
    } else {
        pbkdf2()
    };
    let slot = l
        .add_keyslot(&f, &key, b"second", None, &kdf, Backend::default())
        .unwrap();
    assert_eq!(slot, 1);
    assert!(test_passphrase(&img, &k1, None, Some(1)));
    assert!(test_passphrase(&img, &k0, None, Some(0)));
    // A wrong volume key is refused before anything is written.
    assert!(matches!(
        l.add_keyslot(&f, &random_key(64), b"x", None, &kdf, Backend::default()),
        Err(Error::WrongVolumeKey)
    ));
    assert!(matches!(
        l.add_keyslot(&f, &key, b"x", Some(1), &kdf, Backend::default()),
        Err(Error::KeyslotActive(1))
    ));
    l.remove_keyslot(&f, 0).unwrap();
    assert!(
        !test_passphrase(&img, &k0, None, None),
        "cryptsetup still opens the removed slot"
    );
    assert!(test_passphrase(&img, &k1, None, None));
    assert!(matches!(
        l.remove_keyslot(&f, 0),
        Err(Error::KeyslotInactive(0))
    ));
    // Reload: our view agrees.
    let l2 = Luks::load(&f).unwrap().luks;
    assert!(matches!(
        l2.unlock(&f, b"first", None, Backend::default()),
        Err(Error::WrongPassphrase)
    ));
    assert_eq!(
        l2.unlock(&f, b"second", None, Backend::default())
            .unwrap()
            .0,
        1
    );
    assert_eq!(dump_volume_key(&img, &k1, None), key);
    let active: Vec<usize> = l2
        .keyslots()
        .iter()
        .filter(|k| k.active)
        .map(|k| k.slot)
        .collect();
    assert_eq!(active, vec![1]);
}

#[test]
fn v2_we_add_and_remove() {
    we_add_and_remove(LuksVersion::V2);
}

#[test]
fn v1_we_add_and_remove() {
    we_add_and_remove(LuksVersion::V1);
}

fn cryptsetup_changes(version: LuksVersion) {
    need!(tool "cryptsetup");
    let dir = TempDir::new("ks-cs");
    let img = sparse(&dir.join("img"), 20);
    let k0 = keyfile(&dir, "k0", b"zero");
    let k1 = keyfile(&dir, "k1", b"one");
    let k2 = keyfile(&dir, "k2", b"two");
    let ty = if version == LuksVersion::V1 {
        "luks1"
    } else {
        "luks2"
    };
    let kdf: Vec<&str> = if version == LuksVersion::V1 {
        vec!["--pbkdf-force-iterations", "1000"]
    } else {
        cs_kdf_args("argon2id")
    };
    let run = |extra: &[&str], positional: &[&str]| {
        let mut a: Vec<&str> = extra.to_vec();
        a.extend(kdf.iter().copied());
        a.extend(positional.iter().copied());
        cryptsetup_ok(&a);
    };
    run(
        &[
            "luksFormat",
            "--batch-mode",
            "--type",
            ty,
            "--key-file",
            s(&k0),
        ],
        &[s(&img)],
    );
    run(
        &["luksAddKey", "--batch-mode", "--key-file", s(&k0)],
        &[s(&img), s(&k1)],
    );
    let f = open_rw(&img);
    let l = Luks::load(&f).unwrap().luks;
    let (slot, key) = l.unlock(&f, b"one", None, Backend::default()).unwrap();
    assert_eq!(slot, 1);
    assert_eq!(key.as_slice(), &dump_volume_key(&img, &k0, None)[..]);
    assert_eq!(
        l.unlock(&f, b"zero", None, Backend::default()).unwrap().0,
        0
    );
    assert!(matches!(
        l.unlock(&f, b"one", Some(0), Backend::default()),
        Err(Error::WrongPassphrase)
    ));

    // luksChangeKey: "one" → "two" (cryptsetup may move it to another slot).
    let mut a = vec!["luksChangeKey", "--batch-mode", "--key-file", s(&k1)];
    a.extend(kdf.iter().copied());
    a.extend([s(&img), s(&k2)]);
    cryptsetup_ok(&a);
    let l = Luks::load(&f).unwrap().luks;
    assert!(matches!(
        l.unlock(&f, b"one", None, Backend::default()),
        Err(Error::WrongPassphrase)
    ));
    let (_, k) = l.unlock(&f, b"two", None, Backend::default()).unwrap();
    assert_eq!(k.as_slice(), key.as_slice());

    // luksKillSlot 0.
    cryptsetup_ok(&[
        "luksKillSlot",
        "--batch-mode",
        "--key-file",
        s(&k2),
        s(&img),
        "0",
    ]);
    let l = Luks::load(&f).unwrap().luks;
    assert!(matches!(
        l.unlock(&f, b"zero", None, Backend::default()),
        Err(Error::WrongPassphrase)
    ));
    assert!(matches!(
        l.unlock(&f, b"zero", Some(0), Backend::default()),
        Err(Error::KeyslotInactive(0))
    ));
    assert!(l.unlock(&f, b"two", None, Backend::default()).is_ok());
}

#[test]
fn v2_cryptsetup_changes() {
    cryptsetup_changes(LuksVersion::V2);
}

#[test]
fn v1_cryptsetup_changes() {
    cryptsetup_changes(LuksVersion::V1);
}

/// LUKS2 priorities: a priority-0 slot is only tried when named; we keep
/// cryptsetup's setting.
#[test]
fn v2_priority_ignore() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("ks-prio");
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
    cryptsetup_ok(&["config", "--priority", "ignore", "--key-slot", "0", s(&img)]);
    let f = open_rw(&img);
    let l = Luks::load(&f).unwrap().luks;
    assert_eq!(l.keyslots()[0].priority, Some(0));
    assert!(matches!(
        l.unlock(&f, b"zero", None, Backend::default()),
        Err(Error::WrongPassphrase)
    ));
    assert_eq!(
        l.unlock(&f, b"zero", Some(0), Backend::default())
            .unwrap()
            .0,
        0
    );
}
