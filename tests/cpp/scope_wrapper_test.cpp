// (Named scope_wrapper_test: tests/c/scope_test.c already makes the target scope_test.)
// Device scopes through the C++ wrapper (devplug.hpp): Runtime::device_scope / setter_scope /
// current_scope, ScopeGuard as a block-scoped RAII value (nesting; neither movable nor made
// with new, so it cannot end on another thread; std::optional for a guard entered only
// sometimes; a failed exit said on stderr), a
// std::function setter with and without an opinion, a setter throwing devplug::Error (the op
// fails with its code) or another exception (DP_UNKNOWN), what it threw in the error the caller
// sees (ops, graph nodes, variables), a captured context re-entered on another thread, errors
// as devplug::Error (another runtime's device, an empty setter), and, at compile time, that a
// temporary scope cannot be entered (it would be destroyed while entered).
// Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

// Entering a temporary scope does not compile: the scope would be destroyed while entered
// (`auto g = rt.device_scope(d).enter();`). Scopes in variables enter.
template <class S, class = void>
struct can_enter : std::false_type {};
template <class S>
struct can_enter<S, std::void_t<decltype(std::declval<S>().enter())>> : std::true_type {};
static_assert(can_enter<devplug::DeviceScope&>::value && can_enter<const devplug::DeviceScope&>::value,
              "a scope in a variable enters");
static_assert(!can_enter<devplug::DeviceScope>::value && !can_enter<devplug::DeviceScope&&>::value &&
                  !can_enter<const devplug::DeviceScope&&>::value,
              "a temporary scope does not enter");
// The same through the guard's constructor (`devplug::ScopeGuard g(rt.device_scope(d));`),
// and for every kind of scope, which all are DeviceScopes.
static_assert(std::is_constructible<devplug::ScopeGuard, devplug::DeviceScope&>::value &&
                  std::is_constructible<devplug::ScopeGuard, const devplug::DeviceScope&>::value,
              "a guard enters a scope in a variable");
static_assert(!std::is_constructible<devplug::ScopeGuard, devplug::DeviceScope>::value &&
                  !std::is_constructible<devplug::ScopeGuard, const devplug::DeviceScope&&>::value,
              "a guard does not enter a temporary scope");
static_assert(std::is_same<decltype(std::declval<devplug::Runtime&>().device_scope(devplug::Device())),
                           devplug::DeviceScope>::value &&
                  std::is_same<decltype(std::declval<devplug::Runtime&>().setter_scope(devplug::DeviceSetter())),
                               devplug::DeviceScope>::value &&
                  std::is_same<decltype(std::declval<devplug::Runtime&>().current_scope()),
                               devplug::DeviceScope>::value,
              "every kind of scope is a DeviceScope, so none enters as a temporary");

// A guard stays where it was made, as a std::lock_guard does: it cannot be moved (to another
// thread, where its exit would fail and leave this thread in the scope), nor made with new.
// `auto g = scope.enter();` still compiles (C++17 guaranteed copy elision), and so does a
// std::optional<ScopeGuard> emplaced.
template <class T, class = void>
struct can_new : std::false_type {};
template <class T>
struct can_new<T, std::void_t<decltype(new T(std::declval<const devplug::DeviceScope&>()))>> : std::true_type {};
static_assert(!std::is_move_constructible<devplug::ScopeGuard>::value &&
                  !std::is_move_assignable<devplug::ScopeGuard>::value &&
                  !std::is_copy_constructible<devplug::ScopeGuard>::value &&
                  !std::is_copy_assignable<devplug::ScopeGuard>::value,
              "a guard is neither movable nor copyable");
