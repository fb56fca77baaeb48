//! Test helpers: owned, aligned tensors, sample data and straightforward references computed
//! in f64 (or i128 for integers).

use std::ops::{Deref, DerefMut};

use crate::tensor::DType;

use super::{View, ViewMut};

/// Bytes backed by `u64`s, so every dtype's view of them is aligned.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes {
    words: Vec<u64>,
    len: usize,
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = self.len.min(32);
        write!(
            f,
            "{} bytes {:?}{}",
            self.len,
            &self[..show],
            if show < self.len { "..." } else { "" }
        )
    }
}

impl Bytes {
    pub fn zeros(len: usize) -> Bytes {
        Bytes {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the words hold at least `len` initialized bytes; u8 has no alignment needs.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; any bytes written make valid u64s.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// An owned test tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Tensor {
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Bytes::zeros(n * dtype.size()),
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Element `i` set from an f64 with Rust `as` (bool: != 0).
    pub fn set(&mut self, i: usize, v: f64) {
        let s = self.dtype.size();
        let b = &mut self.data[i * s..(i + 1) * s];
        match self.dtype {
            DType::F32 => b.copy_from_slice(&(v as f32).to_ne_bytes()),
            DType::F64 => b.copy_from_slice(&v.to_ne_bytes()),
            DType::I32 => b.copy_from_slice(&(v as i32).to_ne_bytes()),
            DType::I64 => b.copy_from_slice(&(v as i64).to_ne_bytes()),
            DType::U8 => b[0] = v as u8,
            DType::Bool => b[0] = (v != 0.0) as u8,
            DType::F16 => b.copy_from_slice(&half::f16::from_f64(v).to_ne_bytes()),
            DType::BF16 => b.copy_from_slice(&half::bf16::from_f64(v).to_ne_bytes()),
        }
    }

    pub fn from_values(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
        let mut t = Tensor::zeros(dtype, shape);
        assert_eq!(t.len(), v.len());
        for (i, &x) in v.iter().enumerate() {
            t.set(i, x);
        }
        t
    }

    pub fn from_bytes(dtype: DType, shape: &[usize], b: &[u8]) -> Tensor {
        let mut t = Tensor::zeros(dtype, shape);
        t.data.copy_from_slice(b);
        t
    }

    pub fn from_f32(shape: &[usize], v: &[f32]) -> Tensor {
        let mut t = Tensor::zeros(DType::F32, shape);
        for (d, x) in t.data.chunks_exact_mut(4).zip(v) {
            d.copy_from_slice(&x.to_ne_bytes());
        }
        t
    }

    pub fn from_f64(shape: &[usize], v: &[f64]) -> Tensor {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        Tensor::from_bytes(DType::F64, shape, &b)
    }

    pub fn from_i32(shape: &[usize], v: &[i32]) -> Tensor {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        Tensor::from_bytes(DType::I32, shape, &b)
    }

    pub fn from_i64(shape: &[usize], v: &[i64]) -> Tensor {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        Tensor::from_bytes(DType::I64, shape, &b)
    }

    pub fn from_u8(shape: &[usize], v: &[u8]) -> Tensor {
        Tensor::from_bytes(DType::U8, shape, v)
    }

    fn generate(dtype: DType, shape: &[usize], seed: u64, f: impl Fn(u64) -> f64) -> Tensor {
        let mut st = seed.wrapping_mul(0x1234_5678_9ABC_DEF1) ^ dtype as u64;
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| f(splitmix(&mut st))).collect();
        Tensor::from_values(dtype, shape, &v)
    }

    /// Varied values: floats in [-4, 4) with fractions, signed ints in [-100, 100) with some
    /// large ones (so that products wrap), u8 over its whole range, bools 0/1.
    pub fn sample(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        Tensor::generate(dtype, shape, seed, |r| match dtype {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => {
                ((r % 8000) as f64 - 4000.0) / 1000.0 + 0.000_25
            }
            DType::I32 => {
                if r % 7 == 0 {
                    (r >> 8) as i32 as f64
                } else {
                    (r % 200) as f64 - 100.0
                }
            }
            DType::I64 => {
                if r % 7 == 0 {
                    ((r >> 8) % 6_000_000_000) as f64 - 3e9
                } else {
                    (r % 200) as f64 - 100.0
                }
            }
            DType::U8 => (r % 256) as f64,
            DType::Bool => (r % 2) as f64,
        })
    }

    /// Positive floats in [0.1, 4.1); other dtypes as `sample`.
    pub fn positive(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        if !dtype.is_float() {
            return Tensor::sample(dtype, shape, seed);
        }
        Tensor::generate(dtype, shape, seed, |r| (r % 4000) as f64 / 1000.0 + 0.1)
    }

    /// Values in 0, 1, 2 (so that comparisons find equal elements).
    pub fn small_ints(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        Tensor::generate(dtype, shape, seed, |r| (r % 3) as f64)
    }

    /// Pow bases: positive floats; small integers (with signs where they exist).
    pub fn pow_base(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        Tensor::generate(dtype, shape, seed, |r| match dtype {
            d if d.is_float() => (r % 2500) as f64 / 1000.0 + 0.5,
            DType::U8 => (r % 6) as f64,
            _ => (r % 9) as f64 - 4.0,
        })
    }

    /// Pow exponents: floats in [-2, 2); ints in [-3, 9) (u8 [0, 9)).
    pub fn pow_exponent(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        Tensor::generate(dtype, shape, seed, |r| match dtype {
            d if d.is_float() => (r % 4000) as f64 / 1000.0 - 2.0,
            DType::U8 => (r % 9) as f64,
            _ => (r % 12) as f64 - 3.0,
        })
    }

    pub fn view(&self) -> View<'_> {
        View {
            data: &self.data,
            dtype: self.dtype,
            shape: &self.shape,
        }
    }

