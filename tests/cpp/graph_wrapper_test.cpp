// (Named graph_wrapper_test: tests/c/graph_test.c already makes the target graph_test.)
// Graphs and variables through the C++ wrapper (devplug/graph.hpp, included by devplug.hpp):
// a two-layer MLP forward built once as a graph with its weights in variables, run with two
// batch sizes and compared with the same ops run eagerly; a training step through
// Graph::assign; a setter placing variables and computation apart; Variable as a shared
// value (copies, moves); and errors as devplug::Error naming the node (a null feed, an op with
// more outputs than Graph::op returns), after which the graph runs again. Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool close(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) > 1e-5f * (1.0f + std::fabs(b[i]))) return false;
  }
  return true;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i % 7) - 3.0f);
  return v;
}

void mlp(devplug::Runtime& rt, const devplug::Device& sim) {
  section("an MLP forward as a graph, weights in variables on SIM");
  const devplug::Device cpu = rt.device("CPU:0");
  const devplug::Tensor w1 = devplug::Tensor::from_vector<float>(cpu, {4, 8}, ramp(32, 0.25f));
  const devplug::Tensor b1 = devplug::Tensor::from_vector<float>(cpu, {8}, ramp(8, 0.5f));
  const devplug::Tensor w2 = devplug::Tensor::from_vector<float>(cpu, {8, 3}, ramp(24, 0.1f));
  devplug::Variable vw1 = rt.variable("w1", w1, sim);
  devplug::Variable vb1 = rt.variable("b1", b1, sim);
  devplug::Variable vw2 = rt.variable("w2", w2);  // default device
  CHECK(vw1.device().get() == sim.get());
  CHECK(vw2.device().get() == cpu.get());
  CHECK(vw1.name() == "w1");

  const devplug::Op matmul = rt.op("MatMul"), add = rt.op("Add"), relu = rt.op("Relu"),
                    softmax = rt.op("Softmax");
  devplug::Graph g;
  const devplug::GraphOutput x = g.placeholder("x", devplug::DType::F32, {-1, 4});
  const auto h = g.op1(rt, "h", matmul, {x, g.read("w1_read", vw1)}, nullptr, sim);
  const auto hb = g.op1(rt, "hb", add, {h, g.read("b1_read", vb1)}, nullptr, sim);
  const auto a = g.op1(rt, "a", relu, {hb}, nullptr, sim);
  const auto logits = g.op1(rt, "logits", matmul, {a, g.read("w2_read", vw2)});
  devplug::Attrs axis;
  axis.set("axis", static_cast<int64_t>(-1));
  const auto probs = g.op1(rt, "probs", softmax, {logits}, &axis);
  CHECK(g.node_count() == 9);
  CHECK(g.find("probs").node == probs.node);
  CHECK(g.node_name(probs) == "probs");
  CHECK(!g.spec(h));  // x has a dimension of any size: so have h and probs
  const devplug::GraphSpec ps = g.partial_spec(probs);
  CHECK(ps.dtype == devplug::DType::F32 && ps.shape == (devplug::Shape{-1, 3}) && !ps.complete());
  const devplug::GraphOutput any = g.placeholder("any", devplug::DType::I32);
  CHECK(g.partial_spec(any).dtype == devplug::DType::I32 && !g.partial_spec(any).shape);
  try {  // no batch size makes [-1, 4] x [4, 8] add to [-1, 3]: refused when added
    g.op1(rt, "wrong", add, {h, logits});
    CHECK(false);
  } catch (const devplug::Error& e) {
    CHECK(e.code() == DP_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("graph node 'wrong' (Add)") != std::string::npos);
  }
  const auto w1_spec = g.spec(g.find("w1_read"));
  CHECK(w1_spec && w1_spec->first == devplug::DType::F32 && w1_spec->second == (devplug::Shape{4, 8}));

  for (int64_t rows : {2, 5}) {
    const devplug::Tensor xt = devplug::Tensor::from_vector<float>(
        cpu, {rows, 4}, ramp(static_cast<size_t>(rows) * 4, 0.3f));
    std::vector<devplug::Tensor> out = g.run(rt, {{x, &xt}}, {probs, h});
    CHECK(out.size() == 2);
    CHECK(out[0].shape() == (devplug::Shape{rows, 3}));
    CHECK(out[1].device().get() == sim.get());  // SIM's own MatMul kernel
    // Eagerly, on the CPU.
    devplug::Tensor eh = rt.run1(matmul, {&xt, &w1});
    devplug::Tensor ehb = rt.run1(add, {&eh, &b1});
    devplug::Tensor ea = rt.run1(relu, {&ehb});
    devplug::Tensor el = rt.run1(matmul, {&ea, &w2});
    devplug::Tensor ep = rt.run1(softmax, {&el}, &axis);
    CHECK(close(out[0].to_vector<float>(), ep.to_vector<float>()));
    CHECK(close(out[1].to_vector<float>(), eh.to_vector<float>()));
  }
}

