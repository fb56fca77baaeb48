/* Graphs and variables through the C API:
 *   - a graph built once (placeholder with a dimension of any size, constant, variable read,
 *     ops on SIM and on the CPU) and run twice with different feeds: values and devices checked;
 *   - a training step: an assignment fetched by a run changes the variable, a read in the same
 *     run sees the value from before; dp_variable_assign copies; a wrong shape changes nothing;
 *   - a setter placing variables on the CPU and computation on SIM (it sees node names and
 *     kinds), decided when a node is added and kept when the graph runs outside the scope;
 *   - errors: a node refused when added (arity, shapes, duplicate name, capacity), run errors
 *     naming the node (strict mode without a kernel, missing feed, wrong feed), another
 *     runtime's graph, a foreign output; and after each the graph still runs;
 *   - bad arguments: NULL for every pointer, destroyed and wrong-kind handles, bad enums. */
#include "dp_test.h"

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

static dp_runtime_t *rt;
static dp_device_t *cpu0, *sim0;
static dp_op_t *add_op, *mul_op, *sub_op, *matmul_op, *sqrt_op;

static dp_runtime_t *make_runtime(void) {
    dp_runtime_options_t o;
    dp_runtime_t *r = NULL;
    dp_runtime_options_init(&o, sizeof o);
    o.discover_plugins = 0;
    DP_TEST_MUST(dp_runtime_create(&o, &r));
    return r;
}

static dp_tensor_t *f32(dp_device_t *d, const int64_t *shape, size_t rank, const float *v,
                        size_t n) {
    dp_tensor_t *t = NULL;
    DP_TEST_MUST(dp_tensor_create(d, DP_DTYPE_F32, shape, rank, v, n * sizeof(float), &t));
    return t;
}

/* 1 when `t` holds exactly `want[0..n]`. */
static int holds(const dp_tensor_t *t, const float *want, size_t n) {
    float got[64];
    size_t i;
    if (n > 64 || dp_tensor_read(t, got, n * sizeof(float)) != DP_OK) return 0;
    for (i = 0; i < n; ++i) {
        if (got[i] != want[i]) return 0;
    }
    return 1;
}

static void setup(void) {
    const char *opts[] = {"devices=1"};
    rt = make_runtime();
    DP_TEST_MUST(dp_runtime_load_plugin(rt, SIM, opts, 1));
    DP_TEST_MUST(dp_runtime_find_device(rt, "CPU:0", &cpu0));
    DP_TEST_MUST(dp_runtime_find_device(rt, "SIM:0", &sim0));
    DP_TEST_MUST(dp_runtime_find_op(rt, "Add", &add_op));
    DP_TEST_MUST(dp_runtime_find_op(rt, "Mul", &mul_op));
    DP_TEST_MUST(dp_runtime_find_op(rt, "Sub", &sub_op));
    DP_TEST_MUST(dp_runtime_find_op(rt, "MatMul", &matmul_op));
    DP_TEST_MUST(dp_runtime_find_op(rt, "Sqrt", &sqrt_op));
}

/* y = (x * w) + b: x a placeholder [-1, 2], w a variable on SIM, Mul on SIM, Add on the
 * default device; run with a batch of 1, then of 3. */
