// Thread-related behaviour of the C++ wrapper against the real C library:
// - the error message an Error carries is its own thread's (dp_last_error_message is
//   thread-local) and is captured at throw time;
// - several threads may enqueue work and host callbacks on one stream at once, and on their
//   own streams, and every callback runs exactly once.
// Standalone executable: returns 0 on success, exits 1 at the first failure.

#include <devplug/devplug.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what.c_str());
  std::exit(1);
}

#define CHECK(cond)                                             \
  do {                                                          \
    if (!(cond)) fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

// Each thread fails with its own spec over and over while the others do the same; every
// Error must carry the message of its own call.
void test_thread_local_errors(const devplug::Runtime& rt) {
  const int threads = 4;
  const int rounds = 200;
  std::atomic<int> failures{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      // t even: NOT_FOUND naming a distinctive ordinal; t odd: a distinctive malformed spec.
      const std::string mine =
          (t % 2 == 0) ? "CPU:" + std::to_string(70000 + t) : "bad spec " + std::to_string(t) + "!";
      const dp_status_t want = (t % 2 == 0) ? DP_NOT_FOUND : DP_INVALID_ARGUMENT;
      for (int i = 0; i < rounds; ++i) {
        try {
          rt.device(mine);
          ++failures;  // must throw
        } catch (const devplug::Error& e) {
          const std::string msg = e.message();
          const std::string tag = (t % 2 == 0) ? std::to_string(70000 + t) : "bad spec " + std::to_string(t);
          if (e.code() != want || msg.find(tag) == std::string::npos) {
            std::fprintf(stderr, "thread %d got %s (wanted %s naming '%s')\n", t, e.what(),
                         devplug::status_name(want), tag.c_str());
            ++failures;
          }
        }
        // successful calls in between must not disturb the next captured message
        (void)rt.device("CPU:0").name();
      }
    });
  }
  go = true;
  for (auto& th : pool) th.join();
  CHECK(failures.load() == 0);
}

// Many threads enqueue onto one shared stream and onto their own streams.
void test_concurrent_enqueue(const devplug::Runtime& rt) {
  const devplug::Device d0 = rt.device("CPU:0");
  const devplug::Device d1 = rt.device("CPU:1");
  devplug::Stream shared = d0.create_stream();
  const int threads = 6;
  const int per_thread = 300;
  std::atomic<int> shared_calls{0};
  std::atomic<int> own_calls{0};
  std::atomic<int> bad{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      const devplug::Device dev = (t % 2 == 0) ? d0 : d1;
      devplug::Stream own = dev.create_stream();
      devplug::Buffer buf = dev.allocate(256);
      std::vector<uint8_t> in(256, static_cast<uint8_t>(t + 1));
      std::vector<uint8_t> out(256, 0);
      for (int i = 0; i < per_thread; ++i) {
        shared.host_callback([&shared_calls] { ++shared_calls; });
        own.host_callback([&own_calls] { ++own_calls; });
      }
      own.write(buf, in);
      own.read(buf, out);
      int seen = -1;
      own.host_callback([&] { seen = (out == in) ? 1 : 0; });  // ordered after the read
      own.synchronize();
      if (out != in || seen != 1) ++bad;
    });
  }
  go = true;
  for (auto& th : pool) th.join();
  shared.synchronize();
  CHECK(bad.load() == 0);
  CHECK(shared_calls.load() == threads * per_thread);
  CHECK(own_calls.load() == threads * per_thread);
}

}  // namespace

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(2));
    test_thread_local_errors(rt);
    test_concurrent_enqueue(rt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  std::printf("wrapper_threads_test: OK\n");
  return 0;
}
