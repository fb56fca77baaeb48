// Binary elementwise ops (Add … Pow) and comparisons, with broadcasting. Each op and dtype has
// two kernels: `_c` when every operand is contiguous with the output's shape (a plain loop) and
// `_s` for any broadcast (a Geo walk).

__device__ __forceinline__ i32 w_add(i32 a, i32 b) { return (i32)((u32)a + (u32)b); }
__device__ __forceinline__ i64 w_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ u8 w_add(u8 a, u8 b) { return (u8)(a + b); }
__device__ __forceinline__ float w_add(float a, float b) { return a + b; }
__device__ __forceinline__ double w_add(double a, double b) { return a + b; }

__device__ __forceinline__ i32 w_sub(i32 a, i32 b) { return (i32)((u32)a - (u32)b); }
__device__ __forceinline__ i64 w_sub(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
__device__ __forceinline__ u8 w_sub(u8 a, u8 b) { return (u8)(a - b); }
__device__ __forceinline__ float w_sub(float a, float b) { return a - b; }
__device__ __forceinline__ double w_sub(double a, double b) { return a - b; }

__device__ __forceinline__ i32 w_mul(i32 a, i32 b) { return (i32)((u32)a * (u32)b); }
__device__ __forceinline__ i64 w_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
__device__ __forceinline__ u8 w_mul(u8 a, u8 b) { return (u8)((u32)a * (u32)b); }
__device__ __forceinline__ float w_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double w_mul(double a, double b) { return a * b; }

__device__ __forceinline__ i32 w_div(i32 a, i32 b) {
  return b == 0 ? 0 : (b == -1 ? (i32)(0u - (u32)a) : a / b);
}
__device__ __forceinline__ i64 w_div(i64 a, i64 b) {
  return b == 0 ? 0 : (b == -1 ? (i64)(0ull - (u64)a) : a / b);
}
__device__ __forceinline__ u8 w_div(u8 a, u8 b) { return b == 0 ? 0 : (u8)(a / b); }
__device__ __forceinline__ float w_div(float a, float b) { return a / b; }
__device__ __forceinline__ double w_div(double a, double b) { return a / b; }

// Integer powers by squaring, wrapping (computed in the unsigned type of the same width or
// wider: multiplication modulo 2^n agrees).
template <class U> __device__ __forceinline__ U upow(U base, u64 e) {
  U acc = 1;
  while (e) {
    if (e & 1) acc = acc * base;
    e >>= 1;
    if (e) base = base * base;
  }
  return acc;
}
__device__ __forceinline__ i32 w_pow(i32 a, i32 b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  return (i32)upow<u32>((u32)a, (u64)b);
}
__device__ __forceinline__ i64 w_pow(i64 a, i64 b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  return (i64)upow<u64>((u64)a, (u64)b);
}
__device__ __forceinline__ u8 w_pow(u8 a, u8 b) { return (u8)upow<u32>((u32)a, (u64)b); }
__device__ __forceinline__ float w_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double w_pow(double a, double b) { return pow(a, b); }

struct Add { template <class C> static __device__ __forceinline__ C f(C a, C b) { return w_add(a, b); } };
struct Sub { template <class C> static __device__ __forceinline__ C f(C a, C b) { return w_sub(a, b); } };
struct Mul { template <class C> static __device__ __forceinline__ C f(C a, C b) { return w_mul(a, b); } };
struct Div { template <class C> static __device__ __forceinline__ C f(C a, C b) { return w_div(a, b); } };
struct Pow { template <class C> static __device__ __forceinline__ C f(C a, C b) { return w_pow(a, b); } };
// NaN in either operand gives NaN (floats); otherwise the larger / smaller.
struct Max { template <class C> static __device__ __forceinline__ C f(C a, C b) { return (a > b || is_nan(a)) ? a : b; } };
struct Min { template <class C> static __device__ __forceinline__ C f(C a, C b) { return (a < b || is_nan(a)) ? a : b; } };

struct Eq { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a == b; } };
struct Ne { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a != b; } };
struct Lt { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a < b; } };
struct Le { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a <= b; } };
struct Gt { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a > b; } };
struct Ge { template <class C> static __device__ __forceinline__ u8 f(C a, C b) { return a >= b; } };

template <class T, class R, class F>
__device__ __forceinline__ void bin_c(i64 n, const T* a, const T* b, R* z) {
  GRID_STRIDE(i, n) z[i] = Tr<R>::st(F::f(Tr<T>::ld(a[i]), Tr<T>::ld(b[i])));
}
template <class T, class R, class F>
__device__ __forceinline__ void bin_s(const Geo& g, const T* a, const T* b, R* z) {
  GRID_STRIDE(i, g.n) {
    i64 o[2];
    geo_offsets(g, i, 2, o);
    z[i] = Tr<R>::st(F::f(Tr<T>::ld(a[o[0]]), Tr<T>::ld(b[o[1]])));
  }
}

#define BIN(op, F, T, R, tn) DP_ON_##tn(BIN_(op, F, T, R, tn))
#define BIN_(op, F, T, R, tn)                                                             \
  extern "C" __global__ void dp_##op##_##tn##_c(i64 n, const T* a, const T* b, R* z) {   \
    bin_c<T, R, F>(n, a, b, z);                                                           \
  }                                                                                       \
  extern "C" __global__ void dp_##op##_##tn##_s(Geo g, const T* a, const T* b, R* z) {   \
    bin_s<T, R, F>(g, a, b, z);                                                           \
  }

#define ARITH(op, F)                                                                       \
  BIN(op, F, float, float, f32) BIN(op, F, double, double, f64) BIN(op, F, i32, i32, i32) \
  BIN(op, F, i64, i64, i64) BIN(op, F, u8, u8, u8) BIN(op, F, f16, f16, f16)              \
  BIN(op, F, bf16, bf16, bf16)
#define COMPARE(op, F)                                                               \
  BIN(op, F, float, b8, f32) BIN(op, F, double, b8, f64) BIN(op, F, i32, b8, i32)   \
  BIN(op, F, i64, b8, i64) BIN(op, F, u8, b8, u8) BIN(op, F, f16, b8, f16)          \
  BIN(op, F, bf16, b8, bf16)

ARITH(add, Add)
ARITH(sub, Sub)
ARITH(mul, Mul)
ARITH(div, Div)
ARITH(pow, Pow)
ARITH(maximum, Max)
ARITH(minimum, Min)
BIN(maximum, Max, b8, b8, bool)
BIN(minimum, Min, b8, b8, bool)

COMPARE(equal, Eq)
COMPARE(not_equal, Ne)
COMPARE(less, Lt)
COMPARE(less_equal, Le)
COMPARE(greater, Gt)
COMPARE(greater_equal, Ge)
BIN(equal, Eq, b8, b8, bool)
BIN(not_equal, Ne, b8, b8, bool)