static void build_once_run_twice(void) {
    dp_graph_t *g = NULL;
    dp_variable_t *w = NULL;
    dp_graph_output_t x, wr, b, prod, y, found;
    int64_t px[2] = {-1, 2}, s2[1] = {2}, s12[2] = {1, 2}, s32[2] = {3, 2};
    float wv[2] = {2.f, 3.f}, bv[2] = {1.f, -1.f};
    float x1[2] = {1.f, 2.f}, x3[6] = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
    float y1[2] = {3.f, 5.f}, y3[6] = {3.f, 5.f, 7.f, 11.f, 11.f, 17.f};
    dp_tensor_t *wt, *bt, *feed, *res[2] = {NULL, NULL};
    dp_graph_output_t ins[2], fetch[2];
    size_t n = 0;
    SECTION("a graph built once, run with two batch sizes");
    CHECK_OK(dp_graph_create(&g));
    wt = f32(cpu0, s2, 1, wv, 2);
    bt = f32(cpu0, s2, 1, bv, 2);
    CHECK_OK(dp_variable_create(rt, "w", wt, sim0, &w));
    CHECK_STR(dp_variable_name(w), "w");
    CHECK_OK(dp_graph_add_placeholder(g, "x", DP_DTYPE_F32, px, 2, &x));
    CHECK_OK(dp_graph_add_read(g, "w_read", w, &wr));
    CHECK_OK(dp_graph_add_constant(g, "b", bt, &b));
    ins[0] = x;
    ins[1] = wr;
    CHECK_OK(dp_graph_add_op(g, rt, "prod", mul_op, ins, 2, NULL, sim0, &prod, 1, &n));
    CHECK(n == 1);
    ins[0] = prod;
    ins[1] = b;
    CHECK_OK(dp_graph_add_op(g, rt, "y", add_op, ins, 2, NULL, NULL, &y, 1, NULL));
    CHECK_OK(dp_graph_node_count(g, &n));
    CHECK(n == 5);
    CHECK_OK(dp_graph_find(g, "prod", 0, &found));
    CHECK(found.graph == prod.graph && found.node == prod.node && found.index == prod.index);
    CHECK_STR(dp_graph_node_name(g, prod), "prod");
    CHECK_STR(dp_graph_node_name(g, x), "x");
    {
        /* x has a dimension of any size, so has prod (-1: only a run tells); b is known. */
        dp_dtype_t dt = 99;
        int64_t dims[4] = {-7, -7, -7, -7};
        size_t rank = 42;
        CHECK_OK(dp_graph_output_spec(g, prod, &dt, dims, 4, &rank));
        CHECK(dt == DP_DTYPE_F32 && rank == 2 && dims[0] == -1 && dims[1] == 2);
        CHECK_OK(dp_graph_output_spec(g, b, &dt, dims, 4, &rank));
        CHECK(dt == DP_DTYPE_F32 && rank == 1 && dims[0] == 2);
        dt = 99;
        rank = 42;
        CHECK_STATUS_MSG(dp_graph_output_spec(g, wr, &dt, NULL, 0, &rank), DP_INVALID_ARGUMENT,
                         "capacity");
        CHECK(dt == 99 && rank == 42);
    }

    fetch[0] = y;
    fetch[1] = prod;
    feed = f32(cpu0, s12, 2, x1, 2);
    CHECK_OK(dp_graph_run(g, rt, &x, &feed, 1, fetch, 2, NULL, res));
    CHECK(holds(res[0], y1, 2));
    CHECK(dp_tensor_device(res[0]) == cpu0);
    CHECK(dp_tensor_device(res[1]) == sim0);
    dp_tensor_release(res[0]);
    dp_tensor_release(res[1]);
    dp_tensor_release(feed);
    feed = f32(cpu0, s32, 2, x3, 6);
    CHECK_OK(dp_graph_run(g, rt, &x, &feed, 1, fetch, 1, NULL, res));
    CHECK(holds(res[0], y3, 6));
    dp_tensor_release(res[0]);
    dp_tensor_release(feed);

    /* The graph holds its own references: the handles may go before it. */
    dp_variable_release(w);
    dp_tensor_release(wt);
    dp_tensor_release(bt);
    feed = f32(cpu0, s12, 2, x1, 2);
    CHECK_OK(dp_graph_run(g, rt, &x, &feed, 1, fetch, 1, NULL, res));
    CHECK(holds(res[0], y1, 2));
    dp_tensor_release(res[0]);
    dp_tensor_release(feed);
    dp_graph_destroy(g);
}

