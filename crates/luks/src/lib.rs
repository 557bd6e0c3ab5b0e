//! LUKS1 and LUKS2 headers, byte-compatible with cryptsetup: load (with
//! LUKS2 copy recovery), validate, format, unlock, add and remove keyslots,
//! dump. One module per on-disk object, like cryptsetup `lib/luks1` and
//! `lib/luks2`; all I/O goes through [`BlockIo`].
//!
//! Standards: LUKS1 On-Disk Format Specification v1.2.3; LUKS2 On-Disk
//! Format Specification v1.1.x (cryptsetup `docs/on-disk-format*.pdf`).
//! Our byte-level account, with every deviation, is in `docs/format/luks1.md`
//! and `docs/format/luks2.md`.
//!
//! This crate only reads and writes metadata and key material; the data
//! path (sector encryption of the payload) belongs to the volume engine,
//! which takes a [`Segment`] (or, for authenticated encryption, an
//! [`AuthSegment`]) and the volume key from [`Luks::unlock`].
//!
//! Map: [`io`] (BlockIo, MemIo) · [`error`] · [`backup`] (header backup
//! and restore, streamed) · [`area`] (key-material areas,
//! AF + 512-byte-sector encryption, wipes) · [`luks1`] (`header`, `layout`,
//! `keyslot`, `dump`) · [`luks2`] (`binary_header`, `json` model, `validate`,
//! `disk` copies, `recovery`, `keyslot`, `digest`, `segment`, `config`,
//! `format`, `dump`) · [`Luks`] the version-independent facade.

pub mod area;
pub mod backup;
pub mod error;
pub mod io;
pub mod luks1;
pub mod luks2;

mod facade;
mod types;
mod util;

pub use error::Error;
pub use facade::{Loaded, Luks};
pub use io::{BlockIo, MemIo};
pub use types::{AuthFormat, AuthSegment, FormatOptions, KeyslotInfo, LuksVersion, Segment};

pub(crate) use types::default_digest_iterations;
