//! The record of open volumes: one directory per NAME under the run
//! directory (`/run/cryptkeep`, or `$CRYPTKEEP_RUN_DIR`), holding
//! `state.json`, the daemon's log and the FUSE mountpoint `fuse/`.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::exit::{CliError, CliResult, Code};
use crate::procid::{self, Liveness};
use crate::rundir;
use crate::volid::VolumeId;

/// Environment variable overriding the run directory.
pub const RUN_DIR_ENV: &str = "CRYPTKEEP_RUN_DIR";
/// The default run directory.
pub const DEFAULT_RUN_DIR: &str = "/run/cryptkeep";

/// What `state.json` holds for an open volume (also `status --json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// The name given to `open`.
    pub name: String,
    /// The volume (data device or image file), canonical path.
    pub volume: String,
    /// The detached header file, if any.
    pub header: Option<String>,
    /// The loop device, once attached.
    pub device: Option<String>,
    /// The FUSE file holding the decrypted data segment.
    pub file: String,
    /// "luks1" or "luks2".
    #[serde(rename = "type")]
    pub kind: String,
    /// The dm-crypt cipher spec, e.g. "aes-xts-plain64".
    pub cipher: String,
    /// The tag algorithm of an authenticated volume ("hmac(sha256)",
    /// "aead", ...), as `cryptsetup status` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
    /// Volume key size in bits.
    pub key_size: u32,
    /// Encryption sector size in bytes.
    pub sector_size: u32,
    /// Opened read-only.
    pub read_only: bool,
    /// The daemon serving the FUSE file (or the opener, while opening).
    pub pid: i32,
    /// The start time of `pid` (clock ticks since boot, field 22 of
    /// /proc/PID/stat): `close` signals `pid` only while it matches and
    /// the process runs this binary. Missing in records of older versions.
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// Where `open --mount` mounted the file system.
    pub mountpoint: Option<String>,
    /// The LUKS UUID.
    #[serde(default)]
    pub uuid: String,
    /// Size of the decrypted data in bytes.
    #[serde(default)]
    pub size: u64,
    /// Who holds the volume key.
    #[serde(default)]
    pub keep: Option<KeepState>,
    /// What file or device the volume is (device and inode, or the block
    /// device's number): a second open of the same volume under any path
    /// is refused. Missing in records of older versions.
    #[serde(default)]
    pub volume_id: Option<VolumeId>,
    /// The NBD export (`open --nbd`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbd: Option<NbdState>,
}

/// The NBD export of an open volume, for `status` and `close`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NbdState {
    /// Where the daemon listens: `unix:PATH` or `tcp:ADDR:PORT`.
    pub endpoint: String,
    /// The export name.
    pub export: String,
    /// The NBD URI clients connect to.
    pub uri: String,
    /// Served without a loop device (`--no-loop`).
    #[serde(default)]
    pub no_loop: bool,
}

/// Who holds an open volume's key (`open --keep`), for `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeepState {
    /// "process" (a separate key process) or "inline" (the daemon).
    pub mode: String,
    /// The key process, for mode "process".
    pub pid: Option<i32>,
    /// The start time of `pid` (as [`State::pid_start`]).
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// Where the key lives in the keep ("memfd_secret", or the fallback).
    #[serde(default)]
    pub secret_mem: String,
    /// What the keep's sandbox achieved (seccomp, Landlock).
    #[serde(default)]
    pub sandbox: String,
}

impl KeepState {
    /// The record for `--keep inline`.
    pub fn inline() -> KeepState {
        KeepState {
            mode: "inline".into(),
            pid: None,
            pid_start: None,
            secret_mem: "mlocked heap of the daemon".into(),
            sandbox: "none".into(),
        }
    }

    /// Whether the key process runs (always true for inline; a process
    /// that cannot be told apart from it counts as running).
    pub fn alive(&self) -> bool {
        match self.pid {
            Some(p) => !matches!(
                procid::check(p, self.pid_start),
                Liveness::Gone | Liveness::Foreign(_)
            ),
            None => true,
        }
    }
}

