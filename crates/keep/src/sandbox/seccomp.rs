//! A seccomp-BPF allowlist (seccomp(2), Documentation/userspace-api/
//! seccomp_filter.rst), written as a classic BPF program by hand: check the
//! architecture (and refuse the x32 ABI), then allow the listed system
//! calls; anything else kills the whole process (`SECCOMP_RET_KILL_PROCESS`,
//! seen by the parent as SIGSYS). Installed with
//! `SECCOMP_FILTER_FLAG_TSYNC`, so threads that already run are covered.

use crate::Error;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_SET_MODE_FILTER: u32 = 1;
const SECCOMP_FILTER_FLAG_TSYNC: u32 = 1;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
#[cfg(target_endian = "little")]
const ARG2_LO: u32 = 32; // offsetof(struct seccomp_data, args[2])

const RET_ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO | errno

/// A set of allowed system calls, by number, with names for the log, plus
/// a few that fail with an errno instead of killing (see [`Allowlist::refuse`]).
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    calls: Vec<(i64, &'static str)>,
    refused: Vec<(i64, &'static str, u16)>,
}

impl Allowlist {
    /// An empty list (everything forbidden).
    pub fn new() -> Allowlist {
        Allowlist::default()
    }

    /// Adds one system call.
    pub fn allow(mut self, nr: i64, name: &'static str) -> Allowlist {
        if !self.calls.iter().any(|&(n, _)| n == nr) {
            self.calls.push((nr, name));
        }
        self
    }

    /// Makes one system call fail with `errno` (SECCOMP_RET_ERRNO) instead
    /// of killing the process: for calls the C library makes on its own
    /// and copes with failing (an allowed call of the same number wins).
    pub fn refuse(mut self, nr: i64, name: &'static str, errno: i32) -> Allowlist {
        if !self.refused.iter().any(|&(n, _, _)| n == nr) {
            self.refused.push((nr, name, (errno & 0xfff) as u16));
        }
        self
    }

    /// Names of the system calls that fail with an errno.
    pub fn refused_names(&self) -> Vec<&'static str> {
        self.refused.iter().map(|&(_, n, _)| n).collect()
    }

    /// Number of allowed system calls.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// True when nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Names of the allowed system calls.
    pub fn names(&self) -> Vec<&'static str> {
        self.calls.iter().map(|&(_, n)| n).collect()
    }

    /// The BPF program: arch check, x32 check, then per allowed call a
    /// compare that returns ALLOW (for mmap/mprotect only when the `prot`
    /// argument lacks PROT_EXEC), then the refused calls' ERRNO returns,
    /// and KILL_PROCESS at the end.
    fn program(&self) -> Vec<libc::sock_filter> {
        let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
        let mut p = vec![
            ins(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
            ins(JEQ_K, 1, 0, AUDIT_ARCH),
            ins(RET_K, 0, 0, RET_KILL_PROCESS),
            ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ];
        if cfg!(target_arch = "x86_64") {
            p.push(ins(JGE_K, 0, 1, X32_SYSCALL_BIT));
            p.push(ins(RET_K, 0, 0, RET_KILL_PROCESS));
        }
        for &(nr, _) in &self.calls {
            if nr == libc::SYS_mmap || nr == libc::SYS_mprotect {
                // prot is argument 2; its low 32 bits (little endian) are
                // at offsetof(seccomp_data, args[2]) = 16 + 2 * 8.
                p.push(ins(JEQ_K, 0, 4, nr as u32));
                p.push(ins(LD_W_ABS, 0, 0, ARG2_LO));
                p.push(ins(JSET_K, 0, 1, libc::PROT_EXEC as u32));
                p.push(ins(RET_K, 0, 0, RET_KILL_PROCESS));
                p.push(ins(RET_K, 0, 0, RET_ALLOW));
                // A was overwritten only on the matching path, which returned.
            } else {
                p.push(ins(JEQ_K, 0, 1, nr as u32));
                p.push(ins(RET_K, 0, 0, RET_ALLOW));
            }
        }
        for &(nr, _, errno) in &self.refused {
            p.push(ins(JEQ_K, 0, 1, nr as u32));
            p.push(ins(RET_K, 0, 0, RET_ERRNO | u32::from(errno)));
        }
        p.push(ins(RET_K, 0, 0, RET_KILL_PROCESS));
        p
    }
}

