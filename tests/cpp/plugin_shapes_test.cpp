// devplug/plugin_shapes.hpp on its own (no host, no plugin): the shape helpers for C++ kernels
// against NumPy's rules and the runtime's error wording (the same messages as the Rust SDK's
// `shape` module):
// - num_elements: rank 0, zero-size dimensions, negative dimensions, overflow;
// - broadcast_shapes / broadcast_all: both directions, 1-sized and 0-sized dimensions, rank 0,
//   errors naming the shapes (and the inputs, for more than two);
// - reduce_axes / reduced_shape: negative axes, empty = all, out of range, duplicates,
//   keep_dims;
// - Broadcast: runs (merged dimensions, strides 0 along broadcasts), flat plans, rank 0, empty
//   outputs, sub-ranges, ranks beyond the odometer's stack buffer, all checked against a
//   naive per-element walk; new / of / exact and their errors;
// - Reduction: sums over every combination of axes of small shapes against a naive sum,
//   rank 0, reduced and kept zero-size axes, keep_dims, and the accumulate-through-a-Broadcast
//   alternative its documentation describes.
// Standalone executable: exits 0 when every check passes.

#include "counting_check.hpp"

#include <devplug/plugin_shapes.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace dp = devplug::plugin;
namespace shapes = devplug::plugin::shapes;
using shapes::Broadcast;
using shapes::Dims;
using shapes::Reduction;
using shapes::Run;
using Shape = std::vector<int64_t>;

// The dp::Error `f` throws: its code and message (DPP_OK and "" when none; any other exception
// is reported as code -1).
template <class F>
std::pair<dpp_status_t, std::string> plugin_error_of(F&& f) {
  try {
    f();
  } catch (const dp::Error& e) {
    return {e.code(), e.message()};
  } catch (...) {
    return {static_cast<dpp_status_t>(-1), "not a devplug::plugin::Error"};
  }
  return {DPP_OK, ""};
}

// `f` must throw DPP_INVALID_ARGUMENT with exactly `message`.
#define CHECK_INVALID(f, message)                                                         \
  do {                                                                                    \
    const auto e_ = plugin_error_of([&] { (void)(f); });                                  \
    CHECK_MSG(e_.first == DPP_INVALID_ARGUMENT && e_.second == (message), "got '" + e_.second + "'"); \
  } while (0)

template <size_t N>
std::vector<std::pair<size_t, std::array<size_t, N>>> elements(const Broadcast<N>& b) {
  std::vector<std::pair<size_t, std::array<size_t, N>>> v;
  b.for_each([&](size_t out, const std::array<size_t, N>& offs) { v.push_back({out, offs}); });
  return v;
}

template <size_t N>
std::vector<Run<N>> runs(const Broadcast<N>& b) {
  std::vector<Run<N>> v;
  b.for_each_run([&](const Run<N>& r) { v.push_back(r); });
  return v;
}

template <size_t N>
bool same_run(const Run<N>& r, size_t out, size_t len, std::array<size_t, N> offsets, std::array<size_t, N> strides) {
  return r.out == out && r.len == len && r.offsets == offsets && r.strides == strides;
}

// The obvious per-element computation of input `in`'s offset for output element `o`.
size_t naive_offset(const Shape& out, const Shape& in, size_t o) {
  std::vector<size_t> idx(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    idx[d] = o % static_cast<size_t>(out[d]);
    o /= static_cast<size_t>(out[d]);
  }
  const size_t lead = out.size() - in.size();
  size_t off = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    off = off * static_cast<size_t>(in[i]) + (in[i] == 1 ? 0 : idx[lead + i]);
  }
  return off;
}

void test_num_elements() {
  section("num_elements");
  CHECK(shapes::num_elements({}) == 1);
  CHECK(shapes::num_elements({2, 3, 4}) == 24);
  CHECK(shapes::num_elements({2, 0, 4}) == 0);
  const Shape v{5, 1};
  CHECK(shapes::num_elements(v) == 5);
  CHECK_INVALID(shapes::num_elements({2, -1}), "dimension 1 of shape [2, -1] is negative");
  const int64_t big = INT64_MAX;
  CHECK_INVALID(shapes::num_elements({big, big}),
                "shape [" + std::to_string(big) + ", " + std::to_string(big) + "] has too many elements");
  CHECK(plugin_error_of([&] { shapes::num_elements({0, big, big}); }).first == DPP_INVALID_ARGUMENT);
}

