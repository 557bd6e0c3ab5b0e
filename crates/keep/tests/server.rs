//! The keep as a library: this test binary is a host (it installs the
//! secret heap with one line) and re-executes itself as each kind of keep
//! through `server::run_volume`, `run_overlay` and `run_runtime`, spawned
//! with a plain `SpawnConfig`. Each kind answers exactly its own operation
//! table over the real rings, refuses every other code with
//! `STATUS_UNSUPPORTED`, and does its own work correctly.

// A binary of its own (not a module of tests/it): installing the secret
// heap makes it this process's global allocator, and the sandbox tests check
// a host that has none.
cryptkeep_keep::install_secret_heap!();

use cryptkeep_crypto::sector_aead::AuthSpec;
use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec, SecretBytes};
use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::{Keep, ProcessKeep};
use cryptkeep_keep::proto::*;
use cryptkeep_keep::server::{self, AuthVolumeKey, OverlayKey, ServerConfig, VolumeKey};
use cryptkeep_keep::spawn::SpawnConfig;
use cryptkeep_keep::Error;
use cryptkeep_overlay::{Config, HeldKeys, InitOptions, KeyHolder, MasterKey};
use cryptkeep_testkit::need;
use cryptkeep_volume::{InlineCrypt, SectorCrypt};

const KIND_ENV: &str = "KEEP_SERVER_TEST_KIND";
/// The volume key the child's volume keep holds (the parent checks its
/// sector crypto against the same key in process).
const VOLUME_KEY: [u8; 64] = [0x5c; 64];
/// The overlay master key of the child's overlay keep.
const MASTER_KEY: [u8; 32] = [0x3a; 32];

fn overlay_config(mk: &MasterKey) -> Config {
    let opts = InitOptions {
        scrypt_log_n: 10,
        ..InitOptions::default()
    };
    // Random parts (salt, wrapped key): the child reads this one from a file.
    Config::create(&opts, mk, b"pw").unwrap()
}

fn config_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "ck-server-test.{}.conf",
        std::os::unix::process::parent_id()
    ))
}

/// Entry point of the keep processes; does nothing in a normal run.
#[test]
fn child() {
    let Ok(kind) = std::env::var(KIND_ENV) else {
        return;
    };
    let cfg = ServerConfig::default();
    let r = match kind.as_str() {
        "volume" => server::run_volume(cfg, || {
            Ok(VolumeKey {
                key: SecretBytes::from_slice(&VOLUME_KEY),
                cipher: CipherSpec::parse("aes-xts-plain64").unwrap(),
                sector_size: 4096,
                iv_tweak: 0,
                backend: Backend::Accelerated,
                place: "test".into(),
                facts: vec![("unlocked", "a test key".into())],
            })
        }),
        "auth_volume" => server::run_volume(cfg, || {
            let spec = AuthSpec::parse("aes-gcm-random", "aead").unwrap();
            AuthVolumeKey::random(spec, 4096)
        }),
        "overlay" => server::run_overlay(cfg, || {
            let path = std::env::var("KEEP_SERVER_TEST_CONF").unwrap();
            Ok(OverlayKey {
                master_key: MasterKey::from_secret(SecretBytes::from_slice(&MASTER_KEY)).unwrap(),
                config: Config::load(std::path::Path::new(&path)).unwrap(),
                backend: Backend::Accelerated,
                place: "test".into(),
                facts: Vec::new(),
            })
        }),
        "runtime" => server::run_runtime(cfg),
        _ => unreachable!("{kind}"),
    };
    std::process::exit(r.map_or_else(|f| f.code, |()| 0));
}

fn spawn(kind: &str, env: &[(&str, &str)]) -> (ProcessKeep, Vec<(String, String)>) {
    let mut cfg = SpawnConfig::new(
        std::env::current_exe().unwrap(),
        ["--exact", "child", "--nocapture", "--test-threads=1"],
    );
    cfg.env.push((KIND_ENV.into(), kind.into()));
    for (k, v) in env {
        cfg.env.push((k.into(), v.into()));
    }
    ProcessKeep::spawn(cfg).unwrap()
}

fn fact<'a>(facts: &'a [(String, String)], key: &str) -> &'a str {
    facts
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// Every code outside `own` is refused as unsupported, every code in it
/// is not, and the keep serves on.
fn answers_only(k: &ProcessKeep, own: &[u32]) {
    for op in (0..64).chain([255, 4096, u32::MAX]) {
        let mut buf = vec![0u8; 4096];
        let status = match k.call(op, 0, &mut buf, 0) {
            Ok(_) => None,
            Err(Error::Refused { status, .. }) => Some(status),
            Err(e) => panic!("{}: {e}", op_name(op)),
        };
        if own.contains(&op) {
            assert_ne!(status, Some(STATUS_UNSUPPORTED), "{} refused", op_name(op));
        } else {
            assert_eq!(
                status,
                Some(STATUS_UNSUPPORTED),
                "{} ({op}) answered",
                op_name(op)
            );
        }
    }
    k.null_call().unwrap();
}

