//! RSA-2048 on AWS-LC: key generation (e = 65537), RSA-OAEP with SHA-256
//! and MGF1-SHA-256 (RFC 8017 §7.1), RSA-PSS signatures with SHA-256 and a
//! salt as long as the digest (RFC 8017 §8.1). Public keys travel as
//! SubjectPublicKeyInfo DER (RFC 5280), which `openssl pkey -pubin -inform
//! DER` reads. The private key lives only in an [`RsaKeyPair`] and is
//! cleared by AWS-LC when it is freed.

use aws_lc_sys as sys;

use crate::Error;

fn lc_err(what: &str) -> Error {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: reading and clearing AWS-LC's thread-local error queue into a
    // buffer of the stated size (NUL-terminated by AWS-LC).
    let reason = unsafe {
        let code = sys::ERR_get_error();
        sys::ERR_error_string_n(code, buf.as_mut_ptr(), buf.len());
        sys::ERR_clear_error();
        std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    Error::Crypto(format!("RSA: {what} failed ({reason})"))
}

/// An owned `EVP_PKEY`.
struct Pkey(*mut sys::EVP_PKEY);

impl Drop for Pkey {
    fn drop(&mut self) {
        // SAFETY: we own this EVP_PKEY.
        unsafe { sys::EVP_PKEY_free(self.0) };
    }
}

// SAFETY: an EVP_PKEY is immutable after creation and AWS-LC's RSA
// operations on it are thread-safe (blinding state is locked internally).
unsafe impl Send for Pkey {}
// SAFETY: as above.
unsafe impl Sync for Pkey {}

/// An RSA-2048 key pair.
pub struct RsaKeyPair {
    pkey: Pkey,
}

impl RsaKeyPair {
    /// Generates a new 2048-bit key with e = 65537.
    pub fn generate_2048() -> Result<RsaKeyPair, Error> {
        // SAFETY: standard AWS-LC object life cycle; every pointer is checked
        // and freed (or handed to the EVP_PKEY) on every path.
        unsafe {
            let e = sys::BN_new();
            let rsa = sys::RSA_new();
            let pkey = sys::EVP_PKEY_new();
            let ok = !e.is_null()
                && !rsa.is_null()
                && !pkey.is_null()
                && sys::BN_set_word(e, sys::RSA_F4 as _) == 1
                && sys::RSA_generate_key_ex(rsa, 2048, e, std::ptr::null_mut()) == 1;
            sys::BN_free(e);
            if !ok || sys::EVP_PKEY_assign_RSA(pkey, rsa) != 1 {
                sys::RSA_free(rsa);
                sys::EVP_PKEY_free(pkey);
                return Err(lc_err("key generation"));
            }
            Ok(RsaKeyPair { pkey: Pkey(pkey) })
        }
    }

    /// The public key as SubjectPublicKeyInfo DER.
    pub fn public_key_der(&self) -> Vec<u8> {
        // SAFETY: i2d_PUBKEY with a null output returns the length, then
        // writes exactly that many bytes to the buffer.
        unsafe {
            let n = sys::i2d_PUBKEY(self.pkey.0, std::ptr::null_mut());
            if n <= 0 {
                return Vec::new();
            }
            let mut v = vec![0u8; n as usize];
            let mut p = v.as_mut_ptr();
            sys::i2d_PUBKEY(self.pkey.0, &mut p);
            v
        }
    }

    /// RSA-OAEP(SHA-256) encryption with this key's public half.
    pub fn encrypt_oaep_sha256(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        crypt(&self.pkey, msg, false)
    }

    /// RSA-OAEP(SHA-256) decryption.
    pub fn decrypt_oaep_sha256(&self, ct: &[u8]) -> Result<Vec<u8>, Error> {
        crypt(&self.pkey, ct, true)
    }

    /// RSA-PSS(SHA-256) signature of `msg` (salt length = 32).
    pub fn sign_pss_sha256(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        // SAFETY: AWS-LC digest-sign life cycle; ctx freed on every path.
        unsafe {
            let ctx = sys::EVP_MD_CTX_new();
            if ctx.is_null() {
                return Err(lc_err("EVP_MD_CTX_new"));
            }
            let mut pctx: *mut sys::EVP_PKEY_CTX = std::ptr::null_mut();
            let mut len = 0usize;
            let ok = sys::EVP_DigestSignInit(
                ctx,
                &mut pctx,
                sys::EVP_sha256(),
                std::ptr::null_mut(),
                self.pkey.0,
            ) == 1
                && sys::EVP_PKEY_CTX_set_rsa_padding(pctx, sys::RSA_PKCS1_PSS_PADDING) == 1
                && sys::EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, -1) == 1
                && sys::EVP_DigestSign(
                    ctx,
                    std::ptr::null_mut(),
                    &mut len,
                    msg.as_ptr(),
                    msg.len(),
                ) == 1;
            let mut sig = vec![0u8; len];
            let ok = ok
                && sys::EVP_DigestSign(ctx, sig.as_mut_ptr(), &mut len, msg.as_ptr(), msg.len())
                    == 1;
            sys::EVP_MD_CTX_free(ctx);
            if !ok {
                return Err(lc_err("signing"));
            }
            sig.truncate(len);
            Ok(sig)
        }
    }
}

