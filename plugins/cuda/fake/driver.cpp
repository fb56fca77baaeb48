// A fake CUDA driver (libcuda.so) for testing the CUDA plugin on machines without a GPU: the
// subset of the driver API the plugin calls, with the semantics the plugin relies on and the
// rules it must keep, so that its tests run everywhere. One device ("devplug fake GPU", compute
// capability 9.0) whose memory is host memory behind opaque addresses.
//
// Modelled, because the plugin must cope with them as with the real driver:
// - a context must be current for every call that needs one (CUDA_ERROR_INVALID_CONTEXT);
// - streams run their work in order on a worker thread each, asynchronously to the caller;
// - a copy from pageable host memory is taken at once and one to pageable memory waits for the
//   stream (not in stream order), only page-locked memory is read and written in stream order;
// - host functions run on one driver thread for all streams, and any driver call from it fails
//   with CUDA_ERROR_NOT_PERMITTED;
// - allocating and freeing memory (cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost,
//   cuMemAllocManaged) first waits for every stream to finish its work, as CUDA may ("cudaMalloc
//   and cudaFree cause the GPU to synchronize across all executing CUDA streams"): a caller that
//   holds what a stream's host function waits for — a lock, or the thread that runs it —
//   deadlocks here as it would on a GPU;
// - events are recorded in stream order; a wait waits for the record as it was when called;
// - an event created without CU_EVENT_DISABLE_TIMING takes the host's steady clock when its
//   stream reaches it, and cuEventElapsedTime keeps CUDA's rules: both events timed and
//   recorded (else CUDA_ERROR_INVALID_HANDLE) and reached (else CUDA_ERROR_NOT_READY).
// Kernels are the plugin's own .cu sources compiled for the host (host_shim.hpp), found by name
// and run as one thread of one block on the stream's worker; the image a module is loaded from
// must look like a CUBIN or PTX. Not modelled: device faults, sticky errors, several devices,
// the GPU's timer resolution (half a microsecond; here the host clock's). The plugin's tests on
// a real GPU remain the proof; this catches what can be caught without one.

#define DP_SHARED_STORAGE static thread_local
#include "host_shim.hpp"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

extern "C" {
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
}

namespace {

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

constexpr size_t kTotalMemory = size_t(1) << 30;  // what the device reports and allows

// Every launch runs as one thread of one block (blockDim and gridDim stay 1): __syncthreads
// waits for that one thread.
const bool g_one_thread_blocks = [] {
  g_barrier.count = 1;
  return true;
}();

struct Context {
  std::atomic<int> refs{0};
};
Context g_ctx;
std::atomic<bool> g_initialized{false};
thread_local Context* t_current = nullptr;
thread_local bool t_on_host_fn_thread = false;

// ---- memory ---------------------------------------------------------------------------------

enum class Kind { Device, Host, Managed };
struct Allocations {
  std::mutex m;
  std::map<uintptr_t, std::pair<size_t, Kind>> live;  // start -> (size, kind)
  size_t device_bytes = 0;

  // The allocation holding [p, p + n), if one does.
  bool find(uintptr_t p, size_t n, Kind* kind) {
    std::lock_guard<std::mutex> lock(m);
    auto it = live.upper_bound(p);
    if (it == live.begin()) return false;
    --it;
    if (p + n > it->first + it->second.first) return false;
    if (kind) *kind = it->second.second;
    return true;
  }
};
// The driver's state lives until the process ends (never destroyed: threads may still wait on it).
Allocations& g_mem = *new Allocations;

void* allocate(size_t n, Kind kind) {
  std::lock_guard<std::mutex> lock(g_mem.m);
  if (kind != Kind::Host && g_mem.device_bytes + n > kTotalMemory) return nullptr;
  // CUDA's allocations are aligned to at least 256 bytes (cuMemAlloc: "suitably aligned for
  // any kind of variable"; in practice 256 or more), and hosts rely on it.
  const size_t rounded = ((n == 0 ? 1 : n) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p) return nullptr;
  std::memset(p, 0, rounded);
  g_mem.live[reinterpret_cast<uintptr_t>(p)] = {n, kind};
  if (kind != Kind::Host) g_mem.device_bytes += n;
  return p;
}

CUresult release(uintptr_t p, Kind kind) {
  std::lock_guard<std::mutex> lock(g_mem.m);
  auto it = g_mem.live.find(p);
  if (it == g_mem.live.end() || it->second.second != kind) return CUDA_ERROR_INVALID_VALUE;
  if (kind != Kind::Host) g_mem.device_bytes -= it->second.first;
  g_mem.live.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}

bool is_device(CUdeviceptr p, size_t n) {
  Kind k = Kind::Device;
  return n == 0 || (g_mem.find(uintptr_t(p), n, &k) && k != Kind::Host);
}
bool is_pinned(const void* p, size_t n) {
  Kind k = Kind::Device;
  return g_mem.find(reinterpret_cast<uintptr_t>(p), n, &k) && k == Kind::Host;
}

// ---- the host-function thread ---------------------------------------------------------------

// Runs the host functions of every stream, one at a time, as CUDA's driver does.
struct HostFnThread {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  std::thread thread;
  bool started = false;

