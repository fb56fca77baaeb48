/* porting_from_tf: loads the ported plugin (tfport.c) and uses it as a host would: finds GPU:0,
 * round-trips bytes through a stream, runs Add on the device and checks that the plugin's kernel
 * ran it, shows that an i32 Add (a dtype the kernel does not take) falls back to the CPU, and
 * runs the plugin's own op, tfport.AddRelu, through its body.
 * Usage: porting_from_tf [/abs/path/libtfport.so]   (default: the one built beside it) */
#include <devplug/devplug.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MUST(call)                                                                   \
  do {                                                                               \
    dp_status_t st_ = (call);                                                        \
    if (st_ != DP_OK) {                                                              \
      fprintf(stderr, "porting_from_tf: %s failed: %s: %s\n", #call, dp_status_str(st_), \
              dp_last_error_message());                                              \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Counts the ops that the plugin's kernel ran, and prints every placement decision. */
static void on_placement(const dp_placement_event_t *e, void *user_data) {
  printf("  placement: %s on %s: %s (%s)\n", e->op, e->device, e->reason, e->detail);
  if (strcmp(e->detail, "kernel from plugin 'tfport'") == 0) ++*(int *)user_data;
}

/* Runs Add(x, y) placed on `dev` (soft placement on: what it cannot run goes to the CPU). */
static dp_tensor_t *add(dp_runtime_t *rt, dp_device_t *dev, dp_tensor_t *x, dp_tensor_t *y) {
  dp_op_t *op = NULL;
  MUST(dp_runtime_find_op(rt, "Add", &op));
  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = dev;
  dp_tensor_t *in[2] = {x, y}, *out = NULL;
  MUST(dp_op_run(rt, op, in, 2, NULL, &o, &out, 1, NULL));
  return out;
}

int main(int argc, char **argv) {
  const char *plugin = argc > 1 ? argv[1] : TFPORT_PLUGIN; /* an absolute path */
  dp_runtime_options_t ro;
  dp_runtime_options_init(&ro, sizeof ro);
  ro.discover_plugins = 0; /* only what we load */
  dp_runtime_t *rt = NULL;
  MUST(dp_runtime_create(&ro, &rt));
  const char *options[] = {"devices=2"};
  MUST(dp_runtime_load_plugin(rt, plugin, options, 1));
  int native = 0;
  MUST(dp_runtime_set_placement_callback(rt, on_placement, &native, NULL));

  /* GPU:0 is MY_DEVICE:0: the GPU platform of the highest priority. */
  dp_device_t *gpu = NULL;
  MUST(dp_runtime_find_device(rt, "GPU:0", &gpu));
  dp_device_properties_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  MUST(dp_device_get_properties(gpu, &p));
  printf("GPU:0 is %s:%d (%s, %s)\n", p.platform, (int)p.ordinal, p.hardware_name, p.vendor);
  int ok = strcmp(p.platform, "MY_DEVICE") == 0;

  /* Bytes through a stream: htod, dtod, dtoh, ordered by the stream. */
  enum { N = 4096 };
  unsigned char src[N], dst[N];
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 7 + 1);
  dp_buffer_t *a = NULL, *b = NULL;
  dp_stream_t *s = NULL;
  MUST(dp_buffer_allocate(gpu, N, &a));
  MUST(dp_buffer_allocate(gpu, N, &b));
  MUST(dp_stream_create(gpu, &s));
  MUST(dp_stream_write(s, a, 0, src, N));
  MUST(dp_stream_copy(s, b, 0, a, 0, N));
  MUST(dp_stream_read(s, b, 0, dst, N));
  MUST(dp_stream_synchronize(s));
  int copied = memcmp(src, dst, N) == 0;
  printf("stream round trip: %s\n", copied ? "ok" : "MISMATCH");
  ok = ok && copied;

  /* Add f32, [2, 3] + [3] (broadcasting), on the device: the plugin's kernel. */
  const int64_t shape[] = {2, 3}, row[] = {3};
  const float xs[] = {1, 2, 3, 4, 5, 6}, ys[] = {10, 20, 30};
  dp_tensor_t *x = NULL, *y = NULL;
  MUST(dp_tensor_create(gpu, DP_DTYPE_F32, shape, 2, xs, sizeof xs, &x));
  MUST(dp_tensor_create(gpu, DP_DTYPE_F32, row, 1, ys, sizeof ys, &y));
  printf("Add f32 [2, 3] + [3]:\n");
  dp_tensor_t *z = add(rt, gpu, x, y);
  float got[6];
  MUST(dp_tensor_read(z, got, sizeof got)); /* waits for the device's stream */
  int sum_ok = dp_tensor_device(z) == gpu && native == 1;
  for (int i = 0; i < 6; i++) sum_ok = sum_ok && got[i] == xs[i] + ys[i % 3];
  printf("  result %s: %g %g %g %g %g %g\n", sum_ok ? "ok" : "WRONG", got[0], got[1], got[2],
         got[3], got[4], got[5]);
  ok = ok && sum_ok;

  /* Add i32: the kernel takes f32 only, so the runtime runs it elsewhere (the CPU here). */
  const int32_t is[] = {1, 2, 3, 4, 5, 6};
  dp_tensor_t *xi = NULL;
  MUST(dp_tensor_create(gpu, DP_DTYPE_I32, shape, 2, is, sizeof is, &xi));
  printf("Add i32:\n");
  dp_tensor_t *zi = add(rt, gpu, xi, xi);
  printf("  output on %s\n", dp_device_name(dp_tensor_device(zi)));
  ok = ok && native == 1 && dp_tensor_device(zi) != gpu;

  /* The plugin's own op, which no device has a kernel for: its body runs on the device, and
   * each of the body's ops goes where it can (Add on the plugin's kernel). */
  printf("tfport.AddRelu f32:\n");
  dp_op_t *add_relu = NULL;
  MUST(dp_runtime_find_op(rt, "tfport.AddRelu", &add_relu));
  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = gpu;
  const float ns[] = {-2, -2, -2};
  dp_tensor_t *neg = NULL, *r = NULL, *in[2];
  MUST(dp_tensor_create(gpu, DP_DTYPE_F32, row, 1, ns, sizeof ns, &neg));
  in[0] = x;
  in[1] = neg;
  MUST(dp_op_run(rt, add_relu, in, 2, NULL, &o, &r, 1, NULL));
  MUST(dp_tensor_read(r, got, sizeof got));
  int relu_ok = native == 2;
  for (int i = 0; i < 6; i++) relu_ok = relu_ok && got[i] == (xs[i] > 2 ? xs[i] - 2 : 0);
  printf("  result %s: %g %g %g %g %g %g\n", relu_ok ? "ok" : "WRONG", got[0], got[1], got[2],
         got[3], got[4], got[5]);
  ok = ok && relu_ok;

  dp_tensor_release(r);
  dp_tensor_release(neg);
  dp_tensor_release(zi);
  dp_tensor_release(xi);
  dp_tensor_release(z);
  dp_tensor_release(y);
  dp_tensor_release(x);
  dp_stream_destroy(s);
  dp_buffer_release(b);
  dp_buffer_release(a);
  dp_runtime_destroy(rt);
  printf("porting_from_tf: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
