// A call on an empty C++ wrapper object (default-constructed, moved from, released) is refused
// by the wrapper before any C call, with its own message naming the method and the type:
// "Stream::synchronize: the devplug::Stream is empty (default-constructed, moved from or
// released)" (docs/c-api.md, "The C++ wrapper"), for every method of every wrapper that hands
// its handle to the C library: Runtime, Device, Buffer, Stream, Event, Tensor, Op, Attrs,
// DeviceScope (entering it), Graph, Variable. The noexcept queries answer for an empty object
// instead (size 0, DType::Invalid, ...). An empty object passed as an argument goes to the C
// library as NULL: its message names the parameter, or NULL means "none" where the C function
// says so (a Device in RunOptions); an empty Attrs is refused, as NULL would silently mean no
// attributes. Every check is counted; the test fails (exit 1) when any check failed.

#include <devplug/devplug.hpp>

#include "counting_check.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// `f` must throw DP_INVALID_ARGUMENT with the wrapper's message for `type::method`.
template <class F>
void refused(const char* type, const char* method, F&& f, const char* file, int line) {
  const std::pair<dp_status_t, std::string> e = error_of(f);
  const std::string want = std::string("INVALID_ARGUMENT: ") + type + "::" + method + ": the devplug::" + type +
                           " is empty (default-constructed, moved from or released)";
  report(e.first == DP_INVALID_ARGUMENT && e.second == want, file, line,
         std::string(type) + "::" + method + " threw \"" + e.second + "\", expected \"" + want + "\"");
}
#define REFUSED(type, method, expr) refused(type, method, [&] { (void)(expr); }, __FILE__, __LINE__)

void runtime_device_buffer(devplug::Runtime& live) {
  section("Runtime, Device, Buffer");
  devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
  devplug::Runtime moved = std::move(rt);
  const devplug::Device cpu = live.device("CPU:0");
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu, {2}, {1, 2});
  const devplug::Op add = live.op("Add");
  REFUSED("Runtime", "device_count", rt.device_count());
  REFUSED("Runtime", "device_at", rt.device_at(0));
  REFUSED("Runtime", "devices", rt.devices());
  REFUSED("Runtime", "device", rt.device("CPU:0"));
  REFUSED("Runtime", "synchronize", rt.synchronize());
  REFUSED("Runtime", "op", rt.op("Add"));
  REFUSED("Runtime", "ops", rt.ops());
  REFUSED("Runtime", "register_op", rt.register_op({"app.Neg", "x: f32", "y: f32", "", "", "y = Neg(x)"}));
  REFUSED("Runtime", "run", rt.run(add, {x, x}));
  REFUSED("Runtime", "run", rt.run1(add, {x, x}));
  REFUSED("Runtime", "device_scope", rt.device_scope(cpu));
  REFUSED("Runtime", "setter_scope", rt.setter_scope([](const devplug::PlacementQuery&) { return devplug::Device(); }));
  REFUSED("Runtime", "current_scope", rt.current_scope());
  REFUSED("Runtime", "variable", rt.variable("v", x));
  REFUSED("Runtime", "set_placement_callback", rt.set_placement_callback([](const devplug::PlacementEvent&) {}));
  REFUSED("Runtime", "set_placement_callback", rt.set_placement_callback([](const dp_placement_event_t&) {}));
  REFUSED("Runtime", "set_placement_callback", rt.set_placement_callback(nullptr));
  REFUSED("Runtime", "start_trace", rt.start_trace());
  REFUSED("Runtime", "stop_trace", rt.stop_trace());
  REFUSED("Runtime", "load_plugin", rt.load_plugin("/nonexistent/libx.so"));
  REFUSED("Runtime", "load_plugin_path", rt.load_plugin_path("/nonexistent"));
  REFUSED("Runtime", "plugins", rt.plugins());
  REFUSED("Runtime", "platforms", rt.platforms());
  REFUSED("Runtime", "plugin_failures", rt.plugin_failures());
  CHECK(moved.device_count() == 1);

  const devplug::Device none;
  REFUSED("Device", "name", none.name());
  REFUSED("Device", "properties", none.properties());
  REFUSED("Device", "memory_stats", none.memory_stats());
  REFUSED("Device", "memory_usage", none.memory_usage());
  REFUSED("Device", "synchronize", none.synchronize());
  REFUSED("Device", "release_cached_memory", none.release_cached_memory());
  REFUSED("Device", "set_memory_limit", none.set_memory_limit(1));
  REFUSED("Device", "memory_limit", none.memory_limit());
  REFUSED("Device", "allocate", none.allocate(1));
  REFUSED("Device", "host_allocate", none.host_allocate(1));
  REFUSED("Device", "create_stream", none.create_stream());
  REFUSED("Device", "default_stream", none.default_stream());
  REFUSED("Device", "create_event", none.create_event());

  devplug::Buffer b;
  const devplug::Buffer live_buffer = cpu.allocate(4);
  std::vector<uint8_t> bytes(4);
  CHECK(b.size() == 0);  // noexcept: answers for an empty buffer
  REFUSED("Buffer", "device", b.device());
  REFUSED("Buffer", "write", b.write(bytes.data(), bytes.size()));
  REFUSED("Buffer", "write", b.write(bytes));
  REFUSED("Buffer", "read", b.read(bytes.data(), bytes.size()));
  REFUSED("Buffer", "read", b.read(bytes));
  REFUSED("Buffer", "read", b.read_vector<uint8_t>(4));
  REFUSED("Buffer", "to_vector", b.to_vector<uint8_t>());
  REFUSED("Buffer", "copy_from", b.copy_from(live_buffer, 4));
  REFUSED("Buffer", "memset", b.memset(0, 4));
  devplug::Buffer released = cpu.allocate(4);
  devplug::Buffer::adopt(released.release());  // adopted and released at once
  REFUSED("Buffer", "memset", released.memset(0, 4));
}

