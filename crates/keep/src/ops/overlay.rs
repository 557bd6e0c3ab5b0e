//! The overlay file system's crypto inside the keep (`fs mount --keep`):
//! gocryptfs content blocks and EME names with keys derived in the keep
//! ([`HeldKeys`]). Request layouts are in [`crate::proto`] and
//! docs/format/keep-rings.md. Every length is checked; bad input is a
//! status, never a panic.

use cryptkeep_overlay::{FileId, HeldKeys, KeyHolder};

use crate::proto::*;

/// Longest name EME takes, in 16-byte blocks.
const MAX_NAME_BLOCKS: usize = cryptkeep_crypto::eme::MAX_BLOCKS;

/// Parses the overlay request header: the file ID when the blocks are bound.
fn header(buf: &[u8]) -> Result<Option<FileId>, u32> {
    let h = buf.get(..OVERLAY_HEADER_LEN).ok_or(STATUS_BAD_DESCRIPTOR)?;
    if h[17..].iter().any(|&b| b != 0) {
        return Err(STATUS_BAD_DESCRIPTOR);
    }
    let mut id = FileId::default();
    id.copy_from_slice(&h[..16]);
    match h[16] {
        0 => Ok(None),
        1 => Ok(Some(id)),
        _ => Err(STATUS_BAD_DESCRIPTOR),
    }
}

/// Answers one overlay operation in place, then wipes the stack its
/// crypto ran on and the vector registers (see
/// [`crate::wipe::wipe_request_stack`]).
pub fn handle(
    keys: &HeldKeys,
    op: u32,
    arg: u64,
    buf: &mut [u8],
    in_len: usize,
) -> Result<usize, u32> {
    let r = handle_op(keys, op, arg, buf, in_len);
    crate::wipe::wipe_request_stack();
    r
}

// Not inlined: its frames (and the cipher code's) must lie below
// handle()'s, where the wipe reaches.
#[inline(never)]
fn handle_op(
    keys: &HeldKeys,
    op: u32,
    arg: u64,
    buf: &mut [u8],
    in_len: usize,
) -> Result<usize, u32> {
    if in_len > buf.len() {
        return Err(STATUS_BAD_DESCRIPTOR);
    }
    match op {
        OP_OVERLAY_SEAL | OP_OVERLAY_OPEN => {
            let id = header(&buf[..in_len])?;
            if in_len == OVERLAY_HEADER_LEN {
                return Err(STATUS_BAD_DESCRIPTOR);
            }
            if op == OP_OVERLAY_OPEN {
                return open_in_place(keys, arg, id.as_ref(), buf, in_len);
            }
            INPUT.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                super::grow_buffer(&mut scratch, cryptkeep_overlay::SEAL_WORK_LEN);
                seal_in_place(keys, arg, id.as_ref(), buf, in_len, &mut scratch)
            })
        }
        OP_NAME_ENCRYPT | OP_NAME_DECRYPT => {
            if in_len < 16 + 16 || !(in_len - 16).is_multiple_of(16) {
                return Err(STATUS_BAD_DESCRIPTOR);
            }
            let mut tweak = [0u8; 16];
            tweak.copy_from_slice(&buf[..16]);
            buf.copy_within(16..in_len, 0);
            let data = &mut buf[..in_len - 16];
            keys.eme(op == OP_NAME_ENCRYPT, &tweak, data)
                .map(|_| in_len - 16)
                .map_err(|_| STATUS_FAILED)
        }
        OP_NAMES_ENCRYPT | OP_NAMES_DECRYPT => {
            names(keys, op == OP_NAMES_ENCRYPT, &mut buf[..in_len])
        }
        _ => Err(STATUS_UNSUPPORTED),
    }
}

thread_local! {
    /// Each worker's copy of the content block it works on, reused from
    /// one request to the next. It holds ciphertext, or plaintext the I/O
    /// process sent or is sent: nothing it does not have; the secret heap
    /// wipes it when the worker ends.
    static INPUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`OP_OVERLAY_SEAL`] of the plaintext in `buf[header..in_len]`, in
/// place, last block first: each block is sealed into `work` (the
/// worker's own buffer) under a nonce drawn in the keep, and copied to
/// its place in the output once it is sealed
/// (`ContentCipher::seal_run_in_place`). So the nonce and the ciphertext
/// the tag covers are the keep's, whatever the I/O side writes into the
/// slot meanwhile; AES-GCM and XChaCha20-Poly1305 read the plaintext once,
/// from the slot, and AES-SIV, which reads it twice, from a copy in
/// `work`.
fn seal_in_place(
    keys: &HeldKeys,
    first_block: u64,
    id: Option<&FileId>,
    buf: &mut [u8],
    in_len: usize,
    work: &mut [u8],
) -> Result<usize, u32> {
    let c = keys.content();
    let len = in_len - OVERLAY_HEADER_LEN;
    let blocks = len.div_ceil(cryptkeep_overlay::PLAIN_BS);
    if len + blocks * c.block_overhead() > buf.len() {
        return Err(STATUS_BAD_DESCRIPTOR);
    }
    c.seal_run_in_place(first_block, id, buf, OVERLAY_HEADER_LEN, len, work)
        .map_err(|_| STATUS_FAILED)
}

