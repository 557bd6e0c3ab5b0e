//! The inode table: FUSE inode numbers (the backing files' `st_ino`, with
//! the root as 1) to the cipher paths they were looked up by, with kernel
//! lookup counts. Hard links give one inode several paths.

use std::collections::HashMap;
use std::ffi::OsString;

use foldhash::fast::RandomState;
use std::path::{Path, PathBuf};

/// FUSE's root inode number.
pub(crate) const ROOT_INO: u64 = 1;

#[derive(Debug, Default)]
struct Node {
    paths: Vec<PathBuf>,
    lookups: u64,
}

/// Inode number → cipher paths, with the reverse index. The index is
/// keyed by the paths' bytes (hashing a `Path` parses its components, and
/// a tree walk records every entry it lists).
#[derive(Debug)]
pub(crate) struct Inodes {
    nodes: HashMap<u64, Node, RandomState>,
    by_path: HashMap<OsString, u64, RandomState>,
}

impl Inodes {
    /// A table holding the root.
    pub(crate) fn new(root: &Path) -> Inodes {
        let mut nodes = HashMap::default();
        nodes.insert(
            ROOT_INO,
            Node {
                paths: vec![root.to_path_buf()],
                lookups: 1,
            },
        );
        let mut by_path = HashMap::default();
        by_path.insert(root.as_os_str().to_owned(), ROOT_INO);
        Inodes { nodes, by_path }
    }

    /// A cipher path of `ino`.
    pub(crate) fn path(&self, ino: u64) -> Option<PathBuf> {
        self.nodes.get(&ino).and_then(|n| n.paths.first().cloned())
    }

    /// Records a kernel lookup of `ino` at `path`.
    pub(crate) fn looked_up(&mut self, ino: u64, path: &Path) {
        let key = path.as_os_str();
        if self.by_path.get(key) == Some(&ino) {
            // Known under this name (a walk listing it again): count it.
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.lookups += 1;
                if let Some(i) = n.paths.iter().position(|p| p.as_os_str() == key) {
                    n.paths.swap(0, i);
                    return;
                }
                n.paths.insert(0, path.to_path_buf());
                return;
            }
        }
        if let Some(old) = self.by_path.insert(key.to_owned(), ino) {
            if old != ino {
                // The name now belongs to another inode.
                if let Some(n) = self.nodes.get_mut(&old) {
                    n.paths.retain(|p| p.as_os_str() != key);
                }
            }
        }
        let n = self.nodes.entry(ino).or_default();
        n.lookups += 1;
        if let Some(i) = n.paths.iter().position(|p| p.as_os_str() == key) {
            // Most recently used path first.
            n.paths.swap(0, i);
        } else {
            n.paths.insert(0, path.to_path_buf());
        }
    }

    /// The kernel forgot `count` lookups of `ino`; true when that was the
    /// last and `ino` is gone from the table.
    pub(crate) fn forget(&mut self, ino: u64, count: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
            if n.lookups == 0 {
                if let Some(n) = self.nodes.remove(&ino) {
                    for p in n.paths {
                        if self.by_path.get(p.as_os_str()) == Some(&ino) {
                            self.by_path.remove(p.as_os_str());
                        }
                    }
                }
                return true;
            }
        }
        false
    }

    /// `path` no longer exists (unlink, rmdir, replaced by a rename).
    pub(crate) fn remove_path(&mut self, path: &Path) {
        let key = path.as_os_str();
        if let Some(ino) = self.by_path.remove(key) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.paths.retain(|p| p.as_os_str() != key);
            }
        }
    }

    /// `old` was renamed to `new`: rewrite it, and everything below it
    /// when it is a directory (`is_dir`).
    pub(crate) fn rename(&mut self, old: &Path, new: &Path, is_dir: bool) {
        self.remove_path(new);
        if !is_dir {
            if let Some(ino) = self.by_path.remove(old.as_os_str()) {
                self.by_path.insert(new.as_os_str().to_owned(), ino);
                if let Some(n) = self.nodes.get_mut(&ino) {
                    for p in n.paths.iter_mut().filter(|p| p.as_path() == old) {
                        *p = new.to_path_buf();
                    }
                }
            }
            return;
        }
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| Path::new(p).starts_with(old))
            .map(|(p, i)| (PathBuf::from(p), *i))
            .collect();
        for (p, ino) in moved {
            let rest = p
                .strip_prefix(old)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let np = if rest.as_os_str().is_empty() {
                new.to_path_buf()
            } else {
                new.join(rest)
            };
            self.by_path.remove(p.as_os_str());
            self.by_path.insert(np.as_os_str().to_owned(), ino);
            if let Some(n) = self.nodes.get_mut(&ino) {
                for q in n.paths.iter_mut().filter(|q| **q == p) {
                    *q = np.clone();
                }
            }
        }
    }
}

impl Inodes {
    /// `a` and `b` were exchanged (`RENAME_EXCHANGE`): each name now
    /// holds what the other held (with everything below, for directories).
    pub(crate) fn exchange(&mut self, a: &Path, a_is_dir: bool, b: &Path, b_is_dir: bool) {
        // A parking name no real path can have (paths never hold NUL).
        let mut park = a.as_os_str().to_os_string();
        park.push("\0exchange");
        let park = PathBuf::from(park);
        self.rename(a, &park, a_is_dir);
        self.rename(b, a, b_is_dir);
        self.rename(&park, b, a_is_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_renames_and_forgets() {
        let mut t = Inodes::new(Path::new("/c"));
        t.looked_up(5, Path::new("/c/a"));
        t.looked_up(6, Path::new("/c/a/b"));
        t.looked_up(7, Path::new("/c/ab"));
        t.rename(Path::new("/c/a"), Path::new("/c/z"), true);
        assert_eq!(t.path(5).unwrap(), Path::new("/c/z"));
        assert_eq!(t.path(6).unwrap(), Path::new("/c/z/b"));
        assert_eq!(t.path(7).unwrap(), Path::new("/c/ab"));
        t.looked_up(7, Path::new("/c/hard"));
        t.remove_path(Path::new("/c/hard"));
        assert_eq!(t.path(7).unwrap(), Path::new("/c/ab"));
        t.rename(Path::new("/c/ab"), Path::new("/c/ac"), false);
        assert_eq!(t.path(7).unwrap(), Path::new("/c/ac"));
        assert!(!t.forget(7, 1), "one lookup of two left");
        assert!(t.forget(7, 1), "the last lookup forgotten");
        assert!(t.path(7).is_none());
        t.looked_up(7, Path::new("/c/ac"));
        t.looked_up(8, Path::new("/c/d"));
        t.looked_up(9, Path::new("/c/d/x"));
        t.exchange(Path::new("/c/ac"), false, Path::new("/c/d"), true);
        assert_eq!(t.path(7).unwrap(), Path::new("/c/d"));
        assert_eq!(t.path(8).unwrap(), Path::new("/c/ac"));
        assert_eq!(t.path(9).unwrap(), Path::new("/c/ac/x"));
        assert!(!t.forget(ROOT_INO, 10));
        assert!(t.path(ROOT_INO).is_some());
    }
}
