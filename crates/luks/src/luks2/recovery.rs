//! Choosing between the two LUKS2 metadata copies (cryptsetup
//! `LUKS2_disk_hdr_read`): both are checked; the valid copy with the higher
//! seqid wins; a damaged or stale copy is reported as a notice and rewritten
//! by the next header write (we never write while loading).

use super::binary_header::HDR_SIZES;
use super::disk::{read_binary, read_copy, Copy};
use crate::error::Error;
use crate::io::BlockIo;

/// The chosen copy, the other copy's salt (kept for rewriting), and notices.
pub struct Chosen {
    /// The copy in force.
    pub copy: Copy,
    /// Salt of the other copy, if its binary header was readable.
    pub other_salt: Option<[u8; 64]>,
    /// Human-readable notes about damaged or stale copies.
    pub notices: Vec<String>,
}

/// Load both copies and choose.
pub fn load(io: &dyn BlockIo) -> Result<Chosen, Error> {
    const P: &str = "primary LUKS2 header";
    const S: &str = "secondary LUKS2 header";
    let bin1 = read_binary(io, 0, false, P);
    let primary = match &bin1 {
        Ok(b) => read_copy(io, b.clone(), P),
        Err(e) => Err(clone_err(e)),
    };
    // Where to look for the secondary: after a sane primary, or at every
    // allowed offset.
    let offsets: Vec<u64> = match &bin1 {
        Ok(b) => vec![b.hdr_size],
        Err(_) => HDR_SIZES.to_vec(),
    };
    let mut secondary = Err(Error::NotLuks);
    let mut bin2_salt = None;
    let scanning = bin1.is_err();
    for off in offsets {
        match read_binary(io, off, true, S) {
            Ok(b) => {
                bin2_salt = Some(b.salt);
                secondary = read_copy(io, b, S);
                break;
            }
            Err(_) if scanning => {}
            Err(e) => secondary = Err(e),
        }
    }
    let salt1 = bin1.as_ref().ok().map(|b| b.salt);
    let mut notices = Vec::new();
    match (primary, secondary) {
        (Ok(p), Ok(s)) => {
            if p.bin.seqid >= s.bin.seqid {
                if p.bin.seqid > s.bin.seqid {
                    notices.push(format!(
                        "secondary LUKS2 header is stale (seqid {} < {}); it will be rewritten on the next header update",
                        s.bin.seqid, p.bin.seqid
                    ));
                }
                Ok(Chosen {
                    copy: p,
                    other_salt: Some(s.bin.salt),
                    notices,
                })
            } else {
                notices.push(format!(
                    "primary LUKS2 header is stale (seqid {} < {}); using the secondary copy at offset {}; \
                     the primary will be rewritten on the next header update",
                    p.bin.seqid, s.bin.seqid, s.bin.hdr_offset
                ));
                Ok(Chosen {
                    copy: s,
                    other_salt: Some(p.bin.salt),
                    notices,
                })
            }
        }
        (Ok(p), Err(e)) => {
            notices.push(format!(
                "secondary LUKS2 header is corrupt ({e}); using the primary; \
                 the secondary will be rewritten on the next header update"
            ));
            Ok(Chosen {
                copy: p,
                other_salt: bin2_salt,
                notices,
            })
        }
        (Err(e), Ok(s)) => {
            notices.push(format!(
                "primary header corrupt ({e}), recovered from the secondary copy at offset {}; \
                 the primary will be rewritten on the next header update",
                s.bin.hdr_offset
            ));
            Ok(Chosen {
                copy: s,
                other_salt: salt1,
                notices,
            })
        }
        (Err(e1), Err(e2)) => Err(match (e1, e2) {
            (Error::NotLuks, Error::NotLuks) => Error::NotLuks,
            (Error::NotLuks, e) | (e, _) => e,
        }),
    }
}

fn clone_err(e: &Error) -> Error {
    match e {
        Error::NotLuks => Error::NotLuks,
        Error::BadHeader { what } => Error::BadHeader { what: what.clone() },
        other => crate::error::bad(other.to_string()),
    }
}
