//! CUDA: devplug's device plugin for NVIDIA GPUs (`libdevplug_cuda.so`), written with the Rust
//! plugin SDK over cudarc.
//!
//! cudarc opens the driver (`libcuda`), NVRTC and cuBLAS with `dlopen` when first used, so the
//! plugin builds anywhere and loads on machines without CUDA: it then registers its platform
//! with no devices and says why in the log. With a driver, each visible GPU is a device of
//! platform `CUDA` (type `GPU`): memory, copies, streams, events (timed with
//! `cuEventElapsedTime`) and host callbacks in the StreamExecutor's terms ([`CudaDevice`]),
//! and kernels for the basis ops ([`kernels::TABLE`]), compiled at run time by NVRTC for the
//! GPU (and cached on disk), with MatMul on cuBLAS. Without NVRTC or cuBLAS the kernels that
//! need it are not registered, and those ops follow the runtime's fallback order.
//!
//! Load options:
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `platform` | `CUDA` | platform name |
//! | `device_type` | `GPU` | device type |
//! | `priority` | `0` | priority among platforms of the type |
//! | `devices` | all | expose at most this many GPUs (`0`: none) |
//! | `kernels` | `1` | `0`: register no kernels (every op falls back) |
//! | `tf32` | `0` | `1`: f32 MatMul on the tensor cores in TF32 (faster, about 3 decimal digits per product) |
//!
//! Compiled kernels are cached on disk (`DEVPLUG_CUDA_CACHE`, default `~/.cache/devplug/cuda`;
//! `off`: no cache; see `kernels::cache`).

mod blas;
mod callbacks;
mod device;
mod driver;
pub mod kernels;
mod nvrtc;
mod staging;

use devplug_plugin_sdk::{devplug_plugin, Error, Host, LogLevel, Logger, Platform, Result};

pub use device::{CudaDevice, CudaEvent, CudaStream, DeviceOptions};

/// The CUDA platform.
pub struct CudaPlatform {
    name: String,
    device_type: String,
    priority: i32,
    devices: i32,
    options: DeviceOptions,
    logger: Logger,
}

impl Platform for CudaPlatform {
    type Device = CudaDevice;

    fn name(&self) -> &str {
        &self.name
    }

    fn device_type(&self) -> &str {
        &self.device_type
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn vendor(&self) -> Option<&str> {
        Some("NVIDIA")
    }

    fn version(&self) -> Option<&str> {
        Some(env!("CARGO_PKG_VERSION"))
    }

    fn device_count(&self) -> i32 {
        self.devices
    }

    fn create_device(&self, ordinal: i32) -> Result<CudaDevice> {
        CudaDevice::new(&self.name, ordinal, self.options, self.logger.clone())
    }
}

/// What the machine has: GPUs (or why none), NVRTC, cuBLAS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The number of GPUs, or why there are none.
    pub gpus: std::result::Result<i32, String>,
    /// Whether NVRTC can be opened (the `.cu` kernels need it).
    pub nvrtc: bool,
    /// Whether cuBLAS can be opened (MatMul needs it).
    pub cublas: bool,
}

/// Looks for the driver, the GPUs and the libraries, without registering anything.
pub fn probe() -> Probe {
    Probe {
        gpus: driver::probe(),
        nvrtc: driver::nvrtc_present(),
        cublas: driver::cublas_present(),
    }
}

fn flag(host: &Host, key: &str, default: bool) -> Result<bool> {
    match host.option_or::<u8>(key, u8::from(default))? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::invalid_argument(format!(
            "cuda: load option `{key}` must be 0 or 1, not {v}"
        ))),
    }
}

fn init(host: &Host) -> Result<()> {
    let limit: Option<i32> = host.option_parse("devices")?;
    if let Some(n) = limit.filter(|n| !(0..=1024).contains(n)) {
        return Err(Error::invalid_argument(format!(
            "cuda: load option `devices` must be 0 to 1024, not {n}"
        )));
    }
    let with_kernels = flag(host, "kernels", true)?;
    let tf32 = flag(host, "tf32", false)?;
    let priority = host.option_or("priority", 0)?;
    let name = host.option("platform").unwrap_or_else(|| "CUDA".to_owned());
    let device_type = host
        .option("device_type")
        .unwrap_or_else(|| "GPU".to_owned());

    let found = probe();
    let devices = match &found.gpus {
        Ok(n) => limit.map_or(*n, |l| l.min(*n)),
        Err(why) => {
            host.log(LogLevel::Info, format!("cuda: no devices: {why}"));
            0
        }
    };
    host.register_platform(CudaPlatform {
        name: name.clone(),
        device_type: device_type.clone(),
        priority,
        devices,
        options: DeviceOptions { tf32 },
        logger: host.logger(),
    })?;
    let mut kernels = 0;
    if devices > 0 && with_kernels {
        for (lib, present, what) in [
            ("NVRTC (libnvrtc)", found.nvrtc, "every op but MatMul"),
            ("cuBLAS (libcublas)", found.cublas, "MatMul"),
        ] {
            if !present {
                host.log(
                    LogLevel::Warn,
                    format!(
                        "cuda: {lib} was not found: {what} on {name} falls back (placement log)"
                    ),
                );
            }
        }
        kernels = kernels::register(host, &device_type, found.nvrtc, found.cublas)?;
    }
    host.log(
        LogLevel::Info,
        format!(
            "cuda: platform {name} (type {device_type}, priority {priority}): {devices} device(s), {kernels} kernel(s)"
        ),
    );
    Ok(())
}

// Plugin ABI 1.1, the oldest host it needs (kernels): it loads into every devplug host since.
// What later minors added is used only where the host has it: half dtypes from 1.3 (the SDK
// leaves them out of kernels registered with an older host); the executor's `event_elapsed_ns`
// (1.4) sits past the 1.0 table's end, where older hosts do not read.
devplug_plugin!(
    name: "cuda",
    version: env!("CARGO_PKG_VERSION"),
    abi_minor: 1,
    init: init
);
