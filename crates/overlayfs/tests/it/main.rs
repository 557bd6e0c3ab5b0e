//! The integration tests of cryptkeep-overlayfs, one module per topic, in one
//! test binary.

mod common;
mod overlay_full_disk;
mod overlay_gocryptfs;
mod overlay_hostile_files;
mod overlay_posix;
mod overlay_reverse;
mod overlay_shared_storage;
mod overlay_symlink_swaps;
mod overlay_uring_reads;
