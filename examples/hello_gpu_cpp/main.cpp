// hello_gpu (C++17): loads devplug's CUDA plugin, picks GPU:0 when there is one (the CPU when
// not, saying why), runs a 2-layer forward pass there (Gemm with a fused ReLU, Gemm, Softmax:
// composites that run as their decompositions, every step a GPU kernel) and checks it against
// the same ops on the CPU. Every decision is visible in the placement log
// (DEVPLUG_LOG_PLACEMENT=1).
//
//   hello_gpu_cpp [path/to/libdevplug_cuda.so]
#include <devplug/devplug.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

std::vector<float> pattern(size_t n, float scale, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>((i * 7919u + seed * 104729u) % 1000u) / 1000.0f - 0.5f);
  return v;
}

// relu(x W1 + b1) W2 + b2, then Softmax, on `device`; the result copied to the CPU.
std::vector<float> forward(devplug::Runtime& rt, const devplug::Device& device) {
  const int64_t batch = 32, in = 128, hidden = 256, out = 10;
  auto t = [&](std::vector<int64_t> shape, float scale, unsigned seed) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return devplug::Tensor::from_vector<float>(device, shape, pattern(n, scale, seed));
  };
  devplug::Tensor x = t({batch, in}, 2.0f, 1), w1 = t({in, hidden}, 0.1f, 2), b1 = t({hidden}, 0.1f, 3);
  devplug::Tensor w2 = t({hidden, out}, 0.1f, 4), b2 = t({out}, 0.1f, 5);
  devplug::RunOptions on;
  on.device = device;
  devplug::Attrs relu;
  relu.set("relu", true);
  const devplug::Op gemm = rt.op("Gemm"), softmax = rt.op("Softmax");
  devplug::Tensor h = rt.run1(gemm, {&x, &w1, &b1}, &relu, on);
  devplug::Tensor logits = rt.run1(gemm, {&h, &w2, &b2}, nullptr, on);
  devplug::Tensor probs = rt.run1(softmax, {&logits}, nullptr, on);
  return probs.copy_to(rt.device("CPU:0")).to_vector<float>();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string plugin = argc > 1 ? argv[1] : DEVPLUG_CUDA_PLUGIN;
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    rt.load_plugin(plugin);  // loads without a GPU too (the platform then has no devices)
    devplug::Device device;
    try {
      device = rt.device("GPU:0");
    } catch (const devplug::Error& e) {
      std::printf("no GPU (%s): running on the CPU instead\n", e.what());
      device = rt.device("CPU:0");
    }
    const devplug::DeviceProperties p = device.properties();
    std::printf("running on %s (%s, %s)\n", p.name.c_str(), p.platform.c_str(), p.hardware_name.c_str());

    const std::vector<float> got = forward(rt, device);
    const std::vector<float> want = forward(rt, rt.device("CPU:0"));
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::fmax(worst, std::fabs(double(got[i]) - double(want[i])));
    double row = 0;
    for (size_t j = 0; j < 10; ++j) row += got[j];
    std::printf("softmax row 0 sums to %.6f; largest difference from the CPU %.3g\n", row, worst);
    if (worst > 1e-5 || std::fabs(row - 1.0) > 1e-5) {
      std::fprintf(stderr, "hello_gpu: results differ from the CPU's\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_gpu: %s\n", e.what());
    return 1;
  }
  std::printf("hello_gpu_cpp: OK\n");
  return 0;
}
