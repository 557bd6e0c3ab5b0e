//! Temporary directories for tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory, removed with everything in it on drop (errors are
/// ignored; nothing is unmounted: tests unmount through their own guards,
/// which drop before the directory does).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory `ck-TAG-PID-N` under [`std::env::temp_dir`].
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    /// A new directory `ck-TAG-PID-N` under `base`.
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = base.join(format!(
            "ck-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory (not created).
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The subdirectory `name`, created if missing.
    pub fn sub(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::TempDir;

    #[test]
    fn distinct_and_removed_on_drop() {
        let a = TempDir::new("kit");
        let b = TempDir::new("kit");
        assert_ne!(a.path(), b.path());
        let sub = a.sub("x/y");
        std::fs::write(sub.join("f"), b"1").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        assert!(b.path().is_dir());
    }
}
