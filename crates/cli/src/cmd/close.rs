//! `cryptkeep close NAME` (alias `luksClose`): unmount, detach the loop
//! device, stop the daemon (which wipes the key) and remove the record.

use clap::Args as ClapArgs;

use super::serve;
use crate::daemon;
use crate::exit::{CliError, CliResult, Code};
use crate::loopdev;
use crate::state;

/// Options of `close`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The name given to open.
    pub name: String,
}

/// Runs `close`.
pub fn run(a: Args) -> CliResult {
    state::check_name(&a.name)?;
    let _lock = state::lock()?;
    let Some(st) = state::load(&a.name)? else {
        return Err(CliError::new(
            Code::NotFound,
            format!("no open volume is named {}", a.name),
            state::name_dir(&a.name).display().to_string(),
            "cryptkeep status lists open volumes",
        ));
    };
    serve::teardown_io(&st)?;
    if st.daemon_alive() && st.pid != std::process::id() as i32 && !daemon::terminate(st.pid, 20) {
        return Err(CliError::new(
            Code::Daemon,
            format!("the daemon (pid {}) did not exit within 20 s", st.pid),
            a.name.clone(),
            format!(
                "see {}; then kill {} and run close again",
                state::log_path(&a.name).display(),
                st.pid
            ),
        ));
    }
    let fuse = state::fuse_dir(&a.name);
    if loopdev::is_mountpoint(&fuse) {
        loopdev::fuse_unmount(&fuse, true)?;
    }
    // The keep wipes its keys and exits when the daemon's channel closes;
    // wait for that, and stop it if it lingers.
    if let Some(pid) = st.keep.as_ref().and_then(|k| k.pid) {
        for _ in 0..40 {
            if !state::pid_alive(pid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if state::pid_alive(pid) && !daemon::terminate(pid, 5) {
            return Err(CliError::new(
                Code::Daemon,
                format!("the keep (pid {pid}) did not exit within 5 s"),
                a.name.clone(),
                format!("kill {pid} and run close again"),
            ));
        }
    }
    state::remove(&a.name);
    Ok(())
}
