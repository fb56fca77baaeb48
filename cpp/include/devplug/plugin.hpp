/**
 * @file plugin.hpp
 * @brief Header-only C++17 helpers for writing a devplug device plugin as C++ classes.
 *
 * A plugin written with this header is a set of classes and one macro. The header owns all
 * the boundary work of the plugin ABI (`devplug/plugin.h`): it builds the C tables, sets their
 * `struct_size` fields, checks the host's sizes and arguments, and catches every C++
 * exception at every entry point, turning it into a status code plus a message given to the
 * host through `set_error` (or into a log line, for functions that return nothing).
 *
 * | C++ exception thrown by vendor code | status returned to the host          |
 * | ----------------------------------- | ------------------------------------ |
 * | `devplug::plugin::Error`            | its `code()`, message `message()`    |
 * | `std::bad_alloc`                    | `DPP_RESOURCE_EXHAUSTED`             |
 * | any other `std::exception`          | `DPP_INTERNAL`, message `what()`     |
 * | anything else                       | `DPP_INTERNAL`, "unknown C++ exception of type T" |
 *
 * Usage (a complete plugin; see plugins/simdml/simdml.cpp for one that does real work):
 *
 * @code
 * #include <devplug/plugin.hpp>
 * namespace dp = devplug::plugin;
 *
 * class MyDevice : public dp::Device {
 *  public:
 *   dp::Addr allocate(uint64_t size) override { ... }            // throw dp::Error on failure
 *   void deallocate(dp::Addr addr, uint64_t size) override { ... }
 *   void memcpy_htod(dp::Addr dst, const void* src, uint64_t size) override { ... }
 *   // ... every pure virtual function of dp::Device ...
 *   std::unique_ptr<dp::Stream> create_stream() override { return std::make_unique<MyStream>(); }
 *   void host_callback(dp::Stream& s, dp::HostCallback cb) override {
 *     static_cast<MyStream&>(s).enqueue([cb] { cb(); });         // calls the host fn once
 *   }
 * };
 *
 * class MyPlatform : public dp::Platform {
 *  public:
 *   explicit MyPlatform(int32_t priority) : priority_(priority) {}
 *   std::string name() const override { return "MYDEV"; }
 *   std::string device_type() const override { return "GPU"; }
 *   int32_t priority() const override { return priority_; }
 *   int device_count() const override { return 1; }
 *   std::unique_ptr<dp::Device> create_device(int ordinal) override {
 *     return std::make_unique<MyDevice>(ordinal);
 *   }
 *  private:
 *   int32_t priority_;
 * };
 *
 * static void my_init(dp::Host& host) {
 *   auto priority = host.option_int<int32_t>("priority", 100);  // load option, checked
 *   host.register_platform(std::make_unique<MyPlatform>(priority));
 * }
 *
 * DEVPLUG_PLUGIN("myplugin", "1.0.0", my_init)
 * @endcode
 *
 * Kernels (ABI 1.1): after registering a platform, init may register kernels for ops. A
 * kernel receives a KernelContext: the vendor's Device and Stream (typed, checked), the inputs
 * and outputs as Tensor views, the op's attributes, and (ABI 1.4) temporary device memory for
 * the launch (KernelContext::allocate_temp()); it checks its arguments and enqueues the work on
 * the device's stream. Exceptions become statuses as everywhere else.
 *
 * @code
 * host.register_kernel({"Add", "GPU", std::nullopt, {dp::DType::F32}, 0}, [](dp::KernelContext& cx) {
 *   cx.check_arity(2, 1);
 *   MyDevice& dev = cx.device<MyDevice>();
 *   dev.enqueue_add(cx.stream<MyStream>(), cx.input(0), cx.input(1), cx.output(0));  // throws on bad input
 * });
 * @endcode
 *
 * Kernel state (ABI 1.5): register a kernel with a create function as well, and it gets the
 * state create made for the launch's device, input dtypes and attributes as `cx.state<T>()`
 * (see Host::register_kernel(const KernelSpec&, Create, KernelFn)); older hosts work too.
 *
 * Build the plugin with `-fvisibility=hidden` (CMake's `devplug_add_plugin()` does) and,
 * on ELF platforms, a linker version script that exports only `devplug_plugin_entry`:
 * libstdc++ gives its own templates default visibility, so instantiations such as
 * `std::vector<MyThing>::_M_realloc_insert` otherwise leak into the dynamic symbol table.
 *
 * Ownership, in the order the host drives it:
 * - `init`: the function given to DEVPLUG_PLUGIN() runs with a Host. Every Platform passed to
 *   Host::register_platform() that the host accepts is owned by the host from then on, and
 *   destroyed when the host calls `destroy_platform` (after its last device, or when the
 *   host rolls back a failed init). A platform the host refuses is destroyed at once.
 * - `create_device` / `destroy_device`: Platform::create_device() makes a Device, destroyed
 *   by Platform::destroy_device() (default: deleted).
 * - Streams and events: Device::create_stream() / Device::create_event(), destroyed by
 *   Device::destroy_stream() (default: synchronize, then delete) / Device::destroy_event().
 * - Kernels: Host::register_kernel() keeps the function (or Kernel) until `shutdown`, or until
 *   a failed `init` returns (the host rolled it back); a kernel the host refuses is destroyed
 *   at once.
 * - Kernel states (ABI 1.5): a kernel's create function makes one when the host calls `create`;
 *   the SDK holds it until the host calls `destroy` (in stream order, before the device goes),
 *   and work that captured KernelContext::state_ptr() keeps it until that work ran.
 * - `shutdown`: frees the state `init` created. By the ABI every platform is gone by then.
 *
 * Thread safety: the host may call every executor function from any thread, concurrently;
 * Device implementations must be thread safe. Host is safe to use from any thread.
 */
#ifndef DEVPLUG_PLUGIN_HPP
#define DEVPLUG_PLUGIN_HPP

#include <devplug/half.hpp>
#include <devplug/plugin.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>
#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
#include <cxxabi.h>  // the type of an exception that is no std::exception, for its message
#include <typeinfo>
#endif

/** @brief The devplug C++ API. */
namespace devplug {
/** @brief Helpers for writing device plugins (the plugin side of `devplug/plugin.h`). */
namespace plugin {

class Device;
class Platform;
class Stream;
class KernelContext;
class KernelCreateContext;

namespace detail {
struct PluginState;
struct PlatformHolder;
struct DeviceHolder;
struct KernelHolder;
struct KernelStateBox;
struct Trampolines;
}  // namespace detail

// ------------------------------------------------------------------------------------------
// Basic types
// ------------------------------------------------------------------------------------------

/** @brief An address in a device's memory (`dpp_addr_t`); 0 is never a valid allocation. */
using Addr = dpp_addr_t;

/** @brief `Platform::flags()` bit: device memory is host memory (`DPP_PLATFORM_HOST_VISIBLE`). */
constexpr uint32_t kPlatformHostVisible = DPP_PLATFORM_HOST_VISIBLE;
/** @brief `Platform::flags()` bit: no host suballocator over Device::allocate() (`DPP_PLATFORM_NO_SUBALLOCATOR`). */
constexpr uint32_t kPlatformNoSuballocator = DPP_PLATFORM_NO_SUBALLOCATOR;

/** @brief Log levels of Host::log() (the `DPP_LOG_*` values). */
enum class LogLevel : int32_t {
  Error = DPP_LOG_ERROR,  ///< An error.
  Warn = DPP_LOG_WARN,    ///< A warning.
  Info = DPP_LOG_INFO,    ///< Information.
  Debug = DPP_LOG_DEBUG,  ///< Debugging detail.
};

/** @brief The state of an Event (the `DPP_EVENT_*` values). */
enum class EventStatus : int32_t {
  Pending = DPP_EVENT_PENDING,    ///< Recorded, not yet reached.
  Complete = DPP_EVENT_COMPLETE,  ///< Reached, or never recorded.
  Error = DPP_EVENT_ERROR,        ///< The stream failed before reaching it.
};

/** @brief Free and total device memory, returned by Device::memory_usage(). */
struct MemoryUsage {
  uint64_t free_bytes = 0;   ///< Bytes that can still be allocated.
  uint64_t total_bytes = 0;  ///< Bytes of device memory in all.
};

/** @brief Statistics of a device's own allocator, returned by Device::allocator_stats(). */
struct AllocatorStats {
  uint64_t num_allocs = 0;          ///< Number of allocations made.
  uint64_t bytes_in_use = 0;        ///< Bytes allocated now.
  uint64_t peak_bytes_in_use = 0;   ///< Largest bytes_in_use seen.
  uint64_t largest_alloc_size = 0;  ///< Largest single allocation.
  uint64_t bytes_limit = 0;         ///< Capacity; 0 = no limit.
  uint64_t bytes_reserved = 0;      ///< Bytes reserved beyond what is in use.
  uint64_t largest_free_block = 0;  ///< Largest allocation that could succeed now.
};

/**
 * @brief Which optional executor functions a Device provides.
 *
 * The ABI lets a device leave these NULL in its table, and a NULL function means something
 * different from one that fails (e.g. without `host_allocate` the host uses its own
 * allocator). A Device opts in by overriding Device::optional_functions(); the functions it
 * opts into must be overridden too, or they fail with `DPP_UNIMPLEMENTED`.
 */
struct OptionalFunctions {
  bool host_memory = false;      ///< Device::host_allocate() / host_deallocate() (pinned memory).
  bool unified_memory = false;   ///< Device::unified_allocate() / unified_deallocate().
  bool memory_usage = false;     ///< Device::memory_usage().
  bool allocator_stats = false;  ///< Device::allocator_stats().
  /** (ABI 1.4) Device::event_elapsed_ns(): the device times events. Without it the host
   *  reports `DP_UNIMPLEMENTED` to its users; a host of ABI 1.0–1.3 never asks. */
  bool event_elapsed_ns = false;
};

/**
 * @brief The canonical name of a status code, e.g. `"INVALID_ARGUMENT"`.
 * @return a static string; `"UNKNOWN_STATUS"` for a value that is not a `DPP_*` code.
 */
inline const char* status_name(dpp_status_t code) noexcept {
  switch (code) {
    case DPP_OK: return "OK";
    case DPP_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DPP_NOT_FOUND: return "NOT_FOUND";
    case DPP_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case DPP_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case DPP_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case DPP_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DPP_INTERNAL: return "INTERNAL";
    case DPP_UNAVAILABLE: return "UNAVAILABLE";
    case DPP_ABI_MISMATCH: return "ABI_MISMATCH";
    default: return "UNKNOWN_STATUS";
  }
}

// ------------------------------------------------------------------------------------------
// Error
// ------------------------------------------------------------------------------------------

/**
 * @brief The exception vendor code throws to fail a call with a given status.
 *
 * The entry point that catches it returns code() to the host and passes message() to the
 * host's `set_error`. `what()` is `"CODE: message"`. Copying an Error never throws.
 *
 * @code
 * throw devplug::plugin::Error(DPP_INVALID_ARGUMENT, "address out of range");
 * throw devplug::plugin::Error::resource_exhausted("out of device memory");
 * @endcode
 */
class Error : public std::runtime_error {
 public:
  /**
   * @brief An error with a status code and a message.
   * @param code    a `DPP_*` status code; `DPP_OK` is reported as `DPP_INTERNAL`.
   * @param message the detail, for the host's error message.
   */
  Error(dpp_status_t code, const std::string& message)
      : std::runtime_error(std::string(status_name(code)) + ": " + message),
        code_(code),
        message_(message) {}

  /** @brief The status code. */
  dpp_status_t code() const noexcept { return code_; }
  /** @brief The canonical name of code(), e.g. `"NOT_FOUND"`. */
  const char* code_name() const noexcept { return status_name(code_); }
  /** @brief The message, without the code name. */
  const char* message() const noexcept { return message_.what(); }

  /** @brief `DPP_INVALID_ARGUMENT`: an argument is invalid. */
  static Error invalid_argument(const std::string& message) { return Error(DPP_INVALID_ARGUMENT, message); }
  /** @brief `DPP_NOT_FOUND`: a named thing does not exist. */
  static Error not_found(const std::string& message) { return Error(DPP_NOT_FOUND, message); }
  /** @brief `DPP_ALREADY_EXISTS`: a thing with that name exists already. */
  static Error already_exists(const std::string& message) { return Error(DPP_ALREADY_EXISTS, message); }
  /** @brief `DPP_RESOURCE_EXHAUSTED`: out of memory or another resource. */
  static Error resource_exhausted(const std::string& message) { return Error(DPP_RESOURCE_EXHAUSTED, message); }
  /** @brief `DPP_FAILED_PRECONDITION`: the state does not allow the operation. */
  static Error failed_precondition(const std::string& message) { return Error(DPP_FAILED_PRECONDITION, message); }
  /** @brief `DPP_UNIMPLEMENTED`: not implemented. */
  static Error unimplemented(const std::string& message) { return Error(DPP_UNIMPLEMENTED, message); }
  /** @brief `DPP_INTERNAL`: a bug. */
  static Error internal(const std::string& message) { return Error(DPP_INTERNAL, message); }
  /** @brief `DPP_UNAVAILABLE`: the device is unavailable. */
  static Error unavailable(const std::string& message) { return Error(DPP_UNAVAILABLE, message); }

 private:
  dpp_status_t code_;
  std::runtime_error message_;  // a refcounted string: copies never throw
};

// ------------------------------------------------------------------------------------------
// Kernel types (ABI 1.1)
// ------------------------------------------------------------------------------------------

/**
 * @brief Element types (the `DPP_DTYPE_*` values).
 *
 * An enum with a fixed underlying type: a dtype a newer host sends that this header does not
 * name is still a value (dtype_size() is 0 for it), so a kernel can refuse it with a message.
 */
enum class DType : int32_t {
  F32 = DPP_DTYPE_F32,    ///< 32-bit float.
  F64 = DPP_DTYPE_F64,    ///< 64-bit float.
  I32 = DPP_DTYPE_I32,    ///< 32-bit signed integer.
  I64 = DPP_DTYPE_I64,    ///< 64-bit signed integer.
  U8 = DPP_DTYPE_U8,      ///< 8-bit unsigned integer.
  Bool = DPP_DTYPE_BOOL,  ///< Boolean, one byte holding 0 or 1.
  F16 = DPP_DTYPE_F16,    ///< (ABI 1.3) IEEE 754 half precision, two bytes.
  BF16 = DPP_DTYPE_BF16,  ///< (ABI 1.3) bfloat16, two bytes.
};

/** @brief Bytes per element of @p d; 0 for a dtype this header does not know. */
inline size_t dtype_size(DType d) noexcept {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::U8: case DType::Bool: return 1;
    case DType::F16: case DType::BF16: return 2;
  }
  return 0;
}

/** @brief `"f32"`, `"f64"`, `"i32"`, `"i64"`, `"u8"`, `"bool"`, `"f16"`, `"bf16"`; `"unknown"`
 *  otherwise. */
inline const char* dtype_name(DType d) noexcept {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
  }
  return "unknown";
}

/**
 * @brief A read-only view of @p T values someone else owns (C++17 has no `std::span`).
 * Valid as long as what it views: for kernel arguments, during the kernel call.
 */
