//! `open --nbd`: the NBD export of an open volume, served by the daemon
//! beside the FUSE block file (the daemon holds only a handle on the keep,
//! never the key).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args as ClapArgs, ValueEnum};
use cryptkeep_nbd::server::{self, BlockStore, Endpoint, Export, Limits, Server};
use cryptkeep_nbd::tls::{ServerTls, TlsMode};

use crate::exit::{CliError, CliResult, Code};
use crate::state::NbdState;

/// The NBD options of `open`.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct NbdArgs {
    /// Also export the decrypted volume over NBD at unix:PATH or
    /// tcp:ADDR:PORT (qemu, nbdcopy, nbdinfo, the kernel's nbd-client connect).
    /// Needs --keep process (the default): the daemon that accepts
    /// connections never holds the key. Anyone who can connect reads and
    /// writes the plaintext: a unix socket is created mode 0600; without
    /// --nbd-tls-cert a TCP address has no TLS, so bind it to loopback or a
    /// trusted network.
    #[arg(long, value_name = "unix:PATH|tcp:ADDR:PORT")]
    pub nbd: Option<String>,
    /// TLS for the NBD export (NBD_OPT_STARTTLS): the server's certificate
    /// chain, PEM (qemu's and nbdkit's server-cert.pem). Needs --nbd-tls-key.
    #[arg(long = "nbd-tls-cert", value_name = "FILE", requires_all = ["nbd", "nbd_tls_key"])]
    pub nbd_tls_cert: Option<PathBuf>,
    /// The private key of --nbd-tls-cert, PEM (server-key.pem).
    #[arg(long = "nbd-tls-key", value_name = "FILE", requires = "nbd_tls_cert")]
    pub nbd_tls_key: Option<PathBuf>,
    /// Verify clients: only clients with a certificate signed by a CA in
    /// this PEM file get through the TLS handshake (ca-cert.pem).
    #[arg(long = "nbd-tls-ca", value_name = "FILE", requires = "nbd_tls_cert")]
    pub nbd_tls_ca: Option<PathBuf>,
    /// With --nbd-tls-ca: admit only client certificates that also name
    /// NAME (a DNS name or IP address in their subjectAltName, matched as
    /// a server's name is); repeat for more clients (qemu-nbd's tls-authz).
    #[arg(
        long = "nbd-tls-allow",
        value_name = "NAME",
        requires = "nbd_tls_ca",
        value_parser = allowed_name
    )]
    pub nbd_tls_allow: Vec<String>,
    /// require (the default with --nbd-tls-cert; qemu-nbd --tls-creds,
    /// nbdkit --tls=require): clients must start TLS before anything else;
    /// on (nbdkit --tls=on): TLS is offered, plaintext clients are served too.
    #[arg(long = "nbd-tls", value_name = "MODE", requires = "nbd_tls_cert")]
    pub nbd_tls: Option<TlsArg>,
    /// The NBD export name (default: NAME).
    #[arg(long = "nbd-name", value_name = "EXPORT", requires = "nbd")]
    pub nbd_name: Option<String>,
    /// The NBD export's description, shown by nbdinfo.
    #[arg(long = "nbd-description", value_name = "TEXT", requires = "nbd")]
    pub nbd_description: Option<String>,
    /// Serve only the NBD export: attach no loop device.
    #[arg(long = "no-loop", requires = "nbd", conflicts_with = "mount")]
    pub no_loop: bool,
    /// Connections the export serves at once (default 32), half of them
    /// at most from one TCP address (an IPv6 /64); loopback and unix-socket
    /// clients count only against the total.
    #[arg(
        long = "nbd-max-connections",
        value_name = "N",
        requires = "nbd",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub nbd_max_connections: Option<u16>,
}

/// `--nbd-tls`: whether TLS is required or only offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TlsArg {
    /// TLS offered; plaintext clients served too.
    On,
    /// TLS required before any other option.
    Require,
}

/// `--nbd-tls-allow`: a DNS name or an IP address.
fn allowed_name(s: &str) -> Result<String, String> {
    cryptkeep_nbd::tls::client_name(s).map(|_| s.to_string())
}

/// What the daemon needs to export the volume.
#[derive(Debug, Clone)]
pub struct NbdOpts {
    /// Where to listen.
    pub endpoint: Endpoint,
    /// The export.
    pub export: Export,
    /// No loop device.
    pub no_loop: bool,
    /// TLS, with the certificate and key already read.
    pub tls: Option<ServerTls>,
    /// Bounds on clients (`--nbd-max-connections`).
    pub limits: Limits,
}

