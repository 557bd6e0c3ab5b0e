//! [`ReverseFs`]: the read-only reverse view (gocryptfs `-reverse`) of a
//! plaintext directory: encrypted names, contents and symlinks computed on
//! the fly with path-derived IVs (`cryptkeep_overlay::reverse`), plus the
//! virtual `gocryptfs.diriv`, `.name` files and `gocryptfs.conf`.

use cryptkeep_overlay::config::{NameMode, CONF_NAME, CONF_REVERSE_NAME};
use cryptkeep_overlay::diriv::DIRIV_NAME;
use cryptkeep_overlay::names::{name_kind, NameKind, LONGNAME_SUFFIX};
use cryptkeep_overlay::reverse::join_rel;
use cryptkeep_overlay::{sys, CipherDir};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    ReplyStatfs, Request,
};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::attr::{attr as plain_attr, io_errno, kind, REVERSE_TTL as TTL};

/// What a reverse-view inode is.
#[derive(Clone, Debug)]
enum What {
    /// A real plaintext entry.
    Real,
    /// A virtual read-only file with this content.
    Virtual(Vec<u8>),
}

#[derive(Clone, Debug)]
struct RNode {
    /// The cipher-relative path (empty for the root).
    crel: Vec<u8>,
    /// The plaintext path (for virtual files: the file they stand for, or
    /// their directory).
    plain: PathBuf,
    what: What,
}

/// The reverse file system.
pub(crate) struct ReverseFs {
    cd: Arc<CipherDir>,
    nodes: Mutex<NodeTable>,
}

/// Inode number → node, and cipher path → inode number.
type NodeTable = (HashMap<u64, RNode>, HashMap<Vec<u8>, u64>);

type R<T> = Result<T, Errno>;

