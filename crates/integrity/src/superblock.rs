//! [`Superblock`]: dm-integrity's header, the first [`SB_SECTORS`] sectors
//! of the device (only the first 64 bytes carry fields; all little-endian).
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `"integrt\0"` |
//! | 8 | 1 | version (1–6) |
//! | 9 | 1 | log2 of the interleave (data sectors per tag run) |
//! | 10 | 2 | tag size in bytes |
//! | 12 | 4 | journal sections |
//! | 16 | 8 | provided data sectors (the usable size) |
//! | 24 | 4 | flags ([`SB_FLAGS`]) |
//! | 28 | 1 | log2 of the sectors per block |
//! | 29 | 1 | log2 of the blocks per bitmap bit |
//! | 30 | 2 | padding |
//! | 32 | 8 | recalculate position (a sector) |
//! | 40 | 8 | padding |
//! | 48 | 16 | salt (used with the `fix_hmac` flag) |

use crate::Error;

/// The largest tag a journal entry can hold (the kernel's `MAX_TAG_SIZE`:
/// a 504-byte journal sector less its MAC, the sector number and eight
/// saved sector tails).
pub const MAX_TAG_SIZE: u32 = 504 - 8 - (8 + 8 * 8);

/// Sectors reserved for the superblock.
pub const SB_SECTORS: u64 = 8;

/// The superblock flags and their names as `integritysetup dump` prints
/// them.
pub const SB_FLAGS: [(u32, &str); 6] = [
    (FLAG_JOURNAL_MAC, "journal_mac"),
    (FLAG_RECALCULATING, "recalculating"),
    (FLAG_DIRTY_BITMAP, "dirty_bitmap"),
    (FLAG_FIXED_PADDING, "fix_padding"),
    (FLAG_FIXED_HMAC, "fix_hmac"),
    (FLAG_INLINE, "inline"),
];

/// The journal's sections carry a MAC.
pub const FLAG_JOURNAL_MAC: u32 = 0x1;
/// Tags are being recalculated from `recalc_sector` on.
pub const FLAG_RECALCULATING: u32 = 0x2;
/// Bitmap mode: the bitmap marks blocks whose tags may be stale.
pub const FLAG_DIRTY_BITMAP: u32 = 0x4;
/// Tag runs padded to 4 KiB (not to 128 KiB as before kernel 5.4).
pub const FLAG_FIXED_PADDING: u32 = 0x8;
/// Tags and journal MACs cover the salt and the section number.
pub const FLAG_FIXED_HMAC: u32 = 0x10;
/// Tags in the device's own metadata space (NVMe PI); no journal.
pub const FLAG_INLINE: u32 = 0x20;

const MAGIC: &[u8; 8] = b"integrt\0";

