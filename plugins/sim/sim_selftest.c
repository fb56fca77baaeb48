/*
 * Self-test of the SIM plugin without the devplug host: dlopens libdevplug_sim.so, fakes a
 * minimal host table and drives the plugin ABI directly.
 *
 *   sim_selftest [path/to/libdevplug_sim.so]     (default: ./libdevplug_sim.so)
 *
 * Exits 0 when every check passed. Meant to run under valgrind or the sanitizers as well.
 */
#define _POSIX_C_SOURCE 200809L

#include <devplug/plugin.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <math.h> /* INFINITY */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ThreadSanitizer (gcc defines __SANITIZE_THREAD__, clang has __has_feature). */
#if defined(__SANITIZE_THREAD__)
#define SELFTEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SELFTEST_TSAN 1
#endif
#endif
#ifndef SELFTEST_TSAN
#define SELFTEST_TSAN 0
#endif

static int g_checks, g_failures;

#define CHECK(cond)                                                                                            \
  do {                                                                                                         \
    g_checks++;                                                                                                \
    if (!(cond)) {                                                                                             \
      g_failures++;                                                                                            \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, g_err);                  \
    }                                                                                                          \
  } while (0)

#define CHECK_ST(expr, want)                                                                                   \
  do {                                                                                                         \
    dpp_status_t st_ = (expr);                                                                                 \
    g_checks++;                                                                                                \
    if (st_ != (want)) {                                                                                       \
      g_failures++;                                                                                            \
      fprintf(stderr, "FAIL %s:%d: %s returned %d, want %d (last error: %s)\n", __FILE__, __LINE__, #expr,    \
              (int)st_, (int)(want), g_err);                                                                   \
    }                                                                                                          \
  } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, DPP_OK)

/* The message the plugin gave last through set_error, per thread (as the host does it). */
static _Thread_local char g_err[1024];

static bool err_has(const char *needle) {
  return strstr(g_err, needle) != NULL;
}

static void clear_err(void) {
  g_err[0] = '\0';
}

/* ------------------------------------------------------------------------------------------ */
/* The fake host */

/* A kernel the plugin registered (the fake host copies what the real one copies). */
typedef struct fake_kernel {
  char op[64], device_type[72], platform[72];
  bool platform_null;
  int32_t dtypes[8];
  size_t num_dtypes;
  int32_t priority;
  void *kernel_data;
  dpp_status_t (*compute)(const dpp_kernel_context_t *context);
} fake_kernel;

enum { FAKE_MAX_KERNELS = 16 };

typedef struct fake_host {
  dpp_host_api_t api;
  const char *const *options; /* "key=value", NULL-terminated */
  dpp_status_t register_result;
  int registered;
  dpp_platform_t platform;
  void *plugin_data;
  atomic_int warnings, errors;
  bool quiet;
  /* Kernels (ABI 1.1). */
  dpp_status_t register_kernel_result;
  int register_kernel_calls;
  int nkernels;
  fake_kernel kernels[FAKE_MAX_KERNELS];
} fake_host;

static void host_set_error(dpp_host_context_t ctx, const char *message) {
  (void)ctx;
  snprintf(g_err, sizeof g_err, "%s", message ? message : "(NULL)");
}

static void host_log(dpp_host_context_t ctx, int32_t level, const char *message) {
  fake_host *h = (fake_host *)ctx;
  if (level == DPP_LOG_WARN) {
    atomic_fetch_add(&h->warnings, 1);
  } else if (level == DPP_LOG_ERROR) {
    atomic_fetch_add(&h->errors, 1);
  }
  if (!h->quiet || level <= DPP_LOG_WARN) {
    static const char *const names[] = {"?", "error", "warn", "info", "debug"};
    fprintf(stderr, "  [plugin %s] %s\n", names[level >= 1 && level <= 4 ? level : 0], message);
  }
}

static const char *host_get_option(dpp_host_context_t ctx, const char *key) {
  fake_host *h = (fake_host *)ctx;
  size_t n = strlen(key);
  for (const char *const *o = h->options; o && *o; o++) {
    if (strncmp(*o, key, n) == 0 && (*o)[n] == '=') {
      return *o + n + 1;
    }
  }
  return NULL;
}

static dpp_status_t host_register_platform(dpp_host_context_t ctx, const dpp_platform_t *p) {
  fake_host *h = (fake_host *)ctx;
  if (h->register_result != DPP_OK) {
    host_set_error(ctx, "fake host: registration refused");
    return h->register_result;
  }
  if (!p || p->struct_size < DPP_PLATFORM_STRUCT_SIZE || !p->name || !p->device_type || !p->create_device ||
      !p->destroy_device) {
    return DPP_INVALID_ARGUMENT;
  }
  h->platform = *p;
  h->registered++;
  return DPP_OK;
}

static dpp_status_t host_register_kernel(dpp_host_context_t ctx, const dpp_kernel_t *k) {
  fake_host *h = (fake_host *)ctx;
  h->register_kernel_calls++;
  if (h->register_kernel_result != DPP_OK) {
    host_set_error(ctx, "fake host: kernel refused");
    return h->register_kernel_result;
  }
  if (!k || k->struct_size < DPP_KERNEL_STRUCT_SIZE || !k->op || !k->device_type || !k->compute ||
      (k->num_dtypes && !k->dtypes) || k->num_dtypes > 8 || h->nkernels == FAKE_MAX_KERNELS ||
      strlen(k->op) >= 64 || strlen(k->device_type) >= 72 || (k->platform && strlen(k->platform) >= 72)) {
    host_set_error(ctx, "fake host: invalid dpp_kernel_t");
    return DPP_INVALID_ARGUMENT;
  }
  fake_kernel *f = &h->kernels[h->nkernels++];
  memset(f, 0, sizeof *f);
  strcpy(f->op, k->op);
  strcpy(f->device_type, k->device_type);
  f->platform_null = k->platform == NULL;
  if (k->platform) {
    strcpy(f->platform, k->platform);
  }
  memcpy(f->dtypes, k->dtypes, k->num_dtypes * sizeof *k->dtypes);
  f->num_dtypes = k->num_dtypes;
  f->priority = k->priority;
  f->kernel_data = k->kernel_data;
  f->compute = k->compute;
  return DPP_OK;
}

/* A tiny attribute store: what the kernel context's `attrs` points to in these tests. */
enum { ATTR_INT, ATTR_FLOAT, ATTR_BOOL, ATTR_INTS, ATTR_DTYPE };

typedef struct fake_attr {
  const char *name;
  int type;
  int64_t i; /* int, bool, dtype */
  double f;
  const int64_t *ints;
  size_t nints;
} fake_attr;

typedef struct fake_attrs {
  int n;
  fake_attr a[8];
} fake_attrs;

static void attrs_add_bool(fake_attrs *a, const char *name, bool v) {
  a->a[a->n++] = (fake_attr){name, ATTR_BOOL, v, 0, NULL, 0};
}

static void attrs_add_ints(fake_attrs *a, const char *name, const int64_t *v, size_t n) {
  a->a[a->n++] = (fake_attr){name, ATTR_INTS, 0, 0, v, n};
}

static void attrs_add_int(fake_attrs *a, const char *name, int64_t v) {
  a->a[a->n++] = (fake_attr){name, ATTR_INT, v, 0, NULL, 0};
}

static const fake_attr *attr_find(const void *attrs, const char *name) {
  const fake_attrs *a = (const fake_attrs *)attrs;
  for (int i = 0; a && name && i < a->n; i++) {
    if (strcmp(a->a[i].name, name) == 0) {
      return &a->a[i];
    }
  }
  return NULL;
}

/* As the host's readers: DPP_NOT_FOUND when absent, DPP_INVALID_ARGUMENT for another type. */
static dpp_status_t host_attr_int(const void *attrs, const char *name, int64_t *out) {
  const fake_attr *a = attr_find(attrs, name);
  if (!attrs || !name || !out) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!a) {
    return DPP_NOT_FOUND;
  }
  if (a->type != ATTR_INT) {
    return DPP_INVALID_ARGUMENT;
  }
  *out = a->i;
  return DPP_OK;
}

static dpp_status_t host_attr_float(const void *attrs, const char *name, double *out) {
  const fake_attr *a = attr_find(attrs, name);
  if (!attrs || !name || !out) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!a) {
    return DPP_NOT_FOUND;
  }
  if (a->type != ATTR_FLOAT && a->type != ATTR_INT) {
    return DPP_INVALID_ARGUMENT;
  }
  *out = a->type == ATTR_INT ? (double)a->i : a->f;
  return DPP_OK;
}

static dpp_status_t host_attr_bool(const void *attrs, const char *name, int32_t *out) {
  const fake_attr *a = attr_find(attrs, name);
  if (!attrs || !name || !out) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!a) {
    return DPP_NOT_FOUND;
  }
  if (a->type != ATTR_BOOL) {
    return DPP_INVALID_ARGUMENT;
  }
  *out = a->i ? 1 : 0;
  return DPP_OK;
}

static dpp_status_t host_attr_ints(const void *attrs, const char *name, const int64_t **out_data, size_t *out_len) {
  const fake_attr *a = attr_find(attrs, name);
  if (!attrs || !name || !out_data || !out_len) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!a) {
    return DPP_NOT_FOUND;
  }
  if (a->type != ATTR_INTS) {
    return DPP_INVALID_ARGUMENT;
  }
  *out_data = a->ints;
  *out_len = a->nints;
  return DPP_OK;
}

static dpp_status_t host_attr_dtype(const void *attrs, const char *name, int32_t *out) {
  const fake_attr *a = attr_find(attrs, name);
  if (!attrs || !name || !out) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!a) {
    return DPP_NOT_FOUND;
  }
  if (a->type != ATTR_DTYPE) {
    return DPP_INVALID_ARGUMENT;
  }
  *out = (int32_t)a->i;
  return DPP_OK;
}

static void host_init(fake_host *h, const char *const *options) {
  memset(h, 0, sizeof *h);
  h->api.struct_size = DPP_HOST_API_STRUCT_SIZE;
  h->api.abi_major = DPP_ABI_MAJOR;
  h->api.abi_minor = DPP_ABI_MINOR;
  h->api.context = h;
  h->api.set_error = host_set_error;
  h->api.log = host_log;
  h->api.get_option = host_get_option;
  h->api.register_platform = host_register_platform;
  h->api.register_kernel = host_register_kernel;
  h->api.attr_int = host_attr_int;
  h->api.attr_float = host_attr_float;
  h->api.attr_bool = host_attr_bool;
  h->api.attr_ints = host_attr_ints;
  h->api.attr_dtype = host_attr_dtype;
  h->options = options;
  h->quiet = true;
}

static const fake_kernel *find_kernel(const fake_host *h, const char *op) {
  for (int i = 0; i < h->nkernels; i++) {
    if (strcmp(h->kernels[i].op, op) == 0) {
      return &h->kernels[i];
    }
  }
  return NULL;
}

static const dpp_plugin_api_t *g_api;

static dpp_status_t load(fake_host *h, const char *const *options) {
  host_init(h, options);
  clear_err();
  return g_api->init(&h->api, &h->plugin_data);
}

/* Destroys the platform (as the host does after its last device) and shuts the plugin down. */
static void unload(fake_host *h) {
  if (h->platform.destroy_platform) {
    h->platform.destroy_platform(h->platform.platform_data);
  }
  if (g_api->shutdown) {
    g_api->shutdown(h->plugin_data);
  }
}

typedef struct sim_dev {
  dpp_device_t d;
  void *dd;
  const dpp_stream_executor_t *se;
} sim_dev;

static dpp_status_t create(fake_host *h, int ordinal, sim_dev *out) {
  memset(out, 0, sizeof *out);
  out->d.struct_size = DPP_DEVICE_STRUCT_SIZE;
  out->d.ordinal = ordinal;
  dpp_status_t st = h->platform.create_device(h->platform.platform_data, ordinal, &out->d);
  out->dd = out->d.device_data;
  out->se = out->d.se;
  return st;
}

static void destroy(fake_host *h, sim_dev *dev) {
  h->platform.destroy_device(h->platform.platform_data, &dev->d);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (unsigned char)(seed * 31u + i * 7u + (i >> 8));
  }
}

static bool all_eq(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != v) {
      return false;
    }
  }
  return true;
}

static char *hex(char *buf, dpp_addr_t a) {
  sprintf(buf, "0x%016" PRIx64, a);
  return buf;
}

#define SIM_BASE UINT64_C(0x5100000000000000)

/* ------------------------------------------------------------------------------------------ */

static void test_entry(void) {
  CHECK(g_api != NULL);
  CHECK(g_api->struct_size == DPP_PLUGIN_API_STRUCT_SIZE);
  CHECK(g_api->ext == NULL);
  CHECK(g_api->abi_major == DPP_ABI_MAJOR && g_api->abi_minor == DPP_ABI_MINOR);
  CHECK(g_api->name && strcmp(g_api->name, "devplug_sim") == 0);
  CHECK(g_api->version && *g_api->version);
  CHECK(g_api->init != NULL && g_api->shutdown != NULL);
}

static void check_executor(const dpp_stream_executor_t *se) {
  CHECK(se->struct_size == DPP_STREAM_EXECUTOR_STRUCT_SIZE);
  CHECK(se->ext == NULL);
  CHECK(se->allocate && se->deallocate && se->host_allocate && se->host_deallocate && se->memory_usage &&
        se->allocator_stats && se->memcpy_htod && se->memcpy_dtoh && se->memcpy_dtod && se->memset &&
        se->create_stream && se->destroy_stream && se->synchronize_stream && se->stream_wait_stream &&
        se->memcpy_htod_async && se->memcpy_dtoh_async && se->memcpy_dtod_async && se->memset_async &&
        se->host_callback && se->create_event && se->destroy_event && se->record_event && se->event_status &&
        se->stream_wait_event && se->event_synchronize && se->synchronize_all);
  CHECK(se->event_elapsed_ns != NULL); /* ABI 1.4: SIM times events */
  CHECK(se->unified_allocate == NULL && se->unified_deallocate == NULL);
}

/* ---- memory and synchronous copies ---- */

