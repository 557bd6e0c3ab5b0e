//! Directory snapshots: a cipher directory listed through its descriptor
//! with plaintext names, the attributes READDIRPLUS sends with them, and
//! the read-ahead of a listed directory's subdirectories (`prefetch.rs`).

use cryptkeep_fuse::ops::{Errno, FileAttr, FileType};
use cryptkeep_overlay::{at, DirIv, Listed};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::attr::{dot_attr, ino_of, io_errno, kind_of_dtype, kind_of_mode};
use super::dirfds::Step;
use super::fs::OverlayFs;
use super::items::DirItem;
use super::listings::Listing;
use super::nodes::ROOT_INO;
use super::prefetch::{Prefetch, Ready};

type R<T> = Result<T, Errno>;

/// Directories the read-ahead worker lists per round: their names are
/// decrypted in one request, so a walk waits for the keep once per this
/// many directories instead of once per directory.
const BATCH: usize = 8;

/// Entries after which a round lists no further directory (the rest go
/// back to the queue): a huge directory does not hold up the readers of
/// the others in its round for long.
const BATCH_ENTRIES: usize = 2048;

impl OverlayFs {
    /// Fills a READDIRPLUS reply from `listing`, starting at entry `pos`:
    /// each entry with its attributes, so `ls -l`, `du`, `rsync` and
    /// `rm -r` need no LOOKUP per name. Every entry sent except "." and
    /// ".." counts as a kernel lookup. Entries gone since the snapshot are
    /// skipped.
    pub(crate) fn fill_readdirplus(
        &self,
        listing: &Listing,
        pos: usize,
        reply: &mut dyn cryptkeep_fuse::ops::DirPlusSink,
    ) -> R<()> {
        if pos >= listing.items.len() {
            // The end of the listing: an empty answer.
            return Ok(());
        }
        let ino = listing.ino;
        let mut looked_up = Vec::new();
        // Attributes read ahead with the listing, while still fresh.
        let pre = listing.stats.as_deref().filter(|s| s.fresh(&self.prefetch));
        // Otherwise entries are stat'ed relative to the directory.
        let mut dir = None;
        for (i, it) in listing.items.iter().enumerate().skip(pos) {
            let a = if it.cipher.is_empty() {
                dot_attr(ino)
            } else {
                let a = match pre {
                    Some(s) => s.attrs.get(i).copied().flatten(),
                    None => {
                        if dir.is_none() {
                            dir = Some(self.dir_fd(ino)?);
                        }
                        dir.as_ref().and_then(|fd| self.stat_entry(fd, &it.cipher))
                    }
                };
                // Gone since the listing was taken.
                let Some(a) = a else { continue };
                a
            };
            if reply.add(a.ino.0, listing.offset_after(i), &it.name, &a, self.ttl) {
                break;
            }
            if !it.cipher.is_empty() {
                looked_up.push((a.ino.0, &it.cipher));
            }
        }
        // Recorded before the reply goes out, so a FORGET cannot overtake it.
        let mut t = self.nodes.lock().map_err(|_| Errno::EIO)?;
        for (i, name) in looked_up {
            t.looked_up(i, ino, name);
        }
        Ok(())
    }

    /// The attributes of entry `cipher` of the directory open as `dir`,
    /// `None` when it is gone.
    fn stat_entry(&self, dir: &OwnedFd, cipher: &std::ffi::OsStr) -> Option<FileAttr> {
        let st = at::stat_at(dir, cipher).ok()?;
        Some(self.attr_at(dir, cipher, &st))
    }

