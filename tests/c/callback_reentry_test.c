/* What a host's callback must not do to what is running it, refused instead of freeing memory
 * its caller still uses, or waiting forever (RELIABILITY.md, bad host behaviour):
 *   - dp_runtime_destroy from a device setter, a placement callback, or a host callback (on a
 *     created stream, or inline on the CPU's synchronous default stream): nothing is destroyed,
 *     the thread's last error says why (and, the function being void, the log too); the op
 *     that called back completes;
 *   - from a host callback, dp_stream_synchronize and dp_stream_destroy of the stream running
 *     it, and dp_device_synchronize of its device: DP_FAILED_PRECONDITION (destroy: nothing);
 *   - afterwards everything works, and the runtime is destroyed normally. */
#include "dp_test.h"

typedef struct {
    dp_runtime_t *rt;
    dp_stream_t *stream;
    dp_device_t *device;
    int calls;
    dp_status_t sync_stream, sync_device;
    char destroy_message[512]; /* dp_runtime_destroy's last error, inside the callback */
    char stream_message[512];  /* dp_stream_destroy's */
} state_t;

static void try_destroy(state_t *s) {
    dp_runtime_destroy(s->rt);
    snprintf(s->destroy_message, sizeof s->destroy_message, "%s", dp_last_error_message());
}

static dp_status_t setter(const dp_placement_query_t *q, void *user, dp_device_t **out) {
    state_t *s = (state_t *)user;
    (void)q;
    s->calls++;
    try_destroy(s);
    *out = s->device;
    return DP_OK;
}

static void on_placement(const dp_placement_event_t *e, void *user) {
    (void)e;
    state_t *s = (state_t *)user;
    if (s->calls++ == 0) try_destroy(s);
}

static void on_stream(void *user) {
    state_t *s = (state_t *)user;
    s->calls++;
    s->sync_stream = dp_stream_synchronize(s->stream);
    s->sync_device = dp_device_synchronize(s->device);
    dp_stream_destroy(s->stream);
    snprintf(s->stream_message, sizeof s->stream_message, "%s", dp_last_error_message());
    try_destroy(s);
}

static void reset(state_t *s) {
    s->calls = 0;
    s->sync_stream = s->sync_device = DP_OK;
    s->destroy_message[0] = s->stream_message[0] = '\0';
}

static void reset_cb(void *user) { reset((state_t *)user); }

/* An Add on CPU:0 still runs (the runtime is alive): 1 + 2 = 3. */
static void check_add_runs(dp_runtime_t *rt, dp_device_t *dev) {
    static const int64_t shape[1] = {2};
    static const float one[2] = {1.f, 1.f}, two[2] = {2.f, 2.f};
    dp_tensor_t *x = NULL, *y = NULL, *z = NULL;
    dp_op_t *add = NULL;
    float out[2] = {0, 0};
    size_t n = 0;
    dp_run_options_t o;
    dp_run_options_init(&o, sizeof o);
    o.device = dev;
    CHECK_OK(dp_tensor_create(dev, DP_DTYPE_F32, shape, 1, one, sizeof one, &x));
    CHECK_OK(dp_tensor_create(dev, DP_DTYPE_F32, shape, 1, two, sizeof two, &y));
    CHECK_OK(dp_runtime_find_op(rt, "Add", &add));
    {
        dp_tensor_t *const in[2] = {x, y};
        CHECK_OK(dp_op_run(rt, add, in, 2, NULL, &o, &z, 1, &n));
    }
    if (z) CHECK_OK(dp_tensor_read(z, out, sizeof out));
    CHECK(n == 1 && out[0] == 3.f && out[1] == 3.f);
    dp_tensor_release(z);
    dp_tensor_release(y);
    dp_tensor_release(x);
}

#define REFUSED_DESTROY "called from inside a callback devplug runs"

