//! Header backups as cryptsetup makes them (`LUKS_hdr_backup`,
//! `LUKS2_hdr_backup`): the header and keyslot areas, [`Luks::header_len`]
//! bytes, zero-padded to a multiple of 4096; restored by copying
//! `header_len` bytes back to offset 0. Both copy in 1 MiB chunks, so a
//! header whose areas are large costs no more memory than a small one.

use zeroize::Zeroizing;

use crate::error::Error;
use crate::io::{self, BlockIo};
use crate::{Luks, LuksVersion};

/// A backup file's length is a multiple of this (cryptsetup rounds it up to
/// the page size).
pub const BACKUP_ALIGN: u64 = 4096;

/// Bytes copied per read/write.
const CHUNK: u64 = 1 << 20;

/// Length of the backup file of `luks`.
pub fn backup_len(luks: &Luks) -> u64 {
    crate::util::round_up(luks.header_len(), BACKUP_ALIGN)
}

/// Copy the header of `luks`, read from `from`, into `to` (a new, empty
/// file): `header_len` bytes, then zeros up to [`backup_len`]. For LUKS1,
/// bytes 592..4096 are zeroed when keyslot 0 starts at 4096, as cryptsetup
/// does "so backup cannot contain old signatures".
pub fn write_backup(luks: &Luks, from: &dyn BlockIo, to: &dyn BlockIo) -> Result<(), Error> {
    let len = luks.header_len();
    copy(from, to, len, "the header", "the header backup")?;
    if let Some(l) = luks.as_luks1() {
        let phdr_len = crate::luks1::header::PHDR_LEN as u64;
        if u64::from(l.phdr.keyslots[0].key_material_offset) * 512 == BACKUP_ALIGN {
            let gap = vec![0u8; (BACKUP_ALIGN - phdr_len) as usize];
            io::write_all(to, &gap, phdr_len, "the header backup")?;
        }
    }
    let pad = backup_len(luks) - len;
    if pad > 0 {
        io::write_all(to, &vec![0u8; pad as usize], len, "the header backup")?;
    }
    io::sync(to, "the header backup")
}

/// Write the header of `backup` (loaded from `from`) over the header area of
/// `to`: `header_len` bytes at offset 0, then sync.
pub fn restore(backup: &Luks, from: &dyn BlockIo, to: &dyn BlockIo) -> Result<(), Error> {
    copy(
        from,
        to,
        backup.header_len(),
        "the header backup",
        "the header",
    )?;
    io::sync(to, "the header")
}

/// Refuses to restore `backup` over `current` when their layouts differ the
/// way cryptsetup checks (`LUKS_hdr_restore`, `LUKS2_hdr_restore`): another
/// data offset, another LUKS1 key size, or another LUKS2 header and keyslot
/// area size. Such a restore would leave the data misread.
pub fn check_compatible(backup: &Luks, current: &Luks) -> Result<(), Error> {
    let mismatch = |what: String| {
        Err(Error::InvalidArgument(format!(
            "{what} differ on the volume and in the backup; this backup is not of this volume's header"
        )))
    };
    if backup.version() != current.version() {
        return mismatch("the LUKS versions".into());
    }
    if backup.data_offset() != current.data_offset() {
        return mismatch(format!(
            "the data offsets ({} and {} bytes)",
            current.data_offset(),
            backup.data_offset()
        ));
    }
    match (backup.as_luks1(), current.as_luks1()) {
        (Some(b), Some(c)) if b.phdr.key_bytes != c.phdr.key_bytes => mismatch(format!(
            "the key sizes ({} and {} bytes)",
            c.phdr.key_bytes, b.phdr.key_bytes
        )),
        _ if backup.version() == LuksVersion::V2 && backup.header_len() != current.header_len() => {
            mismatch(format!(
                "the header and keyslot area sizes ({} and {} bytes)",
                current.header_len(),
                backup.header_len()
            ))
        }
        _ => Ok(()),
    }
}

fn copy(from: &dyn BlockIo, to: &dyn BlockIo, len: u64, src: &str, dst: &str) -> Result<(), Error> {
    let mut buf = Zeroizing::new(vec![0u8; CHUNK.min(len) as usize]);
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK) as usize;
        let chunk = &mut buf[..n];
        from.read_at(chunk, done).map_err(|source| {
            if source.kind() == std::io::ErrorKind::UnexpectedEof {
                crate::error::bad(format!("{src} is truncated: it ends before {len} bytes"))
            } else {
                Error::Io {
                    what: format!("reading {src} ({n} bytes at offset {done})"),
                    source,
                }
            }
        })?;
        io::write_all(to, chunk, done, dst)?;
        done += n as u64;
    }
    Ok(())
}
