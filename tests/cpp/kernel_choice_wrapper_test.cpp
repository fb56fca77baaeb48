// Runtime::kernel_choice from C++: how an op would run on a device for a dtype, asked before
// running (a kernel of SIM's, a decomposition, soft placement to the CPU's kernel), agreeing
// with a run's placement log; bad questions throw devplug::Error. Also Runtime::run1 by op name.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <string>

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    rt.load_plugin(std::string(DEVPLUG_TEST_PLUGIN_DIR) + "/libdevplug_sim.so", {});
    devplug::Device sim = rt.device("SIM:0");
    using K = devplug::KernelChoice;

    section("kernel_choice");
    K add = rt.kernel_choice(rt.op("Add"), sim, devplug::DType::F32);
    CHECK(add.kind == K::Native);
    CHECK(add.source == "plugin 'devplug_sim'");
    CHECK(add.priority == 0);
    K relu = rt.kernel_choice(rt.op("Relu"), sim, devplug::DType::F32);
    CHECK(relu.kind == K::Decomposition);
    CHECK(relu.source.empty());
    K maximum = rt.kernel_choice(rt.op("Maximum"), sim, devplug::DType::F32);
    CHECK(maximum.kind == K::SoftPlacement);
    CHECK(maximum.source == "built-in");
    // The default device (CPU:0); Fill has no type variable.
    CHECK(rt.kernel_choice(rt.op("Maximum"), devplug::Device(), devplug::DType::F64).kind == K::Native);
    CHECK(rt.kernel_choice(rt.op("Fill"), devplug::Device(), devplug::DType::Invalid).kind == K::Native);

    // A run does what the answer said.
    bool soft_placed = false;
    rt.set_placement_callback([&](const devplug::PlacementEvent& e) {
      if (e.op == "Maximum" && e.reason == devplug::PlacementReason::SoftPlaced) soft_placed = true;
    });
    devplug::Tensor x = devplug::Tensor::from_vector(sim, {2}, std::vector<float>{1, -1});
    rt.run1(rt.op("Maximum"), {x, x}, devplug::RunOptions{sim});
    CHECK(soft_placed);
    // run1 by name, in its three forms.
    CHECK(rt.run1("Maximum", {x, x}, devplug::RunOptions{sim}).to_vector<float>() == (std::vector<float>{1, -1}));
    CHECK(rt.run1("Neg", {x}).device().name() == "CPU:0");
    devplug::Attrs keep;
    keep.set("keep_dims", true);
    CHECK(rt.run1("ReduceSum", {x}, keep).shape() == (std::vector<int64_t>{1}));
    rt.set_placement_callback(nullptr);

    section("bad questions");
    auto e = error_of([&] { rt.kernel_choice(rt.op("Add"), sim, devplug::DType::Bool); });
    CHECK(e.first == DP_INVALID_ARGUMENT);
    CHECK_MSG(e.second.find("Add: its type variable T takes") != std::string::npos, e.second);
    e = error_of([&] { rt.kernel_choice(rt.op("Add"), sim, devplug::DType::Invalid); });
    CHECK_MSG(e.second.find("name the dtype of its type variable T") != std::string::npos, e.second);
    e = error_of([&] { rt.kernel_choice(devplug::Op(), sim, devplug::DType::F32); });
    CHECK_MSG(e.first == DP_INVALID_ARGUMENT && e.second.find("is empty") != std::string::npos, e.second);
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("kernel_choice_wrapper_test");
}
