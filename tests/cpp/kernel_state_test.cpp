// Kernel state (plugin ABI 1.5) through the real runtime, with the C++ plugin SIMDML: its op
// simdml.Swish (y = x * sigmoid(beta * x)) has a kernel whose create (plugin.hpp's
// Host::register_kernel with a create function) reads beta once per device, dtype and beta.
// With several betas the results are right (and equal the op's body on the CPU), the runtime
// makes one state per dtype and beta (the default beta and an explicit 1.0 share one), a beta
// create refuses fails that run only, at most 64 states are kept per kernel and device (an
// evicted one is made again), and every state made is destroyed by the time the runtime is
// gone, SIMDML reporting no leak. SIMDML logs each state (load option log_kernel_states=1);
// the log is process-wide, so this is one program.
#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace {

const std::string kSimdml = std::string(DEVPLUG_TEST_PLUGIN_DIR) + "/libdevplug_simdml.so";

/** SIMDML's log lines, taken from the process-wide log. */
struct Lines {
  std::mutex mu;
  std::vector<std::string> all;
  size_t count(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const std::string& l : all) n += l.find(part) != std::string::npos ? 1 : 0;
    return n;
  }
  size_t made() { return count("kernel simdml.Swish: state created"); }
  size_t destroyed() { return count("kernel simdml.Swish: state destroyed"); }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    all.clear();
  }
};

template <class T>
bool is_swish(const std::vector<T>& got, const std::vector<T>& x, double beta) {
  if (got.size() != x.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = static_cast<double>(x[i]) / (1.0 + std::exp(-beta * static_cast<double>(x[i])));
    if (!(std::fabs(static_cast<double>(got[i]) - want) <= 1e-6 * std::max(1.0, std::fabs(want)))) {
      std::printf("  swish(%g) with beta %g: %g, expected %g\n", static_cast<double>(x[i]), beta,
                  static_cast<double>(got[i]), want);
      return false;
    }
  }
  return true;
}

devplug::RunOptions strictly_on(const devplug::Device& d) {
  devplug::RunOptions o;
  o.device = d;
  o.soft_placement = DP_SOFT_PLACEMENT_OFF;
  return o;
}

void one_state_per_dtype_and_beta(Lines& lines) {
  section("one state per device, dtype and beta; right results; all destroyed with the runtime");
  lines.clear();
  {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    rt.load_plugin(kSimdml, {"log_kernel_states=1"});
    const devplug::Op swish = rt.op("simdml.Swish");
    const devplug::Device gpu = rt.device("GPU:0");
    const devplug::Device cpu = rt.device("CPU:0");
    CHECK(gpu.properties().platform == "SIMDML");
    const std::vector<float> xs{-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 4.0f};
    const devplug::Tensor x = devplug::Tensor::from_vector<float>(gpu, {2, 3}, xs);
    const devplug::Tensor x_cpu = devplug::Tensor::from_vector<float>(cpu, {2, 3}, xs);
    // std::nullopt: no attributes (the default beta, 1).
    const std::vector<std::optional<double>> betas{0.5, 2.0, std::nullopt, 0.5, 1.0, 2.0, -1.5, std::nullopt};
    const std::vector<size_t> made_after{1, 2, 3, 3, 3, 3, 4, 4};
    for (size_t i = 0; i < betas.size(); ++i) {
      devplug::Attrs attrs;
      if (betas[i]) attrs.set("beta", *betas[i]);
      const devplug::Attrs* a = betas[i] ? &attrs : nullptr;
      const double beta = betas[i].value_or(1.0);
      const std::vector<float> got = rt.run1(swish, {&x}, a, strictly_on(gpu)).to_vector<float>();
      CHECK_MSG(is_swish(got, xs, beta), "beta " + std::to_string(beta));
      // The op's body (Mul by @beta, Sigmoid, Mul) on the CPU agrees.
      const std::vector<float> body = rt.run1(swish, {&x_cpu}, a, strictly_on(cpu)).to_vector<float>();
      CHECK_MSG(is_swish(body, xs, beta), "body, beta " + std::to_string(beta));
      CHECK_MSG(lines.made() == made_after[i],
                "run " + std::to_string(i) + ": " + std::to_string(lines.made()) + " states made");
    }
    CHECK(lines.count("SIMDML:0: kernel simdml.Swish: state created (beta 0.5, f32); 1 live") == 1);
    CHECK(lines.count("state created (beta -1.5, f32)") == 1);
    CHECK(lines.count("for one launch") == 0);  // the runtime makes the states (ABI 1.5)
    // f64 is another state.
    const std::vector<double> x64{-2.0, 0.125, 3.0};
    const devplug::Tensor t64 = devplug::Tensor::from_vector<double>(gpu, {3}, x64);
    auto half = devplug::Attrs().set("beta", 0.5);
    CHECK(is_swish(rt.run1(swish, {&t64}, &half, strictly_on(gpu)).to_vector<double>(), x64, 0.5));
    CHECK(lines.count("state created (beta 0.5, f64)") == 1);
    CHECK(lines.made() == 5);
    // A beta create refuses fails that run, with create's message; the next run is fine.
    auto nan = devplug::Attrs().set("beta", std::nan(""));
    const auto e = error_of([&] { rt.run1(swish, {&x}, &nan, strictly_on(gpu)); });
    CHECK(e.first == DP_INVALID_ARGUMENT);
    CHECK_MSG(e.second.find("attribute beta is nan, not a finite number") != std::string::npos, e.second);
    CHECK(is_swish(rt.run1(swish, {&x}, &half, strictly_on(gpu)).to_vector<float>(), xs, 0.5));
    CHECK(lines.made() == 5);
    CHECK(lines.destroyed() == 0);  // the runtime keeps them
  }
  CHECK_MSG(lines.destroyed() == 5, std::to_string(lines.destroyed()) + " destroyed");
  CHECK(lines.count("SIMDML:0: destroyed; its 5 kernel state(s) were all destroyed") == 1);
  CHECK(lines.count("leaked") == 0);
}