/// What a serving keep needs, and nothing that opens, connects, executes,
/// forks, traces or signals other processes:
/// - its channels: read, write, readv, writev, recvmsg, recvfrom, sendmsg,
///   sendto, poll/ppoll, close;
/// - waiting: futex, sched_yield, nanosleep, clock_nanosleep, clock_gettime,
///   restart_syscall;
/// - memory: mmap, munmap, mremap, mprotect (glibc's thread arenas), brk,
///   madvise (MADV_DONTNEED on free); mmap and mprotect only without
///   PROT_EXEC (checked on the `prot` argument), so no new code can be mapped;
/// - threads ending and signals: exit, exit_group, rt_sigreturn,
///   rt_sigprocmask, sigaltstack, getpid, gettid, tgkill (abort), rseq and
///   set_robust_list (glibc's start of a thread created just before the
///   filter went in), membarrier, sched_getaffinity (malloc arena count);
/// - getrandom (nonces, the random IVs of authenticated volume sectors,
///   RSA key generation).
///
/// openat (and open on x86_64) fail with EACCES instead of killing: glibc's
/// malloc opens `/proc/sys/vm/overcommit_memory` the first time it shrinks
/// a thread's arena, and copes with the failure; Landlock denies the same
/// opens anyway. Everything else unlisted (socket, connect, execve, clone,
/// fork, ptrace, process_vm_*, kill, pkey_mprotect, ...) kills the keep.
pub fn keep_serving() -> Allowlist {
    let mut a = Allowlist::new();
    macro_rules! allow {
        ($($name:ident),* $(,)?) => {
            $( a = a.allow(libc::$name as i64, stringify!($name)); )*
        };
    }
    // The filter compares in list order: the calls a serving keep makes
    // per request come first (futex for every hand-off, getrandom for
    // every GCM nonce, sched_yield while waiting).
    allow!(SYS_futex, SYS_getrandom, SYS_sched_yield);
    allow!(
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_recvmsg,
        SYS_recvfrom,
        SYS_sendmsg,
        SYS_sendto,
        SYS_ppoll,
        SYS_close,
        SYS_futex,
        SYS_sched_yield,
        SYS_nanosleep,
        SYS_clock_nanosleep,
        SYS_clock_gettime,
        SYS_restart_syscall,
        SYS_mmap,
        SYS_munmap,
        SYS_mremap,
        SYS_mprotect,
        SYS_brk,
        SYS_madvise,
        SYS_exit,
        SYS_exit_group,
        SYS_rt_sigreturn,
        SYS_rt_sigprocmask,
        SYS_sigaltstack,
        SYS_getpid,
        SYS_gettid,
        SYS_tgkill,
        SYS_rseq,
        SYS_set_robust_list,
        SYS_membarrier,
        SYS_sched_getaffinity,
        SYS_getrandom,
    );
    #[cfg(target_arch = "x86_64")]
    {
        allow!(SYS_poll);
    }
    a = a.refuse(libc::SYS_openat, "SYS_openat", libc::EACCES);
    // AWS-LC's random generator looks for /dev/sysgenid (VM snapshot
    // detection) the first time it runs; "not there" is the right answer
    // in a sandbox, and lets the keep start without paying that set-up
    // (40 ms of CPU-jitter entropy collection) before its first request.
    a = a.refuse(libc::SYS_newfstatat, "SYS_newfstatat", libc::ENOENT);
    #[cfg(target_arch = "x86_64")]
    {
        a = a.refuse(libc::SYS_open, "SYS_open", libc::EACCES);
    }
    a
}

/// Installs `allow` on every thread of the process. Requires
/// PR_SET_NO_NEW_PRIVS (see [`super::harden`]) unless root.
pub fn install(allow: &Allowlist) -> Result<(), Error> {
    let prog = allow.program();
    if prog.len() > 4096 {
        return Err(Error::Sandbox("seccomp program too long".into()));
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at a valid program that outlives the call; the
    // kernel copies it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_TSYNC,
            &fprog as *const libc::sock_fprog,
        )
    };
    match r {
        0 => Ok(()),
        r if r > 0 => Err(Error::Sandbox(format!(
            "thread {r} could not be synchronised to the seccomp filter"
        ))),
        _ => Err(Error::last_os("seccomp(SECCOMP_SET_MODE_FILTER)")),
    }
}
