/**
 * @file devplug.hpp
 * @brief Header-only C++17 wrapper over devplug's host C API (`devplug/devplug.h`).
 *
 * Everything here is a thin, inline layer over the C functions:
 *
 * - errors become `devplug::Error` exceptions carrying the status code and the message the C
 *   library left in `dp_last_error_message()` at the moment of the failure;
 * - owned C handles (`dp_runtime_t`, `dp_stream_t`, `dp_event_t`) are held by move-only RAII
 *   classes (`Runtime`, `Stream`, `Event`);
 * - shared C handles (`dp_buffer_t`, `dp_tensor_t`) are held by copyable classes (`Buffer`,
 *   `Tensor`) whose copies retain and whose destructors release;
 * - borrowed device handles are wrapped by `Device`, a cheap non-owning value.
 *
 * Lifetimes follow the C API: a `Device` (and a default-stream view) is valid only while its
 * `Runtime` lives. Declare the `Runtime` first so that it is destroyed last.
 *
 * No exception ever crosses into the C library: the only C++ code the runtime calls is the
 * `extern "C"` trampolines of host callbacks, device setters, the placement callback and the
 * log callback, and each catches everything.
 */
#ifndef DEVPLUG_DEVPLUG_HPP
#define DEVPLUG_DEVPLUG_HPP

#include <devplug/devplug.h>
#include <devplug/half.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

/** @brief The devplug C++ API. */
namespace devplug {

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

/**
 * @brief The canonical name of a status code, e.g. `"INVALID_ARGUMENT"`.
 *
 * Wraps `dp_status_str()`; returns `"UNKNOWN_STATUS"` for a value that is not a status code.
 * The returned string is static.
 */
inline const char* status_name(dp_status_t status) noexcept {
  const char* name = dp_status_str(status);
  return name != nullptr ? name : "UNKNOWN_STATUS";
}

/** @cond */
namespace detail {
// A string the C library returned; "" for NULL (constructing std::string from NULL is undefined).
inline std::string str(const char* s) { return s != nullptr ? s : ""; }

// What the C++ device setter that last threw on this thread threw (see
// devplug_cxx_device_setter_trampoline): a C setter can only return a status, so its
// exception's text waits here for the Error of the call that failed because of it.
struct SetterFailure {
  dp_status_t status = DP_OK;  // what the trampoline returned; DP_OK: nothing waits
  std::string text;
};
inline SetterFailure& setter_failure() noexcept {
  static thread_local SetterFailure failure;
  return failure;
}
}  // namespace detail
/** @endcond */

/**
 * @brief A failed devplug call: a status code plus the library's message.
 *
 * `what()` is `"CODE: message"` (just `"CODE"` when the message is empty), e.g.
 * `"NOT_FOUND: no device matches 'CPU:7'"`. Copying an `Error` never throws.
 */
class Error : public std::runtime_error {
 public:
  /**
   * @brief Builds an error from a code and a message (no C call is made).
   * @param code    a `DP_*` status code other than `DP_OK`.
   * @param message the detail, without the code name.
   */
  Error(dp_status_t code, const std::string& message)
      : std::runtime_error(format(code, message)), code_(code), message_(message) {}

  /**
   * @brief Builds an error for a C call that just returned @p code, capturing
   *        `dp_last_error_message()` now (it is only valid until the next failing call).
   */
  static Error from_last_error(dp_status_t code) {
    // Copy the thread-local message before any other devplug call can replace it.
    const char* message = dp_last_error_message();
    std::string text = detail::str(message);
    // A C++ device setter that threw failed this call: add what it threw, which the C library
    // never saw. Taken either way, so that it cannot attach to a later failure.
    detail::SetterFailure& setter = detail::setter_failure();
    if (setter.status != DP_OK) {
      if (setter.status == code && text.find("setter") != std::string::npos) text += ": " + setter.text;
      setter.status = DP_OK;
      setter.text.clear();
    }
    return Error(code, text);
  }

  /** @brief The status code (`DP_INVALID_ARGUMENT`, `DP_NOT_FOUND`, ...). */
  dp_status_t code() const noexcept { return code_; }

  /** @brief The canonical name of code(), e.g. `"NOT_FOUND"`. */
  const char* code_name() const noexcept { return status_name(code_); }

  /** @brief The library's message, without the code name (may be empty). */
  const char* message() const noexcept { return message_.what(); }

 private:
  static std::string format(dp_status_t code, const std::string& message) {
    std::string text = status_name(code);
    if (!message.empty()) {
      text += ": ";
      text += message;
    }
    return text;
  }

  dp_status_t code_;
  std::runtime_error message_;  // a nothrow-copyable, reference-counted string
};

/**
 * @brief Throws `Error` (with the thread's last error message) unless @p status is `DP_OK`.
 *
 * Use it around any C call you make yourself: `devplug::check(dp_device_synchronize(d));`.
 */
inline void check(dp_status_t status) {
  if (status != DP_OK) {
    throw Error::from_last_error(status);
  }
}

// ------------------------------------------------------------------------------------------
// Versions
// ------------------------------------------------------------------------------------------

/** @brief A semantic version `major.minor.patch`. */
struct Version {
  uint32_t major; /**< major version */
  uint32_t minor; /**< minor version */
  uint32_t patch; /**< patch version */

