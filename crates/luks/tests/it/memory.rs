//! Header life cycle on an in-memory device (no external tools): format,
//! load, unlock, keyslot limits, errors.

use crate::common::*;
use cryptkeep_crypto::{Backend, HashAlg, Pbkdf};
use cryptkeep_luks::{BlockIo, Error, Luks, LuksVersion, MemIo};

#[test]
fn luks1_fills_all_eight_slots() {
    let io = MemIo::new(3 << 20);
    let key = random_key(32);
    let mut l = Luks::format(
        &io,
        &opts(LuksVersion::V1, "aes-xts-plain64", 32, 512),
        &key,
        b"p0",
        &pbkdf2(),
        Backend::Portable,
    )
    .unwrap();
    for i in 1..8 {
        let pass = format!("p{i}");
        assert_eq!(
            l.add_keyslot(
                &io,
                &key,
                pass.as_bytes(),
                None,
                &pbkdf2(),
                Backend::Portable
            )
            .unwrap(),
            i
        );
    }
    assert!(matches!(
        l.add_keyslot(&io, &key, b"x", None, &pbkdf2(), Backend::Portable),
        Err(Error::NoFreeKeyslot)
    ));
    assert!(matches!(
        l.add_keyslot(&io, &key, b"x", Some(8), &pbkdf2(), Backend::Portable),
        Err(Error::KeyslotOutOfRange(8))
    ));
    let l = Luks::load(&io).unwrap().luks;
    assert_eq!(l.unlock(&io, b"p5", None, Backend::Portable).unwrap().0, 5);
    assert!(matches!(
        l.unlock(&io, b"p5", Some(4), Backend::Portable),
        Err(Error::WrongPassphrase)
    ));
    // LUKS1 keyslots cannot use Argon2 or another hash than the header's.
    let mut l = l;
    l.remove_keyslot(&io, 3).unwrap();
    assert!(matches!(
        l.add_keyslot(&io, &key, b"x", None, &argon2id(), Backend::Portable),
        Err(Error::Unsupported(_))
    ));
    let sha1 = Pbkdf::Pbkdf2 {
        hash: HashAlg::Sha1,
        iterations: 1000,
    };
    assert!(matches!(
        l.add_keyslot(&io, &key, b"x", None, &sha1, Backend::Portable),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn luks2_lifecycle_and_json_round_trip() {
    let io = MemIo::new(17 << 20);
    let key = random_key(64);
    let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 4096);
    o.label = Some("data".into());
    o.subsystem = Some("test".into());
    o.uuid = Some("12345678-1234-4234-8234-123456789ABC".into());
    let mut l = Luks::format(&io, &o, &key, b"p0", &argon2i(), Backend::Portable).unwrap();
    assert_eq!(l.uuid(), "12345678-1234-4234-8234-123456789abc");
    assert_eq!(l.label(), Some("data"));
    let s = l
        .add_keyslot(&io, &key, b"p5", Some(5), &pbkdf2(), Backend::Portable)
        .unwrap();
    assert_eq!(s, 5);
    let seg = l.segment().unwrap();
    assert_eq!(
        (seg.offset, seg.size, seg.sector_size, seg.key_bytes),
        (16 << 20, None, 4096, 64)
    );
    let json_before = l.dump_json();
    let loaded = Luks::load(&io).unwrap();
    assert!(loaded.notices.is_empty());
    let l2 = loaded.luks;
    assert_eq!(l2.dump_json(), json_before);
    assert_eq!(l2.unlock(&io, b"p5", None, Backend::Portable).unwrap().0, 5);
    assert!(matches!(
        l2.unlock(&io, b"p5", Some(31), Backend::Portable),
        Err(Error::KeyslotInactive(31))
    ));
    assert!(matches!(
        l2.unlock(&io, b"p5", Some(32), Backend::Portable),
        Err(Error::KeyslotOutOfRange(32))
    ));
    // Areas do not overlap and the removed slot's area is reused.
    l.remove_keyslot(&io, 0).unwrap();
    let again = l
        .add_keyslot(&io, &key, b"p1", None, &pbkdf2(), Backend::Portable)
        .unwrap();
    assert_eq!(again, 0);
    let j = l.dump_json();
    assert_eq!(j["keyslots"]["0"]["area"]["offset"], "32768");
    assert_eq!(j["keyslots"]["5"]["area"]["offset"], "290816");
    assert_eq!(j["digests"]["0"]["keyslots"], serde_json::json!(["0", "5"]));
}

#[test]
fn format_rejects_bad_options_without_writing() {
    let io = MemIo::new(1 << 20);
    let key = random_key(64);
    let cases: Vec<(cryptkeep_luks::FormatOptions, &str)> = vec![
        (
            {
                let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 1000);
                o.key_bytes = 64;
                o
            },
            "sector size",
        ),
        (
            opts(LuksVersion::V1, "aes-xts-plain64", 64, 4096),
            "512-byte",
        ),
        (
            {
                let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 512);
                o.data_offset = Some(8192);
                o
            },
            "data offset",
        ),
        (
            {
                let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 512);
                o.uuid = Some("nope".into());
                o
            },
            "UUID",
        ),
        (
            {
                let mut o = opts(LuksVersion::V2, "aes-xts-plain64", 64, 512);
                o.auth = Some(cryptkeep_luks::AuthFormat {
                    encryption: "aegis128-random".into(),
                    integrity: "aead".into(),
                });
                o
            },
            "'aegis128-random' cannot use a 64-byte cipher key",
        ),
        (
            opts(LuksVersion::V2, "aes-xts-plain64", 32, 512),
            "key_bytes",
        ),
    ];
    for (o, expect) in cases {
        let e = Luks::format(&io, &o, &key, b"p", &pbkdf2(), Backend::Portable)
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "expected '{expect}' in: {e}");
    }
    assert!(
        io.to_vec().iter().all(|&b| b == 0),
        "a rejected format wrote to the device"
    );
}

#[test]
fn empty_device_is_not_luks() {
    assert!(matches!(
        Luks::load(&MemIo::new(1 << 20)),
        Err(Error::NotLuks)
    ));
    assert!(matches!(Luks::load(&MemIo::new(0)), Err(Error::NotLuks)));
    let io = MemIo::new(300);
    io.write_at(b"LUKS\xba\xbe\x00\x01", 0).unwrap();
    assert!(Luks::load(&io)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    let io = MemIo::new(3000);
    io.write_at(b"LUKS\xba\xbe\x00\x02", 0).unwrap();
    assert!(Luks::load(&io)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
}
