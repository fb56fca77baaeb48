// Runtime::platforms() through the C++ wrapper: the built-in HOST platform (type CPU, one device
// per cpu_device_count), SIM loaded from its built path with its plugin's name, the CUDA plugin
// without devices (listed all the same), registration order (the order of devices()), and an
// empty Runtime refused by the wrapper, naming the method. Every check is counted; the test fails
// (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

const std::string kDir = DEVPLUG_TEST_PLUGIN_DIR;

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

void host_only() {
  section("HOST: device type CPU, cpu_device_count devices, built-in");
  devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(3).discover_plugins(false));
  const std::vector<devplug::PlatformInfo> ps = rt.platforms();
  CHECK(ps.size() == 1);
  if (ps.empty()) return;
  const devplug::PlatformInfo& host = ps[0];
  CHECK(host.name == "HOST");
  CHECK(host.device_type == "CPU");
  CHECK(host.plugin == "built-in");
  CHECK(host.device_count == 3);
  CHECK(host.is_active);
  CHECK(host.host_visible);
  CHECK(!host.vendor.empty() && !host.version.empty());
  CHECK(host.priority == rt.device("CPU:0").properties().priority);
}

void with_plugins() {
  section("SIM from its built path and CUDA without devices, in registration order");
  devplug::Runtime rt(devplug::RuntimeOptions().cpu_device_count(2).discover_plugins(false));
  rt.load_plugin(kDir + "/libdevplug_sim.so", {"devices=2"});
  rt.load_plugin(kDir + "/libdevplug_cuda.so", {"devices=0"});
  const std::vector<devplug::PlatformInfo> ps = rt.platforms();
  CHECK(ps.size() == 3);
  if (ps.size() != 3) return;
  CHECK(ps[0].name == "HOST" && ps[0].device_count == 2);
  CHECK(ps[1].name == "SIM" && ps[1].device_type == "SIM");
  CHECK(ps[1].plugin == rt.plugins().at(0).name);
  CHECK(ps[1].plugin == "devplug_sim");
  CHECK(ps[1].device_count == 2 && ps[1].is_active && !ps[1].host_visible);
  CHECK(ps[2].name == "CUDA" && ps[2].device_type == "GPU" && ps[2].plugin == "cuda");
  CHECK(ps[2].device_count == 0);
  // devices() lists the platforms' devices in the same order
  const std::vector<devplug::Device> ds = rt.devices();
  CHECK(ds.size() == 4);
  for (size_t i = 0; i < ds.size(); ++i) {
    CHECK(ds[i].properties().platform == (i < 2 ? "HOST" : "SIM"));
  }
}

void empty_runtime() {
  section("an empty Runtime: refused by the wrapper, naming the method");
  devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
  devplug::Runtime moved = std::move(rt);
  const auto e = error_of([&] { rt.platforms(); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT &&
                contains(e.second, "Runtime::platforms: the devplug::Runtime is empty (default-constructed, moved from"),
            e.second);
  CHECK(moved.platforms().size() == 1);
}

}  // namespace

int main() {
  try {
    host_only();
    with_plugins();
    empty_runtime();
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("platform_wrapper_test");
}
