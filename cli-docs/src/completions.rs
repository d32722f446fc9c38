//! Shell completions (clap_complete) for bash, zsh and fish, named as each shell's completion
//! directory expects: `gpudctl` (bash-completion loads the file named after the command),
//! `_gpudctl` (zsh's fpath), `gpudctl.fish` (fish's vendor_completions.d).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap_complete::Shell;

/// Writes `out/bash/NAME`, `out/zsh/_NAME` and `out/fish/NAME.fish`; returns their paths.
pub fn write(command: &clap::Command, out: &Path) -> Result<Vec<PathBuf>> {
    let name = command.get_name().to_owned();
    let mut written = Vec::new();
    for (shell, dir, file) in [
        (Shell::Bash, "bash", name.clone()),
        (Shell::Zsh, "zsh", format!("_{name}")),
        (Shell::Fish, "fish", format!("{name}.fish")),
    ] {
        let dir = out.join(dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), &name, &mut text);
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
