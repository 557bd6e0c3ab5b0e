//! Helpers shared by the keep tests.

pub mod scan;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cryptkeep binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_cryptkeep");

/// Runs `cryptkeep ARGS` with its run directory in `dir`; panics with its
/// standard error unless it succeeds.
pub fn ck(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .env("CRYPTKEEP_RUN_DIR", dir.join("run"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cryptkeep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A new directory `/tmp/PREFIX.XXXXXX`.
pub fn tempdir(prefix: &str) -> PathBuf {
    let out = Command::new("mktemp")
        .args(["-d", &format!("/tmp/{prefix}.XXXXXX")])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The thread ids of process `pid`'s `keep-worker` threads.
pub fn keep_worker_tids(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .unwrap()
                .starts_with("keep-worker")
        })
        .collect()
}

/// The `Cpus_allowed_list` of each `keep-worker` thread of process `pid`
/// (`/proc/PID/task/TID/status`): `"1"` for a worker pinned to CPU 1.
pub fn keep_worker_cpus(pid: i32) -> Vec<String> {
    let mut out: Vec<String> = keep_worker_tids(pid)
        .iter()
        .map(|t| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status")).unwrap();
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .expect("a Cpus_allowed_list line");
            list.trim().to_string()
        })
        .collect();
    out.sort();
    out
}

/// Checks a mixed placement's `keep_worker_cpus`: as many workers
/// floating (allowed every CPU this process may use) as pinned, each
/// pinned one to a CPU of its own. On one CPU the two look alike: it
/// only checks that every worker may run there.
pub fn assert_mixed_placement(cpus: &[String], what: &str) {
    let all = own_cpus();
    if all.parse::<usize>().is_ok() {
        let even = !cpus.is_empty() && cpus.len().is_multiple_of(2);
        assert!(even && cpus.iter().all(|c| *c == all), "{what}: {cpus:?}");
        return;
    }
    let (floating, pinned): (Vec<&String>, Vec<&String>) = cpus.iter().partition(|c| **c == all);
    assert!(
        pinned.iter().all(|c| c.parse::<usize>().is_ok()),
        "{what}: a worker neither pinned nor floating: {cpus:?}"
    );
    let distinct: std::collections::HashSet<&&String> = pinned.iter().collect();
    assert_eq!(
        distinct.len(),
        pinned.len(),
        "{what}: two pinned to one CPU: {cpus:?}"
    );
    assert!(
        !pinned.is_empty() && floating.len() == pinned.len(),
        "{what}: {} pinned, {} floating: {cpus:?}",
        pinned.len(),
        floating.len()
    );
}

/// The CPUs this process may run on, as `Cpus_allowed_list` writes them.
pub fn own_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("a Cpus_allowed_list line")
        .trim()
        .to_string()
}
