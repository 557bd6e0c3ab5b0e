//! What the `fs` verbs share: password sources (`--passfile`, `--extpass`,
//! the terminal) with gocryptfs's semantics, the mapping of overlay and
//! FUSE errors to the exit-code table, and the per-mount run files.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args as ClapArgs;
use zeroize::Zeroizing;

use crate::exit::{from_crypto, CliError, CliResult, Code};
use crate::passphrase::{self, Passphrase};

/// Name of the config in a cipher directory.
pub const CONF_NAME: &str = "gocryptfs.conf";
/// Name of the config in a plaintext directory for reverse mode.
pub const CONF_REVERSE_NAME: &str = ".gocryptfs.reverse.conf";

/// Where the password comes from (gocryptfs `-passfile` / `-extpass`).
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct PassArgs {
    /// Read the password from the first line of FILE (newline stripped).
    #[arg(long, value_name = "FILE", conflicts_with = "extpass")]
    pub passfile: Option<PathBuf>,
    /// Run CMD (with sh -c) and use the first line of its output.
    #[arg(long, value_name = "CMD")]
    pub extpass: Option<String>,
}

impl PassArgs {
    /// Reads the password: from `--passfile`, `--extpass`, or the terminal
    /// without echo (asked twice when `verify`).
    pub fn read(&self, prompt: &str, verify: bool) -> CliResult<Passphrase> {
        if let Some(p) = &self.passfile {
            return read_passfile(p);
        }
        if let Some(cmd) = &self.extpass {
            return run_extpass(cmd);
        }
        passphrase::ask(prompt, verify)
    }
}

/// The first line of `data`, without its newline (and a trailing `\r`);
/// refuses an empty password.
fn first_line(data: &[u8], place: &str) -> CliResult<Passphrase> {
    let end = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let mut line = &data[..end];
    if let Some(s) = line.strip_suffix(b"\r") {
        line = s;
    }
    if line.is_empty() {
        return Err(CliError::new(
            Code::Permission,
            "the password is empty",
            place,
            "put the password on the first line",
        ));
    }
    Ok(Zeroizing::new(line.to_vec()))
}

/// Reads a password file like gocryptfs `-passfile`: its first line.
pub fn read_passfile(p: &Path) -> CliResult<Passphrase> {
    let shown = p.display().to_string();
    let f = std::fs::File::open(p)
        .map_err(|e| CliError::io("cannot open the password file", &shown, &e))?;
    let data =
        read_secret(f).map_err(|e| CliError::io("cannot read the password file", &shown, &e))?;
    first_line(&data, &shown)
}

/// Runs `cmd` with `sh -c` like gocryptfs `-extpass`; its first output line.
pub fn run_extpass(cmd: &str) -> CliResult<Passphrase> {
    let place = format!("--extpass {cmd}");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| CliError::io("cannot run the password program", &place, &e))?;
    let read = child.stdout.take().map(read_secret);
    let status = child
        .wait()
        .map_err(|e| CliError::io("cannot run the password program", &place, &e))?;
    let data = read
        .unwrap_or_else(|| Ok(Zeroizing::new(Vec::new())))
        .map_err(|e| CliError::io("cannot read the password program's output", &place, &e))?;
    if !status.success() {
        return Err(CliError::new(
            Code::Permission,
            format!("the password program failed ({status})"),
            place,
            "check the --extpass command",
        ));
    }
    first_line(&data, &place)
}

/// Reads at most [`passphrase::MAX_KEYFILE`] bytes of `r` into one
/// buffer allocated up front and wiped when dropped: a buffer grown while
/// reading would leave copies of the password in the memory it freed.
fn read_secret(mut r: impl Read) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut buf = Zeroizing::new(vec![0u8; passphrase::MAX_KEYFILE as usize]);
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // Shortening keeps the allocation (and so the wipe of all of it).
    buf.truncate(n);
    Ok(buf)
}

/// Checks that `p` is an existing directory (exit 4 otherwise).
pub fn need_dir(p: &Path, what: &str) -> CliResult<()> {
    if p.is_dir() {
        Ok(())
    } else {
        Err(CliError::new(
            Code::NotFound,
            format!("the {what} is not an existing directory"),
            p.display().to_string(),
            "check the path",
        ))
    }
}

