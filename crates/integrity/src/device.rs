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
//! - In bitmap mode (`--integrity-bitmap-mode`, the kernel's `B`) data
//!   and tags are written in place; before that, the region's bit is set in
//!   the on-disk bitmap (the journal area) and made durable. Bits are
//!   cleared, once the writes are durable, at a flush at least the flush
//!   interval after they were set, and at [`Device::close`]. Opening a
//!   device left with dirty bits recalculates the tags of those regions,
//!   with the kernel's `recalculating` flag and `recalc_sector` (see
//!   `docs/format/integrity.md`, "Bitmap mode", for every switch between
//!   modes).
//! - [`Device::verify`] reads and checks every block in bulk.

/// Blocks read and checked per request by [`Device::verify`].
const CHUNK_BLOCKS: u64 = 256;

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

use crate::bitmap::{self, Bitmap, BitmapOptions, BITMAP_BLOCK_BYTES};

use crate::geometry::{JOURNAL_BLOCK_SECTORS, JOURNAL_SECTOR_DATA};
use crate::journal::{self, commit_id, Replay};
use crate::superblock::{
    FLAG_DIRTY_BITMAP, FLAG_FIXED_HMAC, FLAG_FIXED_PADDING, FLAG_INLINE, FLAG_JOURNAL_MAC,
    FLAG_RECALCULATING, MAX_TAG_SIZE,
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
    /// Blocks read without a check: their region is marked dirty in the
    /// bitmap, or lies past `recalc_sector` (the next read-write open
    /// recalculates their tags, as the kernel does; it does not check them
    /// either until then).
    pub unchecked: u64,
    /// Of the unchecked blocks, those whose stored tag does not match.
    pub stale: u64,
}

/// The kernel's recalculation step (`RECALC_SECTORS`).
const RECALC_SECTORS: u64 = 32768;
/// Steps between two superblock writes while recalculating
/// (`RECALC_WRITE_SUPER`).
const RECALC_WRITE_SUPER: u32 = 16;

/// Bitmap mode's state while the device is open.
#[derive(Debug)]
struct BitmapState {
    /// The on-disk bitmap as last written (a bit is set here, and made
    /// durable, before its region is written).
    map: Bitmap,
    /// When the first bit since the last clearing was set.
    dirtied_at: Option<Instant>,
    options: BitmapOptions,
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
    /// Writes in place, marking each region dirty in the on-disk bitmap
    /// first (`--integrity-bitmap-mode`, `B`); needs the device's own tag
    /// algorithm.
    Bitmap,
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
    /// Stop after committing to the journal, or after marking the bitmap
    /// (tests of crash recovery).
    crash_after_commit: bool,
    /// Bitmap mode's bitmap.
    bitmap: Option<Mutex<BitmapState>>,
    /// Read-only opens: regions marked dirty on disk, read unchecked.
    dirty_regions: Option<Bitmap>,
    /// Read-only opens: where recalculation stands, when unfinished;
    /// blocks from there on are read unchecked.
    recalc_from: Option<u64>,
    /// [`Device::close`] ran: writes are refused.
    closed: AtomicBool,
}