impl State {
    /// The state as JSON for `status --json`, with "daemon_alive".
    pub fn to_status_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(m) = &mut v {
            m.insert(
                "daemon_alive".into(),
                serde_json::Value::Bool(self.daemon_alive()),
            );
            if let Some(k) = &self.keep {
                m.insert("keep_alive".into(), serde_json::Value::Bool(k.alive()));
            }
            if let Some(c) = load_integrity_counts(&self.name) {
                m.insert("integrity_failures".into(), c.failures.into());
                m.insert(
                    "integrity_last_failure".into(),
                    c.last_failure
                        .map(serde_json::Value::from)
                        .unwrap_or(serde_json::Value::Null),
                );
            }
        }
        v
    }

    /// What the recorded pid names now (see [`Liveness`]).
    pub fn daemon(&self) -> Liveness {
        procid::check(self.pid, self.pid_start)
    }

    /// Whether the recorded daemon may still run: it is ours, or it cannot
    /// be told apart from ours (then NAME counts as open).
    pub fn daemon_alive(&self) -> bool {
        !matches!(self.daemon(), Liveness::Gone | Liveness::Foreign(_))
    }

    /// Whether this record's volume is the file or device `id`: by the
    /// recorded identity, or for older records by what their path names now.
    pub fn same_volume(&self, id: VolumeId) -> bool {
        self.volume_id
            .or_else(|| VolumeId::of_path(Path::new(&self.volume)).ok())
            == Some(id)
    }

    /// Records this process as the daemon (pid and start time).
    pub fn set_pid_to_self(&mut self) {
        self.pid = std::process::id() as i32;
        self.pid_start = procid::own_start_time();
    }
}

pub use crate::procid::pid_alive;

/// The run directory as configured: `$CRYPTKEEP_RUN_DIR` or `/run/cryptkeep`.
fn configured_run_dir() -> PathBuf {
    std::env::var_os(RUN_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR))
}

/// The run directory once checked (resolved: a symlink swapped later
/// changes nothing).
static CHECKED: OnceLock<PathBuf> = OnceLock::new();

/// The run directory: the checked, resolved path once [`checked_run_dir`]
/// or [`ensure_run_dir`] found it safe, else as configured.
pub fn run_dir() -> PathBuf {
    CHECKED.get().cloned().unwrap_or_else(configured_run_dir)
}

/// Checks the run directory (see [`rundir::secure`]); `None` if it does
/// not exist yet. Refused (exit 2) when others could have written to it.
pub fn checked_run_dir() -> CliResult<Option<PathBuf>> {
    if let Some(d) = CHECKED.get() {
        return Ok(Some(d.clone()));
    }
    let d = rundir::secure(&configured_run_dir(), false)?;
    Ok(d.map(|d| CHECKED.get_or_init(|| d).clone()))
}

/// The directory of one NAME.
pub fn name_dir(name: &str) -> PathBuf {
    run_dir().join(name)
}

/// The FUSE mountpoint of one NAME.
pub fn fuse_dir(name: &str) -> PathBuf {
    name_dir(name).join("fuse")
}

/// The daemon's log of one NAME.
pub fn log_path(name: &str) -> PathBuf {
    name_dir(name).join("daemon.log")
}

fn state_path(name: &str) -> PathBuf {
    name_dir(name).join("state.json")
}

fn integrity_path(name: &str) -> PathBuf {
    name_dir(name).join("integrity.json")
}

/// Sectors of an authenticated volume that failed authentication since
/// it was opened, as its daemon records them for `status`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IntegrityCounts {
    /// Sectors that failed.
    pub failures: u64,
    /// The last sector that failed, in sector-size units of the data.
    pub last_failure: Option<u64>,
}

/// Records NAME's authentication failures (atomically, like [`save`]).
pub fn save_integrity_counts(name: &str, c: &IntegrityCounts) -> CliResult<()> {
    write_atomic(
        &integrity_path(name),
        &serde_json::to_vec(c).unwrap_or_default(),
        "the integrity counters",
    )
}

/// NAME's authentication failures; `None` for a volume without
/// authentication (or an unreadable record).
pub fn load_integrity_counts(name: &str) -> Option<IntegrityCounts> {
    match rundir::read(&integrity_path(name)) {
        Ok(Some(b)) => serde_json::from_slice(&b).ok(),
        _ => None,
    }
}

/// Writes `body` to `p` atomically: a new 0600 temporary file, then rename.
fn write_atomic(p: &Path, body: &[u8], what: &str) -> CliResult<()> {
    use std::io::Write;
    // Unique per writer, so concurrent writers never rename each other's
    // half-written file.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = p.with_extension(format!("json.{}.{seq}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    rundir::create_new(&tmp)
        .and_then(|mut f| f.write_all(body))
        .and_then(|_| fs::rename(&tmp, p))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            CliError::io(format!("cannot write {what}"), p.display().to_string(), &e)
        })
}

/// Creates NAME's directory (0700).
pub fn make_name_dir(name: &str) -> CliResult<()> {
    let d = name_dir(name);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&d)
        .map_err(|e| {
            CliError::io(
                "cannot create the state directory",
                d.display().to_string(),
                &e,
            )
        })
}

/// Checks that NAME is usable as a directory name (like a dm name).
pub fn check_name(name: &str) -> CliResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'));
    if ok {
        Ok(())
    } else {
        Err(CliError::usage(
            format!("invalid name {name:?}"),
            "NAME",
            "use 1-64 characters from A-Z a-z 0-9 _ - . + (not starting with a dot)",
        ))
    }
}

