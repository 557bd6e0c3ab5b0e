//! Bitmap mode (`integritysetup open --integrity-bitmap-mode`, the kernel's
//! mode `B`): no journal; the journal area holds instead a bitmap with one
//! bit per *region* of 2^`log2_blocks_per_bitmap_bit` blocks. A set bit
//! means the region's data and tags may disagree (a write was under way):
//! the next activation recalculates the tags of those regions.
//!
//! On disk: bit *k* is bit `k mod 8` of byte `k / 8` (the kernel's
//! `unsigned long` bitmaps on a little-endian machine), starting at the
//! first journal sector (sector 8 after the superblock), in 4096-byte
//! blocks; `ceil(bits / 32768)` blocks are used.

use std::time::Duration;

use crate::{Geometry, Superblock};

/// Bytes of one bitmap block, the unit the kernel writes.
pub const BITMAP_BLOCK_BYTES: usize = 4096;
/// The kernel's default region size, in 512-byte sectors
/// (`DEFAULT_SECTORS_PER_BITMAP_BIT`).
pub const DEFAULT_SECTORS_PER_BIT: u64 = 32768;
/// The kernel's default delay before dirty bits are cleared
/// (`BITMAP_FLUSH_INTERVAL`, 10 s).
pub const DEFAULT_BITMAP_FLUSH: Duration = Duration::from_secs(10);

/// How bitmap mode is set up at an open (integritysetup's
/// `--bitmap-sectors-per-bit` and `--bitmap-flush-time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitmapOptions {
    /// 512-byte sectors per bit (rounded down to a power of two); `None`
    /// is the kernel's default, 32768.
    pub sectors_per_bit: Option<u64>,
    /// Dirty bits are cleared at the first flush at least this long after
    /// they were set, and at close (the kernel clears them this long after
    /// the first write, whatever flushes come).
    pub flush_interval: Duration,
    /// Allow recomputing keyed (hmac) tags over whatever data is on disk
    /// when the superblock asks for it (an unfinished recalculation, or
    /// dirty bitmap regions) — integritysetup's `--integrity-legacy-recalc`,
    /// the kernel's `legacy_recalculate`. Off, such an open of a keyed
    /// device is refused: the superblock carries no MAC, so whoever can
    /// write the disk could otherwise have tampered data re-tagged as
    /// authentic. Applies in every mode.
    pub legacy_recalculate: bool,
}

impl Default for BitmapOptions {
    fn default() -> Self {
        BitmapOptions {
            sectors_per_bit: None,
            flush_interval: DEFAULT_BITMAP_FLUSH,
            legacy_recalculate: false,
        }
    }
}

/// The kernel's `log2_blocks_per_bitmap_bit` for a device: log2 of the
/// requested sectors per bit (15 by default), at least one block, raised
/// until the bitmap fits in the journal area's bits (at most 2^32 − 1).
pub fn log2_blocks_per_bit(g: &Geometry, sb: &Superblock, sectors_per_bit: Option<u64>) -> u8 {
    let mut l = match sectors_per_bit {
        None => DEFAULT_SECTORS_PER_BIT.ilog2(),
        Some(0) => 0,
        Some(n) => n.ilog2(),
    };
    l = l.max(u32::from(sb.log2_sectors_per_block));
    let journal_sectors = u64::from(g.journal_section_sectors) * u64::from(g.journal_sections);
    let bits_in_journal = (journal_sectors << 12).min(u64::from(u32::MAX));
    while l < 63 && bits_in_journal < (g.provided_data_sectors + (1u64 << l) - 1) >> l {
        l += 1;
    }
    (l - u32::from(sb.log2_sectors_per_block)) as u8
}

/// A bitmap as the kernel keeps it: one bit per region, in whole 4096-byte
/// blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitmap {
    /// log2 of the 512-byte sectors one bit covers.
    shift: u32,
    /// Usable data sectors.
    provided: u64,
    bytes: Vec<u8>,
}

impl Bitmap {
    /// An all-clear bitmap for `g` with 2^`log2_blocks_per_bit` blocks per
    /// bit.
    pub fn new(g: &Geometry, log2_sectors_per_block: u8, log2_blocks_per_bit: u8) -> Bitmap {
        let shift = u32::from(log2_sectors_per_block) + u32::from(log2_blocks_per_bit);
        let blocks = g.provided_data_sectors >> log2_sectors_per_block;
        let bits = (blocks + (1u64 << log2_blocks_per_bit) - 1) >> log2_blocks_per_bit;
        let n_blocks = bits.div_ceil(BITMAP_BLOCK_BYTES as u64 * 8).max(1);
        Bitmap {
            shift,
            provided: g.provided_data_sectors,
            bytes: vec![0; n_blocks as usize * BITMAP_BLOCK_BYTES],
        }
    }