void stream_event_tensor(devplug::Runtime& rt) {
  section("Stream, Event, Tensor, Op");
  const devplug::Device cpu = rt.device("CPU:0");
  devplug::Buffer buf = cpu.allocate(4);
  std::vector<uint8_t> bytes(4);
  devplug::Stream s;
  devplug::Stream live_stream = cpu.create_stream();
  devplug::Event ev;
  devplug::Event live_event = cpu.create_event();
  REFUSED("Stream", "device", s.device());
  REFUSED("Stream", "id", s.id());
  REFUSED("Stream", "write", s.write(buf, bytes.data(), bytes.size()));
  REFUSED("Stream", "write", s.write(buf, bytes));
  REFUSED("Stream", "read", s.read(buf, bytes.data(), bytes.size()));
  REFUSED("Stream", "read", s.read(buf, bytes));
  REFUSED("Stream", "copy", s.copy(buf, buf, 4));
  REFUSED("Stream", "memset", s.memset(buf, 0, 4));
  REFUSED("Stream", "record", s.record(live_event));
  REFUSED("Stream", "wait", s.wait(live_event));
  REFUSED("Stream", "wait", s.wait(live_stream));
  REFUSED("Stream", "host_callback", s.host_callback([] {}));
  REFUSED("Stream", "synchronize", s.synchronize());
  devplug::Stream moved_stream = std::move(live_stream);
  REFUSED("Stream", "synchronize", live_stream.synchronize());
  moved_stream.synchronize();

  REFUSED("Event", "record", ev.record(moved_stream));
  REFUSED("Event", "query", ev.query());
  REFUSED("Event", "synchronize", ev.synchronize());
  REFUSED("Event", "elapsed", ev.elapsed(live_event));

  devplug::Tensor t;
  CHECK(t.dtype() == devplug::DType::Invalid && t.rank() == 0 && t.byte_size() == 0);  // noexcept queries
  REFUSED("Tensor", "shape", t.shape());
  REFUSED("Tensor", "num_elements", t.num_elements());
  REFUSED("Tensor", "device", t.device());
  REFUSED("Tensor", "read", t.read(bytes.data(), bytes.size()));
  REFUSED("Tensor", "to_vector", t.to_vector<float>());
  REFUSED("Tensor", "copy_to", t.copy_to(cpu));
  REFUSED("Tensor", "buffer", t.buffer());
  REFUSED("Tensor", "data", t.data());
  REFUSED("Tensor", "data", t.data<float>());

  const devplug::Op op;
  CHECK(op.num_outputs() == 0);
  REFUSED("Op", "name", op.name());
  REFUSED("Op", "signature", op.signature());
}

