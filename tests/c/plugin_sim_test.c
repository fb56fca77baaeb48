/* A C host with the SIM reference plugin: two SIM devices and the CPU, copies and
 * stream/event ordering across all three (every byte checked), device enumeration with type,
 * platform, priority and the active platform, load failures listed with their reasons, and
 * injected faults as errors (also one that happens on a stream, reported by its synchronize);
 * the ops a plugin defined (SIMDML's simdml.Swish), listed and run by name. */
#include "dp_test.h"

#include <devplug/devplug.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"
#define SIMDML DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_simdml.so"

static dp_runtime_t *make_runtime(void) {
  dp_runtime_options_t o;
  dp_runtime_t *rt = NULL;
  dp_runtime_options_init(&o, sizeof o);
  o.discover_plugins = 0;
  DP_TEST_MUST(dp_runtime_create(&o, &rt));
  return rt;
}

static void enumeration_and_copies(void) {
  SECTION("SIM with two devices next to the CPU");
  dp_runtime_t *rt = make_runtime();
  const char *opts[] = {"devices=2", "latency_us=200"};
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, opts, 2));

  size_t n = 0, plugins = 0;
  CHECK_OK(dp_runtime_device_count(rt, &n));
  CHECK(n == 3);
  CHECK_OK(dp_runtime_plugin_count(rt, &plugins));
  CHECK(plugins == 1);
  dp_plugin_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(dp_runtime_plugin_info(rt, 0, &info));
  CHECK(info.platform_count == 1);
  CHECK(info.op_count == 0);
  CHECK(strstr(info.path, "libdevplug_sim.so") != NULL);

  dp_device_t *cpu = NULL, *s0 = NULL, *s1 = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "CPU", &cpu));
  CHECK_OK(dp_runtime_find_device(rt, "SIM:0", &s0));
  CHECK_OK(dp_runtime_find_device(rt, "/device:sim:1", &s1));
  dp_device_properties_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  CHECK_OK(dp_device_get_properties(s1, &p));
  CHECK_STR(p.name, "SIM:1");
  CHECK_STR(p.platform, "SIM");
  CHECK_STR(p.device_type, "SIM");
  CHECK(p.ordinal == 1 && p.priority == 0 && p.is_active_platform == 1 && p.host_visible == 0);

  enum { N = 1 << 18 };
  unsigned char *src = (unsigned char *)malloc(N), *dst = (unsigned char *)malloc(N);
  for (int i = 0; i < N; ++i) src[i] = (unsigned char)(i * 13 + 5);
  memset(dst, 0, N);
  dp_buffer_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(dp_buffer_allocate(s0, N, &a));
  CHECK_OK(dp_buffer_allocate(s1, N, &b));
  CHECK_OK(dp_buffer_allocate(cpu, N, &c));
  dp_stream_t *q0 = NULL, *q1 = NULL;
  dp_event_t *ev = NULL;
  CHECK_OK(dp_stream_create(s0, &q0));
  CHECK_OK(dp_stream_create(s1, &q1));
  CHECK_OK(dp_event_create(s0, &ev));
  CHECK_OK(dp_stream_write(q0, a, 0, src, N));
  CHECK_OK(dp_event_record(ev, q0));
  CHECK_OK(dp_stream_wait_event(q1, ev));
  CHECK_OK(dp_stream_copy(q1, b, 0, a, 0, N));
  CHECK_OK(dp_stream_read(q1, b, 0, dst, N));
  CHECK_OK(dp_stream_synchronize(q1));
  CHECK(memcmp(src, dst, N) == 0);
  memset(dst, 0, N);
  CHECK_OK(dp_buffer_copy(c, 0, b, 0, N));
  CHECK_OK(dp_buffer_read(c, 0, dst, N));
  CHECK(memcmp(src, dst, N) == 0);

  /* bad uses of plugin devices are errors, as on the CPU */
  CHECK_STATUS(dp_stream_write(q0, b, 0, src, 16), DP_INVALID_ARGUMENT);
  CHECK_STATUS(dp_buffer_read(a, N - 4, dst, 8), DP_OUT_OF_RANGE);

  dp_event_destroy(ev);
  dp_stream_destroy(q0);
  dp_stream_destroy(q1);
  dp_buffer_release(a);
  dp_buffer_release(b);
  dp_buffer_release(c);
  free(src);
  free(dst);
  dp_runtime_destroy(rt);
}

