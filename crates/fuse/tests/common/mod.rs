//! Helpers for the block-file tests: root and tool checks, temp dirs, real
//! engines, and guards that unmount and detach even when a test fails.
#![allow(dead_code)]

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_fuse::{mount_block_file, BlockFileMount, BlockFileOptions};
use cryptkeep_volume::{Engine, InlineCrypt};

/// Panics with a clear message unless running as root with /dev/fuse.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root: it mounts FUSE, attaches loop devices and mounts ext4"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
}

/// Panics with a clear message if `tool` is not on PATH.
pub fn require_tool(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is not installed: run scripts/install-deps.sh"
    );
}

/// Runs a command, panics with its stderr if it fails, returns stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A directory under /tmp, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let mut r = [0u8; 8];
        cryptkeep_crypto::rand::fill_random(&mut r).unwrap();
        let p = std::env::temp_dir().join(format!(
            "ck-fuse-{tag}-{}-{:016x}",
            std::process::id(),
            u64::from_le_bytes(r)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn sub(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// xorshift64*.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

pub fn random_key() -> Vec<u8> {
    let mut k = vec![0u8; 64];
    cryptkeep_crypto::rand::fill_random(&mut k).unwrap();
    k
}

/// A sparse backing file of `size` bytes.
pub fn backing(path: &Path, size: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
}

/// An aes-xts-plain64 engine over the whole of `path` (data offset 0).
pub fn engine(path: &Path, key: &[u8], sector_size: usize, read_only: bool) -> Arc<Engine> {
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(path)
        .unwrap();
    let size = file.metadata().unwrap().len();
    let spec = CipherSpec::parse("aes-xts-plain64").unwrap();
    let cipher = new_sector_cipher(&spec, key, Backend::default()).unwrap();
    let crypt = Arc::new(InlineCrypt::new(cipher, sector_size, 0));
    Arc::new(Engine::new(file, 0, size, crypt, read_only).unwrap())
}

pub fn opts(read_only: bool, allow_discards: bool) -> BlockFileOptions {
    BlockFileOptions {
        read_only,
        allow_discards,
        file_name: "volume".into(),
        fs_name: "cryptkeep:test".into(),
    }
}

/// A FUSE mount that is unmounted on drop, retrying while it is busy
/// (a loop device being released), and lazily as a last resort.
pub struct FuseGuard(pub Option<BlockFileMount>);

impl FuseGuard {
    pub fn mount(engine: Arc<Engine>, at: &Path, o: &BlockFileOptions) -> FuseGuard {
        FuseGuard(Some(
            mount_block_file(engine, at, o).expect("mount_block_file"),
        ))
    }
    pub fn unmount(&mut self) {
        let Some(mut m) = self.0.take() else { return };
        let start = Instant::now();
        loop {
            match m.try_unmount() {
                Ok(()) => break,
                Err(e) if start.elapsed() > Duration::from_secs(10) => {
                    let _ = Command::new("umount")
                        .arg("-l")
                        .arg(m.mountpoint())
                        .status();
                    panic!("FUSE mount stayed busy: {e}");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        m.join().expect("FUSE session ended with an error");
    }
}

impl Drop for FuseGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(mut m) = self.0.take() {
                for _ in 0..100 {
                    if m.try_unmount().is_ok() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(m.mountpoint())
                    .status();
            }
        } else {
            self.unmount();
        }
    }
}

/// A loop device, detached on drop.
pub struct LoopDev(pub String);

impl LoopDev {
    /// `losetup --direct-io=on --sector-size 4096 -f --show file`.
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

/// A mounted file system, unmounted on drop.
pub struct Mounted(pub PathBuf);

impl Mounted {
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
