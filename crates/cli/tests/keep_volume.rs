//! The volume key never enters the I/O daemon with `--keep process`: the
//! key, obtained independently with `cryptsetup luksDump
//! --dump-volume-key`, is searched for in every readable mapping of the
//! daemon (`/proc/PID/maps` + `/proc/PID/mem`) while the volume is open and
//! in use. The same scan finds it with `--keep inline`, so the test can fail.
//! Needs root, cryptsetup and losetup (scripts/install-deps.sh).

mod common;

use common::{ck, memory_contains, tempdir, BIN};
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
    let dir = Dir(tempdir("ck-keepvol"));
    let d = &dir.0;
    let vol = d.join("vol.img");
    let pass = d.join("pass");
    fs::write(&pass, b"keep test passphrase").unwrap();
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
    // XTS uses two AES-256 keys; an expanded AES-256 key schedule starts
    // with its key, so searching each half finds key schedules too.
    let halves = [&key[..32], &key[32..]];

    for (mode, expect_found) in [("process", false), ("inline", true)] {
        let name = format!("k{mode}");
        let out = ck(d, &["open", v, &name, "--key-file", p, "--keep", mode]);
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        use_device(&dev);
        let pid = daemon_pid(d, &name);
        let found = halves.iter().any(|h| memory_contains(pid, h));
        assert_eq!(
            found, expect_found,
            "--keep {mode}: key in the I/O daemon's memory: {found}"
        );
        if mode == "process" {
            // Root can read the keep's ordinary memory (it has
            // CAP_SYS_PTRACE); the key and its schedules live in
            // memfd_secret pages, which it cannot.
            let keep = keep_pid(d, &name);
            assert!(
                !halves.iter().any(|h| memory_contains(keep, h)),
                "key found in the keep's readable memory"
            );
        }
        let st = ck(d, &["status", &name]);
        let text = String::from_utf8_lossy(&st.stdout);
        assert!(text.contains(&format!("keep:        {mode}")), "{text}");
        ck(d, &["close", &name]);
    }
}
