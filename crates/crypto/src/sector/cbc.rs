//! CBC (NIST SP 800-38A §6.2) over sectors, no padding.
//!
//! Decryption is parallel within and across sectors (windows of blocks that
//! may span sectors). Encryption is serial within a sector, so several
//! sectors are encrypted in lock-step, one block of each per AES batch.

use super::aes_key::{as_blocks, wipe_blocks, AesKey};
use aes::Block;

/// Blocks per decryption batch.
const WINDOW: usize = 512;

/// Most sectors encrypted in lock-step (VAES-512 does 64 blocks at a time).
pub(crate) const MAX_LANES: usize = 64;

/// Encrypts whole sectors in place; `iv_of(i)` is the IV of buffer sector `i`.
pub(crate) fn encrypt(
    key: &AesKey,
    buf: &mut [u8],
    sector_size: usize,
    iv_of: impl Fn(usize) -> [u8; 16],
) {
    let lanes_max = MAX_LANES.min(key.par().max(8));
    let mut prev = [0u128; MAX_LANES];
    let mut batch = [Block::default(); MAX_LANES];
    for (g, group) in buf.chunks_mut(sector_size * lanes_max).enumerate() {
        let lanes = group.len() / sector_size;
        for (lane, p) in prev.iter_mut().enumerate().take(lanes) {
            *p = u128::from_le_bytes(iv_of(g * lanes_max + lane));
        }
        for off in (0..sector_size).step_by(16) {
            for lane in 0..lanes {
                let at = lane * sector_size + off;
                let mut pt = [0u8; 16];
                pt.copy_from_slice(&group[at..at + 16]);
                batch[lane].0 = (u128::from_le_bytes(pt) ^ prev[lane]).to_le_bytes();
            }
            key.encrypt_blocks(&mut batch[..lanes]);
            for lane in 0..lanes {
                let at = lane * sector_size + off;
                group[at..at + 16].copy_from_slice(&batch[lane].0);
                prev[lane] = u128::from_le_bytes(batch[lane].0);
            }
        }
    }
    wipe_blocks(&mut batch);
}

/// Decrypts whole sectors in place; `iv_of(i)` is the IV of buffer sector `i`.
pub(crate) fn decrypt(
    key: &AesKey,
    buf: &mut [u8],
    sector_size: usize,
    iv_of: impl Fn(usize) -> [u8; 16],
) {
    let per_sector = sector_size / 16;
    // The ciphertext block before each block of the window (or the IV).
    let mut chain = [0u128; WINDOW];
    let mut last_ct = 0u128;
    let mut sector = 0usize;
    // Blocks left in the current sector (0: the next block starts one).
    let mut left = 0usize;
    for window in as_blocks(buf).chunks_mut(WINDOW) {
        for (b, c) in window.iter().zip(chain.iter_mut()) {
            *c = if left == 0 {
                left = per_sector;
                sector += 1;
                u128::from_le_bytes(iv_of(sector - 1))
            } else {
                last_ct
            };
            left -= 1;
            last_ct = u128::from_le_bytes(b.0);
        }
        key.decrypt_blocks(window);
        for (b, c) in window.iter_mut().zip(chain.iter()) {
            b.0 = (u128::from_le_bytes(b.0) ^ c).to_le_bytes();
        }
    }
}