/* w <- w - lr * grad, as a graph; and dp_variable_assign / dp_variable_read. */
static void training_step(void) {
    dp_graph_t *g = NULL;
    dp_variable_t *w = NULL;
    dp_device_t *where = NULL;
    dp_graph_output_t grad, lr, wr, step, next, assign, fetch[2], ins[2], untouched;
    int64_t s3[1] = {3}, s2[1] = {2};
    float w0[3] = {1.f, 2.f, 3.f}, g1[3] = {2.f, 2.f, 2.f}, half = 0.5f;
    float after1[3] = {0.f, 1.f, 2.f}, after2[3] = {-1.f, 0.f, 1.f}, direct[3] = {7.f, 8.f, 9.f};
    dp_tensor_t *t, *gt, *lt, *res[2] = {NULL, NULL}, *cur = NULL, *before = NULL, *short_t;
    SECTION("a training step: assignments take effect when the run succeeds");
    t = f32(cpu0, s3, 1, w0, 3);
    CHECK_OK(dp_variable_create(rt, "weights", t, sim0, &w));
    CHECK_OK(dp_variable_device(w, &where));
    CHECK(where == sim0);
    CHECK_OK(dp_graph_create(&g));
    CHECK_OK(dp_graph_add_placeholder(g, "grad", DP_DTYPE_F32, s3, 1, &grad));
    lt = f32(cpu0, NULL, 0, &half, 1);
    CHECK_OK(dp_graph_add_constant(g, "lr", lt, &lr));
    CHECK_OK(dp_graph_add_read(g, NULL, w, &wr));
    ins[0] = grad;
    ins[1] = lr;
    CHECK_OK(dp_graph_add_op(g, rt, "step", mul_op, ins, 2, NULL, NULL, &step, 1, NULL));
    ins[0] = wr;
    ins[1] = step;
    CHECK_OK(dp_graph_add_op(g, rt, "next", sub_op, ins, 2, NULL, sim0, &next, 1, NULL));
    CHECK_OK(dp_graph_add_assign(g, "update", w, next, &assign));
    gt = f32(cpu0, s3, 1, g1, 3);
    CHECK_OK(dp_variable_read(w, &before));
    fetch[0] = assign;
    fetch[1] = wr;
    CHECK_OK(dp_graph_run(g, rt, &grad, &gt, 1, fetch, 2, NULL, res));
    CHECK(holds(res[0], after1, 3));
    CHECK(holds(res[1], w0, 3)); /* the read saw the value from before the run */
    CHECK(dp_tensor_device(res[1]) == sim0);
    dp_tensor_release(res[0]);
    dp_tensor_release(res[1]);
    CHECK_OK(dp_variable_read(w, &cur));
    CHECK(holds(cur, after1, 3));
    CHECK(holds(before, w0, 3)); /* a value read earlier does not change */
    dp_tensor_release(cur);
    CHECK_OK(dp_graph_run(g, rt, &grad, &gt, 1, fetch, 1, NULL, res));
    dp_tensor_release(res[0]);
    CHECK_OK(dp_variable_read(w, &cur));
    CHECK(holds(cur, after2, 3));
    CHECK(dp_tensor_device(cur) == sim0);
    dp_tensor_release(cur);

    /* Directly: a copy; the wrong shape or dtype is refused and changes nothing. */
    dp_tensor_release(t);
    t = f32(cpu0, s3, 1, direct, 3);
    CHECK_OK(dp_variable_assign(w, t));
    short_t = f32(cpu0, s2, 1, direct, 2);
    CHECK_STATUS_MSG(dp_variable_assign(w, short_t), DP_INVALID_ARGUMENT, "variable 'weights'");
    CHECK_OK(dp_variable_read(w, &cur));
    CHECK(holds(cur, direct, 3));
    dp_tensor_release(cur);
    /* In the graph: refused when added (its shape is known). */
    memset(&untouched, 0x5e, sizeof untouched);
    {
        dp_graph_output_t bad;
        CHECK_OK(dp_graph_add_placeholder(g, "two", DP_DTYPE_F32, s2, 1, &bad));
        CHECK_STATUS_MSG(dp_graph_add_assign(g, "bad", w, bad, &untouched), DP_INVALID_ARGUMENT,
                         "'bad' (Assign)");
        CHECK(untouched.node == 0x5e5e5e5eu);
    }
    dp_tensor_release(short_t);
    dp_tensor_release(t);
    dp_tensor_release(gt);
    dp_tensor_release(lt);
    dp_tensor_release(before);
    dp_variable_release(w);
    dp_graph_destroy(g);
}

static char seen[4][64];
static int seen_kind[4];
static int seen_n = 0;

static dp_status_t variables_on_cpu(const dp_placement_query_t *q, void *user_data,
                                    dp_device_t **out_device) {
    (void)user_data;
    if (seen_n < 4) {
        snprintf(seen[seen_n], sizeof seen[0], "%s/%s", q->name, q->op);
        seen_kind[seen_n++] = q->kind;
    }
    *out_device = q->kind == DP_OP_KIND_VARIABLE ? cpu0 : sim0;
    return DP_OK;
}

static void placed_by_a_setter(void) {
    dp_scope_t *scope = NULL;
    dp_graph_t *g = NULL;
    dp_variable_t *v = NULL;
    dp_device_t *where = NULL;
    dp_graph_output_t r, sum, ins[2];
    dp_tensor_t *t, *res = NULL;
    int64_t s2[1] = {2};
    float v0[2] = {1.f, 2.f}, twice[2] = {2.f, 4.f};
    SECTION("a setter: variables on the CPU, computation on SIM, decided when added");
    CHECK_OK(dp_scope_create_setter(rt, variables_on_cpu, NULL, NULL, &scope));
    t = f32(cpu0, s2, 1, v0, 2);
    CHECK_OK(dp_graph_create(&g));
    CHECK_OK(dp_scope_enter(scope));
    CHECK_OK(dp_variable_create(rt, "v", t, NULL, &v));
    CHECK_OK(dp_graph_add_read(g, "r", v, &r));
    ins[0] = r;
    ins[1] = r;
    CHECK_OK(dp_graph_add_op(g, rt, "sum", add_op, ins, 2, NULL, NULL, &sum, 1, NULL));
    CHECK_OK(dp_scope_exit(scope));
    CHECK(seen_n == 2);
    CHECK_STR(seen[0], "v/Variable");
    CHECK(seen_kind[0] == DP_OP_KIND_VARIABLE);
    CHECK_STR(seen[1], "sum/Add");
    CHECK(seen_kind[1] == DP_OP_KIND_COMPUTE);
    CHECK_OK(dp_variable_device(v, &where));
    CHECK(where == cpu0);
    CHECK_OK(dp_graph_run(g, rt, NULL, NULL, 0, &sum, 1, NULL, &res));
    CHECK(dp_tensor_device(res) == sim0);
    CHECK(holds(res, twice, 2));
    dp_tensor_release(res);
    dp_tensor_release(t);
    dp_variable_release(v);
    dp_graph_destroy(g);
    dp_scope_destroy(scope);
}

