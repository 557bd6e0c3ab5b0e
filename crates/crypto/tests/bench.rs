//! Throughput of both backends (run with
//! `cargo test --release -p cryptkeep-crypto --test bench -- --ignored --nocapture`).

use cryptkeep_crypto::bench::cipher_throughput;
use cryptkeep_crypto::{Backend, CipherSpec};

#[test]
#[ignore = "benchmark: run explicitly in release mode"]
fn bench_sector_ciphers() {
    let cases = [
        ("aes-xts-plain64", 64usize),
        ("aes-xts-plain64", 32),
        ("aes-cbc-essiv:sha256", 32),
        ("aes-cbc-essiv:sha256", 16),
        ("aes-ecb", 32),
    ];
    println!("| cipher | key bits | backend | encrypt MiB/s | decrypt MiB/s |");
    println!("|---|---|---|---|---|");
    for (spec, key) in cases {
        let spec = CipherSpec::parse(spec).unwrap();
        for backend in Backend::ALL {
            let (e, d) = cipher_throughput(&spec, key, backend, 4096, 512 << 20).unwrap();
            println!("| {spec} | {} | {backend} | {e:.0} | {d:.0} |", key * 8);
        }
    }
}

#[test]
fn bench_helper_runs_small() {
    let spec = CipherSpec::AES_XTS_PLAIN64;
    for backend in Backend::ALL {
        let (e, d) = cipher_throughput(&spec, 64, backend, 4096, 1 << 20).unwrap();
        assert!(e > 0.0 && d > 0.0);
    }
    assert!(cipher_throughput(&spec, 16, Backend::Portable, 4096, 1 << 20).is_err());
    assert!(cipher_throughput(&spec, 64, Backend::Portable, 100, 1 << 20).is_err());
}
