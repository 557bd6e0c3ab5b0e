//! TLS end to end: our client against our server over `NBD_OPT_STARTTLS`,
//! with a throwaway CA, server and client certificates made by openssl at
//! test time (`tests/e2e/lib/tls_certs.sh`). Skipped, with a note, when
//! openssl is missing (a failure with `CRYPTKEEP_TEST_ALL=1`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cryptkeep_nbd::client::{Client, Options, Uri};
use cryptkeep_nbd::server::{serve, serve_tls, BlockStore, Endpoint, Export, Limits, Server};
use cryptkeep_nbd::tls::{ServerTls, TlsMode};
use cryptkeep_nbd::Error;

const SIZE: usize = 8 << 20;

/// A store in memory.
struct Mem(Mutex<Vec<u8>>);

impl BlockStore for Mem {
    fn size(&self) -> u64 {
        SIZE as u64
    }
    fn block_size(&self) -> usize {
        512
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        let d = self.0.lock().unwrap();
        let o = offset as usize;
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(buf.len())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        let mut d = self.0.lock().unwrap();
        let o = offset as usize;
        d[o..o + data.len()].copy_from_slice(data);
        Ok(data.len())
    }
    fn flush(&self) -> Result<(), cryptkeep_volume::Error> {
        Ok(())
    }
}

/// A work directory with the certificates in it (removed on drop).
struct Certs(PathBuf);

