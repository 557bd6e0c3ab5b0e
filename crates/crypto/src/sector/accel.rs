//! The accelerated backend: aws-lc's EVP cipher interface (AES-NI/VAES
//! assembly) through `aws-lc-sys`.
//!
//! aws-lc has AES-256-XTS but no AES-128/192-XTS, and it refuses XTS keys
//! whose two halves are equal; [`AccelCipher::new`] returns `None` for those
//! so the caller falls back to the portable code.
//!
//! Each key is expanded once into a template `EVP_CIPHER_CTX` per direction.
//! A call takes a context from a small pool (or copies the template, which
//! copies the key schedule, no re-expansion), re-arms it per sector with
//! `EVP_CipherInit_ex(ctx, NULL, NULL, NULL, iv, -1)`, which only copies the
//! IV, and runs `EVP_Cipher` in place. No allocation happens per sector.

use super::iv::IvGen;
use super::{check_layout, iv_number, ivless, SectorCipher};
use crate::secret::ct_eq;
use crate::spec::ChainMode;
use crate::{Backend, CipherSpec, Error};
use aws_lc_sys as sys;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

/// One owned `EVP_CIPHER_CTX`.
struct Ctx(NonNull<sys::EVP_CIPHER_CTX>);

// SAFETY: an EVP_CIPHER_CTX has no thread affinity; `Ctx` owns it exclusively,
// so moving it to another thread is sound.
unsafe impl Send for Ctx {}

impl Ctx {
    fn new() -> Result<Ctx, Error> {
        // SAFETY: EVP_CIPHER_CTX_new has no preconditions; NULL means out of memory.
        let p = unsafe { sys::EVP_CIPHER_CTX_new() };
        NonNull::new(p)
            .map(Ctx)
            .ok_or_else(|| Error::Backend("EVP_CIPHER_CTX_new: out of memory".into()))
    }

    fn ptr(&self) -> *mut sys::EVP_CIPHER_CTX {
        self.0.as_ptr()
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: we own the context and nothing else points to it. aws-lc's
        // OPENSSL_free wipes every allocation, so the key schedule is erased.
        unsafe { sys::EVP_CIPHER_CTX_free(self.ptr()) }
    }
}

/// A keyed template context for one direction plus idle copies of it.
struct CtxPool {
    template: Ctx,
    idle: Mutex<Vec<Ctx>>,
}

// SAFETY: `template` is only read after construction (as the source of
// EVP_CIPHER_CTX_copy, which takes it by const pointer and does not modify
// it); the idle contexts are behind a Mutex and each is used by one thread at
// a time after being popped.
unsafe impl Sync for CtxPool {}

impl CtxPool {
    fn new(cipher: *const sys::EVP_CIPHER, key: &[u8], encrypt: bool) -> Result<CtxPool, Error> {
        let template = Ctx::new()?;
        // SAFETY: `template` is a fresh context, `cipher` a static EVP_CIPHER
        // whose key length equals key.len() (chosen by `evp_cipher`), and the
        // key pointer is valid for that many bytes; the IV is set per sector.
        let ok = unsafe {
            sys::EVP_CipherInit_ex(
                template.ptr(),
                cipher,
                ptr::null_mut(),
                key.as_ptr(),
                ptr::null(),
                i32::from(encrypt),
            ) == 1
                && sys::EVP_CIPHER_CTX_set_padding(template.ptr(), 0) == 1
        };
        if !ok {
            return Err(backend_error("EVP_CipherInit_ex (key setup)"));
        }
        Ok(CtxPool {
            template,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Takes an idle keyed context or makes one from the template.
    fn take(&self) -> Result<Ctx, Error> {
        if let Some(c) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(c);
        }
        let c = Ctx::new()?;
        // SAFETY: both pointers are live contexts; the template is only read.
        if unsafe { sys::EVP_CIPHER_CTX_copy(c.ptr(), self.template.ptr()) } != 1 {
            return Err(backend_error("EVP_CIPHER_CTX_copy"));
        }
        Ok(c)
    }

    fn give_back(&self, c: Ctx) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(c);
    }
}

/// A sector cipher on aws-lc.
pub(crate) struct AccelCipher {
    spec: CipherSpec,
    key_len: usize,
    enc: CtxPool,
    dec: CtxPool,
    ivgen: IvGen,
    name: &'static str,
}

/// The aws-lc cipher for a mode and key length, or `None` if aws-lc lacks it.
fn evp_cipher(mode: ChainMode, key_len: usize) -> Option<(*const sys::EVP_CIPHER, &'static str)> {
    // SAFETY: the EVP_aes_* functions take no arguments and return pointers
    // to static, immutable cipher descriptions.
    unsafe {
        Some(match (mode, key_len) {
            (ChainMode::Xts, 64) => (sys::EVP_aes_256_xts(), "aws-lc EVP_aes_256_xts"),
            (ChainMode::Cbc, 16) => (sys::EVP_aes_128_cbc(), "aws-lc EVP_aes_128_cbc"),
            (ChainMode::Cbc, 24) => (sys::EVP_aes_192_cbc(), "aws-lc EVP_aes_192_cbc"),
            (ChainMode::Cbc, 32) => (sys::EVP_aes_256_cbc(), "aws-lc EVP_aes_256_cbc"),
            (ChainMode::Ecb, 16) => (sys::EVP_aes_128_ecb(), "aws-lc EVP_aes_128_ecb"),
            (ChainMode::Ecb, 24) => (sys::EVP_aes_192_ecb(), "aws-lc EVP_aes_192_ecb"),
            (ChainMode::Ecb, 32) => (sys::EVP_aes_256_ecb(), "aws-lc EVP_aes_256_ecb"),
            _ => return None,
        })
    }
}

impl AccelCipher {
    /// Keys aws-lc for `spec`, or `Ok(None)` when aws-lc cannot serve this
    /// mode/key (AES-128/192-XTS, or XTS halves equal).
    pub(crate) fn new(spec: &CipherSpec, key: &[u8]) -> Result<Option<AccelCipher>, Error> {
        spec.check_key_size(key.len())?;
        let Some((cipher, name)) = evp_cipher(spec.mode, key.len()) else {
            return Ok(None);
        };
        if spec.mode == ChainMode::Xts {
            let (k1, k2) = key.split_at(key.len() / 2);
            if ct_eq(k1, k2) {
                return Ok(None);
            }
        }
        Ok(Some(AccelCipher {
            spec: *spec,
            key_len: key.len(),
            enc: CtxPool::new(cipher, key, true)?,
            dec: CtxPool::new(cipher, key, false)?,
            ivgen: IvGen::new(spec, key)?,
            name,
        }))
    }