static void test_memory(sim_dev *d0, sim_dev *d1) {
  const dpp_stream_executor_t *se = d0->se;
  void *dd = d0->dd;
  char h1[32], h2[32];
  dpp_addr_t a = 0, b = 0, c = 0, w = 0, big = 0;

  CHECK_OK(se->allocate(dd, 1000, &a));
  CHECK_OK(se->allocate(dd, 5000, &b));
  CHECK_OK(d1->se->allocate(d1->dd, 100, &c));
  CHECK(a != 0 && b != 0 && a != b);
  CHECK((a >> 56) == 0x51 && ((a - SIM_BASE) >> 40) == 0);
  CHECK(((c - SIM_BASE) >> 40) == 1);
  CHECK(a % 256 == 0 && b % 256 == 0);

  uint64_t freeb = 0, total = 0;
  CHECK_OK(se->memory_usage(dd, &freeb, &total));
  CHECK(total == (1u << 20));
  CHECK(freeb == (1u << 20) - 1024 - 5120);

  dpp_allocator_stats_t stats;
  memset(&stats, 0xff, sizeof stats);
  stats.struct_size = DPP_ALLOCATOR_STATS_STRUCT_SIZE;
  stats.ext = NULL;
  CHECK_OK(se->allocator_stats(dd, &stats));
  CHECK(stats.num_allocs == 2 && stats.bytes_in_use == 6000 && stats.peak_bytes_in_use == 6000);
  CHECK(stats.largest_alloc_size == 5000 && stats.bytes_limit == (1u << 20) && stats.bytes_reserved == 6144);
  CHECK(stats.largest_free_block == (1u << 20) - 6144);
  /* A host with a shorter struct gets only the fields it has. */
  struct {
    dpp_allocator_stats_t s;
  } small;
  memset(&small, 0xee, sizeof small);
  small.s.struct_size = offsetof(dpp_allocator_stats_t, bytes_in_use) + sizeof(uint64_t);
  CHECK_OK(se->allocator_stats(dd, &small.s));
  CHECK(small.s.bytes_in_use == 6000 && small.s.peak_bytes_in_use == UINT64_C(0xeeeeeeeeeeeeeeee));

  /* htod / dtoh / dtod with offsets. */
  unsigned char src[1000], out[1000];
  fill(src, sizeof src, 1);
  CHECK_OK(se->memcpy_htod(dd, a + 100, src, 500));
  memset(out, 0, sizeof out);
  CHECK_OK(se->memcpy_dtoh(dd, out, a + 100, 500));
  CHECK(memcmp(out, src, 500) == 0);
  CHECK_OK(se->memcpy_dtod(dd, b + 1000, a + 100, 500));
  memset(out, 0, sizeof out);
  CHECK_OK(se->memcpy_dtoh(dd, out, b + 1000, 500));
  CHECK(memcmp(out, src, 500) == 0);
  CHECK_OK(se->memcpy_dtoh(dd, out, a + 150, 1)); /* one byte in the middle */
  CHECK(out[0] == src[50]);

  /* Overlapping dtod behaves like memmove. */
  unsigned char seq[300], expect[300];
  for (int i = 0; i < 300; i++) {
    seq[i] = (unsigned char)i;
  }
  CHECK_OK(se->memcpy_htod(dd, a, seq, 300));
  CHECK_OK(se->memcpy_dtod(dd, a + 10, a, 200));
  memcpy(expect, seq, 300);
  memmove(expect + 10, expect, 200);
  CHECK_OK(se->memcpy_dtoh(dd, out, a, 300));
  CHECK(memcmp(out, expect, 300) == 0);

  /* memset */
  CHECK_OK(se->memset(dd, b + 3, 0xAB, 10));
  CHECK_OK(se->memcpy_dtoh(dd, out, b, 16));
  CHECK(all_eq(out + 3, 10, 0xAB));

  /* The whole allocation, to its last byte. */
  CHECK_OK(se->memset(dd, a, 1, 1000));
  CHECK_OK(se->memcpy_dtoh(dd, out, a + 999, 1));
  CHECK(out[0] == 1);

  /* Size 0 is a no-op. */
  CHECK_OK(se->memcpy_htod(dd, a, src, 0));

  /* Invalid addresses: every message names the address. */
  clear_err();
  CHECK_ST(se->memcpy_dtoh(dd, out, 0, 4), DPP_INVALID_ARGUMENT);
  CHECK(err_has(hex(h1, 0)));
  clear_err();
  CHECK_ST(se->memcpy_dtoh(dd, out, a + 1000, 1), DPP_INVALID_ARGUMENT); /* one past the end */
  CHECK(err_has(hex(h1, a + 1000)) && err_has("not inside a live allocation"));
  clear_err();
  CHECK_ST(se->memcpy_htod(dd, a + 990, src, 20), DPP_INVALID_ARGUMENT); /* runs past the end */
  CHECK(err_has(hex(h1, a + 990)) && err_has("runs past the end") && err_has(hex(h2, a)));
  clear_err();
  CHECK_ST(se->memcpy_dtoh(dd, out, c, 4), DPP_INVALID_ARGUMENT); /* device 1's address on device 0 */
  CHECK(err_has(hex(h1, c)) && err_has("SIM device 1"));
  clear_err();
  CHECK_ST(se->memset(dd, a + 500000, 0, 4), DPP_INVALID_ARGUMENT); /* never allocated */
  CHECK(err_has(hex(h1, a + 500000)));
  clear_err();
  CHECK_ST(se->memcpy_dtod(dd, b, a + 100, 4000), DPP_INVALID_ARGUMENT); /* src too short */
  CHECK(err_has("src") && err_has(hex(h1, a + 100)));
  clear_err();
  CHECK_ST(se->memcpy_htod(dd, SIM_BASE + (UINT64_C(1) << 20) + 5, src, 1), DPP_INVALID_ARGUMENT); /* past arena */
  CHECK(*g_err != '\0');
  CHECK_ST(se->memcpy_htod(dd, a, NULL, 4), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->memcpy_dtoh(dd, NULL, a, 4), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->allocate(dd, 0, &w), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->allocate(dd, 16, NULL), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->allocate(NULL, 16, &w), DPP_INVALID_ARGUMENT);

  /* A freed address is invalid. */
  CHECK_OK(se->allocate(dd, 64, &w));
  se->deallocate(dd, w, 64);
  clear_err();
  CHECK_ST(se->memcpy_dtoh(dd, out, w, 4), DPP_INVALID_ARGUMENT);
  CHECK(err_has(hex(h1, w)));

  /* The same once the calling thread has used the allocation (SIM then skips the device mutex
   * for it while nothing is freed): every synchronous call refuses it after the free. */
  CHECK_OK(se->allocate(dd, 64, &w));
  CHECK_OK(se->memset(dd, w, 3, 64));
  CHECK_OK(se->memcpy_htod(dd, w, src, 64));
  CHECK_OK(se->memcpy_dtoh(dd, out, w, 64));
  CHECK_OK(se->memcpy_dtod(dd, w, w + 32, 32));
  CHECK_ST(se->memset(dd, w + 60, 0, 8), DPP_INVALID_ARGUMENT); /* past its end, though known */
  CHECK_ST(d1->se->memset(d1->dd, w, 0, 4), DPP_INVALID_ARGUMENT); /* on the other device */
  se->deallocate(dd, w, 64);
  clear_err();
  CHECK_ST(se->memset(dd, w, 0, 4), DPP_INVALID_ARGUMENT);
  CHECK(err_has(hex(h1, w)) && err_has("not inside a live allocation"));
  CHECK_ST(se->memcpy_htod(dd, w, src, 4), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->memcpy_dtoh(dd, out, w, 4), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->memcpy_dtod(dd, a, w, 4), DPP_INVALID_ARGUMENT);
  CHECK_ST(se->memcpy_dtod(dd, w, a, 4), DPP_INVALID_ARGUMENT);
  /* A new allocation at that address is valid again. */
  dpp_addr_t w2 = 0;
  CHECK_OK(se->allocate(dd, 64, &w2));
  CHECK(w2 == w);
  CHECK_OK(se->memset(dd, w2, 9, 64));
  CHECK_OK(se->memcpy_dtoh(dd, out, w2, 64));
  CHECK(all_eq(out, 64, 9));
  se->deallocate(dd, w2, 64);

  /* Out of memory, then first fit reuses a freed block. */
  clear_err();
  CHECK_ST(se->allocate(dd, 2u << 20, &big), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("out of device memory"));
  se->deallocate(dd, b, 5000);
  dpp_addr_t b2 = 0;
  CHECK_OK(se->allocate(dd, 4000, &b2));
  CHECK(b2 == b);
  se->deallocate(dd, b2, 4000);

  /* Double free and wrong size are logged, not fatal. */
  se->deallocate(dd, b2, 4000);

  /* Pinned host memory. */
  void *hp = NULL;
  CHECK_OK(se->host_allocate(dd, 100, &hp));
  CHECK(hp != NULL && ((uintptr_t)hp % 64) == 0);
  memset(hp, 1, 100);
  se->host_deallocate(dd, hp, 100);

  se->deallocate(dd, a, 1000);
  d1->se->deallocate(d1->dd, c, 100);
  CHECK_OK(se->memory_usage(dd, &freeb, &total));
  CHECK(freeb == total);
  CHECK_OK(se->allocator_stats(dd, &stats));
  CHECK(stats.bytes_in_use == 0 && stats.peak_bytes_in_use == 6064 && stats.largest_free_block == (1u << 20));
}

/* ---- streams and events ---- */

typedef struct cb_ctx {
  int index;
  const unsigned char *snap; /* filled by the dtoh_async enqueued just before */
  unsigned char expect;
  int *order;
  atomic_int *count;
  atomic_int *bad;
} cb_ctx;

static void cb_order(void *arg) {
  cb_ctx *c = (cb_ctx *)arg;
  int pos = atomic_fetch_add(c->count, 1);
  c->order[pos] = c->index;
  if (!all_eq(c->snap, 16, c->expect)) {
    atomic_fetch_add(c->bad, 1);
  }
}

static void test_streams(fake_host *h, sim_dev *d0, sim_dev *d1) {
  (void)h;
  const dpp_stream_executor_t *se = d0->se;
  void *dd = d0->dd;
  enum { N = 4096 };
  static unsigned char P[N], out[N], out2[N], out3[N];
  dpp_addr_t x = 0, y = 0, z = 0;
  void *s1 = NULL, *s2 = NULL, *s1b = NULL, *e = NULL, *e1b = NULL;
  int32_t status = -1;

  CHECK_OK(se->allocate(dd, N, &x));
  CHECK_OK(se->allocate(dd, N, &y));
  CHECK_OK(se->allocate(dd, N, &z));
  CHECK_OK(se->memset(dd, x, 0, N));
  CHECK_OK(se->memset(dd, y, 0, N));
  CHECK_OK(se->create_stream(dd, &s1));
  CHECK_OK(se->create_stream(dd, &s2));
  CHECK(s1 && s2 && s1 != s2);
  CHECK_OK(se->create_event(dd, &e));

  /* A never-recorded event is complete, and waiting on it is a no-op. */
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_COMPLETE);
  CHECK_OK(se->event_synchronize(dd, e));
  CHECK_OK(se->stream_wait_event(dd, s2, e));

  /* s1 writes x; s2 waits for the event and reads x (through y). */
  fill(P, N, 2);
  CHECK_OK(se->memcpy_htod_async(dd, s1, x + 0, P, N));
  CHECK_OK(se->record_event(dd, s1, e));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_PENDING); /* latency_us=2000: the copy has not run yet */
  CHECK_OK(se->stream_wait_event(dd, s2, e));
  CHECK_OK(se->memcpy_dtod_async(dd, s2, y, x, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, s2, out, y, N));
  CHECK_OK(se->synchronize_stream(dd, s2));
  CHECK(memcmp(out, P, N) == 0);
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_COMPLETE);
  CHECK_OK(se->synchronize_stream(dd, s1));

#if !SELFTEST_TSAN
  /* These two race on purpose (that is what they show), so ThreadSanitizer builds skip them. */
  /* Control: the same without the wait reads stale data (the streams are really async). */
  static unsigned char Q[N];
  fill(Q, N, 3);
  for (int i = 0; i < 10; i++) {
    CHECK_OK(se->memset_async(dd, s1, x, (unsigned char)(0xC0 + i), N)); /* 10 x 2 ms */
  }
  CHECK_OK(se->memcpy_htod_async(dd, s1, x, Q, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, s2, out2, x, N));
  CHECK_OK(se->synchronize_stream(dd, s2));
  CHECK(memcmp(out2, Q, N) != 0);
  CHECK_OK(se->synchronize_stream(dd, s1));
  CHECK_OK(se->memcpy_dtoh(dd, out2, x, N));
  CHECK(memcmp(out2, Q, N) == 0);

  /* Synchronous copies do not wait for streams. */
  CHECK_OK(se->memset(dd, x, 0, N));
  CHECK_OK(se->memset_async(dd, s1, x, 0x5A, N));
  CHECK_OK(se->memcpy_dtoh(dd, out3, x, N));
  CHECK(all_eq(out3, N, 0)); /* the memset_async has not run yet */
  CHECK_OK(se->synchronize_stream(dd, s1));
  CHECK_OK(se->memcpy_dtoh(dd, out3, x, N));
  CHECK(all_eq(out3, N, 0x5A));
