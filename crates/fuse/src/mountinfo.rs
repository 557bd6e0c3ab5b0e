//! The mount table and unmounting, for every front end and for the
//! command line: one reader of /proc/self/mountinfo (proc(5)) and one
//! unmount path (umount(2) as root, `fusermount3 -u` otherwise).

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One line of /proc/self/mountinfo, with its escapes undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted (field 5).
    pub mount_point: PathBuf,
    /// The file system type after the ` - ` separator (`fuse.cryptkeep`, `ext4`).
    pub fs_type: String,
    /// The mount source (`/dev/loop0`, `cryptkeep:NAME`).
    pub source: PathBuf,
}

impl MountEntry {
    /// Whether this is a FUSE mount (`fuse` or `fuse.*`).
    pub fn is_fuse(&self) -> bool {
        self.fs_type == "fuse" || self.fs_type.starts_with("fuse.")
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\134` for a
/// backslash, ...).
fn unescape(field: &str) -> OsString {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// Parses the text of a mountinfo file; malformed lines are skipped.
pub fn parse(mountinfo: &str) -> Vec<MountEntry> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fs_type = r.next()?;
            let source = r.next()?;
            Some(MountEntry {
                mount_point: unescape(mount_point).into(),
                fs_type: String::from_utf8_lossy(unescape(fs_type).as_bytes()).into_owned(),
                source: unescape(source).into(),
            })
        })
        .collect()
}

/// This process's mount table now (empty if /proc cannot be read).
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| parse(&s))
        .unwrap_or_default()
}

/// Whether anything is mounted at `dir` (compared as given and
/// canonicalized; a dead FUSE mount, which cannot be canonicalized, is
/// found by the path as given).
pub fn is_mount_point(dir: &Path) -> bool {
    let canon = dir.canonicalize().ok();
    mounts()
        .iter()
        .any(|m| m.mount_point == dir || Some(&m.mount_point) == canon.as_ref())
}

/// Whether a FUSE file system is mounted at `mountpoint` (canonical) now.
pub fn is_fuse_mounted(mountpoint: &Path) -> bool {
    mounts()
        .iter()
        .any(|m| m.mount_point == mountpoint && m.is_fuse())
}

/// The mount points whose source is `source`, deepest first (the order to
/// unmount them in).
pub fn mounts_of(source: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = mounts()
        .into_iter()
        .filter(|m| m.source == source)
        .map(|m| m.mount_point)
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    v
}

/// Polls the mount table until the FUSE mount at `mountpoint` is present
/// (`present = true`) or gone, for at most `timeout`.
pub fn wait_for(mountpoint: &Path, present: bool, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if is_fuse_mounted(mountpoint) == present {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Unmounts `mountpoint`: `umount(2)` (with `MNT_DETACH` when `lazy`: the
/// mount leaves the tree now and goes once no one uses it); as a user
/// without the right to, `fusermount3 -u` (`-uz` when lazy). A mount
/// already gone is not an error.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(mountpoint.as_os_str().as_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) && !is_mount_point(mountpoint) {
        return Ok(()); // already unmounted from outside
    }
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let out = Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg("--")
        .arg(mountpoint)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let busy = msg.contains("busy");
        Err(io::Error::new(
            if busy {
                io::ErrorKind::ResourceBusy
            } else {
                io::ErrorKind::Other
            },
            format!("fusermount3 -u: {msg}"),
        ))
    }
}

/// [`unmount`], retried for up to `patience` while the mount is busy (a
/// program that just closed its last file may still hold it briefly).
pub fn unmount_when_idle(mountpoint: &Path, patience: Duration) -> io::Result<()> {
    let end = Instant::now() + patience;
    loop {
        match unmount(mountpoint, false) {
            Err(e)
                if (e.raw_os_error() == Some(libc::EBUSY)
                    || e.kind() == io::ErrorKind::ResourceBusy)
                    && Instant::now() < end =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
95 22 0:50 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.cryptkeep cryptkeep:x rw,user_id=0,group_id=0
96 22 0:51 / /tmp/c rw,relatime shared:61 - tmpfs tmpfs rw
97 22 7:0 / /mnt/x\\134y rw,relatime shared:62 - ext4 /dev/loop0 rw
malformed line
";

    #[test]
    fn parses_escaped_fields() {
        let m = parse(SAMPLE);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1].mount_point, Path::new("/tmp/a b"));
        assert!(m[1].is_fuse());
        assert_eq!(m[1].source, Path::new("cryptkeep:x"));
        assert!(!m[2].is_fuse());
        assert_eq!(m[3].mount_point, Path::new("/mnt/x\\y"));
        assert_eq!(m[3].source, Path::new("/dev/loop0"));
        assert_eq!(unescape(r"/x\"), OsString::from(r"/x\"));
        assert_eq!(unescape(r"\777x"), OsString::from_vec(vec![0xff, b'x']));
    }

    #[test]
    fn the_root_is_a_mount_point() {
        assert!(is_mount_point(Path::new("/")));
        assert!(mounts_of(Path::new("/dev/nonexistent-ck")).is_empty());
    }
}
