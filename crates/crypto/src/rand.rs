//! Random bytes from the operating system (getrandom(2)).

use crate::Error;

/// Fills `buf` with random bytes from the kernel's CSPRNG via `getrandom(2)`.
pub fn fill_random(buf: &mut [u8]) -> Result<(), Error> {
    getrandom::fill(buf).map_err(|_| Error::Random)
}
