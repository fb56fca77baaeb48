// simdml_selftest: loads the built simdml plugin with dlopen, as the runtime would, behind a
// minimal fake host table (no libdevplug involved), and checks the plugin ABI end to end:
// the entry's versions, registration and load options, devices, memory with bounds checks,
// asynchronous streams ordered by events, host callbacks, errors crossing as status+message
// (exceptions included), and that only `devplug_plugin_entry` is exported.
//
// Kernels (ABI 1.1): the fake host takes register_kernel and offers the attr_* readers; each
// SIMDML kernel (Add, Sub, Relu in f32 and f64) runs through a fake kernel context on a real
// SIMDML stream and is compared with a reference after synchronize; argument errors, stream
// errors and exceptions become statuses with messages; kernels=0 registers none; an ABI 1.0
// host table gets a clear error. A small in-process plugin built from plugin.hpp checks the
// header's kernel API where SIMDML does not reach (attributes, ANY binding, every kind of
// exception, refusals, a newer host's larger dpp_tensor_t, half dtypes left out for a host older
// than ABI 1.3).
//
// Timed events (ABI 1.4): SIMDML's event_elapsed_ns around work with latency, reversed, the
// same event, never recorded, pending, after a stream error, bad arguments; and plugin.hpp's
// OptionalFunctions::event_elapsed_ns on an in-process platform (NULL without the opt-in,
// UNIMPLEMENTED with it but no override, values and exceptions through the table).
//
// Temporary memory (ABI 1.4): the fake host's allocate_temp (by the launch's attrs, through the
// device's executor, freed in stream order) and plugin.hpp's KernelContext::allocate_temp on an
// in-process platform with a deferred stream: memory usable by the kernel's work and taken back
// after it, the host's refusals (size 0, no memory, a context it did not pass) as Errors, and
// UNIMPLEMENTED from a 1.3 host table or a NULL function.
//
// Kernel state (ABI 1.5): SIMDML's simdml.Swish (the fake host takes ops when asked) has create
// and destroy, its other kernels none; create reads and checks beta once (refusals with
// messages), compute uses the state it is given, queued work keeps a destroyed state until it
// ran, an 80-byte context (an older host) gets a state per launch, every state is destroyed and a
// device destroyed with one left warns. plugin.hpp's side on an in-process platform: the create
// context (device, op, dtypes, attributes, a newer host's larger struct), states by value, by
// std::unique_ptr and null, the wrong type, no create, exceptions from create as statuses,
// malformed contexts, destroy of NULL or of a foreign pointer, supports_kernel_state().
//
// Usage: simdml_selftest <path to libdevplug_simdml.so>. Exits 0 when every check passes.
#include <devplug/plugin.h>
#include <devplug/plugin.hpp>

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
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

/** A kernel as the fake host copied it. */
struct RegisteredKernel {
  size_t struct_size = 0;
  std::string op, device_type;
  bool platform_null = true;
  std::string platform;
  std::vector<int32_t> dtypes;
  int32_t priority = 0;
  void* kernel_data = nullptr;
  dpp_status_t (*compute)(const dpp_kernel_context_t*) = nullptr;
  // ABI 1.5, copied as far as the plugin's struct_size reaches (NULL past it).
  dpp_status_t (*create)(const dpp_kernel_create_context_t*, void**) = nullptr;
  void (*destroy)(void*, void*) = nullptr;
};

/** The attributes the fake host's attr_* functions read (the runtime's rules: NOT_FOUND,
 *  INVALID_ARGUMENT for another type, an int reads as a float). */
struct FakeAttrs {
  enum Kind { Int, Float, Bool, Ints, DType, Str };
  struct Value {
    std::string name;
    Kind kind;
    int64_t i;
    double f;
    std::vector<int64_t> v;
    std::string s;
  };
  std::vector<Value> values;
  const Value* find(const char* name) const {
    for (const Value& v : values) {
      if (name != nullptr && v.name == name) return &v;
    }
    return nullptr;
  }
};

/**
 * One kernel launch as the fake host runs it, for allocate_temp (ABI 1.4). Like the runtime,
 * the host knows the launch by the context's `attrs` (here &attrs); it allocates through the
 * device's executor, 256-byte aligned, and frees the memory in stream order once the kernel
 * returned (finish()). One launch at a time (g_launch).
 */
struct FakeLaunch {
  FakeAttrs attrs;
  const dpp_stream_executor_t* se = nullptr;
  void* device = nullptr;
  void* stream = nullptr;
  std::vector<std::pair<dpp_addr_t, uint64_t>> temps;  // what se->allocate gave, and its size
  int calls = 0;                                       // allocate_temp calls that reached the launch

  /** After the kernel returned: a host callback on the stream frees the memory (stream order). */
  dpp_status_t finish() {
    auto* owned = new FakeLaunch::Frees{se, device, std::move(temps)};
    temps.clear();
    const dpp_status_t s = se->host_callback(device, stream, &FakeLaunch::free_all, owned);
    if (s != DPP_OK) free_all(owned);
    return s;
  }

 private:
  struct Frees {
    const dpp_stream_executor_t* se;
    void* device;
    std::vector<std::pair<dpp_addr_t, uint64_t>> temps;
  };
  static void free_all(void* p) {
    std::unique_ptr<Frees> f(static_cast<Frees*>(p));
    for (const auto& t : f->temps) f->se->deallocate(f->device, t.first, t.second);
  }
};
FakeLaunch* g_launch = nullptr;

struct FakeHost {
  std::vector<std::pair<std::string, std::string>> options;
  std::string refuse_name;    // register_platform refuses this name with DPP_ALREADY_EXISTS
  std::string refuse_kernel;  // register_kernel refuses this op with DPP_ALREADY_EXISTS
  bool in_init = false;
  std::vector<Registered> platforms;
  std::vector<RegisteredKernel> kernels;
  std::vector<std::string> ops;  // the names register_op took (accept_ops())
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
    api.register_kernel = [](dpp_host_context_t ctx, const dpp_kernel_t* k) -> dpp_status_t {
      auto* h = static_cast<FakeHost*>(ctx);
      if (!h->in_init) return DPP_FAILED_PRECONDITION;
      if (k == nullptr || k->struct_size < DPP_KERNEL_STRUCT_SIZE || k->op == nullptr || k->device_type == nullptr ||
          k->compute == nullptr || (k->num_dtypes > 0 && k->dtypes == nullptr)) {
        return DPP_INVALID_ARGUMENT;
      }
      if (h->refuse_kernel == k->op) return DPP_ALREADY_EXISTS;
      RegisteredKernel r;
      r.struct_size = k->struct_size;
      r.op = k->op;  // copied during the call, like the host
      r.device_type = k->device_type;
      r.platform_null = k->platform == nullptr;
      r.platform = k->platform ? k->platform : "";
      r.dtypes.assign(k->dtypes, k->dtypes + k->num_dtypes);
      r.priority = k->priority;
      r.kernel_data = k->kernel_data;
      r.compute = k->compute;
      if (k->struct_size >= offsetof(dpp_kernel_t, destroy) + sizeof(k->destroy)) {
        r.create = k->create;
        r.destroy = k->destroy;
      }
      h->kernels.push_back(std::move(r));
      return DPP_OK;
    };
    api.attr_int = [](const void* attrs, const char* name, int64_t* out) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if (v->kind != FakeAttrs::Int || out == nullptr) return DPP_INVALID_ARGUMENT;
      *out = v->i;
      return DPP_OK;
    };
    api.attr_float = [](const void* attrs, const char* name, double* out) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if ((v->kind != FakeAttrs::Float && v->kind != FakeAttrs::Int) || out == nullptr) return DPP_INVALID_ARGUMENT;
      *out = v->kind == FakeAttrs::Int ? static_cast<double>(v->i) : v->f;
      return DPP_OK;
    };
    api.attr_bool = [](const void* attrs, const char* name, int32_t* out) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if (v->kind != FakeAttrs::Bool || out == nullptr) return DPP_INVALID_ARGUMENT;
      *out = v->i != 0 ? 1 : 0;
      return DPP_OK;
    };
    api.attr_ints = [](const void* attrs, const char* name, const int64_t** out, size_t* len) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if (v->kind != FakeAttrs::Ints || out == nullptr || len == nullptr) return DPP_INVALID_ARGUMENT;
      *out = v->v.data();
      *len = v->v.size();
      return DPP_OK;
    };
    api.attr_dtype = [](const void* attrs, const char* name, int32_t* out) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if (v->kind != FakeAttrs::DType || out == nullptr) return DPP_INVALID_ARGUMENT;
      *out = static_cast<int32_t>(v->i);
      return DPP_OK;
    };
    api.attr_string = [](const void* attrs, const char* name, const char** out, size_t* len) -> dpp_status_t {
      const FakeAttrs::Value* v = attrs ? static_cast<const FakeAttrs*>(attrs)->find(name) : nullptr;
      if (v == nullptr) return DPP_NOT_FOUND;
      if (v->kind != FakeAttrs::Str || out == nullptr || len == nullptr) return DPP_INVALID_ARGUMENT;
      *out = v->s.data();
      *len = v->s.size();
      return DPP_OK;
    };
    api.allocate_temp = [](const dpp_kernel_context_t* c, uint64_t size, dpp_addr_t* out) -> dpp_status_t {
      FakeLaunch* l = g_launch;
      if (c == nullptr || l == nullptr || c->attrs != &l->attrs) return DPP_INVALID_ARGUMENT;  // not a launch
      ++l->calls;
      if (size == 0 || out == nullptr) return DPP_INVALID_ARGUMENT;
      if (size > std::numeric_limits<uint64_t>::max() - 255) return DPP_RESOURCE_EXHAUSTED;
      dpp_addr_t base = 0;
      const dpp_status_t s = l->se->allocate(l->device, size + 255, &base);
      if (s != DPP_OK) return s;
      l->temps.emplace_back(base, size + 255);
      *out = (base + 255) & ~dpp_addr_t(255);
      return DPP_OK;
    };
  }

  /** Takes ops of the plugin's own (ABI 1.2's register_op; off by default): SIMDML then
   *  registers simdml.Swish and its kernel. */
  void accept_ops() {
    api.register_op = [](dpp_host_context_t ctx, const dpp_op_def_t* d) -> dpp_status_t {
      auto* h = static_cast<FakeHost*>(ctx);
      if (!h->in_init) return DPP_FAILED_PRECONDITION;
      if (d == nullptr || d->struct_size < DPP_OP_DEF_STRUCT_SIZE || d->name == nullptr) return DPP_INVALID_ARGUMENT;
      h->ops.push_back(d->name);
      return DPP_OK;
    };
  }

  /** The log lines containing @p part. */
  std::vector<std::string> logs_with(const char* part) {
    std::lock_guard<std::mutex> lock(log_mu);
    std::vector<std::string> out;
    for (const auto& l : logs) {
      if (l.second.find(part) != std::string::npos) out.push_back(l.second);
    }
    return out;
  }

  /** Makes the table an ABI 1.0 one: 64 bytes, no register_kernel or attr_* functions. */
  void make_abi_1_0() {
    api.struct_size = DPP_HOST_API_STRUCT_SIZE_1_0;
    api.abi_minor = 0;
  }

  const RegisteredKernel* kernel(const std::string& op) const {
    for (const RegisteredKernel& k : kernels) {
      if (k.op == op) return &k;
    }
    return nullptr;
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
        se->memory_usage && se->allocator_stats && se->event_elapsed_ns);
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

  // ---- Timed events (ABI 1.4): the stream's time when it reaches each record -------------
  {
    const int64_t latency_ns = 2000 * 1000;  // latency_us=2000
    void *e0 = nullptr, *e1 = nullptr, *e2 = nullptr, *never = nullptr;
    CHECK_OK(se->create_event(d, &e0));
    CHECK_OK(se->create_event(d, &e1));
    CHECK_OK(se->create_event(d, &e2));
    CHECK_OK(se->create_event(d, &never));
    int64_t ns = -1, back = 1;
    // Around a memset (the latency before it): at least the latency; reversed, the negative;
    // the same event twice, 0.
    CHECK_OK(se->record_event(d, s1, e0));
    CHECK_OK(se->memset_async(d, s1, bufA, 0x12, n));
    CHECK_OK(se->record_event(d, s1, e1));
    CHECK_OK(se->synchronize_stream(d, s1));
    CHECK_OK(se->event_elapsed_ns(d, e0, e1, &ns));
    CHECK(ns >= latency_ns);
    CHECK_OK(se->event_elapsed_ns(d, e1, e0, &back));
    CHECK(back == -ns);
    CHECK_OK(se->event_elapsed_ns(d, e0, e0, &back));
    CHECK(back == 0);
    // Two streams: s2 waits for e0 (on s1), runs a memset, records e2.
    CHECK_OK(se->record_event(d, s1, e0));
    CHECK_OK(se->stream_wait_event(d, s2, e0));
    CHECK_OK(se->memset_async(d, s2, bufB, 0x13, n));
    CHECK_OK(se->record_event(d, s2, e2));
    CHECK_OK(se->synchronize_all(d));
    CHECK_OK(se->event_elapsed_ns(d, e0, e2, &ns));
    CHECK(ns >= latency_ns);
    // Never recorded (though complete): no time, either way round; nothing written.
    ns = 777;
    CHECK_STATUS(se->event_elapsed_ns(d, never, e0, &ns), DPP_FAILED_PRECONDITION);
    CHECK(contains(take_error(), "event_elapsed_ns: the start event was never recorded"));
    CHECK_STATUS(se->event_elapsed_ns(d, e0, never, &ns), DPP_FAILED_PRECONDITION);
    CHECK(contains(take_error(), "event_elapsed_ns: the end event was never recorded"));
    // Pending behind a gate; the latest record counts once the stream got there.
    Gate gate3;
    CHECK_OK(se->host_callback(d, s1, gate_callback, &gate3));
    CHECK_OK(se->memset_async(d, s1, bufA, 0x14, n));
    CHECK_OK(se->record_event(d, s1, e1));
    CHECK_STATUS(se->event_elapsed_ns(d, e0, e1, &ns), DPP_FAILED_PRECONDITION);
    CHECK(contains(take_error(), "the end event is still pending"));
    CHECK(ns == 777);
    gate3.release();
    CHECK_OK(se->event_synchronize(d, e1));
    CHECK_OK(se->event_elapsed_ns(d, e0, e1, &ns));
    CHECK(ns >= latency_ns);
    // What plugin.hpp's table checks: the out-pointer and both handles.
    CHECK_STATUS(se->event_elapsed_ns(d, e0, e1, nullptr), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "event_elapsed_ns: out_ns is NULL"));
    CHECK_STATUS(se->event_elapsed_ns(d, s1, e1, &ns), DPP_INVALID_ARGUMENT);  // a stream as an event
    CHECK(contains(take_error(), "event_elapsed_ns: start is not an event"));
    CHECK_STATUS(se->event_elapsed_ns(d, e0, nullptr, &ns), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "event_elapsed_ns: end is NULL"));
    se->destroy_event(d, e0);
    se->destroy_event(d, e1);
    se->destroy_event(d, e2);
    se->destroy_event(d, never);
  }

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
  // SIMDML's event_synchronize fails for such an event, with the stream's error.
  CHECK_STATUS(se->event_synchronize(d, e), DPP_INVALID_ARGUMENT);
  {
    const std::string m = take_error();
    CHECK(contains(m, "the stream failed before reaching the event") && contains(m, "memset_async"));
  }
  {
    // An event reached after its stream failed has no time.
    int64_t ns = 5;
    CHECK_STATUS(se->event_elapsed_ns(d, e, e, &ns), DPP_FAILED_PRECONDITION);
    const std::string m = take_error();
    CHECK(contains(m, "the start event reports an error: its stream failed before reaching it") &&
          contains(m, "memset_async"));
    CHECK(ns == 5);
  }
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

  // ---- A stream destroyed inside one of its own host callbacks ------------------------------
  // (the host may do that). Its worker cannot join itself: the stream goes, the work queued
  // behind the callback still runs, nothing hangs, and synchronize_all no longer sees it.
  {
    struct SelfDestroy {
      const dpp_stream_executor_t* se;
      void* device;
      void* stream;
      std::atomic<bool> done{false};
    };
    void* s3 = nullptr;
    CHECK_OK(se->create_stream(d, &s3));
    SelfDestroy sd{se, d, s3};
    Recorder rec3;
    CallbackArg cb4{&rec3, 4, nullptr, 0};
    Gate gate4;
    CHECK_OK(se->host_callback(d, s3, gate_callback, &gate4));
    CHECK_OK(se->host_callback(
        d, s3,
        [](void* p) {
          auto* x = static_cast<SelfDestroy*>(p);
          x->se->destroy_stream(x->device, x->stream);
          x->done = true;
        },
        &sd));
    CHECK_OK(se->memset_async(d, s3, bufB, 0x55, n));
    CHECK_OK(se->host_callback(d, s3, record_callback, &cb4));
    gate4.release();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool ran = false;
    while (!ran && std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(rec3.mu);
        ran = rec3.order == std::vector<int>{4};
      }
      if (!ran) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(ran && sd.done.load());
    CHECK_OK(se->memcpy_dtoh(d, dst.data(), bufB, n));
    CHECK(dst == std::vector<uint8_t>(n, 0x55));  // the memset behind the callback ran
    CHECK_OK(se->synchronize_all(d));
  }

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

