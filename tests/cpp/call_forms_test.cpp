// The call forms of the C++ wrapper a C++ framework writes without thinking (found by a C++
// framework author's trial), each checked at compile time (static_asserts over detection
// idioms, and the calls themselves, which must compile) and at run time:
// - Attrs::set: any integer type sets an int (`1LL`, `size_t`, `unsigned`, `int8_t`; an
//   unsigned value beyond INT64_MAX throws, naming the attribute), braces are an int list
//   (`{1}`, `{0, 1}`, `{}`), any range of integers is one (`std::vector<int>`,
//   `std::array<long long, N>`, a C array, `span`), a character does not compile;
// - Runtime::run / run1 inputs as `{x, y}`, `{&x, &y}`, mixed, temporaries, `std::vector<Tensor>`,
//   `std::vector<const Tensor*>`, `std::array<Tensor, N>`, `{}`; attributes by reference or
//   pointer; options without attributes (`RunOptions{device}`, `RunOptions::strict(device)`,
//   `SoftPlacement::Off`); the same for Graph::op / op1 (attributes by reference, a device
//   alone) and Graph::run's feeds (`{{x, t}}`, `{{x, &t}}`, temporaries, the old pair list);
// - the placement callback as `std::function<void(const PlacementEvent&)>`: C++ strings, a
//   `PlacementReason` for every reason, events kept after the call, an old library's event
//   without `reason_code`; a generic lambda does not compile (it fits both overloads);
// - `Tensor::to_vector<long long>()` / `from_vector<long long>` (and `long`): the 64-bit integer
//   types that are not `int64_t` map to `DType::I64`.
// Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "attrs_traits.hpp"
#include "counting_check.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// ---- compile time ----

// Attrs::set, on an lvalue and on a temporary (attrs_traits.hpp).

static_assert(can_set<long long>::value && can_set<unsigned long long>::value && can_set<size_t>::value &&
                  can_set<unsigned>::value && can_set<short>::value && can_set<int8_t>::value &&
                  can_set<uint8_t>::value && can_set<long>::value && can_set<const long long&>::value,
              "every integer type sets an int attribute");
static_assert(can_set_temporary<long long>::value && can_set_temporary<size_t>::value,
              "... on a temporary too");
static_assert(!can_set<char>::value && !can_set<wchar_t>::value && !can_set<char16_t>::value &&
                  !can_set<char32_t>::value && !can_set_temporary<char>::value,
              "a character is neither an int nor a string attribute: it does not compile");
static_assert(can_set<std::vector<int>>::value && can_set<std::vector<long long>>::value &&
                  can_set<std::vector<size_t>>::value && can_set<std::array<int64_t, 3>>::value &&
                  can_set<std::array<int, 2>>::value && can_set<const int (&)[2]>::value &&
                  can_set<devplug::span<const int64_t>>::value && can_set<std::initializer_list<int>>::value &&
                  can_set_temporary<std::vector<int>>::value,
              "a range of integers is an int list");
static_assert(!can_set<std::vector<bool>>::value && !can_set<std::vector<char>>::value &&
                  !can_set<std::vector<double>>::value && !can_set<std::vector<std::string>>::value,
              "a range of anything else is not");
static_assert(can_set<bool>::value && can_set<double>::value && can_set<float>::value &&
                  can_set<devplug::DType>::value && can_set<const char*>::value && can_set<std::string>::value &&
                  can_set<std::string_view>::value,
              "the other kinds stay");

// Runtime::run1 with the attributes and options in each form.
template <class A, class O, class = void>
struct can_run1 : std::false_type {};
template <class A, class O>
struct can_run1<A, O, std::void_t<decltype(std::declval<devplug::Runtime&>().run1(
                          std::declval<const devplug::Op&>(), devplug::Inputs(), std::declval<A>(), std::declval<O>()))>>
    : std::true_type {};
static_assert(can_run1<const devplug::Attrs*, devplug::RunOptions>::value &&
                  can_run1<std::nullptr_t, devplug::RunOptions>::value &&
                  can_run1<const devplug::Attrs&, devplug::RunOptions>::value &&
                  can_run1<devplug::Attrs&, devplug::RunOptions>::value &&
                  can_run1<devplug::Attrs&&, devplug::RunOptions>::value,
              "attributes by pointer (nullptr for none) or by reference");