  /** @brief `"major.minor.patch"`. */
  std::string to_string() const {
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
};

/** @brief An ABI version `major.minor` (the plugin ABI). */
struct AbiVersion {
  uint32_t major; /**< ABI major: plugins must match it exactly */
  uint32_t minor; /**< ABI minor: plugins may be older, not newer */
};

/** @brief Two versions are equal when all their parts are. */
inline bool operator==(const Version& a, const Version& b) noexcept {
  return a.major == b.major && a.minor == b.minor && a.patch == b.patch;
}
/** @brief Negation of `==`. */
inline bool operator!=(const Version& a, const Version& b) noexcept { return !(a == b); }

/** @brief The version of the library loaded at run time (decodes `dp_version()`). */
inline Version version() noexcept {
  const uint32_t v = dp_version();
  return Version{(v >> 16) & 0xffffu, (v >> 8) & 0xffu, v & 0xffu};
}

/** @brief The version of the header this code was compiled against (`DP_VERSION_*`). */
constexpr Version header_version() noexcept {
  return Version{DP_VERSION_MAJOR, DP_VERSION_MINOR, DP_VERSION_PATCH};
}

/** @brief The library's version string, e.g. `"0.1.0"` (`dp_version_string()`). */
inline std::string version_string() {
  return detail::str(dp_version_string());
}

/** @brief The plugin ABI version of the library loaded at run time (`dp_abi_version()`). */
inline AbiVersion abi_version() noexcept {
  const uint32_t v = dp_abi_version();
  return AbiVersion{(v >> 16) & 0xffffu, v & 0xffffu};
}

/** @brief The plugin ABI version of the header (`DP_ABI_VERSION_*`). */
constexpr AbiVersion header_abi_version() noexcept {
  return AbiVersion{DP_ABI_VERSION_MAJOR, DP_ABI_VERSION_MINOR};
}

/**
 * @brief Whether the loaded library can serve code compiled against this header: same major,
 *        and a minor at least the header's (while the major is 0, the minors must be equal).
 */
inline bool version_compatible() noexcept {
  return dp_version_compatible(DP_VERSION_MAJOR, DP_VERSION_MINOR) != 0;
}

// ------------------------------------------------------------------------------------------
// Data types
// ------------------------------------------------------------------------------------------

/** @brief Element types of tensors (the `DP_DTYPE_*` values). */
enum class DType : dp_dtype_t {
  Invalid = 0,          /**< not a dtype (returned for an invalid tensor handle) */
  F32 = DP_DTYPE_F32,   /**< `float` */
  F64 = DP_DTYPE_F64,   /**< `double` */
  I32 = DP_DTYPE_I32,   /**< `int32_t` */
  I64 = DP_DTYPE_I64,   /**< `int64_t` */
  U8 = DP_DTYPE_U8,     /**< `uint8_t` */
  Bool = DP_DTYPE_BOOL, /**< `bool`, one byte per element holding 0 or 1 */
  F16 = DP_DTYPE_F16,   /**< `devplug::f16`, IEEE 754 half precision */
  BF16 = DP_DTYPE_BF16, /**< `devplug::bf16`, bfloat16 */
};

// devplug::f16 and devplug::bf16 are in devplug/half.hpp (shared with plugins).


/** @brief The C value of a dtype. */
constexpr dp_dtype_t to_c(DType dtype) noexcept { return static_cast<dp_dtype_t>(dtype); }

/** @brief The name of a dtype (`"f32"`, ...), or `"invalid"` (`dp_dtype_name()`). */
inline const char* dtype_name(DType dtype) noexcept {
  const char* name = dp_dtype_name(to_c(dtype));
  return name != nullptr ? name : "invalid";
}

/** @brief The size of one element in bytes, 0 for an invalid dtype (`dp_dtype_size()`). */
inline size_t dtype_size(DType dtype) noexcept { return dp_dtype_size(to_c(dtype)); }

/**
 * @brief Maps a C++ element type to its `DType`. Specialized for `float`, `double`,
 *        `int32_t`, `int64_t`, `uint8_t`, `bool`, `f16` and `bf16`, and for the signed
 *        integer types of those sizes that are distinct types (`long long` where `int64_t` is
 *        `long`, as on Linux; `long` where `int64_t` is `long long`); other types do not
 *        compile (`dtype_of` says why). Specialize it for a type of your own that has the
 *        layout of one of these.
 *
 * `bool` maps to `DType::Bool`, whose elements are one byte each (0 or 1): this header
 * requires `sizeof(bool) == 1`.
 */
template <class T>
struct dtype_traits;  // undefined for unsupported types

/** @cond */
namespace detail {
// Stands in for a type that needs no specialization of its own (it is one of the fixed-width
// types already specialized): each instance is a distinct type no one uses.
template <int>
struct no_such_element_type;
}  // namespace detail

template <>
struct dtype_traits<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_traits<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_traits<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_traits<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_traits<uint8_t> {
  static constexpr DType value = DType::U8;
};
template <>
struct dtype_traits<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_traits<f16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_traits<bf16> {
  static constexpr DType value = DType::BF16;
};
// `long long` and `long`, where they are not int64_t / int32_t themselves: the dtype of their
// size (a `long` is 8 bytes on Linux and macOS, 4 on Windows).
template <>
struct dtype_traits<std::conditional_t<std::is_same<long long, int64_t>::value, detail::no_such_element_type<0>,
                                       long long>> {
  static_assert(sizeof(long long) == 8, "devplug maps long long to DType::I64");
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_traits<std::conditional_t<std::is_same<long, int64_t>::value || std::is_same<long, int32_t>::value,
                                       detail::no_such_element_type<1>, long>> {
  static_assert(sizeof(long) == 8 || sizeof(long) == 4, "devplug maps long to DType::I64 or DType::I32");
  static constexpr DType value = sizeof(long) == 8 ? DType::I64 : DType::I32;
};

namespace detail {
template <class T, class = void>
struct has_dtype : std::false_type {};
template <class T>
struct has_dtype<T, std::void_t<decltype(dtype_traits<T>::value)>> : std::true_type {};
template <class T>
struct always_false : std::false_type {};
}  // namespace detail
/** @endcond */

static_assert(sizeof(bool) == 1, "devplug's DType::Bool is one byte; this platform's bool is not");
static_assert(sizeof(float) == 4 && sizeof(double) == 8, "devplug needs IEEE-754 float/double");

/**
 * @brief The `DType` of @p T, e.g. `dtype_of<float>() == DType::F32` (see `dtype_traits`).
 *        For a type without one (`unsigned`, `uint64_t`, `char`, `std::string`, ...) it fails to
 *        compile with a `static_assert` naming the element types there are.
 */
template <class T>
constexpr DType dtype_of() noexcept {
  if constexpr (detail::has_dtype<std::remove_cv_t<T>>::value) {
    return dtype_traits<std::remove_cv_t<T>>::value;
  } else {
    static_assert(detail::always_false<T>::value,
                  "devplug: this C++ type is not a tensor element type. Element types: float, double, "
                  "int32_t, int64_t (also long long / long where it is a distinct 64-bit type), uint8_t, "
                  "bool, devplug::f16, devplug::bf16 (or specialize devplug::dtype_traits for your type)");
    return DType::Invalid;
  }
}

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

/** @cond */
namespace detail {

// A non-null pointer for zero-sized transfers (the C API refuses NULL pointers).
inline void* nonnull(void* p) noexcept {
  static unsigned char dummy = 0;
  return p != nullptr ? p : &dummy;
}
inline const void* nonnull(const void* p) noexcept {
  static const unsigned char dummy = 0;
  return p != nullptr ? p : &dummy;
}

// A contiguous range: std::data() and std::size() work on it (vector, array, string, span,
// C array). std::vector<bool> is not one (it has no data()).
template <class C, class = void>
struct is_contiguous : std::false_type {};
template <class C>
struct is_contiguous<C, std::void_t<decltype(std::data(std::declval<C&>())),
                                    decltype(std::size(std::declval<C&>()))>>
    : std::is_pointer<decltype(std::data(std::declval<C&>()))> {};

template <class C>
using element_t = std::remove_pointer_t<decltype(std::data(std::declval<C&>()))>;

// Readable: contiguous with trivially copyable elements.
template <class C>
constexpr bool is_byte_source() {
  if constexpr (is_contiguous<C>::value) {
    return std::is_trivially_copyable<std::remove_cv_t<element_t<C>>>::value;
  } else {
    return false;
  }
}
// Writable: the above, and the elements are not const.
template <class C>
constexpr bool is_byte_sink() {
  if constexpr (is_contiguous<C>::value) {
    return is_byte_source<C>() && !std::is_const<element_t<C>>::value;
  } else {
    return false;
  }
}

template <class C>
struct is_span : std::false_type {};

template <class C>
size_t byte_size(const C& c) noexcept {
  return std::size(c) * sizeof(element_t<const C>);
}

// A call on an empty wrapper (default-constructed, moved from or released) is refused before
// any C call is made: the one case where the wrapper makes the message itself. Where a C call
// failed, the Error carries the C library's message (Error::from_last_error).
[[noreturn]] inline void throw_empty(const char* type, const char* method) {
  throw Error(DP_INVALID_ARGUMENT, std::string(type) + "::" + method + ": the devplug::" + type +
                                       " is empty (default-constructed, moved from or released)");
}

// The handle of a wrapper a method is called on: @p h, or Error for an empty wrapper. Every
// method that hands its own handle to a C function takes it through here.
template <class H>
H* live(H* h, const char* type, const char* method) {
  if (h == nullptr) throw_empty(type, method);
  return h;
}

}  // namespace detail
/** @endcond */

/**
 * @brief A non-owning view of `count` contiguous elements, for code that holds a pointer and
 *        a length. Everything that accepts a container (`Buffer::write()`, ...) accepts it.
 */
template <class T>
class span {
 public:
  /** @brief An empty view. */
  constexpr span() noexcept = default;
  /** @brief A view of @p count elements starting at @p data. */
  constexpr span(T* data, size_t count) noexcept : data_(data), size_(count) {}
  /** @brief The first element. */
  constexpr T* data() const noexcept { return data_; }
  /** @brief The number of elements. */
  constexpr size_t size() const noexcept { return size_; }
  /** @brief The size in bytes. */
  constexpr size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /** @brief Begin iterator. */
  constexpr T* begin() const noexcept { return data_; }
  /** @brief End iterator. */
  constexpr T* end() const noexcept { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

/** @cond */
namespace detail {
template <class T>
struct is_span<span<T>> : std::true_type {};
}  // namespace detail
/** @endcond */

class Buffer;
class Stream;
class Event;
class Tensor;
class HostMemory;

// ------------------------------------------------------------------------------------------
// Device
// ------------------------------------------------------------------------------------------

/** @brief What a device says about itself (`dp_device_properties_t`, strings copied). */
struct DeviceProperties {
  std::string name;          /**< canonical spec, e.g. `"CPU:0"` */
  std::string device_type;   /**< the type users place on, e.g. `"CPU"`, `"GPU"` */
  std::string platform;      /**< the implementing platform, e.g. `"HOST"` */
  std::string vendor;        /**< vendor string */
  std::string hardware_name; /**< hardware model */
  int32_t ordinal = 0;       /**< index among the devices of its platform */
  int32_t priority = 0;      /**< the platform's priority */
  bool is_active_platform = false; /**< `"TYPE:i"` resolves to this platform */
  bool host_visible = false;       /**< device memory is host memory */
  uint64_t total_memory = 0;       /**< bytes: the limit if one is set, else physical */
};

/** @brief Allocator statistics of a device (`dp_memory_stats_t`). */
struct MemoryStats {
  uint64_t bytes_in_use = 0;       /**< bytes currently allocated */
  uint64_t peak_bytes_in_use = 0;  /**< high-water mark of bytes_in_use */
  uint64_t num_allocs = 0;         /**< allocations ever made */
  uint64_t active_allocs = 0;      /**< allocations currently live */
  uint64_t largest_alloc_size = 0; /**< largest single allocation ever made */
  uint64_t bytes_limit = 0;        /**< 0 = unlimited */
  uint64_t bytes_reserved = 0;     /**< bytes reserved from the platform */
  uint64_t largest_free_block = 0; /**< largest free block in the reserved memory */
};

/** @brief A device's free and total memory as the runtime sees it (`dp_device_memory_usage()`). */
struct MemoryUsage {
  uint64_t free = 0;  /**< bytes the runtime could still allocate */
  uint64_t total = 0; /**< bytes the runtime may use at all */
};

/**
 * @brief A device: a cheap, copyable, non-owning value.
 *
 * It wraps a `dp_device_t*` borrowed from a runtime and is valid until that runtime is
 * destroyed. A default-constructed `Device` is empty; calls on it throw `Error`
 * (`DP_INVALID_ARGUMENT`, "the devplug::Device is empty"). Passed as an argument, an empty
 * `Device` means "no device" where the C function takes NULL for that (`RunOptions::device`,
 * `Graph::op`, `Runtime::variable`).
 */
class Device {
 public:
  /** @brief An empty device. */
  Device() noexcept = default;
  /** @brief Wraps a borrowed C handle (no ownership is taken). */
  explicit Device(dp_device_t* handle) noexcept : handle_(handle) {}

  /** @brief The C handle (borrowed). */
  dp_device_t* get() const noexcept { return handle_; }
  /** @brief Whether this wraps a handle. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief The name that addresses the device now, e.g. `"CPU:0"`; `"SIMCUDA:0"` for a device
   *  whose platform is not the active one of its type (`dp_device_name()`). */
  std::string name() const {
    const char* n = dp_device_name(h("name"));
    if (n == nullptr) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return n;
  }

  /** @brief The device's properties (`dp_device_get_properties()`). */
  DeviceProperties properties() const {
    dp_device_properties_t p{};
    p.struct_size = sizeof(p);
    check(dp_device_get_properties(h("properties"), &p));
    DeviceProperties out;
    out.name = detail::str(p.name);
    out.device_type = detail::str(p.device_type);
    out.platform = detail::str(p.platform);
    out.vendor = detail::str(p.vendor);
    out.hardware_name = detail::str(p.hardware_name);
    out.ordinal = p.ordinal;
    out.priority = p.priority;
    out.is_active_platform = p.is_active_platform != 0;
    out.host_visible = p.host_visible != 0;
    out.total_memory = p.total_memory;
    return out;
  }

  /** @brief The allocator's statistics (`dp_device_memory_stats()`). */
  MemoryStats memory_stats() const {
    dp_memory_stats_t s{};
    s.struct_size = sizeof(s);
    check(dp_device_memory_stats(h("memory_stats"), &s));
    MemoryStats out;
    out.bytes_in_use = s.bytes_in_use;
    out.peak_bytes_in_use = s.peak_bytes_in_use;
    out.num_allocs = s.num_allocs;
    out.active_allocs = s.active_allocs;
    out.largest_alloc_size = s.largest_alloc_size;
    out.bytes_limit = s.bytes_limit;
    out.bytes_reserved = s.bytes_reserved;
    out.largest_free_block = s.largest_free_block;
    return out;
  }

  /**
   * @brief Free and total memory (`dp_device_memory_usage()`); throws `devplug::Error`
   * (`UNIMPLEMENTED`) when the device's plugin does not report its memory.
   */
  MemoryUsage memory_usage() const {
    MemoryUsage out;
    check(dp_device_memory_usage(h("memory_usage"), &out.free, &out.total));
    return out;
  }

  /** @brief Waits until all work on all streams of the device is done. */
  void synchronize() const { check(dp_device_synchronize(h("synchronize"))); }

  /** @brief Returns cached, unused device memory to the platform. */
  void release_cached_memory() const { check(dp_device_release_cached_memory(h("release_cached_memory"))); }

  /**
   * @brief Sets the most bytes the runtime's allocator for this device may hold from its
   *        platform, 0 for no limit (`dp_device_set_memory_limit()`); any device, at any time.
   *
   * Below what is held now, cached free memory is given back as far as needed and allocations
   * that need more throw `Error` (`DP_RESOURCE_EXHAUSTED`) until enough is freed; memory in use
   * is never touched. On a CPU device it replaces `RuntimeOptions::cpu_memory_limit`.
   */
  void set_memory_limit(uint64_t bytes) const {
    check(dp_device_set_memory_limit(h("set_memory_limit"), bytes));
  }

  /** @brief The device's memory limit in bytes, 0 when there is none
   *         (`dp_device_memory_limit()`). */
  uint64_t memory_limit() const {
    uint64_t out = 0;
    check(dp_device_memory_limit(h("memory_limit"), &out));
    return out;
  }

  /**
   * @brief Allocates @p size bytes of device memory.
   * @throws Error `DP_RESOURCE_EXHAUSTED` past the device's memory limit.
   */
  Buffer allocate(size_t size) const;

  /** @brief Allocates @p size bytes of pinned host memory of this device's platform. */
  HostMemory host_allocate(size_t size) const;

  /** @brief Creates an asynchronous, ordered stream on this device. */
  Stream create_stream() const;

  /**
   * @brief A non-owning view of the device's default stream. On the CPU device it runs work
   *        inline on the calling thread.
   */
  Stream default_stream() const;

  /** @brief Creates an event on this device. */
  Event create_event() const;

  /** @brief Same handle. */
  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.handle_ == b.handle_;
  }
  /** @brief Different handles. */
  friend bool operator!=(const Device& a, const Device& b) noexcept { return !(a == b); }

 private:
  dp_device_t* h(const char* method) const { return detail::live(handle_, "Device", method); }
  dp_device_t* handle_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// HostMemory
// ------------------------------------------------------------------------------------------

/**
 * @brief Pinned host memory from `dp_device_host_allocate()`, freed on destruction.
 * Move-only; a moved-from object is empty.
 */
class HostMemory {
 public:
  /** @brief Empty. */
  HostMemory() noexcept = default;
  /** @brief Takes ownership of @p ptr (of @p size bytes) allocated on @p device. */
  HostMemory(Device device, void* ptr, size_t size) noexcept
      : device_(device), ptr_(ptr), size_(size) {}
  /** @brief Frees the memory (errors are ignored). */
  ~HostMemory() { reset(); }
  /** @brief Moves; @p other becomes empty. */
  HostMemory(HostMemory&& other) noexcept
      : device_(other.device_),
        ptr_(std::exchange(other.ptr_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  /** @brief Frees the current memory, then moves; @p other becomes empty. */
  HostMemory& operator=(HostMemory&& other) noexcept {
    if (this != &other) {
      reset();
      device_ = other.device_;
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  /** @brief The memory. */
  void* data() const noexcept { return ptr_; }
  /** @brief Its size in bytes. */
  size_t size() const noexcept { return size_; }
  /** @brief The device whose platform allocated it. */
  Device device() const noexcept { return device_; }
  /** @brief Whether memory is held. */
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  /** @brief Gives up ownership; free it with `dp_device_host_free(device().get(), p)`. */
  void* release() noexcept {
    size_ = 0;
    return std::exchange(ptr_, nullptr);
  }
  /** @brief Frees the memory now (errors are ignored); becomes empty. */
  void reset() noexcept {
    if (ptr_ != nullptr) {
      (void)dp_device_host_free(device_.get(), ptr_);
      ptr_ = nullptr;
      size_ = 0;
    }
  }

 private:
  Device device_;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// ------------------------------------------------------------------------------------------
// Buffer
// ------------------------------------------------------------------------------------------

/**
 * @brief Device memory: a shared, reference-counted `dp_buffer_t`.
 *
 * Copies share the memory (`dp_buffer_retain()`); the destructor releases. A moved-from or
 * default-constructed Buffer is empty. The synchronous methods here are ordered after all work
 * on the device's default stream; use `Stream` for asynchronous, stream-ordered transfers.
 * All offsets and sizes are in bytes.
 */
class Buffer {
 public:
  /** @brief Empty. */
  Buffer() noexcept = default;
  /** @brief Wraps @p handle, taking over the caller's reference. */
  static Buffer adopt(dp_buffer_t* handle) noexcept { return Buffer(handle); }
  /** @brief Wraps @p handle, adding a reference (`dp_buffer_retain()`). */
  static Buffer retain(dp_buffer_t* handle) noexcept {
    if (handle != nullptr) dp_buffer_retain(handle);
    return Buffer(handle);
  }
  /** @brief Allocates @p size bytes on @p device (`dp_buffer_allocate()`). */
  static Buffer allocate(const Device& device, size_t size) {
    dp_buffer_t* h = nullptr;
    check(dp_buffer_allocate(device.get(), size, &h));
    return Buffer(h);
  }

  /** @brief Releases this reference. */
  ~Buffer() { dp_buffer_release(handle_); }
  /** @brief Shares the memory (retain). */
  Buffer(const Buffer& other) noexcept : handle_(other.handle_) {
    if (handle_ != nullptr) dp_buffer_retain(handle_);
  }
  /** @brief Moves; @p other becomes empty. */
  Buffer(Buffer&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /** @brief Releases the current reference and shares @p other's memory. */
  Buffer& operator=(const Buffer& other) noexcept {
    Buffer tmp(other);
    swap(tmp);
    return *this;
  }
  /** @brief Releases the current reference and takes @p other's; @p other becomes empty. */
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  /** @brief Swaps handles. */
  void swap(Buffer& other) noexcept { std::swap(handle_, other.handle_); }

  /** @brief The C handle (this object keeps its reference). */
  dp_buffer_t* get() const noexcept { return handle_; }
  /** @brief Gives the reference to the caller (who must `dp_buffer_release()` it); empties. */
  dp_buffer_t* release() noexcept { return std::exchange(handle_, nullptr); }
  /** @brief Whether this holds a buffer. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief Size in bytes (0 when empty). */
  size_t size() const noexcept { return handle_ != nullptr ? dp_buffer_size(handle_) : 0; }
  /** @brief The device that holds the memory. Throws `FAILED_PRECONDITION` once the device's
   *         runtime was destroyed (its device handles went with it). */
  Device device() const {
    dp_device_t* d = dp_buffer_device(h("device"));
    // NULL for a live buffer: its device's runtime was destroyed (the message says so).
    if (d == nullptr) throw Error::from_last_error(DP_FAILED_PRECONDITION);
    return Device(d);
  }

  /** @brief Copies @p size bytes from host memory @p src to this buffer at @p dst_offset. */
  void write(const void* src, size_t size, size_t dst_offset = 0) {
    check(dp_buffer_write(h("write"), dst_offset, detail::nonnull(src), size));
  }
  /**
   * @brief Copies a host container (`std::vector`, `std::array`, `span`, ...) of trivially
   *        copyable elements to this buffer at byte @p dst_offset.
   */
  template <class C, std::enable_if_t<detail::is_byte_source<const C>(), int> = 0>
  void write(const C& src, size_t dst_offset = 0) {
    write(static_cast<const void*>(std::data(src)), detail::byte_size(src), dst_offset);
  }

  /** @brief Copies @p size bytes from this buffer at @p src_offset to host memory @p dst. */
  void read(void* dst, size_t size, size_t src_offset = 0) const {
    check(dp_buffer_read(h("read"), src_offset, detail::nonnull(dst), size));
  }
  /** @brief Fills a host container (its current size) from this buffer at @p src_offset. */
  template <class C, std::enable_if_t<detail::is_byte_sink<C>(), int> = 0>
  void read(C& dst, size_t src_offset = 0) const {
    read(static_cast<void*>(std::data(dst)), detail::byte_size(dst), src_offset);
  }
  /** @brief Reads @p count elements of type @p T starting at byte @p src_offset. */
  template <class T>
  std::vector<T> read_vector(size_t count, size_t src_offset = 0) const {
    static_assert(std::is_trivially_copyable<T>::value && !std::is_same<T, bool>::value,
                  "read_vector<T>: T must be trivially copyable and not bool");
    std::vector<T> out(count);
    read(out, src_offset);
    return out;
  }
  /**
   * @brief The whole buffer as elements of type @p T.
   * @throws Error `DP_INVALID_ARGUMENT` when the size is not a multiple of `sizeof(T)`.
   */
  template <class T>
  std::vector<T> to_vector() const {
    h("to_vector");
    const size_t bytes = size();
    if (bytes % sizeof(T) != 0) {
      throw Error(DP_INVALID_ARGUMENT, "buffer of " + std::to_string(bytes) +
                                           " bytes is not a whole number of " +
                                           std::to_string(sizeof(T)) + "-byte elements");
    }
    return read_vector<T>(bytes / sizeof(T));
  }

  /**
   * @brief Copies @p size bytes from @p src (any device) at @p src_offset into this buffer at
   *        @p dst_offset (`dp_buffer_copy()`).
   */
  void copy_from(const Buffer& src, size_t size, size_t dst_offset = 0, size_t src_offset = 0) {
    check(dp_buffer_copy(h("copy_from"), dst_offset, src.handle_, src_offset, size));
  }

  /** @brief Sets @p size bytes at @p offset to @p value. */
  void memset(uint8_t value, size_t size, size_t offset = 0) {
    check(dp_buffer_memset(h("memset"), offset, value, size));
  }

 private:
  explicit Buffer(dp_buffer_t* handle) noexcept : handle_(handle) {}
  dp_buffer_t* h(const char* method) const { return detail::live(handle_, "Buffer", method); }
  dp_buffer_t* handle_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// Host callbacks
// ------------------------------------------------------------------------------------------

/** @cond */
namespace detail {

// Where exceptions thrown by a stream's host callbacks go. Shared by the Stream object and
// every pending callback, so it lives as long as either.
class CallbackErrors {
 public:
  CallbackErrors() = default;
  CallbackErrors(const CallbackErrors&) = delete;
  CallbackErrors& operator=(const CallbackErrors&) = delete;

  ~CallbackErrors() {
    if (first_) {
      report("devplug: an exception thrown by a host callback was never collected", first_);
    }
  }

  // Keeps the first exception; later ones are reported on stderr and dropped.
  void store(std::exception_ptr e) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) {
        first_ = std::move(e);
        return;
      }
    } catch (...) {
    }
    report("devplug: host callback threw (a previous callback exception is still pending)", e);
  }

  std::exception_ptr take() noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      return std::exchange(first_, nullptr);
    } catch (...) {
      return nullptr;
    }
  }

  static void report(const char* what, const std::exception_ptr& e) noexcept {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s: %s\n", what, ex.what());
    } catch (...) {
      std::fprintf(stderr, "%s: (not a std::exception)\n", what);
    }
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

struct HostCallback {
  std::function<void()> fn;
  std::shared_ptr<CallbackErrors> errors;
};

extern "C" {
// The only C++ code the C library ever calls. It runs the std::function once, frees it once,
// and lets nothing escape: an exception is stored for Stream::synchronize() to rethrow.
inline void devplug_cxx_host_callback_trampoline(void* user_data) noexcept {
  HostCallback* cb = static_cast<HostCallback*>(user_data);
  if (cb == nullptr) return;
  std::shared_ptr<CallbackErrors> errors = std::move(cb->errors);
  try {
    cb->fn();
  } catch (...) {
    if (errors) {
      errors->store(std::current_exception());
    } else {
      CallbackErrors::report("devplug: host callback threw", std::current_exception());
    }
  }
  delete cb;  // exactly once: the runtime calls this function exactly once per enqueue
}
}  // extern "C"

}  // namespace detail
/** @endcond */

// ------------------------------------------------------------------------------------------
// Stream
// ------------------------------------------------------------------------------------------

/**
 * @brief An ordered queue of work on one device.
 *
 * Either owned (from `Device::create_stream()`: an asynchronous queue, destroyed with
 * `dp_stream_destroy()`, which first waits for its work) or a non-owning view of a device's
 * default stream (`Device::default_stream()`; on the CPU device its work runs inline on the
 * calling thread). Move-only; a moved-from Stream is empty.
 *
 * Host memory passed to the asynchronous transfers must stay valid, and unchanged for writes,
 * until the stream reaches the transfer (e.g. until `synchronize()` or an event). For that
 * reason the container overloads refuse temporaries. Buffers used by enqueued work are kept
 * alive by the runtime until the work has run.
 *
 * Several threads may call the enqueue methods and synchronize() on one Stream object at
 * once; moving, assigning and destroying it need exclusive access (as for any C++ object).
 */
class Stream {
 public:
  /** @brief Empty. */
  Stream() noexcept = default;
  /** @brief Creates an asynchronous stream on @p device (`dp_stream_create()`). */
  static Stream create(const Device& device) {
    dp_stream_t* h = nullptr;
    check(dp_stream_create(device.get(), &h));
    try {
      return Stream(h, true);
    } catch (...) {
      dp_stream_destroy(h);
      throw;
    }
  }
  /** @brief A non-owning view of @p device's default stream (`dp_device_default_stream()`). */
  static Stream default_for(const Device& device) {
    dp_stream_t* h = nullptr;
    check(dp_device_default_stream(device.get(), &h));
    return Stream(h, false);
  }
  /** @brief Takes ownership of a stream from `dp_stream_create()`. */
  static Stream adopt(dp_stream_t* handle) { return Stream(handle, true); }
  /** @brief Wraps a stream someone else owns (e.g. a default stream) without owning it. */
  static Stream borrow(dp_stream_t* handle) { return Stream(handle, false); }

  /**
   * @brief Destroys an owned stream after its enqueued work (host callbacks included) has
   *        run; a view does nothing. An exception a callback threw that nobody collected is
   *        reported on stderr.
   */
  ~Stream() { reset(); }
  /** @brief Moves; @p other becomes empty. */
  Stream(Stream&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        owned_(std::exchange(other.owned_, false)),
        errors_(std::move(other.errors_)) {}
  /** @brief Destroys the current stream (if owned), then moves; @p other becomes empty. */
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      owned_ = std::exchange(other.owned_, false);
      errors_ = std::move(other.errors_);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /** @brief The C handle. */
  dp_stream_t* get() const noexcept { return handle_; }
  /** @brief Gives up the handle (the caller destroys it if owned()); empties. */
  dp_stream_t* release() noexcept {
    owned_ = false;
    errors_.reset();
    return std::exchange(handle_, nullptr);
  }
  /** @brief Whether this object destroys the stream (false for default-stream views). */
  bool owned() const noexcept { return owned_; }
  /** @brief Whether this holds a stream. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief The stream's device. Throws `FAILED_PRECONDITION` for a created stream once the
   *         device's runtime was destroyed (its device handles went with it; the stream can
   *         still take work), `INVALID_ARGUMENT` for a default-stream view then (the default
   *         stream went with the runtime). */
  Device device() const {
    dp_device_t* d = dp_stream_device(h("device"));
    if (d != nullptr) return Device(d);
    // The message says why; the code is INVALID_ARGUMENT for a dead handle, and
    // FAILED_PRECONDITION for a live stream whose runtime was destroyed: asked of the handle
    // itself (dp_stream_id), once the message was taken.
    const Error e = Error::from_last_error(DP_INVALID_ARGUMENT);
    uint32_t id = 0;
    if (dp_stream_id(handle_, &id) == DP_OK) throw Error(DP_FAILED_PRECONDITION, e.message());
    throw e;
  }
  /** @brief The stream's id (`dp_stream_id()`): 0 for a default stream, created streams from
   *         1; what a trace's device tracks are named by. */
  uint32_t id() const {
    uint32_t v = 0;
    check(dp_stream_id(h("id"), &v));
    return v;
  }

  /** @brief Enqueues a host→device copy of @p size bytes from @p src (keep it valid!);
   *         @p dst must live on the stream's device. */
  void write(Buffer& dst, const void* src, size_t size, size_t dst_offset = 0) {
    check(dp_stream_write(h("write"), dst.get(), dst_offset, detail::nonnull(src), size));
  }
  /** @brief Enqueues a host→device copy of a container (which must outlive the copy). */
  template <class C, std::enable_if_t<detail::is_byte_source<const C>(), int> = 0>
  void write(Buffer& dst, const C& src, size_t dst_offset = 0) {
    write(dst, static_cast<const void*>(std::data(src)), detail::byte_size(src), dst_offset);
  }
  /** @brief Refused: a temporary container would be gone before the stream reads it
   *         (a temporary `span` is accepted: it only views memory that lives elsewhere). */
  template <class C, std::enable_if_t<detail::is_byte_source<const C>() &&
                                          !detail::is_span<std::remove_cv_t<C>>::value,
                                      int> = 0>
  void write(Buffer& dst, const C&& src, size_t dst_offset = 0) = delete;

  /** @brief Enqueues a device→host copy of @p size bytes into @p dst (keep it valid, and
   *         unread until the copy ran); @p src must live on the stream's device. */
  void read(const Buffer& src, void* dst, size_t size, size_t src_offset = 0) {
    check(dp_stream_read(h("read"), src.get(), src_offset, detail::nonnull(dst), size));
  }
  /** @brief Enqueues a device→host copy filling a container (which must outlive the copy). */
  template <class C, std::enable_if_t<detail::is_byte_sink<C>(), int> = 0>
  void read(const Buffer& src, C& dst, size_t src_offset = 0) {
    read(src, static_cast<void*>(std::data(dst)), detail::byte_size(dst), src_offset);
  }

  /** @brief Enqueues a device→device copy (`dp_stream_copy()`): one of the buffers must
   *         live on the stream's device, the other may live on any device. */
  void copy(Buffer& dst, const Buffer& src, size_t size, size_t dst_offset = 0,
            size_t src_offset = 0) {
    check(dp_stream_copy(h("copy"), dst.get(), dst_offset, src.get(), src_offset, size));
  }

  /** @brief Enqueues setting @p size bytes at @p offset to @p value. */
  void memset(Buffer& dst, uint8_t value, size_t size, size_t offset = 0) {
    check(dp_stream_memset(h("memset"), dst.get(), offset, value, size));
  }

  /** @brief Records @p event at the current end of this stream (same device). */
  void record(Event& event);

  /** @brief Makes later work on this stream wait until @p event completes (the event may
   *         belong to another device). */
  void wait(const Event& event);

  /** @brief Makes later work on this stream wait for the work enqueued so far on @p other
   *         (same device). */
  void wait(const Stream& other) { check(dp_stream_wait_stream(h("wait"), other.handle_)); }

  /**
   * @brief Enqueues @p fn to run once, after all earlier work of the stream, on a runtime
   *        worker thread (inline on the calling thread for the CPU default stream).
   *
   * @p fn must not destroy or synchronize this stream. Anything it throws is caught before it reaches the
   * C library; the first such exception is rethrown by the next `synchronize()` on this
   * object (or returned by `take_callback_exception()`); later ones are printed to stderr.
   * The std::function (and what it captured) is destroyed on the thread that ran it, right
   * after the call; if enqueuing fails it is destroyed here and `Error` is thrown.
   */
  void host_callback(std::function<void()> fn) {
    dp_stream_t* stream = h("host_callback");
    if (!fn) throw Error(DP_INVALID_ARGUMENT, "host_callback: empty std::function");
    // errors_ is set for every stream with a handle (it is refused above without one), so this
    // method never writes a member and may run on several threads at once.
    auto* cb = new detail::HostCallback{
        std::move(fn), errors_ ? errors_ : std::make_shared<detail::CallbackErrors>()};
    const dp_status_t status =
        dp_stream_host_callback(stream, &detail::devplug_cxx_host_callback_trampoline, cb);
    if (status != DP_OK) {
      Error error = Error::from_last_error(status);
      delete cb;  // not enqueued: the runtime will never call the trampoline
      throw error;
    }
  }

  /**
   * @brief Waits until all enqueued work has run. Then rethrows the first exception that a
   *        host callback enqueued through this object threw, if any.
   */
  void synchronize() {
    check(dp_stream_synchronize(h("synchronize")));
    if (std::exception_ptr e = take_callback_exception()) std::rethrow_exception(e);
  }

  /** @brief The first uncollected exception thrown by a host callback (null if none). */
  std::exception_ptr take_callback_exception() noexcept {
    return errors_ ? errors_->take() : nullptr;
  }

 private:
  Stream(dp_stream_t* handle, bool owned)
      : handle_(handle), owned_(owned), errors_(std::make_shared<detail::CallbackErrors>()) {}
  dp_stream_t* h(const char* method) const { return detail::live(handle_, "Stream", method); }
  void reset() noexcept {
    if (owned_) dp_stream_destroy(handle_);  // waits for enqueued work, callbacks included
    handle_ = nullptr;
    owned_ = false;
    errors_.reset();
  }

  dp_stream_t* handle_ = nullptr;
  bool owned_ = false;
  std::shared_ptr<detail::CallbackErrors> errors_;
};

// ------------------------------------------------------------------------------------------
// Event
// ------------------------------------------------------------------------------------------

/**
 * @brief A marker in a stream (`dp_event_t`). Move-only; a moved-from Event is empty.
 * An event that was never recorded counts as complete.
 */
class Event {
 public:
  /** @brief Empty. */
  Event() noexcept = default;
  /** @brief Creates an event on @p device (`dp_event_create()`). */
  static Event create(const Device& device) {
    dp_event_t* h = nullptr;
    check(dp_event_create(device.get(), &h));
    return Event(h);
  }
  /** @brief Takes ownership of a handle from `dp_event_create()`. */
  static Event adopt(dp_event_t* handle) noexcept { return Event(handle); }

  /** @brief Destroys the event. */
  ~Event() { dp_event_destroy(handle_); }
  /** @brief Moves; @p other becomes empty. */
  Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /** @brief Destroys the current event, then moves; @p other becomes empty. */
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      dp_event_destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /** @brief The C handle. */
  dp_event_t* get() const noexcept { return handle_; }
  /** @brief Gives up ownership (the caller must `dp_event_destroy()` it); empties. */
  dp_event_t* release() noexcept { return std::exchange(handle_, nullptr); }
  /** @brief Whether this holds an event. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief Records the event at the current end of @p stream (same device). */
  void record(Stream& stream) { check(dp_event_record(h("record"), stream.get())); }
  /** @brief Whether the work before the event has completed (true if never recorded). */
  bool query() const {
    int32_t complete = 0;
    check(dp_event_query(h("query"), &complete));
    return complete != 0;
  }
  /** @brief Blocks until the event completes. */
  void synchronize() const { check(dp_event_synchronize(h("synchronize"))); }
  /**
   * @brief The device's time from reaching this event to reaching @p end
   * (`dp_event_elapsed_ns()`; negative when @p end came first). Both are recorded and reached
   * events of one device; throws `devplug::Error` with `DP_FAILED_PRECONDITION` when one is not,
   * and `DP_UNIMPLEMENTED` when the device's platform does not time events.
   */
  std::chrono::nanoseconds elapsed(const Event& end) const {
    int64_t ns = 0;
    check(dp_event_elapsed_ns(h("elapsed"), end.get(), &ns));
    return std::chrono::nanoseconds(ns);
  }

 private:
  explicit Event(dp_event_t* handle) noexcept : handle_(handle) {}
  dp_event_t* h(const char* method) const { return detail::live(handle_, "Event", method); }
  dp_event_t* handle_ = nullptr;
};

inline void Stream::record(Event& event) { check(dp_event_record(event.get(), h("record"))); }
inline void Stream::wait(const Event& event) {
  check(dp_stream_wait_event(h("wait"), event.get()));
}

// ------------------------------------------------------------------------------------------
// Tensor
// ------------------------------------------------------------------------------------------

/** @brief A tensor shape: one extent per dimension. */
using Shape = std::vector<int64_t>;

/**
 * @brief dtype + shape + device + data: a shared, reference-counted `dp_tensor_t`.
 *
 * Copies share the tensor (`dp_tensor_retain()`); the destructor releases. Moved-from or
 * default-constructed tensors are empty.
 */
class Tensor {
 public:
  /** @brief Empty. */
  Tensor() noexcept = default;
  /** @brief Wraps @p handle, taking over the caller's reference. */
  static Tensor adopt(dp_tensor_t* handle) noexcept { return Tensor(handle); }
  /** @brief Wraps @p handle, adding a reference (`dp_tensor_retain()`). */
  static Tensor retain(dp_tensor_t* handle) noexcept {
    if (handle != nullptr) dp_tensor_retain(handle);
    return Tensor(handle);
  }

  /**
   * @brief Creates a tensor from raw bytes (`dp_tensor_create()`).
   * @param data the elements, row-major; nullptr for zeros.
   * @param size must equal the tensor's byte size when @p data is not null.
   */
  static Tensor from_data(const Device& device, DType dtype, const Shape& shape,
                          const void* data, size_t size) {
    static const int64_t scalar_shape = 0;  // a valid pointer for rank 0
    dp_tensor_t* h = nullptr;
    check(dp_tensor_create(device.get(), to_c(dtype),
                           shape.empty() ? &scalar_shape : shape.data(), shape.size(), data,
                           data != nullptr ? size : 0, &h));
    return Tensor(h);
  }

  /** @brief A zero-filled tensor. */
  static Tensor zeros(const Device& device, DType dtype, const Shape& shape) {
    return from_data(device, dtype, shape, nullptr, 0);
  }

  /**
   * @brief A tensor of `dtype_of<T>()` from @p count elements at @p data.
   * @throws Error `DP_INVALID_ARGUMENT` when @p count does not match @p shape.
   */
  template <class T>
  static Tensor from_span(const Device& device, const Shape& shape, const T* data,
                          size_t count) {
    constexpr DType dtype = dtype_of<T>();
    return from_data(device, dtype, shape, detail::nonnull(static_cast<const void*>(data)),
                     count * sizeof(T));
  }

  /**
   * @brief A tensor of `dtype_of<T>()` with @p shape from @p data (row-major). For
   *        `std::vector<bool>` the elements are stored one byte each.
   * @throws Error `DP_INVALID_ARGUMENT` when the element count does not match @p shape.
   */
  template <class T>
  static Tensor from_vector(const Device& device, const Shape& shape,
                            const std::vector<T>& data) {
    if constexpr (std::is_same<T, bool>::value) {
      std::vector<uint8_t> bytes(data.begin(), data.end());
      return from_data(device, DType::Bool, shape, detail::nonnull(bytes.data()), bytes.size());
    } else {
      return from_span<T>(device, shape, data.data(), data.size());
    }
  }

  /** @brief Releases this reference. */
  ~Tensor() { dp_tensor_release(handle_); }
  /** @brief Shares the tensor (retain). */
  Tensor(const Tensor& other) noexcept : handle_(other.handle_) {
    if (handle_ != nullptr) dp_tensor_retain(handle_);
  }
  /** @brief Moves; @p other becomes empty. */
  Tensor(Tensor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /** @brief Releases the current reference and shares @p other's tensor. */
  Tensor& operator=(const Tensor& other) noexcept {
    Tensor tmp(other);
    swap(tmp);
    return *this;
  }
  /** @brief Releases the current reference and takes @p other's; @p other becomes empty. */
  Tensor& operator=(Tensor&& other) noexcept {
    Tensor tmp(std::move(other));
    swap(tmp);
    return *this;
  }
  /** @brief Swaps handles. */
  void swap(Tensor& other) noexcept { std::swap(handle_, other.handle_); }

  /** @brief The C handle (this object keeps its reference). */
  dp_tensor_t* get() const noexcept { return handle_; }
  /** @brief Gives the reference to the caller (who must `dp_tensor_release()` it); empties. */
  dp_tensor_t* release() noexcept { return std::exchange(handle_, nullptr); }
  /** @brief Whether this holds a tensor. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief The element type (`DType::Invalid` when empty). */
  DType dtype() const noexcept {
    return handle_ != nullptr ? static_cast<DType>(dp_tensor_dtype(handle_)) : DType::Invalid;
  }
  /** @brief The number of dimensions (0 when empty). */
  size_t rank() const noexcept { return handle_ != nullptr ? dp_tensor_rank(handle_) : 0; }
  /** @brief The extents. */
  Shape shape() const {
    dp_tensor_t* t = h("shape");
    Shape out(dp_tensor_rank(t));
    int64_t scalar = 0;
    check(dp_tensor_shape(t, out.empty() ? &scalar : out.data(), out.size()));
    return out;
  }
  /** @brief The number of elements (the product of the extents). */
  int64_t num_elements() const {
    const int64_t n = dp_tensor_num_elements(h("num_elements"));
    if (n < 0) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return n;
  }
  /** @brief The size of the data in bytes. */
  size_t byte_size() const noexcept {
    return handle_ != nullptr ? dp_tensor_byte_size(handle_) : 0;
  }
  /** @brief The device that holds the data. Throws `FAILED_PRECONDITION` once the device's runtime
   *         was destroyed (its device handles went with it; the tensor can still be read). */
  Device device() const {
    dp_device_t* d = dp_tensor_device(h("device"));
    // NULL for a live tensor: its device's runtime was destroyed (the message says so).
    if (d == nullptr) throw Error::from_last_error(DP_FAILED_PRECONDITION);
    return Device(d);
  }

  /** @brief Copies the data to host memory; @p size must equal byte_size(). */
  void read(void* dst, size_t size) const {
    check(dp_tensor_read(h("read"), detail::nonnull(dst), size));
  }

  /**
   * @brief The elements as a `std::vector<T>`.
   * @throws Error `DP_INVALID_ARGUMENT` when `dtype_of<T>()` is not the tensor's dtype.
   */
  template <class T>
  std::vector<T> to_vector() const {
    constexpr DType want = dtype_of<T>();
    h("to_vector");
    const DType have = dtype();
    if (have != want) {
      throw Error(DP_INVALID_ARGUMENT, std::string("tensor has dtype ") + dtype_name(have) +
                                           ", not " + dtype_name(want));
    }
    const size_t bytes = byte_size();
    if constexpr (std::is_same<T, bool>::value) {
      std::vector<uint8_t> raw(bytes);
      read(raw.data(), raw.size());
      return std::vector<bool>(raw.begin(), raw.end());
    } else {
      std::vector<T> out(bytes / sizeof(T));
      read(out.data(), bytes);
      return out;
    }
  }

  /** @brief A copy of this tensor on @p device (`dp_tensor_copy_to()`). */
  Tensor copy_to(const Device& device) const {
    dp_tensor_t* copy = nullptr;
    check(dp_tensor_copy_to(h("copy_to"), device.get(), &copy));
    return Tensor(copy);
  }

  /** @brief The tensor's device memory, shared (`dp_tensor_buffer()`). */
  Buffer buffer() const {
    dp_buffer_t* b = nullptr;
    check(dp_tensor_buffer(h("buffer"), &b));
    return Buffer::adopt(b);
  }

  /**
   * @brief A tensor over @p buffer's memory, from its start, sharing it: no copy
   *        (`dp_tensor_from_buffer()`). The buffer may be larger than the tensor.
   * @throws Error `DP_INVALID_ARGUMENT` when the buffer is smaller than the tensor.
   */
  static Tensor from_buffer(const Buffer& buffer, DType dtype, const Shape& shape) {
    static const int64_t scalar_shape = 0;  // a valid pointer for rank 0
    dp_tensor_t* t = nullptr;
    check(dp_tensor_from_buffer(buffer.get(), to_c(dtype),
                                shape.empty() ? &scalar_shape : shape.data(), shape.size(), &t));
    return Tensor(t);
  }

  /**
   * @brief The host address of the elements (`dp_tensor_data()`), for a tensor on a device
   *        whose memory is host memory (the CPU): read and write them in place, valid while
   *        the tensor lives. Writes change it for every holder; on a device that runs its
   *        work on streams, synchronize before reading an op's output.
   * @throws Error `DP_FAILED_PRECONDITION` for memory the host cannot touch.
   */
  void* data() const {
    void* p = nullptr;
    check(dp_tensor_data(h("data"), &p));
    return p;
  }

  /**
   * @brief `data()` as `T*`.
   * @throws Error `DP_INVALID_ARGUMENT` when `dtype_of<T>()` is not the tensor's dtype.
   */
  template <class T>
  T* data() const {
    constexpr DType want = dtype_of<T>();
    const DType have = static_cast<DType>(dp_tensor_dtype(h("data")));
    if (have != want) {
      throw Error(DP_INVALID_ARGUMENT, std::string("tensor has dtype ") + dtype_name(have) +
                                           ", not " + dtype_name(want));
    }
    return static_cast<T*>(data());
  }

 private:
  explicit Tensor(dp_tensor_t* handle) noexcept : handle_(handle) {}
  dp_tensor_t* h(const char* method) const { return detail::live(handle_, "Tensor", method); }
  dp_tensor_t* handle_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// Device scopes
// ------------------------------------------------------------------------------------------

/** @brief What an op is, for a setter that places variables and computation apart. */
enum class OpKind : int32_t {
  /** @brief An op computing outputs from inputs: every eager op. */
  Compute = DP_OP_KIND_COMPUTE,
  /** @brief The creation of a variable (`Runtime::variable()`). */
  Variable = DP_OP_KIND_VARIABLE,
};

/** @brief What a device setter is asked about (`dp_placement_query_t`). */
struct PlacementQuery {
  /** @brief The op's name in the program; an eager op's is its type. */
  std::string name;
  /** @brief The op's type (`"MatMul"`, `"vendor.op"`). */
  std::string op;
  OpKind kind = OpKind::Compute;
};

/**
 * @brief A device setter: the device for an op, or an empty `Device` for no opinion (the
 *        scopes around decide). A `devplug::Error` it throws fails the op with its code, any
 *        other exception with `DP_UNKNOWN`; the `Error` the failed call throws ends with what
 *        the exception said, its status named once, in front (`"PERMISSION_DENIED: Add: the
 *        device setter failed: it threw: no GPU for you"`; a `devplug::Error`'s `message()`,
 *        another exception's `what()`).
 */
using DeviceSetter = std::function<Device(const PlacementQuery&)>;

class ScopeGuard;

/**
 * @brief A device scope (`dp_scope_t`): a device, a device setter, or a captured placement
 *        context. Made by `Runtime::device_scope()`, `Runtime::setter_scope()` and
 *        `Runtime::current_scope()`; `enter()` it on a thread. Move-only; destroy it only
 *        after every guard entering it is gone.
 */
class DeviceScope {
 public:
  /** @brief Empty. */
  DeviceScope() noexcept = default;
  /** @brief Takes ownership of a handle from `dp_scope_create_*()` or `dp_scope_capture()`. */
  static DeviceScope adopt(dp_scope_t* handle) noexcept { return DeviceScope(handle); }

  /** @brief Destroys the scope (`dp_scope_destroy()`). */
  ~DeviceScope() { dp_scope_destroy(handle_); }
  /** @brief Moves; @p other becomes empty. */
  DeviceScope(DeviceScope&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /** @brief Destroys the current scope, then moves; @p other becomes empty. */
  DeviceScope& operator=(DeviceScope&& other) noexcept {
    if (this != &other) {
      dp_scope_destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  /** @brief The C handle. */
  dp_scope_t* get() const noexcept { return handle_; }
  /** @brief Whether this holds a scope. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief Enters the scope on this thread until the returned guard is destroyed
   *  (`dp_scope_enter()`). */
  [[nodiscard]] ScopeGuard enter() const&;
  /** @brief Refused: a temporary scope would be destroyed while still entered
   *  (`rt.device_scope(d).enter()`); keep the scope in a variable and enter that. */
  ScopeGuard enter() const&& = delete;

 private:
  explicit DeviceScope(dp_scope_t* handle) noexcept : handle_(handle) {}
  dp_scope_t* handle_ = nullptr;
};

/**
 * @brief Keeps a scope entered on the thread that made it; its destructor exits it
 *        (`dp_scope_exit()`). Guards must be destroyed in reverse order of creation, on the
 *        thread that created them, as block-scoped variables are.
 *
 * Like `std::lock_guard`, a guard is neither copyable nor movable, and cannot be made with
 * `new`: it stays where it was made, so it cannot end on another thread (where the exit would
 * fail and this thread would stay in the scope). `auto g = scope.enter();` works all the same
 * (C++17 guaranteed copy elision); for a guard entered only sometimes, use
 * `std::optional<ScopeGuard>` and `emplace(scope)`. Should an exit fail all the same (guards
 * destroyed out of order, or on another thread through an object holding one), the destructor
 * says so on standard error: it cannot throw.
 */
class ScopeGuard {
 public:
  /** @brief Enters @p scope (`dp_scope_enter()`). */
  explicit ScopeGuard(const DeviceScope& scope) : handle_(detail::live(scope.get(), "DeviceScope", "enter")) {
    check(dp_scope_enter(handle_));
  }
  /** @brief Refused: a temporary scope would be destroyed while still entered. */
  explicit ScopeGuard(const DeviceScope&&) = delete;
  /** @brief Exits the scope; a failed exit is reported on standard error. */
  ~ScopeGuard() {
    if (dp_scope_exit(handle_) != DP_OK) {
      const char* why = dp_last_error_message();
      std::fprintf(stderr,
                   "devplug: ~ScopeGuard could not exit its scope (%s); destroy guards on the thread that "
                   "entered them, innermost first\n",
                   why != nullptr ? why : "");
    }
  }
  ScopeGuard(ScopeGuard&&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  /** @brief Refused: a guard on the heap could be destroyed on another thread. */
  static void* operator new(std::size_t) = delete;
  /** @brief Refused: a guard on the heap could be destroyed on another thread. */
  static void* operator new[](std::size_t) = delete;

 private:
  dp_scope_t* handle_;
};

inline ScopeGuard DeviceScope::enter() const& { return ScopeGuard(*this); }

/** @cond detail */
namespace detail {
// Keeps what a device setter threw for the Error of the call it fails (Error::from_last_error);
// returns @p status, the setter's status.
inline dp_status_t setter_threw(dp_status_t status, const char* what, const char* text) noexcept {
  SetterFailure& f = setter_failure();
  try {
    f.text.assign(what).append(text);
    f.status = status;
  } catch (...) {
    f.status = DP_OK;  // out of memory: the status alone
  }
  return status;
}
extern "C" {
inline dp_status_t devplug_cxx_device_setter_trampoline(const dp_placement_query_t* q, void* user,
                                                       dp_device_t** out) noexcept {
  try {
    PlacementQuery query{q->name, q->op, static_cast<OpKind>(q->kind)};
    *out = (*static_cast<DeviceSetter*>(user))(query).get();
    return DP_OK;
  } catch (const Error& e) {
    // The status it returns is the failed call's code, which the caller's Error states once:
    // the text is the message alone (only an Error with DP_OK, which fails as DP_UNKNOWN,
    // names its code).
    if (e.code() == DP_OK) return setter_threw(DP_UNKNOWN, "it threw a devplug::Error with status ", e.what());
    return setter_threw(e.code(), "it threw: ", e.message());
  } catch (const std::exception& e) {
    return setter_threw(DP_UNKNOWN, "it threw: ", e.what());
  } catch (...) {
    return setter_threw(DP_UNKNOWN, "it threw an exception that is not a std::exception", "");
  }
}
inline void devplug_cxx_device_setter_drop(void* user) noexcept { delete static_cast<DeviceSetter*>(user); }
}  // extern "C"
}  // namespace detail
/** @endcond */

// ------------------------------------------------------------------------------------------
// Runtime
// ------------------------------------------------------------------------------------------

/**
 * @brief Options for `Runtime` (wraps `dp_runtime_options_t`, initialized with
 *        `dp_runtime_options_init()`). Setters chain:
 *        `Runtime rt(RuntimeOptions().cpu_device_count(2).cpu_memory_limit(64 << 20));`
 */
class RuntimeOptions {
 public:
  /** @brief The library's defaults (one CPU device, no memory limit). */
  RuntimeOptions() noexcept : options_() {
    dp_runtime_options_init(&options_, sizeof(options_));
  }
  /** @brief Number of logical CPU devices of the HOST platform (1..=64). */
  RuntimeOptions& cpu_device_count(uint32_t count) noexcept {
    options_.cpu_device_count = count;
    return *this;
  }
  /** @brief Memory limit in bytes per CPU device (0 = unlimited). */
  RuntimeOptions& cpu_memory_limit(uint64_t bytes) noexcept {
    options_.cpu_memory_limit = bytes;
    return *this;
  }
  /**
   * @brief Plugins to load at creation: `:`-separated absolute files or folders. Failures do
   *        not fail the creation; see Runtime::plugin_failures().
   */
  RuntimeOptions& plugin_path(std::string path) {
    plugin_path_ = std::move(path);
    return *this;
  }
  /** @brief Threads a CPU kernel may use (0: the machine's available parallelism). */
  RuntimeOptions& intra_op_threads(uint32_t n) noexcept {
    options_.intra_op_threads = n;
    return *this;
  }
  /** @brief false: strict mode (ops a device cannot run fail instead of falling back to the CPU). */
  RuntimeOptions& soft_placement(bool on) noexcept {
    options_.soft_placement = on ? 1u : 0u;
    return *this;
  }
  /** @brief Whether to load the plugins `DEVPLUG_PLUGIN_PATH` names (default true). */
  RuntimeOptions& discover_plugins(bool on) noexcept {
    options_.discover_plugins = on ? 1u : 0u;
    return *this;
  }
  /** @brief The current device count. */
  uint32_t cpu_device_count() const noexcept { return options_.cpu_device_count; }
  /** @brief The current memory limit. */
  uint64_t cpu_memory_limit() const noexcept { return options_.cpu_memory_limit; }
  /** @brief The C struct (its `plugin_path` points into this object). */
  dp_runtime_options_t c_options() const noexcept {
    dp_runtime_options_t o = options_;
    o.plugin_path = plugin_path_.empty() ? nullptr : plugin_path_.c_str();
    return o;
  }

 private:
  dp_runtime_options_t options_;
  std::string plugin_path_;
};

/** @brief A loaded plugin (`dp_plugin_info_t`). */
struct PluginInfo {
  std::string name;
  std::string version;
  std::string path;
  size_t platform_count = 0;
  /** The ops it defined (plugin ABI 1.2), in order: run them by name (`Runtime::op`). */
  std::vector<std::string> ops;
};

/** @brief A platform of the runtime (`dp_platform_info_t`, strings copied). */
struct PlatformInfo {
  std::string name;         /**< e.g. `"HOST"`, `"SIM"`, `"CUDA"`: `"NAME:i"` names its devices */
  std::string device_type;  /**< the type users place on, e.g. `"CPU"`, `"GPU"` */
  std::string vendor;       /**< who makes the devices */
  std::string version;      /**< the platform's own version */
  std::string plugin;       /**< the plugin that registered it, or `"built-in"` (`HOST`) */
  int32_t priority = 0;     /**< the highest of a device type is what `"TYPE:i"` means */
  bool is_active = false;   /**< `"TYPE:i"` resolves to this platform's devices */
  size_t device_count = 0;  /**< may be 0 (e.g. the CUDA plugin without a GPU) */
  bool host_visible = false; /**< device memory is host memory */
};

/** @brief A plugin that failed to load, and why (`dp_plugin_failure_t`). */
struct PluginFailure {
  std::string path;
  dp_status_t status = DP_OK;
  std::string message;
};

/** @cond */
namespace detail {
// The character types: `Attrs::set` refuses them (a `char` is not an int attribute, and not a
// string). `signed char` and `unsigned char` are `int8_t` and `uint8_t`: integers.
template <class T>
struct is_char : std::false_type {};
template <>
struct is_char<char> : std::true_type {};
template <>
struct is_char<wchar_t> : std::true_type {};
template <>
struct is_char<char16_t> : std::true_type {};
template <>
struct is_char<char32_t> : std::true_type {};
#if defined(__cpp_char8_t)
template <>
struct is_char<char8_t> : std::true_type {};
#endif

// An integer value of an int attribute: any integral type but bool and the character types.
template <class T>
struct is_attr_int
    : std::bool_constant<std::is_integral<std::remove_cv_t<T>>::value && !std::is_same<std::remove_cv_t<T>, bool>::value &&
                         !is_char<std::remove_cv_t<T>>::value> {};

// The element type of an iterable range (std::begin/std::end work on it).
template <class R, class = void>
struct range_element {};
template <class R>
struct range_element<R, std::void_t<decltype(std::begin(std::declval<const R&>())),
                                    decltype(std::end(std::declval<const R&>()))>> {
  using type = std::remove_cv_t<std::remove_reference_t<decltype(*std::begin(std::declval<const R&>()))>>;
};

// A range of integers (std::vector<int>, std::array<int64_t, N>, span, C array, ...): an int
// list. std::vector<bool> (bool elements) and strings (characters) are not.
template <class R, class = void>
struct is_int_range : std::false_type {};
template <class R>
struct is_int_range<R, std::void_t<typename range_element<R>::type>> : is_attr_int<typename range_element<R>::type> {};

// @p v as an int attribute's int64_t; an unsigned value beyond INT64_MAX is an Error naming the
// attribute (and the element, for a list: index >= 0).
template <class I>
int64_t attr_int(const std::string& name, I v, long long index = -1) {
  if constexpr (std::is_unsigned<I>::value && sizeof(I) >= sizeof(int64_t)) {
    if (v > static_cast<I>(std::numeric_limits<int64_t>::max())) {
      throw Error(DP_INVALID_ARGUMENT, "Attrs::set: '" + name + "'" +
                                           (index >= 0 ? "[" + std::to_string(index) + "]" : std::string()) +
                                           " is " + std::to_string(v) +
                                           ", beyond an int attribute (int64_t, at most 9223372036854775807)");
    }
  }
  return static_cast<int64_t>(v);
}
}  // namespace detail
/** @endcond */

/**
 * @brief Attribute values for an op run (`dp_attrs_t`): a move-only builder.
 *
 * `devplug::Attrs().set("axes", {1}).set("keep_dims", true)`
 *
 * What `set` makes of a value, by its C++ type:
 * - any integer type (`int`, `long long`, `size_t`, `int8_t`, ...): an int; an unsigned value
 *   beyond `INT64_MAX` throws `Error` (`DP_INVALID_ARGUMENT`, naming the attribute);
 * - braces (`{0, 1}`, `{1}`, `{}`) and any range of integers (`std::vector<int>`,
 *   `std::vector<int64_t>`, `std::array<long, 3>`, `devplug::span<const int64_t>`, a C array):
 *   an int list;
 * - `bool`: a bool; `double` or `float`: a float; `DType`: a dtype;
 * - `std::string`, `std::string_view`, a string literal or `const char*`: a string.
 *
 * A character (`'x'`) does not compile: it is neither an int nor a string here.
 */
class Attrs {
 public:
  /** @brief An empty set. */
  Attrs() { check(dp_attrs_create(&handle_)); }
  ~Attrs() { dp_attrs_destroy(handle_); }
  Attrs(Attrs&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Attrs& operator=(Attrs&& other) noexcept {
    if (this != &other) {
      dp_attrs_destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Attrs(const Attrs&) = delete;
  Attrs& operator=(const Attrs&) = delete;

  /** @brief Sets an integer attribute. */
  Attrs& set(const std::string& name, int64_t v) & {
    check(dp_attrs_set_int(h("set"), name.c_str(), v));
    return *this;
  }
  /** @brief Sets an integer attribute (int literals, and unscoped enums through `int`). */
  Attrs& set(const std::string& name, int v) & { return set(name, static_cast<int64_t>(v)); }
  /**
   * @brief Sets an integer attribute from any other integer type (`long long`, `size_t`,
   *        `unsigned`, `int8_t`, ...).
   * @throws Error `DP_INVALID_ARGUMENT` naming the attribute for an unsigned value beyond
   *         `INT64_MAX`.
   */
  template <class I, std::enable_if_t<detail::is_attr_int<I>::value, int> = 0>
  Attrs& set(const std::string& name, I v) & {
    return set(name, detail::attr_int(name, v));
  }
  /** @brief Refused: a character is neither an int nor a string attribute (write `"x"` for a
   *  string, `int('x')` for its code). */
  template <class C, std::enable_if_t<detail::is_char<C>::value, int> = 0>
  Attrs& set(const std::string& name, C v) & = delete;
  /** @brief Sets a float attribute (`float` too). */
  Attrs& set(const std::string& name, double v) & {
    check(dp_attrs_set_float(h("set"), name.c_str(), v));
    return *this;
  }
  /** @brief Sets a bool attribute. */
  Attrs& set(const std::string& name, bool v) & {
    check(dp_attrs_set_bool(h("set"), name.c_str(), v ? 1 : 0));
    return *this;
  }
  /** @brief Sets an integer-list attribute from braces: `set("axes", {0, 1})`, `set("axes",
   *  {1})` (a list of one, not an int), `set("axes", {})` (an empty list). */
  Attrs& set(const std::string& name, std::initializer_list<int64_t> v) & {
    check(dp_attrs_set_ints(h("set"), name.c_str(), v.begin(), v.size()));
    return *this;
  }
  /** @brief Sets an integer-list attribute. */
  Attrs& set(const std::string& name, const std::vector<int64_t>& v) & {
    check(dp_attrs_set_ints(h("set"), name.c_str(), v.data(), v.size()));
    return *this;
  }
  /**
   * @brief Sets an integer-list attribute from any range of integers (`std::vector<int>`,
   *        `std::array<int64_t, N>`, `span`, a C array, ...).
   * @throws Error `DP_INVALID_ARGUMENT` naming the attribute and the element for an unsigned
   *         value beyond `INT64_MAX`.
   */
  template <class R, std::enable_if_t<detail::is_int_range<R>::value, int> = 0>
  Attrs& set(const std::string& name, const R& values) & {
    using E = typename detail::range_element<R>::type;
    if constexpr (std::is_same<E, int64_t>::value && detail::is_contiguous<const R>::value) {
      check(dp_attrs_set_ints(h("set"), name.c_str(), std::data(values), std::size(values)));
    } else {
      std::vector<int64_t> list;
      long long index = 0;
      for (const auto& v : values) list.push_back(detail::attr_int(name, v, index++));
      check(dp_attrs_set_ints(h("set"), name.c_str(), list.data(), list.size()));
    }
    return *this;
  }
  /** @brief Sets a dtype attribute. */
  Attrs& set(const std::string& name, DType v) & {
    check(dp_attrs_set_dtype(h("set"), name.c_str(), to_c(v)));
    return *this;
  }
  /** @brief Sets a string attribute (UTF-8). */
  Attrs& set(const std::string& name, const std::string& v) & {
    check(dp_attrs_set_string(h("set"), name.c_str(), v.c_str()));
    return *this;
  }
  /** @brief Sets a string attribute (UTF-8). */
  Attrs& set(const std::string& name, std::string_view v) & { return set(name, std::string(v)); }
  /** @brief Sets a string attribute from a C string: without this overload a string literal
   *  would convert to the `bool` one (`set("mode", "fast")` setting true). */
  Attrs& set(const std::string& name, const char* v) & {
    if (v == nullptr) throw Error(DP_INVALID_ARGUMENT, "Attrs::set: the string is NULL");
    return set(name, std::string(v));
  }
  /** @brief Rvalue forms, for chaining on a temporary: whatever the lvalue forms take. */
  template <class V, class = decltype(std::declval<Attrs&>().set(std::declval<const std::string&>(), std::declval<V>()))>
  Attrs&& set(const std::string& name, V&& v) && {
    set(name, std::forward<V>(v));
    return std::move(*this);
  }
  /** @brief Rvalue form of the braces one: `Attrs().set("axes", {0, 1})`. */
  Attrs&& set(const std::string& name, std::initializer_list<int64_t> v) && {
    set(name, v);
    return std::move(*this);
  }

  /** @brief The C handle (null when empty: moved from). */
  const dp_attrs_t* get() const noexcept { return handle_; }
  /** @brief Whether this holds an attribute set (false once moved from). */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  dp_attrs_t* h(const char* method) const { return detail::live(handle_, "Attrs", method); }
  dp_attrs_t* handle_ = nullptr;
};

/** @cond */
namespace detail {
// The attributes a run or a graph node passes to C: NULL for none; an empty (moved-from) Attrs
// is refused, as it would silently mean none.
inline const dp_attrs_t* attrs_handle(const Attrs* attrs, const char* method) {
  if (attrs == nullptr) return nullptr;
  if (!*attrs) {
    throw Error(DP_INVALID_ARGUMENT,
                std::string(method) + ": the devplug::Attrs is empty (moved from); pass nullptr for no attributes");
  }
  return attrs->get();
}
}  // namespace detail
/** @endcond */

/**
 * @brief Soft placement for one run (`RunOptions::soft_placement`, `Graph::run`): the values of
 *        `DP_SOFT_PLACEMENT_*` under C++ names.
 *
 * An enum inside a struct rather than an `enum class`, so that a value converts to the
 * `int32_t` those take and code that assigns the C constants keeps compiling:
 * `o.soft_placement = devplug::SoftPlacement::Off;` and `o.soft_placement =
 * DP_SOFT_PLACEMENT_OFF;` are the same.
 */
struct SoftPlacement {
  /** @brief The values. */
  enum Mode : int32_t {
    /** @brief The runtime's setting (`RuntimeOptions::soft_placement`). */
    Default = DP_SOFT_PLACEMENT_DEFAULT,
    /** @brief Strict: an op its device cannot run fails. */
    Off = DP_SOFT_PLACEMENT_OFF,
    /** @brief An op its device cannot run falls back to the CPU. */
    On = DP_SOFT_PLACEMENT_ON,
  };
};

/** @brief Options of one op run: `RunOptions{device}`, `RunOptions::strict(device)`. */
struct RunOptions {
  /** @brief The device; empty: where the device scopes entered on this thread place the op
   *  (see `DeviceScope`), else the runtime's default device (`CPU:0`). */
  Device device;
  /** @brief `SoftPlacement::Default`, `Off` (strict) or `On` (or the C values,
   *  `DP_SOFT_PLACEMENT_*`); another value fails the run with `DP_INVALID_ARGUMENT`. */
  int32_t soft_placement = SoftPlacement::Default;

  /** @brief Strict mode (`SoftPlacement::Off`) on @p device (empty: where placement puts the
   *  op): an op the device cannot run fails instead of falling back to the CPU. */
  static RunOptions strict(const Device& device = Device()) { return RunOptions{device, SoftPlacement::Off}; }
};

/** @brief A resolved op (`dp_op_t`), valid while its runtime lives. Cheap to copy. */
class Op {
 public:
  Op() noexcept = default;
  explicit Op(dp_op_t* handle) noexcept : handle_(handle) {
    if (handle_ != nullptr && dp_op_num_outputs(handle_, &num_outputs_) != DP_OK) num_outputs_ = 0;
  }
  /** @brief The C handle. */
  dp_op_t* get() const noexcept { return handle_; }
  /** @brief Whether this holds an op. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  /** @brief The op's name. */
  std::string name() const {
    const char* n = dp_op_name(h("name"));
    if (n == nullptr) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return n;
  }
  /** @brief The op's signature (`dp_op_signature()`), e.g. `Add(x: T, y: T) -> (z: T) where
   *  T: {f32, ...}`. */
  std::string signature() const {
    const char* s = dp_op_signature(h("signature"));
    if (s == nullptr) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return s;
  }
  /** @brief How many outputs the op returns (`dp_op_num_outputs()`); 0 for an empty `Op`. */
  size_t num_outputs() const noexcept { return num_outputs_; }

 private:
  dp_op_t* h(const char* method) const { return detail::live(handle_, "Op", method); }
  dp_op_t* handle_ = nullptr;
  size_t num_outputs_ = 0;  // read once: Runtime::run sizes its output list with it
};

/** @cond */
namespace detail {
// Room for an op's outputs: on the stack for up to 8 (every basis op has one), else on the heap.
template <typename T>
class OutputRoom {
 public:
  explicit OutputRoom(const Op& op) : size_(op.num_outputs() > 0 ? op.num_outputs() : 1) {
    if (size_ > sizeof small_ / sizeof small_[0]) big_.resize(size_);
  }
  T* data() noexcept { return big_.empty() ? small_ : big_.data(); }
  size_t size() const noexcept { return size_; }

 private:
  size_t size_;
  T small_[8] = {};
  std::vector<T> big_;
};
}  // namespace detail
/** @endcond */

/** @cond */
namespace detail {
// A list of handles: on the stack up to N, on the heap past that.
template <class T, size_t N>
class SmallList {
 public:
  void push_back(T v) {
    if (size_ < N) {
      small_[size_] = v;
    } else {
      if (size_ == N) big_.assign(small_, small_ + N);
      big_.push_back(v);
    }
    ++size_;
  }
  void reserve(size_t n) {
    if (n > N) big_.reserve(n);
  }
  const T* data() const noexcept { return size_ <= N ? small_ : big_.data(); }
  size_t size() const noexcept { return size_; }

 private:
  T small_[N] = {};
  std::vector<T> big_;
  size_t size_ = 0;
};

// One input of a run, as an element of braces: a tensor by reference, a temporary tensor, a
// pointer to a tensor, or a null pointer (which the C library refuses, naming the input).
class InputRef {
 public:
  InputRef(const Tensor& t) noexcept : handle_(t.get()) {}
  InputRef(const Tensor* t) noexcept : handle_(t != nullptr ? t->get() : nullptr) {}
  InputRef(std::nullptr_t) noexcept {}
  dp_tensor_t* get() const noexcept { return handle_; }

 private:
  dp_tensor_t* handle_ = nullptr;
};

// What a range of inputs holds: tensors, or pointers to them (`Tensor*`, `const Tensor*`).
template <class E>
struct is_input_element
    : std::bool_constant<std::is_same<E, Tensor>::value ||
                         (std::is_pointer<E>::value && std::is_convertible<E, const Tensor*>::value)> {};
template <class R, class = void>
struct is_input_range : std::false_type {};
template <class R>
struct is_input_range<R, std::void_t<typename range_element<R>::type>>
    : is_input_element<typename range_element<R>::type> {};

inline dp_tensor_t* input_handle(const Tensor& t) noexcept { return t.get(); }
inline dp_tensor_t* input_handle(const Tensor* t) noexcept { return t != nullptr ? t->get() : nullptr; }
}  // namespace detail
/** @endcond */

/**
 * @brief The inputs of a run (`Runtime::run`, `run1`): a list of borrowed tensor handles,
 *        made from whatever a caller holds, so that one parameter type takes all of
 *        - braces of tensors, of pointers, or of both: `{x, y}`, `{&x, &y}`, `{x, &y}`;
 *        - temporaries: `rt.run1(relu, {rt.run1(add, {x, b})})` (a temporary lives to the end
 *          of the full expression, the run included);
 *        - a range of tensors or of pointers to them: `std::vector<Tensor>`,
 *          `std::vector<const Tensor*>`, `std::array<Tensor, 2>`, ...;
 *        - `{}`: no inputs.
 *
 * It takes no references: the tensors must live until the run returns, which they do when the
 * `Inputs` is made in the call. A null pointer, or an empty `Tensor`, goes to the C library as a
 * NULL handle, which it refuses with `DP_INVALID_ARGUMENT` naming the input (`inputs[1]`).
 */
class Inputs {
 public:
  /** @brief No inputs. */
  Inputs() noexcept = default;
  /** @brief Braces: `{x, y}`, `{&x, &y}`, temporaries. */
  Inputs(std::initializer_list<detail::InputRef> list) {
    handles_.reserve(list.size());
    for (const detail::InputRef& r : list) handles_.push_back(r.get());
  }
  /** @brief A range of tensors or of pointers to tensors (`std::vector<Tensor>`,
   *  `std::vector<const Tensor*>`, ...). */
  template <class R, std::enable_if_t<detail::is_input_range<R>::value, int> = 0>
  Inputs(const R& range) {
    for (const auto& t : range) handles_.push_back(detail::input_handle(t));
  }

  /** @brief The number of inputs. */
  size_t size() const noexcept { return handles_.size(); }
  /** @brief The handles, in order (NULL for a null pointer or an empty tensor). */
  dp_tensor_t* const* data() const noexcept { return handles_.data(); }

 private:
  detail::SmallList<dp_tensor_t*, 8> handles_;
};

/**
 * @brief An op a host defines (`dp_op_def_t`), in the notation plugins use: the signature in
 *        TensorFlow's `REGISTER_OP` terms and a body over ops the runtime has, which is the
 *        op's shape function and its decomposition (docs/c-api.md, "Ops of your own").
 *
 * @code
 * devplug::Op scale = rt.register_op({"app.Scale", "x: T", "y: T", "T: {f32, f64}",
 *                                     "k: float = 2.0", "y = Mul(x, @k)"});
 * @endcode
 */
struct OpDef {
  std::string name;       ///< `namespace.Name`
  std::string inputs;     ///< `"x: T, y: T"`; empty for none
  std::string outputs;    ///< `"z: T"`
  std::string type_vars;  ///< `"T: {f32, f64}"`; empty for none
  std::string attrs;      ///< `"k: float = 2.0; mode: string = \"fast\""`; empty for none
  std::string body;       ///< `"z = Mul(x, @k)"`, statements separated by `;` or newlines
};

/** @brief How an op would run on a device for a dtype (`Runtime::kernel_choice()`,
 *  `dp_kernel_choice_t`). */
struct KernelChoice {
  /** @brief The step of the fallback order a run takes (`DP_KERNEL_*`). */
  enum Kind : int32_t {
    /** @brief A kernel of the device (`source`, `priority`). */
    Native = DP_KERNEL_NATIVE,
    /** @brief No kernel there; the op's decomposition runs there, each of its ops chosen the
     *  same way. */
    Decomposition = DP_KERNEL_DECOMPOSITION,
    /** @brief Soft placement: the CPU's kernel (`source`) runs it, unless strict. */
    SoftPlacement = DP_KERNEL_SOFT_PLACEMENT,
    /** @brief Nowhere: a run fails with `DP_NOT_FOUND`. */
    Unavailable = DP_KERNEL_UNAVAILABLE,
  };
  Kind kind;
  /** @brief The kernel's priority (`Native`); 0 otherwise. */
  int32_t priority;
  /** @brief Who registered the kernel that would run (`"built-in"`, `"plugin 'devplug_sim'"`);
   *  empty for `Decomposition` and `Unavailable`. */
  std::string source;
};

/** @brief Why an op ran where it ran (`dp_placement_event_t.reason_code`, the `DP_PLACEMENT_*`
 *  values). A library newer than this header may send a value not named here. */
enum class PlacementReason : int32_t {
  /** @brief The caller named the device (`RunOptions::device`). */
  Explicit = DP_PLACEMENT_EXPLICIT,
  /** @brief No device was named: the runtime's default device. */
  Default = DP_PLACEMENT_DEFAULT,
  /** @brief No device was named: the innermost device scope entered on the thread. */
  Scope = DP_PLACEMENT_SCOPE,
  /** @brief No device was named: a device setter of a scope entered on the thread chose it. */
  Setter = DP_PLACEMENT_SETTER,
  /** @brief The device has no kernel for the op; its decomposition ran there instead. */
  Decomposed = DP_PLACEMENT_DECOMPOSED,
  /** @brief Neither a kernel nor a decomposition on the device; the op ran on the CPU. */
  SoftPlaced = DP_PLACEMENT_SOFT_PLACED,
  /** @brief An input lived on another device and was copied. */
  InputCopied = DP_PLACEMENT_INPUT_COPIED,
};

/** @brief The word the placement log uses for @p reason (`"explicit"`, `"soft-placed"`,
 *  `"input copied"`, ...); `"unknown"` for a value this header does not name. */
inline const char* placement_reason_name(PlacementReason reason) noexcept {
  switch (reason) {
    case PlacementReason::Explicit: return "explicit";
    case PlacementReason::Default: return "default";
    case PlacementReason::Scope: return "scope";
    case PlacementReason::Setter: return "setter";
    case PlacementReason::Decomposed: return "decomposed";
    case PlacementReason::SoftPlaced: return "soft-placed";
    case PlacementReason::InputCopied: return "input copied";
  }
  return "unknown";
}

/**
 * @brief One placement decision, as `Runtime::set_placement_callback` gives it to a C++
 *        function: the C `dp_placement_event_t` with its strings copied (so an event may be
 *        kept after the call) and its reason as a `PlacementReason`.
 */
struct PlacementEvent {
  /** @brief The op, e.g. `"Add"`. */
  std::string op;
  /** @brief The device it ran on (platform and ordinal, e.g. `"HOST:0"`, `"SIMCUDA:0"`). */
  std::string device;
  /** @brief Why it ran there, for a `switch`. */
  PlacementReason reason = PlacementReason::Default;
  /** @brief The library's word for the reason (`"explicit"`, `"soft-placed"`, ...): the
   *  C event's `reason`. */
  std::string reason_name;
  /** @brief What ran it (`"kernel from built-in"`, `"kernel from plugin 'devplug_sim'"`) or a
   *  note; may be empty. */
  std::string detail;

  /** @brief The C++ view of a C event. A library older than this header's sends no
   *  `reason_code` (its `struct_size` says so): the reason is then read from its word. */
  static PlacementEvent from_c(const dp_placement_event_t& e) {
    // (`detail` names the member here: the namespace is spelled out.)
    PlacementEvent out;
    out.op = ::devplug::detail::str(e.op);
    out.device = ::devplug::detail::str(e.device);
    out.reason_name = ::devplug::detail::str(e.reason);
    out.detail = ::devplug::detail::str(e.detail);
    if (e.struct_size >= offsetof(dp_placement_event_t, reason_code) + sizeof e.reason_code) {
      out.reason = static_cast<PlacementReason>(e.reason_code);
    } else {
      for (int32_t code = DP_PLACEMENT_EXPLICIT; code <= DP_PLACEMENT_INPUT_COPIED; ++code) {
        if (out.reason_name == placement_reason_name(static_cast<PlacementReason>(code))) {
          out.reason = static_cast<PlacementReason>(code);
        }
      }
    }
    return out;
  }
};

class Variable;  // devplug/graph.hpp

/**
 * @brief The host object: owns the devices and their memory (`dp_runtime_t`).
 *
 * Move-only; a moved-from Runtime is empty. Destroying it waits for all its work and
 * invalidates every `Device` (and default-stream view). Buffers, tensors and created streams
 * stay usable until released, but declaring the Runtime first, so that it is destroyed last,
 * is the simplest order.
 */
class Runtime {
 public:
  /** @brief Creates a runtime with the default options. */
  Runtime() : Runtime(RuntimeOptions()) {}
  /** @brief Creates a runtime (`dp_runtime_create()`). */
  explicit Runtime(const RuntimeOptions& options) {
    const dp_runtime_options_t o = options.c_options();
    check(dp_runtime_create(&o, &handle_));
  }
  /** @brief Takes ownership of a handle from `dp_runtime_create()`. */
  static Runtime adopt(dp_runtime_t* handle) noexcept { return Runtime(handle); }

  /** @brief Destroys the runtime. */
  ~Runtime() { dp_runtime_destroy(handle_); }
  /** @brief Moves; @p other becomes empty. */
  Runtime(Runtime&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  /** @brief Destroys the current runtime, then moves; @p other becomes empty. */
  Runtime& operator=(Runtime&& other) noexcept {
    if (this != &other) {
      dp_runtime_destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /** @brief The C handle. */
  dp_runtime_t* get() const noexcept { return handle_; }
  /** @brief Gives up ownership (the caller must `dp_runtime_destroy()` it); empties. */
  dp_runtime_t* release() noexcept { return std::exchange(handle_, nullptr); }
  /** @brief Whether this holds a runtime. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief The number of devices. */
  size_t device_count() const {
    size_t n = 0;
    check(dp_runtime_device_count(h("device_count"), &n));
    return n;
  }
  /**
   * @brief The device at @p index.
   * @throws Error `DP_OUT_OF_RANGE` past the end.
   */
  Device device_at(size_t index) const {
    dp_device_t* d = nullptr;
    check(dp_runtime_device(h("device_at"), index, &d));
    return Device(d);
  }
  /** @brief Every device, in the runtime's order. */
  std::vector<Device> devices() const {
    h("devices");
    const size_t n = device_count();
    std::vector<Device> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(device_at(i));
    return out;
  }
  /**
   * @brief The device a spec names: `"CPU"`, `"cpu:1"`, `"/device:CPU:0"`, `"HOST:0"`.
   * @throws Error `DP_INVALID_ARGUMENT` for a malformed spec, `DP_NOT_FOUND` for no such device.
   */
  Device device(const std::string& spec) const {
    dp_device_t* d = nullptr;
    check(dp_runtime_find_device(h("device"), spec.c_str(), &d));
    return Device(d);
  }
  /** @brief Waits until all work on all devices is done. */
  void synchronize() { check(dp_runtime_synchronize(h("synchronize"))); }

  /** @brief Resolves an op by name once (`dp_runtime_find_op()`); run it by handle. */
  Op op(const std::string& name) const {
    dp_op_t* found = nullptr;
    check(dp_runtime_find_op(h("op"), name.c_str(), &found));
    return Op(found);
  }

  /**
   * @brief How @p op would run on @p device (empty: the default device) for @p dtype, the dtype
   *        of the op's first type variable (`DType::Invalid` for an op without one: `Fill`,
   *        `Iota`), before anything runs (`dp_op_kernel_choice()`): the choice `run()` makes
   *        for inputs of that dtype. A kernel may still decline a run's inputs.
   */
  KernelChoice kernel_choice(const Op& op, const Device& device, DType dtype) const {
    dp_kernel_choice_t c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    check(dp_op_kernel_choice(h("kernel_choice"), detail::live(op.get(), "Op", "Runtime::kernel_choice"),
                              device.get(), to_c(dtype), &c));
    return KernelChoice{static_cast<KernelChoice::Kind>(c.kind), c.priority, detail::str(c.source)};
  }

  /** @brief Every op the runtime has (`dp_runtime_op_count()`, `dp_runtime_op_at()`), sorted by
   *         name: the basis set, the composite ops, and those hosts and plugins registered. */
  std::vector<Op> ops() const {
    size_t n = 0;
    check(dp_runtime_op_count(h("ops"), &n));
    std::vector<Op> all;
    all.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      dp_op_t* at = nullptr;
      check(dp_runtime_op_at(handle_, i, &at));  // ops are never removed: every index holds
      all.push_back(Op(at));
    }
    return all;
  }

  /**
   * @brief Registers an op of the host's own (`dp_runtime_register_op()`) and returns its
   *        handle. It runs on every device: a plugin's kernel for it where one exists, its
   *        body everywhere else. Throws `DP_INVALID_ARGUMENT` naming the op, the field and the
   *        statement for a mistake, `DP_ALREADY_EXISTS` for a name the runtime has.
   */
  Op register_op(const OpDef& def) {
    dp_op_def_t d{};
    d.struct_size = sizeof d;
    d.name = def.name.c_str();
    d.inputs = def.inputs.c_str();
    d.outputs = def.outputs.c_str();
    d.type_vars = def.type_vars.c_str();
    d.attrs = def.attrs.c_str();
    d.body = def.body.c_str();
    dp_op_t* made = nullptr;
    check(dp_runtime_register_op(h("register_op"), &d, &made));
    return Op(made);
  }

  /**
   * @brief Runs @p op eagerly (`dp_op_run()`): on `options.device` or where placement puts it,
   *        native kernel → decomposition → soft placement to the CPU → error.
   * @param inputs `{x, y}`, `{&x, &y}`, temporaries, a `std::vector<Tensor>` or
   *        `std::vector<const Tensor*>`, `{}` for none (see `Inputs`); a null pointer or an
   *        empty tensor fails with `DP_INVALID_ARGUMENT` naming the input.
   * @param attrs  the attributes, or `nullptr` for none (an `Attrs&` overload takes them by
   *        reference, and another only the options: `rt.run(op, {x}, RunOptions{device})`).
   * @return the op's outputs (`Op::num_outputs()` of them).
   */
  std::vector<Tensor> run(const Op& op, const Inputs& inputs, const Attrs* attrs = nullptr,
                          const RunOptions& options = {}) {
    return run_c(op, inputs, detail::attrs_handle(attrs, "Runtime::run"), options);
  }
  /** @brief run() with attributes by reference: `rt.run(op, {x}, attrs, options)`. */
  std::vector<Tensor> run(const Op& op, const Inputs& inputs, const Attrs& attrs, const RunOptions& options = {}) {
    return run_c(op, inputs, detail::attrs_handle(&attrs, "Runtime::run"), options);
  }
  /** @brief run() without attributes: `rt.run(op, {x}, RunOptions::strict(gpu))`. */
  std::vector<Tensor> run(const Op& op, const Inputs& inputs, const RunOptions& options) {
    return run_c(op, inputs, nullptr, options);
  }
  /** @brief run() for ops with one output. */
  Tensor run1(const Op& op, const Inputs& inputs, const Attrs* attrs = nullptr, const RunOptions& options = {}) {
    return one(op, run(op, inputs, attrs, options));
  }
  /** @brief run1() with attributes by reference. */
  Tensor run1(const Op& op, const Inputs& inputs, const Attrs& attrs, const RunOptions& options = {}) {
    return one(op, run(op, inputs, attrs, options));
  }
  /** @brief run1() without attributes. */
  Tensor run1(const Op& op, const Inputs& inputs, const RunOptions& options) {
    return one(op, run(op, inputs, options));
  }
  /** @brief run() by op name (looks the name up each time; hold an Op on hot paths). */
  std::vector<Tensor> run(const std::string& op_name, const Inputs& inputs, const Attrs* attrs = nullptr,
                          const RunOptions& options = {}) {
    return run(op(op_name), inputs, attrs, options);
  }
  /** @brief run() by op name, attributes by reference. */
  std::vector<Tensor> run(const std::string& op_name, const Inputs& inputs, const Attrs& attrs,
                          const RunOptions& options = {}) {
    return run(op(op_name), inputs, attrs, options);
  }
  /** @brief run() by op name, without attributes. */
  std::vector<Tensor> run(const std::string& op_name, const Inputs& inputs, const RunOptions& options) {
    return run(op(op_name), inputs, options);
  }
  /** @brief run1() by op name (looks the name up each time; hold an Op on hot paths). */
  Tensor run1(const std::string& op_name, const Inputs& inputs, const Attrs* attrs = nullptr,
              const RunOptions& options = {}) {
    return run1(op(op_name), inputs, attrs, options);
  }
  /** @brief run1() by op name, attributes by reference. */
  Tensor run1(const std::string& op_name, const Inputs& inputs, const Attrs& attrs, const RunOptions& options = {}) {
    return run1(op(op_name), inputs, attrs, options);
  }
  /** @brief run1() by op name, without attributes. */
  Tensor run1(const std::string& op_name, const Inputs& inputs, const RunOptions& options) {
    return run1(op(op_name), inputs, options);
  }

  /**
   * @brief A scope that places ops on @p device (`dp_scope_create_device()`): enter it and
   *        every op this thread runs without a device in its `RunOptions` runs there.
   */
  DeviceScope device_scope(const Device& device) const {
    dp_scope_t* scope = nullptr;
    check(dp_scope_create_device(h("device_scope"), device.get(), &scope));
    return DeviceScope::adopt(scope);
  }
  /** @brief A scope whose @p setter places each op (`dp_scope_create_setter()`); see
   *  `DeviceSetter`. */
  DeviceScope setter_scope(DeviceSetter setter) const {
    dp_runtime_t* rt = h("setter_scope");
    if (!setter) throw Error(DP_INVALID_ARGUMENT, "setter_scope: empty std::function");
    dp_scope_t* scope = nullptr;
    auto* boxed = new DeviceSetter(std::move(setter));
    // On failure the runtime has already called the drop function (which deletes `boxed`).
    check(dp_scope_create_setter(rt, detail::devplug_cxx_device_setter_trampoline, boxed,
                                 detail::devplug_cxx_device_setter_drop, &scope));
    return DeviceScope::adopt(scope);
  }
  /**
   * @brief Creates a variable named @p name holding a copy of @p initial
   *        (`dp_variable_create()`), on @p device or, when it is empty, where placement puts a
   *        variable (a setter is asked with `OpKind::Variable`). Defined in devplug/graph.hpp.
   */
  Variable variable(const std::string& name, const Tensor& initial,
                    const Device& device = Device()) const;

  /** @brief The placement context in force on this thread, captured (`dp_scope_capture()`):
   *  entered later, on any thread, it places ops as they would have been placed here. */
  DeviceScope current_scope() const {
    dp_scope_t* scope = nullptr;
    check(dp_scope_capture(h("current_scope"), &scope));
    return DeviceScope::adopt(scope);
  }

  /**
   * @brief Installs a placement-log callback (`dp_runtime_set_placement_callback()`) that
   *        receives a `PlacementEvent` (C++ strings, `PlacementReason`); an empty function or
   *        `nullptr` removes it. It runs on the thread that ran the op (on several at once when
   *        several threads run ops). Exceptions it throws are caught and dropped. It may run
   *        ops; theirs are not reported to it.
   *
   * A lambda taking `const PlacementEvent&` picks this overload, one taking
   * `const dp_placement_event_t&` the C one. A generic lambda (`[](const auto& e)`) does not
   * compile, as it fits both: write the parameter's type.
   */
  void set_placement_callback(std::function<void(const PlacementEvent&)> fn) {
    using Fn = std::function<void(const PlacementEvent&)>;
    install_placement_callback(
        std::move(fn),
        [](const dp_placement_event_t* e, void* user) {
          try {
            (*static_cast<Fn*>(user))(PlacementEvent::from_c(*e));
          } catch (...) {
          }
        },
        [](void* user) { delete static_cast<Fn*>(user); });
  }
  /**
   * @brief Installs a placement-log callback that receives the C event,
   *        `dp_placement_event_t` (its strings, `op`, `device`, `reason` and `detail`, are never
   *        NULL and valid during the call only; `detail` may be empty). As the overload above
   *        otherwise.
   */
  void set_placement_callback(std::function<void(const dp_placement_event_t&)> fn) {
    using Fn = std::function<void(const dp_placement_event_t&)>;
    install_placement_callback(
        std::move(fn),
        [](const dp_placement_event_t* e, void* user) {
          try {
            (*static_cast<Fn*>(user))(*e);
          } catch (...) {
          }
        },
        [](void* user) { delete static_cast<Fn*>(user); });
  }
  /** @brief Removes the placement-log callback (`rt.set_placement_callback(nullptr)`). */
  void set_placement_callback(std::nullptr_t) {
    check(dp_runtime_set_placement_callback(h("set_placement_callback"), nullptr, nullptr, nullptr));
  }

  /**
   * @brief Starts a trace of what dispatch runs (`dp_runtime_trace_start()`): every kernel
   *        launch and decomposition becomes a span (op, device, reason, kernel source, host
   *        thread, start and duration), and so does every synchronous copy and wait of the
   *        host's. A trace already on starts over.
   */
  void start_trace() { check(dp_runtime_trace_start(h("start_trace"))); }
  /**
   * @brief Stops the trace and writes it to @p path as Trace Event JSON (for
   *        `chrome://tracing` or Perfetto); an empty path discards it
   *        (`dp_runtime_trace_stop()`). Returns the number of spans.
   * @throws Error `DP_NOT_FOUND`, `DP_PERMISSION_DENIED` or `DP_UNAVAILABLE` when the file cannot
   *         be written (the trace is stopped anyway).
   */
  size_t stop_trace(const std::string& path = std::string()) {
    size_t spans = 0;
    check(dp_runtime_trace_stop(h("stop_trace"), path.empty() ? nullptr : path.c_str(), &spans));
    return spans;
  }

  /**
   * @brief Loads a device plugin from an absolute path with `key=value` load options
   *        (`dp_runtime_load_plugin()`). Loading the same file again with the same options
   *        changes nothing; with other options it throws `DP_ALREADY_EXISTS`.
   * @throws Error with the loader's reason; the runtime keeps working either way.
   */
  void load_plugin(const std::string& path, const std::vector<std::string>& options = {}) {
    dp_runtime_t* rt = h("load_plugin");
    std::vector<const char*> opts;
    opts.reserve(options.size());
    for (const std::string& o : options) opts.push_back(o.c_str());
    check(dp_runtime_load_plugin(rt, path.c_str(), opts.empty() ? nullptr : opts.data(), opts.size()));
  }
  /** @brief Loads every plugin of a `:`-separated search path; failures are listed, not thrown. */
  void load_plugin_path(const std::string& search_path) {
    check(dp_runtime_load_plugin_path(h("load_plugin_path"), search_path.c_str()));
  }
  /** @brief The plugins loaded, in load order. */
  std::vector<PluginInfo> plugins() const {
    size_t n = 0;
    check(dp_runtime_plugin_count(h("plugins"), &n));
    std::vector<PluginInfo> out;
    for (size_t i = 0; i < n; ++i) {
      dp_plugin_info_t p{};
      p.struct_size = sizeof p;
      check(dp_runtime_plugin_info(handle_, i, &p));
      PluginInfo info{detail::str(p.name), detail::str(p.version), detail::str(p.path),
                      p.platform_count, {}};
      for (size_t k = 0; k < p.op_count; ++k) {
        const char* op = nullptr;
        check(dp_runtime_plugin_op(handle_, i, k, &op));
        info.ops.push_back(detail::str(op));
      }
      out.push_back(std::move(info));
    }
    return out;
  }
  /**
   * @brief Every platform (`dp_runtime_platform_count()`, `dp_runtime_platform_info()`), those
   *        without devices included, in registration order: `HOST` first, then the plugins'
   *        platforms in load order (the order of `devices()`).
   */
  std::vector<PlatformInfo> platforms() const {
    size_t n = 0;
    check(dp_runtime_platform_count(h("platforms"), &n));
    std::vector<PlatformInfo> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      dp_platform_info_t p{};
      p.struct_size = sizeof p;
      check(dp_runtime_platform_info(handle_, i, &p));  // platforms are never removed
      PlatformInfo info;
      info.name = detail::str(p.name);
      info.device_type = detail::str(p.device_type);
      info.vendor = detail::str(p.vendor);
      info.version = detail::str(p.version);
      info.plugin = detail::str(p.plugin);
      info.priority = p.priority;
      info.is_active = p.is_active != 0;
      info.device_count = p.device_count;
      info.host_visible = p.host_visible != 0;
      out.push_back(std::move(info));
    }
    return out;
  }
  /** @brief Every failed plugin load, with its reason, in order. */
  std::vector<PluginFailure> plugin_failures() const {
    size_t n = 0;
    check(dp_runtime_plugin_failure_count(h("plugin_failures"), &n));
    std::vector<PluginFailure> out;
    for (size_t i = 0; i < n; ++i) {
      dp_plugin_failure_t f{};
      f.struct_size = sizeof f;
      check(dp_runtime_plugin_failure(handle_, i, &f));
      out.push_back(PluginFailure{f.path, f.status, f.message});
    }
    return out;
  }

 private:
  explicit Runtime(dp_runtime_t* handle) noexcept : handle_(handle) {}
  dp_runtime_t* h(const char* method) const { return detail::live(handle_, "Runtime", method); }

  template <class Fn>
  void install_placement_callback(Fn fn, dp_placement_fn trampoline, dp_drop_fn drop) {
    dp_runtime_t* rt = h("set_placement_callback");
    if (!fn) {
      check(dp_runtime_set_placement_callback(rt, nullptr, nullptr, nullptr));
      return;
    }
    auto* boxed = new Fn(std::move(fn));
    const dp_status_t st = dp_runtime_set_placement_callback(rt, trampoline, boxed, drop);
    if (st != DP_OK) {
      Error error = Error::from_last_error(st);
      delete boxed;
      throw error;
    }
  }

  std::vector<Tensor> run_c(const Op& op, const Inputs& inputs, const dp_attrs_t* attrs, const RunOptions& options) {
    dp_runtime_t* rt = h("run");
    dp_run_options_t o;
    dp_run_options_init(&o, sizeof o);
    o.device = options.device.get();
    o.soft_placement = options.soft_placement;
    detail::OutputRoom<dp_tensor_t*> out(op);
    size_t n = 0;
    // An empty Op, a null input or an empty Device goes through as NULL: dp_op_run refuses the
    // first two, naming them, and takes the third as "no device".
    check(dp_op_run(rt, op.get(), inputs.data(), inputs.size(), attrs, &o, out.data(), out.size(), &n));
    std::vector<Tensor> result;
    result.reserve(n);
    for (size_t i = 0; i < n; ++i) result.push_back(Tensor::adopt(out.data()[i]));
    return result;
  }
  static Tensor one(const Op& op, std::vector<Tensor>&& outputs) {
    if (outputs.size() != 1) throw Error(DP_INVALID_ARGUMENT, op.name() + " does not have exactly one output");
    return std::move(outputs.front());
  }

  dp_runtime_t* handle_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// Device members defined after the classes they return
// ------------------------------------------------------------------------------------------

inline Buffer Device::allocate(size_t size) const {
  h("allocate");
  return Buffer::allocate(*this, size);
}

inline HostMemory Device::host_allocate(size_t size) const {
  void* p = nullptr;
  check(dp_device_host_allocate(h("host_allocate"), size, &p));
  return HostMemory(*this, p, size);
}

inline Stream Device::create_stream() const {
  h("create_stream");
  return Stream::create(*this);
}
inline Stream Device::default_stream() const {
  h("default_stream");
  return Stream::default_for(*this);
}
inline Event Device::create_event() const {
  h("create_event");
  return Event::create(*this);
}

}  // namespace devplug

// Graphs and variables (Graph, Variable, Runtime::variable).
#include <devplug/graph.hpp>
// The log (set_log_callback, set_log_level).
#include <devplug/log.hpp>

#endif  // DEVPLUG_DEVPLUG_HPP
