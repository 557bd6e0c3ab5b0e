//! [`Device`]: a standalone integrity device opened for reading and
//! writing, as the kernel's dm-integrity serves it.
//!
//! - Reads check every block's tag (a mismatch is [`Error::TagMismatch`];
//!   the kernel answers `EILSEQ`).
//! - Writes, in journal mode (the default), go first to the journal: one
//!   section per batch of blocks, with the kernel's entry layout and commit
//!   IDs, made durable (`fdatasync`), then to the data and tag areas. A
//!   crash between the two leaves a committed section that the next open —
//!   by cryptkeep or by the kernel — replays. Sections are used in a ring;
//!   the commit-ID sequence value advances at each wrap, as the kernel's
//!   does, so its replay finds the newest entries last.
//! - Without a journal (`--integrity-no-journal`), data and tag are written
//!   in place directly; a crash between them can leave a block whose tag
//!   fails, as with the kernel.
//! - Opening for writing replays the journal in place and starts a fresh
//!   one; opening read-only lays it over the data in memory.
//! - [`Device::verify`] reads and checks every block in bulk.

/// Blocks read and checked per request by [`Device::verify`].
const CHUNK_BLOCKS: u64 = 256;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Mutex, RwLock};

use crate::geometry::{JOURNAL_BLOCK_SECTORS, JOURNAL_SECTOR_DATA};
use crate::journal::{self, commit_id, Replay};
use crate::superblock::{
    FLAG_DIRTY_BITMAP, FLAG_FIXED_HMAC, FLAG_INLINE, FLAG_JOURNAL_MAC, FLAG_RECALCULATING,
    MAX_TAG_SIZE,
};
use crate::{Error, Geometry, Superblock, TagHash};

/// The outcome of [`Device::verify`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Blocks checked.
    pub blocks: u64,
    /// Blocks whose newest copy was in the journal.
    pub from_journal: u64,
    /// First data sector of each block whose tag did not match.
    pub mismatches: Vec<u64>,
}

/// Where the next journal section goes.
#[derive(Debug)]
struct Ring {
    next_section: u32,
    seq: u8,
    /// The ring wrapped since the last sync: the in-place copies of the
    /// lap before must be made durable before a section is reused.
    wrapped: bool,
}

/// How to open a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reads only; the journal is laid over the data in memory.
    ReadOnly,
    /// Writes through the journal (the kernel's default, `J`).
    Journal,
    /// Writes in place without a journal (`--integrity-no-journal`, `D`).
    Direct,
}

/// An open integrity device.
#[derive(Debug)]
pub struct Device {
    file: File,
    superblock: Superblock,
    geometry: Geometry,
    /// The tag algorithm; `None` when the layer above supplies the tags
    /// (dm-crypt's authenticated modes: [`Device::open_external`]).
    hash: Option<TagHash>,
    mode: Mode,
    /// Blocks held in memory from the journal (read-only opens).
    replay: Replay,
    ring: Mutex<Ring>,
    /// Writers exclude readers so a read never sees a block's new data
    /// with its old tag.
    io: RwLock<()>,
    /// Stop after committing to the journal (tests of crash recovery).
    crash_after_commit: bool,
}

fn io_err(what: &str, at: u64, source: std::io::Error) -> Error {
    Error::Io {
        what: format!("{what} at byte {at}"),
        source,
    }
}

impl Device {
    /// Opens the device at `path` with tag algorithm `hash` in `mode`,
    /// reading metadata in `buffer_sectors` units.
    pub fn open(
        path: &Path,
        hash: TagHash,
        mode: Mode,
        buffer_sectors: u32,
    ) -> Result<Device, Error> {
        Self::open_with(path, 0, Some(hash), mode, buffer_sectors)
    }

    /// Opens the device whose superblock lies at byte `start` of `path`
    /// (a LUKS2 data segment), whose tags the layer above computes and
    /// checks (dm-crypt's authenticated modes: no internal hash). Only
    /// [`Device::read_tagged`] and [`Device::write_tagged`] move data.
    pub fn open_external(
        path: &Path,
        start: u64,
        mode: Mode,
        buffer_sectors: u32,
    ) -> Result<Device, Error> {
        Self::open_with(path, start, None, mode, buffer_sectors)
    }

