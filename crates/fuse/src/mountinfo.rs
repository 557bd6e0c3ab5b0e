//! The mount table, shared by the block and overlay frontends: reading
//! /proc/self/mountinfo (proc(5)) to see whether a FUSE mount is live, and
//! unmounting (umount(2), or fusermount3 -u for non-root users).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Whether `mountpoint` (canonical) is the mount point of a FUSE file system
/// (`fuse` or `fuse.*`) in `mountinfo`.
pub(crate) fn has_fuse_mount(mountinfo: &str, mountpoint: &Path) -> bool {
    let want = mountpoint.as_os_str().as_bytes();
    mountinfo.lines().any(|line| {
        let mut halves = line.splitn(2, " - ");
        let (Some(left), Some(right)) = (halves.next(), halves.next()) else {
            return false;
        };
        let mp = left.split(' ').nth(4).map(unescape);
        let fstype = right.split(' ').next().unwrap_or("");
        mp.as_deref() == Some(want) && (fstype == "fuse" || fstype.starts_with("fuse."))
    })
}

/// Whether a FUSE file system is mounted at `mountpoint` (canonical) now.
pub(crate) fn is_fuse_mounted(mountpoint: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| has_fuse_mount(&s, mountpoint))
        .unwrap_or(false)
}

/// Polls /proc/self/mountinfo until the FUSE mount at `mountpoint` is
/// present (`present = true`) or gone, for at most `timeout`.
pub(crate) fn wait_for(mountpoint: &Path, present: bool, timeout: Duration) -> bool {
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

/// `umount(2)`; as a non-root user `fusermount3 -u`.
pub(crate) fn unmount_path(mountpoint: &Path) -> io::Result<()> {
    let c = CString::new(mountpoint.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::umount2(c.as_ptr(), 0) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) && wait_for(mountpoint, false, Duration::ZERO) {
        return Ok(()); // already unmounted from outside
    }
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg("--")
        .arg(mountpoint)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
95 22 0:50 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.cryptkeep cryptkeep:x rw,user_id=0,group_id=0
96 22 0:51 / /tmp/c rw,relatime shared:61 - tmpfs tmpfs rw
";

    #[test]
    fn finds_fuse_mounts_with_escaped_names() {
        assert!(has_fuse_mount(SAMPLE, Path::new("/tmp/a b")));
        assert!(!has_fuse_mount(SAMPLE, Path::new("/tmp/c")));
        assert!(!has_fuse_mount(SAMPLE, Path::new("/")));
        assert!(!has_fuse_mount(SAMPLE, Path::new("/tmp/a")));
    }
}