    pub fn view_mut(&mut self) -> ViewMut<'_> {
        ViewMut {
            data: &mut self.data,
            dtype: self.dtype,
            shape: &self.shape,
        }
    }

    pub fn get(&self, i: usize) -> f64 {
        let s = self.dtype.size();
        let b = &self.data[i * s..(i + 1) * s];
        let mut w = [0u8; 8];
        w[..s].copy_from_slice(b);
        match self.dtype {
            DType::F32 => f32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as f64,
            DType::F64 => f64::from_ne_bytes(w),
            DType::I32 => i32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as f64,
            DType::I64 => i64::from_ne_bytes(w) as f64,
            DType::U8 | DType::Bool => w[0] as f64,
            DType::F16 => half::f16::from_ne_bytes([w[0], w[1]]).to_f64(),
            DType::BF16 => half::bf16::from_ne_bytes([w[0], w[1]]).to_f64(),
        }
    }

    pub fn get_i128(&self, i: usize) -> i128 {
        let s = self.dtype.size();
        let b = &self.data[i * s..(i + 1) * s];
        let mut w = [0u8; 8];
        w[..s].copy_from_slice(b);
        match self.dtype {
            DType::I32 => i32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as i128,
            DType::I64 => i64::from_ne_bytes(w) as i128,
            DType::U8 | DType::Bool => w[0] as i128,
            _ => self.get(i) as i128,
        }
    }

    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    pub fn to_i64(&self) -> Vec<i64> {
        (0..self.len()).map(|i| self.get_i128(i) as i64).collect()
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.data.to_vec()
    }
}

/// `x` rounded to the precision of a float dtype.
pub fn round_to(dt: DType, x: f64) -> f64 {
    match dt {
        DType::F32 => x as f32 as f64,
        DType::F16 => nearest_half(
            x,
            65520.0,
            |b| half::f16::from_bits(b).to_f64(),
            |v| half::f16::from_f64(v).to_bits(),
        ),
        DType::BF16 => nearest_half(
            x,
            (2.0 - 2f64.powi(-8)) * 2f64.powi(127),
            |b| half::bf16::from_bits(b).to_f64(),
            |v| half::bf16::from_f64(v).to_bits(),
        ),
        _ => x,
    }
}