void at_most_64_kept(Lines& lines) {
  section("at most 64 states per kernel and device; an evicted one is made again");
  lines.clear();
  {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    rt.load_plugin(kSimdml, {"log_kernel_states=1"});
    const devplug::Op swish = rt.op("simdml.Swish");
    const devplug::Device gpu = rt.device("GPU:0");
    const std::vector<float> xs{-1.0f, 2.0f};
    const devplug::Tensor x = devplug::Tensor::from_vector<float>(gpu, {2}, xs);
    bool all_right = true;
    for (int i = 0; i < 70; ++i) {
      const double beta = 0.25 + i / 8.0;
      auto attrs = devplug::Attrs().set("beta", beta);
      all_right = is_swish(rt.run1(swish, {&x}, &attrs, strictly_on(gpu)).to_vector<float>(), xs, beta) && all_right;
    }
    CHECK(all_right);
    CHECK(lines.made() == 70);
    gpu.synchronize();  // the evicted ones are destroyed in stream order
    CHECK_MSG(lines.destroyed() == 6, std::to_string(lines.destroyed()) + " destroyed");
    // The first beta was evicted: its state is made again (and the 7th least recent goes).
    auto first = devplug::Attrs().set("beta", 0.25);
    CHECK(is_swish(rt.run1(swish, {&x}, &first, strictly_on(gpu)).to_vector<float>(), xs, 0.25));
    CHECK(lines.made() == 71);
    gpu.synchronize();
    CHECK(lines.destroyed() == 7);
  }
  CHECK_MSG(lines.destroyed() == 71, std::to_string(lines.destroyed()) + " destroyed");
  CHECK(lines.count("its 71 kernel state(s) were all destroyed") == 1);
  CHECK(lines.count("leaked") == 0);
}

}  // namespace

int main() {
  auto lines = std::make_shared<Lines>();
  try {
    devplug::set_log_level(devplug::LogLevel::Info);
    devplug::set_log_callback([lines](const devplug::LogRecord& r) {
      if (r.source != "plugin 'simdml'") return;
      std::lock_guard<std::mutex> lock(lines->mu);
      lines->all.push_back(r.message);
    });
    one_state_per_dtype_and_beta(*lines);
    at_most_64_kept(*lines);
  } catch (const devplug::Error& e) {
    std::printf("unexpected devplug::Error: %s\n", e.what());
    devplug::set_log_callback(nullptr);
    return 1;
  }
  devplug::set_log_callback(nullptr);
  devplug::reset_log_level();
  return summary("kernel_state_test");
}
