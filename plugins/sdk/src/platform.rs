//! Platforms: one implementation of devices, registered by the plugin during init.

use std::ops::{BitOr, BitOrAssign};

use devplug_plugin_abi as abi;

use crate::device::Device;
use crate::error::Result;

/// `DPP_PLATFORM_*` capability flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PlatformFlags(u32);

impl PlatformFlags {
    /// No flags: device memory is opaque to the host, which puts its caching suballocator
    /// over `Device::allocate`.
    pub const NONE: PlatformFlags = PlatformFlags(0);
    /// Device memory is host memory: the host may dereference device addresses.
    pub const HOST_VISIBLE: PlatformFlags = PlatformFlags(abi::DPP_PLATFORM_HOST_VISIBLE);
    /// The host must not put its caching suballocator over `Device::allocate`.
    pub const NO_SUBALLOCATOR: PlatformFlags = PlatformFlags(abi::DPP_PLATFORM_NO_SUBALLOCATOR);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits (unknown bits are kept: a newer ABI may define them).
    pub const fn from_bits(bits: u32) -> PlatformFlags {
        PlatformFlags(bits)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: PlatformFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for PlatformFlags {
    type Output = PlatformFlags;
    fn bitor(self, rhs: PlatformFlags) -> PlatformFlags {
        PlatformFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for PlatformFlags {
    fn bitor_assign(&mut self, rhs: PlatformFlags) {
        self.0 |= rhs.0;
    }
}

/// A platform: a named implementation of devices of one device type.
///
/// Register it with [`Host::register_platform`](crate::Host::register_platform) during init.
/// The host reads the description (name … device count) once, at registration. The object
/// is dropped when the host destroys the platform (after its last device).
///
/// `create_device` may be called from any thread, concurrently.
pub trait Platform: Send + Sync + 'static {
    /// The device implementation. One type per platform; a platform with several kinds of
    /// devices uses an enum.
    type Device: Device;

    /// Unique name, `[A-Z][A-Z0-9_]*`, at most 64 characters (e.g. `SIM`). The host
    /// validates it.
    fn name(&self) -> &str;

    /// The device type users place on (`GPU`, `NPU`, …), same pattern.
    fn device_type(&self) -> &str;

    /// Among platforms of one device type, the highest priority is what `TYPE:i` means.
    fn priority(&self) -> i32 {
        0
    }

    /// Capability flags.
    fn flags(&self) -> PlatformFlags {
        PlatformFlags::NONE
    }

    /// Free-form vendor name.
    fn vendor(&self) -> Option<&str> {
        None
    }

    /// Free-form version.
    fn version(&self) -> Option<&str> {
        None
    }

    /// Number of devices, 0 to 1024. Read once, at registration.
    fn device_count(&self) -> i32;

    /// Creates device `ordinal` (the SDK has checked `0 <= ordinal < device_count()`).
    /// Its [`Device::info`] describes it to the host.
    fn create_device(&self, ordinal: i32) -> Result<Self::Device>;
}