/// Reads the state of NAME; `None` if NAME has no record.
pub fn load(name: &str) -> CliResult<Option<State>> {
    if checked_run_dir()?.is_none() {
        return Ok(None);
    }
    let p = state_path(name);
    match rundir::read(&p) {
        Ok(None) => Ok(None),
        Ok(Some(b)) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            CliError::new(
                Code::Corrupt,
                format!("unreadable state record: {e}"),
                p.display().to_string(),
                format!("remove it if no daemon serves {name}: cryptkeep close {name}"),
            )
        }),
        Err(e) => Err(CliError::io(
            "cannot read the state record",
            p.display().to_string(),
            &e,
        )),
    }
}

/// Writes the state of NAME atomically (a new 0600 temporary file, then
/// rename).
pub fn save(st: &State) -> CliResult<()> {
    let body = serde_json::to_vec_pretty(st).unwrap_or_default();
    write_atomic(&state_path(&st.name), &body, "the state record")
}

/// All recorded NAMEs with their state, sorted by name.
pub fn list() -> CliResult<Vec<State>> {
    list_inner(false)
}

/// Like [`list`], but a run directory this user may not read (root's,
/// for a user who can open no volume anyway) lists nothing.
pub fn list_visible() -> CliResult<Vec<State>> {
    list_inner(true)
}

fn list_inner(unreadable_is_empty: bool) -> CliResult<Vec<State>> {
    let Some(dir) = checked_run_dir()? else {
        return Ok(Vec::new());
    };
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if unreadable_is_empty && e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Ok(Vec::new())
        }
        Err(e) => {
            return Err(CliError::io(
                "cannot list open volumes",
                dir.display().to_string(),
                &e,
            ))
        }
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let Some(name) = ent.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') || !ent.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Ok(Some(st)) = load(&name) {
            out.push(st);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Creates the run directory (mode 0700) if needed and checks it (see
/// [`rundir::secure`]); returns its resolved path.
pub fn ensure_run_dir() -> CliResult<PathBuf> {
    if let Some(d) = CHECKED.get() {
        return Ok(d.clone());
    }
    let raw = configured_run_dir();
    let d = rundir::secure(&raw, true)?.ok_or_else(|| {
        CliError::new(
            Code::Unexpected,
            "the run directory was not created",
            raw.display().to_string(),
            "please report this bug",
        )
    })?;
    Ok(CHECKED.get_or_init(|| d).clone())
}

/// An exclusive lock on the run directory (flock on `.lock`), held while
/// a NAME is claimed or released; dropped = unlocked.
pub struct RunLock(#[allow(dead_code)] File);

/// Takes the run-directory lock, waiting for other cryptkeep commands.
pub fn lock() -> CliResult<RunLock> {
    let dir = ensure_run_dir()?;
    let p = dir.join(".lock");
    let f = rundir::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| CliError::io("cannot open the lock file", p.display().to_string(), &e))?;
    // A lock file left readable by an older version: only we may open it.
    let meta = f
        .metadata()
        .map_err(|e| CliError::io("cannot check the lock file", p.display().to_string(), &e))?;
    if !meta.is_file() {
        return Err(CliError::new(
            Code::Permission,
            "the lock file is not a regular file",
            p.display().to_string(),
            "remove it; cryptkeep makes a new one",
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        let _ = f.set_permissions(fs::Permissions::from_mode(0o600));
    }
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(CliError::io(
            "cannot lock the run directory",
            p.display().to_string(),
            &e,
        ));
    }
    Ok(RunLock(f))
}

/// Removes NAME's directory: the known files and the (unmounted) FUSE
/// mountpoint only — never recursing into a mount.
pub fn remove(name: &str) {
    let d = name_dir(name);
    for f in ["state.json", "integrity.json", "daemon.log"] {
        let _ = fs::remove_file(d.join(f));
    }
    if let Ok(rd) = fs::read_dir(&d) {
        for ent in rd.flatten() {
            let n = ent.file_name();
            let n = n.to_string_lossy();
            if n.starts_with("state.json.") || n.starts_with("integrity.json.") {
                let _ = fs::remove_file(ent.path());
            }
        }
    }
    let _ = fs::remove_dir(d.join("fuse"));
    let _ = fs::remove_dir(&d);
}

/// Canonical form of a path for comparing volumes (the path itself if it
/// cannot be resolved).
pub fn canonical(p: &Path) -> String {
    fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("vol1").is_ok());
        assert!(check_name("a.b-c_d+e").is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert_eq!(check_name(bad).unwrap_err().code, Code::Usage, "{bad:?}");
        }
    }

    #[test]
    fn own_pid_alive_and_bogus_dead() {
        assert!(pid_alive(std::process::id() as i32));
        assert!(!pid_alive(0));
        assert!(!pid_alive(i32::MAX));
    }
}
