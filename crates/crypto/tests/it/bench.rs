//! Throughput of both backends (run with
//! `cargo test --release -p cryptkeep-crypto --test it bench:: -- --ignored --nocapture`;
//! `BENCH_ONLY=xts` limits it to specs containing that text).

use cryptkeep_crypto::bench::cipher_throughput;
use cryptkeep_crypto::{Backend, CipherSpec};

#[test]
#[ignore = "benchmark: run explicitly in release mode"]
fn bench_sector_ciphers() {
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
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
        if !spec.contains(only.as_str()) {
            continue;
        }
        let spec = CipherSpec::parse(spec).unwrap();
        for backend in Backend::ALL {
            // Best of three runs: the machine may be shared.
            let (mut e, mut d) = (0f64, 0f64);
            for _ in 0..3 {
                let (e1, d1) = cipher_throughput(&spec, key, backend, 4096, 256 << 20).unwrap();
                e = e.max(e1);
                d = d.max(d1);
            }
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
