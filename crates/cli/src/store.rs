//! Where a volume lives: an image file or block device, or an export on an
//! NBD server (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`).
//! Every verb that takes a volume opens it through [`open`], so a URI works
//! wherever a path does.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cryptkeep_luks::BlockIo;
use cryptkeep_nbd::client::{Client, Options, Uri};
use cryptkeep_volume::{Backing, BackingDevice};

use crate::exit::{CliError, CliResult, Code};

/// The default of `--nbd-timeout`, in seconds.
pub const DEFAULT_NBD_TIMEOUT: u64 = 60;

/// `--nbd-timeout` of this process (and of the daemon it forks).
static NBD_TIMEOUT: AtomicU64 = AtomicU64::new(DEFAULT_NBD_TIMEOUT);

/// Sets how long a lost NBD server may stay away before I/O fails with EIO.
pub fn set_nbd_timeout(secs: u64) {
    NBD_TIMEOUT.store(secs.max(1), Ordering::Relaxed);
}

/// An open volume (or header file).
#[derive(Debug)]
pub enum Store {
    /// A local file or block device.
    File(File),
    /// An NBD export.
    Nbd(Arc<Client>),
}

/// The NBD URI `path` spells, if it spells one (a malformed one is a usage
/// error).
pub fn nbd_uri(path: &Path) -> CliResult<Option<Uri>> {
    let Some(s) = path.to_str().filter(|s| Uri::looks_like(s)) else {
        return Ok(None);
    };
    Uri::parse(s).map(Some).map_err(|e| {
        CliError::usage(
            e.to_string(),
            s,
            "write nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH \
             (nbds:// and nbds+unix:// for TLS, with ?tls-certificates=DIR)",
        )
    })
}

/// Whether `path` is an NBD URI.
pub fn is_nbd(path: &Path) -> bool {
    path.to_str().is_some_and(Uri::looks_like)
}

/// Connections the daemon opens to a server that allows several.
const DAEMON_CONNECTIONS: usize = 4;

/// Connects to the NBD export at `uri` (writable when `write`) with
/// `connections` connections if the server allows several.
pub fn connect(uri: &Uri, write: bool, connections: usize) -> CliResult<Arc<Client>> {
    let opts = Options {
        timeout: Duration::from_secs(NBD_TIMEOUT.load(Ordering::Relaxed)),
        write,
        connections,
    };
    Client::connect(uri, opts)
        .map(Arc::new)
        .map_err(|e| from_nbd(e, uri))
}

/// The CLI error for a failed NBD connect.
pub fn from_nbd(e: cryptkeep_nbd::Error, uri: &Uri) -> CliError {
    use cryptkeep_nbd::Error as E;
    let place = uri.to_string();
    let (code, hint) = match &e {
        E::Uri { .. } => (Code::Usage, "write nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH".to_string()),
        E::Unreachable { .. } => (
            Code::NotFound,
            "check that the NBD server runs and listens there (nbdinfo URI tells)".into(),
        ),
        E::UnknownExport { .. } => (
            Code::NotFound,
            format!("check the export name; nbdinfo --list {} lists the exports", list_uri(uri)),
        ),
        E::HandshakeTimeout { .. } => (
            Code::Busy,
            "the server may serve one client at a time and have one: close it, or let the server take more (qemu-nbd -e 4)".into(),
        ),
        E::ReadOnly { .. } => (
            Code::Permission,
            "open it with --read-only, or export it writable (qemu-nbd without -r, nbdkit without -r)".into(),
        ),
        E::Refused { code, .. } if *code == cryptkeep_nbd::proto::rep::ERR_TLS_REQD => (
            Code::Permission,
            "the server requires TLS: write nbds://HOST[:PORT]/EXPORT?tls-certificates=DIR (DIR holds ca-cert.pem, and client-cert.pem and client-key.pem if the server verifies clients)".into(),
        ),
        E::Refused { .. } => (Code::Permission, "check the server's export and TLS settings".into()),
        E::TlsFile { .. } => (
            Code::Usage,
            "tls-certificates=DIR must hold ca-cert.pem (the CA that signed the server's certificate) and, for client authentication, client-cert.pem and client-key.pem, all PEM".into(),
        ),
        E::Tls { .. } => (
            Code::Permission,
            "check that ca-cert.pem in tls-certificates=DIR signed the server's certificate, that the certificate names the URI's host (or give tls-hostname=NAME), and that the server accepts the client certificate".into(),
        ),
        _ => (Code::Daemon, "check the NBD server and the network, then retry".into()),
    };
    CliError::new(code, e.to_string(), place, hint)
}

/// The URI of the server without the export (for `nbdinfo --list`).
fn list_uri(uri: &Uri) -> String {
    let mut u = uri.clone();
    u.export.clear();
    u.to_string()
}

/// Opens a file, device or NBD export (one connection), read-write when
/// `write`; `what` names it in errors ("volume", "header file").
pub fn open(path: &Path, write: bool, what: &str) -> CliResult<Store> {
    match nbd_uri(path)? {
        Some(uri) => connect(&uri, write, 1).map(Store::Nbd),
        None => open_file(path, write, what).map(Store::File),
    }
}

/// Opens the volume the daemon serves: as [`open`], with several
/// connections to an NBD server that allows them.
pub fn open_served(path: &Path, write: bool) -> CliResult<Store> {
    match nbd_uri(path)? {
        Some(uri) => connect(&uri, write, DAEMON_CONNECTIONS).map(Store::Nbd),
        None => open_file(path, write, "volume").map(Store::File),
    }
}

/// Opens a file or device, read-write when `write`.
pub fn open_file(path: &Path, write: bool, what: &str) -> CliResult<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| {
            let mut err = CliError::io(
                format!("cannot open the {what}"),
                path.display().to_string(),
                &e,
            );
            if e.kind() == std::io::ErrorKind::NotFound {
                err.hint = format!("check the path of the {what}");
            }
            err
        })
}

impl Store {
    /// Size in bytes.
    pub fn size(&self) -> io::Result<u64> {
        BlockIo::size(self)
    }

    /// Makes written data durable (fsync, or an NBD flush).
    pub fn sync_all(&self) -> io::Result<()> {
        BlockIo::sync(self)
    }

    /// The file, if it is one.
    pub fn as_file(&self) -> Option<&File> {
        match self {
            Store::File(f) => Some(f),
            Store::Nbd(_) => None,
        }
    }

    /// The volume engine's view of it.
    pub fn into_backing(self) -> Backing {
        match self {
            Store::File(f) => Backing::File(f),
            Store::Nbd(c) => Backing::Device(c as Arc<dyn BackingDevice>),
        }
    }
}

impl BlockIo for Store {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        match self {
            Store::File(f) => BlockIo::read_at(f, buf, off),
            Store::Nbd(c) => BlockIo::read_at(&**c, buf, off),
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        match self {
            Store::File(f) => BlockIo::write_at(f, buf, off),
            Store::Nbd(c) => BlockIo::write_at(&**c, buf, off),
        }
    }

    fn size(&self) -> io::Result<u64> {
        match self {
            Store::File(f) => BlockIo::size(f),
            Store::Nbd(c) => BlockIo::size(&**c),
        }
    }

    fn sync(&self) -> io::Result<()> {
        match self {
            Store::File(f) => BlockIo::sync(f),
            Store::Nbd(c) => BlockIo::sync(&**c),
        }
    }
}
