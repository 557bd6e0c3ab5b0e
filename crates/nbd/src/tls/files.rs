//! Certificates and private keys from PEM files given by the user: each
//! file must be a regular file of at most [`MAX_PEM`] bytes; errors name
//! the file, what it was meant to hold, and what is wrong.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use zeroize::Zeroizing;

use crate::Error;

/// The largest PEM file read (a chain of a few certificates is ~10 KiB).
const MAX_PEM: u64 = 1 << 20;

fn bad(what: &'static str, path: &Path, reason: impl Into<String>) -> Error {
    Error::TlsFile {
        what,
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The bytes of `path`, a regular file of at most [`MAX_PEM`] bytes, in a
/// buffer wiped when dropped (it may hold a private key). Opened
/// non-blocking, so that a FIFO put there cannot hang the open.
fn read_bounded(what: &'static str, path: &Path) -> Result<Zeroizing<Vec<u8>>, Error> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| bad(what, path, e.to_string()))?;
    let meta = f.metadata().map_err(|e| bad(what, path, e.to_string()))?;
    if !meta.is_file() {
        return Err(bad(what, path, "not a regular file"));
    }
    if meta.len() > MAX_PEM {
        return Err(bad(what, path, "larger than 1 MiB: not a PEM file"));
    }
    // One allocation of the final size: growing would leave copies behind.
    let mut data = Zeroizing::new(Vec::with_capacity(MAX_PEM as usize + 1));
    f.take(MAX_PEM + 1)
        .read_to_end(&mut data)
        .map_err(|e| bad(what, path, e.to_string()))?;
    if data.len() as u64 > MAX_PEM {
        return Err(bad(what, path, "larger than 1 MiB: not a PEM file"));
    }
    Ok(data)
}

/// Every certificate (`BEGIN CERTIFICATE`) in the PEM file at `path`; at
/// least one.
pub(crate) fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let data = read_bounded(what, path)?;
    let mut certs = Vec::new();
    for c in CertificateDer::pem_slice_iter(&data) {
        certs.push(c.map_err(|e| bad(what, path, format!("bad PEM: {e}")))?);
    }
    if certs.is_empty() {
        return Err(bad(
            what,
            path,
            "no PEM certificate (BEGIN CERTIFICATE) in it",
        ));
    }
    Ok(certs)
}

/// The private key (PKCS#8, PKCS#1 or SEC1, in PEM) at `path`.
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let what = "private key";
    let data = read_bounded(what, path)?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|e| {
        let why = match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) in it"
                    .to_string()
            }
            e => format!("bad PEM: {e}"),
        };
        bad(what, path, why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_say_which_and_why() {
        let dir = std::env::temp_dir().join(format!("ck-tls-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = certificates("certificate", &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.pem") && e.contains("certificate"),
            "{e}"
        );
        let e = certificates("certificate", &dir).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, b"hello\n").unwrap();
        let e = certificates("certificate", &empty).unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = private_key(&empty).unwrap_err().to_string();
        assert!(e.contains("no PEM private key"), "{e}");
        let big = dir.join("big.pem");
        std::fs::write(&big, vec![b'a'; (MAX_PEM + 10) as usize]).unwrap();
        let e = private_key(&big).unwrap_err().to_string();
        assert!(e.contains("larger than 1 MiB"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
