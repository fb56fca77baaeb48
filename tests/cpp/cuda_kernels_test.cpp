// The CUDA plugin's kernels (plugins/cuda/src/kernels/cuda/*.cu) compiled for the host, through
// a shim that stands in for CUDA's built-ins (thread and block indices, __syncthreads, the bit
// casts, the f16 conversions), each run on the same inputs as the CPU device's op: the results
// must agree, bit for bit where both are exact or correctly rounded (arithmetic, comparisons,
// every Cast, integer reductions, data movement) and within a few ulps where the libraries'
// math functions may differ (Exp, Log, Tanh, Sigmoid, Pow, float sums in another order).
//
// This checks the kernels' semantics on any machine — integer wrapping, division by zero,
// saturating casts, NaN propagation, half rounding, broadcast and reduction walks — without a
// GPU. What it cannot check (the driver calls, streams, launches) the GPU tests of
// plugins/cuda/tests/cuda.rs do, on a machine with one.

#include <devplug/devplug.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../plugins/cuda/fake/host_shim.hpp"

// Runs a grid-stride kernel as one thread that covers everything.
template <class F>
static void launch_serial(F f) {
  blockDim = {1, 1, 1};
  gridDim = {1, 1, 1};
  blockIdx = {0, 0, 0};
  threadIdx = {0, 0, 0};
  f();
}

// Runs a kernel that synchronizes its block: `block` threads per block, blocks one after another.
template <class F>
static void launch_blocks(unsigned grid, unsigned block, F f) {
  blockDim = {block, 1, 1};
  gridDim = {grid, 1, 1};
  g_barrier.count = block;
  for (unsigned b = 0; b < grid; ++b) {
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] {
        blockIdx = {b, 0, 0};
        threadIdx = {t, 0, 0};
        f();
      });
    for (auto& th : threads) th.join();
  }
}

// ---- checks -----------------------------------------------------------------------------------

namespace {

int g_passed = 0;
int g_failed = 0;

void report(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL %s\n", what.c_str());
    std::fflush(stdout);
  }
}

using devplug::DType;
using Bytes = std::vector<uint8_t>;
using Shape = std::vector<int64_t>;

size_t dsize(DType d) { return dp_dtype_size(static_cast<dp_dtype_t>(d)); }
const char* dname(DType d) { return dp_dtype_name(static_cast<dp_dtype_t>(d)); }
int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16; }

// Element i as a double (NaN stays NaN).
double value(DType d, const Bytes& b, size_t i) {
  const uint8_t* p = b.data() + i * dsize(d);
  switch (d) {
    case DType::F32: return dp_bits<float>(*reinterpret_cast<const uint32_t*>(p));
    case DType::F64: return dp_bits<double>(*reinterpret_cast<const uint64_t*>(p));
    case DType::I32: return static_cast<double>(*reinterpret_cast<const int32_t*>(p));
    case DType::I64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DType::U8: return *p;
    case DType::Bool: return *p;
    case DType::F16: return dp_host_h2f(*reinterpret_cast<const uint16_t*>(p));
    case DType::BF16: return dp_bits<float>(uint32_t(*reinterpret_cast<const uint16_t*>(p)) << 16);
    default: return 0;
  }
}

