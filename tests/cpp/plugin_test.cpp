// A C++ host with device plugins: SIM (C) with two devices next to the CPU, and the drop-in
// override scenario — SIM registered as type GPU (platform SIMCUDA, priority 0) and the C++
// plugin SIMDML as type GPU (priority 100), loaded in either order; and work on a created
// stream of SIM ordered before and after an op (on the default stream) with events.
#include <devplug/devplug.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::string kDir = DEVPLUG_TEST_PLUGIN_DIR;
const std::string kSim = kDir + "/libdevplug_sim.so";
const std::string kSimdml = kDir + "/libdevplug_simdml.so";

int failures = 0;
int passes = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      ++passes;                                                                \
    } else {                                                                   \
      ++failures;                                                              \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);  \
    }                                                                          \
  } while (0)

// `expr` must throw devplug::Error with `code` and a message containing `needle`.
#define CHECK_ERROR(expr, want, needle)                                                        \
  do {                                                                                         \
    bool thrown_ = false;                                                                      \
    try {                                                                                      \
      expr;                                                                                    \
    } catch (const devplug::Error& e_) {                                                       \
      thrown_ = true;                                                                          \
      CHECK(e_.code() == (want));                                                              \
      if (std::strstr(e_.message(), needle) == nullptr) {                                      \
        ++failures;                                                                            \
        std::fprintf(stderr, "%s:%d: message lacks '%s': %s\n", __FILE__, __LINE__, needle, e_.what()); \
      }                                                                                        \
    }                                                                                          \
    CHECK(thrown_);                                                                            \
  } while (0)

devplug::Runtime make_runtime() {
  return devplug::Runtime(devplug::RuntimeOptions().discover_plugins(false));
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7u + seed);
  return v;
}

// host -> a (stream 1) -> event -> b (stream 2, other device) -> host; every byte checked.
void round_trip(devplug::Device a, devplug::Device b, uint8_t seed) {
  const size_t n = 1 << 16;
  const std::vector<uint8_t> src = pattern(n, seed);
  std::vector<uint8_t> dst(n, 0);
  devplug::Buffer ba = a.allocate(n);
  devplug::Buffer bb = b.allocate(n);
  devplug::Stream sa = a.create_stream();
  devplug::Stream sb = b.create_stream();
  devplug::Event done = a.create_event();
  sa.write(ba, src);
  sa.record(done);
  sb.wait(done);
  sb.copy(bb, ba, n);
  sb.read(bb, dst);
  sb.synchronize();
  CHECK(dst == src);
}

void sim_with_two_devices() {
  devplug::Runtime rt = make_runtime();
  rt.load_plugin(kSim, {"devices=2", "latency_us=100"});
  CHECK(rt.device_count() == 3);
  devplug::Device cpu = rt.device("CPU");
  devplug::Device s0 = rt.device("SIM:0");
  devplug::Device s1 = rt.device("SIM:1");
  round_trip(cpu, s0, 1);
  round_trip(s0, s1, 2);
  round_trip(s1, cpu, 3);
  auto t = devplug::Tensor::from_vector<double>(s1, {3}, {1.5, 2.5, 3.5});
  CHECK((t.copy_to(cpu).to_vector<double>() == std::vector<double>{1.5, 2.5, 3.5}));
  // an injected fault is an exception, and the runtime goes on
  devplug::Runtime faulty = make_runtime();
  faulty.load_plugin(kSim, {"fail_copy_after=0"});
  devplug::Buffer b = faulty.device("SIM").allocate(16);
  const std::vector<uint8_t> bytes(16, 1);
  CHECK_ERROR(b.write(bytes), DP_RESOURCE_EXHAUSTED, "SIM");
  CHECK(faulty.device("CPU").allocate(16).size() == 16);
}

void override_scenario(bool sim_first) {
  devplug::Runtime rt = make_runtime();
  const std::vector<std::string> sim_opts = {"device_type=GPU", "platform=SIMCUDA", "priority=0"};
  if (sim_first) {
    rt.load_plugin(kSim, sim_opts);
    rt.load_plugin(kSimdml);
  } else {
    rt.load_plugin(kSimdml);
    rt.load_plugin(kSim, sim_opts);
  }
  CHECK(rt.plugin_failures().empty());
  const devplug::DeviceProperties gpu0 = rt.device("GPU:0").properties();
  CHECK(gpu0.platform == "SIMDML");
  CHECK(gpu0.is_active_platform);
  CHECK(gpu0.priority == 100);
  const devplug::DeviceProperties cuda0 = rt.device("SIMCUDA:0").properties();
  CHECK(cuda0.platform == "SIMCUDA" && cuda0.device_type == "GPU");
  CHECK(!cuda0.is_active_platform);
  // names say what addresses each device now: GPU:0 is SIMDML's, so SIM's is SIMCUDA:0
  CHECK(gpu0.name == "GPU:0");
  CHECK(cuda0.name == "SIMCUDA:0");
  CHECK(rt.device("SIMCUDA:0").name() == "SIMCUDA:0");
  CHECK(rt.device("/device:GPU:0") == rt.device("SIMDML:0"));
  // both plugins' devices run memory and streams, also between each other
  round_trip(rt.device("GPU:0"), rt.device("SIMCUDA:0"), 4);
  round_trip(rt.device("SIMCUDA:0"), rt.device("CPU:0"), 5);
  // a third GPU platform at priority 100 is refused, naming SIMDML; nothing else changes. (A
  // copy of the SIM library: the same file again would just be the plugin already loaded.)
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("devplug-third-" + std::to_string(std::rand()) + "-" +
                                                    std::to_string(static_cast<long>(sim_first)));
  fs::create_directories(dir);
  const fs::path third = dir / "libthird_gpu.so";
  fs::copy_file(kSim, third, fs::copy_options::overwrite_existing);
  CHECK_ERROR(rt.load_plugin(third.string(), {"device_type=GPU", "platform=THIRD", "priority=100"}),
              DP_ALREADY_EXISTS, "SIMDML");
  fs::remove_all(dir);
  CHECK(rt.plugins().size() == 2);
  CHECK(rt.device("GPU:0").properties().platform == "SIMDML");
}

