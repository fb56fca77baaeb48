/* Bad-argument class "destroyed handle": every handle parameter of every C function, given a
 * handle that was just destroyed or released (the runtime quarantines recently destroyed handles,
 * so this is defined and detected). A device is "destroyed" when its runtime is.
 * Expected: DP_INVALID_ARGUMENT naming the parameter, no out-parameter written, no crash;
 * value-returning functions give their invalid value; a second destroy/release, or a retain, of
 * a destroyed handle is a no-op (and does not bring the object back), logged as a warning
 * since the function returns no status. Each check gets a freshly destroyed handle. Ends with a
 * good round trip. */
#include "dp_test.h"

/* The warnings of void functions that did nothing (a double release), the last one kept. */
static int nothing_warnings = 0;
static char last_nothing[512];
static void on_log(const dp_log_record_t *r, void *user) {
    (void)user;
    if (r->level == DP_LOG_WARN && strstr(r->message, "(the call did nothing)") != NULL) {
        DP_TEST_ATOMIC_INC(nothing_warnings);
        snprintf(last_nothing, sizeof last_nothing, "%s", r->message);
    }
}

/* Checks that the void call just made logged one warning naming `function` and `what`. */
static void check_warned(int before, const char *function, const char *what) {
    CHECKF(nothing_warnings == before + 1, "%s: %d warning(s) logged, expected 1", function,
           nothing_warnings - before);
    CHECKF(strstr(last_nothing, function) != NULL && strstr(last_nothing, what) != NULL,
           "%s: the warning was \"%s\"", function, last_nothing);
}

static int callback_runs = 0;
static void count_cb(void *user_data) {
    (void)user_data;
    DP_TEST_ATOMIC_INC(callback_runs);
}
static dp_status_t count_status_cb(void *user_data) {
    count_cb(user_data);
    return DP_OK;
}

static dp_runtime_t *dead_runtime(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_runtime_destroy(rt);
    return rt;
}

static dp_device_t *dead_device(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_device_t *d = dp_test_device(rt, 0);
    dp_runtime_destroy(rt);
    return d;
}

static dp_stream_t *dead_stream(dp_device_t *dev) {
    dp_stream_t *s = NULL;
    DP_TEST_MUST(dp_stream_create(dev, &s));
    dp_stream_destroy(s);
    return s;
}

static dp_event_t *dead_event(dp_device_t *dev) {
    dp_event_t *e = NULL;
    DP_TEST_MUST(dp_event_create(dev, &e));
    dp_event_destroy(e);
    return e;
}

static dp_buffer_t *dead_buffer(dp_device_t *dev) {
    dp_buffer_t *b = NULL;
    DP_TEST_MUST(dp_buffer_allocate(dev, DP_TEST_BUF, &b));
    dp_buffer_release(b);
    return b;
}

static dp_tensor_t *dead_tensor(dp_device_t *dev) {
    static const int64_t shape[2] = {2, 3};
    dp_tensor_t *t = NULL;
    DP_TEST_MUST(dp_tensor_create(dev, DP_DTYPE_F32, shape, 2, NULL, 0, &t));
    dp_tensor_release(t);
    return t;
}