#endif

  /* Host callbacks run in order, after the earlier work of their stream. */
  {
    enum { K = 8 };
    static unsigned char snaps[K][16];
    cb_ctx ctx[K];
    int order[K];
    atomic_int count = 0, bad = 0;
    for (int i = 0; i < K; i++) {
      ctx[i] = (cb_ctx){i, snaps[i], (unsigned char)(i + 1), order, &count, &bad};
      CHECK_OK(se->memset_async(dd, s1, x, (unsigned char)(i + 1), 16));
      CHECK_OK(se->memcpy_dtoh_async(dd, s1, snaps[i], x, 16));
      CHECK_OK(se->host_callback(dd, s1, cb_order, &ctx[i]));
    }
    CHECK(atomic_load(&count) < K);
    CHECK_OK(se->synchronize_stream(dd, s1));
    CHECK(atomic_load(&count) == K);
    CHECK(atomic_load(&bad) == 0);
    for (int i = 0; i < K; i++) {
      CHECK(order[i] == i);
    }
    clear_err();
    CHECK_ST(se->host_callback(dd, s1, NULL, NULL), DPP_INVALID_ARGUMENT);
    CHECK(err_has("func"));
  }

  /* stream_wait_stream */
  CHECK_OK(se->memset_async(dd, s1, x, 0x77, N));
  CHECK_OK(se->stream_wait_stream(dd, s2, s1));
  CHECK_OK(se->memcpy_dtoh_async(dd, s2, out, x, N));
  CHECK_OK(se->synchronize_stream(dd, s2));
  CHECK(all_eq(out, N, 0x77));
  CHECK_OK(se->stream_wait_stream(dd, s1, s1)); /* itself: no-op */

  /* The default stream (NULL) is asynchronous too. */
  fill(P, N, 4);
  CHECK_OK(se->memcpy_htod_async(dd, NULL, z, P, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, NULL, out, z, N));
  CHECK_OK(se->synchronize_stream(dd, NULL));
  CHECK(memcmp(out, P, N) == 0);

  /* synchronize_all waits for every stream of the device, the default one included. */
  CHECK_OK(se->memset_async(dd, s1, x, 0x11, N));
  CHECK_OK(se->memset_async(dd, s2, y, 0x22, N));
  CHECK_OK(se->memset_async(dd, NULL, z, 0x33, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, s1, out, x, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, s2, out2, y, N));
  CHECK_OK(se->memcpy_dtoh_async(dd, NULL, out3, z, N));
  CHECK_OK(se->synchronize_all(dd));
  CHECK(all_eq(out, N, 0x11) && all_eq(out2, N, 0x22) && all_eq(out3, N, 0x33));

  /* Re-recording: waits and queries refer to the latest record. */
  CHECK_OK(se->record_event(dd, s1, e));
  CHECK_OK(se->synchronize_stream(dd, s1));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_COMPLETE);
  CHECK_OK(se->memset_async(dd, s1, x, 0x44, N));
  CHECK_OK(se->record_event(dd, s1, e));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_PENDING);
  CHECK_OK(se->event_synchronize(dd, e));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_COMPLETE);
  CHECK_OK(se->memcpy_dtoh(dd, out, x, N));
  CHECK(all_eq(out, N, 0x44));

  /* An event destroyed while its record is still queued. */
  {
    void *e2 = NULL;
    CHECK_OK(se->create_event(dd, &e2));
    CHECK_OK(se->memset_async(dd, s1, x, 0x45, N));
    CHECK_OK(se->record_event(dd, s1, e2));
    CHECK_OK(se->stream_wait_event(dd, s2, e2));
    se->destroy_event(dd, e2);
    CHECK_OK(se->memcpy_dtoh_async(dd, s2, out, x, N));
    CHECK_OK(se->synchronize_stream(dd, s2));
    CHECK(all_eq(out, N, 0x45));
  }

  /* Async errors: bad addresses are refused at enqueue time, with the address named... */
  char hx[32];
  clear_err();
  CHECK_ST(se->memcpy_htod_async(dd, s1, 0xdead, P, 16), DPP_INVALID_ARGUMENT);
  CHECK(err_has(hex(hx, 0xdead)));
  clear_err();
  CHECK_ST(se->memcpy_dtod_async(dd, s1, x, y + N - 8, 16), DPP_INVALID_ARGUMENT);
  CHECK(err_has(hex(hx, y + N - 8)));
  /* ...and memory freed before the stream reaches the op fails at synchronize. */
  {
    dpp_addr_t w = 0;
    CHECK_OK(se->allocate(dd, 64, &w));
    CHECK_OK(se->memset_async(dd, s1, w, 1, 64)); /* 2 ms away */
    se->deallocate(dd, w, 64);
    clear_err();
    CHECK_ST(se->synchronize_stream(dd, s1), DPP_INVALID_ARGUMENT);
    CHECK(err_has(hex(hx, w)) && err_has("memset_async"));
    CHECK_OK(se->synchronize_stream(dd, s1)); /* reported once */
  }

  /* Handles: unknown, destroyed, another device's. */
  clear_err();
  CHECK_ST(se->synchronize_stream(dd, (void *)&status), DPP_INVALID_ARGUMENT);
  CHECK(err_has("not a live stream"));
  CHECK_OK(se->create_stream(dd, &s1b));
  se->destroy_stream(dd, s1b);
  CHECK_ST(se->memset_async(dd, s1b, x, 0, 4), DPP_INVALID_ARGUMENT);
  {
    void *other = NULL, *oe = NULL;
    CHECK_OK(d1->se->create_stream(d1->dd, &other));
    CHECK_OK(d1->se->create_event(d1->dd, &oe));
    CHECK_ST(se->synchronize_stream(dd, other), DPP_INVALID_ARGUMENT);
    CHECK_ST(se->record_event(dd, s1, oe), DPP_INVALID_ARGUMENT);
    CHECK_ST(se->event_status(dd, oe, &status), DPP_INVALID_ARGUMENT);
    CHECK_ST(se->stream_wait_stream(dd, s1, other), DPP_INVALID_ARGUMENT);
    d1->se->destroy_event(d1->dd, oe);
    d1->se->destroy_stream(d1->dd, other);
  }
  CHECK_OK(se->create_event(dd, &e1b));
  se->destroy_event(dd, e1b);
  CHECK_ST(se->event_synchronize(dd, e1b), DPP_INVALID_ARGUMENT);

  /* destroy_stream drains: queued callbacks still run exactly once. */
  {
    void *s3 = NULL;
    atomic_int count = 0, bad = 0;
    int order[4];
    static unsigned char snap[16];
    cb_ctx c = {0, snap, 0x66, order, &count, &bad};
    CHECK_OK(se->create_stream(dd, &s3));
    CHECK_OK(se->memset_async(dd, s3, x, 0x66, 16));
    CHECK_OK(se->memcpy_dtoh_async(dd, s3, snap, x, 16));
    CHECK_OK(se->host_callback(dd, s3, cb_order, &c));
    se->destroy_stream(dd, s3);
    CHECK(atomic_load(&count) == 1 && atomic_load(&bad) == 0);
  }

  se->destroy_event(dd, e);
  se->destroy_stream(dd, s1);
  se->destroy_stream(dd, s2);
  se->deallocate(dd, x, N);
  se->deallocate(dd, y, N);
  se->deallocate(dd, z, N);
}

/* ---- many threads at once ---- */

typedef struct stress_arg {
  sim_dev *dev;
  int seed;
  int bad;
} stress_arg;

static void *stress_thread(void *p) {
  stress_arg *a = (stress_arg *)p;
  const dpp_stream_executor_t *se = a->dev->se;
  void *dd = a->dev->dd;
  void *s = NULL, *e = NULL;
  unsigned char in[256], out[256];
  if (se->create_stream(dd, &s) != DPP_OK || se->create_event(dd, &e) != DPP_OK) {
    a->bad++;
    return NULL;
  }
  for (int i = 0; i < 40; i++) {
    dpp_addr_t m = 0;
    if (se->allocate(dd, 256, &m) != DPP_OK) {
      a->bad++;
      continue;
    }
    fill(in, sizeof in, (unsigned)(a->seed * 1000 + i));
    memset(out, 0, sizeof out);
    if (se->memcpy_htod_async(dd, s, m, in, 256) != DPP_OK || se->record_event(dd, s, e) != DPP_OK ||
        se->stream_wait_event(dd, NULL, e) != DPP_OK || se->memcpy_dtoh_async(dd, NULL, out, m, 256) != DPP_OK) {
      a->bad++;
    }
    /* The default stream is shared by all threads: wait on our own event's consumer. */
    void *e2 = NULL;
    if (se->create_event(dd, &e2) != DPP_OK || se->record_event(dd, NULL, e2) != DPP_OK ||
        se->event_synchronize(dd, e2) != DPP_OK) {
      a->bad++;
    }
    se->destroy_event(dd, e2);
    if (memcmp(in, out, sizeof in) != 0) {
      a->bad++;
    }
    se->deallocate(dd, m, 256);
  }
  se->destroy_event(dd, e);
  se->destroy_stream(dd, s);
  return NULL;
}

static void test_stress(sim_dev *d) {
  enum { T = 6 };
  pthread_t th[T];
  stress_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (stress_arg){d, i, 0};
    CHECK(pthread_create(&th[i], NULL, stress_thread, &args[i]) == 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(args[i].bad == 0);
  }
  CHECK_OK(d->se->synchronize_all(d->dd));
}

static void test_event_timing(sim_dev *d0, sim_dev *d1); /* after the gate, below */

/* ---- the main load: 2 devices, latency ---- */

static void test_main_load(void) {
  static const char *const opts[] = {"devices=2",  "memory=1M",           "latency_us=2000", "device_type=GPU",
                                     "priority=0", "platform=SIMCUDA", NULL};
  fake_host h;
  CHECK_OK(load(&h, opts));
  CHECK(h.registered == 1);
  CHECK(strcmp(h.platform.name, "SIMCUDA") == 0 && strcmp(h.platform.device_type, "GPU") == 0);
  CHECK(h.platform.priority == 0 && h.platform.device_count == 2 && h.platform.flags == 0);
  CHECK(h.platform.struct_size == DPP_PLATFORM_STRUCT_SIZE && h.platform.ext == NULL);
  CHECK(h.platform.destroy_platform != NULL && h.platform.vendor && h.platform.version);

  sim_dev d0, d1, dx;
  CHECK_OK(create(&h, 0, &d0));
  CHECK_OK(create(&h, 1, &d1));
  CHECK(d0.dd && d1.dd && d0.dd != d1.dd && d0.se);
  CHECK(d0.d.total_memory == (1u << 20) && d0.d.numa_node == -1 && d0.d.hardware_name && d0.d.pci_bus_id);
  check_executor(d0.se);
  clear_err();
  CHECK_ST(create(&h, 2, &dx), DPP_INVALID_ARGUMENT);
  CHECK(err_has("ordinal 2"));
  CHECK_ST(create(&h, -1, &dx), DPP_INVALID_ARGUMENT);
  CHECK_ST(create(&h, 0, &dx), DPP_ALREADY_EXISTS);
  {
    dpp_device_t small;
    memset(&small, 0, sizeof small);
    small.struct_size = 16;
    CHECK_ST(h.platform.create_device(h.platform.platform_data, 1, &small), DPP_INVALID_ARGUMENT);
  }

  test_memory(&d0, &d1);
  test_streams(&h, &d0, &d1);
  test_event_timing(&d0, &d1);
  test_stress(&d1);

  /* Device 0 is clean: no warning. Device 1 leaks an allocation, a stream and an event: the
   * plugin warns and still frees everything. */
  int w0 = atomic_load(&h.warnings);
  destroy(&h, &d0);
  CHECK(atomic_load(&h.warnings) == w0);
  dpp_addr_t leak = 0;
  void *ls = NULL, *le = NULL;
  CHECK_OK(d1.se->allocate(d1.dd, 100, &leak));
  CHECK_OK(d1.se->create_stream(d1.dd, &ls));
  CHECK_OK(d1.se->create_event(d1.dd, &le));
  CHECK_OK(d1.se->memset_async(d1.dd, ls, leak, 9, 100));
  CHECK_OK(d1.se->record_event(d1.dd, ls, le));
  destroy(&h, &d1);
  CHECK(atomic_load(&h.warnings) >= w0 + 2);

  /* A device can be created again after it was destroyed. */
  CHECK_OK(create(&h, 0, &d0));
  destroy(&h, &d0);
  unload(&h);
}

/* ---- fault injection ---- */

static void test_faults(void) {
  static const char *const opts[] = {"fail_alloc_after=2", "fail_copy_after=3", "memory=64K", NULL};
  fake_host h;
  sim_dev d;
  CHECK_OK(load(&h, opts));
  CHECK(strcmp(h.platform.name, "SIM") == 0 && strcmp(h.platform.device_type, "SIM") == 0);
  CHECK(h.platform.device_count == 1);
  CHECK_OK(create(&h, 0, &d));
  CHECK(d.d.total_memory == 65536);
  const dpp_stream_executor_t *se = d.se;
  void *dd = d.dd;

  dpp_addr_t a = 0, b = 0, c = 0;
  CHECK_OK(se->allocate(dd, 100, &a));
  CHECK_OK(se->allocate(dd, 100, &b));
  clear_err();
  CHECK_ST(se->allocate(dd, 100, &c), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("fail_alloc_after=2") && err_has("#3"));
  clear_err();
  CHECK_ST(se->allocate(dd, 100, &c), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("fail_alloc_after"));
  se->deallocate(dd, b, 100);
  CHECK_ST(se->allocate(dd, 100, &c), DPP_RESOURCE_EXHAUSTED);

  unsigned char buf[100] = {1, 2, 3}, out[100];
  CHECK_OK(se->memcpy_htod(dd, a, buf, 100));      /* copy 1 */
  CHECK_OK(se->memcpy_dtoh(dd, out, a, 100));      /* copy 2 */
  CHECK_OK(se->memcpy_dtod(dd, a + 50, a, 50));    /* copy 3 */
  clear_err();
  CHECK_ST(se->memcpy_htod(dd, a, buf, 100), DPP_RESOURCE_EXHAUSTED); /* copy 4 */
  CHECK(err_has("injected copy failure") && err_has("fail_copy_after=3"));
  CHECK_OK(se->memset(dd, a, 7, 100)); /* not a copy */

  /* Async: accepted at enqueue, reported by the next synchronize, then cleared. */
  void *s = NULL, *e = NULL;
  int32_t status = -1;
  CHECK_OK(se->create_stream(dd, &s));
  CHECK_OK(se->create_event(dd, &e));
  CHECK_OK(se->memcpy_dtoh_async(dd, s, out, a, 100)); /* copy 5: fails on the stream */
  CHECK_OK(se->memcpy_htod_async(dd, s, a, buf, 100)); /* copy 6: fails too; the first is kept */
  CHECK_OK(se->record_event(dd, s, e));
  CHECK_OK(se->memset_async(dd, s, a, 8, 100));
  clear_err();
  CHECK_ST(se->event_synchronize(dd, e), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("injected copy failure"));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_ERROR);
  /* An event its stream failed before reaching has no time (ABI 1.4), either way round. */
  {
    void *ok_event = NULL;
    int64_t ns = 12345;
    CHECK_OK(se->create_event(dd, &ok_event));
    CHECK_OK(se->record_event(dd, NULL, ok_event));
    CHECK_OK(se->event_synchronize(dd, ok_event));
    clear_err();
    CHECK_ST(se->event_elapsed_ns(dd, e, ok_event, &ns), DPP_FAILED_PRECONDITION);
    CHECK(err_has("event_elapsed_ns") && err_has("start event") && err_has("its stream failed before reaching it") &&
          err_has("injected copy failure"));
    clear_err();
    CHECK_ST(se->event_elapsed_ns(dd, ok_event, e, &ns), DPP_FAILED_PRECONDITION);
    CHECK(err_has("end event") && err_has("its stream failed before reaching it"));
    CHECK_ST(se->event_elapsed_ns(dd, e, e, &ns), DPP_FAILED_PRECONDITION);
    CHECK(ns == 12345); /* written only on success */
    CHECK_OK(se->event_elapsed_ns(dd, ok_event, ok_event, &ns));
    CHECK(ns == 0);
    se->destroy_event(dd, ok_event);
  }
  clear_err();
  CHECK_ST(se->synchronize_stream(dd, s), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("memcpy_dtoh_async") && err_has("copy #5"));
  CHECK_OK(se->synchronize_stream(dd, s));
  CHECK_OK(se->record_event(dd, s, e));
  CHECK_OK(se->event_synchronize(dd, e));
  CHECK_OK(se->event_status(dd, e, &status));
  CHECK(status == DPP_EVENT_COMPLETE);
  /* synchronize_all reports (and clears) a stream's error too. */
  CHECK_OK(se->memcpy_dtod_async(dd, s, a, a + 50, 10));
  clear_err();
  CHECK_ST(se->synchronize_all(dd), DPP_RESOURCE_EXHAUSTED);
  CHECK(err_has("copy #7"));
  CHECK_OK(se->synchronize_stream(dd, s));
  CHECK_OK(se->memcpy_dtoh(dd, out, a, 0)); /* size 0: not a copy, fine */

  se->destroy_event(dd, e);
  se->destroy_stream(dd, s);
  se->deallocate(dd, a, 100);
  destroy(&h, &d);
  unload(&h);
}

