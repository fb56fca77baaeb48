// (Named op_wrapper_test, not op_test: tests/c/op_test.c already makes the target op_test.)
// The eager op API through the C++ wrapper (devplug.hpp): Attrs chaining (lvalue and
// temporary), Runtime::op / run / run1 / run by name, RunOptions, errors as devplug::Error with
// their code and message (a null input; an op with more outputs than run() returns), the
// placement callback as a std::function (events, replacement and release of the old function,
// exceptions swallowed), SIM with kernels=0 (soft placement and strict mode), and a small
// 2-layer MLP forward pass (MatMul + Add(bias) + Relu + MatMul + Add + Softmax, f32) checked
// against a plain C++ reference, on the CPU and on SIM.
// Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "attrs_traits.hpp"
#include "counting_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

// Which values `Attrs::set` takes, checked at compile time: every kind of the C API, strings
// included (a string literal sets a string, not the bool it would convert to: checked at run
// time below); can_set is in attrs_traits.hpp.
static_assert(can_set<const char*>::value && can_set<const char (&)[3]>::value && can_set<std::string>::value,
              "strings set string attributes");
static_assert(can_set<bool>::value && can_set<int>::value && can_set<int64_t>::value &&
                  can_set<double>::value && can_set<std::vector<int64_t>>::value &&
                  can_set<devplug::DType>::value,
              "every attribute kind of the C API can be set");


bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Runs `expr`, which must throw devplug::Error with `want` and a message holding every word.
#define CHECK_THROWS(expr, want, words)                                                              \
  do {                                                                                               \
    bool thrown_ = false;                                                                            \
    try {                                                                                            \
      (void)(expr);                                                                                  \
    } catch (const devplug::Error& e_) {                                                             \
      thrown_ = true;                                                                                \
      report(e_.code() == (want), __FILE__, __LINE__,                                                \
             std::string(#expr " threw ") + e_.what() + ", expected " #want);                      \
      report(std::string(e_.what()).rfind(devplug::status_name(want), 0) == 0, __FILE__, __LINE__, \
             std::string("what() does not start with the code name: ") + e_.what());               \
      for (const std::string& w_ : std::vector<std::string>(words))                                  \
        report(contains(e_.message(), w_), __FILE__, __LINE__,                                       \
               std::string(#expr ": the message \"") + e_.message() + "\" does not name " + w_);    \
    } catch (const std::exception& e_) {                                                             \
      thrown_ = true;                                                                                \
      report(false, __FILE__, __LINE__, std::string(#expr " threw a non-devplug exception: ") + e_.what()); \
    }                                                                                                \
    if (!thrown_) report(false, __FILE__, __LINE__, #expr " did not throw");                         \
  } while (0)

// Runs `expr`, which must not throw.
#define CHECK_NOTHROW(expr)                                                                  \
  do {                                                                                       \
    try {                                                                                    \
      expr;                                                                                  \
      report(true, __FILE__, __LINE__, #expr);                                               \
    } catch (const std::exception& e_) {                                                     \
      report(false, __FILE__, __LINE__, std::string(#expr " threw: ") + e_.what());          \
    }                                                                                        \
  } while (0)

template <class T>
void check_values(const devplug::Tensor& t, const devplug::Shape& shape, const std::vector<T>& want,
                  double tol, const char* what, const char* file, int line) {
  if (!t) {
    report(false, file, line, std::string(what) + ": no tensor");
    return;
  }
  report(t.dtype() == devplug::dtype_of<T>(), file, line, std::string(what) + ": dtype " + devplug::dtype_name(t.dtype()));
  report(t.shape() == shape, file, line, std::string(what) + ": shape");
  std::vector<T> got;
  try {
    got = t.to_vector<T>();
  } catch (const devplug::Error& e) {
    report(false, file, line, std::string(what) + ": to_vector threw " + e.what());
    return;
  }
  if (got.size() != want.size()) {
    report(false, file, line, std::string(what) + ": " + std::to_string(got.size()) + " elements, expected " +
                                  std::to_string(want.size()));
    return;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool ok = tol == 0 ? g == w : std::fabs(g - w) <= tol * (1 + std::fabs(w));
    if (!ok) {
      report(false, file, line, std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(g) +
                                    ", expected " + std::to_string(w));
      return;
    }
  }
  report(true, file, line, what);
}
#define CHECK_VALUES(t, shape, want, tol) check_values((t), (shape), (want), (tol), #t, __FILE__, __LINE__)

const std::string kSim = std::string(DEVPLUG_TEST_PLUGIN_DIR) + "/libdevplug_sim.so";

devplug::Runtime make_runtime(uint32_t cpus = 1) {
  return devplug::Runtime(devplug::RuntimeOptions().cpu_device_count(cpus).discover_plugins(false));
}

struct Event {
  std::string op, device, reason, detail;
};

bool has_event(const std::vector<Event>& log, const std::string& op, const std::string& device,
               const std::string& reason, const std::string& detail_part = "") {
  for (const Event& e : log)
    if (e.op == op && (device.empty() || e.device == device) && e.reason == reason && contains(e.detail, detail_part))
      return true;
  return false;
}

std::string dump(const std::vector<Event>& log) {
  std::string s;
  for (const Event& e : log) s += "\n    " + e.op + " on " + e.device + ": " + e.reason + " (" + e.detail + ")";
  return s;
}

void test_basics() {
  section("Attrs chaining, Runtime::op / run / run1 / run by name, RunOptions");
  devplug::Runtime rt = make_runtime(2);
  devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1");
  const devplug::Op add = rt.op("Add");
  CHECK(add.get() != nullptr);
  CHECK(add.name() == "Add");
  CHECK(rt.op("Add").get() == add.get());

  auto x = devplug::Tensor::from_vector<float>(cpu0, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto y = devplug::Tensor::from_vector<float>(cpu0, {3}, {10, 20, 30});
  devplug::Tensor z = rt.run1(add, {&x, &y});
  CHECK_VALUES(z, devplug::Shape({2, 3}), std::vector<float>({11, 22, 33, 14, 25, 36}), 0);
  std::vector<devplug::Tensor> outs = rt.run(add, {&x, &y});
  CHECK(outs.size() == 1);
  if (outs.size() == 1) CHECK_VALUES(outs[0], devplug::Shape({2, 3}), std::vector<float>({11, 22, 33, 14, 25, 36}), 0);
  std::vector<devplug::Tensor> by_name = rt.run("Mul", {&x, &y});
  CHECK(by_name.size() == 1);
  if (by_name.size() == 1)
    CHECK_VALUES(by_name[0], devplug::Shape({2, 3}), std::vector<float>({10, 40, 90, 40, 100, 180}), 0);

  // explicit device, strict
  devplug::RunOptions on1;
  on1.device = cpu1;
  on1.soft_placement = DP_SOFT_PLACEMENT_OFF;
  devplug::Tensor z1 = rt.run1(add, {&x, &y}, nullptr, on1);
  CHECK(z1.device().get() == cpu1.get());
  CHECK_VALUES(z1, devplug::Shape({2, 3}), std::vector<float>({11, 22, 33, 14, 25, 36}), 0);

  // Attrs: chained on a temporary, and on an lvalue
  auto sum_rows = devplug::Attrs().set("axes", std::vector<int64_t>{1}).set("keep_dims", true);
  devplug::Tensor s = rt.run1(rt.op("ReduceSum"), {&x}, &sum_rows);
  CHECK_VALUES(s, devplug::Shape({2, 1}), std::vector<float>({6, 15}), 0);
  devplug::Attrs fill;
  fill.set("shape", std::vector<int64_t>{2, 2}).set("value", 1.5).set("dtype", devplug::DType::F64);
  devplug::Tensor f = rt.run1(rt.op("Fill"), {}, &fill);
  CHECK_VALUES(f, devplug::Shape({2, 2}), std::vector<double>({1.5, 1.5, 1.5, 1.5}), 0);
  fill.set("value", 3);  // an int literal for a float attribute: accepted
  fill.set("dtype", devplug::DType::I32);
  CHECK_VALUES(rt.run1(rt.op("Fill"), {}, &fill), devplug::Shape({2, 2}), std::vector<int32_t>({3, 3, 3, 3}), 0);
  auto cast = devplug::Attrs().set("dtype", devplug::DType::I64);
  auto frac = devplug::Tensor::from_vector<float>(cpu0, {3}, {1.9f, -1.9f, 0.5f});
  CHECK_VALUES(rt.run1(rt.op("Cast"), {&frac}, &cast), devplug::Shape({3}), std::vector<int64_t>({1, -1, 0}), 0);
  auto iota = devplug::Attrs().set("shape", std::vector<int64_t>{2, 3}).set("axis", -1).set("dtype", devplug::DType::U8);
  CHECK_VALUES(rt.run1(rt.op("Iota"), {}, &iota), devplug::Shape({2, 3}), std::vector<uint8_t>({0, 1, 2, 0, 1, 2}), 0);
  auto mask = devplug::Tensor::from_vector<bool>(cpu0, {3}, {true, false, true});
  auto a3 = devplug::Tensor::from_vector<float>(cpu0, {3}, {1, 2, 3});
  auto zero = devplug::Tensor::from_vector<float>(cpu0, {}, {0});
  CHECK_VALUES(rt.run1(rt.op("Select"), {&mask, &a3, &zero}), devplug::Shape({3}), std::vector<float>({1, 0, 3}), 0);
  CHECK_VALUES(rt.run1(rt.op("Greater"), {&a3, &zero}), devplug::Shape({3}), std::vector<bool>({true, true, true}), 0);
  // a moved-from Attrs is empty and may be destroyed; the moved-to one works
  devplug::Attrs moved = std::move(fill);
  CHECK(moved.get() != nullptr && fill.get() == nullptr);
  CHECK_VALUES(rt.run1(rt.op("Fill"), {}, &moved), devplug::Shape({2, 2}), std::vector<int32_t>({3, 3, 3, 3}), 0);
}

void test_errors() {
  section("errors as devplug::Error with code and message");
  devplug::Runtime rt = make_runtime();
  devplug::Device cpu = rt.device("CPU:0");
  auto x = devplug::Tensor::from_vector<float>(cpu, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto i = devplug::Tensor::from_vector<int32_t>(cpu, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto f4 = devplug::Tensor::from_vector<float>(cpu, {4}, {1, 2, 3, 4});
  CHECK_THROWS(rt.op("NoSuchOp"), DP_NOT_FOUND, std::vector<std::string>({"NoSuchOp"}));
  const devplug::Op add = rt.op("Add");
  CHECK_THROWS(rt.run1(add, {&x, &i}), DP_INVALID_ARGUMENT, std::vector<std::string>({"Add", "'y'"}));
  CHECK_THROWS(rt.run1(add, {&x}), DP_INVALID_ARGUMENT, std::vector<std::string>({"Add", "input"}));
  CHECK_THROWS(rt.run1(add, {&x, &f4}), DP_INVALID_ARGUMENT, std::vector<std::string>({"Add", "broadcast"}));
  CHECK_THROWS(rt.run1(rt.op("Cast"), {&x}), DP_INVALID_ARGUMENT, std::vector<std::string>({"Cast", "'dtype'"}));
  auto alpha = devplug::Attrs().set("alpha", 0.5);
  CHECK_THROWS(rt.run1(add, {&x, &x}, &alpha), DP_INVALID_ARGUMENT, std::vector<std::string>({"Add", "'alpha'"}));
  auto axes_int = devplug::Attrs().set("axes", 1);
  CHECK_THROWS(rt.run1(rt.op("ReduceSum"), {&x}, &axes_int), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"ReduceSum", "'axes'"}));
  // A string literal is a string attribute (not a bool): ReduceSum says what it got.
  auto axes_str = devplug::Attrs().set("axes", "1");
  CHECK_THROWS(rt.run1(rt.op("ReduceSum"), {&x}, &axes_str), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"ReduceSum", "'axes'", "a string"}));
  auto keep_str = devplug::Attrs().set("keep_dims", std::string("yes"));
  CHECK_THROWS(rt.run1(rt.op("ReduceSum"), {&x}, &keep_str), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"'keep_dims'", "a string"}));
  devplug::Attrs bad;
  CHECK_THROWS(bad.set("mode", static_cast<const char*>(nullptr)), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"NULL"}));
  CHECK_THROWS(bad.set("mode", std::string("\xff")), DP_INVALID_ARGUMENT, std::vector<std::string>({"UTF-8"}));
  CHECK_THROWS(bad.set("dtype", static_cast<devplug::DType>(99)), DP_INVALID_ARGUMENT, std::vector<std::string>({"value"}));
  devplug::RunOptions wrong;
  wrong.soft_placement = 7;
  CHECK_THROWS(rt.run1(add, {&x, &x}, nullptr, wrong), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"soft_placement"}));
  CHECK_THROWS(rt.run1(devplug::Op(), {&x, &x}), DP_INVALID_ARGUMENT, std::vector<std::string>({"op"}));
  // A null input is an error naming it, not a crash.
  CHECK_THROWS(rt.run(add, {&x, nullptr}), DP_INVALID_ARGUMENT, std::vector<std::string>({"inputs[1]", "NULL"}));
  CHECK_THROWS(rt.run("Neg", {nullptr}), DP_INVALID_ARGUMENT, std::vector<std::string>({"inputs[0]", "NULL"}));
  // after all that, the runtime still works
  CHECK_VALUES(rt.run1(add, {&x, &x}), devplug::Shape({2, 3}), std::vector<float>({2, 4, 6, 8, 10, 12}), 0);
}

void test_register_op() {
  section("Runtime::register_op: a host's own op, run by handle and by name; mistakes");
  devplug::Runtime rt = make_runtime();
  devplug::Device cpu = rt.device("CPU:0");
  const devplug::Op scale =
      rt.register_op({"app.Scale", "x: T", "y: T", "T: {f32, f64}", "k: float = 2.0", "y = Mul(x, @k)"});
  CHECK(scale.name() == "app.Scale");
  CHECK(rt.op("app.Scale").get() == scale.get());
  // Runtime::ops lists every op once, sorted by name, the host's own among them.
  {
    const std::vector<devplug::Op> all = rt.ops();
    CHECK(all.size() >= 42);
    size_t scales = 0, adds = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i > 0) CHECK_MSG(all[i - 1].name() < all[i].name(), all[i].name());
      CHECK(rt.op(all[i].name()).get() == all[i].get());
      scales += all[i].get() == scale.get();
      adds += all[i].name() == "Add";
    }
    CHECK(scales == 1 && adds == 1);
  }
  auto x = devplug::Tensor::from_vector<double>(cpu, {3}, {1, -2, 0.25});
  CHECK_VALUES(rt.run1(scale, {&x}), devplug::Shape({3}), std::vector<double>({2, -4, 0.5}), 0);
  auto k = devplug::Attrs().set("k", 10.0);
  CHECK_VALUES(rt.run1(scale, {&x}, &k), devplug::Shape({3}), std::vector<double>({10, -20, 2.5}), 0);
  CHECK_THROWS(rt.register_op({"app.Scale", "x: f32", "y: f32", "", "", "y = Neg(x)"}), DP_ALREADY_EXISTS,
               std::vector<std::string>({"app.Scale"}));
  CHECK_THROWS(rt.register_op({"app.Bad", "x: f32", "y: f32", "", "", "y = Neg(x); y = Frobnicate(y)"}),
               DP_INVALID_ARGUMENT, std::vector<std::string>({"app.Bad", "body", "statement 2", "Frobnicate"}));
  CHECK_THROWS(rt.op("app.Bad"), DP_NOT_FOUND, std::vector<std::string>({"app.Bad"}));

  // Runtime::run returns every output of an op, however many (the room is Op::num_outputs()).
  auto fan_out = [](const char* name, size_t n) {
    devplug::OpDef def{name, "x: f32", "", "", "", ""};
    for (size_t k = 0; k < n; ++k) {
      def.outputs += (k != 0 ? ", o" : "o") + std::to_string(k) + ": f32";
      def.body += "o" + std::to_string(k) + " = Neg(x); ";
    }
    return def;
  };
  const devplug::Op eight = rt.register_op(fan_out("app.Eight", 8));
  const devplug::Op twelve = rt.register_op(fan_out("app.Twelve", 12));
  CHECK(eight.num_outputs() == 8 && twelve.num_outputs() == 12);
  CHECK(rt.op("app.Twelve").num_outputs() == 12);
  CHECK(twelve.signature().find("app.Twelve(x: f32) -> (o0: f32, o1: f32,") == 0);
  CHECK(rt.op("MatMul").signature() ==
        "MatMul(a: T, b: T; transpose_a: bool = false, transpose_b: bool = false) -> (product: T) "
        "where T: {f32, f64, i32, i64, u8, f16, bf16}");
  CHECK(devplug::Op().num_outputs() == 0);
  CHECK_THROWS(devplug::Op().signature(), DP_INVALID_ARGUMENT,
               std::vector<std::string>({"Op::signature: the devplug::Op is empty"}));
  auto f = devplug::Tensor::from_vector<float>(cpu, {1}, {3});
  std::vector<devplug::Tensor> outs = rt.run(eight, {&f});
  CHECK(outs.size() == 8);
  if (!outs.empty()) CHECK_VALUES(outs.back(), devplug::Shape({1}), std::vector<float>({-3}), 0);
  outs = rt.run(twelve, {&f});
  CHECK(outs.size() == 12);
  for (const devplug::Tensor& o : outs) CHECK_VALUES(o, devplug::Shape({1}), std::vector<float>({-3}), 0);
  // An empty Op is refused by the C library, naming it.
  CHECK_THROWS(rt.run(devplug::Op(), {&f}), DP_INVALID_ARGUMENT, std::vector<std::string>({"op"}));
}

void test_placement_callback() {
  section("placement callback as std::function: events, replacement releases the old one");
  devplug::Runtime rt = make_runtime(2);
  devplug::Device cpu1 = rt.device("CPU:1");
  auto x = devplug::Tensor::from_vector<double>(cpu1, {3}, {1, 2, 3});
  auto log_a = std::make_shared<std::vector<Event>>();
  auto log_b = std::make_shared<std::vector<Event>>();
  auto recorder = [](std::shared_ptr<std::vector<Event>> log) {
    return [log](const dp_placement_event_t& e) {
      log->push_back(Event{e.op, e.device, e.reason, e.detail});
    };
  };
  rt.set_placement_callback(recorder(log_a));
  CHECK(log_a.use_count() == 2);  // the runtime holds one copy
  const devplug::Op neg = rt.op("Neg");
  CHECK_VALUES(rt.run1(neg, {&x}), devplug::Shape({3}), std::vector<double>({-1, -2, -3}), 0);
  CHECK_MSG(has_event(*log_a, "Neg", "HOST:0", "default", "kernel from built-in"), dump(*log_a));
  CHECK_MSG(has_event(*log_a, "Neg", "HOST:0", "input copied", "HOST:1"), dump(*log_a));
  log_a->clear();
  devplug::RunOptions on1;
  on1.device = cpu1;
  CHECK_VALUES(rt.run1(neg, {&x}, nullptr, on1), devplug::Shape({3}), std::vector<double>({-1, -2, -3}), 0);
  CHECK_MSG(log_a->size() == 1 && has_event(*log_a, "Neg", "HOST:1", "explicit", "kernel from built-in"), dump(*log_a));
  log_a->clear();
  CHECK_NOTHROW(rt.run1(rt.op("Gelu"), {&x}, nullptr, on1));
  CHECK_MSG(has_event(*log_a, "Gelu", "HOST:1", "decomposed"), dump(*log_a));
  CHECK_MSG(has_event(*log_a, "Tanh", "HOST:1", "decomposed", "kernel from built-in"), dump(*log_a));

  rt.set_placement_callback(recorder(log_b));
  CHECK(log_a.use_count() == 1);  // the old function was destroyed
  CHECK(log_b.use_count() == 2);
  const size_t a_before = log_a->size();
  CHECK_NOTHROW(rt.run1(neg, {&x}, nullptr, on1));
  CHECK(log_a->size() == a_before);
  CHECK(log_b->size() == 1);

  // a callback that throws: the exception stays in the trampoline, the op succeeds
  int calls = 0;
  rt.set_placement_callback([&calls](const dp_placement_event_t&) {
    ++calls;
    throw std::runtime_error("callback failure");
  });
  CHECK(log_b.use_count() == 1);
  CHECK_VALUES(rt.run1(neg, {&x}, nullptr, on1), devplug::Shape({3}), std::vector<double>({-1, -2, -3}), 0);
  CHECK(calls == 1);

  // an empty function removes it
  rt.set_placement_callback(nullptr);
  CHECK_NOTHROW(rt.run1(neg, {&x}, nullptr, on1));
  CHECK(calls == 1);

  // destroying the runtime releases the installed function
  auto log_c = std::make_shared<std::vector<Event>>();
  {
    devplug::Runtime rt2 = make_runtime();
    rt2.set_placement_callback(recorder(log_c));
    CHECK(log_c.use_count() == 2);
  }
  CHECK(log_c.use_count() == 1);
}

// The trace as a C++ host sees it: spans counted, the file holds them, errors thrown.
void test_trace() {
  section("trace: start, run, stop to a file; an empty path discards; an unwritable one throws");
  devplug::Runtime rt = make_runtime();
  devplug::Device cpu = rt.device("CPU:0");
  auto x = devplug::Tensor::from_vector<float>(cpu, {3}, {1.0f, 4.0f, 9.0f});
  const devplug::Op sqrt_op = rt.op("Sqrt");
  rt.run1(sqrt_op, {&x});
  CHECK(rt.stop_trace() == 0);  // none was on
  rt.start_trace();
  rt.run1(sqrt_op, {&x});
  rt.run1(rt.op("Gelu"), {&x});  // decomposed on the CPU: one span for it, one per op inside
  const std::string path = "/tmp/devplug-cpp-trace-" + std::to_string(static_cast<long>(getpid())) + ".json";
  const size_t spans = rt.stop_trace(path);
  CHECK_MSG(spans >= 6, std::to_string(spans));
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  std::remove(path.c_str());
  CHECK_MSG(text.find("\"name\":\"Sqrt\",\"cat\":\"kernel\"") != std::string::npos, text);
  CHECK_MSG(text.find("\"name\":\"Gelu\",\"cat\":\"decomposition\"") != std::string::npos, text);
  size_t complete = 0;
  for (size_t at = text.find("\"ph\":\"X\""); at != std::string::npos; at = text.find("\"ph\":\"X\"", at + 1)) ++complete;
  CHECK(complete == spans);
  rt.start_trace();
  rt.run1(sqrt_op, {&x});
  CHECK(rt.stop_trace() == 1);
  rt.start_trace();
  CHECK_THROWS(rt.stop_trace("/tmp/devplug-no-such-folder/t.json"), DP_NOT_FOUND,
               std::vector<std::string>({"devplug-no-such-folder"}));
  CHECK(rt.stop_trace() == 0);  // stopped by the failed call
}

void test_sim_fallback() {
  section("SIM with kernels=0: soft placement to the CPU, strict mode as DP_NOT_FOUND");
  devplug::Runtime rt = make_runtime();
  try {
    rt.load_plugin(kSim, {"kernels=0"});
  } catch (const devplug::Error& e) {
    report(false, __FILE__, __LINE__, std::string("loading SIM: ") + e.what());
    return;
  }
  devplug::Device sim = rt.device("SIM:0"), cpu = rt.device("CPU:0");
  auto log = std::make_shared<std::vector<Event>>();
  rt.set_placement_callback([log](const dp_placement_event_t& e) {
    log->push_back(Event{e.op, e.device, e.reason, e.detail});
  });
  auto x = devplug::Tensor::from_vector<float>(sim, {2, 2}, {1, 2, 3, 4});
  devplug::RunOptions on_sim;
  on_sim.device = sim;
  devplug::Tensor y = rt.run1(rt.op("Mul"), {&x, &x}, nullptr, on_sim);
  CHECK(y.device().get() == cpu.get());
  CHECK_VALUES(y, devplug::Shape({2, 2}), std::vector<float>({1, 4, 9, 16}), 0);
  CHECK_MSG(has_event(*log, "Mul", "HOST:0", "soft-placed"), dump(*log));
  on_sim.soft_placement = DP_SOFT_PLACEMENT_OFF;
  CHECK_THROWS(rt.run1(rt.op("Mul"), {&x, &x}, nullptr, on_sim), DP_NOT_FOUND,
               std::vector<std::string>({"Mul", "SIM:0", "strict", "CPU bound to HOST"}));
}

// ---- the MLP ----

struct Mlp {
  int batch, in, hidden, out;
  std::vector<float> x, w1, b1, w2, b2;
};

Mlp make_mlp() {
  Mlp m{4, 3, 5, 2, {}, {}, {}, {}, {}};
  auto gen = [](size_t n, float scale, float shift) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>((i * 37 + 11) % 17) - 8) + shift;
    return v;
  };
  m.x = gen(static_cast<size_t>(m.batch * m.in), 0.25f, 0.1f);
  m.w1 = gen(static_cast<size_t>(m.in * m.hidden), 0.125f, -0.05f);
  m.b1 = gen(static_cast<size_t>(m.hidden), 0.1f, 0.0f);
  m.w2 = gen(static_cast<size_t>(m.hidden * m.out), 0.2f, 0.03f);
  m.b2 = gen(static_cast<size_t>(m.out), 0.3f, 0.0f);
  return m;
}

