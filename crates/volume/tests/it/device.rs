//! An engine over a [`BackingDevice`] (what an NBD export is to it) behaves
//! as one over a file: the same ciphertext, discards that read back as
//! zeros, flushes that reach the device, and the device's own allocation
//! map as the volume's in whole sectors.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cryptkeep_volume::{Backing, BackingDevice, BlockStore, Engine, Extent, InlineCrypt};

use crate::common::{self, cipher, random_key, Geo, TempDir};

/// A device in memory that counts its flushes and, with a `map`, tells
/// its allocation.
#[derive(Debug)]
struct MemDevice {
    data: Mutex<Vec<u8>>,
    syncs: AtomicUsize,
    map: Option<DeviceMap>,
}

/// What a device tells of its allocation.
#[derive(Debug)]
struct DeviceMap {
    /// Runs from byte 0 to the end: (start, end, hole, zero).
    runs: Vec<(u64, u64, bool, bool)>,
    /// The most bytes one answer covers (a server may answer short).
    answer: u64,
}

impl MemDevice {
    fn new(len: u64, map: Option<DeviceMap>) -> MemDevice {
        MemDevice {
            data: Mutex::new(vec![0; len as usize]),
            syncs: AtomicUsize::new(0),
            map,
        }
    }
}

impl BackingDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let d = self.data.lock().unwrap();
        let p = pos as usize;
        buf.copy_from_slice(
            d.get(p..p + buf.len())
                .ok_or(io::ErrorKind::UnexpectedEof)?,
        );
        Ok(())
    }
    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        let mut d = self.data.lock().unwrap();
        let p = pos as usize;
        d.get_mut(p..p + buf.len())
            .ok_or(io::ErrorKind::WriteZero)?
            .copy_from_slice(buf);
        Ok(())
    }
    fn discard(&self, pos: u64, len: u64) -> io::Result<()> {
        let mut d = self.data.lock().unwrap();
        d[pos as usize..(pos + len) as usize].fill(0);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.data.lock().unwrap().len() as u64)
    }
    fn allocation(&self, pos: u64, len: u64) -> io::Result<Option<Vec<Extent>>> {
        let Some(m) = &self.map else {
            return Ok(None);
        };
        let end = pos + len.min(m.answer);
        let out = m
            .runs
            .iter()
            .filter(|r| r.1 > pos && r.0 < end)
            .map(|&(s, e, hole, zero)| Extent {
                len: e.min(end) - s.max(pos),
                hole,
                zero,
            })
            .collect();
        Ok(Some(out))
    }
}

const G: Geo = Geo {
    sector_size: 4096,
    iv_tweak: 0,
    data_offset: 8192,
    data_size: 1 << 20,
    trailer: 0,
};

