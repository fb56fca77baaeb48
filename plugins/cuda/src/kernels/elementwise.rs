//! Elementwise kernels: binary ops and comparisons (with broadcasting), unary ops, Select,
//! Cast, Fill, Iota and AddN.

use devplug_plugin_sdk::{DType, Error, Result};

use super::plan::Geo;
use super::{
    axis_index, cast_name, check_rank, dtype_size, elements, elementwise_name, iota_name,
    select_name, sized_name, Cx, Family, Launcher, Unit,
};
use crate::driver::Param;

/// `z = op(x, y)`; `stem` names the kernels (`add` → `dp_add_f32_c`).
pub(crate) fn binary(cx: &Cx<'_>, stem: &'static str) -> Result<()> {
    cx.check_arity(2, 1)?;
    let (x, y, z) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    let n = elements(z.shape());
    if n == 0 {
        return Ok(());
    }
    check_rank(z.shape())?;
    let (xa, ya, za) = (x.addr().0, y.addr().0, z.addr().0);
    let geo = Geo::broadcast(z.shape(), &[x.shape(), y.shape()]);
    let l = Launcher::new(cx)?;
    let contiguous = geo.is_contiguous(2);
    let name = elementwise_name(stem, x.dtype(), contiguous)?;
    if contiguous {
        l.run(
            Unit::of(Family::Binary, x.dtype()),
            &name,
            n,
            &[&n, &xa, &ya, &za],
        )
    } else {
        l.run(
            Unit::of(Family::Binary, x.dtype()),
            &name,
            n,
            &[&geo, &xa, &ya, &za],
        )
    }
}

/// `y = op(x)`.
pub(crate) fn unary(cx: &Cx<'_>, stem: &'static str) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    let n = elements(y.shape());
    if n == 0 {
        return Ok(());
    }
    let name = elementwise_name(stem, x.dtype(), true)?;
    Launcher::new(cx)?.run(
        Unit::of(Family::Unary, x.dtype()),
        &name,
        n,
        &[&n, &x.addr().0, &y.addr().0],
    )
}

/// `z = condition ? x : y`, broadcasting all three.
pub(crate) fn select(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(3, 1)?;
    let (c, x, y, z) = (cx.input(0)?, cx.input(1)?, cx.input(2)?, cx.output(0)?);
    let n = elements(z.shape());
    if n == 0 {
        return Ok(());
    }
    check_rank(z.shape())?;
    let size = dtype_size(x.dtype())?;
    let (ca, xa, ya, za) = (c.addr().0, x.addr().0, y.addr().0, z.addr().0);
    let geo = Geo::broadcast(z.shape(), &[c.shape(), x.shape(), y.shape()]);
    let l = Launcher::new(cx)?;
    let contiguous = geo.is_contiguous(3);
    let name = select_name(size, contiguous);
    if contiguous {
        l.run(Unit::COPY, &name, n, &[&n, &ca, &xa, &ya, &za])
    } else {
        l.run(Unit::COPY, &name, n, &[&geo, &ca, &xa, &ya, &za])
    }
}

/// `y = x as dtype`.
pub(crate) fn cast(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    let n = elements(y.shape());
    if n == 0 {
        return Ok(());
    }
    let l = Launcher::new(cx)?;
    if x.dtype() == y.dtype() && x.dtype() != DType::BOOL {
        return l.copy(y.addr().0, x.addr().0, y.byte_size());
    }
    let name = cast_name(x.dtype(), y.dtype())?;
    l.run(
        Unit::of(Family::Cast, x.dtype()),
        &name,
        n,
        &[&n, &x.addr().0, &y.addr().0],
    )
}

/// f64 → f32 rounded to odd: the f32 rounds once more to a half exactly as the f64 would have
/// (the CPU device's `round_to_odd`, for Fill's value).
fn round_to_odd(v: f64) -> f32 {
    if v.is_nan() {
        return v as f32;
    }
    let mut f = v as f32;
    if (f as f64).abs() > v.abs() {
        f = f32::from_bits(f.to_bits() - 1);
    }
    if f as f64 != v {
        f = f32::from_bits(f.to_bits() | 1);
    }
    f
}

/// The bytes of `value` as one element of `dtype`, as the CPU device's Fill converts it (Rust
/// `as`; bool: non-zero; halves rounded once), little-endian in the low bytes of a `u64`.
pub(crate) fn scalar_bits(dtype: DType, value: f64) -> Result<u64> {
    Ok(match dtype {
        DType::F32 => (value as f32).to_bits() as u64,
        DType::F64 => value.to_bits(),
        DType::I32 => value as i32 as u32 as u64,
        DType::I64 => value as i64 as u64,
        DType::U8 => value as u8 as u64,
        DType::BOOL => (value != 0.0) as u64,
        DType::F16 => half::f16::from_f32(round_to_odd(value)).to_bits() as u64,
        DType::BF16 => half::bf16::from_f32(round_to_odd(value)).to_bits() as u64,
        other => return Err(Error::unimplemented(format!("Fill of {other}"))),
    })
}

