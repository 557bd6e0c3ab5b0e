//! [`ReverseFs`]: the read-only reverse view (gocryptfs `-reverse`) of a
//! plaintext directory: encrypted names, contents and symlinks computed on
//! the fly with path-derived IVs (`cryptkeep_overlay::reverse`), plus the
//! virtual `gocryptfs.diriv`, `.name` files and `gocryptfs.conf`.
//!
//! The plaintext directory is reached as the forward view reaches its
//! cipher directory: through descriptors, one name at a time, never
//! following a symlink (`dirfds.rs`). A file is opened afresh for every
//! read and checked to be the inode that was looked up, so a source file
//! swapped for a symlink (or anything else) after lookup is never served.

use cryptkeep_fuse::ops::{DirSink, Errno, FileAttr, FileType, INodeNo, Ops, Statfs};
use cryptkeep_overlay::config::{NameMode, CONF_NAME, CONF_REVERSE_NAME};
use cryptkeep_overlay::diriv::DIRIV_NAME;
use cryptkeep_overlay::names::{name_kind, NameKind, LONGNAME_SUFFIX};
use cryptkeep_overlay::reverse::join_rel;
use cryptkeep_overlay::{at, CipherDir};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use super::attr::{attr_stat, io_errno, kind_of_dtype, kind_of_mode, REVERSE_TTL as TTL};
use super::dirfds::{DirFds, Step};
use super::nodes::ROOT_INO;

/// What a reverse-view inode is.
#[derive(Clone, Debug)]
enum What {
    /// A real plaintext entry, backing inode `st_ino`.
    Real { st_ino: u64 },
    /// A virtual read-only file with this content, shown with its
    /// directory's owner and times.
    Virtual(Vec<u8>),
}

#[derive(Clone, Debug)]
struct RNode {
    /// The cipher-relative path (empty for the root): what IVs derive from.
    crel: Vec<u8>,
    /// The directory it is in (the root: itself).
    parent: u64,
    /// Its plaintext name there (empty for the root and virtual files).
    plain: OsString,
    what: What,
}

/// The reverse file system.
pub(crate) struct ReverseFs {
    cd: Arc<CipherDir>,
    /// The plaintext directory's descriptor and those of its
    /// subdirectories used recently.
    dirs: DirFds,
    nodes: Mutex<NodeTable>,
}

/// Inode number → node, and cipher path → inode number.
type NodeTable = (HashMap<u64, RNode>, HashMap<Vec<u8>, u64>);

/// One plaintext entry of a directory and its cipher name.
struct Child {
    plain: OsString,
    on_disk: String,
    long: Option<String>,
    st_ino: u64,
    kind: Option<FileType>,
}

type R<T> = Result<T, Errno>;

