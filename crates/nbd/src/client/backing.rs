//! The client where cryptkeep needs it: as the volume engine's
//! [`BackingDevice`] (the data segment's ciphertext) and as the LUKS header
//! code's [`BlockIo`]. Discards become `NBD_CMD_WRITE_ZEROES` (a hole the
//! server may punch, reading back as zeros, as a punched hole in a file does).
//! The allocation map is the server's block status, so an export of a
//! volume whose ciphertext is on NBD shows the holes of the server's store.

use std::io;

use cryptkeep_luks::BlockIo;
use cryptkeep_volume::{BackingDevice, Extent};

use super::Client;

impl BackingDevice for Client {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        Client::read_at(self, buf, pos).map_err(io::Error::from)
    }

    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        Client::write_at(self, buf, pos).map_err(io::Error::from)
    }

    fn discard(&self, pos: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(pos, len).map_err(io::Error::from)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.flush().map_err(io::Error::from)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.size())
    }

    fn allocation(&self, pos: u64, len: u64) -> io::Result<Option<Vec<Extent>>> {
        Client::allocation(self, pos, len).map_err(io::Error::from)
    }
}

impl BlockIo for Client {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if off
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.size())
        {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Client::read_at(self, buf, off).map_err(io::Error::from)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        Client::write_at(self, buf, off).map_err(io::Error::from)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(Client::size(self))
    }

    fn sync(&self) -> io::Result<()> {
        self.flush().map_err(io::Error::from)
    }
}
