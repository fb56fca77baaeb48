// simdml: an example device plugin written in C++ with devplug/plugin.hpp.
//
// It registers one platform (default name SIMDML, device type GPU, priority 100: the drop-in
// "GPU override" scenario) whose devices simulate a discrete accelerator:
// - device memory is a host arena the runtime must not dereference (platform flags 0): its
//   addresses live in a fake address space, 0x44D0000000000000 + offset, and every access is
//   checked against the live allocations;
// - every stream is a worker thread with a queue (devplug/plugin_worker.hpp's WorkerStream),
//   so work is asynchronous to the host and a missing synchronization gives wrong results;
//   events and host callbacks are ordered on it;
// - every executor function is implemented, the optional ones included (pinned host memory,
//   unified memory addressable from both sides, memory usage, allocator statistics, and
//   timed events (ABI 1.4): the host's steady_clock when a stream reaches an event);
// - kernels (plugin ABI 1.1) for its own subset of ops, deliberately not SIM's: Add and Sub
//   (NumPy broadcasting) and Relu (a composite op: a native kernel runs before the runtime's
//   decomposition), f32 and f64. No Mul, no MatMul: an op SIMDML lacks follows the fallback
//   order. Each kernel checks its arguments at once (errors with messages), then enqueues the
//   arithmetic on the device's stream worker (asynchronous, with the injected latency);
// - an op of its own (ABI 1.2), simdml.Swish: y = x * sigmoid(beta * x), attribute beta (default
//   1), with a kernel that has state (ABI 1.5): its create reads and checks beta once per device,
//   input dtype and beta, and every launch with them gets that state. Each device counts the
//   states made and destroyed, and warns at destroy_device about any the host left.
//
// Load options (all optional):
//   platform=NAME       platform name (default SIMDML)
//   device_type=TYPE    device type (default GPU)
//   priority=N          priority among platforms of the type (default 100)
//   devices=N           number of devices, 0..1024 (default 1)
//   memory=BYTES        device memory per device, e.g. 4096, 64M, 1GiB (default 32 MiB)
//   latency_us=N        simulated latency added to every asynchronous copy/memset/kernel (default 0)
//   kernels=0           register no kernels (a device-only plugin; default 1)
//   throw_in_init=1     init throws a std::runtime_error (shows exceptions becoming errors)
//   throw_in_kernel=1   every kernel throws a std::runtime_error when called (likewise)
//   log_kernel_states=1 log (info) every kernel state made and destroyed, with the device's live count
#include <devplug/plugin.hpp>
#include <devplug/plugin_shapes.hpp>
#include <devplug/plugin_worker.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace dp = devplug::plugin;
using dp::Addr;
using dp::Error;
namespace shapes = dp::shapes;
using dp::worker::WorkerEvent;
using dp::worker::WorkerStream;
using dp::worker::WorkerStreams;

/** Device addresses are kAddressBase + the offset into the device's arena. */
constexpr Addr kAddressBase = 0x44D0000000000000ull;
/** Every allocation is aligned to (and rounded up to) this many bytes. */
constexpr uint64_t kAlignment = 256;

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

/** memmove that accepts size 0 with any pointers. */
void move_bytes(void* dst, const void* src, uint64_t size) {
  if (size != 0) std::memmove(dst, src, static_cast<size_t>(size));
}

/** What the load options asked for. */
struct Config {
  std::string platform = "SIMDML";
  std::string device_type = "GPU";
  int32_t priority = 100;
  int32_t devices = 1;
  uint64_t memory = uint64_t(32) << 20;
  std::chrono::microseconds latency{0};
  bool kernels = true;
  bool throw_in_kernel = false;
  bool log_kernel_states = false;
};

/** A device's kernel states (ABI 1.5): how many were made and destroyed. Shared with the
 *  states, which may outlive a device the host destroyed too early. */
struct StateCounts {
  std::atomic<uint64_t> created{0};
  std::atomic<uint64_t> destroyed{0};
};

// ------------------------------------------------------------------------------------------
// Device memory
// ------------------------------------------------------------------------------------------

/**
 * A device's memory: a host arena with a first-fit allocator, seen through fake addresses,
 * plus the unified allocations (host memory that device functions may address directly).
 */
