//! RSIM's kernels (plugin ABI 1.1): `Add` for f32 and i64 with NumPy broadcasting, bound to
//! RSIM's own platform and run on the device's stream worker; and for f16 too where the host has
//! ABI 1.3 (RSIM declares 1.1, so it reads the host's version before naming the dtype).
//!
//! A kernel checks its arguments at once (a synchronous error with a message), then enqueues
//! the arithmetic on the stream the host gave it: the result is there once the stream is
//! synchronized, as on a real accelerator.

use devplug_plugin_sdk::shape::Broadcast;
use devplug_plugin_sdk::{DType, Error, Host, KernelContext, KernelSpec, Result, Tensor};

use crate::device::RsimDevice;

/// The dtypes RSIM's `Add` accepts. (A host older than ABI 1.3 knows no f16: the SDK registers
/// the kernel without it there.)
pub const ADD_DTYPES: [DType; 3] = [DType::F32, DType::I64, DType::F16];

/// Registers RSIM's kernels for its platform (device type `device_type`).
pub fn register(host: &Host, device_type: &str) -> Result<()> {
    host.register_kernel(KernelSpec::new("Add", device_type).dtypes(&ADD_DTYPES), add)
}

/// An element type RSIM computes with.
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn add(self, other: Self) -> Self;
}

impl Elem for f32 {
    const SIZE: usize = 4;
    fn load(b: &[u8]) -> f32 {
        f32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }
    fn store(self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.to_ne_bytes());
    }
    fn add(self, other: f32) -> f32 {
        self + other
    }
}

impl Elem for i64 {
    const SIZE: usize = 8;
    fn load(b: &[u8]) -> i64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        i64::from_ne_bytes(a)
    }
    fn store(self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.to_ne_bytes());
    }
    fn add(self, other: i64) -> i64 {
        // Integer overflow wraps, as in the runtime's CPU kernels.
        self.wrapping_add(other)
    }
}

impl Elem for half::f16 {
    const SIZE: usize = 2;
    fn load(b: &[u8]) -> half::f16 {
        half::f16::from_ne_bytes([b[0], b[1]])
    }
    fn store(self, b: &mut [u8]) {
        b[..2].copy_from_slice(&self.to_ne_bytes());
    }
    fn add(self, other: half::f16) -> half::f16 {
        // In f32, rounded once: the correctly rounded sum, as the runtime's CPU computes it.
        half::f16::from_f32(self.to_f32() + other.to_f32())
    }
}

/// z = x + y over the plan's runs: the SDK's walk hands out innermost runs with a constant
/// stride per input (0 where an input is broadcast), so the loop inside is a plain one.
fn binary<T: Elem>(plan: &Broadcast<2>, x: &[u8], y: &[u8], z: &mut [u8]) {
    let s = T::SIZE;
    plan.for_each_run(|run| {
        for i in 0..run.len {
            T::load(&x[run.input(0, i) * s..])
                .add(T::load(&y[run.input(1, i) * s..]))
                .store(&mut z[(run.out + i) * s..]);
        }
    });
}

/// `Add`: z = x + y, broadcasting.
fn add(cx: &KernelContext<'_, RsimDevice>) -> Result<()> {
    let dev = cx.device();
    let bad = |m: String| dev.err(Error::invalid_argument(format!("Add: {m}")));
    cx.check_arity(2, 1)?;
    let (x, y, z) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    let dtype = x.dtype();
    if !ADD_DTYPES.contains(&dtype) || y.dtype() != dtype || z.dtype() != dtype {
        return Err(bad(format!(
            "dtypes {} + {} -> {}: RSIM adds f32, i64 or f16 tensors of one dtype",
            x.dtype(),
            y.dtype(),
            z.dtype()
        )));
    }
    // The output must be the broadcast of the inputs; the SDK's messages ("shapes [2, 3] and
    // [2] cannot be broadcast together", "the output has shape …, not the broadcast shape …").
    let plan = Broadcast::exact(z.shape(), [x.shape(), y.shape()])
        .map_err(|e| dev.err(e.context("Add")))?;
    for (name, t) in [("x", x), ("y", y), ("z", z)] {
        check_size(&bad, name, &t)?;
        dev.check(t.addr(), t.byte_size())?;
    }
    let (xa, xn, ya, yn, za, zn) = (
        x.addr(),
        x.byte_size(),
        y.addr(),
        y.byte_size(),
        z.addr(),
        z.byte_size(),
    );
    let memory = dev.memory();
    dev.enqueue(cx.stream(), move || {
        let mut m = memory.lock();
        // The inputs are copied out: an output may share memory with an input.
        let xs = m.bytes(m.range(xa, xn)?).to_vec();
        let ys = m.bytes(m.range(ya, yn)?).to_vec();
        let out = m.range(za, zn)?;
        let out = m.bytes_mut(out);
        if dtype == DType::F32 {
            binary::<f32>(&plan, &xs, &ys, out);
        } else if dtype == DType::F16 {
            binary::<half::f16>(&plan, &xs, &ys, out);
        } else {
            binary::<i64>(&plan, &xs, &ys, out);
        }
        Ok(())
    })
}

fn check_size(bad: &impl Fn(String) -> Error, name: &str, t: &Tensor<'_>) -> Result<()> {
    match t.expected_byte_size() {
        Some(n) if n == t.byte_size() => Ok(()),
        n => Err(bad(format!(
            "{name} {t:?} should have {} bytes",
            n.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_broadcasts_both_ways() {
        let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
        // [2, 1] + [3] -> [2, 3]
        let plan = Broadcast::exact(&[2, 3], [&[2, 1], &[3]]).expect("plan");
        let mut z = vec![0u8; 24];
        binary::<f32>(&plan, &bytes(&[1., 2.]), &bytes(&[10., 20., 30.]), &mut z);
        assert_eq!(z, bytes(&[11., 21., 31., 12., 22., 32.]));
        // Nothing to do for an empty output.
        let plan = Broadcast::exact(&[0, 3], [&[0, 1], &[3]]).expect("plan");
        binary::<f32>(&plan, &[], &bytes(&[1., 2., 3.]), &mut []);
    }
}
