//! TLS for NBD (`NBD_OPT_STARTTLS`), with rustls on the ring provider.
//!
//! - `stream.rs`: [`TlsStream`], a TLS session over a socket that one
//!   thread may read while others write (the server's reader and its reply
//!   writers; the client's handles);
//! - `files.rs`: certificates and keys read from PEM files, bounded, with
//!   errors that name the file;
//! - `config.rs`: the server's [`ServerTls`] and the client's
//!   [`ClientTls`] settings turned into rustls configurations;
//! - `client_names.rs`: client certificates held to a list of names.
//!
//! X.509 certificates only: rustls has no external pre-shared keys (TLS-PSK
//! as `qemu-nbd --object tls-creds-psk` or `nbdkit --tls-psk` use), so PSK
//! is refused with a clear error rather than emulated.

mod client_names;
mod config;
mod files;
mod insecure;
mod stream;

pub use client_names::client_name;
pub use config::{ClientTls, ServerTls, TlsMode};
pub(crate) use stream::{Socket, TlsStream};