static_assert(!can_new<devplug::ScopeGuard>::value, "a guard is not made with new");
static_assert(std::is_same<decltype(std::declval<devplug::DeviceScope&>().enter()), devplug::ScopeGuard>::value,
              "enter() returns the guard itself (made in place)");


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

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What `f` writes to standard error (file descriptor 2), through a temporary file.
template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  FILE* tmp = std::tmpfile();
  if (tmp == nullptr) return "(no temporary file)";
  const int saved = dup(2);
  dup2(fileno(tmp), 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(tmp);
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, tmp)) > 0) text.append(buf, n);
  std::fclose(tmp);
  return text;
}

}  // namespace

int main() {
  devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(3));
  devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1"), cpu2 = rt.device("CPU:2");

  section("every kind of scope enters from a variable");
  {
    devplug::DeviceScope by_device = rt.device_scope(cpu1);
    devplug::DeviceScope by_setter = rt.setter_scope([&](const devplug::PlacementQuery&) { return cpu2; });
    devplug::ScopeGuard g1 = by_device.enter();
    CHECK(run(rt, cpu0, "Add") == cpu1);
    devplug::DeviceScope captured = rt.current_scope();
    const devplug::ScopeGuard g2 = by_setter.enter();
    CHECK(run(rt, cpu0, "Add") == cpu2);
    const devplug::DeviceScope& as_const = captured;
    const devplug::ScopeGuard g3 = as_const.enter();
    CHECK(run(rt, cpu0, "Add") == cpu1);
  }
  CHECK(run(rt, cpu0, "Add") == cpu0);

  section("guards nest as blocks do");
  CHECK(run(rt, cpu0, "Add") == cpu0);
  devplug::DeviceScope s1 = rt.device_scope(cpu1);
  devplug::DeviceScope s2 = rt.device_scope(cpu2);
  {
    devplug::ScopeGuard outer(s1);
    CHECK(run(rt, cpu0, "Add") == cpu1);
    {
      auto inner = s2.enter();  // the guard is made in place: nothing moves
      CHECK(run(rt, cpu0, "Add") == cpu2);
      std::optional<devplug::ScopeGuard> sometimes;  // a guard entered only sometimes
      CHECK(run(rt, cpu0, "Add") == cpu2);
      sometimes.emplace(s1);
      CHECK(run(rt, cpu0, "Add") == cpu1);
      sometimes.reset();
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

  section("what a throwing setter threw is in the error, for ops, graph nodes and variables");
  {
    devplug::DeviceScope denies = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw devplug::Error(DP_PERMISSION_DENIED, "policy says no");
    });
    devplug::DeviceScope explodes = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw std::runtime_error("policy exploded");
    });
    devplug::DeviceScope throws_int = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw 42;
    });
    devplug::DeviceScope throws_ok = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw devplug::Error(DP_OK, "not an error?");
    });
    devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu0, {1}, {1.0f});
    std::pair<dp_status_t, std::string> e;
    {
      devplug::ScopeGuard g(denies);
      e = error_of([&] { run(rt, cpu0, "Add"); });
      // the status is said once, in front; the C library's message, then what the setter threw
      CHECK_MSG(e.first == DP_PERMISSION_DENIED &&
                    e.second == "PERMISSION_DENIED: dp_op_run: Add: the device setter failed: it threw: policy says no",
                e.second);
      devplug::Graph graph;
      const devplug::GraphOutput p = graph.placeholder("p", devplug::DType::F32, {1});
      e = error_of([&] { graph.op1(rt, "n", rt.op("Neg"), {p}); });
      CHECK_MSG(e.first == DP_PERMISSION_DENIED && contains(e.second, "graph node 'n'") &&
                    contains(e.second, "policy says no"),
                e.second);
      e = error_of([&] { rt.variable("v", x); });
      CHECK_MSG(e.first == DP_PERMISSION_DENIED && contains(e.second, "variable 'v'") &&
                    contains(e.second, "policy says no"),
                e.second);
    }
    {
      devplug::ScopeGuard g(explodes);
      e = error_of([&] { run(rt, cpu0, "Add"); });
      CHECK_MSG(e.first == DP_UNKNOWN &&
                    e.second == "UNKNOWN: dp_op_run: Add: the device setter failed: it threw: policy exploded",
                e.second);
    }
    {
      devplug::ScopeGuard g(throws_int);
      e = error_of([&] { run(rt, cpu0, "Add"); });
      CHECK_MSG(e.first == DP_UNKNOWN && contains(e.second, "not a std::exception"), e.second);
    }
    {
      // An Error with DP_OK is still an exception: the op fails rather than succeeding.
      devplug::ScopeGuard g(throws_ok);
      e = error_of([&] { run(rt, cpu0, "Add"); });
      CHECK_MSG(e.first == DP_UNKNOWN && contains(e.second, "not an error?"), e.second);
    }
    // The text goes with the failure it caused, not with a later one: a C call that fails
    // because of the setter, its error never collected, then failures of the wrapper's that
    // have nothing to do with it, of another code and of the same code.
    devplug::DeviceScope invalid = rt.setter_scope([](const devplug::PlacementQuery&) -> devplug::Device {
      throw devplug::Error(DP_INVALID_ARGUMENT, "policy is invalid");
    });
    dp_tensor_t* in[2] = {x.get(), x.get()};
    dp_tensor_t* out[1] = {};
    const devplug::Op add = rt.op("Add");
    {
      devplug::ScopeGuard g(denies);
      CHECK(dp_op_run(rt.get(), add.get(), in, 2, nullptr, nullptr, out, 1, nullptr) == DP_PERMISSION_DENIED);
    }
    e = error_of([&] { rt.device("CPU:9"); });
    CHECK_MSG(e.first == DP_NOT_FOUND && !contains(e.second, "policy"), e.second);
    {
      devplug::ScopeGuard g(invalid);
      CHECK(dp_op_run(rt.get(), add.get(), in, 2, nullptr, nullptr, out, 1, nullptr) == DP_INVALID_ARGUMENT);
    }
    devplug::Tensor y = devplug::Tensor::from_vector<float>(cpu0, {2}, {1.0f, 2.0f});
    e = error_of([&] { rt.run1(rt.op("MatMul"), {&x, &y}); });
    CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "MatMul") && !contains(e.second, "policy"),
              e.second);
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

  section("a guard whose exit fails says so on stderr (out of order; on another thread)");
  {
    std::optional<devplug::ScopeGuard> first, second;
    first.emplace(s1);
    second.emplace(s2);
    // Exiting s1 while s2 is innermost fails: the destructor cannot throw, it reports.
    const std::string said = stderr_of([&] { first.reset(); });
    CHECK_MSG(contains(said, "~ScopeGuard could not exit its scope") && contains(said, "innermost"), said);
    CHECK(run(rt, cpu0, "Add") == cpu2);
    second.reset();
    CHECK(run(rt, cpu0, "Add") == cpu1);  // s1 is still entered: exit it by hand
    CHECK(dp_scope_exit(s1.get()) == DP_OK);
    CHECK(run(rt, cpu0, "Add") == cpu0);
    // A guard held by an object that ends on another thread: the exit fails there, loudly.
    struct Holder {
      devplug::ScopeGuard guard;
      explicit Holder(const devplug::DeviceScope& s) : guard(s) {}
    };
    auto holder = std::make_unique<Holder>(s2);
    CHECK(run(rt, cpu0, "Add") == cpu2);
    const std::string there = stderr_of([&] { std::thread([&] { holder.reset(); }).join(); });
    CHECK_MSG(contains(there, "~ScopeGuard could not exit its scope"), there);
    CHECK(run(rt, cpu0, "Add") == cpu2);  // this thread is still in s2
    CHECK(dp_scope_exit(s2.get()) == DP_OK);
    CHECK(run(rt, cpu0, "Add") == cpu0);
  }

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
    CHECK_MSG(contains(e.message(), "DeviceScope::enter: the devplug::DeviceScope is empty"), e.message());
  }
  CHECK(run(rt, cpu0, "Add") == cpu0);

  return summary("scope_wrapper_test");
}