    /// The descriptor of directory `ino`, queued for read-ahead: reached
    /// through the names the kernel knows, or, for a directory it has not
    /// been told of yet, through where the read-ahead listed it.
    fn read_ahead_dir_fd(&self, ino: u64) -> R<Arc<OwnedFd>> {
        self.dir_fds
            .get_with(ino, |i| {
                let known = self
                    .nodes
                    .lock()
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::EIO))?
                    .link(i)
                    .map(|l| (l.parent, l.name));
                let (parent, name) = known
                    .or_else(|| self.prefetch.link(i))
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
                Ok(Step {
                    parent,
                    name,
                    st_ino: i,
                })
            })
            .map_err(|e| io_errno(&e))
            .and_then(|fd| {
                // Not across a mount planted in the cipher directory: the
                // walker's own lookups decide there.
                let st = at::fstat(&fd).map_err(|e| io_errno(&e))?;
                if st.st_dev != self.root_dev {
                    self.dir_fds.forget(ino);
                    return Err(Errno::EXDEV);
                }
                Ok(fd)
            })
    }

    /// Lists directories `inos` ahead of their reader (see `prefetch.rs`),
    /// their names decrypted together (one key-holder request with
    /// `--keep`), keeps each listing as it is stat'ed, the first first,
    /// and queues their subdirectories, the first's to be read first.
    fn read_ahead_batch(&self, inos: &[u64]) {
        let start = self.prefetch.start_stats();
        let mut dirs = Vec::with_capacity(inos.len());
        let mut raws = Vec::with_capacity(inos.len());
        let mut entries = 0;
        for (k, &ino) in inos.iter().enumerate() {
            if entries >= BATCH_ENTRIES {
                self.prefetch.give_back(&inos[k..]);
                break;
            }
            match self
                .read_ahead_dir_fd(ino)
                .and_then(|dir| Ok((self.list_raw(ino, &dir)?, dir)))
            {
                Ok((raw, dir)) => {
                    entries += raw.cnames.len();
                    dirs.push((ino, dir));
                    raws.push(raw);
                }
                Err(_) => self.prefetch.drop_inflight(ino),
            }
        }
        let fds: Vec<&OwnedFd> = dirs.iter().map(|(_, d)| &**d).collect();
        let named = self.name_listings(&fds, raws);
        let mut subdirs = Vec::with_capacity(named.len());
        for ((ino, dir), items) in dirs.iter().zip(named) {
            // The names could not be decrypted (the keep failed): the
            // reader tries again and reports it.
            let Ok(items) = items else {
                self.prefetch.drop_inflight(*ino);
                continue;
            };
            let attrs = items
                .iter()
                .map(|it| {
                    if it.cipher.is_empty() {
                        None
                    } else {
                        self.stat_entry(dir, &it.cipher)
                    }
                })
                .collect();
            subdirs.push((*ino, subdirs_of(&items)));
            let r = Ready {
                items,
                stats: Prefetch::stats(attrs, start),
                _pin: Some(dir.clone()),
            };
            self.prefetch.put(*ino, r);
        }
        for (ino, s) in subdirs.into_iter().rev() {
            self.prefetch.want(ino, s);
        }
    }

    /// Queues the subdirectories of the new listing `l` for read-ahead,
    /// starting the worker thread the first time.
    pub(crate) fn read_ahead(&self, l: &Listing) {
        let subdirs = subdirs_of(&l.items);
        if subdirs.is_empty() || !self.prefetch.want(l.ino, subdirs) {
            return;
        }
        let fs = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ck-readahead".into())
            .spawn(move || {
                while let Some(inos) = fs.prefetch.next(BATCH) {
                    fs.read_ahead_batch(&inos);
                }
            });
        if spawned.is_err() {
            // No read-ahead then; listings are taken when read, as before.
            self.prefetch.stop();
        }
    }

    /// Lists directory `ino`, open as `dir`, with plaintext names ("."
    /// and ".." first). Undecryptable names are skipped and logged, as
    /// gocryptfs does.
    pub(crate) fn snapshot(&self, ino: u64, dir: &OwnedFd) -> R<Vec<DirItem>> {
        let raw = self.list_raw(ino, dir)?;
        self.name_listings(&[dir], vec![raw])
            .pop()
            .unwrap_or(Err(Errno::EIO))
    }

    /// Reads the entries of directory `ino`, open as `dir`, with their
    /// on-disk names.
    fn list_raw(&self, ino: u64, dir: &OwnedFd) -> R<RawListing> {
        let iv = self.dir_iv(ino, dir)?;
        let (mut cnames, mut found) = (Vec::new(), Vec::new());
        for e in at::list_at(dir).map_err(|e| io_errno(&e))? {
            if self.cd.is_internal_name(ino == ROOT_INO, &e.name) {
                continue;
            }
            let k = kind_of_dtype(e.kind).unwrap_or_else(|| {
                at::stat_at(dir, &e.name)
                    .map_or(FileType::RegularFile, |st| kind_of_mode(st.st_mode))
            });
            found.push((ino_of(e.ino, self.root_ino), k));
            cnames.push(e.name);
        }
        Ok(RawListing {
            ino,
            iv,
            cnames,
            found,
        })
    }

    /// Decrypts the names of listings `raws` (of the directories open as
    /// `dirs`), all in one key-holder request where they fit: the
    /// snapshots, "." and ".." first. Undecryptable names are skipped and
    /// logged, as gocryptfs does; a listing whose names the key holder
    /// failed to answer for is EIO, never shown empty.
    fn name_listings(&self, dirs: &[&OwnedFd], raws: Vec<RawListing>) -> Vec<R<Vec<DirItem>>> {
        let listed: Vec<Listed<'_>> = dirs
            .iter()
            .zip(&raws)
            .map(|(dir, r)| Listed {
                dir: dir.as_fd(),
                shown: std::path::Path::new(""),
                iv: &r.iv,
                names: &r.cnames,
            })
            .collect();
        let names = self.cd.decrypt_listings(&listed);
        drop(listed);
        raws.into_iter()
            .zip(names)
            .map(|(r, names)| {
                let ino = r.ino;
                if let Some(Err(e)) = names
                    .iter()
                    .find(|n| matches!(n, Err(cryptkeep_overlay::Error::KeyHolder(_))))
                {
                    eprintln!("cryptkeep fs: cannot list directory inode {ino}: {e}");
                    return Err(Errno::EIO);
                }
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
                for ((cname, name), (ino_found, kind)) in
                    r.cnames.into_iter().zip(names).zip(r.found)
                {
                    match name {
                        Ok(name) => items.push(DirItem {
                            ino: ino_found,
                            kind,
                            name,
                            cipher: cname,
                        }),
                        Err(err) => eprintln!(
                            "cryptkeep fs: skipping {} in directory inode {ino}: {err}",
                            cname.to_string_lossy()
                        ),
                    }
                }
                Ok(items)
            })
            .collect()
    }
}

/// The subdirectories among `items` (inode and cipher name), in order.
fn subdirs_of(items: &[DirItem]) -> Vec<(u64, OsString)> {
    items
        .iter()
        .filter(|it| it.kind == FileType::Directory && !it.cipher.is_empty())
        .map(|it| (it.ino, it.cipher.clone()))
        .collect()
}

/// A directory's entries as stored, before their names are decrypted.
struct RawListing {
    ino: u64,
    iv: DirIv,
    cnames: Vec<OsString>,
    /// Each entry's inode number and kind.
    found: Vec<(u64, FileType)>,
}
