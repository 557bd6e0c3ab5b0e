//! The dm-integrity on-disk format, as the Linux kernel writes it
//! (`drivers/md/dm-integrity.c`; `docs/format/integrity.md` describes every
//! field): a superblock, a journal, then runs of tags interleaved with runs
//! of data sectors. No device-mapper: the image is read through a file.
//!
//! - [`Superblock`]: the 8-sector header ("integrt", versions 1–6).
//! - [`Geometry`]: where the journal, each data sector and each tag lie,
//!   computed exactly as the kernel computes it.
//! - [`TagHash`]: the per-sector tag (crc32c, sha1, sha256, hmac-sha*).
//! - [`journal`]: the journal's sections, commit IDs and entries; what a
//!   kernel would replay at the next activation.
//! - [`bitmap`]: bitmap mode's on-disk bitmap and its sizes.
//! - [`format`]: a new device as `integritysetup format` leaves it.
//! - [`Device`]: a device opened read-only (the journal laid over the data
//!   in memory) or for writing (journal or direct), as the kernel serves
//!   it; every read checks its tags, [`Device::verify`] checks them all.

pub mod bitmap;
mod device;
mod error;
mod format;
mod geometry;
mod hash;
pub mod journal;
mod probe;
mod superblock;

pub use bitmap::BitmapOptions;
pub use device::{Device, Mode, VerifyReport};
pub use error::Error;
pub use format::{encode_superblock, format, format_external, Fill, FormatOptions};
pub use geometry::{Geometry, DEFAULT_BUFFER_SECTORS};
pub use hash::TagHash;
pub use probe::{read_superblock, read_superblock_at};
pub use superblock::{Superblock, SB_FLAGS, SB_SECTORS};

/// Bytes in the kernel's sector unit.
pub const SECTOR: u64 = 512;
