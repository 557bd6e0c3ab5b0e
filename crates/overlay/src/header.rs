//! The 18-byte header of every non-empty cipher file: big-endian u16
//! version (2) ‖ 16-byte random file ID. An empty file has no header.

use crate::error::{Error, Result};

/// Header length in bytes. Part of the on-disk format.
pub const HEADER_LEN: usize = 18;
/// The version field's value.
pub const HEADER_VERSION: u16 = 2;
/// File ID length in bytes.
pub const FILE_ID_LEN: usize = 16;

/// A file's 128-bit random ID; bound into every block's associated data.
pub type FileId = [u8; FILE_ID_LEN];

/// A parsed file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// The file ID.
    pub id: FileId,
}

impl FileHeader {
    /// A header with a fresh random ID.
    pub fn random() -> Result<FileHeader> {
        let mut id = [0u8; FILE_ID_LEN];
        cryptkeep_crypto::rand::fill_random(&mut id)?;
        Ok(FileHeader { id })
    }

    /// Parses 18 bytes; rejects other lengths, versions other than 2, an
    /// all-zero header and an all-zero file ID (as gocryptfs does).
    pub fn parse(buf: &[u8]) -> Result<FileHeader> {
        let bad = |d: String| Error::BadHeader {
            path: None,
            detail: d,
        };
        if buf.len() != HEADER_LEN {
            return Err(bad(format!("{} bytes, expected {HEADER_LEN}", buf.len())));
        }
        if buf.iter().all(|&b| b == 0) {
            return Err(bad("the header is all zeros".into()));
        }
        let version = u16::from_be_bytes([buf[0], buf[1]]);
        if version != HEADER_VERSION {
            return Err(bad(format!("version {version}, expected {HEADER_VERSION}")));
        }
        let mut id = [0u8; FILE_ID_LEN];
        id.copy_from_slice(&buf[2..]);
        if id == [0u8; FILE_ID_LEN] {
            return Err(bad("the file ID is all zeros".into()));
        }
        Ok(FileHeader { id })
    }

    /// The 18 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..2].copy_from_slice(&HEADER_VERSION.to_be_bytes());
        b[2..].copy_from_slice(&self.id);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changing these changes the on-disk format.
    #[test]
    fn layout_is_pinned() {
        assert_eq!(HEADER_LEN, 18);
        let h = FileHeader { id: [0xab; 16] };
        let b = h.to_bytes();
        assert_eq!(&b[..2], &[0, 2]);
        assert_eq!(FileHeader::parse(&b).unwrap(), h);
    }

    #[test]
    fn bad_headers() {
        assert!(FileHeader::parse(&[0u8; 18]).is_err());
        assert!(FileHeader::parse(&[0u8; 17]).is_err());
        let mut b = [0u8; 18];
        b[1] = 2;
        assert!(FileHeader::parse(&b).is_err()); // zero ID
        b[1] = 1;
        b[5] = 1;
        assert!(FileHeader::parse(&b).is_err()); // version 1
        let r = FileHeader::random().unwrap();
        assert_ne!(r.id, [0u8; 16]);
    }
}