/* ---- options ---- */

static void test_bad_option(const char *opt, const char *name) {
  const char *opts[] = {opt, NULL};
  fake_host h;
  dpp_status_t st = load(&h, opts);
  CHECK(st == DPP_INVALID_ARGUMENT);
  CHECK(h.registered == 0);
  if (st != DPP_INVALID_ARGUMENT || !err_has(name) || !err_has("invalid")) {
    g_failures++;
    fprintf(stderr, "FAIL option %s: status %d, message '%s'\n", opt, (int)st, g_err);
  }
  if (st == DPP_OK) {
    unload(&h);
  }
}

static void test_options(void) {
  test_bad_option("devices=0", "devices");
  test_bad_option("devices=17", "devices");
  test_bad_option("devices=abc", "devices");
  test_bad_option("devices=-1", "devices");
  test_bad_option("devices=", "devices");
  test_bad_option("devices= 2", "devices");
  test_bad_option("memory=12Q", "memory");
  test_bad_option("memory=100", "memory");
  test_bad_option("memory=-1", "memory");
  test_bad_option("memory=1P", "memory");
  test_bad_option("memory=M", "memory");
  test_bad_option("memory=99999999999999999999999", "memory");
  test_bad_option("memory=1T", "memory");
  test_bad_option("device_type=gpu", "device_type");
  test_bad_option("device_type=", "device_type");
  test_bad_option("device_type=GPU-2", "device_type");
  test_bad_option("device_type=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "device_type");
  test_bad_option("platform=1ABC", "platform");
  test_bad_option("platform=Sim", "platform");
  test_bad_option("priority=x", "priority");
  test_bad_option("priority=99999999999", "priority");
  test_bad_option("priority=1.5", "priority");
  test_bad_option("latency_us=-5", "latency_us");
  test_bad_option("latency_us=20000000", "latency_us");
  test_bad_option("fail_alloc_after=x", "fail_alloc_after");
  test_bad_option("fail_alloc_after=-1", "fail_alloc_after");
  test_bad_option("fail_copy_after=", "fail_copy_after");
  test_bad_option("fail_init=maybe", "fail_init");
  test_bad_option("no_suballocator=2", "no_suballocator");

  /* Valid spellings. */
  static const struct {
    const char *opt;
    uint64_t memory;
  } sizes[] = {{"memory=2M", 2u << 20}, {"memory=4096", 4096}, {"memory=8KiB", 8192}, {"memory=5kb", 5120},
               {"memory=1G", 1u << 30}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    const char *opts[] = {sizes[i].opt, NULL};
    fake_host h;
    sim_dev d;
    dpp_status_t st = load(&h, opts);
    CHECK_OK(st);
    if (st != DPP_OK) {
      continue;
    }
    CHECK_OK(create(&h, 0, &d));
    CHECK(d.d.total_memory == sizes[i].memory);
    destroy(&h, &d);
    unload(&h);
  }
  {
    static const char *const opts[] = {"priority=-7", "no_suballocator=1", "devices=16", "fail_init=0",
                                       "latency_us=0", NULL};
    fake_host h;
    CHECK_OK(load(&h, opts));
    CHECK(h.platform.priority == -7 && h.platform.flags == DPP_PLATFORM_NO_SUBALLOCATOR);
    CHECK(h.platform.device_count == 16);
    unload(&h);
  }
}

/* ---- native kernels (ABI 1.1) ---- */

/* A tensor of a kernel test: host data (inputs) and its device copy. */
typedef struct ktensor {
  int32_t dtype;
  int rank;
  int64_t shape[8];
  const void *host; /* input data; NULL for an output (filled with 0xEE bytes) */
  dpp_addr_t addr;  /* 0 for an empty tensor */
  uint64_t bytes;
} ktensor;

static size_t esize(int32_t dt) {
  return dt == DPP_DTYPE_F64 || dt == DPP_DTYPE_I64 ? 8 : dt == DPP_DTYPE_U8 || dt == DPP_DTYPE_BOOL ? 1 : 4;
}

static int64_t numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    n *= shape[i];
  }
  return n;
}

static ktensor kt(int32_t dtype, int rank, const int64_t *shape, const void *host) {
  ktensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank; i++) {
    t.shape[i] = shape[i];
  }
  t.host = host;
  t.bytes = (uint64_t)numel(rank, shape) * esize(dtype);
  return t;
}

/* Allocates the device copy and uploads the data (or 0xEE bytes). No CHECK: threads use it. */
static bool kt_upload_quiet(sim_dev *d, ktensor *t) {
  t->addr = 0;
  if (!t->bytes) {
    return true;
  }
  if (d->se->allocate(d->dd, t->bytes, &t->addr) != DPP_OK) {
    return false;
  }
  if (t->host) {
    return d->se->memcpy_htod(d->dd, t->addr, t->host, t->bytes) == DPP_OK;
  }
  return d->se->memset(d->dd, t->addr, 0xEE, t->bytes) == DPP_OK;
}

static void kt_upload(sim_dev *d, ktensor *t) {
  CHECK(kt_upload_quiet(d, t));
}

static void kt_free(sim_dev *d, ktensor *t) {
  if (t->addr) {
    d->se->deallocate(d->dd, t->addr, t->bytes);
    t->addr = 0;
  }
}

/* Calls the kernel's compute with a context built here; afterwards scribbles over the tensor
 * descriptions and shape arrays (valid only during compute), so a kernel that kept pointers to
 * them computes garbage. */
static dpp_status_t call_kernel(const fake_kernel *k, sim_dev *d, void *stream, const ktensor *in, int nin,
                                const ktensor *out, const fake_attrs *attrs) {
  int64_t shapes[4][8];
  dpp_tensor_t ins[3], outs[1];
  for (int i = 0; i <= nin; i++) {
    const ktensor *t = i == nin ? out : &in[i];
    dpp_tensor_t *dt = i == nin ? &outs[0] : &ins[i];
    memcpy(shapes[i], t->shape, sizeof shapes[i]);
    *dt = (dpp_tensor_t){DPP_TENSOR_STRUCT_SIZE, NULL, t->dtype, t->rank, shapes[i], t->addr, t->bytes};
  }
  dpp_kernel_context_t cx = {DPP_KERNEL_CONTEXT_STRUCT_SIZE, NULL, d->dd, stream, (size_t)nin, ins, 1, outs,
                             attrs, k->kernel_data};
  clear_err();
  dpp_status_t st = k->compute(&cx);
  memset(shapes, 0x7F, sizeof shapes);
  memset(ins, 0x5C, sizeof ins);
  memset(outs, 0x5C, sizeof outs);
  return st;
}

/* ---- plain C references ---- */

static double ld_f(int32_t dt, const void *p, int64_t i) {
  return dt == DPP_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static int64_t ld_i(int32_t dt, const void *p, int64_t i) {
  return dt == DPP_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static double dabs(double v) {
  return v < 0 ? -v : v;
}

static bool is_float(int32_t dt) {
  return dt == DPP_DTYPE_F32 || dt == DPP_DTYPE_F64;
}

/* Row-major index into `t` of the output coordinate `coord` (rank `r`), NumPy-broadcast. */
static int64_t bcast_index(const ktensor *t, int r, const int64_t *coord, int skip_last) {
  int64_t idx = 0;
  int tr = t->rank - skip_last, rr = r - skip_last;
  for (int i = 0; i < tr; i++) {
    int64_t c = coord[i + (rr - tr)];
    idx = idx * t->shape[i] + (t->shape[i] == 1 ? 0 : c);
  }
  return idx;
}

static void unravel(int64_t i, int r, const int64_t *shape, int64_t *coord) {
  for (int k = r - 1; k >= 0; k--) {
    coord[k] = shape[k] ? i % shape[k] : 0;
    i = shape[k] ? i / shape[k] : 0;
  }
}

/* Checks `got` (the output) against the reference `want` (doubles for floats, int64 for ints). */
static bool same_values(int32_t dt, const void *got, const double *wantf, const int64_t *wanti, int64_t n,
                        double rtol) {
  for (int64_t i = 0; i < n; i++) {
    if (is_float(dt)) {
      double g = ld_f(dt, got, i), w = dt == DPP_DTYPE_F32 ? (double)(float)wantf[i] : wantf[i];
      double tol = rtol * (dabs(w) + 1.0);
      if (!(dabs(g - w) <= tol) && !(g == w)) {
        fprintf(stderr, "  element %" PRId64 ": got %.17g, want %.17g\n", i, g, w);
        return false;
      }
    } else {
      int64_t g = ld_i(dt, got, i), w = dt == DPP_DTYPE_I32 ? (int64_t)(int32_t)(uint32_t)(uint64_t)wanti[i] : wanti[i];
      if (g != w) {
        fprintf(stderr, "  element %" PRId64 ": got %" PRId64 ", want %" PRId64 "\n", i, g, w);
        return false;
      }
    }
  }
  return true;
}

static void ref_binary(bool mul, const ktensor *x, const ktensor *y, const ktensor *z, double *rf, int64_t *ri) {
  int64_t n = numel(z->rank, z->shape), coord[8];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, z->rank, z->shape, coord);
    int64_t a = bcast_index(x, z->rank, coord, 0), b = bcast_index(y, z->rank, coord, 0);
    if (is_float(z->dtype)) {
      double p = ld_f(x->dtype, x->host, a), q = ld_f(y->dtype, y->host, b);
      rf[i] = z->dtype == DPP_DTYPE_F32 ? (double)(mul ? (float)p * (float)q : (float)p + (float)q) : mul ? p * q : p + q;
    } else {
      uint64_t p = (uint64_t)ld_i(x->dtype, x->host, a), q = (uint64_t)ld_i(y->dtype, y->host, b);
      ri[i] = (int64_t)(mul ? p * q : p + q);
    }
  }
}

static void ref_matmul(bool ta, bool tb, const ktensor *a, const ktensor *b, const ktensor *c, double *rf) {
  int r = c->rank;
  int64_t m = c->shape[r - 2], n = c->shape[r - 1];
  int64_t k = ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
  int64_t total = numel(r, c->shape), coord[8];
  for (int64_t e = 0; e < total; e++) {
    unravel(e, r, c->shape, coord);
    int64_t i = coord[r - 2], j = coord[r - 1];
    int64_t ba = bcast_index(a, r, coord, 2) * m * k, bb = bcast_index(b, r, coord, 2) * k * n;
    double acc = 0;
    for (int64_t p = 0; p < k; p++) {
      double av = ld_f(a->dtype, a->host, ba + (ta ? p * m + i : i * k + p));
      double bv = ld_f(b->dtype, b->host, bb + (tb ? j * k + p : p * n + j));
      acc += av * bv;
    }
    rf[e] = acc;
  }
}

/* `axes` already normalized into a mask; the output has the kept dims in order. */
static void ref_reduce_sum(const ktensor *x, const bool *reduced, int64_t nout, double *rf, int64_t *ri) {
  int64_t n = numel(x->rank, x->shape), coord[8];
  for (int64_t o = 0; o < nout; o++) {
    rf[o] = 0;
    ri[o] = 0;
  }
  static long double acc[512]; /* nout <= 512 in these tests */
  memset(acc, 0, sizeof acc);
  for (int64_t i = 0; i < n; i++) {
    unravel(i, x->rank, x->shape, coord);
    int64_t o = 0;
    for (int d = 0; d < x->rank; d++) {
      if (!reduced[d]) {
        o = o * x->shape[d] + coord[d];
      }
    }
    if (is_float(x->dtype)) {
      acc[o] += ld_f(x->dtype, x->host, i);
    } else {
      ri[o] = (int64_t)((uint64_t)ri[o] + (uint64_t)ld_i(x->dtype, x->host, i));
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    if (is_float(x->dtype)) {
      rf[o] = (double)acc[o];
    }
  }
}

/* ---- a gate: a host callback that holds its stream until the test opens it ---- */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
} gate;

