// Cast between every pair of dtypes, as the CPU device does it: Rust `as` between numbers
// (float -> int truncates toward zero and saturates, NaN -> 0; int -> int wraps), `x != 0`
// into bool; into f16/bf16 rounded once, from f32 directly and from anything else through the
// f64 value; out of f16/bf16 through the (exact) f32 value.

template <class S> struct K { enum { flt = 0, half = 0, boolean = 0 }; };
template <> struct K<float> { enum { flt = 1, half = 0, boolean = 0 }; };
template <> struct K<double> { enum { flt = 1, half = 0, boolean = 0 }; };
template <> struct K<f16> { enum { flt = 1, half = 1, boolean = 0 }; };
template <> struct K<bf16> { enum { flt = 1, half = 1, boolean = 0 }; };
template <> struct K<b8> { enum { flt = 0, half = 0, boolean = 1 }; };

template <class D> __device__ __forceinline__ D sat(double v);
template <> __device__ __forceinline__ i32 sat<i32>(double v) {
  if (v != v) return 0;
  if (v >= 2147483647.0) return 2147483647;
  if (v <= -2147483648.0) return (i32)0x80000000u;
  return (i32)v;
}
template <> __device__ __forceinline__ i64 sat<i64>(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return (i64)0x7fffffffffffffffull;
  if (v <= -9223372036854775808.0) return (i64)0x8000000000000000ull;
  return (i64)v;
}
template <> __device__ __forceinline__ u8 sat<u8>(double v) {
  if (v != v || v <= 0.0) return 0;
  if (v >= 255.0) return 255;
  return (u8)v;
}

template <class S, class D> __device__ __forceinline__ D conv(S x) {
  if constexpr (K<S>::half) {
    return conv<float, D>(Tr<S>::ld(x));
  } else if constexpr (K<S>::boolean) {
    return conv<u8, D>(x.v);
  } else if constexpr (K<D>::boolean) {
    b8 r;
    r.v = x != 0;
    return r;
  } else if constexpr (K<D>::half) {
    if constexpr (sizeof(S) == 4 && K<S>::flt) {
      return Tr<D>::st(x);
    } else {
      return Tr<D>::st(d2f_odd((double)x));
    }
  } else if constexpr (K<D>::flt) {
    return (D)x;
  } else if constexpr (K<S>::flt) {
    return sat<D>((double)x);
  } else {
    return (D)x;
  }
}

#define CAST(S, sn, D, dn)                                                             \
  extern "C" __global__ void dp_cast_##sn##_##dn(i64 n, const S* x, D* y) {           \
    GRID_STRIDE(i, n) y[i] = conv<S, D>(x[i]);                                         \
  }
#define CAST_FROM(S, sn) DP_ON_##sn(CAST_ALL(S, sn))
#define CAST_ALL(S, sn)                                                                \
  CAST(S, sn, float, f32) CAST(S, sn, double, f64) CAST(S, sn, i32, i32)               \
  CAST(S, sn, i64, i64) CAST(S, sn, u8, u8) CAST(S, sn, b8, bool) CAST(S, sn, f16, f16) \
  CAST(S, sn, bf16, bf16)

CAST_FROM(float, f32)
CAST_FROM(double, f64)
CAST_FROM(i32, i32)
CAST_FROM(i64, i64)
CAST_FROM(u8, u8)
CAST_FROM(b8, bool)
CAST_FROM(f16, f16)
CAST_FROM(bf16, bf16)
