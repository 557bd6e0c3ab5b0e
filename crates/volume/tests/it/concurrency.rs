//! Concurrent writers on shared sectors: read-modify-write never loses a
//! neighbour's bytes, and whole-sector writers never leave a torn sector.

use crate::common::*;
use std::sync::Arc;

#[test]
fn concurrent_partial_writes_keep_every_writer_s_bytes() {
    const WRITERS: usize = 4;
    const ROUNDS: u8 = 12;
    let dir = TempDir::new("rmw");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let ss = 4096usize;
    let g = Geo {
        sector_size: ss,
        iv_tweak: 0,
        data_offset: 0,
        data_size: 64 * 4096,
        trailer: 0,
    };
    let eng = Arc::new(engine(&path, &key, g, false, 0));
    eng.write_at(&vec![0u8; g.data_size as usize], 0).unwrap();
    let sectors = g.data_size as usize / ss;
    let part = ss / WRITERS;
    // Writer w owns bytes [w*part, (w+1)*part) of every sector and rewrites
    // them with its round number: every write is a read-modify-write of a
    // sector the other writers are modifying at the same time.
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let eng = eng.clone();
            s.spawn(move || {
                for round in 1..=ROUNDS {
                    let v = vec![round ^ (w as u8 * 0x40); part];
                    for k in 0..sectors {
                        let off = (k * ss + w * part) as u64;
                        eng.write_at(&v, off).unwrap();
                    }
                }
            });
        }
    });
    let mut all = vec![0u8; g.data_size as usize];
    eng.read_at(&mut all, 0).unwrap();
    for k in 0..sectors {
        for w in 0..WRITERS {
            let want = ROUNDS ^ (w as u8 * 0x40);
            let got = &all[k * ss + w * part..][..part];
            assert!(
                got.iter().all(|&b| b == want),
                "sector {k}: writer {w}'s last round was lost (read-modify-write race)"
            );
        }
    }
}

#[test]
fn concurrent_overlapping_writes_leave_whole_versions() {
    const WRITERS: usize = 3;
    let dir = TempDir::new("overlap");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let ss = 512usize;
    let g = Geo {
        sector_size: ss,
        iv_tweak: 9,
        data_offset: 4096,
        data_size: 1 << 20,
        trailer: 0,
    };
    let eng = Arc::new(engine(&path, &key, g, false, 0));
    let size = g.data_size as usize;
    eng.write_at(&vec![0u8; size], 0).unwrap();
    // Each write fills sector-aligned ranges (some large enough to be split
    // over the cores) with one byte value per write: (writer, round).
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let eng = eng.clone();
            s.spawn(move || {
                let mut rng = Rng(0x9999 + w as u64);
                for round in 0..60u8 {
                    let len = (1 + rng.below(600) as usize) * ss;
                    let off = rng.below(((size - len) / ss + 1) as u64) as usize * ss;
                    let tag = 1 + (w as u8) * 64 + round;
                    eng.write_at(&vec![tag; len], off as u64).unwrap();
                }
            });
        }
    });
    let mut all = vec![0u8; size];
    eng.read_at(&mut all, 0).unwrap();
    for (k, sector) in all.chunks(ss).enumerate() {
        assert!(
            sector.iter().all(|&b| b == sector[0]),
            "sector {k} mixes two writes: {:?}..",
            &sector[..8]
        );
    }
}
