/* A C host with a plugin whose kernel declines part of its op (the zoo's ReduceSum, which
 * returns DPP_UNIMPLEMENTED for reductions to more than one element): what it takes runs on the
 * plugin's device; what it declines runs as if the device had no kernel for it (ReduceSum has
 * no decomposition: soft placement to the CPU), the placement log saying which kernel declined
 * and why; in strict mode the kernel's error, DP_UNIMPLEMENTED, saying soft placement is off. */
#include "dp_test.h"

#include <devplug/devplug.h>

#include <stdio.h>
#include <string.h>

#define ZOO DEVPLUG_TEST_PLUGIN_DIR "/zoo/libzoo_reduce_sum_declines.so"

typedef struct {
  int soft_placed;
  int declined;
} seen_t;

static void on_placement(const dp_placement_event_t *e, void *user_data) {
  seen_t *seen = (seen_t *)user_data;
  if (e->reason_code == DP_PLACEMENT_SOFT_PLACED && strcmp(e->op, "ReduceSum") == 0) {
    seen->soft_placed++;
    if (strstr(e->detail, "the kernel from plugin 'zoo_reduce_sum_declines' on ZOO:0 declined (") &&
        strstr(e->detail, "more than 1 output elements")) {
      seen->declined++;
    }
  }
}

int main(void) {
  SECTION("a kernel that declines: the rest of the fallback order, logged");
  dp_runtime_t *rt = dp_test_runtime(1, 0);
  DP_TEST_MUST(dp_runtime_load_plugin(rt, ZOO, NULL, 0));
  seen_t seen = {0, 0};
  CHECK_OK(dp_runtime_set_placement_callback(rt, on_placement, &seen, NULL));
  dp_device_t *zoo = NULL, *cpu = NULL;
  DP_TEST_MUST(dp_runtime_find_device(rt, "ZOO:0", &zoo));
  DP_TEST_MUST(dp_runtime_find_device(rt, "CPU:0", &cpu));
  dp_op_t *sum = NULL;
  DP_TEST_MUST(dp_runtime_find_op(rt, "ReduceSum", &sum));
  const int64_t shape[2] = {2, 3}, axis1[1] = {1};
  const float xs[6] = {1, 2, 3, 4, 5, 6};
  dp_tensor_t *x = NULL;
  DP_TEST_MUST(dp_tensor_create(zoo, DP_DTYPE_F32, shape, 2, xs, sizeof xs, &x));
  dp_attrs_t *rows = NULL;
  DP_TEST_MUST(dp_attrs_create(&rows));
  CHECK_OK(dp_attrs_set_ints(rows, "axes", axis1, 1));
  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = zoo;

  /* Every axis: one element, which the kernel takes; on ZOO:0. */
  dp_tensor_t *all = NULL;
  float total = 0;
  CHECK_OK(dp_op_run(rt, sum, &x, 1, NULL, &o, &all, 1, NULL));
  CHECK(all != NULL && dp_tensor_device(all) == zoo);
  CHECK_OK(dp_tensor_read(all, &total, sizeof total));
  CHECK(total == 21.f);
  CHECK(seen.soft_placed == 0);

  /* Per row: two elements, declined; the CPU runs it. */
  dp_tensor_t *y = NULL;
  float got[2] = {0, 0};
  CHECK_OK(dp_op_run(rt, sum, &x, 1, rows, &o, &y, 1, NULL));
  CHECK(y != NULL && dp_tensor_device(y) == cpu);
  CHECK_OK(dp_tensor_read(y, got, sizeof got));
  CHECKF(got[0] == 6.f && got[1] == 15.f, "got %g %g", got[0], got[1]);
  CHECKF(seen.soft_placed == 1 && seen.declined == 1, "soft-placed %d, declined %d",
         seen.soft_placed, seen.declined);

  /* Strict: the kernel's error. */
  dp_tensor_t *none = NULL;
  o.soft_placement = DP_SOFT_PLACEMENT_OFF;
  CHECK_STATUS_MSG(dp_op_run(rt, sum, &x, 1, rows, &o, &none, 1, NULL), DP_UNIMPLEMENTED,
                   "more than 1 output elements");
  CHECK(strstr(dp_last_error_message(), "(strict mode)") != NULL);
  CHECK(none == NULL);

  dp_tensor_release(y);
  dp_tensor_release(all);
  dp_tensor_release(x);
  dp_attrs_destroy(rows);
  dp_runtime_destroy(rt);
  return DP_TEST_SUMMARY();
}