static void errors_name_the_node(void) {
    dp_graph_t *g = NULL, *g2 = NULL;
    dp_runtime_t *other = make_runtime();
    dp_graph_output_t a, b, i32, foreign, ins[2], out, root, fetch;
    dp_graph_run_options_t o;
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    float four[4] = {4.f, 9.f, 16.f, 25.f}, roots[4] = {2.f, 3.f, 4.f, 5.f};
    dp_tensor_t *ft, *wrong = NULL, *res = SENTINEL(dp_tensor_t);
    int32_t iv[4] = {1, 2, 3, 4};
    size_t n = 4242;
    SECTION("errors name the node; the graph goes on");
    CHECK_OK(dp_graph_create(&g));
    CHECK_OK(dp_graph_add_placeholder(g, "a", DP_DTYPE_F32, s23, 2, &a));
    CHECK_OK(dp_graph_add_placeholder(g, "b", DP_DTYPE_F32, s23, 2, &b));
    CHECK_OK(dp_graph_add_placeholder(g, "i", DP_DTYPE_I32, NULL, DP_GRAPH_ANY_RANK, &i32));
    memset(&out, 0x5e, sizeof out);
    ins[0] = a;
    ins[1] = b;
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "mm", matmul_op, ins, 2, NULL, NULL, &out, 1, &n),
                     DP_INVALID_ARGUMENT, "graph node 'mm' (MatMul)");
    CHECK(n == 4242 && out.node == 0x5e5e5e5eu);
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "one", add_op, ins, 1, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "expected 2 input(s), got 1");
    {
        /* Inputs no size of an unknown dimension could make right: refused now. */
        dp_graph_output_t batch;
        int64_t pb[2] = {-1, 4};
        dp_dtype_t dt = 99;
        size_t rank = 42;
        CHECK_OK(dp_graph_add_placeholder(g, "batch", DP_DTYPE_F32, pb, 2, &batch));
        ins[0] = batch;
        ins[1] = a; /* [2, 3]: MatMul needs 4 rows */
        CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "mm2", matmul_op, ins, 2, NULL, NULL, &out, 1, NULL),
                         DP_INVALID_ARGUMENT,
                         "graph node 'mm2' (MatMul): MatMul: inner dimensions differ: 'a' [-1, 4] "
                         "has 4, 'b' [2, 3] has 2");
        ins[1] = i32; /* any shape, but i32 */
        CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "mix", add_op, ins, 2, NULL, NULL, &out, 1, NULL),
                         DP_INVALID_ARGUMENT, "input 'y' is i32 but 'x' is f32");
        /* An unknown shape: its dtype is known, its rank is not. */
        CHECK_OK(dp_graph_output_spec(g, i32, &dt, NULL, 0, &rank));
        CHECK(dt == DP_DTYPE_I32 && rank == DP_GRAPH_ANY_RANK);
        ins[0] = a;
        ins[1] = b;
    }
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "cap", add_op, ins, 2, NULL, NULL, &out, 0, NULL),
                     DP_INVALID_ARGUMENT, "capacity");
    CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "a", DP_DTYPE_F32, NULL, 0, &out),
                     DP_INVALID_ARGUMENT, "a node named 'a' exists");
    CHECK_STATUS_MSG(dp_graph_find(g, "nope", 0, &out), DP_NOT_FOUND, "nope");
    CHECK(out.node == 0x5e5e5e5eu);
    CHECK_OK(dp_graph_create(&g2));
    CHECK_OK(dp_graph_add_placeholder(g2, "z", DP_DTYPE_F32, NULL, 0, &foreign));
    ins[1] = foreign;
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "f", add_op, ins, 2, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "another graph");
    CHECK_STATUS_MSG(dp_graph_add_op(g, other, "f", add_op, ins, 2, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "another runtime");
    CHECK_OK(dp_graph_node_count(g, &n));
    CHECK(n == 4);

    /* Run errors. */
    CHECK_OK(dp_graph_add_op(g, rt, "root", sqrt_op, &a, 1, NULL, sim0, &root, 1, NULL));
    CHECK_STATUS_MSG(dp_graph_run(g, rt, NULL, NULL, 0, &root, 1, NULL, &res), DP_INVALID_ARGUMENT,
                     "placeholder 'a' is needed by the fetches but not fed");
    CHECK_UNTOUCHED(dp_tensor_t, res);
    DP_TEST_MUST(dp_tensor_create(cpu0, DP_DTYPE_I32, s4, 1, iv, sizeof iv, &wrong));
    CHECK_STATUS_MSG(dp_graph_run(g, rt, &a, &wrong, 1, &root, 1, NULL, &res), DP_INVALID_ARGUMENT,
                     "placeholder 'a' takes f32");
    CHECK_STATUS_MSG(dp_graph_run(g, rt, &root, &wrong, 1, &root, 1, NULL, &res),
                     DP_INVALID_ARGUMENT, "not a placeholder");
    CHECK_STATUS_MSG(dp_graph_run(g, rt, NULL, NULL, 0, &foreign, 1, NULL, &res),
                     DP_INVALID_ARGUMENT, "another graph");
    CHECK_STATUS_MSG(dp_graph_run(g, other, NULL, NULL, 0, &root, 1, NULL, &res),
                     DP_INVALID_ARGUMENT, "another runtime");
    CHECK_UNTOUCHED(dp_tensor_t, res);
    /* Strict: SIM has no Sqrt kernel and Sqrt no decomposition. A node whose input shape is
     * unknown is checked when it runs. */
    {
        dp_graph_output_t p, r2;
        int64_t any[1] = {-1};
        CHECK_OK(dp_graph_add_placeholder(g, "p", DP_DTYPE_F32, any, 1, &p));
        CHECK_OK(dp_graph_add_op(g, rt, "root2", sqrt_op, &p, 1, NULL, sim0, &r2, 1, NULL));
        ft = f32(cpu0, s4, 1, four, 4);
        dp_graph_run_options_init(&o, sizeof o);
        o.soft_placement = DP_SOFT_PLACEMENT_OFF;
        CHECK_STATUS_MSG(dp_graph_run(g, rt, &p, &ft, 1, &r2, 1, &o, &res), DP_NOT_FOUND,
                         "graph node 'root2' (Sqrt on SIM:0)");
        CHECK_UNTOUCHED(dp_tensor_t, res);
        o.soft_placement = 7;
        CHECK_STATUS_MSG(dp_graph_run(g, rt, &p, &ft, 1, &r2, 1, &o, &res), DP_INVALID_ARGUMENT,
                         "soft_placement");
        CHECK_STATUS_MSG(dp_graph_run(g, rt, &p, &wrong, 1, &r2, 1, NULL, &res),
                         DP_INVALID_ARGUMENT, "placeholder 'p' takes f32");
        /* With soft placement (the default) it runs on the CPU. */
        CHECK_OK(dp_graph_run(g, rt, &p, &ft, 1, &r2, 1, NULL, &res));
        CHECK(holds(res, roots, 4));
        CHECK(dp_tensor_device(res) == cpu0);
        dp_tensor_release(res);
    }
    fetch = i32;
    res = NULL;
    CHECK_OK(dp_graph_run(g, rt, &i32, &wrong, 1, &fetch, 1, NULL, &res));
    CHECK(dp_tensor_dtype(res) == DP_DTYPE_I32);
    dp_tensor_release(res);
    dp_tensor_release(ft);
    dp_tensor_release(wrong);
    dp_graph_destroy(g2);
    dp_graph_destroy(g);
    dp_runtime_destroy(other);
}

