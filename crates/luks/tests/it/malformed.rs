//! Malformed-header generators (in the spirit of cryptsetup tests/generators):
//! each damages a valid header — keeping LUKS2 checksums valid so the
//! semantic check is what fires — and must be rejected with an error naming
//! the problem, leaving the file's bytes unchanged.

use crate::common::*;
use cryptkeep_crypto::{Backend, HashAlg};
use cryptkeep_luks::{Luks, LuksVersion};
use serde_json::Value;

const HDR: usize = 16384;

/// Rewrite the JSON of both LUKS2 copies with `f` and fix their checksums.
pub fn edit_json(img: &mut [u8], f: &dyn Fn(&mut Value)) {
    for base in [0, HDR] {
        let area = &img[base + 4096..base + HDR];
        let end = area.iter().position(|&b| b == 0).unwrap();
        let mut v: Value = serde_json::from_slice(&area[..end]).unwrap();
        f(&mut v);
        let text = serde_json::to_vec(&v).unwrap();
        let area = &mut img[base + 4096..base + HDR];
        area.fill(0);
        area[..text.len()].copy_from_slice(&text);
        fix_csum(img, base);
    }
}

/// Recompute the sha256 checksum of the copy at `base`.
fn fix_csum(img: &mut [u8], base: usize) {
    let hdr_size = u64::from_be_bytes(img[base + 8..base + 16].try_into().unwrap()) as usize;
    let hdr_size = hdr_size.min(img.len() - base).max(512);
    let mut copy = img[base..base + hdr_size].to_vec();
    copy[448..512].fill(0);
    let sum = HashAlg::Sha256.digest(&copy);
    img[base + 448..base + 512].fill(0);
    img[base + 448..base + 448 + 32].copy_from_slice(&sum);
}

fn both_bin(img: &mut [u8], off: usize, bytes: &[u8]) {
    for base in [0, HDR] {
        img[base + off..base + off + bytes.len()].copy_from_slice(bytes);
        fix_csum(img, base);
    }
}

type Gen = (&'static str, &'static str, Box<dyn Fn(&mut Vec<u8>)>);

fn json_gen(name: &'static str, expect: &'static str, f: fn(&mut Value)) -> Gen {
    (
        name,
        expect,
        Box::new(move |img: &mut Vec<u8>| edit_json(img, &f)),
    )
}