/// The refusal to recompute keyed tags over data nobody vouched for.
fn keyed_recalculation() -> Error {
    Error::Unsupported(
        "recomputing keyed (hmac) tags that the superblock marks as not yet recalculated or \
         dirty: the superblock is not authenticated, so this could make tampered data \
         authentic. Check the data read-only first (integrity verify), then open with \
         --integrity-legacy-recalc if you trust it (the kernel's legacy_recalculate)"
            .into(),
    )
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
        Self::open_with(
            path,
            0,
            Some(hash),
            mode,
            buffer_sectors,
            BitmapOptions::default(),
        )
    }

    /// Like [`Device::open`], with bitmap mode's options (used by
    /// [`Mode::Bitmap`]; the other modes compare its region size with the
    /// one a device left in bitmap mode recorded, as the kernel does).
    pub fn open_with_bitmap(
        path: &Path,
        hash: TagHash,
        mode: Mode,
        buffer_sectors: u32,
        bitmap: BitmapOptions,
    ) -> Result<Device, Error> {
        Self::open_with(path, 0, Some(hash), mode, buffer_sectors, bitmap)
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
        Self::open_with(
            path,
            start,
            None,
            mode,
            buffer_sectors,
            BitmapOptions::default(),
        )
    }

    fn open_with(
        path: &Path,
        start: u64,
        hash: Option<TagHash>,
        mode: Mode,
        buffer_sectors: u32,
        bitmap_options: BitmapOptions,
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
        if superblock.has(FLAG_INLINE) {
            return Err(Error::Unsupported(
                "inline mode (tags in the device's protection information)".into(),
            ));
        }
        if hash.is_none() {
            // The kernel refuses these without an internal hash.
            if mode == Mode::Bitmap {
                return Err(Error::Unsupported(
                    "bitmap mode without the device's own tag algorithm (the kernel allows it only with an internal hash)".into(),
                ));
            }
            if superblock.has(FLAG_RECALCULATING) || superblock.has(FLAG_DIRTY_BITMAP) {
                return Err(Error::Unsupported(
                    "recalculating tags the layer above computes".into(),
                ));
            }
        }
        let recalc_pending = superblock.has(FLAG_RECALCULATING)
            && superblock.recalc_sector < superblock.provided_data_sectors;
        let keyed = hash.as_ref().is_some_and(TagHash::is_keyed);
        if mode != Mode::ReadOnly && recalc_pending && keyed && !bitmap_options.legacy_recalculate {
            return Err(keyed_recalculation());
        }
        if mode != Mode::ReadOnly && superblock.has(FLAG_JOURNAL_MAC) {
            return Err(Error::Unsupported(
                "writing a device whose journal carries a MAC (--journal-integrity)".into(),
            ));
        }
        let geometry = Geometry::new(&superblock, start / 512, size / 512, buffer_sectors)?;
        // With `dirty_bitmap` the journal area holds the bitmap.
        let replay = if superblock.has(FLAG_DIRTY_BITMAP) {
            Replay::default()
        } else {
            journal::read(&geometry, &mut |buf, at| {
                file.read_exact_at(buf, at)
                    .map_err(|e| io_err("the journal", at, e))
            })?
        };
        let read_only = mode == Mode::ReadOnly;
        // Unkeyed tags not yet recalculated are read unchecked, as the
        // kernel does; keyed ones are always checked (the superblock that
        // says "not yet recalculated" is not authenticated).
        let recalc_from =
            (read_only && recalc_pending && !keyed).then_some(superblock.recalc_sector);
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
            bitmap: None,
            dirty_regions: None,
            recalc_from,
            closed: AtomicBool::new(false),
        };
        if read_only {
            if d.superblock.has(FLAG_DIRTY_BITMAP) && !keyed {
                let lbpb = d.superblock.log2_blocks_per_bitmap_bit;
                // The bitmap lives in the journal area: a region size too
                // small for it to fit there (or too large to shift by) is
                // not one the kernel writes.
                let least = bitmap::log2_blocks_per_bit(&d.geometry, &d.superblock, Some(0));
                let most = 63 - u32::from(d.superblock.log2_sectors_per_block);
                if lbpb < least || u32::from(lbpb) > most {
                    return Err(Error::BadSuperblock(format!(
                        "log2_blocks_per_bitmap_bit {lbpb}: the bitmap of a dirty device needs {least} to {most}"
                    )));
                }
                d.dirty_regions = Some(d.read_bitmap(lbpb)?);
            }
        } else {
            d.activate(bitmap_options)?;
        }
        Ok(d)
    }

    /// What the kernel's resume does before serving I/O: a device left
    /// with a dirty bitmap has its dirty regions (or, switching to another
    /// mode or region size, everything) recalculated; a device left
    /// cleanly has its journal replayed; bitmap mode then sets
    /// `dirty_bitmap` and writes an empty bitmap.
    fn activate(&mut self, options: BitmapOptions) -> Result<(), Error> {
        let sb = self.superblock.clone();
        let lbpb = bitmap::log2_blocks_per_bit(&self.geometry, &sb, options.sectors_per_bit);
        let mut dirty: Option<Bitmap> = None;
        if sb.has(FLAG_DIRTY_BITMAP) {
            let same = sb.log2_blocks_per_bitmap_bit == lbpb;
            let keyed = self.hash.as_ref().is_some_and(TagHash::is_keyed);
            if keyed && !options.legacy_recalculate && (!same || self.read_bitmap(lbpb)?.any()) {
                return Err(keyed_recalculation());
            }
            if self.mode == Mode::Bitmap {
                let map = if same {
                    self.read_bitmap(lbpb)?
                } else {
                    // Another region size: every region is dirty.
                    self.superblock.log2_blocks_per_bitmap_bit = lbpb;
                    let mut map = self.empty_bitmap(lbpb);
                    map.set_all();
                    self.write_bitmap(&map, 0..map.bytes().len() / BITMAP_BLOCK_BYTES)?;
                    self.sync()?;
                    map
                };
                if map.any() {
                    self.superblock.flags |= FLAG_RECALCULATING;
                    self.superblock.recalc_sector = 0;
                }
                dirty = Some(map);
            } else {
                // Leaving bitmap mode: anything dirty (or a bitmap of
                // another region size) means every tag is recalculated.
                if !same || self.read_bitmap(lbpb)?.any() {
                    self.superblock.flags |= FLAG_RECALCULATING;
                    self.superblock.recalc_sector = 0;
                }
                crate::format::write_journal(&self.file, &self.geometry)?;
                self.sync()?;
                self.superblock.flags &= !FLAG_DIRTY_BITMAP;
            }
            self.write_superblock()?;
            self.sync()?;
        } else {
            self.replay_in_place()?;
            if self.mode == Mode::Bitmap {
                self.superblock.flags |= FLAG_DIRTY_BITMAP;
                self.superblock.log2_blocks_per_bitmap_bit = lbpb;
                self.write_superblock()?;
                self.sync()?;
                let mut map = self.empty_bitmap(lbpb);
                let sb = &self.superblock;
                if sb.has(FLAG_RECALCULATING) && sb.recalc_sector < sb.provided_data_sectors {
                    map.set(
                        sb.recalc_sector,
                        sb.provided_data_sectors - sb.recalc_sector,
                    );
                }
                self.write_bitmap(&map, 0..map.bytes().len() / BITMAP_BLOCK_BYTES)?;
                self.sync()?;
                dirty = Some(map);
            }
        }
        let sb = &self.superblock;
        if sb.has(FLAG_RECALCULATING) {
            if sb.recalc_sector < sb.provided_data_sectors {
                let only = if self.mode == Mode::Bitmap {
                    dirty.clone()
                } else {
                    None
                };
                self.recalculate(only.as_ref())?;
            } else if sb.recalc_sector > sb.provided_data_sectors {
                self.superblock.recalc_sector = self.superblock.provided_data_sectors;
                self.write_superblock()?;
                self.sync()?;
            }
        }
        if self.mode == Mode::Bitmap {
            let map = dirty.unwrap_or_else(|| self.empty_bitmap(lbpb));
            let mut st = BitmapState {
                map,
                dirtied_at: None,
                options,
            };
            if st.map.any() {
                // What the kernel's flush work does once recalculation ends.
                self.clear_bitmap(&mut st)?;
            }
            self.bitmap = Some(Mutex::new(st));
        }
        Ok(())
    }

    fn empty_bitmap(&self, lbpb: u8) -> Bitmap {
        Bitmap::new(&self.geometry, self.superblock.log2_sectors_per_block, lbpb)
    }

    /// The on-disk bitmap for 2^`lbpb` blocks per bit; all dirty if it
    /// does not fit in the journal area.
    fn read_bitmap(&self, lbpb: u8) -> Result<Bitmap, Error> {
        let mut map = self.empty_bitmap(lbpb);
        let g = &self.geometry;
        let area = u64::from(g.journal_sections) * u64::from(g.journal_section_sectors) * 512;
        if map.bytes().len() as u64 > area {
            map.set_all();
            return Ok(map);
        }
        let at = g.journal_offset(0, 0);
        self.file
            .read_exact_at(map.bytes_mut(), at)
            .map_err(|e| io_err("the bitmap", at, e))?;
        Ok(map)
    }

    /// Writes bitmap blocks `blocks` of `map` (not made durable).
    fn write_bitmap(&self, map: &Bitmap, blocks: std::ops::Range<usize>) -> Result<(), Error> {
        let bytes =
            &map.bytes()[blocks.start * BITMAP_BLOCK_BYTES..blocks.end * BITMAP_BLOCK_BYTES];
        let at = self.geometry.journal_offset(0, 0) + (blocks.start * BITMAP_BLOCK_BYTES) as u64;
        self.file
            .write_all_at(bytes, at)
            .map_err(|e| io_err("the bitmap (writing)", at, e))
    }

    /// Writes `sb` with the version the kernel sets for its flags
    /// (`sb_set_version`); not made durable.
    fn write_sb(&self, sb: &Superblock) -> Result<(), Error> {
        let mut sb = sb.clone();
        sb.version = if sb.has(FLAG_FIXED_HMAC) {
            5
        } else if sb.has(FLAG_FIXED_PADDING) {
            4
        } else if self.mode == Mode::Bitmap || sb.has(FLAG_DIRTY_BITMAP) {
            3
        } else if sb.has(FLAG_RECALCULATING) {
            2
        } else {
            1
        };
        let at = self.geometry.start * 512;
        self.file
            .write_all_at(&crate::format::encode_superblock(&sb), at)
            .map_err(|e| io_err("the superblock (writing)", at, e))
    }

    fn write_superblock(&mut self) -> Result<(), Error> {
        self.write_sb(&self.superblock)?;
        self.superblock = crate::probe::superblock_at(&self.file, self.geometry.start * 512)?;
        Ok(())
    }

    /// Recomputes the tags from `recalc_sector` to the end, as the
    /// kernel's recalculation does: in steps of at most 32768 sectors
    /// inside one area; with `only`, steps without a dirty region are
    /// skipped and the others trimmed to their first and last dirty block.
    /// The superblock records the position every 16 steps and at the end
    /// (`recalculating` stays set, with `recalc_sector` at the end, as the
    /// kernel leaves it).
    fn recalculate(&mut self, only: Option<&Bitmap>) -> Result<(), Error> {
        let hash = self.hash()?.clone();
        let g = self.geometry.clone();
        let spb = u64::from(g.sectors_per_block);
        let ts = g.tag_size as usize;
        let area = 1u64 << g.log2_interleave;
        let salt = self.salt().copied();
        let (mut data, mut tags) = (Vec::new(), Vec::new());
        let mut steps = 0;
        while self.superblock.recalc_sector < g.provided_data_sectors {
            let pos = self.superblock.recalc_sector;
            let n = RECALC_SECTORS
                .min(g.provided_data_sectors - pos)
                .min(area - pos % area);
            let (mut first, mut count) = (pos, n);
            let mut skip = false;
            if let Some(map) = only {
                if map.any_set(pos, n) {
                    while !map.any_set(first, spb) {
                        first += spb;
                        count -= spb;
                    }
                    while !map.any_set(first + count - spb, spb) {
                        count -= spb;
                    }
                } else {
                    skip = true;
                }
            }
            if !skip {
                steps += 1;
                if steps == RECALC_WRITE_SUPER {
                    self.sync()?;
                    self.write_superblock()?;
                    steps = 0;
                }
                data.resize((count * 512) as usize, 0);
                tags.resize((count / spb) as usize * ts, 0);
                let at = g.data_sector(first) * 512;
                self.file
                    .read_exact_at(&mut data, at)
                    .map_err(|e| io_err("data", at, e))?;
                for (b, (block, tag)) in data
                    .chunks_exact(spb as usize * 512)
                    .zip(tags.chunks_exact_mut(ts))
                    .enumerate()
                {
                    hash.tag(salt.as_ref(), first + b as u64 * spb, block, tag);
                }
                let at = g.tag_offset(first);
                self.file
                    .write_all_at(&tags, at)
                    .map_err(|e| io_err("tags (writing)", at, e))?;
            }
            self.superblock.recalc_sector = pos + n;
        }
        self.sync()?;
        self.write_superblock()?;
        self.sync()
    }

    /// The kernel's bitmap flush: makes every write durable, then clears
    /// the bits (below `recalc_sector`, rounded down to a region, while
    /// `recalculating` is set) and writes the bitmap.
    fn clear_bitmap(&self, st: &mut BitmapState) -> Result<(), Error> {
        self.sync()?;
        let sb = &self.superblock;
        let mut limit = sb.provided_data_sectors;
        if sb.has(FLAG_RECALCULATING) {
            let shift = st.map.shift();
            limit = sb.recalc_sector >> shift << shift;
        }
        st.map.clear(0, limit);
        self.write_bitmap(&st.map, 0..st.map.bytes().len() / BITMAP_BLOCK_BYTES)?;
        self.sync()?;
        st.dirtied_at = None;
        Ok(())
    }

    /// Sets the bits of the regions `sector .. sector + n` touches and
    /// makes them durable, unless already set (bitmap mode only).
    fn mark_dirty(&self, sector: u64, n: u64) -> Result<(), Error> {
        let Some(state) = &self.bitmap else {
            return Ok(());
        };
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        if st.map.all_set(sector, n) {
            return Ok(());
        }
        let blocks = st.map.set(sector, n);
        self.write_bitmap(&st.map, blocks)?;
        self.sync()?;
        st.dirtied_at.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Whether blocks `sector .. sector + n` are read unchecked (read-only
    /// opens of a device with dirty regions or an unfinished
    /// recalculation, as the kernel skips their check until recalculated).
    fn unchecked(&self, sector: u64, n: u64) -> bool {
        self.recalc_from.is_some_and(|r| sector + n > r)
            || self
                .dirty_regions
                .as_ref()
                .is_some_and(|m| m.any_set(sector, n))
    }

    /// Closes the device as the kernel's suspend does: every write made
    /// durable; in bitmap mode, the journal area rewritten as an empty
    /// journal and `dirty_bitmap` cleared, so the device opens in any mode
    /// without recalculation. Later writes are refused.
    pub fn close(&self) -> Result<(), Error> {
        if self.mode == Mode::ReadOnly || self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let _w = self.io.write().unwrap_or_else(|p| p.into_inner());
        self.sync()?;
        if self.mode == Mode::Bitmap {
            crate::format::write_journal(&self.file, &self.geometry)?;
            self.sync()?;
            let mut sb = self.superblock.clone();
            sb.flags &= !FLAG_DIRTY_BITMAP;
            self.write_sb(&sb)?;
            self.sync()?;
        }
        Ok(())
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
            if self.unchecked(s, spb) {
                continue;
            }
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
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Unsupported("writing a closed device".into()));
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
        if self.mode == Mode::Bitmap {
            self.mark_dirty(sector, n as u64 * spb)?;
            if self.crash_after_commit {
                return Ok(());
            }
        }
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
                if self.unchecked(s, spb) {
                    report.unchecked += 1;
                    report.stale += u64::from(want != tag);
                } else if want != tag {
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

    /// Makes every completed write durable; in bitmap mode, then clears
    /// the dirty bits once the flush interval has passed since the first
    /// was set.
    pub fn flush(&self) -> Result<(), Error> {
        if self.mode == Mode::ReadOnly {
            return Ok(());
        }
        let Some(state) = &self.bitmap else {
            return self.sync();
        };
        let _w = self.io.write().unwrap_or_else(|p| p.into_inner());
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        match st.dirtied_at {
            Some(t) if t.elapsed() >= st.options.flush_interval => self.clear_bitmap(&mut st),
            _ => self.sync(),
        }
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

#[cfg(test)]
mod bitmap_tests {
    use super::*;
    use crate::{format, FormatOptions, DEFAULT_BUFFER_SECTORS};
    use std::time::Duration;

    const SPB: u64 = 1024; // sectors per bit in these tests: 512 KiB regions

    fn formatted(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ck-intbm-{}-{name}", std::process::id()));
        File::create(&p).unwrap().set_len(8 << 20).unwrap();
        let o = FormatOptions {
            hash: TagHash::Crc32c,
            tag_size: None,
            sector_size: 512,
            journal_bytes: Some(64 << 10),
            interleave_sectors: 0,
            wipe: true,
        };
        format(&p, &o, [5; 16], &mut |_, _| {}).unwrap();
        p
    }

    fn opts(interval: Duration) -> BitmapOptions {
        BitmapOptions {
            sectors_per_bit: Some(SPB),
            flush_interval: interval,
            legacy_recalculate: false,
        }
    }

    fn open(p: &Path, mode: Mode, o: BitmapOptions) -> Device {
        Device::open_with_bitmap(p, TagHash::Crc32c, mode, DEFAULT_BUFFER_SECTORS, o).unwrap()
    }

    fn raw(p: &Path, at: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        File::open(p).unwrap().read_exact_at(&mut b, at).unwrap();
        b
    }

    fn on_disk_bits(p: &Path) -> Vec<u8> {
        raw(p, SB_SECTORS_BYTES, 8)
    }

    const SB_SECTORS_BYTES: u64 = 8 * 512;

    fn sb(p: &Path) -> Superblock {
        crate::read_superblock(p).unwrap()
    }

    fn fill(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
            .collect()
    }

    fn verify(p: &Path) -> (Vec<u8>, VerifyReport) {
        let d = Device::open(p, TagHash::Crc32c, Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
        let mut out = Vec::new();
        let r = d.verify(Some(&mut out)).unwrap();
        (out, r)
    }

    /// The region's bit is durable before the data is written, and cleared
    /// by a flush once the interval has passed; close leaves an empty
    /// journal and no `dirty_bitmap`.
    #[test]
    fn dirty_bits_come_before_the_data_and_go_after_the_flush() {
        let p = formatted("order");
        let fresh_journal = raw(&p, SB_SECTORS_BYTES, 64 << 10);
        let mut d = open(&p, Mode::Bitmap, opts(Duration::ZERO));
        let s = sb(&p);
        assert!(s.has(FLAG_DIRTY_BITMAP));
        assert_eq!(s.log2_blocks_per_bitmap_bit, 10);
        assert_eq!(
            on_disk_bits(&p),
            vec![0; 8],
            "activation writes a clear bitmap"
        );
        // Regions 2 and 3 (sectors 2048..4095): a write straddling them,
        // stopped right after its bits were made durable.
        d.crash_after_commit();
        let at = 3000u64 * 512;
        let data = fill(200_000, 7);
        d.write_at(&data, at).unwrap();
        assert_eq!(on_disk_bits(&p)[0], 0b0000_1100);
        let in_place = raw(&p, d.geometry.data_sector(3000) * 512, 512);
        assert!(
            in_place.iter().all(|&b| b == 0),
            "data written before its bit"
        );
        d.crash_after_commit = false;
        d.write_at(&data, at).unwrap();
        assert_eq!(on_disk_bits(&p)[0], 0b0000_1100, "bits stay until a flush");
        d.flush().unwrap();
        assert_eq!(on_disk_bits(&p), vec![0; 8], "the flush clears them");
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, at).unwrap();
        assert!(back == data);
        // A long interval keeps the bits over a flush.
        drop(d);
        let d = open(&p, Mode::Bitmap, opts(Duration::from_secs(3600)));
        d.write_at(&[1; 512], 0).unwrap();
        d.flush().unwrap();
        assert_eq!(on_disk_bits(&p)[0], 1);
        d.close().unwrap();
        assert!(d.write_at(&[1; 512], 0).is_err(), "closed");
        let s = sb(&p);
        assert!(!s.has(FLAG_DIRTY_BITMAP));
        assert_eq!(s.version, 5);
        assert!(!s.has(FLAG_RECALCULATING), "nothing was recalculated");
        assert!(raw(&p, SB_SECTORS_BYTES, 64 << 10) == fresh_journal);
        let (out, r) = verify(&p);
        assert!(r.mismatches.is_empty() && r.unchecked == 0);
        assert!(out[at as usize..at as usize + data.len()] == data[..]);
        std::fs::remove_file(&p).unwrap();
    }

    /// A dirty device whose superblock claims a region size its bitmap
    /// cannot have is refused read-only (no shift overflow, no bitmap
    /// larger than the journal area).
    #[test]
    fn an_impossible_region_size_is_refused() {
        let p = formatted("bad-lbpb");
        let mut d = open(&p, Mode::Bitmap, opts(Duration::from_secs(3600)));
        d.crash_after_commit();
        d.write_at(&fill(4096, 3), 0).unwrap();
        drop(d);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        for bad in [200u8, 64] {
            f.write_all_at(&[bad], 29).unwrap();
            let r = Device::open(&p, TagHash::Crc32c, Mode::ReadOnly, DEFAULT_BUFFER_SECTORS);
            assert!(
                matches!(&r, Err(Error::BadSuperblock(m)) if m.contains("log2_blocks_per_bitmap_bit")),
                "{bad}: {:?}",
                r.err()
            );
        }
        std::fs::remove_file(&p).unwrap();
    }

    /// A crash leaves dirty regions whose data changed without its tag:
    /// read-only they read unchecked; the next bitmap-mode open recalculates
    /// exactly those regions (a damaged block elsewhere still fails).
    #[test]
    fn a_crash_with_dirty_regions_is_recalculated_on_open() {
        let p = formatted("crash");
        let mut d = open(&p, Mode::Bitmap, opts(Duration::from_secs(3600)));
        let a = fill(4096, 3);
        d.write_at(&a, 0).unwrap();
        d.crash_after_commit();
        d.write_at(&fill(8192, 9), 5000 * 512).unwrap();
        let g = d.geometry.clone();
        drop(d);
        // The torn write: new data in sector 5001, its tag never written.
        let torn = fill(512, 11);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&torn, g.data_sector(5001) * 512).unwrap();
        // Damage in a clean region (sector 9000, region 8).
        f.write_all_at(&[0x5a], g.data_sector(9000) * 512 + 7)
            .unwrap();
        assert_eq!(on_disk_bits(&p)[0], 0b0001_0001);
        let (out, r) = verify(&p);
        assert_eq!(r.mismatches, vec![9000]);
        assert_eq!(r.unchecked, 2 * SPB);
        assert_eq!(r.stale, 1);
        assert!(out[5001 * 512..5002 * 512] == torn[..]);
        let d = open(&p, Mode::Bitmap, opts(Duration::from_secs(3600)));
        let s = sb(&p);
        assert!(s.has(FLAG_RECALCULATING) && s.has(FLAG_DIRTY_BITMAP));
        assert_eq!(s.recalc_sector, s.provided_data_sectors);
        assert_eq!(
            on_disk_bits(&p),
            vec![0; 8],
            "recalculated regions are clean"
        );
        let mut b = vec![0u8; 512];
        d.read_at(&mut b, 5001 * 512).unwrap();
        assert_eq!(b, torn);
        d.read_at(&mut b[..], 0).unwrap();
        assert_eq!(b, a[..512]);
        assert!(matches!(
            d.read_at(&mut b, 9000 * 512),
            Err(Error::TagMismatch { sector: 9000 })
        ));
        d.close().unwrap();
        let (_, r) = verify(&p);
        assert_eq!((r.mismatches, r.unchecked), (vec![9000], 0));
        std::fs::remove_file(&p).unwrap();
    }

    /// Leaving bitmap mode with dirty bits (journal mode, or another region
    /// size) recalculates every tag; entering it replays the journal first.
    #[test]
    fn switching_modes_does_what_the_kernel_does() {
        for (mode, spb) in [
            (Mode::Journal, SPB),
            (Mode::Direct, SPB),
            (Mode::Bitmap, 256),
        ] {
            let p = formatted(&format!("switch-{mode:?}"));
            let mut d = open(&p, Mode::Bitmap, opts(Duration::from_secs(3600)));
            d.crash_after_commit();
            d.write_at(&fill(512, 1), 0).unwrap();
            let g = d.geometry.clone();
            drop(d);
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.write_all_at(&[0x5a], g.data_sector(9000) * 512 + 7)
                .unwrap();
            let o = BitmapOptions {
                sectors_per_bit: Some(spb),
                flush_interval: Duration::ZERO,
                legacy_recalculate: false,
            };
            let d = open(&p, mode, o);
            let s = sb(&p);
            assert!(s.has(FLAG_RECALCULATING), "{mode:?}");
            assert_eq!(s.recalc_sector, s.provided_data_sectors);
            assert_eq!(s.has(FLAG_DIRTY_BITMAP), mode == Mode::Bitmap);
            if mode == Mode::Bitmap {
                assert_eq!(s.log2_blocks_per_bitmap_bit, 8);
            }
            // Every tag was recalculated, the damaged block's too.
            let mut b = vec![0u8; 512];
            d.read_at(&mut b, 9000 * 512).unwrap();
            d.write_at(&fill(4096, 2), 4096).unwrap();
            d.close().unwrap();
            drop(d);
            let (out, r) = verify(&p);
            assert!(r.mismatches.is_empty() && r.unchecked == 0, "{mode:?}");
            assert!(out[4096..8192] == fill(4096, 2)[..]);
            std::fs::remove_file(&p).unwrap();
        }
        // A journal-mode write lost after its commit is replayed before
        // the bitmap takes the journal area.
        let p = formatted("replay");
        let mut d = open(&p, Mode::Journal, BitmapOptions::default());
        d.crash_after_commit();
        let w = fill(300_000, 4);
        d.write_at(&w, 1 << 20).unwrap();
        drop(d);
        let d = open(&p, Mode::Bitmap, opts(Duration::ZERO));
        let mut back = vec![0u8; w.len()];
        d.read_at(&mut back, 1 << 20).unwrap();
        assert!(back == w);
        assert!(!sb(&p).has(FLAG_RECALCULATING));
        drop(d);
        // Bitmap mode needs the device's own algorithm.
        assert!(matches!(
            Device::open_external(&p, 0, Mode::Bitmap, DEFAULT_BUFFER_SECTORS),
            Err(Error::Unsupported(_))
        ));
        std::fs::remove_file(&p).unwrap();
    }
}

#[cfg(test)]
mod keyed_recalculation_tests {
    use super::*;
    use crate::{format, FormatOptions, DEFAULT_BUFFER_SECTORS};
    use std::time::Duration;

    fn hmac() -> TagHash {
        TagHash::by_name("hmac-sha256", Some(zeroize::Zeroizing::new(vec![7u8; 32]))).unwrap()
    }

    /// A keyed device with one tampered block, and the superblock then
    /// patched by the same attacker: `flags` |= `set`, byte 29 and
    /// `recalc_sector` as given.
    fn tampered(name: &str, set: u32, lbpb: Option<u8>) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ck-intkey-{}-{name}", std::process::id()));
        File::create(&p).unwrap().set_len(8 << 20).unwrap();
        let o = FormatOptions {
            hash: hmac(),
            tag_size: None,
            sector_size: 512,
            journal_bytes: Some(64 << 10),
            interleave_sectors: 0,
            wipe: true,
        };
        format(&p, &o, [1; 16], &mut |_, _| {}).unwrap();
        let d = Device::open(&p, hmac(), Mode::Direct, DEFAULT_BUFFER_SECTORS).unwrap();
        let at = d.geometry.data_sector(100) * 512;
        drop(d);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        f.write_all_at(b"ATTACKER", at).unwrap();
        let mut flags = [0u8; 4];
        f.read_exact_at(&mut flags, 24).unwrap();
        let flags = u32::from_le_bytes(flags) | set;
        f.write_all_at(&flags.to_le_bytes(), 24).unwrap();
        if let Some(l) = lbpb {
            f.write_all_at(&[l], 29).unwrap();
        }
        f.write_all_at(&0u64.to_le_bytes(), 32).unwrap();
        if set & FLAG_DIRTY_BITMAP != 0 {
            // Every region dirty.
            f.write_all_at(&[0xff; 512], 8 * 512).unwrap();
        }
        p
    }

    fn image(p: &Path) -> Vec<u8> {
        std::fs::read(p).unwrap()
    }

    /// The superblock is not authenticated: marking regions as "not yet
    /// recalculated" or "dirty" must not make a keyed device serve or
    /// re-tag tampered data. Read-only opens check every tag; read-write
    /// opens that would recompute tags are refused (the image untouched)
    /// unless asked for with `legacy_recalculate`.
    #[test]
    fn a_forged_superblock_never_launders_tampered_data() {
        for (name, set, lbpb) in [
            ("recalc", FLAG_RECALCULATING, None),
            ("dirty", FLAG_DIRTY_BITMAP, None),
            ("dirty-other-size", FLAG_DIRTY_BITMAP, Some(3)),
        ] {
            let p = tampered(name, set, lbpb);
            let d = Device::open(&p, hmac(), Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
            let r = d.verify(None).unwrap();
            assert_eq!(
                r.mismatches,
                vec![100],
                "{name}: read-only must check every tag"
            );
            drop(d);
            let before = image(&p);
            for mode in [Mode::Journal, Mode::Direct, Mode::Bitmap] {
                let r = Device::open_with_bitmap(
                    &p,
                    hmac(),
                    mode,
                    DEFAULT_BUFFER_SECTORS,
                    BitmapOptions::default(),
                );
                assert!(
                    matches!(&r, Err(Error::Unsupported(m)) if m.contains("legacy-recalc")),
                    "{name} {mode:?}: {:?}",
                    r.err()
                );
                assert!(image(&p) == before, "{name} {mode:?}: a refused open wrote");
            }
            // Asked for explicitly, the kernel's legacy behaviour.
            let o = BitmapOptions {
                flush_interval: Duration::ZERO,
                legacy_recalculate: true,
                ..BitmapOptions::default()
            };
            drop(
                Device::open_with_bitmap(&p, hmac(), Mode::Journal, DEFAULT_BUFFER_SECTORS, o)
                    .unwrap(),
            );
            std::fs::remove_file(&p).unwrap();
        }
    }
}
