//! Directory snapshots: a cipher directory listed through its descriptor
//! with plaintext names, the attributes READDIRPLUS sends with them, and
//! the read-ahead of a listed directory's subdirectories (`prefetch.rs`).

use cryptkeep_fuse::ops::{Errno, FileAttr, FileType};
use cryptkeep_overlay::at;
use std::ffi::OsString;
use std::os::fd::OwnedFd;

use super::attr::{dot_attr, ino_of, io_errno, kind_of_dtype, kind_of_mode};
use super::fs::OverlayFs;
use super::items::DirItem;
use super::listings::Listing;
use super::nodes::ROOT_INO;
use super::prefetch::{Prefetch, Ready};

type R<T> = Result<T, Errno>;

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

    /// Lists directory `ino` ahead of its reader (see `prefetch.rs`).
    fn read_ahead_one(&self, ino: u64) -> Option<Ready> {
        let start = self.prefetch.start_stats();
        let dir = self.dir_fd(ino).ok()?;
        let items = self.snapshot(ino, &dir).ok()?;
        let attrs = items
            .iter()
            .map(|it| {
                if it.cipher.is_empty() {
                    None
                } else {
                    self.stat_entry(&dir, &it.cipher)
                }
            })
            .collect();
        Some(Ready {
            items,
            stats: Prefetch::stats(attrs, start),
        })
    }

    /// Queues the subdirectories of the new listing `l` for read-ahead,
    /// starting the worker thread the first time.
    pub(crate) fn read_ahead(&self, l: &Listing) {
        let subdirs = l
            .items
            .iter()
            .filter(|it| it.kind == FileType::Directory && !it.cipher.is_empty())
            .map(|it| it.ino)
            .collect::<Vec<_>>();
        if subdirs.is_empty() || !self.prefetch.want(subdirs.into_iter()) {
            return;
        }
        let fs = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ck-readahead".into())
            .spawn(move || {
                while let Some(ino) = fs.prefetch.next() {
                    if let Some(r) = fs.read_ahead_one(ino) {
                        fs.prefetch.put(ino, r);
                    }
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
        let iv = self.dir_iv(ino, dir)?;
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
        // All names of the listing at once (one key-holder request with --keep).
        let names = self
            .cd
            .decrypt_entries_at(dir, std::path::Path::new(""), &iv, &cnames);
        for ((cname, name), (ino_found, kind)) in cnames.into_iter().zip(names).zip(found) {
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
    }
}
