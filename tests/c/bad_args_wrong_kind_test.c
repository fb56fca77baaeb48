/* Bad-argument class "wrong kind of handle": every handle parameter of every C function, given a
 * live handle of another kind (a dp_stream_t* cast to dp_event_t*, a dp_tensor_t* to
 * dp_buffer_t*, ...). Expected: DP_INVALID_ARGUMENT naming the parameter, no out-parameter
 * written, no crash, and the object behind the wrong handle untouched (destroy/release/retain
 * of a wrong kind is a no-op that changes no reference count). At the end: forged handles
 * (pointers to plain memory that never was a handle). Ends with a good round trip. */
#include "dp_test.h"

static int callback_runs = 0;
static void count_cb(void *user_data) {
    (void)user_data;
    DP_TEST_ATOMIC_INC(callback_runs);
}
static dp_status_t count_status_cb(void *user_data) {
    count_cb(user_data);
    return DP_OK;
}

#define AS(T, h) ((T *)(void *)(h))

static void test_runtime(dp_test_fixture *fx) {
    dp_device_t *dev = SENTINEL(dp_device_t);
    size_t n = 4242;
    SECTION("runtime parameter given a device / a stream");
    CHECK_STATUS_MSG(dp_runtime_device_count(AS(dp_runtime_t, fx->d0), &n), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_device_count(AS(dp_runtime_t, fx->s0), &n), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_device(AS(dp_runtime_t, fx->d0), 0, &dev), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    CHECK_STATUS_MSG(dp_runtime_find_device(AS(dp_runtime_t, fx->d0), "CPU:0", &dev),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    CHECK_STATUS_MSG(dp_runtime_synchronize(AS(dp_runtime_t, fx->d1)), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_trace_start(AS(dp_runtime_t, fx->d1)), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_trace_stop(AS(dp_runtime_t, fx->e0), NULL, NULL),
                     DP_INVALID_ARGUMENT, "runtime");
    dp_runtime_destroy(AS(dp_runtime_t, fx->d0)); /* no-op: the device and runtime live on */
    dp_runtime_destroy(AS(dp_runtime_t, fx->e0));
    CHECK_STR(dp_device_name(fx->d0), "CPU:0");
    CHECK_OK(dp_runtime_device_count(fx->rt, &n));
    CHECK(n == 2);
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
    dp_device_t *rt_as_dev = AS(dp_device_t, fx->rt), *s_as_dev = AS(dp_device_t, fx->s0);
    SECTION("device parameter given a runtime / a stream / a buffer");
    memset(&p, 0xA5, sizeof p);
    p.struct_size = sizeof p;
    CHECK_STATUS_MSG(dp_device_get_properties(rt_as_dev, &p), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_device_get_properties(s_as_dev, &p), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&p, sizeof(size_t), sizeof p, 0xA5), "properties written on failure");
    CHECK(dp_device_name(rt_as_dev) == NULL);
    CHECK(dp_device_name(s_as_dev) == NULL);
    CHECK(dp_device_name(AS(dp_device_t, fx->b0)) == NULL);
    memset(&ms, 0xA5, sizeof ms);
    ms.struct_size = sizeof ms;
    CHECK_STATUS_MSG(dp_device_memory_stats(rt_as_dev, &ms), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&ms, sizeof(size_t), sizeof ms, 0xA5), "stats written on failure");
    {
        uint64_t free_b = 7, total = 7;
        CHECK_STATUS_MSG(dp_device_memory_usage(s_as_dev, &free_b, &total), DP_INVALID_ARGUMENT, "device");
        CHECKF(free_b == 7 && total == 7, "memory usage written on failure");
    }
    CHECK_STATUS_MSG(dp_device_synchronize(s_as_dev), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_device_host_allocate(rt_as_dev, 16, &ptr), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(void, ptr);
    CHECK_OK(dp_device_host_allocate(fx->d0, 16, &good));
    CHECK_STATUS_MSG(dp_device_host_free(s_as_dev, good), DP_INVALID_ARGUMENT, "device");
    CHECK_OK(dp_device_host_free(fx->d0, good));
    CHECK_STATUS_MSG(dp_device_release_cached_memory(rt_as_dev), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_device_set_memory_limit(s_as_dev, 1u << 20), DP_INVALID_ARGUMENT, "device");
    {
        uint64_t limit = 7;
        CHECK_STATUS_MSG(dp_device_memory_limit(rt_as_dev, &limit), DP_INVALID_ARGUMENT, "device");
        CHECK_STATUS_MSG(dp_device_memory_limit(AS(dp_device_t, fx->b0), &limit),
                         DP_INVALID_ARGUMENT, "device");
        CHECKF(limit == 7, "memory limit written on failure");
    }
    CHECK_STATUS_MSG(dp_device_default_stream(s_as_dev, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    CHECK_STATUS_MSG(dp_buffer_allocate(rt_as_dev, 16, &b), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_buffer_allocate(AS(dp_device_t, fx->t0), 16, &b), DP_INVALID_ARGUMENT,
                     "device");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    CHECK_STATUS_MSG(dp_stream_create(rt_as_dev, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_stream_create(s_as_dev, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    CHECK_STATUS_MSG(dp_event_create(AS(dp_device_t, fx->e0), &e), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_event_t, e);
    CHECK_STATUS_MSG(dp_tensor_create(rt_as_dev, DP_DTYPE_I32, shape, 1, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_copy_to(fx->t0, AS(dp_device_t, fx->b1), &t), DP_INVALID_ARGUMENT,
                     "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
}

static void test_stream(dp_test_fixture *fx) {
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    dp_stream_t *e_as_s = AS(dp_stream_t, fx->e0), *b_as_s = AS(dp_stream_t, fx->b0);
    int32_t done = -1;
    SECTION("stream parameter given an event / a buffer");
    callback_runs = 0;
    CHECK(dp_stream_device(e_as_s) == NULL);
    CHECK(dp_stream_device(b_as_s) == NULL);
    {
        uint32_t id = 99;
        CHECK_STATUS_MSG(dp_stream_id(e_as_s, &id), DP_INVALID_ARGUMENT, "stream");
        CHECK(id == 99);
    }
    CHECK_STATUS_MSG(dp_stream_synchronize(e_as_s), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_wait_event(e_as_s, fx->e0), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_wait_stream(e_as_s, fx->s0), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, e_as_s), DP_INVALID_ARGUMENT, "other");
    CHECK_STATUS_MSG(dp_stream_host_callback(e_as_s, count_cb, NULL), DP_INVALID_ARGUMENT,
                     "stream");
    CHECK_STATUS_MSG(dp_stream_host_callback(b_as_s, count_cb, NULL), DP_INVALID_ARGUMENT,
                     "stream");
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(e_as_s, count_status_cb, NULL),
                     DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_write(e_as_s, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_read(e_as_s, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_copy(b_as_s, fx->b0, 0, fx->b0, 8, 8), DP_INVALID_ARGUMENT,
                     "stream");
    CHECK_STATUS_MSG(dp_stream_memset(e_as_s, fx->b0, 0, 0, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_event_record(fx->e0, e_as_s), DP_INVALID_ARGUMENT, "stream");
    dp_stream_destroy(e_as_s); /* no-op: the event lives on */
    dp_stream_destroy(b_as_s);
    CHECK_OK(dp_event_query(fx->e0, &done));
    CHECK(done == 1);
    CHECK_OK(dp_device_synchronize(fx->d0));
    CHECK(callback_runs == 0);
    CHECK(data[0] == 9 && data[7] == 9);
}

static void test_event(dp_test_fixture *fx) {
    dp_event_t *s_as_e = AS(dp_event_t, fx->s0), *t_as_e = AS(dp_event_t, fx->t0);
    int32_t done = -9;
    SECTION("event parameter given a stream / a tensor");
    CHECK_STATUS_MSG(dp_event_record(s_as_e, fx->s0), DP_INVALID_ARGUMENT, "event");
    CHECK_STATUS_MSG(dp_event_query(s_as_e, &done), DP_INVALID_ARGUMENT, "event");
    CHECK_STATUS_MSG(dp_event_query(t_as_e, &done), DP_INVALID_ARGUMENT, "event");
    CHECK(done == -9);
    CHECK_STATUS_MSG(dp_event_synchronize(s_as_e), DP_INVALID_ARGUMENT, "event");
    {
        int64_t ns = -9;
        CHECK_STATUS_MSG(dp_event_elapsed_ns(s_as_e, fx->e0, &ns), DP_INVALID_ARGUMENT, "start");
        CHECK_STATUS_MSG(dp_event_elapsed_ns(fx->e0, t_as_e, &ns), DP_INVALID_ARGUMENT, "end");
        CHECK(ns == -9);
    }
    CHECK_STATUS_MSG(dp_stream_wait_event(fx->s0, s_as_e), DP_INVALID_ARGUMENT, "event");
    dp_event_destroy(s_as_e); /* no-op: the stream lives on */
    dp_event_destroy(t_as_e);
    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK(dp_stream_device(fx->s0) == fx->d0);
}

static void test_buffer(dp_test_fixture *fx) {
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    dp_buffer_t *t_as_b = AS(dp_buffer_t, fx->t0), *s_as_b = AS(dp_buffer_t, fx->s0);
    SECTION("buffer parameter given a tensor / a stream");
    CHECK(dp_buffer_size(t_as_b) == 0);
    CHECK(dp_buffer_size(s_as_b) == 0);
    CHECK(dp_buffer_device(t_as_b) == NULL);
    CHECK_STATUS_MSG(dp_buffer_write(t_as_b, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_buffer_read(t_as_b, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    CHECK(data[0] == 9 && data[7] == 9);
    CHECK_STATUS_MSG(dp_buffer_copy(t_as_b, 0, fx->b0, 0, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, 0, t_as_b, 0, 8), DP_INVALID_ARGUMENT, "src");
    CHECK_STATUS_MSG(dp_buffer_memset(s_as_b, 0, 1, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_stream_write(fx->s0, t_as_b, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_stream_read(fx->s0, t_as_b, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, t_as_b, 0, fx->b0, 0, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b0, 0, t_as_b, 0, 8), DP_INVALID_ARGUMENT, "src");
    CHECK_STATUS_MSG(dp_stream_memset(fx->s0, s_as_b, 0, 1, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK(data[0] == 9 && data[7] == 9);
}

static void test_tensor(dp_test_fixture *fx) {
    int64_t out_shape[4] = {-3, -3, -3, -3};
    float out[6] = {-1, -1, -1, -1, -1, -1};
    dp_tensor_t *b_as_t = AS(dp_tensor_t, fx->b0), *e_as_t = AS(dp_tensor_t, fx->e1);
    dp_tensor_t *c = SENTINEL(dp_tensor_t);
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    SECTION("tensor parameter given a buffer / an event");
    CHECK(dp_tensor_dtype(b_as_t) == 0);
    CHECK(dp_tensor_dtype(e_as_t) == 0);
    CHECK(dp_tensor_rank(b_as_t) == 0);
    CHECK(dp_tensor_num_elements(b_as_t) == -1);
    CHECK(dp_tensor_byte_size(b_as_t) == 0);
    CHECK(dp_tensor_device(b_as_t) == NULL);
    CHECK_STATUS_MSG(dp_tensor_shape(b_as_t, out_shape, 4), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out_shape[0] == -3 && out_shape[1] == -3);
    CHECK_STATUS_MSG(dp_tensor_read(b_as_t, out, sizeof out), DP_INVALID_ARGUMENT, "tensor");
    CHECK_STATUS_MSG(dp_tensor_read(e_as_t, out, sizeof out), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out[0] == -1.f && out[5] == -1.f);
    CHECK_STATUS_MSG(dp_tensor_copy_to(b_as_t, fx->d1, &c), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_tensor_t, c);
    CHECK_STATUS_MSG(dp_tensor_buffer(b_as_t, &b), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    {
        void *p = SENTINEL(void);
        static const int64_t shape[1] = {2};
        CHECK_STATUS_MSG(dp_tensor_data(b_as_t, &p), DP_INVALID_ARGUMENT, "tensor");
        CHECK(p == SENTINEL(void));
        CHECK_STATUS_MSG(dp_tensor_from_buffer(AS(dp_buffer_t, fx->t0), DP_DTYPE_F32, shape, 1, &c),
                         DP_INVALID_ARGUMENT, "buffer");
        CHECK_UNTOUCHED(dp_tensor_t, c);
    }
}

static void test_refcounts_untouched(dp_test_fixture *fx) {
    static const int64_t shape[1] = {2};
    dp_tensor_t *t = NULL;
    dp_buffer_t *b = NULL;
    SECTION("retain/release of the wrong kind change no reference count");
    DP_TEST_MUST(dp_tensor_create(fx->d0, DP_DTYPE_I64, shape, 1, NULL, 0, &t));
    DP_TEST_MUST(dp_buffer_allocate(fx->d0, 8, &b));
    /* the buffer functions on a tensor and the tensor functions on a buffer: no-ops */
    dp_buffer_release(AS(dp_buffer_t, t));
    dp_buffer_release(AS(dp_buffer_t, t));
    dp_buffer_retain(AS(dp_buffer_t, t));
    dp_tensor_release(AS(dp_tensor_t, b));
    dp_tensor_release(AS(dp_tensor_t, b));
    dp_tensor_retain(AS(dp_tensor_t, b));
    CHECK(dp_tensor_dtype(t) == DP_DTYPE_I64); /* the releases did not free them */
    CHECK(dp_buffer_size(b) == 8);
    dp_tensor_release(t); /* ... and the retains did not add a reference: one release frees */
    dp_buffer_release(b);
    CHECK(dp_tensor_dtype(t) == 0);
    CHECK(dp_buffer_size(b) == 0);
}

/* Plain memory that never was a handle: zeros, and a byte pattern. */
static uint64_t forged_zero[64];
static uint64_t forged_pattern[64];

static void test_forged(dp_test_fixture *fx) {
    int k;
    SECTION("forged handles (pointers to plain memory)");
    memset(forged_pattern, 0xA5, sizeof forged_pattern);
    for (k = 0; k < 2; ++k) {
        void *h = k == 0 ? (void *)forged_zero : (void *)forged_pattern;
        size_t n = 4242;
        int32_t done = -9;
        float out[6] = {-1, -1, -1, -1, -1, -1};
        dp_tensor_t *c = SENTINEL(dp_tensor_t);
        dp_device_properties_t p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        CHECK_STATUS_MSG(dp_runtime_device_count((dp_runtime_t *)h, &n), DP_INVALID_ARGUMENT,
                         "runtime");
        CHECK(n == 4242);
        CHECK_STATUS_MSG(dp_device_get_properties((dp_device_t *)h, &p), DP_INVALID_ARGUMENT,
                         "device");
        CHECK(dp_device_name((dp_device_t *)h) == NULL);
        CHECK_STATUS_MSG(dp_stream_synchronize((dp_stream_t *)h), DP_INVALID_ARGUMENT, "stream");
        CHECK_STATUS_MSG(dp_event_query((dp_event_t *)h, &done), DP_INVALID_ARGUMENT, "event");
        CHECK(done == -9);
        CHECK(dp_buffer_size((dp_buffer_t *)h) == 0);
        CHECK_STATUS_MSG(dp_buffer_memset((dp_buffer_t *)h, 0, 0, 8), DP_INVALID_ARGUMENT, "dst");
        CHECK(dp_tensor_dtype((dp_tensor_t *)h) == 0);
        CHECK_STATUS_MSG(dp_tensor_read((dp_tensor_t *)h, out, sizeof out), DP_INVALID_ARGUMENT,
                         "tensor");
        CHECK_STATUS_MSG(dp_tensor_copy_to(fx->t0, (dp_device_t *)h, &c), DP_INVALID_ARGUMENT,
                         "device");
        CHECK_UNTOUCHED(dp_tensor_t, c);
        dp_buffer_release((dp_buffer_t *)h);
        dp_tensor_release((dp_tensor_t *)h);
        dp_stream_destroy((dp_stream_t *)h);
        dp_event_destroy((dp_event_t *)h);
        dp_runtime_destroy((dp_runtime_t *)h);
    }
    /* nothing was written into the forged memory */
    CHECK(dp_test_bytes_are(forged_zero, 0, sizeof forged_zero, 0));
    CHECK(dp_test_bytes_are(forged_pattern, 0, sizeof forged_pattern, 0xA5));
}

int main(void) {
    dp_test_fixture fx;
    dp_runtime_t *marker;
    dp_test_watchdog(120);
    marker = dp_test_runtime(1, 0);
    dp_test_set_marker_runtime(marker);
    dp_test_fixture_setup(&fx);
    test_runtime(&fx);
    test_device(&fx);
    test_stream(&fx);
    test_event(&fx);
    test_buffer(&fx);
    test_tensor(&fx);
    test_refcounts_untouched(&fx);
    dp_test_fixture_check_intact(&fx);
    test_forged(&fx);
    dp_test_fixture_check_intact(&fx);
    dp_test_round_trip(fx.rt);
    dp_test_fixture_teardown(&fx);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(marker);
    return DP_TEST_SUMMARY();
}