std::vector<double> mlp_reference(const Mlp& m) {
  std::vector<double> h(static_cast<size_t>(m.batch * m.hidden)), logits(static_cast<size_t>(m.batch * m.out));
  for (int b = 0; b < m.batch; ++b)
    for (int j = 0; j < m.hidden; ++j) {
      double acc = m.b1[j];
      for (int k = 0; k < m.in; ++k) acc += static_cast<double>(m.x[b * m.in + k]) * m.w1[k * m.hidden + j];
      h[b * m.hidden + j] = acc > 0 ? acc : 0;
    }
  for (int b = 0; b < m.batch; ++b)
    for (int j = 0; j < m.out; ++j) {
      double acc = m.b2[j];
      for (int k = 0; k < m.hidden; ++k) acc += h[b * m.hidden + k] * m.w2[k * m.out + j];
      logits[b * m.out + j] = acc;
    }
  std::vector<double> probs(logits.size());
  for (int b = 0; b < m.batch; ++b) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < m.out; ++j) mx = std::max(mx, logits[b * m.out + j]);
    for (int j = 0; j < m.out; ++j) s += std::exp(logits[b * m.out + j] - mx);
    for (int j = 0; j < m.out; ++j) probs[b * m.out + j] = std::exp(logits[b * m.out + j] - mx) / s;
  }
  return probs;
}