fn luks2_generators() -> Vec<Gen> {
    vec![
        (
            "bad magic",
            "not a LUKS device",
            Box::new(|img: &mut Vec<u8>| {
                img[0] = b'X';
                img[HDR] = b'X';
            }),
        ),
        (
            "bad checksum",
            "checksum mismatch",
            Box::new(|img: &mut Vec<u8>| {
                img[4096 + 20] ^= 1;
                img[HDR + 4096 + 20] ^= 1;
            }),
        ),
        (
            "truncated",
            "truncated",
            Box::new(|img: &mut Vec<u8>| img.truncate(8192)),
        ),
        (
            "hdr_size not allowed",
            "hdr_size 20000",
            Box::new(|img: &mut Vec<u8>| {
                both_bin(img, 8, &20000u64.to_be_bytes());
            }),
        ),
        (
            "hdr_offset lies",
            "hdr_offset",
            Box::new(|img: &mut Vec<u8>| {
                both_bin(img, 256, &4096u64.to_be_bytes());
            }),
        ),
        (
            "garbage after JSON",
            "non-zero byte after the JSON",
            Box::new(|img: &mut Vec<u8>| {
                for base in [0, HDR] {
                    img[base + HDR - 10] = b'x';
                    fix_csum(img, base);
                }
            }),
        ),
        json_gen("json_size lies", "config.json_size", |v| {
            v["config"]["json_size"] = "8192".into()
        }),
        json_gen("keyslot areas overlap", "overlaps keyslots.", |v| {
            let ks = v["keyslots"]["0"].clone();
            v["keyslots"]["1"] = ks;
            v["digests"]["0"]["keyslots"] = serde_json::json!(["0", "1"]);
        }),
        json_gen(
            "keyslot area over header",
            "overlaps the two metadata copies",
            |v| v["keyslots"]["0"]["area"]["offset"] = "16384".into(),
        ),
        json_gen(
            "keyslot area past keyslots area",
            "runs past the keyslots area",
            |v| v["keyslots"]["0"]["area"]["offset"] = "16773120".into(),
        ),
        json_gen("keyslots area over data", "segments.0.offset", |v| {
            v["config"]["keyslots_size"] = "16777216".into()
        }),
        json_gen("u64 overflow", "does not fit in 64 bits", |v| {
            v["segments"]["0"]["offset"] = "18446744073709551616".into()
        }),
        json_gen("area offset+size overflow", "overflows 64 bits", |v| {
            v["keyslots"]["0"]["area"]["offset"] = "18446744073709551000".into()
        }),
        json_gen("key_size 0", "keyslots.0.key_size 0", |v| {
            v["keyslots"]["0"]["key_size"] = 0.into()
        }),
        json_gen("key_size too big", "keyslots.0.key_size 1024", |v| {
            v["keyslots"]["0"]["key_size"] = 1024.into()
        }),
        json_gen("stripes", "af.stripes is 3999", |v| {
            v["keyslots"]["0"]["af"]["stripes"] = 3999.into()
        }),
        json_gen("sector_size not power of two", "sector_size 1000", |v| {
            v["segments"]["0"]["sector_size"] = 1000.into()
        }),
        json_gen("sector_size too big", "sector_size 8192", |v| {
            v["segments"]["0"]["sector_size"] = 8192.into()
        }),
        json_gen(
            "segment offset unaligned",
            "offset 16777217 is not aligned",
            |v| v["segments"]["0"]["offset"] = "16777217".into(),
        ),
        json_gen("digest names missing keyslot", "missing keyslot '7'", |v| {
            v["digests"]["0"]["keyslots"] = serde_json::json!(["0", "7"])
        }),
        json_gen("missing section", "missing 'digests'", |v| {
            v.as_object_mut().unwrap().remove("digests");
        }),
        json_gen("argon2 memory absurd", "kdf.memory 4294967295 KiB", |v| {
            v["keyslots"]["0"]["kdf"] = serde_json::json!({"type": "argon2id", "time": 4, "memory": 4294967295u32, "cpus": 1, "salt": "uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="})
        }),
        json_gen(
            "argon2 lanes past RFC 9106",
            "kdf.cpus 16777216 exceeds",
            |v| v["keyslots"]["0"]["kdf"] = serde_json::json!({"type": "argon2id", "time": 4, "memory": 4194304, "cpus": 16777216u32, "salt": "uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="}),
        ),
        json_gen(
            "argon2 memory below 8 KiB per lane",
            "8 KiB per lane",
            |v| v["keyslots"]["0"]["kdf"] = serde_json::json!({"type": "argon2i", "time": 4, "memory": 64, "cpus": 9, "salt": "uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="}),
        ),
        json_gen("kdf salt length", "kdf.salt is 3 bytes", |v| {
            v["keyslots"]["0"]["kdf"]["salt"] = "YWJj".into()
        }),
        // Every field that sizes an allocation or places an offset, at the
        // extremes of its type.
        (
            "hdr_size all ones",
            "hdr_size",
            Box::new(|img: &mut Vec<u8>| both_bin(img, 8, &u64::MAX.to_be_bytes())),
        ),
        (
            "hdr_size 0",
            "hdr_size",
            Box::new(|img: &mut Vec<u8>| both_bin(img, 8, &0u64.to_be_bytes())),
        ),
        (
            "hdr_offset all ones",
            "hdr_offset",
            Box::new(|img: &mut Vec<u8>| both_bin(img, 256, &u64::MAX.to_be_bytes())),
        ),
        json_gen("json_size all ones", "config.json_size", |v| {
            v["config"]["json_size"] = u64::MAX.to_string().into()
        }),
        json_gen("keyslots_size all ones", "keyslots_size", |v| {
            v["config"]["keyslots_size"] = u64::MAX.to_string().into()
        }),
        json_gen("keyslots_size past 128 MiB", "keyslots_size", |v| {
            v["config"]["keyslots_size"] = (256u64 << 20).to_string().into()
        }),
        json_gen("area size all ones", "overflows 64 bits", |v| {
            v["keyslots"]["0"]["area"]["size"] = u64::MAX.to_string().into()
        }),
        json_gen("area smaller than its material", "keyslots.0.area", |v| {
            v["keyslots"]["0"]["area"]["size"] = "4096".into()
        }),
        json_gen("area key_size all ones", "keyslots.0.area.key_size", |v| {
            v["keyslots"]["0"]["area"]["key_size"] = u32::MAX.into()
        }),
        json_gen("key_size all ones", "keyslots.0.key_size 4294967295", |v| {
            v["keyslots"]["0"]["key_size"] = u32::MAX.into()
        }),
        json_gen("stripes all ones", "af.stripes is 4294967295", |v| {
            v["keyslots"]["0"]["af"]["stripes"] = u32::MAX.into()
        }),
        json_gen("segment size all ones", "segments.0", |v| {
            v["segments"]["0"]["size"] = u64::MAX.to_string().into()
        }),
        json_gen(
            "segment inside the keyslots area",
            "segments.0.offset",
            |v| v["segments"]["0"]["offset"] = "16384".into(),
        ),
        json_gen("sector_size 0", "sector_size 0", |v| {
            v["segments"]["0"]["sector_size"] = 0.into()
        }),
        json_gen("digest length", "digests.0.digest is 3 bytes", |v| {
            v["digests"]["0"]["digest"] = "YWJj".into()
        }),
        json_gen("digest salt length", "digests.0", |v| {
            v["digests"]["0"]["salt"] = "YWJj".into()
        }),
        json_gen("argon2 cpus all ones", "kdf.cpus 4294967295 exceeds", |v| {
            v["keyslots"]["0"]["kdf"] = serde_json::json!({"type": "argon2id", "time": 4, "memory": 1048576, "cpus": 4294967295u32, "salt": "uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="})
        }),
    ]
}

