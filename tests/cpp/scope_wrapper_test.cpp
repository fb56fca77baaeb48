// (Named scope_wrapper_test: tests/c/scope_test.c already makes the target scope_test.)
// Device scopes through the C++ wrapper (devplug.hpp): Runtime::device_scope / setter_scope /
// current_scope, ScopeGuard as a block-scoped RAII value (nesting, moving a guard), a
// std::function setter with and without an opinion, a setter throwing devplug::Error (the op
// fails with its code) or another exception (DP_UNKNOWN), a captured context re-entered on
// another thread, and errors as devplug::Error (another runtime's device, an empty setter).
// Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {


// Runs `op` on two 1x1 f32 tensors of `input` with no device named; the output's device.
devplug::Device run(devplug::Runtime& rt, const devplug::Device& input, const char* op) {
  devplug::Tensor x = devplug::Tensor::from_vector<float>(input, {1, 1}, {2.0f});
  return rt.run1(rt.op(op), {&x, &x}).device();
}

// The status a run fails with (DP_OK when it does not).
dp_status_t failure(devplug::Runtime& rt, const devplug::Device& input, const char* op) {
  try {
    run(rt, input, op);
    return DP_OK;
  } catch (const devplug::Error& e) {
    return e.code();
  }
}

}  // namespace

int main() {
  devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(3));
  devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1"), cpu2 = rt.device("CPU:2");

  section("guards nest as blocks do");
  CHECK(run(rt, cpu0, "Add") == cpu0);
  devplug::DeviceScope s1 = rt.device_scope(cpu1);
  devplug::DeviceScope s2 = rt.device_scope(cpu2);
  {
    devplug::ScopeGuard outer(s1);
    CHECK(run(rt, cpu0, "Add") == cpu1);
    {
      auto inner = s2.enter();
      CHECK(run(rt, cpu0, "Add") == cpu2);
      devplug::ScopeGuard moved(std::move(inner));  // the moved-from guard exits nothing
      CHECK(run(rt, cpu0, "Add") == cpu2);
    }
    CHECK(run(rt, cpu0, "Add") == cpu1);
    devplug::RunOptions explicit_cpu0;
    explicit_cpu0.device = cpu0;
    devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu0, {1}, {1.0f});
    CHECK(rt.run1(rt.op("Neg"), {&x}, nullptr, explicit_cpu0).device() == cpu0);
  }
  CHECK(run(rt, cpu0, "Add") == cpu0);

  section("a std::function setter, with and without an opinion");
  std::vector<std::string> asked;
  devplug::DeviceScope setter = rt.setter_scope([&](const devplug::PlacementQuery& q) {
    asked.push_back(q.name + "/" + q.op + (q.kind == devplug::OpKind::Compute ? "/compute" : "/variable"));
    return q.op == "MatMul" ? cpu2 : devplug::Device();
  });
  {
    devplug::ScopeGuard around(s1);
    devplug::ScopeGuard g(setter);
    CHECK(run(rt, cpu0, "MatMul") == cpu2);
    CHECK(run(rt, cpu0, "Add") == cpu1);
  }
  CHECK(asked == (std::vector<std::string>{"MatMul/MatMul/compute", "Add/Add/compute"}));

  section("a throwing setter fails the op");
  {
    devplug::DeviceScope throws_error = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw devplug::Error(DP_UNAVAILABLE, "no device is free");
    });
    devplug::DeviceScope throws_other = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw std::runtime_error("oops");
    });
    {
      devplug::ScopeGuard g(throws_error);
      CHECK(failure(rt, cpu0, "Add") == DP_UNAVAILABLE);
    }
    {
      devplug::ScopeGuard g(throws_other);
      CHECK(failure(rt, cpu0, "Add") == DP_UNKNOWN);
    }
    CHECK(failure(rt, cpu0, "Add") == DP_OK);
  }

  section("a captured context on another thread");
  devplug::DeviceScope captured;
  {
    devplug::ScopeGuard g1(s1);
    devplug::ScopeGuard g2(setter);
    captured = rt.current_scope();
  }
  CHECK(static_cast<bool>(captured));
  devplug::Device seen_add, seen_matmul;
  std::thread th([&] {
    devplug::ScopeGuard caller(s2);  // does not apply inside the captured context
    devplug::ScopeGuard g(captured);
    seen_add = run(rt, cpu0, "Add");
    seen_matmul = run(rt, cpu0, "MatMul");
  });
  th.join();
  CHECK(seen_add == cpu1);
  CHECK(seen_matmul == cpu2);

  section("errors");
  devplug::Runtime other;
  try {
    rt.device_scope(other.device("CPU:0"));
    CHECK(false);
  } catch (const devplug::Error& e) {
    CHECK(e.code() == DP_INVALID_ARGUMENT);
    CHECK(std::string(e.message()).find("another runtime") != std::string::npos);
  }
  try {
    rt.setter_scope(devplug::DeviceSetter());
    CHECK(false);
  } catch (const devplug::Error& e) {
    CHECK(e.code() == DP_INVALID_ARGUMENT);
  }
  try {
    devplug::DeviceScope empty;
    devplug::ScopeGuard g(empty);
    CHECK(false);
  } catch (const devplug::Error& e) {
    CHECK(e.code() == DP_INVALID_ARGUMENT);
  }
  CHECK(run(rt, cpu0, "Add") == cpu0);

  return summary("scope_wrapper_test");
}
