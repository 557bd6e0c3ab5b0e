//! `cryptkeep status [NAME] [--json]`: what is open, like `cryptsetup status`.

use clap::Args as ClapArgs;

use crate::exit::{CliError, CliResult, Code};
use crate::state::{self, State};

/// Options of `status`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// One name (default: all open volumes).
    pub name: Option<String>,
    /// JSON: an object for NAME, an array for all.
    #[arg(long)]
    pub json: bool,
}

fn text(st: &State) -> String {
    let alive = st.daemon_alive();
    let mut s = format!(
        "{} is {}.\n",
        st.name,
        if alive {
            "active"
        } else {
            "stale (its daemon is gone; run close)"
        }
    );
    let row = |s: &mut String, k: &str, v: &str| s.push_str(&format!("  {k:<12} {v}\n"));
    row(&mut s, "type:", &st.kind.to_uppercase());
    row(&mut s, "cipher:", &st.cipher);
    if let Some(i) = &st.integrity {
        row(&mut s, "integrity:", i);
    }
    row(&mut s, "keysize:", &format!("{} bits", st.key_size));
    row(&mut s, "sector size:", &st.sector_size.to_string());
    row(&mut s, "size:", &format!("{} bytes", st.size));
    row(&mut s, "volume:", &st.volume);
    if let Some(h) = &st.header {
        row(&mut s, "header:", h);
    }
    row(&mut s, "device:", st.device.as_deref().unwrap_or("(none)"));
    row(&mut s, "file:", &st.file);
    row(
        &mut s,
        "mode:",
        if st.read_only {
            "read-only"
        } else {
            "read/write"
        },
    );
    row(
        &mut s,
        "daemon:",
        &format!("pid {}{}", st.pid, if alive { "" } else { " (dead)" }),
    );
    if let Some(k) = &st.keep {
        let v = match k.pid {
            Some(pid) if k.alive() => format!("{} (pid {pid}, key in {})", k.mode, k.secret_mem),
            Some(pid) => format!(
                "{} (pid {pid}) is GONE: every read and write fails with EIO; run close, then open again",
                k.mode
            ),
            None => format!("{} (key in the daemon)", k.mode),
        };
        row(&mut s, "keep:", &v);
        if k.pid.is_some() && k.alive() {
            row(&mut s, "sandbox:", &k.sandbox);
        }
    }
    if let Some(n) = &st.nbd {
        row(
            &mut s,
            "nbd:",
            &format!("{} (export {:?}, {})", n.uri, n.export, n.endpoint),
        );
    }
    if let Some(m) = &st.mountpoint {
        row(&mut s, "mountpoint:", m);
    }
    if let Some(c) = state::load_integrity_counts(&st.name) {
        let v = match c.last_failure {
            None => "no sector failed authentication".to_string(),
            Some(at) => format!(
                "{} sector(s) failed authentication, the last at sector {at} (see the daemon log)",
                c.failures
            ),
        };
        row(&mut s, "tag checks:", &v);
    }
    s
}

/// Runs `status`.
pub fn run(a: Args) -> CliResult {
    match &a.name {
        Some(name) => {
            state::check_name(name)?;
            let st = state::load(name)?.ok_or_else(|| {
                CliError::new(
                    Code::NotFound,
                    format!("no open volume is named {name}"),
                    state::name_dir(name).display().to_string(),
                    "cryptkeep status lists open volumes",
                )
            })?;
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&st.to_status_json()).unwrap_or_default()
                );
            } else {
                print!("{}", text(&st));
            }
        }
        None => {
            let all = state::list()?;
            if a.json {
                let v: Vec<_> = all.iter().map(State::to_status_json).collect();
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else if all.is_empty() {
                println!("No open volumes.");
            } else {
                for st in &all {
                    print!("{}", text(st));
                }
            }
        }
    }
    Ok(())
}
