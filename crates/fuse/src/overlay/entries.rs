//! Name operations: lookup, mkdir, mknod, symlink, link, unlink, rmdir,
//! rename, readlink, and directory listings. Each plaintext name is mapped
//! to its cipher name in the parent's cipher directory (with a `.name`
//! file for hashed long names).

use cryptkeep_overlay::diriv::DIRIV_NAME;
use cryptkeep_overlay::names::LONGNAME_SUFFIX;
use cryptkeep_overlay::sys;
use cryptkeep_overlay::{CipherName, DirIv, NameMode};
use fuser::{Errno, FileAttr, FileType, RenameFlags};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::attr::{attr, attr_stat, dot_attr, errno, ino_of, io_errno, kind};
use super::fs::OverlayFs;
use super::listings::Listing;
use super::prefetch::{Prefetch, Ready};
use super::reaper;

/// One entry of a directory snapshot.
pub(crate) struct DirItem {
    pub(crate) ino: u64,
    pub(crate) kind: FileType,
    /// The plaintext name.
    pub(crate) name: OsString,
    /// The name on disk (empty for "." and "..").
    pub(crate) cipher: OsString,
}

type R<T> = Result<T, Errno>;

impl OverlayFs {
    /// The name tweak of cipher directory `dir`, cached (a directory's IV
    /// never changes; the cache forgets directories that are removed or
    /// moved).
    pub(crate) fn dir_iv(&self, dir: &Path) -> R<DirIv> {
        if let Some((iv, read)) = self.dir_ivs.lock().map_err(|_| Errno::EIO)?.get(dir) {
            if read.elapsed() < self.ttl {
                return Ok(*iv);
            }
        }
        let iv = self.cd.dir_iv(dir).map_err(|e| errno(&e))?;
        let mut c = self.dir_ivs.lock().map_err(|_| Errno::EIO)?;
        if c.len() > 100_000 {
            c.clear();
        }
        c.insert(dir.to_path_buf(), (iv, std::time::Instant::now()));
        Ok(iv)
    }

    /// Drops cached IVs of `dir` and everything below it (a rename).
    fn forget_dir_ivs(&self, dir: &Path) {
        if let Ok(mut c) = self.dir_ivs.lock() {
            c.retain(|p, _| !p.starts_with(dir));
        }
    }

    /// Drops the cached IV of the removed, empty directory `dir`
    /// (nothing below it can be cached: its entries were removed first).
    fn forget_dir_iv(&self, dir: &Path) {
        if let Ok(mut c) = self.dir_ivs.lock() {
            c.remove(dir);
        }
    }

    /// The cipher path of inode `ino`.
    pub(crate) fn path_of(&self, ino: u64) -> R<PathBuf> {
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .path(ino)
            .ok_or(Errno::ENOENT)
    }

    /// The cipher directory of `parent` and the cipher name of `name` in it.
    pub(crate) fn child(&self, parent: u64, name: &OsStr) -> R<(PathBuf, CipherName)> {
        let dir = self.path_of(parent)?;
        if dir == self.cd.root()
            && self.cd.is_internal(&dir, name)
            && self.cd.names().mode() == NameMode::Plain
        {
            return Err(Errno::EPERM);
        }
        let iv = self.dir_iv(&dir)?;
        let cn = self.cd.encrypt_entry(&iv, name).map_err(|e| errno(&e))?;
        Ok((dir, cn))
    }

    /// Stats `path`, records the lookup and returns its attributes.
    pub(crate) fn entry(&self, path: &Path) -> R<FileAttr> {
        let m = std::fs::symlink_metadata(path).map_err(|e| io_errno(&e))?;
        let a = attr(&self.cd, path, &m, self.root_ino);
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .looked_up(a.ino.0, path);
        Ok(a)
    }

    /// Attributes of inode `ino` (no lookup recorded). An open file is
    /// stat'ed through its descriptor, so it keeps working after unlink.
    pub(crate) fn attr_of(&self, ino: u64) -> R<FileAttr> {
        if let Some(a) = self.open_attr(ino) {
            return Ok(a);
        }
        let p = self.path_of(ino)?;
        let m = std::fs::symlink_metadata(&p).map_err(|e| io_errno(&e))?;
        Ok(attr(&self.cd, &p, &m, self.root_ino))
    }