void attrs_scope_graph_variable(devplug::Runtime& rt) {
  section("Attrs, DeviceScope, Graph, Variable");
  const devplug::Device cpu = rt.device("CPU:0");
  devplug::Attrs a;
  devplug::Attrs kept = std::move(a);
  CHECK(!a && kept);
  REFUSED("Attrs", "set", a.set("k", 1));
  REFUSED("Attrs", "set", a.set("k", int64_t{1}));
  REFUSED("Attrs", "set", a.set("k", 1LL));
  REFUSED("Attrs", "set", a.set("k", 1.5));
  REFUSED("Attrs", "set", a.set("k", true));
  REFUSED("Attrs", "set", a.set("k", {1, 2}));
  REFUSED("Attrs", "set", a.set("k", std::vector<int64_t>{1}));
  REFUSED("Attrs", "set", a.set("k", std::vector<int>{1}));
  REFUSED("Attrs", "set", a.set("k", devplug::DType::F32));
  REFUSED("Attrs", "set", a.set("k", "s"));
  REFUSED("Attrs", "set", a.set("k", std::string("s")));

  const devplug::DeviceScope scope;
  REFUSED("DeviceScope", "enter", devplug::ScopeGuard(scope));
  REFUSED("DeviceScope", "enter", scope.enter());

  devplug::Graph g;
  const devplug::GraphOutput p = g.placeholder("p", devplug::DType::F32, {2});
  devplug::Graph other = std::move(g);
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu, {2}, {1, 2});
  const devplug::Variable v = rt.variable("v", x);
  REFUSED("Graph", "placeholder", g.placeholder("q", devplug::DType::F32, {2}));
  REFUSED("Graph", "placeholder", g.placeholder("q", devplug::DType::F32));
  REFUSED("Graph", "constant", g.constant("c", x));
  REFUSED("Graph", "op", g.op(rt, "n", rt.op("Neg"), {p}));
  REFUSED("Graph", "op", g.op1(rt, "n", rt.op("Neg"), {p}));
  REFUSED("Graph", "read", g.read("r", v));
  REFUSED("Graph", "assign", g.assign("a", v, p));
  REFUSED("Graph", "find", g.find("p"));
  REFUSED("Graph", "node_name", g.node_name(p));
  REFUSED("Graph", "partial_spec", g.partial_spec(p));
  REFUSED("Graph", "partial_spec", g.spec(p));
  REFUSED("Graph", "node_count", g.node_count());
  REFUSED("Graph", "run", g.run(rt, {{p, x}}, {p}));
  CHECK(other.node_count() == 1);

  const devplug::Variable none;
  REFUSED("Variable", "name", none.name());
  REFUSED("Variable", "device", none.device());
  REFUSED("Variable", "read", none.read());
  devplug::Variable assign_to;
  REFUSED("Variable", "assign", assign_to.assign(x));
}

void empty_arguments(devplug::Runtime& rt) {
  section("empty objects as arguments: NULL to the C library, or refused where NULL means none");
  const devplug::Device cpu = rt.device("CPU:0");
  const devplug::Tensor x = devplug::Tensor::from_vector<float>(cpu, {2}, {1, 2});
  const devplug::Op add = rt.op("Add");
  // an empty tensor input: the C library names the input
  std::pair<dp_status_t, std::string> e = error_of([&] { rt.run1(add, {x, devplug::Tensor()}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "inputs[1]") && contains(e.second, "NULL"), e.second);
  // an empty Op: the C library names it
  e = error_of([&] { rt.run1(devplug::Op(), {x, x}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "dp_op_run") && contains(e.second, "op"), e.second);
  // an empty Attrs, by pointer or by reference: refused (NULL would mean no attributes)
  devplug::Attrs attrs;
  devplug::Attrs moved = std::move(attrs);
  e = error_of([&] { rt.run1(add, {x, x}, attrs); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "Runtime::run: the devplug::Attrs is empty"), e.second);
  e = error_of([&] { rt.run1(add, {x, x}, &attrs); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "Runtime::run: the devplug::Attrs is empty"), e.second);
  devplug::Graph g;
  const devplug::GraphOutput p = g.placeholder("p", devplug::DType::F32, {2});
  e = error_of([&] { g.op1(rt, "n", rt.op("Neg"), {p}, attrs); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "Graph::op: the devplug::Attrs is empty"), e.second);
  // an empty Device in RunOptions: no device named (the default device)
  CHECK(rt.run1(add, {x, x}, devplug::RunOptions{devplug::Device()}).device() == cpu);
  // an empty Tensor fed to a graph: the C library names the feed
  e = error_of([&] { g.run(rt, {{p, devplug::Tensor()}}, {p}); });
  CHECK_MSG(e.first == DP_INVALID_ARGUMENT && contains(e.second, "dp_graph_run"), e.second);
}

}  // namespace

int main() {
  try {
    devplug::Runtime rt(devplug::RuntimeOptions().discover_plugins(false));
    runtime_device_buffer(rt);
    stream_event_tensor(rt);
    attrs_scope_graph_variable(rt);
    empty_arguments(rt);
  } catch (const std::exception& e) {
    report(false, __FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
  }
  return summary("empty_objects_test");
}
