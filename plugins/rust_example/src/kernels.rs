//! RSIM's kernels (plugin ABI 1.1): `Add` for f32 and i64 with NumPy broadcasting, bound to
//! RSIM's own platform and run on the device's stream worker; and for f16 too where the host has
//! ABI 1.3 (RSIM declares 1.1, so it reads the host's version before naming the dtype).
//! `Cast` between every dtype, with a kernel state (ABI 1.5): its `create` picks the element
//! conversion for the input dtype and the `dtype` attribute once per device and pair, and each
//! launch only checks its tensors and enqueues (from an older host, the SDK makes the state for
//! each launch).
//!
//! A kernel checks its arguments at once (a synchronous error with a message), then enqueues
//! the arithmetic on the stream the host gave it: the result is there once the stream is
//! synchronized, as on a real accelerator.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use devplug_plugin_sdk::shape::Broadcast;
use devplug_plugin_sdk::{
    CreateArgs, DType, Error, Host, KernelContext, KernelSpec, Logger, Result, Tensor,
};
use half::{bf16, f16};

use crate::device::RsimDevice;

/// The dtypes RSIM's `Add` accepts. (A host older than ABI 1.3 knows no f16: the SDK registers
/// the kernel without it there.)
pub const ADD_DTYPES: [DType; 3] = [DType::F32, DType::I64, DType::F16];

/// The dtypes RSIM's `Cast` converts from and to: every dtype. (Listed rather than "all", so
/// that a dtype of a newer host is not sent to a kernel that does not know it.)
pub const CAST_DTYPES: [DType; 8] = DType::ALL;

