//! NBD URIs as libnbd's `nbd_connect_uri` spells them:
//! `nbd://HOST[:PORT]/EXPORT` (TCP, port 10809 by default) and
//! `nbd+unix:///EXPORT?socket=PATH` (a Unix socket); `nbds://` and
//! `nbds+unix://` require TLS, with libnbd's query parameters
//! `tls-certificates=DIR`, `tls-verify-peer=false` and `tls-hostname=NAME`
//! (see [`ClientTls`]). The export name is the path after the first `/`,
//! percent-decoded; no path means the server's default export ("").
//! Pre-shared keys (`tls-psk-file`, `tls-username`), vsock and ssh
//! transports are refused with a clear error.

use std::fmt;
use std::path::PathBuf;

use crate::tls::ClientTls;
use crate::Error;

/// The IANA port of NBD.
pub const DEFAULT_PORT: u16 = 10809;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TCP to a host name or address and a port.
    Tcp {
        /// Host name, IPv4 address or IPv6 address (without brackets).
        host: String,
        /// TCP port.
        port: u16,
    },
    /// A Unix domain socket.
    Unix {
        /// The socket's path.
        path: PathBuf,
    },
}

/// A parsed NBD URI: where the server is and which export to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    /// Where the server listens.
    pub transport: Transport,
    /// The export name ("" for the default export).
    pub export: String,
    /// TLS settings (`nbds` schemes); `None`: plaintext.
    pub tls: Option<ClientTls>,
}

impl Uri {
    /// Whether `s` is meant as an NBD URI (starts with an `nbd` scheme),
    /// so a volume argument is a URI rather than a path.
    pub fn looks_like(s: &str) -> bool {
        let lower = s.get(..4).map(str::to_ascii_lowercase);
        lower.as_deref() == Some("nbd:")
            || lower.as_deref() == Some("nbd+")
            || s.get(..5).map(str::to_ascii_lowercase).as_deref() == Some("nbds:")
            || s.get(..5).map(str::to_ascii_lowercase).as_deref() == Some("nbds+")
    }

    /// Parses `s`.
    pub fn parse(s: &str) -> Result<Uri, Error> {
        let bad = |reason: &str| Error::Uri {
            uri: s.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = s.split_once("://").ok_or_else(|| {
            bad("expected nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH")
        })?;
        let (unix, tls) = match scheme.to_ascii_lowercase().as_str() {
            "nbd" | "nbd+tcp" => (false, false),
            "nbd+unix" => (true, false),
            "nbds" | "nbds+tcp" => (false, true),
            "nbds+unix" => (true, true),
            "nbd+vsock" | "nbds+vsock" | "nbd+ssh" => {
                return Err(bad("only the tcp and unix transports are supported"))
            }
            _ => {
                return Err(bad(
                    "unknown scheme; use nbd://, nbds://, nbd+unix:// or nbds+unix://",
                ))
            }
        };
        let mut settings = ClientTls::default();
        let mut tls_param = None;
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        if before_query.contains('#') || query.is_some_and(|q| q.contains('#')) {
            return Err(bad("fragments (#...) are not allowed"));
        }
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let export = decode(path).ok_or_else(|| bad("bad percent-encoding in the export name"))?;
        if export.len() > crate::proto::MAX_STRING {
            return Err(bad("the export name is longer than 4096 bytes"));
        }
        let mut socket = None;
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "socket" => {
                    let v = decode(v).ok_or_else(|| bad("bad percent-encoding in socket="))?;
                    socket = Some(PathBuf::from(v));
                }
                "tls-certificates" => {
                    let v = decode(v)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| bad("tls-certificates= needs a directory"))?;
                    settings.certificates = Some(PathBuf::from(v));
                    tls_param = Some(k);
                }
                "tls-verify-peer" => {
                    settings.verify_peer = match v.to_ascii_lowercase().as_str() {
                        "true" | "1" | "yes" | "on" => true,
                        "false" | "0" | "no" | "off" => false,
                        _ => return Err(bad("tls-verify-peer= takes true or false")),
                    };
                    tls_param = Some(k);
                }
                "tls-hostname" => {
                    let v = decode(v)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| bad("tls-hostname= needs a name"))?;
                    settings.hostname = Some(v);
                    tls_param = Some(k);
                }
                "tls-psk-file" | "tls-username" => {
                    return Err(bad(
                        "TLS with pre-shared keys is not supported (rustls has no external \
                         PSK); use certificates: tls-certificates=DIR",
                    ))
                }
                other => return Err(bad(&format!("unknown query parameter {other:?}"))),
            }
        }
        let transport = if unix {
            if !authority.is_empty() {
                return Err(bad(
                    "nbd+unix:// takes no host: write nbd+unix:///EXPORT?socket=PATH",
                ));
            }
            let path = socket.ok_or_else(|| bad("nbd+unix:// needs ?socket=PATH"))?;
            if path.as_os_str().is_empty() {
                return Err(bad("empty socket path"));
            }
            Transport::Unix { path }
        } else {
            if socket.is_some() {
                return Err(bad("socket= belongs to nbd+unix://"));
            }
            let (host, port) =
                host_port(authority).ok_or_else(|| bad("expected HOST[:PORT] after nbd://"))?;
            Transport::Tcp { host, port }
        };
        if let (false, Some(p)) = (tls, tls_param) {
            return Err(bad(&format!(
                "{p}= needs TLS: write nbds:// or nbds+unix://"
            )));
        }
        Ok(Uri {
            transport,
            export,
            tls: tls.then_some(settings),
        })
    }

    /// The server's address for messages: `HOST:PORT` or the socket path.
    pub fn server(&self) -> String {
        match &self.transport {
            Transport::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Transport::Tcp { host, port } => format!("{host}:{port}"),
            Transport::Unix { path } => format!("unix:{}", path.display()),
        }
    }
}

impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        let mut sep = match &self.transport {
            Transport::Tcp { .. } => {
                write!(f, "nbd{s}://{}/{}", self.server(), self.export)?;
                '?'
            }
            Transport::Unix { path } => {
                write!(
                    f,
                    "nbd{s}+unix:///{}?socket={}",
                    self.export,
                    path.display()
                )?;
                '&'
            }
        };
        if let Some(t) = &self.tls {
            let mut param = |f: &mut fmt::Formatter<'_>, kv: String| {
                let r = write!(f, "{sep}{kv}");
                sep = '&';
                r
            };
            if let Some(d) = &t.certificates {
                param(f, format!("tls-certificates={}", d.display()))?;
            }
            if !t.verify_peer {
                param(f, "tls-verify-peer=false".into())?;
            }
            if let Some(h) = &t.hostname {
                param(f, format!("tls-hostname={h}"))?;
            }
        }
        Ok(())
    }
}

/// `HOST[:PORT]`, `[V6]:PORT`; no user info. None if malformed.
fn host_port(a: &str) -> Option<(String, u16)> {
    if a.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (h.to_string(), port)
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (a.to_string(), None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(p) => p.parse().ok().filter(|&p| p != 0)?,
    };
    let host = decode(&host).filter(|h| !h.contains(['/', ' ']))?;
    Some((host, port))
}

