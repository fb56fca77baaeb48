/**
 * @file plugin_shapes.hpp
 * @brief Shape helpers for kernels of C++ plugins: NumPy broadcasting, reductions over axes,
 *        element counts (header-only, C++17; the C++ twin of the Rust SDK's `shape` module).
 *
 * The runtime's ops follow NumPy's rules, and `devplug check` tests the edge cases: rank-0
 * tensors, dimensions of size 0 and 1, broadcasting in both directions, negative axes,
 * `keep_dims`. These helpers implement the rules once, with the runtime's error wording, so a
 * kernel checks its shapes and walks its tensors without writing them again:
 *
 * - shapes::num_elements(): the element count of a shape, checked (negative dimensions,
 *   overflow);
 * - shapes::broadcast_shapes() / shapes::broadcast_all(): the broadcast shape of two / several
 *   shapes;
 * - shapes::Broadcast: a plan for an elementwise op, the output walked in row-major order with
 *   each input's element offset, in **runs** (innermost stretches with a constant stride per
 *   input), so the kernel's inner loop is a plain loop;
 * - shapes::reduce_axes() / shapes::reduced_shape(): a reduction's `axes` attribute
 *   normalized, and its output shape (with or without `keep_dims`);
 * - shapes::Reduction: a plan for a reduction: for each output element, the input elements it
 *   reduces over, again in runs.
 *
 * Offsets and lengths count **elements**, not bytes (multiply by the dtype's size); tensors
 * are dense and row-major, as the host passes them. Errors are thrown as
 * devplug::plugin::Error with `DPP_INVALID_ARGUMENT` and a message in the runtime's words;
 * catch and rethrow to add the op's name, or let it fail the kernel as it is. Shapes are
 * passed as shapes::Dims: a Tensor's shape(), a `std::vector<int64_t>` or a brace list.
 *
 * An elementwise kernel's arithmetic (`z = x + y`, f32, on memory the plugin can address;
 * plugins/simdml/simdml.cpp enqueues the same on a worker stream):
 *
 * @code
 * #include <devplug/plugin_shapes.hpp>
 * namespace dp = devplug::plugin;
 * namespace shapes = devplug::plugin::shapes;
 *
 * // In the kernel: throws unless z's shape is exactly the broadcast of x's and y's.
 * const auto plan = shapes::Broadcast<2>::exact(z.shape(), {x.shape(), y.shape()});
 * // Then (at once, or in the work enqueued on the stream: the plan is a copyable value):
 * plan.for_each_run([&](const shapes::Run<2>& run) {
 *   for (size_t i = 0; i < run.len; ++i) zp[run.out + i] = xp[run.input(0, i)] + yp[run.input(1, i)];
 * });
 * @endcode
 *
 * A reduction (`ReduceSum` over the op's `axes` and `keep_dims`):
 *
 * @code
 * const shapes::Reduction plan(x.shape(), cx.attr_ints("axes"), cx.attr_bool("keep_dims"));
 * // y.shape() equals plan.out_shape() (the host allocated it so); then, on the stream:
 * plan.for_each_output([&](size_t out, const shapes::Group& group) {
 *   float sum = 0;  // a mean divides by group.size(), which may be 0
 *   group.for_each_run([&](size_t offset, size_t len, size_t stride) {
 *     for (size_t i = 0; i < len; ++i) sum += xp[offset + i * stride];
 *   });
 *   yp[out] = sum;
 * });
 * @endcode
 *
 * Every function may be called from any thread; plans are immutable values.
 */
#ifndef DEVPLUG_PLUGIN_SHAPES_HPP
#define DEVPLUG_PLUGIN_SHAPES_HPP

#include <devplug/plugin.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

