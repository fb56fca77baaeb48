/* Ops a C host defines (dp_runtime_register_op): app.Scale (x * k, a float attribute with a
 * default) runs on the CPU and, through its body, on SIM without a kernel for it, with the
 * same values; a string attribute with a quoted default; it is found by name afterwards and
 * its dtype rule names it. Mistakes are INVALID_ARGUMENT naming the field or the statement,
 * taken names ALREADY_EXISTS; NULL and bad handles, a short struct_size; nothing is
 * registered on failure. */
#include "dp_test.h"

#include <devplug/devplug.h>

#include <string.h>

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

static dp_op_def_t scale_def(void) {
  dp_op_def_t d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "app.Scale";
  d.inputs = "x: T";
  d.outputs = "y: T";
  d.type_vars = "T: {f32, f64}";
  d.attrs = "k: float = 2.0; note: string = \"a; b\"";
  d.body = "y = Mul(x, @k)";
  return d;
}

/* Runs `op` on `dev` (strictly) over x = {1, -2, 0.5, 4} with k = `k` (or its default when
 * k < 0) and checks y = x * k. */
static void run_scale(dp_runtime_t *rt, const dp_op_t *op, dp_device_t *dev, double k) {
  const float x[4] = {1.0f, -2.0f, 0.5f, 4.0f};
  const int64_t shape[1] = {4};
  dp_tensor_t *in = NULL, *out = NULL;
  CHECK_OK(dp_tensor_create(dev, DP_DTYPE_F32, shape, 1, x, sizeof x, &in));
  dp_attrs_t *attrs = NULL;
  CHECK_OK(dp_attrs_create(&attrs));
  if (k >= 0) CHECK_OK(dp_attrs_set_float(attrs, "k", k));
  dp_run_options_t o;
  dp_run_options_init(&o, sizeof o);
  o.device = dev;
  o.soft_placement = DP_SOFT_PLACEMENT_OFF;
  size_t n = 0;
  CHECK_OK(dp_op_run(rt, op, &in, 1, attrs, &o, &out, 1, &n));
  CHECK(n == 1);
  float y[4] = {0};
  if (out != NULL) {
    CHECK(dp_tensor_device(out) == dev);
    CHECK_OK(dp_tensor_read(out, y, sizeof y));
  }
  const double want_k = k >= 0 ? k : 2.0;
  for (int i = 0; i < 4; ++i) CHECKF(y[i] == (float)(x[i] * want_k), "y[%d] = %g", i, (double)y[i]);
  dp_tensor_release(out);
  dp_tensor_release(in);
  dp_attrs_destroy(attrs);
}

static void a_host_op_runs_everywhere(void) {
  SECTION("app.Scale: registered, found by name, run on the CPU and on SIM through its body");
  dp_runtime_t *rt = dp_test_runtime(1, 0);
  CHECK_OK(dp_runtime_load_plugin(rt, SIM, NULL, 0));
  dp_op_t *op = NULL, *found = NULL;
  CHECK_STATUS_MSG(dp_runtime_find_op(rt, "app.Scale", &found), DP_NOT_FOUND, "app.Scale");
  dp_op_def_t d = scale_def();
  size_t before = 0, after = 0;
  CHECK_OK(dp_runtime_op_count(rt, &before));
  CHECK_OK(dp_runtime_register_op(rt, &d, &op));
  CHECK(op != NULL);
  /* Listed with the runtime's own ops, once. */
  CHECK_OK(dp_runtime_op_count(rt, &after));
  CHECK(after == before + 1);
  {
    int listed = 0;
    for (size_t i = 0; i < after; ++i) {
      dp_op_t *at = NULL;
      CHECK_OK(dp_runtime_op_at(rt, i, &at));
      listed += at == op;
    }
    CHECK(listed == 1);
  }
  CHECK_STR(dp_op_name(op), "app.Scale");
  /* Its signature reads back in the notation it was declared in. */
  CHECK_STR(dp_op_signature(op),
            "app.Scale(x: T; k: float = 2.0, note: string = \"a; b\") -> (y: T) where T: {f32, f64}");
  CHECK_OK(dp_runtime_find_op(rt, "app.Scale", &found));
  CHECK(found == op);
  dp_device_t *cpu = NULL, *sim = NULL;
  CHECK_OK(dp_runtime_find_device(rt, "CPU:0", &cpu));
  CHECK_OK(dp_runtime_find_device(rt, "SIM:0", &sim));
  run_scale(rt, op, cpu, -1);
  run_scale(rt, op, cpu, 0.5);
  run_scale(rt, op, sim, 3.0);

  /* Its dtype rule is the declared one, naming the op; its string attribute is typed. */
  const int32_t xi[2] = {1, 2};
  const int64_t shape[1] = {2};
  dp_tensor_t *in = NULL, *out = NULL;
  size_t n = 0;
  CHECK_OK(dp_tensor_create(cpu, DP_DTYPE_I32, shape, 1, xi, sizeof xi, &in));
  CHECK_STATUS_MSG(dp_op_run(rt, op, &in, 1, NULL, NULL, &out, 1, &n), DP_INVALID_ARGUMENT,
                   "app.Scale");
  dp_tensor_release(in);
  const float xf[2] = {1, 2};
  CHECK_OK(dp_tensor_create(cpu, DP_DTYPE_F32, shape, 1, xf, sizeof xf, &in));
  dp_attrs_t *attrs = NULL;
  CHECK_OK(dp_attrs_create(&attrs));
  CHECK_OK(dp_attrs_set_int(attrs, "note", 3));
  CHECK_STATUS_MSG(dp_op_run(rt, op, &in, 1, attrs, NULL, &out, 1, &n), DP_INVALID_ARGUMENT,
                   "note");
  dp_attrs_destroy(attrs);
  dp_tensor_release(in);

  /* Registering it again, or a basis op's name: ALREADY_EXISTS. out_op may be NULL. */
  dp_op_t *again = (dp_op_t *)(void *)&d;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &again), DP_ALREADY_EXISTS, "app.Scale");
  CHECK(again == (dp_op_t *)(void *)&d);
  dp_op_def_t add = scale_def();
  add.name = "Add";
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &add, NULL), DP_ALREADY_EXISTS, "Add");
  dp_op_def_t mine = scale_def();
  mine.name = "app.Twice";
  mine.attrs = NULL;
  mine.type_vars = NULL;
  mine.inputs = "x: f64";
  mine.outputs = "y: f64";
  mine.body = "y = Add(x, x)";
  CHECK_OK(dp_runtime_register_op(rt, &mine, NULL));
  CHECK_OK(dp_runtime_find_op(rt, "app.Twice", &found));
  dp_runtime_destroy(rt);
}

