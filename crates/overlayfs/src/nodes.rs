//! The node table: FUSE inode numbers (the backing files' `st_ino`, with
//! the root as 1) to the names they were looked up by — each a parent
//! directory's inode number and a cipher name in it, never a whole path —
//! with kernel lookup counts. Hard links give one inode several names.
//!
//! A name is resolved by walking its parents up to a directory whose
//! descriptor is open (`dirfds.rs`), then down one `openat` per
//! component, so the depth of a tree costs nothing here and a rename of a
//! directory changes one name, not the paths of everything below it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};

use foldhash::fast::RandomState;

/// FUSE's root inode number.
pub(crate) const ROOT_INO: u64 = 1;

/// One name of an inode: cipher name `name` in directory `parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) parent: u64,
    pub(crate) name: OsString,
}

#[derive(Debug, Default)]
struct Node {
    /// Its names, the most recently used first.
    links: Vec<Link>,
    lookups: u64,
}

/// Inode number → names, and each directory's names → inode numbers.
#[derive(Debug)]
pub(crate) struct Nodes {
    nodes: HashMap<u64, Node, RandomState>,
    /// Directory inode → its entries known to the kernel.
    children: HashMap<u64, HashMap<OsString, u64, RandomState>, RandomState>,
}

impl Default for Nodes {
    fn default() -> Nodes {
        Nodes::new()
    }
}

impl Nodes {
    /// A table holding the root.
    pub(crate) fn new() -> Nodes {
        let mut nodes = HashMap::default();
        nodes.insert(
            ROOT_INO,
            Node {
                links: Vec::new(),
                lookups: 1,
            },
        );
        Nodes {
            nodes,
            children: HashMap::default(),
        }
    }

    /// The most recently used name of `ino` (`None` for the root and for
    /// inodes the table does not hold).
    pub(crate) fn link(&self, ino: u64) -> Option<Link> {
        self.nodes.get(&ino).and_then(|n| n.links.first().cloned())
    }

    /// The inode known as `name` in directory `parent`.
    pub(crate) fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    /// Records a kernel lookup of `ino` as `name` in `parent`.
    pub(crate) fn looked_up(&mut self, ino: u64, parent: u64, name: &OsStr) {
        let known = self.child(parent, name);
        if known == Some(ino) {
            // Known under this name (a walk listing it again): count it.
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.lookups += 1;
                if let Some(i) = n.links.iter().position(|l| l.is(parent, name)) {
                    n.links[..=i].rotate_right(1);
                    return;
                }
                n.links.insert(0, Link::new(parent, name));
                return;
            }
        }
        if let Some(old) = known {
            // The name now belongs to another inode.
            self.drop_link_of(old, parent, name);
        }
        self.children
            .entry(parent)
            .or_default()
            .insert(name.to_os_string(), ino);
        let n = self.nodes.entry(ino).or_default();
        n.lookups += 1;
        if let Some(i) = n.links.iter().position(|l| l.is(parent, name)) {
            n.links[..=i].rotate_right(1);
        } else {
            n.links.insert(0, Link::new(parent, name));
        }
    }

    fn drop_link_of(&mut self, ino: u64, parent: u64, name: &OsStr) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.links.retain(|l| !l.is(parent, name));
        }
    }

    /// The kernel forgot `count` lookups of `ino`; true when that was the
    /// last and `ino` is gone from the table.
    pub(crate) fn forget(&mut self, ino: u64, count: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let Some(n) = self.nodes.get_mut(&ino) else {
            return false;
        };
        n.lookups = n.lookups.saturating_sub(count);
        if n.lookups > 0 {
            return false;
        }
        if let Some(n) = self.nodes.remove(&ino) {
            for l in n.links {
                if let Some(c) = self.children.get_mut(&l.parent) {
                    if c.get(&l.name) == Some(&ino) {
                        c.remove(&l.name);
                    }
                    if c.is_empty() {
                        self.children.remove(&l.parent);
                    }
                }
            }
        }
        true
    }

    /// `name` in `parent` no longer exists (unlink, rmdir, replaced by a
    /// rename); answers the inode it named.
    pub(crate) fn remove(&mut self, parent: u64, name: &OsStr) -> Option<u64> {
        let c = self.children.get_mut(&parent)?;
        let ino = c.remove(name)?;
        if c.is_empty() {
            self.children.remove(&parent);
        }
        self.drop_link_of(ino, parent, name);
        Some(ino)
    }

    /// `name` in `parent` was renamed to `new_name` in `new_parent`
    /// (replacing whatever was there).
    pub(crate) fn rename(&mut self, parent: u64, name: &OsStr, new_parent: u64, new_name: &OsStr) {
        if parent == new_parent && name == new_name {
            return;
        }
        self.remove(new_parent, new_name);
        let Some(ino) = self.remove(parent, name) else {
            return;
        };
        self.children
            .entry(new_parent)
            .or_default()
            .insert(new_name.to_os_string(), ino);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.links.insert(0, Link::new(new_parent, new_name));
        }
    }

    /// `a` and `b` were exchanged (`RENAME_EXCHANGE`): each name now
    /// holds what the other held.
    pub(crate) fn exchange(&mut self, a: (u64, &OsStr), b: (u64, &OsStr)) {
        let (ia, ib) = (self.remove(a.0, a.1), self.remove(b.0, b.1));
        for (ino, (parent, name)) in [(ia, b), (ib, a)] {
            let Some(ino) = ino else { continue };
            self.children
                .entry(parent)
                .or_default()
                .insert(name.to_os_string(), ino);
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.links.insert(0, Link::new(parent, name));
            }
        }
    }
}

