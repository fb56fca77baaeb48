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
 * | anything else                       | `DPP_INTERNAL`, "unknown C++ exception" |
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
 * - `shutdown`: frees the state `init` created. By the ABI every platform is gone by then.
 *
 * Thread safety: the host may call every executor function from any thread, concurrently;
 * Device implementations must be thread safe. Host is safe to use from any thread.
 */
#ifndef DEVPLUG_PLUGIN_HPP
#define DEVPLUG_PLUGIN_HPP

#include <devplug/plugin.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

/** @brief The devplug C++ API. */
namespace devplug {
/** @brief Helpers for writing device plugins (the plugin side of `devplug/plugin.h`). */
namespace plugin {

class Device;
class Platform;

namespace detail {
struct PluginState;
struct PlatformHolder;
struct DeviceHolder;
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
// Internal state shared by the host wrapper and the tables
// ------------------------------------------------------------------------------------------

namespace detail {

/** @brief What one successful `init` created; freed when shutdown and every holder let go. */
struct PluginState {
  explicit PluginState(const dpp_host_api_t* host_api) : api(host_api) {}
  const dpp_host_api_t* api;
  std::atomic<bool> in_init{true};
  std::atomic<int> live_platforms{0};

  void set_error(const char* message) const noexcept {
    if (api != nullptr && api->set_error != nullptr) api->set_error(api->context, message);
  }
  void log(int32_t level, const char* message) const noexcept {
    if (api != nullptr && api->log != nullptr) api->log(api->context, level, message);
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------
// Host
// ------------------------------------------------------------------------------------------

/**
 * @brief The host, as the plugin sees it: load options, logging and platform registration.
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

  // -- Raw access -----------------------------------------------------------------------

  /** @brief The host's ABI major version. */
  uint32_t abi_major() const noexcept { return state_ ? state_->api->abi_major : 0; }
  /** @brief The host's ABI minor version (functions of later minors are absent). */
  uint32_t abi_minor() const noexcept { return state_ ? state_->api->abi_minor : 0; }
  /** @brief The host's C table (NULL for a detached Host), for what this class does not wrap. */
  const dpp_host_api_t* raw() const noexcept { return state_ ? state_->api : nullptr; }

 private:
  friend struct detail::Trampolines;
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
 * earlier work of the stream, unless it throws (then it must never be invoked: the ABI says
 * a failed `host_callback` does not call the function). Do not invoke it while holding a
 * lock the host might need.
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
    if (state_ && !state_->called.exchange(true, std::memory_order_acq_rel)) state_->fn(state_->arg);
  }

  /** @brief True while the host function is still to be called. */
  explicit operator bool() const noexcept {
    return state_ && !state_->called.load(std::memory_order_acquire);
  }

 private:
  struct State {
    State(dpp_host_fn f, void* a) : fn(f), arg(a) {}
    dpp_host_fn fn;
    void* arg;
    std::atomic<bool> called{false};
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
 * created (the tables check), so `static_cast<MyStream&>(stream)` is safe there. The primary
 * stream argument always belongs to the device called; the `other` stream of
 * Device::stream_wait_stream() may belong to another device of the same platform.
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
  /** @brief Destroys an event; the default deletes it. Exceptions are logged. */
  virtual void destroy_event(std::unique_ptr<Event> /*event*/) {}
  /** @brief Marks the current end of @p stream in @p event. */
  virtual void record_event(Stream& stream, Event& event) = 0;
  /** @brief The event's state. */
  virtual EventStatus event_status(Event& event) = 0;
  /** @brief Later work on @p stream waits until @p event is reached. */
  virtual void stream_wait_event(Stream& stream, Event& event) = 0;
  /** @brief Blocks until @p event is reached. */
  virtual void event_synchronize(Event& event) = 0;

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

/**
 * @brief Every function the C tables point to. Each is noexcept and catches everything:
 *        no exception ever leaves it.
 */
struct Trampolines {
  // -- Exception boundary ---------------------------------------------------------------

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
      if (st != nullptr) st->set_error("unknown C++ exception");
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
      log_failure(st, function, "unknown C++ exception");
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
    if (host->struct_size < DPP_HOST_API_STRUCT_SIZE) {
      std::snprintf(message, sizeof message, "the host's dpp_host_api_t has %zu bytes, fewer than ABI %d.0's %d",
                    static_cast<size_t>(host->struct_size), DPP_ABI_MAJOR, DPP_HOST_API_STRUCT_SIZE);
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
    return status;
  }

  /** `shutdown`: frees what init created. */
  static void plugin_shutdown(void* plugin_data) noexcept {
    auto* state = static_cast<std::shared_ptr<PluginState>*>(plugin_data);
    if (state == nullptr) return;
    if (*state && (*state)->live_platforms.load() != 0) {
      (*state)->log(DPP_LOG_WARN, "shutdown: the host did not destroy every platform of this plugin first");
    }
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
    return exec(device, [&](DeviceHolder& d_, Device& dev) {
      Stream& s = stream_of(&d_, stream, "stream", true);
      require(func != nullptr, "host_callback: func is NULL");
      dev.host_callback(s, HostCallback(func, arg));
    });
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
    p.release();
    return pl;
  }
};

static_assert(sizeof(dpp_plugin_api_t) >= DPP_PLUGIN_API_STRUCT_SIZE, "plugin.h: dpp_plugin_api_t size");
static_assert(sizeof(dpp_platform_t) >= DPP_PLATFORM_STRUCT_SIZE, "plugin.h: dpp_platform_t size");
static_assert(sizeof(dpp_device_t) >= DPP_DEVICE_STRUCT_SIZE, "plugin.h: dpp_device_t size");
static_assert(sizeof(dpp_stream_executor_t) >= DPP_STREAM_EXECUTOR_STRUCT_SIZE,
              "plugin.h: dpp_stream_executor_t size");

/** The plugin's static description (DEVPLUG_PLUGIN's body). */
template <void (*Init)(Host&)>
constexpr dpp_plugin_api_t make_plugin_api(const char* name, const char* version) noexcept {
  return dpp_plugin_api_t{DPP_PLUGIN_API_STRUCT_SIZE,
                          nullptr,
                          DPP_ABI_MAJOR,
                          DPP_ABI_MINOR,
                          name,
                          version,
                          &Trampolines::plugin_init<Init>,
                          &Trampolines::plugin_shutdown};
}

}  // namespace detail

inline Platform& Host::register_platform(std::unique_ptr<Platform> platform) const {
  return detail::Trampolines::register_platform(*this, std::move(platform));
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
#define DEVPLUG_PLUGIN(NAME, VERSION, ...)                                                          \
  static void devplug_plugin_init_fn_(::devplug::plugin::Host& devplug_host_) {                    \
    (__VA_ARGS__)(devplug_host_);                                                                   \
  }                                                                                                 \
  extern "C" DPP_EXPORT const dpp_plugin_api_t* devplug_plugin_entry(void) {                       \
    static const dpp_plugin_api_t devplug_plugin_api_ =                                             \
        ::devplug::plugin::detail::make_plugin_api<&devplug_plugin_init_fn_>(NAME, VERSION);        \
    return &devplug_plugin_api_;                                                                    \
  }

#endif  // DEVPLUG_PLUGIN_HPP
