//! The per-CPU queue threads: register ring entries, then answer each
//! request and fetch the next with one COMMIT_AND_FETCH.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::abi::{InHeader, IN_HEADER_LEN, OUT_HEADER_LEN, READ};
use super::dispatch::handle;
use super::reader::{Done, Job, Reader, OFFLOAD_MIN};
use super::ring::{Completion, Ring, OP_URING_CMD, SQE_LEN};
use crate::overlay::fs::OverlayFs;

/// `FUSE_IO_URING_CMD_REGISTER`.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `sizeof(struct fuse_uring_req_header)`: in_out, op_in, ent_in_out.
const HEADER_LEN: usize = 128 + 128 + 32;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
/// Ring entries per queue: requests the kernel can hand this CPU's thread
/// while it works on one.
const ENTRIES_PER_QUEUE: usize = 4;
/// How long a queue thread (and its read helper) polls for the next
/// request before it sleeps (`CRYPTKEEP_FS_URING_SPIN_US`, default 500 µs).
/// It yields the CPU between polls, so the caller it just answered runs
/// on the same CPU at once and its next request finds the thread awake:
/// a synchronous caller (`rm -r`, `tar -x`) then costs two plain switches
/// per request instead of a sleep and a wake-up.
fn spin_time() -> Duration {
    let us = std::env::var("CRYPTKEEP_FS_URING_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    Duration::from_micros(us)
}

/// How long to retry REGISTER while the connection is not initialised yet.
const INIT_WAIT: Duration = Duration::from_secs(10);

/// One ring entry's buffers. They are written by the kernel while the
/// entry is registered, so they are raw allocations freed only when the
/// kernel has given the entry back (or never, if the thread fails).
struct Entry {
    header: *mut u8,
    payload: *mut u8,
    payload_len: usize,
    iov: *mut [libc::iovec; 2],
}

impl Entry {
    fn new(payload_len: usize) -> Entry {
        let header = Box::into_raw(vec![0u8; HEADER_LEN].into_boxed_slice()) as *mut u8;
        let payload = Box::into_raw(vec![0u8; payload_len].into_boxed_slice()) as *mut u8;
        let iov = Box::into_raw(Box::new([
            libc::iovec {
                iov_base: header as *mut libc::c_void,
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload as *mut libc::c_void,
                iov_len: payload_len,
            },
        ]));
        Entry {
            header,
            payload,
            payload_len,
            iov,
        }
    }

    fn header(&mut self) -> &mut [u8] {
        // SAFETY: HEADER_LEN bytes allocated in new(); the kernel does not
        // write them while we hold the entry (between CQE and commit).
        unsafe { std::slice::from_raw_parts_mut(self.header, HEADER_LEN) }
    }

    fn payload(&mut self) -> &mut [u8] {
        // SAFETY: as header(), payload_len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.payload, self.payload_len) }
    }

    /// Frees the buffers; only once the kernel no longer holds the entry.
    fn free(self) {
        // SAFETY: each pointer came from Box::into_raw with these lengths
        // and is freed once.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.header,
                HEADER_LEN,
            )));
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.payload,
                self.payload_len,
            )));
            drop(Box::from_raw(self.iov));
        }
    }
}

/// The SQE of a FUSE ring command on `/dev/fuse`.
fn cmd_sqe(dev: i32, cmd: u32, entry: usize, e: &Entry, commit_id: u64, qid: u16) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    s[0] = OP_URING_CMD;
    s[4..8].copy_from_slice(&dev.to_le_bytes());
    s[8..12].copy_from_slice(&cmd.to_le_bytes());
    s[16..24].copy_from_slice(&(e.iov as u64).to_le_bytes());
    s[24..28].copy_from_slice(&2u32.to_le_bytes());
    s[32..40].copy_from_slice(&(entry as u64).to_le_bytes());
    // struct fuse_uring_cmd_req in the command area: flags, commit_id, qid.
    s[56..64].copy_from_slice(&commit_id.to_le_bytes());
    s[64..66].copy_from_slice(&qid.to_le_bytes());
    s
}

