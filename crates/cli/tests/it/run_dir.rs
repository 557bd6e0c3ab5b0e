//! The run directory belongs to root (or the caller) alone: it is created
//! 0700 whichever command makes it first (`fs mount` made it 0755, so any
//! user could flock `.lock` and block every open and close, and read
//! state.json and the logs); a run directory, or a directory above it,
//! that another user owns or may write to is refused with exit 2 and one
//! line; state.json is read without following a symlink; and `close`
//! signals only the daemon it recorded (same start time, this binary),
//! never whatever process now has the recorded pid. Needs root, /dev/fuse,
//! losetup and setpriv.

#[allow(dead_code)]
use cryptkeep_testkit::need;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{alive, as_other_user, assert_error, mode, start_time, Work, OTHER_UID};

fn chmod(p: &std::path::Path, m: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
}

fn chown_other(p: &std::path::Path) {
    std::os::unix::fs::chown(p, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
}

#[test]
fn fs_mount_and_open_make_it_private() {
    need!(root, fuse, loop_dev);
    need!(tool "setpriv");
    let w = Work::new("rundir-private");
    // Reachable by the other user down to the run directory.
    chmod(&w.dir, 0o755);
    let (c, m, pw) = (w.p("c"), w.p("m"), w.p("pw"));
    fs::create_dir(&m).unwrap();
    fs::write(&pw, b"fs password\n").unwrap();
    w.ok(&["fs", "init", &c, "--passfile", &pw, "--scryptn", "10"]);
    w.ok(&["fs", "mount", &c, &m, "--passfile", &pw]);
    assert_eq!(mode(&w.run), 0o700);
    assert_eq!(mode(&w.run.join("fs")), 0o700);
    for e in fs::read_dir(w.run.join("fs")).unwrap().flatten() {
        assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
    }
    w.ok(&["fs", "umount", &m]);
    let v = w.volume("v.img");
    w.ok(&["open", &v, "priv", "--key-file", &w.p("pass")]);
    for f in [".lock", "priv/state.json", "priv/daemon.log"] {
        assert_eq!(mode(&w.run.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&w.run.join("priv")), 0o700);
    // Another user can neither take the lock nor read the record.
    let lock = w.run.join(".lock").display().to_string();
    let o = as_other_user("flock", &["-n", &lock, "true"]);
    assert_ne!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains("Permission denied"), "{o:?}");
    let st = w.run.join("priv/state.json").display().to_string();
    assert_ne!(as_other_user("cat", &[&st]).code, Some(0));
    w.ok(&["close", "priv"]);
}

#[test]
fn a_run_directory_left_open_by_an_older_version_is_tightened() {
    need!(root, fuse, loop_dev);
    need!(tool "setpriv");
    let w = Work::new("rundir-old");
    fs::create_dir(&w.run).unwrap();
    chmod(&w.run, 0o755);
    fs::write(w.run.join(".lock"), b"").unwrap();
    chmod(&w.run.join(".lock"), 0o644);
    let v = w.volume("v.img");
    w.ok(&["open", &v, "old", "--key-file", &w.p("pass")]);
    assert_eq!(mode(&w.run), 0o700);
    assert_eq!(mode(&w.run.join(".lock")), 0o600);
    w.ok(&["close", "old"]);
}

#[test]
fn a_run_directory_others_can_write_is_refused() {
    need!(root, fuse, loop_dev);
    need!(tool "setpriv");
    let w = Work::new("rundir-unsafe");
    let v = w.volume("v.img");
    let pass = w.p("pass");
    let (c, m) = (w.p("c"), w.p("m"));
    fs::create_dir(&m).unwrap();
    fs::write(w.p("pw"), b"fs password\n").unwrap();
    w.ok(&[
        "fs",
        "init",
        &c,
        "--passfile",
        &w.p("pw"),
        "--scryptn",
        "10",
    ]);
    let pw = w.p("pw");
    let commands: Vec<Vec<&str>> = vec![
        vec!["open", &v, "u", "--key-file", &pass],
        vec!["close", "u"],
        vec!["status"],
        vec!["status", "u"],
        vec!["fs", "mount", &c, &m, "--passfile", &pw],
    ];
    let check = |why: &str| {
        for args in &commands {
            let o = w.run(args);
            assert_error(&o, 2, &["unsafe run directory", why]);
        }
        assert!(!w.run.join("u").exists());
    };
    // World-writable.
    fs::create_dir(&w.run).unwrap();
    chmod(&w.run, 0o777);
    check("writable by group or others (mode 0777)");
    // Another user's (even 0700).
    chmod(&w.run, 0o700);
    chown_other(&w.run);
    check(&format!("is owned by uid {OTHER_UID}"));
    // Ours, below another user's directory.
    fs::remove_dir(&w.run).unwrap();
    let theirs = w.dir.join("theirs");
    fs::create_dir(&theirs).unwrap();
    let run = theirs.join("run");
    fs::create_dir(&run).unwrap();
    chmod(&run, 0o700);
    chown_other(&theirs);
    let o = crate::support::out(
        Command::new(crate::support::BIN)
            .env("CRYPTKEEP_RUN_DIR", &run)
            .args(["open", &v, "u", "--key-file", &pass])
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    assert_error(
        &o,
        2,
        &[&format!("{} is owned by uid {OTHER_UID}", theirs.display())],
    );
}

#[test]
fn a_state_record_that_is_a_symlink_is_not_read() {
    need!(root, fuse, loop_dev);
    need!(tool "setpriv");
    let w = Work::new("rundir-link");
    fs::create_dir(&w.run).unwrap();
    fs::create_dir(w.run.join("l")).unwrap();
    fs::write(w.dir.join("elsewhere.json"), b"{}").unwrap();
    std::os::unix::fs::symlink(w.dir.join("elsewhere.json"), w.run.join("l/state.json")).unwrap();
    let o = w.run(&["status", "l"]);
    assert_eq!(o.code, Some(4), "{o:?}");
    assert!(o.stderr.contains("cannot read the state record"), "{o:?}");
    assert_eq!(o.stderr.lines().count(), 1, "{o:?}");
}

/// A record of NAME naming process `pid` (with its start time if `start`).
fn forged_record(w: &Work, name: &str, pid: u32, start: Option<u64>) {
    let dir = w.run.join(name);
    fs::create_dir_all(&dir).unwrap();
    chmod(&w.run, 0o700);
    let mut st = serde_json::json!({
        "name": name, "volume": w.p("none.img"), "header": null, "device": null,
        "file": "", "type": "luks2", "cipher": "aes-xts-plain64", "key_size": 512,
        "sector_size": 4096, "read_only": false, "pid": pid, "mountpoint": null,
    });
    if let Some(s) = start {
        st["pid_start"] = s.into();
    }
    fs::write(dir.join("state.json"), serde_json::to_vec(&st).unwrap()).unwrap();
}

#[test]
fn close_signals_only_the_recorded_daemon() {
    need!(root, fuse, loop_dev);
    need!(tool "setpriv");
    let w = Work::new("rundir-pid");
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|p| p.display().to_string().contains("sleep"))
    {
        assert!(Instant::now() < deadline, "sleep did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A record from before start times were kept: not signalled, and the
    // message says what to do.
    forged_record(&w, "old", pid, None);
    let o = w.run(&["close", "old"]);
    assert_error(
        &o,
        7,
        &[
            &format!("cannot tell whether pid {pid} is the daemon of old"),
            "nothing was signalled",
            &format!("kill {pid}"),
            "cryptkeep close old",
        ],
    );
    assert!(w.run.join("old/state.json").exists());
    // Its start time, but another program: not signalled, record removed.
    forged_record(&w, "other", pid, Some(start_time(pid)));
    let o = w.run(&["close", "other"]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains("not signalled"), "{o:?}");
    assert!(!w.run.join("other").exists());
    // Another start time (a reused pid): the daemon is gone; cleaned up.
    forged_record(&w, "reused", pid, Some(start_time(pid) - 1));
    let o = w.ok(&["status", "reused"]);
    assert!(o.stdout.contains("stale"), "{o:?}");
    w.ok(&["close", "reused"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "close signalled an unrelated process");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // A real daemon is still stopped by close.
    let v = w.volume("v.img");
    w.ok(&["open", &v, "real", "--key-file", &w.p("pass")]);
    let st: serde_json::Value =
        serde_json::from_slice(&fs::read(w.run.join("real/state.json")).unwrap()).unwrap();
    let daemon = st["pid"].as_u64().unwrap() as u32;
    assert_eq!(st["pid_start"].as_u64(), Some(start_time(daemon)));
    let keep = st["keep"]["pid"].as_u64().unwrap() as u32;
    assert_eq!(st["keep"]["pid_start"].as_u64(), Some(start_time(keep)));
    assert!(st["volume_id"]["file"]["ino"].is_u64(), "{st}");
    w.ok(&["close", "real"]);
    assert!(!alive(daemon) && !alive(keep));
}