static void failures_are_listed(void) {
  SECTION("failed loads are listed and cost only themselves");
  dp_runtime_t *rt = make_runtime();
  const char *bad[] = {"devices=lots"};
  CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, SIM, bad, 1), DP_INVALID_ARGUMENT, "devices");
  CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, "/no/such/libplugin.so", NULL, 0), DP_NOT_FOUND, "no such file");
  CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, "relative/libplugin.so", NULL, 0), DP_INVALID_ARGUMENT, "relative");
  const char *not_kv[] = {"devices"};
  CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, SIM, not_kv, 1), DP_INVALID_ARGUMENT, "key=value");
  CHECK_STATUS(dp_runtime_load_plugin(rt, SIM, NULL, 1), DP_INVALID_ARGUMENT);
  CHECK_STATUS(dp_runtime_load_plugin(rt, NULL, NULL, 0), DP_INVALID_ARGUMENT);
  CHECK_STATUS(dp_runtime_load_plugin(NULL, SIM, NULL, 0), DP_INVALID_ARGUMENT);

  size_t failures = 0;
  CHECK_OK(dp_runtime_plugin_failure_count(rt, &failures));
  CHECK(failures == 3);
  dp_plugin_failure_t f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  CHECK_OK(dp_runtime_plugin_failure(rt, 0, &f));
  CHECK(f.status == DP_INVALID_ARGUMENT);
  CHECK(strstr(f.message, "devices") != NULL);
  CHECK(strstr(f.path, "libdevplug_sim.so") != NULL);
  CHECK_STATUS(dp_runtime_plugin_failure(rt, 3, &f), DP_OUT_OF_RANGE);

  /* the runtime still loads the good plugin, once, even when asked twice; asked again with
   * other options, which could not apply, it refuses (the plugin stays as first loaded) */
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, NULL, 0));
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, NULL, 0));
  const char *as_gpu[] = {"device_type=GPU"};
  CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, SIM, as_gpu, 1), DP_ALREADY_EXISTS,
                   "is loaded already");
  size_t plugins = 0;
  CHECK_OK(dp_runtime_plugin_count(rt, &plugins));
  CHECK(plugins == 1);
  dp_device_t *gpu = NULL;
  CHECK_STATUS(dp_runtime_find_device(rt, "GPU", &gpu), DP_NOT_FOUND);
  dp_device_t *sim = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "SIM", &sim));
  dp_runtime_destroy(rt);
}

static void injected_faults(void) {
  SECTION("injected faults are errors");
  dp_runtime_t *rt = make_runtime();
  const char *opts[] = {"fail_copy_after=1"};
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, opts, 1));
  dp_device_t *sim = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "SIM", &sim));
  dp_buffer_t *b = NULL;
  CHECK_OK(dp_buffer_allocate(sim, 64, &b));
  unsigned char x[64] = {1};
  CHECK_OK(dp_buffer_write(b, 0, x, 64));
  CHECK_STATUS_MSG(dp_buffer_write(b, 0, x, 64), DP_RESOURCE_EXHAUSTED, "SIM|plugin");
  dp_buffer_release(b);
  dp_runtime_destroy(rt);
}

