//! Reading and writing one LUKS2 metadata copy (binary header + JSON area),
//! as cryptsetup `hdr_read_disk` / `hdr_write_disk`.

use super::binary_header::{self, BinaryHeader, BIN_LEN};
use super::json::Metadata;
use super::validate::validate;
use crate::error::{bad, Error};
use crate::io::{self, BlockIo};
use crate::util::ct_eq;

/// A metadata copy that passed every check.
#[derive(Clone, Debug)]
pub struct Copy {
    /// Its binary header.
    pub bin: BinaryHeader,
    /// Its metadata.
    pub meta: Metadata,
}

/// Read the binary header at `offset` (no checksum check yet).
pub fn read_binary(
    io: &dyn BlockIo,
    offset: u64,
    secondary: bool,
    what: &str,
) -> Result<BinaryHeader, Error> {
    let mut b = vec![0u8; BIN_LEN];
    io.read_at(&mut b, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            bad(format!(
                "{what} at offset {offset} is truncated (device too small)"
            ))
        } else {
            Error::Io {
                what: format!("reading {what} at offset {offset}"),
                source: e,
            }
        }
    })?;
    BinaryHeader::parse(&b, offset, secondary, what)
}

/// Read and fully verify the copy whose binary header `bin` was read at `bin.hdr_offset`.
pub fn read_copy(io: &dyn BlockIo, bin: BinaryHeader, what: &str) -> Result<Copy, Error> {
    let offset = bin.hdr_offset;
    let json_len = (bin.hdr_size - BIN_LEN as u64) as usize;
    let mut raw = vec![0u8; BIN_LEN];
    let mut area = vec![0u8; json_len];
    let rd = |buf: &mut [u8], off: u64| {
        io.read_at(buf, off).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                bad(format!(
                    "{what} at offset {offset} is truncated (hdr_size {})",
                    bin.hdr_size
                ))
            } else {
                Error::Io {
                    what: format!("reading {what} at offset {off}"),
                    source: e,
                }
            }
        })
    };
    rd(&mut raw, offset)?;
    rd(&mut area, offset + BIN_LEN as u64)?;
    let alg = bin.csum_hash(what)?;
    binary_header::zero_csum(&mut raw);
    let sum = binary_header::checksum(alg, &raw, &area);
    if !ct_eq(&sum, &bin.csum[..sum.len()]) {
        return Err(bad(format!("{what} at offset {offset}: checksum mismatch")));
    }
    let text = json_text(&area).map_err(|e| bad(format!("{what}: {e}")))?;
    let meta = Metadata::parse(text).map_err(|e| prefix(e, what))?;
    validate(&meta, bin.hdr_size).map_err(|e| prefix(e, what))?;
    Ok(Copy { bin, meta })
}

fn prefix(e: Error, what: &str) -> Error {
    match e {
        Error::BadHeader { what: w } => bad(format!("{what}: {w}")),
        other => other,
    }
}

/// The JSON text of an area: starts with `{`, ends at the first NUL, and
/// only NULs follow (cryptsetup `validate_json_area`).
fn json_text(area: &[u8]) -> Result<&[u8], String> {
    if area.first() != Some(&b'{') {
        return Err("JSON area does not start with '{'".into());
    }
    let end = area
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| "JSON area has no terminating NUL".to_string())?;
    if let Some(p) = area[end..].iter().position(|&b| b != 0) {
        return Err(format!(
            "non-zero byte after the JSON text at JSON offset {}",
            end + p
        ));
    }
    Ok(&area[..end])
}

/// One metadata copy encoded for writing: the binary header with its
/// checksum field zeroed, and the checksum to put there.
#[derive(Clone, Debug)]
pub struct EncodedCopy {
    /// Device offset of the copy.
    pub offset: u64,
    /// The 4096-byte binary header, checksum field zeroed.
    pub raw: Vec<u8>,
    /// hash(raw ‖ JSON area).
    pub csum: Vec<u8>,
}

/// Encode one copy without writing anything: every field is checked here
/// (string lengths, checksum algorithm).
pub fn encode_copy(bin: &BinaryHeader, json_area: &[u8], what: &str) -> Result<EncodedCopy, Error> {
    let alg = bin.csum_hash(what)?;
    let raw = bin.to_bytes_without_csum()?;
    let csum = binary_header::checksum(alg, &raw, json_area);
    Ok(EncodedCopy {
        offset: bin.hdr_offset,
        raw,
        csum,
    })
}

/// Write one encoded copy: binary header without checksum, JSON area, then
/// the binary header with its checksum (cryptsetup order), then sync.
pub fn write_encoded_copy(
    io: &dyn BlockIo,
    c: &EncodedCopy,
    json_area: &[u8],
    what: &str,
) -> Result<(), Error> {
    io::write_all(io, &c.raw, c.offset, what)?;
    io::write_all(io, json_area, c.offset + BIN_LEN as u64, what)?;
    let mut raw = c.raw.clone();
    binary_header::set_csum(&mut raw, &c.csum);
    io::write_all(io, &raw, c.offset, what)?;
    io::sync(io, what)
}

/// Serialise `meta` into a zero-padded JSON area of `json_size` bytes.
pub fn json_area(meta: &Metadata, json_size: u64) -> Result<Vec<u8>, Error> {
    let text = meta.to_json()?;
    if text.len() as u64 >= json_size {
        return Err(Error::Unsupported(format!(
            "JSON metadata ({} bytes) does not fit the {json_size}-byte JSON area",
            text.len()
        )));
    }
    let mut area = vec![0u8; json_size as usize];
    area[..text.len()].copy_from_slice(&text);
    Ok(area)
}