void test_broadcast_shapes() {
  section("broadcast_shapes, broadcast_all");
  CHECK((shapes::broadcast_shapes({2, 3}, {3}) == Shape{2, 3}));
  CHECK((shapes::broadcast_shapes({3}, {2, 3}) == Shape{2, 3}));
  CHECK((shapes::broadcast_shapes({4, 1}, {1, 5}) == Shape{4, 5}));
  CHECK((shapes::broadcast_shapes({}, {2}) == Shape{2}));
  CHECK((shapes::broadcast_shapes({}, {}) == Shape{}));
  CHECK((shapes::broadcast_shapes({0, 1}, {3}) == Shape{0, 3}));
  CHECK((shapes::broadcast_shapes({1}, {0}) == Shape{0}));
  CHECK((shapes::broadcast_shapes({5, 1, 1}, {1, 1}) == Shape{5, 1, 1}));
  CHECK_INVALID(shapes::broadcast_shapes({2, 3}, {2}), "shapes [2, 3] and [2] cannot be broadcast together");
  CHECK_INVALID(shapes::broadcast_shapes({0}, {3}), "shapes [0] and [3] cannot be broadcast together");
  CHECK_INVALID(shapes::broadcast_shapes({-1}, {-1}), "dimension 0 of shape [-1] is negative");

  CHECK((shapes::broadcast_all({}) == Shape{}));
  CHECK((shapes::broadcast_all({{3}}) == Shape{3}));
  CHECK((shapes::broadcast_all({{2, 1, 1}, {4, 1}, {5}}) == Shape{2, 4, 5}));
  const Shape a{2, 1}, b{1, 3}, c{4};
  CHECK((shapes::broadcast_all(std::vector<Dims>{a, b}) == Shape{2, 3}));
  CHECK_INVALID(shapes::broadcast_all({{2, 3}, {2}}), "shapes [2, 3] and [2] cannot be broadcast together");
  CHECK_INVALID(shapes::broadcast_all({a, b, c}), "shapes [1, 3] and [4] cannot be broadcast together (inputs 1 and 2)");
}

void test_axes() {
  section("reduce_axes, reduced_shape");
  CHECK((shapes::reduce_axes(3, {}) == std::vector<size_t>{0, 1, 2}));
  CHECK(shapes::reduce_axes(0, {}).empty());
  CHECK((shapes::reduce_axes(3, {-1, 0}) == std::vector<size_t>{0, 2}));
  CHECK((shapes::reduce_axes(2, {-2}) == std::vector<size_t>{0}));
  CHECK_INVALID(shapes::reduce_axes(2, {2}), "axis 2 is out of range for rank 2");
  CHECK_INVALID(shapes::reduce_axes(2, {-3}), "axis -3 is out of range for rank 2");
  CHECK_INVALID(shapes::reduce_axes(0, {0}), "axis 0 is out of range for rank 0");
  CHECK_INVALID(shapes::reduce_axes(2, {INT64_MIN}),
                "axis " + std::to_string(INT64_MIN) + " is out of range for rank 2");
  CHECK_INVALID(shapes::reduce_axes(2, {1, 1}), "axis 1 appears twice");
  CHECK_INVALID(shapes::reduce_axes(2, {1, -1}), "axis 1 and axis -1 are the same axis (1) of rank 2");

  CHECK((shapes::reduced_shape({2, 3}, {1}, false) == Shape{2}));
  CHECK((shapes::reduced_shape({2, 3}, {1}, true) == Shape{2, 1}));
  CHECK((shapes::reduced_shape({2, 3}, {0, 1}, false) == Shape{}));
  CHECK((shapes::reduced_shape({2, 3}, {0, 1}, true) == Shape{1, 1}));
  CHECK((shapes::reduced_shape({}, {}, true) == Shape{}));
  CHECK((shapes::reduced_shape({0, 3}, {0}, false) == Shape{3}));
}