static void bad_arguments(void) {
    dp_graph_t *g = NULL, *dead_g = NULL;
    dp_variable_t *v = NULL, *dead_v = NULL, *v_out = SENTINEL(dp_variable_t);
    dp_tensor_t *t, *t_out = SENTINEL(dp_tensor_t);
    dp_device_t *d_out = SENTINEL(dp_device_t);
    dp_graph_output_t x, out;
    dp_graph_run_options_t o;
    int64_t s1[1] = {1};
    float one = 1.f;
    size_t n = 4242;
    SECTION("bad arguments: NULL, destroyed and wrong-kind handles, bad values");
    dp_test_set_marker_runtime(rt);
    t = f32(cpu0, s1, 1, &one, 1);
    CHECK_OK(dp_graph_create(&g));
    CHECK_OK(dp_graph_add_placeholder(g, "x", DP_DTYPE_F32, s1, 1, &x));
    CHECK_OK(dp_variable_create(rt, "v", t, NULL, &v));
    memset(&out, 0x5e, sizeof out);

    /* NULL */
    CHECK_STATUS_MSG(dp_graph_create(NULL), DP_INVALID_ARGUMENT, "out_graph");
    dp_graph_destroy(NULL);
    CHECK_STATUS_MSG(dp_graph_add_placeholder(NULL, "p", DP_DTYPE_F32, s1, 1, &out),
                     DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "p", DP_DTYPE_F32, NULL, 1, &out),
                     DP_INVALID_ARGUMENT, "shape");
    CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "p", DP_DTYPE_F32, s1, 1, NULL),
                     DP_INVALID_ARGUMENT, "out_output");
    CHECK_STATUS_MSG(dp_graph_add_constant(NULL, "c", t, &out), DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_add_constant(g, "c", NULL, &out), DP_INVALID_ARGUMENT, "value");
    CHECK_STATUS_MSG(dp_graph_add_constant(g, "c", t, NULL), DP_INVALID_ARGUMENT, "out_output");
    CHECK_STATUS_MSG(dp_graph_add_op(NULL, rt, "o", add_op, &x, 1, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_add_op(g, NULL, "o", add_op, &x, 1, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "o", NULL, &x, 1, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "op");
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "o", add_op, NULL, 2, NULL, NULL, &out, 1, NULL),
                     DP_INVALID_ARGUMENT, "inputs");
    CHECK_STATUS_MSG(dp_graph_add_op(g, rt, "o", add_op, &x, 1, NULL, NULL, NULL, 1, NULL),
                     DP_INVALID_ARGUMENT, "outputs");
    CHECK_STATUS_MSG(dp_graph_add_read(NULL, "r", v, &out), DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_add_read(g, "r", NULL, &out), DP_INVALID_ARGUMENT, "variable");
    CHECK_STATUS_MSG(dp_graph_add_read(g, "r", v, NULL), DP_INVALID_ARGUMENT, "out_output");
    CHECK_STATUS_MSG(dp_graph_add_assign(NULL, "a", v, x, &out), DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_add_assign(g, "a", NULL, x, &out), DP_INVALID_ARGUMENT, "variable");
    CHECK_STATUS_MSG(dp_graph_add_assign(g, "a", v, x, NULL), DP_INVALID_ARGUMENT, "out_output");
    CHECK_STATUS_MSG(dp_graph_node_count(NULL, &n), DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_node_count(g, NULL), DP_INVALID_ARGUMENT, "out_count");
    CHECK_STATUS_MSG(dp_graph_find(NULL, "x", 0, &out), DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_find(g, NULL, 0, &out), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_graph_find(g, "x", 0, NULL), DP_INVALID_ARGUMENT, "out_output");
    {
        dp_dtype_t dt = 99;
        int64_t dims[1];
        size_t rank = 42;
        CHECK_STATUS_MSG(dp_graph_output_spec(NULL, x, &dt, dims, 1, &rank), DP_INVALID_ARGUMENT,
                         "graph");
        CHECK_STATUS_MSG(dp_graph_output_spec(g, x, NULL, dims, 1, &rank), DP_INVALID_ARGUMENT,
                         "out_dtype");
        CHECK_STATUS_MSG(dp_graph_output_spec(g, x, &dt, NULL, 1, &rank), DP_INVALID_ARGUMENT,
                         "shape");
        CHECK_STATUS_MSG(dp_graph_output_spec(g, x, &dt, dims, 1, NULL), DP_INVALID_ARGUMENT,
                         "out_rank");
        CHECK(dt == 99 && rank == 42);
        CHECK(dp_graph_node_name(NULL, x) == NULL);
    }
    dp_graph_run_options_init(NULL, sizeof o);
    CHECK_STATUS_MSG(dp_graph_run(NULL, rt, &x, &t, 1, &x, 1, NULL, &t_out),
                     DP_INVALID_ARGUMENT, "graph");
    CHECK_STATUS_MSG(dp_graph_run(g, NULL, &x, &t, 1, &x, 1, NULL, &t_out),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_graph_run(g, rt, NULL, &t, 1, &x, 1, NULL, &t_out),
                     DP_INVALID_ARGUMENT, "feed_outputs");
    CHECK_STATUS_MSG(dp_graph_run(g, rt, &x, NULL, 1, &x, 1, NULL, &t_out),
                     DP_INVALID_ARGUMENT, "feed_tensors");
    {
        dp_tensor_t *null_feed = NULL;
        CHECK_STATUS_MSG(dp_graph_run(g, rt, &x, &null_feed, 1, &x, 1, NULL, &t_out),
                         DP_INVALID_ARGUMENT, "feed_tensors[0]");
    }
    CHECK_STATUS_MSG(dp_graph_run(g, rt, &x, &t, 1, NULL, 1, NULL, &t_out), DP_INVALID_ARGUMENT,
                     "fetches");
    CHECK_STATUS_MSG(dp_graph_run(g, rt, &x, &t, 1, &x, 1, NULL, NULL), DP_INVALID_ARGUMENT,
                     "results");
    CHECK_UNTOUCHED(dp_tensor_t, t_out);
    CHECK_STATUS_MSG(dp_variable_create(NULL, "w", t, NULL, &v_out), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_variable_create(rt, NULL, t, NULL, &v_out), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_variable_create(rt, "w", NULL, NULL, &v_out), DP_INVALID_ARGUMENT,
                     "initial");
    CHECK_STATUS_MSG(dp_variable_create(rt, "w", t, NULL, NULL), DP_INVALID_ARGUMENT,
                     "out_variable");
    CHECK_STATUS_MSG(dp_variable_create(rt, "", t, NULL, &v_out), DP_INVALID_ARGUMENT, "empty");
    CHECK_UNTOUCHED(dp_variable_t, v_out);
    dp_variable_retain(NULL);
    dp_variable_release(NULL);
    CHECK(dp_variable_name(NULL) == NULL);
    CHECK_STATUS_MSG(dp_variable_device(NULL, &d_out), DP_INVALID_ARGUMENT, "variable");
    CHECK_STATUS_MSG(dp_variable_device(v, NULL), DP_INVALID_ARGUMENT, "out_device");
    CHECK_UNTOUCHED(dp_device_t, d_out);
    CHECK_STATUS_MSG(dp_variable_read(NULL, &t_out), DP_INVALID_ARGUMENT, "variable");
    CHECK_STATUS_MSG(dp_variable_read(v, NULL), DP_INVALID_ARGUMENT, "out_tensor");
    CHECK_STATUS_MSG(dp_variable_assign(NULL, t), DP_INVALID_ARGUMENT, "variable");
    CHECK_STATUS_MSG(dp_variable_assign(v, NULL), DP_INVALID_ARGUMENT, "value");

    /* Bad values. */
    CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "p", 99, s1, 1, &out), DP_INVALID_ARGUMENT,
                     "dtype");
    CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "p", DP_DTYPE_F32, s1, 9, &out),
                     DP_INVALID_ARGUMENT, "rank");
    {
        int64_t neg[1] = {-3};
        CHECK_STATUS_MSG(dp_graph_add_placeholder(g, "p", DP_DTYPE_F32, neg, 1, &out),
                         DP_INVALID_ARGUMENT, "not a shape");
    }
    {
        dp_graph_output_t forged = x;
        forged.node = 1000;
        CHECK_STATUS_MSG(dp_graph_run(g, rt, NULL, NULL, 0, &forged, 1, NULL, &t_out),
                         DP_INVALID_ARGUMENT, "does not have");
        CHECK(dp_graph_node_name(g, forged) == NULL);
        {
            dp_dtype_t dt = 99;
            size_t rank = 42;
            CHECK_STATUS_MSG(dp_graph_output_spec(g, forged, &dt, NULL, 0, &rank),
                             DP_INVALID_ARGUMENT, "does not have");
            CHECK(dt == 99 && rank == 42);
        }
        forged = x;
        forged.index = 1;
        CHECK_STATUS_MSG(dp_graph_add_assign(g, "a", v, forged, &out), DP_INVALID_ARGUMENT,
                         "does not have");
    }
    CHECK(out.node == 0x5e5e5e5eu);
    CHECK_UNTOUCHED(dp_tensor_t, t_out);

    /* Wrong kinds: a tensor where a graph or a variable belongs, a graph as a variable. */
    CHECK_STATUS_MSG(dp_graph_add_placeholder((dp_graph_t *)t, "p", DP_DTYPE_F32, s1, 1, &out),
                     DP_INVALID_ARGUMENT, "dp_tensor_t");
    CHECK_STATUS_MSG(dp_graph_add_read(g, "r", (dp_variable_t *)g, &out), DP_INVALID_ARGUMENT,
                     "dp_graph_t");
    CHECK_STATUS_MSG(dp_graph_run((dp_graph_t *)v, rt, NULL, NULL, 0, &x, 1, NULL, &t_out),
                     DP_INVALID_ARGUMENT, "dp_variable_t");
    CHECK_STATUS_MSG(dp_variable_read((dp_variable_t *)t, &t_out), DP_INVALID_ARGUMENT,
                     "dp_tensor_t");
    CHECK_STATUS_MSG(dp_variable_create(rt, "w", (dp_tensor_t *)v, NULL, &v_out),
                     DP_INVALID_ARGUMENT, "dp_variable_t");
    CHECK_STATUS_MSG(dp_graph_add_constant(g, "c", (dp_tensor_t *)g, &out), DP_INVALID_ARGUMENT,
                     "dp_graph_t");
    CHECK(dp_variable_name((dp_variable_t *)g) == NULL);
    CHECK(dp_graph_node_name((dp_graph_t *)t, x) == NULL);
    CHECK(out.node == 0x5e5e5e5eu);
    CHECK_UNTOUCHED(dp_tensor_t, t_out);
    CHECK_UNTOUCHED(dp_variable_t, v_out);

    /* Destroyed handles. */
    CHECK_OK(dp_graph_create(&dead_g));
    dp_graph_destroy(dead_g);
    CHECK_OK(dp_variable_create(rt, "dead", t, NULL, &dead_v));
    dp_variable_release(dead_v);
    CHECK_STATUS_MSG(dp_graph_add_placeholder(dead_g, "p", DP_DTYPE_F32, s1, 1, &out),
                     DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_graph_node_count(dead_g, &n), DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_graph_run(dead_g, rt, NULL, NULL, 0, NULL, 0, NULL, NULL),
                     DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_graph_add_read(g, "r", dead_v, &out), DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_variable_read(dead_v, &t_out), DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_variable_assign(dead_v, t), DP_INVALID_ARGUMENT, "destroyed");
    CHECK(dp_variable_name(dead_v) == NULL);
    CHECK(dp_graph_node_name(dead_g, x) == NULL);
    dp_graph_destroy(dead_g); /* a second destroy is a no-op */
    dp_variable_release(dead_v);
    CHECK(out.node == 0x5e5e5e5eu);
    CHECK_UNTOUCHED(dp_tensor_t, t_out);
    dp_test_set_marker_runtime(NULL);

    /* After all that: a good run, a retained variable outliving one release. */
    dp_variable_retain(v);
    dp_variable_release(v);
    CHECK_OK(dp_graph_node_count(g, &n));
    CHECK(n == 1);
    t_out = NULL;
    CHECK_OK(dp_graph_run(g, rt, &x, &t, 1, &x, 1, NULL, &t_out));
    CHECK(holds(t_out, &one, 1));
    dp_tensor_release(t_out);
    CHECK_OK(dp_variable_read(v, &t_out));
    CHECK(holds(t_out, &one, 1));
    dp_tensor_release(t_out);
    dp_variable_release(v);
    dp_tensor_release(t);
    dp_graph_destroy(g);
}

