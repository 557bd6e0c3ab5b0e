//! `fs mount --keep`: the overlay's keys never enter the FUSE daemon and
//! leave no copy in the keep's readable memory. The master key (unwrapped
//! here from the config with the password), the content and name keys
//! derived from it, the password, the scrypt output and the key that wraps
//! the master key are searched for, every 16-byte run of each, in every
//! readable mapping of the keep (right after the mount and again after files
//! were written and read) and of the daemon: found in the daemon without
//! `--keep` (so the scan can fail), nowhere with it. What was written
//! through the keep opens with gocryptfs and passes `gocryptfs -fsck`. A
//! killed keep makes the mount fail with EIO, not crash, and it still
//! unmounts. Needs root, /dev/fuse and gocryptfs (scripts/install-deps.sh).

use crate::common::scan::scan;
use crate::common::{ck, tempdir};
use cryptkeep_testkit::need;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cryptkeep_overlay::kdf::{hkdf_derive, HKDF_INFO_EME_NAMES, HKDF_INFO_GCM_CONTENT};
use cryptkeep_overlay::Config;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        for m in ["m", "g"] {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.0.join(m))
                .output();
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A random password of 200 printable characters: long enough that
/// reading it grows a buffer several times (each old buffer is a copy).
fn password() -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut r = vec![0u8; 200];
    cryptkeep_crypto::rand::fill_random(&mut r).unwrap();
    r.iter().map(|b| ALPHABET[usize::from(b & 63)]).collect()
}

/// The pid in the only pid file of the run directory (the FUSE daemon).
fn daemon_pid(dir: &Path) -> i32 {
    let fsrun = dir.join("run").join("fs");
    let pid = fs::read_dir(&fsrun)
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .expect("a pid file");
    pid.trim().parse().unwrap()
}

/// The keep serving `cipherdir`: the process whose command line is
/// `cryptkeep __keep overlay CIPHERDIR ...`.
fn keep_pid(cipherdir: &Path) -> Option<i32> {
    let want = format!("__keep\0overlay\0{}\0", cipherdir.display());
    fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = fs::read(e.path().join("cmdline")).ok()?;
        String::from_utf8_lossy(&cmd).contains(&want).then_some(pid)
    })
}

fn tree(m: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let big: Vec<u8> = (0..(3u32 << 20) + 77)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    vec![
        (m.join("big.bin"), big),
        (m.join("dir/small.txt"), b"small file\n".to_vec()),
        (
            m.join(format!("dir/{}", "L".repeat(200))),
            b"long name".to_vec(),
        ),
    ]
}

#[test]
fn the_fuse_daemon_never_holds_the_overlay_keys() {
    need!(root, fuse, gocryptfs);
    let dir = Dir(tempdir("ck-keepfs"));
    let d = &dir.0;
    let (c, m, g, pw) = (d.join("c"), d.join("m"), d.join("g"), d.join("pw"));
    for p in [&m, &g] {
        fs::create_dir(p).unwrap();
    }
    let password = password();
    fs::write(&pw, [&password[..], b"\n"].concat()).unwrap();
    let (cs, ms, pws) = (
        c.to_str().unwrap(),
        m.to_str().unwrap(),
        pw.to_str().unwrap(),
    );
    ck(d, &["fs", "init", cs, "--passfile", pws, "--scryptn", "10"]);
    let conf = c.join("gocryptfs.conf");
    let cfg = Config::load(&conf).unwrap();
    let mk = cfg.unlock(&password, &conf).unwrap();
    let content = hkdf_derive(mk.as_bytes(), HKDF_INFO_GCM_CONTENT, 32).unwrap();
    let names = hkdf_derive(mk.as_bytes(), HKDF_INFO_EME_NAMES, 32).unwrap();
    let kek = cfg.scrypt().derive(&password).unwrap();
    let wrap = hkdf_derive(kek.as_slice(), HKDF_INFO_GCM_CONTENT, 32).unwrap();
    let secrets = [
        ("master key", mk.as_bytes()),
        ("content key", content.as_slice()),
        ("name key", names.as_slice()),
        ("password", &password[..]),
        ("scrypt output", kek.as_slice()),
        ("master-key wrapping key", wrap.as_slice()),
    ];

    for keep in [true, false] {
        let mut args = vec!["fs", "mount", cs, ms, "--passfile", pws];
        if keep {
            args.push("--keep");
        }
        ck(d, &args);
        if keep {
            // Right after the mount: what unlocking left behind.
            let kp = keep_pid(&c).expect("the keep runs");
            let s = scan(kp, &secrets);
            assert!(
                s.hits.is_empty(),
                "after fs mount --keep, the keep's readable memory holds:\n{}",
                s.report(20)
            );
            // Pinned workers for its streams, floating ones for its many
            // small requests.
            crate::common::assert_mixed_placement(
                &crate::common::keep_worker_cpus(kp),
                "an overlay keep",
            );
        }
        let files = tree(&m);
        fs::create_dir_all(m.join("dir")).unwrap();
        for (p, data) in &files {
            fs::write(p, data).unwrap();
        }
        for (p, data) in &files {
            assert!(fs::read(p).unwrap() == *data, "{} reads back", p.display());
        }
        let pid = daemon_pid(d);
        let daemon = scan(pid, &secrets);
        if keep {
            assert!(
                daemon.hits.is_empty(),
                "with --keep, the FUSE daemon's memory holds:\n{}",
                daemon.report(20)
            );
            let kp = keep_pid(&c).expect("the keep runs");
            let s = scan(kp, &secrets);
            assert!(
                s.hits.is_empty(),
                "after serving, the keep's readable memory holds:\n{}",
                s.report(20)
            );
            // The written files open with gocryptfs while we are mounted
            // (read-only), and its fsck is clean.
            let out = Command::new("gocryptfs")
                .args(["-q", "-ro", "-passfile", pws, cs])
                .arg(&g)
                .output()
                .expect("gocryptfs (scripts/install-deps.sh)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for (p, data) in &files {
                let q = g.join(p.strip_prefix(&m).unwrap());
                assert!(
                    fs::read(&q).unwrap() == *data,
                    "gocryptfs reads {}",
                    q.display()
                );
            }
            let _ = Command::new("fusermount3").arg("-u").arg(&g).output();
            let fsck = Command::new("gocryptfs")
                .args(["-fsck", "-q", "-passfile", pws, cs])
                .output()
                .unwrap();
            assert!(fsck.status.success(), "gocryptfs -fsck: {fsck:?}");
            // A killed keep fails requests with EIO; the daemon lives on
            // and the mount still unmounts.
            // SAFETY: kill(2) on a pid we found; no memory is involved.
            assert_eq!(unsafe { libc::kill(kp, libc::SIGKILL) }, 0);
            std::thread::sleep(std::time::Duration::from_millis(200));
            let e = fs::write(m.join("after-kill"), b"x").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
            // SAFETY: signal 0 only checks that the daemon exists.
            assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the daemon died");
        } else {
            // The daemon holds the content and name key schedules, but
            // what it read the password into is wiped.
            for what in ["content key", "name key"] {
                assert!(
                    daemon.found(what),
                    "the scan finds no {what} in a daemon that holds it"
                );
            }
            assert!(
                !daemon.found("password"),
                "without --keep, the daemon still holds the password:\n{}",
                daemon.report(20)
            );
        }
        ck(d, &["fs", "umount", ms]);
        for (p, _) in &files {
            let _ = fs::remove_file(p);
        }
    }
}