template <class T>
class Span {
 public:
  constexpr Span() noexcept = default;
  /** @brief @p size values at @p data (NULL allowed when @p size is 0). */
  constexpr Span(const T* data, size_t size) noexcept : data_(data), size_(size) {}
  constexpr const T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  /** @brief Value @p i (i < size(), unchecked). */
  constexpr const T& operator[](size_t i) const noexcept { return data_[i]; }
  constexpr const T* begin() const noexcept { return data_; }
  constexpr const T* end() const noexcept { return data_ + size_; }
  /** @brief A copy that outlives the view (e.g. for work enqueued on a stream). */
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }
  /** @brief Whether both views hold equal values. */
  template <class Range>
  bool equals(const Range& other) const {
    size_t i = 0;
    for (const auto& v : other) {
      if (i >= size_ || !(data_[i] == v)) return false;
      ++i;
    }
    return i == size_;
  }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

/** @brief `"[2, 3]"`: a shape for messages. */
template <class Range>
std::string shape_string(const Range& shape) {
  std::string out = "[";
  bool first = true;
  for (const auto& d : shape) {
    if (!first) out += ", ";
    out += std::to_string(d);
    first = false;
  }
  return out + "]";
}

/**
 * @brief An op the plugin defines (ABI 1.2, `dpp_op_def_t`), in the notation of TensorFlow's
 *        `REGISTER_OP`, with a body over other ops: its decomposition, which runs on every
 *        device without a kernel for it. See docs/plugin-guide.md ("Ops of your own").
 *
 * @code
 * host.register_op({"mydev.Swish", "x: T", "y: T", "T: {f32, f64}", "", "s = Sigmoid(x); y = Mul(x, s)"});
 * @endcode
 */
struct OpDef {
  /** @brief `namespace.Name`. */
  std::string name;
  /** @brief `"x: T, bias: f32"`; empty: none. */
  std::string inputs;
  /** @brief As inputs; at least one. */
  std::string outputs;
  /** @brief `"T: {f32, f64}"`; empty: none. */
  std::string type_vars;
  /** @brief `"alpha: float = 1.0; axes: ints = [1]"`; empty: none. */
  std::string attrs;
  /** @brief Statements `name = Op(args, attr=value)`, separated by `;` or new lines. */
  std::string body;
};

/**
 * @brief What a kernel is registered for: Host::register_kernel()'s description of it.
 *
 * @code
 * host.register_kernel({"Add", "GPU", std::nullopt, {dp::DType::F32, dp::DType::F64}, 0}, add_fn);
 * @endcode
 */
struct KernelSpec {
  /** @brief The op's name, e.g. `"Add"` (an op the runtime knows). */
  std::string op;
  /** @brief The device type it runs on, e.g. `"GPU"`. */
  std::string device_type;
  /**
   * @brief The platform whose memory it works on: `std::nullopt` = this plugin's one platform
   *        of device_type (an error when it registered several); a name = one of this
   *        plugin's platforms. `"ANY"` (every platform of the type, other plugins' included)
   *        is refused by devplug's host in every ABI so far (1.1 to 1.5): register_kernel()
   *        throws the host's `DPP_INVALID_ARGUMENT`, and the host records why
   *        (`dpp_kernel_t.platform is "ANY": ...`; docs/plugin-guide.md, section 6). It is
   *        kept for a later ABI and for test hosts, where such a kernel's
   *        KernelContext::device() and stream() throw.
   */
  std::optional<std::string> platform;
  /** @brief The dtypes of the op's first type variable it accepts; empty = all. */
  std::vector<DType> dtypes;
  /** @brief Among kernels for one op, device type and binding, the highest priority wins. */
  int32_t priority = 0;
};

/**
 * @brief A kernel's view of one input or output (`dpp_tensor_t`): dtype, shape and where its
 *        elements live in the device's memory (dense, row-major).
 *
 * Valid during the kernel call only: work enqueued on a stream copies what it needs
 * (data(), byte_size(), shape().to_vector()). The host keeps the memory itself from other uses
 * until the stream reaches that work (later work on the same stream may reuse it).
 */
class Tensor {
 public:
  /** @brief A view of @p raw (checked by the kernel trampoline: struct size, shape). */
  explicit Tensor(const dpp_tensor_t& raw) noexcept : raw_(&raw) {}
  /** @brief The element type. */
  DType dtype() const noexcept { return static_cast<DType>(raw_->dtype); }
  /** @brief The number of dimensions. */
  size_t rank() const noexcept { return static_cast<size_t>(raw_->rank); }
  /** @brief The dimensions (empty for a scalar); every one is >= 0. */
  Span<int64_t> shape() const noexcept { return Span<int64_t>(raw_->rank > 0 ? raw_->shape : nullptr, rank()); }
  /** @brief The address of the first element, in the device's memory. */
  Addr data() const noexcept { return raw_->data; }
  /** @brief Bytes of the elements, as the host says. */
  uint64_t byte_size() const noexcept { return raw_->byte_size; }
  /** @brief The number of elements (1 for a scalar); UINT64_MAX if it overflows. */
  uint64_t num_elements() const noexcept {
    uint64_t n = 1;
    for (int64_t d : shape()) {
      const uint64_t u = static_cast<uint64_t>(d);
      if (u != 0 && n > std::numeric_limits<uint64_t>::max() / u) return std::numeric_limits<uint64_t>::max();
      n *= u;
    }
    return n;
  }
  /** @brief num_elements() × dtype_size(dtype()): the bytes the tensor should have (0 for an
   *         unknown dtype, UINT64_MAX on overflow). */
  uint64_t expected_byte_size() const noexcept {
    const uint64_t n = num_elements(), s = dtype_size(dtype());
    if (s == 0) return 0;
    return n > std::numeric_limits<uint64_t>::max() / s ? std::numeric_limits<uint64_t>::max() : n * s;
  }
  /** @brief `"f32[2, 3]"`, for messages. */
  std::string describe() const {
    std::string d = dtype_size(dtype()) != 0 ? dtype_name(dtype()) : "dtype(" + std::to_string(raw_->dtype) + ")";
    return d + shape_string(shape());
  }
  /** @brief The host's struct. */
  const dpp_tensor_t& raw() const noexcept { return *raw_; }

 private:
  const dpp_tensor_t* raw_;
};

/**
 * @brief The inputs or the outputs of a kernel call: Tensor views of the host's array.
 *        Elements are `struct_size` bytes apart (the first element's), so a newer host's
 *        larger `dpp_tensor_t` is read correctly.
 */
class TensorList {
 public:
  /** @brief An input iterator over the tensors. */
  class iterator {
   public:
    using value_type = Tensor;
    using reference = Tensor;
    using difference_type = std::ptrdiff_t;
    using iterator_category = std::input_iterator_tag;
    iterator(const TensorList* list, size_t i) noexcept : list_(list), i_(i) {}
    Tensor operator*() const noexcept { return (*list_)[i_]; }
    iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_ && list_ == o.list_; }
    bool operator!=(const iterator& o) const noexcept { return !(*this == o); }

   private:
    const TensorList* list_;
    size_t i_;
  };

  TensorList() noexcept = default;
  /** @brief How many. */
  size_t size() const noexcept { return size_; }
  /** @brief Whether there are none. */
  bool empty() const noexcept { return size_ == 0; }
  /** @brief Tensor @p i (i < size(), unchecked; KernelContext::input() checks). */
  Tensor operator[](size_t i) const noexcept {
    return Tensor(*reinterpret_cast<const dpp_tensor_t*>(base_ + i * stride_));
  }
  iterator begin() const noexcept { return iterator(this, 0); }
  iterator end() const noexcept { return iterator(this, size_); }

 private:
  friend struct detail::Trampolines;
  TensorList(const unsigned char* base, size_t stride, size_t size) noexcept
      : base_(base), stride_(stride), size_(size) {}
  const unsigned char* base_ = nullptr;
  size_t stride_ = 0;
  size_t size_ = 0;
};

/**
 * @brief A kernel as a class, for Host::register_kernel(const KernelSpec&, std::unique_ptr<Kernel>).
 *        compute() may be called from any thread, concurrently, until the plugin shuts down.
 */
class Kernel {
 public:
  Kernel() = default;
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  /** @brief Runs the op: check the arguments, enqueue the work on context.stream(). Throw to fail. */
  virtual void compute(KernelContext& context) = 0;
};

/** @brief A kernel as a function (see Host::register_kernel()). */
using KernelFn = std::function<void(KernelContext&)>;

namespace detail {

/** @brief Whether a callable of type @p F can be empty: a function pointer or a std::function. */
template <class F>
struct IsNullable : std::is_pointer<F> {};
template <class S>
struct IsNullable<std::function<S>> : std::true_type {};

/** @brief A kernel's `create`, its state type erased (Host::register_kernel() with create). */
using KernelCreateFn = std::function<std::shared_ptr<void>(const KernelCreateContext&)>;

/**
 * @brief What a kernel's create function may return, as a `std::shared_ptr` to the state:
 *        `std::shared_ptr<T>`, `std::unique_ptr<T, D>` (taken over) or a `T` by value (moved
 *        into a new `std::shared_ptr<T>`). `type` is T without const.
 */
template <class R>
struct StateResult {
  static_assert(!std::is_pointer<R>::value,
                "register_kernel: create returns a raw pointer; return std::shared_ptr<T>, std::unique_ptr<T> or "
                "a T by value (the SDK owns the state)");
  static_assert(!std::is_void<R>::value, "register_kernel: create returns void; return the state");
  using type = std::remove_const_t<R>;
  static std::shared_ptr<type> share(R&& r) { return std::make_shared<type>(std::move(r)); }
};
template <class T>
struct StateResult<std::shared_ptr<T>> {
  using type = std::remove_const_t<T>;
  static std::shared_ptr<type> share(std::shared_ptr<T>&& p) { return std::const_pointer_cast<type>(std::move(p)); }
};
template <class T, class D>
struct StateResult<std::unique_ptr<T, D>> {
  using type = std::remove_const_t<T>;
  static std::shared_ptr<type> share(std::unique_ptr<T, D>&& p) {
    return std::const_pointer_cast<type>(std::shared_ptr<T>(std::move(p)));
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------
// Internal state shared by the host wrapper and the tables
// ------------------------------------------------------------------------------------------

namespace detail {

/** @brief A platform this plugin registered (for the binding checks of register_kernel). */
struct PlatformRecord {
  std::string name, device_type;
  const PlatformHolder* holder;  // compared, never dereferenced after registration
};

/** @brief The host table's field @p offset (of @p size bytes) lies within its struct_size. */
inline bool host_has(const dpp_host_api_t* api, size_t offset, size_t size) noexcept {
  return api != nullptr && api->struct_size >= offset + size;
}
#define DEVPLUG_PLUGIN_HOST_FN_(api, field) \
  (::devplug::plugin::detail::host_has((api), offsetof(dpp_host_api_t, field), sizeof((api)->field)) ? (api)->field : nullptr)

/** @brief What one successful `init` created; freed when shutdown and every holder let go. */
struct PluginState {
  explicit PluginState(const dpp_host_api_t* host_api)
      : api(host_api),
        register_kernel(DEVPLUG_PLUGIN_HOST_FN_(host_api, register_kernel)),
        attr_int(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_int)),
        attr_float(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_float)),
        attr_bool(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_bool)),
        attr_ints(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_ints)),
        attr_dtype(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_dtype)),
        register_op(DEVPLUG_PLUGIN_HOST_FN_(host_api, register_op)),
        attr_string(DEVPLUG_PLUGIN_HOST_FN_(host_api, attr_string)),
        allocate_temp(DEVPLUG_PLUGIN_HOST_FN_(host_api, allocate_temp)) {}
  const dpp_host_api_t* api;
  std::atomic<bool> in_init{true};
  std::atomic<int> live_platforms{0};
  // ABI 1.1 functions; NULL when the host's table is too short to hold them (ABI 1.0).
  decltype(dpp_host_api_t::register_kernel) register_kernel;
  decltype(dpp_host_api_t::attr_int) attr_int;
  decltype(dpp_host_api_t::attr_float) attr_float;
  decltype(dpp_host_api_t::attr_bool) attr_bool;
  decltype(dpp_host_api_t::attr_ints) attr_ints;
  decltype(dpp_host_api_t::attr_dtype) attr_dtype;
  // ABI 1.2; NULL for an older host.
  decltype(dpp_host_api_t::register_op) register_op;
  decltype(dpp_host_api_t::attr_string) attr_string;
  // ABI 1.4; NULL for an older host.
  decltype(dpp_host_api_t::allocate_temp) allocate_temp;
  std::mutex mu;  // guards the two lists below
  std::vector<PlatformRecord> platforms;
  /** Kernels the host holds until shutdown. They hold the state (through their Host): the
   *  list is cleared at shutdown and after a failed init, which breaks the cycle. */
  std::vector<std::shared_ptr<KernelHolder>> kernels;

  void set_error(const char* message) const noexcept {
    if (api != nullptr && api->set_error != nullptr) api->set_error(api->context, message);
  }
  void log(int32_t level, const char* message) const noexcept {
    if (api != nullptr && api->log != nullptr) api->log(api->context, level, message);
  }
};
#undef DEVPLUG_PLUGIN_HOST_FN_

}  // namespace detail

// ------------------------------------------------------------------------------------------
// Host
// ------------------------------------------------------------------------------------------

/**
 * @brief The host, as the plugin sees it: load options, logging, platform and kernel
 *        registration.
 *
 * A cheap copyable handle over the host's `dpp_host_api_t`. The init function receives one;
 * Platform::host() and Device::host() give one later. Logging works from any thread until
 * the plugin's shutdown; options and registration only during init (the ABI's rule).
 * A default-constructed Host is detached: logging does nothing, the rest throws.
 */
class Host {
 public:
  /** @brief A detached host (see the class comment). */
  Host() = default;

  // -- Load options ---------------------------------------------------------------------

