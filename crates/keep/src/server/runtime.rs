//! The runtime keep: a keep with no volume and no file system, for
//! programs that want a key process to hash, seal, encrypt and sign for
//! them ([`crate::proto::RUNTIME_OPS`]: SHA-256 one-shot and streamed,
//! seal/unseal, AES-256-GCM, RSA-2048, a timed repeat of those, a fixed
//! greeting); nothing that touches a volume or a file system.

use super::{Prepared, ServerConfig};
use crate::keep::Failure;
use crate::ops::dispatch::Ops;
use crate::ops::seal::SealKey;
use crate::proto::*;
use crate::sha_stream::ShaSessions;
use crate::shm::Handler;

/// Runs a runtime keep: a random sealing key and message key made in
/// secret memory, RSA keys made there on request; serves [`RUNTIME_OPS`]
/// until the peer closes the channel. Call it from the main thread of the
/// process the spawner started; returns as [`super::run_volume`] does.
pub fn run_runtime(mut cfg: ServerConfig) -> Result<(), Failure> {
    let (control, lc_hooked) = super::start(&mut cfg)?;
    let prepared = prepare();
    crate::wipe::wipe_stack();
    super::serve(cfg, control, lc_hooked, prepared)
}

// Not inlined: key generation runs below run_runtime's frame.
#[inline(never)]
fn prepare() -> Prepared<RuntimeHandler> {
    super::activate_heap();
    Prepared {
        handler: RuntimeHandler::new(Ops::new(SealKey::random())),
        secret: None,
        facts: vec![
            ("keep", "runtime".to_string()),
            ("secret_mem", super::heap_kind().to_string()),
        ],
    }
}

/// Most repetitions one [`OP_REPEAT`] may ask for.
pub const MAX_REPEAT: u64 = 100_000;
/// A repeat stops early after this long (see `repeat`).
const REPEAT_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime keep's request handler: [`RUNTIME_OPS`]. Inputs are
/// hostile; failures are statuses, never panics.
pub struct RuntimeHandler {
    ops: Ops,
    sha: ShaSessions,
}

impl RuntimeHandler {
    /// A handler with the operation state `ops`.
    pub fn new(ops: Ops) -> RuntimeHandler {
        RuntimeHandler {
            ops,
            sha: ShaSessions::default(),
        }
    }

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

impl Handler for RuntimeHandler {
    fn handle(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        if in_len > buf.len() {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        match op {
            OP_NULL => Ok(0),
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
            // A constant: nothing of the input is read, nothing secret leaves.
            OP_HELLO => {
                let out = buf.get_mut(..HELLO_GREETING.len()).ok_or(STATUS_FAILED)?;
                out.copy_from_slice(HELLO_GREETING);
                Ok(HELLO_GREETING.len())
            }
            OP_SHA256 | OP_SEAL | OP_UNSEAL | OP_GCM_ENCRYPT | OP_GCM_DECRYPT | OP_RSA_GENERATE
            | OP_RSA_ENCRYPT | OP_RSA_DECRYPT | OP_RSA_SIGN => self.ops.handle(op, buf, in_len),
            _ => Err(STATUS_UNSUPPORTED),
        }
    }

    /// No: one timed-repeat request runs for up to its budget of seconds
    /// without a pause, which a real-time worker would run ahead of every
    /// ordinary thread.
    fn realtime_by_default(&self) -> bool {
        false
    }

    /// Floating: its measurements compare the keep's crypto with the host's, and
    /// a timed repeat should run wherever the scheduler finds room, as the
    /// host's does.
    fn placement(&self) -> crate::sched::Placement {
        crate::sched::Placement::Floating
    }
}
