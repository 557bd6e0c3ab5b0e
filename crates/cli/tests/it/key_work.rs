//! Key work ends with the command that asked for it, and long key
//! derivations say so first.
//!
//! `keyslot add` stopped by SIGTERM, SIGINT or SIGKILL while its key
//! process derives a key leaves no process behind and the image's bytes
//! as they were: its forked key process once outlived it and wrote the new
//! keyslot seconds later. And `open`, `dump --dump-volume-key` and `keyslot
//! add` facing a keyslot whose KDF would run for hours (PBKDF2 iterations
//! near 2^32, Argon2 passes near 2^31: half an hour to days) print one line with the estimated
//! time before they start it, draw a progress line on a terminal, and stop
//! within a second on SIGINT (exit 130) or SIGTERM (exit 143), writing
//! nothing and leaving nothing running. Needs root, /dev/fuse, losetup and
//! script(1).

#[allow(dead_code)]
use cryptkeep_testkit::need;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{file_hash, signal, wait_for, Work};

/// The start of the estimate line.
const ESTIMATE: &str = "cryptkeep: the key derivation will take ";

/// Waits up to `secs` for standard error of the command started last to
/// contain `what`; panics (after killing it) if it does not.
fn wait_stderr(w: &Work, child: &mut Child, what: &str, secs: u64) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !w.stderr().contains(what) {
        if Instant::now() > end || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no {what:?} on stderr: {:?}", w.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to `child`, which must end within 2 s with `code`; then
/// nothing of the work directory may still run.
fn stop(w: &Work, child: &mut Child, sig: i32, code: Option<i32>) {
    let sent = Instant::now();
    signal(child.id(), sig);
    let got = wait_for(child, 5);
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(got, code, "{}", w.stderr());
    assert_eq!(w.leftovers_after(2), Vec::<String>::new(), "{}", w.stderr());
}

/// Checks standard error of a stopped command: the estimate line (if
/// `estimate`), then one line that starts with `message`.
fn assert_lines(err: &str, estimate: Option<&str>, message: &str) {
    let lines: Vec<&str> = err.lines().collect();
    let expected = 1 + usize::from(estimate.is_some());
    assert_eq!(lines.len(), expected, "{err:?}");
    if let Some(what) = estimate {
        assert!(lines[0].starts_with(ESTIMATE), "{err:?}");
        assert!(lines[0].contains(what), "{err:?}");
        assert!(lines[0].contains("SIGTERM stops it"), "{err:?}");
    }
    assert!(lines[expected - 1].starts_with(message), "{err:?}");
}

#[test]
fn keyslot_add_stopped_or_killed_writes_nothing_later() {
    need!(root, fuse, loop_dev);
    let w = Work::new("kw-add");
    let v = w.volume("v.img");
    fs::write(w.p("new"), b"another passphrase").unwrap();
    let before = file_hash(Path::new(&v));
    // The new keyslot's KDF takes long: the key process is stopped in it.
    let args = [
        "keyslot",
        "add",
        &v,
        &w.p("new"),
        "--key-file",
        &w.p("pass"),
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "400000000",
    ];
    for (sig, code) in [(libc::SIGTERM, Some(143)), (libc::SIGINT, Some(130))] {
        let mut c = w.start(&args);
        wait_stderr(&w, &mut c, "the new keyslot", 10);
        stop(&w, &mut c, sig, code);
        assert_lines(
            &w.stderr(),
            Some("the new keyslot (pbkdf2-sha256, 400000000 iterations)"),
            "cryptkeep: interrupted by SIG",
        );
        assert!(w.stderr().contains("stopped before anything was written"));
    }
    // Killed outright: its key process dies with it and never writes.
    let mut c = w.start(&args);
    wait_stderr(&w, &mut c, "the new keyslot", 10);
    stop(&w, &mut c, libc::SIGKILL, None);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(file_hash(Path::new(&v)), before, "the image was written");
    // And the same command left alone adds the keyslot.
    w.ok(&[
        "keyslot",
        "add",
        &v,
        &w.p("new"),
        "--key-file",
        &w.p("pass"),
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "1000",
    ]);
    assert_ne!(file_hash(Path::new(&v)), before);
}

#[test]
fn a_kdf_of_hours_is_announced_and_stopped_at_once() {
    need!(root, fuse, loop_dev);
    let w = Work::new("kw-slow");
    let v1 = w.slow_luks1("v1.img");
    let v2 = w.slow_luks2("v2.img");
    let pass = w.p("pass");
    fs::write(w.p("new"), b"another passphrase").unwrap();
    let new = w.p("new");
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            &v1,
            vec!["open", &v1, "slow", "--key-file", &pass],
            "keyslot 0 (pbkdf2-sha256, 4294967280 iterations)",
        ),
        (
            &v2,
            vec!["open", &v2, "slow", "--key-file", &pass, "--keep", "inline"],
            "keyslot 0 (argon2id, 2147483648 passes over 65536 KiB, 1 lanes)",
        ),
        (
            &v1,
            vec![
                "dump",
                &v1,
                "--dump-volume-key",
                "--batch-mode",
                "--key-file",
                &pass,
            ],
            "4294967280 iterations",
        ),
        (
            &v2,
            vec!["keyslot", "add", &v2, &new, "--key-file", &pass],
            "2147483648 passes",
        ),
    ];
    for (img, args, what) in cases {
        let before = file_hash(Path::new(img));
        for (sig, code, name) in [
            (libc::SIGINT, Some(130), "SIGINT"),
            (libc::SIGTERM, Some(143), "SIGTERM"),
        ] {
            let mut c = w.start(&args);
            wait_stderr(&w, &mut c, ESTIMATE, 10);
            let err = w.stderr();
            // Minutes at least, in whichever unit.
            assert!(
                [" min ", " h ", " days"].iter().any(|u| err.contains(u)),
                "{err}"
            );
            std::thread::sleep(Duration::from_millis(300));
            stop(&w, &mut c, sig, code);
            assert_lines(
                &w.stderr(),
                Some(what),
                &format!("cryptkeep: interrupted by {name} while"),
            );
            assert!(!w.run.join("slow").exists(), "{args:?} left its state");
            assert_eq!(file_hash(Path::new(img)), before, "{args:?} wrote");
        }
    }
}

