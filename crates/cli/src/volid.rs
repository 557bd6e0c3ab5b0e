//! What makes two paths the same volume: the file they open, not their
//! spelling. A regular file is its device and inode (so a hard link, a
//! bind mount or a symlink is the same file); a block device is its device
//! number (`st_rdev`), as the kernel's exclusive open of a block device
//! would see it.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The identity of an image file or block device (in `state.json` as
/// `volume_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeId {
    /// A regular file (or anything else but a block device).
    File {
        /// `st_dev` of the file system holding it.
        dev: u64,
        /// `st_ino`.
        ino: u64,
    },
    /// A block device.
    Block {
        /// Its device number (`st_rdev`).
        rdev: u64,
    },
}

impl VolumeId {
    fn of(m: &std::fs::Metadata) -> VolumeId {
        if m.file_type().is_block_device() {
            VolumeId::Block { rdev: m.rdev() }
        } else {
            VolumeId::File {
                dev: m.dev(),
                ino: m.ino(),
            }
        }
    }

    /// The identity of an open file or device.
    pub fn of_file(f: &File) -> std::io::Result<VolumeId> {
        f.metadata().map(|m| VolumeId::of(&m))
    }

    /// The identity of the file or device `p` names (symlinks followed).
    pub fn of_path(p: &Path) -> std::io::Result<VolumeId> {
        std::fs::metadata(p).map(|m| VolumeId::of(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_the_same_file_and_copies_are_not() {
        let d = std::env::temp_dir().join(format!("ck-volid-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let a = d.join("a");
        std::fs::write(&a, b"x").unwrap();
        std::fs::hard_link(&a, d.join("hard")).unwrap();
        std::os::unix::fs::symlink(&a, d.join("sym")).unwrap();
        std::fs::copy(&a, d.join("copy")).unwrap();
        let id = VolumeId::of_path(&a).unwrap();
        assert_eq!(VolumeId::of_path(&d.join("hard")).unwrap(), id);
        assert_eq!(VolumeId::of_path(&d.join("sym")).unwrap(), id);
        assert_eq!(VolumeId::of_file(&File::open(&a).unwrap()).unwrap(), id);
        assert_ne!(VolumeId::of_path(&d.join("copy")).unwrap(), id);
        let json = serde_json::to_string(&id).unwrap();
        assert!(json.starts_with("{\"file\":{\"dev\":"), "{json}");
        assert_eq!(serde_json::from_str::<VolumeId>(&json).unwrap(), id);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
