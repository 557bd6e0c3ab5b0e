//! The FUSE INIT negotiation: big requests, asynchronous direct I/O, many
//! requests in flight.
//!
//! Note: the loop driver's queue allows 128 segments, so with scattered
//! pages a 1 MiB direct I/O usually reaches the file as 512 KiB requests
//! (sometimes merged up to 1 MiB); `max_pages` is not the limit then.

use fuser::{InitFlags, KernelConfig};

use super::BlockFileTuning;

/// Asks the kernel for `tuning.max_io`-byte reads and writes (it grants at
/// most `max_pages` pages, 1 MiB by default), `FUSE_ASYNC_DIO` so a direct
/// I/O loop device keeps many requests in flight, and a background queue of
/// `tuning.max_background` requests. Whatever the kernel refuses is left at
/// the nearest value it accepts.
pub(crate) fn negotiate(config: &mut KernelConfig, tuning: &BlockFileTuning) {
    let max_io = tuning.max_io.max(4096);
    if let Err(nearest) = config.set_max_write(max_io) {
        let _ = config.set_max_write(nearest);
    }
    // fuser derives max_pages from max(max_write, max_readahead).
    if let Err(nearest) = config.set_max_readahead(max_io) {
        let _ = config.set_max_readahead(nearest);
    }
    let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
    let _ = config.set_max_background(tuning.max_background);
    let _ =
        config.set_congestion_threshold((u32::from(tuning.max_background) * 3 / 4).max(1) as u16);
}
