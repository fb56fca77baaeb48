// A fake cuBLAS (libcublas.so) for testing the CUDA plugin without a GPU: the calls the plugin
// makes (create, destroy, set stream, cublasGemmStridedBatchedEx), with cuBLAS's column-major
// semantics, argument checks and types (f32, f64, f16, bf16; f32 accumulation but for f64),
// computed on the host in the order of the handle's stream of the fake driver
// (devplug_fake_cuda_enqueue in driver.cpp).
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" int devplug_fake_cuda_enqueue(void* stream, void (*fn)(void*), void* arg);

namespace {

enum : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum : int { R_32F = 0, R_64F = 1, R_16F = 2, R_16BF = 14 };
enum : int { COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77, COMPUTE_64F = 70 };

struct Handle {
  void* stream = nullptr;
};

double load(int ty, const uint8_t* base, int64_t i) {
  switch (ty) {
    case R_32F: {
      float f;
      std::memcpy(&f, base + 4 * i, 4);
      return f;
    }
    case R_64F: {
      double d;
      std::memcpy(&d, base + 8 * i, 8);
      return d;
    }
    case R_16F: {
      _Float16 h;
      std::memcpy(&h, base + 2 * i, 2);
      return static_cast<float>(h);
    }
    default: {  // bf16: the upper half of an f32
      uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      uint32_t u = uint32_t(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
}

void store(int ty, uint8_t* base, int64_t i, double v) {
  switch (ty) {
    case R_32F: {
      float f = static_cast<float>(v);
      std::memcpy(base + 4 * i, &f, 4);
      break;
    }
    case R_64F: std::memcpy(base + 8 * i, &v, 8); break;
    case R_16F: {
      _Float16 h = static_cast<_Float16>(static_cast<float>(v));
      std::memcpy(base + 2 * i, &h, 2);
      break;
    }
    default: {  // bf16, rounded to nearest even
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t b = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40u)
                                                   : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      std::memcpy(base + 2 * i, &b, 2);
    }
  }
}

struct Gemm {
  bool ta, tb;
  int m, n, k;
  double alpha, beta;
  const uint8_t *a, *b;
  uint8_t* c;
  int64_t lda, ldb, ldc, sa, sb, sc;
  int batch, ty;
  bool f64;
};

void run_gemm(void* arg) {
  Gemm* g = static_cast<Gemm*>(arg);
  for (int z = 0; z < g->batch; ++z) {
    const uint8_t* a = g->a;
    const uint8_t* b = g->b;
    int64_t ao = z * g->sa, bo = z * g->sb, co = z * g->sc;
    for (int j = 0; j < g->n; ++j)
      for (int i = 0; i < g->m; ++i) {
        double acc64 = 0;
        float acc32 = 0;
        for (int p = 0; p < g->k; ++p) {
          double x = load(g->ty, a, ao + (g->ta ? p + int64_t(i) * g->lda : i + int64_t(p) * g->lda));
          double y = load(g->ty, b, bo + (g->tb ? j + int64_t(p) * g->ldb : p + int64_t(j) * g->ldb));
          if (g->f64)
            acc64 += x * y;
          else
            acc32 += static_cast<float>(x) * static_cast<float>(y);
        }
        double acc = g->f64 ? acc64 : acc32;
        int64_t ci = co + i + int64_t(j) * g->ldc;
        double prev = g->beta == 0 ? 0 : load(g->ty, g->c, ci);
        store(g->ty, g->c, ci, g->alpha * acc + g->beta * prev);
      }
  }
  delete g;
}

}  // namespace

extern "C" {

int cublasCreate_v2(void** handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new Handle();
  return CUBLAS_STATUS_SUCCESS;
}

int cublasDestroy_v2(void* handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete static_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

int cublasSetStream_v2(void* handle, void* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  static_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

int cublasGemmStridedBatchedEx(void* handle, int transa, int transb, int m, int n, int k,
                               const void* alpha, const void* a, int a_type, int lda,
                               long long stride_a, const void* b, int b_type, int ldb,
                               long long stride_b, const void* beta, void* c, int c_type, int ldc,
                               long long stride_c, int batch, int compute, int /*algo*/) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || (transa != 0 && transa != 1) || (transb != 0 && transb != 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = transa ? k : m, rows_b = transb ? n : k;
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a_type != b_type || a_type != c_type) return CUBLAS_STATUS_NOT_SUPPORTED;
  bool f64 = compute == COMPUTE_64F;
  bool ok = (a_type == R_64F && f64) ||
            ((a_type == R_32F || a_type == R_16F || a_type == R_16BF) &&
             (compute == COMPUTE_32F || compute == COMPUTE_32F_FAST_TF32));
  if (!ok || !alpha || !beta) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  Gemm* g = new Gemm();
  g->ta = transa == 1;
  g->tb = transb == 1;
  g->m = m;
  g->n = n;
  g->k = k;
  g->alpha = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  g->beta = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  g->a = static_cast<const uint8_t*>(a);
  g->b = static_cast<const uint8_t*>(b);
  g->c = static_cast<uint8_t*>(c);
  g->lda = lda;
  g->ldb = ldb;
  g->ldc = ldc;
  g->sa = stride_a;
  g->sb = stride_b;
  g->sc = stride_c;
  g->batch = batch;
  g->ty = a_type;
  g->f64 = f64;
  if (devplug_fake_cuda_enqueue(static_cast<Handle*>(handle)->stream, run_gemm, g) != 0) {
    delete g;
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
