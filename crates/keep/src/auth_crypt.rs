//! [`KeepAuthCrypt`]: the volume engine's [`AuthCrypt`] seam served by a
//! keep that holds an authenticated volume's key. Batches go to the keep
//! as [`proto::OP_SEAL_SECTORS`] / [`proto::OP_OPEN_SECTORS`] requests
//! (data, then tuples, then for open the failure bitmap; layout in
//! [`crate::proto`]) of as many sectors as fit one slot.

use std::sync::Arc;

use cryptkeep_volume::{AuthCrypt, Error as VolumeError, SectorFill};

use crate::crypt::volume_err;
use crate::keep::{Keep, SlotAccess};
use crate::{proto, Error};

/// Authenticated sector crypto done by a [`Keep`]; this process never sees
/// the key.
pub struct KeepAuthCrypt {
    keep: Arc<dyn Keep>,
    sector_size: usize,
    tuple_size: usize,
    /// Sectors per request: the most whose data, tuples and failure bitmap
    /// fit one request buffer.
    batch: usize,
}

impl KeepAuthCrypt {
    /// Authenticated sector crypto through `keep` (started for the same
    /// segment), for sectors of `sector_size` bytes with `tuple_size`-byte
    /// metadata tuples (`AuthSpec::tuple_bytes`). Fails if one sector and
    /// its tuple do not fit a request.
    pub fn new(
        keep: Arc<dyn Keep>,
        sector_size: usize,
        tuple_size: usize,
    ) -> Result<KeepAuthCrypt, VolumeError> {
        let room = if keep.slot_len() > 0 {
            keep.slot_len()
        } else {
            keep.max_request()
        };
        let batch = batch_sectors(room, sector_size, tuple_size);
        if sector_size == 0 || batch == 0 {
            return Err(VolumeError::Crypt(format!(
                "a {sector_size}-byte sector with its {tuple_size}-byte tuple does not fit the \
                 keep's {room}-byte requests"
            )));
        }
        Ok(KeepAuthCrypt {
            keep,
            sector_size,
            tuple_size,
            batch,
        })
    }

    /// Checks that `data` is whole sectors and `tuples` one tuple each;
    /// answers the sector count.
    fn sectors(&self, data: usize, tuples: usize) -> Result<usize, VolumeError> {
        let (ss, ts) = (self.sector_size, self.tuple_size);
        if !data.is_multiple_of(ss) || Some(tuples) != (data / ss).checked_mul(ts) {
            return Err(VolumeError::Crypt(format!(
                "{data} bytes of data and {tuples} bytes of tuples are not whole {ss}-byte \
                 sectors with a {ts}-byte tuple each"
            )));
        }
        Ok(data / ss)
    }

    /// One request: `io` first gets [`Stage::Fill`] with a buffer of `cap`
    /// bytes to write the input into (its first `in_len` bytes), then
    /// [`Stage::Take`] with the answer. Uses a shared slot of the keep when
    /// it has them (no extra copy).
    fn round(
        &self,
        op: u32,
        first: u64,
        in_len: usize,
        cap: usize,
        io: &mut dyn FnMut(Stage<'_>) -> Result<(), VolumeError>,
    ) -> Result<(), VolumeError> {
        let mut engine_err = None;
        let mut step = |stage: Stage<'_>| {
            io(stage).map_err(|e| {
                engine_err = Some(e);
                Error::BadRequest("the keep's answer was refused".into())
            })
        };
        let r = if self.keep.slot_len() >= cap {
            self.keep.with_slot(&mut |slot: &mut dyn SlotAccess| {
                step(Stage::Fill(&mut slot.buf()[..cap]))?;
                let n = slot.call_cap(op, first, 0, cap, in_len)?;
                step(Stage::Take(&slot.buf()[..n]))
            })
        } else {
            let mut buf = vec![0u8; cap];
            let r = step(Stage::Fill(&mut buf))
                .and_then(|()| self.keep.call(op, first, &mut buf, in_len))
                .and_then(|n| step(Stage::Take(&buf[..n])));
            // The buffer held plaintext; leave none of it in the heap.
            zeroize::Zeroize::zeroize(&mut buf);
            r
        };
        match (engine_err, r) {
            (Some(e), _) => Err(e),
            (None, Ok(())) => Ok(()),
            (None, Err(e)) => Err(volume_err(e)),
        }
    }
}