#[test]
fn a_device_holds_the_same_ciphertext_as_a_file() {
    let dir = TempDir::new("device");
    let key = random_key(64);
    let file_engine = common::engine(&dir.path().join("img"), &key, G, false, 0);
    let dev = Arc::new(MemDevice::new(G.data_offset + G.data_size, None));
    let crypt = Arc::new(InlineCrypt::new(cipher(&key), G.sector_size, G.iv_tweak));
    let backing = Backing::Device(dev.clone() as Arc<dyn BackingDevice>);
    let eng = Engine::new(backing, G.data_offset, G.data_size, crypt, false).unwrap();
    assert!(!eng.direct_reads());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for e in [&file_engine, &eng] {
        e.write_at(&data, 777).unwrap();
        e.flush().unwrap();
    }
    assert_eq!(dev.syncs.load(Ordering::Relaxed), 1);
    let on_file = common::read_file(&dir.path().join("img"));
    assert_eq!(*dev.data.lock().unwrap(), on_file);
    let mut back = vec![0; data.len()];
    eng.read_at(&mut back, 777).unwrap();
    assert_eq!(back, data);
    // Discards go to the device and read back as zeros.
    eng.set_holes_read_as_zero(true);
    eng.discard(0, 65536).unwrap();
    let mut z = vec![1; 65536];
    eng.read_at(&mut z, 0).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    // Too small a device is refused as a truncated image.
    let small = Arc::new(MemDevice::new(4096, None));
    let crypt = Arc::new(InlineCrypt::new(cipher(&key), G.sector_size, G.iv_tweak));
    let e = Engine::new(
        Backing::Device(small as Arc<dyn BackingDevice>),
        G.data_offset,
        G.data_size,
        crypt,
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}

/// An engine over `dev` with geometry `G`.
fn engine_over(dev: Arc<MemDevice>) -> Engine {
    let key = random_key(64);
    let crypt = Arc::new(InlineCrypt::new(cipher(&key), G.sector_size, G.iv_tweak));
    let backing = Backing::Device(dev as Arc<dyn BackingDevice>);
    Engine::new(backing, G.data_offset, G.data_size, crypt, false).unwrap()
}

fn ext(len: u64, hole: bool, zero: bool) -> Extent {
    Extent { len, hole, zero }
}

#[test]
fn the_device_allocation_map_is_the_volumes_in_whole_sectors() {
    let base = G.data_offset;
    let end = base + G.data_size;
    // In data-segment bytes: a zero hole over 2.4 sectors, data, one whole
    // sector of hole that does not promise zeros, data, a zero hole from
    // inside sector 4 to the end. The header area before is data.
    let runs = vec![
        (0, base, false, false),
        (base, base + 10_000, true, true),
        (base + 10_000, base + 12_288, false, false),
        (base + 12_288, base + 16_384, true, false),
        (base + 16_384, base + 20_000, false, false),
        (base + 20_000, end, true, true),
    ];
    let dev = Arc::new(MemDevice::new(
        end,
        Some(DeviceMap {
            runs: runs.clone(),
            answer: u64::MAX,
        }),
    ));
    let eng = engine_over(dev);
    // Holes count as zeros only once the engine reads them so.
    let m = eng.extents(0, G.data_size).unwrap();
    assert!(m.iter().all(|x| !x.zero), "{m:?}");
    eng.set_holes_read_as_zero(true);
    let m = eng.extents(0, G.data_size).unwrap();
    assert_eq!(
        m,
        vec![
            ext(8192, true, true),
            ext(4096, false, false),
            ext(4096, true, false),
            ext(4096, false, false),
            ext(G.data_size - 20_480, true, true),
        ]
    );
    // A query starting inside a sector, and one inside the data.
    let m = eng.extents(100, 12_188).unwrap();
    assert_eq!(m, vec![ext(8092, true, true), ext(4096, false, false)]);
    assert_eq!(
        eng.extents(9000, 100).unwrap(),
        vec![ext(100, false, false)]
    );
    assert_eq!(eng.extents(0, 100).unwrap(), vec![ext(100, true, true)]);

    // A device that answers short: the map ends where its answer does,
    // rounded up to a sector as data.
    let short = Arc::new(MemDevice::new(
        end,
        Some(DeviceMap {
            runs,
            answer: 10_000,
        }),
    ));
    let eng = engine_over(short);
    eng.set_holes_read_as_zero(true);
    assert_eq!(
        eng.extents(0, G.data_size).unwrap(),
        vec![ext(8192, true, true), ext(4096, false, false)]
    );
    // A sector that is a hole throughout, told as two runs with different
    // flags, is one hole (zero only where both parts promise zeros).
    let split = vec![
        (0, base, false, false),
        (base, base + 256, true, true),
        (base + 256, base + 4096, true, false),
        (base + 4096, end, false, false),
    ];
    let eng = engine_over(Arc::new(MemDevice::new(
        end,
        Some(DeviceMap {
            runs: split,
            answer: u64::MAX,
        }),
    )));
    eng.set_holes_read_as_zero(true);
    assert_eq!(
        eng.extents(0, G.data_size).unwrap(),
        vec![
            ext(4096, true, false),
            ext(G.data_size - 4096, false, false)
        ]
    );
    // A device that cannot tell: all data.
    let eng = engine_over(Arc::new(MemDevice::new(end, None)));
    assert_eq!(
        eng.extents(0, G.data_size).unwrap(),
        vec![ext(G.data_size, false, false)]
    );
}
