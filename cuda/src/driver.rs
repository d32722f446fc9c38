//! Finding the driver and the devices, without ever letting cudarc panic on a missing library.

use cudarc::driver::result;

use crate::error::{Error, Result};

/// Whether `libcuda.so.1` can be loaded. cudarc panics on first use when it cannot, so every
/// entry point checks this first.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library by its known names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether `libnvrtc.so.13` can be loaded (the loader's search path, e.g. `LD_LIBRARY_PATH`).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the NVRTC library by its known names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Initializes the driver API, or says cleanly that there is none.
pub(crate) fn init() -> Result<()> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    result::init()?;
    Ok(())
}

/// One visible CUDA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// CUDA ordinal in this process (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// UUID as NVML and gpud write it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// Marketing name.
    pub name: String,
    /// Total device memory in bytes.
    pub total_mem: u64,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
}

impl DeviceInfo {
    /// The NVRTC architecture name for this device, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }
}

/// Formats a CUDA UUID the way NVML does.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let h = hex::encode(bytes);
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Canonical form for comparing UUIDs: lower case, with the `GPU-` prefix.
pub fn normalize_uuid(uuid: &str) -> String {
    let u = uuid.trim().to_ascii_lowercase();
    match u.strip_prefix("gpu-") {
        Some(rest) => format!("GPU-{rest}"),
        None => format!("GPU-{u}"),
    }
}

fn attribute(
    dev: cudarc::driver::sys::CUdevice,
    attr: cudarc::driver::sys::CUdevice_attribute,
) -> Result<i32> {
    // SAFETY: `dev` comes from cuDeviceGet after cuInit; the attribute is a plain query.
    Ok(unsafe { result::device::get_attribute(dev, attr) }?)
}

/// Every visible device.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    init()?;
    let count = result::device::get_count()?;
    let mut out = Vec::with_capacity(count.max(0) as usize);
    for ordinal in 0..count {
        let dev = result::device::get(ordinal)?;
        let uuid = result::device::get_uuid(dev)?;
        let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
        // SAFETY: plain query on a device handle obtained above.
        let total_mem = unsafe { result::device::total_mem(dev) }? as u64;
        out.push(DeviceInfo {
            ordinal: ordinal as usize,
            uuid: format_uuid(&bytes),
            name: result::device::get_name(dev)?,
            total_mem,
            compute_capability: (
                attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            multiprocessors: attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        });
    }
    Ok(out)
}

/// The device with this UUID (the lease's; the index is only a hint).
pub fn find_device(uuid: &str) -> Result<DeviceInfo> {
    let want = normalize_uuid(uuid);
    list_devices()?
        .into_iter()
        .find(|d| normalize_uuid(&d.uuid) == want)
        .ok_or(Error::DeviceNotFound {
            uuid: uuid.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_format_like_nvml_and_compare_loosely() {
        let b: [u8; 16] = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        let s = format_uuid(&b);
        assert_eq!(s, "GPU-12345678-9abc-def0-0123-456789abcdef");
        assert_eq!(
            normalize_uuid("gpu-12345678-9ABC-def0-0123-456789abcdef"),
            s
        );
        assert_eq!(normalize_uuid("12345678-9abc-def0-0123-456789abcdef"), s);
    }

    #[test]
    fn a_missing_driver_is_an_error_not_a_panic() {
        // On machines without libcuda this must be NoDriver; with one, listing must work.
        match list_devices() {
            Err(Error::NoDriver) => assert!(!driver_present()),
            Ok(_) => assert!(driver_present()),
            Err(e) => assert!(driver_present(), "unexpected error without a driver: {e}"),
        }
        if !driver_present() {
            assert!(matches!(find_device("GPU-0"), Err(Error::NoDriver)));
        }
    }
}
