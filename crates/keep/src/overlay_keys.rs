//! [`KeepKeyHolder`]: the overlay's [`KeyHolder`] seam served by a keep
//! (`fs mount --keep`). Runs of content blocks go to the keep in requests
//! of at most one shared slot, written straight into the slot; a name goes
//! as one request, a directory's names in as few requests as fit a slot.
//! The keep draws the nonces, so the I/O side cannot make it reuse one.

use std::sync::Arc;

use cryptkeep_overlay::{
    file_aligned, file_aligned_start, ContentAlg, Error as OverlayError, FileId, KeyHolder,
    COPY_ALIGN, PLAIN_BS,
};

use crate::keep::Keep;
use crate::proto::*;
use crate::Error;

/// Content and name crypto done by a [`Keep`] that derived the overlay's
/// keys itself; this process never sees them.
pub struct KeepKeyHolder {
    keep: Arc<dyn Keep>,
    overhead: usize,
    blocks_per_request: usize,
}

impl KeepKeyHolder {
    /// A holder for content algorithm `alg` served by `keep`.
    pub fn new(keep: Arc<dyn Keep>, alg: ContentAlg) -> Result<KeepKeyHolder, Error> {
        let overhead = match alg {
            ContentAlg::XChaCha20Poly1305 => 24 + 16,
            ContentAlg::AesGcm | ContentAlg::AesSiv => 16 + 16,
        };
        let slot = keep.slot_len();
        let blocks_per_request =
            slot.saturating_sub(OVERLAY_HEADER_LEN + COPY_ALIGN) / (PLAIN_BS + overhead);
        if blocks_per_request == 0 {
            return Err(Error::BadRequest(format!(
                "the keep's {slot}-byte slots cannot hold one content block"
            )));
        }
        Ok(KeepKeyHolder {
            keep,
            overhead,
            blocks_per_request,
        })
    }

    /// One request: `head` then `input` into a slot, answer (at most
    /// `out.len()` bytes) copied to `out`; returns its length.
    fn request(
        &self,
        op: u32,
        arg: u64,
        head: &[u8],
        input: &[u8],
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let in_len = head.len() + input.len();
        let cap = in_len.max(out.len());
        let mut answered = 0;
        self.keep.with_slot(&mut |slot| {
            let b = slot.buf();
            if b.len() < cap {
                return Err(Error::BadRequest(format!(
                    "{} of {cap} bytes does not fit a {}-byte slot",
                    op_name(op),
                    b.len()
                )));
            }
            b[..head.len()].copy_from_slice(head);
            b[head.len()..in_len].copy_from_slice(input);
            let n = slot.call_cap(op, arg, 0, cap, in_len)?;
            if n > out.len() {
                return Err(Error::BadRequest(format!(
                    "the keep answered {n} bytes for a {}-byte {}",
                    out.len(),
                    op_name(op)
                )));
            }
            out[..n].copy_from_slice(&slot.buf()[..n]);
            answered = n;
            Ok(())
        })?;
        Ok(answered)
    }

    /// The block of `ciphertext` (a run starting at `first`) that fails to
    /// open, found one block at a time after the run as a whole failed.
    fn failing_block(&self, first: u64, head: &[u8], ciphertext: &[u8]) -> OverlayError {
        let mut out = vec![0u8; PLAIN_BS];
        for (i, c) in ciphertext.chunks(PLAIN_BS + self.overhead).enumerate() {
            match self.request(OP_OVERLAY_OPEN, first + i as u64, head, c, &mut out) {
                Ok(_) => continue,
                Err(Error::Refused { status, .. }) if status == STATUS_FAILED => {
                    return auth(Some(first + i as u64))
                }
                Err(e) => return holder_err(e),
            }
        }
        auth(None)
    }
}

fn auth(block: Option<u64>) -> OverlayError {
    OverlayError::Auth { path: None, block }
}

fn holder_err(e: Error) -> OverlayError {
    OverlayError::KeyHolder(e.to_string())
}

/// The request header: file ID and whether the blocks are bound to it.
fn overlay_header(file_id: Option<&FileId>) -> [u8; OVERLAY_HEADER_LEN] {
    let mut h = [0u8; OVERLAY_HEADER_LEN];
    if let Some(id) = file_id {
        h[..16].copy_from_slice(id);
        h[16] = 1;
    }
    h
}