devplug::Tensor mlp_forward(devplug::Runtime& rt, const devplug::Device& dev, const Mlp& m,
                            const devplug::RunOptions& opt) {
  using devplug::Tensor;
  const devplug::Op matmul = rt.op("MatMul"), add = rt.op("Add"), relu = rt.op("Relu"), softmax = rt.op("Softmax");
  Tensor x = Tensor::from_vector<float>(dev, {m.batch, m.in}, m.x);
  Tensor w1 = Tensor::from_vector<float>(dev, {m.in, m.hidden}, m.w1);
  Tensor b1 = Tensor::from_vector<float>(dev, {m.hidden}, m.b1);
  Tensor w2 = Tensor::from_vector<float>(dev, {m.hidden, m.out}, m.w2);
  Tensor b2 = Tensor::from_vector<float>(dev, {m.out}, m.b2);
  Tensor h = rt.run1(matmul, {&x, &w1}, nullptr, opt);
  h = rt.run1(add, {&h, &b1}, nullptr, opt);
  h = rt.run1(relu, {&h}, nullptr, opt);
  Tensor logits = rt.run1(matmul, {&h, &w2}, nullptr, opt);
  logits = rt.run1(add, {&logits, &b2}, nullptr, opt);
  auto last = devplug::Attrs().set("axis", -1);
  return rt.run1(softmax, {&logits}, &last, opt);
}

