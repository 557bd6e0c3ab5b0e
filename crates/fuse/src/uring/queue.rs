//! The per-CPU queue threads: register ring entries, then answer each
//! request and fetch the next with one COMMIT_AND_FETCH.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::abi::{READDIR, READDIRPLUS};
use super::dispatch::handle;
use super::entry::{cmd_sqe, write_out_header, Entry, CMD_COMMIT_AND_FETCH, CMD_REGISTER};
use super::payloads::Payloads;
use super::reader::{HelperSetup, Reader, OFFLOAD_MIN};
use super::ring::{Completion, Ring};
use crate::ops::Ops;

/// Ring entries per queue: requests the kernel can hand this CPU's thread
/// while it works on one.
const ENTRIES_PER_QUEUE: usize = 4;
/// How long a queue thread (and its read helper) polls for the next
/// request before it sleeps (`CRYPTKEEP_FS_URING_SPIN_US`, default 500 µs).
/// It yields the CPU between polls, so the caller it just answered runs
/// on the same CPU at once and its next request finds the thread awake:
/// a synchronous caller (`rm -r`, `tar -x`) then costs two plain switches
/// per request instead of a sleep and a wake-up. Not after a directory
/// listing (see [`serve_one`]), and not while tasks queue for the CPUs
/// (`cryptkeep_pressure::busy`): on a busy machine a polling thread only
/// takes turns from the caller and from other work.
fn spin_time() -> Duration {
    let us = std::env::var("CRYPTKEEP_FS_URING_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    Duration::from_micros(us)
}

/// How long to retry REGISTER while the connection is not initialised yet.
const INIT_WAIT: Duration = Duration::from_secs(10);

/// Starts one queue thread per possible CPU for `fs` on the connection of
/// `dev` (a `/dev/fuse` descriptor of the mounted session). Each thread
/// registers once the kernel has finished INIT and then serves until the
/// connection ends; the threads are returned, to be joined once it has
/// (each holds the file system, and with it any key it keeps).
pub(crate) fn start_queues(
    fs: Arc<dyn Ops>,
    dev: OwnedFd,
    payload_len: usize,
) -> io::Result<Vec<JoinHandle<()>>> {
    let dev = Arc::new(dev);
    let cpus = possible_cpus()?;
    let mut threads = Vec::with_capacity(cpus);
    for qid in 0..cpus {
        let (fs, dev) = (fs.clone(), dev.clone());
        let t = std::thread::Builder::new()
            .name(format!("ck-uring-{qid}"))
            .spawn(move || {
                if let Err(e) = serve_queue(&fs, dev, qid as u16, payload_len) {
                    eprintln!("cryptkeep fs: io_uring queue {qid}: {e}");
                }
            })?;
        threads.push(t);
    }
    Ok(threads)
}

/// CPUs the kernel made queues for (`num_possible_cpus()`).
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |x: &str| {
            x.parse::<usize>()
                .map_err(|_| io::Error::other(format!("cannot parse possible CPUs {s:?}")))
        };
        n = n.max(parse(b)? + 1);
        parse(a)?;
    }
    Ok(n)
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for
    // cpu < CPU_SETSIZE, and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
            // An offline CPU cannot be pinned to; its queue then gets no
            // requests, and the thread may run anywhere.
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }
}

