//! `cryptkeep fs umount MOUNTPOINT`: `fusermount3 -u`, then waits for the
//! daemon serving the mount to exit.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args as ClapArgs;

use super::common;
use crate::exit::{CliError, CliResult, Code};

/// Options of `fs umount`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The mount point.
    pub mountpoint: PathBuf,
}

/// Runs `fs umount`.
pub fn run(a: Args) -> CliResult {
    let mp = a.mountpoint.canonicalize().map_err(|e| {
        CliError::io(
            "cannot resolve the mount point",
            a.mountpoint.display().to_string(),
            &e,
        )
    })?;
    if !cryptkeep_fuse::mountinfo::is_mount_point(&mp) {
        return Err(CliError::new(
            Code::NotFound,
            "nothing is mounted there",
            mp.display().to_string(),
            "check the path (see: findmnt -t fuse)",
        ));
    }
    let pid_file = common::pid_path(&mp);
    crate::state::checked_run_dir()?;
    let pid: Option<i32> = crate::rundir::read(&pid_file)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8_lossy(&b).trim().parse().ok());
    // Held before the unmount, so the wait is for this very process.
    let daemon = pid.and_then(crate::procid::hold_exiting);
    super::mount::unmount(&mp)?;
    if let Some(d) = daemon {
        if !d.wait(Duration::from_secs(10)) {
            let pid = d.pid();
            return Err(CliError::new(
                Code::Daemon,
                format!("unmounted, but its daemon (pid {pid}) did not exit"),
                mp.display().to_string(),
                format!(
                    "look at {}; kill it: kill {pid}",
                    common::log_path(&mp).display()
                ),
            ));
        }
        let _ = std::fs::remove_file(&pid_file);
        let _ = std::fs::remove_file(common::log_path(&mp));
    }
    Ok(())
}
