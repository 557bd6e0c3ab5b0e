//! Guards for what tests mount and attach: each undoes itself on drop,
//! also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::run;

/// A private tmpfs, unmounted (lazily) on drop.
#[derive(Debug)]
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB at `at` (created if missing).
    pub fn mount(at: &Path, mib: u64) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m"),
                "tmpfs",
                at.to_str().unwrap(),
            ],
        );
        Tmpfs(at.to_path_buf())
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Bytes in use.
    pub fn used(&self) -> u64 {
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statvfs is plain data; all zeroes is a valid value.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path; statvfs writes only `s`.
        let r = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
        assert_eq!(r, 0, "statvfs {}", self.0.display());
        (s.f_blocks - s.f_bfree) * s.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A loop device, detached on drop.
#[derive(Debug)]
pub struct LoopDev(pub String);

impl LoopDev {
    /// `losetup --direct-io=on --sector-size 4096 -f --show FILE`.
    pub fn attach(file: &Path) -> LoopDev {
        let dev = run(
            "losetup",
            &[
                "--direct-io=on",
                "--sector-size",
                "4096",
                "-f",
                "--show",
                file.to_str().unwrap(),
            ],
        );
        LoopDev(dev)
    }

    /// Whether the kernel really does direct I/O on the backing file.
    pub fn direct_io(&self) -> bool {
        let name = self.0.trim_start_matches("/dev/");
        std::fs::read_to_string(format!("/sys/block/{name}/loop/dio"))
            .map(|s| s.trim() == "1")
            .unwrap_or(false)
    }

    /// Detaches now; panics if `losetup -d` fails.
    pub fn detach(mut self) {
        let dev = std::mem::take(&mut self.0);
        run("losetup", &["-d", &dev]);
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
}

/// A mounted file system, unmounted on drop (lazily if it is busy).
#[derive(Debug)]
pub struct Mounted(pub PathBuf);

impl Mounted {
    /// `mount [-o ro] DEV AT`.
    pub fn mount(dev: &str, at: &Path, ro: bool) -> Mounted {
        let mut args = vec![];
        if ro {
            args.push("-o");
            args.push("ro");
        }
        args.push(dev);
        args.push(at.to_str().unwrap());
        run("mount", &args);
        Mounted(at.to_path_buf())
    }

    /// Guards a mount made some other way: unmounted on drop.
    pub fn existing(at: &Path) -> Mounted {
        Mounted(at.to_path_buf())
    }

    /// Unmounts now; panics if `umount` fails.
    pub fn umount(mut self) {
        let p = std::mem::take(&mut self.0);
        run("umount", &[p.to_str().unwrap()]);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty()
            && !Command::new("umount")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success())
        {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
