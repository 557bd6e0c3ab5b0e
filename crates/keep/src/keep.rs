//! The [`Keep`] trait: whoever holds keys and does key work on request.
//! [`ProcessKeep`] is the one this build provides (a separate process over
//! shared-memory rings). SGX, SEV-SNP/TDX or TPM-backed keeps would
//! implement the same trait (see docs/threat-model.md).

use std::os::fd::{AsFd, OwnedFd};
use std::process::Child;

use crate::shm::{Client, Slot};
use crate::Error;
use crate::{control, spawn};

/// A key holder that answers requests in place: it reads `in_len` bytes of
/// `buf`, writes its answer (at most `buf.len()` bytes) back into `buf` and
/// returns the answer's length. Operation codes are in [`crate::proto`].
pub trait Keep: Send + Sync {
    /// One request; `buf.len()` must not exceed [`Keep::max_request`].
    fn call(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, Error>;
    /// The largest buffer one request may carry.
    fn max_request(&self) -> usize;
    /// False once the keep has died or shut down (requests fail with
    /// [`Error::Gone`] from then on).
    fn is_alive(&self) -> bool;
    /// What kind of keep this is, for `status` ("process", ...).
    fn kind(&self) -> &'static str;

    /// Length of the buffers [`Keep::with_slot`] leases; 0 (the default)
    /// when this keep has no shared buffers.
    fn slot_len(&self) -> usize {
        0
    }

    /// Leases a buffer the keep reads and writes directly (shared memory),
    /// for zero-copy requests, for the duration of `f`.
    fn with_slot(
        &self,
        f: &mut dyn FnMut(&mut dyn SlotAccess) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let _ = f;
        Err(Error::BadRequest("this keep has no shared buffers".into()))
    }
}

/// A leased shared buffer (see [`Keep::with_slot`]).
pub trait SlotAccess {
    /// The whole buffer.
    fn buf(&mut self) -> &mut [u8];
    /// One request on `buf()[offset..]`: the keep reads `in_len` bytes
    /// there and answers in place; returns the answer's length.
    fn call_at(&mut self, op: u32, arg: u64, offset: usize, in_len: usize) -> Result<usize, Error>;
    /// Like [`SlotAccess::call_at`] for answers longer than their input:
    /// the keep may write up to `cap` bytes at `offset`.
    fn call_cap(
        &mut self,
        op: u32,
        arg: u64,
        offset: usize,
        cap: usize,
        in_len: usize,
    ) -> Result<usize, Error>;
    /// Starts such a request without waiting; the buffer range is the
    /// keep's until [`SlotAccess::finish`] returns it. Several may be in
    /// flight on disjoint ranges; they are answered in order.
    fn start(&mut self, op: u32, arg: u64, offset: usize, in_len: usize) -> Result<(), Error>;
    /// Waits for the oldest started request; returns the answer's length.
    fn finish(&mut self) -> Result<usize, Error>;
}

struct SlotAdapter<'a, 'b>(&'a mut Slot<'b>);

impl SlotAccess for SlotAdapter<'_, '_> {
    fn buf(&mut self) -> &mut [u8] {
        self.0.buf()
    }
    fn call_at(&mut self, op: u32, arg: u64, offset: usize, in_len: usize) -> Result<usize, Error> {
        self.0.call_at(op, arg, offset, in_len, in_len)
    }
    fn call_cap(
        &mut self,
        op: u32,
        arg: u64,
        offset: usize,
        cap: usize,
        in_len: usize,
    ) -> Result<usize, Error> {
        self.0.call_at(op, arg, offset, cap, in_len)
    }
    fn start(&mut self, op: u32, arg: u64, offset: usize, in_len: usize) -> Result<(), Error> {
        self.0.start_at(op, arg, offset, in_len, in_len)
    }
    fn finish(&mut self) -> Result<usize, Error> {
        self.0.finish()
    }
}

/// A keep in a separate process, reached through a [`Client`] on the
/// shared-memory arena it created. Dropping it closes the control socket,
/// which makes the keep wipe its keys and exit.
pub struct ProcessKeep {
    client: Client,
    pid: i32,
    child: Option<Child>,
}

impl ProcessKeep {
    /// Connects to the keep `pid` through the arena descriptor it sent and
    /// our end of the control socket.
    pub fn connect(arena: OwnedFd, control: OwnedFd, pid: i32) -> Result<ProcessKeep, Error> {
        Ok(ProcessKeep {
            client: Client::connect(arena, control)?,
            pid,
            child: None,
        })
    }