template <class T, class = void>
struct can_run1_with : std::false_type {};
template <class T>
struct can_run1_with<T, std::void_t<decltype(std::declval<devplug::Runtime&>().run1(
                            std::declval<const devplug::Op&>(), devplug::Inputs(), std::declval<T>()))>>
    : std::true_type {};
static_assert(can_run1_with<devplug::RunOptions>::value && can_run1_with<const devplug::RunOptions&>::value,
              "options alone, without attributes");

// Inputs from ranges.
static_assert(std::is_convertible<const std::vector<devplug::Tensor>&, devplug::Inputs>::value &&
                  std::is_convertible<const std::vector<const devplug::Tensor*>&, devplug::Inputs>::value &&
                  std::is_convertible<const std::vector<devplug::Tensor*>&, devplug::Inputs>::value &&
                  std::is_convertible<const std::array<devplug::Tensor, 2>&, devplug::Inputs>::value,
              "a range of tensors or of pointers to them is an input list");
static_assert(!std::is_convertible<const std::vector<int>&, devplug::Inputs>::value &&
                  !std::is_convertible<const devplug::Tensor&, devplug::Inputs>::value,
              "other things are not");

// The placement callback: a function of the C++ event or of the C one; nullptr removes it; a
// generic lambda fits both and does not compile.
template <class F, class = void>
struct can_install : std::false_type {};
template <class F>
struct can_install<F, std::void_t<decltype(std::declval<devplug::Runtime&>().set_placement_callback(std::declval<F>()))>>
    : std::true_type {};
const auto takes_cpp_event = [](const devplug::PlacementEvent&) {};
const auto takes_c_event = [](const dp_placement_event_t&) {};
const auto takes_either = [](const auto&) -> void {};
static_assert(can_install<decltype(takes_cpp_event)>::value && can_install<decltype(takes_c_event)>::value &&
                  can_install<std::function<void(const devplug::PlacementEvent&)>>::value &&
                  can_install<std::function<void(const dp_placement_event_t&)>>::value &&
                  can_install<std::nullptr_t>::value,
              "either event type; nullptr removes");
static_assert(!can_install<decltype(takes_either)>::value, "a generic lambda is ambiguous: name the event type");
static_assert(static_cast<int32_t>(devplug::PlacementReason::Explicit) == DP_PLACEMENT_EXPLICIT &&
                  static_cast<int32_t>(devplug::PlacementReason::Default) == DP_PLACEMENT_DEFAULT &&
                  static_cast<int32_t>(devplug::PlacementReason::Scope) == DP_PLACEMENT_SCOPE &&
                  static_cast<int32_t>(devplug::PlacementReason::Setter) == DP_PLACEMENT_SETTER &&
                  static_cast<int32_t>(devplug::PlacementReason::Decomposed) == DP_PLACEMENT_DECOMPOSED &&
                  static_cast<int32_t>(devplug::PlacementReason::SoftPlaced) == DP_PLACEMENT_SOFT_PLACED &&
                  static_cast<int32_t>(devplug::PlacementReason::InputCopied) == DP_PLACEMENT_INPUT_COPIED,
              "PlacementReason is the C codes");

// Soft placement under C++ names, assignable where the C values are.
static_assert(devplug::SoftPlacement::Default == DP_SOFT_PLACEMENT_DEFAULT &&
                  devplug::SoftPlacement::Off == DP_SOFT_PLACEMENT_OFF &&
                  devplug::SoftPlacement::On == DP_SOFT_PLACEMENT_ON,
              "SoftPlacement is the C values");
static_assert(std::is_assignable<int32_t&, devplug::SoftPlacement::Mode>::value &&
                  std::is_same<decltype(devplug::RunOptions::soft_placement), int32_t>::value,
              "RunOptions::soft_placement takes SoftPlacement and the C constants alike");