impl Link {
    fn new(parent: u64, name: &OsStr) -> Link {
        Link {
            parent,
            name: name.to_os_string(),
        }
    }

    fn is(&self, parent: u64, name: &OsStr) -> bool {
        self.parent == parent && self.name == name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(parent: u64, name: &str) -> Option<Link> {
        Some(Link::new(parent, OsStr::new(name)))
    }

    #[test]
    fn lookups_renames_and_forgets() {
        let mut t = Nodes::new();
        let n = OsStr::new;
        t.looked_up(5, ROOT_INO, n("a"));
        t.looked_up(6, 5, n("b"));
        t.looked_up(7, ROOT_INO, n("ab"));
        // A directory's rename moves one name; what is below follows.
        t.rename(ROOT_INO, n("a"), ROOT_INO, n("z"));
        assert_eq!(t.link(5), l(ROOT_INO, "z"));
        assert_eq!(t.link(6), l(5, "b"));
        assert_eq!(t.child(ROOT_INO, n("z")), Some(5));
        assert_eq!(t.child(ROOT_INO, n("a")), None);
        // A second hard link, used last, comes first until removed.
        t.looked_up(7, 5, n("hard"));
        assert_eq!(t.link(7), l(5, "hard"));
        assert_eq!(t.remove(5, n("hard")), Some(7));
        assert_eq!(t.link(7), l(ROOT_INO, "ab"));
        t.rename(ROOT_INO, n("ab"), ROOT_INO, n("ac"));
        assert_eq!(t.link(7), l(ROOT_INO, "ac"));
        assert!(!t.forget(7, 1), "one lookup of two left");
        assert!(t.forget(7, 1), "the last lookup forgotten");
        assert!(t.link(7).is_none());
        assert_eq!(t.child(ROOT_INO, n("ac")), None);
        t.looked_up(7, ROOT_INO, n("ac"));
        t.looked_up(8, ROOT_INO, n("d"));
        t.looked_up(9, 8, n("x"));
        t.exchange((ROOT_INO, n("ac")), (ROOT_INO, n("d")));
        assert_eq!(t.link(7), l(ROOT_INO, "d"));
        assert_eq!(t.link(8), l(ROOT_INO, "ac"));
        assert_eq!(t.link(9), l(8, "x"));
        // A rename over an existing name drops the replaced inode's name.
        t.rename(ROOT_INO, n("d"), ROOT_INO, n("ac"));
        assert_eq!(t.link(7), l(ROOT_INO, "ac"));
        assert!(t.link(8).is_none());
        assert!(!t.forget(ROOT_INO, 10));
        assert!(t.nodes.contains_key(&ROOT_INO));
    }

    #[test]
    fn a_name_taken_over_by_another_inode_leaves_the_old_one() {
        let mut t = Nodes::new();
        let n = OsStr::new;
        t.looked_up(5, ROOT_INO, n("f"));
        t.looked_up(6, ROOT_INO, n("f"));
        assert!(t.link(5).is_none());
        assert_eq!(t.child(ROOT_INO, n("f")), Some(6));
        assert!(t.forget(5, 1));
        assert_eq!(t.child(ROOT_INO, n("f")), Some(6));
    }
}