    pub(crate) fn do_lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let (dir, cn) = self.child(parent, name)?;
        self.entry(&dir.join(&cn.on_disk))
    }

    /// Writes the `.name` file of a long name before the entry is created.
    fn pre_create(&self, dir: &Path, cn: &CipherName) -> R<()> {
        if cn.long.is_some() {
            let p = dir.join(format!("{}{LONGNAME_SUFFIX}", cn.on_disk));
            if p.exists() {
                return Err(Errno::EEXIST);
            }
            self.cd.write_long_name(dir, cn).map_err(|e| errno(&e))?;
        }
        Ok(())
    }

    /// Removes the `.name` file of a long name (after a failed create or a removal).
    fn drop_long_name(dir: &Path, cn: &CipherName) {
        if cn.long.is_some() {
            let _ = std::fs::remove_file(dir.join(format!("{}{LONGNAME_SUFFIX}", cn.on_disk)));
        }
    }

    /// Creates an entry with `make`, handling the `.name` file and the owner.
    pub(crate) fn create_entry(
        &self,
        parent: u64,
        name: &OsStr,
        uid: u32,
        gid: u32,
        mut make: impl FnMut(&Path) -> std::io::Result<()>,
    ) -> R<(PathBuf, FileAttr)> {
        let (path, a, _) =
            self.create_entry_fd(parent, name, uid, gid, |p| make(p).map(|()| None))?;
        Ok((path, a))
    }

    /// [`Self::create_entry`] where `make` may hand back the new file
    /// opened (a regular file from `create`): its owner and attributes are
    /// then set and read through that descriptor, with no path walks, and
    /// the descriptor is returned for the file handle. `make` returns
    /// `(None, ..)` as "created, not opened"; an `existed` file (a
    /// non-exclusive create that found one) keeps its owner.
    pub(crate) fn create_entry_fd(
        &self,
        parent: u64,
        name: &OsStr,
        uid: u32,
        gid: u32,
        mut make: impl FnMut(&Path) -> std::io::Result<Option<(std::fs::File, bool)>>,
    ) -> R<(PathBuf, FileAttr, Option<std::fs::File>)> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let path = dir.join(&cn.on_disk);
        self.with_room(|| self.pre_create(&dir, &cn))?;
        let made = match self.with_room(|| make(&path).map_err(|e| io_errno(&e))) {
            Ok(m) => m,
            Err(e) => {
                Self::drop_long_name(&dir, &cn);
                return Err(e);
            }
        };
        // New entries belong to the caller (as root); u32::MAX = keep the
        // owner (hard links share the existing inode's).
        let chown = self.is_root && uid != u32::MAX;
        let Some((f, existed)) = made else {
            if chown {
                let _ = std::os::unix::fs::lchown(&path, Some(uid), Some(gid));
            }
            return Ok((path.clone(), self.entry(&path)?, None));
        };
        if chown && !existed {
            let _ = std::os::unix::fs::fchown(&f, Some(uid), Some(gid));
        }
        let m = f.metadata().map_err(|e| io_errno(&e))?;
        let a = attr(&self.cd, &path, &m, self.root_ino);
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .looked_up(a.ino.0, &path);
        Ok((path, a, Some(f)))
    }

    pub(crate) fn do_mkdir(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let cd = self.cd.clone();
        let (path, _) = self.create_entry(parent, name, uid, gid, |p| {
            std::fs::create_dir(p)?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))?;
            if let Err(e) = cd.init_dir(p) {
                let _ = std::fs::remove_dir(p);
                return Err(std::io::Error::other(e.to_string()));
            }
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode & 0o7777))
        })?;
        self.entry(&path)
    }

    pub(crate) fn do_symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let stored = self
            .cd
            .encrypt_symlink_target(target.as_os_str())
            .map_err(|e| errno(&e))?;
        Ok(self
            .create_entry(parent, name, uid, gid, |p| {
                std::os::unix::fs::symlink(&stored, p)
            })?
            .1)
    }

    pub(crate) fn do_mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        Ok(self
            .create_entry(parent, name, uid, gid, |p| {
                if mode & libc::S_IFMT == libc::S_IFREG {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(p)?;
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode & 0o7777))
                } else {
                    sys::mknod(p, mode, u64::from(rdev))
                }
            })?
            .1)
    }

    pub(crate) fn do_link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        let src = self.path_of(ino)?;
        Ok(self
            .create_entry(newparent, newname, u32::MAX, u32::MAX, |p| {
                std::fs::hard_link(&src, p)
            })?
            .1)
    }

    pub(crate) fn do_readlink(&self, ino: u64) -> R<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let p = self.path_of(ino)?;
        let t = std::fs::read_link(&p).map_err(|e| io_errno(&e))?;
        let plain = self
            .cd
            .decrypt_symlink_target(t.as_os_str(), &p)
            .map_err(|e| errno(&e))?;
        Ok(plain.as_bytes().to_vec())
    }

    pub(crate) fn do_unlink(&self, parent: u64, name: &OsStr) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let path = dir.join(&cn.on_disk);
        let dfd = self.dir_fds.get(parent, &dir).map_err(|e| io_errno(&e))?;
        // Held open across the unlink, the file is freed by the reaper.
        let pinned = self
            .reaper
            .as_ref()
            .and_then(|_| reaper::pin_at(&*dfd, OsStr::new(&cn.on_disk)).ok());
        sys::unlink_at(&*dfd, OsStr::new(&cn.on_disk), 0).map_err(|e| io_errno(&e))?;
        if let (Some(r), Some(fd)) = (&self.reaper, pinned) {
            r.release(fd);
        }
        Self::drop_long_name(&dir, &cn);
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .remove_path(&path);
        Ok(())
    }

    /// Removes the (plaintext-)empty cipher directory `name` of the open
    /// directory `parent`: its diriv, then itself (the diriv is put back
    /// when the directory cannot go). Answers the removed directory's
    /// FUSE inode number.
    fn remove_dir_at(&self, parent: &impl AsFd, name: &OsStr) -> R<u64> {
        let not_dir = |e: std::io::Error| match e.raw_os_error() {
            Some(libc::ELOOP) => Errno::ENOTDIR,
            _ => io_errno(&e),
        };
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let fd = sys::open_at(parent, name, flags, 0).map_err(not_dir)?;
        let dir = std::fs::File::from(fd);
        let ino = dir.metadata().map_err(|e| io_errno(&e))?.ino();
        let diriv = OsStr::new(DIRIV_NAME);
        let mut has_diriv = false;
        for n in sys::dir_names(&dir).map_err(|e| io_errno(&e))? {
            if n == diriv && self.cd.names().mode() == (NameMode::Eme { diriv: true }) {
                has_diriv = true;
            } else {
                return Err(Errno::ENOTEMPTY);
            }
        }
        let saved = if has_diriv {
            let mut b = Vec::new();
            let f = sys::open_at(&dir, diriv, libc::O_RDONLY | libc::O_NOFOLLOW, 0)
                .map_err(|e| io_errno(&e))?;
            std::fs::File::from(f)
                .read_to_end(&mut b)
                .map_err(|e| io_errno(&e))?;
            sys::unlink_at(&dir, diriv, 0).map_err(|e| io_errno(&e))?;
            Some(b)
        } else {
            None
        };
        if let Err(e) = sys::unlink_at(parent, name, libc::AT_REMOVEDIR) {
            if let Some(b) = saved {
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
                if let Ok(f) = sys::open_at(&dir, diriv, flags, 0o400) {
                    let _ = std::fs::File::from(f).write_all(&b);
                }
            }
            return Err(io_errno(&e));
        }
        Ok(ino_of(ino, self.root_ino))
    }

    pub(crate) fn do_rmdir(&self, parent: u64, name: &OsStr) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (dir, cn) = self.child(parent, name)?;
        let path = dir.join(&cn.on_disk);
        let dfd = self.dir_fds.get(parent, &dir).map_err(|e| io_errno(&e))?;
        let gone = self.remove_dir_at(&*dfd, OsStr::new(&cn.on_disk))?;
        self.dir_fds.forget(gone);
        self.forget_dir_iv(&path);
        Self::drop_long_name(&dir, &cn);
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .remove_path(&path);
        Ok(())
    }

    pub(crate) fn do_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (odir, ocn) = self.child(parent, name)?;
        let (ndir, ncn) = self.child(newparent, newname)?;
        let (old, new) = (odir.join(&ocn.on_disk), ndir.join(&ncn.on_disk));
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            // Both names stay where they are (and so do their `.name`
            // files); only what they point at is swapped.
            let om = std::fs::symlink_metadata(&old).map_err(|e| io_errno(&e))?;
            let nm = std::fs::symlink_metadata(&new).map_err(|e| io_errno(&e))?;
            sys::rename2(&old, &new, flags.bits()).map_err(|e| io_errno(&e))?;
            if om.is_dir() || nm.is_dir() {
                self.forget_dir_ivs(&old);
                self.forget_dir_ivs(&new);
            }
            self.inodes.lock().map_err(|_| Errno::EIO)?.exchange(
                &old,
                om.is_dir(),
                &new,
                nm.is_dir(),
            );
            return Ok(());
        }
        let om = std::fs::symlink_metadata(&old).map_err(|e| io_errno(&e))?;
        let target_exists = std::fs::symlink_metadata(&new).is_ok();
        if let Ok(nm) = std::fs::symlink_metadata(&new) {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if old == new {
                return Ok(());
            }
            // An empty target directory still holds its diriv: remove it first.
            if nm.is_dir() && om.is_dir() {
                let dfd = self
                    .dir_fds
                    .get(newparent, &ndir)
                    .map_err(|e| io_errno(&e))?;
                let gone = self.remove_dir_at(&*dfd, OsStr::new(&ncn.on_disk))?;
                self.dir_fds.forget(gone);
                self.forget_dir_iv(&new);
            }
        }
        if ncn.long.is_some() {
            // Same name, same content: replace a target's .name file (it
            // is read-only, so remove and create rather than overwrite).
            let p = ndir.join(format!("{}{LONGNAME_SUFFIX}", ncn.on_disk));
            let _ = std::fs::remove_file(&p);
            self.cd
                .write_long_name(&ndir, &ncn)
                .map_err(|e| errno(&e))?;
        }
        if let Err(e) = sys::rename2(&old, &new, flags.bits()) {
            if !target_exists {
                Self::drop_long_name(&ndir, &ncn);
            }
            return Err(io_errno(&e));
        }
        if old != new {
            Self::drop_long_name(&odir, &ocn);
        }
        self.inodes
            .lock()
            .map_err(|_| Errno::EIO)?
            .rename(&old, &new, om.is_dir());
        if om.is_dir() {
            self.forget_dir_ivs(&old);
        }
        Ok(())
    }

    /// Fills a READDIRPLUS reply from `listing`, starting at entry `pos`: each entry with its attributes, so
    /// `ls -l`, `du`, `rsync` and `rm -r` need no LOOKUP per name. Every
    /// entry sent except "." and ".." counts as a kernel lookup. Entries
    /// gone since the snapshot are skipped.
    pub(crate) fn fill_readdirplus(
        &self,
        listing: &Listing,
        pos: usize,
        reply: &mut dyn super::ops::DirPlusSink,
    ) -> R<()> {
        if pos >= listing.items.len() {
            // The end of the listing: an empty answer.
            return Ok(());
        }
        let ino = listing.ino;
        let dir = self.path_of(ino)?;
        let mut looked_up = Vec::new();
        // Attributes read ahead with the listing, while still fresh.
        let pre = listing.stats.as_deref().filter(|s| s.fresh(&self.prefetch));
        // Otherwise entries are stat'ed relative to the directory, opened once.
        let mut dir_fd = None;
        for (i, it) in listing.items.iter().enumerate().skip(pos) {
            let (a, path) = if it.cipher.is_empty() {
                (dot_attr(ino), None)
            } else {
                let a = match pre {
                    Some(s) => s.attrs.get(i).copied().flatten(),
                    None => {
                        if dir_fd.is_none() {
                            dir_fd = Some(open_dir(&dir).map_err(|e| io_errno(&e))?);
                        }
                        dir_fd
                            .as_ref()
                            .and_then(|fd| self.stat_entry(fd, &dir, &it.cipher))
                    }
                };
                // Gone since the listing was taken.
                let Some(a) = a else { continue };
                (a, Some(dir.join(&it.cipher)))
            };
            if reply.add(a.ino.0, listing.offset_after(i), &it.name, &a, self.ttl) {
                break;
            }
            if let Some(p) = path {
                looked_up.push((a.ino.0, p));
            }
        }
        // Recorded before the reply goes out, so a FORGET cannot overtake it.
        let mut t = self.inodes.lock().map_err(|_| Errno::EIO)?;
        for (i, p) in &looked_up {
            t.looked_up(*i, p);
        }
        Ok(())
    }

    /// The attributes of entry `cipher` of directory `dir` (open as `fd`),
    /// `None` when it is gone.
    fn stat_entry(&self, fd: &std::fs::File, dir: &Path, cipher: &OsStr) -> Option<FileAttr> {
        let st = sys::lstat_at(fd, cipher).ok()?;
        // Only a symlink's attributes need its path (its target's length).
        let link;
        let p = if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            link = dir.join(cipher);
            &link
        } else {
            dir
        };
        Some(attr_stat(&self.cd, p, &st, self.root_ino))
    }

    /// Lists directory `ino` at `dir` ahead of its reader (see `prefetch.rs`).
    fn read_ahead_one(&self, ino: u64, dir: PathBuf) -> Option<Ready> {
        let start = self.prefetch.start_stats();
        let items = self.snapshot_at(ino, &dir).ok()?;
        let fd = open_dir(&dir).ok()?;
        let attrs = items
            .iter()
            .map(|it| {
                if it.cipher.is_empty() {
                    None
                } else {
                    self.stat_entry(&fd, &dir, &it.cipher)
                }
            })
            .collect();
        Some(Ready {
            dir,
            items,
            stats: Prefetch::stats(attrs, start),
        })
    }

    /// Queues the subdirectories of the new listing `l` of `dir` for
    /// read-ahead, starting the worker thread the first time.
    pub(crate) fn read_ahead(&self, dir: &Path, l: &Listing) {
        let subdirs = l
            .items
            .iter()
            .filter(|it| it.kind == FileType::Directory && !it.cipher.is_empty())
            .map(|it| (it.ino, dir.join(&it.cipher)))
            .collect::<Vec<_>>();
        if subdirs.is_empty() || !self.prefetch.want(subdirs.into_iter()) {
            return;
        }
        let fs = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ck-readahead".into())
            .spawn(move || {
                while let Some((ino, dir)) = fs.prefetch.next() {
                    if let Some(r) = fs.read_ahead_one(ino, dir) {
                        fs.prefetch.put(ino, r);
                    }
                }
            });
        if spawned.is_err() {
            // No read-ahead then; listings are taken when read, as before.
            self.prefetch.stop();
        }
    }

    /// Lists directory `ino`, cipher directory `dir`, with plaintext names
    /// ("." and ".." first).
    /// Undecryptable names are skipped and logged, as gocryptfs does.
    pub(crate) fn snapshot_at(&self, ino: u64, dir: &Path) -> R<Vec<DirItem>> {
        let iv = self.dir_iv(dir)?;
        let mut items = vec![
            DirItem {
                ino,
                kind: FileType::Directory,
                name: ".".into(),
                cipher: OsString::new(),
            },
            DirItem {
                ino: ino.max(1),
                kind: FileType::Directory,
                name: "..".into(),
                cipher: OsString::new(),
            },
        ];
        let (mut cnames, mut found) = (Vec::new(), Vec::new());
        for e in std::fs::read_dir(dir).map_err(|e| io_errno(&e))? {
            let e = e.map_err(|e| io_errno(&e))?;
            let cname = e.file_name();
            if self.cd.is_internal(dir, &cname) {
                continue;
            }
            let k = e.file_type().map(kind).unwrap_or(FileType::RegularFile);
            found.push((ino_of(e.ino(), self.root_ino), k));
            cnames.push(cname);
        }
        // All names of the listing at once (one key-holder request with --keep).
        let names = self.cd.decrypt_entries(dir, &iv, &cnames);
        for ((cname, name), (ino, kind)) in cnames.into_iter().zip(names).zip(found) {
            match name {
                Ok(name) => items.push(DirItem {
                    ino,
                    kind,
                    name,
                    cipher: cname,
                }),
                Err(err) => eprintln!(
                    "cryptkeep fs: skipping {}: {err}",
                    dir.join(&cname).display()
                ),
            }
        }
        Ok(items)
    }
}

/// Opens directory `p` for `*at` calls.
fn open_dir(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(p)
}