void check_mlp(const devplug::Tensor& probs, const Mlp& m, const char* where) {
  const std::vector<double> ref = mlp_reference(m);
  std::vector<float> want(ref.begin(), ref.end());
  check_values(probs, devplug::Shape({m.batch, m.out}), want, 1e-5, where, __FILE__, __LINE__);
  if (probs && probs.dtype() == devplug::DType::F32) {
    const std::vector<float> got = probs.to_vector<float>();
    for (int b = 0; b < m.batch && got.size() == ref.size(); ++b) {
      double s = 0;
      for (int j = 0; j < m.out; ++j) s += got[b * m.out + j];
      CHECK_MSG(std::fabs(s - 1.0) < 1e-5, std::string(where) + ": row " + std::to_string(b) + " sums to " + std::to_string(s));
    }
  }
}

void test_mlp() {
  const Mlp m = make_mlp();
  {
    section("2-layer MLP forward on the CPU (f32) against a C++ reference");
    devplug::Runtime rt = make_runtime();
    try {
      check_mlp(mlp_forward(rt, rt.device("CPU:0"), m, devplug::RunOptions()), m, "MLP on the CPU");
    } catch (const devplug::Error& e) {
      report(false, __FILE__, __LINE__, std::string("MLP on the CPU threw ") + e.what());
    }
  }
  {
    section("the same MLP on SIM (its default kernels, falling back where it has none)");
    devplug::Runtime rt = make_runtime();
    try {
      rt.load_plugin(kSim);
      devplug::Device sim = rt.device("SIM:0");
      devplug::RunOptions on_sim;
      on_sim.device = sim;
      check_mlp(mlp_forward(rt, sim, m, on_sim), m, "MLP on SIM");
    } catch (const devplug::Error& e) {
      report(false, __FILE__, __LINE__, std::string("MLP on SIM threw ") + e.what());
    }
  }
  {
    section("the same MLP on SIM with kernels=0 (everything decomposed or soft-placed)");
    devplug::Runtime rt = make_runtime();
    try {
      rt.load_plugin(kSim, {"kernels=0"});
      devplug::RunOptions on_sim;
      on_sim.device = rt.device("SIM:0");
      check_mlp(mlp_forward(rt, on_sim.device, m, on_sim), m, "MLP on SIM without kernels");
    } catch (const devplug::Error& e) {
      report(false, __FILE__, __LINE__, std::string("MLP on SIM (kernels=0) threw ") + e.what());
    }
  }
}

}  // namespace

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// devplug::f16 and devplug::bf16 convert exactly as the runtime's Cast does: every encoding
// into float, and a sweep of float encodings (every 4093rd, all exponents, both signs, and the
// rounding boundaries) into each; NaN only as NaN (payloads may differ). Then ops on them.
void test_halves() {
  section("f16 and bf16: conversions agree with Cast bit for bit; ops, errors");
  devplug::Runtime rt = make_runtime();
  devplug::Device cpu = rt.device("CPU:0");
  const devplug::Op cast = rt.op("Cast");
  auto to = [&](devplug::DType d) { return devplug::Attrs().set("dtype", d); };

  std::vector<devplug::f16> every_f16(65536);
  std::vector<devplug::bf16> every_bf16(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    every_f16[i] = devplug::f16::from_bits(static_cast<uint16_t>(i));
    every_bf16[i] = devplug::bf16::from_bits(static_cast<uint16_t>(i));
  }
  auto h = devplug::Tensor::from_vector<devplug::f16>(cpu, {65536}, every_f16);
  auto b = devplug::Tensor::from_vector<devplug::bf16>(cpu, {65536}, every_bf16);
  auto f32 = to(devplug::DType::F32);
  const std::vector<float> h_wide = rt.run1(cast, {&h}, &f32).to_vector<float>();
  const std::vector<float> b_wide = rt.run1(cast, {&b}, &f32).to_vector<float>();
  size_t bad_h = 0, bad_b = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const float mh = float(every_f16[i]), mb = float(every_bf16[i]);
    bad_h += !(std::isnan(mh) ? std::isnan(h_wide[i]) : std::memcmp(&mh, &h_wide[i], 4) == 0);
    bad_b += !(std::isnan(mb) ? std::isnan(b_wide[i]) : std::memcmp(&mb, &b_wide[i], 4) == 0);
  }
  CHECK_MSG(bad_h == 0, std::to_string(bad_h) + " f16 encodings widen differently");
  CHECK_MSG(bad_b == 0, std::to_string(bad_b) + " bf16 encodings widen differently");

  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4093) xs.push_back(float_of_bits(static_cast<uint32_t>(u)));
  for (float x : {65504.0f, 65519.996f, 65520.0f, 5.9604645e-8f, 2.9802322e-8f, 4.4703484e-8f, -0.0f,
                  1.00048828125f, 1.00146484375f, 3.0e38f, 1.0f / 3.0f})
    xs.push_back(x);
  auto x = devplug::Tensor::from_vector<float>(cpu, {static_cast<int64_t>(xs.size())}, xs);
  auto as_f16 = to(devplug::DType::F16);
  auto as_bf16 = to(devplug::DType::BF16);
  const std::vector<devplug::f16> hs = rt.run1(cast, {&x}, &as_f16).to_vector<devplug::f16>();
  const std::vector<devplug::bf16> bs = rt.run1(cast, {&x}, &as_bf16).to_vector<devplug::bf16>();
  bad_h = bad_b = 0;
  std::string first;
  for (size_t i = 0; i < xs.size(); ++i) {
    const devplug::f16 mh(xs[i]);
    const devplug::bf16 mb(xs[i]);
    const bool nan = std::isnan(xs[i]);
    const bool ok_h = nan ? std::isnan(float(hs[i])) && std::isnan(float(mh)) : mh.bits == hs[i].bits;
    const bool ok_b = nan ? std::isnan(float(bs[i])) && std::isnan(float(mb)) : mb.bits == bs[i].bits;
    if (!ok_h && first.empty())
      first = "f16(" + std::to_string(xs[i]) + "): " + std::to_string(mh.bits) + " vs Cast's " + std::to_string(hs[i].bits);
    bad_h += !ok_h;
    bad_b += !ok_b;
  }
  CHECK_MSG(bad_h == 0, std::to_string(bad_h) + " floats round to f16 differently; first " + first);
  CHECK_MSG(bad_b == 0, std::to_string(bad_b) + " floats round to bf16 differently");
  CHECK(devplug::f16(65520.0f).bits == 0x7C00 && devplug::f16(65519.996f).bits == 0x7BFF);
  CHECK(devplug::bf16(1.0f / 3.0f).bits == 0x3EAB);

  // From a double, one rounding, as Cast from f64 rounds: doubles of every exponent a half
  // reaches, with low bits set (where rounding through float to nearest would make a tie of a
  // value just off one), and values just off the ties.
  std::vector<double> ds;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; ++i) {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    const uint64_t r = state * 0x2545f4914f6cdd1dull;
    const uint64_t exponent = 1023 - 30 + (r >> 58);  // 2^-30 ... 2^33
    const uint64_t bits = (r & 0x8000000000000000ull) | (exponent << 52) | (r & 0x000fffffffffffffull);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    ds.push_back(d);
  }
  const double tiny = 9.094947017729282e-13;  // 2^-40
  for (double d : {1.0 + 1.0 / 2048 + tiny, 1.0 + 1.0 / 2048 - tiny, 1.0 + 1.0 / 2048, -(1.0 + 1.0 / 2048 + tiny),
                   1.0 + 1.0 / 256 + tiny, 1.0 + 1.0 / 256, 65520.0 - tiny * 1e6, 65520.0, 1e300, -1e300, 1e-300,
                   5.960464477539063e-08 / 2 + tiny * 1e-20, 0.1, 1.0 / 3.0})
    ds.push_back(d);
  auto dt = devplug::Tensor::from_vector<double>(cpu, {static_cast<int64_t>(ds.size())}, ds);
  const std::vector<devplug::f16> dhs = rt.run1(cast, {&dt}, &as_f16).to_vector<devplug::f16>();
  const std::vector<devplug::bf16> dbs = rt.run1(cast, {&dt}, &as_bf16).to_vector<devplug::bf16>();
  bad_h = bad_b = 0;
  first.clear();
  for (size_t i = 0; i < ds.size(); ++i) {
    const devplug::f16 mh(ds[i]);
    if (mh.bits != dhs[i].bits && first.empty())
      first = std::to_string(ds[i]) + ": " + std::to_string(mh.bits) + " vs Cast's " + std::to_string(dhs[i].bits);
    bad_h += mh.bits != dhs[i].bits;
    bad_b += devplug::bf16(ds[i]).bits != dbs[i].bits;
  }
  CHECK_MSG(bad_h == 0, std::to_string(bad_h) + " doubles round to f16 differently from Cast; first " + first);
  CHECK_MSG(bad_b == 0, std::to_string(bad_b) + " doubles round to bf16 differently from Cast");
  // Just above a tie: through float to nearest it would be the tie, and round down to even.
  const double above = 1.0 + 1.0 / 2048 + tiny;
  CHECK(devplug::f16(above).bits == 0x3C01 && devplug::f16(static_cast<float>(above)).bits == 0x3C00);
  CHECK(devplug::bf16(1.0 + 1.0 / 256 + tiny).bits == 0x3F81 && devplug::bf16(1.0 + 1.0 / 256).bits == 0x3F80);
  CHECK(devplug::f16(0.1).bits == 0x2E66 && devplug::f16(3).bits == devplug::f16(3.0f).bits);
  CHECK(devplug::bf16(-2).bits == 0xC000 && devplug::f16(1e300).bits == 0x7C00);

  // Ops: exact results, a product accumulated in f32, errors.
  using devplug::f16;
  auto a = devplug::Tensor::from_vector<f16>(cpu, {3}, {f16(1.5f), f16(-2.0f), f16(0.25f)});
  CHECK_VALUES(rt.run1(rt.op("Add"), {&a, &a}), devplug::Shape({3}), std::vector<f16>({f16(3.0f), f16(-4.0f), f16(0.5f)}),
               0);
  std::vector<devplug::bf16> ones(600, devplug::bf16(1.0f));
  auto row = devplug::Tensor::from_vector<devplug::bf16>(cpu, {1, 600}, ones);
  auto col = devplug::Tensor::from_vector<devplug::bf16>(cpu, {600, 1}, ones);
  CHECK_VALUES(rt.run1(rt.op("MatMul"), {&row, &col}), devplug::Shape({1, 1}),
               std::vector<devplug::bf16>({devplug::bf16(600.0f)}), 0);
  auto f = devplug::Tensor::from_vector<float>(cpu, {3}, {1, 2, 3});
  CHECK_THROWS(rt.run1(rt.op("Add"), {&a, &f}), DP_INVALID_ARGUMENT, {"Add"});
  CHECK_THROWS(a.to_vector<float>(), DP_INVALID_ARGUMENT, {"f16"});
  CHECK(devplug::dtype_of<f16>() == devplug::DType::F16 && devplug::dtype_size(devplug::DType::BF16) == 2);
  CHECK(std::string(devplug::dtype_name(devplug::DType::BF16)) == "bf16");
}

int main() {
  try {
    test_basics();
    test_errors();
    test_register_op();
    test_placement_callback();
    test_trace();
    test_sim_fallback();
    test_mlp();
    test_halves();
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary(__FILE__);
}
