//! `gpudctl slurm`: what Slurm needs from gpud — GRES lines from gpud's capacity, and the
//! prolog, epilog and task prolog that turn a job's allocated GRES into a gpud budget.
//!
//! Slurm places jobs by the counts it is told (`vram` in bytes, `gpucompute` in shares); gpud
//! enforces them inside the host: the prolog (root, on the job's node) creates the job's budget
//! from its allocation, the task prolog (the job's uid) hands its processes the budget's handle,
//! and the epilog ends the budget, which revokes whatever the job still holds.

use std::process::Command;

use anyhow::{Context, Result, bail};
use gpud_client::Client;
use gpud_client::proto::{BudgetArgs, Class, EndBudgetArgs, Placement, StatusReport};

use crate::cli::SlurmCommand;

/// The GRES that counts device memory, in bytes.
const VRAM_GRES: &str = "vram";
/// The GRES that counts shares of the devices' compute interlock.
const COMPUTE_GRES: &str = "gpucompute";

pub async fn run(client: &Client, command: SlurmCommand, socket: &std::path::Path) -> Result<()> {
    match command {
        SlurmCommand::Gres {
            node,
            compute_shares,
        } => {
            let status = client.status().await.context("read gpud's capacity")?;
            let node = match node {
                Some(n) => n,
                None => hostname()?,
            };
            crate::say(&gres(&status, &node, compute_shares));
        }
        SlurmCommand::Prolog { timeout, cgroup } => {
            let job = env("SLURM_JOB_ID")?;
            let uid: u32 = env("SLURM_JOB_UID")?
                .parse()
                .context("SLURM_JOB_UID is not a uid")?;
            let shown = scontrol_show_job(&job)?;
            let alloc = allocation(&shown)
                .with_context(|| format!("job {job}: read its GRES from scontrol"))?;
            let comment = std::env::var("SLURM_JOB_COMMENT").ok();
            let class = class_of(comment.as_deref(), field(&shown, "QOS"));
            if alloc.vram_bytes == 0 && alloc.compute == 0 {
                eprintln!(
                    "gpudctl slurm prolog: job {job} asked no {VRAM_GRES} or {COMPUTE_GRES}: no budget"
                );
                return Ok(());
            }
            let args = BudgetArgs {
                device: Placement::Any,
                vram_bytes: alloc.vram_bytes,
                compute_slots: alloc.compute,
                class,
                job: job.clone(),
                uid,
                cgroup: cgroup.map(|c| c.replace("{uid}", &uid.to_string()).replace("{job}", &job)),
                timeout_ms: Some(timeout.as_millis().min(u128::from(u64::MAX)) as u64),
            };
            let budget = client
                .create_budget(args)
                .await
                .with_context(|| format!("job {job}: create its gpud budget"))?;
            eprintln!("gpudctl slurm prolog: {}", crate::budget::describe(&budget));
        }
        SlurmCommand::Epilog => {
            let job = env("SLURM_JOB_ID")?;
            client
                .end_budget(EndBudgetArgs {
                    budget: None,
                    job: Some(job.clone()),
                })
                .await
                .with_context(|| format!("job {job}: end its gpud budgets"))?;
        }
        SlurmCommand::TaskProlog => {
            let job = env("SLURM_JOB_ID")?;
            let budgets = client
                .budgets(Some(job.clone()))
                .await
                .context("list the job's budgets")?;
            crate::say(&crate::budget::env_lines(&job, &budgets, socket)?);
        }
    }
    Ok(())
}

fn env(name: &str) -> Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: run this from Slurm's prolog or epilog"))
}

fn hostname() -> Result<String> {
    let name =
        std::fs::read_to_string("/proc/sys/kernel/hostname").context("read the host name")?;
    Ok(name.trim().split('.').next().unwrap_or_default().to_owned())
}