void test_broadcast_runs() {
  section("Broadcast: runs");
  // [2, 1] + [3] -> [2, 3]: broadcast both ways; two runs of 3.
  const Broadcast<2> b({2, 3}, {{2, 1}, {3}});
  CHECK(b.size() == 6);
  CHECK(!b.empty());
  CHECK(!b.flat());
  CHECK((b.out_shape() == Shape{2, 3}));
  const auto e = elements(b);
  const std::vector<std::pair<size_t, std::array<size_t, 2>>> want = {
      {0, {0, 0}}, {1, {0, 1}}, {2, {0, 2}}, {3, {1, 0}}, {4, {1, 1}}, {5, {1, 2}}};
  CHECK(e == want);
  const auto r = runs(b);
  CHECK(r.size() == 2);
  CHECK(r.size() == 2 && same_run<2>(r[0], 0, 3, {0, 0}, {0, 1}) && same_run<2>(r[1], 3, 3, {1, 0}, {0, 1}));

  // Same shapes: one flat run, also through size-1 dimensions.
  const auto flat = Broadcast<2>::exact({2, 3, 4}, {{2, 3, 4}, {2, 3, 4}});
  CHECK(flat.flat());
  const auto fr = runs(flat);
  CHECK(fr.size() == 1 && same_run<2>(fr[0], 0, 24, {0, 0}, {1, 1}));
  CHECK(Broadcast<2>::exact({2, 1, 3}, {{2, 1, 3}, {2, 1, 3}}).flat());
  CHECK(runs(Broadcast<2>::exact({2, 1, 3}, {{2, 1, 3}, {1, 3}})).size() == 2);

  // Rank 0: one element; a scalar over a vector: stride 0.
  const auto scalar = Broadcast<2>::of({{}, {}});
  CHECK(scalar.out_shape().empty());
  CHECK((elements(scalar) == std::vector<std::pair<size_t, std::array<size_t, 2>>>{{0, {0, 0}}}));
  CHECK(scalar.flat());
  const auto sr = runs(Broadcast<2>::exact({4}, {{}, {4}}));
  CHECK(sr.size() == 1 && same_run<2>(sr[0], 0, 4, {0, 0}, {0, 1}));

  // Zero-size dimensions, in either direction of broadcasting: nothing to walk.
  const Shape outs[][3] = {{{0}, {0}, {1}}, {{2, 0}, {2, 1}, {0}}, {{0, 3}, {0, 3}, {3}}};
  for (const auto& c : outs) {
    const auto z = Broadcast<2>::exact(c[0], {c[1], c[2]});
    CHECK(z.empty() && z.size() == 0 && runs(z).empty());
  }

  // A kernel's loop over tensor data (Add).
  const std::vector<float> x{1, 2}, y{10, 20, 30};
  std::vector<float> out(6);
  b.for_each_run([&](const Run<2>& run) {
    for (size_t i = 0; i < run.len; ++i) out[run.out + i] = x[run.input(0, i)] + y[run.input(1, i)];
  });
  CHECK((out == std::vector<float>{11, 21, 31, 12, 22, 32}));
}

void test_broadcast_against_naive() {
  section("Broadcast: against a naive walk");
  const std::pair<Shape, Shape> cases[] = {
      {{2, 3, 4}, {3, 1}},
      {{3, 1, 5}, {1, 4, 1}},
      {{1, 4, 1, 2}, {3, 1, 5, 1}},
      {{5}, {2, 3, 1}},
      {{2, 1, 2, 1, 2, 1, 2, 1, 2, 1}, {2, 1, 2, 1, 2}},
      // 12 dimensions that do not merge: the odometer outgrows its stack buffer.
      {{2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}},
      {{}, {2, 2}},
  };
  for (const auto& c : cases) {
    const auto b = Broadcast<2>::of({c.first, c.second});
    const Shape& out = b.out_shape();
    std::vector<std::pair<size_t, std::array<size_t, 2>>> want;
    for (size_t o = 0; o < b.size(); ++o) {
      want.push_back({o, {naive_offset(out, c.first, o), naive_offset(out, c.second, o)}});
    }
    CHECK_MSG(elements(b) == want, dp::shape_string(c.first) + " and " + dp::shape_string(c.second));
    // Any sub-range gives the same elements.
    const std::pair<size_t, size_t> ranges[] = {{0, 1}, {1, b.size() - 1}, {b.size() / 2, b.size() + 7}};
    for (const auto& range : ranges) {
      std::vector<std::pair<size_t, std::array<size_t, 2>>> got;
      bool nonempty = true;
      b.for_each_run(range.first, range.second, [&](const Run<2>& r) {
        nonempty = nonempty && r.len >= 1 && r.strides[0] <= 1 && r.strides[1] <= 1;
        for (size_t i = 0; i < r.len; ++i) got.push_back({r.out + i, {r.input(0, i), r.input(1, i)}});
      });
      const size_t end = std::min(range.second, b.size());
      const decltype(want) sub(want.begin() + static_cast<ptrdiff_t>(range.first),
                               want.begin() + static_cast<ptrdiff_t>(end));
      CHECK_MSG(nonempty && got == sub, dp::shape_string(c.first) + " and " + dp::shape_string(c.second) + " " +
                                            std::to_string(range.first) + ".." + std::to_string(range.second));
    }
  }
  // Three inputs.
  const auto b3 = Broadcast<3>::of({{2, 1, 1}, {4, 1}, {5}});
  CHECK((b3.out_shape() == Shape{2, 4, 5}));
  bool ok = true;
  b3.for_each([&](size_t o, const std::array<size_t, 3>& offs) {
    ok = ok && offs[0] == o / 20 && offs[1] == (o / 5) % 4 && offs[2] == o % 5;
  });
  CHECK(ok);
}

