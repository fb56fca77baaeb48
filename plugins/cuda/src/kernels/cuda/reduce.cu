// Reductions over any set of axes. The host splits the input's dimensions into kept and
// reduced ones (each group merged where contiguous): output element o reads the elements at
// offset kept(o) + reduced(r) for r < count. Two kernels per op and dtype: `_b` gives each
// output a block of 256 threads and a tree in shared memory (long reductions), `_t` gives each
// output one thread (short ones).

struct Red {
  i64 n_out;
  i64 count;
  i32 kr;
  i32 rr;
  i64 kshape[DP_MAX_RANK];
  i64 kst[DP_MAX_RANK];
  i64 rshape[DP_MAX_RANK];
  i64 rst[DP_MAX_RANK];
};

__device__ __forceinline__ i64 red_off(i64 idx, int rank, const i64* shape, const i64* st) {
  i64 off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    i64 c = idx % shape[d];
    idx /= shape[d];
    off += c * st[d];
  }
  return off;
}

template <class C> struct Lim;
template <> struct Lim<float> {
  static __device__ __forceinline__ float lowest() { return -__int_as_float(0x7f800000); }
  static __device__ __forceinline__ float highest() { return __int_as_float(0x7f800000); }
};
template <> struct Lim<double> {
  static __device__ __forceinline__ double lowest() { return -__longlong_as_double(0x7ff0000000000000ll); }
  static __device__ __forceinline__ double highest() { return __longlong_as_double(0x7ff0000000000000ll); }
};
template <> struct Lim<i32> {
  static __device__ __forceinline__ i32 lowest() { return (i32)0x80000000u; }
  static __device__ __forceinline__ i32 highest() { return 0x7fffffff; }
};
template <> struct Lim<i64> {
  static __device__ __forceinline__ i64 lowest() { return (i64)0x8000000000000000ull; }
  static __device__ __forceinline__ i64 highest() { return (i64)0x7fffffffffffffffull; }
};
template <> struct Lim<u8> {
  static __device__ __forceinline__ u8 lowest() { return 0; }
  static __device__ __forceinline__ u8 highest() { return 255; }
};

// Sums accumulate in f32 for f16/bf16 (as the CPU does), wrap in the integer's own width.
template <class T> struct SumAcc { typedef typename Tr<T>::C A; };
template <> struct SumAcc<i32> { typedef u32 A; };
template <> struct SumAcc<i64> { typedef u64 A; };
template <> struct SumAcc<u8> { typedef u32 A; };

template <class T> struct RSum {
  typedef typename SumAcc<T>::A A;
  static __device__ __forceinline__ A id() { return (A)0; }
  static __device__ __forceinline__ A comb(A a, A b) { return a + b; }
  static __device__ __forceinline__ A load(T x) { return (A)Tr<T>::ld(x); }
  static __device__ __forceinline__ T store(A a, i64) { return Tr<T>::st((typename Tr<T>::C)a); }
};
template <class T> struct RMax {
  typedef typename Tr<T>::C A;
  static __device__ __forceinline__ A id() { return Lim<A>::lowest(); }
  static __device__ __forceinline__ A comb(A a, A b) { return (a > b || is_nan(a)) ? a : b; }
  static __device__ __forceinline__ A load(T x) { return Tr<T>::ld(x); }
  static __device__ __forceinline__ T store(A a, i64) { return Tr<T>::st(a); }
};
template <class T> struct RMin {
  typedef typename Tr<T>::C A;
  static __device__ __forceinline__ A id() { return Lim<A>::highest(); }
  static __device__ __forceinline__ A comb(A a, A b) { return (a < b || is_nan(a)) ? a : b; }
  static __device__ __forceinline__ A load(T x) { return Tr<T>::ld(x); }
  static __device__ __forceinline__ T store(A a, i64) { return Tr<T>::st(a); }
};
// Float means: the f32/f64 sum over the count. Integer means (i32, u8): the exact sum (in i64,
// which holds 2^32 of them) over the count, truncated.
template <class T> struct RMean {
  typedef typename Tr<T>::C A;
  static __device__ __forceinline__ A id() { return (A)0; }
  static __device__ __forceinline__ A comb(A a, A b) { return a + b; }
  static __device__ __forceinline__ A load(T x) { return Tr<T>::ld(x); }
  static __device__ __forceinline__ T store(A a, i64 n) { return Tr<T>::st(a / (A)n); }
};
template <class T> struct RMeanInt {
  typedef i64 A;
  static __device__ __forceinline__ A id() { return 0; }
  static __device__ __forceinline__ A comb(A a, A b) { return a + b; }
  static __device__ __forceinline__ A load(T x) { return (A)x; }
  static __device__ __forceinline__ T store(A a, i64 n) { return (T)(a / n); }
};

#define RED_THREADS 256

template <class T, class R> __device__ __forceinline__ void red_block(const Red& p, const T* x, T* y) {
  typedef typename R::A A;
  __align__(8) __shared__ unsigned char raw[RED_THREADS * 8];
  A* sh = reinterpret_cast<A*>(raw);
  for (i64 o = blockIdx.x; o < p.n_out; o += gridDim.x) {
    const i64 base = red_off(o, p.kr, p.kshape, p.kst);
    A acc = R::id();
    for (i64 r = threadIdx.x; r < p.count; r += blockDim.x)
      acc = R::comb(acc, R::load(x[base + red_off(r, p.rr, p.rshape, p.rst)]));
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) sh[threadIdx.x] = R::comb(sh[threadIdx.x], sh[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = R::store(sh[0], p.count);
    __syncthreads();
  }
}

template <class T, class R> __device__ __forceinline__ void red_thread(const Red& p, const T* x, T* y) {
  typedef typename R::A A;
  GRID_STRIDE(o, p.n_out) {
    const i64 base = red_off(o, p.kr, p.kshape, p.kst);
    A acc = R::id();
    for (i64 r = 0; r < p.count; ++r) acc = R::comb(acc, R::load(x[base + red_off(r, p.rr, p.rshape, p.rst)]));
    y[o] = R::store(acc, p.count);
  }
}

#define RED(op, R, T, tn) DP_ON_##tn(RED_(op, R, T, tn))
#define RED_(op, R, T, tn)                                                                \
  extern "C" __global__ void dp_reduce_##op##_##tn##_b(Red p, const T* x, T* y) {         \
    red_block<T, R<T> >(p, x, y);                                                         \
  }                                                                                       \
  extern "C" __global__ void dp_reduce_##op##_##tn##_t(Red p, const T* x, T* y) {         \
    red_thread<T, R<T> >(p, x, y);                                                        \
  }
#define RED_NUMERIC(op, R)                                                                \
  RED(op, R, float, f32) RED(op, R, double, f64) RED(op, R, i32, i32) RED(op, R, i64, i64) \
  RED(op, R, u8, u8) RED(op, R, f16, f16) RED(op, R, bf16, bf16)

RED_NUMERIC(sum, RSum)
RED_NUMERIC(max, RMax)
RED_NUMERIC(min, RMin)
RED(mean, RMean, float, f32)
RED(mean, RMean, double, f64)
RED(mean, RMean, f16, f16)
RED(mean, RMean, bf16, bf16)
RED(mean, RMeanInt, i32, i32)
RED(mean, RMeanInt, u8, u8)
