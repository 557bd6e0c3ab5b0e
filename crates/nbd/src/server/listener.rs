//! Listening: [`Endpoint`]s, the accept loop with its connection cap, one
//! thread per connection (negotiation, then transmission), and
//! [`Server::stop`].

use std::fmt;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cryptkeep_volume::BlockStore;

use super::budget::Budget;
use super::conns::Conns;
use super::handshake::{greet, options, Outcome};
use super::refusals::{peer_name, Refusals};
use super::sockpath::{self, SocketId, SocketPath};
use super::{starttls, transmission, Export, Limits, Shape};
use crate::stream::Stream;
use crate::tls::ServerTls;
use crate::Error;

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A unix-domain socket at this path (created mode 0600, removed when
    /// the server stops).
    Unix(PathBuf),
    /// A TCP address, `ADDR:PORT` (`[::1]:10809`, `0.0.0.0:10809`).
    Tcp(String),
}

impl FromStr for Endpoint {
    type Err = Error;
    /// `unix:PATH` or `tcp:ADDR:PORT`.
    fn from_str(s: &str) -> Result<Endpoint, Error> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(Error::Endpoint(s.into()));
            }
            return Ok(Endpoint::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let port_ok = a
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !port_ok {
                return Err(Error::Endpoint(s.into()));
            }
            return Ok(Endpoint::Tcp(a.into()));
        }
        Err(Error::Endpoint(s.into()))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A unix socket this server bound, removed at shutdown only if the name
/// still holds it.
#[derive(Debug)]
struct Bound {
    place: SocketPath,
    id: SocketId,
}

/// A bound listening socket.
enum Listener {
    Unix(UnixListener, Arc<Bound>),
    Tcp(TcpListener),
}

impl Listener {
    fn bind(ep: &Endpoint) -> Result<Listener, Error> {
        let what = format!("cannot listen on {ep}");
        match ep {
            Endpoint::Tcp(a) => TcpListener::bind(a.as_str())
                .map(Listener::Tcp)
                .map_err(|e| Error::io(what, e)),
            Endpoint::Unix(p) => {
                let io_err = |e| Error::io(what.clone(), e);
                let place = SocketPath::open(p).map_err(io_err)?;
                let (l, id) = match place.bind() {
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                        if !place.remove_stale().map_err(io_err)? {
                            return Err(Error::InUse(p.display().to_string()));
                        }
                        place.bind()
                    }
                    r => r,
                }
                .map_err(io_err)?;
                Ok(Listener::Unix(l, Arc::new(Bound { place, id })))
            }
        }
    }

    /// The next connection; `Ok(None)` for a unix peer that is neither
    /// this user nor root (closed at once).
    fn accept(&self) -> io::Result<Option<Stream>> {
        match self {
            Listener::Unix(l, _) => l
                .accept()
                .map(|(s, _)| sockpath::peer_allowed(&s).then_some(Stream::Unix(s))),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Some(Stream::Tcp(s))
            }),
        }
    }

    /// Wakes the accept loop blocked on this socket (see `sockpath.rs`).
    fn wake(&self) {
        match self {
            Listener::Unix(l, _) => sockpath::wake_accept(l.as_fd()),
            Listener::Tcp(l) => sockpath::wake_accept(l.as_fd()),
        }
    }

    /// Where a local client reaches it (the port chosen for `:0`).
    fn local(&self) -> Endpoint {
        match self {
            Listener::Unix(_, b) => Endpoint::Unix(b.place.path().to_path_buf()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => Endpoint::Tcp(a.to_string()),
                Err(_) => Endpoint::Tcp(String::new()),
            },
        }
    }
}

/// A running server: stop it with [`Server::stop`] (or by dropping it).
pub struct Server {
    local: Endpoint,
    /// Shared with the accept loop; kept open here until the socket is
    /// removed, so its inode cannot be reused before.
    listener: Arc<Listener>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Conns>,
    accept: Option<JoinHandle<()>>,
    reaper: Option<JoinHandle<()>>,
}

/// Serves `store` as `export` on `endpoint` from background threads.
/// Fails if the endpoint cannot be bound (a unix socket path where another
/// process listens is [`Error::InUse`]; a stale one is replaced). The
/// process must ignore `SIGPIPE`: a client that leaves while a reply is
/// written must only end its connection.
pub fn serve<S: BlockStore>(
    endpoint: &Endpoint,
    store: Arc<S>,
    export: Export,
    limits: Limits,
) -> Result<Server, Error> {
    serve_tls(endpoint, store, export, limits, None)
}

