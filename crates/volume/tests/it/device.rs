//! An engine over a [`BackingDevice`] (what an NBD export is to it) behaves
//! as one over a file: the same ciphertext, discards that read back as
//! zeros, flushes that reach the device.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cryptkeep_volume::{Backing, BackingDevice, Engine, InlineCrypt};

use crate::common::{self, cipher, random_key, Geo, TempDir};

/// A device in memory that counts its flushes.
#[derive(Debug)]
struct MemDevice {
    data: Mutex<Vec<u8>>,
    syncs: AtomicUsize,
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
    let dev = Arc::new(MemDevice {
        data: Mutex::new(vec![0; (G.data_offset + G.data_size) as usize]),
        syncs: AtomicUsize::new(0),
    });
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
    let small = Arc::new(MemDevice {
        data: Mutex::new(vec![0; 4096]),
        syncs: AtomicUsize::new(0),
    });
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
