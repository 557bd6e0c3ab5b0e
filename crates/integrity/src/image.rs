//! [`Image`]: a standalone dm-integrity device (or image file) opened
//! read-only, every block checked against its tag, the journal's
//! committed entries laid over the data as the kernel would replay them.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::journal::{self, Replay};
use crate::superblock::{
    FLAG_DIRTY_BITMAP, FLAG_FIXED_HMAC, FLAG_INLINE, FLAG_RECALCULATING, SB_SECTORS,
};
use crate::{Error, Geometry, Superblock, TagHash};

/// Blocks read and checked per request.
const CHUNK_BLOCKS: u64 = 256;

/// An opened integrity image.
#[derive(Debug)]
pub struct Image {
    file: File,
    superblock: Superblock,
    geometry: Geometry,
    hash: TagHash,
    replay: Replay,
}

/// The outcome of [`Image::verify`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Blocks checked.
    pub blocks: u64,
    /// Blocks whose newest copy was in the journal.
    pub from_journal: u64,
    /// First data sector of each block whose tag did not match.
    pub mismatches: Vec<u64>,
}

fn read_exact_at(file: &File, buf: &mut [u8], at: u64, what: &str) -> Result<(), Error> {
    file.read_exact_at(buf, at).map_err(|source| Error::Io {
        what: format!("{what} at byte {at}"),
        source,
    })
}

/// Reads the superblock of the device at `path` (for `dump`).
pub fn read_superblock(path: &Path) -> Result<Superblock, Error> {
    let file = File::open(path).map_err(|source| Error::Io {
        what: path.display().to_string(),
        source,
    })?;
    let mut b = [0u8; 512];
    read_exact_at(&file, &mut b, 0, "the superblock")?;
    Superblock::parse(&b)
}

impl Image {
    /// Opens the image at `path` with tag algorithm `hash`, reading the
    /// metadata in `buffer_sectors` units (the writer's `--buffer-sectors`,
    /// 128 by default). Reads and checks the superblock and the journal.
    pub fn open(path: &Path, hash: TagHash, buffer_sectors: u32) -> Result<Image, Error> {
        let file = File::open(path).map_err(|source| Error::Io {
            what: path.display().to_string(),
            source,
        })?;
        let size = device_size(&file, path)?;
        let mut b = vec![0u8; (SB_SECTORS * 512) as usize];
        read_exact_at(&file, &mut b, 0, "the superblock")?;
        let superblock = Superblock::parse(&b)?;
        if superblock.has(FLAG_INLINE) {
            return Err(Error::Unsupported(
                "inline mode (tags in the device's protection information)".into(),
            ));
        }
        if superblock.has(FLAG_DIRTY_BITMAP) {
            return Err(Error::Unsupported(
                "bitmap mode (the journal area holds a bitmap of blocks whose tags may be stale)"
                    .into(),
            ));
        }
        if superblock.has(FLAG_RECALCULATING) {
            return Err(Error::Unsupported(format!(
                "tags still being recalculated (from sector {}): activate it in the kernel \
                 until recalculation ends",
                superblock.recalc_sector
            )));
        }
        let geometry = Geometry::new(&superblock, 0, size / 512, buffer_sectors)?;
        let replay = journal::read(&geometry, &mut |buf, at| {
            read_exact_at(&file, buf, at, "the journal")
        })?;
        Ok(Image {
            file,
            superblock,
            geometry,
            hash,
            replay,
        })
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The layout.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Committed journal entries not (necessarily) in place yet.
    pub fn journal_entries(&self) -> usize {
        self.replay.entries.len()
    }

    fn salt(&self) -> Option<&[u8; 16]> {
        self.superblock
            .has(FLAG_FIXED_HMAC)
            .then_some(&self.superblock.salt)
    }

    /// Reads and checks every block, in order, writing the data to `out`
    /// when given. A mismatch is recorded and reading goes on (the kernel
    /// fails that block's read with `EILSEQ`; `out` gets zeros there).
    pub fn verify(&self, mut out: Option<&mut dyn Write>) -> Result<VerifyReport, Error> {
        let g = &self.geometry;
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
            read_exact_at(&self.file, d, g.data_sector(sector) * 512, "data")?;
            read_exact_at(&self.file, t, g.tag_offset(sector), "tags")?;
            for b in 0..blocks as usize {
                let s = sector + b as u64 * spb;
                let block = &mut d[b * block_bytes..(b + 1) * block_bytes];
                let mut tag = &t[b * tag_size..(b + 1) * tag_size];
                if let Some(e) = self.replay.entries.get(&s) {
                    block.copy_from_slice(&e.data);
                    tag = &e.tag;
                    report.from_journal += 1;
                }
                self.hash.tag(self.salt(), s, block, &mut want);
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
}

/// The size in bytes of an image file or a block device.
pub(crate) fn device_size(file: &File, path: &Path) -> Result<u64, Error> {
    let m = file.metadata().map_err(|source| Error::Io {
        what: path.display().to_string(),
        source,
    })?;
    if m.is_file() {
        return Ok(m.len());
    }
    block_device_size(file).ok_or_else(|| {
        Error::Unsupported(format!(
            "{}: neither a regular file nor a block device",
            path.display()
        ))
    })
}

/// The size of a block device, through `BLKGETSIZE64`.
fn block_device_size(file: &File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which
    // outlives the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) };
    (r == 0).then_some(size)
}
