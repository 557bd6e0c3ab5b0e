//! EME ("ECB-Mix-ECB"), the tweakable wide-block cipher of Halevi and Rogaway
//! ("A Parallelizable Enciphering Mode", CT-RSA 2004), over AES-256.
//!
//! gocryptfs encrypts file names with it (one 16-byte tweak per directory).
//! A message is 1 to 128 AES blocks (16 to 2048 bytes); each output block
//! depends on every input block and on the tweak. Multiplication by 2 is in
//! GF(2^128) with the block read as a little-endian number and the
//! reduction polynomial x^128 + x^7 + x^2 + x + 1 (0x87), as in the EME-32
//! draft and in gocryptfs.

use crate::Error;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::{Aes256, Block};
use zeroize::Zeroize;

/// The largest message EME handles, in 16-byte blocks.
pub const MAX_BLOCKS: usize = 128;

/// An AES-256 EME cipher with its key schedule expanded once.
pub struct Eme {
    aes: Aes256,
    /// E_K(0^128), the base of the L_j masks (key-derived, wiped on drop).
    l0: u128,
}

impl Eme {
    /// Expands a 32-byte AES-256 key.
    pub fn new(key: &[u8]) -> Result<Eme, Error> {
        let aes = Aes256::new_from_slice(key).map_err(|_| Error::InvalidKeySize {
            spec: "aes-256-eme".into(),
            got: key.len(),
            allowed: "32",
        })?;
        let mut zero = Block::default();
        aes.encrypt_block(&mut zero);
        let l0 = u128::from_le_bytes(zero.into());
        Ok(Eme { aes, l0 })
    }

    /// Enciphers `data` (a multiple of 16 bytes, 16..=2048) in place under `tweak`.
    pub fn encrypt(&self, tweak: &[u8; 16], data: &mut [u8]) -> Result<(), Error> {
        self.transform(tweak, data, true)
    }

    /// Deciphers `data` (a multiple of 16 bytes, 16..=2048) in place under `tweak`.
    pub fn decrypt(&self, tweak: &[u8; 16], data: &mut [u8]) -> Result<(), Error> {
        self.transform(tweak, data, false)
    }

    fn block_op(&self, x: u128, encrypt: bool) -> u128 {
        let mut b = Block::from(x.to_le_bytes());
        if encrypt {
            self.aes.encrypt_block(&mut b);
        } else {
            self.aes.decrypt_block(&mut b);
        }
        u128::from_le_bytes(b.into())
    }

    fn transform(&self, tweak: &[u8; 16], data: &mut [u8], encrypt: bool) -> Result<(), Error> {
        let m = data.len() / 16;
        if m * 16 != data.len() || m == 0 || m > MAX_BLOCKS {
            return Err(Error::InvalidLength {
                what: "EME message",
                got: data.len(),
                expected: "a multiple of 16 bytes from 16 to 2048".into(),
            });
        }
        let t = u128::from_le_bytes(*tweak);
        let mut blocks: Vec<u128> = data
            .chunks_exact(16)
            .map(|c| u128::from_le_bytes(c.try_into().unwrap_or([0; 16])))
            .collect();
        // L_j = 2^(j+1) * E_K(0).
        let mut masks = Vec::with_capacity(m);
        let mut l = self.l0;
        for _ in 0..m {
            l = double(l);
            masks.push(l);
        }
        // First ECB pass: PPP_j = E(P_j xor L_j).
        for (b, mask) in blocks.iter_mut().zip(&masks) {
            *b = self.block_op(*b ^ mask, encrypt);
        }
        // Mix: MP = T xor (xor of all PPP_j); MC = E(MP); M = MP xor MC.
        let mp = blocks.iter().fold(t, |acc, b| acc ^ b);
        let mc = self.block_op(mp, encrypt);
        let mut mix = mp ^ mc;
        for b in blocks.iter_mut().skip(1) {
            mix = double(mix);
            *b ^= mix;
        }
        blocks[0] = blocks.iter().skip(1).fold(mc ^ t, |acc, b| acc ^ b);
        // Second ECB pass: C_j = E(CCC_j) xor L_j.
        for ((b, mask), out) in blocks.iter_mut().zip(&masks).zip(data.chunks_exact_mut(16)) {
            *b = self.block_op(*b, encrypt) ^ mask;
            out.copy_from_slice(&b.to_le_bytes());
        }
        blocks.zeroize();
        masks.zeroize();
        mix.zeroize();
        Ok(())
    }
}

/// Multiplication by x in GF(2^128), little-endian block convention.
fn double(x: u128) -> u128 {
    let carry = (x >> 127) as u8;
    (x << 1) ^ u128::from(carry * 0x87)
}

impl Drop for Eme {
    fn drop(&mut self) {
        self.l0.zeroize();
    }
}

impl std::fmt::Debug for Eme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Eme(AES-256)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Known answer: all-zero key, tweak and 16-byte block (the vector the
    /// rfjakob/eme package publishes for EME-AES-256).
    #[test]
    fn known_answer_one_block() {
        let e = Eme::new(&[0u8; 32]).unwrap();
        let mut d = [0u8; 16];
        e.encrypt(&[0; 16], &mut d).unwrap();
        assert_eq!(d.to_vec(), hex("f1b9ce8ca15a4ba9fb476905434b9fd3"));
        e.decrypt(&[0; 16], &mut d).unwrap();
        assert_eq!(d, [0u8; 16]);
    }

    /// Known answer, first 16 bytes of the published 2048-byte all-zero vector.
    #[test]
    fn known_answer_max_blocks() {
        let e = Eme::new(&[0u8; 32]).unwrap();
        let mut d = vec![0u8; 2048];
        e.encrypt(&[0; 16], &mut d).unwrap();
        assert_eq!(d[..16].to_vec(), hex("630500884158a8d41216aaa6351e92ea"));
        e.decrypt(&[0; 16], &mut d).unwrap();
        assert!(d.iter().all(|&b| b == 0));
    }

    #[test]
    fn wide_block_diffusion_and_tweak() {
        let e = Eme::new(&[7u8; 32]).unwrap();
        let msg: Vec<u8> = (0..64u8).collect();
        let mut a = msg.clone();
        e.encrypt(&[1; 16], &mut a).unwrap();
        let mut b = msg.clone();
        b[63] ^= 1;
        e.encrypt(&[1; 16], &mut b).unwrap();
        // Changing the last byte changes every block.
        for (x, y) in a.chunks(16).zip(b.chunks(16)) {
            assert_ne!(x, y);
        }
        let mut c = msg.clone();
        e.encrypt(&[2; 16], &mut c).unwrap();
        assert_ne!(a, c);
        e.decrypt(&[1; 16], &mut a).unwrap();
        assert_eq!(a, msg);
    }

    #[test]
    fn bad_lengths() {
        let e = Eme::new(&[0u8; 32]).unwrap();
        assert!(e.encrypt(&[0; 16], &mut []).is_err());
        assert!(e.encrypt(&[0; 16], &mut [0u8; 17]).is_err());
        assert!(e.encrypt(&[0; 16], &mut vec![0u8; 2064]).is_err());
        assert!(Eme::new(&[0u8; 16]).is_err());
    }
}
