// Unary elementwise ops: same shape in and out, so one contiguous kernel per op and dtype.

__device__ __forceinline__ i32 w_neg(i32 a) { return (i32)(0u - (u32)a); }
__device__ __forceinline__ i64 w_neg(i64 a) { return (i64)(0ull - (u64)a); }
__device__ __forceinline__ float w_neg(float a) { return -a; }
__device__ __forceinline__ double w_neg(double a) { return -a; }

__device__ __forceinline__ i32 w_abs(i32 a) { return a < 0 ? w_neg(a) : a; }
__device__ __forceinline__ i64 w_abs(i64 a) { return a < 0 ? w_neg(a) : a; }
__device__ __forceinline__ u8 w_abs(u8 a) { return a; }
__device__ __forceinline__ float w_abs(float a) { return fabsf(a); }
__device__ __forceinline__ double w_abs(double a) { return fabs(a); }

__device__ __forceinline__ float w_exp(float a) { return expf(a); }
__device__ __forceinline__ double w_exp(double a) { return exp(a); }
__device__ __forceinline__ float w_log(float a) { return logf(a); }
__device__ __forceinline__ double w_log(double a) { return log(a); }
__device__ __forceinline__ float w_tanh(float a) { return tanhf(a); }
__device__ __forceinline__ double w_tanh(double a) { return tanh(a); }
__device__ __forceinline__ float w_sqrt(float a) { return sqrtf(a); }
__device__ __forceinline__ double w_sqrt(double a) { return sqrt(a); }
__device__ __forceinline__ float w_rsqrt(float a) { return 1.0f / sqrtf(a); }
__device__ __forceinline__ double w_rsqrt(double a) { return 1.0 / sqrt(a); }
__device__ __forceinline__ float w_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
__device__ __forceinline__ double w_sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

#define UN(op, T, tn) DP_ON_##tn(UN_(op, T, tn))
#define UN_(op, T, tn)                                                             \
  extern "C" __global__ void dp_##op##_##tn##_c(i64 n, const T* x, T* y) {       \
    GRID_STRIDE(i, n) y[i] = Tr<T>::st(w_##op(Tr<T>::ld(x[i])));                  \
  }
#define UN_FLOAT(op) UN(op, float, f32) UN(op, double, f64) UN(op, f16, f16) UN(op, bf16, bf16)

UN_FLOAT(neg)
UN(neg, i32, i32)
UN(neg, i64, i64)
UN_FLOAT(abs)
UN(abs, i32, i32)
UN(abs, i64, i64)
UN(abs, u8, u8)
UN_FLOAT(exp)
UN_FLOAT(log)
UN_FLOAT(tanh)
UN_FLOAT(sqrt)
UN_FLOAT(rsqrt)
UN_FLOAT(sigmoid)
