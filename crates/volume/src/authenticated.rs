//! [`AuthVolume`]: the decrypted data of a LUKS2 volume with authenticated
//! encryption, as dm-crypt serves it over dm-integrity: every sector sealed
//! on its own with an [`AuthCrypt`], its metadata tuple kept in the
//! integrity device's per-sector tag (through its journal unless opened
//! without one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cryptkeep_integrity::{Device, Error as IntegrityError, Mode};

use crate::parallel::for_each_chunk;
use crate::{AuthCrypt, Error, Parallelism};

/// Bytes per integrity I/O: bounds the buffers a large request needs.
const CHUNK_BYTES: usize = 1 << 20;

/// Bytes sealed or opened per call to the [`AuthCrypt`]; the calls of one
/// I/O are spread over the cores (the engine's helper pool).
const CRYPT_BYTES: usize = 128 << 10;

/// An authenticated volume: byte-range reads and writes, each sector
/// checked on the way in and sealed on the way out.
pub struct AuthVolume {
    dev: Device,
    crypt: Arc<dyn AuthCrypt>,
    read_only: bool,
    /// Sectors that failed authentication since opening (`status`).
    mismatches: AtomicU64,
    /// Writes of partial sectors read, merge and write holding this
    /// exclusively; whole-sector writes hold it shared.
    merge: RwLock<()>,
    /// Told (failures so far, the failing sector) at each failure.
    on_failure: Option<FailureHook>,
}

/// Hears (sectors failed so far, the sector that failed now).
pub type FailureHook = Box<dyn Fn(u64, u64) + Send + Sync>;

fn integrity_err(e: IntegrityError) -> Error {
    match e {
        IntegrityError::Io { what, source } => Error::Integrity(format!("{what}: {source}")),
        e => Error::Integrity(e.to_string()),
    }
}

impl AuthVolume {
    /// Serves `dev` (opened with [`Device::open_external`]) through
    /// `crypt`; refuses a device whose block or tag size does not fit the
    /// crypt's sector and tuple size.
    pub fn new(dev: Device, crypt: Arc<dyn AuthCrypt>) -> Result<AuthVolume, Error> {
        let tag = usize::from(dev.superblock().tag_size);
        if dev.block_size() != crypt.sector_size() {
            return Err(Error::Geometry(format!(
                "the integrity device has {}-byte blocks but the segment {}-byte sectors",
                dev.block_size(),
                crypt.sector_size()
            )));
        }
        if tag < crypt.tuple_size() {
            return Err(Error::Geometry(format!(
                "the integrity device keeps {tag}-byte tags but the cipher needs {} bytes per sector",
                crypt.tuple_size()
            )));
        }
        Ok(AuthVolume {
            read_only: dev.mode() == Mode::ReadOnly,
            dev,
            crypt,
            mismatches: AtomicU64::new(0),
            merge: RwLock::new(()),
            on_failure: None,
        })
    }

    /// Calls `hook` with (sectors failed so far, the failing sector) each
    /// time a read fails authentication (for `status`).
    pub fn with_failure_hook(mut self, hook: FailureHook) -> AuthVolume {
        self.on_failure = Some(hook);
        self
    }

    /// Size of the decrypted data in bytes.
    pub fn size(&self) -> u64 {
        self.dev.size()
    }

