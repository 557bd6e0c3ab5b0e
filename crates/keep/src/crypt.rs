//! [`KeepCrypt`]: the volume engine's [`SectorCrypt`] seam served by a keep.
//! The engine's batches go to the keep as [`proto::OP_ENCRYPT_SECTORS`] /
//! [`proto::OP_DECRYPT_SECTORS`] requests of at most the transport's slot
//! size; the keep applies dm-crypt's IV rule (sector × sector_size/512 +
//! iv_tweak) itself, since it holds the whole sector cipher.

use std::sync::Arc;

use std::ops::Range;

use cryptkeep_volume::{Error as VolumeError, SectorCrypt, Staging};

use crate::keep::{Keep, SlotAccess};
use crate::{proto, Error};

/// Sector crypto done by a [`Keep`]; this process never sees the key.
pub struct KeepCrypt {
    keep: Arc<dyn Keep>,
    sector_size: usize,
}

impl KeepCrypt {
    /// Sector crypto through `keep`, for sectors of `sector_size` bytes (the
    /// keep was unlocked for the same segment).
    pub fn new(keep: Arc<dyn Keep>, sector_size: usize) -> KeepCrypt {
        KeepCrypt { keep, sector_size }
    }

    fn run(&self, op: u32, sector: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        let ss = self.sector_size;
        if ss == 0 || !buf.len().is_multiple_of(ss) {
            return Err(VolumeError::Crypt(format!(
                "buffer of {} bytes is not a whole number of {ss}-byte sectors",
                buf.len()
            )));
        }
        let chunk = (self.keep.max_request() / ss).max(1) * ss;
        let mut first = sector;
        for part in buf.chunks_mut(chunk) {
            let len = part.len();
            match self.keep.call(op, first, part, len) {
                Ok(n) if n == len => {}
                Ok(n) => {
                    return Err(VolumeError::Crypt(format!(
                        "the keep answered {n} bytes for a {len}-byte {}",
                        proto::op_name(op)
                    )))
                }
                Err(e) => return Err(volume_err(e)),
            }
            first += (len / ss) as u64;
        }
        Ok(())
    }
}

impl SectorCrypt for KeepCrypt {
    fn sector_size(&self) -> usize {
        self.sector_size
    }

    fn staging_len(&self) -> usize {
        self.keep.slot_len() / self.sector_size.max(1) * self.sector_size
    }

    fn with_staging(
        &self,
        f: &mut dyn FnMut(&mut dyn Staging) -> Result<(), VolumeError>,
    ) -> Result<(), VolumeError> {
        // The engine's own error (a failed pread, say) travels out of the
        // lease untouched; only keep errors are mapped.
        let mut engine_err = None;
        let r = self.keep.with_slot(&mut |slot: &mut dyn SlotAccess| {
            let mut st = KeepStaging {
                slot,
                sector_size: self.sector_size,
            };
            f(&mut st).map_err(|e| {
                engine_err = Some(e);
                Error::BadRequest("staged request failed".into())
            })
        });
        match (engine_err, r) {
            (Some(e), _) => Err(e),
            (None, Ok(())) => Ok(()),
            (None, Err(e)) => Err(volume_err(e)),
        }
    }

    fn encrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.run(proto::OP_ENCRYPT_SECTORS, sector, buf)
    }

    fn decrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.run(proto::OP_DECRYPT_SECTORS, sector, buf)
    }
}

/// A keep error as the volume engine sees it: a gone keep is
/// [`VolumeError::KeepGone`], anything else a crypto failure.
pub(crate) fn volume_err(e: Error) -> VolumeError {
    match e {
        Error::Gone => VolumeError::KeepGone,
        e => VolumeError::Crypt(e.to_string()),
    }
}

/// A keep slot seen by the engine as a staging lease.
struct KeepStaging<'a> {
    slot: &'a mut dyn SlotAccess,
    sector_size: usize,
}

impl KeepStaging<'_> {
    fn run(&mut self, op: u32, sector: u64, r: Range<usize>) -> Result<(), VolumeError> {
        let len = r.len();
        if !len.is_multiple_of(self.sector_size) {
            return Err(VolumeError::Crypt(format!(
                "{len} bytes are not a whole number of {}-byte sectors",
                self.sector_size
            )));
        }
        match self.slot.call_at(op, sector, r.start, len) {
            Ok(n) if n == len => Ok(()),
            Ok(n) => Err(VolumeError::Crypt(format!(
                "the keep answered {n} bytes for a {len}-byte {}",
                proto::op_name(op)
            ))),
            Err(e) => Err(volume_err(e)),
        }
    }
}

impl Staging for KeepStaging<'_> {
    fn buf(&mut self) -> &mut [u8] {
        self.slot.buf()
    }

    fn encrypt(&mut self, sector: u64, range: Range<usize>) -> Result<(), VolumeError> {
        self.run(proto::OP_ENCRYPT_SECTORS, sector, range)
    }

    fn decrypt(&mut self, sector: u64, range: Range<usize>) -> Result<(), VolumeError> {
        self.run(proto::OP_DECRYPT_SECTORS, sector, range)
    }
}
