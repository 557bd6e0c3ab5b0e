//! Headers that are damaged or hostile, at the command line: each is
//! refused with its documented exit code and one `cryptkeep: ` line that
//! says what is wrong, and a refused command leaves every byte of the
//! image as it was. Also: `format --offset 0` is the default offset, and
//! header backups of absurd layouts are bounded and match cryptsetup's.
//!
//! `CRYPTKEEP_TEST_BIN=/path/to/cryptkeep` runs these against another build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cryptkeep_crypto::HashAlg;
use serde_json::Value;

fn bin() -> PathBuf {
    std::env::var_os("CRYPTKEEP_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cryptkeep")))
}

/// A directory under /tmp removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("ck-hostile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn ck(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .env("CRYPTKEEP_RUN_DIR", self.path("run"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }
    fn ck_ok(&self, args: &[&str]) -> Output {
        let o = self.ck(args);
        assert!(
            o.status.success(),
            "cryptkeep {args:?}: exit {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }
    /// A small LUKS2 (or LUKS1) image with one PBKDF2 keyslot for `key`.
    fn volume(&self, name: &str, extra: &[&str]) -> PathBuf {
        let p = self.path(name);
        let key = self.key();
        let mut a = vec![
            "format",
            s(&p),
            "--size",
            "20M",
            "--batch-mode",
            "--key-file",
            s(&key),
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
        ];
        a.extend_from_slice(extra);
        self.ck_ok(&a);
        p
    }
    fn key(&self) -> PathBuf {
        let k = self.path("key");
        std::fs::write(&k, b"secret").unwrap();
        k
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn sha(p: &Path) -> Vec<u8> {
    HashAlg::Sha256.digest(&std::fs::read(p).unwrap())
}

/// Runs `args`, which must fail with `code` and print exactly one line,
/// `cryptkeep: ...`, containing `needle`; the image must not change.
fn refused(d: &Dir, img: &Path, code: i32, needle: &str, args: &[&str]) {
    let before = sha(img);
    let o = d.ck(args);
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.success() && args[0] == "open" {
        // Opened after all: close it so no daemon or loop device is left.
        d.ck(&["close", args[2]]);
    }
    assert_eq!(o.status.code(), Some(code), "cryptkeep {args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "cryptkeep {args:?} printed more than one line: {err}"
    );
    assert!(lines[0].starts_with("cryptkeep: "), "{err}");
    assert!(
        lines[0].contains(needle),
        "cryptkeep {args:?}: no '{needle}' in: {err}"
    );
    assert_eq!(sha(img), before, "cryptkeep {args:?} changed the image");
}

/// Rewrites the JSON of both LUKS2 copies (16 KiB metadata) with `f` and
/// fixes their checksums; `bin` edits each binary header first.
fn edit_luks2(img: &Path, f: &dyn Fn(&mut Value), bin: &dyn Fn(&mut [u8])) {
    const HDR: usize = 16384;
    let mut b = std::fs::read(img).unwrap();
    for base in [0, HDR] {
        bin(&mut b[base..base + 4096]);
        let area = &b[base + 4096..base + HDR];
        let end = area.iter().position(|&x| x == 0).unwrap();
        let mut v: Value = serde_json::from_slice(&area[..end]).unwrap();
        f(&mut v);
        let text = serde_json::to_vec(&v).unwrap();
        let area = &mut b[base + 4096..base + HDR];
        area.fill(0);
        area[..text.len()].copy_from_slice(&text);
        b[base + 448..base + 512].fill(0);
        let sum = HashAlg::Sha256.digest(&b[base..base + HDR]);
        b[base + 448..base + 480].copy_from_slice(&sum);
    }
    std::fs::write(img, &b).unwrap();
}

fn json(img: &Path, f: &dyn Fn(&mut Value)) {
    edit_luks2(img, f, &|_| {});
}

/// Whether cryptsetup is there for the comparisons that need it (a missing
/// one is reported, and fails the test under `CRYPTKEEP_TEST_ALL=1`).
fn has_cryptsetup() -> bool {
    cryptkeep_testkit::need::tool("cryptsetup")
}

#[test]
fn format_offset_0_is_the_default_offset() {
    let d = Dir::new("offset0");
    for (name, ty, field) in [
        ("v2.img", "luks2", "\"offset\": \"16777216\""),
        ("v1.img", "luks1", "\"payload_offset\": 4096"),
    ] {
        let img = d.volume(name, &["--type", ty, "--offset", "0"]);
        let out = d.ck_ok(&["dump", s(&img), "--json"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(field), "{ty} with --offset 0: {text}");
    }
    // With a detached header, offset 0 stays the data device's start.
    let hdr = d.path("hdr.img");
    let data = d.path("data.img");
    std::fs::write(&data, vec![0u8; 1 << 20]).unwrap();
    let key = d.key();
    d.ck_ok(&[
        "format",
        s(&data),
        "--header",
        s(&hdr),
        "--offset",
        "0",
        "--batch-mode",
        "--key-file",
        s(&key),
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "1000",
    ]);
    let out = d.ck_ok(&["dump", s(&hdr), "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"offset\": \"0\""));
}

#[test]
fn luks1_absurd_payload_offset_backs_up_like_cryptsetup() {
    let d = Dir::new("payload");
    let img = d.volume("v1.img", &["--type", "luks1"]);
    let mut b = std::fs::read(&img).unwrap();
    b[104..108].copy_from_slice(&u32::MAX.to_be_bytes());
    std::fs::write(&img, &b).unwrap();
    let before = sha(&img);
    let bak = d.path("ck.bak");
    d.ck_ok(&["header", "backup", s(&img), "--header-backup-file", s(&bak)]);
    // Header and keyslots (3536 + 500 sectors), rounded up to 4 KiB.
    assert_eq!(std::fs::metadata(&bak).unwrap().len(), 2_068_480);
    d.ck_ok(&[
        "header",
        "restore",
        s(&img),
        "--header-backup-file",
        s(&bak),
        "--batch-mode",
    ]);
    assert_eq!(sha(&img), before);
    if has_cryptsetup() {
        let cs = d.path("cs.bak");
        let o = Command::new("cryptsetup")
            .args(["luksHeaderBackup", s(&img), "--header-backup-file", s(&cs)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(&cs).unwrap(), std::fs::read(&bak).unwrap());
    }
}

#[test]
fn restore_refuses_a_backup_of_another_layout() {
    let d = Dir::new("layout");
    let a = d.volume("a.img", &["--type", "luks1"]);
    let other = d.volume("b.img", &["--type", "luks1", "--offset", "8192"]);
    let bak = d.path("b.bak");
    d.ck_ok(&[
        "header",
        "backup",
        s(&other),
        "--header-backup-file",
        s(&bak),
    ]);
    refused(
        &d,
        &a,
        1,
        "data offsets",
        &[
            "header",
            "restore",
            s(&a),
            "--header-backup-file",
            s(&bak),
            "--batch-mode",
        ],
    );
}

/// Each edit leaves the header loadable but its keyslot or segment unusable:
/// a damaged header (exit 6, saying so), never "wrong passphrase" (2) or a
/// bad option (1), and nothing is written.
#[test]
fn unusable_key_sizes_are_corrupt_headers() {
    type Edit = fn(&mut Value);
    let cases: [(Edit, &str); 6] = [
        (
            |v| v["keyslots"]["0"]["key_size"] = 33.into(),
            "keyslots.0.key_size 33",
        ),
        (
            |v| v["keyslots"]["0"]["key_size"] = 48.into(),
            "keyslots.0.key_size 48",
        ),
        (
            |v| v["keyslots"]["0"]["area"]["key_size"] = 33.into(),
            "keyslots.0.area.key_size 33",
        ),
        (
            |v| v["keyslots"]["0"]["area"]["key_size"] = 48.into(),
            "keyslots.0.area.key_size 48",
        ),
        (
            |v| v["segments"]["0"]["encryption"] = "aes-cbc-essiv:sha256".into(),
            "aes-cbc-essiv:sha256 takes a key of 16, 24 or 32 bytes, not 64",
        ),
        (
            |v| v["keyslots"]["0"]["kdf"] = serde_json::json!({"type": "argon2id", "time": 4, "memory": 1048576, "cpus": 4294967295u32, "salt": "uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="}),
            "kdf.cpus 4294967295",
        ),
    ];
    let d = Dir::new("keysize");
    let key = d.key();
    for (i, (edit, needle)) in cases.iter().enumerate() {
        let img = d.volume(&format!("c{i}.img"), &[]);
        json(&img, edit);
        refused(
            &d,
            &img,
            6,
            needle,
            &[
                "dump",
                s(&img),
                "--dump-volume-key",
                "--batch-mode",
                "--key-file",
                s(&key),
            ],
        );
        refused(
            &d,
            &img,
            6,
            needle,
            &[
                "keyslot",
                "add",
                s(&img),
                s(&key),
                "--key-file",
                s(&key),
                "--pbkdf",
                "pbkdf2",
                "--pbkdf-force-iterations",
                "1000",
            ],
        );
        refused(
            &d,
            &img,
            6,
            needle,
            &[
                "keyslot",
                "change",
                s(&img),
                s(&key),
                "--key-file",
                s(&key),
                "--pbkdf",
                "pbkdf2",
                "--pbkdf-force-iterations",
                "1000",
            ],
        );
    }
}

#[test]
fn luks1_key_bytes_the_cipher_cannot_use_is_a_corrupt_header() {
    let d = Dir::new("v1keysize");
    let key = d.key();
    let img = d.volume("v1.img", &["--type", "luks1"]);
    // 33 bytes still fit the keyslots (their material is sized by key-bytes).
    let mut b = std::fs::read(&img).unwrap();
    b[108..112].copy_from_slice(&33u32.to_be_bytes());
    std::fs::write(&img, &b).unwrap();
    refused(
        &d,
        &img,
        6,
        "key-bytes (offset 108) is 33",
        &[
            "dump",
            s(&img),
            "--dump-volume-key",
            "--batch-mode",
            "--key-file",
            s(&key),
        ],
    );
}

/// A header whose JSON area is almost full: the new keyslot's metadata does
/// not fit. The refusal must come before the key material is written.
#[test]
fn keyslot_add_that_cannot_fit_writes_nothing() {
    let d = Dir::new("full");
    let key = d.key();
    let img = d.volume("v.img", &[]);
    json(&img, &|v| {
        let used = serde_json::to_vec(v).unwrap().len();
        let pad = "x".repeat(12288 - used - 200);
        v["tokens"]["0"] = serde_json::json!({"type": "pad", "keyslots": [], "pad": pad});
    });
    d.ck_ok(&["isLuks", s(&img)]);
    refused(
        &d,
        &img,
        6,
        "does not fit",
        &[
            "keyslot",
            "add",
            s(&img),
            s(&key),
            "--key-file",
            s(&key),
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
        ],
    );
}

/// A 48-byte label without a terminating NUL reads as its first 47 bytes
/// (as in cryptsetup), and a keyslot can be added: the header is written
/// back with the label terminated.
#[test]
fn label_without_nul_reads_like_cryptsetup() {
    let d = Dir::new("label");
    let key = d.key();
    let img = d.volume("v.img", &[]);
    edit_luks2(&img, &|_| {}, &|bin| bin[24..72].fill(b'L'));
    let out = d.ck_ok(&["dump", s(&img)]);
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains(&format!("Label:         \t{}\n", "L".repeat(47))));
    d.ck_ok(&[
        "keyslot",
        "add",
        s(&img),
        s(&key),
        "--key-file",
        s(&key),
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "1000",
    ]);
    let b = std::fs::read(&img).unwrap();
    assert_eq!(&b[24..71], "L".repeat(47).as_bytes());
    assert_eq!(b[71], 0);
    if has_cryptsetup() {
        let o = Command::new("cryptsetup")
            .args([
                "open",
                "--test-passphrase",
                "--key-slot",
                "1",
                "--key-file",
                s(&key),
                s(&img),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A hand-edited data offset inside the header (LUKS2 segment offset 0,
/// LUKS1 payload-offset 0) is a detached header's value: with the header on
/// the volume itself, `open` refuses it as a corrupt header (exit 6) before
/// anything is served or written, also when --header names the volume.
#[test]
fn open_refuses_data_over_an_attached_header() {
    let d = Dir::new("attached");
    let key = d.key();
    let v2 = d.volume("v2.img", &[]);
    json(&v2, &|v| v["segments"]["0"]["offset"] = "0".into());
    let v1 = d.volume("v1.img", &["--type", "luks1"]);
    let mut b = std::fs::read(&v1).unwrap();
    b[104..108].copy_from_slice(&0u32.to_be_bytes());
    std::fs::write(&v1, &b).unwrap();
    for (img, needle) in [
        (&v2, "segments.0.offset is 0, inside the LUKS2 metadata"),
        (
            &v1,
            "payload-offset (offset 104) is sector 0, inside the LUKS1 header",
        ),
    ] {
        // The header itself loads, as in cryptsetup.
        d.ck_ok(&["isLuks", s(img)]);
        let alias = d.path("alias.img");
        let _ = std::fs::remove_file(&alias);
        std::fs::hard_link(img, &alias).unwrap();
        for extra in [
            vec![],
            vec!["--header", s(img)],
            vec!["--header", s(&alias)],
        ] {
            let mut a = vec!["open", s(img), "hostile", "--key-file", s(&key)];
            a.extend(extra);
            refused(&d, img, 6, needle, &a);
            assert!(
                !d.path("run").join("hostile").exists(),
                "open left state behind"
            );
        }
    }
}