  void run(std::function<void()> job) {  // from a stream worker: runs it there and waits
    std::mutex done_m;
    std::condition_variable done_cv;
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(m);
      if (!started) {
        started = true;
        thread = std::thread([this] {
          t_on_host_fn_thread = true;
          for (;;) {
            std::function<void()> j;
            {
              std::unique_lock<std::mutex> l(m);
              cv.wait(l, [&] { return !jobs.empty(); });
              j = std::move(jobs.front());
              jobs.pop_front();
            }
            j();
          }
        });
        thread.detach();
      }
      jobs.push_back([&, job] {
        job();
        std::lock_guard<std::mutex> l(done_m);
        done = true;
        done_cv.notify_all();
      });
    }
    cv.notify_all();
    std::unique_lock<std::mutex> l(done_m);
    done_cv.wait(l, [&] { return done; });
  }
};
HostFnThread& g_host_fns = *new HostFnThread;

// ---- streams and events ---------------------------------------------------------------------

struct Stream {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  uint64_t enqueued = 0, done = 0;
  bool stop = false;
  std::thread worker;

  Stream() {
    worker = std::thread([this] {
      for (;;) {
        std::function<void()> op;
        {
          std::unique_lock<std::mutex> l(m);
          cv.wait(l, [&] { return stop || !ops.empty(); });
          if (ops.empty()) return;
          op = std::move(ops.front());
          ops.pop_front();
        }
        op();
        {
          std::lock_guard<std::mutex> l(m);
          ++done;
        }
        cv.notify_all();
      }
    });
  }
  ~Stream() {
    {
      std::lock_guard<std::mutex> l(m);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> l(m);
      ops.push_back(std::move(op));
      ++enqueued;
    }
    cv.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> l(m);
    uint64_t target = enqueued;
    cv.wait(l, [&] { return done >= target; });
  }
};

// cuEventCreate's flags.
enum : unsigned {
  CU_EVENT_BLOCKING_SYNC = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_EVENT_INTERPROCESS = 4,
};

struct Event {
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0, reached = 0;
  bool timing = true;
  std::chrono::steady_clock::time_point reached_at{};  // when `reached` was reached
  void wait_for(uint64_t gen) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return reached >= gen; });
  }
};

std::mutex& g_streams_m = *new std::mutex;
std::map<Stream*, std::unique_ptr<Stream>>& g_streams = *new std::map<Stream*, std::unique_ptr<Stream>>;
bool live_stream(Stream* s) {
  std::lock_guard<std::mutex> l(g_streams_m);
  return g_streams.count(s) != 0;
}

// Waits until every stream has done the work enqueued so far.
void drain_all_streams() {
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> l(g_streams_m);
    for (auto& s : g_streams) all.push_back(s.first);
  }
  for (Stream* s : all)
    if (live_stream(s)) s->drain();
}

// Every API entry: initialized, not on the host-function thread, and (when asked) a context.
CUresult enter(bool needs_context) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_on_host_fn_thread) return CUDA_ERROR_NOT_PERMITTED;
  if (needs_context && t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}
#define ENTER(ctx)                  \
  do {                              \
    CUresult e_ = enter(ctx);       \
    if (e_ != CUDA_SUCCESS) return e_; \
  } while (0)

