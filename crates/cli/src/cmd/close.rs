//! `cryptkeep close NAME` (alias `luksClose`): unmount, detach the loop
//! device, stop the daemon (which wipes the key) and remove the record.
//! Only a process proven to be the recorded daemon (or keep) is signalled:
//! its start time matches the record and it runs this binary.

use clap::Args as ClapArgs;

use super::serve;
use crate::daemon;
use crate::exit::{CliError, CliResult, Code};
use crate::loopdev;
use crate::procid::{self, Liveness};
use crate::state::{self, State};

/// Options of `close`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The name given to open.
    pub name: String,
}

/// The refusal for a record whose pid cannot be proven to be its daemon.
fn cannot_tell(name: &str, what: &str, pid: i32, why: &str) -> CliError {
    CliError::new(
        Code::Daemon,
        format!(
            "cannot tell whether pid {pid} is the {what} of {name}: {why}; nothing was signalled"
        ),
        state::name_dir(name).display().to_string(),
        format!(
            "if `ps -o args= -p {pid}` shows cryptkeep, stop it with kill {pid} (it cleans up \
             after itself), then run cryptkeep close {name}"
        ),
    )
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
    let daemon = match procid::hold(st.pid, st.pid_start) {
        Ok(d) => Some(d),
        Err(Liveness::Unknown(why)) => return Err(cannot_tell(&a.name, "daemon", st.pid, &why)),
        Err(Liveness::Foreign(prog)) => {
            crate::cmd::common::warn(&format!(
                "pid {} recorded for {} runs {prog}, not this cryptkeep: not signalled; cleaning up \
                 the record",
                st.pid, a.name
            ));
            None
        }
        Err(_) => None,
    };
    serve::teardown_io(&st)?;
    if let Some(d) = daemon {
        if st.pid != std::process::id() as i32 {
            d.signal(libc::SIGTERM);
            if !daemon::terminate_after(st.pid, 20, false) {
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
        }
    }
    let fuse = state::fuse_dir(&a.name);
    if cryptkeep_fuse::mountinfo::is_mount_point(&fuse) {
        loopdev::fuse_unmount(&fuse, true)?;
    }
    stop_keep(&st, &a.name)?;
    if let Some(n) = &st.nbd {
        crate::cmd::nbd_export::remove_stale_socket(n);
    }
    state::remove(&a.name);
    Ok(())
}

/// The keep wipes its keys and exits when the daemon's channel closes;
/// waits for that, and stops it if it lingers (only if it is ours).
fn stop_keep(st: &State, name: &str) -> CliResult {
    let Some(k) = st.keep.as_ref() else {
        return Ok(());
    };
    let Some(pid) = k.pid else {
        return Ok(());
    };
    for _ in 0..40 {
        if !k.alive() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    match procid::hold(pid, k.pid_start) {
        Ok(keep) => {
            keep.signal(libc::SIGTERM);
            if daemon::terminate_after(pid, 5, false) {
                Ok(())
            } else {
                Err(CliError::new(
                    Code::Daemon,
                    format!("the keep (pid {pid}) did not exit within 5 s"),
                    name.to_string(),
                    format!("kill {pid} and run close again"),
                ))
            }
        }
        Err(Liveness::Unknown(why)) => Err(cannot_tell(name, "keep", pid, &why)),
        Err(_) => Ok(()),
    }
}
