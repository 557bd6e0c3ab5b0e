//! TLS settings turned into rustls configurations: [`ServerTls`] (a
//! certificate chain and key, and optionally the CAs that client
//! certificates must chain to) and [`ClientTls`] (libnbd's
//! `tls-certificates=DIR` and `tls-verify-peer`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::client_names::NamedClients;
use super::files;
use super::insecure::NoVerify;
use crate::Error;

/// Where distributions keep the bundle of trusted CAs, the first found is
/// used by a client given no `tls-certificates` directory (the list Go's
/// crypto/x509 searches): Debian, Ubuntu and Gentoo; Fedora and RHEL 6;
/// openSUSE; OpenELEC; CentOS and RHEL 7 and later; Alpine.
const SYSTEM_CAS: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The system's CA bundle: `SSL_CERT_FILE` if set (as OpenSSL and Go
/// read it), else the first of `candidates` that exists.
fn system_cas(env: Option<std::ffi::OsString>, candidates: &[&str]) -> Result<PathBuf, Error> {
    if let Some(f) = env.filter(|f| !f.is_empty()) {
        let p = PathBuf::from(f);
        if !p.is_file() {
            return Err(tls_error(
                "CA certificates",
                &p,
                "SSL_CERT_FILE names it, and it is not a file this user can read: \
                 point SSL_CERT_FILE at a PEM bundle, or unset it",
            ));
        }
        return Ok(p);
    }
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            tls_error(
                "CA certificates",
                Path::new(candidates.first().copied().unwrap_or("")),
                format!(
                    "no system CA bundle found (looked for {}): install ca-certificates, \
                     set SSL_CERT_FILE, or give tls-certificates=DIR with DIR/ca-cert.pem",
                    candidates.join(", ")
                ),
            )
        })
}

/// rustls with the ring provider (no aws-lc-rs build).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: &'static str, path: &Path, e: impl fmt::Display) -> Error {
    Error::TlsFile {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// The certificates of `path` as trust anchors.
fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, Error> {
    let mut store = RootCertStore::empty();
    for c in files::certificates(what, path)? {
        store
            .add(c)
            .map_err(|e| tls_error(what, path, format!("unusable CA certificate: {e}")))?;
    }
    Ok(store)
}

/// Whether the server insists on TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// TLS is offered, plaintext is allowed too (the protocol's
    /// SELECTIVETLS with no TLS-only export; `nbdkit --tls=on`).
    On,
    /// TLS is required (the protocol's FORCEDTLS; `qemu-nbd --tls-creds`,
    /// `nbdkit --tls=require`): before `NBD_OPT_STARTTLS` every other
    /// option but `NBD_OPT_ABORT` gets `NBD_REP_ERR_TLS_REQD`, and
    /// `NBD_OPT_EXPORT_NAME` closes the connection.
    Require,
}

/// The server's TLS: its certificate and key, whether client certificates
/// are verified, and whether TLS is required.
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) config: Arc<ServerConfig>,
    mode: TlsMode,
    verifies_clients: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("mode", &self.mode)
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// The certificate chain in the PEM file `cert` (the server's first),
    /// its private key in `key`, and, with `client_ca`, the CAs client
    /// certificates must chain to (a client without one is refused in the
    /// TLS handshake); with `client_names` too, a client certificate must
    /// also carry one of them in its subjectAltName (a DNS name or an IP
    /// address, matched as a server's name is). TLS 1.2 and 1.3.
    pub fn load(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        client_names: &[String],
        mode: TlsMode,
    ) -> Result<ServerTls, Error> {
        let chain = files::certificates("certificate", cert)?;
        let key_der = files::private_key(key)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("certificate", cert, e))?;
        let builder = match client_ca {
            Some(ca) => {
                let what = "client CA certificates";
                let v = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(what, ca)?),
                    provider(),
                )
                .build()
                .map_err(|e| tls_error(what, ca, e))?;
                if client_names.is_empty() {
                    builder.with_client_cert_verifier(v)
                } else {
                    let named = NamedClients::new(v, client_names)
                        .map_err(|e| tls_error("allowed client name", ca, e))?;
                    builder.with_client_cert_verifier(Arc::new(named))
                }
            }
            None if !client_names.is_empty() => {
                return Err(tls_error(
                    "client CA certificates",
                    cert,
                    "client names are checked only on certificates a client CA verified: \
                     give the client CA too",
                ))
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key_der).map_err(|e| {
            tls_error(
                "private key",
                key,
                format!("does not fit the certificate {}: {e}", cert.display()),
            )
        })?;
        // No session resumption: every connection does a full handshake
        // (no TLS 1.3 tickets, no TLS 1.2 session cache).
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        Ok(ServerTls {
            config: Arc::new(config),
            mode,
            verifies_clients: client_ca.is_some(),
        })
    }

    /// Whether TLS is required or only offered.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether clients must present a certificate the client CAs signed.
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }
}