    /// log2 of the sectors one bit covers.
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// The on-disk bytes (whole blocks).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The on-disk bytes, to read into.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The bits covering sectors `sector .. sector + n`, inclusive.
    fn bits(&self, sector: u64, n: u64) -> Option<(u64, u64)> {
        if n == 0 {
            return None;
        }
        Some((sector >> self.shift, (sector + n - 1) >> self.shift))
    }

    fn get(&self, bit: u64) -> bool {
        self.bytes
            .get((bit / 8) as usize)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0)
    }

    fn put(&mut self, bit: u64, on: bool) {
        if let Some(b) = self.bytes.get_mut((bit / 8) as usize) {
            if on {
                *b |= 1 << (bit % 8);
            } else {
                *b &= !(1 << (bit % 8));
            }
        }
    }

    /// Whether every bit covering `sector .. sector + n` is set.
    pub fn all_set(&self, sector: u64, n: u64) -> bool {
        self.bits(sector, n)
            .is_none_or(|(a, b)| (a..=b).all(|k| self.get(k)))
    }

    /// Whether any bit covering `sector .. sector + n` is set.
    pub fn any_set(&self, sector: u64, n: u64) -> bool {
        self.bits(sector, n)
            .is_some_and(|(a, b)| (a..=b).any(|k| self.get(k)))
    }

    /// Whether any bit covering the provided data is set.
    pub fn any(&self) -> bool {
        self.any_set(0, self.provided)
    }

    /// Sets the bits covering `sector .. sector + n`; answers the range of
    /// bitmap blocks that changed.
    pub fn set(&mut self, sector: u64, n: u64) -> std::ops::Range<usize> {
        self.change(sector, n, true)
    }

    /// Clears the bits covering `sector .. sector + n`.
    pub fn clear(&mut self, sector: u64, n: u64) {
        self.change(sector, n, false);
    }

    fn change(&mut self, sector: u64, n: u64, on: bool) -> std::ops::Range<usize> {
        let Some((a, b)) = self.bits(sector, n) else {
            return 0..0;
        };
        for k in a..=b {
            self.put(k, on);
        }
        let per = BITMAP_BLOCK_BYTES as u64 * 8;
        (a / per) as usize..(b / per) as usize + 1
    }

    /// Sets every bit.
    pub fn set_all(&mut self) {
        self.set(0, self.provided);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(log2_spb: u8) -> Superblock {
        Superblock {
            version: 5,
            log2_interleave_sectors: 15,
            tag_size: 4,
            journal_sections: 5,
            provided_data_sectors: 129160,
            flags: 0x18,
            log2_sectors_per_block: log2_spb,
            log2_blocks_per_bitmap_bit: 15,
            recalc_sector: 0,
            salt: [0; 16],
        }
    }

    /// The values the kernel (6.1) reported for a 64 MiB crc32c device:
    /// 15 by default, 13 with `--bitmap-sectors-per-bit 8192`.
    #[test]
    fn blocks_per_bit_as_the_kernel_computes_it() {
        let s = sb(0);
        let g = Geometry::new(&s, 0, 131072, 128).unwrap();
        assert_eq!(log2_blocks_per_bit(&g, &s, None), 15);
        assert_eq!(log2_blocks_per_bit(&g, &s, Some(8192)), 13);
        assert_eq!(log2_blocks_per_bit(&g, &s, Some(12000)), 13);
        assert_eq!(log2_blocks_per_bit(&g, &s, Some(1)), 0);
        // A journal of one 176-sector section holds 720896 bits: 129160
        // sectors per bit of one sector fit.
        let mut one = s.clone();
        one.journal_sections = 1;
        let g1 = Geometry::new(&one, 0, 131072, 128).unwrap();
        assert_eq!(log2_blocks_per_bit(&g1, &one, Some(1)), 0);
    }

    #[test]
    fn bits_are_little_endian_and_ranges_cover_partial_regions() {
        let s = sb(0);
        let g = Geometry::new(&s, 0, 131072, 128).unwrap();
        let mut b = Bitmap::new(&g, 0, 13);
        assert_eq!(b.bytes().len(), 4096);
        assert!(!b.any());
        assert_eq!(b.set(8192 * 9 + 5, 8192), 0..1);
        assert_eq!(b.bytes()[1], 0b0000_0110);
        assert!(b.all_set(8192 * 9, 8192 * 2));
        assert!(!b.all_set(8192 * 9, 8192 * 3));
        assert!(b.any_set(0, 8192 * 10));
        assert!(!b.any_set(0, 8192 * 9));
        b.clear(8192 * 10, 1);
        assert_eq!(b.bytes()[1], 0b0000_0010);
        b.set_all();
        assert_eq!(&b.bytes()[..2], &[0xff, 0xff]);
        assert_eq!(b.bytes()[2], 0);
    }
}