  /**
   * @brief The value of load option @p key, or `std::nullopt` when it was not given.
   * @throws Error `DPP_FAILED_PRECONDITION` outside init.
   */
  std::optional<std::string> option(const std::string& key) const {
    const dpp_host_api_t* api = init_api("option");
    const char* value = api->get_option(api->context, key.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }

  /** @brief The value of load option @p key, or @p default_value when it was not given. */
  std::string option_string(const std::string& key, const std::string& default_value) const {
    std::optional<std::string> v = option(key);
    return v ? *v : default_value;
  }

  /**
   * @brief Load option @p key as an integer of type @p T, or `std::nullopt` when not given.
   *
   * Accepts decimal or `0x` hexadecimal, with an optional sign and surrounding spaces.
   * @throws Error `DPP_INVALID_ARGUMENT` when the value is not an integer or is out of the
   *         range of @p T (the message names the option and the value).
   */
  template <class T = int64_t>
  std::optional<T> option_int(const std::string& key) const {
    static_assert(std::is_integral<T>::value && !std::is_same<T, bool>::value,
                  "option_int<T>: T must be an integer type");
    std::optional<std::string> v = option(key);
    if (!v) return std::nullopt;
    return parse_int<T>(key, *v, *v, 1);
  }

  /** @brief option_int<T>(key), or @p default_value when the option was not given. */
  template <class T = int64_t>
  T option_int(const std::string& key, T default_value) const {
    std::optional<T> v = option_int<T>(key);
    return v ? *v : default_value;
  }

  /**
   * @brief Load option @p key as a byte count: an integer with an optional binary suffix
   *        (`k`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`, case-insensitive; `B` allowed),
   *        e.g. `4096`, `64M`, `32MiB`, `1g`.
   * @throws Error `DPP_INVALID_ARGUMENT` for anything else or an overflow.
   */
  uint64_t option_size(const std::string& key, uint64_t default_value) const {
    std::optional<std::string> v = option(key);
    if (!v) return default_value;
    std::string s = trim(*v);
    size_t end = s.size();
    while (end > 0 && std::isalpha(static_cast<unsigned char>(s[end - 1])) != 0) --end;
    std::string suffix = lower(s.substr(end));
    uint64_t unit = 1;
    if (suffix.empty() || suffix == "b") unit = 1;
    else if (suffix == "k" || suffix == "kb" || suffix == "kib") unit = uint64_t(1) << 10;
    else if (suffix == "m" || suffix == "mb" || suffix == "mib") unit = uint64_t(1) << 20;
    else if (suffix == "g" || suffix == "gb" || suffix == "gib") unit = uint64_t(1) << 30;
    else if (suffix == "t" || suffix == "tb" || suffix == "tib") unit = uint64_t(1) << 40;
    else throw bad_option(key, *v, "a byte count (e.g. 4096, 64M, 32MiB, 1G)");
    return parse_int<uint64_t>(key, *v, s.substr(0, end), unit);
  }

  /**
   * @brief Load option @p key as a boolean: `1/true/yes/on` or `0/false/no/off`
   *        (case-insensitive), or @p default_value when not given.
   * @throws Error `DPP_INVALID_ARGUMENT` for anything else.
   */
  bool option_bool(const std::string& key, bool default_value) const {
    std::optional<std::string> v = option(key);
    if (!v) return default_value;
    std::string s = lower(trim(*v));
    if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
    if (s == "0" || s == "false" || s == "no" || s == "off") return false;
    throw bad_option(key, *v, "a boolean (1/0, true/false, yes/no, on/off)");
  }

  // -- Logging and errors ---------------------------------------------------------------

  /** @brief Writes a log line through the host. Any thread; never throws. */
  void log(LogLevel level, const std::string& message) const noexcept {
    if (state_) state_->log(static_cast<int32_t>(level), message.c_str());
  }
  /** @brief log(LogLevel::Error, message). */
  void error(const std::string& message) const noexcept { log(LogLevel::Error, message); }
  /** @brief log(LogLevel::Warn, message). */
  void warn(const std::string& message) const noexcept { log(LogLevel::Warn, message); }
  /** @brief log(LogLevel::Info, message). */
  void info(const std::string& message) const noexcept { log(LogLevel::Info, message); }
  /** @brief log(LogLevel::Debug, message). */
  void debug(const std::string& message) const noexcept { log(LogLevel::Debug, message); }

  /**
   * @brief Calls the host's `set_error` directly. Rarely needed: throwing an Error from
   *        vendor code does this (the last message given on a thread wins).
   */
  void set_error(const std::string& message) const noexcept {
    if (state_) state_->set_error(message.c_str());
  }

  // -- Registration ---------------------------------------------------------------------

  /**
   * @brief Registers @p platform with the host. Only during init.
   *
   * Reads the platform's description (name(), device_type(), priority(), flags(), vendor(),
   * version(), device_count()) once, now. On success the host owns the platform until it
   * calls `destroy_platform`; the returned reference is valid until then.
   *
   * @throws Error with the host's status when the host refuses (e.g. `DPP_ALREADY_EXISTS`
   *         for a name or type+priority conflict; the host keeps its own detailed message);
   *         the platform is destroyed. `DPP_FAILED_PRECONDITION` outside init;
   *         `DPP_INVALID_ARGUMENT` for a null @p platform.
   */
  Platform& register_platform(std::unique_ptr<Platform> platform) const;

  /**
   * @brief Whether the host takes kernels: its table has `register_kernel` (ABI 1.1 or newer).
   */
  bool supports_kernels() const noexcept { return state_ && state_->register_kernel != nullptr; }

  /**
   * @brief Registers @p kernel for @p spec (ABI 1.1). Only during init, after the platform it
   *        binds to was registered.
   *
   * The kernel is bound to `spec.platform` (see KernelSpec): the host calls it only for
   * devices of that platform, with a KernelContext whose device<MyDevice>() and
   * stream<MyStream>() are this plugin's objects. It may be called from any thread,
   * concurrently, until the plugin shuts down (when it is destroyed). An exception it throws
   * fails the op (see the file comment for the status).
   *
   * @code
   * host.register_kernel({"Relu", "GPU", std::nullopt, {dp::DType::F32}, 0}, [](dp::KernelContext& cx) {
   *   auto& dev = cx.device<MyDevice>();
   *   cx.check_arity(1, 1);
   *   dev.enqueue_relu(cx.stream<MyStream>(), cx.input(0), cx.output(0));
   * });
   * @endcode
   *
   * @throws Error `DPP_FAILED_PRECONDITION` outside init; `DPP_UNIMPLEMENTED` when the host is
   *         older than ABI 1.1 (supports_kernels() is false); `DPP_INVALID_ARGUMENT` for an
   *         empty function or op, or a binding that names no platform of this plugin of that
   *         type (or is ambiguous); with the host's status when the host refuses (e.g.
   *         `DPP_ALREADY_EXISTS` for a kernel with the same op, type, binding, overlapping
   *         dtypes and priority; the host keeps its own detailed message). A refused kernel is
   *         destroyed at once.
   *
   * A host older than ABI 1.3 knows no f16 or bf16: with one, those dtypes are left out of
   * `spec.dtypes`, and a kernel that takes nothing else is not registered (no error; an info
   * log says so; the kernel is destroyed at once).
   */
  void register_kernel(const KernelSpec& spec, KernelFn kernel) const;

  /** @brief register_kernel() with a Kernel object (owned by the plugin until shutdown). */
  void register_kernel(const KernelSpec& spec, std::unique_ptr<Kernel> kernel) const;

  /**
   * @brief Whether the host makes kernel states itself (ABI 1.5 or newer): it calls a
   *        kernel's @p create once per device, input dtypes and attributes, and keeps the state
   *        for every launch with them. Older hosts work too (see register_kernel() with create).
   */
  bool supports_kernel_state() const noexcept {
    return supports_kernels() && (state_->api->abi_major > 1 || state_->api->abi_minor >= 5);
  }

  /**
   * @brief Registers a kernel with state (ABI 1.5; TensorFlow's kernel create/compute/delete,
   *        XLA FFI's instantiate): @p create makes what every launch with one device, one list of
   *        input dtypes and one set of attributes can share (the attributes read and checked once,
   *        a compiled variant, a descriptor), and @p compute gets it as `cx.state<T>()`.
   *
   * @p create is a callable taking `const KernelCreateContext&` (the device, the op, the input
   * dtypes and the attribute readers of KernelContext) and returning the state: a
   * `std::shared_ptr<T>`, a `std::unique_ptr<T>` or a `T` by value. The SDK owns it and deletes
   * it when the host destroys the state (the host's `destroy`, in stream order: after the
   * device's stream reached every launch that used it, before the device goes; any thread).
   * @p create may be called from any thread, concurrently (also twice for one combination, the
   * host then keeping one state); an exception from it fails that op run, with the status the
   * file comment gives.
   *
   * @code
   * struct ScaleState { double k; };
   * host.register_kernel({"app.Scale", "GPU", std::nullopt, {dp::DType::F32}, 0},
   *     [](const dp::KernelCreateContext& c) {
   *       const double k = c.attr_float("k");
   *       if (!std::isfinite(k)) throw dp::Error::invalid_argument("k must be finite");
   *       return ScaleState{k};                          // or std::make_shared<ScaleState>(...)
   *     },
   *     [](dp::KernelContext& cx) {
   *       std::shared_ptr<ScaleState> st = cx.state_ptr<ScaleState>();
   *       // ... checks, then enqueue work capturing st (not cx.state<ScaleState>()'s reference)
   *     });
   * @endcode
   *
   * A host older than ABI 1.5 (supports_kernel_state() is false) never calls `create` and
   * passes no state: the SDK then calls @p create itself before every launch, with the launch's
   * device, input dtypes and attributes, and lets that state go when @p compute returned. Work
   * that @p compute enqueues and that uses the state must therefore hold it through
   * KernelContext::state_ptr() (a `std::shared_ptr` it captures), which is right with every host.
   * The SDK does the same when a host passes a NULL state.
   *
   * @throws Error as register_kernel(const KernelSpec&, KernelFn); `DPP_INVALID_ARGUMENT` for
   *         an empty @p create.
   */
  template <class Create,
            class = std::enable_if_t<std::is_invocable<const Create&, const KernelCreateContext&>::value>>
  void register_kernel(const KernelSpec& spec, Create create, KernelFn compute) const;

  /** @brief Whether the host takes ops of the plugin's own: its table has `register_op` (ABI
   *  1.2 or newer). */
  bool supports_ops() const noexcept { return state_ && state_->register_op != nullptr; }

  /**
   * @brief Registers the op @p def (ABI 1.2). Only during init, before the kernels for it.
   *        The host checks the text when it commits the plugin's registrations after init: a
   *        mistake fails the load, naming the field and the statement.
   * @throws Error `DPP_FAILED_PRECONDITION` outside init; `DPP_UNIMPLEMENTED` when the host is
   *         older than ABI 1.2; with the host's status when it refuses (e.g. an empty name).
   */
  void register_op(const OpDef& def) const {
    const dpp_host_api_t* api = init_api("register_op");
    if (state_->register_op == nullptr) {
      throw Error::unimplemented("op " + def.name + ": the host has plugin ABI " + std::to_string(api->abi_major) +
                                 "." + std::to_string(api->abi_minor) + "; ops of a plugin's own need ABI 1.2");
    }
    dpp_op_def_t d{};
    d.struct_size = DPP_OP_DEF_STRUCT_SIZE;
    d.name = def.name.c_str();
    d.inputs = def.inputs.c_str();
    d.outputs = def.outputs.c_str();
    d.type_vars = def.type_vars.c_str();
    d.attrs = def.attrs.c_str();
    d.body = def.body.c_str();
    const dpp_status_t status = state_->register_op(api->context, &d);
    if (status != DPP_OK) {
      throw Error(status, "the host refused op " + def.name + " (" + status_name(status) + ")");
    }
  }

  // -- Raw access -----------------------------------------------------------------------

  /** @brief The host's ABI major version. */
  uint32_t abi_major() const noexcept { return state_ ? state_->api->abi_major : 0; }
  /** @brief The host's ABI minor version (functions of later minors are absent). */
  uint32_t abi_minor() const noexcept { return state_ ? state_->api->abi_minor : 0; }
  /** @brief The host's C table (NULL for a detached Host), for what this class does not wrap. */
  const dpp_host_api_t* raw() const noexcept { return state_ ? state_->api : nullptr; }

 private:
  friend struct detail::Trampolines;
  friend class KernelAttrReader;
  friend class KernelContext;
  explicit Host(std::shared_ptr<detail::PluginState> state) : state_(std::move(state)) {}

  const dpp_host_api_t* init_api(const char* what) const {
    if (!state_) throw Error::failed_precondition(std::string(what) + ": this Host is not attached to a host");
    if (!state_->in_init.load(std::memory_order_acquire)) {
      throw Error::failed_precondition(std::string(what) +
                                       ": load options and registration are only available during init");
    }
    return state_->api;
  }

  static std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])) != 0) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])) != 0) --e;
    return s.substr(b, e - b);
  }
  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static Error bad_option(const std::string& key, const std::string& value, const std::string& expected) {
    return Error::invalid_argument("load option '" + key + "': '" + value + "' is not " + expected);
  }

  /** Parses @p text (a part of option @p key's @p value) times @p unit into T. */
  template <class T>
  static T parse_int(const std::string& key, const std::string& value, const std::string& text, uint64_t unit) {
    std::string s = trim(text);
    bool negative = false;
    size_t i = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    int base = 10;
    if (s.size() - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
      base = 16;
      i += 2;
    }
    std::string digits = s.substr(i);
    if (digits.empty() || std::isxdigit(static_cast<unsigned char>(digits[0])) == 0) {
      throw bad_option(key, value, "an integer");
    }
    errno = 0;
    char* end = nullptr;
    unsigned long long magnitude = std::strtoull(digits.c_str(), &end, base);
    if (end == nullptr || *end != '\0') throw bad_option(key, value, "an integer");
    const std::string range = "an integer between " + std::to_string(std::numeric_limits<T>::min()) + " and " +
                              std::to_string(std::numeric_limits<T>::max());
    if (errno == ERANGE || (unit > 1 && magnitude > std::numeric_limits<unsigned long long>::max() / unit)) {
      throw bad_option(key, value, range);
    }
    magnitude *= unit;
    if (negative) {
      if (!std::is_signed<T>::value) {
        if (magnitude != 0) throw bad_option(key, value, range);
        return T(0);
      }
      // |min| of a signed T is max + 1.
      const unsigned long long limit = static_cast<unsigned long long>(std::numeric_limits<T>::max()) + 1ull;
      if (magnitude > limit) throw bad_option(key, value, range);
      if (magnitude == limit) return std::numeric_limits<T>::min();
      return static_cast<T>(-static_cast<long long>(magnitude));
    }
    if (magnitude > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
      throw bad_option(key, value, range);
    }
    return static_cast<T>(magnitude);
  }

  std::shared_ptr<detail::PluginState> state_;
};

// ------------------------------------------------------------------------------------------
// Host callbacks
// ------------------------------------------------------------------------------------------

/**
 * @brief A host function a stream must call exactly once (`dpp_host_fn` + its argument).
 *
 * Copyable, so it fits in `std::function<void()>` task queues; all copies share one
 * "called" flag, so whichever copy is invoked first calls the host function and every later
 * invocation (of any copy) does nothing. Invoking never throws.
 *
 * Device::host_callback() receives one and must arrange for it to be invoked once, after all
 * earlier work of the stream — later, from the stream's worker, or at once inside
 * host_callback() when the stream's earlier work is done — unless it throws (then it must
 * never be invoked: the ABI says a failed `host_callback` does not call the function). Do not
 * invoke it while holding a lock the host might need.
 *
 * The SDK keeps the ABI's exactly-once promise to the host when a plugin gets this wrong, and
 * logs the plugin's bug: a callback invoked twice runs the host function once (warning); one
 * whose copies are all dropped uninvoked after host_callback() returned is invoked by the
 * drop (warning); one dropped uninvoked before host_callback() returned turns its success into
 * `DPP_INTERNAL`; one invoked after host_callback() threw does nothing (error); one invoked
 * inside host_callback() that then throws has run, so the host is told it succeeded (error).
 */
class HostCallback {
 public:
  /** @brief An empty callback; invoking it does nothing. */
  HostCallback() = default;