static void mistakes_are_named(void) {
  SECTION("mistakes: the field or the statement is named, nothing is registered");
  dp_runtime_t *rt = dp_test_runtime(1, 0);
  static const struct {
    const char *body, *attrs, *name, *words;
  } cases[] = {
      {"y = Mul(x, z)", NULL, "app.Bad", "'z' is not defined"},
      {"y = Frobnicate(x)", NULL, "app.Bad", "Frobnicate"},
      {"z = Neg(x)", NULL, "app.Bad", "y"},
      {"y = Neg(x", NULL, "app.Bad", "statement 1"},
      {"y = Neg(x)", "k: complex", "app.Bad", "attrs"},
      {"y = Neg(x)", "mode: string = 3", "app.Bad", "is not a string"},
      {"y = Neg(x)", NULL, "Bad", "namespace"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    dp_op_def_t d = scale_def();
    d.body = cases[i].body;
    d.attrs = cases[i].attrs;
    d.name = cases[i].name;
    dp_op_t *op = NULL;
    CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, cases[i].words);
    CHECK(op == NULL);
    dp_op_t *found = NULL;
    CHECK_STATUS(dp_runtime_find_op(rt, cases[i].name, &found), DP_NOT_FOUND);
  }
  /* A dtype the signature promises and the body cannot take: refused now, not at the first
   * i32 run. */
  dp_op_def_t d = scale_def();
  d.name = "app.Exp";
  d.type_vars = "T: {f32, i32}";
  d.attrs = NULL;
  d.body = "y = Exp(x)";
  dp_op_t *op = NULL;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT,
                   "type_vars: `T` allows i32, which its body cannot take");
  CHECK(op == NULL);
  d.type_vars = "T: {f32, f64}";
  CHECK_OK(dp_runtime_register_op(rt, &d, &op));
  CHECK(op != NULL);
  dp_runtime_destroy(rt);
}

static void bad_arguments(void) {
  SECTION("NULL, a short struct_size, destroyed and wrong-kind handles");
  dp_runtime_t *rt = dp_test_runtime(1, 0);
  dp_op_def_t d = scale_def();
  dp_op_t *op = NULL;
  CHECK_STATUS_MSG(dp_runtime_register_op(NULL, &d, &op), DP_INVALID_ARGUMENT, "runtime");
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, NULL, &op), DP_INVALID_ARGUMENT, "def");
  d.struct_size = 8;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, "struct_size");
  d = scale_def();
  d.name = NULL;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, "def->name");
  d = scale_def();
  d.outputs = NULL;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, "def->outputs");
  d = scale_def();
  d.body = NULL;
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, "def->body");
  d = scale_def();
  d.body = "y = Mul(x, @k)\xff";
  CHECK_STATUS_MSG(dp_runtime_register_op(rt, &d, &op), DP_INVALID_ARGUMENT, "UTF-8");
  CHECK(op == NULL);
  dp_device_t *dev = dp_test_device(rt, 0);
  d = scale_def();
  CHECK_STATUS_MSG(dp_runtime_register_op((dp_runtime_t *)(void *)dev, &d, &op),
                   DP_INVALID_ARGUMENT, "runtime");
  dp_op_t *found = NULL;
  CHECK_STATUS(dp_runtime_find_op(rt, "app.Scale", &found), DP_NOT_FOUND);
  dp_runtime_t *dead = dp_test_runtime(1, 0);
  dp_runtime_destroy(dead);
  CHECK_STATUS_MSG(dp_runtime_register_op(dead, &d, &op), DP_INVALID_ARGUMENT, "runtime");
  dp_runtime_destroy(rt);
}

int main(void) {
  a_host_op_runs_everywhere();
  mistakes_are_named();
  bad_arguments();
  return DP_TEST_SUMMARY();
}