// SIMDML's own op simdml.Swish (plugin ABI 1.2): SIMDML's kernel on GPU:0, the body it
// registered (Sigmoid, then Mul) on the CPU; the same values; its dtype rule names it.
void a_plugins_own_op() {
  devplug::Runtime rt = make_runtime();
  CHECK_ERROR(rt.op("simdml.Swish"), DP_NOT_FOUND, "simdml.Swish");
  rt.load_plugin(kSimdml);
  CHECK(rt.plugins().at(0).ops == std::vector<std::string>{"simdml.Swish"});
  const devplug::Op swish = rt.op("simdml.Swish");
  CHECK(swish.name() == "simdml.Swish");
  const std::vector<float> xs{-3.0f, -0.5f, 0.0f, 2.0f};
  for (const char* where : {"GPU:0", "CPU:0"}) {
    devplug::Device d = rt.device(where);
    auto x = devplug::Tensor::from_vector<float>(d, {4}, xs);
    devplug::RunOptions strict;
    strict.device = d;
    strict.soft_placement = DP_SOFT_PLACEMENT_OFF;
    devplug::Tensor y = rt.run1(swish, {&x}, nullptr, strict);
    CHECK(y.device().get() == d.get());
    const std::vector<float> got = y.to_vector<float>();
    CHECK(got.size() == xs.size());
    for (size_t i = 0; i < got.size() && i < xs.size(); ++i) {
      const double want = xs[i] / (1.0 + std::exp(-static_cast<double>(xs[i])));
      CHECK(std::fabs(got[i] - want) <= 1e-6 * std::max(1.0, std::fabs(want)));
    }
  }
  auto i32 = devplug::Tensor::from_vector<int32_t>(rt.device("CPU:0"), {2}, {1, 2});
  CHECK_ERROR(rt.run1(swish, {&i32}), DP_INVALID_ARGUMENT, "simdml.Swish");
}

// Ops run on their device's default stream: an upload into a tensor's buffer on a created
// stream is ordered before Add with an event the default stream waits for, and a read on the
// created stream after Add with an event recorded on the default stream. A host callback
// holds the created stream back, so that without the event Add would see zeros.
void stream_work_ordered_with_ops() {
  devplug::Runtime rt = make_runtime();
  rt.load_plugin(kSim, {"latency_us=2000"});
  const devplug::Device sim = rt.device("SIM:0");
  const std::vector<float> up{1.5f, -2.0f, 3.25f, 100.0f};
  devplug::Tensor x = devplug::Tensor::zeros(sim, devplug::DType::F32, {4});
  devplug::Buffer xb = x.buffer();
  devplug::Stream s = sim.create_stream();
  devplug::Stream def = sim.default_stream();
  devplug::Event uploaded = sim.create_event();
  devplug::Event added = sim.create_event();
  s.host_callback([] { std::this_thread::sleep_for(std::chrono::milliseconds(150)); });
  s.write(xb, up);
  s.record(uploaded);
  def.wait(uploaded);
  devplug::RunOptions strict;
  strict.device = sim;
  strict.soft_placement = DP_SOFT_PLACEMENT_OFF;
  devplug::Tensor z = rt.run1(rt.op("Add"), {&x, &x}, nullptr, strict);
  std::vector<float> down(4, 0.0f);
  devplug::Buffer zb = z.buffer();
  def.record(added);
  s.wait(added);
  s.read(zb, down);
  s.synchronize();
  const std::vector<float> want{3.0f, -4.0f, 6.5f, 200.0f};
  CHECK(down == want);
  CHECK(z.to_vector<float>() == want);
}

void cxx_plugin_exceptions_become_errors() {
  devplug::Runtime rt = make_runtime();
  CHECK_ERROR(rt.load_plugin(kSimdml, {"throw_in_init=1"}), DP_INTERNAL, "throw_in_init");
  CHECK(rt.plugin_failures().size() == 1);
  rt.load_plugin(kSimdml);
  CHECK(rt.plugins().size() == 1);
}

}  // namespace

int main() {
  try {
    sim_with_two_devices();
    override_scenario(true);
    override_scenario(false);
    cxx_plugin_exceptions_become_errors();
    a_plugins_own_op();
    stream_work_ordered_with_ops();
  } catch (const devplug::Error& e) {
    std::fprintf(stderr, "unexpected devplug::Error: %s\n", e.what());
    return 1;
  }
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures == 0 ? 0 : 1;
}