fn serve_queue(
    fs: &Arc<dyn Ops>,
    dev: Arc<OwnedFd>,
    qid: u16,
    payload_len: usize,
) -> io::Result<()> {
    let spin = spin_time();
    cryptkeep_pressure::prepare();
    let fd = dev.as_raw_fd();
    let payloads = Payloads::new(ENTRIES_PER_QUEUE, payload_len)?;
    let mut entries: Vec<Entry> = (0..ENTRIES_PER_QUEUE)
        .map(|i| Entry::new(payloads.buffer(i), payload_len))
        .collect();
    // Started before pinning, so the helper may run on the other CPUs.
    let reader = Reader::start(HelperSetup {
        fs: fs.clone(),
        dev,
        qid,
        entries: entries.clone(),
        spin,
    });
    let reader = match reader {
        Ok(r) => r,
        Err(e) => {
            for e in entries {
                // SAFETY: never registered: the kernel never held them.
                unsafe { e.free() };
            }
            return Err(e);
        }
    };
    pin_to_cpu(qid as usize);
    let result = serve_entries(fs, &reader, fd, qid, spin, &mut entries);
    // The helper is stopped and joined before the buffers go; after a
    // failure the kernel may still hold entries, so they are leaked.
    drop(reader);
    if result.is_ok() {
        for e in entries {
            // SAFETY: the kernel gave every entry back (serve_entries ends
            // only then) and the helper, the only other holder, is joined.
            unsafe { e.free() };
        }
    } else {
        std::mem::forget(payloads);
    }
    result
}

/// `user_data` of the eventfd read that reports the helper's hand-overs
/// (entries use their index).
const HELPER_NOTE: u64 = u64::MAX;

