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
        // The text after --help's options gets a section of its own below, named by its
        // heading, instead of clap_mangen's EXTRA.
        let after_help = after_help_section(command);
        let command = command.clone().after_help(None).after_long_help(None);
        let man = Man::new(command)
            .section(self.section)
            .source(format!("gpud {version}"))
            .manual("gpud manual");
        let name = man.get_filename();
        let mut text = Vec::new();
        man.render(&mut text)
            .with_context(|| format!("render {name}"))?;
        let mut text = String::from_utf8(text).context("clap_mangen wrote non-UTF-8")?;
        if let Some(section) = after_help {
            text.push_str(&without_preamble(&section));
        }
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

/// The text `--help` prints after the options, as a section: a first line such as
/// `Exit status:` names it (EXIT STATUS), else it is NOTES. Its lines are kept as written
/// (no filling), since such text is laid out as a table.
fn after_help_section(command: &clap::Command) -> Option<Roff> {
    let text = command
        .get_after_long_help()
        .or_else(|| command.get_after_help())?
        .to_string();
    let mut lines: Vec<&str> = text.lines().collect();
    let title = match lines.first().and_then(|l| l.trim().strip_suffix(':')) {
        Some(heading) => {
            let title = heading.to_uppercase();
            lines.remove(0);
            title
        }
        None => "NOTES".to_owned(),
    };
    let mut roff = Roff::new();
    roff.control("SH", [title.as_str()]);
    roff.control("nf", []);
    for line in lines {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
    Some(roff)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn page_of(command: clap::Command) -> String {
        let page = Page::new(command, "1", Path::new("/usr/share/doc/gpud"));
        page.render_all().unwrap().remove(0).1
    }

    #[test]
    fn a_headed_after_help_becomes_its_own_section() {
        let text = page_of(
            clap::Command::new("gpudctl")
                .version("1")
                .after_help("Exit status:\n  0  success\n  3  cannot connect"),
        );
        assert!(text.contains(".SH \"EXIT STATUS\"\n.nf\n"), "{text}");
        assert!(text.contains("3  cannot connect"), "{text}");
        assert!(!text.contains("EXTRA"), "{text}");
        assert!(!text.contains("Exit status:"), "{text}");
    }

    #[test]
    fn an_after_help_without_heading_is_notes_and_none_adds_nothing() {
        let text = page_of(clap::Command::new("gpud").after_help("Read the README."));
        assert!(text.contains(".SH NOTES"), "{text}");
        let text = page_of(clap::Command::new("gpud"));
        assert!(
            !text.contains(".SH NOTES") && !text.contains("EXTRA"),
            "{text}"
        );
    }
}