impl KeyHolder for KeepKeyHolder {
    fn seal_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<(), OverlayError> {
        let nblocks = plaintext.len().div_ceil(PLAIN_BS);
        if nblocks == 0 || out.len() != plaintext.len() + nblocks * self.overhead {
            return Err(OverlayError::InvalidArgument(format!(
                "{} bytes of plaintext do not seal into {} bytes",
                plaintext.len(),
                out.len()
            )));
        }
        let head = overlay_header(file_id);
        let mut pos = 0;
        let mut block = first_block;
        for part in plaintext.chunks(self.blocks_per_request * PLAIN_BS) {
            let blocks = part.len().div_ceil(PLAIN_BS);
            let len = part.len() + blocks * self.overhead;
            let o = &mut out[pos..pos + len];
            let n = self
                .request(OP_OVERLAY_SEAL, block, &head, part, o)
                .map_err(holder_err)?;
            if n != len {
                return Err(OverlayError::KeyHolder(format!(
                    "the keep sealed {} plaintext bytes into {n} bytes, expected {len}",
                    part.len()
                )));
            }
            pos += len;
            block += blocks as u64;
        }
        Ok(())
    }

    fn open_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize, OverlayError> {
        let head = overlay_header(file_id);
        let cbs = PLAIN_BS + self.overhead;
        let mut pos = 0;
        let mut block = first_block;
        for part in ciphertext.chunks(self.blocks_per_request * cbs) {
            let blocks = part.len().div_ceil(cbs);
            let last = part.len() % cbs;
            let room = part.len() / cbs * PLAIN_BS + last.saturating_sub(self.overhead);
            let have = out.len();
            let o = out.get_mut(pos..pos + room).ok_or_else(|| {
                OverlayError::InvalidArgument(format!(
                    "{have}-byte buffer for {} cipher blocks",
                    ciphertext.len().div_ceil(cbs)
                ))
            })?;
            match self.request(OP_OVERLAY_OPEN, block, &head, part, o) {
                Ok(n) => pos += n,
                Err(Error::Refused { status, .. }) if status == STATUS_FAILED => {
                    return Err(self.failing_block(block, &head, part))
                }
                Err(e) => return Err(holder_err(e)),
            }
            block += blocks as u64;
        }
        Ok(pos)
    }

    fn seal_max(&self, prefix_len: usize) -> usize {
        // The sealed blocks (each PLAIN_BS + overhead) after the prefix, in
        // one slot, placed for the file offset; the request header sits
        // where the output starts.
        let room = self
            .keep
            .slot_len()
            .saturating_sub(prefix_len + OVERLAY_HEADER_LEN + COPY_ALIGN);
        room / (PLAIN_BS + self.overhead) * PLAIN_BS
    }

    fn seal_and_write(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        prefix: &[u8],
        plaintext: &[u8],
        file_off: u64,
        write: &mut dyn FnMut(&[u8]) -> Result<(), OverlayError>,
    ) -> Result<(), OverlayError> {
        let blocks = plaintext.len().div_ceil(PLAIN_BS);
        if blocks == 0 || plaintext.len() > self.seal_max(prefix.len()) {
            return Err(OverlayError::InvalidArgument(format!(
                "{} bytes of plaintext after a {}-byte prefix do not fit one request",
                plaintext.len(),
                prefix.len()
            )));
        }
        let head = overlay_header(file_id);
        let (p, h) = (prefix.len(), head.len());
        let sealed = plaintext.len() + blocks * self.overhead;
        let mut local: Option<OverlayError> = None;
        let r = self.keep.with_slot(&mut |slot| {
            let b = slot.buf();
            // The bytes written from the slot start at `at`, placed for
            // their file offset (seal_max left the room).
            let at = file_aligned_start(b.as_ptr() as usize, file_off);
            let b = &mut b[at..];
            b[..p].copy_from_slice(prefix);
            b[p..p + h].copy_from_slice(&head);
            b[p + h..p + h + plaintext.len()].copy_from_slice(plaintext);
            let in_len = h + plaintext.len();
            let n = slot.call_cap(
                OP_OVERLAY_SEAL,
                first_block,
                at + p,
                in_len.max(sealed),
                in_len,
            )?;
            if n != sealed {
                local = Some(OverlayError::KeyHolder(format!(
                    "the keep sealed {} plaintext bytes into {n} bytes, expected {sealed}",
                    plaintext.len()
                )));
                return Ok(());
            }
            if let Err(e) = write(&slot.buf()[at..at + p + n]) {
                local = Some(e);
            }
            Ok(())
        });
        if let Some(e) = local {
            return Err(e);
        }
        r.map_err(holder_err)
    }

    fn read_open_max(&self) -> usize {
        self.blocks_per_request * (PLAIN_BS + self.overhead)
    }