class Arena {
 public:
  Arena(std::string label, uint64_t size) : label_(std::move(label)), size_(size) {
    if (size_ > std::numeric_limits<size_t>::max()) throw Error::resource_exhausted(label_ + ": memory size too large");
    data_.reset(new uint8_t[static_cast<size_t>(size_)]);
    free_[0] = size_;
  }

  uint64_t size() const { return size_; }

  Addr allocate(uint64_t size) {
    const uint64_t rounded = (size <= size_) ? (size + kAlignment - 1) / kAlignment * kAlignment : 0;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); rounded != 0 && it != free_.end(); ++it) {
      if (it->second < rounded) continue;
      const uint64_t offset = it->first;
      const uint64_t rest = it->second - rounded;
      free_.erase(it);
      if (rest != 0) free_[offset + rounded] = rest;
      used_[offset] = Block{size, rounded};
      ++num_allocs_;
      in_use_ += rounded;
      peak_ = std::max(peak_, in_use_);
      largest_alloc_ = std::max(largest_alloc_, size);
      return kAddressBase + offset;
    }
    throw Error::resource_exhausted(label_ + ": cannot allocate " + std::to_string(size) + " bytes: " +
                                    std::to_string(size_ - in_use_) + " of " + std::to_string(size_) +
                                    " bytes free, largest free block " + std::to_string(largest_free()) + " bytes");
  }

  void deallocate(Addr addr, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = addr >= kAddressBase ? used_.find(addr - kAddressBase) : used_.end();
    if (it == used_.end()) throw Error::invalid_argument(label_ + ": deallocate: " + hex(addr) + " is not an allocation");
    if (it->second.size != size) {
      throw Error::invalid_argument(label_ + ": deallocate: " + hex(addr) + " has " + std::to_string(it->second.size) +
                                    " bytes, not " + std::to_string(size));
    }
    uint64_t offset = it->first;
    uint64_t length = it->second.rounded;
    in_use_ -= length;
    used_.erase(it);
    // Coalesce with the free neighbours.
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + length == next->first) {
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += length;
        return;
      }
    }
    free_[offset] = length;
  }

  /**
   * The host pointer behind device range [addr, addr + size): it must lie inside one live
   * allocation (or unified allocation). nullptr for size 0.
   */
  uint8_t* resolve(Addr addr, uint64_t size, const char* what) const {
    if (size == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (addr >= kAddressBase && addr - kAddressBase < size_) {
      const uint64_t offset = addr - kAddressBase;
      auto it = used_.upper_bound(offset);
      if (it != used_.begin()) {
        --it;
        const uint64_t end = it->first + it->second.size;
        if (offset < end && size <= end - offset) return data_.get() + offset;
      }
    } else {
      auto it = unified_.upper_bound(static_cast<uintptr_t>(addr));
      if (it != unified_.begin()) {
        --it;
        const uint64_t end = it->first + it->second;
        if (addr < end && size <= end - addr) return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(addr));
      }
    }
    throw Error::invalid_argument(label_ + ": " + what + ": [" + hex(addr) + ", +" + std::to_string(size) +
                                  " bytes) is not inside a live allocation");
  }

  void* unified_allocate(uint64_t size) {
    void* p = ::operator new(static_cast<size_t>(size), std::align_val_t(kAlignment));
    std::lock_guard<std::mutex> lock(mu_);
    unified_[reinterpret_cast<uintptr_t>(p)] = size;
    return p;
  }

  void unified_deallocate(void* p, uint64_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = unified_.find(reinterpret_cast<uintptr_t>(p));
      if (it == unified_.end() || it->second != size) {
        throw Error::invalid_argument(label_ + ": unified_deallocate: not a unified allocation of that size");
      }
      unified_.erase(it);
    }
    ::operator delete(p, std::align_val_t(kAlignment));
  }

  dp::MemoryUsage usage() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dp::MemoryUsage{size_ - in_use_, size_};
  }

  dp::AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    dp::AllocatorStats s;
    s.num_allocs = num_allocs_;
    s.bytes_in_use = in_use_;
    s.peak_bytes_in_use = peak_;
    s.largest_alloc_size = largest_alloc_;
    s.bytes_limit = size_;
    s.bytes_reserved = 0;
    s.largest_free_block = largest_free();
    return s;
  }

 private:
  struct Block {
    uint64_t size;     // as requested
    uint64_t rounded;  // as taken from the arena
  };
  uint64_t largest_free() const {
    uint64_t m = 0;
    for (const auto& f : free_) m = std::max(m, f.second);
    return m;
  }

  const std::string label_;
  const uint64_t size_;
  std::unique_ptr<uint8_t[]> data_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  std::map<uint64_t, Block> used_;     // offset -> block
  std::map<uintptr_t, uint64_t> unified_;
  uint64_t num_allocs_ = 0, in_use_ = 0, peak_ = 0, largest_alloc_ = 0;
};

