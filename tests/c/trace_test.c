/* The trace through the C API (dp_runtime_trace_start / dp_runtime_trace_stop):
 *   - nothing is recorded before a start; a stop with nothing on writes an empty trace;
 *   - ops run on the CPU and on SIM (a native kernel, and Gelu: its decomposition on SIM with
 *     Tanh soft-placed on the CPU) appear in the written file with their devices, reasons and
 *     kernel sources, one complete event each, the decomposition among them, and the copy of
 *     Tanh's input to the CPU;
 *   - a restart drops what was recorded; a NULL path discards the trace;
 *   - bad arguments: NULL runtime, a path in a missing folder (DP_NOT_FOUND naming it, and the
 *     trace is stopped anyway). */
#include "dp_test.h"

#define SIM_PATH DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

static dp_runtime_t *g_rt;

static dp_tensor_t *vec(dp_device_t *dev, const float *v, int64_t n) {
    dp_tensor_t *t = NULL;
    DP_TEST_MUST(dp_tensor_create(dev, DP_DTYPE_F32, &n, 1, v, (size_t)n * sizeof(float), &t));
    return t;
}

/* Runs `op` (one input or two, one output) on `dev`; the output is released. */
static void run(const char *op, dp_tensor_t *a, dp_tensor_t *b, dp_device_t *dev) {
    dp_op_t *h = NULL;
    dp_tensor_t *in[2] = {a, b}, *out = NULL;
    size_t count = 0;
    dp_run_options_t o;
    dp_run_options_init(&o, sizeof o);
    o.device = dev;
    DP_TEST_MUST(dp_runtime_find_op(g_rt, op, &h));
    CHECK_OK(dp_op_run(g_rt, h, in, b ? 2 : 1, NULL, &o, &out, 1, &count));
    dp_tensor_release(out);
}

/* The whole file `path` as a NUL-terminated string (to free), or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    long n;
    char *s;
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    s = (char *)malloc((size_t)n + 1);
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s != NULL) s[n] = '\0';
    fclose(f);
    return s;
}

static size_t count_of(const char *hay, const char *needle) {
    size_t n = 0;
    const char *p = hay;
    while ((p = strstr(p, needle)) != NULL) {
        ++n;
        p += strlen(needle);
    }
    return n;
}

#define CHECK_HAS(text, needle) CHECKF(strstr((text), (needle)) != NULL, "trace lacks %s", (needle))

int main(void) {
    static const float x[4] = {0.5f, -1.0f, 2.0f, 3.0f};
    dp_device_t *cpu = NULL, *sim = NULL;
    dp_tensor_t *a, *s;
    char path[256], missing[300];
    char *text;
    size_t spans = 99;
    dp_test_watchdog(300);
    DP_TEST_MUST(dp_runtime_create(NULL, &g_rt));
    DP_TEST_MUST(dp_runtime_load_plugin(g_rt, SIM_PATH, NULL, 0));
    DP_TEST_MUST(dp_runtime_find_device(g_rt, "CPU:0", &cpu));
    DP_TEST_MUST(dp_runtime_find_device(g_rt, "SIM:0", &sim));
    a = vec(cpu, x, 4);
    s = vec(sim, x, 4);
    snprintf(path, sizeof path, "/tmp/devplug-trace-test-%ld.json", (long)getpid());
    snprintf(missing, sizeof missing, "/tmp/devplug-no-such-folder-%ld/t.json", (long)getpid());

    SECTION("off: nothing recorded; a stop writes an empty trace");
    run("Add", a, a, cpu);
    CHECK_OK(dp_runtime_trace_stop(g_rt, path, &spans));
    CHECK(spans == 0);
    text = slurp(path);
    CHECK(text != NULL && strstr(text, "\"traceEvents\"") != NULL && count_of(text, "\"ph\":\"X\"") == 0);
    free(text);

    SECTION("CPU and SIM ops, a decomposition with a soft-placed op inside");
    CHECK_OK(dp_runtime_trace_start(g_rt));
    run("Add", a, a, cpu);
    run("Mul", s, s, sim);
    run("Gelu", s, NULL, sim);
    spans = 0;
    CHECK_OK(dp_runtime_trace_stop(g_rt, path, &spans));
    CHECK(spans >= 7);
    text = slurp(path);
    CHECK(text != NULL);
    if (text != NULL) {
        CHECK(count_of(text, "\"ph\":\"X\"") == spans);
        CHECK_HAS(text, "\"name\":\"Add\",\"cat\":\"kernel\"");
        CHECK_HAS(text, "\"device\":\"HOST:0\",\"reason\":\"explicit\",\"kernel\":\"built-in\",\"depth\":0");
        CHECK_HAS(text, "\"device\":\"SIM:0\",\"reason\":\"explicit\",\"kernel\":\"plugin 'devplug_sim'\"");
        CHECK_HAS(text, "\"name\":\"Gelu\",\"cat\":\"decomposition\"");
        CHECK_HAS(text, "\"name\":\"Tanh\"");
        CHECK_HAS(text, "\"reason\":\"soft-placed\"");
        /* Tanh's input copied from SIM:0 to the CPU, inside its kernel span. */
        CHECK_HAS(text, "\"name\":\"copy\",\"cat\":\"copy\"");
        CHECK_HAS(text, "\"name\":\"thread_name\"");
        free(text);
    }

    SECTION("a restart starts over; a NULL path discards; NULL count is fine");
    CHECK_OK(dp_runtime_trace_start(g_rt));
    run("Add", a, a, cpu);
    CHECK_OK(dp_runtime_trace_start(g_rt));
    run("Neg", a, NULL, cpu);
    spans = 0;
    CHECK_OK(dp_runtime_trace_stop(g_rt, NULL, &spans));
    CHECK(spans == 1);
    CHECK_OK(dp_runtime_trace_start(g_rt));
    CHECK_OK(dp_runtime_trace_stop(g_rt, NULL, NULL));

    SECTION("bad arguments");
    dp_test_set_marker_runtime(g_rt);
    CHECK_STATUS_MSG(dp_runtime_trace_start(NULL), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_trace_stop(NULL, path, NULL), DP_INVALID_ARGUMENT, "runtime");
    CHECK_OK(dp_runtime_trace_start(g_rt));
    run("Add", a, a, cpu);
    spans = 7;
    CHECK_STATUS_MSG(dp_runtime_trace_stop(g_rt, missing, &spans), DP_NOT_FOUND, "devplug-no-such-folder");
    CHECK(spans == 7); /* not written on failure */
    spans = 9;
    CHECK_OK(dp_runtime_trace_stop(g_rt, NULL, &spans));
    CHECK(spans == 0); /* the failed stop stopped it */

    remove(path);
    dp_tensor_release(a);
    dp_tensor_release(s);
    dp_runtime_destroy(g_rt);
    return DP_TEST_SUMMARY();
}
