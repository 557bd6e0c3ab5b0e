//! Helpers of the crypto tests: vector-file parsing and hex.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// One `Name = value` block of a vector file.
pub type Record = BTreeMap<String, String>;

/// Reads `tests/vectors/<name>`: blocks of `Name = value` lines separated by
/// blank lines; `#` lines are comments.
pub fn read_vectors(name: &str) -> Vec<Record> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut out = Vec::new();
    let mut cur = Record::new();
    for line in text.lines().chain(std::iter::once("")) {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        if line.is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{name}: bad line {line:?}"));
        cur.insert(k.trim().to_string(), v.trim().to_string());
    }
    assert!(!out.is_empty(), "{name} has no vectors");
    out
}

/// Field accessor with a clear panic.
pub fn field<'a>(r: &'a Record, k: &str) -> &'a str {
    r.get(k)
        .unwrap_or_else(|| panic!("vector {r:?} lacks {k}"))
        .as_str()
}

/// Decodes hex (panics on bad input: test data only).
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Encodes lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
