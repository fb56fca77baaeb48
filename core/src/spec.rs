//! Device specs: `CPU`, `cpu:1`, `HOST:0`, `/device:GPU:0`,
//! `/job:localhost/replica:0/task:0/device:GPU:1`.
//!
//! A spec names a device type or a platform (resolved by the runtime, types first) and an
//! ordinal (default 0). Parsing is case-insensitive; names are kept upper-case.

use std::fmt;

use crate::error::{Error, Result};

/// A parsed device spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceSpec {
    /// A device type (`GPU`) or a platform name (`SIMCUDA`), upper-case.
    pub name: String,
    /// The device's number within the type or platform (0 when the spec gives none).
    pub ordinal: usize,
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.ordinal)
    }
}

const MAX_ORDINAL: usize = 1 << 20;

impl DeviceSpec {
    /// Parses `TYPE`, `TYPE:i`, `PLATFORM:i` or TensorFlow's `/device:TYPE:i` (with an optional
    /// `/job:…/replica:…/task:…` prefix), case-insensitively; `INVALID_ARGUMENT` naming the
    /// spec when it is malformed.
    pub fn parse(spec: &str) -> Result<DeviceSpec> {
        let bad =
            |why: &str| Error::invalid_argument(format!("malformed device spec '{spec}': {why}"));
        let body = if spec.starts_with('/') {
            tensorflow_device_part(spec).map_err(|why| bad(&why))?
        } else {
            spec
        };
        let (name, ordinal) = match body.split_once(':') {
            None => (body, None),
            Some((n, o)) => (n, Some(o)),
        };
        if name.is_empty() {
            return Err(bad(
                "expected a device type or platform name such as 'CPU' or 'GPU:0'",
            ));
        }
        let mut chars = name.chars();
        let name_ok = name.len() <= 64
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(bad(&format!(
                "'{name}' is not a device type or platform name ([A-Z][A-Z0-9_]*)"
            )));
        }
        let ordinal = match ordinal {
            None => 0,
            Some(o) => parse_ordinal(o).ok_or_else(|| {
                bad(&format!(
                    "ordinal '{o}' is not a number between 0 and {MAX_ORDINAL}"
                ))
            })?,
        };
        Ok(DeviceSpec {
            name: name.to_ascii_uppercase(),
            ordinal,
        })
    }
}

fn parse_ordinal(s: &str) -> Option<usize> {
    if s.is_empty() || s.len() > 7 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<usize>().ok().filter(|v| *v <= MAX_ORDINAL)
}

/// Picks `TYPE:N` out of TensorFlow's `/job:x/replica:0/task:0/device:TYPE:N`.
fn tensorflow_device_part(spec: &str) -> std::result::Result<&str, String> {
    let mut device = None;
    for part in spec[1..].split('/') {
        let (key, value) = part
            .split_once(':')
            .ok_or_else(|| format!("component '{part}' has no ':'"))?;
        match key.to_ascii_lowercase().as_str() {
            "device" if device.is_none() => device = Some(value),
            "job" | "replica" | "task" if !value.is_empty() => {}
            _ => return Err(format!("unexpected component '{part}'")),
        }
    }
    device.ok_or_else(|| "no 'device:' component".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> (String, usize) {
        let d = DeviceSpec::parse(s).unwrap();
        (d.name, d.ordinal)
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(p("CPU"), ("CPU".into(), 0));
        assert_eq!(p("cpu:1"), ("CPU".into(), 1));
        assert_eq!(p("GPU:12"), ("GPU".into(), 12));
        assert_eq!(p("HOST:0"), ("HOST".into(), 0));
        assert_eq!(p("/device:GPU:0"), ("GPU".into(), 0));
        assert_eq!(p("/device:cpu:3"), ("CPU".into(), 3));
        assert_eq!(p("/DEVICE:Sim_Cuda:2"), ("SIM_CUDA".into(), 2));
        assert_eq!(
            p("/job:localhost/replica:0/task:0/device:GPU:1"),
            ("GPU".into(), 1)
        );
        assert_eq!(DeviceSpec::parse("gpu:2").unwrap().to_string(), "GPU:2");
    }

    #[test]
    fn malformed_specs_are_clear_errors() {
        for bad in [
            "",
            ":",
            ":0",
            "GPU:",
            "GPU:-1",
            "GPU:x",
            "GPU:0:1",
            "1GPU",
            "G-PU",
            "GPU: 0",
            " GPU",
            "/device:",
            "/device:GPU:0/device:GPU:1",
            "/gpu:0",
            "/",
            "GPU:99999999",
            "/job:localhost",
            "/job:/device:GPU:0",
        ] {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert_eq!(e.code, crate::error::Code::InvalidArgument, "{bad}");
            assert!(e.message.contains("malformed device spec"), "{bad}: {e}");
            assert!(e.message.contains(bad), "{bad}: {e}");
        }
    }

    /// Mutated specs (TensorFlow's form included) parse or are refused as malformed, naming
    /// the spec: never a panic. A spec that parses prints back to one that parses the same.
    #[test]
    fn mutated_specs_parse_or_are_refused() {
        let seeds = [
            "GPU:0",
            "CPU",
            "SIM:12",
            "sim_cuda:3",
            "/job:localhost/replica:0/task:0/device:GPU:1",
            "/device:CPU:0",
        ];
        let mut m = crate::testing::Mutator::new(0x5eed_5bec);
        for i in 0..20_000 {
            let spec = m.mutate_str(seeds[i % seeds.len()]);
            match DeviceSpec::parse(&spec) {
                Ok(d) => assert_eq!(DeviceSpec::parse(&d.to_string()).unwrap(), d, "{spec}"),
                Err(e) => {
                    assert_eq!(e.code, crate::error::Code::InvalidArgument, "{spec}");
                    assert!(e.message.contains("malformed device spec"), "{spec}: {e}");
                }
            }
        }
    }
}