static void async_copy_failure(void) {
  SECTION("a copy between devices that fails on a stream is reported by its synchronize");
  dp_runtime_t *rt = make_runtime();
  const char *opts[] = {"fail_copy_after=1"};
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, opts, 1));
  dp_device_t *sim = NULL, *cpu = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "SIM", &sim));
  CHECK_OK(dp_runtime_find_device(rt, "CPU", &cpu));
  dp_buffer_t *on_sim = NULL, *on_cpu = NULL;
  CHECK_OK(dp_buffer_allocate(sim, 64, &on_sim));
  CHECK_OK(dp_buffer_allocate(cpu, 64, &on_cpu));
  unsigned char x[64], y[64];
  memset(x, 7, sizeof x);
  memset(y, 0, sizeof y);
  CHECK_OK(dp_buffer_write(on_sim, 0, x, 64)); /* SIM's one allowed copy */
  CHECK_OK(dp_buffer_write(on_cpu, 0, y, 64));
  dp_stream_t *q = NULL;
  CHECK_OK(dp_stream_create(cpu, &q));
  /* Enqueued fine; the copy runs on the stream's thread and fails there. */
  CHECK_OK(dp_stream_copy(q, on_cpu, 0, on_sim, 0, 64));
  CHECK_STATUS_MSG(dp_stream_synchronize(q), DP_RESOURCE_EXHAUSTED,
                   "stream copy of 64 bytes from SIM:0 to CPU:0");
  /* Once; the destination is untouched; the stream goes on. */
  CHECK_OK(dp_stream_synchronize(q));
  unsigned char back[64];
  memset(back, 1, sizeof back);
  CHECK_OK(dp_buffer_read(on_cpu, 0, back, 64));
  CHECK(memcmp(back, y, 64) == 0);
  dp_stream_destroy(q);
  dp_buffer_release(on_sim);
  dp_buffer_release(on_cpu);
  dp_runtime_destroy(rt);
}

static void plugin_ops(void) {
  SECTION("the ops a plugin defined: counted, named, found by name; bad indices");
  dp_runtime_t *rt = make_runtime();
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, NULL, 0));
  CHECK_OK(dp_runtime_load_plugin(rt, SIMDML, NULL, 0));
  dp_plugin_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(dp_runtime_plugin_info(rt, 1, &info));
  CHECK_STR(info.name, "simdml");
  CHECK(info.op_count == 1);
  const char *name = NULL;
  CHECK_OK(dp_runtime_plugin_op(rt, 1, 0, &name));
  CHECK_STR(name, "simdml.Swish");
  dp_op_t *op = NULL;
  CHECK_OK(dp_runtime_find_op(rt, name, &op));
  CHECK_STR(dp_op_name(op), "simdml.Swish");

  /* A caller built before op_count existed: its struct ends at platform_count, and nothing
   * past it is written. */
  unsigned char old[sizeof(dp_plugin_info_t)];
  memset(old, 0xA5, sizeof old);
  dp_plugin_info_t *o = (dp_plugin_info_t *)(void *)old;
  o->struct_size = offsetof(dp_plugin_info_t, op_count);
  CHECK_OK(dp_runtime_plugin_info(rt, 1, o));
  CHECK(o->platform_count == 1);
  CHECKF(dp_test_bytes_are(old, offsetof(dp_plugin_info_t, op_count), sizeof old, 0xA5),
         "op_count written past the caller's struct_size");

  /* Out of range, NULL: an error naming what, and nothing written. */
  name = "untouched";
  CHECK_STATUS_MSG(dp_runtime_plugin_op(rt, 1, 1, &name), DP_OUT_OF_RANGE,
                   "plugin 'simdml' defined 1 op(s)");
  CHECK_STATUS_MSG(dp_runtime_plugin_op(rt, 0, 0, &name), DP_OUT_OF_RANGE, "defined 0 op(s)");
  CHECK_STATUS_MSG(dp_runtime_plugin_op(rt, 2, 0, &name), DP_OUT_OF_RANGE, "plugin index 2");
  CHECK_STR(name, "untouched");
  CHECK_STATUS_MSG(dp_runtime_plugin_op(rt, 1, 0, NULL), DP_INVALID_ARGUMENT, "out_name");
  CHECK_STATUS_MSG(dp_runtime_plugin_op(NULL, 1, 0, &name), DP_INVALID_ARGUMENT, "runtime");
  CHECK_STR(name, "untouched");
  dp_runtime_destroy(rt);
}