#[test]
fn a_volume_keep_answers_sector_crypto_only() {
    need!(root);
    let (k, facts) = spawn("volume", &[]);
    assert_eq!(fact(&facts, "keep"), "volume");
    assert_eq!(fact(&facts, "unlocked"), "a test key");
    assert_eq!(fact(&facts, "heap"), "memfd_secret (Rust and AWS-LC)");
    answers_only(&k, VOLUME_OPS);
    // Its sector crypto is the volume cipher's with the key it was given.
    let spec = CipherSpec::parse("aes-xts-plain64").unwrap();
    let local = new_sector_cipher(&spec, &VOLUME_KEY, Backend::Portable).unwrap();
    let plain: Vec<u8> = (0..3 * 4096).map(|i| (i * 7) as u8).collect();
    let mut theirs = plain.clone();
    k.call(OP_ENCRYPT_SECTORS, 40, &mut theirs, plain.len())
        .unwrap();
    let mut ours = plain.clone();
    InlineCrypt::new(local, 4096, 0)
        .encrypt(40, &mut ours)
        .unwrap();
    assert_eq!(theirs, ours);
    k.call(OP_DECRYPT_SECTORS, 40, &mut theirs, plain.len())
        .unwrap();
    assert_eq!(theirs, plain);
    // The calls a volume keep used to answer too: refused.
    assert!(k.seal(b"x").is_err());
    assert!(k.sha256(b"x").is_err());
    k.destroy().unwrap();
}

#[test]
fn an_authenticated_volume_keep_answers_sector_seal_and_open_only() {
    need!(root);
    let (k, facts) = spawn("auth_volume", &[]);
    assert_eq!(fact(&facts, "keep"), "volume");
    assert_eq!(fact(&facts, "integrity"), "aes-gcm-random aead");
    assert_eq!(fact(&facts, "unlocked"), "a random key");
    assert_eq!(fact(&facts, "heap"), "memfd_secret (Rust and AWS-LC)");
    answers_only(&k, AUTH_VOLUME_OPS);
    // A sector sealed and opened again (IVs drawn in the keep under its
    // seccomp filter).
    let pair = 4096 + 28;
    let plain: Vec<u8> = (0..4096).map(|i| (i * 3) as u8).collect();
    let mut buf = vec![0u8; pair + 1];
    buf[..4096].copy_from_slice(&plain);
    assert_eq!(k.call(OP_SEAL_SECTORS, 9, &mut buf, pair).unwrap(), pair);
    assert_ne!(&buf[..4096], &plain[..]);
    assert_eq!(
        k.call(OP_OPEN_SECTORS, 9, &mut buf, pair).unwrap(),
        pair + 1
    );
    assert_eq!(&buf[..4096], &plain[..]);
    assert_eq!(buf[pair], 0, "no failed sector");
    let mut sector = vec![0u8; 4096];
    assert!(k.call(OP_ENCRYPT_SECTORS, 0, &mut sector, 4096).is_err());
    k.destroy().unwrap();
}

#[test]
fn an_overlay_keep_answers_content_and_name_crypto_only() {
    need!(root);
    let mk = MasterKey::from_secret(SecretBytes::from_slice(&MASTER_KEY)).unwrap();
    let cfg = overlay_config(&mk);
    let path = config_path();
    cfg.save(&path).unwrap();
    let (k, facts) = spawn(
        "overlay",
        &[("KEEP_SERVER_TEST_CONF", path.to_str().unwrap())],
    );
    let _ = std::fs::remove_file(&path);
    assert_eq!(fact(&facts, "keep"), "overlay");
    assert_eq!(fact(&facts, "heap"), "memfd_secret (Rust and AWS-LC)");
    answers_only(&k, OVERLAY_OPS);
    // A name encrypted in the keep is the one the same keys give here.
    let local = HeldKeys::derive(&mk, &cfg, Backend::Accelerated).unwrap();
    let tweak = [9u8; 16];
    let mut name = [b'n'; 32];
    let mut buf = [tweak.as_slice(), &name].concat();
    let n = k.call(OP_NAME_ENCRYPT, 0, &mut buf, 48).unwrap();
    local.eme(true, &tweak, &mut name).unwrap();
    assert_eq!(&buf[..n], &name);
    assert!(k.rsa_generate().is_err());
    k.destroy().unwrap();
}

#[test]
fn a_runtime_keep_answers_everything_else() {
    need!(root);
    let (k, facts) = spawn("runtime", &[]);
    assert_eq!(fact(&facts, "keep"), "runtime");
    assert_eq!(fact(&facts, "heap"), "memfd_secret (Rust and AWS-LC)");
    answers_only(&k, RUNTIME_OPS);
    assert_eq!(k.hello().unwrap(), HELLO_GREETING);
    let blob = k.seal(b"kept").unwrap();
    assert_eq!(k.unseal(&blob).unwrap(), b"kept");
    assert_eq!(
        k.sha256(b"abc").unwrap(),
        cryptkeep_keep::ops::sha256(b"abc")
    );
    let mut sector = vec![0u8; 4096];
    assert!(k.call(OP_ENCRYPT_SECTORS, 0, &mut sector, 4096).is_err());
    k.destroy().unwrap();
}

#[test]
fn the_operation_tables_do_not_overlap_but_in_the_null_call() {
    for (a, b) in [
        (VOLUME_OPS, AUTH_VOLUME_OPS),
        (VOLUME_OPS, OVERLAY_OPS),
        (VOLUME_OPS, RUNTIME_OPS),
        (AUTH_VOLUME_OPS, OVERLAY_OPS),
        (AUTH_VOLUME_OPS, RUNTIME_OPS),
        (OVERLAY_OPS, RUNTIME_OPS),
    ] {
        for op in a {
            assert!(
                *op == OP_NULL || !b.contains(op),
                "{} in two kinds",
                op_name(*op)
            );
        }
    }
}
