//! Mounts a gocryptfs-format cipher directory in the foreground until it is
//! unmounted: `overlay_mount CIPHERDIR MOUNTPOINT PASSFILE [THREADS]`.
//! (A stand-in for `cryptkeep fs mount` while the CLI verb is written.)

use cryptkeep_fuse::overlay::{mount_overlay, OverlayOptions};
use cryptkeep_overlay::CipherDir;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: overlay_mount CIPHERDIR MOUNTPOINT PASSFILE [THREADS]");
        std::process::exit(2);
    }
    let pw = std::fs::read_to_string(&a[3])?;
    let pw = pw.lines().next().unwrap_or_default();
    let cd = CipherDir::open(a[1].as_ref(), pw.as_bytes())?;
    let opts = OverlayOptions {
        threads: a.get(4).and_then(|s| s.parse().ok()).unwrap_or(4),
        ..OverlayOptions::default()
    };
    let m = mount_overlay(Arc::new(cd), a[2].as_ref(), &opts)?;
    eprintln!("mounted on {}", m.mountpoint().display());
    m.wait();
    Ok(())
}