// ------------------------------------------------------------------------------------------
// Device
// ------------------------------------------------------------------------------------------

class DmlDevice : public dp::Device {
 public:
  DmlDevice(const Config& config, int ordinal)
      : label_(config.platform + ":" + std::to_string(ordinal)),
        config_(config),
        arena_(std::make_shared<Arena>(label_, config.memory)),
        state_counts_(std::make_shared<StateCounts>()),
        streams_(label_) {}

  /** "SIMDML:0": for messages. */
  const std::string& label() const { return label_; }
  /** The device's memory (shared with work queued on its streams). */
  const std::shared_ptr<Arena>& arena() const { return arena_; }
  /** The kernel states made for this device and destroyed (shared with the states). */
  const std::shared_ptr<StateCounts>& state_counts() const { return state_counts_; }
  /** Whether load option log_kernel_states=1 was given. */
  bool log_kernel_states() const { return config_.log_kernel_states; }

  // -- Description ----------------------------------------------------------------------
  std::string hardware_name() const override { return "SIMDML simulated accelerator"; }
  std::string vendor() const override { return "devplug examples"; }
  uint64_t total_memory() const override { return arena_->size(); }
  uint32_t compute_units() const override { return 8; }
  dp::OptionalFunctions optional_functions() const override {
    dp::OptionalFunctions f;
    f.host_memory = f.unified_memory = f.memory_usage = f.allocator_stats = f.event_elapsed_ns = true;
    return f;
  }

  // -- Memory ---------------------------------------------------------------------------
  Addr allocate(uint64_t size) override { return arena_->allocate(size); }
  void deallocate(Addr addr, uint64_t size) override { arena_->deallocate(addr, size); }
  void* host_allocate(uint64_t size) override {
    return ::operator new(static_cast<size_t>(size), std::align_val_t(kAlignment));
  }
  void host_deallocate(void* ptr, uint64_t /*size*/) override { ::operator delete(ptr, std::align_val_t(kAlignment)); }
  void* unified_allocate(uint64_t size) override { return arena_->unified_allocate(size); }
  void unified_deallocate(void* ptr, uint64_t size) override { arena_->unified_deallocate(ptr, size); }
  dp::MemoryUsage memory_usage() override { return arena_->usage(); }
  dp::AllocatorStats allocator_stats() override { return arena_->stats(); }

  // -- Synchronous copies ---------------------------------------------------------------
  void memcpy_htod(Addr dst, const void* src, uint64_t size) override {
    move_bytes(arena_->resolve(dst, size, "memcpy_htod dst"), src, size);
  }
  void memcpy_dtoh(void* dst, Addr src, uint64_t size) override {
    move_bytes(dst, arena_->resolve(src, size, "memcpy_dtoh src"), size);
  }
  void memcpy_dtod(Addr dst, Addr src, uint64_t size) override {
    uint8_t* d = arena_->resolve(dst, size, "memcpy_dtod dst");
    move_bytes(d, arena_->resolve(src, size, "memcpy_dtod src"), size);
  }
  void memset(Addr dst, uint8_t value, uint64_t size) override {
    uint8_t* d = arena_->resolve(dst, size, "memset dst");
    if (size != 0) std::memset(d, value, static_cast<size_t>(size));
  }

  // -- Streams: devplug/plugin_worker.hpp's worker streams ---------------------------------
  std::unique_ptr<dp::Stream> create_stream() override { return streams_.create(); }
  // ~WorkerStream runs what is queued, then joins its worker (from a host callback of the
  // stream itself, it lets the worker finish alone); an error nobody synchronized for goes
  // with the stream.
  void destroy_stream(std::unique_ptr<dp::Stream> /*stream*/) override {}
  void synchronize_stream(dp::Stream& stream) override { WorkerStream::of(stream).synchronize(); }
  void stream_wait_stream(dp::Stream& stream, dp::Stream& other) override {
    WorkerStream::of(stream).wait_stream(WorkerStream::of(other));
  }
  void host_callback(dp::Stream& stream, dp::HostCallback callback) override {
    WorkerStream::of(stream).host_callback(std::move(callback));
  }