/// [`serve`] with TLS: `NBD_OPT_STARTTLS` upgrades a connection with
/// `tls`'s certificate, and, if [`ServerTls::mode`] requires it, nothing
/// but `NBD_OPT_STARTTLS` and `NBD_OPT_ABORT` is answered before.
pub fn serve_tls<S: BlockStore>(
    endpoint: &Endpoint,
    store: Arc<S>,
    export: Export,
    limits: Limits,
    tls: Option<ServerTls>,
) -> Result<Server, Error> {
    let listener = Arc::new(Listener::bind(endpoint)?);
    let local = listener.local();
    let shape = Shape::of(&*store, export, limits, tls.as_ref().map(ServerTls::mode));
    let stopping = Arc::new(AtomicBool::new(false));
    let conns = Arc::new(Conns::default());
    let (stop2, conns2, listener2) = (stopping.clone(), conns.clone(), listener.clone());
    let gate = Arc::new(Budget::new(limits.store_calls.max(1)));
    let accept = std::thread::Builder::new()
        .name("nbd-accept".into())
        .spawn(move || {
            let ctx = Accepting {
                shape,
                tls,
                gate,
                refusals: Arc::new(Refusals::default()),
            };
            accept_loop(&listener2, store, ctx, stop2, conns2)
        })
        .map_err(|e| Error::io("cannot start the NBD accept thread", e))?;
    let (stop3, conns3) = (stopping.clone(), conns.clone());
    let reaper = std::thread::Builder::new()
        .name("nbd-reaper".into())
        .spawn(move || {
            while !stop3.load(Ordering::SeqCst) {
                std::thread::park_timeout(Duration::from_millis(250));
                conns3.reap(limits.negotiation_limit);
            }
        })
        .ok();
    Ok(Server {
        local,
        listener,
        stopping,
        conns,
        accept: Some(accept),
        reaper,
    })
}

/// What every connection of a server shares.
#[derive(Clone)]
struct Accepting {
    shape: Shape,
    tls: Option<ServerTls>,
    gate: Arc<Budget>,
    refusals: Arc<Refusals>,
}

fn accept_loop<S: BlockStore>(
    listener: &Listener,
    store: Arc<S>,
    ctx: Accepting,
    stopping: Arc<AtomicBool>,
    conns: Arc<Conns>,
) {
    loop {
        let stream = match listener.accept() {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(_) if stopping.load(Ordering::SeqCst) => return,
            Err(_) => {
                // EMFILE and the like: let connections end, then retry.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let limits = ctx.shape.limits;
        let adm = match conns.admit(&stream, limits.max_connections, limits.max_per_address) {
            Ok(a) => a,
            Err(why) => {
                ctx.refusals.note(|| {
                    format!(
                        "refused a connection from {}: {why}",
                        peer_name(stream.peer_ip())
                    )
                });
                continue;
            }
        };
        let id = adm.id;
        let (store, ctx2, conns2) = (store.clone(), ctx.clone(), conns.clone());
        let spawned = std::thread::Builder::new()
            .name("nbd-conn".into())
            .spawn(move || {
                serve_one(stream, store, ctx2, &adm.negotiating);
                conns2.leave(id);
            });
        if spawned.is_err() {
            conns.leave(id);
        }
    }
}

/// One connection: negotiation under a timeout (with TLS from
/// `NBD_OPT_STARTTLS` on), then transmission.
fn serve_one<S: BlockStore>(
    mut stream: Stream,
    store: Arc<S>,
    ctx: Accepting,
    negotiating: &AtomicBool,
) {
    let Accepting {
        shape,
        tls,
        gate,
        refusals,
    } = ctx;
    let limit = shape.limits.handshake_timeout;
    if stream.set_timeouts(Some(limit)).is_err() {
        return;
    }
    let Ok(mut nego) = greet(&mut stream) else {
        return stream.shutdown();
    };
    loop {
        match options(&mut stream, &shape, &mut nego, negotiating) {
            Ok(Outcome::Transmission(sess)) => {
                return transmission::run(stream, store, shape, sess, gate);
            }
            Ok(Outcome::StartTls) => {
                let Some(tls) = &tls else {
                    return stream.shutdown();
                };
                let plain = match stream.try_clone() {
                    Ok(s) => s,
                    Err(_) => return stream.shutdown(),
                };
                let peer = plain.peer_ip();
                match starttls::accept(stream, &tls.config, limit) {
                    Ok(s) => stream = s,
                    Err(e) => {
                        refusals.note(|| format!("TLS with {} failed: {e}", peer_name(peer)));
                        return plain.shutdown();
                    }
                }
                nego.tls_started();
            }
            Ok(Outcome::Aborted) | Err(_) => return stream.shutdown(),
        }
    }
}

impl Server {
    /// Where the server listens (for TCP, with the port actually bound).
    pub fn endpoint(&self) -> &Endpoint {
        &self.local
    }

    /// Stops accepting, ends every connection (requests being run finish
    /// first), and removes the unix socket.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop: shutdown(2) on the listening socket, never
        // a connection by path (the name may have been replaced); a TCP
        // listener also gets a connection of our own, in case.
        self.listener.wake();
        if let Endpoint::Tcp(a) = &self.local {
            let _ = wake_tcp(a);
        }
        let _ = accept.join();
        if let Some(r) = self.reaper.take() {
            r.thread().unpark();
            let _ = r.join();
        }
        self.conns.close_all();
        if let Listener::Unix(_, b) = &*self.listener {
            let _ = b.place.remove_if(b.id);
        }
    }
}

/// Connects to a TCP listener bound to `addr` (the wildcard address is
/// reached through loopback).
fn wake_tcp(addr: &str) -> io::Result<()> {
    let mut a: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    TcpStream::connect_timeout(&a, Duration::from_secs(1)).map(drop)
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut();
    }
}
