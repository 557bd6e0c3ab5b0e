//! Loop devices and mounts through util-linux's `losetup`, `mount` and
//! `umount`, and FUSE unmounts through `fusermount3` (fuse3).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::exit::{CliError, CliResult, Code};

/// Runs a command; on failure returns its standard error in a
/// [`CliError`] with `code`.
fn run(cmd: &mut Command, code: Code, what: &str, place: &str, hint: &str) -> CliResult<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            CliError::new(
                code,
                format!("{what}: cannot run {shown}: {e}"),
                place,
                "install util-linux and fuse3: scripts/install-deps.sh",
            )
        })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(CliError::new(
        code,
        format!("{what}: {shown} failed: {err}"),
        place,
        hint,
    ))
}

/// Attaches `file` to a free loop device with direct I/O and the volume's
/// sector size (`losetup --direct-io=on --sector-size N -f --show`);
/// returns the device path.
pub fn attach(file: &Path, sector_size: u32, read_only: bool) -> CliResult<String> {
    let mut c = Command::new("losetup");
    c.arg("--direct-io=on")
        .arg("--sector-size")
        .arg(sector_size.to_string());
    if read_only {
        c.arg("-r");
    }
    c.arg("-f").arg("--show").arg(file);
    let dev = run(
        &mut c,
        Code::Daemon,
        "cannot attach a loop device",
        &file.display().to_string(),
        "check that the loop module is loaded (modprobe loop) and free loop devices exist (losetup -f)",
    )?;
    if !dev.starts_with("/dev/") {
        return Err(CliError::new(
            Code::Daemon,
            format!("losetup printed {dev:?} instead of a device"),
            file.display().to_string(),
            "check losetup (util-linux) works: losetup -f",
        ));
    }
    Ok(dev)
}

/// Detaches a loop device (`losetup -d`).
pub fn detach(dev: &str) -> CliResult<()> {
    run(
        Command::new("losetup").arg("-d").arg(dev),
        Code::Busy,
        "cannot detach the loop device",
        dev,
        "something still uses it; see: lsof / fuser -v the device",
    )
    .map(|_| ())
}

/// The backing file of a loop device, from sysfs; `None` if it is not attached.
pub fn backing_file(dev: &str) -> Option<String> {
    let base = Path::new(dev).file_name()?.to_str()?;
    let p = format!("/sys/block/{base}/loop/backing_file");
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// One line of /proc/self/mountinfo: (mount source, mount point).
fn mounts() -> Vec<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let target = left.split(' ').nth(4)?;
            let source = right.split(' ').nth(1)?;
            Some((unescape(source), unescape(target)))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|t| u8::from_str_radix(t, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points whose source is `dev`, deepest first.
pub fn mounts_of(dev: &str) -> Vec<String> {
    let mut v: Vec<String> = mounts()
        .into_iter()
        .filter(|(s, _)| s == dev)
        .map(|(_, t)| t)
        .collect();
    v.sort_by_key(|t| std::cmp::Reverse(t.len()));
    v
}

/// Whether `dir` is a mount point.
pub fn is_mountpoint(dir: &Path) -> bool {
    let d = dir.display().to_string();
    let canon = std::fs::canonicalize(dir)
        .map(|p| p.display().to_string())
        .unwrap_or(d.clone());
    mounts().iter().any(|(_, t)| *t == d || *t == canon)
}

/// Mounts a block device on `dir` (`mount [-o ro] DEV DIR`).
pub fn mount(dev: &str, dir: &Path, read_only: bool) -> CliResult<()> {
    let mut c = Command::new("mount");
    if read_only {
        c.arg("-o").arg("ro");
    }
    c.arg(dev).arg(dir);
    run(
        &mut c,
        Code::Daemon,
        "cannot mount the file system",
        &dir.display().to_string(),
        "check the directory exists and the volume holds a file system (mkfs.ext4 the device first)",
    )
    .map(|_| ())
}

/// Unmounts `dir` (`umount DIR`).
pub fn umount(dir: &str) -> CliResult<()> {
    run(
        Command::new("umount").arg(dir),
        Code::Busy,
        "cannot unmount",
        dir,
        &format!("a program still uses it; find it with: fuser -vm {dir}, then retry close"),
    )
    .map(|_| ())
}

/// Unmounts a FUSE mount (`fusermount3 -u`, lazily when `lazy`), falling
/// back to umount(2) when fusermount3 is missing.
pub fn fuse_unmount(dir: &Path, lazy: bool) -> CliResult<()> {
    let mut c = Command::new("fusermount3");
    c.arg(if lazy { "-uz" } else { "-u" }).arg(dir);
    let place = dir.display().to_string();
    match run(
        &mut c,
        Code::Daemon,
        "cannot unmount the FUSE file",
        &place,
        "retry: cryptkeep close NAME",
    ) {
        Ok(_) => Ok(()),
        Err(e) => {
            let flags = if lazy { libc::MNT_DETACH } else { 0 };
            let cpath = std::ffi::CString::new(place.clone()).map_err(|_| e.clone())?;
            // SAFETY: cpath is a valid NUL-terminated path.
            if unsafe { libc::umount2(cpath.as_ptr(), flags) } == 0 {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescape() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/x\"), r"/x\");
    }

    #[test]
    fn root_is_a_mountpoint() {
        assert!(is_mountpoint(Path::new("/")));
        assert!(mounts_of("/dev/nonexistent-ck").is_empty());
    }
}