fn le_be32(img: &mut [u8], off: usize, v: u32) {
    img[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn luks1_generators() -> Vec<Gen> {
    vec![
        (
            "v1 key_bytes 0",
            "key-bytes (offset 108) is 0",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 108, 0)),
        ),
        (
            "v1 key_bytes huge",
            "key-bytes (offset 108) is 4096",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 108, 4096)),
        ),
        (
            "v1 stripes",
            "keyslot 3 stripes",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 3 * 48 + 44, 4001)),
        ),
        (
            "v1 active garbage",
            "keyslot 2 active field",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 2 * 48, 0x1234)),
        ),
        (
            "v1 keyslot over header",
            "overlaps the header",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 40, 1)),
        ),
        (
            "v1 keyslots overlap",
            "overlaps keyslot",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 48 + 40, 100)),
        ),
        (
            "v1 keyslot past payload",
            "runs past payload-offset",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 104, 1000)),
        ),
        (
            "v1 hash",
            "hash-spec",
            Box::new(|img: &mut Vec<u8>| img[72..78].copy_from_slice(b"nohash")),
        ),
        (
            "v1 version",
            "version",
            Box::new(|img: &mut Vec<u8>| img[7] = 3),
        ),
        (
            "v1 key_bytes all ones",
            "key-bytes (offset 108) is 4294967295",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 108, u32::MAX)),
        ),
        (
            "v1 stripes all ones",
            "keyslot 0 stripes",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 44, u32::MAX)),
        ),
        (
            "v1 key material offset all ones",
            "keyslot 0",
            Box::new(|img: &mut Vec<u8>| le_be32(img, 208 + 40, u32::MAX)),
        ),
        (
            "v1 key material past the device",
            "truncated image",
            Box::new(|img: &mut Vec<u8>| {
                le_be32(img, 104, u32::MAX);
                le_be32(img, 208 + 7 * 48 + 40, u32::MAX - 600);
            }),
        ),
        (
            "v1 truncated",
            "truncated",
            Box::new(|img: &mut Vec<u8>| img.truncate(300)),
        ),
        (
            "v1 image smaller than keyslots",
            "truncated image",
            Box::new(|img: &mut Vec<u8>| img.truncate(1 << 20)),
        ),
    ]
}

