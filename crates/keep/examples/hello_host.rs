//! The host-only twin of `hello_keep`: the same greeting, written into a
//! buffer by a function of this program instead of by a keep. With
//! `hello_keep` it measures what the keep costs a program that makes one
//! call (the secGear report's helloworld against secgear_helloworld):
//!
//!     cargo build --release -p cryptkeep-keep --examples
//!     /usr/bin/time -f '%U %S %M' target/release/examples/hello_host

use cryptkeep_keep::proto::HELLO_GREETING;

/// Writes the greeting into `buf`; returns its length (what the keep's
/// greeting call does, here in-process).
fn get_string(buf: &mut [u8]) -> usize {
    let n = HELLO_GREETING.len().min(buf.len());
    buf[..n].copy_from_slice(&HELLO_GREETING[..n]);
    n
}

fn main() {
    let mut buf = [0u8; 32];
    let n = get_string(&mut buf);
    println!("{}", String::from_utf8_lossy(&buf[..n]));
}
