//! Content and name crypto done by a key holder outside this process (the
//! keep, `cryptkeep fs mount --keep`), so the process that serves the file
//! system never holds the master key or a key derived from it.
//!
//! [`KeyHolder`] is the seam: a [`crate::ContentCipher`] or
//! [`crate::NameCipher`] built with [`crate::CipherDir::with_key_holder`]
//! sends whole runs of content blocks and whole EME names through it.
//! [`HeldKeys`] is what the holder keeps and runs: the same gocryptfs rules
//! (per-block random nonces drawn by the holder, `be64(block) ‖ file ID`
//! associated data, all-zero blocks as holes), so both sides write the same
//! format.

use crate::config::Config;
use crate::content::ContentCipher;
use crate::derive::{content_key, name_key};
use crate::error::{Error, Result};
use crate::header::FileId;
use crate::keys::MasterKey;
use cryptkeep_crypto::eme::Eme;
use cryptkeep_crypto::Backend;

pub use crate::holder::KeyHolder;

/// The keys a holder keeps for one file system: the content AEAD and the
/// EME name cipher, derived from the master key as gocryptfs derives them.
pub struct HeldKeys {
    content: ContentCipher,
    /// Boxed: the key schedule is built once, in a frame that is wiped
    /// afterwards, and never moves with the struct.
    eme: Box<Eme>,
}

impl std::fmt::Debug for HeldKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldKeys({:?})", self.content)
    }
}

impl HeldKeys {
    /// Derives the content and name keys of `cfg` from `mk`; the caller may
    /// wipe `mk` afterwards.
    pub fn derive(mk: &MasterKey, cfg: &Config, backend: Backend) -> Result<HeldKeys> {
        Ok(HeldKeys {
            content: ContentCipher::new(
                cfg.content_alg(),
                content_key(mk, cfg)?.as_slice(),
                backend,
            )?,
            eme: Box::new(Eme::new(name_key(mk, cfg)?.as_slice())?),
        })
    }

    /// The content cipher (for its sizes).
    pub fn content(&self) -> &ContentCipher {
        &self.content
    }
}

