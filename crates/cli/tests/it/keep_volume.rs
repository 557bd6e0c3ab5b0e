//! The volume key never enters the I/O daemon with `--keep process` and
//! leaves no copy in the keep's readable memory. The key (obtained
//! independently with `cryptsetup luksDump --dump-volume-key`), the key
//! file, the keyslot's PBKDF2 output and the AF-split key material it
//! decrypts are searched for, every 16-byte run of each, in every readable
//! mapping (`/proc/PID/maps` + `/proc/PID/mem`) of the keep right after
//! `open` and of both processes after the volume was used. The same scan
//! finds the key in the daemon with `--keep inline`, so the test can fail.
//! Needs root, cryptsetup and losetup (scripts/install-deps.sh).

use crate::common::scan::scan;
use crate::common::{ck, tempdir, BIN};
use cryptkeep_crypto::{kdf, new_sector_cipher, Backend, CipherSpec, HashAlg, SecretBytes};
use cryptkeep_luks::luks2::json::Keyslot;
use cryptkeep_luks::luks2::keyslot::pbkdf_of;
use cryptkeep_luks::Luks;
use cryptkeep_testkit::need;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let run = self.0.join("run");
        if let Ok(rd) = fs::read_dir(&run) {
            for e in rd.flatten() {
                let _ = Command::new(BIN)
                    .env("CRYPTKEEP_RUN_DIR", &run)
                    .arg("close")
                    .arg(e.file_name())
                    .output();
            }
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The volume key as cryptsetup prints it ("MK dump:" hex lines).
fn cryptsetup_volume_key(vol: &Path, pass: &Path) -> Vec<u8> {
    let out = Command::new("cryptsetup")
        .args([
            "luksDump",
            "--dump-volume-key",
            "--batch-mode",
            "--key-file",
        ])
        .arg(pass)
        .arg(vol)
        .output()
        .expect("cryptsetup (scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hex = String::new();
    let mut on = false;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("MK dump:") {
            on = true;
            hex.push_str(rest);
        } else if on && l.starts_with(char::is_whitespace) {
            hex.push_str(l);
        } else if on {
            break;
        }
    }
    let hex: String = hex.split_whitespace().collect();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The keyslot key (KDF output) of keyslot 0 and the AF-split material
/// it decrypts, computed here from the header and the key file; checked by
/// merging the material back into `volume_key`.
fn keyslot_secrets(vol: &Path, pass: &[u8], volume_key: &[u8]) -> (SecretBytes, SecretBytes) {
    let f = fs::File::open(vol).unwrap();
    let loaded = Luks::load(&f).unwrap();
    let l2 = loaded.luks.as_luks2().expect("a LUKS2 header");
    let Some(Keyslot::Luks2(k)) = l2.meta.keyslots.get(&0) else {
        panic!("keyslot 0 is not a luks2 keyslot");
    };
    let pbkdf = pbkdf_of(&k.kdf).unwrap();
    let slot_key = kdf::derive(&pbkdf, pass, k.kdf.salt(), k.area.key_size as usize).unwrap();
    let n = k.key_size as usize * k.af.stripes as usize;
    let mut material = SecretBytes::new(n.div_ceil(512) * 512);
    f.read_exact_at(material.as_mut_slice(), k.area.offset.0)
        .unwrap();
    let spec = CipherSpec::parse(&k.area.encryption).unwrap();
    new_sector_cipher(&spec, slot_key.as_slice(), Backend::Portable)
        .unwrap()
        .decrypt(material.as_mut_slice(), 512, 0, 1)
        .unwrap();
    let material = SecretBytes::from_slice(&material.as_slice()[..n]);
    let hash = HashAlg::parse(&k.af.hash).unwrap();
    let merged =
        cryptkeep_crypto::af::merge(material.as_slice(), k.key_size as usize, k.af.stripes, hash)
            .unwrap();
    assert_eq!(
        merged.as_slice(),
        volume_key,
        "the AF material merges into the key"
    );
    (slot_key, material)
}

fn daemon_pid(dir: &Path, name: &str) -> i32 {
    let st = fs::read_to_string(dir.join("run").join(name).join("state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    v["pid"].as_i64().unwrap() as i32
}

fn keep_pid(dir: &Path, name: &str) -> i32 {
    let st = fs::read_to_string(dir.join("run").join(name).join("state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    v["keep"]["pid"].as_i64().unwrap() as i32
}

fn use_device(dev: &str) {
    // Write and read back through the loop device, so the keep has worked.
    let data: Vec<u8> = (0..(2u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .unwrap();
    f.write_all_at(&data, 1 << 20).unwrap();
    f.sync_all().unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 1 << 20).unwrap();
    assert!(back == data, "data read back through {dev} differs");
}

#[test]
fn the_io_daemon_never_holds_the_volume_key() {
    need!(root, fuse, loop_dev);
    need!(tool "cryptsetup");
    let dir = Dir(tempdir("ck-keepvol"));
    let d = &dir.0;
    let vol = d.join("vol.img");
    let pass = d.join("pass");
    // A binary key file of several KiB: read in more than one piece.
    let mut pass_bytes = vec![0u8; 5000];
    cryptkeep_crypto::rand::fill_random(&mut pass_bytes).unwrap();
    fs::write(&pass, &pass_bytes).unwrap();
    let (v, p) = (vol.to_str().unwrap(), pass.to_str().unwrap());
    ck(
        d,
        &[
            "format",
            v,
            "--size",
            "24M",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            p,
            "--batch-mode",
        ],
    );
    let key = cryptsetup_volume_key(&vol, &pass);
    assert_eq!(key.len(), 64, "aes-xts-plain64 with a 512-bit key");
    let (slot_key, material) = keyslot_secrets(&vol, &pass_bytes, &key);
    let secrets = [
        ("volume key", &key[..]),
        ("key file", &pass_bytes[..]),
        ("keyslot key", slot_key.as_slice()),
        ("AF material", material.as_slice()),
    ];

    for mode in ["process", "inline"] {
        let name = format!("k{mode}");
        let out = ck(d, &["open", v, &name, "--key-file", p, "--keep", mode]);
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if mode == "process" {
            // Right after open: what unlocking left behind. Root can read
            // the keep's ordinary memory (it has CAP_SYS_PTRACE); the key
            // and its schedules live in memfd_secret pages, which it cannot.
            let s = scan(keep_pid(d, &name), &secrets);
            assert!(
                s.hits.is_empty(),
                "after open --keep process, the keep's readable memory holds:\n{}",
                s.report(20)
            );
        }
        use_device(&dev);
        let daemon = scan(daemon_pid(d, &name), &secrets);
        if mode == "process" {
            assert!(
                daemon.hits.is_empty(),
                "with --keep process, the I/O daemon's memory holds:\n{}",
                daemon.report(20)
            );
            let s = scan(keep_pid(d, &name), &secrets);
            assert!(
                s.hits.is_empty(),
                "after serving, the keep's readable memory holds:\n{}",
                s.report(20)
            );
        } else {
            assert!(
                daemon.found("volume key"),
                "the scan finds no key in an inline daemon, which holds it"
            );
        }
        let st = ck(d, &["status", &name]);
        let text = String::from_utf8_lossy(&st.stdout);
        assert!(text.contains(&format!("keep:        {mode}")), "{text}");
        ck(d, &["close", &name]);
    }
}
