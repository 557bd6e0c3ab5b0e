//! cryptkeep's FUSE frontends; the only crate that uses `fuser`.
//!
//! [`block`]: the *block file* frontend. A FUSE file system whose root
//! directory holds one regular file, the decrypted data segment of a volume
//! served by a [`cryptkeep_volume::Engine`]. Attach it to a loop device
//! (`losetup --direct-io=on --sector-size 4096`) to get a block device
//! without device-mapper.

pub mod block;
mod error;
mod mountinfo;
pub mod overlay;
pub mod uring;

pub use block::{
    block_file_path, mount_block_file, mount_block_file_with, BlockFileMount, BlockFileOptions,
    BlockFileTuning,
};
pub use error::Error;
