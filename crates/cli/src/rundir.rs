//! The run directory is trusted only when nobody but root and the caller
//! could have put anything in it (ssh's StrictModes): every directory on
//! its resolved path must belong to root or the caller and not be writable
//! by group or others (a sticky, root-owned directory such as /tmp is fine
//! as an ancestor); the run directory itself is created 0700 and tightened
//! to 0700 when it is the caller's. Files in it are opened with
//! `O_NOFOLLOW | O_CLOEXEC`, created 0600, and read with a size bound.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::exit::{CliError, CliResult, Code};

/// Largest file read back from the run directory (state records, pid files).
pub const MAX_READ: u64 = 1 << 20;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// How the refusal of an unsafe run directory starts.
const UNSAFE: &str = "unsafe run directory: ";

/// Whether `e` is the refusal of an unsafe run directory (not a failure
/// to create or read one).
pub fn is_unsafe(e: &CliError) -> bool {
    e.what.starts_with(UNSAFE)
}

fn unsafe_dir(dir: &Path, shown: &Path, why: String) -> CliError {
    CliError::new(
        Code::Permission,
        format!("{UNSAFE}{} {why}", dir.display()),
        shown.display().to_string(),
        "use a directory that only root (or you) owns and can write, e.g. unset \
         CRYPTKEEP_RUN_DIR for /run/cryptkeep",
    )
}

/// Checks one directory on the path: `last` is the run directory itself.
fn check_dir(dir: &Path, last: bool, shown: &Path) -> CliResult<()> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| {
        CliError::io(
            "cannot check the run directory",
            dir.display().to_string(),
            &e,
        )
    })?;
    if !m.is_dir() {
        return Err(unsafe_dir(dir, shown, "is not a directory".into()));
    }
    let (uid, mode) = (m.uid(), m.mode());
    if uid != 0 && uid != euid() {
        return Err(unsafe_dir(dir, shown, format!("is owned by uid {uid}")));
    }
    let sticky_root = mode & libc::S_ISVTX != 0 && uid == 0 && !last;
    if mode & 0o022 != 0 && !sticky_root {
        return Err(unsafe_dir(
            dir,
            shown,
            format!(
                "is writable by group or others (mode {:04o})",
                mode & 0o7777
            ),
        ));
    }
    if last && uid == euid() && mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            CliError::io(
                "cannot make the run directory private",
                dir.display().to_string(),
                &e,
            )
        })?;
    }
    Ok(())
}

/// Checks every directory from `/` down to `real` (a resolved path).
fn check_chain(real: &Path, run_dir_included: bool, shown: &Path) -> CliResult<()> {
    let mut cur = PathBuf::new();
    let comps: Vec<Component> = real.components().collect();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c.as_os_str());
        let last = run_dir_included && i + 1 == comps.len();
        check_dir(&cur, last, shown)?;
    }
    Ok(())
}

/// Checks the run directory `raw` and returns its resolved path; creates
/// it (and missing parents, 0700) when `create`, else returns `None` when
/// it does not exist.
pub fn secure(raw: &Path, create: bool) -> CliResult<Option<PathBuf>> {
    let abs = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| {
                CliError::io(
                    "cannot resolve the run directory",
                    raw.display().to_string(),
                    &e,
                )
            })?
            .join(raw)
    };
    // The deepest part of the path that exists, resolved.
    let mut base = abs.as_path();
    let mut missing: Vec<&OsStr> = Vec::new();
    while std::fs::symlink_metadata(base).is_err() {
        match (base.parent(), base.file_name()) {
            (Some(p), Some(n)) => {
                missing.push(n);
                base = p;
            }
            _ => break,
        }
    }
    let real = std::fs::canonicalize(base).map_err(|e| {
        CliError::io(
            "cannot resolve the run directory",
            abs.display().to_string(),
            &e,
        )
    })?;
    if missing.is_empty() {
        check_chain(&real, true, raw)?;
        return Ok(Some(real));
    }
    check_chain(&real, false, raw)?;
    if !create {
        return Ok(None);
    }
    let mut cur = real;
    for n in missing.into_iter().rev() {
        cur.push(n);
        match std::fs::DirBuilder::new().mode(0o700).create(&cur) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(CliError::io(
                    "cannot create the run directory",
                    cur.display().to_string(),
                    &e,
                ))
            }
        }
        // Made by us, or by someone as we made it: check it like the rest.
        check_dir(&cur, false, raw)?;
    }
    check_dir(&cur, true, raw)?;
    Ok(Some(cur))
}

/// Creates a private directory inside the run directory (mode 0700; an
/// existing one is kept).
pub fn make_dir(p: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(p)?;
            if m.is_dir() {
                Ok(())
            } else {
                Err(std::io::Error::from_raw_os_error(libc::ENOTDIR))
            }
        }
        r => r,
    }
}

/// Options for a file in the run directory: `O_NOFOLLOW | O_CLOEXEC`,
/// created 0600, never blocking on a FIFO.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK);
    o
}

/// Creates (or truncates) a run-directory file for writing, 0600.
pub fn create(p: &Path) -> std::io::Result<File> {
    regular(options().create(true).write(true).truncate(true).open(p)?)
}

/// Creates a new run-directory file (fails if it exists), 0600.
pub fn create_new(p: &Path) -> std::io::Result<File> {
    regular(options().create_new(true).write(true).open(p)?)
}

/// Refuses anything but a regular file.
fn regular(f: File) -> std::io::Result<File> {
    if f.metadata()?.is_file() {
        Ok(f)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ))
    }
}

/// Reads a run-directory file of at most [`MAX_READ`] bytes; `None` if
/// it does not exist. A symlink, a non-regular file or a larger one is
/// an error.
pub fn read(p: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let f = match options().read(true).open(p) {
        Ok(f) => regular(f)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut buf = Vec::new();
    f.take(MAX_READ + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_READ {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_READ} bytes"),
        ));
    }
    Ok(Some(buf))
}

/// The last `max` bytes (at most) of a run-directory file (a log).
pub fn read_tail(p: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut f = regular(options().read(true).open(p)?)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ck-rundir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        d
    }

    #[test]
    fn created_private_and_tightened() {
        let d = tmp("create");
        let run = d.join("a/b/run");
        assert_eq!(secure(&run, false).unwrap(), None);
        let got = secure(&run, true).unwrap().unwrap();
        assert_eq!(got, run);
        for p in [d.join("a"), d.join("a/b"), run.clone()] {
            let mode = std::fs::metadata(&p).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", p.display());
        }
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        secure(&run, false).unwrap();
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn writable_by_others_is_refused() {
        let d = tmp("writable");
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = secure(&run, true).unwrap_err();
        assert_eq!(e.code, Code::Permission);
        assert!(e.what.contains("writable by group or others"), "{e}");
        // A writable ancestor too (sticky but not root's: still refused
        // when we are not root; as root it is root's and sticky).
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = secure(&run, false).unwrap_err();
        assert!(e.what.contains(&d.display().to_string()), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_are_private_and_symlinks_refused() {
        let d = tmp("files");
        let f = d.join("state.json");
        create(&f).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read(&f).unwrap(), Some(Vec::new()));
        assert_eq!(read(&d.join("none")).unwrap(), None);
        std::os::unix::fs::symlink(&f, d.join("link")).unwrap();
        assert!(read(&d.join("link")).is_err());
        assert!(cryptkeep_keep::detach::open_log(&d.join("link")).is_err());
        assert!(create_new(&f).is_err());
        std::fs::write(&f, vec![b' '; MAX_READ as usize + 1]).unwrap();
        assert!(read(&f).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