void training(devplug::Runtime& rt, const devplug::Device& sim) {
  section("a training step through Graph::assign; Variable is a shared value");
  const devplug::Device cpu = rt.device("CPU:0");
  devplug::Variable w =
      rt.variable("w", devplug::Tensor::from_vector<float>(cpu, {2}, {1.0f, 2.0f}), sim);
  devplug::Graph g;
  const auto grad = g.placeholder("grad", devplug::DType::F32, {2});
  const auto next = g.op1(rt, "next", rt.op("Sub"), {g.read("r", w), grad});
  const auto update = g.assign("update", w, next);
  const devplug::Tensor ones = devplug::Tensor::from_vector<float>(cpu, {2}, {1.0f, 1.0f});
  g.run(rt, {{grad, &ones}}, {update});
  CHECK((w.read().to_vector<float>() == std::vector<float>{0.0f, 1.0f}));
  devplug::Variable copy = w;  // another reference
  g.run(rt, {{grad, &ones}}, {update});
  CHECK((copy.read().to_vector<float>() == std::vector<float>{-1.0f, 0.0f}));
  devplug::Variable moved = std::move(copy);
  CHECK(!copy);
  moved.assign(devplug::Tensor::from_vector<float>(cpu, {2}, {5.0f, 6.0f}));
  CHECK((w.read().to_vector<float>() == std::vector<float>{5.0f, 6.0f}));
  const auto e = error_of([&] { w.assign(devplug::Tensor::from_vector<float>(cpu, {3}, {1, 2, 3})); });
  CHECK(e.first == DP_INVALID_ARGUMENT);
  CHECK(contains(e.second, "variable 'w'"));
  CHECK((w.read().to_vector<float>() == std::vector<float>{5.0f, 6.0f}));
}

void setter_placement(devplug::Runtime& rt, const devplug::Device& sim) {
  section("a setter places variables on the CPU and computation on SIM, when nodes are added");
  const devplug::Device cpu = rt.device("CPU:0");
  std::vector<std::string> seen;
  devplug::DeviceScope scope = rt.setter_scope([&](const devplug::PlacementQuery& q) {
    seen.push_back(q.name + (q.kind == devplug::OpKind::Variable ? " variable" : " compute"));
    return q.kind == devplug::OpKind::Variable ? cpu : sim;
  });
  devplug::Graph g;
  devplug::GraphOutput sum{};
  devplug::Variable v;
  {
    devplug::ScopeGuard in = scope.enter();
    v = rt.variable("v", devplug::Tensor::from_vector<float>(cpu, {2}, {1.0f, 2.0f}));
    const auto r = g.read("r", v);
    sum = g.op1(rt, "sum", rt.op("Add"), {r, r});
  }
  CHECK((seen == std::vector<std::string>{"v variable", "sum compute"}));
  CHECK(v.device().get() == cpu.get());
  std::vector<devplug::Tensor> out = g.run(rt, {}, {sum});
  CHECK(out[0].device().get() == sim.get());
  CHECK((out[0].to_vector<float>() == std::vector<float>{2.0f, 4.0f}));
}

void errors(devplug::Runtime& rt, const devplug::Device& sim) {
  section("errors as devplug::Error naming the node; the graph runs again");
  const devplug::Device cpu = rt.device("CPU:0");
  devplug::Graph g;
  const auto a = g.placeholder("a", devplug::DType::F32, {2, 3});
  auto e = error_of([&] { g.op1(rt, "mm", rt.op("MatMul"), {a, a}); });
  CHECK(e.first == DP_INVALID_ARGUMENT);
  CHECK(contains(e.second, "graph node 'mm' (MatMul)"));
  e = error_of([&] { g.placeholder("a", devplug::DType::F32); });
  CHECK(e.first == DP_INVALID_ARGUMENT && contains(e.second, "a node named 'a' exists"));
  e = error_of([&] { g.find("nope"); });
  CHECK(e.first == DP_NOT_FOUND);
  const auto root = g.op1(rt, "root", rt.op("Sqrt"), {a}, nullptr, sim);
  e = error_of([&] { g.run(rt, {}, {root}); });
  CHECK(e.first == DP_INVALID_ARGUMENT && contains(e.second, "placeholder 'a'"));
  const devplug::Tensor t =
      devplug::Tensor::from_vector<float>(cpu, {2, 3}, {1, 4, 9, 16, 25, 36});
  e = error_of([&] { g.run(rt, {{a, &t}}, {root}, DP_SOFT_PLACEMENT_OFF); });
  CHECK(e.first == DP_NOT_FOUND && contains(e.second, "graph node 'root' (Sqrt on SIM:0)"));
  std::vector<devplug::Tensor> out = g.run(rt, {{a, &t}}, {root});
  CHECK((out[0].to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6}));
  devplug::Graph other;
  const auto foreign = other.placeholder("z", devplug::DType::F32);
  e = error_of([&] { g.run(rt, {}, {foreign}); });
  CHECK(e.first == DP_INVALID_ARGUMENT && contains(e.second, "another graph"));
  e = error_of([&] { g.run(rt, {{a, nullptr}}, {root}); });
  CHECK(e.first == DP_INVALID_ARGUMENT && contains(e.second, "NULL"));
  // Graph::op returns every output of an op, however many.
  devplug::OpDef nine{"app.GraphNine", "x: f32", "", "", "", ""};
  for (size_t k = 0; k < 9; ++k) {
    nine.outputs += (k != 0 ? ", o" : "o") + std::to_string(k) + ": f32";
    nine.body += "o" + std::to_string(k) + " = Neg(x); ";
  }
  const devplug::Op nine_op = rt.register_op(nine);
  const std::vector<devplug::GraphOutput> nine_out = g.op(rt, "nine", nine_op, {a});
  CHECK(nine_out.size() == 9);
  out = g.run(rt, {{a, &t}}, nine_out);
  CHECK(out.size() == 9);
  for (const devplug::Tensor& o : out) CHECK((o.to_vector<float>() == std::vector<float>{-1, -4, -9, -16, -25, -36}));
  devplug::Graph moved = std::move(g);
  CHECK(g.get() == nullptr);
  CHECK(moved.node_count() == 3);
}

}  // namespace

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    rt.load_plugin(DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so");
    const devplug::Device sim = rt.device("SIM:0");
    mlp(rt, sim);
    training(rt, sim);
    setter_placement(rt, sim);
    errors(rt, sim);
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("graph_wrapper_test");
}
