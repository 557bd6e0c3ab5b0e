//! [`Geometry`]: where everything lies on a dm-integrity device without a
//! separate metadata device, computed as the kernel computes it
//! (`calculate_journal_section_size`, `calculate_device_limits`,
//! `get_data_sector`, `get_metadata_sector_and_offset`).
//!
//! Layout, in 512-byte sectors from the device's start offset: the
//! superblock (8), the journal (`journal_sections` sections of
//! `journal_section_sectors`), then for each *area* of 2^L data sectors a
//! run of tags (`metadata_run` sectors) followed by the area's data.

use crate::superblock::{Superblock, FLAG_FIXED_PADDING, FLAG_JOURNAL_MAC, SB_SECTORS};
use crate::Error;

/// The kernel's default `buffer_sectors` (the metadata I/O unit). It is
/// not recorded on disk; a reader must use the writer's value when areas
/// are not aligned to it (never with the default interleave).
pub const DEFAULT_BUFFER_SECTORS: u32 = 128;
/// Sectors of entries at the start of each journal section.
pub const JOURNAL_BLOCK_SECTORS: u32 = 8;
/// Bytes of a journal sector before its 8-byte commit ID.
pub const JOURNAL_SECTOR_DATA: u32 = 512 - 8;
/// Bytes of section MAC at the end of each entry sector.
pub const JOURNAL_MAC_PER_SECTOR: u32 = 8;
/// Padding of a tag run with `fix_padding` (4 KiB) and without (128 KiB).
const PADDING_FIXED: u64 = 8 << 9;
const PADDING_LEGACY: u64 = 512 << 8;

/// The computed layout of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Where the superblock is, in sectors from the device's start.
    pub start: u64,
    /// 512-byte sectors per block.
    pub sectors_per_block: u32,
    /// Tag bytes per block.
    pub tag_size: u32,
    /// log2 of the data sectors per area.
    pub log2_interleave: u32,
    /// Bytes of one journal entry.
    pub journal_entry_size: u32,
    /// Journal entries per entry sector.
    pub journal_entries_per_sector: u32,
    /// Journal entries per section.
    pub journal_section_entries: u32,
    /// Sectors per journal section.
    pub journal_section_sectors: u32,
    /// Journal sections.
    pub journal_sections: u32,
    /// Superblock and journal, in sectors.
    pub initial_sectors: u64,
    /// Sectors of one run of tags.
    pub metadata_run: u64,
    /// log2 of the metadata buffer, in sectors.
    pub log2_buffer_sectors: u32,
    /// Usable data sectors.
    pub provided_data_sectors: u64,
}

fn journal_sizes(tag_size: u32, log2_spb: u32, mac: bool) -> (u32, u32, u32, u32) {
    let spb = 1u32 << log2_spb;
    let entry = (8 + 8 * spb + tag_size).div_ceil(8) * 8;
    let space = JOURNAL_SECTOR_DATA - if mac { JOURNAL_MAC_PER_SECTOR } else { 0 };
    let per_sector = space / entry;
    let section_entries = per_sector * JOURNAL_BLOCK_SECTORS;
    let section_sectors = (section_entries << log2_spb) + JOURNAL_BLOCK_SECTORS;
    (entry, per_sector, section_entries, section_sectors)
}

impl Geometry {
    /// The layout of `sb` at sector `start` of a device of
    /// `device_sectors` sectors, read with `buffer_sectors` metadata
    /// buffers. Fails as the kernel's constructor fails when the journal
    /// or the provided data do not fit.
    pub fn new(
        sb: &Superblock,
        start: u64,
        device_sectors: u64,
        buffer_sectors: u32,
    ) -> Result<Geometry, Error> {
        let g = Self::limits(
            u32::from(sb.tag_size),
            u32::from(sb.log2_sectors_per_block),
            u32::from(sb.log2_interleave_sectors),
            sb.journal_sections,
            sb.has(FLAG_JOURNAL_MAC),
            sb.has(FLAG_FIXED_PADDING),
            start,
            device_sectors,
            sb.provided_data_sectors,
            buffer_sectors,
        )
        .ok_or_else(|| {
            Error::BadSuperblock(format!(
                "{} data sectors and {} journal sections do not fit in a device of {} sectors",
                sb.provided_data_sectors, sb.journal_sections, device_sectors
            ))
        })?;
        Ok(g)
    }