/* A device setter that calls into the graph being built (the graph is locked by this thread
 * then): refused with DP_FAILED_PRECONDITION instead of a deadlock; the node is added. */
static dp_graph_t *reentered_graph;
static dp_status_t reentry_status = DP_OK;
static char reentry_message[256];
static dp_status_t setter_calling_the_graph(const dp_placement_query_t *q, void *user_data,
                                            dp_device_t **out_device) {
    size_t n = 0;
    (void)q;
    (void)user_data;
    (void)out_device;
    reentry_status = dp_graph_node_count(reentered_graph, &n);
    snprintf(reentry_message, sizeof reentry_message, "%s", dp_last_error_message());
    return DP_OK;
}

static void a_setter_calling_the_graph_it_places_for(void) {
    dp_scope_t *scope = NULL;
    dp_graph_output_t x, y;
    size_t n = 0;
    SECTION("a setter calling into the graph being built");
    CHECK_OK(dp_graph_create(&reentered_graph));
    CHECK_OK(dp_graph_add_placeholder(reentered_graph, "x", DP_DTYPE_F32, NULL, DP_GRAPH_ANY_RANK,
                                      &x));
    CHECK_OK(dp_scope_create_setter(rt, setter_calling_the_graph, NULL, NULL, &scope));
    CHECK_OK(dp_scope_enter(scope));
    CHECK_OK(dp_graph_add_op(reentered_graph, rt, "y", sqrt_op, &x, 1, NULL, NULL, &y, 1, NULL));
    CHECK_OK(dp_scope_exit(scope));
    CHECK(reentry_status == DP_FAILED_PRECONDITION);
    CHECK(strstr(reentry_message, "in use on this thread") != NULL);
    CHECK_OK(dp_graph_node_count(reentered_graph, &n)); /* and afterwards it answers */
    CHECK(n == 2);
    dp_scope_destroy(scope);
    dp_graph_destroy(reentered_graph);
}