namespace devplug {
namespace plugin {
/** @brief Shape helpers for kernels: broadcasting, reductions, element counts. */
namespace shapes {

/**
 * @brief A read-only view of `int64_t` values: a shape, or a list of axes.
 *
 * Converts from a Tensor's shape() (a Span), a `std::vector<int64_t>` and a brace list
 * (`{2, 3}`; `{}` is rank 0). Valid as long as what it views: pass it as an argument, do not
 * keep it (a brace list lives until the end of the full expression).
 */
class Dims {
 public:
  /** @brief No values (rank 0). */
  constexpr Dims() noexcept = default;
  /** @brief @p size values at @p data (NULL allowed when @p size is 0). */
  constexpr Dims(const int64_t* data, size_t size) noexcept : data_(data), size_(size) {}
  /** @brief The values of @p s (e.g. Tensor::shape(), KernelContext::attr_ints()). */
  constexpr Dims(Span<int64_t> s) noexcept : data_(s.data()), size_(s.size()) {}  // NOLINT: implicit
  /** @brief The values of @p v. */
  Dims(const std::vector<int64_t>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT: implicit
// The brace list's array lives until the end of the full expression that holds it: long
// enough for an argument, which is what Dims is for (GCC warns about keeping it longer).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  /** @brief The values of a brace list, for an argument: `{2, 3}`. */
  constexpr Dims(std::initializer_list<int64_t> l) noexcept  // NOLINT: implicit
      : data_(l.begin()), size_(l.size()) {}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#pragma GCC diagnostic pop
#endif

  constexpr const int64_t* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  /** @brief Value @p i (i < size(), unchecked). */
  constexpr int64_t operator[](size_t i) const noexcept { return data_[i]; }
  constexpr const int64_t* begin() const noexcept { return data_; }
  constexpr const int64_t* end() const noexcept { return data_ + size_; }
  /** @brief A copy that outlives the view. */
  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(begin(), end()); }
  /** @brief Whether @p other holds the same values. */
  bool equals(Dims other) const noexcept { return std::equal(begin(), end(), other.begin(), other.end()); }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

namespace detail {

inline void check_dims(Dims shape) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      throw Error::invalid_argument("dimension " + std::to_string(i) + " of shape " + shape_string(shape) +
                                    " is negative");
    }
  }
}

/** The NumPy broadcast of @p a and @p b into @p out; false when they do not broadcast. */
inline bool broadcast_pair(Dims a, Dims b, std::vector<int64_t>* out) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> r(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    if (da == db || db == 1) {
      r[i] = da;
    } else if (da == 1) {
      r[i] = db;
    } else {
      return false;
    }
  }
  *out = std::move(r);
  return true;
}

inline std::vector<int64_t> broadcast_all(const Dims* shapes, size_t n) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    check_dims(shapes[i]);
    if (broadcast_pair(out, shapes[i], &out)) continue;
    // Pairwise compatible shapes are compatible together, so an earlier shape conflicts with
    // this one: name it.
    std::vector<int64_t> ignored;
    size_t j = 0;
    while (j < i && broadcast_pair(shapes[j], shapes[i], &ignored)) ++j;
    if (j == i) j = 0;
    throw Error::invalid_argument("shapes " + shape_string(shapes[j]) + " and " + shape_string(shapes[i]) +
                                  " cannot be broadcast together" +
                                  (n > 2 ? " (inputs " + std::to_string(j) + " and " + std::to_string(i) + ")"
                                         : std::string()));
  }
  return out;
}

/** Row-major element strides of @p shape (which num_elements() accepted). */
inline std::vector<size_t> contiguous_strides(Dims shape) {
  std::vector<size_t> s(shape.size(), 0);
  size_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= static_cast<size_t>(shape[d]);
  }
  return s;
}

/**
 * Row-major iteration over a shape with @p N strided operands: dimensions of size 1 dropped,
 * adjacent dimensions that are contiguous for every operand merged (so the innermost run is
 * as long as it can be).
 */
template <size_t N>
class Walk {
 public:
  using Offsets = std::array<size_t, N>;

