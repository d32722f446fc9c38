//! `gpudctl run --enforce mps`: the program runs as a client of gpud's MPS control daemon, with
//! its lease as the daemon's hard per-device memory limit.
//!
//! CUDA quietly runs a program without MPS when it cannot reach the control daemon, so the
//! program is started only when gpud's welcome offers MPS (its daemon is up); otherwise
//! gpudctl exits with [`exit::ENFORCE_UNAVAILABLE`] and status's reason. A client's limit is
//! fixed when its CUDA context is made: under MPS a lease never grows, an allocation past it
//! fails with out-of-memory.

use anyhow::{Context, Result};
use gpud_client::Client;
use gpud_client::proto::{LeaseInfo, MpsStatus};

use crate::exit::{self, Fail};

/// What the program's environment needs from gpud's status, checked before the lease is asked
/// for (a host without MPS fails at once instead of after the wait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pipe_directory: String,
    log_directory: Option<String>,
}

/// Checks that MPS enforcement can work for this request and on this host: a lease with
/// memory on every device (the limit), and a daemon whose MPS is up now.
pub async fn plan(client: &Client, vram_bytes: u64) -> Result<Plan> {
    if vram_bytes < MIB {
        return Err(Fail::new(
            exit::USAGE,
            "--enforce mps limits the program to its lease's memory on each device: give --vram SIZE (at least 1MiB)",
        )
        .into());
    }
    let status = client.status().await.context("status")?;
    let mps = status
        .enforcement
        .map(|e| e.mps)
        .unwrap_or_else(|| MpsStatus {
            reason: Some("this gpud is older than MPS enforcement".into()),
            ..MpsStatus::default()
        });
    from_status(client.offers_mps(), &mps)
}

/// The plan, or why MPS is not available: the welcome must offer it and status must name
/// the pipe directory.
pub fn from_status(offered: bool, mps: &MpsStatus) -> Result<Plan> {
    let unavailable = |why: &str| -> anyhow::Error {
        Fail::new(
            exit::ENFORCE_UNAVAILABLE,
            format!(
                "MPS is not available on this host: {why}; the program was not started (without MPS it would run with no limit)"
            ),
        )
        .into()
    };
    let reason = mps
        .reason
        .as_deref()
        .unwrap_or("its control daemon is not up");
    if !offered || !mps.available {
        return Err(unavailable(reason));
    }
    let Some(pipe_directory) = mps.pipe_directory.clone() else {
        return Err(unavailable("gpud's status names no pipe directory"));
    };
    Ok(Plan {
        pipe_directory,
        log_directory: mps.log_directory.clone(),
    })
}

/// A lease's devices in the granted order (the order of `CUDA_VISIBLE_DEVICES`), each with the
/// bytes it reserves there.
pub fn lease_devices(info: &LeaseInfo) -> Vec<(String, u64)> {
    if info.parts.is_empty() {
        vec![(info.device_uuid.clone(), info.vram_bytes)]
    } else {
        info.parts
            .iter()
            .map(|p| (p.device_uuid.clone(), p.vram_bytes))
            .collect()
    }
}

