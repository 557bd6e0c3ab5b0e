//! The client's TLS (`nbds://`): the greeting and `NBD_OPT_STARTTLS` on the
//! plain socket, then the TLS handshake with the server's certificate
//! checked against the CAs of `tls-certificates=DIR` (or the system's) and
//! the URI's host name; the rest of the handshake runs inside TLS. Every
//! connect and reconnect goes through here.

use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection};

use super::handshake::{self, Greeting, Peer};
use super::uri::{Transport, Uri};
use crate::stream::Stream;
use crate::tls::TlsStream;
use crate::Error;

/// For a TLS URI: the greeting, `NBD_OPT_STARTTLS` and the TLS handshake
/// on `sock` (blocking, within its timeouts, which the TLS session keeps);
/// answers the TLS stream and the greeting. For a plain URI: `sock` as it
/// is, and no greeting yet.
pub(crate) fn open(
    mut sock: Stream,
    uri: &Uri,
    peer: &Peer<'_>,
    timeout: Duration,
) -> Result<(Stream, Option<Greeting>), Error> {
    let Some(tls) = &uri.tls else {
        return Ok((sock, None));
    };
    let config = tls.config()?;
    let host = match (&tls.hostname, &uri.transport) {
        (Some(h), _) => h.clone(),
        (None, Transport::Tcp { host, .. }) => host.clone(),
        (None, Transport::Unix { .. }) => "localhost".into(),
    };
    let name = ServerName::try_from(host.clone()).map_err(|_| Error::Tls {
        peer: peer.server.into(),
        reason: format!("{host:?} is not a host name or IP address a certificate can name"),
    })?;
    let conn = ClientConnection::new(config, name).map_err(|e| Error::Tls {
        peer: peer.server.into(),
        reason: e.to_string(),
    })?;
    let greeting = handshake::greet(&mut sock, peer)?;
    handshake::starttls(&mut sock, peer, greeting)?;
    let s = TlsStream::handshake(Box::new(sock), Connection::Client(conn), Some(timeout)).map_err(
        |e| {
            match e.kind() {
                // Timeouts and resets stay connection errors (a timeout is
                // reported as the handshake's).
                std::io::ErrorKind::InvalidData => Error::Tls {
                    peer: peer.server.into(),
                    reason: e.to_string(),
                },
                _ => Error::Connection(e),
            }
        },
    )?;
    Ok((Stream::Tls(s), Some(greeting)))
}

/// An error of the negotiation after a TLS handshake: a server that drops
/// the connection right then (a reset, an end of file, a TLS alert) most
/// likely refused the client's certificate; TLS 1.3 tells the client only
/// after its side of the handshake is done.
pub(crate) fn explain(e: Error, uri: &Uri, peer: &Peer<'_>) -> Error {
    use std::io::ErrorKind as K;
    match e {
        Error::Connection(io)
            if uri.tls.is_some()
                && matches!(
                    io.kind(),
                    K::ConnectionReset | K::UnexpectedEof | K::BrokenPipe | K::InvalidData
                ) =>
        {
            Error::Tls {
                peer: peer.server.into(),
                reason: format!(
                    "the server ended the connection after the TLS handshake ({io}); it may \
                     require a client certificate (client-cert.pem and client-key.pem in \
                     tls-certificates=DIR) signed by a CA it trusts"
                ),
            }
        }
        e => e,
    }
}