  /** Appends a dimension (row-major order): its size and each operand's stride along it. */
  void add(size_t size, const Offsets& st) {
    size_ *= size;
    if (size == 1) return;
    if (!dims_.empty()) {
      Offsets& last = strides_.back();
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k) mergeable = mergeable && last[k] == st[k] * size;
      if (mergeable) {
        dims_.back() *= size;
        last = st;
        return;
      }
    }
    dims_.push_back(size);
    strides_.push_back(st);
  }

  /** After the last add(): no element or one is a single dimension, strides 1 (unread). */
  void finish() {
    if (size_ == 0 || dims_.empty()) {
      Offsets ones;
      ones.fill(1);
      dims_.assign(1, size_);
      strides_.assign(1, ones);
    }
  }

  size_t size() const noexcept { return size_; }
  size_t rank() const noexcept { return dims_.size(); }
  const Offsets& inner_strides() const noexcept { return strides_.back(); }

  /** Calls `f(offsets, pos, len)` for each innermost run within positions [begin, end);
   *  `offsets[k]` is operand k's offset (plus `base[k]`) of the run's first element. */
  template <class F>
  void for_each_run(size_t begin, size_t end, const Offsets& base, F&& f) const {
    end = std::min(end, size_);
    if (begin >= end) return;
    const size_t r = dims_.size();
    const size_t inner = dims_[r - 1];
    const Offsets& inner_st = strides_[r - 1];
    Offsets offs = base;
    if (r == 1) {
      for (size_t k = 0; k < N; ++k) offs[k] += begin * inner_st[k];
      f(offs, begin, end - begin);
      return;
    }
    // The odometer over the outer dimensions, on the stack for the usual ranks.
    size_t small[8] = {};
    std::vector<size_t> large;
    size_t* idx = small;
    if (r - 1 > 8) {
      large.assign(r - 1, 0);
      idx = large.data();
    }
    size_t rem = begin / inner;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % dims_[d];
      rem /= dims_[d];
      for (size_t k = 0; k < N; ++k) offs[k] += idx[d] * strides_[d][k];
    }
    size_t j = begin % inner;
    size_t pos = begin;
    for (;;) {
      const size_t len = std::min(inner - j, end - pos);
      Offsets run = offs;
      for (size_t k = 0; k < N; ++k) run[k] += j * inner_st[k];
      f(static_cast<const Offsets&>(run), pos, len);
      pos += len;
      if (pos >= end) return;
      j = 0;
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < dims_[d]) {
          for (size_t k = 0; k < N; ++k) offs[k] += strides_[d][k];
          break;
        }
        for (size_t k = 0; k < N; ++k) offs[k] -= strides_[d][k] * (dims_[d] - 1);
        idx[d] = 0;
      }
    }
  }

 private:
  std::vector<size_t> dims_;
  std::vector<Offsets> strides_;
  size_t size_ = 1;
};

}  // namespace detail

/**
 * @brief The number of elements of @p shape (1 for rank 0, 0 when a dimension is 0).
 * @throws Error `DPP_INVALID_ARGUMENT` when a dimension is negative or the product of the
 *         dimensions (of the non-zero ones, so that every shape this accepts has strides that
 *         fit) overflows `size_t`.
 */
inline size_t num_elements(Dims shape) {
  detail::check_dims(shape);
  size_t n = 1;
  bool empty = false;
  for (int64_t d : shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    if (u == 0) {
      empty = true;
    } else if (u > std::numeric_limits<size_t>::max() / n) {
      throw Error::invalid_argument("shape " + shape_string(shape) + " has too many elements");
    } else {
      n *= static_cast<size_t>(u);
    }
  }
  return empty ? 0 : n;
}

/**
 * @brief The NumPy broadcast of @p a and @p b: aligned at the last dimension, each pair of
 *        dimensions equal or one of them 1 (`[2, 3]` and `[3]` give `[2, 3]`, `[4, 1]` and
 *        `[1, 5]` give `[4, 5]`, `[0, 1]` and `[3]` give `[0, 3]`, `[]` and `s` give `s`).
 * @throws Error `DPP_INVALID_ARGUMENT` `shapes [2, 3] and [2] cannot be broadcast together`,
 *         or a negative dimension.
 */
inline std::vector<int64_t> broadcast_shapes(Dims a, Dims b) {
  detail::check_dims(a);
  detail::check_dims(b);
  std::vector<int64_t> out;
  if (!detail::broadcast_pair(a, b, &out)) {
    throw Error::invalid_argument("shapes " + shape_string(a) + " and " + shape_string(b) +
                                  " cannot be broadcast together");
  }
  return out;
}

/**
 * @brief The NumPy broadcast of all of @p shapes (`[]` for none).
 * @throws Error `DPP_INVALID_ARGUMENT` naming the first two shapes that do not broadcast (and,
 *         with more than two shapes, their positions: `shapes [2, 3] and [4] cannot be
 *         broadcast together (inputs 0 and 2)`), or a negative dimension.
 */
inline std::vector<int64_t> broadcast_all(std::initializer_list<Dims> shapes) {
  return detail::broadcast_all(shapes.begin(), shapes.size());
}
/** @brief broadcast_all() of a vector of shapes. */
inline std::vector<int64_t> broadcast_all(const std::vector<Dims>& shapes) {
  return detail::broadcast_all(shapes.data(), shapes.size());
}

