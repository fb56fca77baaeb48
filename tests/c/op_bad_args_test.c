/* Bad arguments to the eager op API (dp_runtime_find_op, dp_op_name, dp_attrs_*,
 * dp_run_options_init, dp_op_run, dp_runtime_set_placement_callback), class by class:
 *   - NULL for every pointer parameter;
 *   - destroyed handles (a destroyed runtime and the ops it owned, destroyed attrs, a released
 *     input tensor, a device of a destroyed runtime);
 *   - handles of the wrong kind (a tensor as attrs, attrs as an op or as an input, ...) and
 *     forged handles;
 *   - bad enums and values: dtype attribute 0/7/99/-1, set_bool 2, soft_placement 7, run
 *     options with struct_size 0 or too small, capacity too small for the outputs, num_inputs
 *     > 0 with NULL inputs, a NULL entry inside inputs;
 *   - the op-level errors: wrong arity, dtype mismatches, incompatible shapes, unknown op,
 *     unknown attribute, attribute of the wrong type, missing required attribute.
 * Expected: the documented status (DP_INVALID_ARGUMENT, DP_NOT_FOUND for an unknown op), a
 * message written by that very call naming the parameter (or the op and the operand or
 * attribute), no out-parameter written (outputs pre-filled with sentinels), no drop called for
 * a callback that was not installed, and the runtime still working after every op error. */
#include "dp_test.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define AS(T, h) ((T *)(void *)(h))

/* ------------------------------------------------------------------------------------------
 * Fixture
 * ---------------------------------------------------------------------------------------- */

typedef struct fx_t {
    dp_runtime_t *rt;
    dp_device_t *cpu0, *cpu1;
    dp_tensor_t *x23;  /* f32 [2,3] = 0..5 */
    dp_tensor_t *y3;   /* f32 [3] = 10, 20, 30 */
    dp_tensor_t *i23;  /* i32 [2,3] */
    dp_tensor_t *f4;   /* f32 [4] */
    dp_tensor_t *b23;  /* bool [2,3] */
    dp_tensor_t *u3;   /* u8 [3] */
    dp_tensor_t *sc;   /* f32 scalar */
    dp_tensor_t *d3;   /* f64 [3] */
    dp_attrs_t *attrs; /* a live, empty attribute set */
    dp_op_t *add;
} fx_t;

static const float x23_data[6] = {0, 1, 2, 3, 4, 5};
static const float y3_data[3] = {10, 20, 30};

static int drops = 0;
static void count_drop(void *user_data) {
    (void)user_data;
    drops++;
}
static void ignore_event(const dp_placement_event_t *e, void *user_data) {
    (void)e;
    (void)user_data;
}

static dp_runtime_t *new_runtime(uint32_t cpus) { return dp_test_runtime(cpus, 0); }

static dp_tensor_t *tensor(dp_device_t *d, dp_dtype_t dt, const int64_t *shape, size_t rank,
                           const void *data) {
    dp_tensor_t *t = NULL;
    size_t n = 1, i;
    for (i = 0; i < rank; ++i) n *= (size_t)shape[i];
    DP_TEST_MUST(dp_tensor_create(d, dt, shape, rank, data, data ? n * dp_dtype_size(dt) : 0, &t));
    return t;
}

static void fx_setup(fx_t *f) {
    static const int64_t s23[2] = {2, 3}, s3[1] = {3}, s4[1] = {4};
    static const int32_t i23[6] = {1, 2, 3, 4, 5, 6};
    static const uint8_t b23[6] = {1, 0, 1, 0, 1, 0};
    static const float f4[4] = {1, 2, 3, 4};
    static const uint8_t u3[3] = {1, 2, 3};
    static const float one = 1.f;
    static const double d3[3] = {1, 2, 3};
    f->rt = new_runtime(2);
    f->cpu0 = dp_test_device(f->rt, 0);
    f->cpu1 = dp_test_device(f->rt, 1);
    f->x23 = tensor(f->cpu0, DP_DTYPE_F32, s23, 2, x23_data);
    f->y3 = tensor(f->cpu0, DP_DTYPE_F32, s3, 1, y3_data);
    f->i23 = tensor(f->cpu0, DP_DTYPE_I32, s23, 2, i23);
    f->f4 = tensor(f->cpu0, DP_DTYPE_F32, s4, 1, f4);
    f->b23 = tensor(f->cpu0, DP_DTYPE_BOOL, s23, 2, b23);
    f->u3 = tensor(f->cpu0, DP_DTYPE_U8, s3, 1, u3);
    f->sc = tensor(f->cpu0, DP_DTYPE_F32, NULL, 0, &one);
    f->d3 = tensor(f->cpu0, DP_DTYPE_F64, s3, 1, d3);
    DP_TEST_MUST(dp_attrs_create(&f->attrs));
    DP_TEST_MUST(dp_runtime_find_op(f->rt, "Add", &f->add));
}

static void fx_teardown(fx_t *f) {
    dp_tensor_release(f->x23);
    dp_tensor_release(f->y3);
    dp_tensor_release(f->i23);
    dp_tensor_release(f->f4);
    dp_tensor_release(f->b23);
    dp_tensor_release(f->u3);
    dp_tensor_release(f->sc);
    dp_tensor_release(f->d3);
    dp_attrs_destroy(f->attrs);
    dp_runtime_destroy(f->rt);
}

static dp_op_t *op_of(fx_t *f, const char *name) {
    dp_op_t *op = NULL;
    DP_TEST_MUST(dp_runtime_find_op(f->rt, name, &op));
    return op;
}

