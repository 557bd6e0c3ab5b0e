//! A test tree for comparing file systems: files of edge-case sizes,
//! sparse files, long and odd names, symlinks, hard links, xattrs, a FIFO;
//! and a comparison of two trees.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Options for [`make_tree`].
#[derive(Clone, Copy)]
pub struct TreeOpts {
    /// Longest name component (255 for default, fewer is fine).
    pub max_name: usize,
    /// Also create xattrs, a FIFO and hard links.
    pub extras: bool,
}

impl Default for TreeOpts {
    fn default() -> Self {
        TreeOpts {
            max_name: 255,
            extras: true,
        }
    }
}

/// Writes the test tree into `root`: files of sizes 0, 1, 4095, 4096, 4097
/// and 1 MiB, sparse files, long and odd names, symlinks, nested dirs, and
/// (with extras) a hard link, xattrs and a FIFO.
pub fn make_tree(root: &Path, o: TreeOpts) {
    for (i, size) in [0usize, 1, 4095, 4096, 4097, 1 << 20]
        .into_iter()
        .enumerate()
    {
        fs::write(root.join(format!("size-{size}")), bytes(i as u64 + 1, size)).unwrap();
    }
    // Sparse: a hole in the middle and at the end of a block-aligned region.
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(b"middle", 5 * 4096 + 7).unwrap();
    f.set_len(3 << 20).unwrap();
    f.write_all_at(b"tail", (3 << 20) - 4).unwrap();
    drop(f);
    let f = fs::File::create(root.join("sparse-only")).unwrap();
    f.set_len(40000).unwrap();
    drop(f);
    // Names.
    let long = |c: char, n: usize| c.to_string().repeat(n);
    fs::write(root.join(long('L', o.max_name)), b"longest name").unwrap();
    fs::write(
        root.join(long('m', 176)),
        b"176: first length that gets hashed",
    )
    .unwrap();
    fs::write(
        root.join(long('s', 175)),
        b"175: last length that stays short",
    )
    .unwrap();
    fs::write(root.join("with space & ünïcödé ✓"), b"odd name").unwrap();
    fs::write(root.join(".hidden"), b"dot").unwrap();
    fs::write(root.join("-dash"), b"dash").unwrap();
    // Nested dirs, one with a long name.
    let d = root.join("a").join("b").join(long('d', 200));
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("deep"), bytes(99, 10000)).unwrap();
    fs::create_dir(root.join("empty-dir")).unwrap();
    fs::create_dir(root.join("mode-0750")).unwrap();
    fs::set_permissions(root.join("mode-0750"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(root.join("mode-0600"), b"private").unwrap();
    fs::set_permissions(root.join("mode-0600"), fs::Permissions::from_mode(0o600)).unwrap();
    // Symlinks: relative, absolute, dangling, long target, long link name.
    std::os::unix::fs::symlink("size-1", root.join("link-rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("link-abs")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("a").join("dangling")).unwrap();
    std::os::unix::fs::symlink(long('t', 2000), root.join("link-long-target")).unwrap();
    std::os::unix::fs::symlink("size-0", root.join(long('k', 220))).unwrap();
    if o.extras {
        fs::hard_link(root.join("size-4097"), root.join("a").join("hardlink")).unwrap();
        let x = root.join("size-1");
        set_xattr(&x, "user.comment", b"an xattr value");
        set_xattr(&x, "user.empty", b"");
        set_xattr(&root.join("a"), "user.dirattr", &bytes(5, 300));
        let c = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    }
}

/// Sets the extended attribute `name` of `p` (not following a symlink).
pub fn set_xattr(p: &Path, name: &str, v: &[u8]) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a readable buffer.
    let r = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

fn user_xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid path and writable buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let mut out = BTreeMap::new();
    if n <= 0 {
        return out;
    }
    for name in buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let s = String::from_utf8_lossy(name).into_owned();
        if !s.starts_with("user.") {
            continue;
        }
        let cn = std::ffi::CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: valid strings and writable buffer.
        let k = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(k >= 0);
        v.truncate(k as usize);
        out.insert(s, v);
    }
    out
}

/// Compares two trees: names, types, permission bits, contents, symlink
/// targets, link counts and `user.*` xattrs (with `xattrs`). Panics with
/// the first difference. Returns the number of entries compared.
pub fn assert_same_tree(expected: &Path, got: &Path, xattrs: bool) -> usize {
    let list = |d: &Path| -> Vec<OsString> {
        let mut v: Vec<OsString> = fs::read_dir(d)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", d.display()))
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "gocryptfs.conf" && n != ".gocryptfs.reverse.conf")
            .collect();
        v.sort();
        v
    };
    let (a, b) = (list(expected), list(got));
    assert_eq!(
        a,
        b,
        "entries of {} vs {}",
        expected.display(),
        got.display()
    );
    let mut count = 0;
    for n in a {
        let (pa, pb) = (expected.join(&n), got.join(&n));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        let (ta, tb) = (ma.file_type(), mb.file_type());
        assert_eq!(
            (ta.is_dir(), ta.is_file(), ta.is_symlink(), ta.is_fifo()),
            (tb.is_dir(), tb.is_file(), tb.is_symlink(), tb.is_fifo()),
            "type of {}",
            pb.display()
        );
        count += 1;
        if !ta.is_symlink() {
            assert_eq!(
                ma.mode() & 0o7777,
                mb.mode() & 0o7777,
                "mode of {}",
                pb.display()
            );
        }
        if ta.is_dir() {
            count += assert_same_tree(&pa, &pb, xattrs);
        } else if ta.is_file() {
            assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {}",
                pb.display()
            );
            assert_eq!(ma.nlink(), mb.nlink(), "link count of {}", pb.display());
        } else if ta.is_symlink() {
            assert_eq!(
                fs::read_link(&pa).unwrap(),
                fs::read_link(&pb).unwrap(),
                "target of {}",
                pb.display()
            );
        }
        if xattrs && !ta.is_symlink() {
            assert_eq!(
                user_xattrs(&pa),
                user_xattrs(&pb),
                "xattrs of {}",
                pb.display()
            );
        }
    }
    count
}
