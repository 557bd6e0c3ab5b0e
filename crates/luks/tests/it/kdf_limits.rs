//! New Argon2 keyslots stay within cryptsetup's limits (4 GiB, 4 threads):
//! asking for more is refused before the KDF runs or anything is written.

use crate::common::*;
use cryptkeep_crypto::{Backend, HashAlg, Pbkdf};
use cryptkeep_luks::{Error, Luks, LuksVersion};

fn format_with(kdf: &Pbkdf) -> (Result<(), Error>, bool) {
    let dir = TempDir::new("kdflimits");
    let img = sparse(&dir.join("img"), 17);
    let before = HashAlg::Sha256.digest(&std::fs::read(&img).unwrap());
    let f = open_rw(&img);
    let r = Luks::format(
        &f,
        &opts(LuksVersion::V2, "aes-xts-plain64", 64, 4096),
        &random_key(64),
        b"p",
        kdf,
        Backend::default(),
    )
    .map(|_| ());
    drop(f);
    let after = HashAlg::Sha256.digest(&std::fs::read(&img).unwrap());
    (r, before == after)
}

#[test]
fn argon2_beyond_cryptsetup_limits_is_refused_before_the_kdf() {
    let cases = [
        (4 * 1024 * 1024 + 1, 1, "memory cost 4194305 KiB"),
        (u32::MAX, 1, "memory cost 4294967295 KiB"),
        (1024, 5, "parallel cost 5"),
    ];
    for (memory_kib, parallel, want) in cases {
        let kdf = Pbkdf::Argon2id {
            // Would run for hours if it ran at all.
            time: u32::MAX,
            memory_kib,
            parallel,
        };
        let (r, unchanged) = format_with(&kdf);
        let e = r.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{e}");
        assert!(unchanged, "{want}: the image was written");
    }
    let (r, _) = format_with(&Pbkdf::Argon2id {
        time: 4,
        memory_kib: 32,
        parallel: 4,
    });
    r.unwrap();
}
