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

typedef struct fake_host {
  dpp_host_api_t api;
  const char *const *options; /* "key=value", NULL-terminated */
  dpp_status_t register_result;
  int registered;
  dpp_platform_t platform;
  void *plugin_data;
  atomic_int warnings, errors;
  bool quiet;
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
  h->options = options;
  h->quiet = true;
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

  sleep_ms(1);
  dlclose(lib);
  printf("sim_selftest: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
