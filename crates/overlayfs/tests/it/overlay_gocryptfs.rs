//! The overlay mount against gocryptfs 2.3, for every variant: a tree
//! gocryptfs wrote reads back identical through our mount, and a tree
//! written (plus renames, removals, truncates, appends) through our mount
//! reads back identical through gocryptfs, with `gocryptfs -fsck` clean.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, InitOptions};
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn args(name: &str) -> (&'static [&'static str], InitOptions) {
    let base = InitOptions {
        scrypt_log_n: 10,
        ..InitOptions::default()
    };
    match name {
        "default" => (&[], base),
        "aessiv" => (
            &["-aessiv"],
            InitOptions {
                aessiv: true,
                ..base
            },
        ),
        "xchacha" => (
            &["-xchacha"],
            InitOptions {
                xchacha: true,
                ..base
            },
        ),
        "plaintextnames" => (
            &["-plaintextnames"],
            InitOptions {
                plaintext_names: true,
                ..base
            },
        ),
        "deterministic" => (
            &["-deterministic-names"],
            InitOptions {
                deterministic_names: true,
                ..base
            },
        ),
        "longnamemax" => (
            &["-longnamemax", "100"],
            InitOptions {
                long_name_max: 100,
                ..base
            },
        ),
        _ => unreachable!(),
    }
}

/// Renames, removals, truncates and appends, applied the same way to a
/// plain directory and to a mount.
fn churn(root: &Path) {
    fs::rename(root.join("size-1"), root.join("renamed")).unwrap();
    fs::rename(root.join("size-4095"), root.join("size-4096")).unwrap(); // over an existing file
    fs::rename(root.join("a").join("b"), root.join("moved-dir")).unwrap(); // across directories
    fs::rename(root.join("s".repeat(175)), root.join("n".repeat(200))).unwrap(); // short -> long name
    fs::write(root.join("q".repeat(210)), b"long target").unwrap();
    fs::rename(root.join("m".repeat(176)), root.join("q".repeat(210))).unwrap(); // long over long
    fs::rename(root.join("L".repeat(255)), root.join("short-from-long")).unwrap(); // long -> short
    fs::create_dir(root.join("target-dir")).unwrap();
    fs::create_dir(root.join("src-dir")).unwrap();
    fs::write(root.join("src-dir").join("inner"), b"inner").unwrap();
    fs::rename(root.join("src-dir"), root.join("target-dir")).unwrap(); // over an empty dir
    fs::remove_file(root.join("-dash")).unwrap();
    fs::remove_dir(root.join("empty-dir")).unwrap();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(root.join("size-1048576"))
        .unwrap();
    f.set_len(5000).unwrap();
    drop(f);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(root.join("size-4097"))
        .unwrap();
    f.set_len(3 * 4096 + 5).unwrap();
    drop(f);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(root.join("renamed"))
        .unwrap();
    for i in 0..50u8 {
        f.write_all(&[i; 301]).unwrap();
    }
    drop(f);
    fs::write(root.join(".hidden"), b"rewritten").unwrap();
}

fn opts() -> OverlayOptions {
    OverlayOptions {
        threads: 2,
        ..OverlayOptions::default()
    }
}

fn fsck(pf: &Path, cipher: &Path) {
    let out = Command::new("gocryptfs")
        .args(["-fsck", "-q", "-passfile"])
        .arg(pf)
        .arg(cipher)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gocryptfs -fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// gocryptfs writes; our mount reads.
fn theirs_through_ours(name: &str) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let (a, _) = args(name);
    let t = TempDir::new(&format!("ovl-read-{name}"));
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, a);
    let reference = t.join("ref");
    fs::create_dir(&reference).unwrap();
    make_tree(&reference, TreeOpts::default());
    {
        let m = Mount::new(&cipher, &t.join("gmnt"), &pf, &[]);
        make_tree(m.path(), TreeOpts::default());
    }
    let cd = Arc::new(CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap());
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(cd, &mnt, &opts()).unwrap();
    assert_same_tree(&reference, m.mountpoint(), true);
    m.unmount().unwrap();
}