    fn open_with(
        path: &Path,
        start: u64,
        hash: Option<TagHash>,
        mode: Mode,
        buffer_sectors: u32,
    ) -> Result<Device, Error> {
        if !start.is_multiple_of(512) {
            return Err(Error::BadSuperblock(format!(
                "the superblock offset {start} is not a multiple of 512"
            )));
        }
        let (file, size) = crate::probe::open_device(path, mode != Mode::ReadOnly)?;
        if start >= size {
            return Err(Error::Io {
                what: format!("the superblock at byte {start}"),
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            });
        }
        let superblock = crate::probe::superblock_at(&file, start)?;
        for (flag, what) in [
            (
                FLAG_INLINE,
                "inline mode (tags in the device's protection information)",
            ),
            (FLAG_DIRTY_BITMAP, "bitmap mode"),
            (
                FLAG_RECALCULATING,
                "a device whose tags are being recalculated",
            ),
        ] {
            if superblock.has(flag) {
                return Err(Error::Unsupported(what.into()));
            }
        }
        if mode != Mode::ReadOnly && superblock.has(FLAG_JOURNAL_MAC) {
            return Err(Error::Unsupported(
                "writing a device whose journal carries a MAC (--journal-integrity)".into(),
            ));
        }
        let geometry = Geometry::new(&superblock, start / 512, size / 512, buffer_sectors)?;
        let replay = journal::read(&geometry, &mut |buf, at| {
            file.read_exact_at(buf, at)
                .map_err(|e| io_err("the journal", at, e))
        })?;
        let mut d = Device {
            file,
            superblock,
            geometry,
            hash,
            mode,
            replay,
            ring: Mutex::new(Ring {
                next_section: 0,
                seq: 1,
                wrapped: false,
            }),
            io: RwLock::new(()),
            crash_after_commit: false,
        };
        if mode != Mode::ReadOnly {
            d.replay_in_place()?;
        }
        Ok(d)
    }

    /// The tag algorithm, or why there is none to use here.
    fn hash(&self) -> Result<&TagHash, Error> {
        self.hash.as_ref().ok_or_else(|| {
            Error::Unsupported(
                "byte I/O on a device whose tags the layer above computes (use read_tagged / write_tagged)"
                    .into(),
            )
        })
    }

    /// The usable size in bytes.
    pub fn size(&self) -> u64 {
        self.geometry.provided_data_sectors * 512
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> usize {
        self.geometry.sectors_per_block as usize * 512
    }

    /// How the device was opened.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The layout.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Makes every later write stop right after its journal commit, as if
    /// the machine lost power there (for tests of recovery).
    pub fn crash_after_commit(&mut self) {
        self.crash_after_commit = true;
    }

    fn salt(&self) -> Option<&[u8; 16]> {
        self.superblock
            .has(FLAG_FIXED_HMAC)
            .then_some(&self.superblock.salt)
    }

    fn sync(&self) -> Result<(), Error> {
        self.file.sync_data().map_err(|source| Error::Io {
            what: "the device (flushing)".into(),
            source,
        })
    }

    /// Writes the committed journal entries in place, then starts a fresh
    /// journal (every sector sequence 0, every entry unused).
    fn replay_in_place(&mut self) -> Result<(), Error> {
        let entries = std::mem::take(&mut self.replay.entries);
        if !entries.is_empty() {
            let mut sorted: Vec<_> = entries.into_values().collect();
            sorted.sort_by_key(|e| e.sector);
            for e in &sorted {
                self.write_block_in_place(e.sector, &e.data, &e.tag)?;
            }
            self.sync()?;
        }
        crate::format::write_journal(&self.file, &self.geometry)?;
        self.sync()
    }

    fn write_block_in_place(&self, sector: u64, data: &[u8], tag: &[u8]) -> Result<(), Error> {
        let g = &self.geometry;
        let at = g.data_sector(sector) * 512;
        self.file
            .write_all_at(data, at)
            .map_err(|e| io_err("data (writing)", at, e))?;
        let at = g.tag_offset(sector);
        self.file
            .write_all_at(tag, at)
            .map_err(|e| io_err("a tag (writing)", at, e))
    }

    /// Reads `buf.len()` bytes at byte `offset` of the provided data,
    /// checking every block it touches; short at the end of the device.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let _r = self.io.read().unwrap_or_else(|p| p.into_inner());
        let bs = self.block_size() as u64;
        let end = offset.saturating_add(buf.len() as u64).min(self.size());
        if offset >= end {
            return Ok(0);
        }
        let first = offset / bs;
        let last = end.div_ceil(bs);
        let n = (end - offset) as usize;
        if offset.is_multiple_of(bs) && end.is_multiple_of(bs) {
            self.read_blocks(first * bs / 512, &mut buf[..n])?;
        } else {
            let mut blocks = vec![0u8; ((last - first) * bs) as usize];
            self.read_blocks(first * bs / 512, &mut blocks)?;
            let at = (offset - first * bs) as usize;
            buf[..n].copy_from_slice(&blocks[at..at + n]);
        }
        Ok(n)
    }