int main(void) {
    state_t s;
    dp_scope_t *scope = NULL;
    dp_stream_t *def = NULL;
    dp_test_watchdog(60);
    memset(&s, 0, sizeof s);
    s.rt = dp_test_runtime(1, 0);
    s.device = dp_test_device(s.rt, 0);

    SECTION("a device setter destroying the runtime");
    reset(&s);
    CHECK_OK(dp_scope_create_setter(s.rt, setter, &s, NULL, &scope));
    CHECK_OK(dp_scope_enter(scope));
    {
        static const int64_t shape[1] = {1};
        static const float v[1] = {4.f};
        dp_tensor_t *x = NULL, *y = NULL;
        dp_op_t *neg = NULL;
        size_t n = 0;
        float out = 0;
        CHECK_OK(dp_tensor_create(s.device, DP_DTYPE_F32, shape, 1, v, sizeof v, &x));
        CHECK_OK(dp_runtime_find_op(s.rt, "Neg", &neg));
        CHECK_OK(dp_op_run(s.rt, neg, &x, 1, NULL, NULL, &y, 1, &n));
        if (y) CHECK_OK(dp_tensor_read(y, &out, sizeof out));
        CHECK(s.calls == 1 && n == 1 && out == -4.f);
        dp_tensor_release(y);
        dp_tensor_release(x);
    }
    CHECK_OK(dp_scope_exit(scope));
    dp_scope_destroy(scope);
    CHECKF(strstr(s.destroy_message, REFUSED_DESTROY) != NULL, "setter: \"%s\"", s.destroy_message);
    check_add_runs(s.rt, s.device);

    SECTION("a placement callback destroying the runtime");
    reset(&s);
    CHECK_OK(dp_runtime_set_placement_callback(s.rt, on_placement, &s, NULL));
    check_add_runs(s.rt, s.device);
    CHECK_OK(dp_runtime_set_placement_callback(s.rt, NULL, NULL, NULL));
    CHECK(s.calls >= 1);
    CHECKF(strstr(s.destroy_message, REFUSED_DESTROY) != NULL, "placement: \"%s\"", s.destroy_message);

    SECTION("a host callback on a created stream: waiting for it, destroying it or the runtime");
    reset(&s);
    CHECK_OK(dp_stream_create(s.device, &s.stream));
    CHECK_OK(dp_stream_host_callback(s.stream, on_stream, &s));
    CHECK_OK(dp_stream_synchronize(s.stream));
    CHECK(s.calls == 1);
    CHECKF(s.sync_stream == DP_FAILED_PRECONDITION, "dp_stream_synchronize inside: %d", (int)s.sync_stream);
    CHECKF(s.sync_device == DP_FAILED_PRECONDITION, "dp_device_synchronize inside: %d", (int)s.sync_device);
    CHECKF(strstr(s.stream_message, "called from a host callback the stream is running") != NULL,
           "dp_stream_destroy inside: \"%s\"", s.stream_message);
    CHECKF(strstr(s.destroy_message, REFUSED_DESTROY) != NULL, "host callback: \"%s\"", s.destroy_message);
    /* The stream was not destroyed: it still works. */
    CHECK_OK(dp_stream_host_callback(s.stream, reset_cb, &s));
    CHECK_OK(dp_stream_synchronize(s.stream));
    CHECK(s.calls == 0);
    dp_stream_destroy(s.stream);
    s.stream = NULL;

    SECTION("a host callback run inline on the CPU's default stream destroying the runtime");
    reset(&s);
    CHECK_OK(dp_device_default_stream(s.device, &def));
    s.stream = def;
    CHECK_OK(dp_stream_host_callback(def, on_stream, &s));
    CHECK(s.calls == 1);
    CHECKF(strstr(s.destroy_message, REFUSED_DESTROY) != NULL, "default stream: \"%s\"",
           s.destroy_message);
    check_add_runs(s.rt, s.device);

    dp_runtime_destroy(s.rt); /* now, outside every callback: destroyed */
    return DP_TEST_SUMMARY();
}
