//! `machine.md`: what the run was measured on (CPU model and the flags the
//! ciphers use, cores, kernel, memory, the backing store, the build).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// The CPU flags (as in /proc/cpuinfo) that decide which cipher code runs.
pub const CRYPTO_FLAGS: [(&str, &str); 8] = [
    ("aes", "AES-NI"),
    ("vaes", "VAES"),
    ("pclmulqdq", "PCLMULQDQ"),
    ("vpclmulqdq", "VPCLMULQDQ"),
    ("avx2", "AVX2"),
    ("avx512f", "AVX-512F"),
    ("sha_ni", "SHA-NI"),
    ("ssse3", "SSSE3"),
];

fn first_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}

/// The value of `key` in a `key : value` text such as /proc/cpuinfo.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim())
}

/// Describes this machine in Markdown; `backing` is where the scripts keep
/// their images (`None`: a tmpfs of their own).
pub fn describe(backing: Option<&Path>, exe: &Path) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let model = field(&cpuinfo, "model name").unwrap_or("unknown");
    let flags: Vec<&str> = field(&cpuinfo, "flags")
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let have: Vec<String> = CRYPTO_FLAGS
        .iter()
        .map(|(f, name)| format!("{name} {}", if flags.contains(f) { "yes" } else { "no" }))
        .collect();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem_gib = field(&meminfo, "MemTotal")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|k| k.parse::<f64>().ok())
        .map_or("unknown".to_string(), |k| {
            format!("{:.1} GiB", k / 1048576.0)
        });
    let host = first_line("uname", &["-n"]).unwrap_or_else(|| "unknown".into());
    let backing_text = match backing {
        Some(dir) => {
            let d = dir.display().to_string();
            let fs = first_line("findmnt", &["-no", "FSTYPE,SOURCE", "-T", &d])
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|| "unknown".into());
            format!("{d} ({fs})")
        }
        None => "a tmpfs per report (RAM)".into(),
    };
    let version =
        first_line(&exe.display().to_string(), &["--version"]).unwrap_or_else(|| "unknown".into());
    let commit = exe.parent().and_then(|d| {
        first_line(
            "git",
            &[
                "-C",
                &d.display().to_string(),
                "rev-parse",
                "--short",
                "HEAD",
            ],
        )
    });
    let mut md = String::from("# The machine\n\n| | |\n|---|---|\n");
    let _ = writeln!(md, "| host | {host} |");
    let _ = writeln!(md, "| CPU | {model} |");
    let _ = writeln!(md, "| cipher instructions | {} |", have.join(", "));
    let _ = writeln!(md, "| cores | {cores} |");
    let _ = writeln!(md, "| memory | {mem_gib} |");
    let _ = writeln!(md, "| kernel | {} |", kernel.trim());
    let _ = writeln!(md, "| backing store | {backing_text} |");
    let _ = writeln!(
        md,
        "| cryptkeep | {version}{} |",
        commit.map_or(String::new(), |c| format!(" (commit {c})"))
    );
    md.push_str("\nThe peers' versions are in each report's notes.\n");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_proc_text() {
        let t = "processor\t: 0\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu aes avx2\n";
        assert_eq!(field(t, "model name"), Some("Some CPU @ 2GHz"));
        assert_eq!(field(t, "flags"), Some("fpu aes avx2"));
        assert_eq!(field(t, "nope"), None);
    }
}