impl NbdArgs {
    /// Whether the export listens only where other machines cannot reach
    /// it: a unix socket, or a TCP loopback address.
    fn loopback_only(&self) -> bool {
        let Some(ep) = self.nbd.as_deref() else {
            return true;
        };
        match ep.strip_prefix("tcp:") {
            None => true,
            Some(a) => a
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback()),
        }
    }

    /// The export for NAME, if `--nbd` was given; refused with an inline
    /// key (the process that accepts connections must not hold it).
    pub fn opts(
        &self,
        name: &str,
        read_only: bool,
        allow_discards: bool,
        inline_key: bool,
    ) -> CliResult<Option<NbdOpts>> {
        let Some(ep) = &self.nbd else {
            return Ok(None);
        };
        if inline_key {
            return Err(CliError::usage(
                "--nbd needs the key in the keep process: the daemon that accepts network \
                 connections must never hold it",
                "--keep inline",
                "leave out --keep inline",
            ));
        }
        let endpoint: Endpoint = ep.parse().map_err(|e| {
            CliError::usage(
                format!("{e}"),
                ep.clone(),
                "e.g. --nbd unix:/run/vol.sock or --nbd tcp:127.0.0.1:10809",
            )
        })?;
        let export_name = self.nbd_name.clone().unwrap_or_else(|| name.to_string());
        for (what, s) in [
            ("--nbd-name", Some(&export_name)),
            ("--nbd-description", self.nbd_description.as_ref()),
        ] {
            if s.is_some_and(|s| s.len() > cryptkeep_nbd::proto::MAX_STRING) {
                return Err(CliError::usage(
                    format!("{what} is longer than 4096 bytes"),
                    what,
                    "use a shorter one",
                ));
            }
        }
        let tls = self.tls()?;
        Ok(Some(NbdOpts {
            tls,
            endpoint,
            export: Export {
                name: export_name,
                description: self.nbd_description.clone(),
                read_only,
                allow_trim: allow_discards,
            },
            no_loop: self.no_loop,
            limits: self.nbd_max_connections.map_or_else(Limits::default, |n| {
                Limits::default().with_max_connections(usize::from(n))
            }),
        }))
    }
}

impl NbdArgs {
    /// `--nbd-tls-*`: the certificate, key and client CAs read now (before
    /// the daemon starts), with an error that names the file.
    fn tls(&self) -> CliResult<Option<ServerTls>> {
        let (Some(cert), Some(key)) = (&self.nbd_tls_cert, &self.nbd_tls_key) else {
            return Ok(None);
        };
        let mode = match self.nbd_tls.unwrap_or(TlsArg::Require) {
            TlsArg::On => TlsMode::On,
            TlsArg::Require => TlsMode::Require,
        };
        if mode == TlsMode::On && !self.nbd_tls_allow.is_empty() {
            return Err(CliError::usage(
                "--nbd-tls-allow admits only the clients it names, but with --nbd-tls on \
                 a client that never starts TLS is served without a certificate",
                "--nbd-tls on",
                "drop --nbd-tls on (TLS is then required), or drop --nbd-tls-allow",
            ));
        }
        if std::fs::metadata(key).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
            eprintln!(
                "cryptkeep: warning: the TLS private key {} can be read by other users; \
                 make it private: chmod 600 {}",
                key.display(),
                key.display()
            );
        }
        if self.nbd_tls_ca.is_none() && !self.loopback_only() {
            eprintln!(
                "cryptkeep: warning: without --nbd-tls-ca, TLS encrypts the export but lets \
                 any client in; to admit only clients with certificates your CA signed, give \
                 --nbd-tls-ca"
            );
        }
        ServerTls::load(
            cert,
            key,
            self.nbd_tls_ca.as_deref(),
            &self.nbd_tls_allow,
            mode,
        )
        .map(Some)
        .map_err(|e| {
            let at = match &e {
                cryptkeep_nbd::Error::TlsFile { path, .. } => path.display().to_string(),
                _ => cert.display().to_string(),
            };
            CliError::usage(
                format!("{e}"),
                at,
                "give PEM files: --nbd-tls-cert the certificate chain, --nbd-tls-key its \
                     private key, --nbd-tls-ca the CA that signs client certificates \
                     (docs/guide/nbd.md shows how to make them with certtool or openssl)",
            )
        })
    }
}

/// Starts the export of `store`; answers the server and its record.
pub fn start<S: BlockStore>(store: Arc<S>, o: &NbdOpts) -> CliResult<(Server, NbdState)> {
    // A client that goes away while a reply is written must end only its
    // connection (EPIPE), not the process (`open --foreground` keeps the
    // default disposition main sets).
    // SAFETY: SIG_IGN is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let srv = server::serve_tls(
        &o.endpoint,
        store,
        o.export.clone(),
        o.limits,
        o.tls.clone(),
    )
    .map_err(|e| {
        let code = match e {
            cryptkeep_nbd::Error::InUse(_) => Code::Busy,
            _ => Code::Daemon,
        };
        CliError::new(
            code,
            format!("cannot serve NBD: {e}"),
            o.endpoint.to_string(),
            "choose another --nbd endpoint",
        )
    })?;
    let endpoint = srv.endpoint().to_string();
    let uri = uri(srv.endpoint(), &o.export.name, o.tls.is_some());
    let with = match &o.tls {
        Some(t) if t.mode() == TlsMode::Require => " (TLS required)",
        Some(_) => " (TLS offered)",
        None => "",
    };
    eprintln!(
        "cryptkeep: NBD export {:?} at {endpoint}{with}",
        o.export.name
    );
    Ok((
        srv,
        NbdState {
            endpoint,
            export: o.export.name.clone(),
            uri,
            no_loop: o.no_loop,
        },
    ))
}

/// The NBD URI of an export (as qemu and libnbd take it; `nbds` with TLS).
pub fn uri(ep: &Endpoint, export: &str, tls: bool) -> String {
    let s = if tls { "s" } else { "" };
    let name: String = export
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    match ep {
        Endpoint::Unix(p) => format!("nbd{s}+unix:///{name}?socket={}", p.display()),
        Endpoint::Tcp(a) => format!("nbd{s}://{a}/{name}"),
    }
}

/// Removes the unix socket a dead daemon left.
pub fn remove_stale_socket(st: &NbdState) {
    if let Some(p) = st.endpoint.strip_prefix("unix:") {
        if let Ok(place) = cryptkeep_nbd::server::SocketPath::open(Path::new(p)) {
            let _ = place.remove_stale();
        }
    }
}