void test_broadcast_errors() {
  section("Broadcast: errors");
  CHECK_INVALID((Broadcast<2>::exact({2, 3}, {{2, 3}, {2}})), "shapes [2, 3] and [2] cannot be broadcast together");
  CHECK_INVALID((Broadcast<2>::exact({2}, {{2, 3}, {2, 3}})), "the output has shape [2], not the broadcast shape [2, 3]");
  CHECK_INVALID((Broadcast<2>::exact({5, 3}, {{1, 3}, {3}})),
                "the output has shape [5, 3], not the broadcast shape [1, 3]");
  // The constructor broadcasts to a larger output (BroadcastTo), exact() does not.
  CHECK((Broadcast<2>({5, 3}, {{1, 3}, {3}}).size() == 15));
  CHECK_INVALID((Broadcast<2>({2, 3}, {{2, 3}, {2}})), "input 1 of shape [2] does not broadcast to shape [2, 3]");
  CHECK_INVALID((Broadcast<1>({3}, {{1, 3}})),
                "input 0 of shape [1, 3] does not broadcast to shape [3]: its rank is larger");
  CHECK_INVALID((Broadcast<1>({2, -3}, {{2, 1}})), "dimension 1 of shape [2, -3] is negative");
  CHECK_INVALID((Broadcast<3>::of({{2, 1}, {1, 3}, {4}})),
                "shapes [1, 3] and [4] cannot be broadcast together (inputs 1 and 2)");
}

// The sum of x (row-major, `shape`) over `axes` (normalized), naively: for every input element,
// its output index with the reduced axes dropped.
std::vector<int64_t> naive_sum(const Shape& shape, const std::vector<size_t>& axes, const std::vector<int64_t>& x) {
  const Shape out = shapes::reduced_shape(shape, axes, false);
  std::vector<int64_t> y(shapes::num_elements(out), 0);
  for (size_t e = 0; e < x.size(); ++e) {
    size_t rem = e, o = 0, scale = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const size_t i = rem % static_cast<size_t>(shape[d]);
      rem /= static_cast<size_t>(shape[d]);
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
        o += i * scale;
        scale *= static_cast<size_t>(shape[d]);
      }
    }
    y[o] += x[e];
  }
  return y;
}

std::pair<Shape, std::vector<int64_t>> reduce(const Shape& shape, const Shape& axes, bool keep,
                                              const std::vector<int64_t>& x) {
  const Reduction plan(shape, axes, keep);
  std::vector<int64_t> y(plan.out_size(), -1);
  bool counts = true;
  plan.for_each_output([&](size_t out, const shapes::Group& g) {
    int64_t sum = 0;
    size_t n = 0;
    g.for_each([&](size_t i) {
      sum += x[i];
      ++n;
    });
    counts = counts && n == g.size() && n == plan.group_size() && g.empty() == (n == 0);
    y[out] = sum;
  });
  CHECK(counts);
  return {plan.out_shape(), y};
}

