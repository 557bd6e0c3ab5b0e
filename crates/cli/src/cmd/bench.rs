//! `cryptkeep bench REPORT…`: the published reports' tables regenerated on
//! this machine (see `cryptkeep_bench` and docs/design/bench.md), and
//! `cryptkeep bench keep`, the keep's own micro-benchmarks.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Subcommand, ValueEnum};
use cryptkeep_bench::{Error, Options, Report};

use crate::cmd::bench_keep;
use crate::exit::{CliError, CliResult, Code};

/// A report on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportName {
    /// The TresorSGX report: dd, hdparm and fio on the block path against a plain loop and the peers.
    Tresor,
    /// The EncFS vs eCryptfs report: six file-system tests and the disk overhead.
    Encfs,
    /// The secGear report: the keep against the host, and the example applications.
    Secgear,
    /// The dm-crypt on i.MX6 report: 100 MB dd per cipher and backend, cipher throughput.
    Caam,
    /// The dm-integrity report: fio on authenticated volumes against dm-crypt's modes.
    Integrity,
    /// Every report above, then an index page.
    All,
}

impl ReportName {
    fn name(self) -> &'static str {
        match self {
            ReportName::Tresor => "tresor",
            ReportName::Encfs => "encfs",
            ReportName::Secgear => "secgear",
            ReportName::Caam => "caam",
            ReportName::Integrity => "integrity",
            ReportName::All => "all",
        }
    }
}

/// Options of `bench`.
#[derive(ClapArgs, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    /// The keep's micro-benchmarks.
    #[command(subcommand)]
    pub keep: Option<BenchCmd>,
    /// The reports to regenerate, in order (`all`: every one).
    #[arg(value_enum, required_unless_present_any = ["render", "side_by_side"])]
    pub reports: Vec<ReportName>,
    /// Write the pages, charts and index of an earlier run's directory again from its data.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["reports", "quick", "reps", "backing"])]
    pub render: Option<PathBuf>,
    /// Print one Markdown page with the figures of earlier runs side by side (a run on a tmpfs beside one on a disk, say).
    #[arg(long, value_name = "RUN_DIR", num_args = 2.., conflicts_with_all = ["reports", "quick", "reps", "backing", "render"])]
    pub side_by_side: Vec<PathBuf>,
    /// Tiny sizes, one repetition: checks that every report runs end to end and has every row.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions of every measurement (default: each report's own).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: Option<u32>,
    /// Measure on the store holding DIR (a disk) instead of a tmpfs.
    #[arg(long, value_name = "DIR")]
    pub backing: Option<PathBuf>,
    /// Where the run's directory (date, time, host) is made.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    pub out: PathBuf,
}

/// `bench keep`.
#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// The keep against the host: create/destroy, calls, SHA-256, AES-GCM, RSA, sector crypto.
    Keep(bench_keep::Args),
}

/// Runs `bench`.
pub fn run(args: Args) -> CliResult {
    if let Some(BenchCmd::Keep(a)) = args.keep {
        return bench_keep::run(a);
    }
    if let Some(dir) = &args.render {
        cryptkeep_bench::render(dir).map_err(|e| to_cli(&e))?;
        println!("{}", dir.join("index.md").display());
        return Ok(());
    }
    if !args.side_by_side.is_empty() {
        let page = cryptkeep_bench::side_by_side(&args.side_by_side).map_err(|e| to_cli(&e))?;
        print!("{page}");
        return Ok(());
    }
    let names: Vec<&str> = args.reports.iter().map(|r| r.name()).collect();
    let reports = Report::parse_list(&names).map_err(|e| to_cli(&e))?;
    if let Some(b) = &args.backing {
        if !b.is_dir() {
            return Err(CliError::new(
                Code::NotFound,
                format!("--backing {} is not a directory", b.display()),
                "bench",
                "give a directory on the disk to measure",
            ));
        }
    }
    let exe = std::env::current_exe().map_err(|e| {
        CliError::new(
            Code::Unexpected,
            format!("cannot find this program's path: {e}"),
            "bench",
            "run cryptkeep by its path",
        )
    })?;
    let opts = Options {
        reports,
        quick: args.quick,
        reps: args.reps,
        backing: args.backing,
        out: args.out,
        exe,
    };
    let dir = cryptkeep_bench::run(&opts).map_err(|e| to_cli(&e))?;
    println!("{}", dir.join("index.md").display());
    Ok(())
}

fn to_cli(e: &Error) -> CliError {
    let (code, hint) = match e {
        Error::UnknownReport(_) => (Code::Usage, "see cryptkeep bench --help"),
        Error::NoScripts(_) => (Code::NotFound, "see the message"),
        Error::Interrupted => (Code::Interrupt, "nothing was left mounted or running"),
        Error::Io { .. } => (Code::NotFound, "check the --out directory"),
        _ => (Code::Unexpected, "see the report's log.txt"),
    };
    CliError::new(code, e.to_string(), "bench", hint)
}
