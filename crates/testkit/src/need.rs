//! What a test needs from the machine, checked by [`need!`](crate::need!).
//!
//! A test that needs root, FUSE, loop devices or an outside tool starts with
//! `need!(...)`. When the requirement is missing the test prints
//! `skipped: needs WHAT (why)` on standard error and returns, so a plain
//! `cargo test` as a normal user passes. Two environment variables change
//! that:
//! - [`ALL_ENV`] (`CRYPTKEEP_TEST_ALL=1`, set by CI): a missing requirement
//!   fails the test instead, so nothing is skipped silently;
//! - [`PRETEND_ENV`] (`CRYPTKEEP_TEST_PRETEND_MISSING=root,fuse,cryptsetup`):
//!   the named requirements (or tool names) count as missing, to try the
//!   skip path on a machine that has them.

use std::path::Path;

use crate::run::on_path;

/// Set to `1`, a missing requirement fails the test instead of skipping it.
pub const ALL_ENV: &str = "CRYPTKEEP_TEST_ALL";

/// Comma-separated requirements (`root`, `fuse`, `fuse_uring`, `loop_dev`,
/// `gocryptfs`, or a tool's name) to treat as missing.
pub const PRETEND_ENV: &str = "CRYPTKEEP_TEST_PRETEND_MISSING";

/// Makes the test return early (skip) unless the machine has what it needs.
///
/// `need!(root)`, `need!(fuse)`, `need!(fuse_uring)`, `need!(loop_dev)`,
/// `need!(gocryptfs)`, several at once as `need!(root, fuse)`, and
/// `need!(tool "cryptsetup")` for a binary on `PATH`. See the [`need`](crate::need)
/// module for `CRYPTKEEP_TEST_ALL` (fail instead of skip) and
/// `CRYPTKEEP_TEST_PRETEND_MISSING`. For use in tests that return `()`.
#[macro_export]
macro_rules! need {
    (tool $t:expr) => {
        if !$crate::need::tool($t) {
            return;
        }
    };
    ($($r:ident),+ $(,)?) => {
        $(
            if !$crate::need::$r() {
                return;
            }
        )+
    };
}

/// What to do about one requirement.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The requirement is met: run the test.
    Run,
    /// Missing: skip the test.
    Skip,
    /// Missing under [`ALL_ENV`]: fail the test.
    Fail,
}

/// The verdict for requirement `name`, present or not (`have`), given
/// whether skipping is forbidden (`all`) and the [`PRETEND_ENV`] list.
pub fn verdict(name: &str, have: bool, all: bool, pretend: &str) -> Verdict {
    let pretended = pretend.split(',').any(|p| p.trim() == name);
    match (have && !pretended, all) {
        (true, _) => Verdict::Run,
        (false, false) => Verdict::Skip,
        (false, true) => Verdict::Fail,
    }
}

/// Applies [`verdict`] with the environment: true to run the test; false
/// after printing `skipped: needs NAME (why)`; panics under [`ALL_ENV`].
pub fn check(name: &str, have: bool, why: &str) -> bool {
    let all = std::env::var(ALL_ENV).is_ok_and(|v| v == "1");
    let pretend = std::env::var(PRETEND_ENV).unwrap_or_default();
    match verdict(name, have, all, &pretend) {
        Verdict::Run => true,
        Verdict::Skip => {
            eprintln!("skipped: needs {name} ({why})");
            false
        }
        Verdict::Fail => panic!(
            "this test needs {name} ({why}) and {ALL_ENV}=1 forbids skipping it; \
             run scripts/install-deps.sh as root"
        ),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn fuse_usable() -> bool {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok();
    dev && (is_root() || on_path("fusermount3"))
}

/// Whether the test runs as root (`need!(root)`).
pub fn root() -> bool {
    check("root", is_root(), "runs as root")
}

/// Whether FUSE file systems can be mounted: `/dev/fuse` opens and either
/// this is root or `fusermount3` is on `PATH` (`need!(fuse)`).
pub fn fuse() -> bool {
    check(
        "fuse",
        fuse_usable(),
        "/dev/fuse openable, and root or fusermount3",
    )
}

/// Whether FUSE over io_uring is available: [`fuse`] and the fuse module's
/// `enable_uring` parameter is `Y` (`need!(fuse_uring)`).
pub fn fuse_uring() -> bool {
    let on = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y");
    check(
        "fuse_uring",
        fuse_usable() && on,
        "FUSE with /sys/module/fuse/parameters/enable_uring = Y",
    )
}

/// Whether loop devices can be attached: root and `/dev/loop-control`
/// (`need!(loop_dev)`).
pub fn loop_dev() -> bool {
    check(
        "loop_dev",
        is_root() && Path::new("/dev/loop-control").exists(),
        "root and /dev/loop-control",
    )
}

/// Whether the `gocryptfs` binary is on `PATH` (`need!(gocryptfs)`;
/// mounting with it also needs [`fuse`]).
pub fn gocryptfs() -> bool {
    check("gocryptfs", on_path("gocryptfs"), "the gocryptfs binary")
}

/// Whether the executable `name` is on `PATH` (`need!(tool "name")`).
pub fn tool(name: &str) -> bool {
    check(
        name,
        on_path(name),
        "on PATH; scripts/install-deps.sh installs it",
    )
}

#[cfg(test)]
mod tests {
    use super::{verdict, Verdict, ALL_ENV, PRETEND_ENV};

    #[test]
    fn verdicts() {
        assert_eq!(verdict("root", true, false, ""), Verdict::Run);
        assert_eq!(verdict("root", true, true, ""), Verdict::Run);
        assert_eq!(verdict("root", false, false, ""), Verdict::Skip);
        assert_eq!(verdict("root", false, true, ""), Verdict::Fail);
        assert_eq!(verdict("root", true, false, "fuse, root"), Verdict::Skip);
        assert_eq!(verdict("root", true, true, "root"), Verdict::Fail);
        assert_eq!(verdict("fuse", true, false, "fuse_uring"), Verdict::Run);
    }

    /// A test body that records whether it got past `need!`.
    fn body(reached: &mut bool) {
        crate::need!(tool "sh");
        crate::need!(root, loop_dev);
        *reached = true;
    }

    #[test]
    fn the_macro_skips_or_fails() {
        // Changes the environment: no other test of this binary reads it
        // at the same time.
        crate::alone!();
        std::env::set_var(PRETEND_ENV, "sh");
        std::env::remove_var(ALL_ENV);
        let mut reached = false;
        body(&mut reached);
        assert!(!reached, "pretending sh is missing did not skip");

        std::env::set_var(ALL_ENV, "1");
        let failed = std::panic::catch_unwind(|| body(&mut false)).is_err();
        assert!(
            failed,
            "a missing requirement under {ALL_ENV}=1 did not fail"
        );

        std::env::set_var(PRETEND_ENV, "root");
        let failed = std::panic::catch_unwind(|| body(&mut false)).is_err();
        assert!(failed, "pretending root is missing did not fail");

        std::env::remove_var(ALL_ENV);
        std::env::remove_var(PRETEND_ENV);
        // As root with loop devices this runs the body; otherwise it skips.
        let mut reached = false;
        body(&mut reached);
        assert_eq!(reached, super::root() && super::loop_dev());
    }
}