    /// Creates a keep: starts it as `cfg` says (e.g. `cryptkeep __keep
    /// runtime`), waits for it to say READY and connects. Returns the keep
    /// and the facts it reported (`secret_mem`, `sandbox`, ...). A keep
    /// that failed to start is [`Error::Refused`] with its message.
    pub fn spawn(cfg: spawn::SpawnConfig) -> Result<(ProcessKeep, Vec<(String, String)>), Error> {
        let sp = spawn::spawn(cfg)?;
        let mut child = sp.child;
        match recv_hello(&sp.control) {
            Ok(Hello::Ready { arena, facts }) => {
                let pid = child.id() as i32;
                let mut keep = ProcessKeep::connect(arena, sp.control, pid)?;
                keep.child = Some(child);
                Ok((keep, facts))
            }
            Ok(Hello::Failed(f)) => {
                let _ = child.wait();
                Err(Error::Refused {
                    op: "start",
                    status: f.code as u32,
                    detail: format!("{} ({}): {}", f.what, f.place, f.hint),
                })
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// Destroys the keep: closes the channel (the keep wipes its keys and
    /// exits) and, if we started it, waits for the process to end.
    pub fn destroy(self) -> Result<(), Error> {
        let ProcessKeep { client, child, .. } = self;
        drop(client);
        if let Some(mut c) = child {
            c.wait().map_err(|source| Error::Sys {
                what: "waiting for the keep",
                source,
            })?;
        }
        Ok(())
    }

    /// The keep's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The transport client (for zero-copy slot access and raw tests).
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Keep for ProcessKeep {
    fn call(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, Error> {
        self.client.call(op, arg, buf, in_len)
    }

    fn max_request(&self) -> usize {
        self.client.max_request()
    }

    fn is_alive(&self) -> bool {
        !self.client.is_gone()
    }

    fn kind(&self) -> &'static str {
        "process"
    }

    fn slot_len(&self) -> usize {
        self.client.max_request()
    }

    fn with_slot(
        &self,
        f: &mut dyn FnMut(&mut dyn SlotAccess) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.client.with_slot(|slot| f(&mut SlotAdapter(slot)))
    }
}

/// What a keep says first on its control socket.
#[derive(Debug)]
pub enum Hello {
    /// Unlocked (or started) and serving: the arena descriptor and facts
    /// for the log and `status` (`secret_mem`, `sandbox`, `keyslot`, ...).
    Ready {
        /// The shared-memory arena.
        arena: OwnedFd,
        /// `key = value` facts.
        facts: Vec<(String, String)>,
    },
    /// The keep could not start: an exit code and a message in cryptkeep's
    /// "what (where): hint" form.
    Failed(Failure),
}

/// Why a keep did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The exit code the CLI should use (the table in docs/guide/cli.md).
    pub code: i32,
    /// What went wrong.
    pub what: String,
    /// Where (file, device, keyslot).
    pub place: String,
    /// What to do about it.
    pub hint: String,
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

/// Sends READY with the arena (keep side).
pub fn send_ready(
    sock: std::os::fd::BorrowedFd<'_>,
    arena: std::os::fd::BorrowedFd<'_>,
    facts: &[(&str, String)],
) -> Result<(), Error> {
    let mut msg = String::from("READY\n");
    for (k, v) in facts {
        msg.push_str(&format!("{}\t{}\n", clean(k), clean(v)));
    }
    control::send(sock, msg.as_bytes(), Some(arena))
}

/// Sends FAILED (keep side).
pub fn send_failed(sock: std::os::fd::BorrowedFd<'_>, f: &Failure) -> Result<(), Error> {
    let msg = format!(
        "FAILED\n{}\t{}\t{}\t{}\n",
        f.code,
        clean(&f.what),
        clean(&f.place),
        clean(&f.hint)
    );
    control::send(sock, msg.as_bytes(), None)
}

/// Waits for the keep's first message (I/O side). [`Error::Gone`] if the
/// keep exited without a word.
pub fn recv_hello(control: &OwnedFd) -> Result<Hello, Error> {
    let (msg, fd) = control::recv(control.as_fd())?;
    let text = String::from_utf8_lossy(&msg);
    let mut lines = text.lines();
    match (lines.next(), fd) {
        (Some("READY"), Some(arena)) => {
            let facts = lines
                .filter_map(|l| l.split_once('\t'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Ok(Hello::Ready { arena, facts })
        }
        (Some("FAILED"), _) => {
            let line = lines.next().unwrap_or("");
            let mut f = line.splitn(4, '\t');
            let code = f.next().and_then(|c| c.parse().ok()).unwrap_or(8);
            Ok(Hello::Failed(Failure {
                code,
                what: f.next().unwrap_or("the keep failed").to_string(),
                place: f.next().unwrap_or("keep").to_string(),
                hint: f.next().unwrap_or("").to_string(),
            }))
        }
        _ => Err(Error::BadRequest(format!(
            "unexpected first message from the keep: {:?}",
            text.lines().next().unwrap_or("")
        ))),
    }
}