    /// Splits the blocks from data sector `sector` (`blocks` of them) into
    /// runs that stay inside one area, where data and tags are contiguous:
    /// `(first sector, first block index, blocks)`.
    fn runs(&self, sector: u64, blocks: usize) -> Vec<(u64, usize, usize)> {
        let g = &self.geometry;
        let spb = u64::from(g.sectors_per_block);
        let area = 1u64 << g.log2_interleave;
        let mut v = Vec::new();
        let (mut s, mut i) = (sector, 0usize);
        while i < blocks {
            let to_area_end = (((s / area) + 1) * area - s) / spb;
            let n = (to_area_end as usize).min(blocks - i);
            v.push((s, i, n));
            s += n as u64 * spb;
            i += n;
        }
        v
    }

    /// Reads whole blocks from data sector `sector` into `out` (a multiple
    /// of the block size) and checks every block's tag.
    fn read_blocks(&self, sector: u64, out: &mut [u8]) -> Result<(), Error> {
        let hash = self.hash()?;
        let bs = self.block_size();
        let ts = self.geometry.tag_size as usize;
        let spb = u64::from(self.geometry.sectors_per_block);
        let mut tags = vec![0u8; out.len() / bs * ts];
        self.read_raw(sector, out, &mut tags)?;
        let mut computed = [0u8; MAX_TAG_SIZE as usize];
        for (b, (block, tag)) in out.chunks_exact(bs).zip(tags.chunks_exact(ts)).enumerate() {
            let s = sector + b as u64 * spb;
            let want = &mut computed[..ts];
            hash.tag(self.salt(), s, block, want);
            if want != tag {
                return Err(Error::TagMismatch { sector: s });
            }
        }
        Ok(())
    }

    /// Reads whole blocks from data sector `sector` into `out` and their
    /// stored tags into `tags` (tag size bytes per block), with one read of
    /// data and one of tags per area; blocks held in the journal (read-only
    /// opens) come from there. Checks nothing.
    fn read_raw(&self, sector: u64, out: &mut [u8], tags: &mut [u8]) -> Result<(), Error> {
        let g = &self.geometry;
        let bs = self.block_size();
        let ts = g.tag_size as usize;
        let spb = u64::from(g.sectors_per_block);
        for (s, i, n) in self.runs(sector, out.len() / bs) {
            let data = &mut out[i * bs..(i + n) * bs];
            let at = g.data_sector(s) * 512;
            self.file
                .read_exact_at(data, at)
                .map_err(|e| io_err("data", at, e))?;
            let t = &mut tags[i * ts..(i + n) * ts];
            let at = g.tag_offset(s);
            self.file
                .read_exact_at(t, at)
                .map_err(|e| io_err("tags", at, e))?;
            if self.replay.entries.is_empty() {
                continue;
            }
            for b in 0..n {
                if let Some(e) = self.replay.entries.get(&(s + b as u64 * spb)) {
                    data[b * bs..(b + 1) * bs].copy_from_slice(&e.data);
                    t[b * ts..(b + 1) * ts].copy_from_slice(&e.tag);
                }
            }
        }
        Ok(())
    }

