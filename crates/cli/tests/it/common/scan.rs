//! Reads every readable mapping of a process through `/proc/PID/mem` (as
//! root) and reports each place where any [`WINDOW`]-byte run of a secret
//! occurs: a key leaves no copy that such a scan finds, whole or in part
//! (an AES-256 key schedule starts with the key's two halves; a decryption
//! schedule ends with the first half).

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::FileExt;

/// Length of the runs searched for.
pub const WINDOW: usize = 16;

/// Mappings `/proc/PID/mem` never reads, and that hold no process data:
/// `memfd_secret` pages (the point of the keep) and the kernel's vDSO data.
const UNREADABLE_BY_DESIGN: [&str; 4] = ["/secretmem", "[vvar]", "[vvar_vclock]", "[vsyscall]"];

/// Bits of the prefilter (indexed by a hash of a window's first 4 bytes).
const FILTER_BITS: u32 = 24;

/// One place where a window of a secret turned up.
#[derive(Debug, Clone)]
pub struct Hit {
    /// Which secret.
    pub what: String,
    /// Offset in the secret of the first byte found (0 = its start).
    pub at: usize,
    /// Bytes found in a row: [`WINDOW`], or more when overlapping windows
    /// make one longer run.
    pub len: usize,
    /// Address in the process.
    pub addr: u64,
    /// The `/proc/PID/maps` line of the mapping it is in.
    pub mapping: String,
}

impl fmt::Display for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let start = self
            .mapping
            .split('-')
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .unwrap_or(0);
        let name = self
            .mapping
            .split_whitespace()
            .nth(5)
            .unwrap_or("anonymous");
        write!(
            f,
            "{} bytes {}..{} at {:#x} ({name} + {:#x})",
            self.what,
            self.at,
            self.at + self.len,
            self.addr,
            self.addr - start,
        )
    }
}

/// What a scan read and found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every run of windows found, in address order per mapping.
    pub hits: Vec<Hit>,
    /// Bytes read.
    pub bytes: u64,
    /// Mappings read.
    pub mappings: usize,
}

impl Scan {
    /// Whether any window of the secret `what` was found.
    pub fn found(&self, what: &str) -> bool {
        self.hits.iter().any(|h| h.what == what)
    }

    /// The hits, one per line (at most `max`, then a count of the rest).
    pub fn report(&self, max: usize) -> String {
        let mut s: Vec<String> = self.hits.iter().take(max).map(|h| h.to_string()).collect();
        if self.hits.len() > max {
            s.push(format!("... and {} more", self.hits.len() - max));
        }
        s.join("\n")
    }
}

/// The secrets' windows: window bytes -> (secret index, offset).
struct Windows {
    map: HashMap<[u8; WINDOW], Vec<(usize, usize)>>,
    filter: Vec<u64>,
}

fn filter_index(w: &[u8]) -> usize {
    let x = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    (x.wrapping_mul(0x9E37_79B1) >> (32 - FILTER_BITS)) as usize
}

impl Windows {
    fn new(secrets: &[(&str, &[u8])]) -> Windows {
        let mut map: HashMap<[u8; WINDOW], Vec<(usize, usize)>> = HashMap::new();
        let mut filter = vec![0u64; (1 << FILTER_BITS) / 64];
        for (i, (what, bytes)) in secrets.iter().enumerate() {
            assert!(
                bytes.len() >= WINDOW,
                "{what}: {} bytes, shorter than a window",
                bytes.len()
            );
            assert!(
                bytes.windows(WINDOW).all(|w| w.iter().any(|&b| b != 0)),
                "{what} has a zero window"
            );
            for (at, w) in bytes.windows(WINDOW).enumerate() {
                map.entry(w.try_into().unwrap()).or_default().push((i, at));
                let f = filter_index(w);
                filter[f / 64] |= 1 << (f % 64);
            }
        }
        Windows { map, filter }
    }

    /// (offset in `buf`, secret index, offset in secret) of every window.
    fn find(&self, buf: &[u8], out: &mut Vec<(usize, usize, usize)>) {
        for (pos, w) in buf.windows(WINDOW).enumerate() {
            let f = filter_index(w);
            if self.filter[f / 64] & (1 << (f % 64)) == 0 {
                continue;
            }
            if let Some(v) = self.map.get(<&[u8; WINDOW]>::try_from(w).unwrap()) {
                out.extend(v.iter().map(|&(i, at)| (pos, i, at)));
            }
        }
    }
}

/// Scans every readable mapping of process `pid` for every [`WINDOW`]-byte
/// run of each `(name, bytes)` secret. Panics when a mapping other than
/// `memfd_secret` pages and the vDSO's data cannot be read, so nothing is
/// skipped silently (and a fallback keep, whose key pages do read, is
/// scanned in full).
pub fn scan(pid: i32, secrets: &[(&str, &[u8])]) -> Scan {
    let w = Windows::new(secrets);
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut out = Scan::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut found = Vec::new();
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        if !perms.starts_with('r') {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let by_design = UNREADABLE_BY_DESIGN.iter().any(|n| l.contains(n));
        let mut off = a;
        while off < b {
            let n = ((b - off) as usize).min(buf.len());
            let got = match mem.read_at(&mut buf[..n], off) {
                Ok(got) => got,
                Err(_) if by_design => break,
                Err(e) => panic!("cannot read {off:#x} of `{l}` in process {pid}: {e}"),
            };
            if got == 0 && by_design {
                break;
            }
            assert!(got > 0, "no bytes at {off:#x} of `{l}` in process {pid}");
            out.bytes += got as u64;
            found.clear();
            w.find(&buf[..got], &mut found);
            for &(pos, i, at) in &found {
                let addr = off + pos as u64;
                // Overlapping windows of one copy make one longer run.
                if let Some(h) = out.hits.iter_mut().rev().find(|h| {
                    h.what == secrets[i].0
                        && h.addr + (h.len - WINDOW + 1) as u64 == addr
                        && h.at + h.len - WINDOW + 1 == at
                }) {
                    h.len += 1;
                    continue;
                }
                out.hits.push(Hit {
                    what: secrets[i].0.to_string(),
                    at,
                    len: WINDOW,
                    addr,
                    mapping: l.to_string(),
                });
            }
            if off + got as u64 >= b {
                break;
            }
            // Overlap chunks by a window less one byte, so none is split
            // and none is counted twice.
            off += (got.max(WINDOW) - (WINDOW - 1)) as u64;
        }
        out.mappings += 1;
    }
    out
}