// Sample values of each dtype, edge cases first (from f64, as Cast would give them).
Bytes samples(DType d, size_t n, unsigned seed) {
  static const double floats[] = {0.0, -0.0, 1.0, -1.0, 2.5, -3.75, 0.1, 1e30, -1e-30, 1e-40, 65504.0,
                                  70000.0, INFINITY, -INFINITY, NAN, 1000.5, 3.0, -2.0, 0.5, 7.0};
  static const double ints[] = {0, 1, -1, 2147483647.0, -2147483648.0, 7, -7, 100, 3, -2, 5, 255, 128, 2};
  Bytes b(n * dsize(d));
  for (size_t i = 0; i < n; ++i) {
    size_t k = (i * 7 + seed * 3) % 20;
    double v;
    if (is_float(d)) {
      v = k < 20 ? floats[k] : 0;
      if (i >= 20) v = std::sin(double(i * 13 + seed)) * 10.0;
    } else {
      v = ints[k % 14];
      if (i >= 14) v = std::fmod(double(i * 37 + seed * 11), 50.0) - 20.0;
    }
    uint8_t* p = b.data() + i * dsize(d);
    switch (d) {
      case DType::F32: { float f = float(v); std::memcpy(p, &f, 4); break; }
      case DType::F64: std::memcpy(p, &v, 8); break;
      case DType::I32: { int32_t x = v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::I64: { int64_t x = int64_t(v); if (v >= 2147483647.0) x = INT64_MAX; if (v <= -2147483648.0) x = INT64_MIN; std::memcpy(p, &x, 8); break; }
      case DType::U8: *p = uint8_t(int64_t(std::fabs(v)) & 0xff); break;
      case DType::Bool: *p = (i * 5 + seed) % 3 == 0; break;
      case DType::F16: { uint16_t h = dp_host_f2h(float(v)); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { uint16_t h = f2bf(float(v)).bits; std::memcpy(p, &h, 2); break; }
      default: break;
    }
  }
  return b;
}

// ---- the CPU device's side ----

struct Cpu {
  devplug::Runtime rt;
  devplug::Device cpu;
  Cpu() : rt(devplug::RuntimeOptions()), cpu(rt.device("CPU:0")) {}

  Bytes run(const char* op, const std::vector<std::pair<DType, std::pair<Shape, Bytes>>>& ins,
            const devplug::Attrs* attrs = nullptr) {
    std::vector<devplug::Tensor> ts;
    for (auto& in : ins)
      ts.push_back(devplug::Tensor::from_data(cpu, in.first, in.second.first, in.second.second.data(),
                                              in.second.second.size()));
    std::vector<const devplug::Tensor*> ptrs;
    for (auto& t : ts) ptrs.push_back(&t);
    devplug::Tensor out = rt.run1(rt.op(op), ptrs, attrs);
    Bytes b(out.byte_size());
    out.read(b.data(), b.size());
    return b;
  }
};

Cpu* g_cpu = nullptr;

// Compares element by element: equal, both NaN, or within `rel` (relative, floored at 1).
void compare(const std::string& what, DType d, const Bytes& got, const Bytes& want, double rel) {
  if (got.size() != want.size()) {
    report(false, what + ": sizes differ");
    return;
  }
  size_t n = got.size() / dsize(d);
  for (size_t i = 0; i < n; ++i) {
    double g = value(d, got, i), w = value(d, want, i);
    bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::fabs(g - w) <= rel * std::fmax(std::fabs(w), 1.0);
    if (!ok) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s: element %zu: kernel %.17g, CPU %.17g", what.c_str(), i, g, w);
      report(false, buf);
      return;
    }
  }
  report(true, what);
}

// A Geo over `out` for inputs broadcast to it, dimension by dimension (no merging).
Geo make_geo(const Shape& out, const std::vector<Shape>& ins) {
  Geo g;
  std::memset(&g, 0, sizeof g);
  g.n = count(out);
  g.rank = int32_t(out.size());
  for (size_t d = 0; d < out.size(); ++d) g.shape[d] = out[d];
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    size_t pad = out.size() - s.size();
    int64_t step = 1;
    for (size_t j = s.size(); j-- > 0;) {
      g.st[k][j + pad] = s[j] == 1 ? 0 : step;
      step *= s[j];
    }
  }
  return g;
}

// ---- kernels by name ----

using BinC = void (*)(i64, const void*, const void*, void*);
using BinS = void (*)(Geo, const void*, const void*, void*);