    fn read_and_open(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        clen: usize,
        file_off: u64,
        read: &mut dyn FnMut(&mut [u8]) -> Result<usize, OverlayError>,
        out: &mut [u8],
    ) -> Result<usize, OverlayError> {
        if clen > self.read_open_max() {
            return Err(OverlayError::InvalidArgument(format!(
                "{clen} bytes of ciphertext do not fit one request"
            )));
        }
        let head = overlay_header(file_id);
        let h = head.len();
        // What went wrong on this side (the read, the answer's size) travels
        // out of the lease as it is.
        let mut local: Option<OverlayError> = None;
        let mut answered = 0;
        let mut got = 0;
        let r = self.keep.with_slot(&mut |slot| {
            let b = slot.buf();
            // The request starts at `at`, so the ciphertext after its
            // header is placed for its file offset (read_open_max left
            // the room).
            let at = file_aligned_start(b.as_ptr() as usize + h, file_off);
            let b = &mut b[at..];
            got = match read(&mut b[h..h + clen]) {
                Ok(n) => n.min(clen),
                Err(e) => {
                    local = Some(e);
                    return Ok(());
                }
            };
            if got == 0 {
                return Ok(());
            }
            b[..h].copy_from_slice(&head);
            let cbs = PLAIN_BS + self.overhead;
            let room = got / cbs * PLAIN_BS + (got % cbs).saturating_sub(self.overhead);
            if room > out.len() {
                local = Some(OverlayError::InvalidArgument(format!(
                    "{}-byte buffer for {got} bytes of ciphertext",
                    out.len()
                )));
                return Ok(());
            }
            let in_len = h + got;
            let n = slot.call_cap(OP_OVERLAY_OPEN, first_block, at, in_len.max(room), in_len)?;
            if n > room {
                local = Some(OverlayError::KeyHolder(format!(
                    "the keep answered {n} bytes for {got} bytes of ciphertext"
                )));
                return Ok(());
            }
            out[..n].copy_from_slice(&slot.buf()[at..at + n]);
            answered = n;
            Ok(())
        });
        if let Some(e) = local {
            return Err(e);
        }
        match r {
            Ok(()) => Ok(answered),
            Err(Error::Refused { status, .. }) if status == STATUS_FAILED => {
                // Which block: read the ciphertext again (the slot now holds
                // whatever the keep left) and try block by block.
                let mut room = vec![0u8; got + COPY_ALIGN];
                let c = file_aligned(&mut room, file_off, got);
                let again = read(c)?.min(got);
                Err(self.failing_block(first_block, &head, &c[..again]))
            }
            Err(e) => Err(holder_err(e)),
        }
    }

    fn eme(&self, encrypt: bool, tweak: &[u8; 16], data: &mut [u8]) -> Result<(), OverlayError> {
        let op = if encrypt {
            OP_NAME_ENCRYPT
        } else {
            OP_NAME_DECRYPT
        };
        let input = data.to_vec();
        let n = self
            .request(op, 0, tweak, &input, data)
            .map_err(holder_err)?;
        if n != data.len() {
            return Err(OverlayError::KeyHolder(format!(
                "the keep answered {n} bytes for a {}-byte name",
                data.len()
            )));
        }
        Ok(())
    }

    fn eme_many(
        &self,
        encrypt: bool,
        names: &mut [(&[u8; 16], &mut [u8])],
    ) -> Result<(), OverlayError> {
        let op = if encrypt {
            OP_NAMES_ENCRYPT
        } else {
            OP_NAMES_DECRYPT
        };
        let room = self.keep.slot_len().saturating_sub(16);
        let mut rest = names;
        while !rest.is_empty() {
            let first: [u8; 16] = *rest[0].0;
            // As many names as fit one slot (at least one: a name is at
            // most 2 KiB, a slot holds a content block), each preceded by
            // its length, and by a switch to its tweak where that changes.
            let (mut k, mut used, mut names_len) = (0, 0, 0);
            let mut tweak = &first;
            while k < rest.len() {
                let (t, n) = (&rest[k].0, &rest[k].1);
                let switch = if *t != tweak { 2 + 16 } else { 0 };
                if k > 0 && used + switch + 2 + n.len() > room {
                    break;
                }
                used += switch + 2 + n.len();
                names_len += n.len();
                tweak = t;
                k += 1;
            }
            let (group, tail) = std::mem::take(&mut rest).split_at_mut(k);
            let mut input = Vec::with_capacity(used);
            let mut tweak = &first;
            for (t, n) in group.iter() {
                if *t != tweak {
                    input.extend_from_slice(&0u16.to_le_bytes());
                    input.extend_from_slice(&t[..]);
                    tweak = t;
                }
                let len = u16::try_from(n.len())
                    .ok()
                    .filter(|&l| l != 0)
                    .ok_or_else(|| {
                        OverlayError::InvalidArgument(format!("a {}-byte name", n.len()))
                    })?;
                input.extend_from_slice(&len.to_le_bytes());
                input.extend_from_slice(n);
            }
            let mut out = vec![0u8; names_len];
            let got = self
                .request(op, 0, &first, &input, &mut out)
                .map_err(holder_err)?;
            if got != out.len() {
                return Err(OverlayError::KeyHolder(format!(
                    "the keep answered {got} bytes for {} bytes of names",
                    out.len()
                )));
            }
            let mut pos = 0;
            for (_, n) in group.iter_mut() {
                let len = n.len();
                n.copy_from_slice(&out[pos..pos + len]);
                pos += len;
            }
            rest = tail;
        }
        Ok(())
    }
}
