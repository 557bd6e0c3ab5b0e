//! cryptkeep's sector engine: byte-range reads and writes on the decrypted
//! data segment of a LUKS (or plain dm-crypt) volume, turned into batches of
//! whole sectors for a [`SectorCrypt`], with dm-crypt's semantics.
//!
//! - [`SectorCrypt`] is the seam to whoever holds the key: [`InlineCrypt`]
//!   (key in this process, IV = `sector * (sector_size / 512) + iv_tweak`,
//!   as dm-crypt without `iv_large_sectors`, which is how cryptsetup sets up
//!   LUKS1 and LUKS2) or the keep (a separate key process).
//! - [`Engine`] maps a request onto sectors: one `pread`/`pwrite` per
//!   request into/out of one buffer; partial sectors at the edges of a write
//!   are read-modify-written under a striped sector lock; large requests are
//!   split over the cores ([`ParallelConfig`]); writes encrypt into a
//!   per-thread scratch buffer, never into the caller's buffer; reads stop
//!   short at the end of the volume, writes past it fail; read-only volumes
//!   refuse writes; [`Engine::discard`] punches holes for whole sectors;
//!   [`Engine::write_zeroes`] writes encrypted zeros; [`Engine::flush`] is
//!   `fdatasync`. With [`Engine::set_holes_read_as_zero`] all-zero
//!   ciphertext sectors (holes) read as zeros, for frontends that pass
//!   discards through a loop device.
//! - [`AuthCrypt`] is the same seam for authenticated volumes (LUKS2
//!   `--integrity`): sectors sealed with dm-crypt's per-sector AEAD, each
//!   with its metadata tuple (tag, stored IV); [`AuthVolume`] serves such a
//!   volume's data over its dm-integrity device.
//! - [`BlockStore`] is what a transport (the FUSE block file, the NBD
//!   server) serves: the engine, an authenticated volume, or any other
//!   fixed-size store; [`BlockStore::extents`] answers its allocation map.
//! - [`Error`] carries what failed and where; [`Error::errno`] gives the
//!   errno for FUSE and NBD.

mod auth_crypt;
mod authenticated;
mod backing;
mod crypt;
mod data_run;
mod direct;
mod engine;
mod error;
mod extent;
mod holes;
mod inline;
mod inline_auth;
mod io;
mod job;
mod locks;
mod maintain;
mod parallel;
mod pool;
mod read;
mod scratch;
mod staged;
mod store;
mod write;

pub use auth_crypt::{AuthCrypt, SectorFill};
pub use authenticated::{AuthVolume, FailureHook};
pub use backing::{Backing, BackingDevice};
pub use crypt::{SectorCrypt, Staging};
pub use engine::Engine;
pub use error::Error;
pub use extent::Extent;
pub use inline::{InlineCrypt, IV_SECTOR};
pub use inline_auth::InlineAuthCrypt;
pub use parallel::{ParallelConfig, Parallelism};
pub use store::{unsupported, BlockStore};