/// Registers RSIM's kernels for its platform (device type `device_type`).
pub fn register(host: &Host, device_type: &str) -> Result<()> {
    host.register_kernel(KernelSpec::new("Add", device_type).dtypes(&ADD_DTYPES), add)?;
    host.register_kernel_with_state(
        KernelSpec::new("Cast", device_type).dtypes(&CAST_DTYPES),
        cast_create,
        cast,
    )
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
    // The host names the op (`kernel Add: `) before the message; the device is named here.
    let bad = |m: String| dev.err(Error::invalid_argument(m));
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
    let plan = Broadcast::exact(z.shape(), [x.shape(), y.shape()]).map_err(|e| dev.err(e))?;
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

// ---- Cast, a kernel with a state (ABI 1.5) ---------------------------------------------------

/// The kernel states made for one device and not yet dropped; with the load option
/// `log_kernel_states=1`, each made and dropped is logged with the number alive
/// (`RSIM:0: kernel Cast: state created (f32 -> i64); 1 live`).
pub(crate) struct StateCount {
    pub(crate) live: AtomicUsize,
    log: bool,
    logger: Logger,
    device: String,
}

impl StateCount {
    pub(crate) fn new(device: &str, logger: Logger) -> StateCount {
        StateCount {
            live: AtomicUsize::new(0),
            log: false,
            logger,
            device: device.to_owned(),
        }
    }

    pub(crate) fn logged(mut self, on: bool) -> StateCount {
        self.log = on;
        self
    }

    fn note(&self, what: &str, live: usize) {
        if self.log {
            self.logger
                .info(format!("{}: kernel {what}; {live} live", self.device));
        }
    }
}

/// One element on its way from one dtype to another: integers (and bools, 0 or 1) exactly,
/// floats (halves widened) as f64.
#[derive(Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

/// An element conversion: what `Cast`'s state holds and its launches copy into their work.
#[derive(Clone, Copy)]
struct Conversion {
    from_size: usize,
    to_size: usize,
    /// Same dtype (not bool, which is normalized to 0 or 1): the bytes are copied.
    copy: bool,
    load: fn(&[u8]) -> Value,
    store: fn(Value, &mut [u8]),
}

/// `Cast`'s state: the conversion for one input dtype and one `dtype` attribute, and the
/// device's count of states (made in `create`, dropped with the state).
struct CastState {
    from: DType,
    to: DType,
    conversion: Conversion,
    count: Arc<StateCount>,
}

impl Drop for CastState {
    fn drop(&mut self) {
        let live = self.count.live.fetch_sub(1, Ordering::SeqCst) - 1;
        self.count.note(
            &format!("Cast: state destroyed ({} -> {})", self.from, self.to),
            live,
        );
    }
}

fn bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// `x` rounded to f32 to odd (the last bit set when inexact), so that rounding the result once
/// more, to a half, is the one correct rounding of `x` (as the runtime's CPU rounds f64 to f16).
fn round_to_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || f64::from(t) == x {
        return t;
    }
    let mut bits = t.to_bits();
    if f64::from(t).abs() > x.abs() {
        // Rounded away from zero (to infinity, too): one step back toward it.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// The reader of a dtype's elements; `None` for a dtype RSIM does not know.
fn loader(d: DType) -> Option<fn(&[u8]) -> Value> {
    Some(match d {
        DType::F32 => |b| Value::Float(f32::from_ne_bytes(bytes(b)).into()),
        DType::F64 => |b| Value::Float(f64::from_ne_bytes(bytes(b))),
        DType::I32 => |b| Value::Int(i32::from_ne_bytes(bytes(b)).into()),
        DType::I64 => |b| Value::Int(i64::from_ne_bytes(bytes(b))),
        DType::U8 => |b| Value::Int(b[0].into()),
        DType::BOOL => |b| Value::Int((b[0] != 0).into()),
        DType::F16 => |b| Value::Float(f16::from_ne_bytes(bytes(b)).to_f32().into()),
        DType::BF16 => |b| Value::Float(bf16::from_ne_bytes(bytes(b)).to_f32().into()),
        _ => return None,
    })
}

/// The writer of a dtype's elements, converting as the runtime's CPU does (Rust `as`: float to
/// integer truncates toward zero and saturates, NaN gives 0, integers wrap; `x != 0` into
/// bool; halves rounded once, to nearest even); `None` for a dtype RSIM does not know.
fn storer(d: DType) -> Option<fn(Value, &mut [u8])> {
    fn float(v: Value) -> f64 {
        match v {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
        }
    }
    Some(match d {
        DType::F32 => |v, b| {
            let x = match v {
                Value::Int(i) => i as f32,
                Value::Float(f) => f as f32,
            };
            b[..4].copy_from_slice(&x.to_ne_bytes());
        },
        DType::F64 => |v, b| b[..8].copy_from_slice(&float(v).to_ne_bytes()),
        DType::I32 => |v, b| {
            let x = match v {
                Value::Int(i) => i as i32,
                Value::Float(f) => f as i32,
            };
            b[..4].copy_from_slice(&x.to_ne_bytes());
        },
        DType::I64 => |v, b| {
            let x = match v {
                Value::Int(i) => i,
                Value::Float(f) => f as i64,
            };
            b[..8].copy_from_slice(&x.to_ne_bytes());
        },
        DType::U8 => |v, b| {
            b[0] = match v {
                Value::Int(i) => i as u8,
                Value::Float(f) => f as u8,
            }
        },
        DType::BOOL => |v, b| {
            b[0] = match v {
                Value::Int(i) => u8::from(i != 0),
                Value::Float(f) => u8::from(f != 0.0),
            }
        },
        DType::F16 => |v, b| {
            let x = f16::from_f32(round_to_odd(float(v)));
            b[..2].copy_from_slice(&x.to_ne_bytes());
        },
        DType::BF16 => |v, b| {
            let x = bf16::from_f32(round_to_odd(float(v)));
            b[..2].copy_from_slice(&x.to_ne_bytes());
        },
        _ => return None,
    })
}

/// `Cast`'s `create`: the conversion from the input's dtype to the `dtype` attribute's, picked
/// once for every launch with them on this device.
fn cast_create(args: &CreateArgs<'_, RsimDevice>) -> Result<CastState> {
    let dev = args.device();
    let (from, to) = (args.input_dtype(0)?, args.attr_dtype("dtype")?);
    let unknown = |d: DType| {
        dev.err(Error::invalid_argument(format!(
            "Cast: RSIM does not know dtype {d}"
        )))
    };
    let (Some(from_size), Some(load)) = (from.size(), loader(from)) else {
        return Err(unknown(from));
    };
    let (Some(to_size), Some(store)) = (to.size(), storer(to)) else {
        return Err(unknown(to));
    };
    let count = Arc::clone(dev.kernel_states());
    let live = count.live.fetch_add(1, Ordering::SeqCst) + 1;
    count.note(&format!("Cast: state created ({from} -> {to})"), live);
    Ok(CastState {
        from,
        to,
        conversion: Conversion {
            from_size,
            to_size,
            copy: from == to && from != DType::BOOL,
            load,
            store,
        },
        count,
    })
}

/// `Cast`: y = x converted to the state's dtype, elementwise, on the stream.
fn cast(cx: &KernelContext<'_, RsimDevice>, state: &CastState) -> Result<()> {
    let dev = cx.device();
    let bad = |m: String| dev.err(Error::invalid_argument(m));
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    if x.dtype() != state.from || y.dtype() != state.to {
        return Err(bad(format!(
            "{} -> {} with a state for {} -> {}",
            x.dtype(),
            y.dtype(),
            state.from,
            state.to
        )));
    }
    if x.shape() != y.shape() {
        return Err(bad(format!(
            "the output has shape {:?}, not the input's {:?}",
            y.shape(),
            x.shape()
        )));
    }
    for (name, t) in [("x", x), ("y", y)] {
        check_size(&bad, name, &t)?;
        dev.check(t.addr(), t.byte_size())?;
    }
    // The work gets a copy of the conversion: the state is borrowed for this call only.
    let c = state.conversion;
    let (xa, xn, ya, yn) = (x.addr(), x.byte_size(), y.addr(), y.byte_size());
    let memory = dev.memory();
    dev.enqueue(cx.stream(), move || {
        let mut m = memory.lock();
        // Copied out: the output may share memory with the input.
        let xs = m.bytes(m.range(xa, xn)?).to_vec();
        let out = m.range(ya, yn)?;
        let out = m.bytes_mut(out);
        if c.copy {
            out.copy_from_slice(&xs);
        } else {
            for (src, dst) in xs
                .chunks_exact(c.from_size)
                .zip(out.chunks_exact_mut(c.to_size))
            {
                (c.store)((c.load)(src), dst);
            }
        }
        Ok(())
    })
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

    /// Element conversions as the runtime's CPU makes them: `as` (truncation toward zero,
    /// saturation, NaN to 0, wrapping integers), `x != 0` into bool, halves rounded once.
    #[test]
    fn conversions_truncate_saturate_wrap_and_round_once() {
        let conv = |from: DType, to: DType, src: &[u8]| {
            let (load, store) = (loader(from).expect("known"), storer(to).expect("known"));
            let mut out = vec![0u8; to.size().expect("known")];
            store(load(src), &mut out);
            out
        };
        let f32s = |v: f32| v.to_ne_bytes();
        assert_eq!(
            conv(DType::F32, DType::I32, &f32s(-2.7)),
            (-2i32).to_ne_bytes()
        );
        assert_eq!(
            conv(DType::F32, DType::I32, &f32s(3e10)),
            i32::MAX.to_ne_bytes()
        );
        assert_eq!(conv(DType::F32, DType::U8, &f32s(-5.0)), [0]);
        assert_eq!(
            conv(DType::F32, DType::I64, &f32s(f32::NAN)),
            0i64.to_ne_bytes()
        );
        assert_eq!(conv(DType::F32, DType::BOOL, &f32s(f32::NAN)), [1]);
        assert_eq!(conv(DType::F32, DType::BOOL, &f32s(-0.0)), [0]);
        assert_eq!(conv(DType::I64, DType::U8, &300i64.to_ne_bytes()), [44]);
        assert_eq!(
            conv(DType::I64, DType::I32, &(1i64 << 33 | 7).to_ne_bytes()),
            7i32.to_ne_bytes()
        );
        assert_eq!(conv(DType::BOOL, DType::F32, &[1]), f32s(1.0));
        assert_eq!(conv(DType::U8, DType::F64, &[255]), 255f64.to_ne_bytes());
        assert_eq!(
            conv(DType::F16, DType::F32, &f16::from_f32(0.1).to_ne_bytes()),
            f32s(f16::from_f32(0.1).to_f32())
        );
        // Just above the midpoint of 1 and the next f16 (1 + 2^-10): rounded once, up; through
        // an f32 rounded to nearest it would become the midpoint, then 1 (even).
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(
            conv(DType::F64, DType::F16, &x.to_ne_bytes()),
            f16::from_bits(0x3C01).to_ne_bytes()
        );
        assert_eq!(
            conv(DType::F32, DType::BF16, &f32s(1.0)),
            bf16::from_f32(1.0).to_ne_bytes()
        );
        assert_eq!(
            conv(DType::I32, DType::F16, &70000i32.to_ne_bytes()),
            f16::INFINITY.to_ne_bytes()
        );
    }
}
