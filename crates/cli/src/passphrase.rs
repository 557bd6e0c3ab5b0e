//! Passphrases and key files, with cryptsetup's semantics (cryptsetup(8),
//! "NOTES ON PASSPHRASE PROCESSING"):
//! - `--key-file FILE` (`-` = standard input) is read whole, in binary, no
//!   newline processing, at most 8 MiB, after skipping `--keyfile-offset`
//!   bytes and stopping at `--keyfile-size` bytes when given;
//! - without a key file, from a terminal: read without echo (asked twice when
//!   a new passphrase is set);
//! - without a key file, standard input not a terminal: one line, the
//!   trailing newline stripped.
//!
//! Everything read lives in zeroizing buffers.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::exit::{CliError, CliResult, Code};

/// cryptsetup's maximum key-file size (8192 kB).
pub const MAX_KEYFILE: u64 = 8 << 20;

/// A passphrase or key-file content, wiped when dropped.
pub type Passphrase = Zeroizing<Vec<u8>>;

/// Where a passphrase comes from: a key file with offset/size, or the
/// terminal / standard input.
#[derive(Debug, Clone, Default)]
pub struct KeySource {
    /// `--key-file`; `-` means standard input.
    pub key_file: Option<PathBuf>,
    /// `--keyfile-size`: bytes to read (0 or None = all, up to 8 MiB).
    pub keyfile_size: Option<u64>,
    /// `--keyfile-offset`: bytes to skip first.
    pub keyfile_offset: u64,
}

impl KeySource {
    /// Reads the passphrase: from the key file if set, else prompts with
    /// `prompt` (and asks again to verify when `verify` and on a terminal).
    pub fn read(&self, prompt: &str, verify: bool) -> CliResult<Passphrase> {
        match &self.key_file {
            Some(p) => read_key_file(p, self.keyfile_offset, self.keyfile_size),
            None => ask(prompt, verify),
        }
    }
}

/// Whether standard input is a terminal.
pub fn stdin_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor number.
    unsafe { libc::isatty(0) == 1 }
}

/// Whether standard error is a terminal (progress lines go there only then).
pub fn stderr_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor number.
    unsafe { libc::isatty(2) == 1 }
}

/// Reads a key file with cryptsetup's semantics (binary, whole, ≤ 8 MiB).
pub fn read_key_file(path: &Path, offset: u64, size: Option<u64>) -> CliResult<Passphrase> {
    let shown = path.display().to_string();
    let size = size.filter(|&s| s > 0);
    if let Some(s) = size {
        if s > MAX_KEYFILE {
            return Err(CliError::usage(
                format!("--keyfile-size {s} is larger than the maximum of {MAX_KEYFILE} bytes"),
                shown,
                "use a smaller --keyfile-size",
            ));
        }
    }
    let mut reader: Box<dyn Read> = if path == Path::new("-") {
        Box::new(StdinRaw)
    } else {
        Box::new(
            File::open(path).map_err(|e| CliError::io("cannot open the key file", &shown, &e))?,
        )
    };
    // Skip the offset by reading (works for pipes too).
    let mut skip = offset;
    let mut scratch = Zeroizing::new(vec![0u8; 4096]);
    while skip > 0 {
        let n = (skip as usize).min(scratch.len());
        let got = reader
            .read(&mut scratch[..n])
            .map_err(|e| CliError::io("cannot read the key file", &shown, &e))?;
        if got == 0 {
            break;
        }
        skip -= got as u64;
    }
    let limit = size.unwrap_or(MAX_KEYFILE + 1);
    let mut out: Passphrase = Zeroizing::new(Vec::new());
    loop {
        if out.len() as u64 >= limit {
            break;
        }
        let want = ((limit - out.len() as u64) as usize).min(scratch.len());
        let got = reader
            .read(&mut scratch[..want])
            .map_err(|e| CliError::io("cannot read the key file", &shown, &e))?;
        if got == 0 {
            break;
        }
        grow_secret(&mut out, &scratch[..got]);
    }
    if size.is_none() && out.len() as u64 > MAX_KEYFILE {
        return Err(CliError::usage(
            "the key file is larger than the maximum of 8 MiB",
            shown,
            "use --keyfile-size to read only part of it",
        ));
    }
    if let Some(s) = size {
        if (out.len() as u64) < s {
            return Err(CliError::new(
                Code::Permission,
                format!(
                    "the key file ended after {} of the {s} bytes asked by --keyfile-size",
                    out.len()
                ),
                shown,
                "check --keyfile-size and --keyfile-offset",
            ));
        }
    }
    if out.is_empty() {
        return Err(CliError::new(
            Code::Permission,
            "the key file is empty (nothing to read)",
            shown,
            "check the key file and --keyfile-offset",
        ));
    }
    Ok(out)
}

