//! Helpers of the block-file tests: real engines, mount options and a
//! guard that unmounts a block file even when a test fails (temporary
//! directories, loop devices, mounts and requirement marks come from the
//! testkit).

use std::fs::OpenOptions;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_fuse::{mount_block_file, BlockFileMount, BlockFileOptions};
pub use cryptkeep_testkit::mounts::{LoopDev, Mounted, Tmpfs};
pub use cryptkeep_testkit::{need, random_key, run, Rng, TempDir};
use cryptkeep_volume::{Engine, InlineCrypt};

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

/// Block-file options: the file `volume`, file system name `cryptkeep:test`.
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
    /// Mounts `engine` as a block file at `at`.
    pub fn mount(engine: Arc<Engine>, at: &Path, o: &BlockFileOptions) -> FuseGuard {
        FuseGuard(Some(
            mount_block_file(engine, at, o).expect("mount_block_file"),
        ))
    }
    /// Unmounts, retrying while busy; panics if the session ended with an error.
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