fn run(version: LuksVersion, gens: Vec<Gen>) {
    let dir = TempDir::new("malformed");
    let base_img = sparse(&dir.join("base"), 17);
    let f = open_rw(&base_img);
    let key = random_key(64);
    let sector = if version == LuksVersion::V2 {
        4096
    } else {
        512
    };
    Luks::format(
        &f,
        &opts(version, "aes-xts-plain64", 64, sector),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    drop(f);
    let base = std::fs::read(&base_img).unwrap();
    let mut failures = Vec::new();
    for (i, (name, expect, g)) in gens.iter().enumerate() {
        let mut img = base.clone();
        g(&mut img);
        let p = dir.join(&format!("case{i}"));
        std::fs::write(&p, &img).unwrap();
        let before = HashAlg::Sha256.digest(&std::fs::read(&p).unwrap());
        let f = open_rw(&p);
        match Luks::load(&f) {
            Ok(l) => failures.push(format!("{name}: accepted (notices {:?})", l.notices)),
            Err(e) => {
                let msg = e.to_string();
                if !msg.contains(expect) {
                    failures.push(format!("{name}: error does not mention '{expect}': {msg}"));
                }
            }
        }
        let after = HashAlg::Sha256.digest(&std::fs::read(&p).unwrap());
        if before != after {
            failures.push(format!("{name}: file changed"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn luks2_malformed_headers_are_rejected() {
    run(LuksVersion::V2, luks2_generators());
}

#[test]
fn luks1_malformed_headers_are_rejected() {
    run(LuksVersion::V1, luks1_generators());
}

/// The unmodified base images load, so the generators test what they claim.
#[test]
fn generators_start_from_valid_headers() {
    run_valid(LuksVersion::V2);
    run_valid(LuksVersion::V1);
}

fn run_valid(version: LuksVersion) {
    let dir = TempDir::new("valid");
    let p = sparse(&dir.join("img"), 17);
    let f = open_rw(&p);
    let key = random_key(64);
    let sector = if version == LuksVersion::V2 {
        4096
    } else {
        512
    };
    Luks::format(
        &f,
        &opts(version, "aes-xts-plain64", 64, sector),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    let mut img = std::fs::read(&p).unwrap();
    if version == LuksVersion::V2 {
        edit_json(&mut img, &|_| {});
    }
    std::fs::write(&p, &img).unwrap();
    let l = Luks::load(&open_rw(&p)).unwrap();
    assert!(l.notices.is_empty());
    assert!(l.luks.verify_volume_key(&key).unwrap());
}

/// Unknown mandatory requirements make segment() fail, naming the requirement.
#[test]
fn unknown_requirement_blocks_segment() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("req");
    let p = sparse(&dir.join("img"), 17);
    let f = open_rw(&p);
    let key = random_key(64);
    Luks::format(
        &f,
        &opts(LuksVersion::V2, "aes-xts-plain64", 64, 512),
        &key,
        b"p",
        &pbkdf2(),
        Backend::default(),
    )
    .unwrap();
    drop(f);
    let mut img = std::fs::read(&p).unwrap();
    edit_json(&mut img, &|v| {
        v["config"]["requirements"] = serde_json::json!({"mandatory": ["quantum-reencrypt"]})
    });
    std::fs::write(&p, &img).unwrap();
    let f = open_rw(&p);
    let l = Luks::load(&f).unwrap().luks;
    let e = l.segment().unwrap_err();
    assert!(e.to_string().contains("quantum-reencrypt"), "{e}");
    assert!(l.dump().contains("Requirements:\tquantum-reencrypt"));
    // cryptsetup agrees the header is otherwise valid.
    let dump = cryptsetup_ok(&["luksDump", s(&p)]);
    assert!(dump.contains("quantum-reencrypt"), "{dump}");
}

/// parse → write → parse keeps the metadata (incl. unknown fields and tokens).
#[test]
fn luks2_write_round_trip_keeps_everything() {
    need!(tool "cryptsetup");
    let dir = TempDir::new("rt");
    let p = sparse(&dir.join("img"), 20);
    let k0 = keyfile(&dir, "k0", b"zero");
    let mut a = vec![
        "luksFormat",
        "--batch-mode",
        "--type",
        "luks2",
        "--label",
        "mylabel",
        "--key-file",
        s(&k0),
    ];
    a.extend(cs_kdf_args("argon2id"));
    a.push(s(&p));
    cryptsetup_ok(&a);
    let mut img = std::fs::read(&p).unwrap();
    edit_json(&mut img, &|v| {
        v["tokens"]["0"] = serde_json::json!({"type": "systemd-fido2", "keyslots": ["0"], "fido2-credential": "AAAA", "x": [1, {"y": null}]});
        v["config"]["flags"] = serde_json::json!(["allow-discards"]);
        v["keyslots"]["0"]["future-field"] = serde_json::json!({"a": 1});
    });
    std::fs::write(&p, &img).unwrap();
    let f = open_rw(&p);
    let mut l = Luks::load(&f).unwrap().luks;
    assert_eq!(l.label(), Some("mylabel"));
    let before = l.dump_json();
    let seqid = l.as_luks2().unwrap().seqid;
    l.as_luks2_mut().unwrap().write(&f).unwrap();
    let l2 = Luks::load(&f).unwrap();
    assert!(l2.notices.is_empty());
    assert_eq!(l2.luks.dump_json(), before);
    assert_eq!(l2.luks.as_luks2().unwrap().seqid, seqid + 1);
    assert_eq!(l2.luks.label(), Some("mylabel"));
    // cryptsetup still opens it and sees the token.
    assert!(test_passphrase(&p, &k0, None, None));
    let dump = cryptsetup_ok(&["luksDump", s(&p)]);
    assert!(
        dump.contains("systemd-fido2") && dump.contains("allow-discards"),
        "{dump}"
    );
    assert_eq!(dump_field(&dump, "Epoch:"), (seqid + 1).to_string());
}

/// Headers that load (cryptsetup loads them too) but must be refused where
/// they are used: a data offset inside the header for an attached header, a
/// key size no cipher of the header can take, an absurd LUKS1 payload
/// offset whose backup must stay bounded. Each names the field.
#[test]
fn loadable_headers_are_refused_where_used() {
    type Check = fn(&Luks, &std::fs::File) -> Result<(), cryptkeep_luks::Error>;
    let attached: Check = |l, _| l.check_attached();
    let segment: Check = |l, _| l.segment().map(|_| ());
    let unlock: Check = |l, f| l.unlock(f, b"p", None, Backend::default()).map(|_| ());
    let backup: Check = |l, f| {
        assert_eq!(l.header_len(), l.as_luks1().unwrap().phdr.keyslots_end());
        let out = cryptkeep_luks::MemIo::new(cryptkeep_luks::backup::backup_len(l) as usize);
        cryptkeep_luks::backup::write_backup(l, f, &out)?;
        Err(cryptkeep_luks::Error::WrongVolumeKey)
    };
    type Case = (
        LuksVersion,
        &'static str,
        Box<dyn Fn(&mut Vec<u8>)>,
        Check,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            LuksVersion::V1,
            "v1 payload 0 attached",
            Box::new(|img| le_be32(img, 104, 0)),
            attached,
            "payload-offset (offset 104) is sector 0",
        ),
        (
            LuksVersion::V2,
            "segment offset 0 attached",
            Box::new(|img| edit_json(img, &|v| v["segments"]["0"]["offset"] = "0".into())),
            attached,
            "segments.0.offset is 0",
        ),
        (
            LuksVersion::V1,
            "v1 key_bytes 33",
            Box::new(|img| le_be32(img, 108, 33)),
            segment,
            "key-bytes (offset 108) is 33",
        ),
        (
            LuksVersion::V2,
            "segment cipher with another key size",
            Box::new(|img| {
                edit_json(img, &|v| {
                    v["segments"]["0"]["encryption"] = "aes-cbc-essiv:sha256".into()
                })
            }),
            segment,
            "takes a key of 16, 24 or 32 bytes, not 64",
        ),
        (
            LuksVersion::V2,
            "keyslot key_size 48",
            Box::new(|img| edit_json(img, &|v| v["keyslots"]["0"]["key_size"] = 48.into())),
            unlock,
            "keyslots.0.key_size 48",
        ),
        (
            LuksVersion::V2,
            "keyslot area key_size 33",
            Box::new(|img| edit_json(img, &|v| v["keyslots"]["0"]["area"]["key_size"] = 33.into())),
            unlock,
            "keyslots.0.area.key_size 33",
        ),
        (
            LuksVersion::V1,
            "v1 payload all ones backs up bounded",
            Box::new(|img| le_be32(img, 104, u32::MAX)),
            backup,
            "volume key does not match",
        ),
    ];
    let dir = TempDir::new("usable");
    let mut failures = Vec::new();
    for (i, (version, name, edit, check, expect)) in cases.iter().enumerate() {
        let p = sparse(&dir.join(&format!("case{i}")), 17);
        let f = open_rw(&p);
        let sector = if *version == LuksVersion::V2 {
            4096
        } else {
            512
        };
        Luks::format(
            &f,
            &opts(*version, "aes-xts-plain64", 64, sector),
            &random_key(64),
            b"p",
            &pbkdf2(),
            Backend::default(),
        )
        .unwrap();
        drop(f);
        let mut img = std::fs::read(&p).unwrap();
        edit(&mut img);
        std::fs::write(&p, &img).unwrap();
        let f = open_rw(&p);
        let l = match Luks::load(&f) {
            Ok(l) => l.luks,
            Err(e) => {
                failures.push(format!("{name}: does not load: {e}"));
                continue;
            }
        };
        match check(&l, &f) {
            Ok(()) => failures.push(format!("{name}: accepted")),
            Err(e) if !e.to_string().contains(expect) => {
                failures.push(format!("{name}: error does not mention '{expect}': {e}"))
            }
            Err(_) => {}
        }
        if std::fs::read(&p).unwrap() != img {
            failures.push(format!("{name}: file changed"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