  /** @brief Wraps @p fn and @p arg. A NULL @p fn gives an empty callback. */
  HostCallback(dpp_host_fn fn, void* arg) {
    if (fn != nullptr) state_ = std::make_shared<State>(fn, arg);
  }

  /** @brief Calls the host function, the first time any copy is invoked. */
  void operator()() const noexcept {
    if (state_) state_->call();
  }

  /** @brief True while the host function is still to be called. */
  explicit operator bool() const noexcept {
    return state_ && state_->phase.load(std::memory_order_acquire) == State::kPending;
  }

 private:
  friend struct detail::Trampolines;

  struct State {
    enum Phase : int { kPending = 0, kCalled = 1, kRefused = 2 };
    State(dpp_host_fn f, void* a) : fn(f), arg(a) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      if (accepted.load(std::memory_order_acquire) && settle(kCalled) == kPending) {
        log(DPP_LOG_WARN,
            "a host callback was dropped without being called after host_callback returned; calling it now");
        fn(arg);
      }
    }
    /** Moves a pending callback to @p to; returns the phase it was in (only kPending moved). */
    int settle(int to) noexcept {
      int expected = kPending;
      phase.compare_exchange_strong(expected, to, std::memory_order_acq_rel);
      return expected;
    }
    void call() noexcept {
      switch (settle(kCalled)) {
        case kPending:
          fn(arg);
          break;
        case kRefused:
          log(DPP_LOG_ERROR, "a host callback was called after its host_callback call failed; not calling the host");
          break;
        default:
          if (!warned_twice.exchange(true, std::memory_order_relaxed)) {
            log(DPP_LOG_WARN, "a host callback was called twice; the host's function ran once");
          }
      }
    }
    void log(int32_t level, const char* message) const noexcept {
      if (plugin) plugin->log(level, message);
    }
    dpp_host_fn fn;
    void* arg;
    std::atomic<int> phase{kPending};
    std::atomic<bool> accepted{false};  // host_callback returned DPP_OK: it must run
    std::atomic<bool> warned_twice{false};
    std::shared_ptr<const detail::PluginState> plugin;  // for the log; null in test hosts
  };
  std::shared_ptr<State> state_;
};

// ------------------------------------------------------------------------------------------
// Streams and events
// ------------------------------------------------------------------------------------------

/**
 * @brief Base class of a device's streams: derive from it and return yours from
 *        Device::create_stream().
 *
 * The Device's stream functions receive a `Stream&` that is always one the same platform
 * created (the tables check), so `static_cast<MyStream&>(stream)` is safe there. Stream
 * arguments always belong to the device called, the `other` stream of
 * Device::stream_wait_stream() too (devplug's host makes streams of different devices wait
 * through events).
 * The destructor runs after Device::destroy_stream() synchronized the stream.
 */
class Stream {
 public:
  Stream() = default;
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

/**
 * @brief Base class of a device's events: derive from it and return yours from
 *        Device::create_event().
 *
 * As for Stream, the Device's event functions receive only events of the same platform, so
 * `static_cast<MyEvent&>(event)` is safe; an event may have been created by another device
 * of the platform.
 */
class Event {
 public:
  Event() = default;
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// ------------------------------------------------------------------------------------------
// Device
// ------------------------------------------------------------------------------------------

/**
 * @brief One device: the C++ form of `dpp_stream_executor_t` plus the device's description.
 *
 * Derive from it and implement the pure virtual functions; each corresponds to the
 * executor function of the same name. Report failures by throwing (Error for a chosen
 * status; see the file comment for other exceptions). Every function may be called from
 * any thread, concurrently. The tables check NULL pointers, zero allocation sizes and stream
 * and event handles before calling these functions.
 *
 * Names follow the ABI: inside a derived class, `memset` names the member; call the C
 * library's as `std::memset`.
 */
class Device {
 public:
  Device() = default;
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  /** @brief The host (attached once create_device returned; detached in the constructor). */
  const Host& host() const noexcept { return host_; }
  /** @brief The device's ordinal (valid once create_device returned; -1 in the constructor). */
  int ordinal() const noexcept { return ordinal_; }

  // -- Description: read once, right after Platform::create_device() ---------------------

  /** @brief Hardware name (empty: not reported). */
  virtual std::string hardware_name() const { return {}; }
  /** @brief Vendor name (empty: not reported). */
  virtual std::string vendor() const { return {}; }
  /** @brief PCI bus id (empty: not reported). */
  virtual std::string pci_bus_id() const { return {}; }
  /** @brief Bytes of device memory (0: unknown). */
  virtual uint64_t total_memory() const { return 0; }
  /** @brief NUMA node (-1: unknown). */
  virtual int32_t numa_node() const { return -1; }
  /** @brief Cores, SMs, ... (0: unknown). */
  virtual uint32_t compute_units() const { return 0; }
  /** @brief Which optional executor functions this device provides (default: none). */
  virtual OptionalFunctions optional_functions() const { return {}; }

  // -- Device memory --------------------------------------------------------------------

  /** @brief Allocates @p size (> 0) bytes; returns a non-zero address. Throw on failure
   *         (typically Error::resource_exhausted). */
  virtual Addr allocate(uint64_t size) = 0;
  /** @brief Frees what allocate(@p size) returned. Exceptions are logged (no status to return). */
  virtual void deallocate(Addr addr, uint64_t size) = 0;

  /** @brief Optional (OptionalFunctions::host_memory): pinned host memory. */
  virtual void* host_allocate(uint64_t /*size*/) { throw Error::unimplemented("host_allocate is not implemented"); }
  /** @brief Frees what host_allocate() returned. */
  virtual void host_deallocate(void* /*ptr*/, uint64_t /*size*/) {}
  /** @brief Optional (OptionalFunctions::unified_memory): memory both sides can address. */
  virtual void* unified_allocate(uint64_t /*size*/) {
    throw Error::unimplemented("unified_allocate is not implemented");
  }
  /** @brief Frees what unified_allocate() returned. */
  virtual void unified_deallocate(void* /*ptr*/, uint64_t /*size*/) {}
  /** @brief Optional (OptionalFunctions::memory_usage): free and total bytes. */
  virtual MemoryUsage memory_usage() { throw Error::unimplemented("memory_usage is not implemented"); }
  /** @brief Optional (OptionalFunctions::allocator_stats): the device's own allocator statistics. */
  virtual AllocatorStats allocator_stats() { throw Error::unimplemented("allocator_stats is not implemented"); }

  // -- Synchronous copies ---------------------------------------------------------------

  /** @brief Copies @p size bytes host → device, returning when done. */
  virtual void memcpy_htod(Addr dst, const void* src, uint64_t size) = 0;
  /** @brief Copies @p size bytes device → host, returning when done. */
  virtual void memcpy_dtoh(void* dst, Addr src, uint64_t size) = 0;
  /** @brief Copies @p size bytes within the device (the ranges may overlap). */
  virtual void memcpy_dtod(Addr dst, Addr src, uint64_t size) = 0;
  /** @brief Sets @p size bytes at @p dst to @p value. */
  virtual void memset(Addr dst, uint8_t value, uint64_t size) = 0;

  // -- Streams --------------------------------------------------------------------------

  /** @brief Creates a stream: an ordered queue of work, asynchronous to the host. */
  virtual std::unique_ptr<Stream> create_stream() = 0;
  /**
   * @brief Destroys a stream after waiting for its work. The default synchronizes it (a
   *        failure is logged) and deletes it. Exceptions are logged.
   */
  virtual void destroy_stream(std::unique_ptr<Stream> stream) { synchronize_stream(*stream); }
  /** @brief Blocks until the stream's work is done; throws the first error it met. */
  virtual void synchronize_stream(Stream& stream) = 0;
  /** @brief Later work on @p stream waits for the work enqueued on @p other so far. */
  virtual void stream_wait_stream(Stream& stream, Stream& other) = 0;
  /** @brief Enqueues a copy host → device; @p src stays valid until the stream reaches it. */
  virtual void memcpy_htod_async(Stream& stream, Addr dst, const void* src, uint64_t size) = 0;
  /** @brief Enqueues a copy device → host; @p dst stays valid until the stream reaches it. */
  virtual void memcpy_dtoh_async(Stream& stream, void* dst, Addr src, uint64_t size) = 0;
  /** @brief Enqueues a copy within the device. */
  virtual void memcpy_dtod_async(Stream& stream, Addr dst, Addr src, uint64_t size) = 0;
  /** @brief Enqueues a memset. */
  virtual void memset_async(Stream& stream, Addr dst, uint8_t value, uint64_t size) = 0;
  /**
   * @brief Arranges for @p callback to be invoked once, after all earlier work of @p stream,
   *        on any thread. If this throws, @p callback must never be invoked.
   */
  virtual void host_callback(Stream& stream, HostCallback callback) = 0;

  // -- Events ---------------------------------------------------------------------------

  /** @brief Creates an event (never recorded: complete). */
  virtual std::unique_ptr<Event> create_event() = 0;
  /**
   * @brief Destroys an event; the default deletes it. Exceptions are logged.
   *
   * The host may destroy an event while a record of it or a wait for it is still queued on a
   * stream (as CUDA allows): a stream whose work runs later must keep what that work needs
   * alive (share the event's state, e.g. through a `std::shared_ptr`, with the queued work)
   * and override this, or the default delete leaves the queued work a dangling event.
   */
  virtual void destroy_event(std::unique_ptr<Event> /*event*/) {}
  /** @brief Marks the current end of @p stream in @p event. */
  virtual void record_event(Stream& stream, Event& event) = 0;
  /** @brief The event's state. */
  virtual EventStatus event_status(Event& event) = 0;
  /** @brief Later work on @p stream waits until @p event is reached. */
  virtual void stream_wait_event(Stream& stream, Event& event) = 0;
  /** @brief Blocks until @p event is reached. */
  virtual void event_synchronize(Event& event) = 0;
  /**
   * @brief Optional (OptionalFunctions::event_elapsed_ns; ABI 1.4): the device's time from
   *        reaching @p start to reaching @p end, in nanoseconds (negative when @p end was
   *        reached first; 0 for the same event twice).
   *
   * Take the time when the stream *reaches* each record (on the worker or the hardware), not
   * when the host records it; the latest record of each event counts. The events may be of
   * different streams of the device. The host passes events of this device only; the table,
   * as for the other event functions, lets through any event of this platform (refuse one
   * the device cannot time with Error::invalid_argument). Throw Error::failed_precondition
   * when either was never recorded, is still pending, or was reached after its stream failed
   * (EventStatus::Error). The table checks both handles and the host's out-pointer first,
   * and writes the value only when this returns.
   */
  virtual int64_t event_elapsed_ns(Event& /*start*/, Event& /*end*/) {
    throw Error::unimplemented("event_elapsed_ns is not implemented");
  }

  /** @brief Blocks until all work of all streams of the device is done. */
  virtual void synchronize_all() = 0;

 private:
  friend struct detail::Trampolines;
  Host host_;
  int ordinal_ = -1;
};

// ------------------------------------------------------------------------------------------
// Platform
// ------------------------------------------------------------------------------------------

/**
 * @brief One implementation of devices: derive from it and pass an instance to
 *        Host::register_platform() during init.
 *
 * The description functions are read once, at registration (the host copies the strings).
 * Names and device types match `[A-Z][A-Z0-9_]*`; the host validates them and the
 * type+priority uniqueness, and refuses with a message naming both parties.
 */
class Platform {
 public:
  Platform() = default;
  virtual ~Platform() = default;
  Platform(const Platform&) = delete;
  Platform& operator=(const Platform&) = delete;

  /** @brief The host (attached once registered; detached in the constructor). */
  const Host& host() const noexcept { return host_; }

  /** @brief The unique platform name, e.g. `"SIM"`. */
  virtual std::string name() const = 0;
  /** @brief The device type users place on, e.g. `"GPU"`. */
  virtual std::string device_type() const = 0;
  /** @brief Among platforms of one type the highest priority is what `TYPE:i` means. */
  virtual int32_t priority() const { return 0; }
  /** @brief kPlatformHostVisible / kPlatformNoSuballocator bits (default 0). */
  virtual uint32_t flags() const { return 0; }
  /** @brief Free-form vendor name (empty: none). */
  virtual std::string vendor() const { return {}; }
  /** @brief Free-form version (empty: none). */
  virtual std::string version() const { return {}; }
  /** @brief Number of devices, 0 to 1024. */
  virtual int device_count() const = 0;

  /** @brief Creates device @p ordinal (0 <= ordinal < device_count(), checked). Never null. */
  virtual std::unique_ptr<Device> create_device(int ordinal) = 0;
  /**
   * @brief Releases a device. The host waited for its work and freed its memory first.
   *        The default deletes it. Exceptions are logged.
   */
  virtual void destroy_device(std::unique_ptr<Device> /*device*/) {}

 private:
  friend class Host;
  friend struct detail::Trampolines;
  Host host_;
};

// ------------------------------------------------------------------------------------------
// KernelContext, KernelCreateContext
// ------------------------------------------------------------------------------------------

/**
 * @brief What KernelContext and KernelCreateContext share: the op, the host and the op's
 *        attributes (defaults filled in), read through the host's `attr_*` functions.
 */
class KernelAttrReader {
 public:
  KernelAttrReader(const KernelAttrReader&) = delete;
  KernelAttrReader& operator=(const KernelAttrReader&) = delete;

  /** @brief The op the kernel was registered for. */
  const std::string& op() const noexcept;
  /** @brief The host (e.g. for logging). */
  const Host& host() const noexcept;

  /**
   * @brief An integer attribute of the op.
   * @throws Error `DPP_NOT_FOUND` when the op has no attribute @p name, `DPP_INVALID_ARGUMENT`
   *         when it has another type (messages name the op and the attribute).
   */
  int64_t attr_int(const std::string& name) const {
    int64_t v = 0;
    read_attr(name, "int", [&](const detail::PluginState& st, const char* n) {
      return st.attr_int ? st.attr_int(attrs_, n, &v) : kNoFunction;
    });
    return v;
  }
  /** @brief A float attribute (an integer attribute converts). Throws as attr_int(). */
  double attr_float(const std::string& name) const {
    double v = 0;
    read_attr(name, "float", [&](const detail::PluginState& st, const char* n) {
      return st.attr_float ? st.attr_float(attrs_, n, &v) : kNoFunction;
    });
    return v;
  }
  /** @brief A bool attribute. Throws as attr_int(). */
  bool attr_bool(const std::string& name) const {
    int32_t v = 0;
    read_attr(name, "bool", [&](const detail::PluginState& st, const char* n) {
      return st.attr_bool ? st.attr_bool(attrs_, n, &v) : kNoFunction;
    });
    return v != 0;
  }
  /** @brief An integer-list attribute, a view valid during the call (copy it into a state).
   *  Throws as attr_int(). */
  Span<int64_t> attr_ints(const std::string& name) const {
    const int64_t* data = nullptr;
    size_t len = 0;
    read_attr(name, "ints", [&](const detail::PluginState& st, const char* n) {
      return st.attr_ints ? st.attr_ints(attrs_, n, &data, &len) : kNoFunction;
    });
    if (len != 0 && data == nullptr) {
      throw Error::internal("kernel " + op() + ": the host's attr_ints gave " + std::to_string(len) + " values at NULL");
    }
    return Span<int64_t>(len != 0 ? data : nullptr, len);
  }
  /** @brief A string attribute (UTF-8), a view valid during the call (ABI 1.2:
   *  `DPP_UNIMPLEMENTED` from an older host). Throws as attr_int(). */
  std::string_view attr_string(const std::string& name) const {
    const char* data = nullptr;
    size_t len = 0;
    read_attr(name, "string", [&](const detail::PluginState& st, const char* n) {
      return st.attr_string ? st.attr_string(attrs_, n, &data, &len) : kNoFunction;
    });
    if (len != 0 && data == nullptr) {
      throw Error::internal("kernel " + op() + ": the host's attr_string gave " + std::to_string(len) + " bytes at NULL");
    }
    return len != 0 ? std::string_view(data, len) : std::string_view();
  }
  /** @brief A dtype attribute. Throws as attr_int(). */
  DType attr_dtype(const std::string& name) const {
    int32_t v = 0;
    read_attr(name, "dtype", [&](const detail::PluginState& st, const char* n) {
      return st.attr_dtype ? st.attr_dtype(attrs_, n, &v) : kNoFunction;
    });
    return static_cast<DType>(v);
  }