/// [`OP_OVERLAY_OPEN`] of the cipher blocks in `buf[header..in_len]`, in
/// place, one block at a time: each is copied into the worker's own buffer
/// and opened from there. A cipher that checks the tag before it decrypts
/// (`cryptkeep-crypto`'s VAES AES-GCM, `AeadImpl::VaesAvx2`) then
/// decrypts straight into the block's place in the output; the others
/// open into the worker's buffer, and only a block that authenticated is
/// copied to its place. So what is authenticated is
/// what is decrypted, whatever the I/O side writes into the slot
/// meanwhile, and no unauthenticated plaintext (nor keystream) ever
/// reaches the slot, for any of the content ciphers (AES-SIV reads its
/// output back to check it). Block `i`'s plaintext ends at
/// `(i + 1) · 4096`, before block `i + 1`'s ciphertext starts, so no input
/// is overwritten before it is copied; and a block copied from the slot
/// is still in the cache when it is decrypted, where a copy of the whole
/// request was not.
fn open_in_place(
    keys: &HeldKeys,
    first_block: u64,
    id: Option<&FileId>,
    buf: &mut [u8],
    in_len: usize,
) -> Result<usize, u32> {
    let c = keys.content();
    let cbs = c.cipher_bs();
    let room = c.open_room(in_len - OVERLAY_HEADER_LEN);
    INPUT.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        // The cipher block, then room for its plaintext.
        super::grow_buffer(&mut scratch, cbs + cryptkeep_overlay::PLAIN_BS);
        let (cipher, plain) = scratch.split_at_mut(cbs);
        let plain = &mut plain[..cryptkeep_overlay::PLAIN_BS];
        let (mut from, mut out, mut block) = (OVERLAY_HEADER_LEN, 0, first_block);
        while from < in_len {
            let to = (from + cbs).min(in_len);
            let cipher = &mut cipher[..to - from];
            cipher.copy_from_slice(&buf[from..to]);
            // Straight into the slot where the cipher checks the tag
            // before it decrypts; else in the worker's buffer, then
            // copied.
            let dst = &mut buf[out..room.min(out + cryptkeep_overlay::PLAIN_BS)];
            let opened = match c.open_block_verified_into(block, id, cipher, dst) {
                Some(r) => r.ok(),
                None => keys
                    .open_blocks(block, id, cipher, plain)
                    .ok()
                    .and_then(|n| {
                        dst.get_mut(..n)?.copy_from_slice(plain.get(..n)?);
                        Some(n)
                    }),
            }
            .filter(|&n| out + n <= room);
            let Some(n) = opened else {
                plain.fill(0);
                buf[..room].fill(0);
                return Err(STATUS_FAILED);
            };
            out += n;
            from = to;
            block = block.wrapping_add(1);
        }
        Ok(out)
    })
}

/// [`OP_NAMES_ENCRYPT`] / [`OP_NAMES_DECRYPT`] in place: each name is moved
/// down over the tweak and length fields before it (never over input not
/// read yet) and transformed there; a length of 0 is followed by the tweak
/// of the names after it (another directory), which must be followed by a
/// name. Returns the output length.
fn names(keys: &HeldKeys, encrypt: bool, buf: &mut [u8]) -> Result<usize, u32> {
    let mut tweak: [u8; 16] = buf
        .get(..16)
        .and_then(|t| t.try_into().ok())
        .ok_or(STATUS_BAD_DESCRIPTOR)?;
    let (mut pos, mut out) = (16, 0);
    // A name must follow the first tweak and every switch.
    let mut want_name = true;
    while pos < buf.len() {
        let len = buf
            .get(pos..pos + 2)
            .map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
            .ok_or(STATUS_BAD_DESCRIPTOR)?;
        pos += 2;
        if len == 0 && !want_name {
            tweak = buf
                .get(pos..pos + 16)
                .and_then(|t| t.try_into().ok())
                .ok_or(STATUS_BAD_DESCRIPTOR)?;
            pos += 16;
            want_name = true;
            continue;
        }
        if !(16..=MAX_NAME_BLOCKS * 16).contains(&len)
            || !len.is_multiple_of(16)
            || pos + len > buf.len()
        {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        buf.copy_within(pos..pos + len, out);
        keys.eme(encrypt, &tweak, &mut buf[out..out + len])
            .map_err(|_| STATUS_FAILED)?;
        pos += len;
        out += len;
        want_name = false;
    }
    if want_name {
        return Err(STATUS_BAD_DESCRIPTOR);
    }
    Ok(out)
}