static void gate_wait(void *arg) {
  gate *g = (gate *)arg;
  pthread_mutex_lock(&g->mu);
  while (!g->open) {
    pthread_cond_wait(&g->cv, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
}

static void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = false;
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(gate *g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}

/* ---- timed events (ABI 1.4): the main load's devices, latency_us=2000 ---- */

static void test_event_timing(sim_dev *d0, sim_dev *d1) {
  const dpp_stream_executor_t *se = d0->se;
  void *dd = d0->dd;
  const int64_t latency_ns = 2000 * 1000; /* latency_us=2000 */
  enum { N = 256 };
  dpp_addr_t x = 0;
  void *s1 = NULL, *s2 = NULL, *e0 = NULL, *e1 = NULL, *e2 = NULL, *never = NULL;
  int64_t ns = -1, back = 1;
  CHECK_OK(se->allocate(dd, N, &x));
  CHECK_OK(se->create_stream(dd, &s1));
  CHECK_OK(se->create_stream(dd, &s2));
  CHECK_OK(se->create_event(dd, &e0));
  CHECK_OK(se->create_event(dd, &e1));
  CHECK_OK(se->create_event(dd, &e2));
  CHECK_OK(se->create_event(dd, &never));

  /* Around one memset (latency_us before it runs): at least the latency, and positive. */
  CHECK_OK(se->record_event(dd, s1, e0));
  CHECK_OK(se->memset_async(dd, s1, x, 0x5A, N));
  CHECK_OK(se->record_event(dd, s1, e1));
  CHECK_OK(se->synchronize_stream(dd, s1));
  CHECK_OK(se->event_elapsed_ns(dd, e0, e1, &ns));
  CHECK(ns >= latency_ns && ns > 0);
  /* Reversed: the same time, negative. The same event twice: 0. */
  CHECK_OK(se->event_elapsed_ns(dd, e1, e0, &back));
  CHECK(back == -ns);
  CHECK_OK(se->event_elapsed_ns(dd, e1, e1, &back));
  CHECK(back == 0);

  /* Three memsets: at least three latencies. */
  CHECK_OK(se->record_event(dd, s1, e0));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(se->memset_async(dd, s1, x, (unsigned char)i, N));
  }
  CHECK_OK(se->record_event(dd, s1, e1));
  CHECK_OK(se->event_synchronize(dd, e1));
  CHECK_OK(se->event_elapsed_ns(dd, e0, e1, &ns));
  CHECK(ns >= 3 * latency_ns);

  /* Events of two streams of the device (and of the default stream): s2 waits for e0 of s1,
   * then a memset, then e2. */
  CHECK_OK(se->record_event(dd, s1, e0));
  CHECK_OK(se->stream_wait_event(dd, s2, e0));
  CHECK_OK(se->memset_async(dd, s2, x, 0x11, N));
  CHECK_OK(se->record_event(dd, s2, e2));
  CHECK_OK(se->stream_wait_event(dd, NULL, e2));
  CHECK_OK(se->memset_async(dd, NULL, x, 0x22, N));
  CHECK_OK(se->record_event(dd, NULL, e1));
  CHECK_OK(se->synchronize_all(dd));
  CHECK_OK(se->event_elapsed_ns(dd, e0, e2, &ns));
  CHECK(ns >= latency_ns);
  CHECK_OK(se->event_elapsed_ns(dd, e2, e1, &ns));
  CHECK(ns >= latency_ns);
  CHECK_OK(se->event_elapsed_ns(dd, e1, e0, &ns));
  CHECK(ns <= -2 * latency_ns);

  /* Never recorded: no time (though event_status says complete), either way round. */
  clear_err();
  ns = 777;
  CHECK_ST(se->event_elapsed_ns(dd, never, e0, &ns), DPP_FAILED_PRECONDITION);
  CHECK(err_has("event_elapsed_ns") && err_has("start event") && err_has("was never recorded"));
  clear_err();
  CHECK_ST(se->event_elapsed_ns(dd, e0, never, &ns), DPP_FAILED_PRECONDITION);
  CHECK(err_has("end event") && err_has("was never recorded"));
  CHECK_ST(se->event_elapsed_ns(dd, never, never, &ns), DPP_FAILED_PRECONDITION);
  CHECK(ns == 777); /* written only on success */

  /* Pending: a gate holds s1, so its record is not reached; re-recording replaces the time
   * (the latest record counts), and it is there once the gate opens. */
  {
    gate g;
    gate_init(&g);
    CHECK_OK(se->host_callback(dd, s1, gate_wait, &g));
    CHECK_OK(se->record_event(dd, s1, e1));
    clear_err();
    CHECK_ST(se->event_elapsed_ns(dd, e0, e1, &ns), DPP_FAILED_PRECONDITION);
    CHECK(err_has("end event") && err_has("is still pending"));
    clear_err();
    CHECK_ST(se->event_elapsed_ns(dd, e1, e0, &ns), DPP_FAILED_PRECONDITION);
    CHECK(err_has("start event") && err_has("is still pending"));
    CHECK(ns == 777);
    gate_open(&g);
    CHECK_OK(se->event_synchronize(dd, e1));
    CHECK_OK(se->event_elapsed_ns(dd, e0, e1, &ns));
    CHECK(ns >= 3 * latency_ns); /* s2's and the default stream's memsets (synchronize_all), the callback */
    gate_destroy(&g);
  }

  /* Bad arguments: NULL out pointer, unknown, destroyed and another device's events. */
  clear_err();
  CHECK_ST(se->event_elapsed_ns(dd, e0, e1, NULL), DPP_INVALID_ARGUMENT);
  CHECK(err_has("event_elapsed_ns") && err_has("out_ns is NULL"));
  clear_err();
  CHECK_ST(se->event_elapsed_ns(dd, (void *)&ns, e1, &ns), DPP_INVALID_ARGUMENT);
  CHECK(err_has("start") && err_has("not a live event"));
  clear_err();
  CHECK_ST(se->event_elapsed_ns(dd, e0, NULL, &ns), DPP_INVALID_ARGUMENT);
  CHECK(err_has("end") && err_has("not a live event"));
  {
    void *gone = NULL, *oe = NULL;
    CHECK_OK(se->create_event(dd, &gone));
    CHECK_OK(se->record_event(dd, s1, gone));
    CHECK_OK(se->event_synchronize(dd, gone));
    se->destroy_event(dd, gone);
    CHECK_ST(se->event_elapsed_ns(dd, e0, gone, &ns), DPP_INVALID_ARGUMENT);
    CHECK_OK(d1->se->create_event(d1->dd, &oe));
    CHECK_OK(d1->se->record_event(d1->dd, NULL, oe));
    CHECK_OK(d1->se->event_synchronize(d1->dd, oe));
    CHECK_OK(d1->se->event_elapsed_ns(d1->dd, oe, oe, &ns));
    CHECK(ns == 0);
    clear_err();
    CHECK_ST(se->event_elapsed_ns(dd, oe, e0, &ns), DPP_INVALID_ARGUMENT);
    CHECK(err_has("not a live event of this device"));
    CHECK_ST(se->event_elapsed_ns(NULL, e0, e1, &ns), DPP_INVALID_ARGUMENT);
    d1->se->destroy_event(d1->dd, oe);
  }
  CHECK(ns == 0);

  se->destroy_event(dd, e0);
  se->destroy_event(dd, e1);
  se->destroy_event(dd, e2);
  se->destroy_event(dd, never);
  se->destroy_stream(dd, s1);
  se->destroy_stream(dd, s2);
  se->deallocate(dd, x, N);
}

/* ---- more ops than a stream's ring holds ---- */

typedef struct seq_ctx {
  const dpp_stream_executor_t *se;
  void *dd, *stream;
  int index;
  int *order;
  atomic_int *count;
  atomic_int *enqueue_status; /* of the callback one of them enqueues on its own stream */
  struct seq_ctx *then;       /* that callback's context */
} seq_ctx;

static void cb_seq(void *arg) {
  seq_ctx *c = (seq_ctx *)arg;
  int pos = atomic_fetch_add(c->count, 1);
  c->order[pos] = c->index;
}

static void cb_seq_enqueue(void *arg) {
  seq_ctx *c = (seq_ctx *)arg;
  cb_seq(arg);
  /* The stream's own worker enqueues on it while the ring is full: it must not wait for
   * itself. The op runs after everything queued before. */
  atomic_store(c->enqueue_status, c->se->host_callback(c->dd, c->stream, cb_seq, c->then));
}

/* A gate holds the worker while far more ops than its ring holds are queued (the rest go to
 * the overflow list): every op runs once, in order, a callback may enqueue on its own full
 * stream, and a kernel queued behind them all sees what they did. */
static void test_ring_overflow(void) {
  static const char *const opts[] = {"devices=1", NULL};
  fake_host h;
  CHECK_OK(load(&h, opts));
  sim_dev d;
  CHECK_OK(create(&h, 0, &d));
  const dpp_stream_executor_t *se = d.se;
  void *dd = d.dd, *s = NULL;
  CHECK_OK(se->create_stream(dd, &s));
  enum { K = 2000 }; /* several rings' worth */
  static int order[K + 1];
  static seq_ctx ctx[K + 1];
  atomic_int count = 0, status = -1;
  gate g;
  gate_init(&g);
  CHECK_OK(se->host_callback(dd, s, gate_wait, &g));
  for (int i = 0; i <= K; i++) {
    ctx[i] = (seq_ctx){se, dd, s, i, order, &count, &status, &ctx[K]};
  }
  for (int i = 0; i < K; i++) {
    CHECK_OK(se->host_callback(dd, s, i == K / 2 ? cb_seq_enqueue : cb_seq, &ctx[i]));
  }
  dpp_addr_t x = 0;
  CHECK_OK(se->allocate(dd, 64, &x));
  CHECK_OK(se->memset_async(dd, s, x, 0x3C, 64));
  CHECK(atomic_load(&count) == 0);
  gate_open(&g);
  CHECK_OK(se->synchronize_stream(dd, s));
  /* The callback's own enqueue may come after that synchronize began (which then need not
   * wait for it); it came before this one. */
  CHECK_OK(se->synchronize_stream(dd, s));
  CHECK(atomic_load(&status) == DPP_OK);
  CHECK(atomic_load(&count) == K + 1);
  bool in_order = true;
  for (int i = 0; i <= K; i++) {
    in_order = in_order && order[i] == i; /* the callback's own enqueue ran last */
  }
  CHECK(in_order);
  unsigned char got[64];
  CHECK_OK(se->memcpy_dtoh(dd, got, x, sizeof got));
  CHECK(all_eq(got, sizeof got, 0x3C));
  se->deallocate(dd, x, 64);
  gate_destroy(&g);
  se->destroy_stream(dd, s);
  destroy(&h, &d);
  unload(&h);
}

static void *open_gate_later(void *arg) {
  struct timespec t = {0, 2000000}; /* 2 ms: the launching thread has filled the ring by then */
  nanosleep(&t, NULL);
  gate_open((gate *)arg);
  return NULL;
}

/* Kernel launches that find the ring full wait for a slot (back-pressure) and, when the worker
 * cannot free one (its stream is held by a host callback), spill to the overflow list after a
 * bound: nothing hangs and every launch runs once, in order. acc += 1, in place, 600 times (a
 * ring is 256 slots): behind a gate opened only after the launches (they spill), then behind
 * one another thread opens while they are launched (they wait for slots). */
static void test_kernel_backpressure(void) {
  static const char *const opts[] = {"devices=1", NULL};
  fake_host h;
  CHECK_OK(load(&h, opts));
  sim_dev d;
  CHECK_OK(create(&h, 0, &d));
  const fake_kernel *add = find_kernel(&h, "Add");
  CHECK(add != NULL);
  void *s = NULL;
  CHECK_OK(d.se->create_stream(d.dd, &s));
  enum { N = 16, LAUNCHES = 600 };
  static const int64_t shape[1] = {N};
  float zeros[N] = {0}, ones[N];
  for (int i = 0; i < N; i++) {
    ones[i] = 1.0f;
  }
  for (int round = 0; round < 2; round++) {
    ktensor acc = kt(DPP_DTYPE_F32, 1, shape, zeros), one = kt(DPP_DTYPE_F32, 1, shape, ones);
    kt_upload(&d, &acc);
    kt_upload(&d, &one);
    ktensor in[2] = {acc, one};
    gate g;
    gate_init(&g);
    CHECK_OK(d.se->host_callback(d.dd, s, gate_wait, &g));
    pthread_t opener;
    if (round == 1) {
      CHECK(pthread_create(&opener, NULL, open_gate_later, &g) == 0);
    }
    bool all_ok = true;
    for (int i = 0; i < LAUNCHES; i++) {
      all_ok = all_ok && call_kernel(add, &d, s, in, 2, &acc, NULL) == DPP_OK;
    }
    CHECK(all_ok);
    if (round == 0) {
      gate_open(&g);
    } else {
      CHECK(pthread_join(opener, NULL) == 0);
    }
    CHECK_OK(d.se->synchronize_stream(d.dd, s));
    float got[N];
    CHECK_OK(d.se->memcpy_dtoh(d.dd, got, acc.addr, sizeof got));
    bool right = true;
    for (int i = 0; i < N; i++) {
      right = right && got[i] == (float)LAUNCHES;
    }
    CHECK(right);
    gate_destroy(&g);
    kt_free(&d, &acc);
    kt_free(&d, &one);
  }
  d.se->destroy_stream(d.dd, s);
  destroy(&h, &d);
  unload(&h);
}

/* Runs a kernel on `stream`, synchronizes, downloads the output into `got` (bytes of out). */
static bool run_sync(const fake_kernel *k, sim_dev *d, void *stream, ktensor *in, int nin, ktensor *out,
                     const fake_attrs *attrs, void *got) {
  for (int i = 0; i < nin; i++) {
    kt_upload(d, &in[i]);
  }
  kt_upload(d, out);
  dpp_status_t st = call_kernel(k, d, stream, in, nin, out, attrs);
  CHECK_OK(st);
  CHECK_OK(d->se->synchronize_stream(d->dd, stream));
  if (out->bytes) {
    CHECK_OK(d->se->memcpy_dtoh(d->dd, got, out->addr, out->bytes));
  }
  for (int i = 0; i < nin; i++) {
    kt_free(d, &in[i]);
  }
  kt_free(d, out);
  return st == DPP_OK;
}

/* Deterministic data: small integers (exact in every dtype), some negative. */
static void gen(int32_t dt, void *p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = (int64_t)((i * 7 + seed * 13) % 19) - 9;
    switch (dt) {
    case DPP_DTYPE_F32: ((float *)p)[i] = (float)v * 0.5f; break;
    case DPP_DTYPE_F64: ((double *)p)[i] = (double)v * 0.25; break;
    case DPP_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
  }
}

/* Add or Mul of x (shape xs) and y (shape ys) in dtype dt, checked against the reference. */
static void check_binary(const fake_host *h, sim_dev *d, void *stream, const char *op, int32_t dt, int rx,
                         const int64_t *xs, int ry, const int64_t *ys, int rz, const int64_t *zs) {
  const fake_kernel *k = find_kernel(h, op);
  CHECK(k != NULL);
  if (!k) {
    return;
  }
  static unsigned char xb[8 * 256], yb[8 * 256], got[8 * 256];
  static double rf[256];
  static int64_t ri[256];
  ktensor in[2] = {kt(dt, rx, xs, xb), kt(dt, ry, ys, yb)}, out = kt(dt, rz, zs, NULL);
  gen(dt, xb, numel(rx, xs), 1);
  gen(dt, yb, numel(ry, ys), 2);
  ref_binary(strcmp(op, "Mul") == 0, &in[0], &in[1], &out, rf, ri);
  if (run_sync(k, d, stream, in, 2, &out, NULL, got)) {
    bool ok = same_values(dt, got, rf, ri, numel(rz, zs), 0.0);
    CHECK(ok);
    if (!ok) {
      fprintf(stderr, "  (%s, dtype %d)\n", op, (int)dt);
    }
  }
}

static void check_matmul(const fake_host *h, sim_dev *d, void *stream, int32_t dt, bool ta, bool tb, int ra,
                         const int64_t *as, int rb, const int64_t *bs, int rc, const int64_t *cs) {
  const fake_kernel *k = find_kernel(h, "MatMul");
  CHECK(k != NULL);
  if (!k) {
    return;
  }
  static unsigned char ab[8 * 512], bb[8 * 512], got[8 * 512];
  static double rf[512];
  ktensor in[2] = {kt(dt, ra, as, ab), kt(dt, rb, bs, bb)}, out = kt(dt, rc, cs, NULL);
  gen(dt, ab, numel(ra, as), 3);
  gen(dt, bb, numel(rb, bs), 4);
  ref_matmul(ta, tb, &in[0], &in[1], &out, rf);
  fake_attrs attrs = {0};
  attrs_add_bool(&attrs, "transpose_a", ta);
  attrs_add_bool(&attrs, "transpose_b", tb);
  if (run_sync(k, d, stream, in, 2, &out, &attrs, got)) {
    bool ok = same_values(dt, got, rf, NULL, numel(rc, cs), dt == DPP_DTYPE_F32 ? 1e-6 : 1e-13);
    CHECK(ok);
    if (!ok) {
      fprintf(stderr, "  (MatMul ta=%d tb=%d)\n", (int)ta, (int)tb);
    }
  }
}

/* ReduceSum of x (shape xs) over `axes` (as given: may be negative, empty = all). */
static void check_reduce(const fake_host *h, sim_dev *d, void *stream, int32_t dt, int rx, const int64_t *xs,
                         const int64_t *axes, size_t naxes, bool keep_dims) {
  const fake_kernel *k = find_kernel(h, "ReduceSum");
  CHECK(k != NULL);
  if (!k) {
    return;
  }
  static unsigned char xb[8 * 512], got[8 * 512];
  static double rf[512];
  static int64_t ri[512];
  bool reduced[8] = {false};
  int64_t ys[8] = {0};
  int ry = 0;
  for (size_t i = 0; i < naxes; i++) {
    reduced[axes[i] < 0 ? axes[i] + rx : axes[i]] = true;
  }
  for (int i = 0; i < rx; i++) {
    reduced[i] = reduced[i] || naxes == 0;
    if (!reduced[i]) {
      ys[ry++] = xs[i];
    } else if (keep_dims) {
      ys[ry++] = 1;
    }
  }
  ktensor in = kt(dt, rx, xs, xb), out = kt(dt, ry, ys, NULL);
  gen(dt, xb, numel(rx, xs), 5);
  int64_t nout = numel(ry, ys);
  ref_reduce_sum(&in, reduced, nout, rf, ri);
  fake_attrs attrs = {0};
  attrs_add_ints(&attrs, "axes", axes, naxes);
  attrs_add_bool(&attrs, "keep_dims", keep_dims);
  if (run_sync(k, d, stream, &in, 1, &out, &attrs, got)) {
    bool ok = same_values(dt, got, rf, ri, nout, dt == DPP_DTYPE_F32 ? 1e-6 : 1e-13);
    CHECK(ok);
    if (!ok) {
      fprintf(stderr, "  (ReduceSum dtype %d, %zu axes)\n", (int)dt, naxes);
    }
  }
}

static const int32_t k_numeric[] = {DPP_DTYPE_F32, DPP_DTYPE_F64, DPP_DTYPE_I32, DPP_DTYPE_I64};

/* What SIM registered: 4 kernels for (device_type, platform) at `priority`. */
static void check_registration(const fake_host *h, const char *device_type, const char *platform, int32_t priority) {
  static const char *const ops[] = {"Add", "Mul", "MatMul", "ReduceSum"};
  CHECK(h->nkernels == 4);
  for (int i = 0; i < 4; i++) {
    const fake_kernel *k = find_kernel(h, ops[i]);
    CHECK(k != NULL);
    if (!k) {
      continue;
    }
    CHECK(strcmp(k->device_type, device_type) == 0);
    CHECK(!k->platform_null && strcmp(k->platform, platform) == 0);
    CHECK(k->priority == priority);
    CHECK(k->kernel_data != NULL && k->kernel_data == h->kernels[0].kernel_data);
    if (strcmp(ops[i], "MatMul") == 0) {
      CHECK(k->num_dtypes == 2 && k->dtypes[0] == DPP_DTYPE_F32 && k->dtypes[1] == DPP_DTYPE_F64);
    } else {
      CHECK(k->num_dtypes == 4 && memcmp(k->dtypes, k_numeric, sizeof k_numeric) == 0);
    }
  }
}

/* Kernels from several threads at once, each on its own stream. */
typedef struct kstress_arg {
  const fake_host *h;
  sim_dev *dev;
  int seed;
  int bad;
} kstress_arg;

static void *kstress_thread(void *p) {
  kstress_arg *a = (kstress_arg *)p;
  const fake_kernel *add = find_kernel(a->h, "Add"), *sum = find_kernel(a->h, "ReduceSum");
  sim_dev *d = a->dev;
  void *s = NULL;
  if (!add || !sum || d->se->create_stream(d->dd, &s) != DPP_OK) {
    a->bad++;
    return NULL;
  }
  static const int64_t shx[2] = {4, 16}, shy[1] = {16}, shs[1] = {4};
  for (int it = 0; it < 25; it++) {
    int32_t xv[64], yv[16], zv[64], sv[4];
    for (int i = 0; i < 64; i++) {
      xv[i] = a->seed * 1000 + it * 64 + i;
    }
    for (int i = 0; i < 16; i++) {
      yv[i] = i - it;
    }
    ktensor x = kt(DPP_DTYPE_I32, 2, shx, xv), y = kt(DPP_DTYPE_I32, 1, shy, yv);
    ktensor z = kt(DPP_DTYPE_I32, 2, shx, NULL), r = kt(DPP_DTYPE_I32, 1, shs, NULL);
    if (!kt_upload_quiet(d, &x) || !kt_upload_quiet(d, &y) || !kt_upload_quiet(d, &z) || !kt_upload_quiet(d, &r)) {
      a->bad++;
    }
    ktensor in[2] = {x, y};
    static const int64_t axis1[1] = {1};
    fake_attrs attrs = {0};
    attrs_add_ints(&attrs, "axes", axis1, 1);
    attrs_add_bool(&attrs, "keep_dims", false);
    ktensor zin = z;
    zin.host = zv; /* only its shape and address are used */
    if (call_kernel(add, d, s, in, 2, &z, NULL) != DPP_OK || call_kernel(sum, d, s, &zin, 1, &r, &attrs) != DPP_OK ||
        d->se->memcpy_dtoh_async(d->dd, s, zv, z.addr, z.bytes) != DPP_OK ||
        d->se->memcpy_dtoh_async(d->dd, s, sv, r.addr, r.bytes) != DPP_OK ||
        d->se->synchronize_stream(d->dd, s) != DPP_OK) {
      a->bad++;
    }
    for (int row = 0; row < 4; row++) {
      int32_t want = 0;
      for (int c = 0; c < 16; c++) {
        int32_t e = xv[row * 16 + c] + yv[c];
        want += e;
        if (zv[row * 16 + c] != e) {
          a->bad++;
        }
      }
      if (sv[row] != want) {
        a->bad++;
      }
    }
    kt_free(d, &x);
    kt_free(d, &y);
    kt_free(d, &z);
    kt_free(d, &r);
  }
  d->se->destroy_stream(d->dd, s);
  return NULL;
}

static void test_kernels(void) {
  static const char *const opts[] = {"devices=2", "memory=1M", "latency_us=2000", "device_type=GPU",
                                     "platform=SIMCUDA", "kernel_priority=5", NULL};
  fake_host h;
  CHECK_OK(load(&h, opts));
  check_registration(&h, "GPU", "SIMCUDA", 5);
  if (h.nkernels != 4) {
    unload(&h);
    return;
  }
  const fake_kernel *add = find_kernel(&h, "Add"), *mul = find_kernel(&h, "Mul");
  const fake_kernel *mm = find_kernel(&h, "MatMul"), *sum = find_kernel(&h, "ReduceSum");
  sim_dev d0, d1;
  CHECK_OK(create(&h, 0, &d0));
  CHECK_OK(create(&h, 1, &d1));
  const dpp_stream_executor_t *se = d0.se;
  void *dd = d0.dd, *s = NULL;
  CHECK_OK(se->create_stream(dd, &s));

  /* Results appear only when the stream got there: a gate holds the stream; the output still
   * holds what was there before; open the gate, synchronize, the sum is there. */
  {
    static const int64_t s23[2] = {2, 3}, s3[1] = {3};
    float xv[6] = {1, 2, 3, 4, 5, 6}, yv[3] = {10, 20, 30}, got[6];
    ktensor in[2] = {kt(DPP_DTYPE_F32, 2, s23, xv), kt(DPP_DTYPE_F32, 1, s3, yv)};
    ktensor out = kt(DPP_DTYPE_F32, 2, s23, NULL);
    kt_upload(&d0, &in[0]);
    kt_upload(&d0, &in[1]);
    kt_upload(&d0, &out);
    gate g;
    gate_init(&g);
    CHECK_OK(se->host_callback(dd, s, gate_wait, &g));
    /* The stream reads its inputs when it runs the kernel: this copy, queued before it,
     * changes x first. */
    float x2[6] = {100, 200, 300, 400, 500, 600};
    CHECK_OK(se->memcpy_htod_async(dd, s, in[0].addr, x2, sizeof x2));
    CHECK_OK(call_kernel(add, &d0, s, in, 2, &out, NULL)); /* descriptions scribbled over after */
    CHECK_OK(se->memcpy_dtoh(dd, got, out.addr, sizeof got));
    unsigned char sentinel[sizeof got];
    memset(sentinel, 0xEE, sizeof sentinel);
    CHECK(memcmp(got, sentinel, sizeof got) == 0); /* not computed yet */
    gate_open(&g);
    CHECK_OK(se->synchronize_stream(dd, s));
    CHECK_OK(se->memcpy_dtoh(dd, got, out.addr, sizeof got));
    for (int i = 0; i < 6; i++) {
      CHECK(got[i] == x2[i] + yv[i % 3]);
    }
    gate_destroy(&g);

    /* On the default stream (NULL) as well, with latency: not there until synchronized. */
    float x3[6] = {-1, -2, -3, -4, -5, -6};
    CHECK_OK(se->memcpy_htod(dd, in[0].addr, x3, sizeof x3));
    CHECK_OK(se->memset(dd, out.addr, 0xEE, out.bytes));
    CHECK_OK(call_kernel(mul, &d0, NULL, in, 2, &out, NULL));
    CHECK_OK(se->synchronize_stream(dd, NULL));
    CHECK_OK(se->memcpy_dtoh(dd, got, out.addr, sizeof got));
    for (int i = 0; i < 6; i++) {
      CHECK(got[i] == x3[i] * yv[i % 3]);
    }

    /* In place: the output may be an input (same address and size). */
    CHECK_OK(call_kernel(add, &d0, s, (ktensor[]){out, in[1]}, 2, &out, NULL));
    CHECK_OK(se->synchronize_stream(dd, s));
    CHECK_OK(se->memcpy_dtoh(dd, got, out.addr, sizeof got));
    for (int i = 0; i < 6; i++) {
      CHECK(got[i] == x3[i] * yv[i % 3] + yv[i % 3]);
    }

    /* Memory freed before the stream reaches the kernel: a stream error at synchronize. */
    gate_init(&g);
    CHECK_OK(se->host_callback(dd, s, gate_wait, &g));
    CHECK_OK(call_kernel(add, &d0, s, in, 2, &out, NULL));
    char h1[32];
    hex(h1, in[1].addr);
    kt_free(&d0, &in[1]);
    gate_open(&g);
    clear_err();
    CHECK_ST(se->synchronize_stream(dd, s), DPP_INVALID_ARGUMENT);
    CHECK(err_has("kernel Add") && err_has("input 'y'") && err_has(h1) && err_has("not inside a live allocation"));
    CHECK_OK(se->synchronize_stream(dd, s)); /* reported once */
    gate_destroy(&g);
    kt_free(&d0, &in[0]);
    kt_free(&d0, &out);
  }

  /* A launch like one validated before (SIM remembers the last shapes it validated on this
   * thread) is still refused when anything but the addresses differs. */
  {
    static const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6};
    float xv[6] = {1, 2, 3, 4, 5, 6};
    ktensor in[2] = {kt(DPP_DTYPE_F32, 2, s23, xv), kt(DPP_DTYPE_F32, 2, s23, xv)};
    ktensor out = kt(DPP_DTYPE_F32, 2, s23, NULL);
    kt_upload(&d0, &in[0]);
    kt_upload(&d0, &in[1]);
    kt_upload(&d0, &out);
    for (int round = 0; round < 2; round++) {
      CHECK_OK(call_kernel(add, &d0, s, in, 2, &out, NULL));
      ktensor bad = out;
      bad.dtype = DPP_DTYPE_I32; /* same size */
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &bad, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z' has dtype i32 but input 'x' has f32"));
      bad = out;
      bad.bytes += 4;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &bad, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z': byte_size is 28"));
      bad = kt(DPP_DTYPE_F32, 2, s32, NULL);
      bad.addr = out.addr;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &bad, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z' has shape [3, 2]"));
      bad = kt(DPP_DTYPE_F32, 1, s6, NULL);
      bad.addr = out.addr;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &bad, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z' has shape [6]"));
      ktensor bad_in[2] = {in[0], kt(DPP_DTYPE_F32, 2, s32, xv)};
      bad_in[1].addr = in[1].addr;
      CHECK_ST(call_kernel(add, &d0, s, bad_in, 2, &out, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("cannot be broadcast together"));
    }
    /* SIM also remembers the allocations launches used until something is freed: a launch
     * after a free, or past the end of a remembered allocation, is checked in full. */
    ktensor longer = kt(DPP_DTYPE_F32, 2, (const int64_t[]){2, 4}, NULL);
    longer.addr = out.addr;
    ktensor wide_in[2] = {kt(DPP_DTYPE_F32, 2, (const int64_t[]){2, 4}, xv), kt(DPP_DTYPE_F32, 2, (const int64_t[]){2, 4}, xv)};
    wide_in[0].addr = in[0].addr;
    wide_in[1].addr = in[1].addr;
    CHECK_ST(call_kernel(add, &d0, s, wide_in, 2, &longer, NULL), DPP_INVALID_ARGUMENT);
    CHECK(err_has("runs past the end of the allocation"));
    CHECK_OK(call_kernel(add, &d0, s, in, 2, &out, NULL));
    CHECK_OK(se->synchronize_stream(dd, s));
    char hy[32];
    hex(hy, in[1].addr);
    ktensor freed = in[1];
    kt_free(&d0, &in[1]);
    CHECK_ST(call_kernel(add, &d0, s, (ktensor[]){in[0], freed}, 2, &out, NULL), DPP_INVALID_ARGUMENT);
    CHECK(err_has("input 'y'") && err_has(hy) && err_has("not inside a live allocation"));
    CHECK_OK(se->synchronize_stream(dd, s));
    kt_free(&d0, &in[0]);
    kt_free(&d0, &out);
  }

  /* Add and Mul with broadcasting, every dtype. */
  {
    static const int64_t s23[2] = {2, 3}, s3[1] = {3}, s21[2] = {2, 1}, s13[2] = {1, 3}, s234[3] = {2, 3, 4},
                         s14[2] = {1, 4}, s31[2] = {3, 1}, s0[1] = {0}, s20[2] = {2, 0}, s1[1] = {1};
    for (int t = 0; t < 4; t++) {
      int32_t dt = k_numeric[t];
      for (int m = 0; m < 2; m++) {
        const char *op = m ? "Mul" : "Add";
        check_binary(&h, &d0, s, op, dt, 2, s23, 1, s3, 2, s23);   /* [2,3] + [3] */
        check_binary(&h, &d0, s, op, dt, 1, s3, 2, s23, 2, s23);   /* [3] + [2,3] */
        check_binary(&h, &d0, s, op, dt, 2, s21, 2, s13, 2, s23);  /* [2,1] + [1,3] */
        check_binary(&h, &d0, s, op, dt, 0, NULL, 2, s23, 2, s23); /* scalar + [2,3] */
        check_binary(&h, &d0, s, op, dt, 2, s23, 0, NULL, 2, s23); /* [2,3] + scalar */
        check_binary(&h, &d0, s, op, dt, 0, NULL, 0, NULL, 0, NULL); /* scalars */
        check_binary(&h, &d0, s, op, dt, 3, s234, 2, s14, 3, s234); /* [2,3,4] + [1,4] */
        check_binary(&h, &d0, s, op, dt, 3, s234, 2, s31, 3, s234); /* [2,3,4] + [3,1] */
        check_binary(&h, &d0, s, op, dt, 3, s234, 3, s234, 3, s234);
        check_binary(&h, &d0, s, op, dt, 1, s1, 1, s3, 1, s3);
        check_binary(&h, &d0, s, op, dt, 1, s0, 1, s1, 1, s0);     /* empty */
        check_binary(&h, &d0, s, op, dt, 2, s20, 1, s0, 2, s20);   /* empty, broadcast */
      }
    }
    /* Integers wrap (two's complement), as the CPU kernels do. */
    int32_t xi[2] = {INT32_MAX, INT32_MIN}, yi[1] = {2}, got[2];
    static const int64_t s2[1] = {2};
    ktensor in[2] = {kt(DPP_DTYPE_I32, 1, s2, xi), kt(DPP_DTYPE_I32, 1, s1, yi)};
    ktensor out = kt(DPP_DTYPE_I32, 1, s2, NULL);
    if (run_sync(add, &d0, s, in, 2, &out, NULL, got)) {
      CHECK(got[0] == INT32_MIN + 1 && got[1] == INT32_MIN + 2);
    }
    if (run_sync(mul, &d0, s, in, 2, &out, NULL, got)) {
      CHECK(got[0] == -2 && got[1] == 0);
    }
    int64_t xl[1] = {INT64_MAX}, yl[1] = {1}, gl[1];
    ktensor inl[2] = {kt(DPP_DTYPE_I64, 1, s1, xl), kt(DPP_DTYPE_I64, 1, s1, yl)};
    ktensor outl = kt(DPP_DTYPE_I64, 1, s1, NULL);
    if (run_sync(add, &d0, s, inl, 2, &outl, NULL, gl)) {
      CHECK(gl[0] == INT64_MIN);
    }
  }

  /* MatMul: 2-D with every transpose combination, batched, broadcast batch, f32 and f64. */
  {
    static const int64_t a23[2] = {2, 3}, a32[2] = {3, 2}, b34[2] = {3, 4}, b43[2] = {4, 3}, c24[2] = {2, 4};
    for (int t = 0; t < 2; t++) {
      int32_t dt = t ? DPP_DTYPE_F64 : DPP_DTYPE_F32;
      check_matmul(&h, &d0, s, dt, false, false, 2, a23, 2, b34, 2, c24);
      check_matmul(&h, &d0, s, dt, true, false, 2, a32, 2, b34, 2, c24);
      check_matmul(&h, &d0, s, dt, false, true, 2, a23, 2, b43, 2, c24);
      check_matmul(&h, &d0, s, dt, true, true, 2, a32, 2, b43, 2, c24);
    }
    static const int64_t ab[3] = {3, 2, 5}, bb[3] = {3, 5, 4}, cb[3] = {3, 2, 4};
    check_matmul(&h, &d0, s, DPP_DTYPE_F32, false, false, 3, ab, 3, bb, 3, cb);
    static const int64_t abt[4] = {2, 3, 5, 2}, bbt[4] = {2, 3, 4, 5}, cbt[4] = {2, 3, 2, 4};
    check_matmul(&h, &d0, s, DPP_DTYPE_F64, true, true, 4, abt, 4, bbt, 4, cbt);
    static const int64_t ax[4] = {2, 1, 2, 3}, bx[3] = {3, 3, 2}, cx[4] = {2, 3, 2, 2};
    check_matmul(&h, &d0, s, DPP_DTYPE_F32, false, false, 4, ax, 3, bx, 4, cx); /* batch [2,1] x [3] */
    static const int64_t ay[2] = {4, 3}, by[3] = {5, 3, 2}, cy[3] = {5, 4, 2};
    check_matmul(&h, &d0, s, DPP_DTYPE_F64, false, false, 2, ay, 3, by, 3, cy); /* rank 2 x rank 3 */
    static const int64_t a20[2] = {2, 0}, b03[2] = {0, 3}, c23[2] = {2, 3};
    check_matmul(&h, &d0, s, DPP_DTYPE_F32, false, false, 2, a20, 2, b03, 2, c23); /* k = 0: zeros */
    /* Attributes absent (a host without defaults): no transposes. */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, got[4];
    static const int64_t s22[2] = {2, 2};
    ktensor in[2] = {kt(DPP_DTYPE_F32, 2, s22, a), kt(DPP_DTYPE_F32, 2, s22, b)};
    ktensor out = kt(DPP_DTYPE_F32, 2, s22, NULL);
    fake_attrs none = {0};
    if (run_sync(mm, &d0, s, in, 2, &out, &none, got)) {
      CHECK(got[0] == 19 && got[1] == 22 && got[2] == 43 && got[3] == 50);
    }
  }

  /* ReduceSum over no (= all), one, several and negative axes, with and without keep_dims. */
  {
    static const int64_t x234[3] = {2, 3, 4}, x5[1] = {5}, x20[2] = {2, 0};
    static const int64_t ax1[1] = {1}, ax02[2] = {0, 2}, axm1[1] = {-1}, axm3m1[2] = {-3, -1}, ax21[2] = {2, 1},
                         ax012[3] = {0, 1, 2}, ax0[1] = {0}, axm2[1] = {-2};
    for (int t = 0; t < 4; t++) {
      int32_t dt = k_numeric[t];
      for (int keep = 0; keep < 2; keep++) {
        check_reduce(&h, &d0, s, dt, 3, x234, NULL, 0, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, ax1, 1, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, ax02, 2, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, axm1, 1, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, axm3m1, 2, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, ax21, 2, keep);
        check_reduce(&h, &d0, s, dt, 3, x234, ax012, 3, keep);
        check_reduce(&h, &d0, s, dt, 1, x5, ax0, 1, keep);
        check_reduce(&h, &d0, s, dt, 0, NULL, NULL, 0, keep); /* a scalar: itself */
        check_reduce(&h, &d0, s, dt, 2, x20, ax1, 1, keep);   /* empty rows: zeros */
        check_reduce(&h, &d0, s, dt, 2, x20, axm2, 1, keep);  /* nothing to write */
      }
    }
    /* Compensated: 1 + 1e100 + 1 - 1e100 is 2 (a naive sum says 0); an infinity stays one. */
    double v[4] = {1.0, 1e100, 1.0, -1e100}, got = -1;
    static const int64_t s4[1] = {4};
    fake_attrs all = {0};
    attrs_add_ints(&all, "axes", NULL, 0);
    attrs_add_bool(&all, "keep_dims", false);
    ktensor in = kt(DPP_DTYPE_F64, 1, s4, v), out = kt(DPP_DTYPE_F64, 0, NULL, NULL);
    if (run_sync(sum, &d0, s, &in, 1, &out, &all, &got)) {
      CHECK(got == 2.0);
    }
    float fv[4] = {1.0f, 16777216.0f, 1.0f, 1.0f}, fgot = 0;
    ktensor fin = kt(DPP_DTYPE_F32, 1, s4, fv), fout = kt(DPP_DTYPE_F32, 0, NULL, NULL);
    if (run_sync(sum, &d0, s, &fin, 1, &fout, &all, &fgot)) {
      CHECK(fgot == 16777220.0f); /* exact in f32; a float-by-float sum gives 16777216 */
    }
    v[1] = INFINITY;
    in = kt(DPP_DTYPE_F64, 1, s4, v);
    if (run_sync(sum, &d0, s, &in, 1, &out, &all, &got)) {
      CHECK(got == INFINITY);
    }
    int32_t iv[4] = {INT32_MAX, 1, 0, 0}, igot = 0;
    ktensor iin = kt(DPP_DTYPE_I32, 1, s4, iv), iout = kt(DPP_DTYPE_I32, 0, NULL, NULL);
    if (run_sync(sum, &d0, s, &iin, 1, &iout, &all, &igot)) {
      CHECK(igot == INT32_MIN); /* wraps */
    }
  }

  /* Bad inputs: DPP_INVALID_ARGUMENT with a message, nothing enqueued. */
  {
    static const int64_t s23[2] = {2, 3}, s4[1] = {4}, s3[1] = {3}, s22[2] = {2, 2}, s2[1] = {2}, s32[2] = {3, 2};
    float f[6] = {0};
    ktensor x = kt(DPP_DTYPE_F32, 2, s23, f), y = kt(DPP_DTYPE_F32, 1, s3, f), z = kt(DPP_DTYPE_F32, 2, s23, NULL);
    kt_upload(&d0, &x);
    kt_upload(&d0, &y);
    kt_upload(&d0, &z);
    ktensor in[2] = {x, y};
    char h1[32];

    CHECK_ST(call_kernel(add, &d0, s, in, 1, &z, NULL), DPP_INVALID_ARGUMENT); /* one input */
    CHECK(err_has("kernel Add") && err_has("expects 2 input(s)"));
    CHECK_ST(call_kernel(sum, &d0, s, in, 2, &z, NULL), DPP_INVALID_ARGUMENT); /* two inputs */
    CHECK(err_has("kernel ReduceSum") && err_has("got 2 input(s)"));
    {
      ktensor bad[2] = {x, y};
      bad[1].dtype = DPP_DTYPE_F64;
      bad[1].bytes = 24;
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("input 'y' has dtype f64") && err_has("'x' has f32"));
      bad[1] = y;
      bad[0].dtype = DPP_DTYPE_U8;
      bad[0].bytes = 6;
      CHECK_ST(call_kernel(mul, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("dtype u8") && err_has("does not support"));
      bad[0] = x;
      bad[0].dtype = 99;
      CHECK_ST(call_kernel(mul, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("unknown dtype 99"));
      bad[0] = x;
      bad[0].bytes = 20; /* not 6 x 4 */
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("byte_size is 20") && err_has("[2, 3]"));
      bad[0] = x;
      bad[0].shape[1] = -3;
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("negative dimension"));
      bad[0] = x;
      bad[0].rank = 9;
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("rank 9"));
      bad[0] = x;
      bad[1] = kt(DPP_DTYPE_F32, 1, s4, f); /* [2,3] + [4] */
      bad[1].addr = x.addr;
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("[2, 3] ('x') and [4] ('y') cannot be broadcast"));
      /* The output's shape disagrees with broadcasting. */
      ktensor z2 = kt(DPP_DTYPE_F32, 2, s32, NULL);
      z2.addr = z.addr;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &z2, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z' has shape [3, 2]") && err_has("gives [2, 3]"));
      /* Addresses: a freed one, one past its allocation, another device's, 0. */
      dpp_addr_t w = 0;
      CHECK_OK(se->allocate(dd, 64, &w));
      se->deallocate(dd, w, 64);
      bad[0] = x;
      bad[1] = y;
      bad[1].addr = w;
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("input 'y'") && err_has(hex(h1, w)) && err_has("not inside a live allocation"));
      bad[1].addr = y.addr + 4; /* 12 bytes from 4: past the end of its 12-byte allocation */
      CHECK_ST(call_kernel(add, &d0, s, bad, 2, &z, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("runs past the end"));
      dpp_addr_t o1 = 0;
      CHECK_OK(d1.se->allocate(d1.dd, 64, &o1));
      ktensor zo = z;
      zo.addr = o1;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &zo, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z'") && err_has("SIM device 1"));
      d1.se->deallocate(d1.dd, o1, 64);
      zo.addr = 0;
      CHECK_ST(call_kernel(add, &d0, s, in, 2, &zo, NULL), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'z'"));
    }
    /* A stream that is not one of the device's. */
    CHECK_ST(call_kernel(add, &d0, (void *)&h, in, 2, &z, NULL), DPP_INVALID_ARGUMENT);
    CHECK(err_has("not a live stream"));
    /* Another device's device_data, a NULL context, a small context. */
    {
      dpp_kernel_context_t cx;
      memset(&cx, 0, sizeof cx);
      CHECK_ST(add->compute(NULL), DPP_INVALID_ARGUMENT);
      cx.struct_size = 16;
      CHECK_ST(add->compute(&cx), DPP_INVALID_ARGUMENT);
      cx.struct_size = DPP_KERNEL_CONTEXT_STRUCT_SIZE;
      cx.device = &h;
      cx.kernel_data = add->kernel_data;
      clear_err();
      CHECK_ST(add->compute(&cx), DPP_INVALID_ARGUMENT);
      CHECK(err_has("not a device of this SIM platform"));
    }
    /* A tensor description of an older, smaller layout. */
    {
      dpp_tensor_t ti[2], to;
      ti[0] = (dpp_tensor_t){DPP_TENSOR_STRUCT_SIZE, NULL, DPP_DTYPE_F32, 2, s23, x.addr, x.bytes};
      ti[1] = (dpp_tensor_t){16, NULL, DPP_DTYPE_F32, 1, s3, y.addr, y.bytes};
      to = (dpp_tensor_t){DPP_TENSOR_STRUCT_SIZE, NULL, DPP_DTYPE_F32, 2, s23, z.addr, z.bytes};
      dpp_kernel_context_t cx = {DPP_KERNEL_CONTEXT_STRUCT_SIZE, NULL, dd, s, 2, ti, 1, &to, NULL, add->kernel_data};
      clear_err();
      CHECK_ST(add->compute(&cx), DPP_INVALID_ARGUMENT);
      CHECK(err_has("struct_size is 16"));
      ti[1].struct_size = DPP_TENSOR_STRUCT_SIZE;
      ti[1].shape = NULL;
      CHECK_ST(add->compute(&cx), DPP_INVALID_ARGUMENT);
      CHECK(err_has("shape is NULL"));
      cx.outputs = NULL;
      CHECK_ST(add->compute(&cx), DPP_INVALID_ARGUMENT);
      CHECK(err_has("NULL array"));
    }
    /* MatMul: rank < 2, inner dimensions, batch dimensions, integer dtype, an attribute of another type. */
    {
      fake_attrs attrs = {0};
      attrs_add_bool(&attrs, "transpose_a", false);
      attrs_add_bool(&attrs, "transpose_b", false);
      ktensor a = kt(DPP_DTYPE_F32, 2, s23, f), b = kt(DPP_DTYPE_F32, 2, s23, f), c = kt(DPP_DTYPE_F32, 2, s22, NULL);
      a.addr = x.addr;
      b.addr = x.addr;
      c.addr = z.addr;
      ktensor ab[2] = {a, b};
      CHECK_ST(call_kernel(mm, &d0, s, ab, 2, &c, &attrs), DPP_INVALID_ARGUMENT);
      CHECK(err_has("kernel MatMul") && err_has("inner dimensions differ") && err_has("has 3") && err_has("has 2"));
      fake_attrs tb = {0};
      attrs_add_bool(&tb, "transpose_a", false);
      attrs_add_bool(&tb, "transpose_b", true);
      CHECK_OK(call_kernel(mm, &d0, s, ab, 2, &c, &tb)); /* [2,3] x [2,3]^T = [2,2] */
      CHECK_OK(se->synchronize_stream(dd, s));
      ab[1] = kt(DPP_DTYPE_F32, 1, s3, f);
      ab[1].addr = y.addr;
      CHECK_ST(call_kernel(mm, &d0, s, ab, 2, &c, &attrs), DPP_INVALID_ARGUMENT);
      CHECK(err_has("rank >= 2"));
      static const int64_t a223[3] = {2, 2, 3}, b332[3] = {3, 3, 2}, c222[3] = {2, 2, 2};
      ktensor ba[2] = {kt(DPP_DTYPE_F32, 3, a223, f), kt(DPP_DTYPE_F32, 3, b332, f)};
      ktensor bc = kt(DPP_DTYPE_F32, 3, c222, NULL);
      CHECK_ST(call_kernel(mm, &d0, s, ba, 2, &bc, &attrs), DPP_INVALID_ARGUMENT);
      CHECK(err_has("batch dimensions"));
      ktensor ia[2] = {kt(DPP_DTYPE_I32, 2, s23, f), kt(DPP_DTYPE_I32, 2, s32, f)};
      ktensor ic = kt(DPP_DTYPE_I32, 2, s22, NULL);
      ia[0].addr = x.addr;
      ia[1].addr = x.addr;
      ic.addr = z.addr;
      CHECK_ST(call_kernel(mm, &d0, s, ia, 2, &ic, &attrs), DPP_INVALID_ARGUMENT);
      CHECK(err_has("dtype i32") && err_has("f32, f64"));
      fake_attrs wrong = {0};
      attrs_add_int(&wrong, "transpose_a", 1);
      ab[1] = kt(DPP_DTYPE_F32, 2, s32, f);
      ab[1].addr = x.addr;
      CHECK_ST(call_kernel(mm, &d0, s, ab, 2, &c, &wrong), DPP_INVALID_ARGUMENT);
      CHECK(err_has("bool attribute 'transpose_a'"));
      /* The output overlapping an input (not allowed for MatMul). */
      ktensor cz = c;
      cz.addr = x.addr;
      CHECK_ST(call_kernel(mm, &d0, s, ab, 2, &cz, &attrs), DPP_INVALID_ARGUMENT);
      CHECK(err_has("overlaps input 'a'"));
    }
    /* ReduceSum: an axis out of range, an axis twice, the output shape ignoring keep_dims. */
    {
      static const int64_t a3[1] = {3}, am3[1] = {-3}, a11[2] = {1, -1}, a0[1] = {0};
      fake_attrs at = {0};
      attrs_add_ints(&at, "axes", a3, 1);
      attrs_add_bool(&at, "keep_dims", false);
      ktensor r = kt(DPP_DTYPE_F32, 1, s2, NULL);
      r.addr = z.addr;
      CHECK_ST(call_kernel(sum, &d0, s, &x, 1, &r, &at), DPP_INVALID_ARGUMENT);
      CHECK(err_has("axis 3 is out of range for rank 2"));
      at.a[0].ints = am3;
      CHECK_ST(call_kernel(sum, &d0, s, &x, 1, &r, &at), DPP_INVALID_ARGUMENT);
      CHECK(err_has("axis -3 is out of range"));
      at.a[0].ints = a11;
      at.a[0].nints = 2;
      CHECK_ST(call_kernel(sum, &d0, s, &x, 1, &r, &at), DPP_INVALID_ARGUMENT);
      CHECK(err_has("axis -1 appears twice"));
      at.a[0].ints = a0;
      at.a[0].nints = 1;
      at.a[1].i = 1; /* keep_dims: the output should be [1, 3] */
      ktensor r3 = kt(DPP_DTYPE_F32, 1, s3, NULL);
      r3.addr = z.addr;
      CHECK_ST(call_kernel(sum, &d0, s, &x, 1, &r3, &at), DPP_INVALID_ARGUMENT);
      CHECK(err_has("output 'y' has shape [3]") && err_has("[1, 3]"));
      at.a[1].i = 0;
      CHECK_OK(call_kernel(sum, &d0, s, &x, 1, &r3, &at));
      /* keep_dims absent: either form is accepted. */
      at.n = 1;
      CHECK_OK(call_kernel(sum, &d0, s, &x, 1, &r3, &at));
      static const int64_t s13[2] = {1, 3};
      ktensor r13 = kt(DPP_DTYPE_F32, 2, s13, NULL);
      r13.addr = z.addr;
      CHECK_OK(call_kernel(sum, &d0, s, &x, 1, &r13, &at));
      CHECK_OK(se->synchronize_stream(dd, s));
    }
    kt_free(&d0, &x);
    kt_free(&d0, &y);
    kt_free(&d0, &z);
  }
  CHECK_OK(se->synchronize_all(dd));

  /* Several threads at once on one device. */
  {
    enum { T = 4 };
    pthread_t th[T];
    kstress_arg args[T];
    for (int i = 0; i < T; i++) {
      args[i] = (kstress_arg){&h, &d1, i, 0};
      CHECK(pthread_create(&th[i], NULL, kstress_thread, &args[i]) == 0);
    }
    for (int i = 0; i < T; i++) {
      pthread_join(th[i], NULL);
      CHECK(args[i].bad == 0);
    }
  }

  int w0 = atomic_load(&h.warnings);
  se->destroy_stream(dd, s);
  destroy(&h, &d0);
  destroy(&h, &d1);
  CHECK(atomic_load(&h.warnings) == w0); /* nothing leaked */
  unload(&h);
}

