//! RSIM: a simulated discrete accelerator written with the devplug Rust plugin SDK
//! (`libdevplug_rust_example.so`).
//!
//! Device memory lives in a host arena per device but is addressed with fake device
//! addresses that the host cannot dereference (the platform is not host-visible). Each
//! stream runs its work in order on its own worker thread, so a missing synchronization
//! shows. Events and host callbacks are stream-ordered. Streams and events are the SDK's
//! (`devplug_plugin_sdk::worker`): RSIM writes only its memory, copies and kernels.
//!
//! Kernels (plugin ABI 1.1): `Add` for f32 and i64 (and f16 from a host of ABI 1.3 or newer),
//! with NumPy broadcasting, bound to RSIM's own platform; it checks its arguments at once and
//! runs on the device's stream worker. `Cast` between every dtype keeps a kernel state (ABI
//! 1.5): the element conversion for its input dtype and `dtype` attribute, picked once per
//! device and pair (per launch from an older host, which keeps no states).
//!
//! Load options:
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `platform` | `RSIM` | platform name |
//! | `device_type` | `NPU` | device type |
//! | `priority` | `0` | priority among platforms of the type |
//! | `devices` | `1` | number of devices |
//! | `memory` | `16M` | bytes of memory per device (`K`, `M`, `G` suffixes: KiB, MiB, GiB) |
//! | `kernels` | `1` | `0`: register no kernels (a device-only plugin) |
//! | `log_kernel_states` | `0` | `1`: log (info) each kernel state made and destroyed, with the number alive per device |
//! | `panic_in_init` | `0` | `1`: panic inside init (the host sees an error, not an abort) |

mod device;
pub mod kernels;
mod memory;

use std::fmt;
use std::str::FromStr;

use devplug_plugin_sdk::{devplug_plugin, Error, Host, Logger, Platform, PlatformFlags, Result};

pub use device::RsimDevice;

/// Default bytes of memory per device.
pub const DEFAULT_MEMORY: u64 = 16 << 20;

/// A byte count with an optional `K`/`M`/`G` (KiB, MiB, GiB) suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<ByteSize, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| {
            "expected a number of bytes, optionally followed by K, M or G".to_owned()
        })?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            other => return Err(format!("unknown unit {other:?} (use K, M or G)")),
        };
        n.checked_mul(scale)
            .map(ByteSize)
            .ok_or_else(|| "too large".to_owned())
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0)
    }
}

/// The RSIM platform.
pub struct RsimPlatform {
    name: String,
    device_type: String,
    priority: i32,
    devices: i32,
    memory: u64,
    log_kernel_states: bool,
    logger: Logger,
}

impl Platform for RsimPlatform {
    type Device = RsimDevice;

    fn name(&self) -> &str {
        &self.name
    }

    fn device_type(&self) -> &str {
        &self.device_type
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn flags(&self) -> PlatformFlags {
        // Device memory is not host memory; the host's suballocator sits on top.
        PlatformFlags::NONE
    }

    fn vendor(&self) -> Option<&str> {
        Some("devplug")
    }

    fn version(&self) -> Option<&str> {
        Some(env!("CARGO_PKG_VERSION"))
    }

    fn device_count(&self) -> i32 {
        self.devices
    }

    fn create_device(&self, ordinal: i32) -> Result<RsimDevice> {
        let dev = RsimDevice::new(&self.name, ordinal, self.memory, self.logger.clone())?
            .log_kernel_states(self.log_kernel_states);
        self.logger.debug(format!(
            "{}:{ordinal}: {} bytes of simulated memory",
            self.name, self.memory
        ));
        Ok(dev)
    }
}

fn init(host: &Host) -> Result<()> {
    if host.option_or("panic_in_init", 0)? == 1 {
        panic!("panic_in_init=1: panicking inside init on purpose");
    }
    let memory = host.option_or("memory", ByteSize(DEFAULT_MEMORY))?.0;
    if memory == 0 {
        return Err(Error::invalid_argument(
            "load option `memory` must be more than 0",
        ));
    }
    let devices: i32 = host.option_or("devices", 1)?;
    if !(0..=1024).contains(&devices) {
        return Err(Error::invalid_argument(format!(
            "load option `devices` must be 0 to 1024, not {devices}"
        )));
    }
    let kernels: u8 = host.option_or("kernels", 1)?;
    let platform = RsimPlatform {
        name: host.option("platform").unwrap_or_else(|| "RSIM".to_owned()),
        device_type: host
            .option("device_type")
            .unwrap_or_else(|| "NPU".to_owned()),
        priority: host.option_or("priority", 0)?,
        devices,
        memory,
        log_kernel_states: host.option_or("log_kernel_states", 0u8)? == 1,
        logger: host.logger(),
    };
    host.log(
        devplug_plugin_sdk::LogLevel::Info,
        format!(
            "rust_example: platform {} (type {}, priority {}): {devices} device(s) of {memory} bytes",
            platform.name, platform.device_type, platform.priority
        ),
    );
    let device_type = platform.device_type.clone();
    host.register_platform(platform)?;
    if kernels != 0 {
        kernels::register(host, &device_type)?;
    }
    Ok(())
}

// RSIM needs kernels (1.1) and nothing newer: it loads into hosts of 1.1 and later (its Cast
// keeps its state in a 1.5 host; from an older one the SDK makes the state for each launch).
devplug_plugin!(
    name: "rust_example",
    version: env!("CARGO_PKG_VERSION"),
    abi_minor: 1,
    init: init
);

#[cfg(test)]
mod tests {
    use super::ByteSize;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!("16M".parse::<ByteSize>(), Ok(ByteSize(16 << 20)));
        assert_eq!(" 4096 ".parse::<ByteSize>(), Ok(ByteSize(4096)));
        assert_eq!("2KiB".parse::<ByteSize>(), Ok(ByteSize(2048)));
        assert_eq!("1g".parse::<ByteSize>(), Ok(ByteSize(1 << 30)));
        assert!("lots".parse::<ByteSize>().is_err());
        assert!("3T".parse::<ByteSize>().is_err());
        assert!("99999999999999999999G".parse::<ByteSize>().is_err());
    }
}