/// A parsed dm-integrity superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Format version, 1–6 (set from the flags in use).
    pub version: u8,
    /// log2 of the data sectors between two tag runs.
    pub log2_interleave_sectors: u8,
    /// Bytes of tag per block.
    pub tag_size: u16,
    /// Journal sections.
    pub journal_sections: u32,
    /// Usable data sectors (512 bytes each).
    pub provided_data_sectors: u64,
    /// Flags ([`SB_FLAGS`]).
    pub flags: u32,
    /// log2 of the 512-byte sectors per block (0–3).
    pub log2_sectors_per_block: u8,
    /// log2 of the blocks one bitmap bit covers.
    pub log2_blocks_per_bitmap_bit: u8,
    /// Where tag recalculation stands (with `recalculating`).
    pub recalc_sector: u64,
    /// The salt hashed into tags and journal MACs with `fix_hmac`.
    pub salt: [u8; 16],
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Superblock {
    /// Parses the first sector of a device. Refuses what the kernel's
    /// constructor refuses: an unknown version, a tag size of 0 or above
    /// the journal's limit, more than 8 sectors per block, an interleave
    /// outside 2^3..2^31, no journal outside inline mode.
    pub fn parse(b: &[u8]) -> Result<Superblock, Error> {
        if b.len() < 64 {
            return Err(Error::BadSuperblock("shorter than 64 bytes".into()));
        }
        if &b[0..8] != MAGIC {
            return Err(Error::NotIntegrity);
        }
        let sb = Superblock {
            version: b[8],
            log2_interleave_sectors: b[9],
            tag_size: le16(b, 10),
            journal_sections: le32(b, 12),
            provided_data_sectors: le64(b, 16),
            flags: le32(b, 24),
            log2_sectors_per_block: b[28],
            log2_blocks_per_bitmap_bit: b[29],
            recalc_sector: le64(b, 32),
            salt: b[48..64].try_into().expect("16 bytes"),
        };
        sb.check()?;
        Ok(sb)
    }

    fn check(&self) -> Result<(), Error> {
        let bad = |s: String| Err(Error::BadSuperblock(s));
        if self.version == 0 || self.version > 6 {
            return bad(format!("unknown version {}", self.version));
        }
        if self.log2_sectors_per_block > 3 {
            return bad(format!(
                "block size 2^{} sectors (at most 8 sectors, 4096 bytes)",
                self.log2_sectors_per_block
            ));
        }
        let max_tag = MAX_TAG_SIZE;
        if self.tag_size == 0 || u32::from(self.tag_size) > max_tag {
            return bad(format!("tag size {} (1 to {max_tag} bytes)", self.tag_size));
        }
        if self.flags & FLAG_INLINE != 0 {
            if self.journal_sections != 0 {
                return bad("inline mode with a journal".into());
            }
        } else if self.journal_sections == 0 {
            return bad("journal_sections is 0".into());
        }
        if !(3..=31).contains(&self.log2_interleave_sectors) {
            return bad(format!(
                "interleave 2^{} sectors (2^3 to 2^31)",
                self.log2_interleave_sectors
            ));
        }
        if self.provided_data_sectors == 0 {
            return bad("no data sectors".into());
        }
        let spb = u64::from(self.sectors_per_block());
        if !self.provided_data_sectors.is_multiple_of(spb) {
            return bad(format!(
                "provided_data_sectors {} is not a whole number of {spb}-sector blocks",
                self.provided_data_sectors
            ));
        }
        if self.flags & FLAG_RECALCULATING != 0 && !self.recalc_sector.is_multiple_of(spb) {
            return bad(format!(
                "recalc_sector {} is not at the start of a {spb}-sector block",
                self.recalc_sector
            ));
        }
        Ok(())
    }

    /// 512-byte sectors per block (1, 2, 4 or 8).
    pub fn sectors_per_block(&self) -> u32 {
        1 << self.log2_sectors_per_block
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The flag names, in `integritysetup dump`'s order.
    pub fn flag_names(&self) -> Vec<&'static str> {
        SB_FLAGS
            .iter()
            .filter(|(f, _)| self.has(*f))
            .map(|(_, n)| *n)
            .collect()
    }

    /// The superblock as `integritysetup dump` prints it (without its
    /// first line, which names the device).
    pub fn dump(&self) -> String {
        let mut flags = String::new();
        for n in self.flag_names() {
            flags.push_str(n);
            flags.push(' ');
        }
        format!(
            "superblock_version {}\nlog2_interleave_sectors {}\nintegrity_tag_size {}\n\
             journal_sections {}\nprovided_data_sectors {}\nsector_size {}\n\
             log2_blocks_per_bitmap {}\nflags {}\n",
            self.version,
            self.log2_interleave_sectors,
            self.tag_size,
            self.journal_sections,
            self.provided_data_sectors,
            self.sectors_per_block() * 512,
            self.log2_blocks_per_bitmap_bit,
            flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 64 bytes the kernel (6.1) wrote for `integritysetup format`
    /// with the defaults on a 64 MiB device.
    fn kernel_crc32c_sb() -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(b"integrt\0");
        b[8..16].copy_from_slice(&[0x05, 0x0f, 0x04, 0x00, 0x05, 0x00, 0x00, 0x00]);
        b[16..24].copy_from_slice(&129160u64.to_le_bytes());
        b[24..32].copy_from_slice(&[0x18, 0, 0, 0, 0x00, 0x0f, 0, 0]);
        b[48..64].copy_from_slice(&[
            0x52, 0x99, 0xd0, 0x7a, 0x27, 0x99, 0x5e, 0x85, 0x4b, 0x9f, 0xc3, 0x4d, 0xfa, 0x6b,
            0x24, 0x7d,
        ]);
        b
    }

    #[test]
    fn parses_a_kernel_superblock_and_dumps_it_as_integritysetup() {
        let sb = Superblock::parse(&kernel_crc32c_sb()).unwrap();
        assert_eq!(sb.version, 5);
        assert_eq!(sb.tag_size, 4);
        assert_eq!(sb.journal_sections, 5);
        assert_eq!(sb.provided_data_sectors, 129160);
        assert_eq!(
            sb.dump(),
            "superblock_version 5\nlog2_interleave_sectors 15\nintegrity_tag_size 4\n\
             journal_sections 5\nprovided_data_sectors 129160\nsector_size 512\n\
             log2_blocks_per_bitmap 15\nflags fix_padding fix_hmac \n"
        );
    }

    #[test]
    fn refuses_what_the_kernel_refuses() {
        let good = kernel_crc32c_sb();
        let cases: [(usize, u8); 6] = [(0, b'X'), (8, 0), (8, 7), (9, 2), (9, 32), (28, 4)];
        for (at, v) in cases {
            let mut b = good;
            b[at] = v;
            assert!(Superblock::parse(&b).is_err(), "byte {at} = {v} accepted");
        }
        let mut b = good;
        b[10..12].copy_from_slice(&0u16.to_le_bytes());
        assert!(Superblock::parse(&b).is_err(), "tag size 0 accepted");
        let mut b = good;
        b[10..12].copy_from_slice(&1000u16.to_le_bytes());
        assert!(Superblock::parse(&b).is_err(), "tag size 1000 accepted");
        let mut b = good;
        b[12..16].copy_from_slice(&0u32.to_le_bytes());
        assert!(Superblock::parse(&b).is_err(), "no journal accepted");
        assert!(Superblock::parse(&good[..40]).is_err());
        // 4096-byte blocks: a partial last block, or a recalculation that
        // starts inside a block, is not what the kernel writes.
        let mut b = good;
        b[28] = 3;
        assert!(
            Superblock::parse(&b).is_ok(),
            "the 4096-byte variant itself"
        );
        b[16..24].copy_from_slice(&2u64.to_le_bytes());
        assert!(Superblock::parse(&b).is_err(), "a partial block accepted");
        let mut b = good;
        b[28] = 3;
        b[24] |= 0x2;
        b[32..40].copy_from_slice(&4u64.to_le_bytes());
        assert!(
            Superblock::parse(&b).is_err(),
            "recalc_sector inside a block accepted"
        );
    }
}
