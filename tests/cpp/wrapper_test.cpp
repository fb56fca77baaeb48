// Tests of the C++ wrapper (cpp/include/devplug/devplug.hpp) against the real C library.
// One standalone executable: returns 0 when every check passes, exits 1 at the first failure
// with file:line and the failed expression.

#include <devplug/devplug.hpp>

#include <array>
#include <chrono>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

[[noreturn]] void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what.c_str());
  std::exit(1);
}

#define CHECK(cond)                                      \
  do {                                                   \
    if (!(cond)) fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

#define CHECK_EQ(a, b)                                                                    \
  do {                                                                                    \
    const auto& check_a_ = (a);                                                           \
    const auto& check_b_ = (b);                                                           \
    if (!(check_a_ == check_b_))                                                          \
      fail(__FILE__, __LINE__,                                                            \
           std::string("CHECK_EQ(" #a ", " #b "): ") + show(check_a_) + " != " + show(check_b_)); \
  } while (0)

// Runs `expr`, which must throw devplug::Error with status `code` and a non-empty message.
#define CHECK_ERROR(expr, want_code)                                                              \
  do {                                                                                       \
    bool thrown_ = false;                                                                    \
    try {                                                                                    \
      (void)(expr);                                                                          \
    } catch (const devplug::Error& e_) {                                                     \
      thrown_ = true;                                                                        \
      if (e_.code() != (want_code))                                                               \
        fail(__FILE__, __LINE__,                                                             \
             std::string(#expr " threw ") + e_.what() + ", expected " #want_code);                \
      if (std::string(e_.what()).rfind(devplug::status_name(want_code), 0) != 0)                  \
        fail(__FILE__, __LINE__, std::string("what() does not start with the code: ") + e_.what()); \
      if (std::strlen(e_.message()) == 0)                                                    \
        fail(__FILE__, __LINE__, std::string(#expr ": error without a message: ") + e_.what()); \
    }                                                                                        \
    if (!thrown_) fail(__FILE__, __LINE__, #expr " did not throw, expected " #want_code);        \
  } while (0)

std::string show(const std::string& s) { return "\"" + s + "\""; }
std::string show(bool b) { return b ? "true" : "false"; }
template <class T, std::enable_if_t<std::is_arithmetic<T>::value, int> = 0>
std::string show(T v) {
  return std::to_string(v);
}
std::string show(devplug::DType d) { return devplug::dtype_name(d); }
std::string show(const devplug::Version& v) { return v.to_string(); }
template <class T>
std::string show(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? ", " : "") + show(static_cast<T>(v[i]));
  if (v.size() > 16) s += ", ... (" + std::to_string(v.size()) + " elements)";
  return s + "]";
}

using devplug::Buffer;
using devplug::Device;
using devplug::DType;
using devplug::Error;
using devplug::Event;
using devplug::Runtime;
using devplug::RuntimeOptions;
using devplug::Stream;
using devplug::Tensor;

// ---- compile-time properties of the wrapper ----
static_assert(!std::is_copy_constructible<Runtime>::value, "Runtime is move-only");
static_assert(!std::is_copy_constructible<Stream>::value, "Stream is move-only");
static_assert(!std::is_copy_constructible<Event>::value, "Event is move-only");
static_assert(!std::is_copy_constructible<devplug::HostMemory>::value, "HostMemory is move-only");
static_assert(std::is_nothrow_move_constructible<Runtime>::value, "");
static_assert(std::is_nothrow_move_assignable<Runtime>::value, "");
static_assert(std::is_nothrow_move_constructible<Stream>::value, "");
static_assert(std::is_nothrow_move_assignable<Stream>::value, "");
static_assert(std::is_nothrow_move_constructible<Event>::value, "");
static_assert(std::is_nothrow_move_assignable<Event>::value, "");
static_assert(std::is_nothrow_move_constructible<Buffer>::value, "");
static_assert(std::is_nothrow_move_assignable<Buffer>::value, "");
static_assert(std::is_nothrow_move_constructible<Tensor>::value, "");
static_assert(std::is_nothrow_move_assignable<Tensor>::value, "");
static_assert(std::is_copy_constructible<Buffer>::value, "Buffer is shared");
static_assert(std::is_copy_constructible<Tensor>::value, "Tensor is shared");
static_assert(std::is_nothrow_copy_constructible<Error>::value, "exceptions copy without throwing");
static_assert(std::is_trivially_copyable<Device>::value, "Device is a cheap value");
static_assert(devplug::dtype_of<float>() == DType::F32, "");
static_assert(devplug::dtype_of<double>() == DType::F64, "");
static_assert(devplug::dtype_of<int32_t>() == DType::I32, "");
static_assert(devplug::dtype_of<int64_t>() == DType::I64, "");
static_assert(devplug::dtype_of<uint8_t>() == DType::U8, "");
static_assert(devplug::dtype_of<bool>() == DType::Bool, "");
static_assert(devplug::dtype_of<const float>() == DType::F32, "");

std::vector<uint8_t> pattern(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 31u + seed) ^ (i >> 8));
  return v;
}

void test_versions_and_names() {
  CHECK_EQ(devplug::version(), devplug::header_version());
  CHECK_EQ(devplug::version_string(), devplug::header_version().to_string());
  CHECK_EQ(devplug::abi_version().major, devplug::header_abi_version().major);
  CHECK_EQ(devplug::abi_version().minor, devplug::header_abi_version().minor);
  CHECK(devplug::version_compatible());
  CHECK_EQ(std::string(devplug::status_name(DP_OK)), std::string("OK"));
  CHECK_EQ(std::string(devplug::status_name(DP_NOT_FOUND)), std::string("NOT_FOUND"));
  CHECK_EQ(std::string(devplug::status_name(DP_RESOURCE_EXHAUSTED)), std::string("RESOURCE_EXHAUSTED"));
  CHECK_EQ(std::string(devplug::status_name(DP_ABI_MISMATCH)), std::string("ABI_MISMATCH"));
  CHECK_EQ(std::string(devplug::status_name(4242)), std::string("UNKNOWN_STATUS"));

  CHECK_EQ(devplug::dtype_size(DType::F32), sizeof(float));
  CHECK_EQ(devplug::dtype_size(DType::F64), sizeof(double));
  CHECK_EQ(devplug::dtype_size(DType::I32), sizeof(int32_t));
  CHECK_EQ(devplug::dtype_size(DType::I64), sizeof(int64_t));
  CHECK_EQ(devplug::dtype_size(DType::U8), sizeof(uint8_t));
  CHECK_EQ(devplug::dtype_size(DType::Bool), size_t{1});
  CHECK_EQ(devplug::dtype_size(DType::Invalid), size_t{0});
  CHECK_EQ(std::string(devplug::dtype_name(DType::F32)), std::string("f32"));
  CHECK_EQ(std::string(devplug::dtype_name(DType::Bool)), std::string("bool"));
  CHECK_EQ(std::string(devplug::dtype_name(DType::Invalid)), std::string("invalid"));
}

void test_error_type() {
  Error e(DP_NOT_FOUND, "no such thing");
  CHECK_EQ(e.code(), DP_NOT_FOUND);
  CHECK_EQ(std::string(e.what()), std::string("NOT_FOUND: no such thing"));
  CHECK_EQ(std::string(e.message()), std::string("no such thing"));
  CHECK_EQ(std::string(e.code_name()), std::string("NOT_FOUND"));
  Error bare(DP_INTERNAL, "");
  CHECK_EQ(std::string(bare.what()), std::string("INTERNAL"));
  const Error copy = e;  // nothrow copy keeps everything
  CHECK_EQ(std::string(copy.what()), std::string(e.what()));
  devplug::check(DP_OK);  // must not throw
  bool caught = false;
  try {
    throw Error(DP_ABORTED, "x");
  } catch (const std::runtime_error& base) {  // catchable as std::runtime_error
    caught = std::string(base.what()) == "ABORTED: x";
  }
  CHECK(caught);
}

void test_devices(const Runtime& rt) {
  CHECK_EQ(rt.device_count(), size_t{2});
  const std::vector<Device> devs = rt.devices();
  CHECK_EQ(devs.size(), size_t{2});
  for (size_t i = 0; i < devs.size(); ++i) {
    const std::string expected = "CPU:" + std::to_string(i);
    CHECK(devs[i]);
    CHECK_EQ(devs[i].name(), expected);
    CHECK(devs[i] == rt.device_at(i));
    const devplug::DeviceProperties p = devs[i].properties();
    CHECK_EQ(p.name, expected);
    CHECK_EQ(p.device_type, std::string("CPU"));
    CHECK_EQ(p.platform, std::string("HOST"));
    CHECK_EQ(p.ordinal, static_cast<int32_t>(i));
    CHECK(p.is_active_platform);
    CHECK(p.host_visible);
    CHECK(p.total_memory > 0);
  }
  CHECK(devs[0] != devs[1]);
  // every spec form resolves to the same handle
  CHECK(rt.device("CPU") == devs[0]);
  CHECK(rt.device("CPU:0") == devs[0]);
  CHECK(rt.device("cpu:1") == devs[1]);
  CHECK(rt.device("/device:CPU:1") == devs[1]);
  CHECK(rt.device("HOST:1") == devs[1]);
  CHECK_ERROR(rt.device_at(2), DP_OUT_OF_RANGE);
  CHECK_ERROR(rt.device("CPU:abc"), DP_INVALID_ARGUMENT);
  CHECK_ERROR(rt.device("not a spec!"), DP_INVALID_ARGUMENT);
  CHECK_ERROR(rt.device(""), DP_INVALID_ARGUMENT);
  CHECK_ERROR(rt.device("CPU:7"), DP_NOT_FOUND);
  CHECK_ERROR(rt.device("TPU:0"), DP_NOT_FOUND);

  // the message is captured when the error is thrown: a later failure does not change it
  std::string first;
  try {
    rt.device("CPU:7");
  } catch (const Error& e) {
    first = e.what();
    CHECK_ERROR(rt.device("not a spec!"), DP_INVALID_ARGUMENT);
    CHECK_EQ(std::string(e.what()), first);
  }
  CHECK(!first.empty());
}

void test_buffers(const Runtime& rt) {
  const Device d0 = rt.device("CPU:0");
  const devplug::MemoryStats before = d0.memory_stats();

  const size_t n = 4096;
  Buffer b = d0.allocate(n);
  CHECK(b);
  CHECK_EQ(b.size(), n);
  CHECK(b.device() == d0);
  const devplug::MemoryStats during = d0.memory_stats();
  CHECK(during.bytes_in_use >= before.bytes_in_use + n);
  CHECK_EQ(during.active_allocs, before.active_allocs + 1);
  CHECK(during.num_allocs > before.num_allocs);
  CHECK(during.peak_bytes_in_use >= during.bytes_in_use);

  // raw pointer round trip
  const std::vector<uint8_t> src = pattern(n, 7);
  b.write(src.data(), src.size());
  std::vector<uint8_t> back(n, 0);
  b.read(back.data(), back.size());
  CHECK_EQ(back, src);

  // typed container overloads, byte offsets
  const std::vector<uint32_t> words = {1, 2, 3, 0xdeadbeef};
  b.write(words, 16);
  CHECK_EQ(b.read_vector<uint32_t>(4, 16), words);
  std::array<uint32_t, 2> two{};
  b.read(two, 24);
  CHECK_EQ(two[0], 3u);
  CHECK_EQ(two[1], 0xdeadbeefu);
  const std::vector<uint8_t> all = b.to_vector<uint8_t>();
  CHECK_EQ(all.size(), n);
  CHECK_EQ(all[0], src[0]);
  CHECK_EQ(all[n - 1], src[n - 1]);
  const float fl[3] = {1.5f, -2.0f, 3.25f};
  b.write(devplug::span<const float>(fl, 3), 100);
  CHECK_EQ(b.read_vector<float>(3, 100), std::vector<float>({1.5f, -2.0f, 3.25f}));
  using Triple = std::array<uint8_t, 3>;
  CHECK_ERROR(b.to_vector<Triple>(), DP_INVALID_ARGUMENT);  // 4096 % 3 != 0

  // memset
  b.memset(0xab, 10, 5);
  const std::vector<uint8_t> part = b.read_vector<uint8_t>(16);  // bytes 16.. hold `words`
  for (size_t i = 0; i < 16; ++i) CHECK_EQ(part[i], (i >= 5 && i < 15) ? uint8_t{0xab} : src[i]);

  // bounds
  CHECK_ERROR(b.write(src.data(), 1, n), DP_OUT_OF_RANGE);
  CHECK_ERROR(b.read(back.data(), n, 1), DP_OUT_OF_RANGE);
  CHECK_ERROR(b.memset(0, n + 1), DP_OUT_OF_RANGE);

  // shared ownership: a copy keeps the memory alive after the original lets go
  Buffer copy = b;
  CHECK(copy.get() == b.get());
  b = Buffer();
  CHECK(!b);
  CHECK_EQ(copy.size(), n);
  CHECK_EQ(copy.read_vector<uint32_t>(4, 16), words);
  copy = Buffer();
  const devplug::MemoryStats after = d0.memory_stats();
  CHECK_EQ(after.active_allocs, before.active_allocs);

  // pinned host memory
  devplug::HostMemory host = d0.host_allocate(256);
  CHECK(host);
  CHECK(host.data() != nullptr);
  CHECK_EQ(host.size(), size_t{256});
  std::memset(host.data(), 0x5a, host.size());
  Buffer hb = d0.allocate(256);
  hb.write(host.data(), host.size());
  CHECK_EQ(hb.read_vector<uint8_t>(256), std::vector<uint8_t>(256, 0x5a));
  devplug::HostMemory moved = std::move(host);
  CHECK(!host);
  CHECK(moved);
  moved.reset();
  CHECK(!moved);
  int not_ours = 0;
  CHECK_ERROR(devplug::check(dp_device_host_free(d0.get(), &not_ours)), DP_INVALID_ARGUMENT);
}

void test_streams_events_callbacks(const Runtime& rt) {
  const Device d0 = rt.device("CPU:0");
  const size_t n = 1 << 20;
  const std::vector<uint8_t> src = pattern(n, 3);
  std::vector<uint8_t> dst(n, 0);
  Buffer buf = d0.allocate(n);

  Stream producer = d0.create_stream();
  Stream consumer = d0.create_stream();
  CHECK(producer.owned());
  CHECK(producer.device() == d0);
  Event ready = d0.create_event();
  CHECK(ready.query());  // never recorded: complete

  std::atomic<bool> callback_ran{false};
  std::atomic<bool> data_visible_in_callback{false};
  producer.write(buf, src);
  producer.record(ready);
  consumer.wait(ready);
  consumer.read(buf, dst);
  consumer.host_callback([&] {
    // runs after the read: the data must already be in dst
    data_visible_in_callback = (dst == src);
    callback_ran = true;
  });
  consumer.synchronize();
  CHECK(callback_ran.load());
  CHECK(data_visible_in_callback.load());
  CHECK_EQ(dst, src);
  CHECK(ready.query());
  ready.synchronize();

  // callbacks run in enqueue order, each exactly once; the std::function is freed after it ran
  std::vector<int> order;
  auto token = std::make_shared<int>(0);
  for (int i = 0; i < 5; ++i) {
    producer.host_callback([&order, i, token] {
      order.push_back(i);
      ++*token;
    });
  }
  producer.synchronize();
  CHECK_EQ(order, std::vector<int>({0, 1, 2, 3, 4}));
  CHECK_EQ(*token, 5);
  CHECK_EQ(token.use_count(), 1L);  // every captured copy was destroyed

  // memset / copy / wait(stream) on streams
  Buffer other = d0.allocate(n);
  producer.memset(buf, 0x11, n);
  consumer.wait(producer);
  consumer.copy(other, buf, n / 2, n / 2, 0);
  consumer.memset(other, 0x22, n / 2);
  std::vector<uint8_t> out(n, 0);
  consumer.read(other, out);
  consumer.synchronize();
  for (size_t i = 0; i < n; i += 4099) CHECK_EQ(out[i], i < n / 2 ? uint8_t{0x22} : uint8_t{0x11});
  CHECK_EQ(out[n - 1], uint8_t{0x11});

  // the CPU default stream is a non-owning view that runs work inline
  Stream def = d0.default_stream();
  CHECK(def);
  CHECK(!def.owned());
  CHECK_EQ(def.id(), 0u);
  CHECK(producer.id() >= 1 && consumer.id() > producer.id());
  CHECK(def.device() == d0);
  bool inline_ran = false;
  def.host_callback([&] { inline_ran = true; });
  CHECK(inline_ran);
  def.synchronize();

  // out-of-range stream ops are refused at enqueue time
  CHECK_ERROR(producer.write(buf, src.data(), 2, n - 1), DP_OUT_OF_RANGE);
  // an event of one device cannot be recorded on a stream of another
  Stream s1 = rt.device("CPU:1").create_stream();
  CHECK_ERROR(s1.record(ready), DP_INVALID_ARGUMENT);

  // timing: the device's time between two events, as std::chrono::nanoseconds
  Event start = d0.create_event();
  Event end = d0.create_event();
  CHECK_ERROR(start.elapsed(end), DP_FAILED_PRECONDITION);  // never recorded
  producer.record(start);
  producer.host_callback([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  producer.record(end);
  end.synchronize();
  const std::chrono::nanoseconds took = start.elapsed(end);
  CHECK(took >= std::chrono::milliseconds(9) && took < std::chrono::seconds(5));
  CHECK_EQ(end.elapsed(start).count(), -took.count());
  Event elsewhere = rt.device("CPU:1").create_event();
  CHECK_ERROR(start.elapsed(elsewhere), DP_INVALID_ARGUMENT);
}

void test_cross_device(const Runtime& rt) {
  const Device d0 = rt.device("CPU:0");
  const Device d1 = rt.device("CPU:1");
  const size_t n = 64 * 1024;
  const std::vector<uint8_t> src = pattern(n, 11);
  Buffer a = d0.allocate(n);
  Buffer b = d1.allocate(n);
  CHECK(b.device() == d1);
  a.write(src);
  b.memset(0, n);
  b.copy_from(a, n);
  CHECK_EQ(b.to_vector<uint8_t>(), src);
  // partial copy with offsets, the other way
  Buffer c = d0.allocate(n);
  c.memset(0, n);
  c.copy_from(b, 100, 10, 20);
  const std::vector<uint8_t> got = c.read_vector<uint8_t>(130);
  for (size_t i = 0; i < 130; ++i) {
    CHECK_EQ(got[i], (i >= 10 && i < 110) ? src[i + 10] : uint8_t{0});
  }
  CHECK_ERROR(c.copy_from(b, n, 1, 0), DP_OUT_OF_RANGE);

  // streams: a stream on CPU:1 waits for an event recorded on CPU:0, then copies across
  Stream s0 = d0.create_stream();
  Stream s1 = d1.create_stream();
  Event on_d0 = d0.create_event();
  const std::vector<uint8_t> src2 = pattern(n, 29);
  Buffer x = d0.allocate(n);
  Buffer y = d1.allocate(n);
  std::atomic<bool> gate_open{false};
  s0.host_callback([&] {
    // hold s0 back a little: s1 must still wait for the write below
    while (!gate_open.load()) std::this_thread::yield();
  });
  s0.write(x, src2);
  s0.record(on_d0);
  s1.wait(on_d0);
  s1.copy(y, x, n);  // src on another device: allowed (one buffer is on the stream's device)
  std::vector<uint8_t> y_back(n, 0);
  s1.read(y, y_back);
  CHECK(!on_d0.query());  // s0 is held at the gate
  gate_open = true;
  s1.synchronize();
  CHECK(on_d0.query());
  CHECK_EQ(y_back, src2);
  // refused combinations
  CHECK_ERROR(s1.wait(s0), DP_INVALID_ARGUMENT);       // wait_stream across devices: use an event
  CHECK_ERROR(s1.write(x, src2), DP_INVALID_ARGUMENT);  // x is not on the stream's device
  s0.synchronize();
}

template <class T>
void tensor_round_trip(const Device& d0, const Device& d1, const devplug::Shape& shape,
                       const std::vector<T>& values) {
  const Tensor t = Tensor::from_vector<T>(d0, shape, values);
  CHECK(t);
  CHECK_EQ(t.dtype(), devplug::dtype_of<T>());
  CHECK_EQ(t.rank(), shape.size());
  CHECK_EQ(t.shape(), shape);
  CHECK_EQ(t.num_elements(), static_cast<int64_t>(values.size()));
  CHECK_EQ(t.byte_size(), values.size() * devplug::dtype_size(devplug::dtype_of<T>()));
  CHECK(t.device() == d0);
  CHECK_EQ(t.to_vector<T>(), values);

  const Tensor moved_over = t.copy_to(d1);
  CHECK(moved_over.device() == d1);
  CHECK(moved_over.get() != t.get());
  CHECK_EQ(moved_over.dtype(), t.dtype());
  CHECK_EQ(moved_over.shape(), shape);
  CHECK_EQ(moved_over.to_vector<T>(), values);

  const Buffer buf = t.buffer();
  CHECK_EQ(buf.size(), t.byte_size());
  CHECK(buf.device() == d0);
}

void test_tensors(const Runtime& rt) {
  const Device d0 = rt.device("CPU:0");
  const Device d1 = rt.device("CPU:1");
  tensor_round_trip<float>(d0, d1, {2, 3}, {0.5f, -1.0f, 2.0f, 3.5f, 1e-3f, -7.25f});
  tensor_round_trip<double>(d0, d1, {4}, {1.0, -2.5, 3.14159265358979, 1e300});
  tensor_round_trip<int32_t>(d0, d1, {2, 2}, {-1, 0, 2147483647, -2147483647 - 1});
  tensor_round_trip<int64_t>(d0, d1, {3, 1}, {int64_t{1} << 62, -5, 0});
  tensor_round_trip<uint8_t>(d0, d1, {5}, {0, 1, 127, 128, 255});
  tensor_round_trip<bool>(d0, d1, {2, 2}, {true, false, false, true});
  tensor_round_trip<float>(d0, d1, {}, {42.0f});  // a scalar: rank 0, one element

  // bool is stored one byte per element, 0 or 1
  const Tensor flags = Tensor::from_vector<bool>(d0, {3}, {true, false, true});
  CHECK_EQ(flags.byte_size(), size_t{3});
  CHECK_EQ(flags.buffer().read_vector<uint8_t>(3), std::vector<uint8_t>({1, 0, 1}));

  // zeros
  const Tensor z = Tensor::zeros(d1, DType::I64, {2, 5});
  CHECK_EQ(z.to_vector<int64_t>(), std::vector<int64_t>(10, 0));
  CHECK(z.device() == d1);

  // raw creation and reading
  const int32_t raw[4] = {9, 8, 7, 6};
  const Tensor r = Tensor::from_data(d0, DType::I32, {4}, raw, sizeof(raw));
  int32_t raw_back[4] = {};
  r.read(raw_back, sizeof(raw_back));
  CHECK(std::memcmp(raw, raw_back, sizeof(raw)) == 0);
  CHECK_ERROR(r.read(raw_back, sizeof(raw_back) - 1), DP_INVALID_ARGUMENT);

  // wrong element count / wrong type
  CHECK_ERROR(Tensor::from_vector<float>(d0, {2, 2}, {1.0f, 2.0f, 3.0f}), DP_INVALID_ARGUMENT);
  CHECK_ERROR(Tensor::from_vector<float>(d0, {-1}, {1.0f}), DP_INVALID_ARGUMENT);
  const Tensor f = Tensor::from_vector<float>(d0, {2}, {1.0f, 2.0f});
  CHECK_ERROR(f.to_vector<int32_t>(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(f.to_vector<double>(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(f.to_vector<bool>(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(z.to_vector<int32_t>(), DP_INVALID_ARGUMENT);

  // the elements in place (CPU memory is host memory), and a tensor over a buffer
  Tensor m = Tensor::zeros(d0, DType::F32, {2, 2});
  float* pm = m.data<float>();
  pm[0] = 1.5f;
  pm[3] = -2.0f;
  CHECK_EQ(m.to_vector<float>(), std::vector<float>({1.5f, 0.0f, 0.0f, -2.0f}));
  CHECK(m.data() == static_cast<void*>(pm));
  CHECK_ERROR(m.data<int32_t>(), DP_INVALID_ARGUMENT);
  devplug::Buffer storage = d0.allocate(4 * sizeof(int32_t) + 4);
  const int32_t four[4] = {4, 3, 2, 1};
  storage.write(static_cast<const void*>(four), sizeof(four));
  const Tensor over = Tensor::from_buffer(storage, DType::I32, {2, 2});
  CHECK_EQ(over.to_vector<int32_t>(), std::vector<int32_t>({4, 3, 2, 1}));
  over.data<int32_t>()[0] = 40;
  CHECK_EQ(storage.read_vector<int32_t>(1), std::vector<int32_t>({40}));
  CHECK_ERROR(Tensor::from_buffer(storage, DType::F64, {3}), DP_INVALID_ARGUMENT);

  // shared handles: a copy is the same tensor and keeps it alive
  Tensor a = Tensor::from_vector<int32_t>(d0, {2}, {5, 6});
  Tensor b = a;
  CHECK(a.get() == b.get());
  a = Tensor();
  CHECK_EQ(b.to_vector<int32_t>(), std::vector<int32_t>({5, 6}));
}

void test_memory_limit() {
  const uint64_t limit = 1 << 20;
  Runtime rt(RuntimeOptions().cpu_device_count(1).cpu_memory_limit(limit));
  CHECK_EQ(rt.device_count(), size_t{1});
  const Device d = rt.device("CPU:0");
  CHECK_EQ(d.properties().total_memory, limit);
  CHECK_EQ(d.memory_stats().bytes_limit, limit);
  const devplug::MemoryUsage usage = d.memory_usage();
  CHECK_EQ(usage.total, limit);
  CHECK(usage.free > 0 && usage.free <= limit);
  CHECK_ERROR(d.allocate(2 * limit), DP_RESOURCE_EXHAUSTED);
  // several smaller allocations that together exceed the limit
  std::vector<Buffer> held;
  bool exhausted = false;
  for (int i = 0; i < 8 && !exhausted; ++i) {
    try {
      held.push_back(d.allocate(limit / 4));
    } catch (const Error& e) {
      CHECK_EQ(e.code(), DP_RESOURCE_EXHAUSTED);
      exhausted = true;
    }
  }
  CHECK(exhausted);
  CHECK(held.size() <= 4);
  CHECK(d.memory_stats().bytes_in_use <= limit);
  CHECK_ERROR(Tensor::zeros(d, DType::F64, {int64_t{limit}}), DP_RESOURCE_EXHAUSTED);
  // after freeing, allocation works again
  held.clear();
  Buffer ok = d.allocate(limit / 2);
  CHECK_EQ(ok.size(), size_t{limit / 2});

  // invalid options are refused
  CHECK_ERROR(Runtime(RuntimeOptions().cpu_device_count(0)), DP_INVALID_ARGUMENT);
  CHECK_ERROR(Runtime(RuntimeOptions().cpu_device_count(65)), DP_INVALID_ARGUMENT);
}

// Device::set_memory_limit: any time, below what is held, removed with 0; CPU:1 unaffected.
void test_set_memory_limit() {
  const uint64_t mib = 1 << 20;
  Runtime rt(RuntimeOptions().cpu_device_count(2).cpu_memory_limit(mib));
  const Device d = rt.device("CPU:0");
  CHECK_EQ(d.memory_limit(), mib);
  d.set_memory_limit(4 * mib);
  CHECK_EQ(d.memory_limit(), 4 * mib);
  CHECK_EQ(d.properties().total_memory, 4 * mib);
  CHECK_EQ(d.memory_stats().bytes_limit, 4 * mib);
  CHECK_EQ(d.memory_usage().total, 4 * mib);
  CHECK_EQ(rt.device("CPU:1").memory_limit(), mib);
  Buffer big = d.allocate(3 * mib);
  // Lowered below what is held: allocations throw, naming the device and the limit.
  d.set_memory_limit(mib);
  CHECK_EQ(d.memory_usage().free, uint64_t{0});
  bool thrown = false;
  try {
    (void)d.allocate(mib / 4);
  } catch (const Error& e) {
    thrown = true;
    CHECK_EQ(e.code(), DP_RESOURCE_EXHAUSTED);
    const std::string what = e.what();
    CHECK(what.find("CPU:0") != std::string::npos);
    CHECK(what.find("limit 1048576") != std::string::npos);
  }
  CHECK(thrown);
  big = Buffer();
  Buffer small = d.allocate(mib / 4);  // freed: fits again
  CHECK(d.memory_stats().bytes_reserved <= mib);
  d.set_memory_limit(0);
  CHECK_EQ(d.memory_limit(), uint64_t{0});
  CHECK_EQ(d.memory_stats().bytes_limit, uint64_t{0});
  Buffer large = d.allocate(8 * mib);
  CHECK_EQ(large.size(), size_t{8 * mib});
  CHECK_ERROR(Device().set_memory_limit(mib), DP_INVALID_ARGUMENT);
  CHECK_ERROR(Device().memory_limit(), DP_INVALID_ARGUMENT);
}

void test_move_semantics() {
  Runtime rt(RuntimeOptions().cpu_device_count(1));
  dp_runtime_t* raw = rt.get();
  CHECK(raw != nullptr);
  Runtime rt2 = std::move(rt);
  CHECK(!rt);
  CHECK(rt.get() == nullptr);
  CHECK(rt2.get() == raw);
  CHECK_ERROR(rt.device_count(), DP_INVALID_ARGUMENT);  // a moved-from runtime is empty
  const Device d = rt2.device("CPU:0");

  Stream s = d.create_stream();
  Stream s2 = std::move(s);
  CHECK(!s);
  CHECK(!s.owned());
  CHECK(s2);
  CHECK(s2.owned());
  CHECK_ERROR(s.synchronize(), DP_INVALID_ARGUMENT);
  auto token = std::make_shared<int>(0);
  CHECK_ERROR(s.host_callback([token] { ++*token; }), DP_INVALID_ARGUMENT);
  CHECK_EQ(token.use_count(), 1L);  // the refused callback was freed
  CHECK_EQ(*token, 0);
  Stream s3;
  s3 = std::move(s2);
  CHECK(!s2);
  s3.synchronize();
  s3 = d.create_stream();  // move-assign over a live stream destroys the old one
  s3.synchronize();

  Event e = d.create_event();
  Event e2 = std::move(e);
  CHECK(!e);
  CHECK(e2);
  CHECK_ERROR(e.query(), DP_INVALID_ARGUMENT);
  CHECK(e2.query());
  e = std::move(e2);
  CHECK(e);
  CHECK(!e2);

  Buffer b = d.allocate(128);
  Buffer b2 = std::move(b);
  CHECK(!b);
  CHECK_EQ(b.size(), size_t{0});
  CHECK_EQ(b2.size(), size_t{128});
  CHECK_ERROR(b.write(std::vector<uint8_t>(1)), DP_INVALID_ARGUMENT);
  CHECK_ERROR(b.device(), DP_INVALID_ARGUMENT);

  Tensor t = Tensor::from_vector<int32_t>(d, {1}, {3});
  Tensor t2 = std::move(t);
  CHECK(!t);
  CHECK_EQ(t.dtype(), DType::Invalid);
  CHECK_EQ(t.rank(), size_t{0});
  CHECK_EQ(t.byte_size(), size_t{0});
  CHECK_ERROR(t.to_vector<int32_t>(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(t.shape(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(t.copy_to(d), DP_INVALID_ARGUMENT);
  CHECK_EQ(t2.to_vector<int32_t>(), std::vector<int32_t>({3}));

  // release() hands the C handle over; the wrapper is empty afterwards
  Buffer b3 = d.allocate(8);
  dp_buffer_t* rb = b3.release();
  CHECK(!b3);
  CHECK_EQ(dp_buffer_size(rb), size_t{8});
  Buffer b4 = Buffer::adopt(rb);
  CHECK_EQ(b4.size(), size_t{8});

  // buffers, tensors, created streams and variables may outlive their runtime: still usable,
  // released safely
  Buffer survivor;
  Tensor survivor_t;
  Stream survivor_s;
  Stream dead_view;
  devplug::Variable survivor_v;
  Device dead_device;
  {
    Runtime inner(RuntimeOptions().cpu_device_count(1));
    const Device id = inner.device("CPU:0");
    survivor = id.allocate(4);
    survivor.write(std::vector<uint8_t>({1, 2, 3, 4}));
    survivor_t = Tensor::from_vector<int32_t>(id, {2}, {7, 8});
    survivor_s = id.create_stream();
    dead_view = id.default_stream();
    survivor_v = inner.variable("v", survivor_t);
    dead_device = id;
    CHECK(survivor_s.device() == id);
    CHECK(dead_view.device() == id);
    CHECK(survivor_v.device() == id);
  }
  CHECK_EQ(survivor.read_vector<uint8_t>(4), std::vector<uint8_t>({1, 2, 3, 4}));
  CHECK_EQ(survivor_t.to_vector<int32_t>(), std::vector<int32_t>({7, 8}));
  CHECK_EQ(survivor_v.read().to_vector<int32_t>(), std::vector<int32_t>({7, 8}));
  const std::vector<uint8_t> later = {5, 6, 7, 8};
  survivor_s.write(survivor, later);
  survivor_s.synchronize();
  CHECK_EQ(survivor.read_vector<uint8_t>(4), later);
  // ... but their device handles went with the runtime: device() says so (the C library's
  // message, naming the function), not a dead handle
  const auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return "(nothing thrown)";
  };
  const auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  CHECK_ERROR(survivor.device(), DP_FAILED_PRECONDITION);
  CHECK_ERROR(survivor_t.device(), DP_FAILED_PRECONDITION);
  CHECK_ERROR(survivor_s.device(), DP_FAILED_PRECONDITION);
  CHECK_ERROR(survivor_v.device(), DP_FAILED_PRECONDITION);
  CHECK(has(message_of([&] { (void)survivor_t.device(); }), "dp_tensor_device: the runtime of the tensor's device"));
  CHECK(has(message_of([&] { (void)survivor_s.device(); }), "dp_stream_device: the runtime of the stream's device HOST:0 was destroyed"));
  CHECK(has(message_of([&] { (void)survivor_v.device(); }), "dp_variable_device: the runtime of the variable's device HOST:0 was destroyed"));
  // the default stream went with the runtime, as did the device handle: the C library says so
  CHECK_ERROR(dead_view.device(), DP_INVALID_ARGUMENT);
  CHECK(has(message_of([&] { (void)dead_view.device(); }), "dp_stream_device: "));
  CHECK_ERROR(dead_device.name(), DP_INVALID_ARGUMENT);
  CHECK(has(message_of([&] { (void)dead_device.name(); }), "dp_device_name: "));
  // an empty object: refused by the wrapper before any C call, saying so
  CHECK_ERROR(Stream().device(), DP_INVALID_ARGUMENT);
  CHECK(has(message_of([&] { (void)Stream().device(); }), "devplug::Stream is empty"));
  CHECK(has(message_of([&] { (void)Tensor().shape(); }), "devplug::Tensor is empty"));
  CHECK(has(message_of([&] { (void)Tensor().num_elements(); }), "Tensor::num_elements: the devplug::Tensor is empty"));
  survivor = Buffer();
  survivor_t = Tensor();
  survivor_s = Stream();
  survivor_v = devplug::Variable();

  // an empty Device is refused by every call
  const Device none;
  CHECK(!none);
  CHECK_ERROR(none.properties(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(none.memory_usage(), DP_INVALID_ARGUMENT);
  CHECK_ERROR(none.allocate(1), DP_INVALID_ARGUMENT);
  CHECK_ERROR(none.name(), DP_INVALID_ARGUMENT);
  // moved-from objects are destroyed safely when this scope ends (t, b, e2, s, s2, rt)
}

struct NotAStdException {
  int value;
};

void test_throwing_callbacks(const Runtime& rt) {
  const Device d0 = rt.device("CPU:0");
  Stream s = d0.create_stream();
  std::atomic<int> later{0};
  s.host_callback([] { throw std::runtime_error("boom"); });
  s.host_callback([&] { ++later; });                   // still runs
  s.host_callback([] { throw std::logic_error("second"); });  // reported on stderr, dropped
  s.host_callback([&] { ++later; });
  bool rethrown = false;
  try {
    s.synchronize();
  } catch (const std::runtime_error& e) {
    rethrown = std::string(e.what()) == "boom";
  }
  CHECK(rethrown);
  CHECK_EQ(later.load(), 2);
  s.synchronize();  // collected: does not throw again
  CHECK(s.take_callback_exception() == nullptr);

  // anything thrown, not only std::exception, is caught
  s.host_callback([] { throw NotAStdException{17}; });
  Buffer b = d0.allocate(16);
  s.memset(b, 0x7f, 16);
  s.host_callback([&] { ++later; });
  bool got_int = false;
  try {
    s.synchronize();
  } catch (const NotAStdException& e) {
    got_int = e.value == 17;
  }
  CHECK(got_int);
  CHECK_EQ(later.load(), 3);
  CHECK_EQ(b.read_vector<uint8_t>(16), std::vector<uint8_t>(16, 0x7f));

  // inline (default stream): the exception is stored too, never propagated through C
  Stream def = d0.default_stream();
  def.host_callback([] { throw std::runtime_error("inline boom"); });
  std::exception_ptr e = def.take_callback_exception();
  CHECK(e != nullptr);
  bool inline_rethrown = false;
  try {
    std::rethrow_exception(e);
  } catch (const std::runtime_error& ex) {
    inline_rethrown = std::string(ex.what()) == "inline boom";
  }
  CHECK(inline_rethrown);

  // a stream destroyed with an uncollected exception reports it and does not crash
  {
    Stream doomed = d0.create_stream();
    doomed.host_callback([] { throw std::runtime_error("never collected (expected message)"); });
  }
  // still fully usable afterwards
  Stream fresh = d0.create_stream();
  bool ran = false;
  fresh.host_callback([&] { ran = true; });
  fresh.synchronize();
  CHECK(ran);
  CHECK_ERROR(fresh.host_callback(std::function<void()>()), DP_INVALID_ARGUMENT);
}

}  // namespace

int main() {
  try {
    test_versions_and_names();
    test_error_type();
    {
      Runtime rt(RuntimeOptions().cpu_device_count(2));
      CHECK(rt);
      test_devices(rt);
      test_buffers(rt);
      test_streams_events_callbacks(rt);
      test_cross_device(rt);
      test_tensors(rt);
      test_throwing_callbacks(rt);
      rt.synchronize();
    }
    test_memory_limit();
    test_set_memory_limit();
    test_move_semantics();
  } catch (const Error& e) {
    std::fprintf(stderr, "unexpected devplug::Error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  std::printf("wrapper_test: OK\n");
  return 0;
}
