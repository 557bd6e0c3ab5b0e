//! Exit codes and the one error type of the `cryptkeep` command.
//!
//! The table follows cryptsetup's (`man cryptsetup`, "RETURN CODES") for
//! 0–5 and adds cryptkeep's own for what cryptsetup leaves to the kernel.
//! The same table is in docs/guide/cli.md; change both together.
//!
//! | code | meaning |
//! |-----:|---------|
//! | 0 | success |
//! | 1 | wrong parameters or usage (also: refused without confirmation) |
//! | 2 | no permission (also: an unsafe run directory) or bad passphrase / key file (no keyslot opened) |
//! | 3 | out of memory |
//! | 4 | wrong device or file: not found, not a LUKS volume, unknown NAME |
//! | 5 | already exists or busy: NAME or volume already open, file exists, mount busy |
//! | 6 | corrupt or unsupported header or gocryptfs.conf (KDF parameters out of range included), unmet LUKS2 requirement |
//! | 7 | daemon, FUSE or loop-device failure (also: a running pid `close` cannot prove is the daemon) |
//! | 8 | unexpected error (a bug: please report it) |
//! | 129, 130, 143 | interrupted by SIGHUP, SIGINT, SIGTERM (128 + its number) while unlocking; nothing left open or running |

use std::fmt;

/// An exit code from the documented table (see the module docs and docs/guide/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    /// 1: wrong parameters or usage.
    Usage = 1,
    /// 2: no permission (an unsafe run directory too), or the
    /// passphrase/key file opened no keyslot.
    Permission = 2,
    /// 3: out of memory.
    NoMemory = 3,
    /// 4: wrong device or file (missing, not LUKS, unknown name).
    NotFound = 4,
    /// 5: already exists or busy (already open, in use).
    Busy = 5,
    /// 6: corrupt or unsupported header, unmet requirement.
    Corrupt = 6,
    /// 7: daemon, FUSE or loop-device failure.
    Daemon = 7,
    /// 8: unexpected error.
    Unexpected = 8,
    /// 129: stopped by SIGHUP while unlocking.
    Hangup = 129,
    /// 130: stopped by SIGINT while unlocking.
    Interrupt = 130,
    /// 143: stopped by SIGTERM while unlocking.
    Terminated = 143,
}

impl Code {
    /// The numeric exit status.
    pub fn as_i32(self) -> i32 {
        self as i32
    }

    /// Maps a numeric status back (used by the daemon's readiness pipe).
    pub fn from_i32(n: i32) -> Code {
        match n {
            1 => Code::Usage,
            2 => Code::Permission,
            3 => Code::NoMemory,
            4 => Code::NotFound,
            5 => Code::Busy,
            6 => Code::Corrupt,
            7 => Code::Daemon,
            129 => Code::Hangup,
            130 => Code::Interrupt,
            143 => Code::Terminated,
            _ => Code::Unexpected,
        }
    }

    /// Whether this is the code of a command stopped by a signal.
    pub fn is_signal(self) -> bool {
        matches!(self, Code::Hangup | Code::Interrupt | Code::Terminated)
    }

    /// The code of a command stopped by signal `sig` (SIGHUP, SIGINT or
    /// SIGTERM; any other is reported as SIGTERM).
    pub fn for_signal(sig: i32) -> Code {
        match sig {
            libc::SIGHUP => Code::Hangup,
            libc::SIGINT => Code::Interrupt,
            _ => Code::Terminated,
        }
    }
}

/// An error of the command: exit code, what failed, where, and what to do.
/// Printed as `cryptkeep: <what> (<where>): <hint>`.
#[derive(Debug, Clone)]
pub struct CliError {
    /// The exit code from the documented table.
    pub code: Code,
    /// What failed.
    pub what: String,
    /// Where: the file, device, name or object.
    pub place: String,
    /// What to do about it.
    pub hint: String,
}

impl CliError {
    /// Builds an error from its four parts.
    pub fn new(
        code: Code,
        what: impl Into<String>,
        place: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        CliError {
            code,
            what: what.into(),
            place: place.into(),
            hint: hint.into(),
        }
    }

    /// A wrong-parameter error (exit 1).
    pub fn usage(
        what: impl Into<String>,
        place: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self::new(Code::Usage, what, place, hint)
    }