    /// Checks that `data` is whole blocks starting at data sector `sector`
    /// inside the device and `tags` one tag per block.
    fn check_tagged(&self, sector: u64, data: &[u8], tags: &[u8]) -> Result<(), Error> {
        let bs = self.block_size() as u64;
        let spb = u64::from(self.geometry.sectors_per_block);
        let blocks = data.len() as u64 / bs;
        let end = sector.saturating_add(blocks * spb);
        if !(data.len() as u64).is_multiple_of(bs)
            || !sector.is_multiple_of(spb)
            || tags.len() as u64 != blocks * u64::from(self.geometry.tag_size)
            || end > self.geometry.provided_data_sectors
        {
            return Err(Error::Io {
                what: format!(
                    "a request of {} bytes and {} tag bytes at sector {sector}",
                    data.len(),
                    tags.len()
                ),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        Ok(())
    }

    /// Reads whole blocks from data sector `sector` (a multiple of the
    /// block's sectors) into `data`, and each block's stored tag into
    /// `tags`, for a layer above that checks them itself (dm-crypt's
    /// authenticated modes).
    pub fn read_tagged(&self, sector: u64, data: &mut [u8], tags: &mut [u8]) -> Result<(), Error> {
        self.check_tagged(sector, data, tags)?;
        let _r = self.io.read().unwrap_or_else(|p| p.into_inner());
        self.read_raw(sector, data, tags)
    }

    /// Writes whole blocks from data sector `sector` with the tags the
    /// layer above computed, through the journal unless opened
    /// [`Mode::Direct`].
    pub fn write_tagged(&self, sector: u64, data: &[u8], tags: &[u8]) -> Result<(), Error> {
        self.check_writable()?;
        self.check_tagged(sector, data, tags)?;
        let _w = self.io.write().unwrap_or_else(|p| p.into_inner());
        self.write_raw(sector, data, tags)
    }

    fn check_writable(&self) -> Result<(), Error> {
        if self.mode == Mode::ReadOnly {
            return Err(Error::Unsupported(
                "writing a device opened read-only".into(),
            ));
        }
        Ok(())
    }

    /// Writes `data` at byte `offset` of the provided data (partial blocks
    /// are read, checked and merged first).
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<(), Error> {
        self.check_writable()?;
        self.hash()?;
        let end = offset.saturating_add(data.len() as u64);
        if end > self.size() {
            return Err(Error::Io {
                what: format!("a write at byte {offset}"),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        let bs = self.block_size() as u64;
        if offset.is_multiple_of(bs) && end.is_multiple_of(bs) {
            // Whole blocks: tagged before the lock (concurrent writers hash
            // in parallel), written without a copy.
            let sector = offset / 512;
            let tags = self.tags_of(sector, data)?;
            let _w = self.io.write().unwrap_or_else(|p| p.into_inner());
            return self.write_raw(sector, data, &tags);
        }
        let _w = self.io.write().unwrap_or_else(|p| p.into_inner());
        let first = offset / bs;
        let last = end.div_ceil(bs);
        let mut blocks = vec![0u8; ((last - first) * bs) as usize];
        let head = (offset - first * bs) as usize;
        if head != 0 {
            self.read_blocks(first * bs / 512, &mut blocks[..bs as usize])?;
        }
        if !end.is_multiple_of(bs) && (last - 1 > first || head == 0) {
            let at = ((last - 1 - first) * bs) as usize;
            self.read_blocks((last - 1) * bs / 512, &mut blocks[at..at + bs as usize])?;
        }
        blocks[head..head + data.len()].copy_from_slice(data);
        self.write_blocks(first * bs / 512, &blocks)
    }

    /// Writes whole blocks starting at data sector `sector`, tagged with
    /// the device's own algorithm.
    fn write_blocks(&self, sector: u64, blocks: &[u8]) -> Result<(), Error> {
        let tags = self.tags_of(sector, blocks)?;
        self.write_raw(sector, blocks, &tags)
    }

    /// The tags, with the device's own algorithm, of whole blocks starting
    /// at data sector `sector`.
    fn tags_of(&self, sector: u64, blocks: &[u8]) -> Result<Vec<u8>, Error> {
        let hash = self.hash()?;
        let bs = self.block_size();
        let spb = u64::from(self.geometry.sectors_per_block);
        let ts = self.geometry.tag_size as usize;
        let mut tags = vec![0u8; blocks.len() / bs * ts];
        for (i, (block, tag)) in blocks
            .chunks_exact(bs)
            .zip(tags.chunks_exact_mut(ts))
            .enumerate()
        {
            hash.tag(self.salt(), sector + i as u64 * spb, block, tag);
        }
        Ok(tags)
    }

    /// Writes whole blocks and their tags: through the journal (commit,
    /// then copy in place) or, in [`Mode::Direct`], in place.
    fn write_raw(&self, sector: u64, blocks: &[u8], tags: &[u8]) -> Result<(), Error> {
        let g = &self.geometry;
        let bs = self.block_size();
        let spb = u64::from(g.sectors_per_block);
        let ts = g.tag_size as usize;
        let n = blocks.len() / bs;
        // In place: one write of data and one of tags per area.
        let in_place = |from: usize, to: usize| -> Result<(), Error> {
            for (s, i, m) in self.runs(sector + from as u64 * spb, to - from) {
                let i = from + i;
                let at = g.data_sector(s) * 512;
                self.file
                    .write_all_at(&blocks[i * bs..(i + m) * bs], at)
                    .map_err(|e| io_err("data (writing)", at, e))?;
                let at = g.tag_offset(s);
                self.file
                    .write_all_at(&tags[i * ts..(i + m) * ts], at)
                    .map_err(|e| io_err("tags (writing)", at, e))?;
            }
            Ok(())
        };
        if self.mode != Mode::Journal {
            return in_place(0, n);
        }
        // Section by section: commit, then copy in place. A section is
        // overwritten only a lap later, after the copies of the lap before
        // were made durable (see `commit_section`).
        let per = g.journal_section_entries as usize;
        for start in (0..n).step_by(per) {
            let end = (start + per).min(n);
            self.commit_section(
                sector + start as u64 * spb,
                &blocks[start * bs..end * bs],
                &tags[start * ts..end * ts],
            )?;
            if self.crash_after_commit && end == n {
                return Ok(());
            }
            in_place(start, end)?;
        }
        Ok(())
    }

    /// Writes one journal section holding `blocks` (consecutive, from data
    /// sector `sector`) with their `tags`, and makes it durable.
    fn commit_section(&self, sector: u64, blocks: &[u8], tags: &[u8]) -> Result<(), Error> {
        let g = &self.geometry;
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.wrapped {
            self.sync()?;
            ring.wrapped = false;
        }
        let i = ring.next_section;
        let seq = ring.seq;
        let bs = self.block_size();
        let spb = g.sectors_per_block as usize;
        let ts = g.tag_size as usize;
        let mut buf = vec![0u8; g.journal_section_sectors as usize * 512];
        for n in 0..g.journal_section_entries as usize {
            let e = (n % JOURNAL_BLOCK_SECTORS as usize) * 512
                + (n / JOURNAL_BLOCK_SECTORS as usize) * g.journal_entry_size as usize;
            let block = n * bs;
            if block >= blocks.len() {
                buf[e + 4..e + 8].copy_from_slice(&u32::MAX.to_le_bytes());
                continue;
            }
            let s = sector + (n * spb) as u64;
            buf[e..e + 8].copy_from_slice(&s.to_le_bytes());
            for k in 0..spb {
                let src = &blocks[block + k * 512..block + (k + 1) * 512];
                let js = (JOURNAL_BLOCK_SECTORS as usize + n * spb + k) * 512;
                buf[js..js + 504].copy_from_slice(&src[..504]);
                let lb = e + 8 + 8 * k;
                buf[lb..lb + 8].copy_from_slice(&src[504..]);
            }
            let t = e + 8 + 8 * spb;
            buf[t..t + ts].copy_from_slice(&tags[n * ts..(n + 1) * ts]);
        }
        for j in 0..g.journal_section_sectors {
            let at = j as usize * 512 + JOURNAL_SECTOR_DATA as usize;
            buf[at..at + 8].copy_from_slice(&commit_id(i, j, seq).to_le_bytes());
        }
        let at = g.journal_offset(i, 0);
        self.file
            .write_all_at(&buf, at)
            .map_err(|e| io_err("the journal (writing)", at, e))?;
        self.sync()?;
        ring.next_section += 1;
        if ring.next_section == g.journal_sections {
            ring.next_section = 0;
            ring.seq = (ring.seq + 1) % 4;
            ring.wrapped = true;
        }
        Ok(())
    }

    /// Reads and checks every block, in order, writing the data to `out`
    /// when given. A mismatch is recorded and reading goes on (the kernel
    /// fails that block's read with `EILSEQ`; `out` gets zeros there).
    pub fn verify(&self, mut out: Option<&mut dyn Write>) -> Result<VerifyReport, Error> {
        let hash = self.hash()?;
        let g = &self.geometry;
        let _r = self.io.read().unwrap_or_else(|p| p.into_inner());
        let spb = u64::from(g.sectors_per_block);
        let block_bytes = spb as usize * 512;
        let tag_size = g.tag_size as usize;
        let area_sectors = 1u64 << g.log2_interleave;
        let mut report = VerifyReport::default();
        let mut data = vec![0u8; CHUNK_BLOCKS as usize * block_bytes];
        let mut tags = vec![0u8; CHUNK_BLOCKS as usize * tag_size];
        let mut want = vec![0u8; tag_size];
        let mut sector = 0u64;
        while sector < g.provided_data_sectors {
            // Within one area data and tags are contiguous.
            let area_end = (sector / area_sectors + 1) * area_sectors;
            let end = area_end.min(g.provided_data_sectors);
            let blocks = ((end - sector) / spb).min(CHUNK_BLOCKS);
            let d = &mut data[..blocks as usize * block_bytes];
            let t = &mut tags[..blocks as usize * tag_size];
            let at = g.data_sector(sector) * 512;
            self.file
                .read_exact_at(d, at)
                .map_err(|e| io_err("data", at, e))?;
            let at = g.tag_offset(sector);
            self.file
                .read_exact_at(t, at)
                .map_err(|e| io_err("tags", at, e))?;
            for b in 0..blocks as usize {
                let s = sector + b as u64 * spb;
                let block = &mut d[b * block_bytes..(b + 1) * block_bytes];
                let mut tag = &t[b * tag_size..(b + 1) * tag_size];
                if let Some(e) = self.replay.entries.get(&s) {
                    block.copy_from_slice(&e.data);
                    tag = &e.tag;
                    report.from_journal += 1;
                }
                hash.tag(self.salt(), s, block, &mut want);
                if want != tag {
                    report.mismatches.push(s);
                    block.fill(0);
                }
            }
            if let Some(w) = out.as_deref_mut() {
                w.write_all(d).map_err(|source| Error::Io {
                    what: "the output".into(),
                    source,
                })?;
            }
            report.blocks += blocks;
            sector += blocks * spb;
        }
        Ok(report)
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), Error> {
        if self.mode == Mode::ReadOnly {
            return Ok(());
        }
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{format, FormatOptions, DEFAULT_BUFFER_SECTORS};

    fn formatted(name: &str, mib: u64, sector_size: u32) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ck-intdev-{}-{name}", std::process::id()));
        File::create(&p).unwrap().set_len(mib << 20).unwrap();
        let o = FormatOptions {
            hash: TagHash::Crc32c,
            tag_size: None,
            sector_size,
            journal_bytes: Some(64 << 10),
            interleave_sectors: 0,
            wipe: true,
        };
        format(&p, &o, [3; 16], &mut |_, _| {}).unwrap();
        p
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
            .collect()
    }

    fn image_data(p: &Path) -> (Vec<u8>, VerifyReport) {
        let img = Device::open(p, TagHash::Crc32c, Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
        let mut out = Vec::new();
        let r = img.verify(Some(&mut out)).unwrap();
        (out, r)
    }

    #[test]
    fn writes_through_the_journal_read_back_everywhere() {
        for (mode, ss) in [
            (Mode::Journal, 512),
            (Mode::Direct, 512),
            (Mode::Journal, 4096),
        ] {
            let p = formatted(&format!("{mode:?}-{ss}"), 8, ss);
            let d = Device::open(&p, TagHash::Crc32c, mode, DEFAULT_BUFFER_SECTORS).unwrap();
            let mut model = vec![0u8; d.size() as usize];
            // Many writes, unaligned ones too, enough to wrap the journal
            // ring several times.
            for (k, (off, len)) in [
                (0u64, 4096usize),
                (1000, 70000),
                (5 << 20, 1 << 20),
                (777, 3),
            ]
            .into_iter()
            .cycle()
            .take(40)
            .enumerate()
            {
                let data = pattern(len, k as u8);
                d.write_at(&data, off).unwrap();
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            let mut back = vec![0u8; d.size() as usize];
            assert_eq!(d.read_at(&mut back, 0).unwrap(), back.len());
            assert!(back == model, "{mode:?} {ss}: read back differs");
            drop(d);
            let (out, r) = image_data(&p);
            assert!(r.mismatches.is_empty(), "{mode:?} {ss}: tag mismatches");
            assert!(out == model, "{mode:?} {ss}: the image differs");
            std::fs::remove_file(&p).unwrap();
        }
    }

    #[test]
    fn a_crash_after_the_journal_commit_is_replayed() {
        let p = formatted("crash", 8, 512);
        let mut d =
            Device::open(&p, TagHash::Crc32c, Mode::Journal, DEFAULT_BUFFER_SECTORS).unwrap();
        // Wrap the ring a few times first, then lose power after a commit.
        for k in 0..30u8 {
            d.write_at(&pattern(100_000, k), 4096).unwrap();
        }
        d.crash_after_commit();
        let last = pattern(300_000, 99);
        d.write_at(&last, 1 << 20).unwrap();
        drop(d);
        let (out, r) = image_data(&p);
        assert!(r.from_journal > 0, "nothing came from the journal");
        assert!(r.mismatches.is_empty());
        assert!(out[1 << 20..(1 << 20) + last.len()] == last[..]);
        assert!(out[4096..4096 + 100_000] == pattern(100_000, 29)[..]);
        // Opening for writing replays it in place and starts a new journal.
        drop(Device::open(&p, TagHash::Crc32c, Mode::Journal, DEFAULT_BUFFER_SECTORS).unwrap());
        let (out2, r2) = image_data(&p);
        assert_eq!(r2.from_journal, 0);
        assert!(r2.mismatches.is_empty());
        assert!(out2 == out);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_changed_byte_fails_the_read_of_its_block_only() {
        let p = formatted("tamper", 4, 512);
        let d = Device::open(&p, TagHash::Crc32c, Mode::Direct, DEFAULT_BUFFER_SECTORS).unwrap();
        d.write_at(&pattern(8192, 1), 0).unwrap();
        let at = d.geometry.data_sector(9) * 512 + 5;
        d.file.write_all_at(&[0xee], at).unwrap();
        let mut b = vec![0u8; 512];
        assert!(matches!(
            d.read_at(&mut b, 9 * 512),
            Err(Error::TagMismatch { sector: 9 })
        ));
        assert!(d.read_at(&mut b, 8 * 512).is_ok());
        // A partial write into the damaged block refuses to merge with it.
        assert!(d.write_at(&[1, 2, 3], 9 * 512 + 100).is_err());
        std::fs::remove_file(&p).unwrap();
    }
}

#[cfg(test)]
mod tamper_tests {
    use super::*;
    use crate::{format, FormatOptions, DEFAULT_BUFFER_SECTORS};

    /// 1000 single-bit flips, each in a random data or tag byte: the block
    /// it belongs to (and only that block) fails; restoring the bit heals it.
    #[test]
    fn every_flipped_bit_fails_its_block_and_nothing_else() {
        for (hash, ss) in [(TagHash::Crc32c, 512u32), (TagHash::Sha256, 4096)] {
            let p = std::env::temp_dir().join(format!(
                "ck-intflip-{}-{}",
                std::process::id(),
                hash.name()
            ));
            File::create(&p).unwrap().set_len(2 << 20).unwrap();
            let o = FormatOptions {
                hash: hash.clone(),
                tag_size: None,
                sector_size: ss,
                journal_bytes: Some(64 << 10),
                interleave_sectors: 0,
                wipe: true,
            };
            format(&p, &o, [9; 16], &mut |_, _| {}).unwrap();
            let d = Device::open(&p, hash.clone(), Mode::Direct, DEFAULT_BUFFER_SECTORS).unwrap();
            let data: Vec<u8> = (0..d.size()).map(|i| (i * 7 + (i >> 11)) as u8).collect();
            d.write_at(&data, 0).unwrap();
            let g = d.geometry.clone();
            let bs = d.block_size() as u64;
            let blocks = d.size() / bs;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let mut buf = vec![0u8; bs as usize];
            for _ in 0..1000 {
                let block = next(blocks);
                let sector = block * bs / 512;
                let at = if next(2) == 0 {
                    g.data_sector(sector) * 512 + next(bs)
                } else {
                    g.tag_offset(sector) + next(u64::from(g.tag_size))
                };
                let bit = 1u8 << next(8);
                let mut byte = [0u8; 1];
                d.file.read_exact_at(&mut byte, at).unwrap();
                d.file.write_all_at(&[byte[0] ^ bit], at).unwrap();
                let r = d.read_at(&mut buf, block * bs);
                assert!(
                    matches!(r, Err(Error::TagMismatch { sector: s }) if s == sector),
                    "{}: flip at byte {at} read as {r:?}",
                    hash.name()
                );
                for other in [block.wrapping_sub(1), block + 1] {
                    if other < blocks {
                        d.read_at(&mut buf, other * bs).unwrap();
                        assert_eq!(
                            buf,
                            data[(other * bs) as usize..((other + 1) * bs) as usize]
                        );
                    }
                }
                d.file.write_all_at(&byte, at).unwrap();
                d.read_at(&mut buf, block * bs).unwrap();
            }
            let mut all = vec![0u8; d.size() as usize];
            d.read_at(&mut all, 0).unwrap();
            assert!(all == data, "{}: data changed", hash.name());
            std::fs::remove_file(&p).unwrap();
        }
    }
}

#[cfg(test)]
mod external_tests {
    use super::*;
    use crate::{format_external, FormatOptions, DEFAULT_BUFFER_SECTORS};

    /// A stand-in for the layer above: a tag that depends on the sector
    /// and the data, so a block moved or changed shows.
    fn tag_of(sector: u64, block: &[u8], out: &mut [u8]) {
        let n = out.len();
        for (i, t) in out.iter_mut().enumerate() {
            *t = block
                .iter()
                .skip(i)
                .step_by(n)
                .fold(sector as u8 ^ i as u8, |a, b| a.wrapping_mul(31) ^ b);
        }
    }

    /// A device at an offset with caller-made tags: the wipe hands every
    /// block to the caller, tagged writes go through the journal (and its
    /// replay after a crash) and read back with their tags, the bytes
    /// before the offset are never touched.
    #[test]
    fn caller_tags_at_an_offset_survive_the_journal() {
        let p = std::env::temp_dir().join(format!("ck-intext-{}", std::process::id()));
        let start = 1u64 << 20;
        let f = File::create(&p).unwrap();
        f.set_len(9 << 20).unwrap();
        f.write_all_at(&[0xa5; 4096], start - 4096).unwrap();
        let o = FormatOptions {
            hash: TagHash::Crc32c,
            tag_size: None,
            sector_size: 4096,
            journal_bytes: Some(256 << 10),
            interleave_sectors: 0,
            wipe: true,
        };
        let mut seen = 0u64;
        let mut fill = |sb: &Superblock, sector: u64, data: &mut [u8], tags: &mut [u8]| {
            let spb = u64::from(sb.sectors_per_block());
            for (b, (blk, t)) in data.chunks_mut(4096).zip(tags.chunks_mut(28)).enumerate() {
                blk.fill(0x11);
                tag_of(sector + b as u64 * spb, blk, t);
                seen += 1;
            }
            Ok(())
        };
        let sb =
            format_external(&p, start, &o, 28, [0; 16], Some(&mut fill), &mut |_, _| {}).unwrap();
        assert_eq!(sb.tag_size, 28);
        assert_eq!(seen, sb.provided_data_sectors / 8);
        let mut d =
            Device::open_external(&p, start, Mode::Journal, DEFAULT_BUFFER_SECTORS).unwrap();
        let bs = 4096usize;
        let blocks = 300usize;
        let data: Vec<u8> = (0..blocks * bs)
            .map(|i| (i * 13 + (i >> 12)) as u8)
            .collect();
        let mut tags = vec![0u8; blocks * 28];
        for (b, (blk, t)) in data.chunks(bs).zip(tags.chunks_mut(28)).enumerate() {
            tag_of(8 + b as u64 * 8, blk, t);
        }
        d.write_tagged(8, &data, &tags).unwrap();
        d.crash_after_commit();
        let last = vec![0x77u8; 3 * bs];
        let mut last_tags = vec![0u8; 3 * 28];
        for (b, (blk, t)) in last.chunks(bs).zip(last_tags.chunks_mut(28)).enumerate() {
            tag_of(80 + b as u64 * 8, blk, t);
        }
        d.write_tagged(80, &last, &last_tags).unwrap();
        drop(d);
        // The read-only open lays the journal over the data.
        let d = Device::open_external(&p, start, Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
        let mut back = vec![0u8; (blocks + 1) * bs];
        let mut back_tags = vec![0u8; (blocks + 1) * 28];
        d.read_tagged(0, &mut back, &mut back_tags).unwrap();
        assert!(back[..bs].iter().all(|&b| b == 0x11), "the wiped block");
        let mut want = data.clone();
        want[(80 / 8 - 1) * bs..(80 / 8 + 2) * bs].copy_from_slice(&last);
        assert!(back[bs..] == want[..], "the data written");
        for (b, (blk, t)) in back.chunks(bs).zip(back_tags.chunks(28)).enumerate() {
            let mut w = [0u8; 28];
            tag_of(b as u64 * 8, blk, &mut w);
            assert_eq!(&w[..], t, "block {b}'s tag");
        }
        // Byte I/O needs the device's own algorithm; misfit requests fail.
        assert!(d.read_at(&mut [0u8; 512], 0).is_err());
        assert!(d.read_tagged(1, &mut [0u8; 4096], &mut [0u8; 28]).is_err());
        assert!(d.read_tagged(0, &mut [0u8; 4096], &mut [0u8; 27]).is_err());
        let end = sb.provided_data_sectors;
        assert!(d
            .read_tagged(end, &mut [0u8; 4096], &mut [0u8; 28])
            .is_err());
        let mut before = [0u8; 4096];
        d.file.read_exact_at(&mut before, start - 4096).unwrap();
        assert_eq!(before, [0xa5; 4096]);
        std::fs::remove_file(&p).unwrap();
    }
}
