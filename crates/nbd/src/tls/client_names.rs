//! [`NamedClients`]: client certificates verified against the client CAs
//! (rustls's WebPKI verifier) and then held to a list of names, one of
//! which the certificate must carry in its subjectAltName as a DNS name
//! (or an IP address), checked as a server's name is (RFC 6125, WebPKI),
//! except that a wildcard does not count: a certificate for
//! `*.corp.example` names no single client, so it is never taken for
//! `laptop.corp.example`.
//! The TLS handshake of a client whose certificate names none of them
//! fails with `NotValidForName`, as qemu-nbd refuses one its `tls-authz`
//! does not list.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// A client certificate verifier that also requires one of `names`.
#[derive(Debug)]
pub(crate) struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
}

/// `name` as an allowed client name: a DNS name or an IP address (for
/// `--nbd-tls-allow`'s parser too); the error says what it is not.
pub fn client_name(name: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(name)
        .map(|s| s.to_owned())
        .map_err(|_| format!("'{name}' is not a DNS name or an IP address"))
}

impl NamedClients {
    /// `inner` (the CA check) and then one of `names` (DNS names or IP
    /// addresses); an unusable name is an error naming it.
    pub(crate) fn new(
        inner: Arc<dyn ClientCertVerifier>,
        names: &[String],
    ) -> Result<NamedClients, String> {
        let names = names
            .iter()
            .map(|n| client_name(n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NamedClients { inner, names })
    }

    /// Whether `cert` names one of the allowed names: WebPKI's match, and
    /// for a DNS name also that very name among the certificate's DNS
    /// names (a wildcard alone does not do).
    fn names_one(&self, cert: &CertificateDer<'_>) -> bool {
        let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
            return false;
        };
        self.names.iter().any(|n| {
            ee.verify_is_valid_for_subject_name(n).is_ok()
                && match n {
                    ServerName::DnsName(d) => {
                        let want = d.as_ref().trim_end_matches('.');
                        ee.valid_dns_names().any(|have| {
                            !have.starts_with('*')
                                && have.trim_end_matches('.').eq_ignore_ascii_case(want)
                        })
                    }
                    _ => true,
                }
        })
    }
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.names_one(end_entity) {
            Ok(ok)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
