//! Library and ABI versions.

use std::ffi::c_char;

/// The library's major version.
pub const DP_VERSION_MAJOR: u32 = 0;
/// The library's minor version.
pub const DP_VERSION_MINOR: u32 = 1;
/// The library's patch version.
pub const DP_VERSION_PATCH: u32 = 0;
/// The plugin ABI's major version: plugins of another major are refused.
pub const DP_ABI_VERSION_MAJOR: u32 = 1;
/// The plugin ABI's minor version: plugins built against a newer minor are refused.
pub const DP_ABI_VERSION_MINOR: u32 = 5;

/// The library version, `major << 16 | minor << 8 | patch`; equals the `DP_VERSION_*` macros
/// of the header the program was built with when the library matches it.
#[no_mangle]
pub extern "C" fn dp_version() -> u32 {
    DP_VERSION_MAJOR << 16 | DP_VERSION_MINOR << 8 | DP_VERSION_PATCH
}

/// The library version as a static string, e.g. `"0.1.0"`.
#[no_mangle]
pub extern "C" fn dp_version_string() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The plugin ABI version the library implements, `major << 16 | minor`.
#[no_mangle]
pub extern "C" fn dp_abi_version() -> u32 {
    DP_ABI_VERSION_MAJOR << 16 | DP_ABI_VERSION_MINOR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_version_is_the_plugin_headers() {
        assert_eq!(DP_ABI_VERSION_MAJOR, devplug_plugin_abi::DPP_ABI_MAJOR);
        assert_eq!(DP_ABI_VERSION_MINOR, devplug_plugin_abi::DPP_ABI_MINOR);
    }

    #[test]
    fn constants_match_the_package_version() {
        let v = format!("{DP_VERSION_MAJOR}.{DP_VERSION_MINOR}.{DP_VERSION_PATCH}");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        // SAFETY: a static NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(dp_version_string()) };
        assert_eq!(s.to_str().unwrap(), v);
    }
}
