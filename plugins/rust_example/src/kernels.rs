//! RSIM's kernels (plugin ABI 1.1): `Add` for f32 and i64 with NumPy broadcasting, bound to
//! RSIM's own platform and run on the device's stream worker; and for f16 too where the host has
//! ABI 1.3 (RSIM declares 1.1, so it reads the host's version before naming the dtype).
//!
//! A kernel checks its arguments at once (a synchronous error with a message), then enqueues
//! the arithmetic on the stream the host gave it: the result is there once the stream is
//! synchronized, as on a real accelerator.

use devplug_plugin_sdk::{DType, Error, Host, KernelContext, KernelSpec, Result, Tensor};

use crate::device::RsimDevice;

/// The dtypes RSIM's `Add` accepts. (A host older than ABI 1.3 knows no f16: the SDK registers
/// the kernel without it there.)
pub const ADD_DTYPES: [DType; 3] = [DType::F32, DType::I64, DType::F16];

/// Registers RSIM's kernels for its platform (device type `device_type`).
pub fn register(host: &Host, device_type: &str) -> Result<()> {
    host.register_kernel(KernelSpec::new("Add", device_type).dtypes(&ADD_DTYPES), add)
}

/// The broadcast shape of `a` and `b` (NumPy rules), or `None` when they do not broadcast.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[i64], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// How to walk a broadcast: the output's shape and each input's element strides over it
/// (0 along broadcast dimensions).
struct Plan {
    shape: Vec<usize>,
    x_strides: Vec<usize>,
    y_strides: Vec<usize>,
    len: usize,
}

impl Plan {
    fn new(x: &[i64], y: &[i64], out: &[i64]) -> Plan {
        let strides = |s: &[i64]| {
            let mut st = vec![0usize; out.len()];
            let mut step = 1usize;
            for (k, &d) in s.iter().enumerate().rev() {
                let o = k + out.len() - s.len();
                st[o] = if d == 1 { 0 } else { step };
                step *= d as usize;
            }
            st
        };
        let shape: Vec<usize> = out.iter().map(|&d| d as usize).collect();
        Plan {
            len: shape.iter().product(),
            x_strides: strides(x),
            y_strides: strides(y),
            shape,
        }
    }

    /// Calls `f(output index, x index, y index)` for every output element, in order.
    fn for_each(&self, mut f: impl FnMut(usize, usize, usize)) {
        if self.len == 0 {
            return;
        }
        let rank = self.shape.len();
        let mut idx = vec![0usize; rank];
        let (mut xi, mut yi) = (0usize, 0usize);
        for i in 0..self.len {
            f(i, xi, yi);
            for d in (0..rank).rev() {
                idx[d] += 1;
                xi += self.x_strides[d];
                yi += self.y_strides[d];
                if idx[d] < self.shape[d] {
                    break;
                }
                xi -= self.x_strides[d] * self.shape[d];
                yi -= self.y_strides[d] * self.shape[d];
                idx[d] = 0;
            }
        }
    }
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

fn binary<T: Elem>(plan: &Plan, x: &[u8], y: &[u8], z: &mut [u8]) {
    let s = T::SIZE;
    plan.for_each(|i, xi, yi| {
        T::load(&x[xi * s..])
            .add(T::load(&y[yi * s..]))
            .store(&mut z[i * s..]);
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
    let shape = broadcast_shapes(x.shape(), y.shape()).ok_or_else(|| {
        bad(format!(
            "shapes {:?} and {:?} cannot be broadcast together",
            x.shape(),
            y.shape()
        ))
    })?;
    if shape != z.shape() {
        return Err(bad(format!(
            "the output has shape {:?}, not the broadcast shape {shape:?}",
            z.shape()
        )));
    }
    for (name, t) in [("x", x), ("y", y), ("z", z)] {
        check_size(&bad, name, &t)?;
        dev.check(t.addr(), t.byte_size())?;
    }
    let plan = Plan::new(x.shape(), y.shape(), z.shape());
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
    fn shapes_broadcast_like_numpy() {
        assert_eq!(broadcast_shapes(&[2, 3], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shapes(&[4, 1], &[1, 5]), Some(vec![4, 5]));
        assert_eq!(broadcast_shapes(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast_shapes(&[0, 1], &[3]), Some(vec![0, 3]));
        assert_eq!(broadcast_shapes(&[2, 3], &[2]), None);
    }

    #[test]
    fn a_plan_walks_the_broadcast() {
        let plan = Plan::new(&[2, 1], &[3], &[2, 3]);
        let mut seen = Vec::new();
        plan.for_each(|i, x, y| seen.push((i, x, y)));
        assert_eq!(
            seen,
            vec![
                (0, 0, 0),
                (1, 0, 1),
                (2, 0, 2),
                (3, 1, 0),
                (4, 1, 1),
                (5, 1, 2)
            ]
        );
        let mut n = 0;
        Plan::new(&[0], &[0], &[0]).for_each(|_, _, _| n += 1);
        assert_eq!(n, 0);
    }
}