/* Ops run on their device's default stream. Work on a created stream is ordered before an op
 * with an event (recorded on the created stream, waited for on the default stream), and work
 * after the op the other way round. A host callback holds the created stream back, so that
 * without the event the op would read the buffer before the upload. */
static void hold_back(void *user) {
  (void)user;
  dp_test_sleep_ms(150);
}

static void streams_and_ops(void) {
  SECTION("an upload on a created stream, ordered before Add on SIM:0 with an event, and back");
  dp_runtime_t *rt = make_runtime();
  const char *opts[] = {"latency_us=2000"};
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, opts, 1));
  dp_device_t *sim = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "SIM:0", &sim));
  const int64_t shape[1] = {4};
  const float up[4] = {1.5f, -2.0f, 3.25f, 100.0f};
  float down[4] = {0, 0, 0, 0}, sum[4] = {0, 0, 0, 0};
  dp_tensor_t *x = NULL, *z = NULL;
  dp_buffer_t *xb = NULL, *zb = NULL;
  dp_stream_t *s = NULL, *def = NULL;
  dp_event_t *uploaded = NULL, *added = NULL;
  dp_op_t *add = NULL;
  CHECK_OK(dp_tensor_create(sim, DP_DTYPE_F32, shape, 1, NULL, 0, &x)); /* zeros */
  CHECK_OK(dp_tensor_buffer(x, &xb));
  CHECK_OK(dp_stream_create(sim, &s));
  CHECK_OK(dp_device_default_stream(sim, &def));
  CHECK_OK(dp_event_create(sim, &uploaded));
  CHECK_OK(dp_event_create(sim, &added));
  CHECK_OK(dp_runtime_find_op(rt, "Add", &add));
  if (!x || !xb || !s || !def || !uploaded || !added || !add) return;

  CHECK_OK(dp_stream_host_callback(s, hold_back, NULL));
  CHECK_OK(dp_stream_write(s, xb, 0, up, sizeof up));
  CHECK_OK(dp_event_record(uploaded, s));
  CHECK_OK(dp_stream_wait_event(def, uploaded)); /* the op waits for the upload */

  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = sim;
  o.soft_placement = DP_SOFT_PLACEMENT_OFF; /* SIM's own kernel, on SIM's default stream */
  dp_tensor_t *ins[2] = {x, x};
  CHECK_OK(dp_op_run(rt, add, ins, 2, NULL, &o, &z, 1, NULL));
  if (!z) return;
  CHECK(dp_tensor_device(z) == sim);

  /* the other way: a read on the created stream waits for the op */
  CHECK_OK(dp_tensor_buffer(z, &zb));
  CHECK_OK(dp_event_record(added, def));
  CHECK_OK(dp_stream_wait_event(s, added));
  CHECK_OK(dp_stream_read(s, zb, 0, down, sizeof down));
  CHECK_OK(dp_stream_synchronize(s));
  for (int i = 0; i < 4; ++i) CHECKF(down[i] == 2 * up[i], "read on the stream: z[%d] = %g", i, down[i]);
  CHECK_OK(dp_tensor_read(z, sum, sizeof sum)); /* synchronous: after the default stream's work */
  for (int i = 0; i < 4; ++i) CHECKF(sum[i] == 2 * up[i], "dp_tensor_read: z[%d] = %g", i, sum[i]);

  dp_buffer_release(zb);
  dp_buffer_release(xb);
  dp_tensor_release(z);
  dp_tensor_release(x);
  dp_event_destroy(added);
  dp_event_destroy(uploaded);
  dp_stream_destroy(s);
  dp_runtime_destroy(rt);
}

int main(void) {
  enumeration_and_copies();
  streams_and_ops();
  plugin_ops();
  failures_are_listed();
  injected_faults();
  async_copy_failure();
  return DP_TEST_SUMMARY();
}