/// Fills `n` elements of `size` bytes at `addr` with `bits` (the low `size` bytes).
pub(crate) fn fill_bits(l: &Launcher<'_>, addr: u64, n: i64, size: u64, bits: u64) -> Result<()> {
    let bytes = bits.to_le_bytes();
    let size_us = size as usize;
    if bytes[..size_us].iter().all(|&b| b == bytes[0]) {
        return l.memset(addr, bytes[0], n as u64 * size);
    }
    let name = sized_name("fill", size);
    let (v8, v16, v32) = (bits as u8, bits as u16, bits as u32);
    let value: &dyn Param = match size {
        1 => &v8,
        2 => &v16,
        4 => &v32,
        _ => &bits,
    };
    l.run(Unit::COPY, &name, n, &[&n, value, &addr])
}

/// `y = value` everywhere.
pub(crate) fn fill(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(0, 1)?;
    let y = cx.output(0)?;
    let n = elements(y.shape());
    if n == 0 {
        return Ok(());
    }
    let bits = scalar_bits(y.dtype(), cx.attr_float("value")?)?;
    let l = Launcher::new(cx)?;
    fill_bits(&l, y.addr().0, n, dtype_size(y.dtype())?, bits)
}

/// `y[..., i, ...] = i` along `axis`.
pub(crate) fn iota(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(0, 1)?;
    let y = cx.output(0)?;
    let n = elements(y.shape());
    if n == 0 {
        return Ok(());
    }
    let axis = axis_index("Iota", cx.attr_int("axis")?, y.rank())?;
    let inner: i64 = y.shape()[axis + 1..].iter().product();
    let dim = y.shape()[axis];
    let name = iota_name(y.dtype())?;
    Launcher::new(cx)?.run(Unit::COPY, &name, n, &[&n, &inner, &dim, &y.addr().0])
}

/// `sum = inputs[0] + inputs[1] + …`, added left to right as the CPU does.
pub(crate) fn add_n(cx: &Cx<'_>) -> Result<()> {
    let inputs = cx.inputs();
    let sum = cx.output(0)?;
    let n = elements(sum.shape());
    if inputs.is_empty() {
        return Err(Error::invalid_argument("AddN needs at least one input"));
    }
    if n == 0 {
        return Ok(());
    }
    let l = Launcher::new(cx)?;
    let first = cx.input(0)?;
    if inputs.len() == 1 {
        return l.copy(sum.addr().0, first.addr().0, sum.byte_size());
    }
    let name = elementwise_name("add", first.dtype(), true)?;
    let out = sum.addr().0;
    let mut acc = first.addr().0;
    for t in inputs.iter().skip(1) {
        // An elementwise kernel may write the element it reads: `out` is both.
        l.run(
            Unit::of(Family::Binary, first.dtype()),
            &name,
            n,
            &[&n, &acc, &t.addr().0, &out],
        )?;
        acc = out;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_values_convert_as_the_cpu_does() {
        assert_eq!(
            scalar_bits(DType::I32, -1.5).unwrap(),
            (-1i32) as u32 as u64
        );
        assert_eq!(scalar_bits(DType::U8, 300.0).unwrap(), 255);
        assert_eq!(scalar_bits(DType::U8, -4.0).unwrap(), 0);
        assert_eq!(scalar_bits(DType::I64, f64::NAN).unwrap(), 0);
        assert_eq!(scalar_bits(DType::BOOL, 0.25).unwrap(), 1);
        assert_eq!(
            scalar_bits(DType::F32, 0.1).unwrap(),
            0.1f32.to_bits() as u64
        );
        assert_eq!(scalar_bits(DType::F16, 1.0).unwrap(), 0x3c00);
        assert_eq!(scalar_bits(DType::BF16, -2.0).unwrap(), 0xc000);
        // Just above the tie between two f16 values: rounds up (rounding through the nearest
        // f32 first would land on the tie and round to even, down).
        let tie = 1.0 + 2f64.powi(-11);
        let above = tie + 2f64.powi(-40);
        assert_eq!(scalar_bits(DType::F16, tie).unwrap(), 0x3c00);
        assert_eq!(scalar_bits(DType::F16, above).unwrap(), 0x3c01);
    }

    #[test]
    fn round_to_odd_keeps_inexactness_in_the_last_bit() {
        assert_eq!(round_to_odd(1.5), 1.5);
        let v = 1.0 + 2f64.powi(-30);
        let f = round_to_odd(v);
        assert_eq!(f.to_bits(), 1.0f32.to_bits() | 1);
        assert_eq!(round_to_odd(-v).to_bits(), (-1.0f32).to_bits() | 1);
        assert_eq!(round_to_odd(1e300), f32::MAX);
        assert!(round_to_odd(f64::NAN).is_nan());
        assert_eq!(round_to_odd(f64::INFINITY), f32::INFINITY);
    }
}