    /// An I/O error on `place`, classified by its kind.
    pub fn io(what: impl Into<String>, place: impl Into<String>, e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let what = format!("{}: {}", what.into(), e);
        let (code, hint) = match e.kind() {
            K::NotFound => (Code::NotFound, "check the path"),
            K::PermissionDenied => (
                Code::Permission,
                "run as root or fix the file's permissions",
            ),
            K::AlreadyExists => (Code::Busy, "remove it or choose another path"),
            K::OutOfMemory => (Code::NoMemory, "free some memory and retry"),
            K::UnexpectedEof => (
                Code::Corrupt,
                "the file is shorter than its header says; restore it from a header backup",
            ),
            _ => (Code::NotFound, "check the file or device and retry"),
        };
        Self::new(code, what, place, hint)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.what)?;
        if !self.place.is_empty() {
            write!(f, " ({})", self.place)?;
        }
        if !self.hint.is_empty() {
            write!(f, ": {}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {}

/// The result type of every command.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Maps an error of the LUKS crate to the table, with a hint for `place`.
pub fn from_luks(e: cryptkeep_luks::Error, place: &str) -> CliError {
    use cryptkeep_luks::Error as E;
    let what = e.to_string();
    match &e {
        E::Io { source, .. } => {
            let mut c = CliError::io("I/O error", place, source);
            c.what = what;
            c
        }
        E::NotLuks => CliError::new(
            Code::NotFound,
            what,
            place,
            "if its header is detached, pass --header FILE",
        ),
        E::BadHeader { .. } => CliError::new(
            Code::Corrupt,
            what,
            place,
            "to restore a backup: cryptkeep header restore VOLUME --header-backup-file FILE",
        ),
        E::WrongPassphrase => CliError::new(
            Code::Permission,
            what,
            place,
            "check --key-file/--key-slot; the keyslots: cryptkeep keyslot list VOLUME",
        ),
        E::NoFreeKeyslot => CliError::new(
            Code::Usage,
            what,
            place,
            "all keyslots are in use; remove one first: cryptkeep keyslot remove VOLUME --key-slot N",
        ),
        E::KeyslotInactive(_) | E::KeyslotOutOfRange(_) => CliError::new(
            Code::Usage,
            what,
            place,
            "pick an active keyslot: cryptkeep keyslot list VOLUME",
        ),
        E::KeyslotActive(_) => CliError::new(
            Code::Usage,
            what,
            place,
            "that keyslot is in use; leave out --key-slot to take a free one (cryptkeep keyslot list VOLUME)",
        ),
        E::InvalidArgument(_) => CliError::new(Code::Usage, what, place, "check the options: cryptkeep VERB --help"),
        E::WrongVolumeKey => CliError::new(
            Code::Permission,
            what,
            place,
            "the volume key does not match this header's digest",
        ),
        E::UnmetRequirement(_) | E::Unsupported(_) => CliError::new(
            Code::Corrupt,
            what,
            place,
            "this volume uses a feature cryptkeep does not support; open it with cryptsetup on a machine with device-mapper",
        ),
        E::Crypto(c) => from_crypto(c, place),
        _ => CliError::new(Code::Unexpected, what, place, "unexpected error; please report it"),
    }
}

/// Maps an error of the crypto crate to the table.
pub fn from_crypto(e: &cryptkeep_crypto::Error, place: &str) -> CliError {
    use cryptkeep_crypto::Error as E;
    let what = e.to_string();
    match e {
        E::UnsupportedHash(_) => CliError::new(Code::Usage, what, place, "use sha1, sha256 or sha512"),
        E::UnsupportedCipher(_) | E::InvalidKeySize { .. } => CliError::new(
            Code::Usage,
            what,
            place,
            "use a supported --cipher/--key-size: aes-xts-plain64 (256, 512), aes-xts-plain, aes-cbc-essiv:sha256, aes-cbc-plain64 (128, 192, 256)",
        ),
        E::Kdf(m) if m.contains("memory") => CliError::new(
            Code::NoMemory,
            what,
            place,
            "lower --pbkdf-memory or free some memory",
        ),
        _ => CliError::new(Code::Unexpected, what, place, "unexpected crypto failure; please report it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cryptkeep_luks::Error as L;

    #[test]
    fn luks_errors_map_to_the_documented_codes() {
        let io = |k| L::Io {
            what: "reading the header".into(),
            source: std::io::Error::from(k),
        };
        let cases = [
            (L::WrongPassphrase, Code::Permission),
            (L::NotLuks, Code::NotFound),
            (
                L::BadHeader {
                    what: "bad checksum".into(),
                },
                Code::Corrupt,
            ),
            (
                L::UnmetRequirement("online-reencrypt".into()),
                Code::Corrupt,
            ),
            (L::NoFreeKeyslot, Code::Usage),
            (L::KeyslotInactive(3), Code::Usage),
            (io(std::io::ErrorKind::NotFound), Code::NotFound),
            (io(std::io::ErrorKind::PermissionDenied), Code::Permission),
            (io(std::io::ErrorKind::UnexpectedEof), Code::Corrupt),
        ];
        for (e, want) in cases {
            let shown = e.to_string();
            let c = from_luks(e, "vol.img");
            assert_eq!(c.code, want, "{shown}");
            assert!(!c.hint.is_empty(), "{shown}: no hint");
            assert!(c.to_string().contains("(vol.img)"), "{c}");
        }
    }

    #[test]
    fn the_guide_documents_every_code() {
        let page = include_str!("../../../docs/guide/cli.md");
        for code in 0..=8 {
            assert!(
                page.contains(&format!("| {code} |")),
                "docs/guide/cli.md lacks exit code {code} in its table"
            );
        }
        assert!(
            page.contains("| 129, 130, 143 |"),
            "docs/guide/cli.md lacks the signal exit codes in its table"
        );
        for n in (1..=8).chain([129, 130, 143]) {
            assert_eq!(Code::from_i32(n).as_i32(), n);
        }
        for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
            assert_eq!(Code::for_signal(sig).as_i32(), 128 + sig);
        }
    }

    #[test]
    fn display_has_what_where_hint() {
        let e = CliError::new(
            Code::Busy,
            "volume v is already open",
            "/x.img",
            "close it first",
        );
        assert_eq!(
            e.to_string(),
            "volume v is already open (/x.img): close it first"
        );
    }
}