    /// The kernel's `calculate_device_limits` for `provided` data sectors:
    /// `None` where it answers `-EINVAL`.
    #[allow(clippy::too_many_arguments)]
    fn limits(
        tag_size: u32,
        log2_spb: u32,
        log2_interleave: u32,
        journal_sections: u32,
        journal_mac: bool,
        fixed_padding: bool,
        start: u64,
        device_sectors: u64,
        provided: u64,
        buffer_sectors: u32,
    ) -> Option<Geometry> {
        if provided == 0 || log2_interleave < log2_spb {
            return None;
        }
        let (entry, per_sector, section_entries, section_sectors) =
            journal_sizes(tag_size, log2_spb, journal_mac);
        if section_entries == 0 {
            return None;
        }
        let initial = SB_SECTORS + u64::from(section_sectors) * u64::from(journal_sections);
        if initial + 8 >= device_sectors || initial > u64::from(u32::MAX) {
            return None;
        }
        let padding = if fixed_padding {
            PADDING_FIXED
        } else {
            PADDING_LEGACY
        };
        let run_bytes = u64::from(tag_size) << (log2_interleave - log2_spb);
        let metadata_run = (run_bytes.div_ceil(padding) * padding) >> 9;
        let buffer = buffer_sectors.max(1);
        let log2_buffer = (31 - buffer.leading_zeros())
            .min(31 - 9)
            .min(metadata_run.trailing_zeros());
        let g = Geometry {
            start,
            sectors_per_block: 1 << log2_spb,
            tag_size,
            log2_interleave,
            journal_entry_size: entry,
            journal_entries_per_sector: per_sector,
            journal_section_entries: section_entries,
            journal_section_sectors: section_sectors,
            journal_sections,
            initial_sectors: initial,
            metadata_run,
            log2_buffer_sectors: log2_buffer,
            provided_data_sectors: provided,
        };
        let last = g.data_sector_checked(provided - 1)?;
        if last < start || last >= device_sectors {
            return None;
        }
        Some(g)
    }

