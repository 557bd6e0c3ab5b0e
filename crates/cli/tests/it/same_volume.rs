//! One volume, one read-write opener: a second `open` of the same image
//! file under any path (a hard link, a symlink, a bind mount) is refused
//! with exit 5 naming the NAME it is open as, leaving no state; so is
//! `format` of it; opens racing for one image leave exactly one open. (The
//! "already open" check once compared paths and attached a second
//! read-write loop device to a hard link.) Needs root, /dev/fuse, losetup.

#[allow(dead_code)]
use cryptkeep_testkit::need;
use std::fs;
use std::process::Command;

use crate::support::{assert_error, Work};

#[test]
fn another_path_to_an_open_volume_is_refused() {
    need!(root, fuse, loop_dev);
    let w = Work::new("samevol");
    let v = w.volume("v.img");
    let pass = w.p("pass");
    fs::hard_link(&v, w.dir.join("hard.img")).unwrap();
    std::os::unix::fs::symlink(&v, w.dir.join("sym.img")).unwrap();
    fs::create_dir(w.dir.join("bind")).unwrap();
    let bind = w.dir.join("bind");
    assert!(Command::new("mount")
        .arg("--bind")
        .arg(&w.dir)
        .arg(&bind)
        .status()
        .unwrap()
        .success());
    let dev = w.ok(&["open", &v, "first", "--key-file", &pass]).stdout;
    let dev = dev.trim();
    let through_bind = bind.join("v.img").display().to_string();
    for (other, name) in [
        (w.p("hard.img"), "hard"),
        (w.p("sym.img"), "sym"),
        (through_bind.clone(), "bound"),
        (v.clone(), "again"),
    ] {
        let o = w.run(&["open", &other, name, "--key-file", &pass]);
        assert_error(
            &o,
            5,
            &["already open as first", dev, "cryptkeep close first"],
        );
        assert!(!w.run.join(name).exists(), "{name}: state left behind");
        // Read-only is refused too: the kernel would serve stale data.
        let o = w.run(&["open", &other, name, "--key-file", &pass, "--read-only"]);
        assert_eq!(o.code, Some(5), "{o:?}");
    }
    let o = w.run(&[
        "format",
        &w.p("hard.img"),
        "--key-file",
        &pass,
        "--batch-mode",
    ]);
    assert_error(&o, 5, &["open as first"]);
    w.ok(&["close", "first"]);
    let _ = Command::new("umount").arg(&bind).status();
    // Closed, the hard link opens.
    w.ok(&["open", &w.p("hard.img"), "second", "--key-file", &pass]);
    w.ok(&["close", "second"]);
}

#[test]
fn racing_opens_of_one_image_leave_one_open() {
    need!(root, fuse, loop_dev);
    let w = Work::new("samerace");
    let v = w.volume("v.img");
    let pass = w.p("pass");
    let mut children = Vec::new();
    for i in 0..4 {
        let link = w.p(&format!("l{i}.img"));
        fs::hard_link(&v, &link).unwrap();
        let mut c = w.cmd(&["open", &link, &format!("r{i}"), "--key-file", &pass]);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        children.push(c.spawn().unwrap());
    }
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| crate::support::out(c.wait_with_output().unwrap()))
        .collect();
    let ok = outs.iter().filter(|o| o.code == Some(0)).count();
    assert_eq!(ok, 1, "{outs:#?}");
    for o in outs.iter().filter(|o| o.code != Some(0)) {
        assert_error(o, 5, &["already open as r"]);
    }
    let loops = String::from_utf8(
        Command::new("losetup")
            .args(["-n", "-O", "BACK-FILE"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let mine = loops
        .lines()
        .filter(|l| l.starts_with(&w.run.display().to_string()))
        .count();
    assert_eq!(mine, 1, "{loops}");
}