/// Percent-decodes `s` into UTF-8; None on a bad escape or bad UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let h = std::str::from_utf8(h).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export: &str) -> Uri {
        Uri {
            transport: Transport::Tcp {
                host: host.into(),
                port,
            },
            export: export.into(),
            tls: None,
        }
    }

    #[test]
    fn tcp_uris() {
        assert_eq!(
            Uri::parse("nbd://example.com/disk").unwrap(),
            tcp("example.com", 10809, "disk")
        );
        assert_eq!(
            Uri::parse("nbd://h:1234/a/b").unwrap(),
            tcp("h", 1234, "a/b")
        );
        assert_eq!(Uri::parse("nbd://h").unwrap(), tcp("h", 10809, ""));
        assert_eq!(Uri::parse("nbd://h/").unwrap(), tcp("h", 10809, ""));
        assert_eq!(Uri::parse("nbd://[::1]:99/x").unwrap(), tcp("::1", 99, "x"));
        assert_eq!(Uri::parse("nbd://[::1]/x").unwrap(), tcp("::1", 10809, "x"));
        assert_eq!(
            Uri::parse("NBD+TCP://h/e%20x").unwrap(),
            tcp("h", 10809, "e x")
        );
        assert_eq!(Uri::parse("nbd://h:99/x").unwrap().server(), "h:99");
        assert_eq!(Uri::parse("nbd://[::1]:99/x").unwrap().server(), "[::1]:99");
    }

    #[test]
    fn unix_uris() {
        let u = Uri::parse("nbd+unix:///vol?socket=/tmp/s%20k").unwrap();
        assert_eq!(
            u.transport,
            Transport::Unix {
                path: "/tmp/s k".into()
            }
        );
        assert_eq!(u.export, "vol");
        let u = Uri::parse("nbd+unix://?socket=/s").unwrap();
        assert_eq!(u.export, "");
        assert_eq!(u.server(), "unix:/s");
    }

    #[test]
    fn bad_uris_say_why() {
        for (s, why) in [
            ("nbds://h/x?tls-psk-file=/k", "pre-shared"),
            ("nbds://h/x?tls-username=u", "pre-shared"),
            ("nbds://h/x?tls-verify-peer=maybe", "true or false"),
            ("nbd://h/x?tls-certificates=/d", "nbds"),
            ("nbd+vsock:///x", "transports"),
            ("http://h/x", "scheme"),
            ("nbd:h", "expected"),
            ("nbd+unix:///x", "socket"),
            ("nbd+unix://h/x?socket=/s", "no host"),
            ("nbd://h/x?socket=/s", "nbd+unix"),
            ("nbd://h:0/x", "HOST"),
            ("nbd://h:99999/x", "HOST"),
            ("nbd://h:port/x", "HOST"),
            ("nbd:///x", "HOST"),
            ("nbd://u@h/x", "HOST"),
            ("nbd://h/x%zz", "percent"),
            ("nbd://h/x%ff", "percent"),
            ("nbd://h/x?foo=1", "unknown query"),
            ("nbd://h/x?tls=on", "unknown query"),
            ("nbd://h/x#f", "fragment"),
        ] {
            let e = Uri::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
        let long = format!("nbd://h/{}", "a".repeat(4097));
        assert!(Uri::parse(&long).is_err());
    }

    #[test]
    fn what_looks_like_a_uri() {
        assert!(Uri::looks_like("nbd://h/x"));
        assert!(Uri::looks_like("nbd+unix:///x?socket=/s"));
        assert!(Uri::looks_like("NBDS://h"));
        assert!(!Uri::looks_like("/dev/sda"));
        assert!(!Uri::looks_like("nbd.img"));
        assert!(!Uri::looks_like("nb"));
    }

    #[test]
    fn tls_uris() {
        let u = Uri::parse("nbds://h:99/x?tls-certificates=/etc/pki/x%20y").unwrap();
        let t = u.tls.unwrap();
        assert_eq!(
            t.certificates.as_deref(),
            Some(std::path::Path::new("/etc/pki/x y"))
        );
        assert!(t.verify_peer && t.hostname.is_none());
        let u =
            Uri::parse("NBDS+UNIX:///x?socket=/s&tls-verify-peer=false&tls-hostname=srv").unwrap();
        assert_eq!(u.transport, Transport::Unix { path: "/s".into() });
        let t = u.tls.unwrap();
        assert!(!t.verify_peer && t.certificates.is_none());
        assert_eq!(t.hostname.as_deref(), Some("srv"));
        assert_eq!(
            Uri::parse("nbds+tcp://h/x").unwrap().tls,
            Some(ClientTls::default())
        );
        assert!(Uri::parse("nbd://h/x").unwrap().tls.is_none());
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "nbd://h:10809/x",
            "nbd+unix:///x?socket=/s",
            "nbds://h:10809/x",
            "nbds://h:10809/x?tls-certificates=/d&tls-verify-peer=false",
            "nbds+unix:///x?socket=/s&tls-certificates=/d&tls-hostname=n",
        ] {
            assert_eq!(Uri::parse(s).unwrap().to_string(), s);
        }
    }
}
