//! A unix socket's place in the file system, held through its parent
//! directory's descriptor.
//!
//! The user may put the socket in a directory others can write. Every step
//! after the parent is opened (the stale-socket check, binding, `chmod`,
//! removal) works on the last component through that descriptor with the
//! `*at` calls and `AT_SYMLINK_NOFOLLOW`, so a parent swapped for a symlink
//! or a socket swapped for another file between a check and an action
//! cannot redirect the action elsewhere; a path too long to reach through
//! the descriptor is refused rather than walked again. Removal at shutdown
//! takes away only the socket that this server bound (same device, inode
//! and change time). Also here: the peer's user (`SO_PEERCRED`), and the
//! `shutdown(2)` that wakes a blocked `accept`.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Component, Path, PathBuf};

/// Which file a socket is: device, inode and change time (an inode number
/// is reused once its file is deleted; the change time tells the new file
/// from the old one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

/// A socket path resolved to (parent directory descriptor, name).
#[derive(Debug)]
pub struct SocketPath {
    dir: OwnedFd,
    name: CString,
    path: PathBuf,
}

impl SocketPath {
    /// Opens the parent directory of `path`. The last component must be a
    /// plain name (not `..`, `.` or empty).
    pub fn open(path: &Path) -> io::Result<SocketPath> {
        // Absolute, so that the path recorded for `close` is the same
        // wherever that runs.
        let path = &std::path::absolute(path)?;
        let name = match path.components().next_back() {
            Some(Component::Normal(n)) => n,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the socket path must end in a file name",
                ))
            }
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let cparent = cstring(parent.as_os_str())?;
        // SAFETY: a NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                cparent.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SocketPath {
            // SAFETY: fd was just returned by open and is owned by nothing else.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            name: cstring(name)?,
            path: path.to_path_buf(),
        })
    }

    /// The path as the user gave it (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path through the parent's descriptor (`/proc/self/fd/N/NAME`);
    /// an error when it does not fit a socket address (the path as given
    /// would be walked again, through components others may change).
    fn via_dir(&self) -> io::Result<PathBuf> {
        let p = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
            .join(OsStr::from_bytes(self.name.as_bytes()));
        // sun_path holds 108 bytes including the terminating NUL.
        if p.as_os_str().len() < 108 {
            Ok(p)
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the socket's file name is too long (at most 80 bytes)",
            ))
        }
    }

    /// The socket there, if the name is a socket (not followed if it is a
    /// symlink) owned by this user.
    pub fn own_socket(&self) -> Option<SocketId> {
        // SAFETY: an all-zero stat is a valid out buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a directory descriptor we own, a NUL-terminated name and a
        // stat buffer; the result is checked.
        let r = unsafe {
            libc::fstatat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        (r == 0).then_some(()).and_then(|()| own_socket_id(&st))
    }

    /// Removes the name if it is still the socket `id`.
    pub fn remove_if(&self, id: SocketId) -> io::Result<()> {
        if self.own_socket() != Some(id) {
            return Ok(());
        }
        // SAFETY: a directory descriptor we own and a NUL-terminated name;
        // unlinkat removes the entry itself, never what a symlink names.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes a stale socket: one of this user's that nobody listens on.
    /// Returns whether something was removed; anything else there (a live
    /// socket, another user's, a file, a symlink) is left alone. The name
    /// is opened once (`O_PATH | O_NOFOLLOW`) and that very file is both
    /// checked and connected to.
    pub fn remove_stale(&self) -> io::Result<bool> {
        // SAFETY: a directory descriptor we own and a NUL-terminated name;
        // the result is checked.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Ok(false);
        }
        // SAFETY: fd was just returned by openat and is owned by nothing else.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero stat is a valid out buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of a descriptor we own into a stat buffer.
        if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
            return Ok(false);
        }
        let Some(id) = own_socket_id(&st) else {
            return Ok(false);
        };
        match UnixStream::connect(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(_) => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                self.remove_if(id).map(|()| true)
            }
            Err(_) => Ok(false),
        }
    }

    /// Binds a listening socket there and makes it mode 0600; returns it
    /// with the socket's identity (for [`SocketPath::remove_if`]).
    pub fn bind(&self) -> io::Result<(UnixListener, SocketId)> {
        let l = UnixListener::bind(self.via_dir()?)?;
        let gone = || io::Error::other("the socket just bound is gone or was replaced");
        let bound = self.own_socket().ok_or_else(gone)?;
        // SAFETY: a directory descriptor we own and a NUL-terminated name;
        // AT_SYMLINK_NOFOLLOW never changes what a symlink names.
        let r = unsafe {
            libc::fchmodat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                0o600,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            let _ = self.remove_if(bound);
            return Err(e);
        }
        // The mode change moved the change time: the identity is taken now.
        let id = self.own_socket().ok_or_else(gone)?;
        if (id.dev, id.ino) != (bound.dev, bound.ino) {
            return Err(gone());
        }
        Ok((l, id))
    }
}