    fn run(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
        encrypt: bool,
    ) -> Result<(), Error> {
        check_layout(buf.len(), sector_size)?;
        if buf.is_empty() {
            return Ok(());
        }
        let pool = if encrypt { &self.enc } else { &self.dec };
        let ctx = pool.take()?;
        let result = if self.spec.mode == ChainMode::Ecb {
            cipher_in_place(&ctx, buf)
        } else {
            let mut r = Ok(());
            for (i, unit) in buf.chunks_exact_mut(sector_size).enumerate() {
                let iv = if ivless(self.spec.iv) {
                    [0u8; 16]
                } else {
                    self.ivgen.iv(iv_number(first_iv, i, iv_step))
                };
                // SAFETY: `ctx` is a keyed context of this cipher; with a NULL
                // cipher and key, EVP_CipherInit_ex only installs the 16-byte
                // IV (read from `iv`, valid for 16 bytes) and keeps the
                // direction (-1).
                let armed = unsafe {
                    sys::EVP_CipherInit_ex(
                        ctx.ptr(),
                        ptr::null(),
                        ptr::null_mut(),
                        ptr::null(),
                        iv.as_ptr(),
                        -1,
                    )
                };
                if armed != 1 {
                    r = Err(backend_error("EVP_CipherInit_ex (IV)"));
                    break;
                }
                r = cipher_in_place(&ctx, unit);
                if r.is_err() {
                    break;
                }
            }
            r
        };
        if result.is_ok() {
            pool.give_back(ctx);
        }
        result
    }
}

/// Runs `EVP_Cipher` over `data` in place (whole blocks).
fn cipher_in_place(ctx: &Ctx, data: &mut [u8]) -> Result<(), Error> {
    let p = data.as_mut_ptr();
    // SAFETY: `ctx` is keyed and armed; `p` is valid for reads and writes of
    // data.len() bytes, a multiple of 16 (checked by check_layout); aws-lc's
    // CBC, ECB and XTS implementations allow in == out.
    let r = unsafe { sys::EVP_Cipher(ctx.ptr(), p, p, data.len()) };
    if r == 1 {
        Ok(())
    } else {
        Err(backend_error("EVP_Cipher"))
    }
}

/// Builds an error from aws-lc's error queue (and clears it).
fn backend_error(what: &str) -> Error {
    // SAFETY: ERR_get_error only reads this thread's error queue.
    let code = unsafe { sys::ERR_get_error() };
    let mut msg = [0u8; 256];
    // SAFETY: the buffer is valid for msg.len() bytes; aws-lc NUL-terminates it.
    unsafe { sys::ERR_error_string_n(code, msg.as_mut_ptr().cast(), msg.len()) };
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = String::from_utf8_lossy(&msg[..end]);
    // SAFETY: ERR_clear_error only touches this thread's error queue.
    unsafe { sys::ERR_clear_error() };
    Error::Backend(format!("{what} failed in aws-lc: {text}"))
}

impl SectorCipher for AccelCipher {
    fn encrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error> {
        self.run(buf, sector_size, first_iv, iv_step, true)
    }

    fn decrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error> {
        self.run(buf, sector_size, first_iv, iv_step, false)
    }

    fn spec(&self) -> &CipherSpec {
        &self.spec
    }

    fn key_len(&self) -> usize {
        self.key_len
    }

    fn backend(&self) -> Backend {
        Backend::Accelerated
    }

    fn implementation(&self) -> &'static str {
        self.name
    }
}