// Runs `op` in stream order (or at once for the legacy stream, NULL).
CUresult on_stream(void* hs, std::function<void()> op) {
  if (hs == nullptr) {
    std::lock_guard<std::mutex> l(g_streams_m);
    for (auto& s : g_streams) s.second->drain();
    op();
    return CUDA_SUCCESS;
  }
  Stream* s = static_cast<Stream*>(hs);
  if (!live_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  s->push(std::move(op));
  return CUDA_SUCCESS;
}

// ---- kernels --------------------------------------------------------------------------------

struct Kernel {
  std::string name;
  void* fn;
};
struct Module {
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

// The plugin's kernels are this library's own exported symbols.
void* own_symbol(const char* name) {
  static void* self = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&own_symbol), &info) == 0) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return self ? dlsym(self, name) : nullptr;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The unary kernels (unary.cu) take (n, x, y); the binary ones (binary.cu) (n, a, b, z).
bool is_unary(const std::string& n) {
  for (const char* u : {"dp_neg_", "dp_abs_", "dp_exp_", "dp_log_", "dp_tanh_", "dp_sqrt_", "dp_rsqrt_", "dp_sigmoid_"})
    if (starts_with(n, u)) return true;
  return false;
}

// Calls kernel `k` with the parameter values in `p` (copied at launch), by its signature,
// which its name tells (see src/kernels/cuda/*.cu).
void call(const Kernel& k, const std::vector<std::vector<uint8_t>>& p) {
  auto arg = [&](size_t i) { return p[i].data(); };
  auto i64 = [&](size_t i) { return *reinterpret_cast<const long long*>(arg(i)); };
  auto ptr = [&](size_t i) { return *reinterpret_cast<void* const*>(arg(i)); };
  const std::string& n = k.name;
  using P = void*;
  if (starts_with(n, "dp_select_")) {
    if (ends_with(n, "_c"))
      reinterpret_cast<void (*)(long long, P, P, P, P)>(k.fn)(i64(0), ptr(1), ptr(2), ptr(3), ptr(4));
    else
      reinterpret_cast<void (*)(Geo, P, P, P, P)>(k.fn)(*reinterpret_cast<const Geo*>(arg(0)), ptr(1), ptr(2), ptr(3), ptr(4));
  } else if (starts_with(n, "dp_copy_")) {
    reinterpret_cast<void (*)(Walk, P, P)>(k.fn)(*reinterpret_cast<const Walk*>(arg(0)), ptr(1), ptr(2));
  } else if (starts_with(n, "dp_fill_")) {
    switch (p[1].size()) {
      case 1: reinterpret_cast<void (*)(long long, uint8_t, P)>(k.fn)(i64(0), *arg(1), ptr(2)); break;
      case 2: reinterpret_cast<void (*)(long long, uint16_t, P)>(k.fn)(i64(0), *reinterpret_cast<const uint16_t*>(arg(1)), ptr(2)); break;
      case 4: reinterpret_cast<void (*)(long long, uint32_t, P)>(k.fn)(i64(0), *reinterpret_cast<const uint32_t*>(arg(1)), ptr(2)); break;
      default: reinterpret_cast<void (*)(long long, uint64_t, P)>(k.fn)(i64(0), *reinterpret_cast<const uint64_t*>(arg(1)), ptr(2)); break;
    }
  } else if (starts_with(n, "dp_iota_")) {
    reinterpret_cast<void (*)(long long, long long, long long, P)>(k.fn)(i64(0), i64(1), i64(2), ptr(3));
  } else if (starts_with(n, "dp_reduce_")) {
    reinterpret_cast<void (*)(Red, P, P)>(k.fn)(*reinterpret_cast<const Red*>(arg(0)), ptr(1), ptr(2));
  } else if (starts_with(n, "dp_cast_") || is_unary(n)) {
    reinterpret_cast<void (*)(long long, P, P)>(k.fn)(i64(0), ptr(1), ptr(2));
  } else if (ends_with(n, "_c")) {
    reinterpret_cast<void (*)(long long, P, P, P)>(k.fn)(i64(0), ptr(1), ptr(2), ptr(3));
  } else {
    reinterpret_cast<void (*)(Geo, P, P, P)>(k.fn)(*reinterpret_cast<const Geo*>(arg(0)), ptr(1), ptr(2), ptr(3));
  }
}

