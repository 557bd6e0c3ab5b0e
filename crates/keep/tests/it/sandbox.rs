//! The keep's self-protection against the real kernel: memfd_secret pages
//! unreadable through /proc/PID/mem, process_vm_readv and ptrace; the
//! locked fallback (VmLck, `dd` in smaps); non-dumpable against a root
//! attacker without CAP_SYS_PTRACE; seccomp kills with SIGSYS (also threads
//! started before install, and PROT_EXEC mappings); Landlock denies opening
//! files; close_fds_except keeps exactly what it is told.
//!
//! Everything risky runs in a child: this test binary re-executed with
//! `--exact sandbox::child --nocapture` and `KEEP_SANDBOX_CHILD=<case>`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use cryptkeep_keep::keep::{recv_hello, Hello};
use cryptkeep_keep::sandbox::{self, landlock, seccomp};
use cryptkeep_keep::secret_mem::{SecretKind, SecretMem, NO_MEMFD_SECRET_ENV};
use cryptkeep_keep::{server, spawn};
use cryptkeep_testkit::need;

const CASE_ENV: &str = "KEEP_SANDBOX_CHILD";
const MARKER: [u8; 32] = *b"cryptkeep-sandbox-marker-0123456";

// ---------------------------------------------------------------- children

/// Entry point of every child process; does nothing in a normal run.
#[test]
fn child() {
    let Ok(case) = std::env::var(CASE_ENV) else {
        return;
    };
    match case.as_str() {
        "secret" => child_secret(false, false),
        "secret_nocaps" => child_secret(false, true),
        "secret_harden" => child_secret(true, true),
        "attack" => child_attack(),
        "peek" => child_peek(),
        "seccomp_forbidden" => child_seccomp_forbidden(),
        "seccomp_exec" => child_seccomp_exec(),
        "seccomp_good" => child_seccomp_good(),
        "seccomp_tsync" => child_seccomp_tsync(),
        "landlock" => child_landlock(),
        "fds" => child_fds(),
        "server_secret_heap" => child_server(server::RustHeap::Secret),
        "server_ordinary_heap" => child_server(server::RustHeap::Ordinary),
        other => panic!("unknown child case {other}"),
    }
}

/// A runtime keep in this binary, which installs no secret heap.
fn child_server(rust_heap: server::RustHeap) {
    let r = server::run_runtime(server::ServerConfig {
        rust_heap,
        ..server::ServerConfig::default()
    });
    exit_now(r.map_or_else(|f| f.code, |()| 0));
}

fn exit_now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// Optionally hardens and drops capabilities (as the keep does), then
/// holds the marker in secret memory and in a Vec, says where, and waits
/// for stdin to close.
fn child_secret(harden: bool, drop_caps: bool) {
    if harden {
        sandbox::harden().expect("harden");
    }
    if drop_caps {
        // As the keep does in lock_down: without this, the kernel's
        // capability-subset rule alone already stops a tracer that lacks
        // some of the target's capabilities, and the control would fail.
        sandbox::drop_capabilities().expect("drop_capabilities");
        if !harden {
            // Losing capabilities makes the kernel clear "dumpable"
            // (commit_creds); the control must differ only in harden().
            // SAFETY: prctl with constant arguments.
            assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) }, 0);
        }
    }
    let secret = SecretMem::from_slice(&MARKER).expect("SecretMem");
    let plain = MARKER.to_vec();
    let kind = match secret.kind() {
        SecretKind::MemfdSecret => "memfd",
        SecretKind::LockedFallback => "fallback",
    };
    println!(
        "READY {} {:#x} {:#x} {kind} {}",
        std::process::id(),
        secret.as_slice().as_ptr() as usize,
        plain.as_ptr() as usize,
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    );
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    assert_eq!(secret.as_slice(), &MARKER);
    assert_eq!(plain, MARKER);
    exit_now(0)
}