// Element types: the 64-bit integers that are not int64_t map to I64.
static_assert(devplug::dtype_of<long long>() == devplug::DType::I64 &&
                  devplug::dtype_of<const long long>() == devplug::DType::I64 &&
                  devplug::dtype_of<int64_t>() == devplug::DType::I64,
              "long long is I64");
static_assert(devplug::dtype_of<long>() == (sizeof(long) == 8 ? devplug::DType::I64 : devplug::DType::I32),
              "long is the integer dtype of its size");

// ---- run time ----

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <class T>
bool values(const devplug::Tensor& t, const devplug::Shape& shape, const std::vector<T>& want) {
  return t && t.shape() == shape && t.to_vector<T>() == want;
}

void attrs_forms(devplug::Runtime& rt) {
  section("Attrs::set: integers of any type, braces and ranges as int lists, range errors");
  const devplug::Device cpu = rt.device("CPU:0");
  const devplug::Op iota = rt.op("Iota"), fill = rt.op("Fill"), sum = rt.op("ReduceSum");
  devplug::Attrs a;
  a.set("shape", {2, 3}).set("axis", 1LL).set("dtype", devplug::DType::I32);
  CHECK(values(rt.run1(iota, {}, a), {2, 3}, std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  a.set("axis", size_t{0});
  CHECK(values(rt.run1(iota, {}, a), {2, 3}, std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  a.set("axis", static_cast<int8_t>(-1)).set("shape", std::vector<int>{3});
  CHECK(values(rt.run1(iota, {}, a), {3}, std::vector<int32_t>{0, 1, 2}));
  a.set("axis", 0u).set("shape", std::array<long long, 2>{1, 2});
  CHECK(values(rt.run1(iota, {}, a), {1, 2}, std::vector<int32_t>{0, 0}));
  const int64_t dims[] = {2, 1};
  a.set("shape", dims);
  CHECK(values(rt.run1(iota, {}, a), {2, 1}, std::vector<int32_t>{0, 1}));
  const std::vector<int64_t> kept{1, 3};
  a.set("shape", devplug::span<const int64_t>(kept.data(), kept.size())).set("axis", static_cast<unsigned short>(1));
  CHECK(values(rt.run1(iota, {}, a), {1, 3}, std::vector<int32_t>{0, 1, 2}));
  a.set("shape", std::vector<size_t>{2}).set("axis", 0L);
  CHECK(values(rt.run1(iota, {}, a), {2}, std::vector<int32_t>{0, 1}));

  // Braces: an int list, of one element too, and empty.
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu, {2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(values(rt.run1(sum, {x}, devplug::Attrs().set("axes", {1})), {2}, std::vector<float>{6, 15}));
  CHECK(values(rt.run1(sum, {x}, devplug::Attrs().set("axes", {0, 1}).set("keep_dims", true)), {1, 1},
               std::vector<float>{21}));
  devplug::Attrs scalar;
  scalar.set("shape", {}).set("value", 2.5).set("dtype", devplug::DType::F64);
  CHECK(values(rt.run1(fill, {}, scalar), {}, std::vector<double>{2.5}));
  CHECK(values(rt.run1(fill, {}, devplug::Attrs().set("shape", {}).set("value", 1.5f).set("dtype", devplug::DType::F32)),
               {}, std::vector<float>{1.5f}));

  // An unsigned value beyond INT64_MAX: an Error naming the attribute (and the element).
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  auto e = error_of([&] { a.set("axis", huge); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "'axis'") && contains(e.second, "18446744073709551615"),
            e.second);
  e = error_of([&] { a.set("axis", size_t{1} << 63); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "'axis'"), e.second);
  e = error_of([&] { devplug::Attrs().set("shape", std::vector<uint64_t>{1, huge}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "'shape'[1]"), e.second);
  CHECK(error_of([&] { a.set("axis", uint64_t{std::numeric_limits<int64_t>::max()}); }).first == DP_OK);
}

void input_forms(devplug::Runtime& rt) {
  section("Runtime::run inputs: by reference, by pointer, temporaries, containers, {}");
  const devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1");
  const devplug::Op add = rt.op("Add"), relu = rt.op("Relu"), fill = rt.op("Fill");
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu0, {3}, {1, -2, 3});
  devplug::Tensor b = devplug::Tensor::from_vector<float>(cpu0, {3}, {-4, 1, 1});
  const std::vector<float> sum{-3, -1, 4};
  CHECK(values(rt.run1(add, {x, b}), {3}, sum));
  CHECK(values(rt.run1(add, {&x, &b}), {3}, sum));
  CHECK(values(rt.run1(add, {x, &b}), {3}, sum));
  CHECK(values(rt.run(add, {x, b}).at(0), {3}, sum));
  CHECK(values(rt.run("Add", {x, b}).at(0), {3}, sum));
  // a temporary lives to the end of the full expression, the outer run included
  CHECK(values(rt.run1(relu, {rt.run1(add, {x, b})}), {3}, std::vector<float>{0, 0, 4}));
  CHECK(values(rt.run1(add, {rt.run1(relu, {x}), devplug::Tensor::from_vector<float>(cpu0, {3}, {1, 1, 1})}), {3},
               std::vector<float>{2, 1, 4}));
  const std::vector<devplug::Tensor> tensors{x, b};
  CHECK(values(rt.run1(add, tensors), {3}, sum));
  const std::vector<const devplug::Tensor*> pointers{&x, &b};
  CHECK(values(rt.run1(add, pointers), {3}, sum));
  const std::vector<devplug::Tensor*> mutable_pointers{&b, &b};
  CHECK(values(rt.run1(add, mutable_pointers), {3}, std::vector<float>{-8, 2, 2}));
  const std::array<devplug::Tensor, 2> pair{x, x};
  CHECK(values(rt.run1(add, pair), {3}, std::vector<float>{2, -4, 6}));
  devplug::Attrs f;
  f.set("shape", {2}).set("value", 7.0).set("dtype", devplug::DType::F32);
  CHECK(values(rt.run1(fill, {}, f), {2}, std::vector<float>{7, 7}));
  CHECK(values(rt.run1(fill, {}, &f), {2}, std::vector<float>{7, 7}));
  // Past eight inputs the list goes to the heap; every handle stays in order.
  std::vector<devplug::Tensor> many;
  for (int i = 0; i < 12; ++i) many.push_back(devplug::Tensor::from_vector<float>(cpu0, {1}, {float(i)}));
  const devplug::Inputs in(many);
  bool in_order = in.size() == 12;
  for (size_t i = 0; in_order && i < many.size(); ++i) in_order = in.data()[i] == many[i].get();
  CHECK(in_order);
  const devplug::Inputs braces = {many[0], &many[1], many[2], many[3], many[4], many[5], many[6], many[7], many[8]};
  CHECK(braces.size() == 9 && braces.data()[8] == many[8].get() && braces.data()[1] == many[1].get());
  CHECK(devplug::Inputs().size() == 0);
  // A null pointer or an empty tensor: the C library names the input.
  auto e = error_of([&] { rt.run1(add, {x, nullptr}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "inputs[1]") && contains(e.second, "NULL"), e.second);
  e = error_of([&] { rt.run1(add, {static_cast<const devplug::Tensor*>(nullptr), &x}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "inputs[0]"), e.second);
  const std::vector<const devplug::Tensor*> with_null{&x, nullptr};
  e = error_of([&] { rt.run1(add, with_null); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "inputs[1]"), e.second);

  section("Runtime::run attributes by reference, options without attributes");
  const devplug::Op reduce = rt.op("ReduceSum");
  const devplug::Tensor m = devplug::Tensor::from_vector<float>(cpu0, {2, 2}, {1, 2, 3, 4});
  devplug::Attrs rows;
  rows.set("axes", {1});
  CHECK(values(rt.run1(reduce, {m}, rows), {2}, std::vector<float>{3, 7}));
  const devplug::Attrs& const_rows = rows;
  CHECK(values(rt.run1(reduce, {m}, const_rows, devplug::RunOptions{cpu1}), {2}, std::vector<float>{3, 7}));
  CHECK(rt.run1(reduce, {m}, rows, devplug::RunOptions{cpu1}).device() == cpu1);
  CHECK(rt.run(reduce, {m}, rows).at(0).device() == cpu0);
  CHECK(rt.run("ReduceSum", {m}, rows, devplug::RunOptions{cpu1}).at(0).device() == cpu1);
  CHECK(rt.run1(add, {x, b}, devplug::RunOptions{cpu1}).device() == cpu1);
  CHECK(rt.run1(add, {x, b}, {cpu1}).device() == cpu1);
  CHECK(rt.run(add, {x, b}, devplug::RunOptions{cpu1}).at(0).device() == cpu1);
  CHECK(rt.run("Add", {x, b}, devplug::RunOptions::strict(cpu1)).at(0).device() == cpu1);
  CHECK(rt.run1(add, {x, b}, nullptr, devplug::RunOptions{cpu1}).device() == cpu1);
  const devplug::RunOptions strict = devplug::RunOptions::strict(cpu1);
  CHECK(strict.device == cpu1 && strict.soft_placement == DP_SOFT_PLACEMENT_OFF);
  CHECK(devplug::RunOptions::strict().device == devplug::Device());
  devplug::RunOptions o;
  CHECK(o.soft_placement == devplug::SoftPlacement::Default);
  o.soft_placement = devplug::SoftPlacement::On;
  CHECK(o.soft_placement == DP_SOFT_PLACEMENT_ON);
  o.soft_placement = DP_SOFT_PLACEMENT_OFF;  // the C constants still assign
  CHECK(o.soft_placement == devplug::SoftPlacement::Off);
  CHECK(values(rt.run1(add, {x, b}, o), {3}, sum));
}

void sim_strict(const std::string& sim_path) {
  section("RunOptions::strict on SIM with kernels=0: DP_NOT_FOUND; soft placement: the CPU");
  devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
  rt.load_plugin(sim_path, {"kernels=0"});
  const devplug::Device sim = rt.device("SIM:0"), cpu = rt.device("CPU:0");
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(sim, {2}, {1, 2});
  std::vector<devplug::PlacementEvent> log;
  rt.set_placement_callback([&log](const devplug::PlacementEvent& e) { log.push_back(e); });
  CHECK(rt.run1(rt.op("Mul"), {x, x}, devplug::RunOptions{sim}).device() == cpu);
  bool soft_placed = false;
  for (const devplug::PlacementEvent& e : log)
    soft_placed = soft_placed || (e.op == "Mul" && e.reason == devplug::PlacementReason::SoftPlaced &&
                                  e.reason_name == "soft-placed" && e.device == "HOST:0");
  CHECK(soft_placed);
  auto e = error_of([&] { rt.run1(rt.op("Mul"), {x, x}, devplug::RunOptions::strict(sim)); });
  CHECK_MSG(e.first == DP_NOT_FOUND && contains(e.second, "strict"), e.second);
  devplug::RunOptions off{sim};
  off.soft_placement = devplug::SoftPlacement::Off;
  CHECK(error_of([&] { rt.run1(rt.op("Mul"), {x, x}, off); }).first == DP_NOT_FOUND);
  // Graph::run takes SoftPlacement too
  devplug::Graph g;
  const devplug::GraphOutput p = g.placeholder("p", devplug::DType::F32, {2});
  const devplug::GraphOutput y = g.op1(rt, "y", rt.op("Mul"), {p, p}, sim);
  CHECK(error_of([&] { g.run(rt, {{p, x}}, {y}, devplug::SoftPlacement::Off); }).first == DP_NOT_FOUND);
  CHECK(values(g.run(rt, {{p, x}}, {y}, devplug::SoftPlacement::On).at(0), {2}, std::vector<float>{1, 4}));
}

void graph_forms(devplug::Runtime& rt) {
  section("Graph: feeds by reference, pointer, temporary, pair list; op attributes by reference; a device alone");
  const devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1");
  devplug::Graph g;
  const devplug::GraphOutput p = g.placeholder("p", devplug::DType::F32, {2, 2});
  devplug::Attrs rows;
  rows.set("axes", {1});
  const devplug::GraphOutput s = g.op1(rt, "s", rt.op("ReduceSum"), {p}, rows);
  const devplug::GraphOutput s1 = g.op1(rt, "s1", rt.op("ReduceSum"), {p}, rows, cpu1);
  const devplug::GraphOutput n = g.op1(rt, "n", rt.op("Neg"), {p}, cpu1);
  const std::vector<devplug::GraphOutput> all = g.op(rt, "n2", rt.op("Neg"), {p}, cpu1);
  CHECK(all.size() == 1);
  const devplug::Tensor t = devplug::Tensor::from_vector<float>(cpu0, {2, 2}, {1, 2, 3, 4});
  CHECK(values(g.run(rt, {{p, t}}, {s}).at(0), {2}, std::vector<float>{3, 7}));
  CHECK(values(g.run(rt, {{p, &t}}, {s}).at(0), {2}, std::vector<float>{3, 7}));
  CHECK(values(g.run(rt, {{p, devplug::Tensor::from_vector<float>(cpu0, {2, 2}, {0, 1, 0, 1})}}, {s}).at(0), {2},
               std::vector<float>{1, 1}));
  const std::vector<std::pair<devplug::GraphOutput, const devplug::Tensor*>> pairs{{p, &t}};
  const std::vector<devplug::Tensor> out = g.run(rt, pairs, {s1, n});
  CHECK(out.size() == 2 && out[0].device() == cpu1 && out[1].device() == cpu1);
  CHECK(out.size() == 2 && values(out[1], {2, 2}, std::vector<float>{-1, -2, -3, -4}));
  auto e = error_of([&] { g.run(rt, {{p, nullptr}}, {s}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "NULL"), e.second);
}

void placement_events(devplug::Runtime& rt) {
  section("the placement callback with PlacementEvent: every reason, kept after the call");
  const devplug::Device cpu0 = rt.device("CPU:0"), cpu1 = rt.device("CPU:1");
  std::vector<devplug::PlacementEvent> log;
  rt.set_placement_callback([&log](const devplug::PlacementEvent& e) { log.push_back(e); });
  const auto has = [&log](const char* op, const char* device, devplug::PlacementReason reason, const char* detail) {
    for (const devplug::PlacementEvent& e : log)
      if (e.op == op && e.device == device && e.reason == reason && e.reason_name == devplug::placement_reason_name(reason) &&
          contains(e.detail, detail))
        return true;
    return false;
  };
  const auto dump = [&log] {
    std::string s;
    for (const devplug::PlacementEvent& e : log)
      s += "\n    " + e.op + " on " + e.device + ": " + e.reason_name + " (" + e.detail + ")";
    return s;
  };
  const devplug::Tensor x = devplug::Tensor::from_vector<double>(cpu0, {2}, {1, 2});
  const devplug::Tensor x1 = devplug::Tensor::from_vector<double>(cpu1, {2}, {1, 2});
  rt.run1(rt.op("Neg"), {x});
  CHECK_MSG(has("Neg", "HOST:0", devplug::PlacementReason::Default, "kernel from built-in"), dump());
  rt.run1(rt.op("Neg"), {x}, devplug::RunOptions{cpu1});
  CHECK_MSG(has("Neg", "HOST:1", devplug::PlacementReason::Explicit, "kernel from built-in"), dump());
  CHECK_MSG(has("Neg", "HOST:1", devplug::PlacementReason::InputCopied, "HOST:0"), dump());
  rt.run1(rt.op("Gelu"), {x1}, devplug::RunOptions{cpu1});
  CHECK_MSG(has("Gelu", "HOST:1", devplug::PlacementReason::Decomposed, ""), dump());
  {
    const devplug::DeviceScope scope = rt.device_scope(cpu1);
    const devplug::ScopeGuard in(scope);
    rt.run1(rt.op("Abs"), {x1});
  }
  CHECK_MSG(has("Abs", "HOST:1", devplug::PlacementReason::Scope, ""), dump());
  {
    const devplug::DeviceScope setter = rt.setter_scope([&](const devplug::PlacementQuery&) { return cpu1; });
    const devplug::ScopeGuard in(setter);
    rt.run1(rt.op("Sqrt"), {x1});
  }
  CHECK_MSG(has("Sqrt", "HOST:1", devplug::PlacementReason::Setter, ""), dump());
  CHECK(std::string(devplug::placement_reason_name(devplug::PlacementReason::SoftPlaced)) == "soft-placed");
  CHECK(std::string(devplug::placement_reason_name(devplug::PlacementReason::InputCopied)) == "input copied");
  CHECK(std::string(devplug::placement_reason_name(static_cast<devplug::PlacementReason>(99))) == "unknown");

  // The C event still goes to a function of it; replacing the callback drops the old one.
  int c_events = 0;
  rt.set_placement_callback([&c_events](const dp_placement_event_t& e) {
    c_events += e.reason_code == DP_PLACEMENT_DEFAULT && std::string(e.op) == "Neg";
  });
  const size_t before = log.size();
  rt.run1(rt.op("Neg"), {x});
  CHECK(c_events == 1 && log.size() == before);
  rt.set_placement_callback(nullptr);
  rt.run1(rt.op("Neg"), {x});
  CHECK(c_events == 1);
  // An empty std::function removes it too.
  rt.set_placement_callback(std::function<void(const devplug::PlacementEvent&)>());
  rt.run1(rt.op("Neg"), {x});
  CHECK(log.size() == before);

  section("PlacementEvent::from_c: an old library's event has no reason_code; its word says it");
  dp_placement_event_t old{};
  old.struct_size = offsetof(dp_placement_event_t, reason_code);
  old.op = "Mul";
  old.device = "HOST:0";
  old.reason = "soft-placed";
  old.detail = "";
  old.reason_code = DP_PLACEMENT_EXPLICIT;  // not covered by struct_size: not read
  const devplug::PlacementEvent ev = devplug::PlacementEvent::from_c(old);
  CHECK(ev.op == "Mul" && ev.device == "HOST:0" && ev.reason == devplug::PlacementReason::SoftPlaced &&
        ev.reason_name == "soft-placed" && ev.detail.empty());
  old.struct_size = sizeof old;
  CHECK(devplug::PlacementEvent::from_c(old).reason == devplug::PlacementReason::Explicit);
}

void long_long_elements(devplug::Runtime& rt) {
  section("Tensor::to_vector<long long> / from_vector<long long> (and long): I64");
  const devplug::Device cpu = rt.device("CPU:0");
  const devplug::Tensor t = devplug::Tensor::from_vector<long long>(cpu, {3}, {1, -2, 1LL << 40});
  CHECK(t.dtype() == devplug::DType::I64);
  CHECK((t.to_vector<long long>() == std::vector<long long>{1, -2, 1LL << 40}));
  CHECK((t.to_vector<int64_t>() == std::vector<int64_t>{1, -2, int64_t{1} << 40}));
  if constexpr (sizeof(long) == 8) {
    CHECK((t.to_vector<long>() == std::vector<long>{1, -2, 1L << 40}));
  }
  const long long raw[] = {5, 6};
  CHECK((devplug::Tensor::from_span<long long>(cpu, {2}, raw, 2).to_vector<int64_t>() == std::vector<int64_t>{5, 6}));
  const devplug::Tensor i32 = devplug::Tensor::from_vector<int32_t>(cpu, {1}, {1});
  const auto e = error_of([&] { i32.to_vector<long long>(); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "i32") && contains(e.second, "i64"), e.second);
  // a Cast to I64, read as long long
  const devplug::Tensor f = devplug::Tensor::from_vector<float>(cpu, {2}, {2.9f, -3.5f});
  CHECK((rt.run1(rt.op("Cast"), {f}, devplug::Attrs().set("dtype", devplug::DType::I64)).to_vector<long long>() ==
         std::vector<long long>{2, -3}));
}

}  // namespace

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(2).discover_plugins(false));
    attrs_forms(rt);
    input_forms(rt);
    graph_forms(rt);
    placement_events(rt);
    long_long_elements(rt);
    sim_strict(std::string(DEVPLUG_TEST_PLUGIN_DIR) + "/libdevplug_sim.so");
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("call_forms_test");
}
