//! `gpudctl budget`: jobs' shares of devices, which the jobs' processes lease from.

use anyhow::{Context, Result, bail};
use gpud_client::proto::{BudgetArgs, BudgetInfo, Bytes, EndBudgetArgs};
use gpud_client::{BUDGET_ENV, Client};

use crate::cli::BudgetCommand;

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