fn errno_of(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// A would-be attacker: PTRACE_ATTACH and open /proc/PID/mem; prints the
/// errno of each (0 = it worked).
fn child_attack() {
    let pid: i32 = std::env::var("TARGET_PID").unwrap().parse().unwrap();
    let cap = std::fs::read_to_string("/proc/self/status").unwrap();
    let capeff = cap.lines().find(|l| l.starts_with("CapEff")).unwrap();
    // SAFETY: ptrace attach by pid; detached below if it worked.
    let r = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) };
    let attach = if r == 0 {
        let mut st = 0;
        // SAFETY: waiting for the tracee's stop, then detaching.
        unsafe {
            libc::waitpid(pid, &mut st, libc::__WALL);
            libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        }
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    };
    let mem = errno_of(std::fs::File::open(format!("/proc/{pid}/mem")).map(drop));
    println!("ATTACK attach={attach} mem={mem} {capeff}");
    exit_now(0)
}

/// Full root: attach and PTRACE_PEEKDATA both addresses; prints errno or
/// the first 8 bytes read.
fn child_peek() {
    let pid: i32 = std::env::var("TARGET_PID").unwrap().parse().unwrap();
    let secret = usize::from_str_radix(
        std::env::var("SECRET").unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let plain = usize::from_str_radix(std::env::var("PLAIN").unwrap().trim_start_matches("0x"), 16)
        .unwrap();
    // SAFETY: attach, wait for the stop, peek, detach.
    unsafe {
        assert_eq!(
            libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0),
            0,
            "attach as root"
        );
        let mut st = 0;
        libc::waitpid(pid, &mut st, libc::__WALL);
        let peek = |addr: usize| {
            *libc::__errno_location() = 0;
            let v = libc::ptrace(libc::PTRACE_PEEKDATA, pid, addr, 0);
            let e = *libc::__errno_location();
            if e != 0 {
                format!("errno={e}")
            } else {
                format!("{:016x}", v as u64)
            }
        };
        let s = peek(secret);
        let p = peek(plain);
        libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        println!("PEEK secret={s} plain={p}");
    }
    exit_now(0)
}

fn install_serving() {
    sandbox::harden().expect("harden");
    seccomp::install(&seccomp::keep_serving()).expect("seccomp install");
}

fn child_seccomp_forbidden() {
    install_serving();
    println!("INSTALLED");
    let _ = std::io::stdout().flush();
    // openat is refused softly (glibc's malloc needs that), not allowed.
    let e = std::fs::File::open("/etc/hostname").expect_err("openat after seccomp");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    println!("OPENAT EACCES");
    let _ = std::io::stdout().flush();
    // Forbidden: socket. The kernel kills the process before it returns.
    // SAFETY: socket(2) with constant arguments.
    let _ = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    println!("SURVIVED");
    exit_now(0)
}

fn child_seccomp_exec() {
    install_serving();
    println!("INSTALLED");
    let _ = std::io::stdout().flush();
    // SAFETY: an anonymous mapping; the filter kills us for PROT_EXEC.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    println!("SURVIVED {p:?}");
    exit_now(0)
}

/// Threads started before install do allocator-heavy work, print, and are
/// joined; secret memory is made and dropped after install; exit 0.
fn child_seccomp_good() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let rx = rx.clone();
            std::thread::spawn(move || {
                rx.lock().unwrap().recv().unwrap();
                let mut v: Vec<Vec<u8>> = Vec::new();
                for j in 0..200 {
                    v.push(vec![j as u8; 1 << (j % 18)]);
                }
                let sum: usize = v.iter().map(|x| x.len()).sum();
                println!("worker {i} sum {sum}");
                sum
            })
        })
        .collect();
    let key = SecretMem::from_slice(&[7u8; 64]).expect("secret before install");
    install_serving();
    for _ in 0..3 {
        tx.send(()).unwrap();
    }
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    std::thread::sleep(std::time::Duration::from_millis(1));
    let _ = getrandom_bytes();
    drop(key);
    println!("GOOD total {total}");
    exit_now(0)
}

fn getrandom_bytes() -> [u8; 16] {
    let mut b = [0u8; 16];
    // SAFETY: b is writable for its length.
    let r = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    assert_eq!(r, 16);
    b
}

/// A thread spawned before install calls a forbidden syscall: TSYNC means
/// the whole process dies by SIGSYS.
fn child_seccomp_tsync() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        rx.recv().unwrap();
        // SAFETY: socket(2) with constant arguments; forbidden by the filter.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        println!("THREAD SURVIVED {fd}");
    });
    install_serving();
    println!("INSTALLED");
    let _ = std::io::stdout().flush();
    tx.send(()).unwrap();
    let _ = t.join();
    println!("SURVIVED");
    exit_now(0)
}