// The byte sizes of kernel `name`'s parameters, in order.
std::vector<size_t> param_sizes(const std::string& n) {
  if (starts_with(n, "dp_select_")) return {ends_with(n, "_c") ? 8 : sizeof(Geo), 8, 8, 8, 8};
  if (starts_with(n, "dp_copy_")) return {sizeof(Walk), 8, 8};
  if (starts_with(n, "dp_fill_")) return {8, size_t(std::atoi(n.c_str() + 8)), 8};
  if (starts_with(n, "dp_iota_")) return {8, 8, 8, 8};
  if (starts_with(n, "dp_reduce_")) return {sizeof(Red), 8, 8};
  if (starts_with(n, "dp_cast_") || is_unary(n)) return {8, 8, 8};
  return {ends_with(n, "_c") ? 8 : sizeof(Geo), 8, 8, 8};
}

const char* error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return nullptr;
  }
}

}  // namespace

// ---- the API --------------------------------------------------------------------------------

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult r, const char** out) {
  const char* n = error_name(r);
  if (!out || !n) return CUDA_ERROR_INVALID_VALUE;
  *out = n;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char** out) {
  const char* n = error_name(r);
  if (!out || !n) return CUDA_ERROR_INVALID_VALUE;
  *out = "reported by devplug's fake CUDA driver";
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* n) {
  ENTER(false);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  ENTER(false);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  ENTER(false);
  if (!name || len <= 0 || d != 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, size_t(len), "%s", "devplug fake GPU");
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  ENTER(false);
  if (!bytes || d != 0) return CUDA_ERROR_INVALID_VALUE;
  *bytes = kTotalMemory;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  ENTER(false);
  if (!v || d != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case 16: *v = 4; return CUDA_SUCCESS;   // multiprocessors
    case 75: *v = 9; return CUDA_SUCCESS;   // compute capability major
    case 76: *v = 0; return CUDA_SUCCESS;   // minor
    case 83: *v = 1; return CUDA_SUCCESS;   // managed memory
    default: *v = 0; return CUDA_SUCCESS;
  }
}

CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice d) {
  ENTER(false);
  if (!id || len <= 0 || d != 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(id, size_t(len), "%s", "0000:fa:ce.0");
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice d) {
  ENTER(false);
  if (!ctx || d != 0) return CUDA_ERROR_INVALID_VALUE;
  ++g_ctx.refs;
  *ctx = &g_ctx;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  ENTER(false);
  if (d != 0 || g_ctx.refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  --g_ctx.refs;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(void** ctx) {
  ENTER(false);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(void* ctx) {
  ENTER(false);
  if (ctx != nullptr && (ctx != &g_ctx || g_ctx.refs <= 0)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = static_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  ENTER(true);
  drain_all_streams();
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  ENTER(true);
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(g_mem.m);
  *total = kTotalMemory;
  *free_bytes = kTotalMemory - g_mem.device_bytes;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  ENTER(true);
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  drain_all_streams();
  void* m = allocate(n, Kind::Device);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<uintptr_t>(m);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  ENTER(true);
  drain_all_streams();
  Kind k = Kind::Device;
  if (g_mem.find(uintptr_t(p), 1, &k) && k == Kind::Managed) return release(uintptr_t(p), k);
  return release(uintptr_t(p), Kind::Device);
}

CUresult cuMemHostAlloc(void** p, size_t n, unsigned) {
  ENTER(true);
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  drain_all_streams();
  *p = allocate(n, Kind::Host);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void* p) {
  ENTER(true);
  drain_all_streams();
  return release(reinterpret_cast<uintptr_t>(p), Kind::Host);
}

CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  ENTER(true);
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  drain_all_streams();
  void* m = allocate(n, Kind::Managed);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<uintptr_t>(m);
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  ENTER(false);
  if (!data || attr != 2) return CUDA_ERROR_INVALID_VALUE;  // MEMORY_TYPE only
  Kind k = Kind::Device;
  if (!g_mem.find(uintptr_t(p), 1, &k)) return CUDA_ERROR_INVALID_VALUE;  // pageable memory
  *static_cast<unsigned*>(data) = k == Kind::Host ? 1u : 2u;
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(void** out, unsigned flags) {
  ENTER(true);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (flags != 1) return CUDA_ERROR_NOT_SUPPORTED;  // the plugin's streams are non-blocking
  auto s = std::make_unique<Stream>();
  Stream* raw = s.get();
  std::lock_guard<std::mutex> l(g_streams_m);
  g_streams[raw] = std::move(s);
  *out = raw;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(void* hs) {
  ENTER(true);
  std::unique_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> l(g_streams_m);
    auto it = g_streams.find(static_cast<Stream*>(hs));
    if (it == g_streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = std::move(it->second);
    g_streams.erase(it);
  }
  s->drain();  // CUDA finishes a destroyed stream's work
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(void* hs) {
  ENTER(true);
  Stream* s = static_cast<Stream*>(hs);
  if (!live_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  s->drain();
  return CUDA_SUCCESS;
}

CUresult cuLaunchHostFunc(void* hs, void (*fn)(void*), void* arg) {
  ENTER(true);
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return on_stream(hs, [fn, arg] { g_host_fns.run([fn, arg] { fn(arg); }); });
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* hs) {
  ENTER(true);
  if (!is_device(dst, n) || (n && !src)) return CUDA_ERROR_INVALID_VALUE;
  if (is_pinned(src, n)) {
    return on_stream(hs, [=] { std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), src, n); });
  }
  // Pageable: staged now, as the driver does — the host's bytes as they are at this call.
  auto staged = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                       static_cast<const uint8_t*>(src) + n);
  return on_stream(hs, [=] { std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), staged->data(), n); });
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* hs) {
  ENTER(true);
  if (!is_device(src, n) || (n && !dst)) return CUDA_ERROR_INVALID_VALUE;
  if (is_pinned(dst, n)) {
    return on_stream(hs, [=] { std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(src)), n); });
  }
  // Pageable: the driver waits for the stream and copies before returning.
  Stream* s = static_cast<Stream*>(hs);
  if (hs && !live_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (s) s->drain();
  std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(src)), n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* hs) {
  ENTER(true);
  if (!is_device(dst, n) || !is_device(src, n)) return CUDA_ERROR_INVALID_VALUE;
  if (n && dst < src + n && src < dst + n && dst != src) return CUDA_ERROR_INVALID_VALUE;  // overlap
  return on_stream(hs, [=] {
    std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), reinterpret_cast<const void*>(uintptr_t(src)), n);
  });
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* hs) {
  ENTER(true);
  if (!is_device(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  return on_stream(hs, [=] { std::memset(reinterpret_cast<void*>(uintptr_t(dst)), v, n); });
}

CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, void* hs) {
  ENTER(true);
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (hs && !live_stream(static_cast<Stream*>(hs))) return CUDA_ERROR_INVALID_HANDLE;
  void* m = allocate(n, Kind::Device);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<uintptr_t>(m);
  return CUDA_SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr p, void* hs) {
  ENTER(true);
  if (!is_device(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  return on_stream(hs, [=] { release(uintptr_t(p), Kind::Device); });
}

CUresult cuEventCreate(void** out, unsigned flags) {
  ENTER(true);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~unsigned(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
    return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  Event* e = new Event();
  e->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  *out = e;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(void* he) {
  ENTER(true);
  if (!he) return CUDA_ERROR_INVALID_HANDLE;
  Event* e = static_cast<Event*>(he);
  // The driver releases a pending event once it is reached: so does this one.
  uint64_t gen;
  bool reached;
  {
    std::lock_guard<std::mutex> l(e->m);
    gen = e->recorded;
    reached = e->reached >= gen;
  }
  if (reached) {
    delete e;
    return CUDA_SUCCESS;
  }
  std::thread([e, gen] {
    e->wait_for(gen);
    delete e;
  }).detach();
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(void* he, void* hs) {
  ENTER(true);
  if (!he) return CUDA_ERROR_INVALID_HANDLE;
  Event* e = static_cast<Event*>(he);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(e->m);
    gen = ++e->recorded;
  }
  return on_stream(hs, [e, gen] {
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> l(e->m);
    if (e->reached < gen) {
      e->reached = gen;
      e->reached_at = now;
    }
    e->cv.notify_all();
  });
}

// cuEventElapsedTime: milliseconds from `start` reaching its latest record to `end` reaching
// its latest record.
CUresult cuEventElapsedTime(float* ms, void* hstart, void* hend) {
  ENTER(true);
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!hstart || !hend) return CUDA_ERROR_INVALID_HANDLE;
  struct Seen {
    bool timing, recorded, reached;
    std::chrono::steady_clock::time_point at;
  };
  auto seen = [](void* h) {
    Event* e = static_cast<Event*>(h);
    std::lock_guard<std::mutex> l(e->m);
    return Seen{e->timing, e->recorded > 0, e->reached >= e->recorded, e->reached_at};
  };
  Seen s = seen(hstart), e = seen(hend);
  if (!s.timing || !e.timing || !s.recorded || !e.recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!s.reached || !e.reached) return CUDA_ERROR_NOT_READY;
  *ms = float(std::chrono::duration<double, std::milli>(e.at - s.at).count());
  return CUDA_SUCCESS;
}

// CUDA 12.8's name for it (the same rules; it need not report errors of earlier work, which
// this driver does not model).
CUresult cuEventElapsedTime_v2(float* ms, void* hstart, void* hend) {
  return cuEventElapsedTime(ms, hstart, hend);
}

CUresult cuEventQuery(void* he) {
  ENTER(true);
  if (!he) return CUDA_ERROR_INVALID_HANDLE;
  Event* e = static_cast<Event*>(he);
  std::lock_guard<std::mutex> l(e->m);
  return e->reached >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(void* he) {
  ENTER(true);
  if (!he) return CUDA_ERROR_INVALID_HANDLE;
  Event* e = static_cast<Event*>(he);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(e->m);
    gen = e->recorded;
  }
  e->wait_for(gen);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(void* hs, void* he, unsigned) {
  ENTER(true);
  if (!he) return CUDA_ERROR_INVALID_HANDLE;
  Event* e = static_cast<Event*>(he);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(e->m);
    gen = e->recorded;  // the record as it is now
  }
  return on_stream(hs, [e, gen] { e->wait_for(gen); });
}

CUresult cuModuleLoadData(void** out, const void* image) {
  ENTER(true);
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  const char* b = static_cast<const char*>(image);
  bool cubin = std::memcmp(b, "\x7f" "ELF", 4) == 0;
  bool ptx = std::strncmp(b, "//", 2) == 0 || std::strncmp(b, ".version", 8) == 0;
  if (!cubin && !ptx) return CUDA_ERROR_INVALID_IMAGE;
  *out = new Module();
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void* hm) {
  ENTER(true);
  if (!hm) return CUDA_ERROR_INVALID_HANDLE;
  delete static_cast<Module*>(hm);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(void** out, void* hm, const char* name) {
  ENTER(true);
  if (!out || !hm || !name) return CUDA_ERROR_INVALID_VALUE;
  void* fn = std::strncmp(name, "dp_", 3) == 0 ? own_symbol(name) : nullptr;
  if (!fn) return CUDA_ERROR_NOT_FOUND;
  Module* m = static_cast<Module*>(hm);
  auto& k = m->kernels[name];
  if (!k) k.reset(new Kernel{name, fn});
  *out = k.get();
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(void* hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* hs, void** params, void** extra) {
  ENTER(true);
  if (!hf || !params || extra) return CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024 || shared > 48 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  const Kernel* k = static_cast<const Kernel*>(hf);
  // The parameters are copied now, as the driver does.
  std::vector<std::vector<uint8_t>> p;
  for (size_t size : param_sizes(k->name)) {
    const uint8_t* v = static_cast<const uint8_t*>(params[p.size()]);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    p.emplace_back(v, v + size);
  }
  return on_stream(hs, [k, p] { call(*k, p); });
}

// For the fake cuBLAS: runs `fn(arg)` in the order of stream `hs`.
CUresult devplug_fake_cuda_enqueue(void* hs, void (*fn)(void*), void* arg) {
  ENTER(true);
  return on_stream(hs, [fn, arg] { fn(arg); });
}

}  // extern "C"
