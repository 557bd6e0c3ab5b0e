//! `cryptkeep`: LUKS1/LUKS2 volumes opened without device-mapper — the
//! decrypted data served as a FUSE file, attached to a loop device.
//! Verbs and option names follow cryptsetup(8); exit codes are the table in
//! [`exit`] and docs/guide/cli.md.

mod cmd;
mod daemon;
mod exit;
mod interrupt;
mod isolate;
mod kdf_time;
mod loopdev;
mod passphrase;
mod procid;
mod rundir;
mod size;
mod state;
mod store;
mod volid;

use clap::{Parser, Subcommand};

// The system allocator, switched to secret memory inside the keep (see
// `cryptkeep_keep::secret_heap`).
cryptkeep_keep::install_secret_heap!();

use cmd::*;

/// cryptkeep: LUKS volumes without device-mapper (FUSE file + loop device).
#[derive(Parser, Debug)]
#[command(name = "cryptkeep", version, propagate_version = true)]
#[command(
    after_help = "Exit codes: 0 ok, 1 wrong parameters, 2 no permission or bad passphrase, \
3 out of memory, 4 wrong device or file (not found, not LUKS, unknown name), \
5 already exists or busy, 6 corrupt or unsupported header, 7 daemon/FUSE/loop failure, 8 unexpected, \
129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM while unlocking.\n\
Run directory: $CRYPTKEEP_RUN_DIR or /run/cryptkeep (root's or yours alone, else exit 2)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a LUKS1/LUKS2 volume (cryptsetup luksFormat).
    #[command(visible_alias = "luksFormat")]
    Format(format::Args),
    /// Unlock a volume and serve it as a loop device; prints the device.
    #[command(visible_alias = "luksOpen")]
    Open(open::Args),
    /// Unmount, detach, stop the daemon and wipe the key.
    #[command(visible_alias = "luksClose")]
    Close(close::Args),
    /// Show open volumes (one NAME, or all).
    Status(status::Args),
    /// Print the LUKS header (cryptsetup luksDump).
    #[command(visible_alias = "luksDump")]
    Dump(dump::Args),
    /// Manage keyslots: add, remove, change, list.
    #[command(subcommand)]
    Keyslot(KeyslotCmd),
    /// Add a passphrase (cryptsetup luksAddKey VOLUME [NEW_KEY_FILE]).
    #[command(name = "luksAddKey")]
    LuksAddKey(keyslot_add::Args),
    /// Remove the keyslot a passphrase opens (cryptsetup luksRemoveKey).
    #[command(name = "luksRemoveKey")]
    LuksRemoveKey(keyslot_remove::Args),
    /// Change a passphrase (cryptsetup luksChangeKey VOLUME [NEW_KEY_FILE]).
    #[command(name = "luksChangeKey")]
    LuksChangeKey(keyslot_change::Args),
    /// Wipe one keyslot (cryptsetup luksKillSlot VOLUME N).
    #[command(name = "luksKillSlot")]
    LuksKillSlot(keyslot_kill::Args),
    /// Back up or restore the LUKS header.
    #[command(subcommand)]
    Header(HeaderCmd),
    /// Back up the header (cryptsetup luksHeaderBackup).
    #[command(name = "luksHeaderBackup")]
    LuksHeaderBackup(header_backup::Args),
    /// Restore the header (cryptsetup luksHeaderRestore).
    #[command(name = "luksHeaderRestore")]
    LuksHeaderRestore(header_restore::Args),
    /// Measure KDFs and ciphers for both crypto backends.
    Benchmark(benchmark::Args),
    /// Exit 0 if VOLUME is a LUKS volume, 4 if not (cryptsetup isLuks).
    #[command(name = "isLuks")]
    IsLuks(isluks::Args),
    /// Standalone dm-integrity devices (integritysetup): format, open, close, dump, verify.
    #[command(subcommand)]
    Integrity(integrity::IntegrityCmd),
    /// gocryptfs-compatible encrypted directories: init, mount, umount, passwd, info, fsck.
    #[command(subcommand)]
    Fs(fs::FsCmd),
    /// The published reports' tables regenerated beside the peers (tresor, encfs, secgear,
    /// caam, integrity, all), or `bench keep`.
    Bench(bench::Args),
    /// The key process (started by open; not for interactive use).
    #[command(name = "__keep", subcommand, hide = true)]
    Keep(keep_serve::KeepCmd),
    /// Write one man page per verb into DIR (used by scripts/install.sh).
    #[command(name = "__man", hide = true)]
    Man(man::Args),
}