fn child_landlock() {
    std::fs::read("/etc/hostname").expect("readable before Landlock");
    match landlock::restrict_all().expect("restrict_all") {
        landlock::LandlockStatus::Enforced { abi } => {
            let e = std::fs::File::open("/etc/hostname").expect_err("open after Landlock");
            assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
            let e = std::fs::read_dir("/").expect_err("read_dir after Landlock");
            assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
            println!("LANDLOCK enforced abi {abi}");
        }
        landlock::LandlockStatus::Unavailable { reason } => {
            let errno = landlock::abi_version().expect_err("no ABI").raw_os_error();
            assert!(
                matches!(errno, Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)),
                "{reason}"
            );
            println!("LANDLOCK unavailable {reason}");
        }
    }
    exit_now(0)
}

fn open_fds() -> Vec<i32> {
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // Drop the listing's own descriptor (closed by now).
    // SAFETY: F_GETFD only queries.
    let mut open: Vec<i32> = listed
        .into_iter()
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .collect();
    open.sort_unstable();
    open
}

fn child_fds() {
    let files: Vec<std::fs::File> = (0..6)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    use std::os::fd::{AsRawFd, IntoRawFd};
    let raw: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
    let keep = vec![0, 1, 2, raw[1], raw[4], 900];
    // SAFETY: dup2 onto a free high number.
    assert_eq!(unsafe { libc::dup2(raw[0], 900) }, 900);
    assert!(open_fds().len() >= 9, "{:?}", open_fds());
    for f in files {
        let _ = f.into_raw_fd(); // closed by close_fds_except, not by drop
    }
    sandbox::close_fds_except(&keep).expect("close_fds_except");
    let mut want = keep.clone();
    want.sort_unstable();
    assert_eq!(open_fds(), want);
    println!("FDS {:?}", want);
    exit_now(0)
}

// ------------------------------------------------------------------ parent

fn child_cmd(case: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "sandbox::child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CASE_ENV, case)
    .env_remove(NO_MEMFD_SECRET_ENV);
    c
}

fn run(case: &str) -> Output {
    child_cmd(case).stdin(Stdio::null()).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn line<'a>(o: &'a str, prefix: &str) -> Option<&'a str> {
    o.lines()
        .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
}

/// A child holding the marker; stop it by dropping `stdin`.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: i32,
    /// The thread that ran harden/drop_capabilities (credentials are per
    /// thread; libtest runs the child on a thread that is not the leader).
    tid: i32,
    secret: usize,
    plain: usize,
    kind: String,
}

impl Holder {
    // The child is waited for by Holder's Drop (or finish); clippy cannot
    // see through the move into the struct.
    #[allow(clippy::zombie_processes)]
    fn start(case: &str, fallback: bool) -> Holder {
        let mut c = child_cmd(case);
        if fallback {
            c.env(NO_MEMFD_SECRET_ENV, "1");
        }
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        loop {
            l.clear();
            if out.read_line(&mut l).unwrap_or(0) == 0 {
                let _ = child.kill();
                let st = child.wait();
                panic!("child ended before READY: {st:?}");
            }
            // libtest prints "test child ... " before the child's own line.
            if let Some((_, rest)) = l.trim().split_once("READY ") {
                let f: Vec<&str> = rest.split(' ').collect();
                let hex = |s: &str| usize::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                return Holder {
                    pid: f[0].parse().unwrap(),
                    tid: f[4].parse().unwrap(),
                    secret: hex(f[1]),
                    plain: hex(f[2]),
                    kind: f[3].to_string(),
                    stdin: child.stdin.take(),
                    child,
                };
            }
        }
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let st = self.child.wait().unwrap();
        assert!(st.success(), "holder exited with {st:?}");
    }
}

impl Drop for Holder {
    /// A failed assertion must not leave the holder running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_proc_mem(pid: i32, addr: usize) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut b = [0u8; 32];
    f.read_exact_at(&mut b, addr as u64)?;
    Ok(b)
}

