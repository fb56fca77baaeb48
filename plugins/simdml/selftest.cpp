// simdml_selftest: loads the built simdml plugin with dlopen, as the runtime would, behind a
// minimal fake host table (no libdevplug involved), and checks the plugin ABI end to end:
// the entry's versions, registration and load options, devices, memory with bounds checks,
// asynchronous streams ordered by events, host callbacks, errors crossing as status+message
// (exceptions included), and that only `devplug_plugin_entry` is exported.
//
// Usage: simdml_selftest <path to libdevplug_simdml.so>. Exits 0 when every check passes.
#include <devplug/plugin.h>

#include <dlfcn.h>
#include <elf.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

int g_failures = 0;
int g_checks = 0;

#define CHECK(cond)                                                               \
  do {                                                                            \
    ++g_checks;                                                                   \
    if (!(cond)) {                                                                \
      ++g_failures;                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                             \
  } while (0)

#define CHECK_STATUS(call, expected)                                                            \
  do {                                                                                          \
    ++g_checks;                                                                                 \
    const dpp_status_t s_ = (call);                                                             \
    if (s_ != (expected)) {                                                                     \
      ++g_failures;                                                                             \
      std::fprintf(stderr, "%s:%d: %s returned %d, expected %d (error: %s)\n", __FILE__, __LINE__, \
                   #call, s_, (expected), g_last_error.c_str());                                \
    }                                                                                           \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, DPP_OK)

// ------------------------------------------------------------------------------------------
// The fake host
// ------------------------------------------------------------------------------------------

/** What set_error said on this thread (the ABI: per thread, the last one wins). */
thread_local std::string g_last_error;

std::string take_error() {
  std::string e = std::move(g_last_error);
  g_last_error.clear();
  return e;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

struct Registered {
  dpp_platform_t p;
  std::string name, device_type, vendor, version;
};

struct FakeHost {
  std::vector<std::pair<std::string, std::string>> options;
  std::string refuse_name;  // register_platform refuses this name with DPP_ALREADY_EXISTS
  bool in_init = false;
  std::vector<Registered> platforms;
  std::mutex log_mu;
  std::vector<std::pair<int32_t, std::string>> logs;
  dpp_host_api_t api{};

  FakeHost() {
    api.struct_size = DPP_HOST_API_STRUCT_SIZE;
    api.ext = nullptr;
    api.abi_major = DPP_ABI_MAJOR;
    api.abi_minor = DPP_ABI_MINOR;
    api.context = this;
    api.set_error = [](dpp_host_context_t, const char* message) { g_last_error = message ? message : "(NULL)"; };
    api.log = [](dpp_host_context_t ctx, int32_t level, const char* message) {
      auto* h = static_cast<FakeHost*>(ctx);
      std::lock_guard<std::mutex> lock(h->log_mu);
      h->logs.emplace_back(level, message ? message : "(NULL)");
    };
    api.get_option = [](dpp_host_context_t ctx, const char* key) -> const char* {
      auto* h = static_cast<FakeHost*>(ctx);
      for (const auto& kv : h->options) {
        if (kv.first == key) return kv.second.c_str();
      }
      return nullptr;
    };
    api.register_platform = [](dpp_host_context_t ctx, const dpp_platform_t* p) -> dpp_status_t {
      auto* h = static_cast<FakeHost*>(ctx);
      if (!h->in_init) return DPP_FAILED_PRECONDITION;
      if (p == nullptr || p->struct_size < DPP_PLATFORM_STRUCT_SIZE || p->name == nullptr ||
          p->device_type == nullptr || p->create_device == nullptr || p->destroy_device == nullptr) {
        return DPP_INVALID_ARGUMENT;
      }
      if (h->refuse_name == p->name) return DPP_ALREADY_EXISTS;
      Registered r;
      r.p = *p;
      r.name = p->name;  // the host copies the strings during the call
      r.device_type = p->device_type;
      r.vendor = p->vendor ? p->vendor : "";
      r.version = p->version ? p->version : "";
      h->platforms.push_back(std::move(r));
      return DPP_OK;
    };
  }

  dpp_status_t init(const dpp_plugin_api_t* plugin, void** data) {
    in_init = true;
    const dpp_status_t s = plugin->init(&api, data);
    in_init = false;
    return s;
  }
};

// ------------------------------------------------------------------------------------------
// Host callbacks used by the tests
// ------------------------------------------------------------------------------------------

/** Records the order host callbacks ran in, and whether the copy before them had landed. */
struct Recorder {
  std::mutex mu;
  std::vector<int> order;
  std::vector<bool> saw_data;
};

struct CallbackArg {
  Recorder* recorder;
  int id;
  const std::vector<uint8_t>* data;  // when set: checks every byte is `expect`
  uint8_t expect;
};

void record_callback(void* p) {
  auto* a = static_cast<CallbackArg*>(p);
  bool ok = true;
  if (a->data != nullptr) {
    for (uint8_t b : *a->data) ok = ok && b == a->expect;
  }
  std::lock_guard<std::mutex> lock(a->recorder->mu);
  a->recorder->order.push_back(a->id);
  a->recorder->saw_data.push_back(ok);
}

/** A host callback that blocks its stream until the test opens the gate. */
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

void gate_callback(void* p) {
  auto* g = static_cast<Gate*>(p);
  std::unique_lock<std::mutex> lock(g->mu);
  g->cv.wait(lock, [&] { return g->open; });
}

// ------------------------------------------------------------------------------------------
// The exported symbols, read from the ELF file's dynamic symbol table
// ------------------------------------------------------------------------------------------

std::set<std::string> exported_symbols(const char* path, bool* ok) {
  std::set<std::string> out;
  *ok = false;
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    return out;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    return sh;
  };
  if (eh.e_shoff + size_t(eh.e_shnum) * eh.e_shentsize > bytes.size()) return out;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_DYNSYM || sh.sh_entsize != sizeof(Elf64_Sym)) continue;
    Elf64_Shdr strtab = section(sh.sh_link);
    for (size_t k = 1; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym sym;
      std::memcpy(&sym, bytes.data() + sh.sh_offset + k * sizeof sym, sizeof sym);
      const int bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      out.insert(std::string(bytes.data() + strtab.sh_offset + sym.st_name));
    }
    *ok = true;
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// The checks
// ------------------------------------------------------------------------------------------

const char* const kRequired[] = {"allocate",          "deallocate",        "memcpy_htod",       "memcpy_dtoh",
                                 "memcpy_dtod",       "memset",            "create_stream",     "destroy_stream",
                                 "synchronize_stream", "stream_wait_stream", "memcpy_htod_async", "memcpy_dtoh_async",
                                 "memcpy_dtod_async", "memset_async",      "host_callback",     "create_event",
                                 "destroy_event",     "record_event",      "event_status",      "stream_wait_event",
                                 "event_synchronize", "synchronize_all"};

bool all_required_present(const dpp_stream_executor_t* se) {
  const void* fns[] = {(void*)se->allocate,          (void*)se->deallocate,         (void*)se->memcpy_htod,
                       (void*)se->memcpy_dtoh,       (void*)se->memcpy_dtod,        (void*)se->memset,
                       (void*)se->create_stream,     (void*)se->destroy_stream,     (void*)se->synchronize_stream,
                       (void*)se->stream_wait_stream, (void*)se->memcpy_htod_async, (void*)se->memcpy_dtoh_async,
                       (void*)se->memcpy_dtod_async, (void*)se->memset_async,       (void*)se->host_callback,
                       (void*)se->create_event,      (void*)se->destroy_event,      (void*)se->record_event,
                       (void*)se->event_status,      (void*)se->stream_wait_event,  (void*)se->event_synchronize,
                       (void*)se->synchronize_all};
  bool ok = true;
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; ++i) {
    if (fns[i] == nullptr) {
      std::fprintf(stderr, "executor function %s is NULL\n", kRequired[i]);
      ok = false;
    }
  }
  return ok;
}

/** Memory, streams, events and callbacks on one device of a platform loaded with latency. */
void test_device(const Registered& reg) {
  const dpp_platform_t& pl = reg.p;
  dpp_device_t dev{};
  dev.struct_size = DPP_DEVICE_STRUCT_SIZE;

  // Ordinals are checked.
  dev.ordinal = 1;
  CHECK_STATUS(pl.create_device(pl.platform_data, 1, &dev), DPP_INVALID_ARGUMENT);
  CHECK(contains(take_error(), "ordinal"));
  CHECK(dev.se == nullptr);  // out-parameters untouched on failure

  dev.ordinal = 0;
  CHECK_OK(pl.create_device(pl.platform_data, 0, &dev));
  if (dev.se == nullptr) {
    CHECK(dev.se != nullptr);
    return;
  }
  const dpp_stream_executor_t* se = dev.se;
  void* d = dev.device_data;
  CHECK(d != nullptr);
  CHECK(se->struct_size == DPP_STREAM_EXECUTOR_STRUCT_SIZE);
  CHECK(se->ext == nullptr);
  CHECK(all_required_present(se));
  CHECK(se->host_allocate && se->host_deallocate && se->unified_allocate && se->unified_deallocate &&
        se->memory_usage && se->allocator_stats);
  CHECK(dev.total_memory == (uint64_t(32) << 20));
  CHECK(dev.hardware_name != nullptr && contains(dev.hardware_name, "SIMDML"));
  CHECK(dev.numa_node == -1);

  // ---- Allocation and synchronous copies, with offsets and bounds checks ----------------
  dpp_addr_t a = 0;
  CHECK_STATUS(se->allocate(d, 0, &a), DPP_INVALID_ARGUMENT);
  CHECK(!take_error().empty());
  CHECK_OK(se->allocate(d, 1000, &a));
  CHECK((a >> 48) == 0x44D0);
  dpp_addr_t huge = 0;
  CHECK_STATUS(se->allocate(d, uint64_t(1) << 30, &huge), DPP_RESOURCE_EXHAUSTED);
  {
    const std::string e = take_error();
    CHECK(contains(e, "cannot allocate 1073741824 bytes"));
    std::printf("  (allocation too large: \"%s\")\n", e.c_str());
  }
  CHECK(huge == 0);

  std::vector<uint8_t> pattern(1000);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  CHECK_OK(se->memcpy_htod(d, a, pattern.data(), pattern.size()));
  std::vector<uint8_t> out(100, 0);
  CHECK_OK(se->memcpy_dtoh(d, out.data(), a + 100, 50));
  CHECK(std::memcmp(out.data(), pattern.data() + 100, 50) == 0);
  CHECK_OK(se->memcpy_dtod(d, a + 500, a, 100));
  CHECK_OK(se->memcpy_dtoh(d, out.data(), a + 500, 100));
  CHECK(std::memcmp(out.data(), pattern.data(), 100) == 0);
  CHECK_OK(se->memset(d, a + 10, 0x7F, 5));
  CHECK_OK(se->memcpy_dtoh(d, out.data(), a + 8, 9));
  CHECK(out[0] == pattern[8] && out[1] == pattern[9] && out[2] == 0x7F && out[6] == 0x7F && out[7] == pattern[15]);
  // Past the end of the allocation, or nowhere at all.
  CHECK_STATUS(se->memcpy_dtoh(d, out.data(), a + 990, 20), DPP_INVALID_ARGUMENT);
  CHECK(contains(take_error(), "not inside a live allocation"));
  CHECK_STATUS(se->memcpy_htod(d, 0x1234, pattern.data(), 4), DPP_INVALID_ARGUMENT);
  CHECK_STATUS(se->memcpy_htod(d, a, nullptr, 4), DPP_INVALID_ARGUMENT);
  take_error();

  uint64_t free_bytes = 0, total_bytes = 0;
  CHECK_OK(se->memory_usage(d, &free_bytes, &total_bytes));
  CHECK(total_bytes == (uint64_t(32) << 20));
  CHECK(free_bytes == total_bytes - 1024);  // 1000 rounded up to the 256-byte alignment
  dpp_allocator_stats_t stats{};
  stats.struct_size = DPP_ALLOCATOR_STATS_STRUCT_SIZE;
  CHECK_OK(se->allocator_stats(d, &stats));
  CHECK(stats.num_allocs == 1 && stats.bytes_in_use == 1024 && stats.bytes_limit == total_bytes);
  // A host with a smaller struct gets only the fields it has.
  dpp_allocator_stats_t small{};
  small.struct_size = offsetof(dpp_allocator_stats_t, bytes_in_use);
  small.bytes_in_use = 0xDEAD;
  CHECK_OK(se->allocator_stats(d, &small));
  CHECK(small.num_allocs == 1 && small.bytes_in_use == 0xDEAD);

  // Unified memory: device functions address it, the host reads it directly.
  void* u = nullptr;
  CHECK_OK(se->unified_allocate(d, 64, &u));
  if (u != nullptr) {
    CHECK_OK(se->memcpy_htod(d, reinterpret_cast<uintptr_t>(u), pattern.data(), 64));
    CHECK(std::memcmp(u, pattern.data(), 64) == 0);
    se->unified_deallocate(d, u, 64);
  }
  void* pinned = nullptr;
  CHECK_OK(se->host_allocate(d, 4096, &pinned));
  CHECK(pinned != nullptr);
  se->host_deallocate(d, pinned, 4096);

  // ---- Streams, events, host callbacks ---------------------------------------------------
  const uint64_t n = 4096;
  dpp_addr_t bufA = 0, bufB = 0;
  CHECK_OK(se->allocate(d, n, &bufA));
  CHECK_OK(se->allocate(d, n, &bufB));
  void *s1 = nullptr, *s2 = nullptr, *e = nullptr;
  CHECK_OK(se->create_stream(d, &s1));
  CHECK_OK(se->create_stream(d, &s2));
  CHECK_OK(se->create_event(d, &e));
  int32_t st = -1;
  CHECK_OK(se->event_status(d, e, &st));
  CHECK(st == DPP_EVENT_COMPLETE);  // never recorded

  // s1 uploads (with the injected latency); s2 waits for it through the event, copies on the
  // device and downloads. Two callbacks on s2 run in order, after the download.
  std::vector<uint8_t> src(n, 0xAB), dst(n, 0);
  Recorder rec;
  CallbackArg cb1{&rec, 1, &dst, 0xAB}, cb2{&rec, 2, &dst, 0xAB};
  CHECK_OK(se->memcpy_htod_async(d, s1, bufA, src.data(), n));
  CHECK_OK(se->record_event(d, s1, e));
  CHECK_OK(se->stream_wait_event(d, s2, e));
  CHECK_OK(se->memcpy_dtod_async(d, s2, bufB, bufA, n));
  CHECK_OK(se->memcpy_dtoh_async(d, s2, dst.data(), bufB, n));
  CHECK_OK(se->host_callback(d, s2, record_callback, &cb1));
  CHECK_OK(se->host_callback(d, s2, record_callback, &cb2));
  CHECK_OK(se->synchronize_stream(d, s2));
  CHECK(dst == src);
  CHECK((rec.order == std::vector<int>{1, 2}));
  CHECK((rec.saw_data == std::vector<bool>{true, true}));
  CHECK_OK(se->event_status(d, e, &st));
  CHECK(st == DPP_EVENT_COMPLETE);

  // Asynchrony, deterministically: a closed gate holds s1, so the memset behind it has not
  // run and the event behind that is pending; opening the gate lets both through.
  Gate gate;
  CHECK_OK(se->host_callback(d, s1, gate_callback, &gate));
  CHECK_OK(se->memset_async(d, s1, bufA, 0x11, n));
  CHECK_OK(se->record_event(d, s1, e));
  CHECK_OK(se->event_status(d, e, &st));
  CHECK(st == DPP_EVENT_PENDING);
  CHECK_OK(se->memcpy_dtoh(d, dst.data(), bufA, n));
  CHECK(dst[0] == 0xAB && dst[n - 1] == 0xAB);  // not yet overwritten
  gate.release();
  CHECK_OK(se->event_synchronize(d, e));
  CHECK_OK(se->event_status(d, e, &st));
  CHECK(st == DPP_EVENT_COMPLETE);
  CHECK_OK(se->memcpy_dtoh(d, dst.data(), bufA, n));
  CHECK(dst[0] == 0x11 && dst[n - 1] == 0x11);

  // stream_wait_stream orders s2 after s1's (slow) memset.
  std::fill(dst.begin(), dst.end(), 0);
  CHECK_OK(se->memset_async(d, s1, bufA, 0x22, n));
  CHECK_OK(se->stream_wait_stream(d, s2, s1));
  CHECK_OK(se->memcpy_dtoh_async(d, s2, dst.data(), bufA, n));
  CHECK_OK(se->synchronize_stream(d, s2));
  CHECK(dst == std::vector<uint8_t>(n, 0x22));
  CHECK_OK(se->synchronize_all(d));

  // An error the stream meets later: the buffer is freed while the stream is held; the
  // event recorded after the failure reports it, synchronize returns it once.
  dpp_addr_t bufC = 0;
  CHECK_OK(se->allocate(d, n, &bufC));
  Gate gate2;
  CHECK_OK(se->host_callback(d, s1, gate_callback, &gate2));
  CHECK_OK(se->memset_async(d, s1, bufC, 0x33, n));
  CHECK_OK(se->record_event(d, s1, e));
  se->deallocate(d, bufC, n);
  gate2.release();
  CHECK_STATUS(se->synchronize_stream(d, s1), DPP_INVALID_ARGUMENT);
  CHECK(contains(take_error(), "memset_async"));
  CHECK_OK(se->event_status(d, e, &st));
  CHECK(st == DPP_EVENT_ERROR);
  CHECK_OK(se->synchronize_stream(d, s1));  // reported once

  // Bad arguments are errors with messages, not crashes.
  CHECK_STATUS(se->synchronize_stream(d, e), DPP_INVALID_ARGUMENT);  // an event as a stream
  CHECK(contains(take_error(), "not a stream"));
  CHECK_STATUS(se->record_event(d, s1, s2), DPP_INVALID_ARGUMENT);  // a stream as an event
  CHECK(contains(take_error(), "not an event"));
  CHECK_STATUS(se->synchronize_stream(d, nullptr), DPP_INVALID_ARGUMENT);
  CHECK_STATUS(se->host_callback(d, s1, nullptr, nullptr), DPP_INVALID_ARGUMENT);
  CHECK_STATUS(se->memcpy_htod_async(d, s1, bufA + n - 8, src.data(), 16), DPP_INVALID_ARGUMENT);
  CHECK_STATUS(se->create_stream(d, nullptr), DPP_INVALID_ARGUMENT);
  CHECK_STATUS(se->event_status(d, e, nullptr), DPP_INVALID_ARGUMENT);
  CHECK(!take_error().empty());

  // ---- Destroy everything ------------------------------------------------------------------
  // A stream destroyed with work pending waits for it (the callback still runs, once).
  Recorder rec2;
  CallbackArg cb3{&rec2, 3, nullptr, 0};
  CHECK_OK(se->memset_async(d, s2, bufB, 0x44, n));
  CHECK_OK(se->host_callback(d, s2, record_callback, &cb3));
  se->destroy_event(d, e);
  se->destroy_stream(d, s1);
  se->destroy_stream(d, s2);
  CHECK((rec2.order == std::vector<int>{3}));
  se->deallocate(d, bufA, n);
  se->deallocate(d, bufB, n);
  se->deallocate(d, a, 1000);
  CHECK_OK(se->memory_usage(d, &free_bytes, &total_bytes));
  CHECK(free_bytes == total_bytes);
  pl.destroy_device(pl.platform_data, &dev);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <path to libdevplug_simdml.so>\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<dpp_entry_fn>(dlsym(lib, "devplug_plugin_entry"));
  CHECK(entry != nullptr);
  if (entry == nullptr) return 1;

  // ---- The entry and its description ---------------------------------------------------------
  const dpp_plugin_api_t* api = entry();
  CHECK(api != nullptr && api == entry());
  if (api == nullptr) return 1;
  CHECK(api->struct_size == DPP_PLUGIN_API_STRUCT_SIZE);
  CHECK(api->ext == nullptr);
  CHECK(api->abi_major == DPP_ABI_MAJOR && api->abi_minor == DPP_ABI_MINOR);
  CHECK(api->name != nullptr && std::string(api->name) == "simdml");
  CHECK(api->version != nullptr && std::string(api->version) == "0.1.0");
  CHECK(api->init != nullptr && api->shutdown != nullptr);

  // ---- Defaults, and the device tests ------------------------------------------------------
  {
    std::printf("defaults + device\n");
    FakeHost host;
    host.options = {{"latency_us", "2000"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    CHECK(data != nullptr);
    CHECK(host.platforms.size() == 1);
    if (host.platforms.size() == 1) {
      const Registered& r = host.platforms[0];
      CHECK(r.name == "SIMDML");
      CHECK(r.device_type == "GPU");
      CHECK(r.p.priority == 100);
      CHECK(r.p.flags == 0);  // not host visible
      CHECK(r.p.device_count == 1);
      CHECK(r.p.struct_size == DPP_PLATFORM_STRUCT_SIZE);
      CHECK(r.p.ext == nullptr);
      CHECK(r.p.destroy_platform != nullptr);
      CHECK(!r.vendor.empty() && r.version == "0.1.0");
      test_device(r);
      r.p.destroy_platform(r.p.platform_data);
    }
    CHECK(!host.logs.empty() && contains(host.logs[0].second, "SIMDML"));
    api->shutdown(data);
  }

  // ---- Options override the defaults --------------------------------------------------------
  {
    std::printf("options\n");
    FakeHost host;
    host.options = {{"platform", "DML2"}, {"device_type", "NPU"}, {"priority", "-7"}, {"devices", "3"},
                    {"memory", "1MiB"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    CHECK(host.platforms.size() == 1);
    if (host.platforms.size() == 1) {
      const dpp_platform_t& p = host.platforms[0].p;
      CHECK(host.platforms[0].name == "DML2");
      CHECK(host.platforms[0].device_type == "NPU");
      CHECK(p.priority == -7);
      CHECK(p.device_count == 3);
      dpp_device_t dev{};
      dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
      dev.ordinal = 2;
      CHECK_OK(p.create_device(p.platform_data, 2, &dev));
      CHECK(dev.total_memory == (uint64_t(1) << 20));
      if (dev.se != nullptr) {
        dpp_addr_t x = 0;
        CHECK_STATUS(dev.se->allocate(dev.device_data, (uint64_t(1) << 20) + 1, &x), DPP_RESOURCE_EXHAUSTED);
        CHECK(contains(take_error(), "DML2:2"));
        // A host dpp_device_t older than ABI 1.0's is refused.
        dpp_device_t tiny{};
        tiny.struct_size = 16;
        CHECK_STATUS(p.create_device(p.platform_data, 0, &tiny), DPP_ABI_MISMATCH);
        take_error();
        p.destroy_device(p.platform_data, &dev);
      }
      p.destroy_platform(p.platform_data);
    }
    api->shutdown(data);
  }

  // ---- Exceptions and errors from init ------------------------------------------------------
  {
    std::printf("errors from init\n");
    FakeHost host;
    host.options = {{"throw_in_init", "1"}};
    void* data = reinterpret_cast<void*>(0x1);
    CHECK_STATUS(host.init(api, &data), DPP_INTERNAL);
    const std::string e = take_error();
    CHECK(contains(e, "throw_in_init"));
    std::printf("  (throw_in_init=1: \"%s\")\n", e.c_str());
    CHECK(data == reinterpret_cast<void*>(0x1));  // not written on failure
    CHECK(host.platforms.empty());
  }
  {
    FakeHost host;
    host.options = {{"priority", "high"}};
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_INVALID_ARGUMENT);
    const std::string e = take_error();
    CHECK(contains(e, "'priority'") && contains(e, "high"));
  }
  {
    FakeHost host;
    host.options = {{"priority", "3000000000"}};  // out of int32_t
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "between"));
  }
  {
    // The host refuses the registration: init fails with the host's status.
    FakeHost host;
    host.refuse_name = "TAKEN";
    host.options = {{"platform", "TAKEN"}};
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_ALREADY_EXISTS);
    CHECK(contains(take_error(), "TAKEN"));
    CHECK(host.platforms.empty());
  }
  {
    // A host of another ABI major is refused before any plugin code runs.
    FakeHost host;
    host.api.abi_major = DPP_ABI_MAJOR + 1;
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_ABI_MISMATCH);
    CHECK(!take_error().empty());
  }

  // ---- Only the entry symbol is exported ----------------------------------------------------
  {
    std::printf("exports\n");
    bool ok = false;
    std::set<std::string> syms = exported_symbols(path, &ok);
    CHECK(ok);
    CHECK(syms.size() == 1 && syms.count("devplug_plugin_entry") == 1);
    if (syms.size() != 1) {
      std::fprintf(stderr, "%zu exported symbols, e.g.:", syms.size());
      int shown = 0;
      for (const auto& s : syms) {
        if (shown++ < 10) std::fprintf(stderr, " %s", s.c_str());
      }
      std::fprintf(stderr, "\n");
    }
  }

  // The plugin unloads (leaked STB_GNU_UNIQUE symbols or live threads would pin it).
  CHECK(dlclose(lib) == 0);
  CHECK(dlopen(path, RTLD_NOW | RTLD_NOLOAD) == nullptr);

  std::printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