    /// The superblock `integritysetup format` (through the kernel) writes
    /// on a device of `device_sectors` sectors: `journal_sectors` (0: the
    /// kernel's default, 1/128 of the device up to 64 MiB), `interleave`
    /// (0: 32768), `fix_padding` and `fix_hmac` as cryptsetup sets them.
    /// The salt is left zero (the caller fills it with random bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        device_sectors: u64,
        tag_size: u16,
        sectors_per_block: u32,
        journal_sectors: u32,
        interleave: u32,
        journal_mac: bool,
        keyed_or_hashed: bool,
    ) -> Result<Superblock, Error> {
        if ![1, 2, 4, 8].contains(&sectors_per_block) {
            return Err(Error::BadSuperblock(format!(
                "block size {} bytes (512, 1024, 2048 or 4096)",
                sectors_per_block * 512
            )));
        }
        let log2_spb = sectors_per_block.trailing_zeros();
        let journal_sectors = match journal_sectors {
            0 => (device_sectors >> 7).min(131072) as u32,
            n => n,
        };
        let interleave = if interleave == 0 { 32768 } else { interleave };
        let log2_interleave = (31 - interleave.leading_zeros()).clamp(3, 31);
        let (_, _, _, section_sectors) = journal_sizes(u32::from(tag_size), log2_spb, journal_mac);
        let journal_sections = (journal_sectors / section_sectors).max(1);
        let mut flags = FLAG_FIXED_PADDING;
        if journal_mac {
            flags |= FLAG_JOURNAL_MAC;
        }
        if keyed_or_hashed {
            flags |= crate::superblock::FLAG_FIXED_HMAC;
        }
        // get_provided_data_sectors: the largest size that fits, bit by bit.
        let mut provided = 0u64;
        for bit in (3..(64 - device_sectors.leading_zeros())).rev() {
            let test = provided | 1 << bit;
            if Self::limits(
                u32::from(tag_size),
                log2_spb,
                log2_interleave,
                journal_sections,
                journal_mac,
                true,
                0,
                device_sectors,
                test,
                DEFAULT_BUFFER_SECTORS,
            )
            .is_some()
            {
                provided = test;
            }
        }
        if provided == 0 {
            return Err(Error::BadSuperblock(format!(
                "a device of {device_sectors} sectors is too small"
            )));
        }
        // The bitmap granularity the kernel records at the first activation.
        let section_total = u64::from(section_sectors) * u64::from(journal_sections);
        let bits_in_journal = (section_total << 12).min(u64::from(u32::MAX));
        let mut log2_sectors_per_bit = 15u32.max(log2_spb);
        while bits_in_journal < (provided + (1 << log2_sectors_per_bit) - 1) >> log2_sectors_per_bit
        {
            log2_sectors_per_bit += 1;
        }
        let version = if flags & crate::superblock::FLAG_FIXED_HMAC != 0 {
            5
        } else {
            4
        };
        Ok(Superblock {
            version,
            log2_interleave_sectors: log2_interleave as u8,
            tag_size,
            journal_sections,
            provided_data_sectors: provided,
            flags,
            log2_sectors_per_block: log2_spb as u8,
            log2_blocks_per_bitmap_bit: (log2_sectors_per_bit - log2_spb) as u8,
            recalc_sector: 0,
            salt: [0; 16],
        })
    }

    fn data_sector_checked(&self, logical: u64) -> Option<u64> {
        let area = logical >> self.log2_interleave;
        let offset = logical & ((1u64 << self.log2_interleave) - 1);
        (area << self.log2_interleave)
            .checked_add(area.checked_add(1)?.checked_mul(self.metadata_run)?)?
            .checked_add(self.initial_sectors)?
            .checked_add(offset)?
            .checked_add(self.start)
    }

    /// The device sector holding data sector `logical` (which must be below
    /// `provided_data_sectors`).
    pub fn data_sector(&self, logical: u64) -> u64 {
        self.data_sector_checked(logical)
            .expect("checked against the device size when the geometry was made")
    }

    /// The byte offset on the device of the tag of the block starting at
    /// data sector `logical`.
    pub fn tag_offset(&self, logical: u64) -> u64 {
        let area = logical >> self.log2_interleave;
        let offset = logical & ((1u64 << self.log2_interleave) - 1);
        let run_start = (area << self.log2_interleave) + area * self.metadata_run;
        let buffer = run_start >> self.log2_buffer_sectors << self.log2_buffer_sectors;
        let block = offset >> self.sectors_per_block.trailing_zeros();
        (self.start + self.initial_sectors + buffer) * 512 + block * u64::from(self.tag_size)
    }

    /// The byte offset on the device of sector `sector` of journal section
    /// `section`.
    pub fn journal_offset(&self, section: u32, sector: u32) -> u64 {
        (self.start
            + SB_SECTORS
            + u64::from(section) * u64::from(self.journal_section_sectors)
            + u64::from(sector))
            * 512
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel (6.1) wrote for `integritysetup format` of a 64 MiB
    /// device: crc32c (tag 4, 512-byte blocks), sha256 with 4096-byte
    /// blocks, and hmac-sha256 (tag 32, 512-byte blocks).
    #[test]
    fn plans_what_the_kernel_formats() {
        let dev = 64 << 11;
        let cases = [
            (4u16, 1u32, 5u32, 129160u64, 15u8),
            (32, 8, 3, 129248, 12),
            (32, 1, 11, 121904, 15),
        ];
        for (tag, spb, sections, provided, log2_bitmap) in cases {
            let sb = Geometry::plan(dev, tag, spb, 0, 0, false, true).unwrap();
            assert_eq!(sb.journal_sections, sections, "tag {tag} spb {spb}");
            assert_eq!(sb.provided_data_sectors, provided, "tag {tag} spb {spb}");
            assert_eq!(sb.log2_blocks_per_bitmap_bit, log2_bitmap);
            assert_eq!(sb.version, 5);
            let g = Geometry::new(&sb, 0, dev, DEFAULT_BUFFER_SECTORS).unwrap();
            // The last provided sector lies on the device; one more would not.
            assert!(g.data_sector(provided - 1) < dev);
            let bigger = Superblock {
                provided_data_sectors: provided + u64::from(spb),
                ..sb.clone()
            };
            assert!(Geometry::new(&bigger, 0, dev, DEFAULT_BUFFER_SECTORS).is_err());
        }
    }

    #[test]
    fn tags_and_data_interleave_by_area() {
        let sb = Geometry::plan(1 << 21, 4, 1, 0, 0, false, true).unwrap();
        let g = Geometry::new(&sb, 0, 1 << 21, DEFAULT_BUFFER_SECTORS).unwrap();
        // 32768 sectors × 4 bytes = 256 sectors of tags before each area.
        assert_eq!(g.metadata_run, 256);
        assert_eq!(g.data_sector(0), g.initial_sectors + 256);
        assert_eq!(g.data_sector(32768), g.initial_sectors + 256 + 32768 + 256);
        assert_eq!(g.tag_offset(0), g.initial_sectors * 512);
        assert_eq!(g.tag_offset(1), g.initial_sectors * 512 + 4);
        assert_eq!(g.tag_offset(32768), (g.initial_sectors + 256 + 32768) * 512);
    }
}
