//! Device specs as hosts pass them (`dp_runtime_find_device`): parsed or refused with
//! `INVALID_ARGUMENT`; a parsed spec prints as a spec that parses to the same.
#![no_main]

use devplug_core::{Code, DeviceSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match DeviceSpec::parse(&text) {
        Ok(spec) => {
            let again = DeviceSpec::parse(&spec.to_string())
                .unwrap_or_else(|e| panic!("{spec} does not parse again: {e}"));
            assert_eq!(again, spec, "{text:?}");
        }
        Err(e) => assert_eq!(e.code, Code::InvalidArgument, "{e}"),
    }
});
