// devplug CUDA plugin: what every kernel family shares. Compiled at run time by NVRTC, in
// front of one family's source (see src/kernels/modules.rs); no CUDA header is included, so
// NVRTC needs nothing but itself.
//
// Semantics follow the CPU device exactly (docs/c-api.md): integers wrap (two's complement),
// Div by zero is 0 and MIN / -1 is MIN, float Maximum/Minimum propagate NaN, f16 and bf16 are
// computed in f32 and rounded once (to nearest, ties to even).

typedef unsigned char u8;
typedef int i32;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// Storage types of the dtypes without a C++ arithmetic type.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };
struct b8 { u8 v; };

#define DP_MAX_RANK 8

// Which dtypes' kernels a compile unit instantiates: the plugin compiles one dtype of a family at
// a time (src/kernels/modules.rs) by defining the others' gates empty in front of this file;
// what is not defined instantiates everything.
#ifndef DP_ON_f32
#define DP_ON_f32(...) __VA_ARGS__
#endif
#ifndef DP_ON_f64
#define DP_ON_f64(...) __VA_ARGS__
#endif
#ifndef DP_ON_i32
#define DP_ON_i32(...) __VA_ARGS__
#endif
#ifndef DP_ON_i64
#define DP_ON_i64(...) __VA_ARGS__
#endif
#ifndef DP_ON_u8
#define DP_ON_u8(...) __VA_ARGS__
#endif
#ifndef DP_ON_bool
#define DP_ON_bool(...) __VA_ARGS__
#endif
#ifndef DP_ON_f16
#define DP_ON_f16(...) __VA_ARGS__
#endif
#ifndef DP_ON_bf16
#define DP_ON_bf16(...) __VA_ARGS__
#endif

// An elementwise walk: output element i (row-major over `shape`) reads input k at element
// offset sum(coord[d] * st[k][d]); broadcast dimensions have stride 0. Dimensions that are
// contiguous in every operand are merged by the host first (src/kernels/plan.rs).
struct Geo {
  i64 n;
  i32 rank;
  i32 pad;
  i64 shape[DP_MAX_RANK];
  i64 st[3][DP_MAX_RANK];
};

#define GRID_STRIDE(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ void geo_offsets(const Geo& g, i64 i, int k, i64* off) {
  for (int j = 0; j < k; ++j) off[j] = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    i64 s = g.shape[d];
    i64 c = i % s;
    i /= s;
    for (int j = 0; j < k; ++j) off[j] += c * g.st[j][d];
  }
}

// ---- conversions -----------------------------------------------------------------------------

#ifdef DP_HOST_EMULATION
// tests/cpp/cuda_kernels_test.cpp runs these kernels on the host; its shim converts halves.
__device__ __forceinline__ float h2f(f16 h) { return dp_host_h2f(h.bits); }
__device__ __forceinline__ f16 f2h(float f) {
  f16 h;
  h.bits = dp_host_f2h(f);
  return h;
}
#else
__device__ __forceinline__ float h2f(f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ f16 f2h(float f) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
#endif
__device__ __forceinline__ float bf2f(bf16 b) { return __uint_as_float(((u32)b.bits) << 16); }
__device__ __forceinline__ bf16 f2bf(float f) {
  u32 u = __float_as_uint(f);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = (u16)((u >> 16) | 0x40u);  // NaN: keep sign and payload's top, make it quiet
  } else {
    r.bits = (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return r;
}
// f64 -> f32 rounded to odd: the f32 then rounds once more to a half as the f64 would have
// directly (f32 has more than twice a half's precision plus two bits).
__device__ __forceinline__ float d2f_odd(double d) {
  float f = __double2float_rz(d);
  if (f == f && (double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}

// Tr<T>: load a stored element into the type it is computed in (C), and store one back.
template <class T> struct Tr {
  typedef T C;
  static __device__ __forceinline__ C ld(T x) { return x; }
  static __device__ __forceinline__ T st(C c) { return c; }
};
template <> struct Tr<f16> {
  typedef float C;
  static __device__ __forceinline__ float ld(f16 x) { return h2f(x); }
  static __device__ __forceinline__ f16 st(float c) { return f2h(c); }
};
template <> struct Tr<bf16> {
  typedef float C;
  static __device__ __forceinline__ float ld(bf16 x) { return bf2f(x); }
  static __device__ __forceinline__ bf16 st(float c) { return f2bf(c); }
};
template <> struct Tr<b8> {
  typedef u8 C;
  static __device__ __forceinline__ u8 ld(b8 x) { return x.v != 0; }
  static __device__ __forceinline__ b8 st(u8 c) { b8 r; r.v = c != 0; return r; }
};

__device__ __forceinline__ bool is_nan(float x) { return x != x; }
__device__ __forceinline__ bool is_nan(double x) { return x != x; }
template <class C> __device__ __forceinline__ bool is_nan(C) { return false; }
