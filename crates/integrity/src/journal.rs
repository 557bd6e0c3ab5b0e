//! The journal: what the kernel would replay at the next activation.
//!
//! Each section holds [`JOURNAL_BLOCK_SECTORS`] sectors of entries and
//! then the data of those entries. Every journal sector ends in an 8-byte
//! commit ID: one of four sequence values, XORed with the section and
//! sector numbers so that a sector written in the wrong place is seen.
//! The committed sections are those, from the one after the last section
//! of the newest sequence value, whose every sector carries the expected
//! value (`replay_journal` in the kernel); their used entries are copied
//! to their data sectors, later entries winning.

use std::collections::HashMap;

use crate::geometry::{Geometry, JOURNAL_BLOCK_SECTORS, JOURNAL_SECTOR_DATA};
use crate::Error;

/// Commit-ID sequence values in use at once.
const N_COMMIT_IDS: u8 = 4;
/// The largest journal read into memory (the kernel keeps the whole
/// journal in RAM too); a superblock asking for more is refused.
pub const MAX_JOURNAL_BYTES: u64 = 1 << 30;
const UNUSED: u32 = 0xffff_ffff;
const IN_PROGRESS: u32 = 0xffff_fffe;

/// The commit ID of sector `j` of section `i` for sequence value `seq`.
pub fn commit_id(i: u32, j: u32, seq: u8) -> u64 {
    0x1111_1111_1111_1111u64.wrapping_mul(u64::from(seq) + 1)
        ^ ((u64::from(i) << 32) ^ u64::from(j))
}

/// One block held in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The block's first data sector.
    pub sector: u64,
    /// The block's data, as it will be written in place.
    pub data: Vec<u8>,
    /// The block's tag.
    pub tag: Vec<u8>,
}

/// What the journal holds for replay.
#[derive(Debug, Default)]
pub struct Replay {
    /// The newest committed entry of each block, by first data sector.
    pub entries: HashMap<u64, Entry>,
    /// Committed sections found.
    pub committed_sections: u32,
}

/// Fills a buffer with the device's bytes at an offset.
pub type ReadAt<'a> = dyn FnMut(&mut [u8], u64) -> Result<(), Error> + 'a;

/// Reads the journal of a device through `read_at` and returns the
/// committed entries the kernel would replay.
pub fn read(g: &Geometry, read_at: &mut ReadAt<'_>) -> Result<Replay, Error> {
    let section_bytes = u64::from(g.journal_section_sectors) * 512;
    if section_bytes * u64::from(g.journal_sections) > MAX_JOURNAL_BYTES {
        return Err(Error::Unsupported(format!(
            "a journal of {} sections of {} sectors (more than 1 GiB)",
            g.journal_sections, g.journal_section_sectors
        )));
    }
    let mut buf = vec![0u8; section_bytes as usize];
    let id_at = |buf: &[u8], j: u32| {
        let at = j as usize * 512 + JOURNAL_SECTOR_DATA as usize;
        u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
    };
    // Pass 1: which sequence values are used, where each was last seen,
    // and whether any entry is used at all.
    let mut used = [false; N_COMMIT_IDS as usize];
    let mut last_section = [0u32; N_COMMIT_IDS as usize];
    let mut empty = true;
    for i in 0..g.journal_sections {
        read_at(&mut buf, g.journal_offset(i, 0))?;
        for j in 0..g.journal_section_sectors {
            let id = id_at(&buf, j);
            let seq = (0..N_COMMIT_IDS)
                .find(|&k| commit_id(i, j, k) == id)
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "journal section {i} sector {j} has no valid commit ID (an encrypted \
                         journal, --journal-crypt, cannot be read; or the journal is damaged)"
                    ))
                })?;
            used[seq as usize] = true;
            last_section[seq as usize] = i;
        }
        if empty {
            empty = (0..g.journal_section_entries).all(|n| entry_hi(g, &buf, n) == UNUSED);
        }
    }
    let prev = |s: u8| (s + N_COMMIT_IDS - 1) % N_COMMIT_IDS;
    let next = |s: u8| (s + 1) % N_COMMIT_IDS;
    let unused = if !used[N_COMMIT_IDS as usize - 1] {
        let mut u = N_COMMIT_IDS - 1;
        while u > 0 && !used[u as usize - 1] {
            u -= 1;
        }
        u
    } else {
        (0..N_COMMIT_IDS)
            .find(|&u| !used[u as usize])
            .ok_or_else(|| Error::BadSuperblock("every journal commit ID is in use".into()))?
    };
    let last_used = prev(unused);
    let mut want = prev(last_used);
    if !used[want as usize] && used[prev(want) as usize] {
        empty = true;
    }
    let mut start = last_section[last_used as usize] + 1;
    if start >= g.journal_sections {
        want = next(want);
        start -= g.journal_sections;
    }
    // Pass 2: the committed sections from `start`, in order.
    let mut replay = Replay::default();
    let mut i = start;
    let mut sections = 0;
    'sections: while sections < g.journal_sections {
        read_at(&mut buf, g.journal_offset(i, 0))?;
        for j in 0..g.journal_section_sectors {
            if id_at(&buf, j) != commit_id(i, j, want) {
                break 'sections;
            }
        }
        if !empty {
            collect(g, &buf, &mut replay);
        }
        sections += 1;
        i += 1;
        if i >= g.journal_sections {
            want = next(want);
            i = 0;
        }
    }
    replay.committed_sections = if empty { 0 } else { sections };
    Ok(replay)
}

fn entry_at(g: &Geometry, n: u32) -> usize {
    let sector = n % JOURNAL_BLOCK_SECTORS;
    let slot = n / JOURNAL_BLOCK_SECTORS;
    sector as usize * 512 + (slot * g.journal_entry_size) as usize
}

fn entry_hi(g: &Geometry, buf: &[u8], n: u32) -> u32 {
    let at = entry_at(g, n) + 4;
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

/// Adds the used entries of one section (in `buf`) to `replay`.
fn collect(g: &Geometry, buf: &[u8], replay: &mut Replay) {
    let spb = g.sectors_per_block;
    for n in 0..g.journal_section_entries {
        let hi = entry_hi(g, buf, n);
        if hi == UNUSED || hi == IN_PROGRESS {
            continue;
        }
        let e = entry_at(g, n);
        let sector = u64::from_le_bytes(buf[e..e + 8].try_into().expect("8 bytes"));
        if sector >= g.provided_data_sectors || sector % u64::from(spb) != 0 {
            // The kernel would write it out of range; never replay it here.
            continue;
        }
        let mut data = vec![0u8; spb as usize * 512];
        for k in 0..spb {
            let js = (JOURNAL_BLOCK_SECTORS + (n << spb.trailing_zeros()) + k) as usize * 512;
            let d = k as usize * 512;
            data[d..d + 504].copy_from_slice(&buf[js..js + 504]);
            let lb = e + 8 + 8 * k as usize;
            data[d + 504..d + 512].copy_from_slice(&buf[lb..lb + 8]);
        }
        let t = e + 8 + 8 * spb as usize;
        let tag = buf[t..t + g.tag_size as usize].to_vec();
        replay.entries.insert(sector, Entry { sector, data, tag });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_ids_are_the_kernels() {
        assert_eq!(commit_id(0, 0, 0), 0x1111_1111_1111_1111);
        assert_eq!(commit_id(0, 0, 3), 0x4444_4444_4444_4444);
        assert_eq!(commit_id(2, 5, 1), 0x2222_2222_2222_2222 ^ (2 << 32 | 5));
    }
}