/**
 * @brief Normalizes a reduction's `axes` attribute against @p rank: negative axes count from
 *        the end (`-1` is the last), the result is sorted; `{}` means every axis (`0..rank`,
 *        none for rank 0).
 * @throws Error `DPP_INVALID_ARGUMENT` in the runtime's words: `axis 2 is out of range for
 *         rank 2`, `axis 1 appears twice`, `axis 1 and axis -1 are the same axis (1) of rank 2`.
 */
inline std::vector<size_t> reduce_axes(size_t rank, Dims axes) {
  std::vector<size_t> out;
  if (axes.empty()) {
    for (size_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  if (rank > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error::invalid_argument("rank " + std::to_string(rank) + " is too large");
  }
  const int64_t r = static_cast<int64_t>(rank);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i];
    if (a < -r || a >= r) {
      throw Error::invalid_argument("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    }
    const size_t n = static_cast<size_t>(a < 0 ? a + r : a);
    for (size_t j = 0; j < out.size(); ++j) {
      if (out[j] != n) continue;
      const int64_t first = axes[j];
      throw Error::invalid_argument(first == a ? "axis " + std::to_string(a) + " appears twice"
                                               : "axis " + std::to_string(first) + " and axis " + std::to_string(a) +
                                                     " are the same axis (" + std::to_string(n) + ") of rank " +
                                                     std::to_string(rank));
    }
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/**
 * @brief The output shape of a reduction of @p shape over @p axes (normalized: from
 *        reduce_axes()): the reduced dimensions dropped, or kept as 1 with @p keep_dims
 *        (`[2, 3]` over `{1}`: `[2]`, or `[2, 1]`). Axes out of range are ignored.
 */
inline std::vector<int64_t> reduced_shape(Dims shape, const std::vector<size_t>& axes, bool keep_dims) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) {
      out.push_back(shape[i]);
    } else if (keep_dims) {
      out.push_back(1);
    }
  }
  return out;
}

/**
 * @brief One innermost run of a Broadcast: output elements [out, out + len); output element
 *        `out + i` reads element `offsets[k] + i * strides[k]` of input k.
 */
template <size_t N>
struct Run {
  /** @brief The output element (row-major index) of the run's first element. */
  size_t out;
  /** @brief The number of elements in the run (at least 1). */
  size_t len;
  /** @brief Each input's element offset of the run's first element. */
  std::array<size_t, N> offsets;
  /** @brief Each input's element stride along the run: 1 (contiguous) or 0 (one element
   *         repeated: the input is broadcast along the output's innermost dimension). */
  std::array<size_t, N> strides;
  /** @brief Input @p k's element offset for output element `out + i`. */
  size_t input(size_t k, size_t i) const noexcept { return offsets[k] + i * strides[k]; }
};

/**
 * @brief A plan for an elementwise op over @p N inputs broadcast to an output: the output's
 *        elements in row-major order, with each input's element offset (0 strides along
 *        broadcast dimensions).
 *
 * Dimensions of size 1 are dropped and dimensions that are contiguous for every input are
 * merged, so for_each_run() hands out runs as long as they can be: inputs of the output's
 * shape give one run over everything (flat()), `[2, 3] + [3]` two runs of 3. A plan is a
 * copyable value: build it in the kernel (errors at once) and copy it into the work enqueued on
 * the stream.
 *
 * @code
 * auto plan = shapes::Broadcast<2>::exact(z.shape(), {x.shape(), y.shape()});  // Add, Mul, ...
 * shapes::Broadcast<1> to(target, {x.shape()});                                 // BroadcastTo
 * @endcode
 */
template <size_t N>
class Broadcast {
 public:
  /**
   * @brief A plan for @p inputs broadcast to @p out: each input's shape must broadcast to
   *        @p out (NumPy rules, as `BroadcastTo`); @p out may be larger than their broadcast.
   * @throws Error `DPP_INVALID_ARGUMENT`: `input 1 of shape [2] does not broadcast to shape
   *         [2, 3]`, a negative dimension, an output with more elements than `size_t` holds.
   */
  Broadcast(Dims out, const Dims (&inputs)[N]) : out_shape_(out.to_vector()) {
    num_elements(out);
    const size_t r = out.size();
    std::vector<std::array<size_t, N>> strides(r);
    for (auto& s : strides) s.fill(0);
    for (size_t k = 0; k < N; ++k) {
      const Dims s = inputs[k];
      if (s.size() > r) {
        throw Error::invalid_argument("input " + std::to_string(k) + " of shape " + shape_string(s) +
                                      " does not broadcast to shape " + shape_string(out) + ": its rank is larger");
      }
      const std::vector<size_t> own = detail::contiguous_strides(s);
      const size_t lead = r - s.size();
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == out[lead + i]) {
          strides[lead + i][k] = own[i];
        } else if (s[i] != 1) {
          throw Error::invalid_argument("input " + std::to_string(k) + " of shape " + shape_string(s) +
                                        " does not broadcast to shape " + shape_string(out));
        }
      }
    }
    for (size_t d = 0; d < r; ++d) walk_.add(static_cast<size_t>(out[d]), strides[d]);
    walk_.finish();
  }

  /** @brief A plan whose output is the broadcast of @p inputs (broadcast_all()). */
  static Broadcast of(const Dims (&inputs)[N]) {
    const std::vector<int64_t> out = detail::broadcast_all(inputs, N);
    return Broadcast(out, inputs);
  }

  /**
   * @brief A plan for an elementwise op whose output @p out must be exactly the broadcast of
   *        @p inputs (as the host allocates it for `Add`, `Mul`, `Equal`, ...).
   * @throws Error `DPP_INVALID_ARGUMENT`: broadcast_all()'s error (`shapes [2, 3] and [2]
   *         cannot be broadcast together`), or `the output has shape [2], not the broadcast
   *         shape [2, 3]`.
   */
  static Broadcast exact(Dims out, const Dims (&inputs)[N]) {
    const std::vector<int64_t> want = detail::broadcast_all(inputs, N);
    if (!out.equals(want)) {
      throw Error::invalid_argument("the output has shape " + shape_string(out) + ", not the broadcast shape " +
                                    shape_string(want));
    }
    return Broadcast(out, inputs);
  }

  /** @brief The output's shape. */
  const std::vector<int64_t>& out_shape() const noexcept { return out_shape_; }
  /** @brief The number of output elements. */
  size_t size() const noexcept { return walk_.size(); }
  /** @brief Whether the output has no elements (a dimension of size 0): nothing to compute. */
  bool empty() const noexcept { return walk_.size() == 0; }
  /** @brief Whether every input has the output's elements in the output's order (no
   *         broadcasting): one run over everything, all strides 1, so a kernel may use one
   *         flat loop (`z[i] = x[i] + y[i]`). */
  bool flat() const noexcept {
    if (walk_.rank() != 1) return false;
    for (size_t s : walk_.inner_strides()) {
      if (s != 1) return false;
    }
    return true;
  }

  /**
   * @brief Calls `f(const Run<N>&)` for each run of the output, in row-major order: a loop
   *        over `0..run.len` with constant input strides inside, the odometer outside. No call
   *        for an empty output; one run of length 1 for a rank-0 output.
   */
  template <class F>
  void for_each_run(F&& f) const {
    for_each_run(0, walk_.size(), std::forward<F>(f));
  }

  /** @brief for_each_run() restricted to output elements [begin, end) (clamped to size()):
   *         to split the work between threads. */
  template <class F>
  void for_each_run(size_t begin, size_t end, F&& f) const {
    const std::array<size_t, N> strides = walk_.inner_strides();
    std::array<size_t, N> zero;
    zero.fill(0);
    walk_.for_each_run(begin, end, zero, [&](const std::array<size_t, N>& offsets, size_t out, size_t len) {
      const Run<N> run{out, len, offsets, strides};
      f(run);
    });
  }

  /** @brief Calls `f(size_t out, const std::array<size_t, N>& offsets)` for every output
   *         element, in order. Simple; for_each_run() gives faster loops. */
  template <class F>
  void for_each(F&& f) const {
    for_each_run([&](const Run<N>& run) {
      std::array<size_t, N> offsets = run.offsets;
      for (size_t i = 0; i < run.len; ++i) {
        f(run.out + i, static_cast<const std::array<size_t, N>&>(offsets));
        for (size_t k = 0; k < N; ++k) offsets[k] += run.strides[k];
      }
    });
  }

 private:
  std::vector<int64_t> out_shape_;
  detail::Walk<N> walk_;
};

