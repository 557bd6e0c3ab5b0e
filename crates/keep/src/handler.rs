//! [`KeepHandler`]: what a keep does with each request from the rings —
//! sector crypto with the volume's cipher, streaming SHA-256, and the
//! enclave-style operations of [`crate::ops`]. Every input comes from a
//! possibly compromised I/O process: lengths are checked, failures become a
//! status code for that request only, and nothing panics.

use cryptkeep_overlay::HeldKeys;
use cryptkeep_volume::{InlineCrypt, SectorCrypt};

use crate::ops::dispatch::Ops;
use crate::proto::*;
use crate::sha_stream::ShaSessions;
use crate::shm::Handler;

/// The request handler running inside a keep.
pub struct KeepHandler {
    sectors: Option<InlineCrypt>,
    overlay: Option<HeldKeys>,
    ops: Ops,
    sha: ShaSessions,
}

impl KeepHandler {
    /// A handler with the volume's sector cipher (`None` for a keep that
    /// holds no volume) and the keep's operation state.
    pub fn new(sectors: Option<InlineCrypt>, ops: Ops) -> KeepHandler {
        KeepHandler {
            sectors,
            overlay: None,
            ops,
            sha: ShaSessions::default(),
        }
    }

    /// Also serves the overlay file system's content and name crypto with
    /// `keys` (`fs mount --keep`).
    pub fn with_overlay(mut self, keys: HeldKeys) -> KeepHandler {
        self.overlay = Some(keys);
        self
    }

    fn sector_op(&self, op: u32, first: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        let s = self.sectors.as_ref().ok_or(STATUS_UNSUPPORTED)?;
        if in_len > buf.len() || !in_len.is_multiple_of(s.sector_size()) {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let data = &mut buf[..in_len];
        let r = if op == OP_ENCRYPT_SECTORS {
            s.encrypt(first, data)
        } else {
            s.decrypt(first, data)
        };
        r.map(|_| in_len).map_err(|_| STATUS_FAILED)
    }
}

impl Handler for KeepHandler {
    fn handle(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        if in_len > buf.len() {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        match op {
            OP_NULL => Ok(0),
            OP_ENCRYPT_SECTORS | OP_DECRYPT_SECTORS => self.sector_op(op, arg, buf, in_len),
            OP_SHA256_BEGIN => {
                let h = self.sha.begin().ok_or(STATUS_FAILED)?;
                if buf.len() < 8 {
                    self.sha.finish(h);
                    return Err(STATUS_FAILED);
                }
                buf[..8].copy_from_slice(&h.to_le_bytes());
                Ok(8)
            }
            OP_SHA256_UPDATE => {
                if self.sha.update(arg, &buf[..in_len]) {
                    Ok(0)
                } else {
                    Err(STATUS_FAILED)
                }
            }
            OP_SHA256_FINISH => {
                if buf.len() < 32 {
                    return Err(STATUS_FAILED);
                }
                let d = self.sha.finish(arg).ok_or(STATUS_FAILED)?;
                buf[..32].copy_from_slice(&d);
                Ok(32)
            }
            OP_REPEAT => self.repeat(arg, buf, in_len),
            OP_OVERLAY_SEAL | OP_OVERLAY_OPEN | OP_NAME_ENCRYPT | OP_NAME_DECRYPT
            | OP_NAMES_ENCRYPT | OP_NAMES_DECRYPT => {
                let keys = self.overlay.as_ref().ok_or(STATUS_UNSUPPORTED)?;
                crate::ops::overlay::handle(keys, op, arg, buf, in_len)
            }
            _ => self.ops.handle(op, buf, in_len),
        }
    }
}

/// Most repetitions one [`OP_REPEAT`] may ask for.
pub const MAX_REPEAT: u64 = 100_000;
/// A repeat stops early after this long (see `repeat`).
const REPEAT_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

impl KeepHandler {
    /// [`OP_REPEAT`]: runs the inner operation `count` times on fresh copies
    /// of its input; answers the elapsed nanoseconds (u64 LE) and the number
    /// of repetitions done (u64 LE), which is less than `count` only when
    /// the time budget ran out.
    fn repeat(&self, count: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        if in_len < 4 || buf.len() < 16 || count == 0 || count > MAX_REPEAT {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let inner = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if inner == OP_REPEAT {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let input = buf[4..in_len].to_vec();
        let mut work = vec![0u8; buf.len() - 4];
        let start = std::time::Instant::now();
        let mut done = 0u64;
        while done < count {
            work[..input.len()].copy_from_slice(&input);
            self.handle(inner, done, &mut work, input.len())?;
            done += 1;
            if start.elapsed() > REPEAT_BUDGET {
                break;
            }
        }
        let ns = start.elapsed().as_nanos() as u64;
        buf[..8].copy_from_slice(&ns.to_le_bytes());
        buf[8..16].copy_from_slice(&done.to_le_bytes());
        Ok(16)
    }
}