/// Maps an error of the overlay crate to the exit-code table.
pub fn from_overlay(e: cryptkeep_overlay::Error, place: &Path) -> CliError {
    use cryptkeep_overlay::Error as E;
    let place = place.display().to_string();
    let what = e.to_string();
    match &e {
        E::Io { source, .. } => {
            let mut c = CliError::io("I/O error", &place, source);
            c.what = what;
            if source.kind() == std::io::ErrorKind::NotFound {
                c.hint = "is this a cipher directory? create one with: cryptkeep fs init CIPHERDIR"
                    .into();
            }
            c
        }
        E::WrongPassword { .. } => CliError::new(
            Code::Permission,
            what,
            place,
            "check --passfile/--extpass; nothing was changed",
        ),
        // `fs info` refuses the same config, so it is no use as a hint
        // (and the syntax error's text already says to restore it).
        E::ConfigSyntax { .. } => CliError::new(Code::Corrupt, what, place, "nothing was changed"),
        E::ConfigUnsupported { .. } => CliError::new(
            Code::Corrupt,
            what,
            place,
            "nothing was changed; restore gocryptfs.conf from a backup",
        ),
        E::UnknownFeatureFlag { .. } => CliError::new(
            Code::Corrupt,
            what,
            place,
            "open it with the tool that created it",
        ),
        E::NotEmpty { .. } => CliError::new(Code::Busy, what, place, "use an empty directory"),
        E::InvalidArgument(_) | E::InvalidName { .. } => {
            CliError::usage(what, place, "check the options: cryptkeep fs VERB --help")
        }
        E::Auth { .. } | E::BadHeader { .. } | E::BadName { .. } | E::DirIv { .. } => {
            CliError::new(
                Code::Corrupt,
                what,
                place,
                "check it with: cryptkeep fs fsck CIPHERDIR",
            )
        }
        E::Crypto(c) => from_crypto(c, &place),
        _ => CliError::new(
            Code::Unexpected,
            what,
            place,
            "unexpected error; please report it",
        ),
    }
}

/// Maps an error of the FUSE frontend to the exit-code table.
pub fn from_fuse(e: cryptkeep_fuse::Error, place: &Path) -> CliError {
    use cryptkeep_fuse::Error as E;
    let place = place.display().to_string();
    let what = e.to_string();
    let code = match &e {
        E::Mountpoint { .. } => Code::NotFound,
        E::Unmount { .. } => Code::Busy,
        _ => Code::Daemon,
    };
    CliError::new(code, what, place, "")
}

/// The run directory of overlay mounts: `$CRYPTKEEP_RUN_DIR/fs` or
/// `/run/cryptkeep/fs`.
pub fn run_dir() -> PathBuf {
    crate::state::run_dir().join("fs")
}

/// The file stem of a mount point's run files (pid, log): the canonical
/// path with `%` and `/` escaped.
fn stem(mountpoint: &Path) -> String {
    let s = mountpoint.display().to_string();
    let s = s.replace('%', "%25").replace('/', "%2F");
    // Keep within NAME_MAX with room for the suffix.
    if s.len() > 240 {
        let cut = (0..=240)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s[..cut].to_string()
    } else {
        s
    }
}

/// The pid file of the daemon serving `mountpoint` (canonical).
pub fn pid_path(mountpoint: &Path) -> PathBuf {
    run_dir().join(format!("{}.pid", stem(mountpoint)))
}

/// The log file of the daemon serving `mountpoint` (canonical).
pub fn log_path(mountpoint: &Path) -> PathBuf {
    run_dir().join(format!("{}.log", stem(mountpoint)))
}

/// Creates the run directory of overlay mounts (0700) after checking the
/// run directory. `Ok(None)` when this user may not create it (mounts
/// work without it, but `fs umount` then cannot wait for the daemon); a
/// run directory others could write to is an error (exit 2).
pub fn ensure_run_dir() -> CliResult<Option<PathBuf>> {
    match crate::state::ensure_run_dir() {
        Ok(_) => {}
        Err(e) if crate::rundir::is_unsafe(&e) => return Err(e),
        Err(_) => return Ok(None),
    }
    let d = run_dir();
    Ok(crate::rundir::make_dir(&d).ok().map(|_| d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passfile_takes_the_first_line_only() {
        assert_eq!(first_line(b"pw\nrest", "t").unwrap().as_slice(), b"pw");
        assert_eq!(first_line(b"pw\r\n", "t").unwrap().as_slice(), b"pw");
        assert_eq!(first_line(b"pw", "t").unwrap().as_slice(), b"pw");
        assert_eq!(first_line(b"\npw", "t").unwrap_err().code, Code::Permission);
    }

    #[test]
    fn extpass_output_is_the_password() {
        assert_eq!(run_extpass("echo s3cret").unwrap().as_slice(), b"s3cret");
        assert_eq!(run_extpass("false").unwrap_err().code, Code::Permission);
    }

    #[test]
    fn run_file_names_are_flat() {
        let p = pid_path(Path::new("/tmp/a b/c%d"));
        assert_eq!(
            p.file_name().unwrap().to_str().unwrap(),
            "%2Ftmp%2Fa b%2Fc%25d.pid"
        );
    }

    #[test]
    fn wrong_password_maps_to_2() {
        let e = cryptkeep_overlay::Error::WrongPassword {
            path: "/x/gocryptfs.conf".into(),
        };
        assert_eq!(from_overlay(e, Path::new("/x")).code, Code::Permission);
    }
}
