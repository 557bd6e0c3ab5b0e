//! `cryptkeep integrity format|open|close|dump|verify`: standalone dm-integrity devices
//! (integritysetup's verbs and option names), read without device-mapper.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::{Args as ClapArgs, Subcommand};
use cryptkeep_integrity::{
    read_superblock, BitmapOptions, Device, FormatOptions, Mode, DEFAULT_BUFFER_SECTORS,
};

use super::integrity_args::{failed, AlgArgs};
use crate::exit::{CliError, CliResult, Code};
use crate::passphrase::{confirm, stderr_is_tty};

/// The `integrity` verbs.
#[derive(Subcommand, Debug)]
pub enum IntegrityCmd {
    /// Format a device for integrity tags (integritysetup format).
    Format(FormatArgs),
    /// Serve the device as a loop device; prints it (integritysetup open).
    Open(super::integrity_open::OpenArgs),
    /// Stop serving NAME (integritysetup close; the same as `cryptkeep close`).
    Close(super::close::Args),
    /// What is open, with the blocks that failed their tags (integritysetup
    /// status; the same as `cryptkeep status`).
    Status(super::status::Args),
    /// Print the superblock (integritysetup dump).
    Dump(DumpArgs),
    /// Check every block's tag, replaying the journal in memory; optionally
    /// write the verified data out. Exit 6 on a mismatch.
    Verify(VerifyArgs),
}

/// Options of `integrity format`.
#[derive(ClapArgs, Debug)]
pub struct FormatArgs {
    /// The image file or block device (its whole size).
    pub device: PathBuf,
    #[command(flatten)]
    pub alg: AlgArgs,
    /// Tag bytes per block (default: the algorithm's digest size).
    #[arg(short = 't', long = "tag-size", value_name = "BYTES")]
    pub tag_size: Option<u16>,
    /// Block size: 512, 1024, 2048 or 4096 bytes.
    #[arg(
        short = 's',
        long = "sector-size",
        default_value_t = 512,
        value_name = "BYTES"
    )]
    pub sector_size: u32,
    /// Journal size in bytes (default: 1/128 of the device, at most 64 MiB).
    #[arg(short = 'j', long = "journal-size", value_name = "BYTES")]
    pub journal_size: Option<u64>,
    /// Data sectors between two runs of tags (default 32768).
    #[arg(
        long = "interleave-sectors",
        default_value_t = 0,
        value_name = "SECTORS"
    )]
    pub interleave_sectors: u32,
    /// Do not zero the device: tags stay unset, and a block reads only once written.
    #[arg(long = "no-wipe")]
    pub no_wipe: bool,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Leave the device as the kernel's first bitmap-mode open and close
    /// would (the region size recorded); integritysetup format itself
    /// refuses this option (the kernel does not format in bitmap mode).
    #[arg(short = 'B', long = "integrity-bitmap-mode")]
    pub bitmap_mode: bool,
    /// 512-byte sectors per bitmap bit recorded with --integrity-bitmap-mode.
    #[arg(
        long = "bitmap-sectors-per-bit",
        value_name = "SECTORS",
        requires = "bitmap_mode"
    )]
    pub sectors_per_bit: Option<u64>,
}

/// Options of `integrity dump`.
#[derive(ClapArgs, Debug)]
pub struct DumpArgs {
    /// The image file or block device.
    pub device: PathBuf,
}

