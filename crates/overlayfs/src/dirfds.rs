//! Directory descriptors: how every operation reaches the backing store.
//! The cipher directory's root is opened once, at mount; any other
//! directory is reached from the nearest ancestor whose descriptor is
//! kept, one `openat(O_PATH | O_DIRECTORY | O_NOFOLLOW)` per name, each
//! checked to be the inode the kernel knows by that name. Nothing ever
//! walks a whole path, so nothing follows a symlink planted inside the
//! cipher directory (ELOOP) and no tree is too deep (no `PATH_MAX`).
//!
//! Descriptors of recently used directories are kept, keyed by the
//! directory's FUSE inode number: `rm -rf` removes every entry of a
//! directory in a row, a tree walk lists each directory after looking it
//! up. A kept descriptor follows its directory through renames made
//! through the mount, so only a directory's end invalidates it: its
//! removal ([`DirFds::forget`] from rmdir and rename-over) and the kernel
//! forgetting the inode. A directory replaced or moved behind the mount's
//! back is seen once its descriptor expires, after the mount's cache
//! time-out, as the kernel's own entries and the directory IVs are. With
//! no caching (`--sharedstorage`) nothing is kept and every operation
//! walks from the root (as gocryptfs does).

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cryptkeep_overlay::at;

use super::nodes::{Nodes, ROOT_INO};

/// Directories kept open at most; past that the expired ones go, and if
/// none has, the table starts over.
const KEPT: usize = 1024;

/// Deepest walk from a kept descriptor (a cycle in a corrupt table ends
/// here instead of looping).
const MAX_DEPTH: usize = 1 << 16;

/// Where a directory is: name `name` in directory `parent`, and the
/// backing inode number it must have there.
pub(crate) struct Step {
    pub(crate) parent: u64,
    pub(crate) name: std::ffi::OsString,
    pub(crate) st_ino: u64,
}

/// The descriptor table of one mount.
#[derive(Debug)]
pub(crate) struct DirFds {
    /// The cipher directory itself.
    root: Arc<OwnedFd>,
    /// Inode → descriptor and when it was opened.
    fds: Mutex<HashMap<u64, (Arc<OwnedFd>, Instant), foldhash::fast::RandomState>>,
    /// How long a descriptor is used; zero keeps nothing (the cipher
    /// dir is shared with other writers).
    ttl: Duration,
}

fn stale() -> io::Error {
    io::Error::from_raw_os_error(libc::ESTALE)
}

impl DirFds {
    /// A table over the directory open as `root` (FUSE inode 1) whose
    /// descriptors serve for `ttl` (the mount's cache time-out); zero
    /// keeps nothing and opens every time.
    pub(crate) fn new(root: OwnedFd, ttl: Duration) -> DirFds {
        DirFds {
            root: Arc::new(root),
            fds: Mutex::default(),
            ttl,
        }
    }

    /// The cipher directory's descriptor.
    pub(crate) fn root(&self) -> &Arc<OwnedFd> {
        &self.root
    }

    /// An `O_PATH` descriptor of directory `ino`, reached through the
    /// names `nodes` holds: ENOENT when the table does not know it,
    /// ESTALE when a name on the way now holds another directory, ELOOP
    /// or ENOTDIR when it holds a symlink or something else.
    pub(crate) fn get(&self, ino: u64, nodes: &Mutex<Nodes>) -> io::Result<Arc<OwnedFd>> {
        self.get_with(ino, |i| {
            let link = nodes
                .lock()
                .map_err(|_| io::Error::from_raw_os_error(libc::EIO))?
                .link(i)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            Ok(Step {
                parent: link.parent,
                name: link.name,
                st_ino: i,
            })
        })
    }