/// The client's TLS settings, as libnbd's URI query parameters give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// `tls-certificates=DIR`: `DIR/ca-cert.pem` holds the CAs the
    /// server's certificate must chain to; `DIR/client-cert.pem` and
    /// `DIR/client-key.pem`, if present, are the client's certificate and
    /// key. Without it, the system's trusted CAs verify the server and no
    /// client certificate is sent.
    pub certificates: Option<PathBuf>,
    /// `tls-verify-peer` (default true): verify the server's certificate
    /// and its name (the URI's host; `localhost` for a unix socket).
    /// False accepts any certificate: the connection is encrypted but not
    /// authenticated.
    pub verify_peer: bool,
    /// `tls-hostname=NAME`: the name the server's certificate must carry,
    /// instead of the URI's host.
    pub hostname: Option<String>,
}

impl Default for ClientTls {
    fn default() -> ClientTls {
        ClientTls {
            certificates: None,
            verify_peer: true,
            hostname: None,
        }
    }
}

impl ClientTls {
    /// The rustls configuration (the files are read each time: a
    /// reconnect picks up renewed certificates).
    pub(crate) fn config(&self) -> Result<Arc<ClientConfig>, Error> {
        let p = provider();
        let dir = self.certificates.as_deref();
        let builder = ClientConfig::builder_with_provider(p.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("certificates", dir.unwrap_or(Path::new("")), e))?;
        let builder = if !self.verify_peer {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(p)))
        } else {
            let ca = match dir {
                Some(d) => d.join("ca-cert.pem"),
                None => system_cas(std::env::var_os("SSL_CERT_FILE"), &SYSTEM_CAS)?,
            };
            builder.with_root_certificates(roots("CA certificates", &ca)?)
        };
        let client_cert = dir.map(|d| (d.join("client-cert.pem"), d.join("client-key.pem")));
        let config = match client_cert {
            Some((cert, key)) if cert.exists() => {
                let chain: Vec<CertificateDer<'static>> =
                    files::certificates("client certificate", &cert)?;
                builder
                    .with_client_auth_cert(chain, files::private_key(&key)?)
                    .map_err(|e| {
                        tls_error(
                            "private key",
                            &key,
                            format!("does not fit the certificate {}: {e}", cert.display()),
                        )
                    })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SSL_CERT_FILE` first, then the first bundle that exists; none: an
    /// error naming every place looked at and what to do.
    #[test]
    fn the_system_ca_bundle_is_found_where_the_distribution_keeps_it() {
        let dir = std::env::temp_dir().join(format!("ck-tls-cas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fedora = dir.join("ca-bundle.crt");
        std::fs::write(&fedora, b"x").unwrap();
        let debian = dir.join("ca-certificates.crt");
        let (d, f) = (debian.to_str().unwrap(), fedora.to_str().unwrap());
        assert_eq!(system_cas(None, &[d, f]).unwrap(), fedora);
        assert_eq!(system_cas(Some(f.into()), &[d]).unwrap(), fedora);
        let e = system_cas(Some("/somewhere/cas.pem".into()), &[d, f])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SSL_CERT_FILE") && e.contains("/somewhere/cas.pem"),
            "{e}"
        );
        let e = system_cas(Some(dir.clone().into()), &[f])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SSL_CERT_FILE"), "{e}");
        let e = system_cas(Some("".into()), &[d]).unwrap_err().to_string();
        assert!(
            e.contains("ca-certificates.crt") && e.contains("SSL_CERT_FILE"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
