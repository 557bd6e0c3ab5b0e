//! The server's side of `NBD_OPT_STARTTLS`: once the option is
//! acknowledged, the TLS handshake on the socket (bounded by the
//! negotiation's timeout); the connection is then a TLS [`Stream`].

use std::sync::Arc;
use std::time::Duration;

use rustls::{Connection, ServerConfig, ServerConnection};

use crate::stream::Stream;
use crate::tls::TlsStream;
use crate::Error;

/// Runs the server's TLS handshake on `sock` (blocking, with its timeouts
/// set); a client that fails it (no certificate when one is required, a
/// protocol error) ends only its connection.
pub(crate) fn accept(
    sock: Stream,
    config: &Arc<ServerConfig>,
    timeout: Duration,
) -> Result<Stream, Error> {
    let conn = ServerConnection::new(config.clone()).map_err(|e| Error::Tls {
        peer: "a client".into(),
        reason: e.to_string(),
    })?;
    let tls = TlsStream::handshake(Box::new(sock), Connection::Server(conn), Some(timeout))
        .map_err(|e| Error::io("TLS handshake", e))?;
    Ok(Stream::Tls(tls))
}