static void test_runtime(void) {
    dp_runtime_t *rt;
    dp_device_t *dev = SENTINEL(dp_device_t);
    size_t n = 4242;
    SECTION("destroyed runtime");
    rt = dead_runtime();
    CHECK_STATUS_MSG(dp_runtime_device_count(rt, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
    rt = dead_runtime();
    CHECK_STATUS_MSG(dp_runtime_device(rt, 0, &dev), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    rt = dead_runtime();
    CHECK_STATUS_MSG(dp_runtime_find_device(rt, "CPU:0", &dev), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    rt = dead_runtime();
    CHECK_STATUS_MSG(dp_runtime_synchronize(rt), DP_INVALID_ARGUMENT, "runtime");
    rt = dead_runtime();
    CHECK_STATUS_MSG(dp_runtime_trace_start(rt), DP_INVALID_ARGUMENT, "runtime");
    rt = dead_runtime();
    n = 4242;
    CHECK_STATUS_MSG(dp_runtime_trace_stop(rt, NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
    rt = dead_runtime();
    dp_runtime_destroy(rt); /* double destroy: no-op */
    CHECK(1);
}

static void test_device(dp_test_fixture *fx) {
    static const int64_t shape[1] = {4};
    dp_device_properties_t p;
    dp_memory_stats_t ms;
    dp_stream_t *s = SENTINEL(dp_stream_t);
    dp_event_t *e = SENTINEL(dp_event_t);
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    dp_tensor_t *t = SENTINEL(dp_tensor_t);
    void *ptr = SENTINEL(void), *good = NULL;
    dp_device_t *dev;
    SECTION("device of a destroyed runtime");
    memset(&p, 0xA5, sizeof p);
    p.struct_size = sizeof p;
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_get_properties(dev, &p), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&p, sizeof(size_t), sizeof p, 0xA5), "properties written on failure");
    dev = dead_device();
    CHECK(dp_device_name(dev) == NULL);
    memset(&ms, 0xA5, sizeof ms);
    ms.struct_size = sizeof ms;
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_memory_stats(dev, &ms), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&ms, sizeof(size_t), sizeof ms, 0xA5), "stats written on failure");
    dev = dead_device();
    {
        uint64_t free_b = 7, total = 7;
        CHECK_STATUS_MSG(dp_device_memory_usage(dev, &free_b, &total), DP_INVALID_ARGUMENT, "device");
        CHECKF(free_b == 7 && total == 7, "memory usage written on failure");
    }
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_synchronize(dev), DP_INVALID_ARGUMENT, "device");
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_host_allocate(dev, 16, &ptr), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(void, ptr);
    CHECK_OK(dp_device_host_allocate(fx->d0, 16, &good));
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_host_free(dev, good), DP_INVALID_ARGUMENT, "device");
    CHECK_OK(dp_device_host_free(fx->d0, good));
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_release_cached_memory(dev), DP_INVALID_ARGUMENT, "device");
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_set_memory_limit(dev, 1u << 20), DP_INVALID_ARGUMENT, "device");
    dev = dead_device();
    {
        uint64_t limit = 7;
        CHECK_STATUS_MSG(dp_device_memory_limit(dev, &limit), DP_INVALID_ARGUMENT, "device");
        CHECKF(limit == 7, "memory limit written on failure");
    }
    dev = dead_device();
    CHECK_STATUS_MSG(dp_device_default_stream(dev, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    dev = dead_device();
    CHECK_STATUS_MSG(dp_buffer_allocate(dev, 16, &b), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    dev = dead_device();
    CHECK_STATUS_MSG(dp_stream_create(dev, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    dev = dead_device();
    CHECK_STATUS_MSG(dp_event_create(dev, &e), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_event_t, e);
    dev = dead_device();
    CHECK_STATUS_MSG(dp_tensor_create(dev, DP_DTYPE_I32, shape, 1, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    dev = dead_device();
    CHECK_STATUS_MSG(dp_tensor_copy_to(fx->t0, dev, &t), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
}

static void test_stream(dp_test_fixture *fx) {
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    dp_stream_t *s;
    SECTION("destroyed stream");
    s = dead_stream(fx->d0);
    CHECK(dp_stream_device(s) == NULL);
    {
        uint32_t id = 99;
        CHECK_STATUS_MSG(dp_stream_id(s, &id), DP_INVALID_ARGUMENT, "stream");
        CHECK(id == 99);
    }
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_synchronize(s), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_wait_event(s, fx->e0), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_wait_stream(s, fx->s0), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, s), DP_INVALID_ARGUMENT, "other");
    callback_runs = 0;
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_host_callback(s, count_cb, NULL), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(s, count_status_cb, NULL), DP_INVALID_ARGUMENT,
                     "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_write(s, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_read(s, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_copy(s, fx->b0, 0, fx->b0, 8, 8), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_stream_memset(s, fx->b0, 0, 0, 8), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    CHECK_STATUS_MSG(dp_event_record(fx->e0, s), DP_INVALID_ARGUMENT, "stream");
    s = dead_stream(fx->d0);
    dp_stream_destroy(s); /* double destroy: no-op */
    CHECK_OK(dp_device_synchronize(fx->d0));
    CHECK(callback_runs == 0);
    CHECK(data[0] == 9 && data[7] == 9);
}

static void test_event(dp_test_fixture *fx) {
    dp_event_t *e;
    int32_t done = -9;
    SECTION("destroyed event");
    e = dead_event(fx->d0);
    CHECK_STATUS_MSG(dp_event_record(e, fx->s0), DP_INVALID_ARGUMENT, "event");
    e = dead_event(fx->d0);
    CHECK_STATUS_MSG(dp_event_query(e, &done), DP_INVALID_ARGUMENT, "event");
    CHECK(done == -9);
    e = dead_event(fx->d0);
    CHECK_STATUS_MSG(dp_event_synchronize(e), DP_INVALID_ARGUMENT, "event");
    e = dead_event(fx->d0);
    {
        int64_t ns = -9;
        CHECK_STATUS_MSG(dp_event_elapsed_ns(e, fx->e0, &ns), DP_INVALID_ARGUMENT, "start");
        e = dead_event(fx->d0);
        CHECK_STATUS_MSG(dp_event_elapsed_ns(fx->e0, e, &ns), DP_INVALID_ARGUMENT, "end");
        CHECK(ns == -9);
    }
    e = dead_event(fx->d0);
    CHECK_STATUS_MSG(dp_stream_wait_event(fx->s0, e), DP_INVALID_ARGUMENT, "event");
    e = dead_event(fx->d0);
    dp_event_destroy(e); /* double destroy: no-op */
    CHECK(1);
}

static void test_buffer(dp_test_fixture *fx) {
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    dp_buffer_t *b;
    SECTION("released buffer");
    b = dead_buffer(fx->d0);
    CHECK(dp_buffer_size(b) == 0);
    b = dead_buffer(fx->d0);
    CHECK(dp_buffer_device(b) == NULL);
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_buffer_write(b, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_buffer_read(b, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    CHECK(data[0] == 9 && data[7] == 9);
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_buffer_copy(b, 0, fx->b0, 0, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d1);
    CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, 0, b, 0, 8), DP_INVALID_ARGUMENT, "src");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_buffer_memset(b, 0, 1, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_stream_write(fx->s0, b, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_stream_read(fx->s0, b, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, b, 0, fx->b0, 0, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b0, 0, b, 0, 8), DP_INVALID_ARGUMENT, "src");
    b = dead_buffer(fx->d0);
    CHECK_STATUS_MSG(dp_stream_memset(fx->s0, b, 0, 1, 8), DP_INVALID_ARGUMENT, "dst");
    b = dead_buffer(fx->d0);
    {
        const int before = nothing_warnings;
        dp_buffer_release(b); /* double release: no-op, and a warning */
        check_warned(before, "dp_buffer_release", "is a destroyed or released dp_buffer_t");
    }
    b = dead_buffer(fx->d0);
    dp_buffer_retain(b); /* must not resurrect it */
    CHECK(dp_buffer_size(b) == 0);
    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK(data[0] == 9 && data[7] == 9);
}

static void test_tensor(dp_test_fixture *fx) {
    int64_t out_shape[4] = {-3, -3, -3, -3};
    float out[6] = {-1, -1, -1, -1, -1, -1};
    dp_tensor_t *t, *c = SENTINEL(dp_tensor_t);
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    SECTION("released tensor");
    t = dead_tensor(fx->d0);
    CHECK(dp_tensor_dtype(t) == 0);
    t = dead_tensor(fx->d0);
    CHECK(dp_tensor_rank(t) == 0);
    t = dead_tensor(fx->d0);
    CHECK(dp_tensor_num_elements(t) == -1);
    t = dead_tensor(fx->d0);
    CHECK(dp_tensor_byte_size(t) == 0);
    t = dead_tensor(fx->d0);
    CHECK(dp_tensor_device(t) == NULL);
    t = dead_tensor(fx->d0);
    CHECK_STATUS_MSG(dp_tensor_shape(t, out_shape, 4), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out_shape[0] == -3 && out_shape[1] == -3);
    t = dead_tensor(fx->d0);
    CHECK_STATUS_MSG(dp_tensor_read(t, out, sizeof out), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out[0] == -1.f && out[5] == -1.f);
    t = dead_tensor(fx->d0);
    CHECK_STATUS_MSG(dp_tensor_copy_to(t, fx->d1, &c), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_tensor_t, c);
    t = dead_tensor(fx->d0);
    CHECK_STATUS_MSG(dp_tensor_buffer(t, &b), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    t = dead_tensor(fx->d0);
    {
        void *p = SENTINEL(void);
        CHECK_STATUS_MSG(dp_tensor_data(t, &p), DP_INVALID_ARGUMENT, "tensor");
        CHECK(p == SENTINEL(void));
    }
    {
        static const int64_t shape[1] = {2};
        b = dead_buffer(fx->d0);
        CHECK_STATUS_MSG(dp_tensor_from_buffer(b, DP_DTYPE_F32, shape, 1, &c), DP_INVALID_ARGUMENT,
                         "buffer");
        CHECK_UNTOUCHED(dp_tensor_t, c);
        b = SENTINEL(dp_buffer_t);
    }
    t = dead_tensor(fx->d0);
    {
        const int before = nothing_warnings;
        dp_tensor_release(t); /* double release: no-op, and a warning */
        check_warned(before, "dp_tensor_release", "is a destroyed or released dp_tensor_t");
    }
    t = dead_tensor(fx->d0);
    {
        const int before = nothing_warnings;
        dp_tensor_retain(t); /* must not resurrect it */
        check_warned(before, "dp_tensor_retain", "`tensor`");
    }
    CHECK(dp_tensor_dtype(t) == 0);
}

int main(void) {
    dp_test_fixture fx;
    dp_runtime_t *marker;
    dp_test_watchdog(120);
    CHECK_OK(dp_log_set_callback(on_log, NULL, NULL));
    marker = dp_test_runtime(1, 0);
    dp_test_set_marker_runtime(marker);
    dp_test_fixture_setup(&fx);
    test_runtime();
    test_device(&fx);
    test_stream(&fx);
    test_event(&fx);
    test_buffer(&fx);
    test_tensor(&fx);
    dp_test_fixture_check_intact(&fx);
    {
        dp_memory_stats_t s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        CHECK_OK(dp_device_memory_stats(fx.d0, &s));
        CHECKF(s.active_allocs == 2, "CPU:0 has %llu live allocations, expected 2 (b0, t0)",
               (unsigned long long)s.active_allocs);
    }
    dp_test_round_trip(fx.rt);
    dp_test_fixture_teardown(&fx);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(marker);
    CHECK_OK(dp_log_set_callback(NULL, NULL, NULL));
    return DP_TEST_SUMMARY();
}
