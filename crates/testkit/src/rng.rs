//! Test data: a small deterministic generator and real random keys.

/// xorshift64*: deterministic test data and offsets, so a failure replays.
/// The state must not be zero.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index in `0..n` (`n` > 0).
    pub fn index(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Fills `buf`.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }

    /// `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }
}

/// `n` bytes from the operating system's random source (getrandom).
pub fn random_key(n: usize) -> Vec<u8> {
    let mut k = vec![0u8; n];
    getrandom::fill(&mut k).expect("getrandom");
    k
}

#[cfg(test)]
mod tests {
    use super::{random_key, Rng};

    #[test]
    fn deterministic_and_filled() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        assert_eq!(a.bytes(13), b.bytes(13));
        assert!(a.below(10) < 10);
        let k = random_key(64);
        assert_eq!(k.len(), 64);
        assert_ne!(k, random_key(64));
    }
}