/// Our mount writes (and churns); gocryptfs reads.
fn ours_through_theirs(name: &str) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let (_, o) = args(name);
    let t = TempDir::new(&format!("ovl-write-{name}"));
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &o).unwrap();
    let reference = t.join("ref");
    fs::create_dir(&reference).unwrap();
    make_tree(&reference, TreeOpts::default());
    churn(&reference);
    {
        let mnt = t.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let m = mount_overlay(Arc::new(cd), &mnt, &opts()).unwrap();
        make_tree(m.mountpoint(), TreeOpts::default());
        churn(m.mountpoint());
        assert_same_tree(&reference, m.mountpoint(), true);
        m.unmount().unwrap();
    }
    {
        let m = Mount::new(&cipher, &t.join("gmnt"), &pf, &["-ro"]);
        assert_same_tree(&reference, m.path(), true);
    }
    fsck(&pf, &cipher);
    // Our own fsck too (it also catches orphaned .name files).
    let report = CipherDir::open(&cipher, PASSWORD.as_bytes())
        .unwrap()
        .fsck();
    assert!(report.is_clean(), "{:?}", report.problems);
}

macro_rules! variant_tests {
    ($($v:ident),*) => {
        mod theirs_through_ours { $( #[test] fn $v() { super::theirs_through_ours(stringify!($v)); } )* }
        mod ours_through_theirs { $( #[test] fn $v() { super::ours_through_theirs(stringify!($v)); } )* }
    };
}

variant_tests!(
    default,
    aessiv,
    xchacha,
    plaintextnames,
    deterministic,
    longnamemax
);

/// A flipped ciphertext byte in block 20 of 40 gives EIO for that block
/// only, through our mount as through gocryptfs's; reads around it (kernel
/// readahead of up to 128 KiB) still work.
#[test]
fn tampered_block_is_eio_only_there() {
    tampered_block_with(opts());
}

/// The same over io_uring, where reads of 32 KiB and more are decrypted by
/// each queue's helper thread.
#[test]
fn tampered_block_is_eio_only_there_over_io_uring() {
    need!(root, fuse_uring);
    tampered_block_with(opts().over_io_uring().unwrap());
}

fn tampered_block_with(o: OverlayOptions) {
    need!(root, fuse);
    alone!(shared);
    use std::os::unix::fs::FileExt;
    let t = TempDir::new("ovl-tamper");
    let cipher = t.join("cipher");
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &args("default").1).unwrap();
    let src = t.join("plain");
    fs::create_dir(&src).unwrap();
    let want = bytes(3, 40 * 4096);
    fs::write(src.join("f"), &want).unwrap();
    cd.encrypt_tree(&src).unwrap();
    let cf = cd.encrypt_path(Path::new("f")).unwrap();
    let mut b = fs::read(&cf).unwrap();
    b[18 + 20 * cd.content().cipher_bs() + 99] ^= 1;
    fs::write(&cf, b).unwrap();
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &o).unwrap();
    let f = fs::File::open(m.mountpoint().join("f")).unwrap();
    let mut big = vec![0u8; 16 * 4096];
    f.read_exact_at(&mut big, 0).unwrap();
    assert_eq!(big, want[..16 * 4096]);
    let mut buf = vec![0u8; 4096];
    for k in [19, 21, 39] {
        f.read_exact_at(&mut buf, k * 4096).unwrap();
        assert_eq!(
            buf,
            want[k as usize * 4096..(k as usize + 1) * 4096],
            "block {k}"
        );
    }
    let e = f.read_exact_at(&mut buf, 20 * 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    drop(f);
    // O_DIRECT: each read is one 64 KiB request, no page-by-page retry.
    let d = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.mountpoint().join("f"))
            .unwrap()
    };
    d.read_exact_at(&mut big, 4 * 4096).unwrap();
    assert_eq!(big, want[4 * 4096..20 * 4096]);
    let e = d.read_exact_at(&mut big, 8 * 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    drop(d);
    m.unmount().unwrap();
}

/// Threads writing interleaved, unaligned regions of one file (sharing
/// blocks) and an untar of /usr/include/linux through our mount: the
/// result reads back identical through gocryptfs, and fsck is clean.
#[test]
fn concurrent_writers_and_untar() {
    writers_and_untar(opts());
}

/// The same over FUSE-over-io_uring queues (one thread per CPU).
#[test]
fn concurrent_writers_and_untar_over_io_uring() {
    need!(root, fuse_uring);
    writers_and_untar(opts().over_io_uring().unwrap());
}

fn writers_and_untar(mount_opts: OverlayOptions) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    use std::os::unix::fs::FileExt;
    need!(tool "tar");
    let t = TempDir::new("ovl-stress");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &args("default").1).unwrap();
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &mount_opts).unwrap();
    let file = m.mountpoint().join("shared");
    fs::File::create(&file).unwrap();
    const THREADS: usize = 4;
    const CHUNK: usize = 3001; // not a divisor of 4096: threads share blocks
    const ROUNDS: usize = 60;
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let file = file.clone();
            s.spawn(move || {
                let f = fs::OpenOptions::new().write(true).open(&file).unwrap();
                for r in 0..ROUNDS {
                    let idx = r * THREADS + th;
                    f.write_all_at(&bytes(idx as u64, CHUNK), (idx * CHUNK) as u64)
                        .unwrap();
                }
            });
        }
    });
    let want: Vec<u8> = (0..THREADS * ROUNDS)
        .flat_map(|i| bytes(i as u64, CHUNK))
        .collect();
    assert!(
        fs::read(&file).unwrap() == want,
        "concurrent writes lost data"
    );
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C /usr/include -cf - linux | tar -C '{}' -xf -",
            m.mountpoint().display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    m.unmount().unwrap();
    let g = Mount::new(&cipher, &t.join("gmnt"), &pf, &["-ro"]);
    assert!(fs::read(g.path().join("shared")).unwrap() == want);
    let out = Command::new("diff")
        .arg("-r")
        .arg("/usr/include/linux")
        .arg(g.path().join("linux"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "diff: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    drop(g);
    fsck(&pf, &cipher);
}

/// `fio --verify` (random 4 KiB writes from two jobs, then a checksum read
/// of everything) through our mount: no mismatch, and gocryptfs -fsck is
/// clean afterwards.
#[test]
fn fio_verify() {
    fio_verify_with(opts());
}

/// The same over FUSE-over-io_uring queues.
#[test]
fn fio_verify_over_io_uring() {
    need!(root, fuse_uring);
    fio_verify_with(opts().over_io_uring().unwrap());
}

fn fio_verify_with(mount_opts: OverlayOptions) {
    need!(root, fuse, gocryptfs);
    need!(tool "fio");
    alone!(shared);
    let t = TempDir::new("ovl-fio");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &args("default").1).unwrap();
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &mount_opts).unwrap();
    let out = Command::new("fio")
        .args([
            "--name=verify",
            "--size=16M",
            "--bs=4k",
            "--rw=randwrite",
            "--verify=crc32c",
            "--do_verify=1",
            "--numjobs=2",
            "--ioengine=psync",
            "--group_reporting",
        ])
        .arg(format!("--directory={}", m.mountpoint().display()))
        // fio keeps its verify state in the working directory: not the repo.
        .current_dir(t.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("err= 0"),
        "fio: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    m.unmount().unwrap();
    fsck(&pf, &cipher);
}