fn vm_readv(pid: i32, addr: usize) -> std::io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    let local = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 32,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 32,
    };
    // SAFETY: local points at b (32 writable bytes); remote is only read by
    // the kernel from the other process.
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if r == 32 {
        Ok(b)
    } else if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Err(std::io::Error::other(format!("short read {r}")))
    }
}

#[test]
fn memfd_secret_unreadable_by_proc_mem_and_process_vm_readv() {
    let h = Holder::start("secret", false);
    assert_eq!(h.kind, "memfd", "memfd_secret works on this machine");
    // The control: ordinary memory reads back, so the test can fail.
    assert_eq!(read_proc_mem(h.pid, h.plain).unwrap(), MARKER);
    assert_eq!(vm_readv(h.pid, h.plain).unwrap(), MARKER);
    match read_proc_mem(h.pid, h.secret) {
        Ok(b) => assert_ne!(b, MARKER, "/proc/PID/mem read the secret"),
        Err(e) => println!("/proc/PID/mem on the secret page: {e}"),
    }
    match vm_readv(h.pid, h.secret) {
        Ok(b) => assert_ne!(b, MARKER, "process_vm_readv read the secret"),
        Err(e) => println!("process_vm_readv on the secret page: {e}"),
    }
    h.finish();
}

#[test]
fn fallback_is_locked_and_not_dumped() {
    let h = Holder::start("secret", true);
    assert_eq!(h.kind, "fallback");
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.pid)).unwrap();
    let lck: u64 = line(&status, "VmLck:")
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    assert!(lck >= 4, "VmLck {lck} kB");
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", h.pid)).unwrap();
    let mut in_map = false;
    let mut flags = None;
    for l in smaps.lines() {
        let head = l.split(' ').next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                in_map = (a..b).contains(&h.secret);
                continue;
            }
        }
        if in_map {
            if let Some(f) = l.strip_prefix("VmFlags:") {
                flags = Some(f.split_whitespace().map(String::from).collect::<Vec<_>>());
            }
        }
    }
    let flags = flags.expect("mapping of the secret in smaps");
    assert!(flags.iter().any(|f| f == "dd"), "no dd in {flags:?}");
    assert!(flags.iter().any(|f| f == "lo"), "no lo in {flags:?}");
    // Fallback memory is readable by root via /proc/PID/mem: say so.
    assert_eq!(read_proc_mem(h.pid, h.secret).unwrap(), MARKER);
    h.finish();
}