 protected:
  static constexpr dpp_status_t kNoFunction = -1;

  KernelAttrReader(const void* attrs, const detail::KernelHolder* kernel) noexcept : attrs_(attrs), kernel_(kernel) {}
  ~KernelAttrReader() = default;

  /** The plugin's device behind the host's @p device_data, checked against the kernel's binding. */
  Device& device_of(void* device_data) const;

  /** Calls @p call(state, name) and turns the host's status into an Error. */
  template <class F>
  void read_attr(const std::string& name, const char* kind, F&& call) const;

  const void* attrs_;
  const detail::KernelHolder* kernel_;
};

/**
 * @brief What a kernel gets (`dpp_kernel_context_t`): its device and the device's default
 *        stream, typed; the inputs and outputs; the op's attributes; temporary device memory
 *        for the launch (allocate_temp(), ABI 1.4); the kernel's state (state(), ABI 1.5).
 *
 * Valid during the kernel call only. The host guarantees: the device belongs to the platform
 * the kernel is bound to; the stream is that device's default stream, where the kernel
 * enqueues its work (or, on a synchronous stream, does it at once); the outputs are allocated
 * on the device with the shapes the op's shape function gave; the memory of inputs and outputs
 * is kept from other uses until the stream reaches the work enqueued now (later work on the
 * same stream may reuse it: run the work in the stream's order).
 */
class KernelContext : public KernelAttrReader {
 public:
  /**
   * @brief The device the kernel runs on, as the vendor's Device class @p T.
   * @throws Error `DPP_FAILED_PRECONDITION` for a kernel bound to `"ANY"` (it may run on
   *         other plugins' devices); `DPP_INTERNAL` when the device is not a @p T.
   */
  template <class T = Device>
  T& device() const {
    static_assert(std::is_base_of<Device, T>::value, "KernelContext::device<T>: T must derive from Device");
    Device& d = device_base();
    T* t = dynamic_cast<T*>(&d);
    if (t == nullptr) throw Error::internal("kernel " + op() + ": the device is not of the Device class asked for");
    return *t;
  }

  /**
   * @brief The device's default stream, as the vendor's Stream class @p T: enqueue the work here.
   * @throws Error as device(); `DPP_INVALID_ARGUMENT` when the handle is not a stream of the device.
   */
  template <class T = Stream>
  T& stream() const {
    static_assert(std::is_base_of<Stream, T>::value, "KernelContext::stream<T>: T must derive from Stream");
    Stream& s = stream_base();
    T* t = dynamic_cast<T*>(&s);
    if (t == nullptr) throw Error::internal("kernel " + op() + ": the stream is not of the Stream class asked for");
    return *t;
  }

  /** @brief The inputs. */
  const TensorList& inputs() const noexcept { return inputs_; }
  /** @brief The outputs (allocated by the host). */
  const TensorList& outputs() const noexcept { return outputs_; }
  /** @brief Input @p i. @throws Error `DPP_INVALID_ARGUMENT` naming the op when there is none. */
  Tensor input(size_t i) const { return at(inputs_, i, "input"); }
  /** @brief Output @p i. @throws Error `DPP_INVALID_ARGUMENT` naming the op when there is none. */
  Tensor output(size_t i) const { return at(outputs_, i, "output"); }
  /** @brief Throws `DPP_INVALID_ARGUMENT` unless there are @p inputs inputs and @p outputs outputs. */
  void check_arity(size_t inputs, size_t outputs) const {
    if (inputs_.size() == inputs && outputs_.size() == outputs) return;
    throw Error::invalid_argument("kernel " + op() + ": expects " + std::to_string(inputs) + " input(s) and " +
                                  std::to_string(outputs) + " output(s), got " + std::to_string(inputs_.size()) +
                                  " and " + std::to_string(outputs_.size()));
  }

  /**
   * @brief @p size bytes (> 0) of device memory on the kernel's device, for this launch only
   *        (ABI 1.4, the host's `allocate_temp`; TensorFlow's `TF_AllocateTemp`): use it in the
   *        work enqueued on stream(). The host takes it back by itself once the stream has
   *        reached that work (do not deallocate it); it comes from the host's allocator and
   *        counts against the device's memory limit. The address is 256-byte aligned.
   * @throws Error `DPP_UNIMPLEMENTED` when the host is older than ABI 1.4; otherwise the
   *         host's status, e.g. `DPP_RESOURCE_EXHAUSTED` when the device has no memory left or
   *         `DPP_INVALID_ARGUMENT` for a size of 0 (messages name the op and the size).
   */
  Addr allocate_temp(uint64_t size) const;

  /**
   * @brief The kernel's state for this launch's device, input dtypes and attributes: what the
   *        create function given to Host::register_kernel() returned (ABI 1.5), as a @p T.
   *        Valid during the kernel call; work enqueued on the stream holds state_ptr().
   * @throws Error `DPP_FAILED_PRECONDITION` when the kernel has no create function or create
   *         returned null; `DPP_INTERNAL` when the state is not a @p T.
   */
  template <class T>
  T& state() const {
    T* p = static_cast<T*>(state_as(typeid(T)));
    if (p == nullptr) throw Error::failed_precondition("kernel " + op() + ": its create function returned no state");
    return *p;
  }

  /**
   * @brief state() as shared ownership, to capture in the work enqueued on the stream: the
   *        state then lives until that work ran, with every host (with one older than ABI 1.5
   *        the SDK makes a state per launch and lets it go when compute returns). Null when
   *        create returned null. @throws Error as state(), except for a null state.
   */
  template <class T>
  std::shared_ptr<T> state_ptr() const {
    T* p = static_cast<T*>(state_as(typeid(T)));
    if (p == nullptr) return nullptr;
    return std::shared_ptr<T>(state_value(), p);  // aliasing: shares the state's ownership
  }

  /** @brief Whether the SDK made this launch's state itself (a host older than ABI 1.5, or
   *  one that passed none): the state serves this launch only. False without create. */
  bool state_per_launch() const noexcept;

  /** @brief The host's struct, for what this class does not wrap. Its `state` field exists only
   *  when `struct_size >= DPP_KERNEL_CONTEXT_STRUCT_SIZE` (ABI 1.5). */
  const dpp_kernel_context_t& raw() const noexcept { return *raw_; }

 private:
  friend struct detail::Trampolines;

  KernelContext(const dpp_kernel_context_t* raw, const detail::KernelHolder* kernel, TensorList inputs,
                TensorList outputs, const detail::KernelStateBox* state) noexcept
      : KernelAttrReader(raw->attrs, kernel), raw_(raw), inputs_(inputs), outputs_(outputs), state_(state) {}

  Device& device_base() const;
  Stream& stream_base() const;
  /** The state as a pointer to @p type (null for a null state), checked. */
  void* state_as(const std::type_info& type) const;
  const std::shared_ptr<void>& state_value() const noexcept;

  Tensor at(const TensorList& list, size_t i, const char* what) const {
    if (i >= list.size()) {
      throw Error::invalid_argument("kernel " + op() + ": no " + what + " " + std::to_string(i) + " (the op got " +
                                    std::to_string(list.size()) + ")");
    }
    return list[i];
  }

  const dpp_kernel_context_t* raw_;
  TensorList inputs_;
  TensorList outputs_;
  const detail::KernelStateBox* state_;  // null: the kernel has no create
};

/**
 * @brief What a kernel's create function gets (`dpp_kernel_create_context_t`, ABI 1.5): the
 *        device, the op, the input dtypes and the attributes a state is made for, with the
 *        attribute readers of KernelContext (allocate_temp() does not exist here: there is no
 *        launch). Valid during the call only: copy what the state keeps.
 *
 * From a host older than ABI 1.5 the SDK calls create itself before each launch, with that
 * launch's device, input dtypes and attributes (per_launch() is true, raw() is null).
 */
class KernelCreateContext : public KernelAttrReader {
 public:
  /**
   * @brief The device the state is for, as the vendor's Device class @p T.
   * @throws Error as KernelContext::device().
   */
  template <class T = Device>
  T& device() const {
    static_assert(std::is_base_of<Device, T>::value, "KernelCreateContext::device<T>: T must derive from Device");
    Device& d = device_of(device_);
    T* t = dynamic_cast<T*>(&d);
    if (t == nullptr) throw Error::internal("kernel " + op() + ": the device is not of the Device class asked for");
    return *t;
  }

  /** @brief The number of inputs of the launches the state serves. */
  size_t num_inputs() const noexcept { return dtypes_.size(); }
  /** @brief Their dtypes. */
  const std::vector<DType>& input_dtypes() const noexcept { return dtypes_; }
  /** @brief The dtype of input @p i. @throws Error `DPP_INVALID_ARGUMENT` when there is none. */
  DType input_dtype(size_t i) const {
    if (i >= dtypes_.size()) {
      throw Error::invalid_argument("kernel " + op() + ": create: no input " + std::to_string(i) + " (the op has " +
                                    std::to_string(dtypes_.size()) + ")");
    }
    return dtypes_[i];
  }

  /** @brief Whether the SDK calls create for one launch (a host older than ABI 1.5). */
  bool per_launch() const noexcept { return raw_ == nullptr; }
  /** @brief The host's struct (ABI 1.5); null when per_launch(). */
  const dpp_kernel_create_context_t* raw() const noexcept { return raw_; }

 private:
  friend struct detail::Trampolines;
  KernelCreateContext(const void* attrs, const detail::KernelHolder* kernel, void* device, std::vector<DType> dtypes,
                      const dpp_kernel_create_context_t* raw) noexcept
      : KernelAttrReader(attrs, kernel), device_(device), dtypes_(std::move(dtypes)), raw_(raw) {}

  void* device_;  // the host's device_data
  std::vector<DType> dtypes_;
  const dpp_kernel_create_context_t* raw_;
};

// ------------------------------------------------------------------------------------------
// The C tables
// ------------------------------------------------------------------------------------------

namespace detail {

/** @brief A registered platform: the Platform, its C description and the strings it points to. */
struct PlatformHolder {
  PlatformHolder(std::shared_ptr<PluginState> s, std::unique_ptr<Platform> p)
      : state(std::move(s)), platform(std::move(p)) {}
  std::shared_ptr<PluginState> state;
  std::unique_ptr<Platform> platform;
  std::string name, device_type, vendor, version;
  int device_count = 0;
  dpp_platform_t desc{};
};

/** @brief A created device (`device_data`): the Device, its table and its strings. */
struct DeviceHolder {
  DeviceHolder(PlatformHolder* p, std::unique_ptr<Device> d) : platform(p), state(p->state), device(std::move(d)) {}
  PlatformHolder* platform;
  std::shared_ptr<PluginState> state;
  std::unique_ptr<Device> device;
  std::string hardware_name, vendor, pci_bus_id;
  dpp_stream_executor_t se{};
};

/**
 * @brief What the host holds as a stream or event handle: one record type for both, so that
 *        a handle of the wrong kind is detected by reading a field of the right type.
 */
struct Handle {
  static constexpr uint32_t kStream = 0x53545245u;  // "STRE"
  static constexpr uint32_t kEvent = 0x45564E54u;   // "EVNT"
  Handle(uint32_t m, const DeviceHolder* o, std::unique_ptr<Stream> s, std::unique_ptr<Event> e) noexcept
      : magic(m), owner(o), stream(std::move(s)), event(std::move(e)) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { magic = 0; }
  uint32_t magic;  // kStream, kEvent; 0 once destroyed
  const DeviceHolder* owner;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> event;
};

/** @brief A registered kernel (`kernel_data`): the function, its binding, its description,
 *         and (ABI 1.5) its create function and the type of the states it makes. */
struct KernelHolder {
  static constexpr uint32_t kMagic = 0x4B524E4Cu;  // "KRNL"
  KernelHolder(Host h, const KernelSpec& spec, const PlatformHolder* p, std::string binding, KernelFn f,
               KernelCreateFn c = nullptr, const std::type_info* t = nullptr)
      : host(std::move(h)),
        op(spec.op),
        device_type(spec.device_type),
        spec_platform(spec.platform.value_or("")),
        platform_name(std::move(binding)),
        platform(p),
        fn(std::move(f)),
        create(std::move(c)),
        state_type(t) {
    for (DType d : spec.dtypes) dtypes.push_back(static_cast<int32_t>(d));
  }
  KernelHolder(const KernelHolder&) = delete;
  KernelHolder& operator=(const KernelHolder&) = delete;
  ~KernelHolder() { magic = 0; }
  uint32_t magic = kMagic;
  Host host;
  std::string op, device_type;
  std::string spec_platform;  // as given (for dpp_kernel_t.platform)
  std::string platform_name;  // the platform it is bound to, or "ANY" (for messages)
  const PlatformHolder* platform;  // nullptr: bound to ANY
  std::vector<int32_t> dtypes;
  KernelFn fn;
  KernelCreateFn create;                  // empty: no state
  const std::type_info* state_type;       // what create returns a shared_ptr to
  mutable std::atomic<bool> said_per_launch{false};  // the debug line about per-launch states
  dpp_kernel_t desc{};
};

/**
 * @brief A kernel state as the host holds it (`void* state`, ABI 1.5): what the kernel's
 *        create function returned, shared with work that captured KernelContext::state_ptr().
 *        The host's `destroy` deletes the box; the state goes with its last owner.
 */
struct KernelStateBox {
  static constexpr uint32_t kMagic = 0x4B535441u;  // "KSTA"
  KernelStateBox(const KernelHolder* k, std::shared_ptr<void> v) noexcept : kernel(k), value(std::move(v)) {}
  KernelStateBox(const KernelStateBox&) = delete;
  KernelStateBox& operator=(const KernelStateBox&) = delete;
  ~KernelStateBox() { magic = 0; }
  uint32_t magic = kMagic;
  const KernelHolder* kernel;  // whose create made it (compared, for the checks)
  std::shared_ptr<void> value;  // may be null
};

/**
 * @brief Every function the C tables point to. Each is noexcept and catches everything:
 *        no exception ever leaves it.
 */
struct Trampolines {
  // -- Exception boundary ---------------------------------------------------------------