impl ReverseFs {
    pub(crate) fn new(cd: Arc<CipherDir>) -> io::Result<ReverseFs> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(cd.root())?;
        let st_ino = root.metadata()?.ino();
        let node = RNode {
            crel: Vec::new(),
            parent: ROOT_INO,
            plain: OsString::new(),
            what: What::Real { st_ino },
        };
        let mut by_ino = HashMap::new();
        by_ino.insert(ROOT_INO, node);
        let mut by_crel = HashMap::new();
        by_crel.insert(Vec::new(), ROOT_INO);
        Ok(ReverseFs {
            cd,
            dirs: DirFds::new(root.into(), TTL),
            nodes: Mutex::new((by_ino, by_crel)),
        })
    }

    fn node(&self, ino: u64) -> R<RNode> {
        self.nodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .0
            .get(&ino)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    /// The inode number for `n` (stable for the mount's lifetime).
    fn register(&self, n: RNode) -> R<u64> {
        let mut g = self.nodes.lock().map_err(|_| Errno::EIO)?;
        if let Some(&ino) = g.1.get(&n.crel) {
            g.0.insert(ino, n);
            return Ok(ino);
        }
        let ino = g.0.len() as u64 + 2;
        g.1.insert(n.crel.clone(), ino);
        g.0.insert(ino, n);
        Ok(ino)
    }

    /// The descriptor of the plaintext directory behind node `ino`.
    fn dir_fd(&self, ino: u64) -> R<Arc<OwnedFd>> {
        self.dirs
            .get_with(ino, |i| {
                let n = self
                    .node(i)
                    .map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
                match n.what {
                    What::Real { st_ino } => Ok(Step {
                        parent: n.parent,
                        name: n.plain,
                        st_ino,
                    }),
                    What::Virtual(_) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
                }
            })
            .map_err(|e| io_errno(&e))
    }

    fn eme(&self) -> bool {
        self.cd.names().mode() != NameMode::Plain
    }

    /// Every plaintext entry of directory node `ino` with its cipher name
    /// (the config shows as `gocryptfs.conf` at the top) and long-name
    /// content.
    fn children(&self, ino: u64, dir: &RNode) -> R<Vec<Child>> {
        let fd = self.dir_fd(ino)?;
        let mut out = Vec::new();
        for e in at::list_at(&*fd).map_err(|e| io_errno(&e))? {
            let cn = self
                .cd
                .reverse_name(&dir.crel, &e.name)
                .map_err(|_| Errno::EIO)?;
            out.push(Child {
                plain: e.name,
                on_disk: cn.on_disk,
                long: cn.long,
                st_ino: e.ino,
                kind: kind_of_dtype(e.kind),
            });
        }
        Ok(out)
    }

    /// A real entry `plain` of directory node `parent`, stat'ed now.
    fn real(&self, parent: u64, crel: Vec<u8>, plain: OsString) -> R<RNode> {
        let fd = self.dir_fd(parent)?;
        let st = at::stat_at(&*fd, &plain).map_err(|e| io_errno(&e))?;
        Ok(RNode {
            crel,
            parent,
            plain,
            what: What::Real { st_ino: st.st_ino },
        })
    }

    /// Resolves cipher name `name` in directory node `ino`.
    fn resolve(&self, ino: u64, dir: &RNode, name: &OsStr) -> R<RNode> {
        let crel = join_rel(&dir.crel, name.as_bytes());
        let s = name.to_str().unwrap_or("");
        let virt = |content: Vec<u8>| RNode {
            crel: crel.clone(),
            parent: ino,
            plain: OsString::new(),
            what: What::Virtual(content),
        };
        if self.cd.names().mode() == (NameMode::Eme { diriv: true }) && s == DIRIV_NAME {
            return Ok(virt(self.cd.reverse_dir_iv(&dir.crel).0.to_vec()));
        }
        if dir.crel.is_empty() && s == CONF_NAME {
            return self.real(ino, crel, CONF_REVERSE_NAME.into());
        }
        if dir.crel.is_empty() && s == CONF_REVERSE_NAME {
            return Err(Errno::ENOENT);
        }
        if !self.eme() {
            return self.real(ino, crel, name.to_os_string());
        }
        if name_kind(s) != NameKind::Normal {
            let base = s.strip_suffix(LONGNAME_SUFFIX).unwrap_or(s);
            for c in self.children(ino, dir)? {
                if c.on_disk == base {
                    if name_kind(s) == NameKind::LongNameFile {
                        return Ok(virt(c.long.unwrap_or_default().into_bytes()));
                    }
                    return self.real(ino, crel, c.plain);
                }
            }
            return Err(Errno::ENOENT);
        }
        let iv = self.cd.reverse_dir_iv(&dir.crel);
        let plain = self
            .cd
            .names()
            .decrypt_name(s, &iv)
            .map_err(|_| Errno::ENOENT)?;
        self.real(ino, crel, OsStr::from_bytes(&plain).to_os_string())
    }

    /// The `stat` of real node `n`, checked to be the inode looked up.
    fn stat_real(&self, n: &RNode, st_ino: u64) -> R<libc::stat> {
        let fd = self.dir_fd(n.parent)?;
        let st = at::stat_at(&*fd, &n.plain).map_err(|e| io_errno(&e))?;
        if st.st_ino != st_ino {
            return Err(if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                Errno::ELOOP
            } else {
                Errno::ESTALE
            });
        }
        Ok(st)
    }

    fn attr_of(&self, ino: u64, n: &RNode) -> R<FileAttr> {
        let st = match &n.what {
            What::Real { st_ino } => self.stat_real(n, *st_ino)?,
            What::Virtual(_) => at::fstat(&*self.dir_fd(n.parent)?).map_err(|e| io_errno(&e))?,
        };
        let mut a = attr_stat(&self.cd, &st, 0, &n.plain, || None);
        a.ino = INodeNo(ino);
        match &n.what {
            What::Virtual(c) => {
                a.kind = FileType::RegularFile;
                a.perm = 0o444;
                a.size = c.len() as u64;
                a.nlink = 1;
            }
            What::Real { .. } => match kind_of_mode(st.st_mode) {
                FileType::RegularFile => {
                    let len = st.st_size as u64;
                    let is_conf = n.crel == CONF_NAME.as_bytes();
                    a.size = if is_conf {
                        len
                    } else {
                        self.cd.content().cipher_size(len)
                    };
                }
                FileType::Symlink => a.size = self.link_target(n)?.len() as u64,
                _ => {}
            },
        }
        a.blocks = a.size.div_ceil(512);
        Ok(a)
    }

    fn link_target(&self, n: &RNode) -> R<Vec<u8>> {
        let What::Real { st_ino } = n.what else {
            return Err(Errno::EINVAL);
        };
        self.stat_real(n, st_ino)?;
        let fd = self.dir_fd(n.parent)?;
        let t = at::readlink_at(&*fd, &n.plain).map_err(|e| io_errno(&e))?;
        let name = n.crel.rsplit(|&b| b == b'/').next().unwrap_or(&n.crel);
        let nonce_path = join_rel(&n.crel, name);
        let s = self
            .cd
            .reverse_symlink_target(t.as_bytes(), &nonce_path)
            .map_err(|_| Errno::EIO)?;
        Ok(s.into_bytes())
    }

    fn lookup_(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let dir = self.node(parent)?;
        let n = self.resolve(parent, &dir, name)?;
        let ino = self.register(n.clone())?;
        self.attr_of(ino, &n)
    }

    /// Opens real node `n` for reading: through its directory's
    /// descriptor, never a symlink or anything but a regular file, and
    /// only if it is still the inode looked up (ESTALE otherwise).
    fn open_real(&self, n: &RNode, st_ino: u64) -> R<std::fs::File> {
        let fd = self.dir_fd(n.parent)?;
        let (f, st) =
            at::open_regular_stat_at(&*fd, &n.plain, libc::O_RDONLY).map_err(|e| {
                match e.kind() {
                    io::ErrorKind::InvalidData => Errno::EIO,
                    _ => io_errno(&e),
                }
            })?;
        if st.st_ino != st_ino {
            return Err(Errno::ESTALE);
        }
        Ok(f)
    }

    fn read_(&self, ino: u64, off: u64, size: u32) -> R<Vec<u8>> {
        let n = self.node(ino)?;
        let slice = |c: &[u8]| {
            let s = (off as usize).min(c.len());
            let e = (s + size as usize).min(c.len());
            c[s..e].to_vec()
        };
        match &n.what {
            What::Virtual(c) => Ok(slice(c)),
            What::Real { st_ino } => {
                let f = self.open_real(&n, *st_ino)?;
                if n.crel == CONF_NAME.as_bytes() {
                    let mut b = vec![0u8; size as usize];
                    let got = f.read_at(&mut b, off).map_err(|e| io_errno(&e))?;
                    b.truncate(got);
                    return Ok(b);
                }
                let len = f.metadata().map_err(|e| io_errno(&e))?.len();
                self.cd
                    .reverse_read(&f, len, &n.crel, off, size as usize)
                    .map_err(|_| Errno::EIO)
            }
        }
    }

    fn readdir_(&self, ino: u64) -> R<Vec<(u64, FileType, OsString)>> {
        let dir = self.node(ino)?;
        let mut out = vec![
            (ino, FileType::Directory, OsString::from(".")),
            (ROOT_INO, FileType::Directory, "..".into()),
        ];
        let mut virt = |name: OsString, content: Vec<u8>| -> R<()> {
            let i = self.register(RNode {
                crel: join_rel(&dir.crel, name.as_bytes()),
                parent: ino,
                plain: OsString::new(),
                what: What::Virtual(content),
            })?;
            out.push((i, FileType::RegularFile, name));
            Ok(())
        };
        if self.cd.names().mode() == (NameMode::Eme { diriv: true }) {
            let iv = self.cd.reverse_dir_iv(&dir.crel).0.to_vec();
            virt(DIRIV_NAME.into(), iv)?;
        }
        let children = self.children(ino, &dir)?;
        for c in &children {
            if let Some(l) = &c.long {
                virt(
                    format!("{}{LONGNAME_SUFFIX}", c.on_disk).into(),
                    l.clone().into_bytes(),
                )?;
            }
        }
        for c in children {
            let crel = join_rel(&dir.crel, c.on_disk.as_bytes());
            let i = self.register(RNode {
                crel,
                parent: ino,
                plain: c.plain,
                what: What::Real { st_ino: c.st_ino },
            })?;
            out.push((i, c.kind.unwrap_or(FileType::RegularFile), c.on_disk.into()));
        }
        Ok(out)
    }
}