fn parse_public(der: &[u8]) -> Result<Pkey, Error> {
    let mut p = der.as_ptr();
    // SAFETY: d2i_PUBKEY reads at most `len` bytes from p.
    let k = unsafe { sys::d2i_PUBKEY(std::ptr::null_mut(), &mut p, der.len() as _) };
    if k.is_null() {
        return Err(lc_err("parsing the public key"));
    }
    Ok(Pkey(k))
}

/// OAEP-SHA-256 encryption (`decrypt == false`) or decryption with `key`.
fn crypt(key: &Pkey, input: &[u8], decrypt: bool) -> Result<Vec<u8>, Error> {
    // SAFETY: AWS-LC EVP_PKEY_CTX life cycle; ctx freed on every path; the
    // output buffer is sized by the first (null) call.
    unsafe {
        let ctx = sys::EVP_PKEY_CTX_new(key.0, std::ptr::null_mut());
        if ctx.is_null() {
            return Err(lc_err("EVP_PKEY_CTX_new"));
        }
        let init = if decrypt {
            sys::EVP_PKEY_decrypt_init(ctx)
        } else {
            sys::EVP_PKEY_encrypt_init(ctx)
        };
        let run = |out: *mut u8, len: &mut usize| {
            if decrypt {
                sys::EVP_PKEY_decrypt(ctx, out, len, input.as_ptr(), input.len())
            } else {
                sys::EVP_PKEY_encrypt(ctx, out, len, input.as_ptr(), input.len())
            }
        };
        let mut len = 0usize;
        let ok = init == 1
            && sys::EVP_PKEY_CTX_set_rsa_padding(ctx, sys::RSA_PKCS1_OAEP_PADDING) == 1
            && sys::EVP_PKEY_CTX_set_rsa_oaep_md(ctx, sys::EVP_sha256()) == 1
            && sys::EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, sys::EVP_sha256()) == 1
            && run(std::ptr::null_mut(), &mut len) == 1;
        let mut out = vec![0u8; len];
        let ok = ok && run(out.as_mut_ptr(), &mut len) == 1;
        sys::EVP_PKEY_CTX_free(ctx);
        if !ok {
            return Err(lc_err(if decrypt { "decryption" } else { "encryption" }));
        }
        out.truncate(len);
        Ok(out)
    }
}

/// RSA-OAEP(SHA-256) encryption to the public key `public_der` (SPKI DER).
pub fn encrypt_oaep_sha256(public_der: &[u8], msg: &[u8]) -> Result<Vec<u8>, Error> {
    crypt(&parse_public(public_der)?, msg, false)
}

/// Checks an RSA-PSS(SHA-256) signature; `Err` only if the key is unusable.
pub fn verify_pss_sha256(public_der: &[u8], msg: &[u8], sig: &[u8]) -> Result<bool, Error> {
    let key = parse_public(public_der)?;
    // SAFETY: AWS-LC digest-verify life cycle; ctx freed on every path.
    unsafe {
        let ctx = sys::EVP_MD_CTX_new();
        if ctx.is_null() {
            return Err(lc_err("EVP_MD_CTX_new"));
        }
        let mut pctx: *mut sys::EVP_PKEY_CTX = std::ptr::null_mut();
        let ok = sys::EVP_DigestVerifyInit(
            ctx,
            &mut pctx,
            sys::EVP_sha256(),
            std::ptr::null_mut(),
            key.0,
        ) == 1
            && sys::EVP_PKEY_CTX_set_rsa_padding(pctx, sys::RSA_PKCS1_PSS_PADDING) == 1
            && sys::EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, -1) == 1;
        let good =
            ok && sys::EVP_DigestVerify(ctx, sig.as_ptr(), sig.len(), msg.as_ptr(), msg.len()) == 1;
        sys::EVP_MD_CTX_free(ctx);
        sys::ERR_clear_error();
        if !ok {
            return Err(lc_err("setting up verification"));
        }
        Ok(good)
    }
}