  /** The message for the exception being handled, which is no std::exception: "unknown C++
   *  exception", with its type where the C++ library tells it ("of type int"). Only inside a
   *  `catch (...)`. */
  static std::string unknown_exception() {
    std::string text = "unknown C++ exception";
#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
    if (const std::type_info* type = ::abi::__cxa_current_exception_type()) {
      int status = -1;
      char* name = ::abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
      text += " of type ";
      text += status == 0 && name != nullptr ? name : type->name();
      std::free(name);
    }
#endif
    return text;
  }

  /** Runs @p f; converts any exception into a status (+ set_error). */
  template <class F>
  static dpp_status_t guard(const PluginState* st, F&& f) noexcept {
    try {
      f();
      return DPP_OK;
    } catch (const Error& e) {
      if (st != nullptr) st->set_error(e.message());
      return e.code() == DPP_OK ? DPP_INTERNAL : e.code();
    } catch (const std::bad_alloc&) {
      if (st != nullptr) st->set_error("out of memory (std::bad_alloc)");
      return DPP_RESOURCE_EXHAUSTED;
    } catch (const std::exception& e) {
      if (st != nullptr) st->set_error(e.what());
      return DPP_INTERNAL;
    } catch (...) {
      try {
        if (st != nullptr) st->set_error(unknown_exception().c_str());
      } catch (...) {
        if (st != nullptr) st->set_error("unknown C++ exception");
      }
      return DPP_INTERNAL;
    }
  }

  /** Runs @p f for a function without a status; logs any exception. */
  template <class F>
  static void guard_void(const PluginState* st, const char* function, F&& f) noexcept {
    try {
      f();
    } catch (const Error& e) {
      log_failure(st, function, e.message());
    } catch (const std::bad_alloc&) {
      log_failure(st, function, "out of memory (std::bad_alloc)");
    } catch (const std::exception& e) {
      log_failure(st, function, e.what());
    } catch (...) {
      try {
        log_failure(st, function, unknown_exception().c_str());
      } catch (...) {
        log_failure(st, function, "unknown C++ exception");
      }
    }
  }

  static void log_failure(const PluginState* st, const char* function, const char* what) noexcept {
    if (st == nullptr) return;
    try {
      st->log(DPP_LOG_ERROR, (std::string(function) + " failed: " + what).c_str());
    } catch (...) {
      st->log(DPP_LOG_ERROR, what);
    }
  }

  // -- Argument checks (throw Error::invalid_argument) ----------------------------------

  static void require(bool ok, const char* message) {
    if (!ok) throw Error::invalid_argument(message);
  }

  static DeviceHolder* holder(void* device) { return static_cast<DeviceHolder*>(device); }

  /** The Handle behind a stream (@p magic kStream) or event handle, checked. */
  static Handle& handle_of(const DeviceHolder* d, void* handle, uint32_t magic, const char* what, bool own) {
    auto* h = static_cast<Handle*>(handle);
    const bool stream = magic == Handle::kStream;
    if (h == nullptr) throw Error::invalid_argument(std::string(what) + " is NULL");
    if (h->magic != magic || h->owner == nullptr) {
      throw Error::invalid_argument(std::string(what) + (stream ? " is not a stream" : " is not an event") +
                                    " (or was destroyed)");
    }
    if (own ? h->owner != d : h->owner->platform != d->platform) {
      throw Error::invalid_argument(std::string(what) + " belongs to another " + (own ? "device" : "platform"));
    }
    return *h;
  }

  /** A stream of this device (@p own) or of any device of its platform. */
  static Stream& stream_of(const DeviceHolder* d, void* handle, const char* what, bool own) {
    return *handle_of(d, handle, Handle::kStream, what, own).stream;
  }

  /** An event of any device of this device's platform. */
  static Event& event_of(const DeviceHolder* d, void* handle) {
    return *handle_of(d, handle, Handle::kEvent, "event", false).event;
  }

  // -- dpp_plugin_api_t -----------------------------------------------------------------

  /** `init`: checks the host table, runs @p Init, hands the state to shutdown. */
  template <void (*Init)(Host&)>
  static dpp_status_t plugin_init(const dpp_host_api_t* host, void** out_plugin_data) noexcept {
    if (host == nullptr || out_plugin_data == nullptr) return DPP_INVALID_ARGUMENT;
    // set_error sits at the same offset in every ABI version; use it only if present.
    const bool can_report = host->struct_size >= offsetof(dpp_host_api_t, set_error) + sizeof(host->set_error) &&
                            host->set_error != nullptr;
    auto refuse = [&](dpp_status_t code, const char* message) {
      if (can_report) host->set_error(host->context, message);
      return code;
    };
    char message[192];
    if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_0) {
      std::snprintf(message, sizeof message, "the host's dpp_host_api_t has %zu bytes, fewer than ABI %d.0's %d",
                    static_cast<size_t>(host->struct_size), DPP_ABI_MAJOR, DPP_HOST_API_STRUCT_SIZE_1_0);
      return refuse(DPP_ABI_MISMATCH, message);
    }
    if (host->abi_major != DPP_ABI_MAJOR) {
      std::snprintf(message, sizeof message, "the host has ABI %u.%u; this plugin was built for ABI %d.%d",
                    static_cast<unsigned>(host->abi_major), static_cast<unsigned>(host->abi_minor), DPP_ABI_MAJOR,
                    DPP_ABI_MINOR);
      return refuse(DPP_ABI_MISMATCH, message);
    }
    if (host->set_error == nullptr || host->log == nullptr || host->get_option == nullptr ||
        host->register_platform == nullptr) {
      return refuse(DPP_INVALID_ARGUMENT, "the host's dpp_host_api_t has a NULL function");
    }
    std::shared_ptr<PluginState> state;
    dpp_status_t status = guard(nullptr, [&] { state = std::make_shared<PluginState>(host); });
    if (status != DPP_OK) return refuse(status, "out of memory (std::bad_alloc)");
    status = guard(state.get(), [&] {
      Host h(state);
      Init(h);
      state->in_init.store(false, std::memory_order_release);
      *out_plugin_data = new std::shared_ptr<PluginState>(state);
    });
    state->in_init.store(false, std::memory_order_release);
    // The host rolls back what a failed init registered and never calls its kernels.
    if (status != DPP_OK) drop_kernels(state.get());
    return status;
  }

  /** Destroys the kernels (they hold the state: this breaks the cycle). */
  static void drop_kernels(PluginState* state) noexcept {
    std::vector<std::shared_ptr<KernelHolder>> kernels;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      kernels.swap(state->kernels);
    }
    guard_void(state, "destroying the kernels", [&] { kernels.clear(); });
  }

  /** `shutdown`: frees what init created. */
  static void plugin_shutdown(void* plugin_data) noexcept {
    auto* state = static_cast<std::shared_ptr<PluginState>*>(plugin_data);
    if (state == nullptr) return;
    if (*state && (*state)->live_platforms.load() != 0) {
      (*state)->log(DPP_LOG_WARN, "shutdown: the host did not destroy every platform of this plugin first");
    }
    if (*state) drop_kernels(state->get());
    delete state;
  }

  // -- dpp_platform_t -------------------------------------------------------------------

  static dpp_status_t create_device(void* platform_data, int32_t ordinal, dpp_device_t* device) noexcept {
    auto* p = static_cast<PlatformHolder*>(platform_data);
    if (p == nullptr) return DPP_INVALID_ARGUMENT;
    return guard(p->state.get(), [&] {
      require(device != nullptr, "create_device: device is NULL");
      if (device->struct_size < DPP_DEVICE_STRUCT_SIZE) {
        throw Error(DPP_ABI_MISMATCH, "create_device: the host's dpp_device_t is smaller than ABI 1.0's");
      }
      if (ordinal < 0 || ordinal >= p->device_count) {
        throw Error::invalid_argument("create_device: ordinal " + std::to_string(ordinal) + " is not below " +
                                      p->name + "'s device count " + std::to_string(p->device_count));
      }
      std::unique_ptr<Device> made = p->platform->create_device(ordinal);
      if (!made) throw Error::internal("create_device: Platform::create_device returned null");
      made->host_ = p->platform->host_;
      made->ordinal_ = ordinal;
      auto d = std::make_unique<DeviceHolder>(p, std::move(made));
      Device& dev = *d->device;
      d->hardware_name = dev.hardware_name();
      d->vendor = dev.vendor();
      d->pci_bus_id = dev.pci_bus_id();
      const uint64_t total_memory = dev.total_memory();
      const int32_t numa_node = dev.numa_node();
      const uint32_t compute_units = dev.compute_units();
      fill_table(d->se, dev.optional_functions());
      // Nothing below throws: the out-parameter is written only on success.
      auto c_str = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
      device->ext = nullptr;
      device->device_data = d.get();
      device->hardware_name = c_str(d->hardware_name);
      device->vendor = c_str(d->vendor);
      device->pci_bus_id = c_str(d->pci_bus_id);
      device->total_memory = total_memory;
      device->numa_node = numa_node;
      device->compute_units = compute_units;
      device->se = &d->se;
      d.release();
    });
  }

  static void destroy_device(void* platform_data, dpp_device_t* device) noexcept {
    auto* p = static_cast<PlatformHolder*>(platform_data);
    if (p == nullptr || device == nullptr || device->device_data == nullptr) return;
    std::unique_ptr<DeviceHolder> d(holder(device->device_data));
    device->device_data = nullptr;
    device->se = nullptr;
    std::shared_ptr<PluginState> state = d->state;  // outlives the holder, for the log
    guard_void(state.get(), "destroy_device", [&] { p->platform->destroy_device(std::move(d->device)); });
  }

  static void destroy_platform(void* platform_data) noexcept {
    auto* p = static_cast<PlatformHolder*>(platform_data);
    if (p == nullptr) return;
    std::shared_ptr<PluginState> state = p->state;  // outlives the holder, for the log
    state->live_platforms.fetch_sub(1);
    guard_void(state.get(), "destroy_platform", [&] { delete p; });
  }

  // -- dpp_stream_executor_t ------------------------------------------------------------

