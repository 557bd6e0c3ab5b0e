//! Loop devices and mounts through util-linux's `losetup`, `mount` and
//! `umount`; the mount table and FUSE unmounts are
//! [`cryptkeep_fuse::mountinfo`]'s.

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

/// Unmounts a FUSE mount (lazily when `lazy`), through the one unmount
/// path of [`cryptkeep_fuse::mountinfo::unmount`].
pub fn fuse_unmount(dir: &Path, lazy: bool) -> CliResult<()> {
    cryptkeep_fuse::mountinfo::unmount(dir, lazy).map_err(|e| {
        CliError::new(
            Code::Daemon,
            format!("cannot unmount the FUSE file: {e}"),
            dir.display().to_string(),
            "retry: cryptkeep close NAME",
        )
    })
}
