//! `BlockStore::extents`: the allocation map of the data segment from the
//! backing file's holes, in whole sectors, zero only when holes read as
//! zeros.

use cryptkeep_volume::{BlockStore, Engine, Extent};

use crate::common::{open, random_key, Geo, TempDir};

const MIB: u64 = 1 << 20;

fn geo() -> Geo {
    Geo {
        sector_size: 4096,
        iv_tweak: 0,
        data_offset: MIB,
        data_size: 8 * MIB,
        trailer: 0,
    }
}

/// A volume on a sparse backing file (nothing allocated yet), in a
/// directory that lives as long as the first value.
fn sparse_volume(name: &str) -> (TempDir, Engine) {
    let dir = TempDir::new(name);
    let path = dir.join("vol.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(9 * MIB)
        .unwrap();
    let e = open(&path, &random_key(64), geo(), false);
    (dir, e)
}

#[test]
fn holes_of_the_backing_file_are_extents() {
    let (_dir, e) = sparse_volume("extents");
    let all = e.extents(0, 8 * MIB).unwrap();
    assert_eq!(
        all,
        vec![Extent {
            len: 8 * MIB,
            hole: true,
            zero: false
        }]
    );
    // Data at [2 MiB, 3 MiB); holes read as zeros from here on.
    e.write_at(&vec![7u8; MIB as usize], 2 * MIB).unwrap();
    BlockStore::allow_discards(&e);
    let m = e.extents(0, 8 * MIB).unwrap();
    assert_eq!(m.iter().map(|x| x.len).sum::<u64>(), 8 * MIB);
    let data: Vec<_> = m.iter().filter(|x| !x.hole).collect();
    assert_eq!(data.len(), 1);
    let before: u64 = m.iter().take_while(|x| x.hole).map(|x| x.len).sum();
    assert!(before <= 2 * MIB && before.is_multiple_of(4096), "{m:?}");
    assert!(data[0].len >= MIB);
    assert!(m.iter().filter(|x| x.hole).all(|x| x.zero));
    // A range inside the data, and one reaching past the end.
    let inner = e.extents(2 * MIB + 100, 1000).unwrap();
    assert_eq!(
        inner,
        vec![Extent {
            len: 1000,
            hole: false,
            zero: false
        }]
    );
    let tail = e.extents(7 * MIB, 4 * MIB).unwrap();
    assert_eq!(tail.iter().map(|x| x.len).sum::<u64>(), MIB);
}

/// The map of a file written throughout is asked part by part (answered
/// from the run found first), and a discard inside that run shows at once.
#[test]
fn a_discard_inside_a_known_data_run_shows_in_the_next_map() {
    let (_dir, e) = sparse_volume("extents-run");
    e.write_at(&vec![3u8; 8 * MIB as usize], 0).unwrap();
    let data = |len| Extent {
        len,
        hole: false,
        zero: false,
    };
    for part in 0..8 {
        assert_eq!(e.extents(part * MIB, MIB).unwrap(), vec![data(MIB)]);
    }
    e.discard(4 * MIB, MIB).unwrap();
    for from in [0, 2 * MIB, 4 * MIB] {
        let m = e.extents(from, 8 * MIB - from).unwrap();
        let hole: Vec<_> = m.iter().filter(|x| x.hole).collect();
        assert_eq!(hole.len(), 1, "from {from}: {m:?}");
        let before: u64 = m.iter().take_while(|x| !x.hole).map(|x| x.len).sum();
        assert_eq!((from + before, hole[0].len), (4 * MIB, MIB), "{m:?}");
    }
    assert_eq!(e.extents(6 * MIB, MIB).unwrap(), vec![data(MIB)]);
}
