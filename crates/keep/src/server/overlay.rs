//! The overlay keep: holds a gocryptfs file system's content and name keys
//! and answers block sealing/opening and name encryption with them
//! ([`crate::proto::OVERLAY_OPS`]), nothing else.

use cryptkeep_crypto::Backend;
use cryptkeep_overlay::{Config, HeldKeys, MasterKey};

use super::{Facts, Prepared, ServerConfig};
use crate::keep::Failure;
use crate::proto::*;
use crate::shm::Handler;

/// The bytes of an overlay keep's slots: a whole FUSE request (1 MiB of
/// plaintext, 256 blocks) as ciphertext (at most 256 × (4096 + 40)
/// bytes), with room for the request headers of the pieces it is read in.
/// With 1 MiB slots, as a volume keep has, a 1 MiB read or write could not
/// go to the keep in place and took two extra copies.
pub const OVERLAY_SLOT_BYTES: usize = (1 << 20) + (64 << 10);

/// What the host's unlock step hands the overlay keep: the unwrapped
/// master key (wiped once the keep has derived its keys from it) and the
/// file system's configuration (feature flags, content cipher).
pub struct OverlayKey {
    /// The master key.
    pub master_key: MasterKey,
    /// The cipher directory's `gocryptfs.conf`.
    pub config: Config,
    /// Which implementation of the ciphers to use.
    pub backend: Backend,
    /// The cipher directory, for messages.
    pub place: String,
    /// Facts for READY and the log (`unlocked`, ...).
    pub facts: Facts,
}

/// Runs an overlay keep: `unlock` (the host's: read the password, run
/// scrypt, unwrap the master key) gives the master key; the keep derives
/// the content and name keys in secret memory and serves [`OVERLAY_OPS`]
/// until its peer closes the channel. Call it from the main thread of the
/// process the spawner started; returns as [`super::run_volume`] does.
pub fn run_overlay(
    mut cfg: ServerConfig,
    unlock: impl FnOnce() -> Result<OverlayKey, Failure>,
) -> Result<(), Failure> {
    cfg.arena.slot_bytes = cfg.arena.slot_bytes.max(OVERLAY_SLOT_BYTES);
    let (control, lc_hooked) = super::start(&mut cfg)?;
    let prepared = match prepare(unlock) {
        Ok(p) => p,
        Err(f) => return Err(super::tell(&control, f)),
    };
    // As for a volume: scrypt, unwrapping and key setup ran below this
    // frame; wipe all of it and the vector registers.
    crate::wipe::wipe_stack();
    super::serve(cfg, control, lc_hooked, prepared)
}

// Not inlined: its frames (and the unlock's) must lie below run_overlay's,
// where wipe_stack wipes.
#[inline(never)]
fn prepare(
    unlock: impl FnOnce() -> Result<OverlayKey, Failure>,
) -> Result<Prepared<OverlayHandler>, Failure> {
    let k = unlock()?;
    super::activate_heap();
    let keys = HeldKeys::derive(&k.master_key, &k.config, k.backend).map_err(|e| Failure {
        code: super::EXIT_KEEP,
        what: e.to_string(),
        place: k.place.clone(),
        hint: "check the file system's gocryptfs.conf".into(),
    })?;
    let OverlayKey {
        master_key, facts, ..
    } = k;
    drop(master_key);
    let mut all = vec![
        ("keep", "overlay".to_string()),
        ("secret_mem", super::heap_kind().to_string()),
    ];
    all.extend(facts);
    Ok(Prepared {
        handler: OverlayHandler::new(keys),
        secret: None,
        facts: all,
    })
}

/// The overlay keep's request handler: [`OVERLAY_OPS`] with the file
/// system's keys (layouts in docs/format/keep-rings.md).
pub struct OverlayHandler {
    keys: HeldKeys,
}

impl OverlayHandler {
    /// A handler serving `keys`.
    pub fn new(keys: HeldKeys) -> OverlayHandler {
        OverlayHandler { keys }
    }
}

impl Handler for OverlayHandler {
    fn handle(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        match op {
            OP_NULL => Ok(0),
            OP_OVERLAY_SEAL | OP_OVERLAY_OPEN | OP_NAME_ENCRYPT | OP_NAME_DECRYPT
            | OP_NAMES_ENCRYPT | OP_NAMES_DECRYPT => {
                crate::ops::overlay::handle(&self.keys, op, arg, buf, in_len)
            }
            _ => Err(STATUS_UNSUPPORTED),
        }
    }

    /// 300 µs: a tar extract through `fs mount --keep` ran as fast as
    /// without the keep (1.00× where 50 µs gave 0.75×): between one
    /// file's requests the worker stays awake.
    fn idle_spin(&self) -> std::time::Duration {
        std::time::Duration::from_micros(300)
    }

    /// No, not for all of them ([`Handler::realtime_workers`] says which):
    /// a real-time worker sleeps almost as soon as its queues are empty,
    /// and the overlay's small requests then each pay a wake-up. On the
    /// 83 731-entry kernel tree (`scripts/bench-fs.sh`, five interleaved
    /// runs) real-time workers made `fs mount --keep` take 1.22× the time
    /// of `fs mount` for the extract and 1.15× for `du` and the delete.
    fn realtime_by_default(&self) -> bool {
        false
    }

    /// The pinned ones: they take the streams' megabyte requests, whose
    /// callers sleep until they are done, and a woken real-time worker
    /// runs at once even on a busy machine; the daemon also sends them
    /// small requests while the floating workers answer slowly
    /// (`rings/client.rs`: a busy machine).
    fn realtime_workers(&self) -> crate::sched::RealtimeDefault {
        crate::sched::RealtimeDefault::Pinned
    }

    /// Mixed: pinned workers serve the streams' megabyte requests on the
    /// requester's CPU, and floating ones poll for the many small requests
    /// of a tar extract, which pinned workers served slower
    /// (docs/guide/performance.md).
    fn placement(&self) -> crate::sched::Placement {
        crate::sched::Placement::Mixed
    }
}
