//! POSIX behaviour of the overlay mount checked against the same steps on
//! tmpfs (/dev/shm): every step's outcome (result, error, sizes, link
//! counts, modes, times, xattrs, mmap) must be identical.

use crate::common::*;
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

fn res<T: std::fmt::Debug>(r: std::io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {:?}", e.raw_os_error()),
    }
}

fn meta(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!(
            "size={} nlink={} mode={:o} dir={} link={}",
            m.len(),
            m.nlink(),
            m.mode() & 0o7777,
            m.is_dir(),
            m.file_type().is_symlink()
        ),
        Err(e) => format!("err {:?}", e.raw_os_error()),
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The steps; returns one line per observation.
fn steps(root: &Path) -> Vec<String> {
    let mut o = Vec::new();
    let p = |n: &str| root.join(n);
    // Create, write, append.
    fs::write(p("a"), b"hello").unwrap();
    o.push(meta(&p("a")));
    let mut f = fs::OpenOptions::new().append(true).open(p("a")).unwrap();
    f.write_all(b" world").unwrap();
    f.write_all(&[b'!'; 5000]).unwrap();
    drop(f);
    o.push(format!("{:?}", &fs::read(p("a")).unwrap()[..11]));
    o.push(meta(&p("a")));
    // Rename over an existing file.
    fs::write(p("b"), b"old b").unwrap();
    o.push(res(fs::rename(p("a"), p("b"))));
    o.push(meta(&p("a")));
    o.push(meta(&p("b")));
    // Hard links.
    o.push(res(fs::hard_link(p("b"), p("c"))));
    o.push(meta(&p("b")));
    o.push(res(fs::remove_file(p("c"))));
    o.push(meta(&p("b")));
    // A hard link keeps the inode's owner.
    fs::write(p("own"), b"o").unwrap();
    std::os::unix::fs::lchown(p("own"), Some(1234), Some(1234)).unwrap();
    o.push(res(fs::hard_link(p("own"), p("own2"))));
    let m = fs::metadata(p("own2")).unwrap();
    o.push(format!("owner {} {} nlink {}", m.uid(), m.gid(), m.nlink()));
    // Unlink of an open file.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("b"))
        .unwrap();
    o.push(res(fs::remove_file(p("b"))));
    o.push(meta(&p("b")));
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    Read::by_ref(&mut f)
        .take(11)
        .read_to_string(&mut s)
        .unwrap();
    o.push(s);
    f.write_all_at(b"still writable", 0).unwrap();
    o.push(format!("fstat size {}", f.metadata().unwrap().len()));
    drop(f);
    // Truncate up (a hole) and down.
    fs::write(p("t"), b"0123456789").unwrap();
    let f = fs::OpenOptions::new().write(true).open(p("t")).unwrap();
    f.set_len(20000).unwrap();
    drop(f);
    let d = fs::read(p("t")).unwrap();
    o.push(format!(
        "{} {:?} zeros={}",
        d.len(),
        &d[..10],
        d[10..].iter().all(|&b| b == 0)
    ));
    let f = fs::OpenOptions::new().write(true).open(p("t")).unwrap();
    f.set_len(3).unwrap();
    drop(f);
    o.push(format!("{:?}", fs::read(p("t")).unwrap()));
    // Read past the end.
    let f = fs::File::open(p("t")).unwrap();
    let mut buf = [0u8; 10];
    o.push(res(f.read_at(&mut buf, 100)));
    drop(f);
    // An open file stays usable after unlink: write, truncate, chmod,
    // times and fsync through the descriptor (stress-ng's fallocate
    // stressor found ftruncate failing here).
    {
        use std::os::unix::fs::PermissionsExt;
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(p("gone"))
            .unwrap();
        fs::remove_file(p("gone")).unwrap();
        o.push(res(f.write_at(&[7u8; 10000], 0)));
        o.push(res(f.set_len(100)));
        o.push(res(f.set_permissions(fs::Permissions::from_mode(0o640))));
        o.push(res(f.set_modified(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(12345),
        )));
        o.push(res(f.sync_all()));
        let m = f.metadata().unwrap();
        o.push(format!(
            "unlinked: size {} mode {:o} mtime {}",
            m.len(),
            m.permissions().mode() & 0o7777,
            m.mtime()
        ));
        let mut back = vec![0u8; 200];
        o.push(res(f.read_at(&mut back, 0)));
    }
    // Directories.
    o.push(res(fs::create_dir(p("d"))));
    o.push(res(fs::create_dir(p("d"))));
    fs::write(p("d/x"), b"x").unwrap();
    o.push(res(fs::remove_dir(p("d"))));
    fs::create_dir(p("e")).unwrap();
    o.push(res(fs::rename(p("e"), p("d"))));
    o.push(res(fs::rename(p("d"), p("e"))));
    o.push(meta(&p("e/x")));
    o.push(res(fs::remove_file(p("e/x"))));
    o.push(res(fs::remove_dir(p("e"))));
    o.push(meta(&p("e")));
    // Removals in directories that were renamed, replaced or are not
    // directories at all.
    fs::create_dir(p("r")).unwrap();
    fs::write(p("r/a"), b"a").unwrap();
    fs::write(p("r/b"), b"b").unwrap();
    o.push(res(fs::remove_file(p("r/a"))));
    o.push(res(fs::rename(p("r"), p("moved"))));
    o.push(res(fs::remove_file(p("moved/b"))));
    o.push(res(fs::remove_file(p("r/b"))));
    fs::create_dir(p("moved/sub")).unwrap();
    fs::create_dir(p("t2")).unwrap();
    o.push(res(fs::rename(p("t2"), p("moved/sub"))));
    o.push(res(fs::read_dir(p("moved/sub")).map(|d| d.count())));
    o.push(res(fs::remove_dir(p("moved/sub"))));
    o.push(res(fs::remove_dir(p("moved"))));
    fs::create_dir(p("moved")).unwrap();
    fs::write(p("moved/c"), b"c").unwrap();
    o.push(res(fs::remove_file(p("moved/c"))));
    o.push(res(fs::remove_dir(p("moved"))));
    fs::write(p("plain"), b"p").unwrap();
    o.push(res(fs::remove_dir(p("plain"))));
    fs::create_dir(p("target")).unwrap();
    std::os::unix::fs::symlink("target", p("link")).unwrap();
    o.push(res(fs::remove_dir(p("link"))));
    o.push(res(fs::remove_file(p("link"))));
    o.push(res(fs::remove_dir(p("target"))));
    o.push(res(fs::remove_file(p("plain"))));
    // Names.
    o.push(res(fs::write(p(&"n".repeat(255)), b"max")));
    o.push(res(fs::write(p(&"n".repeat(256)), b"too long")));
    o.push(res(fs::File::open(p("missing"))));
    o.push(res(fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p("t"))
        .map(|_| ())));
    // Symlinks.
    o.push(res(std::os::unix::fs::symlink("t", p("s"))));
    o.push(meta(&p("s")));
    o.push(res(fs::read_link(p("s"))));
    o.push(res(fs::read(p("s"))));
    // Modes and times.
    o.push(res(fs::set_permissions(
        p("t"),
        fs::Permissions::from_mode(0o640),
    )));
    o.push(meta(&p("t")));
    let ts = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 1_200_000_000,
            tv_nsec: 7,
        },
    ];
    // SAFETY: valid path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, cstr(&p("t")).as_ptr(), ts.as_ptr(), 0) };
    o.push(format!("utimensat {r}"));
    let m = fs::metadata(p("t")).unwrap();
    o.push(format!(
        "atime {} {} mtime {} {}",
        m.atime(),
        m.atime_nsec(),
        m.mtime(),
        m.mtime_nsec()
    ));
    // Xattrs.
    set_xattr(&p("t"), "user.k", b"v1");
    let n = CString::new("user.k").unwrap();
    let mut v = [0u8; 16];
    // SAFETY: valid strings and buffer.
    let k = unsafe {
        libc::getxattr(
            cstr(&p("t")).as_ptr(),
            n.as_ptr(),
            v.as_mut_ptr().cast(),
            v.len(),
        )
    };
    o.push(format!("getxattr {k} {:?}", &v[..k.max(0) as usize]));
    // SAFETY: valid strings.
    let r = unsafe { libc::removexattr(cstr(&p("t")).as_ptr(), n.as_ptr()) };
    // SAFETY: valid strings and buffer.
    let k = unsafe {
        libc::getxattr(
            cstr(&p("t")).as_ptr(),
            n.as_ptr(),
            v.as_mut_ptr().cast(),
            v.len(),
        )
    };
    o.push(format!(
        "removexattr {r} then getxattr {k} {:?}",
        std::io::Error::last_os_error().raw_os_error()
    ));
    // fallocate (mode 0) extends.
    let f = fs::OpenOptions::new().write(true).open(p("t")).unwrap();
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::fallocate(f.as_raw_fd_(), 0, 0, 9000) };
    drop(f);
    o.push(format!("fallocate {r} {}", meta(&p("t"))));
    // fallocate: reserving keeps the size; punching zeroes a range (whole
    // blocks and partial edges) and keeps the size.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("t"))
        .unwrap();
    let pattern: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 + 1).collect();
    f.write_all_at(&pattern, 0).unwrap();
    let fd = f.as_raw_fd_();
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 50000) };
    o.push(format!("fallocate keep-size {r} {}", meta(&p("t"))));
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::fallocate(fd, punch, 1000, 12000) };
    // SAFETY: a valid descriptor.
    let r2 = unsafe { libc::fallocate(fd, punch, 19990, 100) };
    // SAFETY: a valid descriptor.
    let r3 = unsafe { libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096) };
    drop(f);
    let got = fs::read(p("t")).unwrap();
    let mut want = pattern.clone();
    want[1000..13000].fill(0);
    want[19990..].fill(0);
    o.push(format!(
        "punch {r} {r2} collapse {r3} {} same={}",
        meta(&p("t")),
        got == want
    ));
    // mmap-backed writes.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(p("m"))
        .unwrap();
    f.set_len(10000).unwrap();
    // SAFETY: mapping 10000 bytes of a file of that size, shared, then
    // writing inside it and unmapping before the file is closed.
    unsafe {
        let a = libc::mmap(
            std::ptr::null_mut(),
            10000,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd_(),
            0,
        );
        assert_ne!(a, libc::MAP_FAILED);
        let s = std::slice::from_raw_parts_mut(a.cast::<u8>(), 10000);
        s[5000..5005].copy_from_slice(b"mmapd");
        assert_eq!(libc::msync(a, 10000, libc::MS_SYNC), 0);
        libc::munmap(a, 10000);
    }
    drop(f);
    o.push(format!("{:?}", &fs::read(p("m")).unwrap()[4999..5006]));
    // access(2): root may read and write anything, but execute only with
    // an x bit (the overlay answers this itself when the kernel does not
    // check permissions).
    fs::write(p("acc"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(p("acc"), fs::Permissions::from_mode(0o644)).unwrap();
    for (mode, mask) in [
        (0o644, libc::R_OK | libc::W_OK),
        (0o644, libc::X_OK),
        (0o000, libc::R_OK),
        (0o744, libc::X_OK),
    ] {
        fs::set_permissions(p("acc"), fs::Permissions::from_mode(mode)).unwrap();
        // SAFETY: a valid path.
        let r = unsafe { libc::access(cstr(&p("acc")).as_ptr(), mask) };
        o.push(format!("access {mode:o} {mask} = {r}"));
    }
    // A directory larger than one listing buffer, read with its
    // attributes from cold caches (READDIRPLUS), then renamed into and
    // removed by the names the listing gave.
    fs::create_dir(p("big")).unwrap();
    for i in 0..700 {
        fs::write(p(&format!("big/f{i:04}")), vec![b'x'; i % 37]).unwrap();
    }
    fs::hard_link(p("big/f0005"), p("big/hl")).unwrap();
    std::os::unix::fs::symlink("f0001", p("big/sl")).unwrap();
    drop_caches();
    let mut listed: Vec<(String, u64, u64)> = fs::read_dir(p("big"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.nlink(),
            )
        })
        .collect();
    listed.sort();
    o.push(format!(
        "big: {} entries, {} bytes, {} links, {:?}",
        listed.len(),
        listed.iter().map(|l| l.1).sum::<u64>(),
        listed.iter().map(|l| l.2).sum::<u64>(),
        &listed[listed.len() - 3..]
    ));
    fs::create_dir(p("big/sub")).unwrap();
    for (n, _, _) in &listed[..10] {
        fs::rename(p(&format!("big/{n}")), p(&format!("big/sub/{n}"))).unwrap();
    }
    o.push(meta(&p("big/sub/f0005")));
    // RENAME_EXCHANGE swaps a file and a directory; NOREPLACE refuses.
    let xa = cstr(&p("big/sub/f0005"));
    let xb = cstr(&p("big/sub"));
    fs::create_dir(p("big/d2")).unwrap();
    fs::write(p("big/d2/inner"), b"in").unwrap();
    let xd = cstr(&p("big/d2"));
    // SAFETY: valid paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            xa.as_ptr(),
            libc::AT_FDCWD,
            xd.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    let is_dir = |n: &str| fs::symlink_metadata(p(n)).map(|m| m.is_dir()).ok();
    o.push(format!(
        "exchange {r} {} {:?}",
        meta(&p("big/d2")),
        is_dir("big/sub/f0005")
    ));
    o.push(res(fs::read(p("big/sub/f0005/inner"))));
    // SAFETY: valid paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            xd.as_ptr(),
            libc::AT_FDCWD,
            xb.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    o.push(format!(
        "noreplace {r} {:?}",
        std::io::Error::last_os_error().raw_os_error()
    ));
    o.push(res(fs::remove_dir_all(p("big"))));
    o.push(meta(&p("big")));
    // Listing.
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "gocryptfs.conf")
        .collect();
    names.sort();
    o.push(names.join(","));
    o
}