impl KeyHolder for HeldKeys {
    fn seal_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let c = &self.content;
        let nblocks = plaintext.len().div_ceil(crate::PLAIN_BS);
        if nblocks == 0 || out.len() != plaintext.len() + nblocks * c.block_overhead() {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of plaintext do not seal into {} bytes",
                plaintext.len(),
                out.len()
            )));
        }
        c.seal_run(first_block, file_id, plaintext, out)
    }

    fn open_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        self.content.open_run(first_block, file_id, ciphertext, out)
    }

    fn eme(&self, encrypt: bool, tweak: &[u8; 16], data: &mut [u8]) -> Result<()> {
        if data.is_empty() || !data.len().is_multiple_of(16) {
            return Err(Error::InvalidArgument(format!(
                "EME works on whole 16-byte blocks, got {} bytes",
                data.len()
            )));
        }
        if encrypt {
            self.eme.encrypt(tweak, data)?;
        } else {
            self.eme.decrypt(tweak, data)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InitOptions;
    use crate::error::Result;
    use crate::{CipherDir, DirIv, FileHeader, FileId};
    use std::sync::Arc;

    fn setup(opts: InitOptions) -> (CipherDir, CipherDir) {
        let mk = MasterKey::random().unwrap();
        let cfg = Config::create(
            &InitOptions {
                scrypt_log_n: 10,
                ..opts
            },
            &mk,
            b"pw",
        )
        .unwrap();
        let root = std::path::Path::new("/nonexistent");
        let local = CipherDir::from_parts(root, cfg.clone(), &mk, Backend::default()).unwrap();
        let holder: Arc<dyn KeyHolder> =
            Arc::new(HeldKeys::derive(&mk, &cfg, Backend::default()).unwrap());
        let held = CipherDir::with_key_holder(root, cfg, holder).unwrap();
        (local, held)
    }

    /// Counts the name requests a holder gets.
    struct Counting(HeldKeys, std::sync::atomic::AtomicUsize);

    impl KeyHolder for Counting {
        fn seal_blocks(&self, f: u64, id: Option<&FileId>, p: &[u8], o: &mut [u8]) -> Result<()> {
            self.0.seal_blocks(f, id, p, o)
        }
        fn open_blocks(
            &self,
            f: u64,
            id: Option<&FileId>,
            c: &[u8],
            o: &mut [u8],
        ) -> Result<usize> {
            self.0.open_blocks(f, id, c, o)
        }
        fn eme(&self, encrypt: bool, tweak: &[u8; 16], data: &mut [u8]) -> Result<()> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.eme(encrypt, tweak, data)
        }
    }

    /// A name encrypted or listed once costs no second request to the
    /// holder, and what the cache answers is what the holder would.
    #[test]
    fn names_seen_once_cost_one_request() {
        let mk = MasterKey::random().unwrap();
        let cfg = Config::create(
            &InitOptions {
                scrypt_log_n: 10,
                ..InitOptions::default()
            },
            &mk,
            b"pw",
        )
        .unwrap();
        let keys = HeldKeys::derive(&mk, &cfg, Backend::default()).unwrap();
        let counting = Arc::new(Counting(keys, Default::default()));
        let holder: Arc<dyn KeyHolder> = counting.clone();
        let root = std::path::Path::new("/nonexistent");
        let held = CipherDir::with_key_holder(root, cfg.clone(), holder).unwrap();
        let local = CipherDir::from_parts(root, cfg, &mk, Backend::default()).unwrap();
        let calls = || counting.1.load(std::sync::atomic::Ordering::Relaxed);
        let iv = DirIv([3u8; 16]);
        // Looked up, then created: one request.
        let a = held.names().encrypt_name(b"new file", &iv).unwrap();
        assert_eq!(held.names().encrypt_name(b"new file", &iv).unwrap(), a);
        assert_eq!(calls(), 1);
        assert_eq!(local.names().encrypt_name(b"new file", &iv).unwrap(), a);
        // Another directory is another name.
        let other = held
            .names()
            .encrypt_name(b"new file", &DirIv([4u8; 16]))
            .unwrap();
        assert_ne!(other, a);
        assert_eq!(calls(), 2);
        // Listed (decrypted), then removed (encrypted): one request.
        let listed = local.names().encrypt_name(b"old file", &iv).unwrap();
        let names = held.names().decrypt_names(&[listed.as_str()], &iv);
        assert_eq!(names[0].as_ref().unwrap(), b"old file");
        let before = calls();
        assert_eq!(held.names().encrypt_name(b"old file", &iv).unwrap(), listed);
        assert_eq!(calls(), before);
        // Listed again, or made and then listed: no request; a listing with
        // new names asks only for those, and a name that does not decode
        // fails alone, in its place.
        let fresh = local.names().encrypt_name(b"fresh", &iv).unwrap();
        let in_other_dir = local.names().encrypt_name(b"a", &DirIv([4u8; 16])).unwrap();
        let listing = [listed.as_str(), "!!bad", a.as_str(), fresh.as_str()];
        let names = held.names().decrypt_names(&listing, &iv);
        assert_eq!(calls(), before + 1, "only `fresh` was unknown");
        assert_eq!(names[0].as_ref().unwrap(), b"old file");
        assert!(names[1].is_err());
        assert_eq!(names[2].as_ref().unwrap(), b"new file");
        assert_eq!(names[3].as_ref().unwrap(), b"fresh");
        assert_eq!(held.names().decrypt_name(&fresh, &iv).unwrap(), b"fresh");
        let all = held
            .names()
            .decrypt_names(&[a.as_str(), fresh.as_str()], &iv);
        assert!(all.iter().all(|r| r.is_ok()));
        assert_eq!(calls(), before + 1);
        // A cached pair is still checked as a file name: an xattr name
        // (which may hold '/') listed in a directory whose IV is the xattr
        // IV is refused, as decrypting it would be.
        let stored = held.names().encrypt_xattr_name(b"user.a/b").unwrap();
        let xattr = stored.strip_prefix("user.gocryptfs.").unwrap().to_string();
        let xiv = DirIv(*b"xattr_name_iv_xx");
        let listed_x = held.names().decrypt_names(&[xattr.as_str()], &xiv);
        assert!(listed_x[0].is_err(), "{:?}", listed_x[0]);
        assert!(held.names().decrypt_name(&xattr, &xiv).is_err());
        let before = calls();
        // A known encrypted name is known only in its own directory.
        let elsewhere = held.names().decrypt_names(&[in_other_dir.as_str()], &iv);
        assert_eq!(calls(), before + 1);
        assert_ne!(elsewhere[0].as_deref().ok(), Some(&b"a"[..]));
    }

    /// What the held ciphers write, the in-process ciphers read, and the
    /// reverse, for every content algorithm: blocks, holes, unbound data
    /// and names. A flipped byte is caught and names its block.
    #[test]
    fn held_and_local_ciphers_agree() {
        let variants = [
            InitOptions::default(),
            InitOptions {
                aessiv: true,
                ..InitOptions::default()
            },
            InitOptions {
                xchacha: true,
                ..InitOptions::default()
            },
        ];
        for opts in variants {
            let (local, held) = setup(opts);
            let id = FileHeader::random().unwrap().id;
            let plain: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
            for (a, b) in [(&local, &held), (&held, &local)] {
                let ct = a.content().encrypt_blocks(5, &id, &plain).unwrap();
                assert_eq!(b.content().decrypt_blocks(5, &id, &ct).unwrap(), plain);
                let u = a.content().encrypt_unbound(b"target").unwrap();
                assert_eq!(b.content().decrypt_unbound(&u).unwrap(), b"target");
                let iv = DirIv([9u8; 16]);
                let n = a.names().encrypt_name(b"a file name", &iv).unwrap();
                assert_eq!(b.names().decrypt_name(&n, &iv).unwrap(), b"a file name");
                let x = a.names().encrypt_xattr_name(b"user.x").unwrap();
                assert_eq!(
                    b.names().decrypt_xattr_name(&x).unwrap().unwrap(),
                    b"user.x"
                );
            }
            // A hole reads as zeros through the holder too.
            let mut ct = held.content().encrypt_blocks(0, &id, &plain).unwrap();
            let cbs = held.content().cipher_bs();
            ct[cbs..2 * cbs].fill(0);
            let back = held.content().decrypt_blocks(0, &id, &ct).unwrap();
            assert!(back[4096..8192].iter().all(|&b| b == 0));
            assert_eq!(back[8192..], plain[8192..]);
            // Tampering is caught, and the error names the block.
            ct[2 * cbs + 40] ^= 1;
            match held.content().decrypt_blocks(0, &id, &ct) {
                Err(Error::Auth { block, .. }) => assert_eq!(block, Some(2)),
                other => panic!("tampered block 2 gave {other:?}"),
            }
        }
    }
}