/// Registers `entries` and answers what arrives in them until the kernel
/// has given every entry back (on this ring or the helper's).
fn serve_entries(
    fs: &Arc<dyn Ops>,
    reader: &Reader,
    fd: i32,
    qid: u16,
    spin: Duration,
    entries: &mut [Entry],
) -> io::Result<()> {
    let mut ring = Ring::new((ENTRIES_PER_QUEUE * 2).next_power_of_two() as u32)?;
    for (i, e) in entries.iter().enumerate() {
        // SAFETY: the entry's buffers live until free(), after the kernel
        // gave it back; nothing touches them while it holds them.
        unsafe { ring.push(&cmd_sqe(fd, CMD_REGISTER, i, e, 0, qid))? };
    }
    // SAFETY: the counter buffer is leaked by the Reader (never freed).
    unsafe { ring.push(&reader.eventfd_sqe(HELPER_NOTE))? };
    let started = Instant::now();
    let mut done = Vec::new();
    let mut handed_back = Vec::new();
    // Whether to poll before sleeping: not after a directory listing.
    let mut poll = true;
    while reader.live() > 0 {
        // Poll for a while before sleeping, yielding to whatever else
        // wants this CPU (the caller just answered): a CPU that goes idle
        // is slow to wake on a virtual machine. Not while a read is with
        // the helper: the reader should have this CPU then. Nor while
        // tasks queue for the CPUs (cryptkeep_pressure): a poll would
        // only take its turn from the caller.
        done.clear();
        let t0 = Instant::now();
        let poll_now = poll && !cryptkeep_pressure::busy();
        loop {
            ring.submit_and_poll()?;
            ring.drain(&mut done);
            if !done.is_empty() || reader.busy() || !poll_now || t0.elapsed() >= spin {
                break;
            }
            std::thread::yield_now();
        }
        if done.is_empty() {
            ring.submit_and_wait()?;
            ring.drain(&mut done);
        }
        for &Completion { user_data, res } in &done {
            if user_data == HELPER_NOTE {
                if let Some(why) = reader.failure() {
                    // Reads the helper had taken would never be answered.
                    return Err(io::Error::other(format!(
                        "io_uring queue {qid}: read helper failed: {why}"
                    )));
                }
                reader.take_handed_back(&mut handed_back);
                for i in handed_back.drain(..) {
                    if let Some(e) = entries.get_mut(i) {
                        poll = serve_one(fs, reader, &mut ring, fd, qid, e, i)?;
                    }
                }
                if res >= 0 || res == -libc::EINTR || res == -libc::EAGAIN {
                    // SAFETY: as above, a leaked counter buffer.
                    unsafe { ring.push(&reader.eventfd_sqe(HELPER_NOTE))? };
                } else if res != -libc::ECANCELED {
                    return Err(io::Error::other(format!(
                        "io_uring queue {qid}: waiting for the read helper failed: {}",
                        io::Error::from_raw_os_error(-res)
                    )));
                }
                continue;
            }
            let i = user_data as usize;
            let Some(e) = entries.get_mut(i) else {
                continue;
            };
            if res == -libc::EAGAIN && started.elapsed() < INIT_WAIT {
                // The connection is not initialised yet (INIT in flight).
                std::thread::sleep(Duration::from_millis(1));
                // SAFETY: the entry came back to us; as at registration.
                unsafe { ring.push(&cmd_sqe(fd, CMD_REGISTER, i, e, 0, qid))? };
                continue;
            }
            if res < 0 {
                // The connection ended (ENOTCONN, ECONNABORTED, ECANCELED)
                // or the kernel refused the entry: it is ours again.
                reader.entry_gone();
                if res != -libc::ENOTCONN && res != -libc::ECONNABORTED {
                    eprintln!(
                        "cryptkeep fs: io_uring queue {qid} entry {i}: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                continue;
            }
            poll = serve_one(fs, reader, &mut ring, fd, qid, e, i)?;
        }
    }
    Ok(())
}

/// Answers the request in entry `i` and queues its commit, or hands it to
/// the helper if it is a large READ. Answers whether the queue should
/// poll for the next request before it sleeps: not after a directory
/// listing. A tree walker (`du`, `find`, `rsync`) that gets one spends
/// tens of microseconds in the kernel making its entries' inodes, on this
/// CPU (requests come to the queue of the CPU they were made on), and
/// meanwhile a polling thread only takes turns with it: `du` of a source
/// tree ran ~20 % faster without polling, where an untar, whose next
/// request follows at once, ran ~15 % slower.
fn serve_one(
    fs: &Arc<dyn Ops>,
    reader: &Reader,
    ring: &mut Ring,
    fd: i32,
    qid: u16,
    e: &mut Entry,
    i: usize,
) -> io::Result<bool> {
    // SAFETY: the entry's completion arrived on this ring or the helper
    // handed it back, so this thread owns it until the commit below.
    if unsafe { e.large_read(OFFLOAD_MIN) }.is_some() {
        reader.submit(i);
        return Ok(true);
    }
    // SAFETY: this thread owns the entry (see above).
    let opcode = unsafe { e.request() }.head.opcode;
    let commit_id = answer(fs, e);
    // SAFETY: the kernel owns the entry's buffers from here until its next
    // completion; this thread does not touch them meanwhile.
    unsafe { ring.push(&cmd_sqe(fd, CMD_COMMIT_AND_FETCH, i, e, commit_id, qid))? };
    Ok(opcode != READDIRPLUS && opcode != READDIR)
}

/// Answers the request in entry `e` in place (a small READ is decrypted
/// straight into the payload buffer); returns its commit id. The caller
/// owns the entry (see [`serve_one`]).
fn answer(fs: &Arc<dyn Ops>, e: &mut Entry) -> u64 {
    // SAFETY: the caller owns the entry; so for every accessor below.
    let r = unsafe { e.request() };
    let payload_cap = e.payload_len;
    // SAFETY: the caller owns the entry.
    let (error, out_len) = if let Some(rd) = unsafe { e.large_read(0) } {
        // SAFETY: the caller owns the entry.
        let payload = unsafe { e.payload() };
        match fs.read(rd.fh, rd.off, &mut payload[..rd.size]) {
            Ok(n) => (0, n),
            Err(errno) => (-errno.code(), 0),
        }
    } else {
        let result = {
            let len = (r.ent.payload_sz as usize).min(payload_cap);
            // SAFETY: the caller owns the entry.
            let payload = &unsafe { e.payload() }[..len];
            handle(fs, &r.head, &r.op_in, payload)
        };
        let (error, out) = match result {
            Ok(out) if out.len() <= payload_cap => (0, out),
            Ok(_) => (-libc::EIO, Vec::new()),
            Err(errno) => (-errno.code(), Vec::new()),
        };
        // SAFETY: the caller owns the entry.
        let p = unsafe { e.payload() };
        p[..out.len()].copy_from_slice(&out);
        (error, out.len())
    };
    // SAFETY: the caller owns the entry.
    write_out_header(unsafe { e.header() }, r.head.unique, error, out_len);
    super::served_one();
    r.ent.commit_id
}