void test_reductions() {
  section("Reduction");
  using R = std::pair<Shape, std::vector<int64_t>>;
  const std::vector<int64_t> x{1, 2, 3, 4, 5, 6};  // [[1, 2, 3], [4, 5, 6]]
  CHECK((reduce({2, 3}, {0}, false, x) == R{{3}, {5, 7, 9}}));
  CHECK((reduce({2, 3}, {1}, false, x) == R{{2}, {6, 15}}));
  CHECK((reduce({2, 3}, {-1}, true, x) == R{{2, 1}, {6, 15}}));
  CHECK((reduce({2, 3}, {-2}, true, x) == R{{1, 3}, {5, 7, 9}}));
  CHECK((reduce({2, 3}, {}, false, x) == R{{}, {21}}));
  CHECK((reduce({2, 3}, {}, true, x) == R{{1, 1}, {21}}));
  CHECK((reduce({2, 3}, {1, 0}, false, x) == R{{}, {21}}));
  // Rank 0 reduces to itself.
  CHECK((reduce({}, {}, false, {7}) == R{{}, {7}}));
  CHECK((reduce({}, {}, true, {7}) == R{{}, {7}}));
  // A reduced axis of size 0: sums of nothing; a kept one: no outputs.
  CHECK((reduce({0, 3}, {0}, false, {}) == R{{3}, {0, 0, 0}}));
  CHECK((reduce({0, 3}, {1}, false, {}) == R{{0}, {}}));
  CHECK((reduce({0, 3}, {1}, true, {}) == R{{0, 1}, {}}));
  // Size-1 axes, reduced or not.
  CHECK((reduce({2, 1, 3}, {1}, false, x) == R{{2, 3}, x}));
  CHECK((reduce({1, 6}, {0}, true, x) == R{{1, 6}, x}));

  // Every combination of axes of a few shapes, against the naive sum.
  const Shape cases[] = {{2, 3, 4}, {3, 1, 2, 2}, {1, 5}, {4}};
  for (const Shape& shape : cases) {
    std::vector<int64_t> data(shapes::num_elements(shape));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>(i * i % 17);
    for (unsigned mask = 0; mask < (1u << shape.size()); ++mask) {
      Shape axes;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (mask & (1u << d)) axes.push_back(static_cast<int64_t>(d) - static_cast<int64_t>(shape.size()));  // negative
      }
      const std::vector<size_t> norm = shapes::reduce_axes(shape.size(), axes);  // [] = all
      const auto got = reduce(shape, axes, false, data);
      CHECK_MSG(got.second == naive_sum(shape, norm, data), dp::shape_string(shape) + " over " + dp::shape_string(axes));
    }
  }

  // Runs: [2, 3, 4] over {0, -1}: per output, two runs of 4 contiguous elements 12 apart.
  const Reduction plan({2, 3, 4}, {0, -1}, false);
  CHECK((plan.axes() == std::vector<size_t>{0, 2}));
  CHECK(plan.group_size() == 8 && plan.out_size() == 3);
  std::vector<std::array<size_t, 3>> rs;
  plan.for_each_output([&](size_t, const shapes::Group& g) {
    g.for_each_run([&](size_t o, size_t l, size_t s) { rs.push_back({o, l, s}); });
  });
  CHECK(rs.size() == 6);
  CHECK((rs.size() == 6 && rs[0] == std::array<size_t, 3>{0, 4, 1} && rs[1] == std::array<size_t, 3>{12, 4, 1} &&
         rs[2] == std::array<size_t, 3>{4, 4, 1} && rs[3] == std::array<size_t, 3>{16, 4, 1}));

  // The memory-order alternative: accumulate through a Broadcast of the kept shape.
  std::vector<int64_t> x24(24);
  for (size_t i = 0; i < 24; ++i) x24[i] = static_cast<int64_t>(i);
  const Shape shape{2, 3, 4};
  const Shape kept = shapes::reduced_shape(shape, shapes::reduce_axes(3, {0, 2}), true);
  CHECK((kept == Shape{1, 3, 1}));
  std::vector<int64_t> y(shapes::num_elements(kept), 0);
  Broadcast<1>(shape, {kept}).for_each_run([&](const Run<1>& r) {
    for (size_t i = 0; i < r.len; ++i) y[r.input(0, i)] += x24[r.out + i];
  });
  CHECK((y == std::vector<int64_t>{60, 92, 124}));

  // Errors.
  CHECK_INVALID(Reduction({2, 3}, {2}, false), "axis 2 is out of range for rank 2");
  CHECK_INVALID(Reduction({2, 3}, {0, -2}, false), "axis 0 and axis -2 are the same axis (0) of rank 2");
  CHECK_INVALID(Reduction({-2, 3}, {0}, false), "dimension 0 of shape [-2, 3] is negative");
}

void test_copies_outlive_their_inputs() {
  section("plans are values");
  std::vector<Broadcast<2>> plans;
  Reduction red({1}, {}, false);
  {
    const Shape x{2, 1}, y{3};
    plans.push_back(Broadcast<2>::of({x, y}));
    red = Reduction(x, {-1}, true);
  }
  const Broadcast<2> copy = plans[0];
  CHECK(runs(copy).size() == 2 && (copy.out_shape() == Shape{2, 3}));
  CHECK((red.out_shape() == Shape{2, 1}) && red.out_size() == 2 && red.group_size() == 1);
}

}  // namespace

int main() {
  test_num_elements();
  test_broadcast_shapes();
  test_axes();
  test_broadcast_runs();
  test_broadcast_against_naive();
  test_broadcast_errors();
  test_reductions();
  test_copies_outlive_their_inputs();
  return summary("plugin_shapes_test");
}
