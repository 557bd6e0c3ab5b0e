//! The loop driver sends "write zeroes" as fallocate on the FUSE file:
//! PUNCH_HOLE when it may unmap, ZERO_RANGE when not. Whatever the path,
//! zeroed ranges of the loop device must read back as zeros.

use crate::common::*;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

const SIZE: u64 = 16 << 20;

fn scenario(allow_discards: bool) {
    need!(root, fuse, loop_dev);
    for t in ["losetup", "fallocate"] {
        need!(tool t);
    }
    let dir = TempDir::new("zeroes");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let key = random_key(64);
    let mnt = dir.sub("fuse");
    let o = opts(false, allow_discards);
    let mut fuse = FuseGuard::mount(engine(&img, &key, 4096, false), &mnt, &o);
    let dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&mnt, &o));
    let mut model = vec![0u8; 8 << 20];
    Rng(5).fill(&mut model);
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev.0)
            .unwrap();
        f.write_all_at(&model, 0).unwrap();
        f.sync_all().unwrap();
    }
    // fallocate(2) on a block device: --punch-hole is "write zeroes, may
    // unmap, no fallback"; --zero-range is "write zeroes, no unmap".
    let punch = std::process::Command::new("fallocate")
        .args([
            "--punch-hole",
            "--offset",
            "1048576",
            "--length",
            "1048576",
            &dev.0,
        ])
        .output()
        .unwrap();
    if allow_discards {
        assert!(
            punch.status.success(),
            "{}",
            String::from_utf8_lossy(&punch.stderr)
        );
        model[1 << 20..2 << 20].fill(0);
    }
    run(
        "fallocate",
        &[
            "--zero-range",
            "--offset",
            "4194304",
            "--length",
            "65536",
            &dev.0,
        ],
    );
    model[4 << 20..(4 << 20) + 65536].fill(0);
    let f = std::fs::File::open(&dev.0).unwrap();
    let mut back = vec![0u8; model.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    let first_bad = back.iter().zip(&model).position(|(a, b)| a != b);
    assert!(
        first_bad.is_none(),
        "loop device content wrong after write-zeroes (allow_discards {allow_discards}), first difference at byte {first_bad:?}"
    );
    drop(f);
    dev.detach();
    fuse.unmount();
}

#[test]
fn write_zeroes_through_loop_with_discards() {
    scenario(true);
}

#[test]
fn write_zeroes_through_loop_without_discards() {
    scenario(false);
}