/* Load options and hosts that cannot take kernels. */
static void test_kernel_registration(void) {
  fake_host h;
  {
    /* Defaults: for the platform's own type and name, priority 0. */
    CHECK_OK(load(&h, NULL));
    check_registration(&h, "SIM", "SIM", 0);
    unload(&h);
  }
  {
    /* The drop-in case: kernels for GPU bound to SIMCUDA. */
    static const char *const opts[] = {"device_type=GPU", "platform=SIMCUDA", "priority=3", NULL};
    CHECK_OK(load(&h, opts));
    check_registration(&h, "GPU", "SIMCUDA", 0);
    unload(&h);
  }
  {
    static const char *const opts[] = {"kernels=0", NULL};
    CHECK_OK(load(&h, opts));
    CHECK(h.registered == 1 && h.nkernels == 0 && h.register_kernel_calls == 0);
    unload(&h);
  }
  {
    static const char *const opts[] = {"kernels=on", "kernel_priority=-3", "device_type=NPU", NULL};
    CHECK_OK(load(&h, opts));
    check_registration(&h, "NPU", "SIM", -3);
    unload(&h);
  }
  {
    /* An ABI 1.0 host table (64 bytes, no register_kernel): no kernels, no failure. The
     * pointer past the 1.0 end is set here only to show SIM does not read it. */
    host_init(&h, NULL);
    h.api.struct_size = DPP_HOST_API_STRUCT_SIZE_1_0;
    h.api.abi_minor = 0;
    clear_err();
    CHECK_OK(g_api->init(&h.api, &h.plugin_data));
    CHECK(h.registered == 1 && h.register_kernel_calls == 0 && h.nkernels == 0);
    unload(&h);
  }
  {
    /* A 1.1-sized table whose register_kernel is NULL. */
    host_init(&h, NULL);
    h.api.register_kernel = NULL;
    CHECK_OK(g_api->init(&h.api, &h.plugin_data));
    CHECK(h.registered == 1 && h.nkernels == 0);
    unload(&h);
  }
  {
    /* Without attr_bool MatMul is left out; without attr_ints ReduceSum. */
    host_init(&h, NULL);
    h.api.attr_bool = NULL;
    h.api.attr_ints = NULL;
    CHECK_OK(g_api->init(&h.api, &h.plugin_data));
    CHECK(h.nkernels == 2 && find_kernel(&h, "Add") && find_kernel(&h, "Mul") && !find_kernel(&h, "MatMul"));
    unload(&h);
  }
  {
    /* The host refuses a kernel: init fails with that status; the host rolls the platform back. */
    host_init(&h, NULL);
    h.register_kernel_result = DPP_ALREADY_EXISTS;
    clear_err();
    CHECK_ST(g_api->init(&h.api, &h.plugin_data), DPP_ALREADY_EXISTS);
    CHECK(err_has("refused kernel Add") && err_has("SIM"));
    CHECK(h.registered == 1 && h.register_kernel_calls == 1);
    h.platform.destroy_platform(h.platform.platform_data);
  }
  test_bad_option("kernels=maybe", "kernels");
  test_bad_option("kernels=", "kernels");
  test_bad_option("kernel_priority=x", "kernel_priority");
  test_bad_option("kernel_priority=3000000000", "kernel_priority");
}

