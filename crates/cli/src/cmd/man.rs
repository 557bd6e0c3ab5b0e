//! `cryptkeep __man DIR`: writes one man page per verb, rendered from the
//! clap definitions, as `cryptkeep.1`, `cryptkeep-open.1`,
//! `cryptkeep-fs-mount.1`, ... (hidden verbs left out). `scripts/install.sh`
//! runs it to install the pages; the tests below check that every verb has
//! a page and that docs/guide/fs.md's table lists every flag of `fs`.

use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, CommandFactory};

use crate::exit::{CliError, CliResult};

/// Options of `__man`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The directory to write the pages to (created if missing).
    pub dir: PathBuf,
}

/// Writes the pages and prints the path of each.
pub fn run(a: Args) -> CliResult {
    let shown = a.dir.display().to_string();
    std::fs::create_dir_all(&a.dir)
        .map_err(|e| CliError::io("cannot create the directory", &shown, &e))?;
    for p in write_pages(&a.dir).map_err(|e| CliError::io("cannot write a man page", &shown, &e))? {
        println!("{}", p.display());
    }
    Ok(())
}

/// The command tree as the pages show it: built (so each subcommand knows
/// its full name, `cryptkeep-fs-mount`) and without the `help` verb.
fn command() -> clap::Command {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Every visible command of the tree, the root first.
fn visible(cmd: &clap::Command) -> Vec<clap::Command> {
    let mut out = vec![cmd.clone()];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.extend(visible(sub));
    }
    out
}

/// Renders every visible verb's page into `dir`; the paths written.
fn write_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let version = env!("CARGO_PKG_VERSION");
    visible(&command())
        .into_iter()
        .map(|c| {
            clap_mangen::Man::new(c)
                .manual("cryptkeep manual")
                .source(format!("cryptkeep {version}"))
                .generate_to(dir)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::process::Command;

    fn repo_file(rel: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The long flags of `cmd` (`--help` and `--version` left out).
    fn long_flags(cmd: &clap::Command) -> Vec<String> {
        cmd.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "help" | "version"))
            .map(|l| format!("--{l}"))
            .collect()
    }

    /// Each table row of docs/guide/fs.md is `| verbs | flag | ... |`; every
    /// flag of every `fs` verb must have a row naming that verb, and every
    /// row's flag must exist on the verbs it names.
    #[test]
    fn the_fs_guide_lists_every_flag_of_every_fs_verb() {
        let guide = repo_file("docs/guide/fs.md");
        let fs = command().find_subcommand("fs").unwrap().clone();
        let mut rows = BTreeSet::new();
        for line in guide.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (Some(verbs), Some(flag)) = (cells.get(1), cells.get(2)) else {
                continue;
            };
            let Some(flag) = flag.strip_prefix('`').and_then(|f| f.split('`').next()) else {
                continue;
            };
            let flag = flag.split_whitespace().next().unwrap_or("").to_string();
            if !flag.starts_with("--") {
                continue;
            }
            for verb in verbs.split(',').map(|v| v.trim().trim_matches('`')) {
                rows.insert((verb.to_string(), flag.clone()));
            }
        }
        let mut known = BTreeSet::new();
        let mut missing = Vec::new();
        for verb in fs.get_subcommands() {
            for flag in long_flags(verb) {
                let key = (verb.get_name().to_string(), flag);
                if !rows.contains(&key) {
                    missing.push(format!("fs {} {}", key.0, key.1));
                }
                known.insert(key);
            }
        }
        assert!(
            missing.is_empty(),
            "docs/guide/fs.md's flag table lacks: {missing:?}"
        );
        let stale: Vec<_> = rows.difference(&known).collect();
        assert!(
            stale.is_empty(),
            "docs/guide/fs.md lists flags the verbs do not have: {stale:?}"
        );
    }

    #[test]
    fn every_visible_verb_gets_a_man_page_that_renders() {
        let dir = std::env::temp_dir().join(format!("cryptkeep-man.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = write_pages(&dir).unwrap();
        let have_man = Command::new("man").arg("--version").output().is_ok();
        let mut names = Vec::new();
        for c in visible(&command()) {
            let name = c.get_display_name().unwrap_or(c.get_name()).to_string();
            let page = dir.join(format!("{name}.1"));
            assert!(written.contains(&page), "no page for {name}");
            let text = std::fs::read_to_string(&page).unwrap();
            assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{name}: not roff");
            if have_man {
                let out = Command::new("man")
                    .args(["-l", "-P", "cat"])
                    .arg(&page)
                    .env("MANWIDTH", "80")
                    .output()
                    .unwrap();
                let shown = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success(), "man -l {name}.1 failed");
                assert!(shown.contains("SYNOPSIS"), "{name}.1 renders as: {shown}");
            }
            names.push(name);
        }
        for verb in [
            "cryptkeep",
            "cryptkeep-open",
            "cryptkeep-fs-mount",
            "cryptkeep-keyslot-add",
        ] {
            assert!(names.iter().any(|n| n == verb), "no page {verb}: {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.contains("__")),
            "hidden verbs have pages: {names:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