// ------------------------------------------------------------------------------------------
// Kernels
// ------------------------------------------------------------------------------------------

/** A tensor of a kernel call: device memory the test owns. */
struct KTensor {
  int32_t dtype = DPP_DTYPE_F32;
  std::vector<int64_t> shape;
  dpp_addr_t addr = 0;
  uint64_t bytes = 0;
};

size_t elem_size(int32_t dtype) { return dtype == DPP_DTYPE_F64 || dtype == DPP_DTYPE_I64 ? 8 : 4; }

uint64_t count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

dpp_tensor_t raw_tensor(const KTensor& t) {
  dpp_tensor_t r{};
  r.struct_size = DPP_TENSOR_STRUCT_SIZE;
  r.ext = nullptr;
  r.dtype = t.dtype;
  r.rank = static_cast<int32_t>(t.shape.size());
  r.shape = t.shape.empty() ? nullptr : t.shape.data();
  r.data = t.addr;
  r.byte_size = t.bytes;
  return r;
}

dpp_kernel_context_t make_context(void* device, void* stream, const std::vector<dpp_tensor_t>& in,
                                  const std::vector<dpp_tensor_t>& out, const void* attrs, void* kernel_data) {
  dpp_kernel_context_t c{};
  c.struct_size = DPP_KERNEL_CONTEXT_STRUCT_SIZE;
  c.ext = nullptr;
  c.device = device;
  c.stream = stream;
  c.num_inputs = in.size();
  c.inputs = in.empty() ? nullptr : in.data();
  c.num_outputs = out.size();
  c.outputs = out.empty() ? nullptr : out.data();
  c.attrs = attrs;
  c.kernel_data = kernel_data;
  return c;
}

/** Calls kernel @p k as the runtime would: a context over @p in and @p out. */
dpp_status_t run_kernel(const RegisteredKernel& k, void* device, void* stream, const std::vector<KTensor>& in,
                        const std::vector<KTensor>& out, const void* attrs = nullptr) {
  std::vector<dpp_tensor_t> ri, ro;
  for (const KTensor& t : in) ri.push_back(raw_tensor(t));
  for (const KTensor& t : out) ro.push_back(raw_tensor(t));
  const dpp_kernel_context_t c = make_context(device, stream, ri, ro, attrs, k.kernel_data);
  g_last_error.clear();
  return k.compute(&c);
}

/** A SIMDML device and its default stream, with typed uploads and downloads. */
struct KDevice {
  const dpp_stream_executor_t* se;
  void* d;
  void* stream = nullptr;

  template <class T>
  KTensor upload(int32_t dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    KTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.bytes = count(t.shape) * sizeof(T);
    CHECK(values.size() == count(t.shape));
    CHECK_OK(se->allocate(d, t.bytes == 0 ? 1 : t.bytes, &t.addr));
    if (t.bytes != 0) CHECK_OK(se->memcpy_htod(d, t.addr, values.data(), t.bytes));
    return t;
  }
  KTensor output(int32_t dtype, std::vector<int64_t> shape) {
    KTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.bytes = count(t.shape) * elem_size(dtype);
    CHECK_OK(se->allocate(d, t.bytes == 0 ? 1 : t.bytes, &t.addr));
    if (t.bytes != 0) CHECK_OK(se->memset(d, t.addr, 0xEE, t.bytes));  // garbage before the kernel
    return t;
  }
  template <class T>
  std::vector<T> download(const KTensor& t) {
    std::vector<T> out(t.bytes / sizeof(T));
    if (t.bytes != 0) CHECK_OK(se->memcpy_dtoh(d, out.data(), t.addr, t.bytes));
    return out;
  }
  void free(const KTensor& t) { se->deallocate(d, t.addr, t.bytes == 0 ? 1 : t.bytes); }
};

/** The reference: z[i] = op(x[bx(i)], y[by(i)]) with NumPy broadcasting, by unravelling i. */
template <class T>
std::vector<T> reference(const std::string& op, const std::vector<int64_t>& xs, const std::vector<T>& x,
                         const std::vector<int64_t>& ys, const std::vector<T>& y, const std::vector<int64_t>& zs) {
  std::vector<T> z(count(zs));
  for (uint64_t i = 0; i < z.size(); ++i) {
    uint64_t rest = i, xi = 0, yi = 0, xstep = 1, ystep = 1;
    for (size_t k = zs.size(); k-- > 0;) {
      const uint64_t coord = rest % static_cast<uint64_t>(zs[k]);
      rest /= static_cast<uint64_t>(zs[k]);
      const size_t off = zs.size() - k;  // position from the end
      if (off <= xs.size()) {
        const int64_t d = xs[xs.size() - off];
        xi += (d == 1 ? 0 : coord) * xstep;
        xstep *= static_cast<uint64_t>(d);
      }
      if (off <= ys.size()) {
        const int64_t d = ys[ys.size() - off];
        yi += (d == 1 ? 0 : coord) * ystep;
        ystep *= static_cast<uint64_t>(d);
      }
    }
    if (op == "Add") z[i] = x[xi] + y[yi];
    if (op == "Sub") z[i] = x[xi] - y[yi];
    if (op == "Relu") z[i] = std::isnan(x[xi]) ? x[xi] : (x[xi] > 0 ? x[xi] : T(0));
  }
  return z;
}

template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) {
      std::fprintf(stderr, "  element %zu: %g, expected %g\n", i, static_cast<double>(a[i]), static_cast<double>(b[i]));
      return false;
    }
  }
  return true;
}

template <class T>
std::vector<T> iota_values(uint64_t n, T start, T step) {
  std::vector<T> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<T>(i);
  return v;
}

/** One elementwise case through kernel @p op, checked against the reference. */
template <class T>
void check_case(FakeHost& host, KDevice& dev, const std::string& op, int32_t dtype, std::vector<int64_t> xs,
                std::vector<int64_t> ys, std::vector<int64_t> zs) {
  const RegisteredKernel* k = host.kernel(op);
  CHECK(k != nullptr);
  if (k == nullptr) return;
  const bool unary = op == "Relu";
  std::vector<T> x = iota_values<T>(count(xs), T(-3.5), T(1.25));
  std::vector<T> y = iota_values<T>(count(ys), T(10), T(-0.75));
  if (unary && x.size() >= 3) {
    x[0] = std::numeric_limits<T>::quiet_NaN();
    x[1] = -std::numeric_limits<T>::infinity();
    x[2] = std::numeric_limits<T>::infinity();
  }
  KTensor tx = dev.upload(dtype, xs, x);
  KTensor ty = dev.upload(dtype, ys, y);
  KTensor tz = dev.output(dtype, zs);
  std::vector<KTensor> in = unary ? std::vector<KTensor>{tx} : std::vector<KTensor>{tx, ty};
  CHECK_OK(run_kernel(*k, dev.d, dev.stream, in, {tz}));
  CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
  const std::vector<T> want = reference<T>(op, xs, x, unary ? xs : ys, unary ? x : y, zs);
  const bool ok = same_values(dev.download<T>(tz), want);
  if (!ok) std::fprintf(stderr, "  %s %s: wrong values\n", op.c_str(), dtype == DPP_DTYPE_F32 ? "f32" : "f64");
  CHECK(ok);
  dev.free(tx);
  dev.free(ty);
  dev.free(tz);
}

