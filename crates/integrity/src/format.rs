//! Formatting a standalone integrity device as `integritysetup format`
//! (through the kernel) leaves it: the superblock the kernel would write,
//! a journal whose every sector carries a valid commit ID and whose every
//! entry is unused, and — unless `wipe` is off — every block zeroed with
//! its tag, so reads succeed from the start.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::geometry::{JOURNAL_BLOCK_SECTORS, JOURNAL_SECTOR_DATA};
use crate::journal::commit_id;
use crate::superblock::{FLAG_FIXED_HMAC, SB_SECTORS};
use crate::{Error, Geometry, Superblock, TagHash, DEFAULT_BUFFER_SECTORS};

/// What to format.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// The tag algorithm.
    pub hash: TagHash,
    /// Tag bytes per block; `None` is the digest size.
    pub tag_size: Option<u16>,
    /// Block size in bytes: 512, 1024, 2048 or 4096.
    pub sector_size: u32,
    /// Journal size in bytes; `None` is the kernel's default.
    pub journal_bytes: Option<u64>,
    /// Data sectors per area; 0 is 32768.
    pub interleave_sectors: u32,
    /// Zero every block and write its tag (integritysetup's default);
    /// off, the tags stay unset and a block reads only once written.
    pub wipe: bool,
}

/// Bytes written per request while wiping.
const WIPE_CHUNK_BLOCKS: u64 = 2048;

fn write_at(file: &File, buf: &[u8], at: u64, what: &str) -> Result<(), Error> {
    file.write_all_at(buf, at).map_err(|source| Error::Io {
        what: format!("{what} at byte {at} (writing)"),
        source,
    })
}

/// The superblock's 8 sectors as the kernel writes them.
pub fn encode_superblock(sb: &Superblock) -> Vec<u8> {
    let mut b = vec![0u8; (SB_SECTORS * 512) as usize];
    b[..8].copy_from_slice(b"integrt\0");
    b[8] = sb.version;
    b[9] = sb.log2_interleave_sectors;
    b[10..12].copy_from_slice(&sb.tag_size.to_le_bytes());
    b[12..16].copy_from_slice(&sb.journal_sections.to_le_bytes());
    b[16..24].copy_from_slice(&sb.provided_data_sectors.to_le_bytes());
    b[24..28].copy_from_slice(&sb.flags.to_le_bytes());
    b[28] = sb.log2_sectors_per_block;
    b[29] = sb.log2_blocks_per_bitmap_bit;
    b[32..40].copy_from_slice(&sb.recalc_sector.to_le_bytes());
    b[48..64].copy_from_slice(&sb.salt);
    b
}

