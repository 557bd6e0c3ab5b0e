//! Reading the `some` line of `/proc/pressure/cpu`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Mutex, OnceLock};

/// The file stays open: PSI files are read from the start each time.
fn file() -> &'static Mutex<Option<File>> {
    static FILE: OnceLock<Mutex<Option<File>>> = OnceLock::new();
    FILE.get_or_init(|| Mutex::new(File::open("/proc/pressure/cpu").ok()))
}

/// The `total=` of the `some` line: microseconds in which at least one
/// runnable task waited for a CPU since boot; `None` when there is no such
/// file or line.
pub(crate) fn some_total_us() -> Option<u64> {
    let mut guard = file().lock().unwrap_or_else(|p| p.into_inner());
    let f = guard.as_mut()?;
    let mut buf = [0u8; 256];
    f.seek(SeekFrom::Start(0)).ok()?;
    let n = f.read(&mut buf).ok()?;
    parse_some_total(std::str::from_utf8(&buf[..n]).ok()?)
}

/// The `total=` field of the line that starts with `some `.
fn parse_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_some_line() {
        let text = "some avg10=7.22 avg60=27.95 avg300=12.70 total=63455765\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_some_total(text), Some(63_455_765));
        assert_eq!(parse_some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_some_total("some avg10=1.0 total=x\n"), None);
        assert_eq!(parse_some_total(""), None);
    }
}
