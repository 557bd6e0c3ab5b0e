//! A small CSV reader for the files the report scripts write (RFC 4180:
//! comma-separated, double quotes around a field that holds a comma or a
//! quote, `""` for a quote inside one).

use std::path::Path;

use crate::error::{io, Error, Result};

/// The largest file a report script may write (the reader refuses more).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads `path`, checks that its first line is exactly `header`, and returns
/// the other lines' fields with their 1-based line numbers. Blank lines are
/// skipped; a line with another number of fields is an error.
pub fn read(path: &Path, header: &[&str]) -> Result<Vec<(usize, Vec<String>)>> {
    let text = read_text(path)?;
    parse(&text, path, header)
}

/// Reads a text file of at most [`MAX_FILE_BYTES`]; a missing file reads as empty.
pub fn read_text(path: &Path) -> Result<String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io("reading", path)(e)),
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return Err(Error::Data {
                path: path.to_path_buf(),
                line: 0,
                msg: format!("{} bytes, more than the {MAX_FILE_BYTES} allowed", m.len()),
            })
        }
        Ok(_) => {}
    }
    std::fs::read_to_string(path).map_err(io("reading", path))
}

/// Parses CSV `text` (see [`read`]); `path` is for the error messages.
pub fn parse(text: &str, path: &Path, header: &[&str]) -> Result<Vec<(usize, Vec<String>)>> {
    let bad = |line: usize, msg: String| Error::Data {
        path: path.to_path_buf(),
        line,
        msg,
    };
    let mut lines = text.lines().enumerate();
    let first = loop {
        match lines.next() {
            None => {
                return Err(bad(
                    0,
                    format!("empty: expected the header {}", header.join(",")),
                ))
            }
            Some((_, l)) if l.trim().is_empty() => continue,
            Some((n, l)) => break (n + 1, l),
        }
    };
    let got = split(first.1).map_err(|m| bad(first.0, m))?;
    if got != header {
        return Err(bad(
            first.0,
            format!(
                "header is {:?}, expected {}",
                got.join(","),
                header.join(",")
            ),
        ));
    }
    let mut rows = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let fields = split(line).map_err(|m| bad(n + 1, m))?;
        if fields.len() != header.len() {
            return Err(bad(
                n + 1,
                format!(
                    "{} fields, expected {} ({})",
                    fields.len(),
                    header.len(),
                    header.join(",")
                ),
            ));
        }
        rows.push((n + 1, fields));
    }
    Ok(rows)
}

/// Splits one CSV line into its fields.
fn split(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) if was_quoted => {
                return Err(format!("{c:?} after a closing quote"));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    fields.push(field);
    Ok(fields)
}

/// Quotes `field` for CSV output when it needs it.
pub fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields_and_errors() {
        let p = Path::new("t.csv");
        let rows = parse("a,b\n1,\"x, \"\"y\"\"\"\n\n2,z\n", p, &["a", "b"]).unwrap();
        assert_eq!(rows[0], (2, vec!["1".into(), "x, \"y\"".into()]));
        assert_eq!(rows[1].0, 4);
        assert!(parse("a,c\n", p, &["a", "b"]).is_err());
        let e = parse("a,b\n1,2,3\n", p, &["a", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.csv:2: 3 fields"), "{e}");
        assert!(parse("a,b\n\"open,1\n", p, &["a", "b"]).is_err());
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(
            split(&quote("say \"hi\", ok")).unwrap(),
            vec!["say \"hi\", ok"]
        );
    }
}