impl Ops for ReverseFs {
    fn ttl(&self) -> std::time::Duration {
        TTL
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        self.lookup_(parent, name)
    }

    fn getattr(&self, ino: u64) -> R<FileAttr> {
        self.node(ino).and_then(|n| self.attr_of(ino, &n))
    }

    fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        self.node(ino).and_then(|n| self.link_target(&n))
    }

    /// A reverse file has no state while open: the handle is its inode
    /// number, and each read opens the source file anew.
    fn open(&self, ino: u64, flags: i32) -> R<(u64, u32)> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EROFS);
        }
        Ok((ino, 0))
    }

    /// Reads the node whose inode number is the handle (see `open`).
    fn read(&self, fh: u64, off: u64, out: &mut [u8]) -> R<usize> {
        let d = self.read_(fh, off, out.len() as u32)?;
        out[..d.len()].copy_from_slice(&d);
        Ok(d.len())
    }

    fn release(&self, _fh: u64) {}

    fn opendir(&self, _ino: u64) -> R<(u64, u32)> {
        Ok((0, 0))
    }

    fn readdir(&self, ino: u64, offset: u64, sink: &mut dyn DirSink) -> R<()> {
        let items = self.readdir_(ino)?;
        for (i, (ino, k, name)) in items.iter().enumerate().skip(offset as usize) {
            if sink.add(*ino, i as u64 + 1, *k, name) {
                break;
            }
        }
        Ok(())
    }

    fn statfs(&self) -> R<Statfs> {
        let s = at::statvfs_fd(&**self.dirs.root()).map_err(|e| io_errno(&e))?;
        Ok(Statfs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: 255,
            frsize: s.f_frsize as u32,
        })
    }
}
