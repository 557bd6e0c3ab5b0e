//! Helpers of the server's unit tests: an in-memory duplex stream and a
//! store in memory.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cryptkeep_volume::{BlockStore, Error};

use super::{Export, Limits, Shape};

/// Reads from a fixed input, collects what is written.
pub(crate) struct Duplex {
    input: io::Cursor<Vec<u8>>,
    pub(crate) out: Vec<u8>,
}

impl Duplex {
    pub(crate) fn new(input: Vec<u8>) -> Duplex {
        Duplex {
            input: io::Cursor::new(input),
            out: Vec::new(),
        }
    }
}

impl Read for Duplex {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Duplex {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A 1 MiB export named "vol" with 512-byte blocks.
pub(crate) fn shape(read_only: bool) -> Shape {
    Shape {
        export: Export {
            name: "vol".into(),
            description: Some("a test volume".into()),
            read_only,
            allow_trim: true,
        },
        size: 1 << 20,
        min_block: 512,
        read_only,
        limits: Limits::default(),
        tls: None,
    }
}

/// A store in memory.
pub(crate) struct MemStore(pub(crate) Mutex<Vec<u8>>);

impl BlockStore for MemStore {
    fn size(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
    fn block_size(&self) -> usize {
        512
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let d = self.0.lock().unwrap();
        let o = offset as usize;
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(buf.len())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, Error> {
        let mut d = self.0.lock().unwrap();
        let o = offset as usize;
        d[o..o + data.len()].copy_from_slice(data);
        Ok(data.len())
    }
    fn flush(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// A store in memory that lends its reads (as the keep's slots are lent):
/// each read is handed to the server from a buffer of its own, which is
/// overwritten once the server gives it back.
pub(crate) struct LendingStore {
    pub(crate) mem: MemStore,
    /// Reads served by lending.
    pub(crate) lent: AtomicUsize,
    /// The longest a lend lasted, in microseconds (the server must not
    /// wait for the client while it holds one).
    pub(crate) longest_us: AtomicUsize,
}

impl BlockStore for LendingStore {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn block_size(&self) -> usize {
        512
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        self.mem.read_at(buf, offset)
    }
    fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), Error>> {
        let mut slot = vec![0u8; size];
        if let Err(e) = self.mem.read_at(&mut slot, offset) {
            return Some(Err(e));
        }
        let t = std::time::Instant::now();
        send(&slot);
        let us = t.elapsed().as_micros() as usize;
        self.longest_us.fetch_max(us, Ordering::Relaxed);
        // What the server did not send before this returned must have
        // been copied: the slot is reused at once.
        slot.fill(0xEE);
        self.lent.fetch_add(1, Ordering::Relaxed);
        Some(Ok(()))
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, Error> {
        self.mem.write_at(data, offset)
    }
    fn flush(&self) -> Result<(), Error> {
        Ok(())
    }
}
