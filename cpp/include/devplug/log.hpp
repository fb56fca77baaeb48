/**
 * @file log.hpp
 * @brief devplug's log for C++17 (wraps `dp_log_*`): where the runtime's and its plugins'
 *        messages go, and how many of them. Process-wide, as `DEVPLUG_LOG` is.
 *
 * Included by `devplug/devplug.hpp`.
 *
 * @code
 * devplug::set_log_level(devplug::LogLevel::Info);
 * devplug::set_log_callback([](const devplug::LogRecord& r) {
 *   my_logger(r.level, r.source + ": " + r.message);
 * });
 * @endcode
 */
#ifndef DEVPLUG_LOG_HPP
#define DEVPLUG_LOG_HPP

#include <devplug/devplug.hpp>

#include <functional>
#include <string>

namespace devplug {

/** @brief A log level (`DP_LOG_*`), most severe first. */
enum class LogLevel : int32_t {
  Error = DP_LOG_ERROR,
  Warn = DP_LOG_WARN,
  Info = DP_LOG_INFO,
  Debug = DP_LOG_DEBUG,
  Trace = DP_LOG_TRACE,
};

/** @brief One message (`dp_log_record_t`). */
struct LogRecord {
  LogLevel level = LogLevel::Warn;
  /** @brief `"devplug"` for the runtime, `"plugin 'sim'"` for a plugin. */
  std::string source;
  std::string message;
};

/** @brief A log callback; it runs on the thread that logs (any thread). Exceptions it throws
 *  are caught and dropped. */
using LogCallback = std::function<void(const LogRecord&)>;

/** @cond detail */
namespace detail {
extern "C" {
inline void devplug_cxx_log_trampoline(const dp_log_record_t* r, void* user) noexcept {
  try {
    LogRecord record{static_cast<LogLevel>(r->level), r->source, r->message};
    (*static_cast<LogCallback*>(user))(record);
  } catch (...) {
  }
}
inline void devplug_cxx_log_drop(void* user) noexcept { delete static_cast<LogCallback*>(user); }
}  // extern "C"
}  // namespace detail
/** @endcond */

/**
 * @brief Sends devplug's log to @p callback instead of standard error, for the whole process
 *        (`dp_log_set_callback()`); an empty function returns it to standard error. The
 *        callback replaced is destroyed once no thread runs it.
 */
inline void set_log_callback(LogCallback callback) {
  if (!callback) {
    check(dp_log_set_callback(nullptr, nullptr, nullptr));
    return;
  }
  auto* boxed = new LogCallback(std::move(callback));
  // On failure the library has not kept it: the drop function is not called, so delete here.
  const dp_status_t st =
      dp_log_set_callback(detail::devplug_cxx_log_trampoline, boxed, detail::devplug_cxx_log_drop);
  if (st != DP_OK) {
    delete boxed;
    check(st);
  }
}

/** @brief Logs messages at @p level and more severe, for the whole process (`dp_log_set_level()`). */
inline void set_log_level(LogLevel level) { check(dp_log_set_level(static_cast<int32_t>(level))); }

/** @brief Returns to the level `DEVPLUG_LOG` sets (default `LogLevel::Warn`). */
inline void reset_log_level() { check(dp_log_set_level(DP_LOG_DEFAULT)); }

/** @brief The level in force (`dp_log_level()`). */
inline LogLevel log_level() { return static_cast<LogLevel>(dp_log_level()); }

}  // namespace devplug

#endif  // DEVPLUG_LOG_HPP
