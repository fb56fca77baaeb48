/* f16 and bf16 tensors through the C API (DP_DTYPE_F16, DP_DTYPE_BF16): a host keeps their
 * raw 16-bit encodings, which the tests write and read as uint16_t.
 *   - dp_dtype_size / dp_dtype_name;
 *   - on the CPU: Add with broadcasting, MatMul accumulating in f32 (a row of 600 ones), Cast
 *     from f64 (rounded once, ties to even) and to f32 (exact), ReduceSum, Softmax;
 *   - bad inputs: an f16 operand with an f32 or a bf16 one (DP_INVALID_ARGUMENT naming the op),
 *     too few bytes for the shape, a NULL output;
 *   - SIM, which has no f16 kernel: bits survive its memory, Add is soft-placed to the CPU,
 *     and strict mode is DP_NOT_FOUND naming the dtype and where Add's kernels are. */
#include "dp_test.h"

#define SIM_PATH DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

/* f16 encodings of exactly representable values. */
#define H_1 0x3C00u     /* 1.0 */
#define H_2_5 0x4100u   /* 2.5 */
#define H_M3 0xC200u    /* -3.0 */
#define H_0_125 0x3000u /* 0.125 */
#define H_0_5 0x3800u   /* 0.5 */

/* A bf16 is the upper half of an f32: these values are exact. */
static uint16_t bf(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

static dp_runtime_t *g_rt;
static dp_device_t *g_cpu;

static dp_tensor_t *make(dp_device_t *dev, dp_dtype_t dt, const int64_t *shape, size_t rank,
                         const void *data, size_t bytes) {
    dp_tensor_t *t = NULL;
    dp_status_t st = dp_tensor_create(dev, dt, shape, rank, data, bytes, &t);
    CHECKF(st == DP_OK, "dp_tensor_create(%s) -> %s", dp_dtype_name(dt), dp_status_str(st));
    return t;
}

/* Runs `op` (one output) on `rt` with `opts`; NULL on failure, its status in *status. */
static dp_tensor_t *run(dp_runtime_t *rt, const char *op, dp_tensor_t *const *in, size_t n,
                        const dp_attrs_t *attrs, const dp_run_options_t *opts, dp_status_t *status) {
    dp_op_t *h = NULL;
    dp_tensor_t *out = NULL;
    size_t count = 0;
    DP_TEST_MUST(dp_runtime_find_op(rt, op, &h));
    *status = dp_op_run(rt, h, in, n, attrs, opts, &out, 1, &count);
    return *status == DP_OK ? out : NULL;
}

static void read_u16(const dp_tensor_t *t, uint16_t *dst, size_t n) {
    CHECK_OK(dp_tensor_read(t, dst, n * sizeof *dst));
}

static void test_names(void) {
    SECTION("dtype sizes and names");
    CHECK(dp_dtype_size(DP_DTYPE_F16) == 2 && dp_dtype_size(DP_DTYPE_BF16) == 2);
    CHECK_STR(dp_dtype_name(DP_DTYPE_F16), "f16");
    CHECK_STR(dp_dtype_name(DP_DTYPE_BF16), "bf16");
}

static void test_cpu_f16(void) {
    static const int64_t s23[] = {2, 3}, s3[] = {3};
    const uint16_t a[6] = {H_1, H_2_5, H_M3, H_0_125, H_0_5, H_1};
    const uint16_t b[3] = {H_1, H_0_5, H_M3};
    /* 2, 3, -6, 1.125, 1, -2 */
    const uint16_t sum[6] = {0x4000u, 0x4200u, 0xC600u, 0x3C80u, 0x3C00u, 0xC000u};
    uint16_t got[6];
    dp_tensor_t *in[2], *out;
    dp_status_t st;
    SECTION("f16 Add with broadcasting on the CPU, exact");
    in[0] = make(g_cpu, DP_DTYPE_F16, s23, 2, a, sizeof a);
    in[1] = make(g_cpu, DP_DTYPE_F16, s3, 1, b, sizeof b);
    out = run(g_rt, "Add", in, 2, NULL, NULL, &st);
    CHECKF(out != NULL, "Add -> %s", dp_status_str(st));
    if (out) {
        CHECK(dp_tensor_dtype(out) == DP_DTYPE_F16);
        read_u16(out, got, 6);
        CHECK(memcmp(got, sum, sizeof sum) == 0);
        dp_tensor_release(out);
    }

    SECTION("Cast f16 -> f32 is exact; f64 -> f16 rounds once, ties to even");
    {
        dp_attrs_t *attrs = NULL;
        float wide[6];
        static const float want[6] = {1.0f, 2.5f, -3.0f, 0.125f, 0.5f, 1.0f};
        /* 1 + 2^-11 is halfway between 1 and the next f16 (1 + 2^-10): even is 1.0.
         * 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
         * 65520 is halfway between 65504 (the largest f16) and 65536: infinity. */
        static const int64_t s4[] = {4};
        const double narrow_in[4] = {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65520.0, -0.1};
        const uint16_t narrow_want[4] = {0x3C00u, 0x3C02u, 0x7C00u, 0xAE66u};
        uint16_t narrow_got[4];
        dp_tensor_t *d;
        CHECK_OK(dp_attrs_create(&attrs));
        CHECK_OK(dp_attrs_set_dtype(attrs, "dtype", DP_DTYPE_F32));
        out = run(g_rt, "Cast", in, 1, attrs, NULL, &st);
        CHECKF(out != NULL, "Cast -> %s", dp_status_str(st));
        if (out) {
            CHECK_OK(dp_tensor_read(out, wide, sizeof wide));
            CHECK(memcmp(wide, want, sizeof want) == 0);
            dp_tensor_release(out);
        }
        d = make(g_cpu, DP_DTYPE_F64, s4, 1, narrow_in, sizeof narrow_in);
        CHECK_OK(dp_attrs_set_dtype(attrs, "dtype", DP_DTYPE_F16));
        out = run(g_rt, "Cast", &d, 1, attrs, NULL, &st);
        CHECKF(out != NULL, "Cast -> %s", dp_status_str(st));
        if (out) {
            read_u16(out, narrow_got, 4);
            CHECKF(memcmp(narrow_got, narrow_want, sizeof narrow_want) == 0,
                   "got %04x %04x %04x %04x", narrow_got[0], narrow_got[1], narrow_got[2],
                   narrow_got[3]);
            dp_tensor_release(out);
        }
        dp_tensor_release(d);
        dp_attrs_destroy(attrs);
    }

    SECTION("bad inputs: mixed dtypes, short data, NULL output");
    {
        static const float f[3] = {1, 2, 3};
        const uint16_t bb[3] = {bf(1.0f), bf(2.0f), bf(3.0f)};
        dp_tensor_t *mixed[2];
        dp_tensor_t *t = SENTINEL(dp_tensor_t);
        dp_op_t *add = NULL;
        size_t count = 7;
        mixed[0] = in[1];
        mixed[1] = make(g_cpu, DP_DTYPE_F32, s3, 1, f, sizeof f);
        CHECK(run(g_rt, "Add", mixed, 2, NULL, NULL, &st) == NULL);
        CHECK(st == DP_INVALID_ARGUMENT);
        CHECKF(dp_test_message_matches_(dp_last_error_message(), "Add"), "%s",
               dp_last_error_message());
        dp_tensor_release(mixed[1]);
        mixed[1] = make(g_cpu, DP_DTYPE_BF16, s3, 1, bb, sizeof bb);
        CHECK(run(g_rt, "Add", mixed, 2, NULL, NULL, &st) == NULL);
        CHECK(st == DP_INVALID_ARGUMENT);
        dp_tensor_release(mixed[1]);
        CHECK_STATUS(dp_tensor_create(g_cpu, DP_DTYPE_F16, s3, 1, bb, 5, &t), DP_INVALID_ARGUMENT);
        CHECK_UNTOUCHED(dp_tensor_t, t);
        DP_TEST_MUST(dp_runtime_find_op(g_rt, "Add", &add));
        CHECK_STATUS(dp_op_run(g_rt, add, in, 2, NULL, NULL, NULL, 1, &count), DP_INVALID_ARGUMENT);
    }
    dp_tensor_release(in[0]);
    dp_tensor_release(in[1]);
}

static void test_cpu_bf16(void) {
    enum { K = 600 };
    static const int64_t row[] = {1, K}, col[] = {K, 1}, s23[] = {2, 3};
    static uint16_t ones[K];
    uint16_t got[6];
    dp_tensor_t *in[2], *out;
    dp_status_t st;
    size_t i;
    SECTION("bf16 MatMul and ReduceSum accumulate in f32: 600 ones sum to bf16(600) = 600");
    for (i = 0; i < K; ++i) ones[i] = bf(1.0f);
    in[0] = make(g_cpu, DP_DTYPE_BF16, row, 2, ones, sizeof ones);
    in[1] = make(g_cpu, DP_DTYPE_BF16, col, 2, ones, sizeof ones);
    out = run(g_rt, "MatMul", in, 2, NULL, NULL, &st);
    CHECKF(out != NULL, "MatMul -> %s", dp_status_str(st));
    if (out) {
        read_u16(out, got, 1);
        /* A bf16 accumulator would stop at 256 (257 is not a bf16). */
        CHECKF(got[0] == bf(600.0f), "MatMul gave bf16 %04x, want %04x", got[0], bf(600.0f));
        dp_tensor_release(out);
    }
    {
        dp_attrs_t *attrs = NULL;
        static const int64_t axes[] = {1};
        CHECK_OK(dp_attrs_create(&attrs));
        CHECK_OK(dp_attrs_set_ints(attrs, "axes", axes, 1));
        out = run(g_rt, "ReduceSum", in, 1, attrs, NULL, &st);
        CHECKF(out != NULL, "ReduceSum -> %s", dp_status_str(st));
        if (out) {
            CHECK(dp_tensor_rank(out) == 1 && dp_tensor_num_elements(out) == 1);
            read_u16(out, got, 1);
            CHECK(got[0] == bf(600.0f));
            dp_tensor_release(out);
        }
        dp_attrs_destroy(attrs);
    }
    dp_tensor_release(in[0]);
    dp_tensor_release(in[1]);

    SECTION("bf16 Softmax of equal values is uniform");
    {
        const uint16_t x[6] = {bf(2.0f), bf(2.0f), bf(2.0f), bf(-1.0f), bf(-1.0f), bf(-1.0f)};
        dp_attrs_t *attrs = NULL;
        CHECK_OK(dp_attrs_create(&attrs));
        CHECK_OK(dp_attrs_set_int(attrs, "axis", -1));
        in[0] = make(g_cpu, DP_DTYPE_BF16, s23, 2, x, sizeof x);
        out = run(g_rt, "Softmax", in, 1, attrs, NULL, &st);
        CHECKF(out != NULL, "Softmax -> %s", dp_status_str(st));
        if (out) {
            read_u16(out, got, 6);
            /* 1/3 rounded to bf16: 0x3EAB */
            for (i = 0; i < 6; ++i) CHECKF(got[i] == 0x3EABu, "element %u is %04x", (unsigned)i, got[i]);
            dp_tensor_release(out);
        }
        dp_tensor_release(in[0]);
        dp_attrs_destroy(attrs);
    }
}

static void test_sim(void) {
    static const int64_t s4[] = {4};
    const uint16_t a[4] = {H_1, H_2_5, H_M3, 0x7E01u /* a NaN with a payload */};
    const uint16_t twice[3] = {0x4000u, 0x4500u, 0xC600u};
    uint16_t got[4];
    dp_runtime_t *rt = NULL;
    dp_device_t *sim = NULL, *cpu = NULL;
    dp_tensor_t *on_sim = NULL, *in[2], *out;
    dp_run_options_t o;
    dp_status_t st;
    SECTION("f16 on SIM: bits survive, Add soft-placed to the CPU, strict mode names the dtype");
    DP_TEST_MUST(dp_runtime_create(NULL, &rt));
    st = dp_runtime_load_plugin(rt, SIM_PATH, NULL, 0);
    CHECKF(st == DP_OK, "loading SIM -> %s: %s", dp_status_str(st), dp_last_error_message());
    if (st != DP_OK) {
        dp_runtime_destroy(rt);
        return;
    }
    DP_TEST_MUST(dp_runtime_find_device(rt, "SIM:0", &sim));
    DP_TEST_MUST(dp_runtime_find_device(rt, "CPU:0", &cpu));
    on_sim = make(sim, DP_DTYPE_F16, s4, 1, a, sizeof a);
    read_u16(on_sim, got, 4);
    CHECK(memcmp(got, a, sizeof a) == 0);
    in[0] = in[1] = on_sim;
    dp_run_options_init(&o, sizeof o);
    o.device = sim;
    out = run(rt, "Add", in, 2, NULL, &o, &st);
    CHECKF(out != NULL, "Add on SIM:0 -> %s: %s", dp_status_str(st), dp_last_error_message());
    if (out) {
        CHECK(dp_tensor_device(out) == cpu);
        read_u16(out, got, 4);
        CHECK(memcmp(got, twice, sizeof twice) == 0);
        CHECKF((got[3] & 0x7C00u) == 0x7C00u && (got[3] & 0x3FFu) != 0, "NaN + NaN is %04x", got[3]);
        dp_tensor_release(out);
    }
    o.soft_placement = DP_SOFT_PLACEMENT_OFF;
    CHECK(run(rt, "Add", in, 2, NULL, &o, &st) == NULL);
    CHECK(st == DP_NOT_FOUND);
    CHECKF(strstr(dp_last_error_message(), "no kernel for f16 on SIM:0") != NULL, "%s",
           dp_last_error_message());
    CHECKF(strstr(dp_last_error_message(), "strict") != NULL, "%s", dp_last_error_message());
    dp_tensor_release(on_sim);
    dp_runtime_destroy(rt);
}

int main(void) {
    dp_test_watchdog(300);
    DP_TEST_MUST(dp_runtime_create(NULL, &g_rt));
    DP_TEST_MUST(dp_runtime_find_device(g_rt, "CPU:0", &g_cpu));
    test_names();
    test_cpu_f16();
    test_cpu_bf16();
    test_sim();
    dp_runtime_destroy(g_rt);
    return DP_TEST_SUMMARY();
}