/* A good Add: [2,3] + [3] on the CPU, every value checked; the inputs are intact. */
static void still_works_(fx_t *f, const char *file, int line) {
    dp_tensor_t *ins[2], *out = NULL;
    size_t n = 0, i;
    float got[6], in[6];
    dp_status_t st;
    int ok = 1;
    ins[0] = f->x23;
    ins[1] = f->y3;
    st = dp_op_run(f->rt, f->add, ins, 2, NULL, NULL, &out, 1, &n);
    if (st != DP_OK || n != 1 || out == NULL) {
        char msg[512], why[700];
        dp_test_copy_message_(msg, sizeof msg);
        snprintf(why, sizeof why, "the runtime no longer runs Add: %s: %s", dp_status_str(st), msg);
        dp_test_fail_(file, line, why);
        return;
    }
    memset(got, 0, sizeof got);
    if (dp_tensor_read(out, got, sizeof got) != DP_OK) ok = 0;
    for (i = 0; i < 6; ++i) ok = ok && got[i] == x23_data[i] + y3_data[i % 3];
    if (dp_tensor_read(f->x23, in, sizeof in) != DP_OK || memcmp(in, x23_data, sizeof in) != 0) ok = 0;
    dp_tensor_release(out);
    if (ok) dp_test_pass_();
    else dp_test_fail_(file, line, "the runtime still runs Add, but with wrong values or changed inputs");
}
#define STILL_WORKS(f) still_works_((f), __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------
 * Checking a failing dp_op_run
 * ---------------------------------------------------------------------------------------- */

/* `words`: ';'-separated groups that must all appear in msg; a group may hold '|' alternatives. */
static void check_words_(const char *msg, const char *words, const char *what, const char *file,
                         int line) {
    char group[128], why[1200];
    const char *p = words;
    if (words == NULL) return;
    for (;;) {
        const char *semi = strchr(p, ';');
        size_t n = semi ? (size_t)(semi - p) : strlen(p);
        if (n >= sizeof group) n = sizeof group - 1;
        memcpy(group, p, n);
        group[n] = '\0';
        if (dp_test_message_matches_(msg, group)) {
            dp_test_pass_();
        } else {
            snprintf(why, sizeof why, "%s: the message \"%s\" does not name [%s]", what, msg, group);
            dp_test_fail_(file, line, why);
        }
        if (!semi) return;
        p = semi + 1;
    }
}

/* Runs `op` expecting `want`; checks the message (all `words`), that no output and no count was
 * written. capacity/null_outputs select the output array given. */
