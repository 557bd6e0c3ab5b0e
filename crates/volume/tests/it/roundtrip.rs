//! Random reads and writes through the engine agree with a plaintext model,
//! and never touch the backing store outside the data segment.

use crate::common::*;

fn model_roundtrip(sector_size: usize, seed: u64) {
    let dir = TempDir::new("roundtrip");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = Geo {
        sector_size,
        iv_tweak: 0,
        data_offset: 8192,
        data_size: 3 << 20,
        trailer: 4096,
    };
    let eng = engine(&path, &key, g, false, 0xEE);
    let size = g.data_size as usize;
    // Start from a known plaintext: the whole volume written once.
    let mut rng = Rng(seed);
    let mut model = vec![0u8; size];
    rng.fill(&mut model);
    assert_eq!(eng.write_at(&model, 0).unwrap(), size);
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..400 {
        // Mostly small unaligned requests, some large ones that get split.
        let max = if i % 5 == 0 {
            1 << 20
        } else {
            3 * sector_size as u64
        };
        let len = 1 + rng.below(max) as usize;
        let off = rng.below((size - len) as u64 + 1) as usize;
        if rng.below(2) == 0 {
            rng.fill(&mut buf[..len]);
            assert_eq!(eng.write_at(&buf[..len], off as u64).unwrap(), len);
            model[off..off + len].copy_from_slice(&buf[..len]);
        } else {
            assert_eq!(eng.read_at(&mut buf[..len], off as u64).unwrap(), len);
            assert!(
                buf[..len] == model[off..off + len],
                "read of {len} bytes at {off} differs from the model (request {i})"
            );
        }
    }
    let mut all = vec![0u8; size];
    assert_eq!(eng.read_at(&mut all, 0).unwrap(), size);
    assert!(all == model, "final full read differs from the model");
    // Reopen: what was written is durable in the file, not in a cache.
    eng.flush().unwrap();
    drop(eng);
    let eng = open(&path, &key, g, true);
    let mut again = vec![0u8; size];
    eng.read_at(&mut again, 0).unwrap();
    assert!(again == model, "reopened volume differs from the model");
    // Header and trailer bytes are untouched.
    let raw = read_file(&path);
    assert!(raw[..g.data_offset as usize].iter().all(|&b| b == 0xEE));
    assert!(raw[g.data_offset as usize + size..]
        .iter()
        .all(|&b| b == 0xEE));
    // And the segment is not stored in clear.
    assert!(raw[g.data_offset as usize..][..size] != model[..]);
}

#[test]
fn roundtrip_512_byte_sectors() {
    model_roundtrip(512, 0x1234_5678_9abc_def1);
}

#[test]
fn roundtrip_4096_byte_sectors() {
    model_roundtrip(4096, 0x0fed_cba9_8765_4321);
}

#[test]
fn read_stops_short_at_the_end() {
    let dir = TempDir::new("short");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = Geo {
        sector_size: 4096,
        iv_tweak: 0,
        data_offset: 0,
        data_size: 64 * 1024,
        trailer: 0,
    };
    let eng = engine(&path, &key, g, false, 0);
    let data: Vec<u8> = (0..g.data_size).map(|i| (i * 7 % 251) as u8).collect();
    eng.write_at(&data, 0).unwrap();
    let mut buf = vec![0u8; 10_000];
    let n = eng.read_at(&mut buf, g.data_size - 1000).unwrap();
    assert_eq!(n, 1000);
    assert_eq!(buf[..n], data[data.len() - 1000..]);
    assert_eq!(eng.read_at(&mut buf, g.data_size).unwrap(), 0);
    assert_eq!(eng.read_at(&mut buf, g.data_size + 5).unwrap(), 0);
}
