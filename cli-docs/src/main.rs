//! `gpud-cli-docs`: writes the man pages and shell completions of gpud and gpudctl, rendered
//! from the binaries' own clap definitions, for the installers (scripts/install.sh and the
//! Debian package). They are made at install or package time and never committed.
//!
//! ```text
//! gpud-cli-docs --out DIR [--doc-dir PATH]
//!   DIR/man/gpud.8, DIR/man/gpudctl.1, DIR/man/gpudctl-SUBCOMMAND.1
//!   DIR/completions/bash/{gpud,gpudctl}, DIR/completions/zsh/{_gpud,_gpudctl},
//!   DIR/completions/fish/{gpud,gpudctl}.fish
//! ```

// The binaries' command lines, compiled here from the same files the binaries compile. Each
// is mounted in a module that stands for its binary's crate root, over the binary's source
// directory: a cli.rs refers to the other modules of its binary as `super::NAME`, and a plain
// `mod NAME;` here mounts one beside it.
#[path = "../../gpud/src"]
mod gpud_bin {
    pub mod cli;
}
#[path = "../../client/src/bin/gpudctl"]
mod gpudctl_bin {
    pub mod cli;
    // The exit-code table of --help; the rest of it is for the binary.
    #[allow(dead_code)]
    mod exit;
}
use gpud_bin::cli as gpud_cli;
use gpudctl_bin::cli as gpudctl_cli;

mod completions;
mod manual;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};

use manual::Page;

/// Writes the man pages and shell completions of gpud and gpudctl.
#[derive(Debug, Parser)]
#[command(name = "gpud-cli-docs", version)]
struct Args {
    /// Output directory (made if missing): man/ and completions/{bash,zsh,fish}/ in it.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Where the installed documentation lives (named by the man pages).
    #[arg(long, value_name = "PATH", default_value = "/usr/share/doc/gpud")]
    doc_dir: PathBuf,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let written = write_all(&args.out, &args.doc_dir)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}

/// The two programs: their commands and the man section each belongs in (8: a daemon).
fn programs() -> [(clap::Command, &'static str); 2] {
    [
        (gpud_cli::Args::command(), "8"),
        (gpudctl_cli::Args::command(), "1"),
    ]
}

/// Writes every man page and completion file under `out`; returns their paths.
fn write_all(out: &Path, doc_dir: &Path) -> Result<Vec<PathBuf>> {
    let man_dir = out.join("man");
    std::fs::create_dir_all(&man_dir).with_context(|| format!("create {}", man_dir.display()))?;
    let mut written = Vec::new();
    for (command, section) in programs() {
        for (name, text) in Page::new(command.clone(), section, doc_dir).render_all()? {
            let path = man_dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
            written.push(path);
        }
        written.extend(completions::write(&command, &out.join("completions"))?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_subcommand_of_gpudctl_gets_its_own_page() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), Path::new("/usr/share/doc/gpud")).unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(dir.path().join("man"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        pages.sort();
        let mut expected = vec!["gpud.8".to_owned(), "gpudctl.1".to_owned()];
        for sub in gpudctl_cli::Args::command().get_subcommands() {
            if !sub.is_hide_set() {
                expected.push(format!("gpudctl-{}.1", sub.get_name()));
            }
        }
        expected.sort();
        assert_eq!(pages, expected);
        for shell in [
            "bash/gpudctl",
            "zsh/_gpudctl",
            "fish/gpudctl.fish",
            "bash/gpud",
        ] {
            let path = dir.path().join("completions").join(shell);
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains("gpudctl") || text.contains("gpud"), "{shell}");
        }
    }

    /// Every help text of a command and its arguments, subcommands included.
    fn help_texts(command: &clap::Command, out: &mut Vec<String>) {
        out.extend(command.get_about().map(|t| t.to_string()));
        out.extend(command.get_long_about().map(|t| t.to_string()));
        for arg in command.get_arguments() {
            out.extend(arg.get_help().map(|t| t.to_string()));
            out.extend(arg.get_long_help().map(|t| t.to_string()));
        }
        for sub in command.get_subcommands() {
            help_texts(sub, out);
        }
    }

    /// The repository files that scripts/manifest installs into the documentation directory,
    /// as patterns (`docs/*.md`).
    fn installed_docs() -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifest = std::fs::read_to_string(root.join("scripts/manifest")).unwrap();
        manifest
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() == 5 && f[1] == "file" && f[4].starts_with("{docdir}/"))
            .map(|f| f[3].to_owned())
            .collect()
    }

    fn installed(doc: &str, patterns: &[String]) -> bool {
        patterns.iter().any(|p| match p.split_once('*') {
            Some((head, tail)) => {
                doc.starts_with(head) && doc.ends_with(tail) && !doc[head.len()..].contains('/')
            }
            None => p == doc,
        })
    }

    #[test]
    fn every_document_the_help_names_is_installed() {
        let patterns = installed_docs();
        let mut texts = Vec::new();
        for (command, _) in programs() {
            help_texts(&command, &mut texts);
        }
        let named: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.split(|c: char| c.is_whitespace() || "(),;`".contains(c)))
            .filter(|w| w.ends_with(".md"))
            .collect();
        for doc in &named {
            let doc = doc.trim_end_matches('.');
            assert!(
                installed(doc, &patterns),
                "the help names {doc}, which scripts/manifest does not install ({patterns:?})"
            );
        }
        // The help names documents at all, so the check above checked something.
        assert!(!named.is_empty());
    }

    #[test]
    fn the_pages_say_where_the_documentation_is() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), Path::new("/opt/gpud/share/doc/gpud")).unwrap();
        for page in ["gpud.8", "gpudctl.1"] {
            let text = std::fs::read_to_string(dir.path().join("man").join(page)).unwrap();
            assert!(text.contains("/opt/gpud/share/doc/gpud"), "{page}:\n{text}");
            assert!(text.contains(".SH FILES"), "{page}");
        }
    }

    #[test]
    fn pages_are_named_after_the_programs_not_the_crates() {
        // clap names a derived command after the crate that compiles it; here that would be
        // gpud-cli-docs, so the definitions must name their programs themselves.
        assert_eq!(gpud_cli::Args::command().get_name(), "gpud");
        assert_eq!(gpudctl_cli::Args::command().get_name(), "gpudctl");
        // Nor is their NAME line this crate's description.
        for (command, _) in programs() {
            let about = command
                .get_about()
                .map(|a| a.to_string())
                .unwrap_or_default();
            assert!(!about.is_empty(), "{} has no about", command.get_name());
            assert_ne!(about, env!("CARGO_PKG_DESCRIPTION"));
        }
    }
}
