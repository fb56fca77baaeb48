//! Library and ABI versions.

use std::ffi::{c_char, c_int};

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

/// 1 when this library serves a program compiled against header version `major.minor` (pass
/// `DP_VERSION_MAJOR, DP_VERSION_MINOR`), else 0: the same major and a minor at least the
/// header's; while the major is 0, when a new minor may change the API, the same minor.
#[no_mangle]
pub extern "C" fn dp_version_compatible(major: u32, minor: u32) -> c_int {
    let same_api = major == DP_VERSION_MAJOR
        && if major == 0 {
            minor == DP_VERSION_MINOR
        } else {
            minor <= DP_VERSION_MINOR
        };
    c_int::from(same_api)
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
    fn compatible_versions_are_the_same_major_and_minor_while_the_major_is_0() {
        assert_eq!(dp_version_compatible(DP_VERSION_MAJOR, DP_VERSION_MINOR), 1);
        assert_eq!(
            dp_version_compatible(DP_VERSION_MAJOR + 1, DP_VERSION_MINOR),
            0
        );
        assert_eq!(DP_VERSION_MAJOR, 0, "update this test for 1.0");
        // A 0.1 header and a 0.2 library (or the other way round) may disagree on the API.
        assert_eq!(dp_version_compatible(0, DP_VERSION_MINOR + 1), 0);
        assert_eq!(
            dp_version_compatible(0, DP_VERSION_MINOR.wrapping_sub(1)),
            0
        );
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