/// Options of `integrity verify`.
#[derive(ClapArgs, Debug)]
pub struct VerifyArgs {
    /// The image file or block device.
    pub device: PathBuf,
    #[command(flatten)]
    pub alg: AlgArgs,
    /// The metadata buffer the device was written with (integritysetup
    /// --buffer-sectors).
    #[arg(long = "buffer-sectors", default_value_t = DEFAULT_BUFFER_SECTORS)]
    pub buffer_sectors: u32,
    /// Write the verified data (zeros where a tag did not match) to FILE.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Runs an `integrity` verb.
pub fn run(c: IntegrityCmd) -> CliResult {
    match c {
        IntegrityCmd::Format(a) => format(a),
        IntegrityCmd::Open(a) => super::integrity_open::run(a),
        IntegrityCmd::Close(a) => super::close::run(a),
        IntegrityCmd::Status(a) => super::status::run(a),
        IntegrityCmd::Dump(a) => dump(a),
        IntegrityCmd::Verify(a) => verify(a),
    }
}

fn format(a: FormatArgs) -> CliResult {
    let place = a.device.display().to_string();
    let hash = a.alg.hash(&place)?;
    super::common::refuse_if_open(&a.device, false)?;
    confirm(
        &format!("WARNING!\n========\nThis will overwrite data on {place} irrevocably."),
        &place,
        a.batch_mode,
    )?;
    let mut salt = [0u8; 16];
    cryptkeep_crypto::rand::fill_random(&mut salt)
        .map_err(|e| CliError::new(Code::Unexpected, e.to_string(), &place, "retry"))?;
    let o = FormatOptions {
        hash,
        tag_size: a.tag_size,
        sector_size: a.sector_size,
        journal_bytes: a.journal_size,
        interleave_sectors: a.interleave_sectors,
        wipe: !a.no_wipe,
    };
    let mut sb = cryptkeep_integrity::format(&a.device, &o, salt, &mut wipe_progress())
        .map_err(|e| failed(e, &place))?;
    if a.bitmap_mode {
        let bitmap = BitmapOptions {
            sectors_per_bit: a.sectors_per_bit,
            ..BitmapOptions::default()
        };
        let dev = Device::open_with_bitmap(
            &a.device,
            o.hash.clone(),
            Mode::Bitmap,
            DEFAULT_BUFFER_SECTORS,
            bitmap,
        )
        .map_err(|e| failed(e, &place))?;
        dev.close().map_err(|e| failed(e, &place))?;
        sb = read_superblock(&a.device).map_err(|e| failed(e, &place))?;
    }
    println!(
        "Formatted with tag size {}, internal integrity {}; {} data sectors.",
        sb.tag_size, a.alg.integrity, sb.provided_data_sectors
    );
    Ok(())
}

/// The progress line of a wipe, (blocks done, blocks in all), drawn at
/// most twice a second on a terminal.
pub(crate) fn wipe_progress() -> impl FnMut(u64, u64) {
    let tty = stderr_is_tty();
    let mut last = std::time::Instant::now();
    move |done, all| {
        if tty && (last.elapsed().as_millis() >= 500 || done == all) {
            last = std::time::Instant::now();
            eprint!(
                "\rWiping the device: {done} of {all} blocks ({}%)",
                done * 100 / all.max(1)
            );
            if done == all {
                eprintln!();
            }
        }
    }
}

fn dump(a: DumpArgs) -> CliResult {
    let place = a.device.display().to_string();
    let sb = read_superblock(&a.device).map_err(|e| failed(e, &place))?;
    print!("Info for integrity device {}.\n{}", place, sb.dump());
    Ok(())
}

fn verify(a: VerifyArgs) -> CliResult {
    let place = a.device.display().to_string();
    let hash = a.alg.hash(&place)?;
    let image = Device::open(&a.device, hash, Mode::ReadOnly, a.buffer_sectors)
        .map_err(|e| failed(e, &place))?;
    let mut out = match &a.output {
        Some(p) => Some(BufWriter::new(File::create(p).map_err(|e| {
            CliError::io("cannot create the output", p.display().to_string(), &e)
        })?)),
        None => None,
    };
    let report = image
        .verify(out.as_mut().map(|w| w as &mut dyn Write))
        .map_err(|e| failed(e, &place))?;
    if let Some(mut w) = out {
        w.flush()
            .map_err(|e| CliError::io("cannot write the output", &place, &e))?;
    }
    println!(
        "{} blocks of {} bytes checked ({} from the journal): {} mismatch{}",
        report.blocks,
        image.block_size(),
        report.from_journal,
        report.mismatches.len(),
        if report.mismatches.len() == 1 {
            ""
        } else {
            "es"
        }
    );
    if report.unchecked > 0 {
        println!(
            "{} block(s) in dirty bitmap regions or not yet recalculated, read unchecked ({} with a stale tag): the next read-write open recalculates their tags",
            report.unchecked, report.stale
        );
    }
    if let Some(&first) = report.mismatches.first() {
        let shown: Vec<String> = report
            .mismatches
            .iter()
            .take(10)
            .map(u64::to_string)
            .collect();
        return Err(CliError::new(
            Code::Corrupt,
            format!(
                "{} block(s) fail their integrity tag, first at sector {first} (sectors {}{})",
                report.mismatches.len(),
                shown.join(", "),
                if report.mismatches.len() > 10 {
                    ", …"
                } else {
                    ""
                }
            ),
            place,
            if report.mismatches.len() as u64 == report.blocks {
                "every block fails: check --integrity and its key (as at format time)"
            } else {
                "the data or its tags were changed: restore them from a backup"
            },
        ));
    }
    Ok(())
}