  // -- Asynchronous work: checked now (a synchronous error), re-checked when the stream gets
  //    there (an error of the stream), after the simulated latency ----------------------------
  void memcpy_htod_async(dp::Stream& stream, Addr dst, const void* src, uint64_t size) override {
    arena_->resolve(dst, size, "memcpy_htod_async dst");
    enqueue_work(WorkerStream::of(stream), [a = arena_, dst, src, size] {
      move_bytes(a->resolve(dst, size, "memcpy_htod_async dst"), src, size);
    });
  }
  void memcpy_dtoh_async(dp::Stream& stream, void* dst, Addr src, uint64_t size) override {
    arena_->resolve(src, size, "memcpy_dtoh_async src");
    enqueue_work(WorkerStream::of(stream), [a = arena_, dst, src, size] {
      move_bytes(dst, a->resolve(src, size, "memcpy_dtoh_async src"), size);
    });
  }
  void memcpy_dtod_async(dp::Stream& stream, Addr dst, Addr src, uint64_t size) override {
    arena_->resolve(dst, size, "memcpy_dtod_async dst");
    arena_->resolve(src, size, "memcpy_dtod_async src");
    enqueue_work(WorkerStream::of(stream), [a = arena_, dst, src, size] {
      uint8_t* d = a->resolve(dst, size, "memcpy_dtod_async dst");
      move_bytes(d, a->resolve(src, size, "memcpy_dtod_async src"), size);
    });
  }
  void memset_async(dp::Stream& stream, Addr dst, uint8_t value, uint64_t size) override {
    arena_->resolve(dst, size, "memset_async dst");
    enqueue_work(WorkerStream::of(stream), [a = arena_, dst, value, size] {
      uint8_t* d = a->resolve(dst, size, "memset_async dst");
      if (size != 0) std::memset(d, value, static_cast<size_t>(size));
    });
  }

  /** Enqueues device work (a copy, a memset, a kernel's arithmetic) on @p stream, after the
   *  simulated latency (load option latency_us). */
  template <class F>
  void enqueue_work(WorkerStream& stream, F&& work) const {
    stream.enqueue([latency = config_.latency, work = std::forward<F>(work)]() mutable {
      if (latency.count() > 0) std::this_thread::sleep_for(latency);
      work();
    });
  }

  // -- Events -----------------------------------------------------------------------------
  std::unique_ptr<dp::Event> create_event() override { return std::make_unique<WorkerEvent>(); }
  void record_event(dp::Stream& stream, dp::Event& event) override {
    WorkerStream::of(stream).record(WorkerEvent::of(event));
  }
  dp::EventStatus event_status(dp::Event& event) override { return WorkerEvent::of(event).status(); }
  void stream_wait_event(dp::Stream& stream, dp::Event& event) override {
    WorkerStream::of(stream).wait_event(WorkerEvent::of(event));
  }
  // Fails when the stream failed before reaching the event (WorkerEvent's rule, the ABI's).
  void event_synchronize(dp::Event& event) override { WorkerEvent::of(event).synchronize(); }
  // Events of any SIMDML device of the platform time alike: they share the host's steady_clock.
  int64_t event_elapsed_ns(dp::Event& start, dp::Event& end) override {
    try {
      return WorkerEvent::of(start).elapsed_ns(WorkerEvent::of(end));
    } catch (const Error& e) {
      throw Error(e.code(), label_ + ": event_elapsed_ns: " + e.message());
    }
  }

  void synchronize_all() override { streams_.synchronize_all(); }

 private:
  const std::string label_;
  const Config config_;
  // Shared with queued tasks, so that work left on a leaked stream never touches freed memory.
  std::shared_ptr<Arena> arena_;
  std::shared_ptr<StateCounts> state_counts_;
  WorkerStreams streams_;  // threads named SIMDML:0-stream<n>
};

// ------------------------------------------------------------------------------------------
// Kernels: Add, Sub (broadcasting), Relu and simdml.Swish, f32 and f64
// ------------------------------------------------------------------------------------------

enum class Op { Add, Sub, Relu, Swish };

