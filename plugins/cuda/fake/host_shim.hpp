// CUDA's built-ins for the host, so that the CUDA plugin's kernels (src/kernels/cuda/*.cu) can
// be compiled by a host C++17 compiler and run on the CPU: thread and block indices (thread
// locals the caller sets), __syncthreads (a barrier over the threads of one emulated block), the
// bit casts, the f16 conversions (through _Float16). Include it, then the kernel sources.
//
// Used by tests/cpp/cuda_kernels_test.cpp (each kernel against the CPU device's op) and by the
// fake CUDA driver (plugins/cuda/fake), which runs every kernel as one thread of one block.
#ifndef DEVPLUG_CUDA_HOST_SHIM_HPP
#define DEVPLUG_CUDA_HOST_SHIM_HPP

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>

#define DP_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
// Shared memory: one copy per kernel, shared by the threads of the emulated block. The fake
// driver, which runs each launch as one thread, possibly on several streams at once, makes it
// per thread (DP_SHARED_STORAGE=static thread_local).
#ifndef DP_SHARED_STORAGE
#define DP_SHARED_STORAGE static
#endif
#define __shared__ DP_SHARED_STORAGE
#define __align__(n) alignas(n)

struct DpDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local DpDim3 threadIdx, blockIdx;
inline DpDim3 blockDim{1, 1, 1}, gridDim{1, 1, 1};

// One emulated block's barrier.
struct DpBarrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned count = 0, waiting = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    unsigned gen = generation;
    if (++waiting == count) {
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return gen != generation; });
    }
  }
};
inline DpBarrier g_barrier;
static inline void __syncthreads() { g_barrier.wait(); }

template <class To, class From>
static inline To dp_bits(From f) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
static inline float __int_as_float(int x) { return dp_bits<float>(x); }
static inline float __uint_as_float(unsigned x) { return dp_bits<float>(x); }
static inline unsigned __float_as_uint(float x) { return dp_bits<unsigned>(x); }
static inline double __longlong_as_double(long long x) { return dp_bits<double>(x); }
// Rounded toward zero, as the CUDA intrinsic (finite values beyond the range give ±FLT_MAX).
static inline float __double2float_rz(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return f;
}
static inline float dp_host_h2f(unsigned short bits) { return static_cast<float>(dp_bits<_Float16>(bits)); }
static inline unsigned short dp_host_f2h(float f) {
  return dp_bits<unsigned short>(static_cast<_Float16>(f));
}

using std::exp;
using std::fabs;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;

#include "../src/kernels/cuda/prelude.cuh"
#include "../src/kernels/cuda/binary.cu"
#include "../src/kernels/cuda/unary.cu"
#include "../src/kernels/cuda/cast.cu"
#include "../src/kernels/cuda/reduce.cu"
#include "../src/kernels/cuda/copy.cu"

#endif