  /** Runs @p f(holder, device) for the executor function called with @p device. */
  template <class F>
  static dpp_status_t exec(void* device, F&& f) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr) return DPP_INVALID_ARGUMENT;  // no host to tell why: nothing to report to
    return guard(d->state.get(), [&] { f(*d, *d->device); });
  }

  static dpp_status_t allocate(void* device, uint64_t size, dpp_addr_t* out_addr) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(out_addr != nullptr, "allocate: out_addr is NULL");
      require(size > 0, "allocate: size is 0");
      Addr a = dev.allocate(size);
      if (a == 0) throw Error::internal("allocate: Device::allocate returned address 0");
      *out_addr = a;
    });
  }
  static void deallocate(void* device, dpp_addr_t addr, uint64_t size) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr || addr == 0) return;
    guard_void(d->state.get(), "deallocate", [&] { d->device->deallocate(addr, size); });
  }
  static dpp_status_t host_allocate(void* device, uint64_t size, void** out_ptr) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(out_ptr != nullptr, "host_allocate: out_ptr is NULL");
      require(size > 0, "host_allocate: size is 0");
      void* p = dev.host_allocate(size);
      if (p == nullptr) throw Error::resource_exhausted("host_allocate: Device::host_allocate returned NULL");
      *out_ptr = p;
    });
  }
  static void host_deallocate(void* device, void* ptr, uint64_t size) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr || ptr == nullptr) return;
    guard_void(d->state.get(), "host_deallocate", [&] { d->device->host_deallocate(ptr, size); });
  }
  static dpp_status_t unified_allocate(void* device, uint64_t size, void** out_ptr) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(out_ptr != nullptr, "unified_allocate: out_ptr is NULL");
      require(size > 0, "unified_allocate: size is 0");
      void* p = dev.unified_allocate(size);
      if (p == nullptr) throw Error::resource_exhausted("unified_allocate: Device::unified_allocate returned NULL");
      *out_ptr = p;
    });
  }
  static void unified_deallocate(void* device, void* ptr, uint64_t size) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr || ptr == nullptr) return;
    guard_void(d->state.get(), "unified_deallocate", [&] { d->device->unified_deallocate(ptr, size); });
  }
  static dpp_status_t memory_usage(void* device, uint64_t* out_free, uint64_t* out_total) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(out_free != nullptr && out_total != nullptr, "memory_usage: an out-pointer is NULL");
      MemoryUsage u = dev.memory_usage();
      *out_free = u.free_bytes;
      *out_total = u.total_bytes;
    });
  }
  static dpp_status_t allocator_stats(void* device, dpp_allocator_stats_t* out) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(out != nullptr, "allocator_stats: out_stats is NULL");
      AllocatorStats s = dev.allocator_stats();
      // The host set struct_size: write only the fields its struct has.
      const size_t size = out->struct_size;
      auto put = [&](uint64_t dpp_allocator_stats_t::*field, size_t offset, uint64_t v) {
        if (size >= offset + sizeof(uint64_t)) out->*field = v;
      };
      put(&dpp_allocator_stats_t::num_allocs, offsetof(dpp_allocator_stats_t, num_allocs), s.num_allocs);
      put(&dpp_allocator_stats_t::bytes_in_use, offsetof(dpp_allocator_stats_t, bytes_in_use), s.bytes_in_use);
      put(&dpp_allocator_stats_t::peak_bytes_in_use, offsetof(dpp_allocator_stats_t, peak_bytes_in_use),
          s.peak_bytes_in_use);
      put(&dpp_allocator_stats_t::largest_alloc_size, offsetof(dpp_allocator_stats_t, largest_alloc_size),
          s.largest_alloc_size);
      put(&dpp_allocator_stats_t::bytes_limit, offsetof(dpp_allocator_stats_t, bytes_limit), s.bytes_limit);
      put(&dpp_allocator_stats_t::bytes_reserved, offsetof(dpp_allocator_stats_t, bytes_reserved), s.bytes_reserved);
      put(&dpp_allocator_stats_t::largest_free_block, offsetof(dpp_allocator_stats_t, largest_free_block),
          s.largest_free_block);
    });
  }
  static dpp_status_t memcpy_htod(void* device, dpp_addr_t dst, const void* src, uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(src != nullptr || size == 0, "memcpy_htod: src is NULL");
      dev.memcpy_htod(dst, src, size);
    });
  }
  static dpp_status_t memcpy_dtoh(void* device, void* dst, dpp_addr_t src, uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) {
      require(dst != nullptr || size == 0, "memcpy_dtoh: dst is NULL");
      dev.memcpy_dtoh(dst, src, size);
    });
  }
  static dpp_status_t memcpy_dtod(void* device, dpp_addr_t dst, dpp_addr_t src, uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) { dev.memcpy_dtod(dst, src, size); });
  }
  static dpp_status_t memset(void* device, dpp_addr_t dst, uint8_t value, uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) { dev.memset(dst, value, size); });
  }
  static dpp_status_t create_stream(void* device, void** out_stream) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      require(out_stream != nullptr, "create_stream: out_stream is NULL");
      auto h = std::make_unique<Handle>(Handle::kStream, &d_, dev.create_stream(), nullptr);
      if (!h->stream) throw Error::internal("create_stream: Device::create_stream returned null");
      *out_stream = static_cast<void*>(h.release());
    });
  }
  static void destroy_stream(void* device, void* stream) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr || stream == nullptr) return;
    guard_void(d->state.get(), "destroy_stream", [&] {
      std::unique_ptr<Handle> h(&handle_of(d, stream, Handle::kStream, "stream", true));
      d->device->destroy_stream(std::move(h->stream));
    });
  }
  static dpp_status_t synchronize_stream(void* device, void* stream) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) { dev.synchronize_stream(stream_of(&d_, stream, "stream", true)); });
  }
  static dpp_status_t stream_wait_stream(void* device, void* stream, void* other) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      Stream& o = stream_of(&d_, other, "other", false);
      dev.stream_wait_stream(s, o);
    });
  }
  static dpp_status_t memcpy_htod_async(void* device, void* stream, dpp_addr_t dst, const void* src,
                                        uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      require(src != nullptr || size == 0, "memcpy_htod_async: src is NULL");
      dev.memcpy_htod_async(s, dst, src, size);
    });
  }
  static dpp_status_t memcpy_dtoh_async(void* device, void* stream, void* dst, dpp_addr_t src,
                                        uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      require(dst != nullptr || size == 0, "memcpy_dtoh_async: dst is NULL");
      dev.memcpy_dtoh_async(s, dst, src, size);
    });
  }
  static dpp_status_t memcpy_dtod_async(void* device, void* stream, dpp_addr_t dst, dpp_addr_t src,
                                        uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) { dev.memcpy_dtod_async(stream_of(&d_, stream, "stream", true), dst, src, size); });
  }
  static dpp_status_t memset_async(void* device, void* stream, dpp_addr_t dst, uint8_t value,
                                   uint64_t size) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) { dev.memset_async(stream_of(&d_, stream, "stream", true), dst, value, size); });
  }
  static dpp_status_t host_callback(void* device, void* stream, dpp_host_fn func, void* arg) noexcept {
    // A reference of its own to the callback's state, to tell afterwards what the device did
    // with it (HostCallback's comment).
    std::shared_ptr<HostCallback::State> kept;
    const dpp_status_t status = exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      require(func != nullptr, "host_callback: func is NULL");
      HostCallback callback(func, arg);
      callback.state_->plugin = d_.state;
      kept = callback.state_;
      dev.host_callback(s, std::move(callback));
    });
    if (!kept) return status;
    using State = HostCallback::State;
    if (status != DPP_OK) {
      // Refused now, unless it already ran: then the host must hear of success.
      if (kept->settle(State::kRefused) == State::kCalled) {
        kept->log(DPP_LOG_ERROR,
                  "host_callback called the callback, then failed; the host's function ran, so the host is "
                  "told it succeeded (an error means the function never runs)");
        return DPP_OK;
      }
      return status;
    }
    // Neither called nor kept by the device (ours is the only reference): it can never run.
    if (kept.use_count() == 1 && kept->settle(State::kRefused) == State::kPending) {
      if (const DeviceHolder* d = holder(device)) {
        d->state->set_error("host_callback returned without calling the callback or keeping a copy of it");
      }
      return DPP_INTERNAL;
    }
    kept->accepted.store(true, std::memory_order_release);
    return DPP_OK;
  }
  static dpp_status_t create_event(void* device, void** out_event) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      require(out_event != nullptr, "create_event: out_event is NULL");
      auto h = std::make_unique<Handle>(Handle::kEvent, &d_, nullptr, dev.create_event());
      if (!h->event) throw Error::internal("create_event: Device::create_event returned null");
      *out_event = static_cast<void*>(h.release());
    });
  }
  static void destroy_event(void* device, void* event) noexcept {
    DeviceHolder* d = holder(device);
    if (d == nullptr || event == nullptr) return;
    guard_void(d->state.get(), "destroy_event", [&] {
      std::unique_ptr<Handle> h(&handle_of(d, event, Handle::kEvent, "event", false));
      d->device->destroy_event(std::move(h->event));
    });
  }
  static dpp_status_t record_event(void* device, void* stream, void* event) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      dev.record_event(s, event_of(&d_, event));
    });
  }
  static dpp_status_t event_status(void* device, void* event, int32_t* out_status) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Event& e = event_of(&d_, event);
      require(out_status != nullptr, "event_status: out_status is NULL");
      EventStatus st = dev.event_status(e);
      if (st != EventStatus::Pending && st != EventStatus::Complete && st != EventStatus::Error) {
        throw Error::internal("event_status: Device::event_status returned an invalid EventStatus");
      }
      *out_status = static_cast<int32_t>(st);
    });
  }
  static dpp_status_t stream_wait_event(void* device, void* stream, void* event) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      dev.stream_wait_event(s, event_of(&d_, event));
    });
  }
  static dpp_status_t event_synchronize(void* device, void* event) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) { dev.event_synchronize(event_of(&d_, event)); });
  }
  static dpp_status_t synchronize_all(void* device) noexcept {
    return exec(device, [&](DeviceHolder&, Device& dev) { dev.synchronize_all(); });
  }
  static dpp_status_t event_elapsed_ns(void* device, void* start, void* end, int64_t* out_ns) noexcept {
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Event& s = *handle_of(&d_, start, Handle::kEvent, "event_elapsed_ns: start", false).event;
      Event& e = *handle_of(&d_, end, Handle::kEvent, "event_elapsed_ns: end", false).event;
      require(out_ns != nullptr, "event_elapsed_ns: out_ns is NULL");
      *out_ns = dev.event_elapsed_ns(s, e);
    });
  }

  /** Fills a device's table: every required function, and the optional ones it provides. */
  static void fill_table(dpp_stream_executor_t& se, const OptionalFunctions& opt) noexcept {
    se = dpp_stream_executor_t{};
    se.struct_size = DPP_STREAM_EXECUTOR_STRUCT_SIZE;
    se.ext = nullptr;
    se.allocate = &Trampolines::allocate;
    se.deallocate = &Trampolines::deallocate;
    if (opt.host_memory) {
      se.host_allocate = &Trampolines::host_allocate;
      se.host_deallocate = &Trampolines::host_deallocate;
    }
    if (opt.unified_memory) {
      se.unified_allocate = &Trampolines::unified_allocate;
      se.unified_deallocate = &Trampolines::unified_deallocate;
    }
    if (opt.memory_usage) se.memory_usage = &Trampolines::memory_usage;
    if (opt.allocator_stats) se.allocator_stats = &Trampolines::allocator_stats;
    se.memcpy_htod = &Trampolines::memcpy_htod;
    se.memcpy_dtoh = &Trampolines::memcpy_dtoh;
    se.memcpy_dtod = &Trampolines::memcpy_dtod;
    se.memset = &Trampolines::memset;
    se.create_stream = &Trampolines::create_stream;
    se.destroy_stream = &Trampolines::destroy_stream;
    se.synchronize_stream = &Trampolines::synchronize_stream;
    se.stream_wait_stream = &Trampolines::stream_wait_stream;
    se.memcpy_htod_async = &Trampolines::memcpy_htod_async;
    se.memcpy_dtoh_async = &Trampolines::memcpy_dtoh_async;
    se.memcpy_dtod_async = &Trampolines::memcpy_dtod_async;
    se.memset_async = &Trampolines::memset_async;
    se.host_callback = &Trampolines::host_callback;
    se.create_event = &Trampolines::create_event;
    se.destroy_event = &Trampolines::destroy_event;
    se.record_event = &Trampolines::record_event;
    se.event_status = &Trampolines::event_status;
    se.stream_wait_event = &Trampolines::stream_wait_event;
    se.event_synchronize = &Trampolines::event_synchronize;
    se.synchronize_all = &Trampolines::synchronize_all;
    if (opt.event_elapsed_ns) se.event_elapsed_ns = &Trampolines::event_elapsed_ns;
  }

  /** Registers @p platform through @p host (Host::register_platform's body). */
  static Platform& register_platform(const Host& host, std::unique_ptr<Platform> platform) {
    const dpp_host_api_t* api = host.init_api("register_platform");
    if (!platform) throw Error::invalid_argument("register_platform: the platform is null");
    auto p = std::make_unique<PlatformHolder>(host.state_, std::move(platform));
    Platform& pl = *p->platform;
    pl.host_ = host;
    p->name = pl.name();
    p->device_type = pl.device_type();
    p->vendor = pl.vendor();
    p->version = pl.version();
    p->device_count = pl.device_count();
    dpp_platform_t& desc = p->desc;
    desc.struct_size = DPP_PLATFORM_STRUCT_SIZE;
    desc.ext = nullptr;
    desc.name = p->name.c_str();
    desc.device_type = p->device_type.c_str();
    desc.priority = pl.priority();
    desc.flags = pl.flags();
    desc.vendor = p->vendor.empty() ? nullptr : p->vendor.c_str();
    desc.version = p->version.empty() ? nullptr : p->version.c_str();
    desc.device_count = static_cast<int32_t>(p->device_count);
    desc.platform_data = p.get();
    desc.create_device = &Trampolines::create_device;
    desc.destroy_device = &Trampolines::destroy_device;
    desc.destroy_platform = &Trampolines::destroy_platform;
    const dpp_status_t status = api->register_platform(api->context, &desc);
    if (status != DPP_OK) {
      throw Error(status, "the host refused platform '" + p->name + "' (" + status_name(status) + ")");
    }
    // The host owns it now; destroy_platform deletes it.
    host.state_->live_platforms.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(host.state_->mu);
      host.state_->platforms.push_back(PlatformRecord{p->name, p->device_type, p.get()});
    }
    p.release();
    return pl;
  }

  // -- Kernels (ABI 1.1) ----------------------------------------------------------------

  /** The host's tensor array @p ptr of @p n, checked; elements `struct_size` bytes apart. */
  static TensorList tensor_list(const dpp_tensor_t* ptr, size_t n, const char* what, const std::string& op) {
    if (n == 0) return TensorList();
    auto bad = [&](const std::string& why) {
      return Error::invalid_argument("kernel " + op + ": " + what + ": " + why);
    };
    if (ptr == nullptr) throw bad("the array of " + std::to_string(n) + " tensors is NULL");
    const size_t stride = ptr->struct_size;
    if (stride < DPP_TENSOR_STRUCT_SIZE || stride % alignof(dpp_tensor_t) != 0) {
      throw bad("dpp_tensor_t.struct_size is " + std::to_string(stride) + ", not a valid size (ABI 1.1: " +
                std::to_string(DPP_TENSOR_STRUCT_SIZE) + ")");
    }
    if (n > std::numeric_limits<size_t>::max() / stride) throw bad("too many tensors");
    TensorList list(reinterpret_cast<const unsigned char*>(ptr), stride, n);
    for (size_t i = 0; i < n; ++i) {
      const dpp_tensor_t& t = list[i].raw();
      const std::string which = "tensor " + std::to_string(i) + ": ";
      if (t.struct_size < DPP_TENSOR_STRUCT_SIZE) {
        throw bad(which + "dpp_tensor_t.struct_size is " + std::to_string(t.struct_size));
      }
      if (t.rank < 0) throw bad(which + "rank " + std::to_string(t.rank) + " is negative");
      if (t.rank > 0 && t.shape == nullptr) throw bad(which + "rank " + std::to_string(t.rank) + " but the shape is NULL");
      for (int32_t d = 0; d < t.rank; ++d) {
        if (t.shape[d] < 0) {
          throw bad(which + "shape " + shape_string(Span<int64_t>(t.shape, static_cast<size_t>(t.rank))) +
                    " has a negative dimension");
        }
      }
    }
    return list;
  }

  /** `compute` of every kernel registered through Host::register_kernel(). */
  static dpp_status_t kernel_compute(const dpp_kernel_context_t* ctx) noexcept {
    if (ctx == nullptr) return DPP_INVALID_ARGUMENT;
    // Too short to hold kernel_data: no way to reach the host to say why. (ABI 1.1 to 1.4
    // contexts end there; 1.5 appended `state`, read below only when the host's struct has it.)
    if (ctx->struct_size < DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1) return DPP_ABI_MISMATCH;
    const auto* k = static_cast<const KernelHolder*>(ctx->kernel_data);
    if (k == nullptr || k->magic != KernelHolder::kMagic) return DPP_INVALID_ARGUMENT;
    return guard(k->host.state_.get(), [&] {
      TensorList inputs = tensor_list(ctx->inputs, ctx->num_inputs, "inputs", k->op);
      TensorList outputs = tensor_list(ctx->outputs, ctx->num_outputs, "outputs", k->op);
      const KernelStateBox* state = nullptr;
      std::unique_ptr<KernelStateBox> per_launch;  // the SDK's own, for this launch only
      if (k->create) {
        void* host_state = nullptr;
        if (ctx->struct_size >= offsetof(dpp_kernel_context_t, state) + sizeof(ctx->state)) host_state = ctx->state;
        if (host_state != nullptr) {
          state = static_cast<const KernelStateBox*>(host_state);
          if (state->magic != KernelStateBox::kMagic || state->kernel != k) {
            throw Error::invalid_argument("kernel " + k->op + ": the context's state is not one this kernel's create made");
          }
        } else {
          // A host older than ABI 1.5 (or one that passed none): create for this launch.
          if (!k->said_per_launch.exchange(true, std::memory_order_relaxed)) {
            k->host.debug("kernel " + k->op + ": the host passes no kernel state (plugin ABI " +
                          std::to_string(k->host.abi_major()) + "." + std::to_string(k->host.abi_minor()) +
                          "): its create runs before every launch");
          }
          std::vector<DType> dtypes;
          dtypes.reserve(inputs.size());
          for (Tensor t : inputs) dtypes.push_back(t.dtype());
          const KernelCreateContext cc(ctx->attrs, k, ctx->device, std::move(dtypes), nullptr);
          per_launch = std::make_unique<KernelStateBox>(k, k->create(cc));
          state = per_launch.get();
        }
      }
      KernelContext cx(ctx, k, inputs, outputs, state);
      k->fn(cx);
    });
  }

  /** `create` (ABI 1.5) of every kernel registered with a create function: boxes its state. */
  static dpp_status_t kernel_create(const dpp_kernel_create_context_t* ctx, void** out_state) noexcept {
    if (ctx == nullptr || out_state == nullptr) return DPP_INVALID_ARGUMENT;
    // Too short to hold kernel_data (the last field of the 1.5 struct, the first version of it):
    // no way to reach the host to say why. A newer host's larger struct is read as far as 1.5's.
    if (ctx->struct_size < DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE) return DPP_ABI_MISMATCH;
    const auto* k = static_cast<const KernelHolder*>(ctx->kernel_data);
    if (k == nullptr || k->magic != KernelHolder::kMagic) return DPP_INVALID_ARGUMENT;
    return guard(k->host.state_.get(), [&] {
      if (!k->create) throw Error::internal("kernel " + k->op + ": create called, but it was registered without one");
      if (ctx->num_inputs > 0 && ctx->input_dtypes == nullptr) {
        throw Error::invalid_argument("kernel " + k->op + ": create: the " + std::to_string(ctx->num_inputs) +
                                      " input dtypes are at NULL");
      }
      std::vector<DType> dtypes;
      dtypes.reserve(ctx->num_inputs);
      for (size_t i = 0; i < ctx->num_inputs; ++i) dtypes.push_back(static_cast<DType>(ctx->input_dtypes[i]));
      const KernelCreateContext cc(ctx->attrs, k, ctx->device, std::move(dtypes), ctx);
      auto box = std::make_unique<KernelStateBox>(k, k->create(cc));
      *out_state = box.release();  // written on success only
    });
  }

  /** `destroy` (ABI 1.5): deletes what kernel_create made (the state goes with its last owner). */
  static void kernel_destroy(void* kernel_data, void* state) noexcept {
    const auto* k = static_cast<const KernelHolder*>(kernel_data);
    const PluginState* st = k != nullptr && k->magic == KernelHolder::kMagic ? k->host.state_.get() : nullptr;
    auto* box = static_cast<KernelStateBox*>(state);
    if (box == nullptr) return;
    if (box->magic != KernelStateBox::kMagic) {
      log_failure(st, "kernel state destroy", "the host passed a state that is not one of this plugin (not freed)");
      return;
    }
    guard_void(st, "kernel state destroy", [&] { delete box; });
  }

  /** Registers a kernel through @p host (Host::register_kernel's body); with @p create (ABI
   *  1.5), whose states are of type @p state_type. */
  static void register_kernel(const Host& host, const KernelSpec& spec, KernelFn fn, KernelCreateFn create = nullptr,
                              const std::type_info* state_type = nullptr) {
    const dpp_host_api_t* api = host.init_api("register_kernel");
    PluginState& st = *host.state_;
    const std::string what = "kernel " + spec.op + " for " + spec.device_type;
    if (st.register_kernel == nullptr) {
      throw Error::unimplemented(what + ": the host has plugin ABI " + std::to_string(api->abi_major) + "." +
                                 std::to_string(api->abi_minor) + " (a " + std::to_string(api->struct_size) +
                                 "-byte dpp_host_api_t without register_kernel); kernels need ABI 1.1");
    }
    if (!fn) throw Error::invalid_argument(what + ": the kernel function is empty");
    if (spec.op.empty()) throw Error::invalid_argument("register_kernel: the op name is empty");
    // The binding: the host checks it too, but the kernel needs the platform to check its
    // devices, and this says precisely what is wrong.
    const PlatformHolder* bound = nullptr;
    std::string binding = "ANY";
    if (!spec.platform || *spec.platform != "ANY") {
      std::vector<const PlatformRecord*> own;
      std::lock_guard<std::mutex> lock(st.mu);
      for (const PlatformRecord& r : st.platforms) {
        if (r.device_type == spec.device_type) own.push_back(&r);
      }
      const PlatformRecord* found = nullptr;
      if (spec.platform) {
        for (const PlatformRecord* r : own) {
          if (r->name == *spec.platform) found = r;
        }
        if (found == nullptr) {
          throw Error::invalid_argument(what + ": platform " + *spec.platform + " is not a platform of type " +
                                        spec.device_type + " that this plugin registered (register the platform first)");
        }
      } else if (own.size() == 1) {
        found = own[0];
      } else if (own.empty()) {
        throw Error::invalid_argument(what + ": this plugin registered no platform of type " + spec.device_type +
                                      " (register the platform first)");
      } else {
        std::string names;
        for (const PlatformRecord* r : own) names += (names.empty() ? "" : ", ") + r->name;
        throw Error::invalid_argument(what + ": this plugin registered " + std::to_string(own.size()) +
                                      " platforms of type " + spec.device_type + " (" + names +
                                      "); name one in KernelSpec::platform");
      }
      bound = found->holder;
      binding = found->name;
    }
    auto k = std::make_shared<KernelHolder>(host, spec, bound, binding, std::move(fn), std::move(create), state_type);
    // A host older than ABI 1.3 knows no half dtypes (and never has such tensors): the kernel
    // goes in without them, or not at all when it took nothing else.
    if (api->abi_major == 1 && api->abi_minor < 3) {
      auto half = [](int32_t d) { return d == DPP_DTYPE_F16 || d == DPP_DTYPE_BF16; };
      k->dtypes.erase(std::remove_if(k->dtypes.begin(), k->dtypes.end(), half), k->dtypes.end());
      if (k->dtypes.empty() && !spec.dtypes.empty()) {
        host.info(what + " takes only f16/bf16, which a host of plugin ABI 1." + std::to_string(api->abi_minor) +
                  " does not know: not registered");
        return;
      }
    }
    dpp_kernel_t& desc = k->desc;
    desc.struct_size = DPP_KERNEL_STRUCT_SIZE;
    desc.ext = nullptr;
    desc.op = k->op.c_str();
    desc.device_type = k->device_type.c_str();
    desc.platform = spec.platform ? k->spec_platform.c_str() : nullptr;  // NULL: the host resolves it
    desc.dtypes = k->dtypes.empty() ? nullptr : k->dtypes.data();
    desc.num_dtypes = k->dtypes.size();
    desc.priority = spec.priority;
    desc.kernel_data = k.get();
    desc.compute = &Trampolines::kernel_compute;
    // ABI 1.5; a host older than that reads the struct only as far as its own size reaches.
    desc.create = k->create ? &Trampolines::kernel_create : nullptr;
    desc.destroy = k->create ? &Trampolines::kernel_destroy : nullptr;
    const dpp_status_t status = st.register_kernel(api->context, &desc);
    if (status != DPP_OK) {
      throw Error(status, "the host refused " + what + " on " + binding + " (" + status_name(status) + ")");
    }
    std::lock_guard<std::mutex> lock(st.mu);
    st.kernels.push_back(std::move(k));
  }
};