impl Certs {
    fn new(name: &str) -> Option<Certs> {
        if Command::new("openssl").arg("version").output().is_err() {
            assert!(
                std::env::var_os("CRYPTKEEP_TEST_ALL").is_none(),
                "openssl is missing (scripts/install-deps.sh)"
            );
            eprintln!("skipped: openssl is not installed (scripts/install-deps.sh)");
            return None;
        }
        let base =
            std::env::var_os("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
        let dir = base.join(format!("nbd-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/lib/tls_certs.sh");
        let out = Command::new("bash").arg(script).arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Certs(dir))
    }
    fn dir(&self) -> &Path {
        &self.0
    }
    fn server(&self, mode: TlsMode, client_ca: bool) -> ServerTls {
        let ca = self.0.join("ca-cert.pem");
        ServerTls::load(
            &self.0.join("server-cert.pem"),
            &self.0.join("server-key.pem"),
            client_ca.then_some(ca.as_path()),
            &[],
            mode,
        )
        .unwrap()
    }
    /// A directory with only the CA (no client certificate).
    fn ca_only(&self) -> PathBuf {
        let d = self.0.join("ca-only");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(self.0.join("ca-cert.pem"), d.join("ca-cert.pem")).unwrap();
        d
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn export() -> Export {
    Export {
        name: "vol".into(),
        description: None,
        read_only: false,
        allow_trim: false,
    }
}

fn store() -> Arc<Mem> {
    Arc::new(Mem(Mutex::new(vec![0; SIZE])))
}

fn tcp(tls: Option<ServerTls>) -> (Server, u16) {
    let s = serve_tls(
        &Endpoint::Tcp("127.0.0.1:0".into()),
        store(),
        export(),
        Limits::default(),
        tls,
    )
    .unwrap();
    let port = match s.endpoint() {
        Endpoint::Tcp(a) => a.rsplit_once(':').unwrap().1.parse().unwrap(),
        e => panic!("{e}"),
    };
    (s, port)
}

fn opts() -> Options {
    Options {
        timeout: Duration::from_secs(10),
        connections: 4,
        ..Options::default()
    }
}

fn connect(uri: &str) -> Result<Client, Error> {
    Client::connect(&Uri::parse(uri).unwrap(), opts())
}

fn pattern(n: usize, first: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(first))
        .collect()
}

/// Writes, flushes and reads back through `c`, from several threads.
fn round_trip(c: &Client) {
    std::thread::scope(|s| {
        for t in 0..4u8 {
            s.spawn(move || {
                let off = u64::from(t) * (2 << 20) + 777;
                let a = pattern((1 << 20) + 4099, t);
                c.write_at(&a, off).unwrap();
                c.flush().unwrap();
                let mut back = vec![0; a.len()];
                c.read_at(&mut back, off).unwrap();
                assert_eq!(back, a);
            });
        }
    });
}

#[test]
fn tls_round_trip_over_tcp_and_unix() {
    let Some(certs) = Certs::new("rt") else {
        return;
    };
    let d = certs.dir().display().to_string();
    let (srv, port) = tcp(Some(certs.server(TlsMode::Require, true)));
    let c = connect(&format!("nbds://localhost:{port}/vol?tls-certificates={d}")).unwrap();
    assert_eq!(c.size(), SIZE as u64);
    round_trip(&c);
    drop(c);
    // By address: the certificate names 127.0.0.1 too.
    let c = connect(&format!("nbds://127.0.0.1:{port}/vol?tls-certificates={d}")).unwrap();
    round_trip(&c);
    drop(c);
    srv.stop();

    let sock = certs.dir().join("s.sock");
    let srv = serve_tls(
        &Endpoint::Unix(sock.clone()),
        store(),
        export(),
        Limits::default(),
        Some(certs.server(TlsMode::Require, false)),
    )
    .unwrap();
    let uri = format!(
        "nbds+unix:///vol?socket={}&tls-certificates={}",
        sock.display(),
        certs.ca_only().display()
    );
    round_trip(&connect(&uri).unwrap());
    srv.stop();
}

#[test]
fn required_tls_refuses_plaintext_and_bad_peers() {
    let Some(certs) = Certs::new("refuse") else {
        return;
    };
    let d = certs.dir().display().to_string();
    let (srv, port) = tcp(Some(certs.server(TlsMode::Require, true)));
    // Plaintext: NBD_REP_ERR_TLS_REQD.
    let e = connect(&format!("nbd://127.0.0.1:{port}/vol")).unwrap_err();
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");
    // A server certificate from a CA the client does not trust.
    let e = connect(&format!(
        "nbds://localhost:{port}/vol?tls-certificates={d}/other"
    ))
    .unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    // The wrong name.
    let e = connect(&format!(
        "nbds://localhost:{port}/vol?tls-certificates={d}&tls-hostname=elsewhere"
    ))
    .unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    // No client certificate while the server verifies clients.
    let e = connect(&format!(
        "nbds://localhost:{port}/vol?tls-certificates={}",
        certs.ca_only().display()
    ))
    .unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    assert!(e.to_string().contains("client certificate"), "{e}");
    // Not verifying the server still needs the client certificate here,
    // and then works.
    let c = connect(&format!(
        "nbds://localhost:{port}/vol?tls-certificates={d}&tls-verify-peer=false"
    ))
    .unwrap();
    round_trip(&c);
    drop(c);
    srv.stop();
}

/// With allowed client names, a certificate the CA signed gets in only if
/// it names one of them (the test client's names backup.example).
#[test]
fn client_names_admit_only_the_listed_clients() {
    let Some(certs) = Certs::new("names") else {
        return;
    };
    let d = certs.dir().display().to_string();
    let with_names = |names: &[&str]| {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        ServerTls::load(
            &certs.dir().join("server-cert.pem"),
            &certs.dir().join("server-key.pem"),
            Some(&certs.dir().join("ca-cert.pem")),
            &names,
            TlsMode::Require,
        )
    };
    let uri = |port: u16| format!("nbds://localhost:{port}/vol?tls-certificates={d}");
    let (srv, port) = tcp(Some(
        with_names(&["laptop.example", "backup.example"]).unwrap(),
    ));
    round_trip(&connect(&uri(port)).unwrap());
    srv.stop();
    let (srv, port) = tcp(Some(with_names(&["laptop.example"]).unwrap()));
    let e = connect(&uri(port)).unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    srv.stop();
    // A certificate for *.corp.example names no single client: refused as
    // laptop.corp.example, though WebPKI's match alone would take it.
    let (srv, port) = tcp(Some(with_names(&["laptop.corp.example"]).unwrap()));
    let e = connect(&format!(
        "nbds://localhost:{port}/vol?tls-certificates={d}/wild"
    ))
    .unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e}");
    srv.stop();
    // Names without a client CA, or a name that is not one: errors.
    let e = ServerTls::load(
        &certs.dir().join("server-cert.pem"),
        &certs.dir().join("server-key.pem"),
        None,
        &["backup.example".to_string()],
        TlsMode::Require,
    )
    .unwrap_err();
    assert!(e.to_string().contains("client CA"), "{e}");
    let e = with_names(&["not a name!"]).unwrap_err();
    assert!(e.to_string().contains("not a DNS name"), "{e}");
}

#[test]
fn optional_tls_and_plain_servers() {
    let Some(certs) = Certs::new("opt") else {
        return;
    };
    let d = certs.dir().display().to_string();
    let (srv, port) = tcp(Some(certs.server(TlsMode::On, false)));
    round_trip(&connect(&format!("nbd://127.0.0.1:{port}/vol")).unwrap());
    round_trip(&connect(&format!("nbds://localhost:{port}/vol?tls-certificates={d}")).unwrap());
    srv.stop();
    // A server without TLS: an nbds client refuses to go on in plaintext.
    let srv = serve(
        &Endpoint::Tcp("127.0.0.1:0".into()),
        store(),
        export(),
        Limits::default(),
    )
    .unwrap();
    let e = connect(&format!("nbds://{}/vol?tls-certificates={d}", {
        let Endpoint::Tcp(a) = srv.endpoint() else {
            unreachable!()
        };
        a.replace("127.0.0.1", "localhost")
    }))
    .unwrap_err();
    assert!(matches!(e, Error::Refused { .. }), "{e}");
    srv.stop();
}

#[test]
fn reconnect_redoes_tls() {
    let Some(certs) = Certs::new("reconnect") else {
        return;
    };
    let sock = certs.dir().join("r.sock");
    let st = store();
    let start = |st: Arc<Mem>| {
        serve_tls(
            &Endpoint::Unix(sock.clone()),
            st,
            export(),
            Limits::default(),
            Some(certs.server(TlsMode::Require, true)),
        )
        .unwrap()
    };
    let srv = start(st.clone());
    let uri = format!(
        "nbds+unix:///vol?socket={}&tls-certificates={}",
        sock.display(),
        certs.dir().display()
    );
    let c = connect(&uri).unwrap();
    let a = pattern(65536, 3);
    c.write_at(&a, 4096).unwrap();
    c.flush().unwrap();
    srv.stop();
    let restart = {
        let st = st.clone();
        let start = &start;
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                start(st)
            });
            let mut back = vec![0; a.len()];
            c.read_at(&mut back, 4096).unwrap();
            assert_eq!(back, a);
            h.join().unwrap()
        })
    };
    round_trip(&c);
    drop(c);
    restart.stop();
}