/// The identity of `st` if it is a socket owned by this user.
fn own_socket_id(st: &libc::stat) -> Option<SocketId> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    (st.st_mode & libc::S_IFMT == libc::S_IFSOCK && st.st_uid == me).then_some(SocketId {
        dev: st.st_dev,
        ino: st.st_ino,
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}

/// Whether the peer of the unix socket `s` may use the export: it runs as
/// this user or as root (`SO_PEERCRED`). Between `bind` and `chmod` a
/// permissive umask leaves the socket open to others for a moment; a
/// connection made then is refused here.
pub(crate) fn peer_allowed(s: &UnixStream) -> bool {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt of SO_PEERCRED on a socket we borrow, into a ucred
    // of the length passed; the result is checked.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    r == 0 && (cred.uid == me || cred.uid == 0)
}

/// Wakes a thread blocked in `accept` on listening socket `fd` (the call
/// then fails), without connecting to anything by path.
pub(crate) fn wake_accept(fd: BorrowedFd<'_>) {
    // SAFETY: shutdown of a socket we borrow for the call; no memory.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ck-sockpath-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn binds_0600_and_removes_only_its_own_socket() {
        let d = scratch("own");
        let sp = SocketPath::open(&d.join("s")).unwrap();
        let (l, id) = sp.bind().unwrap();
        let mode = std::fs::symlink_metadata(d.join("s"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A live socket is not stale.
        assert!(!sp.remove_stale().unwrap());
        drop(l);
        // Replaced by another socket: removal by identity leaves it alone.
        std::fs::remove_file(d.join("s")).unwrap();
        // Past the file system's timestamp granularity.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _other = UnixListener::bind(d.join("s")).unwrap();
        sp.remove_if(id).unwrap();
        assert!(d.join("s").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stale_socket_goes_and_nothing_else_does() {
        let d = scratch("stale");
        drop(UnixListener::bind(d.join("s")).unwrap());
        let sp = SocketPath::open(&d.join("s")).unwrap();
        assert!(sp.remove_stale().unwrap());
        assert!(!d.join("s").exists());
        // A regular file and a symlink to a stale socket elsewhere stay.
        std::fs::write(d.join("f"), b"x").unwrap();
        assert!(!SocketPath::open(&d.join("f"))
            .unwrap()
            .remove_stale()
            .unwrap());
        drop(UnixListener::bind(d.join("t")).unwrap());
        symlink(d.join("t"), d.join("l")).unwrap();
        assert!(!SocketPath::open(&d.join("l"))
            .unwrap()
            .remove_stale()
            .unwrap());
        assert!(d.join("f").exists() && d.join("t").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_parent_swapped_after_open_is_not_followed() {
        let d = scratch("swap");
        std::fs::create_dir(d.join("a")).unwrap();
        std::fs::create_dir(d.join("elsewhere")).unwrap();
        drop(UnixListener::bind(d.join("elsewhere/s")).unwrap());
        let sp = SocketPath::open(&d.join("a/s")).unwrap();
        std::fs::rename(d.join("a"), d.join("a-old")).unwrap();
        symlink(d.join("elsewhere"), d.join("a")).unwrap();
        assert!(!sp.remove_stale().unwrap());
        assert!(d.join("elsewhere/s").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_name_too_long_to_reach_through_the_directory_is_refused() {
        let d = scratch("long");
        let sp = SocketPath::open(&d.join("n".repeat(100))).unwrap();
        assert!(sp.bind().is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn shutdown_wakes_a_blocked_accept() {
        let d = scratch("wake");
        let (l, _) = SocketPath::open(&d.join("s")).unwrap().bind().unwrap();
        let l = std::sync::Arc::new(l);
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.accept().is_err());
        std::thread::sleep(std::time::Duration::from_millis(50));
        wake_accept(l.as_fd());
        assert!(t.join().unwrap(), "accept ends with an error");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn this_user_is_an_allowed_peer() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(peer_allowed(&a));
    }

    #[test]
    fn a_path_without_a_name_is_refused() {
        assert!(SocketPath::open(Path::new("/tmp/..")).is_err());
        assert!(SocketPath::open(Path::new("/")).is_err());
    }
}