/** SIMDML's kernels on a device of the platform @p reg, registered with @p host. */
void test_kernels(FakeHost& host, const Registered& reg, const dpp_plugin_api_t* api, int latency_us) {
  // ---- What was registered ---------------------------------------------------------------
  CHECK(host.kernels.size() == 3);
  for (const char* op : {"Add", "Sub", "Relu"}) {
    const RegisteredKernel* k = host.kernel(op);
    CHECK(k != nullptr);
    if (k == nullptr) continue;
    CHECK(k->struct_size == DPP_KERNEL_STRUCT_SIZE);
    CHECK(k->device_type == reg.device_type);
    CHECK(k->platform_null);  // the plugin's own platform of the type
    CHECK((k->dtypes == std::vector<int32_t>{DPP_DTYPE_F32, DPP_DTYPE_F64}));
    CHECK(k->priority == 0);
    CHECK(k->compute != nullptr && k->kernel_data != nullptr);
    CHECK(k->create == nullptr && k->destroy == nullptr);  // stateless (ABI 1.5)
  }
  CHECK(host.kernel("Mul") == nullptr && host.kernel("MatMul") == nullptr);  // SIM's, not ours
  const RegisteredKernel* add = host.kernel("Add");
  const RegisteredKernel* relu = host.kernel("Relu");
  if (add == nullptr || relu == nullptr) return;

  const dpp_platform_t& pl = reg.p;
  dpp_device_t raw_dev{};
  raw_dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
  CHECK_OK(pl.create_device(pl.platform_data, 0, &raw_dev));
  if (raw_dev.se == nullptr) return;
  KDevice dev{raw_dev.se, raw_dev.device_data};
  CHECK_OK(dev.se->create_stream(dev.d, &dev.stream));

  // ---- Every kernel against the reference ---------------------------------------------------
  check_case<float>(host, dev, "Add", DPP_DTYPE_F32, {2, 3}, {2, 3}, {2, 3});
  check_case<double>(host, dev, "Add", DPP_DTYPE_F64, {2, 3}, {3}, {2, 3});
  check_case<float>(host, dev, "Add", DPP_DTYPE_F32, {}, {4}, {4});         // scalar + vector
  check_case<double>(host, dev, "Add", DPP_DTYPE_F64, {0, 3}, {3}, {0, 3});  // empty
  check_case<float>(host, dev, "Sub", DPP_DTYPE_F32, {4, 1}, {1, 5}, {4, 5});
  check_case<double>(host, dev, "Sub", DPP_DTYPE_F64, {2, 1, 3}, {4, 1}, {2, 4, 3});
  check_case<float>(host, dev, "Relu", DPP_DTYPE_F32, {3, 4}, {3, 4}, {3, 4});
  check_case<double>(host, dev, "Relu", DPP_DTYPE_F64, {7}, {7}, {7});

  // ---- Asynchronous, on the stream it was given, with the injected latency -----------------
  {
    KTensor x = dev.upload<float>(DPP_DTYPE_F32, {4}, {1, 2, 3, 4});
    KTensor z = dev.output(DPP_DTYPE_F32, {4});
    Gate gate;
    CHECK_OK(dev.se->host_callback(dev.d, dev.stream, gate_callback, &gate));
    CHECK_OK(run_kernel(*add, dev.d, dev.stream, {x, x}, {z}));
    CHECK(dev.download<uint32_t>(z) == std::vector<uint32_t>(4, 0xEEEEEEEEu));  // not run yet
    const auto t0 = std::chrono::steady_clock::now();
    gate.release();
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
    const auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(dev.download<float>(z) == (std::vector<float>{2, 4, 6, 8}));
    CHECK(waited >= std::chrono::microseconds(latency_us));  // the kernel got the latency
    // Memory freed after the kernel was enqueued: an error of the stream, reported once.
    Gate gate2;
    CHECK_OK(dev.se->host_callback(dev.d, dev.stream, gate_callback, &gate2));
    CHECK_OK(run_kernel(*relu, dev.d, dev.stream, {x}, {z}));
    dev.free(z);
    gate2.release();
    CHECK_STATUS(dev.se->synchronize_stream(dev.d, dev.stream), DPP_INVALID_ARGUMENT);
    const std::string e = take_error();
    CHECK(contains(e, "Relu output") && contains(e, "not inside a live allocation"));
    std::printf("  (freed while queued: \"%s\")\n", e.c_str());
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
    dev.free(x);
  }

  // ---- Argument errors: synchronous, with messages -------------------------------------------
  {
    KTensor x = dev.upload<float>(DPP_DTYPE_F32, {2, 3}, std::vector<float>(6, 1));
    KTensor y = dev.upload<float>(DPP_DTYPE_F32, {4}, std::vector<float>(4, 1));
    KTensor z = dev.output(DPP_DTYPE_F32, {2, 3});
    KTensor xi = x;
    xi.dtype = DPP_DTYPE_I32;
    KTensor short_z = z;
    short_z.bytes -= 4;
    KTensor gone = z;
    gone.addr += 1 << 20;
    const struct {
      const RegisteredKernel* k;
      std::vector<KTensor> in, out;
      const char* expect;
    } cases[] = {
        {add, {x}, {z}, "kernel Add: expects 2 input(s) and 1 output(s), got 1 and 1"},
        {add, {x, y}, {z}, "SIMDML:0: Add: shapes [2, 3] and [4] cannot be broadcast together"},
        {add, {x, x}, {y}, "SIMDML:0: Add: the output has shape [4], not [2, 3]"},
        {add, {xi, xi}, {z}, "SIMDML:0: Add: dtypes i32[2, 3], i32[2, 3] -> f32[2, 3]: SIMDML's Add takes f32 or f64"},
        {add, {x, x}, {short_z}, "SIMDML:0: Add: z f32[2, 3] has 20 bytes, not 24"},
        {relu, {x}, {gone}, "SIMDML:0: Relu y: ["},
        {relu, {x, x}, {z}, "kernel Relu: expects 1 input(s) and 1 output(s), got 2 and 1"},
    };
    for (const auto& c : cases) {
      CHECK_STATUS(run_kernel(*c.k, dev.d, dev.stream, c.in, c.out), DPP_INVALID_ARGUMENT);
      const std::string e = take_error();
      if (!contains(e, c.expect)) std::fprintf(stderr, "  got \"%s\", expected \"%s...\"\n", e.c_str(), c.expect);
      CHECK(contains(e, c.expect));
    }
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));  // nothing was enqueued

    // Malformed contexts.
    std::vector<dpp_tensor_t> ri{raw_tensor(x)}, ro{raw_tensor(z)};
    CHECK_STATUS(add->compute(nullptr), DPP_INVALID_ARGUMENT);
    dpp_kernel_context_t c = make_context(dev.d, dev.stream, ri, ro, nullptr, add->kernel_data);
    c.struct_size = 16;
    CHECK_STATUS(add->compute(&c), DPP_ABI_MISMATCH);
    c = make_context(dev.d, dev.stream, ri, ro, nullptr, nullptr);
    CHECK_STATUS(add->compute(&c), DPP_INVALID_ARGUMENT);
    c = make_context(dev.d, dev.stream, ri, ro, nullptr, add->kernel_data);
    c.num_inputs = 2;
    c.inputs = nullptr;
    CHECK_STATUS(add->compute(&c), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "kernel Add: inputs: the array of 2 tensors is NULL"));
    ri[0].rank = 2;
    ri[0].shape = nullptr;
    c = make_context(dev.d, dev.stream, ri, ro, nullptr, relu->kernel_data);
    CHECK_STATUS(relu->compute(&c), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "tensor 0: rank 2 but the shape is NULL"));
    ri[0] = raw_tensor(x);
    void* event = nullptr;
    CHECK_OK(dev.se->create_event(dev.d, &event));
    c = make_context(dev.d, event, ri, ro, nullptr, relu->kernel_data);  // an event as the stream
    CHECK_STATUS(relu->compute(&c), DPP_INVALID_ARGUMENT);
    CHECK(contains(take_error(), "not a stream"));
    dev.se->destroy_event(dev.d, event);

    // A device of another platform (a second init of the plugin): refused, not misused.
    FakeHost other;
    void* other_data = nullptr;
    CHECK_OK(other.init(api, &other_data));
    if (other.platforms.size() == 1) {
      const dpp_platform_t& op = other.platforms[0].p;
      dpp_device_t od{};
      od.struct_size = DPP_DEVICE_STRUCT_SIZE;
      CHECK_OK(op.create_device(op.platform_data, 0, &od));
      c = make_context(od.device_data, dev.stream, ri, ro, nullptr, relu->kernel_data);
      CHECK_STATUS(relu->compute(&c), DPP_INTERNAL);
      CHECK(contains(take_error(), "not a device of platform SIMDML"));
      op.destroy_device(op.platform_data, &od);
      op.destroy_platform(op.platform_data);
    }
    api->shutdown(other_data);
    dev.free(x);
    dev.free(y);
    dev.free(z);
  }

  dev.se->destroy_stream(dev.d, dev.stream);
  pl.destroy_device(pl.platform_data, &raw_dev);
}

/** The create context the runtime passes for a state of kernel @p k (ABI 1.5). */
dpp_kernel_create_context_t make_create_context(void* device, const char* op, const std::vector<int32_t>& dtypes,
                                                const void* attrs, void* kernel_data) {
  dpp_kernel_create_context_t c{};
  c.struct_size = DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE;
  c.ext = nullptr;
  c.device = device;
  c.op = op;
  c.num_inputs = dtypes.size();
  c.input_dtypes = dtypes.empty() ? nullptr : dtypes.data();
  c.attrs = attrs;
  c.kernel_data = kernel_data;
  return c;
}

FakeAttrs beta_attrs(double beta) {
  FakeAttrs a;
  a.values = {{"beta", FakeAttrs::Float, 0, beta, {}, {}}};
  return a;
}

/** x * sigmoid(beta * x), within a few ulps. */
template <class T>
bool is_swish(const std::vector<T>& got, const std::vector<T>& x, double beta) {
  if (got.size() != x.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = static_cast<double>(x[i]) / (1.0 + std::exp(-beta * static_cast<double>(x[i])));
    const double tolerance = (sizeof(T) == 4 ? 1e-6 : 1e-14) * std::max(1.0, std::fabs(want));
    if (!(std::fabs(static_cast<double>(got[i]) - want) <= tolerance)) {
      std::fprintf(stderr, "  swish(%g) with beta %g: %g, expected %g\n", static_cast<double>(x[i]), beta,
                   static_cast<double>(got[i]), want);
      return false;
    }
  }
  return true;
}

/**
 * Kernel state (ABI 1.5) through SIMDML's table: simdml.Swish has create and destroy (its other
 * kernels none); create reads beta once per device, dtype and beta, and refuses a bad one;
 * compute uses the state it is given (not the launch's attributes); work queued before a
 * destroy still sees its state; an 80-byte context (a host older than 1.5) gets a state made for
 * the launch; every state made is destroyed, and a device destroyed with a state left says so.
 */
