// Data movement, by element size (the dtype does not matter): strided copies (Transpose,
// BroadcastTo, Slice, Concat), Select, Fill; and Iota, per dtype.

struct Walk {
  i64 n;
  i32 rank;
  i32 pad;
  i64 shape[DP_MAX_RANK];
  i64 src[DP_MAX_RANK];
  i64 dst[DP_MAX_RANK];
};

template <class E> __device__ __forceinline__ void walk_copy(const Walk& w, const E* s, E* d) {
  GRID_STRIDE(i, w.n) {
    i64 so = 0, dof = 0, r = i;
    for (int k = w.rank - 1; k >= 0; --k) {
      i64 c = r % w.shape[k];
      r /= w.shape[k];
      so += c * w.src[k];
      dof += c * w.dst[k];
    }
    d[dof] = s[so];
  }
}

template <class E> __device__ __forceinline__ void select_s(const Geo& g, const u8* c, const E* x, const E* y, E* z) {
  GRID_STRIDE(i, g.n) {
    i64 o[3];
    geo_offsets(g, i, 3, o);
    z[i] = c[o[0]] ? x[o[1]] : y[o[2]];
  }
}

#define MOVE(E, sz)                                                                          \
  extern "C" __global__ void dp_copy_##sz(Walk w, const E* s, E* d) { walk_copy<E>(w, s, d); } \
  extern "C" __global__ void dp_select_##sz##_c(i64 n, const u8* c, const E* x, const E* y, E* z) { \
    GRID_STRIDE(i, n) z[i] = c[i] ? x[i] : y[i];                                             \
  }                                                                                          \
  extern "C" __global__ void dp_select_##sz##_s(Geo g, const u8* c, const E* x, const E* y, E* z) { \
    select_s<E>(g, c, x, y, z);                                                              \
  }                                                                                          \
  extern "C" __global__ void dp_fill_##sz(i64 n, E v, E* y) { GRID_STRIDE(i, n) y[i] = v; }

MOVE(u8, 1)
MOVE(u16, 2)
MOVE(u32, 4)
MOVE(u64, 8)

// Iota: element i holds its coordinate along the axis, (i / inner) % dim, as the dtype (ints
// wrap; halves round once from the exact value).
template <class T> __device__ __forceinline__ T iota_val(i64 v) { return (T)v; }
template <> __device__ __forceinline__ i32 iota_val<i32>(i64 v) { return (i32)(u32)(u64)v; }
template <> __device__ __forceinline__ u8 iota_val<u8>(i64 v) { return (u8)(u64)v; }
template <> __device__ __forceinline__ f16 iota_val<f16>(i64 v) { return f2h(d2f_odd((double)v)); }
template <> __device__ __forceinline__ bf16 iota_val<bf16>(i64 v) { return f2bf(d2f_odd((double)v)); }

#define IOTA(T, tn)                                                                       \
  extern "C" __global__ void dp_iota_##tn(i64 n, i64 inner, i64 dim, T* y) {             \
    GRID_STRIDE(i, n) y[i] = iota_val<T>((i / inner) % dim);                              \
  }
IOTA(float, f32)
IOTA(double, f64)
IOTA(i32, i32)
IOTA(i64, i64)
IOTA(u8, u8)
IOTA(f16, f16)
IOTA(bf16, bf16)
