//! Serves a throwaway encrypted volume (random key, aes-xts-plain64,
//! 4096-byte sectors, data offset 0) over an existing image file as a FUSE
//! block file, until unmounted with `fusermount3 -u MOUNTPOINT`. For manual
//! experiments and benchmarks:
//! `cargo run --release -p cryptkeep-fuse --example serve_block -- IMAGE MOUNTPOINT [THREADS]`.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Arc;

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_fuse::{mount_block_file_with, BlockFileOptions, BlockFileTuning};
use cryptkeep_volume::{Engine, InlineCrypt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(image), Some(mountpoint)) = (args.next(), args.next()) else {
        return Err("usage: serve_block IMAGE MOUNTPOINT [THREADS]".into());
    };
    let threads: usize = args
        .next()
        .and_then(|t| t.to_str().and_then(|t| t.parse().ok()))
        .unwrap_or(BlockFileTuning::default().threads);
    let file = OpenOptions::new().read(true).write(true).open(&image)?;
    let size = file.metadata()?.len() / 4096 * 4096;
    let mut key = vec![0u8; 64];
    cryptkeep_crypto::rand::fill_random(&mut key)?;
    let cipher = new_sector_cipher(
        &CipherSpec::parse("aes-xts-plain64")?,
        &key,
        Backend::default(),
    )?;
    let crypt = Arc::new(InlineCrypt::new(cipher, 4096, 0));
    let engine = Arc::new(Engine::new(file, 0, size, crypt, false)?);
    let opts = BlockFileOptions::default();
    let mountpoint = PathBuf::from(mountpoint);
    let mount = mount_block_file_with(
        engine,
        &mountpoint,
        &opts,
        BlockFileTuning::default().with_threads(threads),
    )?;
    println!(
        "{}",
        cryptkeep_fuse::block_file_path(&mountpoint, &opts).display()
    );
    mount.wait();
    Ok(())
}