void test_kernel_state(const dpp_plugin_api_t* api) {
  FakeHost host;
  host.accept_ops();
  host.options = {{"log_kernel_states", "1"}};
  void* data = nullptr;
  CHECK_OK(host.init(api, &data));
  CHECK(host.ops == std::vector<std::string>{"simdml.Swish"});
  CHECK(host.kernels.size() == 4);
  for (const char* op : {"Add", "Sub", "Relu"}) {
    const RegisteredKernel* k = host.kernel(op);
    CHECK(k != nullptr && k->create == nullptr && k->destroy == nullptr);
  }
  const RegisteredKernel* swish = host.kernel("simdml.Swish");
  CHECK(swish != nullptr);
  if (swish != nullptr) {
    CHECK(swish->struct_size == DPP_KERNEL_STRUCT_SIZE);
    CHECK(swish->compute != nullptr && swish->create != nullptr && swish->destroy != nullptr);
    CHECK((swish->dtypes == std::vector<int32_t>{DPP_DTYPE_F32, DPP_DTYPE_F64}));
  }
  if (swish == nullptr || swish->create == nullptr || swish->destroy == nullptr || host.platforms.size() != 1) {
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    api->shutdown(data);
    return;
  }
  const dpp_platform_t& pl = host.platforms[0].p;
  dpp_device_t raw_dev{};
  raw_dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
  CHECK_OK(pl.create_device(pl.platform_data, 0, &raw_dev));
  if (raw_dev.se == nullptr) return;
  KDevice dev{raw_dev.se, raw_dev.device_data};
  CHECK_OK(dev.se->create_stream(dev.d, &dev.stream));
  auto create = [&](void* device, const std::vector<int32_t>& dtypes, const FakeAttrs* attrs, void** out) {
    const dpp_kernel_create_context_t c = make_create_context(device, "simdml.Swish", dtypes, attrs, swish->kernel_data);
    g_last_error.clear();
    return swish->create(&c, out);
  };
  auto launch = [&](const KTensor& x, const KTensor& y, const FakeAttrs* attrs, void* state, size_t context_size) {
    std::vector<dpp_tensor_t> ri{raw_tensor(x)}, ro{raw_tensor(y)};
    dpp_kernel_context_t c = make_context(dev.d, dev.stream, ri, ro, attrs, swish->kernel_data);
    c.struct_size = context_size;
    c.state = state;
    g_last_error.clear();
    return swish->compute(&c);
  };
  auto made = [&] { return host.logs_with("kernel simdml.Swish: state created").size(); };
  auto destroyed = [&] { return host.logs_with("kernel simdml.Swish: state destroyed").size(); };

  // ---- create: one state per dtype and beta, each logged with the live count -------------------
  const FakeAttrs half = beta_attrs(0.5), two = beta_attrs(2.0), seven = beta_attrs(7.0);
  void* s_half = nullptr;
  void* s_two = nullptr;
  void* s_half64 = nullptr;
  CHECK_OK(create(dev.d, {DPP_DTYPE_F32}, &half, &s_half));
  CHECK_OK(create(dev.d, {DPP_DTYPE_F32}, &two, &s_two));
  CHECK_OK(create(dev.d, {DPP_DTYPE_F64}, &half, &s_half64));
  CHECK(s_half != nullptr && s_two != nullptr && s_half64 != nullptr);
  CHECK(s_half != s_two && s_half != s_half64 && s_two != s_half64);
  CHECK(host.logs_with("SIMDML:0: kernel simdml.Swish: state created (beta 0.5, f32); 1 live").size() == 1);
  CHECK(host.logs_with("SIMDML:0: kernel simdml.Swish: state created (beta 2, f32); 2 live").size() == 1);
  CHECK(host.logs_with("SIMDML:0: kernel simdml.Swish: state created (beta 0.5, f64); 3 live").size() == 1);

  // ---- create refuses what no launch can use: a status and a message, nothing written ----------
  {
    void* const untouched = reinterpret_cast<void*>(0x5);
    void* out = untouched;
    const FakeAttrs nan = beta_attrs(std::nan(""));
    CHECK_STATUS(create(dev.d, {DPP_DTYPE_F32}, &nan, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "SIMDML:0: simdml.Swish: attribute beta is nan, not a finite number");
    const FakeAttrs none;
    CHECK_STATUS(create(dev.d, {DPP_DTYPE_F32}, &none, &out), DPP_NOT_FOUND);
    CHECK(take_error() == "kernel simdml.Swish: the op has no attribute 'beta'");
    CHECK_STATUS(create(dev.d, {DPP_DTYPE_I32}, &half, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "SIMDML:0: simdml.Swish: SIMDML's simdml.Swish takes f32 or f64, not i32");
    CHECK_STATUS(create(dev.d, {DPP_DTYPE_F32, DPP_DTYPE_F32}, &half, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "SIMDML:0: simdml.Swish: expects 1 input, got 2");
    CHECK_STATUS(create(nullptr, {DPP_DTYPE_F32}, &half, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "kernel simdml.Swish: the context's device is NULL");
    // Malformed contexts.
    CHECK_STATUS(swish->create(nullptr, &out), DPP_INVALID_ARGUMENT);
    dpp_kernel_create_context_t c = make_create_context(dev.d, "simdml.Swish", {DPP_DTYPE_F32}, &half, swish->kernel_data);
    CHECK_STATUS(swish->create(&c, nullptr), DPP_INVALID_ARGUMENT);
    c.struct_size = 16;
    CHECK_STATUS(swish->create(&c, &out), DPP_ABI_MISMATCH);
    c = make_create_context(dev.d, "simdml.Swish", {DPP_DTYPE_F32}, &half, nullptr);
    CHECK_STATUS(swish->create(&c, &out), DPP_INVALID_ARGUMENT);
    c = make_create_context(dev.d, "simdml.Swish", {}, &half, swish->kernel_data);
    c.num_inputs = 1;
    CHECK_STATUS(swish->create(&c, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "kernel simdml.Swish: create: the 1 input dtypes are at NULL");
    CHECK(out == untouched);
    CHECK(made() == 3);
  }

  // ---- compute uses the state it is given: the launch's attributes (beta 7) are not read -------
  const std::vector<float> x = {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 4.0f};
  const std::vector<double> x64 = {-2.0, 0.125, 3.0};
  const KTensor tx = dev.upload(DPP_DTYPE_F32, {2, 3}, x);
  const KTensor tx64 = dev.upload(DPP_DTYPE_F64, {3}, x64);
  const KTensor y_half = dev.output(DPP_DTYPE_F32, {2, 3});
  const KTensor y_two = dev.output(DPP_DTYPE_F32, {2, 3});
  const KTensor y_half64 = dev.output(DPP_DTYPE_F64, {3});
  {
    // Work queued before the host lets a state go still sees it (it holds the state).
    Gate gate;
    CHECK_OK(dev.se->host_callback(dev.d, dev.stream, gate_callback, &gate));
    CHECK_OK(launch(tx, y_half, &seven, s_half, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
    CHECK_OK(launch(tx, y_two, &seven, s_two, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
    CHECK_OK(launch(tx64, y_half64, nullptr, s_half64, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
    swish->destroy(swish->kernel_data, s_two);  // before the stream reached the launch
    CHECK(destroyed() == 0);                    // the queued work holds it
    gate.release();
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
    CHECK(destroyed() == 1);
    CHECK(host.logs_with("SIMDML:0: kernel simdml.Swish: state destroyed (beta 2); 2 live").size() == 1);
  }
  CHECK(is_swish(dev.download<float>(y_half), x, 0.5));
  CHECK(is_swish(dev.download<float>(y_two), x, 2.0));
  CHECK(is_swish(dev.download<double>(y_half64), x64, 0.5));

  // ---- A state that is not one of this kernel: refused ---------------------------------------------
  {
    uint64_t junk[8] = {};
    CHECK_STATUS(launch(tx, y_half, &seven, junk, DPP_KERNEL_CONTEXT_STRUCT_SIZE), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "kernel simdml.Swish: the context's state is not one this kernel's create made");
  }

  // ---- A host older than ABI 1.5 (an 80-byte context, no create calls): a state per launch ---------
  {
    const FakeAttrs three = beta_attrs(3.0);
    const KTensor y_three = dev.output(DPP_DTYPE_F32, {2, 3});
    // `state` lies past such a host's struct: whatever is there is not read.
    CHECK_OK(launch(tx, y_three, &three, reinterpret_cast<void*>(0xBAD), DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1));
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
    CHECK(is_swish(dev.download<float>(y_three), x, 3.0));
    CHECK(host.logs_with("state created (beta 3, f32, for one launch); 3 live").size() == 1);
    CHECK(host.logs_with("state destroyed (beta 3); 2 live").size() == 1);
    // A 1.5 context without a state: the same.
    CHECK_OK(launch(tx, y_three, &half, nullptr, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
    CHECK_OK(dev.se->synchronize_stream(dev.d, dev.stream));
    CHECK(is_swish(dev.download<float>(y_three), x, 0.5));
    CHECK(made() == 5 && destroyed() == 3);
    // Its create's refusal fails the launch.
    const FakeAttrs inf = beta_attrs(HUGE_VAL);
    CHECK_STATUS(launch(tx, y_three, &inf, nullptr, DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "SIMDML:0: simdml.Swish: attribute beta is inf, not a finite number");
    dev.free(y_three);
  }

  // ---- The host destroys the rest: no leak is reported at destroy_device ---------------------------
  swish->destroy(swish->kernel_data, s_half);
  swish->destroy(swish->kernel_data, s_half64);
  swish->destroy(swish->kernel_data, nullptr);  // nothing
  CHECK(made() == 5 && destroyed() == 5);
  for (const KTensor* t : {&tx, &tx64, &y_half, &y_two, &y_half64}) dev.free(*t);
  dev.se->destroy_stream(dev.d, dev.stream);
  pl.destroy_device(pl.platform_data, &raw_dev);
  CHECK(host.logs_with("SIMDML:0: destroyed; its 5 kernel state(s) were all destroyed").size() == 1);
  CHECK(host.logs_with("leaked").empty());

  // ---- A device destroyed while a state of it is left: a warning (the host's leak) -----------------
  {
    dpp_device_t d2{};
    d2.struct_size = DPP_DEVICE_STRUCT_SIZE;
    CHECK_OK(pl.create_device(pl.platform_data, 0, &d2));
    void* left = nullptr;
    CHECK_OK(create(d2.device_data, {DPP_DTYPE_F32}, &half, &left));
    pl.destroy_device(pl.platform_data, &d2);
    std::vector<std::string> warned = host.logs_with("leaked");
    CHECK(warned.size() == 1);
    CHECK(!warned.empty() &&
          warned[0] == "SIMDML:0: 1 kernel state(s) of the 1 made for the device were not destroyed before it (leaked)");
    bool is_warning = false;
    for (const auto& l : host.logs) is_warning = is_warning || (l.first == DPP_LOG_WARN && contains(l.second, "leaked"));
    CHECK(is_warning);
    swish->destroy(swish->kernel_data, left);  // late, but safe: the state holds its counts
    CHECK(made() == 6 && destroyed() == 6);
  }
  pl.destroy_platform(pl.platform_data);
  api->shutdown(data);
}

/** Load options and hosts that change what init does with kernels. */
void test_kernel_options(const dpp_plugin_api_t* api) {
  {
    FakeHost host;
    host.options = {{"kernels", "0"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    CHECK(host.kernels.empty() && host.platforms.size() == 1);
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    api->shutdown(data);
  }
  {
    // An exception thrown inside a kernel becomes DPP_INTERNAL with its message.
    FakeHost host;
    host.options = {{"throw_in_kernel", "1"}, {"device_type", "NPU"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    const RegisteredKernel* sub = host.kernel("Sub");
    CHECK(sub != nullptr && sub->device_type == "NPU");
    if (sub != nullptr && host.platforms.size() == 1) {
      const dpp_platform_t& pl = host.platforms[0].p;
      dpp_device_t d{};
      d.struct_size = DPP_DEVICE_STRUCT_SIZE;
      CHECK_OK(pl.create_device(pl.platform_data, 0, &d));
      void* stream = nullptr;
      CHECK_OK(d.se->create_stream(d.device_data, &stream));
      CHECK_STATUS(run_kernel(*sub, d.device_data, stream, {}, {}), DPP_INTERNAL);
      const std::string e = take_error();
      CHECK(contains(e, "kernel Sub throws because load option throw_in_kernel=1"));
      std::printf("  (throw_in_kernel=1: \"%s\")\n", e.c_str());
      d.se->destroy_stream(d.device_data, stream);
      pl.destroy_device(pl.platform_data, &d);
    }
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    api->shutdown(data);
  }
  {
    // The host refuses a kernel: init fails with the host's status, naming the kernel.
    FakeHost host;
    host.refuse_kernel = "Sub";
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_ALREADY_EXISTS);
    const std::string e = take_error();
    CHECK(contains(e, "the host refused kernel Sub for GPU on SIMDML (ALREADY_EXISTS)"));
    std::printf("  (refused kernel: \"%s\")\n", e.c_str());
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);  // the host's rollback
  }
  {
    // An ABI 1.0 host table has no register_kernel: a clear error, or no kernels asked for.
    FakeHost host;
    host.make_abi_1_0();
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_UNIMPLEMENTED);
    const std::string e = take_error();
    CHECK(contains(e, "kernel Add for GPU: the host has plugin ABI 1.0 (a 64-byte dpp_host_api_t without "
                      "register_kernel); kernels need ABI 1.1"));
    std::printf("  (ABI 1.0 host: \"%s\")\n", e.c_str());
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    FakeHost old;
    old.make_abi_1_0();
    old.options = {{"kernels", "0"}};
    CHECK_OK(old.init(api, &data));
    CHECK(old.platforms.size() == 1);
    for (auto& r : old.platforms) r.p.destroy_platform(r.p.platform_data);
    api->shutdown(data);
  }
}

// ------------------------------------------------------------------------------------------
// plugin.hpp's kernel API, in process (what SIMDML's kernels do not reach)
// ------------------------------------------------------------------------------------------

namespace hdr {

namespace dp = devplug::plugin;

struct Seen {
  std::vector<std::string> lines;
  void add(const std::string& s) { lines.push_back(s); }
};
Seen g_seen;
dp::Host g_saved;  // kept past init: registering with it later must fail

/** Records what a call of a dp:: function gives: its value or the Error's code and message. */
template <class F>
void record(const char* what, F&& f) {
  try {
    g_seen.add(std::string(what) + "=" + f());
  } catch (const dp::Error& e) {
    g_seen.add(std::string(what) + ": " + e.code_name() + ": " + e.message());
  }
}

class Probe : public dp::Kernel {
 public:
  void compute(dp::KernelContext& cx) override {
    record("i", [&] { return std::to_string(cx.attr_int("i")); });
    record("f", [&] { return std::to_string(cx.attr_float("f")); });
    record("i as float", [&] { return std::to_string(cx.attr_float("i")); });
    record("b", [&] { return std::string(cx.attr_bool("b") ? "true" : "false"); });
    record("v", [&] { return dp::shape_string(cx.attr_ints("v")); });
    record("d", [&] { return std::string(dp::dtype_name(cx.attr_dtype("d"))); });
    record("s", [&] { return "'" + std::string(cx.attr_string("s")) + "'"; });
    record("i as string", [&] { return std::string(cx.attr_string("i")); });
    record("missing", [&] { return std::to_string(cx.attr_int("missing")); });
    record("f as int", [&] { return std::to_string(cx.attr_int("f")); });
    record("device", [&] { return std::to_string(cx.device().ordinal()); });
    record("input 9", [&] { return cx.input(9).describe(); });
    std::string all;
    for (dp::Tensor t : cx.inputs()) all += t.describe() + "@" + std::to_string(t.data()) + " ";
    g_seen.add("inputs=" + all + std::to_string(cx.inputs()[1].num_elements()));
    g_seen.add("op=" + cx.op());
  }
};

void init(dp::Host& host) {
  g_saved = host;
  const std::string mode = host.option_string("mode", "");
  const dp::KernelSpec any{"Probe", "GPU", std::string("ANY"), {}, 5};
  if (mode == "probe") {
    g_seen.add(std::string("supports_kernels=") + (host.supports_kernels() ? "1" : "0"));
    host.register_kernel(any, std::make_unique<Probe>());
  } else if (mode == "throw") {
    auto reg = [&](const char* op, dp::KernelFn f) { host.register_kernel({op, "GPU", std::string("ANY"), {}, 0}, f); };
    reg("ThrowError", [](dp::KernelContext&) { throw dp::Error::not_found("no such thing"); });
    reg("ThrowStd", [](dp::KernelContext&) { throw std::runtime_error("std says no"); });
    reg("ThrowAlloc", [](dp::KernelContext&) { throw std::bad_alloc(); });
    reg("ThrowInt", [](dp::KernelContext&) { throw 7; });
  } else if (mode == "bindings") {
    record("own platform", [&] {
      host.register_kernel({"Add", "GPU", std::nullopt, {}, 0}, [](dp::KernelContext&) {});
      return std::string("registered");
    });
    record("named", [&] {
      host.register_kernel({"Add", "GPU", std::string("NOPE"), {}, 0}, [](dp::KernelContext&) {});
      return std::string("registered");
    });
    record("empty", [&] {
      host.register_kernel(any, dp::KernelFn());
      return std::string("registered");
    });
    record("null", [&] {
      host.register_kernel(any, std::unique_ptr<dp::Kernel>());
      return std::string("registered");
    });
  } else if (mode == "halves") {
    using dp::DType;
    host.register_kernel({"HalfSub", "GPU", std::string("ANY"), {DType::F16, DType::F32, DType::BF16}, 0},
                         [](dp::KernelContext&) {});
    host.register_kernel({"HalfMul", "GPU", std::string("ANY"), {DType::BF16, DType::F16}, 0},
                         [](dp::KernelContext&) {});
  } else {
    host.register_kernel(any, std::make_unique<Probe>());  // refused or not: the host decides
  }
}

const dpp_plugin_api_t kApi = dp::detail::make_plugin_api<&init>("hdrtest", "0");

}  // namespace hdr

// ---- plugin.hpp's timed events on an in-process platform -----------------------------------

namespace tim {

namespace dp = devplug::plugin;

class TStream : public dp::Stream {};

/** An event that remembers the (fake) time of its last record; -1: never recorded. */
class TEvent : public dp::Event {
 public:
  std::atomic<int64_t> at{-1};
};

/** A device that does nothing; it opts into event timing when told to, without overriding it. */
class NullDevice : public dp::Device {
 public:
  explicit NullDevice(bool opt_in) : opt_in_(opt_in) {}
  dp::OptionalFunctions optional_functions() const override {
    dp::OptionalFunctions f;
    f.event_elapsed_ns = opt_in_;
    return f;
  }
  dp::Addr allocate(uint64_t) override { throw dp::Error::resource_exhausted("TIMING has no memory"); }
  void deallocate(dp::Addr, uint64_t) override {}
  void memcpy_htod(dp::Addr, const void*, uint64_t) override {}
  void memcpy_dtoh(void*, dp::Addr, uint64_t) override {}
  void memcpy_dtod(dp::Addr, dp::Addr, uint64_t) override {}
  void memset(dp::Addr, uint8_t, uint64_t) override {}
  std::unique_ptr<dp::Stream> create_stream() override { return std::make_unique<TStream>(); }
  void synchronize_stream(dp::Stream&) override {}
  void stream_wait_stream(dp::Stream&, dp::Stream&) override {}
  void memcpy_htod_async(dp::Stream&, dp::Addr, const void*, uint64_t) override {}
  void memcpy_dtoh_async(dp::Stream&, void*, dp::Addr, uint64_t) override {}
  void memcpy_dtod_async(dp::Stream&, dp::Addr, dp::Addr, uint64_t) override {}
  void memset_async(dp::Stream&, dp::Addr, uint8_t, uint64_t) override {}
  void host_callback(dp::Stream&, dp::HostCallback callback) override { callback(); }
  std::unique_ptr<dp::Event> create_event() override { return std::make_unique<TEvent>(); }
  /** Records happen at 1000, 2000, 3000, ... */
  void record_event(dp::Stream&, dp::Event& event) override { static_cast<TEvent&>(event).at = clock_ += 1000; }
  dp::EventStatus event_status(dp::Event&) override { return dp::EventStatus::Complete; }
  void stream_wait_event(dp::Stream&, dp::Event&) override {}
  void event_synchronize(dp::Event&) override {}
  void synchronize_all() override {}

 private:
  const bool opt_in_;
  std::atomic<int64_t> clock_{0};
};

/** A device that times its events; a record at 3000 makes it throw a std::exception. */
class TimedDevice : public NullDevice {
 public:
  TimedDevice() : NullDevice(true) {}
  int64_t event_elapsed_ns(dp::Event& start, dp::Event& end) override {
    const int64_t s = static_cast<TEvent&>(start).at, e = static_cast<TEvent&>(end).at;
    if (s < 0 || e < 0) throw dp::Error::failed_precondition("TIMING: an event was never recorded");
    if (s == 3000 || e == 3000) throw std::runtime_error("TIMING: the clock broke");
    return e - s;
  }
};

/** Device 0 leaves event timing out, device 1 opts in without overriding, device 2 times. */
class TimingPlatform : public dp::Platform {
 public:
  std::string name() const override { return "TIMING"; }
  std::string device_type() const override { return "TIMING"; }
  int device_count() const override { return 3; }
  std::unique_ptr<dp::Device> create_device(int ordinal) override {
    if (ordinal == 2) return std::make_unique<TimedDevice>();
    return std::make_unique<NullDevice>(ordinal == 1);
  }
};

void init(dp::Host& host) { host.register_platform(std::make_unique<TimingPlatform>()); }

const dpp_plugin_api_t kApi = dp::detail::make_plugin_api<&init>("timingtest", "0");

}  // namespace tim

void test_header_event_timing() {
  FakeHost host;
  void* data = nullptr;
  CHECK_OK(host.init(&tim::kApi, &data));
  CHECK(host.platforms.size() == 1);
  if (host.platforms.size() != 1) return;
  const dpp_platform_t& p = host.platforms[0].p;
  dpp_device_t dev[3];
  bool made = true;
  for (int i = 0; i < 3; ++i) {
    dev[i] = dpp_device_t{};
    dev[i].struct_size = DPP_DEVICE_STRUCT_SIZE;
    dev[i].ordinal = i;
    CHECK_OK(p.create_device(p.platform_data, i, &dev[i]));
    made = made && dev[i].se != nullptr;
  }
  if (made) {
    // Every table has ABI 1.4's size; only the devices that opt in fill event_elapsed_ns.
    for (const dpp_device_t& d : dev) CHECK(d.se->struct_size == DPP_STREAM_EXECUTOR_STRUCT_SIZE);
    CHECK(dev[0].se->event_elapsed_ns == nullptr);
    CHECK(dev[1].se->event_elapsed_ns != nullptr && dev[2].se->event_elapsed_ns != nullptr);

    // Opted in, not overridden: UNIMPLEMENTED, nothing written.
    const dpp_stream_executor_t* se1 = dev[1].se;
    void* d1 = dev[1].device_data;
    void* foreign = nullptr;
    CHECK_OK(se1->create_event(d1, &foreign));
    int64_t ns = 42;
    CHECK_STATUS(se1->event_elapsed_ns(d1, foreign, foreign, &ns), DPP_UNIMPLEMENTED);
    CHECK(take_error() == "event_elapsed_ns is not implemented");
    CHECK(ns == 42);

    // Timed: values, the Device's errors and exceptions, the table's argument checks.
    const dpp_stream_executor_t* se = dev[2].se;
    void* d = dev[2].device_data;
    void *s = nullptr, *a = nullptr, *b = nullptr, *c = nullptr, *never = nullptr;
    CHECK_OK(se->create_stream(d, &s));
    for (void** e : {&a, &b, &c, &never}) CHECK_OK(se->create_event(d, e));
    CHECK_OK(se->record_event(d, s, a));  // 1000
    CHECK_OK(se->record_event(d, s, b));  // 2000
    CHECK_OK(se->record_event(d, s, c));  // 3000: the device throws std::runtime_error for it
    CHECK_OK(se->event_elapsed_ns(d, a, b, &ns));
    CHECK(ns == 1000);
    CHECK_OK(se->event_elapsed_ns(d, b, a, &ns));
    CHECK(ns == -1000);
    ns = 42;
    CHECK_STATUS(se->event_elapsed_ns(d, never, a, &ns), DPP_FAILED_PRECONDITION);
    CHECK(take_error() == "TIMING: an event was never recorded");
    CHECK_STATUS(se->event_elapsed_ns(d, a, c, &ns), DPP_INTERNAL);
    CHECK(take_error() == "TIMING: the clock broke");
    CHECK_STATUS(se->event_elapsed_ns(d, a, b, nullptr), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "event_elapsed_ns: out_ns is NULL");
    CHECK_STATUS(se->event_elapsed_ns(d, nullptr, b, &ns), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "event_elapsed_ns: start is NULL");
    CHECK_STATUS(se->event_elapsed_ns(d, a, s, &ns), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "event_elapsed_ns: end is not an event (or was destroyed)");
    CHECK_STATUS(se->event_elapsed_ns(nullptr, a, b, &ns), DPP_INVALID_ARGUMENT);
    // An event of another device of the platform reaches the Device, which decides.
    CHECK_STATUS(se->event_elapsed_ns(d, foreign, a, &ns), DPP_FAILED_PRECONDITION);
    CHECK(take_error() == "TIMING: an event was never recorded");
    CHECK(ns == 42);
    for (void* e : {a, b, c, never}) se->destroy_event(d, e);
    se->destroy_stream(d, s);
    se1->destroy_event(d1, foreign);
  }
  for (dpp_device_t& d : dev) {
    if (d.se != nullptr) p.destroy_device(p.platform_data, &d);
  }
  p.destroy_platform(p.platform_data);
  tim::kApi.shutdown(data);
}

// ---- plugin.hpp's KernelContext::allocate_temp on an in-process platform (ABI 1.4) ----------

namespace tmp {

namespace dp = devplug::plugin;

/** A stream whose work runs only when it is synchronized, in order: memory the host took back
 *  before the stream reached the work that uses it would show. */
class QStream : public dp::Stream {
 public:
  std::vector<std::function<void()>> work;
};

class QEvent : public dp::Event {};

/** Device memory from the heap, checked: every access must lie within a live allocation. */
class ArenaDevice : public dp::Device {
 public:
  static constexpr uint64_t kMemory = uint64_t(1) << 20;

  ~ArenaDevice() override {
    for (const auto& a : live_) std::free(reinterpret_cast<void*>(a.first));
  }
  dp::Addr allocate(uint64_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (size > kMemory - in_use_) {
      throw dp::Error::resource_exhausted("TEMP: " + std::to_string(size) + " bytes do not fit");
    }
    void* p = std::malloc(size);
    if (p == nullptr) throw std::bad_alloc();
    const auto a = static_cast<dp::Addr>(reinterpret_cast<uintptr_t>(p));
    live_[a] = size;
    in_use_ += size;
    return a;
  }
  void deallocate(dp::Addr addr, uint64_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(addr);
    if (it == live_.end() || it->second != size) {
      ++bad_frees;
      return;
    }
    live_.erase(it);
    in_use_ -= size;
    std::free(reinterpret_cast<void*>(addr));
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }

  void memcpy_htod(dp::Addr dst, const void* src, uint64_t n) override { std::memcpy(at(dst, n), src, n); }
  void memcpy_dtoh(void* dst, dp::Addr src, uint64_t n) override { std::memcpy(dst, at(src, n), n); }
  void memcpy_dtod(dp::Addr dst, dp::Addr src, uint64_t n) override { std::memmove(at(dst, n), at(src, n), n); }
  void memset(dp::Addr dst, uint8_t v, uint64_t n) override { std::memset(at(dst, n), v, n); }
  std::unique_ptr<dp::Stream> create_stream() override { return std::make_unique<QStream>(); }
  void synchronize_stream(dp::Stream& s) override {
    auto& q = static_cast<QStream&>(s);
    std::vector<std::function<void()>> work = std::move(q.work);
    q.work.clear();
    for (auto& w : work) w();  // a range outside live memory throws: the stream's error
  }
  void stream_wait_stream(dp::Stream&, dp::Stream&) override {}
  void memcpy_htod_async(dp::Stream& s, dp::Addr dst, const void* src, uint64_t n) override {
    enqueue(s, [=] { memcpy_htod(dst, src, n); });
  }
  void memcpy_dtoh_async(dp::Stream& s, void* dst, dp::Addr src, uint64_t n) override {
    enqueue(s, [=] { memcpy_dtoh(dst, src, n); });
  }
  void memcpy_dtod_async(dp::Stream& s, dp::Addr dst, dp::Addr src, uint64_t n) override {
    enqueue(s, [=] { memcpy_dtod(dst, src, n); });
  }
  void memset_async(dp::Stream& s, dp::Addr dst, uint8_t v, uint64_t n) override {
    enqueue(s, [=] { memset(dst, v, n); });
  }
  void host_callback(dp::Stream& s, dp::HostCallback cb) override { enqueue(s, [cb] { cb(); }); }
  std::unique_ptr<dp::Event> create_event() override { return std::make_unique<QEvent>(); }
  void record_event(dp::Stream&, dp::Event&) override {}
  dp::EventStatus event_status(dp::Event&) override { return dp::EventStatus::Complete; }
  void stream_wait_event(dp::Stream&, dp::Event&) override {}
  void event_synchronize(dp::Event&) override {}
  void synchronize_all() override {}

  std::atomic<int> bad_frees{0};

 private:
  static void enqueue(dp::Stream& s, std::function<void()> f) { static_cast<QStream&>(s).work.push_back(std::move(f)); }
  uint8_t* at(dp::Addr a, uint64_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(a);
    if (it != live_.begin()) {
      --it;
      if (a - it->first <= it->second && n <= it->second - (a - it->first)) {
        return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(a));
      }
    }
    throw dp::Error::invalid_argument("TEMP: " + std::to_string(n) + " bytes at " + std::to_string(a) +
                                      " are not within live memory");
  }

  mutable std::mutex mu_;
  std::map<dp::Addr, uint64_t> live_;
  uint64_t in_use_ = 0;
};

ArenaDevice* g_device = nullptr;  // the last one created

class TempPlatform : public dp::Platform {
 public:
  std::string name() const override { return "TEMP"; }
  std::string device_type() const override { return "TEMP"; }
  int device_count() const override { return 1; }
  std::unique_ptr<dp::Device> create_device(int) override {
    auto d = std::make_unique<ArenaDevice>();
    g_device = d.get();
    return d;
  }
};
/** What the kernels saw (addresses), for the test to check. */
std::vector<dp::Addr> g_temps;

void init(dp::Host& host) {
  host.register_platform(std::make_unique<TempPlatform>());
  // input -> temp a -> temp b -> output, all enqueued on the (deferred) stream.
  host.register_kernel({"TempCopy", "TEMP", std::nullopt, {}, 0}, [](dp::KernelContext& cx) {
    cx.check_arity(1, 1);
    const dp::Tensor in = cx.input(0), out = cx.output(0);
    if (in.byte_size() != out.byte_size()) throw dp::Error::invalid_argument("TempCopy: sizes differ");
    ArenaDevice& dev = cx.device<ArenaDevice>();
    dp::Stream& s = cx.stream();
    const uint64_t n = in.byte_size();
    const dp::Addr a = cx.allocate_temp(n);
    const dp::Addr b = cx.allocate_temp(n + 1);
    g_temps = {a, b};
    dev.memcpy_dtod_async(s, a, in.data(), n);
    dev.memcpy_dtod_async(s, b + 1, a, n);  // the whole n + 1 bytes of b are usable
    dev.memcpy_dtod_async(s, out.data(), b + 1, n);
  });
  // allocate_temp(attr "size"), then nothing: the host's refusals reach the kernel as Errors.
  host.register_kernel({"TempSize", "TEMP", std::nullopt, {}, 0}, [](dp::KernelContext& cx) {
    g_temps = {cx.allocate_temp(static_cast<uint64_t>(cx.attr_int("size")))};
  });
}

const dpp_plugin_api_t kApi = dp::detail::make_plugin_api<&init>("temptest", "0");

}  // namespace tmp

/**
 * Loads the TEMP plugin behind @p host, makes its device and a stream, and calls @p body with
 * a launcher: it runs a kernel as the runtime would, in a FakeLaunch whose allocate_temp the
 * context reaches, and frees the launch's memory in stream order after the kernel returned.
 */
template <class Body>
void with_temp_device(FakeHost& host, Body&& body) {
  void* data = nullptr;
  CHECK_OK(host.init(&tmp::kApi, &data));
  CHECK(host.platforms.size() == 1 && host.kernels.size() == 2);
  if (host.platforms.size() != 1) return;
  const dpp_platform_t& p = host.platforms[0].p;
  dpp_device_t dev{};
  dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
  CHECK_OK(p.create_device(p.platform_data, 0, &dev));
  if (dev.se != nullptr && tmp::g_device != nullptr) {
    KDevice kd{dev.se, dev.device_data};
    CHECK_OK(dev.se->create_stream(kd.d, &kd.stream));
    FakeLaunch launch;
    launch.se = dev.se;
    launch.device = kd.d;
    launch.stream = kd.stream;
    auto run = [&](const char* op, const std::vector<KTensor>& in, const std::vector<KTensor>& out,
                   const void* attrs) -> dpp_status_t {
      const RegisteredKernel* k = host.kernel(op);
      CHECK(k != nullptr);
      if (k == nullptr) return DPP_NOT_FOUND;
      std::vector<dpp_tensor_t> ri, ro;
      for (const KTensor& t : in) ri.push_back(raw_tensor(t));
      for (const KTensor& t : out) ro.push_back(raw_tensor(t));
      const dpp_kernel_context_t c = make_context(kd.d, kd.stream, ri, ro, attrs, k->kernel_data);
      tmp::g_temps.clear();
      g_last_error.clear();
      g_launch = &launch;
      const dpp_status_t s = k->compute(&c);
      g_launch = nullptr;
      const std::string message = take_error();
      CHECK_OK(launch.finish());
      g_last_error = message;
      return s;
    };
    body(kd, *tmp::g_device, launch, run);
    dev.se->destroy_stream(kd.d, kd.stream);
    CHECK(tmp::g_device->bad_frees == 0);
    p.destroy_device(p.platform_data, &dev);
  }
  tmp::g_device = nullptr;
  p.destroy_platform(p.platform_data);
  tmp::kApi.shutdown(data);
}

void test_header_allocate_temp() {
  {
    // An ABI 1.4 host: memory usable in the kernel's work, taken back in stream order.
    FakeHost host;
    with_temp_device(host, [](KDevice& kd, tmp::ArenaDevice& arena, FakeLaunch& launch, auto&& run) {
      const std::vector<float> x = iota_values<float>(1000, -3.5f, 0.25f);
      const KTensor tx = kd.upload(DPP_DTYPE_F32, {10, 100}, x);
      const KTensor tz = kd.output(DPP_DTYPE_F32, {10, 100});
      CHECK(arena.live() == 2);
      CHECK_OK(run("TempCopy", {tx}, {tz}, &launch.attrs));
      CHECK(launch.calls == 2);
      CHECK(tmp::g_temps.size() == 2);
      if (tmp::g_temps.size() == 2) {
        CHECK(tmp::g_temps[0] % 256 == 0 && tmp::g_temps[1] % 256 == 0);
        CHECK(tmp::g_temps[0] != tmp::g_temps[1]);
      }
      CHECK(arena.live() == 4);  // the stream has not reached the kernel's work yet
      CHECK_OK(kd.se->synchronize_stream(kd.d, kd.stream));
      CHECK(arena.live() == 2);  // taken back after it
      CHECK(kd.download<float>(tz) == x);

      // The host's refusals reach the kernel as Errors with the host's status.
      launch.attrs.values = {{"size", FakeAttrs::Int, 0, 0, {}, {}}};
      CHECK_STATUS(run("TempSize", {}, {}, &launch.attrs), DPP_INVALID_ARGUMENT);
      CHECK(take_error() == "kernel TempSize: the host's allocate_temp of 0 bytes failed (INVALID_ARGUMENT)");
      CHECK(launch.calls == 3);
      launch.attrs.values[0].i = int64_t(2) << 20;  // more than the device has
      CHECK_STATUS(run("TempSize", {}, {}, &launch.attrs), DPP_RESOURCE_EXHAUSTED);
      CHECK(take_error() == "kernel TempSize: the host's allocate_temp of 2097152 bytes failed (RESOURCE_EXHAUSTED)");
      CHECK(launch.calls == 4);
      // A context the host did not pass (other attrs): refused before the launch is touched.
      FakeAttrs other;
      other.values = {{"size", FakeAttrs::Int, 64, 0, {}, {}}};
      CHECK_STATUS(run("TempSize", {}, {}, &other), DPP_INVALID_ARGUMENT);
      CHECK(take_error() == "kernel TempSize: the host's allocate_temp of 64 bytes failed (INVALID_ARGUMENT)");
      CHECK(launch.calls == 4);
      CHECK(tmp::g_temps.empty());
      launch.attrs.values[0].i = 64;
      CHECK_OK(run("TempSize", {}, {}, &launch.attrs));
      CHECK(tmp::g_temps.size() == 1 && tmp::g_temps[0] != 0 && tmp::g_temps[0] % 256 == 0);
      CHECK_OK(kd.se->synchronize_stream(kd.d, kd.stream));
      CHECK(arena.live() == 2);
      kd.free(tx);
      kd.free(tz);
      CHECK(arena.live() == 0);
    });
  }
  {
    // An ABI 1.3 host (a 128-byte table; the field past it is never read): UNIMPLEMENTED.
    FakeHost host;
    host.api.struct_size = DPP_HOST_API_STRUCT_SIZE_1_2;
    host.api.abi_minor = 3;
    with_temp_device(host, [](KDevice& kd, tmp::ArenaDevice& arena, FakeLaunch& launch, auto&& run) {
      const std::vector<float> x = {1, 2, 3, 4};
      const KTensor tx = kd.upload(DPP_DTYPE_F32, {4}, x);
      const KTensor tz = kd.output(DPP_DTYPE_F32, {4});
      CHECK_STATUS(run("TempCopy", {tx}, {tz}, &launch.attrs), DPP_UNIMPLEMENTED);
      CHECK(take_error() ==
            "kernel TempCopy: allocate_temp needs plugin ABI 1.4; the host has 1.3 (a 128-byte dpp_host_api_t "
            "without allocate_temp)");
      CHECK(launch.calls == 0);
      CHECK_OK(kd.se->synchronize_stream(kd.d, kd.stream));
      kd.free(tx);
      kd.free(tz);
      CHECK(arena.live() == 0);
    });
  }
  {
    // A 1.4 table whose allocate_temp is NULL: UNIMPLEMENTED too.
    FakeHost host;
    host.api.abi_minor = 4;
    host.api.allocate_temp = nullptr;
    with_temp_device(host, [](KDevice&, tmp::ArenaDevice&, FakeLaunch& launch, auto&& run) {
      launch.attrs.values = {{"size", FakeAttrs::Int, 64, 0, {}, {}}};
      CHECK_STATUS(run("TempSize", {}, {}, &launch.attrs), DPP_UNIMPLEMENTED);
      CHECK(take_error() ==
            "kernel TempSize: allocate_temp needs plugin ABI 1.4; the host has 1.4 (a 136-byte dpp_host_api_t "
            "without allocate_temp)");
    });
  }
}

void test_header_kernels() {
  const dpp_plugin_api_t* api = &hdr::kApi;
  {
    hdr::g_seen = {};
    FakeHost host;
    host.options = {{"mode", "probe"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    const RegisteredKernel* k = host.kernel("Probe");
    CHECK(k != nullptr);
    if (k != nullptr) {
      CHECK(!k->platform_null && k->platform == "ANY" && k->priority == 5 && k->dtypes.empty());
      FakeAttrs attrs;
      attrs.values = {{"i", FakeAttrs::Int, 3, 0, {}, {}},
                      {"f", FakeAttrs::Float, 0, 2.5, {}, {}},
                      {"b", FakeAttrs::Bool, 1, 0, {}, {}},
                      {"v", FakeAttrs::Ints, 0, 0, {1, -2, 3}, {}},
                      {"d", FakeAttrs::DType, DPP_DTYPE_F64, 0, {}, {}},
                      {"s", FakeAttrs::Str, 0, 0, {}, "SAME"}};
      // A newer host's larger dpp_tensor_t: elements are struct_size bytes apart.
      struct BigTensor {
        dpp_tensor_t t;
        uint64_t newer_field[3];
      };
      const int64_t s0[] = {2, 3};
      const int64_t s1[] = {4};
      BigTensor big[2] = {};
      big[0].t = dpp_tensor_t{sizeof(BigTensor), nullptr, DPP_DTYPE_F32, 2, s0, 0x100, 24};
      big[1].t = dpp_tensor_t{sizeof(BigTensor), nullptr, DPP_DTYPE_I64, 1, s1, 0x200, 32};
      big[0].newer_field[0] = big[1].newer_field[0] = 0xBAD;
      dpp_kernel_context_t c = make_context(nullptr, nullptr, {}, {}, &attrs, k->kernel_data);
      c.num_inputs = 2;
      c.inputs = &big[0].t;
      CHECK_OK(k->compute(&c));
      const std::vector<std::string> want = {
          "supports_kernels=1",
          "i=3",
          "f=2.500000",
          "i as float=3.000000",
          "b=true",
          "v=[1, -2, 3]",
          "d=f64",
          "s='SAME'",
          "i as string: INVALID_ARGUMENT: kernel Probe: attribute 'i' is not of type string",
          "missing: NOT_FOUND: kernel Probe: the op has no attribute 'missing'",
          "f as int: INVALID_ARGUMENT: kernel Probe: attribute 'f' is not of type int",
          "device: FAILED_PRECONDITION: kernel Probe is bound to ANY: it may run on other plugins' devices, so it "
          "has no Device or Stream of this plugin",
          "input 9: INVALID_ARGUMENT: kernel Probe: no input 9 (the op got 2)",
          "inputs=f32[2, 3]@256 i64[4]@512 4",
          "op=Probe",
      };
      CHECK(hdr::g_seen.lines == want);
      if (hdr::g_seen.lines != want) {
        for (const std::string& l : hdr::g_seen.lines) std::fprintf(stderr, "  seen: %s\n", l.c_str());
      }
    }
    // Registration after init is refused by the header (the host would refuse too).
    try {
      hdr::g_saved.register_kernel({"Late", "GPU", std::string("ANY"), {}, 0}, [](devplug::plugin::KernelContext&) {});
      CHECK(false);
    } catch (const devplug::plugin::Error& e) {
      CHECK(e.code() == DPP_FAILED_PRECONDITION);
      CHECK(contains(e.message(), "register_kernel"));
    }
    hdr::g_saved = devplug::plugin::Host();
    api->shutdown(data);
  }
  {
    // A host older than ABI 1.3 knows no half dtypes: the header leaves them out of a kernel's
    // list, and leaves out a kernel that takes nothing else, saying so; a 1.3 host gets them.
    for (uint32_t minor : {2u, 3u}) {
      FakeHost host;
      host.api.abi_minor = minor;
      host.options = {{"mode", "halves"}};
      void* data = nullptr;
      CHECK_OK(host.init(api, &data));
      const RegisteredKernel* sub = host.kernel("HalfSub");
      const RegisteredKernel* mul = host.kernel("HalfMul");
      CHECK(sub != nullptr);
      if (minor < 3) {
        CHECK(sub != nullptr && sub->dtypes == std::vector<int32_t>{DPP_DTYPE_F32});
        CHECK(mul == nullptr);
        bool said = false;
        for (const auto& l : host.logs) {
          said = said || (l.first == DPP_LOG_INFO &&
                          l.second == "kernel HalfMul for GPU takes only f16/bf16, which a host of plugin ABI 1.2 "
                                      "does not know: not registered");
        }
        CHECK(said);
      } else {
        CHECK(sub != nullptr && sub->dtypes == (std::vector<int32_t>{DPP_DTYPE_F16, DPP_DTYPE_F32, DPP_DTYPE_BF16}));
        CHECK(mul != nullptr && mul->dtypes == (std::vector<int32_t>{DPP_DTYPE_BF16, DPP_DTYPE_F16}));
      }
      api->shutdown(data);
    }
  }
  {
    FakeHost host;
    host.options = {{"mode", "throw"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    const struct {
      const char* op;
      dpp_status_t status;
      const char* message;
    } cases[] = {{"ThrowError", DPP_NOT_FOUND, "no such thing"},
                 {"ThrowStd", DPP_INTERNAL, "std says no"},
                 {"ThrowAlloc", DPP_RESOURCE_EXHAUSTED, "out of memory (std::bad_alloc)"},
                 {"ThrowInt", DPP_INTERNAL, "unknown C++ exception of type int"}};
    for (const auto& c : cases) {
      const RegisteredKernel* k = host.kernel(c.op);
      CHECK(k != nullptr);
      if (k == nullptr) continue;
      CHECK_STATUS(run_kernel(*k, nullptr, nullptr, {}, {}), c.status);
      CHECK(take_error() == c.message);
    }
    api->shutdown(data);
  }
  {
    // A host table that ends before attr_string (ABI 1.2): reading a string attribute is
    // UNIMPLEMENTED, the rest reads as before.
    hdr::g_seen = {};
    FakeHost host;
    host.api.struct_size = offsetof(dpp_host_api_t, attr_string);
    host.options = {{"mode", "probe"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    const RegisteredKernel* k = host.kernel("Probe");
    CHECK(k != nullptr);
    if (k != nullptr) {
      FakeAttrs attrs;
      attrs.values = {{"i", FakeAttrs::Int, 3, 0, {}, {}}, {"s", FakeAttrs::Str, 0, 0, {}, "SAME"}};
      const int64_t shape[] = {2};
      const dpp_tensor_t in[2] = {{DPP_TENSOR_STRUCT_SIZE, nullptr, DPP_DTYPE_F32, 1, shape, 0x100, 8},
                                  {DPP_TENSOR_STRUCT_SIZE, nullptr, DPP_DTYPE_F32, 1, shape, 0x200, 8}};
      dpp_kernel_context_t c = make_context(nullptr, nullptr, {}, {}, &attrs, k->kernel_data);
      c.num_inputs = 2;
      c.inputs = in;
      CHECK_OK(k->compute(&c));
      bool seen = false;
      for (const std::string& l : hdr::g_seen.lines) {
        if (l == "s: UNIMPLEMENTED: kernel Probe: the host has no attr_string function") seen = true;
      }
      CHECK(seen);
      CHECK(hdr::g_seen.lines.size() > 1 && hdr::g_seen.lines[1] == "i=3");
    }
    hdr::g_saved = devplug::plugin::Host();
    api->shutdown(data);
  }
  {
    hdr::g_seen = {};
    FakeHost host;
    host.options = {{"mode", "bindings"}};
    void* data = nullptr;
    CHECK_OK(host.init(api, &data));
    CHECK(host.kernels.empty());
    const std::vector<std::string> want = {
        "own platform: INVALID_ARGUMENT: kernel Add for GPU: this plugin registered no platform of type GPU "
        "(register the platform first)",
        "named: INVALID_ARGUMENT: kernel Add for GPU: platform NOPE is not a platform of type GPU that this plugin "
        "registered (register the platform first)",
        "empty: INVALID_ARGUMENT: kernel Probe for GPU: the kernel function is empty",
        "null: INVALID_ARGUMENT: register_kernel: the kernel Probe is null",
    };
    CHECK(hdr::g_seen.lines == want);
    if (hdr::g_seen.lines != want) {
      for (const std::string& l : hdr::g_seen.lines) std::fprintf(stderr, "  seen: %s\n", l.c_str());
    }
    api->shutdown(data);
  }
  {
    FakeHost host;
    host.refuse_kernel = "Probe";
    void* data = nullptr;
    CHECK_STATUS(host.init(api, &data), DPP_ALREADY_EXISTS);
    CHECK(take_error() == "the host refused kernel Probe for GPU on ANY (ALREADY_EXISTS)");
  }
}

}  // namespace

// ---- plugin.hpp: HostCallback keeps the exactly-once promise when a device gets it wrong ----

namespace cbk {

namespace dp = devplug::plugin;

class CStream : public dp::Stream {};

/** What host_callback does with its callback: the mode set before each call. */
enum class Mode { CallTwice, Keep, DropAtOnce, CallThenThrow, KeepThenThrow };
std::atomic<Mode> g_mode{Mode::CallTwice};
std::vector<dp::HostCallback> g_kept;  // callbacks a Keep mode holds (one thread)

class CbDevice : public tim::NullDevice {
 public:
  CbDevice() : NullDevice(false) {}
  std::unique_ptr<dp::Stream> create_stream() override { return std::make_unique<CStream>(); }
  void host_callback(dp::Stream&, dp::HostCallback callback) override {
    switch (g_mode.load()) {
      case Mode::CallTwice:
        callback();
        callback();
        return;
      case Mode::Keep:
        g_kept.push_back(callback);
        return;
      case Mode::DropAtOnce:
        return;
      case Mode::CallThenThrow:
        callback();
        throw dp::Error::unavailable("CALLBACKS: failed after calling");
      case Mode::KeepThenThrow:
        g_kept.push_back(callback);
        throw dp::Error::unavailable("CALLBACKS: failed after keeping");
    }
  }
};

class CbPlatform : public dp::Platform {
 public:
  std::string name() const override { return "CALLBACKS"; }
  std::string device_type() const override { return "CALLBACKS"; }
  int device_count() const override { return 1; }
  std::unique_ptr<dp::Device> create_device(int) override { return std::make_unique<CbDevice>(); }
};

void init(dp::Host& host) { host.register_platform(std::make_unique<CbPlatform>()); }

const dpp_plugin_api_t kApi = dp::detail::make_plugin_api<&init>("callbacktest", "0");

}  // namespace cbk

/** Each of a device's host_callback mistakes: the host's function runs exactly once when the
 *  host was told DPP_OK and never when it was told an error, and the log names the mistake. */
void test_header_host_callbacks() {
  FakeHost host;
  void* data = nullptr;
  CHECK_OK(host.init(&cbk::kApi, &data));
  CHECK(host.platforms.size() == 1);
  if (host.platforms.size() != 1) return;
  const dpp_platform_t& p = host.platforms[0].p;
  dpp_device_t dev{};
  dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
  CHECK_OK(p.create_device(p.platform_data, 0, &dev));
  if (dev.se == nullptr) return;
  const dpp_stream_executor_t* se = dev.se;
  void* d = dev.device_data;
  void* s = nullptr;
  CHECK_OK(se->create_stream(d, &s));
  static std::atomic<int> runs{0};
  const dpp_host_fn count = [](void*) { ++runs; };
  auto logged = [&](const char* part) {
    std::lock_guard<std::mutex> lock(host.log_mu);
    for (const auto& l : host.logs) {
      if (l.second.find(part) != std::string::npos) return true;
    }
    return false;
  };
  using cbk::Mode;

  // Called twice: the function runs once; a warning.
  cbk::g_mode = Mode::CallTwice;
  runs = 0;
  CHECK_OK(se->host_callback(d, s, count, nullptr));
  CHECK(runs == 1);
  CHECK(logged("called twice"));

  // Kept, then dropped without a call: the drop calls it (the host was told DPP_OK).
  cbk::g_mode = Mode::Keep;
  runs = 0;
  CHECK_OK(se->host_callback(d, s, count, nullptr));
  CHECK(runs == 0);
  cbk::g_kept.clear();
  CHECK(runs == 1);
  CHECK(logged("dropped without being called after host_callback returned; calling it now"));

  // Neither called nor kept: it can never run, so the host hears of an error, and it never runs.
  cbk::g_mode = Mode::DropAtOnce;
  runs = 0;
  CHECK_STATUS(se->host_callback(d, s, count, nullptr), DPP_INTERNAL);
  CHECK(take_error() == "host_callback returned without calling the callback or keeping a copy of it");
  CHECK(runs == 0);

  // Called, then threw: it ran, so the host is told DPP_OK; an error in the log.
  cbk::g_mode = Mode::CallThenThrow;
  runs = 0;
  CHECK_OK(se->host_callback(d, s, count, nullptr));
  CHECK(runs == 1);
  CHECK(logged("called the callback, then failed"));

  // Kept, then threw: the host hears of the error; a later call does nothing but log, and the
  // drop does not call it either.
  cbk::g_mode = Mode::KeepThenThrow;
  runs = 0;
  CHECK_STATUS(se->host_callback(d, s, count, nullptr), DPP_UNAVAILABLE);
  CHECK(take_error() == "CALLBACKS: failed after keeping");
  CHECK(cbk::g_kept.size() == 1);
  if (!cbk::g_kept.empty()) cbk::g_kept[0]();
  cbk::g_kept.clear();
  CHECK(runs == 0);
  CHECK(logged("called after its host_callback call failed"));

  se->destroy_stream(d, s);
  p.destroy_device(p.platform_data, &dev);
  p.destroy_platform(p.platform_data);
  cbk::kApi.shutdown(data);
}

// ---- plugin.hpp: kernels with state (ABI 1.5) on an in-process platform ---------------------

namespace kst {

namespace dp = devplug::plugin;

std::atomic<int> g_alive{0};  // Made objects alive

/** A state that records what its create context said. */
struct Made {
  Made(std::string w) : what(std::move(w)) { ++g_alive; }
  Made(const Made& o) : what(o.what) { ++g_alive; }
  ~Made() { --g_alive; }
  std::string what;
};

std::shared_ptr<const Made> g_kept;  // what the last "Made" compute captured, as queued work would
int g_supports = -1;

std::string dtypes_of(const dp::KernelCreateContext& c) {
  std::string s;
  for (dp::DType d : c.input_dtypes()) s += (s.empty() ? "" : ",") + std::string(dp::dtype_name(d));
  return s;
}

class KstPlatform : public dp::Platform {
 public:
  std::string name() const override { return "KST"; }
  std::string device_type() const override { return "KST"; }
  int device_count() const override { return 1; }
  std::unique_ptr<dp::Device> create_device(int) override { return std::make_unique<tim::NullDevice>(false); }
};

void init(dp::Host& host) {
  g_supports = host.supports_kernel_state() ? 1 : 0;
  if (host.option_string("mode", "") == "empty") {
    hdr::record("empty create", [&] {
      host.register_kernel({"Made", "KST", std::nullopt, {}, 0},
                           std::function<std::shared_ptr<Made>(const dp::KernelCreateContext&)>(),
                           [](dp::KernelContext&) {});
      return std::string("registered");
    });
    return;
  }
  host.register_platform(std::make_unique<KstPlatform>());
  const dp::KernelSpec spec{"Made", "KST", std::nullopt, {}, 0};
  // A state by value; compute reports it, and keeps it as queued work would.
  host.register_kernel(
      spec,
      [](const dp::KernelCreateContext& c) {
        hdr::record("input 5", [&] { return std::string(dp::dtype_name(c.input_dtype(5))); });
        return Made(c.op() + " " + dtypes_of(c) + " i=" + std::to_string(c.attr_int("i")) +
                    " device=" + std::to_string(c.device<tim::NullDevice>().ordinal()) +
                    (c.per_launch() ? " per launch" : "") + (c.raw() != nullptr ? " raw" : ""));
      },
      [](dp::KernelContext& cx) {
        hdr::g_seen.add("compute: " + cx.state<Made>().what + (cx.state_per_launch() ? " (state per launch)" : ""));
        g_kept = cx.state_ptr<const Made>();
      });
  // Exceptions from create, by attribute "what".
  host.register_kernel(
      {"Throws", "KST", std::nullopt, {}, 0},
      [](const dp::KernelCreateContext& c) -> std::unique_ptr<Made> {
        const std::string what(c.attr_string("what"));
        if (what == "error") throw dp::Error::not_found("no such state");
        if (what == "std") throw std::runtime_error("std says no");
        if (what == "alloc") throw std::bad_alloc();
        if (what == "int") throw 7;
        return std::make_unique<Made>("fine");
      },
      [](dp::KernelContext& cx) { hdr::g_seen.add("compute: " + cx.state<Made>().what); });
  // create returns null; the state is asked for as another type; no create at all.
  host.register_kernel(
      {"Null", "KST", std::nullopt, {}, 0}, [](const dp::KernelCreateContext&) { return std::shared_ptr<Made>(); },
      [](dp::KernelContext& cx) {
        hdr::g_seen.add(std::string("state_ptr ") + (cx.state_ptr<Made>() ? "set" : "null"));
        hdr::record("state", [&] { return cx.state<Made>().what; });
      });
  host.register_kernel(
      {"WrongType", "KST", std::nullopt, {}, 0}, [](const dp::KernelCreateContext&) { return Made("made"); },
      [](dp::KernelContext& cx) { hdr::record("state<int>", [&] { return std::to_string(cx.state<int>()); }); });
  host.register_kernel({"Plain", "KST", std::nullopt, {}, 0}, [](dp::KernelContext& cx) {
    hdr::record("no create", [&] { return cx.state<Made>().what; });
    hdr::g_seen.add(std::string("state_per_launch ") + (cx.state_per_launch() ? "1" : "0"));
  });
  // Bound to ANY: create has no device of this plugin.
  host.register_kernel(
      {"Any", "KST", std::string("ANY"), {}, 0},
      [](const dp::KernelCreateContext& c) { return Made(std::to_string(c.device().ordinal())); },
      [](dp::KernelContext&) {});
}

const dpp_plugin_api_t kApi = dp::detail::make_plugin_api<&init>("statetest", "0");

}  // namespace kst

void test_header_kernel_state() {
  namespace dp = devplug::plugin;
  {
    // An ABI 1.4 host: supports_kernel_state() is false (create is still filled: it reads less).
    FakeHost host;
    host.api.abi_minor = 4;
    void* data = nullptr;
    CHECK_OK(host.init(&kst::kApi, &data));
    CHECK(kst::g_supports == 0);
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    kst::kApi.shutdown(data);
  }
  {
    hdr::g_seen = {};
    FakeHost host;
    host.options = {{"mode", "empty"}};
    void* data = nullptr;
    CHECK_OK(host.init(&kst::kApi, &data));
    CHECK(host.kernels.empty());
    CHECK((hdr::g_seen.lines ==
           std::vector<std::string>{"empty create: INVALID_ARGUMENT: kernel Made for KST: the create function is empty"}));
    kst::kApi.shutdown(data);
  }
  FakeHost host;
  void* data = nullptr;
  CHECK_OK(host.init(&kst::kApi, &data));
  CHECK(kst::g_supports == 1);
  CHECK(host.platforms.size() == 1 && host.kernels.size() == 6);
  const RegisteredKernel* made = host.kernel("Made");
  const RegisteredKernel* throws = host.kernel("Throws");
  const RegisteredKernel* null = host.kernel("Null");
  const RegisteredKernel* wrong = host.kernel("WrongType");
  const RegisteredKernel* plain = host.kernel("Plain");
  const RegisteredKernel* any = host.kernel("Any");
  if (host.platforms.size() != 1 || !made || !throws || !null || !wrong || !plain || !any) {
    for (auto& r : host.platforms) r.p.destroy_platform(r.p.platform_data);
    kst::kApi.shutdown(data);
    return;
  }
  for (const RegisteredKernel* k : {made, throws, null, wrong, any}) {
    CHECK(k->struct_size == DPP_KERNEL_STRUCT_SIZE && k->create != nullptr && k->destroy != nullptr);
  }
  CHECK(plain->create == nullptr && plain->destroy == nullptr);
  const dpp_platform_t& p = host.platforms[0].p;
  dpp_device_t dev{};
  dev.struct_size = DPP_DEVICE_STRUCT_SIZE;
  CHECK_OK(p.create_device(p.platform_data, 0, &dev));
  void* stream = nullptr;
  CHECK_OK(dev.se->create_stream(dev.device_data, &stream));
  auto create = [&](const RegisteredKernel* k, const std::vector<int32_t>& dtypes, const FakeAttrs* attrs,
                    void** out) {
    const dpp_kernel_create_context_t c = make_create_context(dev.device_data, k->op.c_str(), dtypes, attrs, k->kernel_data);
    g_last_error.clear();
    return k->create(&c, out);
  };
  // Two inputs, f32 and i64 (the kernel's compute does not read them).
  const int64_t shape[] = {2};
  const dpp_tensor_t in[2] = {{DPP_TENSOR_STRUCT_SIZE, nullptr, DPP_DTYPE_F32, 1, shape, 0x100, 8},
                              {DPP_TENSOR_STRUCT_SIZE, nullptr, DPP_DTYPE_I64, 1, shape, 0x200, 16}};
  auto compute = [&](const RegisteredKernel* k, const FakeAttrs* attrs, void* state, size_t size) {
    dpp_kernel_context_t c = make_context(dev.device_data, stream, {}, {}, attrs, k->kernel_data);
    c.num_inputs = 2;
    c.inputs = in;
    c.struct_size = size;
    c.state = state;
    g_last_error.clear();
    return k->compute(&c);
  };
  FakeAttrs i42;
  i42.values = {{"i", FakeAttrs::Int, 42, 0, {}, {}}};
  FakeAttrs i9;
  i9.values = {{"i", FakeAttrs::Int, 9, 0, {}, {}}};

  // ---- create gets the device, the op, the dtypes and the attributes; compute the state -----------
  hdr::g_seen = {};
  void* s42 = nullptr;
  CHECK_OK(create(made, {DPP_DTYPE_F32, DPP_DTYPE_I64}, &i42, &s42));
  CHECK(s42 != nullptr && kst::g_alive == 1);
  CHECK_OK(compute(made, &i9, s42, DPP_KERNEL_CONTEXT_STRUCT_SIZE));  // the state's i, not the launch's
  CHECK(kst::g_kept && kst::g_kept->what == "Made f32,i64 i=42 device=0 raw");
  // From a host older than 1.5 (80 bytes: `state` is past its struct) or a NULL state: a state for
  // the launch, from the launch's device, input dtypes and attributes, gone after it unless held.
  CHECK_OK(compute(made, &i9, s42, DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1));
  CHECK(kst::g_alive == 2);  // s42's, and the one compute kept
  kst::g_kept.reset();
  CHECK(kst::g_alive == 1);
  CHECK_OK(compute(made, &i9, nullptr, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
  kst::g_kept.reset();
  CHECK(kst::g_alive == 1);
  // A newer host's larger create context is read as far as this header's.
  struct BigCreate {
    dpp_kernel_create_context_t c;
    uint64_t newer_field[2];
  } big{};
  const std::vector<int32_t> one{DPP_DTYPE_F64};
  big.c = make_create_context(dev.device_data, "Made", one, &i9, made->kernel_data);
  big.c.struct_size = sizeof big;
  big.newer_field[0] = 0xBAD;
  void* s9 = nullptr;
  CHECK_OK(made->create(&big.c, &s9));
  CHECK(s9 != nullptr && kst::g_alive == 2);
  const std::vector<std::string> want = {
      "input 5: INVALID_ARGUMENT: kernel Made: create: no input 5 (the op has 2)",
      "compute: Made f32,i64 i=42 device=0 raw",
      "input 5: INVALID_ARGUMENT: kernel Made: create: no input 5 (the op has 2)",
      "compute: Made f32,i64 i=9 device=0 per launch (state per launch)",
      "input 5: INVALID_ARGUMENT: kernel Made: create: no input 5 (the op has 2)",
      "compute: Made f32,i64 i=9 device=0 per launch (state per launch)",
      "input 5: INVALID_ARGUMENT: kernel Made: create: no input 5 (the op has 1)",
  };
  CHECK(hdr::g_seen.lines == want);
  if (hdr::g_seen.lines != want) {
    for (const std::string& l : hdr::g_seen.lines) std::fprintf(stderr, "  seen: %s\n", l.c_str());
  }

  // ---- Work holding state_ptr() keeps the state past the host's destroy ---------------------------
  CHECK_OK(compute(made, &i9, s42, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
  made->destroy(made->kernel_data, s42);
  CHECK(kst::g_alive == 2);  // s9's, and s42's (held)
  CHECK(kst::g_kept && kst::g_kept->what == "Made f32,i64 i=42 device=0 raw");
  kst::g_kept.reset();
  CHECK(kst::g_alive == 1);
  made->destroy(made->kernel_data, s9);
  CHECK(kst::g_alive == 0);

  // ---- A state of another kernel, or not a state at all: refused ----------------------------------
  void* sw = nullptr;
  CHECK_OK(create(wrong, {}, nullptr, &sw));
  CHECK_STATUS(compute(made, &i9, sw, DPP_KERNEL_CONTEXT_STRUCT_SIZE), DPP_INVALID_ARGUMENT);
  CHECK(take_error() == "kernel Made: the context's state is not one this kernel's create made");
  uint64_t junk[8] = {};
  CHECK_STATUS(compute(made, &i9, junk, DPP_KERNEL_CONTEXT_STRUCT_SIZE), DPP_INVALID_ARGUMENT);
  take_error();
  // The wrong type, a null state, no create.
  hdr::g_seen = {};
  CHECK_OK(compute(wrong, nullptr, sw, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
  wrong->destroy(wrong->kernel_data, sw);
  void* sn = nullptr;
  CHECK_OK(create(null, {}, nullptr, &sn));
  CHECK(sn != nullptr);  // a state the host holds, whose value is null
  CHECK_OK(compute(null, nullptr, sn, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
  null->destroy(null->kernel_data, sn);
  CHECK_OK(compute(plain, nullptr, nullptr, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
  const std::vector<std::string> errors = {
      "state<int>: INTERNAL: kernel WrongType: its state is not of the type asked for",
      "state_ptr null",
      "state: FAILED_PRECONDITION: kernel Null: its create function returned no state",
      "no create: FAILED_PRECONDITION: kernel Plain has no state: it was registered without a create function",
      "state_per_launch 0",
  };
  CHECK(hdr::g_seen.lines == errors);
  if (hdr::g_seen.lines != errors) {
    for (const std::string& l : hdr::g_seen.lines) std::fprintf(stderr, "  seen: %s\n", l.c_str());
  }
  CHECK(kst::g_alive == 0);

  // ---- Exceptions from create become statuses, as compute's; nothing is written -------------------
  {
    const struct {
      const char* what;
      dpp_status_t status;
      const char* message;
    } cases[] = {{"error", DPP_NOT_FOUND, "no such state"},
                 {"std", DPP_INTERNAL, "std says no"},
                 {"alloc", DPP_RESOURCE_EXHAUSTED, "out of memory (std::bad_alloc)"},
                 {"int", DPP_INTERNAL, "unknown C++ exception of type int"}};
    for (const auto& c : cases) {
      FakeAttrs a;
      a.values = {{"what", FakeAttrs::Str, 0, 0, {}, c.what}};
      void* out = reinterpret_cast<void*>(0x7);
      CHECK_STATUS(create(throws, {}, &a, &out), c.status);
      CHECK(take_error() == c.message);
      CHECK(out == reinterpret_cast<void*>(0x7));
      // From an older host the same exception fails the launch.
      CHECK_STATUS(compute(throws, &a, nullptr, DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1), c.status);
      CHECK(take_error() == c.message);
    }
    FakeAttrs fine;
    fine.values = {{"what", FakeAttrs::Str, 0, 0, {}, "fine"}};
    void* out = nullptr;
    CHECK_OK(create(throws, {}, &fine, &out));  // a std::unique_ptr state
    CHECK(kst::g_alive == 1);
    hdr::g_seen = {};
    CHECK_OK(compute(throws, nullptr, out, DPP_KERNEL_CONTEXT_STRUCT_SIZE));
    CHECK(hdr::g_seen.lines == std::vector<std::string>{"compute: fine"});
    throws->destroy(throws->kernel_data, out);
    CHECK(kst::g_alive == 0);
    // A kernel bound to ANY has no device of this plugin in create either.
    CHECK_STATUS(create(any, {}, nullptr, &out), DPP_FAILED_PRECONDITION);
    CHECK(contains(take_error(), "kernel Any is bound to ANY"));
  }

  // ---- Malformed create contexts; destroy of NULL or of something else ----------------------------
  {
    void* out = nullptr;
    CHECK_STATUS(made->create(nullptr, &out), DPP_INVALID_ARGUMENT);
    dpp_kernel_create_context_t c = make_create_context(dev.device_data, "Made", {}, &i9, made->kernel_data);
    CHECK_STATUS(made->create(&c, nullptr), DPP_INVALID_ARGUMENT);
    c.struct_size = DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE - 8;  // ends before kernel_data
    CHECK_STATUS(made->create(&c, &out), DPP_ABI_MISMATCH);
    c = make_create_context(dev.device_data, "Made", {}, &i9, nullptr);
    CHECK_STATUS(made->create(&c, &out), DPP_INVALID_ARGUMENT);
    c = make_create_context(dev.device_data, "Made", {}, &i9, &junk);
    CHECK_STATUS(made->create(&c, &out), DPP_INVALID_ARGUMENT);
    c = make_create_context(dev.device_data, "Made", {}, &i9, made->kernel_data);
    c.num_inputs = 3;
    CHECK_STATUS(made->create(&c, &out), DPP_INVALID_ARGUMENT);
    CHECK(take_error() == "kernel Made: create: the 3 input dtypes are at NULL");
    CHECK(out == nullptr);
    made->destroy(made->kernel_data, nullptr);
    made->destroy(made->kernel_data, junk);
    CHECK(host.logs_with("kernel state destroy failed: the host passed a state that is not one of this plugin "
                         "(not freed)").size() == 1);
  }
  dev.se->destroy_stream(dev.device_data, stream);
  p.destroy_device(p.platform_data, &dev);
  p.destroy_platform(p.platform_data);
  kst::kApi.shutdown(data);
  CHECK(kst::g_alive == 0);
}

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
  // DEVPLUG_PLUGIN_FOR_ABI(..., 1, ...): SIMDML declares 1.1, the oldest host it loads into.
  CHECK(api->abi_major == DPP_ABI_MAJOR && api->abi_minor == 1);
  CHECK(hdr::kApi.abi_minor == DPP_ABI_MINOR);  // make_plugin_api's default (DEVPLUG_PLUGIN's): the header's
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
      test_kernels(host, r, api, 2000);
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

  // ---- Kernels: load options, refusals, an ABI 1.0 host; the header's kernel API ------------
  {
    std::printf("kernel options\n");
    test_kernel_options(api);
    std::printf("plugin.hpp kernels\n");
    test_header_kernels();
    std::printf("plugin.hpp timed events\n");
    test_header_event_timing();
    test_header_host_callbacks();
    std::printf("plugin.hpp allocate_temp\n");
    test_header_allocate_temp();
    std::printf("kernel state\n");
    test_kernel_state(api);
    std::printf("plugin.hpp kernel state\n");
    test_header_kernel_state();
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
