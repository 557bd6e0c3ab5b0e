//! `cryptkeep fs umount MOUNTPOINT`: `fusermount3 -u`, then waits for the
//! daemon serving the mount to exit.

use std::path::PathBuf;
use std::time::{Duration, Instant};

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
        .and_then(|b| String::from_utf8_lossy(&b).trim().parse().ok())
        .filter(|&pid| is_cryptkeep(pid));
    super::mount::unmount(&mp)?;
    if let Some(pid) = pid {
        let end = Instant::now() + Duration::from_secs(10);
        while crate::state::pid_alive(pid) {
            if Instant::now() >= end {
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
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&pid_file);
        let _ = std::fs::remove_file(common::log_path(&mp));
    }
    Ok(())
}

/// Whether process `pid` runs this binary (a stale pid file may name a
/// reused pid; it is only waited for, never signalled).
fn is_cryptkeep(pid: i32) -> bool {
    pid > 0 && matches!(crate::procid::runs_this_binary(pid), Ok(Ok(())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_this_binary_counts() {
        // The test binary is this binary; pid 0 and init are not.
        assert!(super::is_cryptkeep(std::process::id() as i32));
        assert!(!super::is_cryptkeep(0));
        assert!(!super::is_cryptkeep(1));
    }
}