/// Formats the device or image at `path` (its whole size); `progress`
/// hears (blocks done, blocks in all) while wiping. Returns the
/// superblock written.
pub fn format(
    path: &Path,
    o: &FormatOptions,
    salt: [u8; 16],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Superblock, Error> {
    let tag_size = match o.tag_size {
        Some(0) | None => o.hash.digest_size() as u16,
        Some(n) => n,
    };
    let hash = o.hash.clone();
    let mut fill = |sb: &Superblock, sector: u64, data: &mut [u8], tags: &mut [u8]| {
        let salt = sb.has(FLAG_FIXED_HMAC).then_some(&sb.salt);
        let spb = u64::from(sb.sectors_per_block());
        let blocks = data.chunks(spb as usize * 512);
        for (b, (block, tag)) in blocks.zip(tags.chunks_mut(sb.tag_size.into())).enumerate() {
            hash.tag(salt, sector + b as u64 * spb, block, tag);
        }
        Ok(())
    };
    let wipe: Option<&mut Fill> = if o.wipe { Some(&mut fill) } else { None };
    format_at(path, 0, o, tag_size, true, salt, wipe, progress)
}

/// Fills a run of zeroed blocks from data sector `sector` for the wipe:
/// may rewrite the data (encrypt it) and must write one tag per block.
pub type Fill<'a> = dyn FnMut(&Superblock, u64, &mut [u8], &mut [u8]) -> Result<(), Error> + 'a;

/// Formats an integrity device whose superblock lies at byte `start` of
/// `path` and whose `tag_size`-byte tags the layer above computes, as
/// cryptsetup does for a LUKS2 volume with authenticated encryption (no
/// internal hash; `o.hash` and `o.tag_size` are not used). With `wipe`,
/// every block is zeroed and handed to it to encrypt and tag, as
/// cryptsetup's wipe through dm-crypt does; without, tags stay unset and a
/// block reads only once written.
#[allow(clippy::too_many_arguments)]
pub fn format_external(
    path: &Path,
    start: u64,
    o: &FormatOptions,
    tag_size: u16,
    salt: [u8; 16],
    wipe: Option<&mut Fill>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Superblock, Error> {
    format_at(path, start, o, tag_size, false, salt, wipe, progress)
}

#[allow(clippy::too_many_arguments)]
fn format_at(
    path: &Path,
    start: u64,
    o: &FormatOptions,
    tag_size: u16,
    keyed_or_hashed: bool,
    salt: [u8; 16],
    wipe_with: Option<&mut Fill>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Superblock, Error> {
    let (file, size) = crate::probe::open_device(path, true)?;
    if !start.is_multiple_of(512) || start >= size {
        return Err(Error::BadSuperblock(format!(
            "offset {start} is not a 512-byte sector inside the {size}-byte device"
        )));
    }
    if tag_size == 0 || u32::from(tag_size) > crate::superblock::MAX_TAG_SIZE {
        return Err(Error::BadHash(format!(
            "tag size {tag_size} (1 to {} bytes)",
            crate::superblock::MAX_TAG_SIZE
        )));
    }
    if !o.sector_size.is_power_of_two() || !(512..=4096).contains(&o.sector_size) {
        return Err(Error::BadSuperblock(format!(
            "sector size {} (512, 1024, 2048 or 4096)",
            o.sector_size
        )));
    }
    let journal_sectors = match o.journal_bytes {
        // The kernel sizes its default journal from the whole underlying
        // device (1/128 of it, at most 64 MiB), not from the part after
        // `start` that the target covers.
        None => ((size / 512) >> 7).min(131_072) as u32,
        Some(b) => (b / 512).clamp(1, u64::from(u32::MAX)) as u32,
    };
    let mut sb = Geometry::plan(
        (size - start) / 512,
        tag_size,
        o.sector_size / 512,
        journal_sectors,
        o.interleave_sectors,
        false,
        keyed_or_hashed,
    )?;
    sb.salt = salt;
    let g = Geometry::new(&sb, start / 512, size / 512, DEFAULT_BUFFER_SECTORS)?;
    write_journal(&file, &g)?;
    if let Some(fill) = wipe_with {
        wipe(&file, &g, &sb, fill, progress)?;
    }
    // The superblock last: a device interrupted before this is not one.
    write_at(&file, &encode_superblock(&sb), start, "the superblock")?;
    file.sync_all().map_err(|source| Error::Io {
        what: "the device (flushing)".into(),
        source,
    })?;
    Ok(sb)
}

/// Every journal sector with commit ID sequence 0 and every entry unused:
/// a journal the kernel finds empty.
pub(crate) fn write_journal(file: &File, g: &Geometry) -> Result<(), Error> {
    let mut buf = vec![0u8; g.journal_section_sectors as usize * 512];
    for i in 0..g.journal_sections {
        buf.fill(0);
        for n in 0..g.journal_section_entries {
            let at = (n % JOURNAL_BLOCK_SECTORS) as usize * 512
                + ((n / JOURNAL_BLOCK_SECTORS) * g.journal_entry_size) as usize;
            buf[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        for j in 0..g.journal_section_sectors {
            let at = j as usize * 512 + JOURNAL_SECTOR_DATA as usize;
            buf[at..at + 8].copy_from_slice(&commit_id(i, j, 0).to_le_bytes());
        }
        write_at(file, &buf, g.journal_offset(i, 0), "the journal")?;
    }
    Ok(())
}

/// Zeros every block, lets `fill` encrypt and tag it, and writes it,
/// area by area.
fn wipe(
    file: &File,
    g: &Geometry,
    sb: &Superblock,
    fill: &mut Fill,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), Error> {
    let spb = u64::from(g.sectors_per_block);
    let bs = spb as usize * 512;
    let total = g.provided_data_sectors / spb;
    let area = 1u64 << g.log2_interleave;
    let mut data = vec![0u8; WIPE_CHUNK_BLOCKS as usize * bs];
    let mut tags = vec![0u8; (WIPE_CHUNK_BLOCKS * u64::from(g.tag_size)) as usize];
    let ts = g.tag_size as usize;
    let mut sector = 0;
    while sector < g.provided_data_sectors {
        let end = ((sector / area + 1) * area).min(g.provided_data_sectors);
        let n = ((end - sector) / spb).min(WIPE_CHUNK_BLOCKS) as usize;
        let d = &mut data[..n * bs];
        d.fill(0);
        fill(sb, sector, d, &mut tags[..n * ts])?;
        write_at(file, &tags[..n * ts], g.tag_offset(sector), "tags")?;
        write_at(file, d, g.data_sector(sector) * 512, "data")?;
        sector += n as u64 * spb;
        progress(sector / spb, total);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Mode};

    fn temp(name: &str, bytes: u64) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("ck-integrity-{}-{name}", std::process::id()));
        let f = File::create(&p).unwrap();
        f.set_len(bytes).unwrap();
        p
    }

    fn opts(hash: TagHash, sector_size: u32) -> FormatOptions {
        FormatOptions {
            hash,
            tag_size: None,
            sector_size,
            journal_bytes: None,
            interleave_sectors: 0,
            wipe: true,
        }
    }

    #[test]
    fn a_formatted_image_verifies_and_a_changed_byte_is_caught() {
        for (name, hash, ss) in [
            ("crc", TagHash::Crc32c, 512),
            ("sha", TagHash::Sha256, 4096),
        ] {
            let p = temp(name, 8 << 20);
            let sb = format(&p, &opts(hash.clone(), ss), [7; 16], &mut |_, _| {}).unwrap();
            let raw = std::fs::read(&p).unwrap();
            assert_eq!(Superblock::parse(&raw[..512]).unwrap(), sb);
            let img =
                Device::open(&p, hash.clone(), Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
            let mut out = Vec::new();
            let r = img.verify(Some(&mut out)).unwrap();
            assert!(r.mismatches.is_empty(), "{name}: {:?}", &r.mismatches[..3]);
            assert_eq!(r.from_journal, 0);
            assert_eq!(out.len() as u64, sb.provided_data_sectors * 512);
            assert!(out.iter().all(|&b| b == 0));
            // One data byte of block 10 changed: exactly that block fails.
            let g = img.geometry().clone();
            let s = 10 * u64::from(g.sectors_per_block);
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.write_all_at(&[1], g.data_sector(s) * 512 + 3).unwrap();
            let img = Device::open(&p, hash, Mode::ReadOnly, DEFAULT_BUFFER_SECTORS).unwrap();
            assert_eq!(img.verify(None).unwrap().mismatches, vec![s]);
            std::fs::remove_file(&p).unwrap();
        }
    }

    #[test]
    fn a_device_too_small_is_refused_and_left_alone() {
        let p = temp("small", 8 * 512);
        let e = format(&p, &opts(TagHash::Crc32c, 512), [0; 16], &mut |_, _| {});
        assert!(e.is_err());
        assert!(std::fs::read(&p).unwrap().iter().all(|&b| b == 0));
        std::fs::remove_file(&p).unwrap();
    }
}