#define BIN_ENTRY(op, T, tn) \
  {#op "_" #tn, reinterpret_cast<BinC>(&dp_##op##_##tn##_c), reinterpret_cast<BinS>(&dp_##op##_##tn##_s)}
struct BinKernel {
  const char* name;
  BinC c;
  BinS s;
};
#define ALL_NUM(op) BIN_ENTRY(op, float, f32), BIN_ENTRY(op, double, f64), BIN_ENTRY(op, i32, i32), \
  BIN_ENTRY(op, i64, i64), BIN_ENTRY(op, u8, u8), BIN_ENTRY(op, f16, f16), BIN_ENTRY(op, bf16, bf16)
const BinKernel kBinary[] = {
    ALL_NUM(add), ALL_NUM(sub), ALL_NUM(mul), ALL_NUM(div), ALL_NUM(pow), ALL_NUM(maximum), ALL_NUM(minimum),
    BIN_ENTRY(maximum, b8, bool), BIN_ENTRY(minimum, b8, bool),
    ALL_NUM(equal), ALL_NUM(not_equal), ALL_NUM(less), ALL_NUM(less_equal), ALL_NUM(greater),
    ALL_NUM(greater_equal), BIN_ENTRY(equal, b8, bool), BIN_ENTRY(not_equal, b8, bool),
};

const BinKernel* find_binary(const std::string& name) {
  for (auto& k : kBinary)
    if (name == k.name) return &k;
  return nullptr;
}

const DType kNumeric[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8, DType::F16, DType::BF16};
const DType kAll[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8, DType::Bool, DType::F16, DType::BF16};

void binary_ops() {
  std::printf("-- binary ops and comparisons, contiguous and broadcast\n");
  struct Op {
    const char* op;
    const char* stem;
    bool compare;
    double rel;
  };
  const Op ops[] = {{"Add", "add", false, 0},          {"Sub", "sub", false, 0},
                    {"Mul", "mul", false, 0},          {"Div", "div", false, 0},
                    {"Pow", "pow", false, 1e-6},       {"Maximum", "maximum", false, 0},
                    {"Minimum", "minimum", false, 0},  {"Equal", "equal", true, 0},
                    {"NotEqual", "not_equal", true, 0}, {"Less", "less", true, 0},
                    {"LessEqual", "less_equal", true, 0}, {"Greater", "greater", true, 0},
                    {"GreaterEqual", "greater_equal", true, 0}};
  for (const Op& op : ops) {
    for (DType d : kAll) {
      const BinKernel* k = find_binary(std::string(op.stem) + "_" + dname(d));
      if (k == nullptr) continue;  // the op does not take this dtype
      DType out_d = op.compare ? DType::Bool : d;
      double rel = d == DType::F16 || d == DType::BF16 ? (op.rel > 0 ? 1e-2 : 0) : op.rel;
      // Same shapes: every sample against every other.
      Shape s{20, 20};
      Bytes x(400 * dsize(d)), y(400 * dsize(d));
      Bytes base = samples(d, 20, 1);
      for (size_t i = 0; i < 20; ++i)
        for (size_t j = 0; j < 20; ++j) {
          std::memcpy(&x[(i * 20 + j) * dsize(d)], &base[i * dsize(d)], dsize(d));
          std::memcpy(&y[(i * 20 + j) * dsize(d)], &base[j * dsize(d)], dsize(d));
        }
      Bytes got(400 * dsize(out_d));
      launch_serial([&] { k->c(400, x.data(), y.data(), got.data()); });
      Bytes want = g_cpu->run(op.op, {{d, {s, x}}, {d, {s, y}}});
      compare(std::string(op.op) + " " + dname(d) + " (contiguous)", out_d, got, want, rel);
      // Broadcasting on both sides: [4, 1, 5] with [3, 1].
      Shape sa{4, 1, 5}, sb{3, 1}, so{4, 3, 5};
      Bytes a = samples(d, 20, 2), b = samples(d, 3, 3);
      Geo g = make_geo(so, {sa, sb});
      Bytes got2(60 * dsize(out_d));
      launch_serial([&] { k->s(g, a.data(), b.data(), got2.data()); });
      Bytes want2 = g_cpu->run(op.op, {{d, {sa, a}}, {d, {sb, b}}});
      compare(std::string(op.op) + " " + dname(d) + " (broadcast)", out_d, got2, want2, rel);
    }
  }
}

using UnC = void (*)(i64, const void*, void*);
struct UnKernel {
  const char* name;
  UnC c;
};
#define UN_ENTRY(op, tn) {#op "_" #tn, reinterpret_cast<UnC>(&dp_##op##_##tn##_c)}
#define UN_FLOATS(op) UN_ENTRY(op, f32), UN_ENTRY(op, f64), UN_ENTRY(op, f16), UN_ENTRY(op, bf16)
const UnKernel kUnary[] = {UN_FLOATS(neg), UN_ENTRY(neg, i32), UN_ENTRY(neg, i64), UN_FLOATS(abs), UN_ENTRY(abs, i32),
                           UN_ENTRY(abs, i64), UN_ENTRY(abs, u8), UN_FLOATS(exp), UN_FLOATS(log), UN_FLOATS(tanh),
                           UN_FLOATS(sqrt), UN_FLOATS(rsqrt), UN_FLOATS(sigmoid)};

void unary_ops() {
  std::printf("-- unary ops\n");
  struct Op {
    const char* op;
    const char* stem;
    double rel;
  };
  const Op ops[] = {{"Neg", "neg", 0},      {"Abs", "abs", 0},   {"Exp", "exp", 1e-5},
                    {"Log", "log", 1e-5},   {"Tanh", "tanh", 1e-5}, {"Sqrt", "sqrt", 0},
                    {"Rsqrt", "rsqrt", 0},  {"Sigmoid", "sigmoid", 1e-5}};
  for (const Op& op : ops)
    for (DType d : kNumeric) {
      std::string name = std::string(op.stem) + "_" + dname(d);
      const UnKernel* k = nullptr;
      for (auto& u : kUnary)
        if (name == u.name) k = &u;
      if (k == nullptr) continue;
      double rel = d == DType::F16 || d == DType::BF16 ? (op.rel > 0 ? 1e-2 : 0) : op.rel;
      Shape s{64};
      Bytes x = samples(d, 64, 5), got(64 * dsize(d));
      launch_serial([&] { k->c(64, x.data(), got.data()); });
      compare(std::string(op.op) + " " + dname(d), d, got, g_cpu->run(op.op, {{d, {s, x}}}), rel);
    }
}

using CastFn = void (*)(i64, const void*, void*);
#define CAST_ROW(S, sn)                                                                                      \
  {reinterpret_cast<CastFn>(&dp_cast_##sn##_f32), reinterpret_cast<CastFn>(&dp_cast_##sn##_f64),            \
   reinterpret_cast<CastFn>(&dp_cast_##sn##_i32), reinterpret_cast<CastFn>(&dp_cast_##sn##_i64),            \
   reinterpret_cast<CastFn>(&dp_cast_##sn##_u8), reinterpret_cast<CastFn>(&dp_cast_##sn##_bool),            \
   reinterpret_cast<CastFn>(&dp_cast_##sn##_f16), reinterpret_cast<CastFn>(&dp_cast_##sn##_bf16)}
// Rows and columns in the order of kAll.
const CastFn kCast[8][8] = {CAST_ROW(float, f32), CAST_ROW(double, f64), CAST_ROW(i32, i32), CAST_ROW(i64, i64),
                            CAST_ROW(u8, u8),     CAST_ROW(b8, bool),    CAST_ROW(f16, f16), CAST_ROW(bf16, bf16)};

void casts() {
  std::printf("-- Cast, every pair\n");
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      DType from = kAll[i], to = kAll[j];
      Shape s{40};
      Bytes x = samples(from, 40, 7), got(40 * dsize(to));
      launch_serial([&] { kCast[i][j](40, x.data(), got.data()); });
      devplug::Attrs a;
      a.set("dtype", to);
      compare(std::string("Cast ") + dname(from) + " -> " + dname(to), to, got, g_cpu->run("Cast", {{from, {s, x}}}, &a),
              0);
    }
}

using RedFn = void (*)(Red, const void*, void*);
struct RedKernel {
  const char* name;
  RedFn b, t;
};
#define RED_ENTRY(op, tn) \
  {#op "_" #tn, reinterpret_cast<RedFn>(&dp_reduce_##op##_##tn##_b), reinterpret_cast<RedFn>(&dp_reduce_##op##_##tn##_t)}
#define RED_ALL(op) RED_ENTRY(op, f32), RED_ENTRY(op, f64), RED_ENTRY(op, i32), RED_ENTRY(op, i64), \
  RED_ENTRY(op, u8), RED_ENTRY(op, f16), RED_ENTRY(op, bf16)
const RedKernel kReduce[] = {RED_ALL(sum), RED_ALL(max), RED_ALL(min), RED_ENTRY(mean, f32), RED_ENTRY(mean, f64),
                             RED_ENTRY(mean, i32), RED_ENTRY(mean, u8), RED_ENTRY(mean, f16), RED_ENTRY(mean, bf16)};

// A Red over `shape` reducing the axes marked in `reduced`, dimension by dimension.
Red make_red(const Shape& shape, const std::vector<bool>& reduced) {
  Red r;
  std::memset(&r, 0, sizeof r);
  std::vector<int64_t> st(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    st[d] = step;
    step *= shape[d];
  }
  r.n_out = 1;
  r.count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) {
      r.rshape[r.rr] = shape[d];
      r.rst[r.rr++] = st[d];
      r.count *= shape[d];
    } else {
      r.kshape[r.kr] = shape[d];
      r.kst[r.kr++] = st[d];
      r.n_out *= shape[d];
    }
  }
  return r;
}

void reductions() {
  std::printf("-- reductions, a thread per output and a block per output\n");
  struct Op {
    const char* op;
    const char* stem;
  };
  const Op ops[] = {{"ReduceSum", "sum"}, {"ReduceMax", "max"}, {"ReduceMin", "min"}, {"ReduceMean", "mean"}};
  Shape shape{3, 4, 5};
  const std::vector<std::vector<int64_t>> axes_list = {{0}, {1, 2}, {0, 2}, {}};
  for (const Op& op : ops)
    for (DType d : kNumeric) {
      std::string name = std::string(op.stem) + "_" + dname(d);
      const RedKernel* k = nullptr;
      for (auto& r : kReduce)
        if (name == r.name) k = &r;
      if (k == nullptr) continue;
      // Finite samples: a NaN would make every sum NaN and hide the rest.
      Bytes x = samples(d, 60, 9);
      for (size_t i = 0; i < 60; ++i)
        if (std::isnan(value(d, x, i)) || std::isinf(value(d, x, i))) std::memset(&x[i * dsize(d)], 0, dsize(d));
      double rel = is_float(d) ? (d == DType::F16 || d == DType::BF16 ? 1e-2 : 1e-5) : 0;
      for (auto& axes : axes_list) {
        std::vector<bool> reduced(3, axes.empty());
        for (int64_t a : axes) reduced[size_t(a)] = true;
        Red p = make_red(shape, reduced);
        devplug::Attrs a;
        a.set("axes", axes);
        Bytes want = g_cpu->run(op.op, {{d, {shape, x}}}, &a);
        Bytes got_t(size_t(p.n_out) * dsize(d)), got_b(size_t(p.n_out) * dsize(d));
        launch_serial([&] { k->t(p, x.data(), got_t.data()); });
        launch_blocks(2, 8, [&] { k->b(p, x.data(), got_b.data()); });
        std::string what = std::string(op.op) + " " + dname(d) + " axes " + std::to_string(axes.size());
        compare(what + " (_t)", d, got_t, want, rel);
        compare(what + " (_b)", d, got_b, want, rel);
      }
    }
}

void data_movement() {
  std::printf("-- strided copies, Select, Fill, Iota\n");
  // Transpose [2, 3, 4] by [2, 0, 1] for every element size, as Walks over the output.
  for (DType d : {DType::U8, DType::F16, DType::F32, DType::F64}) {
    Shape in{2, 3, 4}, out{4, 2, 3};
    Bytes x = samples(d, 24, 11), got(24 * dsize(d));
    Walk w;
    std::memset(&w, 0, sizeof w);
    w.n = 24;
    w.rank = 3;
    const int64_t in_st[3] = {12, 4, 1}, perm[3] = {2, 0, 1}, out_st[3] = {6, 3, 1};
    for (int k = 0; k < 3; ++k) {
      w.shape[k] = out[size_t(k)];
      w.src[k] = in_st[perm[k]];
      w.dst[k] = out_st[k];
    }
    launch_serial([&] {
      switch (dsize(d)) {
        case 1: dp_copy_1(w, reinterpret_cast<const u8*>(x.data()), reinterpret_cast<u8*>(got.data())); break;
        case 2: dp_copy_2(w, reinterpret_cast<const u16*>(x.data()), reinterpret_cast<u16*>(got.data())); break;
        case 4: dp_copy_4(w, reinterpret_cast<const u32*>(x.data()), reinterpret_cast<u32*>(got.data())); break;
        default: dp_copy_8(w, reinterpret_cast<const u64*>(x.data()), reinterpret_cast<u64*>(got.data())); break;
      }
    });
    devplug::Attrs a;
    a.set("perm", std::vector<int64_t>{2, 0, 1});
    Bytes want = g_cpu->run("Transpose", {{d, {in, x}}}, &a);
    report(got == want, std::string("Transpose ") + dname(d));
  }
  // Select with all three operands broadcast.
  {
    Shape sc{2, 1, 3}, sx{4, 1}, sy{3}, so{2, 4, 3};
    Bytes c = samples(DType::Bool, 6, 1), x = samples(DType::F32, 4, 2), y = samples(DType::F32, 3, 3);
    Geo g = make_geo(so, {sc, sx, sy});
    Bytes got(24 * 4);
    launch_serial([&] {
      dp_select_4_s(g, c.data(), reinterpret_cast<const u32*>(x.data()), reinterpret_cast<const u32*>(y.data()),
                    reinterpret_cast<u32*>(got.data()));
    });
    Bytes want = g_cpu->run("Select", {{DType::Bool, {sc, c}}, {DType::F32, {sx, x}}, {DType::F32, {sy, y}}});
    report(got == want, "Select f32 (broadcast)");
  }
  // Fill by element size.
  {
    Bytes got(10 * 2);
    launch_serial([&] { dp_fill_2(10, u16(0x3c00), reinterpret_cast<u16*>(got.data())); });
    bool ok = true;
    for (size_t i = 0; i < 10; ++i) ok = ok && got[2 * i] == 0x00 && got[2 * i + 1] == 0x3c;
    report(ok, "Fill 2-byte elements");
  }
  // Iota along each axis of [3, 4, 5], every dtype but bool.
  struct IotaK {
    DType d;
    void (*f)(i64, i64, i64, void*);
  };
  const IotaK iotas[] = {{DType::F32, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_f32)},
                         {DType::F64, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_f64)},
                         {DType::I32, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_i32)},
                         {DType::I64, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_i64)},
                         {DType::U8, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_u8)},
                         {DType::F16, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_f16)},
                         {DType::BF16, reinterpret_cast<void (*)(i64, i64, i64, void*)>(&dp_iota_bf16)}};
  Shape s{3, 4, 5};
  const int64_t inner[3] = {20, 5, 1};
  for (const IotaK& k : iotas)
    for (int axis = 0; axis < 3; ++axis) {
      Bytes got(60 * dsize(k.d));
      launch_serial([&] { k.f(60, inner[axis], s[size_t(axis)], got.data()); });
      devplug::Attrs a;
      a.set("shape", s).set("axis", int64_t(axis)).set("dtype", k.d);
      devplug::Tensor t = g_cpu->rt.run1(g_cpu->rt.op("Iota"), {}, &a);
      Bytes want(t.byte_size());
      t.read(want.data(), want.size());
      report(got == want, std::string("Iota ") + dname(k.d) + " axis " + std::to_string(axis));
    }
}

}  // namespace

int main() {
  try {
    Cpu cpu;
    g_cpu = &cpu;
    binary_ops();
    unary_ops();
    casts();
    reductions();
    data_movement();
  } catch (const devplug::Error& e) {
    std::printf("FAIL devplug::Error: %s\n", e.what());
    ++g_failed;
  }
  std::printf("cuda_kernels_test: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 && g_passed > 0 ? 0 : 1;
}
