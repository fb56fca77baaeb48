// The log through the C++ wrapper (devplug/log.hpp, included by devplug.hpp): a std::function
// callback receives the runtime's warning with its level and source and a plugin's message
// with the plugin as source; the level filters; a callback that throws does not take the
// process down; an empty function returns the log to standard error and destroys the
// callback (its captured state is released). Every check is counted.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

int main() {
  struct Seen {
    std::mutex mu;
    std::vector<devplug::LogRecord> records;
  };
  auto seen = std::make_shared<Seen>();
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));

    section("a search path's failed load warns; an explicit load's failure is the caller's");
    devplug::set_log_level(devplug::LogLevel::Warn);
    CHECK(devplug::log_level() == devplug::LogLevel::Warn);
    devplug::set_log_callback([seen](const devplug::LogRecord& r) {
      std::lock_guard<std::mutex> lock(seen->mu);
      seen->records.push_back(r);
    });
    CHECK(seen.use_count() == 2);  // the installed callback holds a copy
    try {
      rt.load_plugin("/no/such/dir/libexplicit_cxx.so");
      CHECK(false);
    } catch (const devplug::Error& e) {
      CHECK(e.code() == DP_NOT_FOUND);
    }
    {
      std::lock_guard<std::mutex> lock(seen->mu);
      CHECK(seen->records.empty());  // at Info, below the level
    }
    rt.load_plugin_path("/no/such/dir/libmissing_cxx.so");
    {
      std::lock_guard<std::mutex> lock(seen->mu);
      CHECK(seen->records.size() == 1);
      CHECK(!seen->records.empty() && seen->records[0].level == devplug::LogLevel::Warn);
      CHECK(!seen->records.empty() && seen->records[0].source == "devplug");
      CHECK(!seen->records.empty() &&
            seen->records[0].message.find("libmissing_cxx.so") != std::string::npos);
      seen->records.clear();
    }

    section("a plugin's message at Info; nothing below Error");
    devplug::set_log_level(devplug::LogLevel::Info);
    rt.load_plugin(DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so", {"devices=1"});
    {
      std::lock_guard<std::mutex> lock(seen->mu);
      bool found = false;
      for (const devplug::LogRecord& r : seen->records) {
        if (r.level == devplug::LogLevel::Info && r.source.rfind("plugin '", 0) == 0 &&
            r.message.find("SIM: platform SIM") != std::string::npos)
          found = true;
      }
      CHECK(found);
      seen->records.clear();
    }
    devplug::set_log_level(devplug::LogLevel::Error);
    try {
      rt.load_plugin("/no/such/dir/libmissing_cxx.so");
    } catch (const devplug::Error&) {
    }
    {
      std::lock_guard<std::mutex> lock(seen->mu);
      CHECK(seen->records.empty());
    }

    section("a callback that throws");
    devplug::reset_log_level();
    devplug::set_log_callback([](const devplug::LogRecord&) { throw std::runtime_error("no"); });
    CHECK(seen.use_count() == 1);  // the replaced callback was destroyed
    try {
      rt.load_plugin("/no/such/dir/libmissing_cxx.so");
    } catch (const devplug::Error& e) {
      CHECK(e.code() == DP_NOT_FOUND);
    }

    section("back to standard error");
    devplug::set_log_callback(nullptr);
    try {
      devplug::set_log_level(static_cast<devplug::LogLevel>(9));
      CHECK(false);
    } catch (const devplug::Error& e) {
      CHECK(e.code() == DP_INVALID_ARGUMENT);
    }
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("log_wrapper_test");
}
