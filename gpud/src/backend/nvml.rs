//! NVIDIA devices through NVML: identity, total memory, per-process usage.

use nvml_wrapper::Nvml as NvmlLib;
use nvml_wrapper::enums::device::UsedGpuMemory;

use super::topology::nvlink_islands;
use super::{Backend, BackendError, ProbedDevice, ProcessUsage};
use crate::ledger::Topology;

/// NVLink links a device may have (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

/// The host's NVIDIA GPUs.
pub struct Nvml {
    nvml: NvmlLib,
    devices: Vec<ProbedDevice>,
}

fn nvml_err(call: &'static str) -> impl Fn(nvml_wrapper::error::NvmlError) -> BackendError {
    move |e| BackendError::Nvml {
        call,
        message: e.to_string(),
    }
}

impl Nvml {
    /// Loads NVML and reads every device. Fails plainly when there is no driver.
    pub fn probe() -> Result<Self, BackendError> {
        let nvml = NvmlLib::init().map_err(|e| BackendError::NoNvml(e.to_string()))?;
        let count = nvml
            .device_count()
            .map_err(nvml_err("nvmlDeviceGetCount"))?;
        let mut devices = Vec::new();
        for i in 0..count {
            let d = nvml
                .device_by_index(i)
                .map_err(nvml_err("nvmlDeviceGetHandleByIndex"))?;
            devices.push(ProbedDevice {
                uuid: d.uuid().map_err(nvml_err("nvmlDeviceGetUUID"))?,
                name: d.name().map_err(nvml_err("nvmlDeviceGetName"))?,
                total_bytes: d
                    .memory_info()
                    .map_err(nvml_err("nvmlDeviceGetMemoryInfo"))?
                    .total,
                // Drivers and devices without NUMA affinity or NVLink say so with errors: the
                // topology is then unknown, which only the `near` placement minds.
                topology: Topology {
                    numa_node: d.numa_node_id().ok(),
                    nvlink_island: None,
                },
            });
        }
        let mut own = Vec::with_capacity(devices.len());
        let mut remote = Vec::with_capacity(devices.len());
        for i in 0..count {
            let Ok(d) = nvml.device_by_index(i) else {
                own.push(String::new());
                remote.push(Vec::new());
                continue;
            };
            own.push(d.pci_info().map(|p| p.bus_id).unwrap_or_default());
            let far: Vec<String> = (0..MAX_NVLINKS)
                .map(|l| d.link_wrapper_for(l))
                .filter(|link| link.is_active().unwrap_or(false))
                .filter_map(|link| link.remote_pci_info().ok().map(|p| p.bus_id))
                .collect();
            remote.push(far);
        }
        for (device, island) in devices.iter_mut().zip(nvlink_islands(&own, &remote)) {
            device.topology.nvlink_island = island;
        }
        Ok(Self { nvml, devices })
    }
}

impl Backend for Nvml {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn devices(&self) -> Vec<ProbedDevice> {
        self.devices.clone()
    }

    fn usage(&mut self) -> Result<Vec<Vec<ProcessUsage>>, BackendError> {
        let mut all = Vec::with_capacity(self.devices.len());
        for i in 0..self.devices.len() {
            let d = self
                .nvml
                .device_by_index(i as u32)
                .map_err(nvml_err("nvmlDeviceGetHandleByIndex"))?;
            let mut procs = d
                .running_compute_processes()
                .map_err(nvml_err("nvmlDeviceGetComputeRunningProcesses"))?;
            // Graphics contexts hold memory too; a failure here (no graphics support) is not
            // worth failing the poll for.
            procs.extend(d.running_graphics_processes().unwrap_or_default());
            let mut usage: Vec<ProcessUsage> = Vec::new();
            for p in procs {
                let used = match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => b,
                    UsedGpuMemory::Unavailable => 0,
                };
                match usage.iter_mut().find(|u| u.pid == p.pid) {
                    // A process listed as both compute and graphics: NVML reports its one
                    // allocation twice.
                    Some(u) => u.used_bytes = u.used_bytes.max(used),
                    None => usage.push(ProcessUsage {
                        pid: p.pid,
                        used_bytes: used,
                    }),
                }
            }
            all.push(usage);
        }
        Ok(all)
    }
}