/* ---- init failures, registration refused, two loads at once ---- */

static void test_init(void) {
  fake_host h;
  {
    static const char *const opts[] = {"fail_init=1", NULL};
    CHECK_ST(load(&h, opts), DPP_INTERNAL);
    CHECK(strcmp(g_err, "SIM: injected init failure") == 0);
    CHECK(h.registered == 0);
  }
  {
    static const char *const opts[] = {"fail_init=", NULL}; /* set, empty */
    CHECK_ST(load(&h, opts), DPP_INTERNAL);
    CHECK(h.registered == 0);
  }
  {
    /* Registers, then fails: the host rolls back by calling destroy_platform. */
    static const char *const opts[] = {"fail_init=after_register", NULL};
    CHECK_ST(load(&h, opts), DPP_INTERNAL);
    CHECK(strcmp(g_err, "SIM: injected init failure") == 0);
    CHECK(h.registered == 1);
    h.platform.destroy_platform(h.platform.platform_data);
  }
  {
    /* The host refuses the registration (e.g. the name exists): init passes the status on. */
    host_init(&h, NULL);
    h.register_result = DPP_ALREADY_EXISTS;
    clear_err();
    CHECK_ST(g_api->init(&h.api, &h.plugin_data), DPP_ALREADY_EXISTS);
    CHECK(err_has("fake host"));
  }
  {
    /* A host of another ABI major. */
    host_init(&h, NULL);
    h.api.abi_major = 2;
    CHECK_ST(g_api->init(&h.api, &h.plugin_data), DPP_ABI_MISMATCH);
    CHECK(err_has("ABI"));
  }
  {
    /* No devices ever created and no destroy_platform call: shutdown frees everything. */
    CHECK_OK(load(&h, NULL));
    g_api->shutdown(h.plugin_data);
  }
  {
    /* Two loads of the same library at once are independent. */
    static const char *const oa[] = {"platform=SIMA", NULL};
    static const char *const ob[] = {"platform=SIMB", "memory=8K", NULL};
    fake_host ha, hb;
    sim_dev da, db;
    CHECK_OK(load(&ha, oa));
    CHECK_OK(load(&hb, ob));
    CHECK_OK(create(&ha, 0, &da));
    CHECK_OK(create(&hb, 0, &db));
    CHECK(da.d.total_memory == (64u << 20) && db.d.total_memory == 8192);
    dpp_addr_t xa = 0, xb = 0;
    CHECK_OK(da.se->allocate(da.dd, 16, &xa));
    CHECK_OK(db.se->allocate(db.dd, 16, &xb));
    CHECK(xa == xb); /* the same fake addresses, different memory */
    CHECK_OK(da.se->memset(da.dd, xa, 0xA, 16));
    CHECK_OK(db.se->memset(db.dd, xb, 0xB, 16));
    unsigned char o[16];
    CHECK_OK(da.se->memcpy_dtoh(da.dd, o, xa, 16));
    CHECK(all_eq(o, 16, 0xA));
    CHECK_OK(db.se->memcpy_dtoh(db.dd, o, xb, 16));
    CHECK(all_eq(o, 16, 0xB));
    da.se->deallocate(da.dd, xa, 16);
    db.se->deallocate(db.dd, xb, 16);
    destroy(&ha, &da);
    unload(&ha);
    destroy(&hb, &db);
    unload(&hb);
  }
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "./libdevplug_sim.so";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return 2;
  }
  dpp_entry_fn entry;
  void *sym = dlsym(lib, "devplug_plugin_entry");
  if (!sym) {
    fprintf(stderr, "no devplug_plugin_entry in %s\n", path);
    return 2;
  }
  memcpy(&entry, &sym, sizeof entry);
  g_api = entry();
  /* Internal symbols are hidden. */
  CHECK(dlsym(lib, "sim_init") == NULL && dlsym(lib, "sim_allocate") == NULL);

  test_entry();
  test_init();
  test_options();
  test_faults();
  test_main_load();
  test_kernel_registration();
  test_kernels();
  test_ring_overflow();
  test_kernel_backpressure();

  sleep_ms(1);
  dlclose(lib);
  printf("sim_selftest: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