/* Teardown in the "wrong" order: the runtime first, then the graph and the variable that
 * hold its devices, ops and tensors (SIM's included). Nothing crashes or leaks (the ASan run). */
static void runtime_destroyed_before_its_graph(void) {
    const char *opts[] = {"devices=1"};
    dp_runtime_t *r = make_runtime();
    dp_device_t *sim = NULL, *cpu = NULL;
    dp_op_t *add = NULL;
    dp_graph_t *g = NULL;
    dp_variable_t *v = NULL;
    dp_graph_output_t rd, sum, ins[2];
    dp_tensor_t *t, *res = NULL;
    int64_t s2[1] = {2};
    float v0[2] = {1.f, 2.f}, twice[2] = {2.f, 4.f};
    SECTION("the runtime destroyed before its graph and variable");
    DP_TEST_MUST(dp_runtime_load_plugin(r, SIM, opts, 1));
    DP_TEST_MUST(dp_runtime_find_device(r, "SIM:0", &sim));
    DP_TEST_MUST(dp_runtime_find_device(r, "CPU:0", &cpu));
    DP_TEST_MUST(dp_runtime_find_op(r, "Add", &add));
    t = f32(cpu, s2, 1, v0, 2);
    CHECK_OK(dp_variable_create(r, "v", t, sim, &v));
    CHECK_OK(dp_graph_create(&g));
    CHECK_OK(dp_graph_add_read(g, "r", v, &rd));
    ins[0] = rd;
    ins[1] = rd;
    CHECK_OK(dp_graph_add_op(g, r, "sum", add, ins, 2, NULL, sim, &sum, 1, NULL));
    CHECK_OK(dp_graph_add_constant(g, "c", t, &ins[0]));
    CHECK_OK(dp_graph_run(g, r, NULL, NULL, 0, &sum, 1, NULL, &res));
    CHECK(holds(res, twice, 2));
    dp_runtime_destroy(r);
    /* What is left still reads: the result and the variable hold their memory. */
    CHECK(holds(res, twice, 2));
    dp_tensor_release(res);
    res = NULL;
    CHECK_OK(dp_variable_read(v, &res));
    CHECK(holds(res, v0, 2));
    dp_tensor_release(res);
    dp_graph_destroy(g);
    dp_variable_release(v);
    dp_tensor_release(t);
}

int main(void) {
    setup();
    build_once_run_twice();
    training_step();
    placed_by_a_setter();
    errors_name_the_node();
    bad_arguments();
    runtime_destroyed_before_its_graph();
    a_setter_calling_the_graph_it_places_for();
    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