template <class T>
T load(const uint8_t* p, uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void store(uint8_t* p, uint64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T apply(Op op, T a, T b, T beta) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Relu: break;
    case Op::Swish: return a / (T(1) + std::exp(-(beta * a)));  // x * sigmoid(beta * x)
  }
  // Relu: max(x, 0) with NaN propagated (like the runtime's Maximum, its decomposition).
  return a < T(0) ? T(0) : a;
}

/** z = op(x, y) over the plan's runs (y is x for Relu and Swish; beta is Swish's). The inputs
 *  may be the output. Each run is an innermost stretch with a constant stride per input (0 where
 *  it broadcasts); a plan without broadcasting is one run over everything. */
template <class T>
void run(Op op, const shapes::Broadcast<2>& plan, const uint8_t* x, const uint8_t* y, uint8_t* z, double beta) {
  const T b = static_cast<T>(beta);
  plan.for_each_run([&](const shapes::Run<2>& r) {
    for (size_t i = 0; i < r.len; ++i) {
      store<T>(z, r.out + i, apply<T>(op, load<T>(x, r.input(0, i)), load<T>(y, r.input(1, i)), b));
    }
  });
}

/**
 * simdml.Swish's kernel state (plugin ABI 1.5): its attribute beta, read and checked once per
 * device, input dtype and beta by the kernel's create, then used by every launch with them.
 * Counted on its device (StateCounts); logged with load option log_kernel_states=1.
 */
class SwishState {
 public:
  SwishState(const DmlDevice& dev, double beta_value, dp::DType input_dtype, bool per_launch)
      : beta(beta_value), dtype(input_dtype), host_(dev.host()), label_(dev.label()), counts_(dev.state_counts()),
        log_(dev.log_kernel_states()) {
    const uint64_t made = counts_->created.fetch_add(1) + 1;
    if (log_) {
      host_.info(label_ + ": kernel simdml.Swish: state created (beta " + number(beta) + ", " +
                 dp::dtype_name(dtype) + (per_launch ? ", for one launch" : "") + "); " +
                 std::to_string(made - counts_->destroyed.load()) + " live");
    }
  }
  ~SwishState() {
    const uint64_t gone = counts_->destroyed.fetch_add(1) + 1;
    if (log_) {
      host_.info(label_ + ": kernel simdml.Swish: state destroyed (beta " + number(beta) + "); " +
                 std::to_string(counts_->created.load() - gone) + " live");
    }
  }
  SwishState(const SwishState&) = delete;
  SwishState& operator=(const SwishState&) = delete;

  const double beta;
  const dp::DType dtype;

  static std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }

 private:
  const dp::Host host_;  // for the log (the host outlives the plugin's devices and their states)
  const std::string label_;
  const std::shared_ptr<StateCounts> counts_;
  const bool log_;
};

/** simdml.Swish's create: checks beta and the dtype once, for every launch with them. */
std::shared_ptr<SwishState> create_swish(const dp::KernelCreateContext& c) {
  DmlDevice& dev = c.device<DmlDevice>();
  const std::string what = dev.label() + ": " + c.op();
  const double beta = c.attr_float("beta");
  if (!std::isfinite(beta)) {
    throw Error::invalid_argument(what + ": attribute beta is " + SwishState::number(beta) +
                                  ", not a finite number");
  }
  if (c.num_inputs() != 1) {
    throw Error::invalid_argument(what + ": expects 1 input, got " + std::to_string(c.num_inputs()));
  }
  const dp::DType dtype = c.input_dtype(0);
  if (dtype != dp::DType::F32 && dtype != dp::DType::F64) {
    throw Error::invalid_argument(what + ": SIMDML's " + c.op() + " takes f32 or f64, not " +
                                  dp::dtype_name(dtype));
  }
  return std::make_shared<SwishState>(dev, beta, dtype, c.per_launch());
}

/** What a kernel's queued work needs: copied out of the kernel context. */
struct Operand {
  Addr addr;
  uint64_t size;
};

/** Checks @p t's byte size against its dtype and shape, and its memory now. */
Operand operand(const DmlDevice& dev, const std::string& op, const char* name, const dp::Tensor& t) {
  if (t.byte_size() != t.expected_byte_size()) {
    throw Error::invalid_argument(dev.label() + ": " + op + ": " + name + " " + t.describe() + " has " +
                                  std::to_string(t.byte_size()) + " bytes, not " +
                                  std::to_string(t.expected_byte_size()));
  }
  // The arena's messages start with the device's label.
  dev.arena()->resolve(t.data(), t.byte_size(), (op + " " + name).c_str());
  return Operand{t.data(), t.byte_size()};
}