/** @brief The input elements one output element of a Reduction reduces over. */
class Group {
 public:
  /** @brief The number of input elements (the same for every output element; 0 when a
   *         reduced dimension is 0: a sum is then 0, a mean 0/0). */
  size_t size() const noexcept { return walk_->size(); }
  /** @brief Whether there are none. */
  bool empty() const noexcept { return walk_->size() == 0; }

  /** @brief Calls `f(size_t offset, size_t len, size_t stride)` for each run of the group, in
   *         the input's row-major order: input elements `offset + i * stride`, i < len. */
  template <class F>
  void for_each_run(F&& f) const {
    const size_t stride = walk_->inner_strides()[0];
    walk_->for_each_run(0, walk_->size(), {base_},
                        [&](const std::array<size_t, 1>& o, size_t, size_t len) { f(o[0], len, stride); });
  }

  /** @brief Calls `f(size_t offset)` for each input element of the group, in order. */
  template <class F>
  void for_each(F&& f) const {
    for_each_run([&](size_t offset, size_t len, size_t stride) {
      for (size_t i = 0; i < len; ++i) f(offset + i * stride);
    });
  }

 private:
  friend class Reduction;
  Group(size_t base, const detail::Walk<1>* walk) noexcept : base_(base), walk_(walk) {}
  size_t base_;
  const detail::Walk<1>* walk_;
};

