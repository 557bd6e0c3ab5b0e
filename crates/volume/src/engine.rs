//! [`Engine`]: the decrypted data segment of a backing file or device as a
//! byte-addressed store. The I/O operations live in `read.rs`, `write.rs`
//! and `maintain.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backing::Backing;
use crate::data_run::DataRunMemo;
use crate::direct::Direct;
use crate::io::{as_file, backing_len, read_exact};
use crate::locks::StripeLocks;
use crate::parallel::{for_each_chunk, ParallelConfig};
use crate::{Error, SectorCrypt};

/// Byte-range I/O on the decrypted data segment of a backing store, with the
/// sector semantics of dm-crypt: the segment starts `data_offset` bytes into
/// the backing store and is a whole number of `crypt.sector_size()` sectors;
/// sector `n` of the segment is encrypted with sector number `n` (the
/// [`SectorCrypt`] adds the IV tweak and IV scaling).
///
/// All operations take `&self` and may run concurrently from many threads.
pub struct Engine {
    pub(crate) backing: Backing,
    /// The backing file opened for direct reads, where that pays.
    pub(crate) direct: Direct,
    pub(crate) data_offset: u64,
    pub(crate) size: u64,
    pub(crate) sector_size: usize,
    pub(crate) crypt: Arc<dyn SectorCrypt>,
    pub(crate) read_only: bool,
    pub(crate) locks: StripeLocks,
    pub(crate) parallel: ParallelConfig,
    pub(crate) zero_holes: AtomicBool,
    /// The allocation map's last data run (see `holes.rs`).
    pub(crate) data_run: DataRunMemo,
}

/// Direction of a sector-crypto pass.
#[derive(Clone, Copy)]
pub(crate) enum Dir {
    Encrypt,
    Decrypt,
}

impl Engine {
    /// Opens the data segment `[data_offset, data_offset + data_size)` of
    /// `backing` (a [`std::fs::File`], opened read-write unless
    /// `read_only`, or a [`Backing`]). Fails with
    /// [`Error::Geometry`] when the sector size is not 512, 1024, 2048 or
    /// 4096, `data_size` is not a whole number of sectors, or the backing
    /// store is shorter than the segment.
    pub fn new(
        backing: impl Into<Backing>,
        data_offset: u64,
        data_size: u64,
        crypt: Arc<dyn SectorCrypt>,
        read_only: bool,
    ) -> Result<Engine, Error> {
        let ss = crypt.sector_size();
        if !matches!(ss, 512 | 1024 | 2048 | 4096) {
            return Err(Error::Geometry(format!(
                "sector size {ss} is not 512, 1024, 2048 or 4096"
            )));
        }
        if !data_size.is_multiple_of(ss as u64) {
            return Err(Error::Geometry(format!(
                "data segment of {data_size} bytes is not a whole number of {ss}-byte sectors"
            )));
        }
        let end = data_offset.checked_add(data_size).ok_or_else(|| {
            Error::Geometry(format!(
                "data segment at {data_offset} of {data_size} bytes overflows"
            ))
        })?;
        let backing = backing.into();
        let have = backing_len(&backing)?;
        if have < end {
            return Err(Error::Geometry(format!(
                "the backing store has {have} bytes but the data segment ends at byte {end}; \
                 the image is truncated"
            )));
        }
        Ok(Engine {
            direct: as_file(&backing).map(Direct::open).unwrap_or_default(),
            backing,
            data_offset,
            size: data_size,
            sector_size: ss,
            crypt,
            read_only,
            locks: StripeLocks::new(),
            parallel: ParallelConfig::default(),
            zero_holes: AtomicBool::new(false),
            data_run: DataRunMemo::default(),
        })
    }

    /// Reads exactly `buf.len()` bytes of the backing store at `pos`:
    /// directly when the backing store and the request allow (see
    /// `direct.rs`), else through the page cache.
    pub(crate) fn read_backing(&self, buf: &mut [u8], pos: u64) -> Result<(), Error> {
        match self.direct.read(buf, pos) {
            Some(r) => r,
            None => read_exact(&self.backing, buf, pos),
        }
    }

