//! The runtime: the host object owning platforms and devices. There is no process-wide
//! state: two runtimes in one process are independent.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::device::{set_active, Device, PlatformEntry};
use crate::error::{Error, Result};
use crate::host::HostPlatform;
use crate::platform::{validate_name, Platform};
use crate::spec::DeviceSpec;

/// The most logical CPU devices a runtime may have.
pub const MAX_CPU_DEVICES: usize = 64;

/// Options of [`Runtime::new`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Logical devices of the built-in `HOST` platform (1..=64).
    pub cpu_device_count: usize,
    /// Bytes each CPU device may hold; `None` for no limit.
    pub cpu_memory_limit: Option<u64>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            cpu_device_count: 1,
            cpu_memory_limit: None,
        }
    }
}

/// The host object.
pub struct Runtime {
    platforms: RwLock<Vec<Arc<PlatformEntry>>>,
    devices: RwLock<Vec<Arc<Device>>>,
}

impl Runtime {
    pub fn new(options: RuntimeOptions) -> Result<Runtime> {
        if !(1..=MAX_CPU_DEVICES).contains(&options.cpu_device_count) {
            return Err(Error::invalid_argument(format!(
                "cpu_device_count is {}; it must be between 1 and {MAX_CPU_DEVICES}",
                options.cpu_device_count
            )));
        }
        let rt = Runtime {
            platforms: RwLock::new(Vec::new()),
            devices: RwLock::new(Vec::new()),
        };
        rt.register_platform(
            Arc::new(HostPlatform::new(options.cpu_device_count)),
            options.cpu_memory_limit,
        )?;
        Ok(rt)
    }

    /// Registers a platform and creates its devices.
    ///
    /// Refused (nothing registered) when the name is taken, when another platform of the
    /// same device type has the same priority, or when a device cannot be created.
    pub fn register_platform(
        &self,
        platform: Arc<dyn Platform>,
        memory_limit: Option<u64>,
    ) -> Result<()> {
        let info = platform.info().clone();
        validate_name("platform name", &info.name)?;
        validate_name("device type", &info.device_type)?;
        let mut platforms = self.platforms.write();
        for p in platforms.iter() {
            if p.info.name == info.name {
                return Err(Error::already_exists(format!(
                    "platform '{}' is already registered",
                    info.name
                )));
            }
            if p.info.device_type == info.device_type && p.info.priority == info.priority {
                return Err(Error::already_exists(format!(
                    "platform '{}' has device type '{}' and priority {}, the same as platform '{}'; \
                     platforms of one device type need distinct priorities",
                    info.name, info.device_type, info.priority, p.info.name
                )));
            }
        }
        let entry = Arc::new(PlatformEntry {
            info: info.clone(),
            platform: platform.clone(),
            active: AtomicBool::new(false),
        });
        let mut new_devices = Vec::with_capacity(platform.device_count());
        for ordinal in 0..platform.device_count() {
            new_devices.push(Arc::new(Device::new(entry.clone(), ordinal, memory_limit)?));
        }
        platforms.push(entry);
        update_active(&platforms, &info.device_type);
        self.devices.write().extend(new_devices);
        Ok(())
    }

    /// Every device, in platform registration order then by ordinal.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.devices.read().clone()
    }

    pub fn device_count(&self) -> usize {
        self.devices.read().len()
    }

    pub fn device(&self, index: usize) -> Option<Arc<Device>> {
        self.devices.read().get(index).cloned()
    }

    /// The registered platforms, in registration order.
    pub fn platforms(&self) -> Vec<Arc<PlatformEntry>> {
        self.platforms.read().clone()
    }

    /// Resolves a device spec: `TYPE:i` is device i of the active platform of that type;
    /// `PLATFORM:i` is device i of that platform.
    pub fn find_device(&self, spec: &str) -> Result<Arc<Device>> {
        let spec = DeviceSpec::parse(spec)?;
        self.resolve(&spec)
    }

    pub fn resolve(&self, spec: &DeviceSpec) -> Result<Arc<Device>> {
        let platform = {
            let platforms = self.platforms.read();
            platforms
                .iter()
                .find(|p| p.info.device_type == spec.name && p.is_active())
                .or_else(|| platforms.iter().find(|p| p.info.name == spec.name))
                .cloned()
        };
        let Some(platform) = platform else {
            let known: Vec<String> = self
                .platforms
                .read()
                .iter()
                .map(|p| format!("{} (platform {})", p.info.device_type, p.info.name))
                .collect();
            return Err(Error::not_found(format!(
                "no device type or platform named '{}'; known: {}",
                spec.name,
                known.join(", ")
            )));
        };
        self.devices
            .read()
            .iter()
            .find(|d| std::ptr::eq(d.platform(), &*platform) && d.ordinal() == spec.ordinal)
            .cloned()
            .ok_or_else(|| {
                Error::not_found(format!(
                    "device {spec} does not exist: platform {} has {} device(s)",
                    platform.info.name,
                    platform.platform.device_count()
                ))
            })
    }

    /// Waits for all work on all devices.
    pub fn synchronize(&self) -> Result<()> {
        for d in self.devices() {
            d.synchronize()?;
        }
        Ok(())
    }
}

/// Marks the highest-priority platform of `device_type` active and the others not.
fn update_active(platforms: &[Arc<PlatformEntry>], device_type: &str) {
    let best = platforms
        .iter()
        .filter(|p| p.info.device_type == device_type)
        .max_by_key(|p| p.info.priority);
    for p in platforms
        .iter()
        .filter(|p| p.info.device_type == device_type)
    {
        set_active(p, best.is_some_and(|b| Arc::ptr_eq(b, p)));
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.synchronize();
    }
}