/// Runs the attacker as root without CAP_SYS_PTRACE (setpriv drops it
/// from the bounding set, so the exec'd attacker never has it).
fn attack(pid: i32) -> (i32, i32) {
    let exe = std::env::current_exe().unwrap();
    let o = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-sys_ptrace", "--"])
        .arg(exe)
        .args([
            "--exact",
            "sandbox::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE_ENV, "attack")
        .env("TARGET_PID", pid.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", text(&o));
    let l = line(&out, "ATTACK ").unwrap_or_else(|| panic!("{}", text(&o)));
    println!("attacker: {l}");
    let capeff = l.split("CapEff:").nth(1).unwrap().trim();
    let eff = u64::from_str_radix(capeff, 16).unwrap();
    assert_eq!(
        eff & (1 << 19/* CAP_SYS_PTRACE */),
        0,
        "attacker still has CAP_SYS_PTRACE"
    );
    let num = |k: &str| -> i32 {
        l.split(' ')
            .find_map(|w| w.strip_prefix(k))
            .unwrap()
            .parse()
            .unwrap()
    };
    (num("attach="), num("mem="))
}

#[test]
fn harden_stops_root_without_cap_sys_ptrace() {
    need!(root);
    need!(tool "setpriv");
    // Control: against an ordinary (dumpable) child the attacker succeeds.
    let soft = Holder::start("secret_nocaps", false);
    assert_eq!(
        attack(soft.tid),
        (0, 0),
        "attacker works against a dumpable process"
    );
    soft.finish();
    let hard = Holder::start("secret_harden", false);
    let (attach, mem) = attack(hard.tid);
    assert_eq!(attach, libc::EPERM, "PTRACE_ATTACH to a non-dumpable keep");
    assert_eq!(
        mem,
        libc::EACCES,
        "open /proc/PID/mem of a non-dumpable keep"
    );
    hard.finish();
}

#[test]
fn full_root_ptrace_cannot_peek_memfd_secret() {
    need!(root);
    let h = Holder::start("secret_harden", false);
    let o = child_cmd("peek")
        .env("TARGET_PID", h.pid.to_string())
        .env("SECRET", format!("{:#x}", h.secret))
        .env("PLAIN", format!("{:#x}", h.plain))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let l = line(&out, "PEEK ").unwrap_or_else(|| panic!("{}", text(&o)));
    println!("root with CAP_SYS_PTRACE: {l}");
    let want_plain = format!(
        "plain={:016x}",
        u64::from_le_bytes(MARKER[..8].try_into().unwrap())
    );
    assert!(
        l.contains(&want_plain),
        "control peek of ordinary memory: {l}"
    );
    assert!(
        l.contains("secret=errno="),
        "PEEKDATA of the secret page: {l}"
    );
    h.finish();
}

fn assert_sigsys(case: &str) {
    let o = run(case);
    assert_eq!(o.status.signal(), Some(libc::SIGSYS), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("INSTALLED"), "{}", text(&o));
    assert!(!out.contains("SURVIVED"), "{}", text(&o));
}

#[test]
fn seccomp_refuses_openat_and_kills_socket() {
    assert_sigsys("seccomp_forbidden");
    assert!(String::from_utf8_lossy(&run("seccomp_forbidden").stdout).contains("OPENAT EACCES"));
}

#[test]
fn seccomp_kills_prot_exec_mmap() {
    assert_sigsys("seccomp_exec");
}

#[test]
fn seccomp_covers_threads_started_before_install() {
    assert_sigsys("seccomp_tsync");
}

#[test]
fn seccomp_allows_a_serving_keep() {
    let o = run("seccomp_good");
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("GOOD total"), "{}", text(&o));
    assert_eq!(out.matches("worker ").count(), 3, "{}", text(&o));
}

#[test]
fn landlock_denies_every_file() {
    need!(root);
    let o = run("landlock");
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let l = line(&out, "LANDLOCK ").unwrap_or_else(|| panic!("{}", text(&o)));
    println!("{l}");
}

#[test]
fn close_fds_except_leaves_exactly_the_listed() {
    let o = run("fds");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("FDS [0, 1, 2,"),
        "{}",
        text(&o)
    );
}

/// Starts this binary as a keep (`case`) and returns its first message.
fn keep_hello(case: &str) -> (Hello, std::process::Child) {
    let sp = spawn::spawn(spawn::SpawnConfig {
        env: vec![(CASE_ENV.into(), case.into())],
        ..spawn::SpawnConfig::new(
            std::env::current_exe().unwrap(),
            [
                "--exact",
                "sandbox::child",
                "--nocapture",
                "--test-threads=1",
            ],
        )
    })
    .unwrap();
    (recv_hello(&sp.control).unwrap(), sp.child)
}

#[test]
fn a_host_without_the_secret_heap_is_refused_unless_it_accepts_that() {
    need!(root);
    // This test binary installs no global allocator.
    assert!(!cryptkeep_keep::secret_heap::installed());
    let (hello, mut child) = keep_hello("server_secret_heap");
    let Hello::Failed(f) = hello else {
        panic!("a keep without the secret heap started: {hello:?}");
    };
    assert_eq!(f.code, server::EXIT_KEEP);
    assert!(f.what.contains("no secret heap"), "{f:?}");
    assert!(
        f.hint.contains("cryptkeep_keep::install_secret_heap!();"),
        "{f:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(server::EXIT_KEEP));
    // Accepted: it serves, and says where its heap is.
    let (hello, mut child) = keep_hello("server_ordinary_heap");
    let Hello::Ready { facts, .. } = hello else {
        panic!("{hello:?}");
    };
    let heap = facts
        .iter()
        .find(|(k, _)| k == "heap")
        .map(|(_, v)| v.as_str());
    assert_eq!(heap, Some("memfd_secret (AWS-LC only; Rust heap ordinary)"));
    let _ = child.kill();
    let _ = child.wait();
}