    /// Sector size in bytes.
    pub fn sector_size(&self) -> usize {
        self.crypt.sector_size()
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The integrity device underneath (its layout, for tests and tools).
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Sectors that failed authentication since opening.
    pub fn mismatches(&self) -> u64 {
        self.mismatches.load(Ordering::Relaxed)
    }

    fn tag_size(&self) -> usize {
        usize::from(self.dev.superblock().tag_size)
    }

    /// Reads and opens whole sectors from `sector` into `out` in
    /// `CRYPT_BYTES` pieces spread over the cores; answers the failed
    /// sectors' indices, in order.
    fn open_parallel(&self, sector: u64, out: &mut [u8]) -> Result<Vec<usize>, Error> {
        let ss = self.sector_size();
        let spb = (ss / 512) as u64;
        let (ts, tuple) = (self.tag_size(), self.crypt.tuple_size());
        let per = CRYPT_BYTES / ss;
        let failed = Mutex::new(Vec::new());
        for_each_chunk(Parallelism::Pool, out, per * ss, &|i, c: &mut [u8]| {
            let first = sector + (i * per) as u64;
            let f = self.crypt.open_from(first, c, &mut |j, d, t| {
                let at = (first + j as u64) * spb;
                if ts == tuple {
                    return self.dev.read_tagged(at, d, t).map_err(integrity_err);
                }
                let mut tags = vec![0u8; d.len() / ss * ts];
                self.dev
                    .read_tagged(at, d, &mut tags)
                    .map_err(integrity_err)?;
                for (dst, src) in t.chunks_exact_mut(tuple).zip(tags.chunks_exact(ts)) {
                    dst.copy_from_slice(&src[..tuple]);
                }
                Ok(())
            })?;
            if !f.is_empty() {
                let mut all = failed.lock().unwrap_or_else(|p| p.into_inner());
                all.extend(f.into_iter().map(|k| i * per + k));
            }
            Ok(())
        })?;
        let mut all = failed.into_inner().unwrap_or_else(|p| p.into_inner());
        all.sort_unstable();
        Ok(all)
    }

    /// Seals whole sectors of `src` from `sector` into `dst` in
    /// `CRYPT_BYTES` pieces spread over the cores, writing their tuples to
    /// `tuples`.
    fn seal_parallel(
        &self,
        sector: u64,
        src: &[u8],
        dst: &mut [u8],
        tuples: &mut [u8],
    ) -> Result<(), Error> {
        let ss = self.sector_size();
        let tuple = self.crypt.tuple_size();
        let per = CRYPT_BYTES / ss;
        let out = Mutex::new(tuples);
        for_each_chunk(Parallelism::Pool, dst, per * ss, &|i, c: &mut [u8]| {
            let first = i * per;
            let from = &src[first * ss..first * ss + c.len()];
            let mut t = vec![0u8; c.len() / ss * tuple];
            self.crypt
                .seal_into(sector + first as u64, from, c, &mut t)?;
            let mut all = out.lock().unwrap_or_else(|p| p.into_inner());
            all[first * tuple..first * tuple + t.len()].copy_from_slice(&t);
            Ok(())
        })
    }

    /// Reads and opens whole sectors from `sector` into `out`; a failing
    /// sector fails the request (and is counted and logged).
    fn read_sectors(&self, sector: u64, out: &mut [u8]) -> Result<(), Error> {
        let ss = self.sector_size();
        let spb = (ss / 512) as u64;
        let mut first = sector;
        for part in out.chunks_mut(CHUNK_BYTES) {
            let n = part.len() / ss;
            let failed = self.open_parallel(first, part)?;
            if let Some(&i) = failed.first() {
                let total = self
                    .mismatches
                    .fetch_add(failed.len() as u64, Ordering::Relaxed)
                    + failed.len() as u64;
                let at = first + i as u64;
                if let Some(hook) = &self.on_failure {
                    hook(total, at);
                }
                // As dm-crypt logs "INTEGRITY AEAD ERROR, sector N".
                eprintln!(
                    "cryptkeep: authentication failed for {} sector(s), first at sector {at} (512-byte sector {})",
                    failed.len(),
                    at * spb
                );
                return Err(Error::Authentication { sector: at });
            }
            first += n as u64;
        }
        Ok(())
    }

    /// Seals whole sectors from `sector` and writes them with their tags.
    fn write_sectors(&self, sector: u64, data: &[u8]) -> Result<(), Error> {
        let ss = self.sector_size();
        let (ts, tuple) = (self.tag_size(), self.crypt.tuple_size());
        let spb = (ss / 512) as u64;
        let len = CHUNK_BYTES.min(data.len());
        let mut sealed = vec![0u8; len];
        let mut tuples = vec![0u8; len / ss * tuple];
        let mut tags = vec![0u8; len / ss * ts];
        let mut first = sector;
        for part in data.chunks(CHUNK_BYTES) {
            let n = part.len() / ss;
            let buf = &mut sealed[..part.len()];
            let tu = &mut tuples[..n * tuple];
            self.seal_parallel(first, part, buf, tu)?;
            let t = &mut tags[..n * ts];
            for (dst, src) in t.chunks_exact_mut(ts).zip(tu.chunks_exact(tuple)) {
                dst[..tuple].copy_from_slice(src);
                dst[tuple..].fill(0);
            }
            self.dev
                .write_tagged(first * spb, buf, t)
                .map_err(integrity_err)?;
            first += n as u64;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at byte `offset`, short only at the end.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let ss = self.sector_size() as u64;
        let end = offset.saturating_add(buf.len() as u64).min(self.size());
        if offset >= end {
            return Ok(0);
        }
        let n = (end - offset) as usize;
        if offset.is_multiple_of(ss) && end.is_multiple_of(ss) {
            self.read_sectors(offset / ss, &mut buf[..n])?;
        } else {
            let first = offset / ss;
            let mut whole = vec![0u8; ((end.div_ceil(ss) - first) * ss) as usize];
            self.read_sectors(first, &mut whole)?;
            let at = (offset - first * ss) as usize;
            buf[..n].copy_from_slice(&whole[at..at + n]);
        }
        Ok(n)
    }

    /// Writes `data` at byte `offset`; partial sectors are read (and
    /// checked), merged and written whole.
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let end = offset.saturating_add(data.len() as u64);
        if end > self.size() {
            return Err(Error::OutOfRange {
                offset,
                len: data.len() as u64,
                size: self.size(),
            });
        }
        let ss = self.sector_size() as u64;
        if offset.is_multiple_of(ss) && end.is_multiple_of(ss) {
            let _shared = self.merge.read().unwrap_or_else(|p| p.into_inner());
            return self.write_sectors(offset / ss, data);
        }
        let _merge = self.merge.write().unwrap_or_else(|p| p.into_inner());
        let first = offset / ss;
        let last = end.div_ceil(ss);
        let mut whole = vec![0u8; ((last - first) * ss) as usize];
        let head = (offset - first * ss) as usize;
        if head != 0 {
            self.read_sectors(first, &mut whole[..ss as usize])?;
        }
        if !end.is_multiple_of(ss) && (last - 1 > first || head == 0) {
            let at = ((last - 1 - first) * ss) as usize;
            self.read_sectors(last - 1, &mut whole[at..at + ss as usize])?;
        }
        whole[head..head + data.len()].copy_from_slice(data);
        self.write_sectors(first, &whole)
    }

    /// Makes completed writes durable.
    pub fn flush(&self) -> Result<(), Error> {
        self.dev.flush().map_err(integrity_err)
    }
}