/// The half-format value nearest `x` (ties to the even encoding), found by comparing exact
/// distances to a first guess and its two neighbours: a reference that relies on no
/// conversion's rounding. `overflow` is the magnitude from which `x` rounds to infinity.
fn nearest_half(
    x: f64,
    overflow: f64,
    value: impl Fn(u16) -> f64,
    guess: impl Fn(f64) -> u16,
) -> f64 {
    if x.is_nan() || x.is_infinite() {
        return x;
    }
    if x.abs() >= overflow {
        return f64::INFINITY.copysign(x);
    }
    let g = guess(x) & 0x7fff;
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let candidates = [g.saturating_sub(1), g, g + 1]
        .map(|m| m | sign)
        .into_iter()
        .filter(|&b| value(b).is_finite());
    let best = candidates
        .min_by(|&a, &b| {
            let (da, db) = ((value(a) - x).abs(), (value(b) - x).abs());
            da.total_cmp(&db).then((a & 1).cmp(&(b & 1)))
        })
        .expect("a finite candidate");
    value(best)
}

/// `x` wrapped to an integer dtype.
pub fn wrap(dt: DType, x: i128) -> i128 {
    match dt {
        DType::I32 => x as i32 as i128,
        DType::I64 => x as i64 as i128,
        DType::U8 => x as u8 as i128,
        DType::Bool => (x != 0) as i128,
        _ => x,
    }
}

pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            if da == 1 {
                db
            } else {
                assert!(db == 1 || db == da, "{a:?} and {b:?} do not broadcast");
                da
            }
        })
        .collect()
}

/// The multi-index of flat position `p` in `shape`.
pub fn unravel(mut p: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = p % shape[d];
        p /= shape[d];
    }
    idx
}

/// Flat position of `idx` (right-aligned against `shape`, broadcasting dims of 1).
pub fn bcast_index(idx: &[usize], shape: &[usize]) -> usize {
    let lead = idx.len() - shape.len();
    let mut p = 0;
    for (d, &s) in shape.iter().enumerate() {
        let i = if s == 1 { 0 } else { idx[lead + d] };
        p = p * s + i;
    }
    p
}

pub fn ref_broadcast2(
    a: &Tensor,
    b: &Tensor,
    out: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let n: usize = out.iter().product();
    (0..n)
        .map(|p| {
            let idx = unravel(p, out);
            f(
                a.get(bcast_index(&idx, &a.shape)),
                b.get(bcast_index(&idx, &b.shape)),
            )
        })
        .collect()
}

pub fn ref_broadcast3(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    out: &[usize],
    f: impl Fn(f64, f64, f64) -> f64,
) -> Vec<f64> {
    let n: usize = out.iter().product();
    (0..n)
        .map(|p| {
            let idx = unravel(p, out);
            f(
                a.get(bcast_index(&idx, &a.shape)),
                b.get(bcast_index(&idx, &b.shape)),
                c.get(bcast_index(&idx, &c.shape)),
            )
        })
        .collect()
}

/// Compares `out` with `want`: integers and bools exactly, floats within a relative tolerance
/// of the dtype (NaN matches NaN, infinities match exactly).
pub fn assert_close(out: &Tensor, want: &[f64], what: &str) {
    assert_close_tol(out, want, what, 1.0);
}

/// As [`assert_close`], with the float tolerance multiplied by `scale`.
pub fn assert_close_tol(out: &Tensor, want: &[f64], what: &str, scale: f64) {
    assert_eq!(out.len(), want.len(), "{what}: element count");
    let tol = match out.dtype {
        DType::F32 => 2e-6 * scale,
        DType::F64 => 1e-13 * scale,
        // One unit in the last place (2^-10 and 2^-7 of the value): a result computed in f32
        // and rounded once may round the other way than the f64 reference rounded.
        DType::F16 => 1e-3 * scale,
        DType::BF16 => 8e-3 * scale,
        _ => 0.0,
    };
    for (i, (&g, &w)) in out.to_f64().iter().zip(want).enumerate() {
        let ok = if out.dtype.is_float() {
            (g.is_nan() && w.is_nan())
                || g == w
                || (g.is_finite() && w.is_finite() && (g - w).abs() <= tol * (1.0 + w.abs()))
        } else {
            g == w
        };
        assert!(ok, "{what}: element {i} is {g}, want {w}");
    }
}