    /// Whether reads of the backing store bypass the page cache.
    pub fn direct_reads(&self) -> bool {
        self.direct.is_on()
    }

    /// Replaces how large requests are split over the cores (for tuning and
    /// benchmarks; the default suits FUSE and NBD frontends).
    pub fn with_parallelism(mut self, parallel: ParallelConfig) -> Engine {
        self.parallel = parallel;
        self
    }

    /// The current splitting configuration.
    pub fn parallelism(&self) -> ParallelConfig {
        self.parallel
    }

    /// Makes sectors whose ciphertext is all zeros (holes punched by
    /// [`Engine::discard`], never-written parts of a sparse image) read as
    /// zeros instead of as the decryption of zeros (dm-crypt's behaviour,
    /// the default). Frontends that pass discards through turn this on:
    /// the loop driver also sends "write zeroes" as a hole punch and expects
    /// zeros back. Real ciphertext is all zeros with probability 2^-4096 per
    /// sector; the check costs about one word per sector.
    pub fn set_holes_read_as_zero(&self, on: bool) {
        self.zero_holes.store(on, Ordering::Relaxed);
    }

    /// Whether holes read as zeros (see [`Engine::set_holes_read_as_zero`]).
    pub fn holes_read_as_zero(&self) -> bool {
        self.zero_holes.load(Ordering::Relaxed)
    }

    /// Size of the decrypted data segment in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Sector size of the segment in bytes.
    pub fn sector_size(&self) -> usize {
        self.sector_size
    }

    /// Whether writes and discards are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Byte offset of the data segment in the backing store.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Encrypts or decrypts `buf` (whole sectors, the first being `sector`),
    /// split over the cores when it is large.
    pub(crate) fn crypt_run(&self, dir: Dir, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        let ss = self.sector_size;
        let zero_holes = self.holes_read_as_zero();
        let one = |s: u64, b: &mut [u8]| match dir {
            Dir::Encrypt => self.crypt.encrypt(s, b),
            Dir::Decrypt if zero_holes => self.decrypt_around_holes(s, b),
            Dir::Decrypt => self.crypt.decrypt(s, b),
        };
        if buf.len() < self.parallel.min_split.max(2 * ss) {
            return one(sector, buf);
        }
        let chunk = (self.parallel.chunk / ss).max(1) * ss;
        let per_chunk = (chunk / ss) as u64;
        for_each_chunk(self.parallel.mode, buf, chunk, &|i, c: &mut [u8]| {
            one(sector + i as u64 * per_chunk, c)
        })
    }
}

impl Engine {
    /// Decrypts the sectors of `buf` (first one `sector`) whose ciphertext
    /// is not all zeros; all-zero sectors stay zero. Runs of real ciphertext
    /// go to the cipher in one call each.
    pub(crate) fn decrypt_around_holes(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        let ss = self.sector_size;
        let n = buf.len() / ss;
        let mut run: Option<usize> = None;
        for i in 0..=n {
            let hole = i == n || buf[i * ss..(i + 1) * ss].iter().all(|&b| b == 0);
            match (hole, run) {
                (true, Some(start)) => {
                    self.crypt
                        .decrypt(sector + start as u64, &mut buf[start * ss..i * ss])?;
                    run = None;
                }
                (false, None) => run = Some(i),
                _ => {}
            }
        }
        Ok(())
    }

    /// Decrypts whole sectors as reads do (honouring
    /// [`Engine::set_holes_read_as_zero`]), on the calling thread.
    pub(crate) fn decrypt_small(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        if self.holes_read_as_zero() {
            self.decrypt_around_holes(sector, buf)
        } else {
            self.crypt.decrypt(sector, buf)
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("data_offset", &self.data_offset)
            .field("size", &self.size)
            .field("sector_size", &self.sector_size)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}