/// The two halves of a request (see [`KeepAuthCrypt::round`]).
enum Stage<'a> {
    /// Write the input here.
    Fill(&'a mut [u8]),
    /// The keep's answer.
    Take(&'a [u8]),
}

/// The most sectors of `sector_size` bytes whose data, tuples and
/// [`proto::OP_OPEN_SECTORS`] failure bitmap fit `room` bytes.
fn batch_sectors(room: usize, sector_size: usize, tuple_size: usize) -> usize {
    let Some(pair) = sector_size.checked_add(tuple_size).filter(|&p| p > 0) else {
        return 0;
    };
    let mut n = room / pair;
    while n > 0 && proto::open_reply_len(n, sector_size, tuple_size).is_none_or(|l| l > room) {
        n -= 1;
    }
    n
}

fn short_answer(op: u32, got: usize, want: usize) -> VolumeError {
    VolumeError::Crypt(format!(
        "the keep answered {got} bytes to a {} that needs {want}",
        proto::op_name(op)
    ))
}

impl AuthCrypt for KeepAuthCrypt {
    fn sector_size(&self) -> usize {
        self.sector_size
    }

    fn tuple_size(&self) -> usize {
        self.tuple_size
    }

    fn seal(&self, sector: u64, data: &mut [u8], tuples: &mut [u8]) -> Result<(), VolumeError> {
        self.seal_batches(sector, None, data, tuples)
    }

    fn seal_into(
        &self,
        sector: u64,
        src: &[u8],
        dst: &mut [u8],
        tuples: &mut [u8],
    ) -> Result<(), VolumeError> {
        if src.len() != dst.len() {
            return Err(VolumeError::Crypt(format!(
                "sealing {} bytes into {}",
                src.len(),
                dst.len()
            )));
        }
        self.seal_batches(sector, Some(src), dst, tuples)
    }

    fn open(&self, sector: u64, data: &mut [u8], tuples: &[u8]) -> Result<Vec<usize>, VolumeError> {
        self.sectors(data.len(), tuples.len())?;
        let (ss, ts) = (self.sector_size, self.tuple_size);
        // `data` is both the input and the output: keep the ciphertext
        // aside (the request buffers are filled from it batch by batch).
        let cipher = zeroize::Zeroizing::new(data.to_vec());
        self.open_batches(sector, data, &mut |i, d, t| {
            d.copy_from_slice(&cipher[i * ss..i * ss + d.len()]);
            t.copy_from_slice(&tuples[i * ts..i * ts + t.len()]);
            Ok(())
        })
    }

    fn open_from(
        &self,
        sector: u64,
        out: &mut [u8],
        fill: &mut SectorFill<'_>,
    ) -> Result<Vec<usize>, VolumeError> {
        if !out.len().is_multiple_of(self.sector_size) {
            return Err(VolumeError::Crypt(format!(
                "{} bytes are not whole {}-byte sectors",
                out.len(),
                self.sector_size
            )));
        }
        self.open_batches(sector, out, fill)
    }
}

impl KeepAuthCrypt {
    /// Seals `dst` in place, or `src` into `dst`, batch by batch.
    fn seal_batches(
        &self,
        sector: u64,
        src: Option<&[u8]>,
        dst: &mut [u8],
        tuples: &mut [u8],
    ) -> Result<(), VolumeError> {
        let n = self.sectors(dst.len(), tuples.len())?;
        let (ss, ts) = (self.sector_size, self.tuple_size);
        let op = proto::OP_SEAL_SECTORS;
        let mut done = 0;
        while done < n {
            let k = self.batch.min(n - done);
            let d = &mut dst[done * ss..(done + k) * ss];
            let t = &mut tuples[done * ts..(done + k) * ts];
            let from = src.map(|s| &s[done * ss..(done + k) * ss]);
            let len = k * (ss + ts);
            let (dl, tl) = (d.len(), t.len());
            self.round(op, sector + done as u64, len, len, &mut |stage| {
                match stage {
                    Stage::Fill(buf) => {
                        buf[..dl].copy_from_slice(from.unwrap_or(d));
                        buf[dl..dl + tl].fill(0);
                    }
                    Stage::Take(ans) => {
                        if ans.len() != len {
                            return Err(short_answer(op, ans.len(), len));
                        }
                        d.copy_from_slice(&ans[..dl]);
                        t.copy_from_slice(&ans[dl..]);
                    }
                }
                Ok(())
            })?;
            done += k;
        }
        Ok(())
    }

    /// Opens the sectors `fill` writes into the request buffer (batch by
    /// batch: `fill(first index, data, tuples)`), the plaintext into `out`.
    fn open_batches(
        &self,
        sector: u64,
        out: &mut [u8],
        fill: &mut SectorFill<'_>,
    ) -> Result<Vec<usize>, VolumeError> {
        let (ss, ts) = (self.sector_size, self.tuple_size);
        let n = out.len() / ss;
        let op = proto::OP_OPEN_SECTORS;
        let mut failed = Vec::new();
        let mut done = 0;
        while done < n {
            let k = self.batch.min(n - done);
            let d = &mut out[done * ss..(done + k) * ss];
            let len = k * (ss + ts);
            let reply = len + proto::open_bitmap_len(k);
            let dl = d.len();
            self.round(op, sector + done as u64, len, reply, &mut |stage| {
                let ans = match stage {
                    Stage::Fill(buf) => {
                        let (data, rest) = buf.split_at_mut(dl);
                        return fill(done, data, &mut rest[..len - dl]);
                    }
                    Stage::Take(ans) => ans,
                };
                if ans.len() != reply {
                    return Err(short_answer(op, ans.len(), reply));
                }
                let bitmap = &ans[len..];
                let flagged = |i: usize| bitmap[i / 8] & (1 << (i % 8)) != 0;
                if (k..bitmap.len() * 8).any(flagged) {
                    return Err(VolumeError::Crypt(
                        "the keep flagged sectors past the end of the request".into(),
                    ));
                }
                d.copy_from_slice(&ans[..dl]);
                for i in (0..k).filter(|&i| flagged(i)) {
                    // Never hand on what the keep may have left in a
                    // sector it flagged.
                    d[i * ss..(i + 1) * ss].fill(0);
                    failed.push(done + i);
                }
                Ok(())
            })?;
            done += k;
        }
        Ok(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::batch_sectors;
    use crate::proto::open_reply_len;

    #[test]
    fn batches_fit_data_tuples_and_bitmap() {
        for (room, ss, ts) in [
            (1 << 20, 4096, 28),
            (1 << 20, 512, 32),
            (4096 + 28, 4096, 28),
            (4096 + 29, 4096, 28),
            (8 * (512 + 16) + 1, 512, 16),
            (8 * (512 + 16), 512, 16),
        ] {
            let n = batch_sectors(room, ss, ts);
            assert!(
                open_reply_len(n, ss, ts).unwrap() <= room,
                "{room} {ss} {ts}"
            );
            assert!(
                open_reply_len(n + 1, ss, ts).unwrap() > room,
                "{room} {ss} {ts}: {n} is not the most"
            );
        }
        assert_eq!(batch_sectors(4096 + 28, 4096, 28), 0);
        assert_eq!(batch_sectors(4096 + 29, 4096, 28), 1);
        assert_eq!(batch_sectors(8 * (512 + 16) + 1, 512, 16), 8);
        assert_eq!(batch_sectors(8 * (512 + 16), 512, 16), 7);
        assert_eq!(batch_sectors(1 << 20, 0, 0), 0);
    }
}
