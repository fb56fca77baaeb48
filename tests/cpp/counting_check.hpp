// Counted checks for the C++ tests: each CHECK records a pass or prints the failure and goes
// on, so one run shows every failed check; a test's main returns `summary()`. Include it once,
// in the test's .cpp (the definitions are per test program). `error_of(f)` gives the code and
// text of the devplug::Error a call throws.
#ifndef DEVPLUG_TESTS_COUNTING_CHECK_HPP
#define DEVPLUG_TESTS_COUNTING_CHECK_HPP

#include <devplug/devplug.hpp>

#include <cstdio>
#include <string>
#include <utility>

namespace {

int g_passed = 0;
int g_failed = 0;

void report(bool ok, const char* file, int line, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL %s:%d: %s\n", file, line, what.c_str());
    std::fflush(stdout);
  }
}

#define CHECK(cond) report(static_cast<bool>(cond), __FILE__, __LINE__, #cond)
#define CHECK_MSG(cond, msg) \
  report(static_cast<bool>(cond), __FILE__, __LINE__, std::string(#cond ": ") + (msg))

void section(const char* name) {
  std::printf("-- %s\n", name);
  std::fflush(stdout);
}

// Prints "<name>: N passed, M failed"; the exit code: 0 when nothing failed and something
// passed.
int summary(const char* name) {
  std::printf("%s: %d passed, %d failed\n", name, g_passed, g_failed);
  return g_failed == 0 && g_passed > 0 ? 0 : 1;
}

// The devplug::Error `f` throws: its code and what() (DP_OK and "" when it throws none).
template <class F>
std::pair<dp_status_t, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const devplug::Error& e) {
    return {e.code(), e.what()};
  }
  return {DP_OK, ""};
}

}  // namespace

#endif  // DEVPLUG_TESTS_COUNTING_CHECK_HPP