/** Add, Sub (x, y -> z, broadcasting), Relu and simdml.Swish (x -> y; Swish's beta from its
 *  state, which the queued work holds). */
void elementwise_kernel(dp::KernelContext& cx, Op op, bool throw_in_kernel) {
  if (throw_in_kernel) {
    throw std::runtime_error("simdml: kernel " + cx.op() + " throws because load option throw_in_kernel=1 was given");
  }
  DmlDevice& dev = cx.device<DmlDevice>();
  WorkerStream& stream = cx.stream<WorkerStream>();
  const std::string what = dev.label() + ": " + cx.op();
  const bool binary = op != Op::Relu && op != Op::Swish;
  cx.check_arity(binary ? 2 : 1, 1);
  const dp::Tensor x = cx.input(0), y = binary ? cx.input(1) : cx.input(0), z = cx.output(0);
  const dp::DType dtype = x.dtype();
  if ((dtype != dp::DType::F32 && dtype != dp::DType::F64) || y.dtype() != dtype || z.dtype() != dtype) {
    throw Error::invalid_argument(what + ": dtypes " + (binary ? x.describe() + ", " + y.describe() : x.describe()) +
                                  " -> " + z.describe() + ": SIMDML's " + cx.op() +
                                  " takes f32 or f64 tensors of one dtype");
  }
  std::vector<int64_t> shape;  // plugin_shapes.hpp: "shapes [2, 3] and [4] cannot be broadcast together"
  try {
    shape = shapes::broadcast_shapes(x.shape(), y.shape());
  } catch (const Error& e) {
    throw Error(e.code(), what + ": " + e.message());
  }
  if (!z.shape().equals(shape)) {
    throw Error::invalid_argument(what + ": the output has shape " + dp::shape_string(z.shape()) + ", not " +
                                  dp::shape_string(shape));
  }
  const Operand xo = operand(dev, cx.op(), "x", x);
  const Operand yo = binary ? operand(dev, cx.op(), "y", y) : xo;
  const Operand zo = operand(dev, cx.op(), binary ? "z" : "y", z);
  const shapes::Broadcast<2> plan(shape, {x.shape(), y.shape()});
  const std::string label = cx.op();
  // Swish: its state (beta, checked by create), kept alive by the work until it ran.
  std::shared_ptr<const SwishState> state = op == Op::Swish ? cx.state_ptr<const SwishState>() : nullptr;
  dev.enqueue_work(stream, [a = dev.arena(), op, dtype, plan, xo, yo, zo, binary, label, state] {
    const double beta = state ? state->beta : 1.0;
    // Resolved again: the memory may have been freed since (an error of the stream then).
    const uint8_t* xp = a->resolve(xo.addr, xo.size, (label + " x").c_str());
    const uint8_t* yp = binary ? a->resolve(yo.addr, yo.size, (label + " y").c_str()) : nullptr;
    uint8_t* zp = a->resolve(zo.addr, zo.size, (label + " output").c_str());
    if (dtype == dp::DType::F32) {
      run<float>(op, plan, xp, yp ? yp : xp, zp, beta);
    } else {
      run<double>(op, plan, xp, yp ? yp : xp, zp, beta);
    }
  });
}

void register_kernels(dp::Host& host, const Config& c) {
  const std::vector<dp::DType> floats{dp::DType::F32, dp::DType::F64};
  const bool t = c.throw_in_kernel;
  for (const auto& o : {std::make_pair("Add", Op::Add), std::make_pair("Sub", Op::Sub), std::make_pair("Relu", Op::Relu)}) {
    const Op op = o.second;
    host.register_kernel(dp::KernelSpec{o.first, c.device_type, std::nullopt, floats, 0},
                         [op, t](dp::KernelContext& cx) { elementwise_kernel(cx, op, t); });
  }
  // simdml.Swish, with state (ABI 1.5): create reads beta once. A host older than 1.5 never calls
  // create; plugin.hpp then calls it before each launch (the same results).
  if (host.supports_ops()) {
    host.register_kernel(dp::KernelSpec{"simdml.Swish", c.device_type, std::nullopt, floats, 0},
                         create_swish,
                         [t](dp::KernelContext& cx) { elementwise_kernel(cx, Op::Swish, t); });
  }
  host.info(std::string("registered kernels Add, Sub, Relu") + (host.supports_ops() ? ", simdml.Swish (with state)" : "") +
            " (f32, f64) for platform " + c.platform);
}