/// Empties the kernel's dentry and inode caches, so the next walk asks
/// the file system again.
fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
}

trait RawFd {
    fn as_raw_fd_(&self) -> i32;
}
impl RawFd for fs::File {
    fn as_raw_fd_(&self) -> i32 {
        std::os::unix::io::AsRawFd::as_raw_fd(self)
    }
}

#[test]
fn same_as_tmpfs() {
    compare_with_tmpfs("dev", OverlayOptions::default());
}

/// The same steps with requests served over FUSE-over-io_uring queues.
#[test]
fn same_as_tmpfs_over_io_uring() {
    need!(root, fuse_uring);
    compare_with_tmpfs("uring", OverlayOptions::default().over_io_uring().unwrap());
}

/// Runs the steps on tmpfs and on an overlay mounted with `mount_opts`
/// (`tag` keeps parallel runs apart).
fn compare_with_tmpfs(tag: &str, mount_opts: OverlayOptions) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let shm = Path::new("/dev/shm");
    assert!(shm.is_dir(), "this test needs tmpfs at /dev/shm");
    let tm = shm.join(format!("ck-posix-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tm);
    fs::create_dir(&tm).unwrap();
    let want = steps(&tm);
    let _ = fs::remove_dir_all(&tm);
    // The script does reach the interesting errors.
    for e in [
        "err Some(36)",
        "err Some(39)",
        "err Some(17)",
        "err Some(2)",
    ] {
        assert!(want.iter().any(|l| l == e), "tmpfs run lacks {e}: {want:?}");
    }

    let t = TempDir::new(&format!("ovl-posix-{tag}"));
    let cipher = t.join("cipher");
    let cd = init_cheap(&cipher);
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &mount_opts).unwrap();
    let got = steps(m.mountpoint());
    m.unmount().unwrap();
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w, g, "step {i} differs (tmpfs vs overlay)");
    }
    assert_eq!(want.len(), got.len());
    fsck_ok(&t, &cipher);
}

fn fsck_ok(t: &TempDir, cipher: &Path) {
    let pf = passfile(t);
    let out = std::process::Command::new("gocryptfs")
        .args(["-fsck", "-q", "-passfile"])
        .arg(&pf)
        .arg(cipher)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