static_assert(sizeof(dpp_plugin_api_t) >= DPP_PLUGIN_API_STRUCT_SIZE, "plugin.h: dpp_plugin_api_t size");
static_assert(sizeof(dpp_host_api_t) >= DPP_HOST_API_STRUCT_SIZE, "plugin.h: dpp_host_api_t size");
static_assert(sizeof(dpp_kernel_t) >= DPP_KERNEL_STRUCT_SIZE, "plugin.h: dpp_kernel_t size");
static_assert(sizeof(dpp_op_def_t) >= DPP_OP_DEF_STRUCT_SIZE, "plugin.h: dpp_op_def_t size");
static_assert(sizeof(dpp_kernel_context_t) >= DPP_KERNEL_CONTEXT_STRUCT_SIZE, "plugin.h: dpp_kernel_context_t size");
static_assert(sizeof(dpp_kernel_create_context_t) >= DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE,
              "plugin.h: dpp_kernel_create_context_t size");
static_assert(sizeof(dpp_tensor_t) >= DPP_TENSOR_STRUCT_SIZE, "plugin.h: dpp_tensor_t size");
static_assert(sizeof(dpp_platform_t) >= DPP_PLATFORM_STRUCT_SIZE, "plugin.h: dpp_platform_t size");
static_assert(sizeof(dpp_device_t) >= DPP_DEVICE_STRUCT_SIZE, "plugin.h: dpp_device_t size");
static_assert(sizeof(dpp_stream_executor_t) >= DPP_STREAM_EXECUTOR_STRUCT_SIZE,
              "plugin.h: dpp_stream_executor_t size");

/** The plugin's static description (DEVPLUG_PLUGIN's body). */
template <void (*Init)(Host&)>
constexpr dpp_plugin_api_t make_plugin_api(const char* name, const char* version,
                                           uint32_t abi_minor = DPP_ABI_MINOR) noexcept {
  return dpp_plugin_api_t{DPP_PLUGIN_API_STRUCT_SIZE,
                          nullptr,
                          DPP_ABI_MAJOR,
                          abi_minor,
                          name,
                          version,
                          &Trampolines::plugin_init<Init>,
                          &Trampolines::plugin_shutdown};
}

}  // namespace detail

inline Platform& Host::register_platform(std::unique_ptr<Platform> platform) const {
  return detail::Trampolines::register_platform(*this, std::move(platform));
}

inline void Host::register_kernel(const KernelSpec& spec, KernelFn kernel) const {
  detail::Trampolines::register_kernel(*this, spec, std::move(kernel));
}

inline void Host::register_kernel(const KernelSpec& spec, std::unique_ptr<Kernel> kernel) const {
  if (!kernel) throw Error::invalid_argument("register_kernel: the kernel " + spec.op + " is null");
  std::shared_ptr<Kernel> k(std::move(kernel));
  register_kernel(spec, KernelFn([k](KernelContext& cx) { k->compute(cx); }));
}

template <class Create, class>
void Host::register_kernel(const KernelSpec& spec, Create create, KernelFn compute) const {
  using R = std::decay_t<std::invoke_result_t<const Create&, const KernelCreateContext&>>;
  using T = typename detail::StateResult<R>::type;
  if constexpr (detail::IsNullable<Create>::value) {
    if (!create) {
      throw Error::invalid_argument("kernel " + spec.op + " for " + spec.device_type + ": the create function is empty");
    }
  }
  detail::KernelCreateFn erased = [c = std::move(create)](const KernelCreateContext& cx) -> std::shared_ptr<void> {
    return detail::StateResult<R>::share(c(cx));
  };
  detail::Trampolines::register_kernel(*this, spec, std::move(compute), std::move(erased), &typeid(T));
}

inline const std::string& KernelAttrReader::op() const noexcept { return kernel_->op; }

inline const Host& KernelAttrReader::host() const noexcept { return kernel_->host; }

inline Device& KernelAttrReader::device_of(void* device_data) const {
  if (kernel_->platform == nullptr) {
    throw Error::failed_precondition("kernel " + op() +
                                     " is bound to ANY: it may run on other plugins' devices, so it has no Device or "
                                     "Stream of this plugin");
  }
  auto* d = static_cast<detail::DeviceHolder*>(device_data);
  if (d == nullptr) throw Error::invalid_argument("kernel " + op() + ": the context's device is NULL");
  if (d->platform != kernel_->platform) {
    throw Error::internal("kernel " + op() + ": the context's device is not a device of platform " +
                          kernel_->platform_name);
  }
  return *d->device;
}

inline Device& KernelContext::device_base() const { return device_of(raw_->device); }

inline Stream& KernelContext::stream_base() const {
  device_base();  // the binding and device checks
  auto* d = static_cast<detail::DeviceHolder*>(raw_->device);
  return detail::Trampolines::stream_of(d, raw_->stream, "the kernel context's stream", true);
}

inline void* KernelContext::state_as(const std::type_info& type) const {
  if (state_ == nullptr) {
    throw Error::failed_precondition("kernel " + op() +
                                     " has no state: it was registered without a create function");
  }
  if (kernel_->state_type == nullptr || *kernel_->state_type != type) {
    throw Error::internal("kernel " + op() + ": its state is not of the type asked for");
  }
  return state_->value.get();
}

inline const std::shared_ptr<void>& KernelContext::state_value() const noexcept { return state_->value; }

inline bool KernelContext::state_per_launch() const noexcept {
  return state_ != nullptr && (raw_->struct_size < offsetof(dpp_kernel_context_t, state) + sizeof(raw_->state) ||
                               raw_->state != static_cast<const void*>(state_));
}

template <class F>
void KernelAttrReader::read_attr(const std::string& name, const char* kind, F&& call) const {
  const detail::PluginState& st = *kernel_->host.state_;
  const dpp_status_t status = call(st, name.c_str());
  switch (status) {
    case DPP_OK: return;
    case kNoFunction:
      throw Error::unimplemented("kernel " + op() + ": the host has no attr_" + kind + " function");
    case DPP_NOT_FOUND: throw Error::not_found("kernel " + op() + ": the op has no attribute '" + name + "'");
    case DPP_INVALID_ARGUMENT:
      throw Error::invalid_argument("kernel " + op() + ": attribute '" + name + "' is not of type " + kind);
    default:
      throw Error(status, "kernel " + op() + ": reading attribute '" + name + "' failed (" + status_name(status) + ")");
  }
}

inline Addr KernelContext::allocate_temp(uint64_t size) const {
  const detail::PluginState& st = *kernel_->host.state_;
  if (st.allocate_temp == nullptr) {
    throw Error::unimplemented("kernel " + op() + ": allocate_temp needs plugin ABI 1.4; the host has " +
                               std::to_string(st.api->abi_major) + "." + std::to_string(st.api->abi_minor) +
                               " (a " + std::to_string(st.api->struct_size) +
                               "-byte dpp_host_api_t without allocate_temp)");
  }
  Addr addr = 0;
  const dpp_status_t status = st.allocate_temp(raw_, size, &addr);
  if (status != DPP_OK) {
    throw Error(status, "kernel " + op() + ": the host's allocate_temp of " + std::to_string(size) +
                            " bytes failed (" + status_name(status) + ")");
  }
  if (addr == 0) throw Error::internal("kernel " + op() + ": the host's allocate_temp gave address 0");
  return addr;
}

}  // namespace plugin
}  // namespace devplug

/**
 * @brief Defines the plugin: the exported `devplug_plugin_entry` and its static
 *        `dpp_plugin_api_t`. Use it once, at namespace scope, in one source file.
 *
 * @param NAME    the plugin's name, a string literal matching `[A-Za-z0-9_.-]+`.
 * @param VERSION the plugin's version, a string literal.
 * @param ...     the init function: a function or a captureless lambda taking
 *                `devplug::plugin::Host&`, that reads load options and registers platforms.
 *                An exception it throws fails `init` (see the file comment for the status);
 *                the host then rolls back the platforms registered so far.
 */
#define DEVPLUG_PLUGIN(NAME, VERSION, ...) DEVPLUG_PLUGIN_FOR_ABI(NAME, VERSION, DPP_ABI_MINOR, __VA_ARGS__)

/**
 * @brief DEVPLUG_PLUGIN() for a plugin that declares plugin ABI `1.ABI_MINOR`, the **oldest**
 *        host it loads into (a host refuses a plugin of a newer minor), instead of the
 *        header's. The header reaches every function added after 1.0 by the host's
 *        `struct_size`, so a plugin that needs kernels declares 1 and registers its ops only
 *        when `Host::supports_ops()` says so. A minor newer than the header's does not compile.
 */
#define DEVPLUG_PLUGIN_FOR_ABI(NAME, VERSION, ABI_MINOR, ...)                                       \
  static_assert((ABI_MINOR) <= DPP_ABI_MINOR, "DEVPLUG_PLUGIN_FOR_ABI: a minor newer than plugin.h's"); \
  static void devplug_plugin_init_fn_(::devplug::plugin::Host& devplug_host_) {                    \
    (__VA_ARGS__)(devplug_host_);                                                                   \
  }                                                                                                 \
  extern "C" DPP_EXPORT const dpp_plugin_api_t* devplug_plugin_entry(void) {                       \
    static const dpp_plugin_api_t devplug_plugin_api_ =                                             \
        ::devplug::plugin::detail::make_plugin_api<&devplug_plugin_init_fn_>(NAME, VERSION, (ABI_MINOR)); \
    return &devplug_plugin_api_;                                                                    \
  }

#endif  // DEVPLUG_PLUGIN_HPP