#[test]
fn a_terminal_sees_the_progress_and_a_normal_kdf_says_nothing() {
    need!(root, fuse, loop_dev);
    need!(tool "script");
    let w = Work::new("kw-tty");
    let v1 = w.slow_luks1("v1.img");
    // script(1) gives the command a terminal; its output lands in `typescript`.
    let cmd = format!(
        "CRYPTKEEP_RUN_DIR={} {} dump {} --dump-volume-key --batch-mode --key-file {}",
        w.run.display(),
        crate::support::BIN,
        v1,
        w.p("pass")
    );
    let log = w.p("typescript");
    let mut c = Command::new("script")
        .args(["-qfec", &cmd, &log])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let t = fs::read_to_string(&log).unwrap_or_default();
        if t.contains("deriving the key: 2 s of about") || Instant::now() > end {
            break t;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The command under script(1) is script's child: signal it by its pid.
    let kids = fs::read_to_string(format!("/proc/{0}/task/{0}/children", c.id())).unwrap();
    for pid in kids.split_whitespace() {
        signal(pid.parse().unwrap(), libc::SIGTERM);
    }
    let code = wait_for(&mut c, 5);
    assert!(seen.contains(ESTIMATE), "{seen:?}");
    assert!(
        seen.contains("\r\x1b[Kcryptkeep: deriving the key: 2 s of about"),
        "{seen:?}"
    );
    assert_eq!(code, Some(143), "{seen:?}");
    assert_eq!(w.leftovers_after(2), Vec::<String>::new());
    // A keyslot that derives in milliseconds is not announced.
    let v = w.volume("v.img");
    let o = w.ok(&[
        "dump",
        &v,
        "--dump-volume-key",
        "--batch-mode",
        "--key-file",
        &w.p("pass"),
    ]);
    assert_eq!(o.stderr, "", "{o:?}");
}
