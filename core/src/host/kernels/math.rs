//! f32 `exp`, `ln`, `tanh` and `sigmoid` written without branches, so that a loop over a slice
//! vectorizes (libm's scalar calls cost several ns per element). They follow Cephes (range
//! reduction plus a minimax polynomial) and stay within a few ulps of the exact results,
//! including subnormal results, infinities and NaN. f64 uses the standard library.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding and subtracting it rounds to the nearest integer.
const ROUND: f32 = 12_582_912.0;

/// 2^n for n in [-126, 127].
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2) / 2.
    let xc = x.clamp(-104.0, 88.8);
    let t = xc * LOG2E + ROUND;
    let nf = t - ROUND;
    // n itself from t's low mantissa bits (a float-to-int `as` does not vectorize).
    let n = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = xc - nf * LN2_HI - nf * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    // n is in [-150, 128]: scale in two steps so that each factor is a normal number and a
    // subnormal result is rounded once.
    let n1 = n >> 1;
    let res = y * pow2i(n1) * pow2i(n - n1);
    if x > 88.722_84 {
        f32::INFINITY
    } else if x < -104.0 {
        0.0
    } else if x.is_nan() {
        x
    } else {
        res
    }
}

#[inline(always)]
pub(crate) fn ln_f32(x: f32) -> f32 {
    // Subnormals: scale into the normal range first.
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    // m in [0.5, 1).
    let mut m = f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000);
    let low = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= low as i32;
    m = if low { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let mut y = 7.037_683_6e-2f32;
    y = y * m - 1.151_461_1e-1;
    y = y * m + 1.167_699_9e-1;
    y = y * m - 1.242_014_1e-1;
    y = y * m + 1.424_932_3e-1;
    y = y * m - 1.666_805_8e-1;
    y = y * m + 2.000_071_4e-1;
    y = y * m - 2.499_999_4e-1;
    y = y * m + 3.333_333_1e-1;
    y = y * m * z;
    let fe = e as f32;
    y += LN2_LO * fe;
    y += -0.5 * z;
    let res = m + y + LN2_HI * fe;
    if x.is_nan() || x < 0.0 {
        f32::NAN
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        x
    } else {
        res
    }
}

#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    // |x| < 0.625: odd polynomial.
    let z = x * x;
    let mut p = -5.704_988_7e-3f32;
    p = p * z + 2.063_908_9e-2;
    p = p * z - 5.373_971_6e-2;
    p = p * z + 1.333_144_2e-1;
    p = p * z - 3.333_328_2e-1;
    let small = p * z * x + x;
    // Otherwise 1 - 2 / (exp(2|x|) + 1), with x's sign (exp overflowing to inf gives 1).
    let big = 1.0 - 2.0 / (exp_f32(a + a) + 1.0);
    let big = if x < 0.0 { -big } else { big };
    if a < 0.625 {
        small
    } else {
        big
    }
}

#[inline(always)]
pub(crate) fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distance in ulps between `got` and the exact value `want` (rounded to f32).
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got.is_nan() || w.is_nan() {
            return if got.is_nan() && w.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        if got == w {
            return 0.0;
        }
        if got.is_infinite() || w.is_infinite() {
            return f64::INFINITY;
        }
        // One ulp at `want`'s magnitude (subnormal spacing at the bottom).
        let ulp = (w.abs().max(f32::MIN_POSITIVE) as f64) * f32::EPSILON as f64;
        (got as f64 - want).abs() / ulp
    }

    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    fn check(
        name: &str,
        f: fn(f32) -> f32,
        exact: fn(f64) -> f64,
        xs: impl Iterator<Item = f32>,
        max_ulps: f64,
    ) {
        let mut worst = (0.0, 0.0f32);
        for x in xs {
            let u = ulps(f(x), exact(x as f64));
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(
            worst.0 <= max_ulps,
            "{name}: {} ulps at x = {}",
            worst.0,
            worst.1
        );
    }

    #[test]
    fn exp_is_accurate_over_its_range() {
        check("exp", exp_f32, f64::exp, sweep(-103.9, 88.7, 400_000), 2.0);
        check("exp", exp_f32, f64::exp, sweep(-1.0, 1.0, 100_000), 2.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(-105.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        // A subnormal result.
        let s = exp_f32(-100.0);
        assert!(s > 0.0 && s < f32::MIN_POSITIVE);
    }

    #[test]
    fn ln_is_accurate_over_its_range() {
        check("ln", ln_f32, f64::ln, sweep(1e-3, 10.0, 400_000), 2.0);
        let wide = (0..200_000).map(|i| f32::from_bits(0x0000_0100 + i * 10_650));
        check("ln", ln_f32, f64::ln, wide, 2.0);
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(-0.0), f32::NEG_INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert!(ln_f32(f32::NAN).is_nan());
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn tanh_and_sigmoid_are_accurate() {
        check(
            "tanh",
            tanh_f32,
            f64::tanh,
            sweep(-12.0, 12.0, 400_000),
            3.0,
        );
        check("tanh", tanh_f32, f64::tanh, sweep(-1e-3, 1e-3, 10_000), 2.0);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f32(0.0), 0.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        check(
            "sigmoid",
            sigmoid_f32,
            sig,
            sweep(-80.0, 30.0, 400_000),
            3.0,
        );
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert!(sigmoid_f32(f32::NAN).is_nan());
    }
}