impl ReverseFs {
    pub(crate) fn new(cd: Arc<CipherDir>) -> std::io::Result<ReverseFs> {
        let root = RNode {
            crel: Vec::new(),
            plain: cd.root().to_path_buf(),
            what: What::Real,
        };
        let mut by_ino = HashMap::new();
        by_ino.insert(1, root);
        let mut by_crel = HashMap::new();
        by_crel.insert(Vec::new(), 1);
        Ok(ReverseFs {
            cd,
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

    fn eme(&self) -> bool {
        self.cd.names().mode() != NameMode::Plain
    }

    /// The cipher name of every plaintext entry of directory `dir` (the
    /// config shows as `gocryptfs.conf` at the top), with long-name contents.
    fn children(&self, dir: &RNode) -> R<Vec<(OsString, String, Option<String>)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir.plain).map_err(|e| io_errno(&e))? {
            let name = e.map_err(|e| io_errno(&e))?.file_name();
            let cn = self
                .cd
                .reverse_name(&dir.crel, &name)
                .map_err(|_| Errno::EIO)?;
            out.push((name, cn.on_disk, cn.long));
        }
        Ok(out)
    }

    /// Resolves `name` in directory node `dir`.
    fn resolve(&self, dir: &RNode, name: &OsStr) -> R<RNode> {
        let crel = join_rel(&dir.crel, name.as_bytes());
        let s = name.to_str().unwrap_or("");
        if self.cd.names().mode() == (NameMode::Eme { diriv: true }) && s == DIRIV_NAME {
            let iv = self.cd.reverse_dir_iv(&dir.crel);
            return Ok(RNode {
                crel,
                plain: dir.plain.clone(),
                what: What::Virtual(iv.0.to_vec()),
            });
        }
        if dir.crel.is_empty() && s == CONF_NAME {
            return Ok(RNode {
                crel,
                plain: dir.plain.join(CONF_REVERSE_NAME),
                what: What::Real,
            });
        }
        if dir.crel.is_empty() && s == CONF_REVERSE_NAME {
            return Err(Errno::ENOENT);
        }
        if !self.eme() {
            return Ok(RNode {
                crel,
                plain: dir.plain.join(name),
                what: What::Real,
            });
        }
        if name_kind(s) != NameKind::Normal {
            let base = s.strip_suffix(LONGNAME_SUFFIX).unwrap_or(s);
            for (plain, on_disk, long) in self.children(dir)? {
                if on_disk == base {
                    if name_kind(s) == NameKind::LongNameFile {
                        return Ok(RNode {
                            crel,
                            plain: dir.plain.join(plain),
                            what: What::Virtual(long.unwrap_or_default().into_bytes()),
                        });
                    }
                    return Ok(RNode {
                        crel,
                        plain: dir.plain.join(plain),
                        what: What::Real,
                    });
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
        Ok(RNode {
            crel,
            plain: dir.plain.join(OsStr::from_bytes(&plain)),
            what: What::Real,
        })
    }

    fn attr_of(&self, ino: u64, n: &RNode) -> R<FileAttr> {
        let m = match &n.what {
            What::Real => std::fs::symlink_metadata(&n.plain),
            What::Virtual(_) => std::fs::metadata(n.plain.parent().unwrap_or(&n.plain))
                .or_else(|_| std::fs::metadata(&n.plain)),
        }
        .map_err(|e| io_errno(&e))?;
        let mut a = plain_attr(&self.cd, &n.plain, &m, 0);
        a.ino = INodeNo(ino);
        match &n.what {
            What::Virtual(c) => {
                a.kind = FileType::RegularFile;
                a.perm = 0o444;
                a.size = c.len() as u64;
                a.nlink = 1;
            }
            What::Real => {
                let k = kind(m.file_type());
                if k == FileType::RegularFile {
                    let is_conf = n.crel == CONF_NAME.as_bytes();
                    a.size = if is_conf {
                        m.len()
                    } else {
                        self.cd.content().cipher_size(m.len())
                    };
                } else if k == FileType::Symlink {
                    a.size = self.link_target(n)?.len() as u64;
                }
            }
        }
        a.blocks = a.size.div_ceil(512);
        Ok(a)
    }

    fn link_target(&self, n: &RNode) -> R<Vec<u8>> {
        let t = std::fs::read_link(&n.plain).map_err(|e| io_errno(&e))?;
        let name = n.crel.rsplit(|&b| b == b'/').next().unwrap_or(&n.crel);
        let nonce_path = join_rel(&n.crel, name);
        let s = self
            .cd
            .reverse_symlink_target(t.as_os_str().as_bytes(), &nonce_path)
            .map_err(|_| Errno::EIO)?;
        Ok(s.into_bytes())
    }

    fn lookup_(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let dir = self.node(parent)?;
        let n = self.resolve(&dir, name)?;
        let ino = self.register(n.clone())?;
        self.attr_of(ino, &n)
    }

    fn read_(&self, ino: u64, off: u64, size: u32) -> R<Vec<u8>> {
        let n = self.node(ino)?;
        match &n.what {
            What::Virtual(c) => {
                let s = (off as usize).min(c.len());
                let e = (s + size as usize).min(c.len());
                Ok(c[s..e].to_vec())
            }
            What::Real if n.crel == CONF_NAME.as_bytes() => {
                let c = std::fs::read(&n.plain).map_err(|e| io_errno(&e))?;
                let s = (off as usize).min(c.len());
                let e = (s + size as usize).min(c.len());
                Ok(c[s..e].to_vec())
            }
            What::Real => {
                let f = std::fs::File::open(&n.plain).map_err(|e| io_errno(&e))?;
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
            (1, FileType::Directory, "..".into()),
        ];
        let mut names: Vec<(OsString, Option<Vec<u8>>)> = Vec::new();
        if self.cd.names().mode() == (NameMode::Eme { diriv: true }) {
            names.push((DIRIV_NAME.into(), None));
        }
        for (_, on_disk, long) in self.children(&dir)? {
            if let Some(l) = long {
                names.push((
                    format!("{on_disk}{LONGNAME_SUFFIX}").into(),
                    Some(l.into_bytes()),
                ));
            }
            names.push((on_disk.into(), None));
        }
        for (name, _) in names {
            let n = self.resolve(&dir, &name)?;
            let k = match &n.what {
                What::Virtual(_) => FileType::RegularFile,
                What::Real => std::fs::symlink_metadata(&n.plain)
                    .map(|m| kind(m.file_type()))
                    .unwrap_or(FileType::RegularFile),
            };
            let i = self.register(n)?;
            out.push((i, k, name));
        }
        Ok(out)
    }
}

impl Filesystem for ReverseFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.lookup_(parent.0, name) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino.0).and_then(|n| self.attr_of(ino.0, &n)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino.0).and_then(|n| self.link_target(&n)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.read_(ino.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.readdir_(ino.0) {
            Ok(items) => {
                for (i, (ino, k, name)) in items.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(*ino), i as u64 + 1, *k, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match sys::statvfs(self.cd.root()) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                255,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(io_errno(&e)),
        }
    }
}