/**
 * @brief A plan for a reduction (`ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceMean`) of an
 *        input over some of its axes: the output shape, and for each output element
 *        (row-major) the input elements it reduces over (a Group).
 *
 * A copyable value, like Broadcast: build it in the kernel, copy it into the stream's work.
 *
 * To walk the input in memory order instead (better for a leading axis of a large tensor),
 * accumulate through a Broadcast of the output's `keep_dims` shape to the input's:
 * `Broadcast<1>(x_shape, {kept})`, where `kept` is `reduced_shape(x_shape, axes, true)`, gives
 * for each input element (`run.out + i`) the output element it goes into (`run.input(0, i)`).
 */
class Reduction {
 public:
  /**
   * @brief A plan for reducing @p shape over @p axes (the op's attribute: reduce_axes()'s
   *        rules, `{}` = every axis), with the reduced axes kept as 1 when @p keep_dims.
   * @throws Error `DPP_INVALID_ARGUMENT`: reduce_axes()'s errors, a negative dimension, an
   *         input with more elements than `size_t` holds.
   */
  Reduction(Dims shape, Dims axes, bool keep_dims) {
    num_elements(shape);
    axes_ = reduce_axes(shape.size(), axes);
    out_shape_ = reduced_shape(shape, axes_, keep_dims);
    const std::vector<size_t> strides = detail::contiguous_strides(shape);
    for (size_t i = 0; i < shape.size(); ++i) {
      const bool reduced = std::find(axes_.begin(), axes_.end(), i) != axes_.end();
      (reduced ? inner_ : outer_).add(static_cast<size_t>(shape[i]), {strides[i]});
    }
    outer_.finish();
    inner_.finish();
  }

  /** @brief The reduced axes, normalized (sorted, non-negative). */
  const std::vector<size_t>& axes() const noexcept { return axes_; }
  /** @brief The output's shape (what the host allocated the output with). */
  const std::vector<int64_t>& out_shape() const noexcept { return out_shape_; }
  /** @brief The number of output elements. */
  size_t out_size() const noexcept { return outer_.size(); }
  /** @brief The number of input elements per output element (the divisor of a mean; 0 when a
   *         reduced dimension is 0). */
  size_t group_size() const noexcept { return inner_.size(); }

  /**
   * @brief Calls `f(size_t out, const Group& group)` for each output element, in row-major
   *        order, with the input elements it reduces over. No call when the output has no
   *        elements; a call with an empty group when a reduced dimension is 0 (write the
   *        reduction's identity).
   */
  template <class F>
  void for_each_output(F&& f) const {
    const size_t stride = outer_.inner_strides()[0];
    outer_.for_each_run(0, outer_.size(), {0}, [&](const std::array<size_t, 1>& base, size_t out, size_t len) {
      for (size_t i = 0; i < len; ++i) {
        const Group group(base[0] + i * stride, &inner_);
        f(out + i, group);
      }
    });
  }

 private:
  std::vector<size_t> axes_;
  std::vector<int64_t> out_shape_;
  detail::Walk<1> outer_, inner_;
};

}  // namespace shapes
}  // namespace plugin
}  // namespace devplug

#endif  // DEVPLUG_PLUGIN_SHAPES_HPP
