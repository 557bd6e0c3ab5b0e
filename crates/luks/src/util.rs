//! Small helpers shared by the LUKS1 and LUKS2 code: rounding, fixed-size
//! C string fields, UUIDs, hex dumps and constant-time comparison.

use crate::error::{bad, Error};

/// Round `v` up to a multiple of `align` (a power of two or any non-zero value).
pub(crate) fn round_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

/// A NUL-padded C string field: the bytes up to the first NUL, as UTF-8.
/// Like cryptsetup (`hdr_from_disk`, `_check_and_convert_hdr`), the last
/// byte of the field is treated as NUL even when it is not, so a field
/// without a terminator reads as its first `len - 1` bytes and is written
/// back terminated.
pub(crate) fn c_str(field: &[u8], what: &str) -> Result<String, Error> {
    let field = &field[..field.len().saturating_sub(1)];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end])
        .map(str::to_owned)
        .map_err(|_| bad(format!("{what} is not valid UTF-8")))
}

/// Store `s` in a NUL-padded field of `field.len()` bytes; the last byte stays NUL.
pub(crate) fn put_c_str(field: &mut [u8], s: &str, what: &str) -> Result<(), Error> {
    let b = s.as_bytes();
    if b.len() >= field.len() || b.contains(&0) {
        return Err(Error::InvalidArgument(format!(
            "{what} '{s}' must be at most {} bytes without NUL",
            field.len() - 1
        )));
    }
    field.fill(0);
    field[..b.len()].copy_from_slice(b);
    Ok(())
}

/// A random (version 4, RFC 9562) UUID in the lowercase 8-4-4-4-12 form cryptsetup writes.
pub(crate) fn uuid_v4() -> Result<String, Error> {
    let mut b = [0u8; 16];
    cryptkeep_crypto::rand::fill_random(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// Check that `s` is a UUID in 8-4-4-4-12 hex form (as libuuid's uuid_parse accepts).
pub(crate) fn check_uuid(s: &str) -> Result<(), Error> {
    let ok = s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "UUID '{s}' is not in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
        )))
    }
}

/// Lowercase hex without separators.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex bytes separated by spaces, `per_line` per line; continuation lines
/// start with `indent` (the layout of `cryptsetup luksDump`).
pub(crate) fn hex_lines(b: &[u8], per_line: usize, indent: &str) -> String {
    let mut out = String::new();
    for (i, chunk) in b.chunks(per_line).enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(indent);
        }
        for x in chunk {
            out.push_str(&format!("{x:02x} "));
        }
    }
    out
}

/// Constant-time equality for digests.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why `spec` cannot take a key of `key_bytes`, if it cannot (for errors
/// about header fields: the crypto crate's message speaks to a user's option).
pub(crate) fn key_misfit(spec: &cryptkeep_crypto::CipherSpec, key_bytes: usize) -> Option<String> {
    match spec.check_key_size(key_bytes) {
        Ok(()) => None,
        Err(cryptkeep_crypto::Error::InvalidKeySize { allowed, .. }) => Some(format!(
            "{spec} takes a key of {allowed} bytes, not {key_bytes}"
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// Fresh random bytes.
pub(crate) fn random_bytes(n: usize) -> Result<Vec<u8>, Error> {
    let mut v = vec![0u8; n];
    cryptkeep_crypto::rand::fill_random(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_v4_and_parses() {
        let u = uuid_v4().unwrap();
        check_uuid(&u).unwrap();
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn c_str_fields() {
        let mut f = [0u8; 8];
        put_c_str(&mut f, "aes", "cipher").unwrap();
        assert_eq!(c_str(&f, "cipher").unwrap(), "aes");
        assert!(put_c_str(&mut f, "12345678", "cipher").is_err());
        // No terminator: the last byte counts as NUL, as in cryptsetup.
        assert_eq!(c_str(b"abcdefgh", "label").unwrap(), "abcdefg");
    }

    #[test]
    fn rounding_and_eq() {
        assert_eq!(round_up(256000, 4096), 258048);
        assert_eq!(round_up(4096, 4096), 4096);
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
