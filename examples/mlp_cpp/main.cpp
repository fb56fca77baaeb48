// mlp_cpp (C++17): a 2-layer MLP forward pass (64x256 -> 512 -> 10, bias, ReLU, softmax, f32)
// as eager devplug ops on the CPU device, one thread; checks the result against plain loops
// and prints microseconds per forward (median).
//
//   mlp_cpp [iterations]      (default 20; the benchmark in docs/performance.md uses 2000)
#include <devplug/devplug.hpp>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

std::vector<float> pattern(size_t n, float scale, unsigned seed) {
  std::vector<float> v(n);
  unsigned x = seed;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = scale * (static_cast<float>((x >> 9) & 0xffff) / 65535.0f - 0.5f);
  }
  return v;
}

// y = x[m,k] * w[k,n] + b[n]
std::vector<float> dense(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                         int m, int k, int n) {
  std::vector<float> y(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = b[j];
      for (int p = 0; p < k; ++p) s += static_cast<double>(x[i * k + p]) * w[p * n + j];
      y[i * n + j] = static_cast<float>(s);
    }
  return y;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const int batch = 64, in = 256, hidden = 512, out = 10;
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().intra_op_threads(1).discover_plugins(false));
    devplug::Device cpu = rt.device("CPU:0");
    const auto xs = pattern(static_cast<size_t>(batch) * in, 2.0f, 1);
    const auto w1s = pattern(static_cast<size_t>(in) * hidden, 0.1f, 2);
    const auto b1s = pattern(hidden, 0.1f, 3);
    const auto w2s = pattern(static_cast<size_t>(hidden) * out, 0.1f, 4);
    const auto b2s = pattern(out, 0.1f, 5);
    auto x = devplug::Tensor::from_vector<float>(cpu, {batch, in}, xs);
    auto w1 = devplug::Tensor::from_vector<float>(cpu, {in, hidden}, w1s);
    auto b1 = devplug::Tensor::from_vector<float>(cpu, {hidden}, b1s);
    auto w2 = devplug::Tensor::from_vector<float>(cpu, {hidden, out}, w2s);
    auto b2 = devplug::Tensor::from_vector<float>(cpu, {out}, b2s);

    const devplug::Op matmul = rt.op("MatMul"), add = rt.op("Add"), relu = rt.op("Relu"), softmax = rt.op("Softmax");
    const devplug::Op gemm = rt.op("Gemm");
    devplug::Attrs with_relu;
    with_relu.set("relu", true);
    // Three ops: Gemm = relu?(x W + b), with the bias and the ReLU done in the GEMM's output
    // pass (ONNX's Gemm, fused as ONNX Runtime fuses Gemm + Relu), then Softmax.
    auto forward = [&]() {
      devplug::Tensor h = rt.run1(gemm, {&x, &w1, &b1}, &with_relu);
      devplug::Tensor logits = rt.run1(gemm, {&h, &w2, &b2});
      return rt.run1(softmax, {&logits});
    };
    // The same with one op per step: MatMul, Add, Relu, MatMul, Add, Softmax.
    auto unfused = [&]() {
      devplug::Tensor h = rt.run1(matmul, {&x, &w1});
      h = rt.run1(add, {&h, &b1});
      h = rt.run1(relu, {&h});
      devplug::Tensor logits = rt.run1(matmul, {&h, &w2});
      logits = rt.run1(add, {&logits, &b2});
      return rt.run1(softmax, {&logits});
    };

    // correctness against plain loops
    std::vector<float> ref = dense(xs, w1s, b1s, batch, in, hidden);
    for (float& v : ref) v = std::max(v, 0.0f);
    ref = dense(ref, w2s, b2s, batch, hidden, out);
    for (int i = 0; i < batch; ++i) {
      float mx = ref[i * out];
      for (int j = 1; j < out; ++j) mx = std::max(mx, ref[i * out + j]);
      double sum = 0;
      for (int j = 0; j < out; ++j) sum += std::exp(static_cast<double>(ref[i * out + j] - mx));
      for (int j = 0; j < out; ++j)
        ref[i * out + j] = static_cast<float>(std::exp(static_cast<double>(ref[i * out + j] - mx)) / sum);
    }
    for (const auto& [name, f] : {std::pair<const char*, std::function<devplug::Tensor()>>{"fused", forward},
                                  {"unfused", unfused}}) {
      const std::vector<float> got = f().to_vector<float>();
      for (size_t i = 0; i < ref.size(); ++i) {
        if (std::fabs(got[i] - ref[i]) > 1e-4f) {
          std::fprintf(stderr, "mlp_cpp (%s): element %zu is %g, expected %g\n", name, i, got[i], ref[i]);
          return 1;
        }
      }
    }

    // Median microseconds of `f` over `iterations` runs.
    auto median_us = [&](auto&& f) {
      std::vector<double> us;
      us.reserve(iterations);
      for (int i = 0; i < iterations; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        devplug::Tensor y = f();
        const auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    // The floor in the same run: the two MatMuls alone (the forward's arithmetic, 97% of its
    // 17.4 MFLOP), so the ratio shows what the other ops and dispatch add.
    devplug::Tensor h0 = rt.run1(matmul, {&x, &w1});
    const double forward_us = median_us(forward);
    const double unfused_us = median_us(unfused);
    const double matmuls_us = median_us([&]() {
      devplug::Tensor h = rt.run1(matmul, {&x, &w1});
      return rt.run1(matmul, {&h0, &w2});
    });
    std::printf("2-layer MLP forward (64x256 -> 512 -> 10, f32, eager ops, 1 thread): median %.1f us over %d runs\n",
                forward_us, iterations);
    std::printf("  as Gemm(+ReLU), Gemm, Softmax; one op per step (MatMul, Add, Relu, MatMul, Add, Softmax): %.1f us\n",
                unfused_us);
    std::printf("  its two MatMuls alone: %.1f us (%.1f GFLOP/s); forward / MatMuls = %.2fx\n",
                matmuls_us, 2.0 * batch * hidden * (in + out) / matmuls_us / 1e3, forward_us / matmuls_us);
    std::printf("mlp_cpp: OK\n");
    return 0;
  } catch (const devplug::Error& e) {
    std::fprintf(stderr, "mlp_cpp: %s\n", e.what());
    return 1;
  }
}
