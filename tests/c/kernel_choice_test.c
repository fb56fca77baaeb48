/* A C host asks, before running, how ops would run (dp_op_kernel_choice): on SIM (kernels for
 * part of the ops), on the CPU and on the default device; the answers agree with a run's
 * placement log; bad arguments are refused and leave the output as it was. */
#include "dp_test.h"

#include <devplug/devplug.h>

#include <stdio.h>
#include <string.h>

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

static void on_placement(const dp_placement_event_t *e, void *user_data) {
  int *reason = (int *)user_data;
  if (strcmp(e->op, "Maximum") == 0 && e->reason_code != DP_PLACEMENT_INPUT_COPIED) *reason = e->reason_code;
}

static dp_kernel_choice_t choice_of(dp_runtime_t *rt, const char *name, dp_device_t *dev, dp_dtype_t dtype) {
  dp_op_t *op = NULL;
  dp_kernel_choice_t c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.kind = -1;
  DP_TEST_MUST(dp_runtime_find_op(rt, name, &op));
  CHECK_OK(dp_op_kernel_choice(rt, op, dev, dtype, &c));
  return c;
}

int main(void) {
  SECTION("dp_op_kernel_choice");
  dp_runtime_t *rt = dp_test_runtime(1, 0);
  DP_TEST_MUST(dp_runtime_load_plugin(rt, SIM, NULL, 0));
  dp_device_t *sim = NULL, *cpu = NULL;
  DP_TEST_MUST(dp_runtime_find_device(rt, "SIM:0", &sim));
  DP_TEST_MUST(dp_runtime_find_device(rt, "CPU:0", &cpu));

  dp_kernel_choice_t c = choice_of(rt, "Add", sim, DP_DTYPE_F32);
  CHECKF(c.kind == DP_KERNEL_NATIVE, "Add on SIM:0: kind %d", c.kind);
  CHECK_STR(c.source, "plugin 'devplug_sim'");
  CHECK(c.priority == 0);
  c = choice_of(rt, "Relu", sim, DP_DTYPE_F32);
  CHECKF(c.kind == DP_KERNEL_DECOMPOSITION, "Relu on SIM:0: kind %d", c.kind);
  CHECK_STR(c.source, "");
  c = choice_of(rt, "Maximum", sim, DP_DTYPE_F32);
  CHECKF(c.kind == DP_KERNEL_SOFT_PLACEMENT, "Maximum on SIM:0: kind %d", c.kind);
  CHECK_STR(c.source, "built-in");
  /* NULL: the default device (CPU:0); an op without a type variable takes any dtype. */
  c = choice_of(rt, "Maximum", NULL, DP_DTYPE_F64);
  CHECKF(c.kind == DP_KERNEL_NATIVE, "Maximum on the default device: kind %d", c.kind);
  CHECK_STR(c.source, "built-in");
  c = choice_of(rt, "Fill", cpu, DP_KERNEL_ANY_DTYPE);
  CHECKF(c.kind == DP_KERNEL_NATIVE, "Fill on CPU:0: kind %d", c.kind);

  /* A run does what the answer said: Maximum on SIM:0 is soft-placed. */
  int reason = -1;
  CHECK_OK(dp_runtime_set_placement_callback(rt, on_placement, &reason, NULL));
  dp_op_t *maximum = NULL;
  DP_TEST_MUST(dp_runtime_find_op(rt, "Maximum", &maximum));
  const int64_t shape[1] = {2};
  const float xs[2] = {1, -1};
  dp_tensor_t *x = NULL, *y = NULL;
  DP_TEST_MUST(dp_tensor_create(sim, DP_DTYPE_F32, shape, 1, xs, sizeof xs, &x));
  dp_tensor_t *ins[2] = {x, x};
  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = sim;
  CHECK_OK(dp_op_run(rt, maximum, ins, 2, NULL, &o, &y, 1, NULL));
  CHECKF(reason == DP_PLACEMENT_SOFT_PLACED, "Maximum's placement reason %d", reason);
  CHECK_OK(dp_runtime_set_placement_callback(rt, NULL, NULL, NULL));

  /* A struct_size below the first version's is refused, the struct untouched. */
  struct {
    size_t struct_size;
    int32_t kind;
  } short_choice = {sizeof short_choice, -1};
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, maximum, cpu, DP_DTYPE_F32, (dp_kernel_choice_t *)&short_choice),
                   DP_INVALID_ARGUMENT, "struct_size");
  CHECK(short_choice.kind == -1);

  /* Bad arguments: refused, the output untouched. */
  dp_op_t *add = NULL;
  DP_TEST_MUST(dp_runtime_find_op(rt, "Add", &add));
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.kind = 42;
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, add, sim, DP_DTYPE_BOOL, &c), DP_INVALID_ARGUMENT,
                   "Add: its type variable T takes");
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, add, sim, DP_KERNEL_ANY_DTYPE, &c), DP_INVALID_ARGUMENT,
                   "name the dtype of its type variable T");
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, add, sim, 99, &c), DP_INVALID_ARGUMENT, "dtype");
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, NULL, sim, DP_DTYPE_F32, &c), DP_INVALID_ARGUMENT, "op");
  CHECK_STATUS_MSG(dp_op_kernel_choice(NULL, add, sim, DP_DTYPE_F32, &c), DP_INVALID_ARGUMENT, "runtime");
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, add, sim, DP_DTYPE_F32, NULL), DP_INVALID_ARGUMENT, "out_choice");
  CHECK(c.kind == 42);
  dp_runtime_t *other = dp_test_runtime(1, 0);
  dp_device_t *other_cpu = NULL;
  DP_TEST_MUST(dp_runtime_find_device(other, "CPU:0", &other_cpu));
  CHECK_STATUS_MSG(dp_op_kernel_choice(rt, add, other_cpu, DP_DTYPE_F32, &c), DP_INVALID_ARGUMENT,
                   "another runtime");
  CHECK(c.kind == 42);

  dp_runtime_destroy(other);
  dp_tensor_release(y);
  dp_tensor_release(x);
  dp_runtime_destroy(rt);
  return DP_TEST_SUMMARY();
}