    /// [`DirFds::get`] with the names from `step`: where directory `ino`
    /// is and which backing inode it must be.
    pub(crate) fn get_with(
        &self,
        ino: u64,
        step: impl Fn(u64) -> io::Result<Step>,
    ) -> io::Result<Arc<OwnedFd>> {
        if ino == ROOT_INO {
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.kept(ino) {
            return Ok(fd);
        }
        // Up to the nearest directory open already...
        let mut chain = Vec::new();
        let mut cur = ino;
        let mut fd = loop {
            let s = step(cur)?;
            let parent = s.parent;
            chain.push((cur, s));
            if parent == ROOT_INO {
                break self.root.clone();
            }
            if let Some(fd) = self.kept(parent) {
                break fd;
            }
            if chain.len() > MAX_DEPTH {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            cur = parent;
        };
        // ...then down, one name at a time.
        for (i, s) in chain.into_iter().rev() {
            let next = at::open_dir_at(&*fd, &s.name)?;
            if at::fstat(&next)?.st_ino != s.st_ino {
                return Err(stale());
            }
            fd = Arc::new(next);
            self.keep(i, &fd);
        }
        Ok(fd)
    }

    fn kept(&self, ino: u64) -> Option<Arc<OwnedFd>> {
        if self.ttl.is_zero() {
            return None;
        }
        let t = self.lock();
        let (fd, at) = t.get(&ino)?;
        (at.elapsed() < self.ttl).then(|| fd.clone())
    }

    fn keep(&self, ino: u64, fd: &Arc<OwnedFd>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut t = self.lock();
        if t.len() >= KEPT {
            t.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if t.len() >= KEPT {
                t.clear();
            }
        }
        t.insert(ino, (fd.clone(), Instant::now()));
    }

    /// Directory `ino` is gone (removed, or forgotten by the kernel).
    pub(crate) fn forget(&self, ino: u64) {
        if !self.ttl.is_zero() {
            self.lock().remove(&ino);
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, (Arc<OwnedFd>, Instant), foldhash::fast::RandomState>>
    {
        // The table holds no invariant a panicking holder could break.
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many descriptors are kept (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    /// A scratch directory removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("ck-dirfds-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn ino(p: &Path) -> u64 {
        std::fs::symlink_metadata(p).unwrap().ino()
    }

    fn table(s: &Scratch, ttl: Duration) -> DirFds {
        let root = OwnedFd::from(std::fs::File::open(&s.0).unwrap());
        DirFds::new(root, ttl)
    }

    /// `a/b/c` under the scratch root, looked up in `nodes`.
    fn tree(s: &Scratch, nodes: &Mutex<Nodes>) -> [u64; 3] {
        let c = s.0.join("a/b/c");
        std::fs::create_dir_all(&c).unwrap();
        let inos = [ino(&s.0.join("a")), ino(&s.0.join("a/b")), ino(&c)];
        let mut t = nodes.lock().unwrap();
        t.looked_up(inos[0], ROOT_INO, OsStr::new("a"));
        t.looked_up(inos[1], inos[0], OsStr::new("b"));
        t.looked_up(inos[2], inos[1], OsStr::new("c"));
        inos
    }

    #[test]
    fn walks_down_from_the_root_and_keeps_what_it_opened() {
        let s = Scratch::new("walk");
        let nodes = Mutex::new(Nodes::new());
        let [a, b, c] = tree(&s, &nodes);
        let fds = table(&s, Duration::from_secs(10));
        let fd = fds.get(c, &nodes).unwrap();
        assert_eq!(at::fstat(&*fd).unwrap().st_ino, c);
        assert_eq!(fds.len(), 3, "a, b and c are kept");
        // A kept descriptor follows its directory through a rename.
        std::fs::rename(s.0.join("a"), s.0.join("z")).unwrap();
        assert!(Arc::ptr_eq(&fd, &fds.get(c, &nodes).unwrap()));
        // Forgotten, they are found again by their names in the table.
        for i in [a, b, c] {
            fds.forget(i);
        }
        let e = fds.get(c, &nodes).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        let z = (ROOT_INO, OsStr::new("z"));
        nodes
            .lock()
            .unwrap()
            .rename(ROOT_INO, OsStr::new("a"), z.0, z.1);
        assert_eq!(at::fstat(&*fds.get(c, &nodes).unwrap()).unwrap().st_ino, c);
    }

    #[test]
    fn a_planted_symlink_or_another_directory_is_refused() {
        let s = Scratch::new("planted");
        let nodes = Mutex::new(Nodes::new());
        let [_, _, c] = tree(&s, &nodes);
        let fds = table(&s, Duration::ZERO);
        let outside = Scratch::new("planted-outside");
        std::fs::create_dir_all(outside.0.join("b/c")).unwrap();
        std::fs::rename(s.0.join("a"), s.0.join("a.orig")).unwrap();
        std::os::unix::fs::symlink(&outside.0, s.0.join("a")).unwrap();
        let e = fds.get(c, &nodes).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        std::fs::remove_file(s.0.join("a")).unwrap();
        std::fs::create_dir_all(s.0.join("a/b/c")).unwrap();
        let e = fds.get(c, &nodes).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    }

    #[test]
    fn trees_deeper_than_path_max_resolve() {
        let s = Scratch::new("deep");
        let nodes = Mutex::new(Nodes::new());
        let fds = table(&s, Duration::from_secs(10));
        let name = "n".repeat(250);
        let mut parent = (ROOT_INO, fds.root().clone());
        for _ in 0..40 {
            at::mkdir_at(&*parent.1, OsStr::new(&name), 0o700).unwrap();
            let fd = at::open_dir_at(&*parent.1, OsStr::new(&name)).unwrap();
            let i = at::fstat(&fd).unwrap().st_ino;
            nodes
                .lock()
                .unwrap()
                .looked_up(i, parent.0, OsStr::new(&name));
            parent = (i, Arc::new(fd));
        }
        // 40 x 251 bytes: past PATH_MAX, resolved with nothing kept.
        let fresh = table(&s, Duration::ZERO);
        let fd = fresh.get(parent.0, &nodes).unwrap();
        assert_eq!(at::fstat(&*fd).unwrap().st_ino, parent.0);
    }

    #[test]
    fn the_table_is_bounded_and_expires() {
        let s = Scratch::new("bounded");
        let nodes = Mutex::new(Nodes::new());
        let [a, _, _] = tree(&s, &nodes);
        let fds = table(&s, Duration::from_millis(20));
        let one = fds.get(a, &nodes).unwrap();
        assert!(Arc::ptr_eq(&one, &fds.get(a, &nodes).unwrap()));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!Arc::ptr_eq(&one, &fds.get(a, &nodes).unwrap()));
        for i in 0..(KEPT as u64 * 2 + 3) {
            fds.keep(1000 + i, &one);
        }
        assert!(fds.len() <= KEPT);
    }
}