/// Starts one queue thread per possible CPU for `fs` on the connection of
/// `dev` (a `/dev/fuse` descriptor of the mounted session). Each thread
/// registers once the kernel has finished INIT and then serves until the
/// connection ends.
pub(crate) fn start_queues(fs: OverlayFs, dev: OwnedFd, payload_len: usize) -> io::Result<()> {
    let dev = Arc::new(dev);
    let cpus = possible_cpus()?;
    for qid in 0..cpus {
        let (fs, dev) = (fs.clone(), dev.clone());
        std::thread::Builder::new()
            .name(format!("ck-uring-{qid}"))
            .spawn(move || {
                if let Err(e) = serve_queue(&fs, &dev, qid as u16, payload_len) {
                    eprintln!("cryptkeep fs: io_uring queue {qid}: {e}");
                }
            })?;
    }
    Ok(())
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

/// `user_data` of the eventfd read (entries use their index).
const READER_DONE: u64 = u64::MAX;

fn serve_queue(fs: &OverlayFs, dev: &OwnedFd, qid: u16, payload_len: usize) -> io::Result<()> {
    // Started before pinning, so the helper may run on the other CPUs.
    let spin = spin_time();
    let reader = Reader::start(fs, qid as usize, spin)?;
    pin_to_cpu(qid as usize);
    let mut ring = Ring::new((ENTRIES_PER_QUEUE * 2).next_power_of_two() as u32)?;
    let fd = dev.as_raw_fd();
    let mut entries: Vec<Entry> = (0..ENTRIES_PER_QUEUE)
        .map(|_| Entry::new(payload_len))
        .collect();
    let mut live = vec![true; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        ring.push(&cmd_sqe(fd, CMD_REGISTER, i, e, 0, qid))?;
    }
    ring.push(&reader.eventfd_sqe(READER_DONE))?;
    let started = Instant::now();
    let mut done = Vec::new();
    let mut reads_done: Vec<Done> = Vec::new();
    let mut offloaded = 0usize;
    while live.iter().any(|&l| l) {
        // Poll for a while before sleeping, yielding to whatever else
        // wants this CPU (the caller just answered): a CPU that goes idle
        // is slow to wake on a virtual machine. Not while a read is with
        // the helper: the reader should have this CPU then.
        done.clear();
        let t0 = Instant::now();
        loop {
            ring.submit_and_poll()?;
            ring.drain(&mut done);
            if !done.is_empty() || offloaded > 0 || t0.elapsed() >= spin {
                break;
            }
            std::thread::yield_now();
        }
        if done.is_empty() {
            ring.submit_and_wait()?;
            ring.drain(&mut done);
        }
        for &Completion { user_data, res } in &done {
            if user_data == READER_DONE {
                reader.take_done(&mut reads_done);
                for d in reads_done.drain(..) {
                    offloaded -= 1;
                    let (error, n) = match d.result {
                        Ok(n) => (0, n),
                        Err(errno) => (errno, 0),
                    };
                    let Some(e) = entries.get_mut(d.entry) else {
                        continue;
                    };
                    write_out_header(e.header(), d.unique, error, n);
                    let sqe = cmd_sqe(fd, CMD_COMMIT_AND_FETCH, d.entry, e, d.commit_id, qid);
                    ring.push(&sqe)?;
                }
                if res >= 0 || res == -libc::EINTR || res == -libc::EAGAIN {
                    ring.push(&reader.eventfd_sqe(READER_DONE))?;
                } else if res != -libc::ECANCELED {
                    // Reads still with the helper would never be answered.
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
                ring.push(&cmd_sqe(fd, CMD_REGISTER, i, e, 0, qid))?;
                continue;
            }
            if res < 0 {
                // The connection ended (ENOTCONN, ECONNABORTED, ECANCELED)
                // or the kernel refused the entry: it is ours again.
                live[i] = false;
                if res != -libc::ENOTCONN && res != -libc::ECONNABORTED {
                    eprintln!(
                        "cryptkeep fs: io_uring queue {qid} entry {i}: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                continue;
            }
            match answer(fs, e, i) {
                Step::Commit(commit_id) => {
                    ring.push(&cmd_sqe(fd, CMD_COMMIT_AND_FETCH, i, e, commit_id, qid))?;
                }
                Step::Offload(job) => {
                    offloaded += 1;
                    reader.submit(job);
                }
            }
        }
    }
    drop(reader);
    for e in entries {
        e.free();
    }
    Ok(())
}

/// What to do with a request once looked at.
enum Step {
    /// Answered in place: commit it with this id.
    Commit(u64),
    /// A large READ for the helper; committed when it is done.
    Offload(Job),
}

/// Answers the request in entry `i` (`e`) in place, or hands a large READ
/// to the queue's helper.
fn answer(fs: &OverlayFs, e: &mut Entry, i: usize) -> Step {
    let hdr = e.header();
    let h = InHeader::parse(&hdr[..IN_HEADER_LEN]);
    let f = super::abi::Fields(&hdr[ENT_IN_OUT..]);
    let commit_id = f.u64(8);
    let payload_sz = f.u32(16) as usize;
    let mut op_in = [0u8; ENT_IN_OUT - OP_IN];
    op_in.copy_from_slice(&hdr[OP_IN..ENT_IN_OUT]);
    let payload_cap = e.payload_len;
    let (error, out_len) = if h.opcode == READ {
        // Decrypted straight into the ring's payload buffer.
        let f = super::abi::Fields(&op_in);
        let size = (f.u32(16) as usize).min(payload_cap);
        if size >= OFFLOAD_MIN {
            return Step::Offload(Job {
                entry: i,
                unique: h.unique,
                commit_id,
                fh: f.u64(0),
                off: f.u64(8),
                buf: e.payload,
                len: size,
            });
        }
        match fs.do_read_into(f.u64(0), f.u64(8), &mut e.payload()[..size]) {
            Ok(n) => (0, n),
            Err(errno) => (-errno.code(), 0),
        }
    } else {
        let result = {
            let payload = &e.payload()[..payload_sz.min(payload_cap)];
            handle(fs, &h, &op_in, payload)
        };
        let (error, out) = match result {
            Ok(out) if out.len() <= payload_cap => (0, out),
            Ok(_) => (-libc::EIO, Vec::new()),
            Err(errno) => (-errno.code(), Vec::new()),
        };
        e.payload()[..out.len()].copy_from_slice(&out);
        (error, out.len())
    };
    write_out_header(e.header(), h.unique, error, out_len);
    Step::Commit(commit_id)
}

/// Writes the answer's header (`fuse_out_header` and the payload size)
/// over entry header `hdr`.
fn write_out_header(hdr: &mut [u8], unique: u64, error: i32, out_len: usize) {
    hdr[..OUT_HEADER_LEN].fill(0);
    hdr[0..4].copy_from_slice(&((OUT_HEADER_LEN + out_len) as u32).to_le_bytes());
    hdr[4..8].copy_from_slice(&error.to_le_bytes());
    hdr[8..16].copy_from_slice(&unique.to_le_bytes());
    hdr[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(out_len as u32).to_le_bytes());
}