#[derive(Subcommand, Debug)]
enum KeyslotCmd {
    /// Add a passphrase in a free keyslot.
    Add(keyslot_add::Args),
    /// Remove a keyslot: the one a passphrase opens, or --key-slot N.
    Remove(keyslot_remove::Args),
    /// Replace a passphrase.
    Change(keyslot_change::Args),
    /// List the keyslots.
    List(keyslot_list::Args),
}

#[derive(Subcommand, Debug)]
enum HeaderCmd {
    /// Copy the header and keyslots area to a file.
    Backup(header_backup::Args),
    /// Write a header backup back onto the volume.
    Restore(header_restore::Args),
}

fn run(cli: Cli) -> exit::CliResult {
    match cli.command {
        Command::Format(a) => isolate::run_isolated(isolate::Writes::Stoppable, || format::run(a)),
        Command::Open(a) => open::run(a),
        Command::Close(a) => close::run(a),
        Command::Status(a) => status::run(a),
        Command::Dump(a) => dump::run(a),
        Command::Keyslot(KeyslotCmd::Add(a)) | Command::LuksAddKey(a) => {
            isolate::run_isolated(isolate::Writes::Whole, || keyslot_add::run(a))
        }
        Command::Keyslot(KeyslotCmd::Remove(a)) | Command::LuksRemoveKey(a) => {
            isolate::run_isolated(isolate::Writes::Whole, || keyslot_remove::run(a))
        }
        Command::Keyslot(KeyslotCmd::Change(a)) | Command::LuksChangeKey(a) => {
            isolate::run_isolated(isolate::Writes::Whole, || keyslot_change::run(a))
        }
        Command::Keyslot(KeyslotCmd::List(a)) => keyslot_list::run(a),
        Command::LuksKillSlot(a) => {
            isolate::run_isolated(isolate::Writes::Whole, || keyslot_kill::run(a))
        }
        Command::Header(HeaderCmd::Backup(a)) | Command::LuksHeaderBackup(a) => {
            header_backup::run(a)
        }
        Command::Header(HeaderCmd::Restore(a)) | Command::LuksHeaderRestore(a) => {
            header_restore::run(a)
        }
        Command::Benchmark(a) => benchmark::run(a),
        Command::IsLuks(a) => isluks::run(a),
        Command::Fs(c) => fs::run(c),
        Command::Integrity(c) => integrity::run(c),
        Command::Keep(c) => keep_serve::run(c),
        Command::Man(a) => man::run(a),
        Command::Bench(a) => bench::run(a),
    }
}

fn main() {
    // Like C tools, end quietly when the reader of stdout goes away
    // (`cryptkeep dump X | head`) instead of panicking in println!.
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is
    // a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind as K;
            let code = match e.kind() {
                K::DisplayHelp | K::DisplayVersion => 0,
                _ => exit::Code::Usage.as_i32(),
            };
            if code == 0 || e.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                std::process::exit(code);
            }
            // Usage errors in the common `cryptkeep: what (where): hint`
            // form, followed by clap's usage lines.
            let text = e.render().to_string();
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            let first = lines.next().unwrap_or("invalid command line");
            let what = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!(
                "cryptkeep: {what} (command line): see cryptkeep --help or cryptkeep VERB --help"
            );
            for l in lines {
                eprintln!("{l}");
            }
            std::process::exit(code);
        }
    };
    let tty = interrupt::TtyState::save();
    if let Err(e) = run(cli) {
        if e.code.is_signal() {
            tty.restore();
        }
        eprintln!("cryptkeep: {e}");
        std::process::exit(e.code.as_i32());
    }
}