/// The kernel keeps directory listings cached (`FOPEN_CACHE_DIR`): a name
/// created through our mount shows in the next listing at once, and one
/// created by another writer of the same cipher directory (gocryptfs
/// mounted alongside) shows once the cache time-out has passed (set to
/// 1 s here, gocryptfs's; the default is 10 s).
#[test]
fn cached_listings_follow_changes() {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let t = TempDir::new("ovl-dircache");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &args("default").1).unwrap();
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let one_second = OverlayOptions {
        cache_ttl: std::time::Duration::from_secs(1),
        ..opts()
    };
    let m = mount_overlay(Arc::new(cd), &mnt, &one_second).unwrap();
    let names = |d: &Path| {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let d = m.mountpoint().join("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("a"), b"1").unwrap();
    assert_eq!(names(&d), ["a"]);
    assert_eq!(names(&d), ["a"]);
    fs::write(d.join("b"), b"2").unwrap();
    fs::remove_file(d.join("a")).unwrap();
    assert_eq!(names(&d), ["b"]);
    let other = Mount::new(&cipher, &t.join("gmnt"), &pf, &[]);
    fs::write(other.path().join("d/c"), b"3").unwrap();
    drop(other);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(names(&d), ["b", "c"]);
    m.unmount().unwrap();
    fsck(&pf, &cipher);
}

/// 25 levels of 150-byte names: a 3.8 KB plaintext path whose cipher
/// path (about 5.4 KB) is past PATH_MAX. Returns the bottom directory.
fn deep_path(root: &Path) -> std::path::PathBuf {
    let mut p = root.to_path_buf();
    for i in 0..25 {
        p.push(format!("{i:02}{}", "x".repeat(148)));
    }
    p
}

/// Builds the deep tree under `root`: a file at the bottom, one halfway.
fn make_deep(root: &Path) {
    let bottom = deep_path(root);
    fs::create_dir_all(&bottom).unwrap();
    fs::write(bottom.join("bottom"), b"at the bottom\n").unwrap();
    let mid = bottom.ancestors().nth(12).unwrap();
    fs::write(mid.join("mid"), vec![7u8; 10_000]).unwrap();
}

fn check_deep(root: &Path) {
    let bottom = deep_path(root);
    assert_eq!(fs::read(bottom.join("bottom")).unwrap(), b"at the bottom\n");
    let mid = bottom.ancestors().nth(12).unwrap();
    assert_eq!(fs::read(mid.join("mid")).unwrap(), vec![7u8; 10_000]);
    assert_eq!(fs::read_dir(&bottom).unwrap().count(), 1);
}

/// A tree whose cipher paths are longer than PATH_MAX, written by either
/// side, reads back through the other, and both fscks are clean.
#[test]
fn deep_trees_both_ways() {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let t = TempDir::new("ovl-deep");
    let pf = passfile(&t);
    // Ours writes, gocryptfs reads.
    let ours = t.join("ours");
    let (cd, _) = CipherDir::init(&ours, PASSWORD.as_bytes(), &args("default").1).unwrap();
    {
        let mnt = t.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let m = mount_overlay(Arc::new(cd), &mnt, &opts()).unwrap();
        make_deep(m.mountpoint());
        check_deep(m.mountpoint());
        m.unmount().unwrap();
    }
    {
        let m = Mount::new(&ours, &t.join("gmnt"), &pf, &["-ro"]);
        check_deep(m.path());
    }
    fsck(&pf, &ours);
    let report = CipherDir::open(&ours, PASSWORD.as_bytes()).unwrap().fsck();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(report.entries >= 27, "fsck saw {} entries", report.entries);
    // gocryptfs writes, ours reads.
    let theirs = t.join("theirs");
    gocryptfs_init(&theirs, &pf, &[]);
    {
        let m = Mount::new(&theirs, &t.join("gmnt2"), &pf, &[]);
        make_deep(m.path());
    }
    let cd = Arc::new(CipherDir::open(&theirs, PASSWORD.as_bytes()).unwrap());
    let mnt = t.join("mnt2");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(cd, &mnt, &opts()).unwrap();
    check_deep(m.mountpoint());
    // And removed again through ours.
    fs::remove_dir_all(m.mountpoint().join(format!("00{}", "x".repeat(148)))).unwrap();
    assert_eq!(fs::read_dir(m.mountpoint()).unwrap().count(), 0);
    m.unmount().unwrap();
}