/// Asks for a passphrase: on a terminal without echo (twice if `verify`),
/// else one line from standard input with its newline stripped.
pub fn ask(prompt: &str, verify: bool) -> CliResult<Passphrase> {
    if !stdin_is_tty() {
        let p = read_line_stdin()?;
        return nonempty(p);
    }
    let first = read_tty_noecho(prompt)?;
    if verify {
        let second = read_tty_noecho("Verify passphrase: ")?;
        if *first != *second {
            return Err(CliError::new(
                Code::Permission,
                "passphrases do not match",
                "terminal",
                "type the same passphrase twice",
            ));
        }
    }
    nonempty(first)
}

fn nonempty(p: Passphrase) -> CliResult<Passphrase> {
    if p.is_empty() {
        return Err(CliError::new(
            Code::Permission,
            "empty passphrase",
            "standard input",
            "type a passphrase, or use --key-file",
        ));
    }
    Ok(p)
}

/// Asks a yes/no question like cryptsetup ("Type 'yes' in capital letters").
/// `batch` (--batch-mode) answers yes. Without a terminal on standard input
/// the question cannot be asked and the action is refused (cryptsetup
/// proceeds there; cryptkeep prefers not to destroy data unasked).
pub fn confirm(question: &str, place: &str, batch: bool) -> CliResult<()> {
    if batch {
        return Ok(());
    }
    if !stdin_is_tty() {
        return Err(CliError::usage(
            format!(
                "refused without confirmation: {}",
                question.lines().next().unwrap_or(question)
            ),
            place,
            "standard input is not a terminal to confirm on; add --batch-mode (-q) to proceed",
        ));
    }
    eprint!("\n{question}\n\nAre you sure? (Type 'yes' in capital letters): ");
    let _ = std::io::stderr().flush();
    let answer = read_line_stdin()?;
    if answer.as_slice() == b"YES" {
        Ok(())
    } else {
        Err(CliError::usage(
            "operation aborted",
            place,
            "answer YES to proceed",
        ))
    }
}

/// Reads one line from standard input, byte by byte (so later reads of
/// standard input see the rest), without its newline; at most 8 MiB.
fn read_line_stdin() -> CliResult<Passphrase> {
    let mut out: Passphrase = Zeroizing::new(Vec::new());
    let mut b = [0u8; 1];
    let mut r = StdinRaw;
    loop {
        let n = r
            .read(&mut b)
            .map_err(|e| CliError::io("cannot read the passphrase", "standard input", &e))?;
        if n == 0 || b[0] == b'\n' {
            break;
        }
        if out.len() as u64 >= MAX_KEYFILE {
            return Err(CliError::usage(
                "passphrase longer than 8 MiB",
                "standard input",
                "use --key-file for binary keys",
            ));
        }
        grow_secret(&mut out, &b);
    }
    zeroize::Zeroize::zeroize(&mut b);
    Ok(out)
}

/// Appends to a secret buffer without leaving copies behind on reallocation.
fn grow_secret(buf: &mut Passphrase, more: &[u8]) {
    if buf.len() + more.len() > buf.capacity() {
        let mut bigger: Passphrase =
            Zeroizing::new(Vec::with_capacity((buf.len() + more.len()).max(64) * 2));
        bigger.extend_from_slice(buf);
        *buf = bigger;
    }
    buf.extend_from_slice(more);
}

fn read_tty_noecho(prompt: &str) -> CliResult<Passphrase> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let fd = std::io::stdin().as_raw_fd();
    // SAFETY: termios is plain data; tcgetattr fills it for a valid fd.
    let mut old: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is our standard input; `old` is a valid termios to fill.
    let have_termios = unsafe { libc::tcgetattr(fd, &mut old) } == 0;
    if have_termios {
        let mut new = old;
        new.c_lflag &= !libc::ECHO;
        new.c_lflag |= libc::ECHONL;
        // SAFETY: sets attributes of our own terminal from a valid termios.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &new) };
    }
    let line = read_line_stdin();
    if have_termios {
        // SAFETY: restores the attributes read above.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &old) };
    }
    line
}

/// Unbuffered reader of file descriptor 0.
struct StdinRaw;

impl Read for StdinRaw {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: buf is a valid writable slice of buf.len() bytes.
            let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str, data: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ck-pp-{}-{name}", std::process::id()));
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn key_file_is_binary_and_whole() {
        let p = tmp("a", b"secret\n\0tail");
        let k = read_key_file(&p, 0, None).unwrap();
        assert_eq!(k.as_slice(), b"secret\n\0tail");
        let k = read_key_file(&p, 2, Some(5)).unwrap();
        assert_eq!(k.as_slice(), b"cret\n");
        assert!(read_key_file(&p, 0, Some(100)).is_err());
        assert!(read_key_file(&p, 100, None).is_err());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn key_file_over_8_mib_is_refused() {
        let p = tmp("big", &vec![7u8; (MAX_KEYFILE + 1) as usize]);
        let e = read_key_file(&p, 0, None).unwrap_err();
        assert_eq!(e.code, Code::Usage);
        assert_eq!(read_key_file(&p, 0, Some(32)).unwrap().len(), 32);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn missing_key_file_is_not_found() {
        let e = read_key_file(Path::new("/nonexistent/ck-key"), 0, None).unwrap_err();
        assert_eq!(e.code, Code::NotFound);
    }
}