// ------------------------------------------------------------------------------------------
// Platform and init
// ------------------------------------------------------------------------------------------

class DmlPlatform : public dp::Platform {
 public:
  explicit DmlPlatform(Config config) : config_(std::move(config)) {}
  std::string name() const override { return config_.platform; }
  std::string device_type() const override { return config_.device_type; }
  int32_t priority() const override { return config_.priority; }
  uint32_t flags() const override { return 0; }  // device memory is not host memory
  std::string vendor() const override { return "devplug examples"; }
  std::string version() const override { return "0.1.0"; }
  int device_count() const override { return config_.devices; }
  std::unique_ptr<dp::Device> create_device(int ordinal) override {
    return std::make_unique<DmlDevice>(config_, ordinal);
  }
  // The host destroys a device's kernel states (ABI 1.5) before the device: any left is the
  // host's leak, reported here. (A state left behind keeps its counts, not the device.)
  void destroy_device(std::unique_ptr<dp::Device> device) override {
    const auto* dev = dynamic_cast<const DmlDevice*>(device.get());
    if (dev == nullptr) return;
    const StateCounts& counts = *dev->state_counts();
    const uint64_t made = counts.created.load(), gone = counts.destroyed.load();
    if (made != gone) {
      host().warn(dev->label() + ": " + std::to_string(made - gone) + " kernel state(s) of the " +
                  std::to_string(made) + " made for the device were not destroyed before it (leaked)");
    } else if (config_.log_kernel_states) {
      host().info(dev->label() + ": destroyed; its " + std::to_string(made) + " kernel state(s) were all destroyed");
    }
  }

 private:
  const Config config_;
};

void simdml_init(dp::Host& host) {
  if (host.option_bool("throw_in_init", false)) {
    throw std::runtime_error("simdml: init throws because load option throw_in_init=1 was given");
  }
  Config c;
  c.platform = host.option_string("platform", c.platform);
  c.device_type = host.option_string("device_type", c.device_type);
  c.priority = host.option_int<int32_t>("priority", c.priority);
  c.devices = host.option_int<int32_t>("devices", c.devices);
  if (c.devices < 0 || c.devices > 1024) {
    throw Error::invalid_argument("load option 'devices': " + std::to_string(c.devices) + " is not between 0 and 1024");
  }
  c.memory = host.option_size("memory", c.memory);
  if (c.memory == 0) throw Error::invalid_argument("load option 'memory' must not be 0");
  c.latency = std::chrono::microseconds(host.option_int<uint32_t>("latency_us", 0));
  c.kernels = host.option_bool("kernels", c.kernels);
  c.throw_in_kernel = host.option_bool("throw_in_kernel", c.throw_in_kernel);
  c.log_kernel_states = host.option_bool("log_kernel_states", c.log_kernel_states);

  dp::Platform& p = host.register_platform(std::make_unique<DmlPlatform>(c));
  host.info("registered platform " + p.name() + " (type " + c.device_type + ", priority " +
            std::to_string(c.priority) + ", " + std::to_string(c.devices) + " device(s) of " +
            std::to_string(c.memory) + " bytes)");
  // An op of SIMDML's own (plugin ABI 1.2), x * sigmoid(beta * x): its body runs on every
  // device without a kernel for it (SIMDML's own kernel is registered with the others).
  if (host.supports_ops()) {
    host.register_op({"simdml.Swish", "x: T", "y: T", "T: {f32, f64}", "beta: float = 1.0",
                      "bx = Mul(x, @beta); s = Sigmoid(bx); y = Mul(x, s)"});
  }
  if (c.kernels) register_kernels(host, c);
}

}  // namespace

// SIMDML needs kernels (ABI 1.1); its op simdml.Swish (1.2) is registered only where the host
// supports ops, and its kernel's state (1.5) is made by plugin.hpp per launch where the host
// makes none, so it declares 1.1 and loads into every host from 1.1 on.
DEVPLUG_PLUGIN_FOR_ABI("simdml", "0.1.0", 1, simdml_init)
