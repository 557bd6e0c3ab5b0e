//! cryptkeep's FUSE transports, and the block file; the only crate that
//! uses `fuser`. A file system implements [`ops::Ops`] and is served by
//! [`mount`]: requests read from `/dev/fuse` by a `fuser` session
//! (`session.rs`), or over per-CPU FUSE-over-io_uring queues ([`uring`]).
//!
//! [`block`]: the *block file* frontend. A FUSE file system whose root
//! directory holds one regular file, the decrypted data segment of a volume
//! served by a [`cryptkeep_volume::Engine`]. Attach it to a loop device
//! (`losetup --direct-io=on --sector-size 4096`) to get a block device
//! without device-mapper.

pub mod block;
mod error;
mod mount;
pub mod mountinfo;
pub mod ops;
mod read_buf;
mod session;
pub mod uring;

pub use block::{
    block_file_path, mount_block_file, mount_block_file_with, mount_block_store, BlockFileMount,
    BlockFileOptions, BlockFileTuning, BlockStore,
};
pub use error::Error;
pub use mount::{mount, Mount, MountOptions};
