//! Parsing of size arguments such as `--size 256M`.
//!
//! Like coreutils `truncate -s`: a number of bytes with an optional suffix;
//! `K`, `M`, `G`, `T` (also `KiB`, `MiB`, …) are powers of 1024, `KB`, `MB`,
//! `GB`, `TB` powers of 1000. Case-insensitive.

/// Parses a size with an optional unit suffix into bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "size {s:?} does not start with a number (e.g. 256M, 1G, 1048576)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {s:?} is too large"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "size {s:?} has an unknown unit {unit:?}; use K, M, G, T (1024) or KB, MB, GB, TB (1000)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
    }

    #[test]
    fn rejects() {
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
    }
}