impl Plan {
    /// The program's MPS variables: the daemon's directories, its devices by UUID, and each
    /// device's limit by the ordinal CUDA gives it inside the program (its place in
    /// `CUDA_VISIBLE_DEVICES`).
    pub fn environment(&self, devices: &[(String, u64)]) -> Vec<(&'static str, String)> {
        let visible: Vec<&str> = devices.iter().map(|(uuid, _)| uuid.as_str()).collect();
        let limits: Vec<String> = devices
            .iter()
            .enumerate()
            .map(|(ordinal, (_, bytes))| format!("{ordinal}={}", limit(*bytes)))
            .collect();
        let mut env = vec![
            ("CUDA_MPS_PIPE_DIRECTORY", self.pipe_directory.clone()),
            ("CUDA_VISIBLE_DEVICES", visible.join(",")),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limits.join(",")),
        ];
        if let Some(log) = &self.log_directory {
            env.push(("CUDA_MPS_LOG_DIRECTORY", log.clone()));
        }
        env
    }
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A limit as MPS reads it: whole GiB as `NG`, else whole MiB as `NM`, rounded down so that
/// the limit is never above the lease.
fn limit(bytes: u64) -> String {
    if bytes % GIB == 0 {
        format!("{}G", bytes / GIB)
    } else {
        format!("{}M", bytes / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> MpsStatus {
        MpsStatus {
            enabled: true,
            available: true,
            pipe_directory: Some("/run/gpud/mps/pipe".into()),
            log_directory: Some("/run/gpud/mps/log".into()),
            pid: Some(12),
            ..MpsStatus::default()
        }
    }

    #[test]
    fn each_visible_device_gets_its_lease_by_its_ordinal_inside_the_program() {
        let plan = from_status(true, &up()).unwrap();
        let env = plan.environment(&[
            ("GPU-bbbb".into(), 20 << 30),
            ("GPU-aaaa".into(), (9 << 30) + (512 << 20) + 1000),
        ]);
        assert_eq!(
            env,
            [
                ("CUDA_MPS_PIPE_DIRECTORY", "/run/gpud/mps/pipe".to_string()),
                ("CUDA_VISIBLE_DEVICES", "GPU-bbbb,GPU-aaaa".to_string()),
                (
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                    "0=20G,1=9728M".to_string()
                ),
                ("CUDA_MPS_LOG_DIRECTORY", "/run/gpud/mps/log".to_string()),
            ]
        );
    }

    #[test]
    fn a_lease_of_several_devices_lists_its_parts_in_order() {
        let part = |lease, uuid: &str, vram_bytes| gpud_client::proto::LeasePart {
            lease,
            device_index: 0,
            device_uuid: uuid.into(),
            vram_bytes,
            compute: false,
        };
        let info: LeaseInfo = serde_json::from_value(serde_json::json!({
            "lease": 4, "device_uuid": "GPU-b", "device_index": 1, "device_name": "x",
            "vram_bytes": 1024, "compute": false, "class": "normal",
            "cuda_visible_devices": "GPU-b,GPU-a"
        }))
        .unwrap();
        assert_eq!(lease_devices(&info), [("GPU-b".to_string(), 1024)]);
        let info = LeaseInfo {
            parts: vec![part(4, "GPU-b", 1 << 30), part(5, "GPU-a", 2 << 30)],
            ..info
        };
        assert_eq!(
            lease_devices(&info),
            [
                ("GPU-b".to_string(), 1 << 30),
                ("GPU-a".to_string(), 2 << 30)
            ]
        );
    }

    #[test]
    fn without_the_offer_or_a_daemon_that_is_up_the_reason_comes_with_its_own_code() {
        for (offered, mps) in [
            (false, up()),
            (
                true,
                MpsStatus {
                    available: false,
                    reason: Some("nvidia-cuda-mps-control not found in PATH".into()),
                    ..up()
                },
            ),
            (
                false,
                MpsStatus {
                    reason: Some("off in the config ([enforce] mps = false)".into()),
                    ..MpsStatus::default()
                },
            ),
        ] {
            let e = from_status(offered, &mps).unwrap_err();
            assert_eq!(exit::code_of(&e), exit::ENFORCE_UNAVAILABLE);
            let text = e.to_string();
            assert!(text.contains("MPS is not available on this host"), "{text}");
            if let Some(why) = &mps.reason {
                assert!(text.contains(why), "{text}");
            }
        }
    }

    #[test]
    fn limits_are_never_above_the_lease() {
        assert_eq!(limit(10 << 30), "10G");
        assert_eq!(limit((10 << 30) - 1), "10239M");
        assert_eq!(limit(MIB + 5), "1M");
    }
}
