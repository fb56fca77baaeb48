//! Op definitions in text, as plugins hand them over (ABI 1.2, `dpp_op_def_t`) and hosts
//! register them: the input is split at NUL bytes into name, inputs, outputs, type variables,
//! attributes and body. Parsed or refused with `INVALID_ARGUMENT`, never a panic.
#![no_main]

use std::sync::OnceLock;

use devplug_core::op::text::parse;
use devplug_core::{Code, OpText, Runtime, RuntimeOptions};
use libfuzzer_sys::fuzz_target;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .expect("a runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0').map(str::to_string);
    let mut next = || parts.next().unwrap_or_default();
    let def = OpText {
        name: next(),
        inputs: next(),
        outputs: next(),
        type_vars: next(),
        attrs: next(),
        body: next(),
    };
    let rt = runtime();
    if let Err(e) = parse(&def, &|name| rt.op(name).ok()) {
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
    }
});
