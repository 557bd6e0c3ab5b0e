//! Runs one report script (`scripts/bench/NAME.sh`) in a process group of its
//! own: its `@step` lines drive the progress bar, everything else goes to
//! `log.txt`, and SIGINT/SIGTERM/SIGHUP to the driver become SIGTERM to the
//! whole group, whose trap removes its mounts, loop devices and daemons.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{io, Error, Result};
use crate::report::Report;

static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let group = CHILD_GROUP.load(Ordering::SeqCst);
    if group > 0 {
        // SAFETY: kill is async-signal-safe; a negative pid names the
        // script's process group, which the driver created.
        unsafe {
            libc::kill(-group, libc::SIGTERM);
        }
    }
}

/// Installs the handlers that pass SIGINT, SIGTERM and SIGHUP on to the
/// running script's process group (call once, before the first report).
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches
        // atomics and calls kill, both async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether the run was interrupted.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// What one script run needs.
#[derive(Debug, Clone)]
pub struct ScriptRun {
    /// The report.
    pub report: Report,
    /// The script file.
    pub script: PathBuf,
    /// The report's output directory (exists).
    pub out: PathBuf,
    /// Tiny sizes and one repetition.
    pub quick: bool,
    /// Repetitions (`None`: the script's default).
    pub reps: Option<u32>,
    /// Where the images go (`None`: a tmpfs of the script's own).
    pub backing: Option<PathBuf>,
    /// The `cryptkeep` binary the script measures (`CK`).
    pub exe: PathBuf,
}

/// Parses a progress line `@step I N LABEL`.
pub fn parse_step(line: &str) -> Option<(u64, u64, &str)> {
    let rest = line.strip_prefix("@step ")?;
    let mut it = rest.splitn(3, ' ');
    let i = it.next()?.parse().ok()?;
    let n = it.next()?.parse().ok()?;
    Some((i, n, it.next().unwrap_or("").trim()))
}

impl ScriptRun {
    /// Runs the script to its end; an error names the log.
    pub fn run(&self) -> Result<()> {
        let log_path = self.out.join("log.txt");
        let mut log = File::create(&log_path).map_err(io("creating", &log_path))?;
        let log_err = log.try_clone().map_err(io("opening", &log_path))?;
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script).arg("--out").arg(&self.out);
        if self.quick {
            cmd.arg("--quick");
        }
        if let Some(r) = self.reps {
            cmd.arg("--reps").arg(r.to_string());
        }
        if let Some(b) = &self.backing {
            cmd.arg("--backing").arg(b);
        }
        cmd.env("CK", &self.exe)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_err))
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; between fork and exec it only
        // asks for SIGTERM when the driver dies, so the script cleans up then too.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(io("running", &self.script))?;
        CHILD_GROUP.store(child.id() as i32, Ordering::SeqCst);
        if interrupted() {
            on_signal(libc::SIGTERM);
        }
        let progress = Progress::new(self.report);
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match parse_step(&line) {
                    Some((i, n, label)) => progress.step(i, n, label),
                    None => {
                        let _ = writeln!(log, "{line}");
                    }
                }
            }
        }
        let status = child.wait().map_err(io("waiting for", &self.script));
        CHILD_GROUP.store(0, Ordering::SeqCst);
        progress.finish();
        let status = status?;
        if interrupted() {
            return Err(Error::Interrupted);
        }
        if !status.success() {
            return Err(Error::Script {
                report: self.report.name().into(),
                status: status.to_string(),
                log: log_path,
            });
        }
        Ok(())
    }
}

/// A progress bar on a terminal, plain lines elsewhere (CI logs).
struct Progress {
    report: Report,
    bar: Option<ProgressBar>,
}

impl Progress {
    fn new(report: Report) -> Progress {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let bar = ProgressBar::new(1);
            let style = ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {wide_msg} {elapsed}",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(report.name());
            bar
        });
        Progress { report, bar }
    }

    fn step(&self, i: u64, n: u64, label: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_length(n.max(1));
                bar.set_position(i.saturating_sub(1));
                bar.set_message(label.to_string());
            }
            None => eprintln!("bench {}: [{i}/{n}] {label}", self.report.name()),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Where the report scripts are: `$CRYPTKEEP_BENCH_SCRIPTS`, then
/// `scripts/bench` of the checkout `exe` was built in, then the copy
/// `scripts/install.sh` puts beside the installed binary.
pub fn find_scripts(exe: &Path) -> Result<PathBuf> {
    let mut tried = Vec::new();
    if let Some(dir) = std::env::var_os("CRYPTKEEP_BENCH_SCRIPTS") {
        tried.push(PathBuf::from(dir));
    }
    // target/release/cryptkeep -> the checkout's scripts/bench
    if let Some(root) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
        tried.push(root.join("scripts/bench"));
    }
    // PREFIX/bin/cryptkeep -> PREFIX/share/cryptkeep/scripts/bench (scripts/install.sh)
    if let Some(prefix) = exe.parent().and_then(Path::parent) {
        tried.push(prefix.join("share/cryptkeep/scripts/bench"));
    }
    tried
        .iter()
        .find(|d| d.is_dir())
        .cloned()
        .ok_or(Error::NoScripts(tried))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lines() {
        assert_eq!(
            parse_step("@step 2 10 fio read on loop"),
            Some((2, 10, "fio read on loop"))
        );
        assert_eq!(parse_step("@step 1 3"), Some((1, 3, "")));
        assert_eq!(parse_step("step 1 3 x"), None);
        assert_eq!(parse_step("@step x 3 y"), None);
    }
}