fn scontrol_show_job(job: &str) -> Result<String> {
    let scontrol = std::env::var("GPUD_SCONTROL").unwrap_or_else(|_| "scontrol".into());
    let out = Command::new(&scontrol)
        .args(["show", "job", "-o", job])
        .output()
        .with_context(|| format!("run {scontrol}"))?;
    if !out.status.success() {
        bail!(
            "{scontrol} show job {job}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// gres.conf and the node's `Gres=`: all of gpud's capacity as `vram` bytes (gpud picks the
/// device), and `compute_shares` compute shares per device.
pub fn gres(status: &StatusReport, node: &str, compute_shares: u32) -> String {
    let mib: u64 = status.devices.iter().map(|d| d.capacity_bytes >> 20).sum();
    let largest = status
        .devices
        .iter()
        .map(|d| d.capacity_bytes >> 20)
        .max()
        .unwrap_or(0);
    let shares = compute_shares as usize * status.devices.len();
    format!(
        "# gres.conf for {node}, from gpud's capacity ({} devices; the largest holds {largest}M:\n\
         # a job's {VRAM_GRES} must fit one device)\n\
         NodeName={node} Name={VRAM_GRES} Count={mib}M\n\
         NodeName={node} Name={COMPUTE_GRES} Count={shares}\n\
         # slurm.conf: GresTypes={VRAM_GRES},{COMPUTE_GRES}, and on {node}'s NodeName line:\n\
         # Gres={VRAM_GRES}:{mib}M,{COMPUTE_GRES}:{shares}\n",
        status.devices.len()
    )
}

/// What a job was allocated of gpud's GRES on this node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Bytes of `vram`.
    pub vram_bytes: u64,
    /// Shares of `gpucompute`.
    pub compute: u32,
}

/// One `Key=Value` of `scontrol show job -o` (values without spaces).
fn field<'a>(shown: &'a str, key: &str) -> Option<&'a str> {
    shown
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The job's gpud GRES, from `TresPerNode` (`gres:vram:10G,gres:gpucompute:1`; newer Slurm
/// writes `gres/vram:10G`).
pub fn allocation(shown: &str) -> Result<Allocation> {
    let mut alloc = Allocation::default();
    let Some(tres) = field(shown, "TresPerNode") else {
        return Ok(alloc);
    };
    for item in tres.split(',') {
        let Some(gres) = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
        else {
            continue;
        };
        let mut parts = gres.split(':');
        let name = parts.next().unwrap_or_default();
        let count = parts.next_back().unwrap_or_default();
        if name != VRAM_GRES && name != COMPUTE_GRES {
            continue;
        }
        let n = count_of(count).with_context(|| format!("{item}: a count of {count:?}"))?;
        if name == VRAM_GRES {
            alloc.vram_bytes = n;
        } else {
            alloc.compute = u32::try_from(n).with_context(|| format!("{item}: too many shares"))?;
        }
    }
    Ok(alloc)
}

/// A GRES count with Slurm's suffixes (K, M, G, T, P: powers of 1024).
fn count_of(text: &str) -> Result<u64> {
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                _ => bail!("unknown suffix {c:?}"),
            };
            (&text[..i], shift)
        }
        _ => (text, 0),
    };
    let n: u64 = digits.parse().context("not a number")?;
    n.checked_mul(1 << shift).context("too large")
}

/// The job's gpud class: `gpud:CLASS` in its comment wins, else its QOS by name (`critical`,
/// `high`, `normal`; `low`, `background` and `scavenger` are background), else normal.
pub fn class_of(comment: Option<&str>, qos: Option<&str>) -> Class {
    let from_comment = comment.and_then(|c| {
        c.split(|ch: char| ch.is_whitespace() || ch == ',')
            .find_map(|w| w.strip_prefix("gpud:"))
            .and_then(|name| name.parse().ok())
    });
    from_comment.unwrap_or_else(|| match qos.map(str::to_ascii_lowercase).as_deref() {
        Some("critical") => Class::Critical,
        Some("high") => Class::High,
        Some("low" | "background" | "scavenger") => Class::Background,
        _ => Class::Normal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOWN: &str = "JobId=1 JobName=wrap UserId=root(0) QOS=(null) JobState=RUNNING \
        Comment=gpud:critical  StdErr=/tmp/j1.out TresPerNode=gres:vram:10G,gres:gpucompute:1 ";

    #[test]
    fn the_allocation_comes_from_tres_per_node_in_either_spelling() {
        let a = allocation(SHOWN).unwrap();
        assert_eq!(
            a,
            Allocation {
                vram_bytes: 10 << 30,
                compute: 1
            }
        );
        let newer = "JobId=2 TresPerNode=gres/vram:512M,gres/gpu:1";
        assert_eq!(
            allocation(newer).unwrap(),
            Allocation {
                vram_bytes: 512 << 20,
                compute: 0
            }
        );
        assert_eq!(allocation("JobId=3").unwrap(), Allocation::default());
        assert!(allocation("TresPerNode=gres:vram:10Q").is_err());
        assert!(allocation("TresPerNode=gres:vram:99999999999P").is_err());
    }

    #[test]
    fn the_class_comes_from_the_comment_then_the_qos() {
        assert_eq!(
            class_of(Some("gpud:critical"), Some("normal")),
            Class::Critical
        );
        assert_eq!(
            class_of(Some("nightly, gpud:background"), None),
            Class::Background
        );
        assert_eq!(class_of(Some("gpud:bogus"), Some("high")), Class::High);
        assert_eq!(class_of(None, Some("scavenger")), Class::Background);
        assert_eq!(class_of(None, Some("(null)")), Class::Normal);
    }
}
