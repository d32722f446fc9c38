//! Man pages: clap_mangen's page for a program and each of its subcommands, followed by the
//! sections a command line cannot say (FILES, SEE ALSO), which name the installed paths.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

/// A program's manual: its page and its subcommands' pages.
pub struct Page {
    command: clap::Command,
    section: &'static str,
    doc_dir: PathBuf,
}

impl Page {
    /// `section`: "1" for user commands, "8" for daemons.
    pub fn new(command: clap::Command, section: &'static str, doc_dir: &Path) -> Self {
        // The help subcommand needs no page: `--help` says the same.
        let mut command = command.disable_help_subcommand(true);
        // Building names the subcommands `gpudctl-status` etc., as their pages are named.
        command.build();
        Self {
            command,
            section,
            doc_dir: doc_dir.to_owned(),
        }
    }

    /// Every page as (file name, roff text): the program's, then one per visible subcommand.
    pub fn render_all(&self) -> Result<Vec<(String, String)>> {
        let mut pages = vec![self.render(&self.command, self.top_sections())?];
        for sub in self.command.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages.push(self.render(sub, self.subcommand_sections())?);
        }
        Ok(pages)
    }

    fn render(&self, command: &clap::Command, extra: Roff) -> Result<(String, String)> {
        let version = self.command.get_version().unwrap_or_default();
        let man = Man::new(command.clone())
            .section(self.section)
            .source(format!("gpud {version}"))
            .manual("gpud manual");
        let name = man.get_filename();
        let mut text = Vec::new();
        man.render(&mut text)
            .with_context(|| format!("render {name}"))?;
        let mut text = String::from_utf8(text).context("clap_mangen wrote non-UTF-8")?;
        text.push_str(&without_preamble(&extra));
        Ok((name, text))
    }

    /// FILES and SEE ALSO of a program's own page.
    fn top_sections(&self) -> Roff {
        let docs = self.doc_dir.display().to_string();
        let mut roff = Roff::new();
        roff.control("SH", ["FILES"]);
        if self.command.get_name() == "gpud" {
            entry(
                &mut roff,
                gpud::config::DEFAULT_CONFIG_PATH,
                "The configuration, read at start and on SIGHUP; the installed file lists \
                 every key with its default.",
            );
            entry(
                &mut roff,
                "/var/lib/gpud",
                "The lease journal of the gpud service (StateDirectory= in gpud.service).",
            );
        }
        entry(
            &mut roff,
            gpud_client::DEFAULT_SOCKET,
            "The client socket: gpud.socket listens on it, members of the gpud group may \
             connect.",
        );
        entry(
            &mut roff,
            &docs,
            "The documentation: README.md (installing and operating gpud), docs/PROTOCOL.md \
             (the protocol, and the fields of the JSON that gpudctl prints), docs/METRICS.md \
             (the metrics), docs/DBUS.md (the D-Bus interface), docs/INTEGRATION.md (using \
             gpud from programs).",
        );
        roff.control("SH", ["SEE ALSO"]);
        let others: &[&str] = if self.command.get_name() == "gpud" {
            &["gpudctl(1)", "systemd.socket(5)", "systemd-sysusers(8)"]
        } else {
            &["gpud(8)"]
        };
        roff.text([roman(others.join(", "))]);
        roff
    }

    /// SEE ALSO of a subcommand's page: the program's page.
    fn subcommand_sections(&self) -> Roff {
        let mut roff = Roff::new();
        roff.control("SH", ["SEE ALSO"]);
        roff.text([roman(format!(
            "{}({}), and FILES there for the documentation.",
            self.command.get_name(),
            self.section
        ))]);
        roff
    }
}

/// One `.TP` entry: the path in bold, then what it is.
fn entry(roff: &mut Roff, path: &str, what: &str) {
    roff.control("TP", []);
    roff.text([bold(path)]);
    roff.text([roman(what)]);
}

/// The sections' roff without the apostrophe preamble that every rendering starts with
/// (the page clap_mangen wrote has it already).
fn without_preamble(roff: &Roff) -> String {
    let preamble = Roff::new().render();
    let text = roff.render();
    text.strip_prefix(&preamble).unwrap_or(&text).to_owned()
}