static void run_fails_(dp_runtime_t *rt, const dp_op_t *op, dp_tensor_t *const *ins, size_t n,
                       const dp_attrs_t *attrs, const dp_run_options_t *opt, size_t capacity,
                       int null_outputs, dp_status_t want, const char *words, const char *what,
                       const char *file, int line) {
    dp_tensor_t *outs[4];
    size_t count = 4242;
    dp_status_t st;
    char msg[1024];
    outs[0] = outs[1] = outs[2] = outs[3] = SENTINEL(dp_tensor_t);
    dp_test_stamp_();
    st = dp_op_run(rt, op, ins, n, attrs, opt, null_outputs ? NULL : outs, capacity, &count);
    dp_test_copy_message_(msg, sizeof msg);
    if (getenv("DP_TEST_VERBOSE") != NULL) fprintf(stdout, "   %s -> %s: %s\n", what, dp_status_str(st), msg);
    dp_test_check_status_(st, want, NULL, what, file, line);
    if (st == want) check_words_(msg, words, what, file, line);
    if (st == DP_OK) {
        /* an unexpected success: do not leak the outputs */
        size_t i;
        for (i = 0; i < count && i < 4; ++i) dp_tensor_release(outs[i]);
        return;
    }
    if (outs[0] == SENTINEL(dp_tensor_t) && outs[1] == SENTINEL(dp_tensor_t) &&
        outs[2] == SENTINEL(dp_tensor_t) && outs[3] == SENTINEL(dp_tensor_t) && count == 4242) {
        dp_test_pass_();
    } else {
        char why[300];
        snprintf(why, sizeof why, "%s: an output or out_count was written on failure", what);
        dp_test_fail_(file, line, why);
    }
}
#define RUN_FAILS(rt, op, ins, n, attrs, opt, want, words)                                      \
    run_fails_((rt), (op), (ins), (n), (attrs), (opt), 4, 0, (want), (words), #op "(" #ins ", " \
               #n ", " #attrs ", " #opt ")", __FILE__, __LINE__)

/* A value-returning function gave its invalid value and said why. */
#define CHECK_NULL_MSG(call, words)                                                      \
    do {                                                                                 \
        const void *r_;                                                                  \
        dp_test_stamp_();                                                                \
        r_ = (const void *)(call);                                                       \
        CHECKF(r_ == NULL, "%s returned %p, expected NULL", #call, r_);                  \
        dp_test_check_status_(DP_INVALID_ARGUMENT, DP_INVALID_ARGUMENT, (words), #call,  \
                              __FILE__, __LINE__);                                       \
    } while (0)

/* The op-level error of running `name` on `ins` with `attrs`; then the runtime still works. */
static void op_error_(fx_t *f, const char *name, dp_tensor_t *const *ins, size_t n,
                      const dp_attrs_t *attrs, dp_status_t want, const char *words,
                      const char *what, const char *file, int line) {
    dp_op_t *op = op_of(f, name);
    run_fails_(f->rt, op, ins, n, attrs, NULL, 4, 0, want, words, what, file, line);
    still_works_(f, file, line);
}
#define OP_ERROR(f, name, ins, n, attrs, words, what) \
    op_error_((f), (name), (ins), (n), (attrs), DP_INVALID_ARGUMENT, (words), (what), __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------
 * NULL
 * ---------------------------------------------------------------------------------------- */

static void test_null(fx_t *f) {
    dp_op_t *op = SENTINEL(dp_op_t);
    dp_attrs_t *a = SENTINEL(dp_attrs_t);
    dp_tensor_t *ins[2];
    static const int64_t axes[2] = {0, 1};
    SECTION("NULL: dp_runtime_find_op, dp_op_name, dp_attrs_create/destroy");
    CHECK_STATUS_MSG(dp_runtime_find_op(NULL, "Add", &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, NULL, &op), DP_INVALID_ARGUMENT, "name");
    CHECK_UNTOUCHED(dp_op_t, op);
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, "Add", NULL), DP_INVALID_ARGUMENT, "out_op");
    CHECK_NULL_MSG(dp_op_name(NULL), "op");
    CHECK_NULL_MSG(dp_op_signature(NULL), "op");
    {
        size_t n = 7;
        CHECK_STATUS_MSG(dp_op_num_outputs(NULL, &n), DP_INVALID_ARGUMENT, "op");
        CHECK(n == 7);
    }
    CHECK_STATUS_MSG(dp_attrs_create(NULL), DP_INVALID_ARGUMENT, "out_attrs");
    dp_attrs_destroy(NULL); /* no-op */
    CHECK(1);
    (void)a;

    SECTION("NULL: the dp_attrs_set_* functions (attrs, name; values with a count)");
    CHECK_STATUS_MSG(dp_attrs_set_int(NULL, "axis", 1), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_int(f->attrs, NULL, 1), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_float(NULL, "value", 1.0), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_float(f->attrs, NULL, 1.0), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_bool(NULL, "keep_dims", 1), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_bool(f->attrs, NULL, 1), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_ints(NULL, "axes", axes, 2), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_ints(f->attrs, NULL, axes, 2), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_ints(f->attrs, "axes", NULL, 2), DP_INVALID_ARGUMENT, "values");
    CHECK_STATUS_MSG(dp_attrs_set_dtype(NULL, "dtype", DP_DTYPE_F32), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_dtype(f->attrs, NULL, DP_DTYPE_F32), DP_INVALID_ARGUMENT, "name");
    SECTION("empty attribute names are refused too");
    CHECK_STATUS_MSG(dp_attrs_set_int(f->attrs, "", 1), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_float(f->attrs, "", 1.0), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_bool(f->attrs, "", 0), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_ints(f->attrs, "", axes, 2), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_dtype(f->attrs, "", DP_DTYPE_F32), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_string(NULL, "mode", "fast"), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_string(f->attrs, NULL, "fast"), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_string(f->attrs, "", "fast"), DP_INVALID_ARGUMENT, "name");
    CHECK_STATUS_MSG(dp_attrs_set_string(f->attrs, "mode", NULL), DP_INVALID_ARGUMENT, "value");
    CHECK_STATUS_MSG(dp_attrs_set_string(f->attrs, "mode", "\xff\xfe"), DP_INVALID_ARGUMENT, "UTF-8");
    /* none of the failed calls added anything: Add with these attrs has no unknown attribute */
    {
        dp_tensor_t *out = NULL;
        ins[0] = f->x23;
        ins[1] = f->y3;
        CHECK_OK(dp_op_run(f->rt, f->add, ins, 2, f->attrs, NULL, &out, 1, NULL));
        dp_tensor_release(out);
    }
    /* values may be NULL with a count of 0 */
    {
        dp_attrs_t *b = NULL;
        CHECK_OK(dp_attrs_create(&b));
        CHECK_OK(dp_attrs_set_ints(b, "axes", NULL, 0));
        dp_attrs_destroy(b);
    }

    SECTION("NULL: dp_run_options_init(NULL) is a no-op");
    dp_run_options_init(NULL, sizeof(dp_run_options_t));
    CHECK(1);

    SECTION("NULL: dp_op_run (runtime, op, inputs with a count, an entry of inputs, outputs)");
    ins[0] = f->x23;
    ins[1] = f->y3;
    RUN_FAILS(NULL, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "runtime");
    RUN_FAILS(f->rt, NULL, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "op");
    RUN_FAILS(f->rt, f->add, NULL, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs");
    ins[1] = NULL;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[1]");
    ins[0] = NULL;
    ins[1] = f->y3;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[0]");
    ins[0] = f->x23;
    run_fails_(f->rt, f->add, ins, 2, NULL, NULL, 1, 1, DP_INVALID_ARGUMENT, "outputs",
               "dp_op_run(outputs NULL, capacity 1)", __FILE__, __LINE__);
    STILL_WORKS(f);

    SECTION("NULL: dp_runtime_set_placement_callback; a refused callback is not dropped");
    drops = 0;
    CHECK_STATUS_MSG(dp_runtime_set_placement_callback(NULL, ignore_event, &drops, count_drop),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECKF(drops == 0, "drop ran %d time(s) for a callback that was never installed", drops);
}

/* ------------------------------------------------------------------------------------------
 * Destroyed handles
 * ---------------------------------------------------------------------------------------- */

static dp_attrs_t *dead_attrs_(void) {
    dp_attrs_t *a = NULL;
    DP_TEST_MUST(dp_attrs_create(&a));
    dp_attrs_destroy(a);
    return a;
}

static void test_destroyed(fx_t *f) {
    dp_runtime_t *dead;
    dp_op_t *dead_op = NULL, *op = SENTINEL(dp_op_t);
    dp_device_t *dead_dev;
    dp_attrs_t *dead_attrs = NULL;
    dp_tensor_t *ins[2], *dead_t;
    dp_run_options_t o;
    static const int64_t axes[1] = {0};
    static const int64_t s3[1] = {3};
    SECTION("destroyed runtime: find_op, op_run, set_placement_callback");
    dead = new_runtime(1);
    dp_runtime_destroy(dead);
    CHECK_STATUS_MSG(dp_runtime_find_op(dead, "Add", &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    dead = new_runtime(1);
    dp_runtime_destroy(dead);
    CHECK_STATUS_MSG(dp_runtime_op_at(dead, 0, &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    {
        size_t n = 4242;
        dead = new_runtime(1);
        dp_runtime_destroy(dead);
        CHECK_STATUS_MSG(dp_runtime_op_count(dead, &n), DP_INVALID_ARGUMENT, "runtime");
        CHECK(n == 4242);
    }
    ins[0] = f->x23;
    ins[1] = f->y3;
    dead = new_runtime(1);
    dp_runtime_destroy(dead);
    RUN_FAILS(dead, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "runtime");
    dead = new_runtime(1);
    dp_runtime_destroy(dead);
    drops = 0;
    CHECK_STATUS_MSG(dp_runtime_set_placement_callback(dead, ignore_event, &drops, count_drop),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK(drops == 0);
    dead = new_runtime(1);
    dp_runtime_destroy(dead);
    dp_runtime_destroy(dead); /* double destroy: no-op */
    CHECK(1);

    SECTION("an op of a destroyed runtime: dp_op_name, dp_op_run on a live runtime");
    dead = new_runtime(1);
    DP_TEST_MUST(dp_runtime_find_op(dead, "Add", &dead_op));
    dp_runtime_destroy(dead);
    CHECK_NULL_MSG(dp_op_name(dead_op), "op");
    CHECK_NULL_MSG(dp_op_signature(dead_op), "op");
    {
        size_t n = 7;
        CHECK_STATUS_MSG(dp_op_num_outputs(dead_op, &n), DP_INVALID_ARGUMENT, "op");
        CHECK(n == 7);
    }
    dead = new_runtime(1);
    DP_TEST_MUST(dp_runtime_find_op(dead, "Add", &dead_op));
    dp_runtime_destroy(dead);
    RUN_FAILS(f->rt, dead_op, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "op");
    STILL_WORKS(f);

    SECTION("destroyed attrs: every setter, dp_op_run, destroying again");
#define DEAD_ATTRS() dead_attrs_()
    CHECK_STATUS_MSG(dp_attrs_set_int(DEAD_ATTRS(), "axis", 0), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_float(DEAD_ATTRS(), "value", 0.5), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_bool(DEAD_ATTRS(), "keep_dims", 1), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_string(DEAD_ATTRS(), "mode", "fast"), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_ints(DEAD_ATTRS(), "axes", axes, 1), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_dtype(DEAD_ATTRS(), "dtype", DP_DTYPE_I32), DP_INVALID_ARGUMENT, "attrs");
    RUN_FAILS(f->rt, f->add, ins, 2, DEAD_ATTRS(), NULL, DP_INVALID_ARGUMENT, "attrs");
    dp_attrs_destroy(DEAD_ATTRS()); /* double destroy: no-op */
    CHECK(1);
#undef DEAD_ATTRS
    (void)dead_attrs;

    SECTION("a released input tensor, in either position");
    dead_t = tensor(f->cpu0, DP_DTYPE_F32, s3, 1, y3_data);
    dp_tensor_release(dead_t);
    ins[1] = dead_t;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[1]");
    dead_t = tensor(f->cpu0, DP_DTYPE_F32, s3, 1, y3_data);
    dp_tensor_release(dead_t);
    ins[0] = dead_t;
    ins[1] = f->y3;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[0]");
    ins[0] = f->x23;

    SECTION("options->device: a device of a destroyed runtime");
    dead = new_runtime(1);
    dead_dev = dp_test_device(dead, 0);
    dp_runtime_destroy(dead);
    dp_run_options_init(&o, sizeof o);
    o.device = dead_dev;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "device");
    STILL_WORKS(f);
}

/* ------------------------------------------------------------------------------------------
 * Wrong kinds and forged handles
 * ---------------------------------------------------------------------------------------- */

static void test_wrong_kind(fx_t *f) {
    dp_op_t *op = SENTINEL(dp_op_t);
    dp_tensor_t *ins[2];
    dp_run_options_t o;
    static const int64_t axes[1] = {0};
    /* 64 aligned zero bytes that never were a handle */
    static uint64_t forged[8];
    float back[6];
    SECTION("wrong kind: the runtime parameter given a device, a tensor, attrs");
    CHECK_STATUS_MSG(dp_runtime_find_op(AS(dp_runtime_t, f->cpu0), "Add", &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    CHECK_STATUS_MSG(dp_runtime_op_at(AS(dp_runtime_t, f->x23), 0, &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    {
        size_t n = 4242;
        CHECK_STATUS_MSG(dp_runtime_op_count(AS(dp_runtime_t, f->attrs), &n), DP_INVALID_ARGUMENT, "runtime");
        CHECK(n == 4242);
    }
    ins[0] = f->x23;
    ins[1] = f->y3;
    RUN_FAILS(AS(dp_runtime_t, f->x23), f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "runtime");
    drops = 0;
    CHECK_STATUS_MSG(dp_runtime_set_placement_callback(AS(dp_runtime_t, f->attrs), ignore_event, &drops, count_drop),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK(drops == 0);

    SECTION("wrong kind: the op parameter given attrs / a tensor / the runtime");
    RUN_FAILS(f->rt, AS(dp_op_t, f->attrs), ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "op");
    RUN_FAILS(f->rt, AS(dp_op_t, f->rt), ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "op");
    CHECK_NULL_MSG(dp_op_name(AS(dp_op_t, f->x23)), "op");
    CHECK_NULL_MSG(dp_op_signature(AS(dp_op_t, f->x23)), "op");
    {
        size_t n = 7;
        CHECK_STATUS_MSG(dp_op_num_outputs(AS(dp_op_t, f->attrs), &n), DP_INVALID_ARGUMENT, "op");
        CHECK(n == 7);
    }

    SECTION("wrong kind: attrs given a tensor (dp_op_run, setters, destroy leaves it alive)");
    RUN_FAILS(f->rt, f->add, ins, 2, AS(dp_attrs_t, f->x23), NULL, DP_INVALID_ARGUMENT, "attrs");
    RUN_FAILS(f->rt, f->add, ins, 2, AS(dp_attrs_t, f->add), NULL, DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_int(AS(dp_attrs_t, f->x23), "axis", 0), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_float(AS(dp_attrs_t, f->x23), "value", 0), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_bool(AS(dp_attrs_t, f->x23), "keep_dims", 0), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_string(AS(dp_attrs_t, f->x23), "mode", "fast"), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_ints(AS(dp_attrs_t, f->x23), "axes", axes, 1), DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_dtype(AS(dp_attrs_t, f->x23), "dtype", DP_DTYPE_F32), DP_INVALID_ARGUMENT, "attrs");
    dp_attrs_destroy(AS(dp_attrs_t, f->x23)); /* refused: the tensor lives on */
    dp_attrs_destroy(AS(dp_attrs_t, f->add)); /* refused: the op lives on */
    CHECK(dp_tensor_dtype(f->x23) == DP_DTYPE_F32);
    CHECK_OK(dp_tensor_read(f->x23, back, sizeof back));
    CHECK(memcmp(back, x23_data, sizeof back) == 0);
    CHECK_STR(dp_op_name(f->add), "Add");

    SECTION("wrong kind: an input given attrs / an op / a device");
    ins[1] = AS(dp_tensor_t, f->attrs);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[1]");
    ins[1] = f->y3;
    ins[0] = AS(dp_tensor_t, f->add);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[0]");
    ins[0] = AS(dp_tensor_t, f->cpu0);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[0]");
    ins[0] = f->x23;

    SECTION("wrong kind: options->device given a tensor / the runtime");
    dp_run_options_init(&o, sizeof o);
    o.device = AS(dp_device_t, f->x23);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "device");
    o.device = AS(dp_device_t, f->rt);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "device");

    SECTION("forged handles (zeroed memory) as op, attrs, input, runtime");
    memset(forged, 0, sizeof forged);
    RUN_FAILS(f->rt, AS(dp_op_t, forged), ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "op");
    RUN_FAILS(f->rt, f->add, ins, 2, AS(dp_attrs_t, forged), NULL, DP_INVALID_ARGUMENT, "attrs");
    CHECK_STATUS_MSG(dp_attrs_set_int(AS(dp_attrs_t, forged), "axis", 1), DP_INVALID_ARGUMENT, "attrs");
    ins[1] = AS(dp_tensor_t, forged);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, NULL, DP_INVALID_ARGUMENT, "inputs[1]");
    ins[1] = f->y3;
    CHECK_STATUS_MSG(dp_runtime_find_op(AS(dp_runtime_t, forged), "Add", &op), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_op_t, op);
    CHECK_NULL_MSG(dp_op_name(AS(dp_op_t, forged)), "op");
    CHECK(forged[0] == 0 && forged[7] == 0);
    STILL_WORKS(f);
}

/* ------------------------------------------------------------------------------------------
 * Bad enums, values and sizes
 * ---------------------------------------------------------------------------------------- */

static void test_values(fx_t *f) {
    static const dp_dtype_t bad_dtypes[] = {0, 9, 99, -1, INT32_MIN, INT32_MAX};
    static const int32_t bad_bools[] = {2, -1, 255};
    static const int32_t bad_soft[] = {7, 2, -2, INT32_MIN};
    dp_tensor_t *ins[2];
    dp_run_options_t o;
    size_t i;
    dp_op_t *cast = op_of(f, "Cast");
    ins[0] = f->x23;
    ins[1] = f->y3;

    SECTION("bad enum: dtype attribute values; the set keeps its previous value");
    {
        dp_attrs_t *a = NULL;
        dp_tensor_t *out = NULL;
        DP_TEST_MUST(dp_attrs_create(&a));
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_I32));
        for (i = 0; i < COUNT(bad_dtypes); ++i)
            CHECK_STATUS_MSG(dp_attrs_set_dtype(a, "dtype", bad_dtypes[i]), DP_INVALID_ARGUMENT, "value");
        CHECK_OK(dp_op_run(f->rt, cast, ins, 1, a, NULL, &out, 1, NULL));
        CHECK(out != NULL && dp_tensor_dtype(out) == DP_DTYPE_I32);
        dp_tensor_release(out);
        dp_attrs_destroy(a);
    }

    SECTION("bad value: dp_attrs_set_bool with 2, -1, 255");
    for (i = 0; i < COUNT(bad_bools); ++i)
        CHECK_STATUS_MSG(dp_attrs_set_bool(f->attrs, "keep_dims", bad_bools[i]), DP_INVALID_ARGUMENT, "value");

    SECTION("bad enum: options->soft_placement 7, 2, -2, INT32_MIN");
    for (i = 0; i < COUNT(bad_soft); ++i) {
        dp_run_options_init(&o, sizeof o);
        o.soft_placement = bad_soft[i];
        RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "soft_placement");
    }

    SECTION("bad size: options->struct_size 0 or too small; a larger (newer) struct is fine");
    dp_run_options_init(&o, sizeof o);
    o.struct_size = 0;
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "options;struct_size");
    dp_run_options_init(&o, sizeof o);
    o.struct_size = sizeof(size_t);
    RUN_FAILS(f->rt, f->add, ins, 2, NULL, &o, DP_INVALID_ARGUMENT, "options;struct_size");
    {
        struct {
            dp_run_options_t o;
            unsigned char newer_fields[64];
        } big;
        dp_tensor_t *out = NULL;
        memset(&big, 0, sizeof big);
        dp_run_options_init(&big.o, sizeof big.o);
        big.o.struct_size = sizeof big;
        big.o.device = f->cpu1;
        CHECK_OK(dp_op_run(f->rt, f->add, ins, 2, NULL, &big.o, &out, 1, NULL));
        CHECK(out != NULL && dp_tensor_device(out) == f->cpu1);
        dp_tensor_release(out);
    }

    SECTION("dp_run_options_init writes at most struct_size bytes");
    memset(&o, 0xA5, sizeof o);
    dp_run_options_init(&o, 0);
    CHECKF(dp_test_bytes_are(&o, 0, sizeof o, 0xA5), "dp_run_options_init(&o, 0) wrote into o");
    memset(&o, 0xA5, sizeof o);
    dp_run_options_init(&o, sizeof(size_t));
    CHECK(o.struct_size == sizeof(size_t));
    CHECKF(dp_test_bytes_are(&o, sizeof(size_t), sizeof o, 0xA5),
           "dp_run_options_init(&o, sizeof(size_t)) wrote past struct_size");
    memset(&o, 0xA5, sizeof o);
    dp_run_options_init(&o, sizeof o);
    CHECK(o.struct_size == sizeof o && o.device == NULL && o.soft_placement == DP_SOFT_PLACEMENT_DEFAULT);

    SECTION("bad size: capacity smaller than the op's output count");
    run_fails_(f->rt, f->add, ins, 2, NULL, NULL, 0, 0, DP_INVALID_ARGUMENT, "capacity",
               "dp_op_run(capacity 0)", __FILE__, __LINE__);
    run_fails_(f->rt, f->add, ins, 2, NULL, NULL, 0, 1, DP_INVALID_ARGUMENT, "capacity",
               "dp_op_run(outputs NULL, capacity 0)", __FILE__, __LINE__);
    STILL_WORKS(f);
}

/* ------------------------------------------------------------------------------------------
 * Handles of another runtime: refused (plans are cached by the positions of op and device in
 * their runtime, which mean other ops and devices here)
 * ---------------------------------------------------------------------------------------- */

static void test_other_runtime(fx_t *f) {
    dp_runtime_t *other = new_runtime(1);
    dp_op_t *other_add = NULL;
    dp_device_t *other_dev = dp_test_device(other, 0);
    dp_tensor_t *ins[2], *out;
    dp_run_options_t o;
    SECTION("an op of another runtime: DP_INVALID_ARGUMENT naming the op, nothing written");
    DP_TEST_MUST(dp_runtime_find_op(other, "Add", &other_add));
    ins[0] = f->x23;
    ins[1] = f->y3;
    out = SENTINEL(dp_tensor_t);
    CHECK_STATUS_MSG(dp_op_run(f->rt, other_add, ins, 2, NULL, NULL, &out, 1, NULL), DP_INVALID_ARGUMENT,
                     "another runtime");
    CHECK_UNTOUCHED(dp_tensor_t, out);
    SECTION("a device of another runtime in options: DP_INVALID_ARGUMENT naming the device");
    dp_run_options_init(&o, sizeof o);
    o.device = other_dev;
    CHECK_STATUS_MSG(dp_op_run(f->rt, f->add, ins, 2, NULL, &o, &out, 1, NULL), DP_INVALID_ARGUMENT,
                     "HOST:0 is a device of another runtime");
    CHECK_UNTOUCHED(dp_tensor_t, out);
    dp_runtime_destroy(other);
    STILL_WORKS(f);
}

/* ------------------------------------------------------------------------------------------
 * Op-level errors
 * ---------------------------------------------------------------------------------------- */

static dp_attrs_t *A(void) {
    dp_attrs_t *a = NULL;
    DP_TEST_MUST(dp_attrs_create(&a));
    return a;
}

static dp_tensor_t *T_f32(fx_t *f, const int64_t *shape, size_t rank) {
    return tensor(f->cpu0, DP_DTYPE_F32, shape, rank, NULL);
}

static void test_op_errors(fx_t *f) {
    dp_tensor_t *ins[4];
    dp_attrs_t *a;
    dp_op_t *op = SENTINEL(dp_op_t);
    static const int64_t s233[3] = {2, 3, 3}, s223[3] = {2, 2, 3}, s332[3] = {3, 3, 2};
    static const int64_t s22[2] = {2, 2}, s32[2] = {3, 2};
    dp_tensor_t *t233 = T_f32(f, s233, 3), *t223 = T_f32(f, s223, 3), *t332 = T_f32(f, s332, 3);
    dp_tensor_t *t22 = T_f32(f, s22, 2), *t32 = T_f32(f, s32, 2);
    (void)t233;

    SECTION("unknown op: DP_NOT_FOUND naming it, nothing written");
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, "NoSuchOp", &op), DP_NOT_FOUND, "NoSuchOp");
    CHECK_UNTOUCHED(dp_op_t, op);
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, "vendor.Missing", &op), DP_NOT_FOUND, "vendor.Missing");
    CHECK_UNTOUCHED(dp_op_t, op);
    /* Another framework's name, another case: the error says which op is meant. */
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, "AddV2", &op), DP_NOT_FOUND,
                     "unknown op 'AddV2' (devplug's name: Add");
    CHECK_STATUS_MSG(dp_runtime_find_op(f->rt, "matmul", &op), DP_NOT_FOUND, "did you mean 'MatMul'?");
    CHECK_UNTOUCHED(dp_op_t, op);
    STILL_WORKS(f);

    SECTION("wrong arity");
    ins[0] = f->x23;
    ins[1] = f->y3;
    ins[2] = f->y3;
    OP_ERROR(f, "Add", ins, 1, NULL, "Add;input;1", "Add with 1 input");
    OP_ERROR(f, "Add", ins, 3, NULL, "Add;input;3", "Add with 3 inputs");
    OP_ERROR(f, "Neg", ins, 2, NULL, "Neg;input;2", "Neg with 2 inputs");
    OP_ERROR(f, "Select", ins, 2, NULL, "Select;input;3", "Select with 2 inputs");
    OP_ERROR(f, "AddN", NULL, 0, NULL, "AddN;input;at least 1", "AddN with no input");
    OP_ERROR(f, "Concat", NULL, 0, NULL, "Concat;input", "Concat with no input");
    {
        static const int64_t shape[1] = {2};
        a = A();
        CHECK_OK(dp_attrs_set_ints(a, "shape", shape, 1));
        CHECK_OK(dp_attrs_set_float(a, "value", 1.0));
        OP_ERROR(f, "Fill", ins, 1, a, "Fill;input;0", "Fill with 1 input");
        dp_attrs_destroy(a);
    }

    SECTION("dtype mismatches and dtypes an op does not allow");
    ins[0] = f->x23;
    ins[1] = f->i23;
    OP_ERROR(f, "Add", ins, 2, NULL, "Add;'y';i32;f32", "Add f32 + i32");
    ins[0] = f->i23;
    ins[1] = f->x23;
    OP_ERROR(f, "Mul", ins, 2, NULL, "Mul;'y'", "Mul i32 * f32");
    ins[0] = f->x23;
    ins[1] = f->d3;
    OP_ERROR(f, "Less", ins, 2, NULL, "Less;'y'", "Less f32 < f64");
    ins[0] = f->x23; /* condition must be bool */
    ins[1] = f->x23;
    ins[2] = f->x23;
    OP_ERROR(f, "Select", ins, 3, NULL, "Select;'condition';bool", "Select with an f32 condition");
    ins[0] = f->b23;
    ins[2] = f->i23;
    OP_ERROR(f, "Select", ins, 3, NULL, "Select;'y'", "Select f32 / i32");
    ins[0] = f->i23;
    OP_ERROR(f, "Exp", ins, 1, NULL, "Exp;'x';i32", "Exp on i32");
    ins[0] = f->u3;
    OP_ERROR(f, "Neg", ins, 1, NULL, "Neg;'x';u8", "Neg on u8");
    ins[0] = f->b23;
    ins[1] = f->b23;
    OP_ERROR(f, "Add", ins, 2, NULL, "Add;'x';bool", "Add on bool");
    OP_ERROR(f, "Less", ins, 2, NULL, "Less;'x';bool", "Less on bool");
    OP_ERROR(f, "MatMul", ins, 2, NULL, "MatMul;'a';bool", "MatMul on bool");
    OP_ERROR(f, "ReduceSum", ins, 1, NULL, "ReduceSum;'x';bool", "ReduceSum on bool");
    OP_ERROR(f, "Softmax", ins + 1, 1, NULL, "Softmax;'x';bool", "Softmax on bool");
    ins[0] = f->i23;
    OP_ERROR(f, "Gelu", ins, 1, NULL, "Gelu;'x';i32", "Gelu on i32");
    ins[0] = f->x23;
    ins[1] = f->x23;
    ins[2] = f->i23;
    OP_ERROR(f, "Concat", ins, 3, NULL, "Concat;inputs[2]", "Concat f32, f32, i32");
    ins[1] = f->i23;
    OP_ERROR(f, "AddN", ins, 2, NULL, "AddN;inputs[1]", "AddN f32 + i32");

    SECTION("incompatible shapes");
    ins[0] = f->x23;
    ins[1] = f->f4;
    OP_ERROR(f, "Add", ins, 2, NULL, "Add;'x';'y';broadcast", "Add [2,3] + [4]");
    OP_ERROR(f, "GreaterEqual", ins, 2, NULL, "GreaterEqual;'y'", "GreaterEqual [2,3] [4]");
    ins[0] = f->b23;
    ins[1] = f->f4;
    ins[2] = f->f4;
    OP_ERROR(f, "Select", ins, 3, NULL, "Select;'condition'|'x'", "Select [2,3] cond, [4] x");
    ins[0] = f->x23;
    ins[1] = f->x23;
    OP_ERROR(f, "MatMul", ins, 2, NULL, "MatMul;'a';'b';inner", "MatMul [2,3] x [2,3]");
    ins[0] = f->y3;
    OP_ERROR(f, "MatMul", ins, 2, NULL, "MatMul;rank", "MatMul [3] x [2,3]");
    ins[0] = t223;
    ins[1] = t332;
    OP_ERROR(f, "MatMul", ins, 2, NULL, "MatMul;batch", "MatMul [2,2,3] x [3,3,2]");
    ins[0] = f->x23;
    ins[1] = t22;
    OP_ERROR(f, "Concat", ins, 2, NULL, "Concat;inputs[1]", "Concat [2,3], [2,2] on axis 0");
    ins[1] = f->x23;
    ins[2] = t32;
    OP_ERROR(f, "AddN", ins, 3, NULL, "AddN;inputs[2]", "AddN [2,3], [2,3], [3,2]");
    ins[0] = f->sc;
    ins[1] = f->sc;
    OP_ERROR(f, "Concat", ins, 2, NULL, "Concat;rank", "Concat of scalars");

    SECTION("attribute values that do not fit the input");
    ins[0] = f->x23;
    ins[1] = f->x23;
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "axis", 2));
    OP_ERROR(f, "Concat", ins, 2, a, "Concat;axis", "Concat axis 2 of rank 2");
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t bad_axes[1] = {2}, twice[2] = {0, -2};
        CHECK_OK(dp_attrs_set_ints(a, "axes", bad_axes, 1));
        OP_ERROR(f, "ReduceSum", ins, 1, a, "ReduceSum;axis", "ReduceSum axis 2 of rank 2");
        CHECK_OK(dp_attrs_set_ints(a, "axes", twice, 2));
        OP_ERROR(f, "ReduceMax", ins, 1, a, "ReduceMax;axis 0 and axis -2 are the same axis (0)",
                 "ReduceMax axes 0 and -2");
    }
    dp_attrs_destroy(a);
    a = A();
    /* Softmax checks its axis before any kernel or decomposition runs. */
    CHECK_OK(dp_attrs_set_int(a, "axis", 5));
    OP_ERROR(f, "Softmax", ins, 1, a, "Softmax;axis 5 is out of range for rank 2", "Softmax axis 5 of rank 2");
    OP_ERROR(f, "LogSoftmax", ins, 1, a, "LogSoftmax;axis 5 is out of range", "LogSoftmax axis 5 of rank 2");
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t four[1] = {4}, two_wild[2] = {-1, -1}, neg[2] = {-3, 2};
        CHECK_OK(dp_attrs_set_ints(a, "shape", four, 1));
        OP_ERROR(f, "Reshape", ins, 1, a, "Reshape;'shape'|shape", "Reshape [2,3] -> [4]");
        CHECK_OK(dp_attrs_set_ints(a, "shape", two_wild, 2));
        OP_ERROR(f, "Reshape", ins, 1, a, "Reshape;'shape'", "Reshape with two -1");
        CHECK_OK(dp_attrs_set_ints(a, "shape", neg, 2));
        OP_ERROR(f, "Reshape", ins, 1, a, "Reshape;'shape'", "Reshape with -3");
        CHECK_OK(dp_attrs_set_ints(a, "shape", four, 1));
        OP_ERROR(f, "BroadcastTo", ins, 1, a, "BroadcastTo;shape", "BroadcastTo [2,3] -> [4]");
    }
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t dup[2] = {0, 0}, three[3] = {0, 1, 2};
        CHECK_OK(dp_attrs_set_ints(a, "perm", dup, 2));
        OP_ERROR(f, "Transpose", ins, 1, a, "Transpose;'perm'", "Transpose perm [0,0]");
        CHECK_OK(dp_attrs_set_ints(a, "perm", three, 3));
        OP_ERROR(f, "Transpose", ins, 1, a, "Transpose;'perm'", "Transpose perm of rank 3");
    }
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t begin[2] = {1, 1}, size[2] = {2, 1}, one[1] = {0};
        CHECK_OK(dp_attrs_set_ints(a, "begin", begin, 2));
        CHECK_OK(dp_attrs_set_ints(a, "size", size, 2));
        OP_ERROR(f, "Slice", ins, 1, a, "Slice;begin|size;bound", "Slice past the end");
        CHECK_OK(dp_attrs_set_ints(a, "begin", one, 1));
        OP_ERROR(f, "Slice", ins, 1, a, "Slice;'begin'", "Slice with a short begin");
    }
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t neg[2] = {2, -1}, empty[1] = {0};
        CHECK_OK(dp_attrs_set_ints(a, "shape", neg, 2));
        CHECK_OK(dp_attrs_set_float(a, "value", 0.0));
        OP_ERROR(f, "Fill", NULL, 0, a, "Fill;'shape'", "Fill with a negative dimension");
        dp_attrs_destroy(a);
        a = A();
        CHECK_OK(dp_attrs_set_ints(a, "shape", empty, 0));
        OP_ERROR(f, "Iota", NULL, 0, a, "Iota;'shape'", "Iota of rank 0");
        CHECK_OK(dp_attrs_set_ints(a, "shape", neg, 1));
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_BOOL));
        OP_ERROR(f, "Iota", NULL, 0, a, "Iota;dtype;bool", "Iota of bool");
    }
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "axis", 5));
    OP_ERROR(f, "Softmax", ins, 1, a, "Softmax;axis", "Softmax axis 5 of rank 2");
    dp_attrs_destroy(a);

    SECTION("unknown attribute");
    a = A();
    CHECK_OK(dp_attrs_set_float(a, "alpha", 0.5));
    ins[0] = f->x23;
    ins[1] = f->y3;
    OP_ERROR(f, "Add", ins, 2, a, "Add;'alpha'", "Add with alpha");
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "axis", 0)); /* ReduceSum has axes, not axis */
    OP_ERROR(f, "ReduceSum", ins, 1, a, "ReduceSum;'axis';axes", "ReduceSum with axis");
    dp_attrs_destroy(a);

    SECTION("attribute of the wrong type");
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "axes", 0));
    OP_ERROR(f, "ReduceSum", ins, 1, a, "ReduceSum;'axes'", "ReduceSum axes as an int");
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "keep_dims", 1));
    OP_ERROR(f, "ReduceMean", ins, 1, a, "ReduceMean;'keep_dims'", "ReduceMean keep_dims as an int");
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "transpose_a", 1));
    {
        dp_tensor_t *mm[2];
        mm[0] = f->x23;
        mm[1] = t32;
        OP_ERROR(f, "MatMul", mm, 2, a, "MatMul;'transpose_a'", "MatMul transpose_a as an int");
    }
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_int(a, "dtype", DP_DTYPE_I32));
    OP_ERROR(f, "Cast", ins, 1, a, "Cast;'dtype'", "Cast dtype as an int");
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_float(a, "axis", 0.0));
    OP_ERROR(f, "Concat", ins, 1, a, "Concat;'axis'", "Concat axis as a float");
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_string(a, "axes", "0"));
    OP_ERROR(f, "ReduceSum", ins, 1, a, "ReduceSum;'axes';a string", "ReduceSum axes as a string");
    CHECK_OK(dp_attrs_set_string(a, "axes", "")); /* replaces; the empty string is a value */
    OP_ERROR(f, "ReduceSum", ins, 1, a, "ReduceSum;'axes';a string", "ReduceSum axes as an empty string");
    dp_attrs_destroy(a);
    a = A();
    {
        static const int64_t shape[1] = {2};
        CHECK_OK(dp_attrs_set_ints(a, "shape", shape, 1));
        CHECK_OK(dp_attrs_set_bool(a, "value", 1));
        OP_ERROR(f, "Fill", NULL, 0, a, "Fill;'value'", "Fill value as a bool");
        CHECK_OK(dp_attrs_set_float(a, "value", 1.0));
        CHECK_OK(dp_attrs_set_int(a, "dtype", DP_DTYPE_F32));
        OP_ERROR(f, "Fill", NULL, 0, a, "Fill;'dtype'", "Fill dtype as an int");
    }
    dp_attrs_destroy(a);
    a = A();
    CHECK_OK(dp_attrs_set_dtype(a, "shape", DP_DTYPE_F32));
    OP_ERROR(f, "Reshape", ins, 1, a, "Reshape;'shape'", "Reshape shape as a dtype");
    dp_attrs_destroy(a);

    SECTION("missing required attribute");
    OP_ERROR(f, "Cast", ins, 1, NULL, "Cast;'dtype'", "Cast without attrs");
    a = A();
    OP_ERROR(f, "Cast", ins, 1, a, "Cast;'dtype'", "Cast with empty attrs");
    OP_ERROR(f, "Reshape", ins, 1, a, "Reshape;'shape'", "Reshape without shape");
    OP_ERROR(f, "BroadcastTo", ins, 1, a, "BroadcastTo;'shape'", "BroadcastTo without shape");
    OP_ERROR(f, "Fill", NULL, 0, a, "Fill;'shape'|'value'", "Fill without shape and value");
    {
        static const int64_t shape[1] = {2}, begin[2] = {0, 0};
        CHECK_OK(dp_attrs_set_ints(a, "shape", shape, 1));
        OP_ERROR(f, "Fill", NULL, 0, a, "Fill;'value'", "Fill without value");
        OP_ERROR(f, "Slice", ins, 1, a, "Slice;'shape'|'begin'", "Slice with shape, without begin");
        dp_attrs_destroy(a);
        a = A();
        CHECK_OK(dp_attrs_set_ints(a, "begin", begin, 2));
        OP_ERROR(f, "Slice", ins, 1, a, "Slice;'size'", "Slice without size");
        OP_ERROR(f, "Iota", NULL, 0, NULL, "Iota;'shape'", "Iota without shape");
    }
    dp_attrs_destroy(a);

    dp_tensor_release(t233);
    dp_tensor_release(t223);
    dp_tensor_release(t332);
    dp_tensor_release(t22);
    dp_tensor_release(t32);
}

int main(void) {
    fx_t f;
    dp_runtime_t *marker;
    dp_test_watchdog(300);
    marker = new_runtime(1);
    dp_test_set_marker_runtime(marker);
    fx_setup(&f);
    test_null(&f);
    test_destroyed(&f);
    test_wrong_kind(&f);
    test_values(&f);
    test_other_runtime(&f);
    test_op_errors(&f);
    SECTION("afterwards: the runtime works, the fixture is intact");
    STILL_WORKS(&f);
    CHECK_STR(dp_op_name(f.add), "Add");
    dp_test_round_trip(f.rt);
    fx_teardown(&f);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(marker);
    return DP_TEST_SUMMARY();
}
