// train_graph_cpp (C++17): linear regression trained by gradient descent, written once as a
// devplug graph and run 300 times. The weights are variables; a device setter keeps them on
// CPU:0 and puts the computation on CPU:1 ("variables on one device, compute on another", as a
// host with an accelerator would), decided when the graph is built. One run computes the
// loss, the gradients and the two assignments; the assignments take effect when the run
// succeeds.
//
// Prints the loss every 100 steps, the learned weights next to the true ones, then
// "train_graph_cpp: OK" when the weights are within 1e-2 of them.
#include <devplug/devplug.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(2));
    const devplug::Device params = rt.device("CPU:0"), compute = rt.device("CPU:1");

    // Data: y = x . [2, -3, 0.5] + 1, for 64 samples of 3 features.
    const int64_t n = 64, k = 3;
    const float true_w[3] = {2.0f, -3.0f, 0.5f}, true_b = 1.0f;
    std::vector<float> xs(n * k), ys(n);
    unsigned seed = 7;
    for (int64_t i = 0; i < n; ++i) {
      float y = true_b;
      for (int64_t j = 0; j < k; ++j) {
        seed = seed * 1664525u + 1013904223u;
        const float v = static_cast<float>((seed >> 9) & 0xffff) / 65535.0f * 2.0f - 1.0f;
        xs[i * k + j] = v;
        y += v * true_w[j];
      }
      ys[i] = y;
    }
    const devplug::Tensor x = devplug::Tensor::from_vector<float>(params, {n, k}, xs);
    const devplug::Tensor y = devplug::Tensor::from_vector<float>(params, {n, 1}, ys);

    // The placement policy: variables on CPU:0, every op on CPU:1.
    devplug::DeviceScope policy = rt.setter_scope([&](const devplug::PlacementQuery& q) {
      return q.kind == devplug::OpKind::Variable ? params : compute;
    });

    devplug::Graph g;
    devplug::Variable w, b;
    devplug::GraphOutput x_in, y_in, loss, update_w, update_b;
    {
      devplug::ScopeGuard in = policy.enter();
      w = rt.variable("w", devplug::Tensor::zeros(params, devplug::DType::F32, {k, 1}));
      b = rt.variable("b", devplug::Tensor::zeros(params, devplug::DType::F32, {1}));
      const devplug::Op matmul = rt.op("MatMul"), add = rt.op("Add"), sub = rt.op("Sub"),
                        mul = rt.op("Mul"), mean = rt.op("ReduceMean");
      x_in = g.placeholder("x", devplug::DType::F32, {-1, k});
      y_in = g.placeholder("y", devplug::DType::F32, {-1, 1});
      const auto w_now = g.read("w_now", w), b_now = g.read("b_now", b);
      const auto pred = g.op1(rt, "pred", add, {g.op1(rt, "xw", matmul, {x_in, w_now}), b_now});
      const auto err = g.op1(rt, "err", sub, {pred, y_in});
      loss = g.op1(rt, "loss", mean, {g.op1(rt, "sq", mul, {err, err})});
      // d loss / d w = 2/n x^T err;  d loss / d b = 2 mean(err)
      devplug::Attrs xt;
      xt.set("transpose_a", true);
      devplug::Attrs rows;
      rows.set("axes", std::vector<int64_t>{0});
      const float step = 0.1f;
      const auto two_lr = g.constant("two_lr", devplug::Tensor::from_vector<float>(params, {}, {2.0f * step}));
      const auto inv_n = g.constant(
          "lr_over_n", devplug::Tensor::from_vector<float>(params, {}, {2.0f * step / static_cast<float>(n)}));
      const auto grad_w = g.op1(rt, "grad_w", matmul, {x_in, err}, &xt);
      const auto grad_b = g.op1(rt, "grad_b", mean, {err}, &rows);
      update_w = g.assign("update_w", w, g.op1(rt, "w_next", sub, {w_now, g.op1(rt, "dw", mul, {grad_w, inv_n})}));
      update_b = g.assign("update_b", b, g.op1(rt, "b_next", sub, {b_now, g.op1(rt, "db", mul, {grad_b, two_lr})}));
    }

    for (int s = 1; s <= 300; ++s) {
      std::vector<devplug::Tensor> out =
          g.run(rt, {{x_in, &x}, {y_in, &y}}, {loss, update_w, update_b});
      if (out[0].device().get() != compute.get()) {
        std::printf("train_graph_cpp: the loss was computed on %s\n", out[0].device().name().c_str());
        return 1;
      }
      if (s % 100 == 0) std::printf("step %3d: loss %.6f\n", s, out[0].to_vector<float>()[0]);
    }

    const std::vector<float> lw = w.read().to_vector<float>();
    const float lb = b.read().to_vector<float>()[0];
    std::printf("learned w = [%.4f, %.4f, %.4f], b = %.4f (true: [2, -3, 0.5], 1); on %s, computed on %s\n",
                lw[0], lw[1], lw[2], lb, w.device().name().c_str(), compute.name().c_str());
    bool ok = std::fabs(lb - true_b) < 1e-2f;
    for (int j = 0; j < 3; ++j) ok = ok && std::fabs(lw[j] - true_w[j]) < 1e-2f;
    if (!ok) {
      std::printf("train_graph_cpp: the weights did not converge\n");
      return 1;
    }
    std::printf("train_graph_cpp: OK\n");
    return 0;
  } catch (const devplug::Error& e) {
    std::fprintf(stderr, "train_graph_cpp: %s\n", e.what());
    return 1;
  }
}
