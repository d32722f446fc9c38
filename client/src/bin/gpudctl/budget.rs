//! `gpudctl budget`: jobs' shares of devices, which the jobs' processes lease from.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use gpud_client::proto::{
    BudgetArgs, BudgetInfo, Bytes, Class, EndBudgetArgs, Placement, parse_duration, parse_size,
};
use gpud_client::{BUDGET_ENV, Client, LeaseId};

#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Reserve a job's share of a device; waits until it fits. Needs admin rights.
    Create {
        /// The job it is for (a scheduler's job id).
        #[arg(long)]
        job: String,
        /// The uid whose processes may lease from it.
        #[arg(long)]
        uid: u32,
        /// Device memory it reserves (e.g. 8GiB).
        #[arg(long, value_parser = parse_size, default_value = "0")]
        vram: u64,
        /// Compute slots its leases may hold at once.
        #[arg(long, default_value_t = 0)]
        compute_slots: u32,
        /// The class of every lease inside it.
        #[arg(long, default_value = "normal")]
        class: Class,
        /// Device index or UUID; any device by default.
        #[arg(long, default_value = "any")]
        device: Placement,
        /// Processes in this cgroup lease from it without naming it.
        #[arg(long)]
        cgroup: Option<String>,
        /// Give up waiting after this long.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Print the budget as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a budget, or every budget of a job: what is inside is revoked. Needs admin rights.
    End {
        /// The budget's id.
        #[arg(required_unless_present = "job", conflicts_with = "job")]
        budget: Option<LeaseId>,
        /// Every budget of this job (none is not an error).
        #[arg(long)]
        job: Option<String>,
    },
    /// The budgets.
    List {
        /// Only this job's.
        #[arg(long)]
        job: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Shell `export` lines that make a job's processes lease from its budget.
    Env {
        /// The job.
        #[arg(long)]
        job: String,
    },
}

pub async fn run(client: &Client, command: BudgetCommand, socket: &std::path::Path) -> Result<()> {
    match command {
        BudgetCommand::Create {
            job,
            uid,
            vram,
            compute_slots,
            class,
            device,
            cgroup,
            timeout,
            json,
        } => {
            let args = BudgetArgs {
                device,
                vram_bytes: vram,
                compute_slots,
                class,
                job: job.clone(),
                uid,
                cgroup,
                timeout_ms: timeout.map(|t| t.as_millis().min(u128::from(u64::MAX)) as u64),
            };
            let budget = client
                .create_budget(args)
                .await
                .with_context(|| format!("create a budget for job {job}"))?;
            if json {
                crate::say(&format!("{}\n", serde_json::to_string_pretty(&budget)?));
            } else {
                crate::say(&format!("{}\n", describe(&budget)));
            }
        }
        BudgetCommand::End { budget, job } => {
            let what = match (&budget, &job) {
                (Some(id), _) => format!("budget {id}"),
                (None, Some(job)) => format!("the budgets of job {job}"),
                (None, None) => bail!("name a budget or --job"),
            };
            client
                .end_budget(EndBudgetArgs { budget, job })
                .await
                .with_context(|| format!("end {what}"))?;
            crate::say(&format!("ended {what}\n"));
        }
        BudgetCommand::List { job, json } => {
            let budgets = client.budgets(job).await.context("list budgets")?;
            if json {
                crate::say(&format!("{}\n", serde_json::to_string_pretty(&budgets)?));
            } else if budgets.is_empty() {
                crate::say("no budgets\n");
            } else {
                let lines: Vec<String> = budgets.iter().map(describe).collect();
                crate::say(&format!("{}\n", lines.join("\n")));
            }
        }
        BudgetCommand::Env { job } => {
            let budgets = client
                .budgets(Some(job.clone()))
                .await
                .context("list budgets")?;
            crate::say(&env_lines(&job, &budgets, socket)?);
        }
    }
    Ok(())
}

/// One line about a budget.
pub fn describe(b: &BudgetInfo) -> String {
    format!(
        "budget {} job {} uid {} device {} {}: {} of {} used, compute {}/{}, {} leases, {} waiting",
        b.budget,
        b.job,
        b.uid,
        b.device_index,
        b.class.as_str(),
        Bytes(b.used_bytes),
        Bytes(b.vram_bytes),
        b.compute_used,
        b.compute_slots,
        b.leases.len(),
        b.waiting
    )
}

/// The environment of a job's processes: its budget's handle, its device, the socket.
pub fn env_lines(job: &str, budgets: &[BudgetInfo], socket: &std::path::Path) -> Result<String> {
    let Some(budget) = budgets.first() else {
        // A job without a budget leases from the devices as any process does.
        return Ok(String::new());
    };
    let Some(handle) = &budget.handle else {
        bail!(
            "budget {} of job {job} belongs to uid {}: only that uid and admins see its handle",
            budget.budget,
            budget.uid
        );
    };
    let devices: Vec<&str> = budgets.iter().map(|b| b.device_uuid.as_str()).collect();
    Ok(format!(
        "export {BUDGET_ENV}={handle}\nexport CUDA_VISIBLE_DEVICES={}\nexport GPUD_SOCKET={}\n",
        devices.join(","),
        socket.display()
    ))
}
