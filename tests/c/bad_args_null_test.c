/* Bad-argument class "NULL": every pointer parameter of every C function, passed as NULL.
 * Expected: DP_INVALID_ARGUMENT with a message naming the parameter, no out-parameter written,
 * no work enqueued, nothing crashed; value-returning functions give their invalid value;
 * destroy/release/retain/init of NULL are no-ops. Ends with a good round trip. */
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

static void test_runtime(dp_test_fixture *fx) {
    dp_runtime_options_t o;
    dp_runtime_t *rt_out = SENTINEL(dp_runtime_t);
    dp_device_t *dev = SENTINEL(dp_device_t);
    size_t n = 4242;
    SECTION("runtime functions");
    dp_runtime_options_init(NULL, 0);
    dp_runtime_destroy(NULL);
    dp_runtime_options_init(&o, sizeof o);
    CHECK_STATUS_MSG(dp_runtime_create(NULL, NULL), DP_INVALID_ARGUMENT, "out_runtime");
    CHECK_STATUS_MSG(dp_runtime_create(&o, NULL), DP_INVALID_ARGUMENT, "out_runtime");
    CHECK_UNTOUCHED(dp_runtime_t, rt_out);

    CHECK_STATUS_MSG(dp_runtime_device_count(NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_device_count(fx->rt, NULL), DP_INVALID_ARGUMENT, "out_count");

    CHECK_STATUS_MSG(dp_runtime_device(NULL, 0, &dev), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    CHECK_STATUS_MSG(dp_runtime_device(fx->rt, 0, NULL), DP_INVALID_ARGUMENT, "out_device");

    CHECK_STATUS_MSG(dp_runtime_find_device(NULL, "CPU", &dev), DP_INVALID_ARGUMENT, "runtime");
    CHECK_UNTOUCHED(dp_device_t, dev);
    CHECK_STATUS_MSG(dp_runtime_find_device(fx->rt, NULL, &dev), DP_INVALID_ARGUMENT, "spec");
    CHECK_UNTOUCHED(dp_device_t, dev);
    CHECK_STATUS_MSG(dp_runtime_find_device(fx->rt, "CPU", NULL), DP_INVALID_ARGUMENT,
                     "out_device");

    CHECK_STATUS_MSG(dp_runtime_synchronize(NULL), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_trace_start(NULL), DP_INVALID_ARGUMENT, "runtime");
    n = 4242;
    CHECK_STATUS_MSG(dp_runtime_trace_stop(NULL, NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
}

static void test_device(dp_test_fixture *fx) {
    dp_device_properties_t p;
    dp_memory_stats_t ms;
    dp_stream_t *s = SENTINEL(dp_stream_t);
    void *ptr = SENTINEL(void), *good = NULL;
    SECTION("device functions");
    memset(&p, 0xA5, sizeof p);
    p.struct_size = sizeof p;
    CHECK_STATUS_MSG(dp_device_get_properties(NULL, &p), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&p, sizeof(size_t), sizeof p, 0xA5), "properties written on failure");
    CHECK_STATUS_MSG(dp_device_get_properties(fx->d0, NULL), DP_INVALID_ARGUMENT,
                     "out_properties");

    CHECK(dp_device_name(NULL) == NULL);

    memset(&ms, 0xA5, sizeof ms);
    ms.struct_size = sizeof ms;
    CHECK_STATUS_MSG(dp_device_memory_stats(NULL, &ms), DP_INVALID_ARGUMENT, "device");
    CHECKF(dp_test_bytes_are(&ms, sizeof(size_t), sizeof ms, 0xA5), "stats written on failure");
    CHECK_STATUS_MSG(dp_device_memory_stats(fx->d0, NULL), DP_INVALID_ARGUMENT, "out_stats");
    {
        uint64_t free_b = 7, total = 7;
        CHECK_STATUS_MSG(dp_device_memory_usage(NULL, &free_b, &total), DP_INVALID_ARGUMENT, "device");
        CHECK_STATUS_MSG(dp_device_memory_usage(fx->d0, NULL, &total), DP_INVALID_ARGUMENT, "out_free");
        CHECK_STATUS_MSG(dp_device_memory_usage(fx->d0, &free_b, NULL), DP_INVALID_ARGUMENT, "out_total");
        CHECKF(free_b == 7 && total == 7, "memory usage written on failure");
    }

    CHECK_STATUS_MSG(dp_device_synchronize(NULL), DP_INVALID_ARGUMENT, "device");

    CHECK_STATUS_MSG(dp_device_host_allocate(NULL, 16, &ptr), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(void, ptr);
    CHECK_STATUS_MSG(dp_device_host_allocate(fx->d0, 16, NULL), DP_INVALID_ARGUMENT, "out_ptr");

    CHECK_OK(dp_device_host_allocate(fx->d0, 16, &good));
    CHECK_STATUS_MSG(dp_device_host_free(NULL, good), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_device_host_free(fx->d0, NULL), DP_INVALID_ARGUMENT, "ptr");
    CHECK_OK(dp_device_host_free(fx->d0, good)); /* the failed frees did not free it */

    CHECK_STATUS_MSG(dp_device_release_cached_memory(NULL), DP_INVALID_ARGUMENT, "device");

    CHECK_STATUS_MSG(dp_device_set_memory_limit(NULL, 1u << 20), DP_INVALID_ARGUMENT, "device");
    {
        uint64_t limit = 7;
        CHECK_STATUS_MSG(dp_device_memory_limit(NULL, &limit), DP_INVALID_ARGUMENT, "device");
        CHECK_STATUS_MSG(dp_device_memory_limit(fx->d0, NULL), DP_INVALID_ARGUMENT, "out_bytes");
        CHECKF(limit == 7, "memory limit written on failure");
    }

    CHECK_STATUS_MSG(dp_device_default_stream(NULL, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    CHECK_STATUS_MSG(dp_device_default_stream(fx->d0, NULL), DP_INVALID_ARGUMENT, "out_stream");
}

static void test_buffer(dp_test_fixture *fx) {
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    SECTION("buffer functions");
    CHECK_STATUS_MSG(dp_buffer_allocate(NULL, 16, &b), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    CHECK_STATUS_MSG(dp_buffer_allocate(fx->d0, 16, NULL), DP_INVALID_ARGUMENT, "out_buffer");

    dp_buffer_retain(NULL);
    dp_buffer_release(NULL);
    CHECK(dp_buffer_size(NULL) == 0);
    CHECK(dp_buffer_device(NULL) == NULL);

    CHECK_STATUS_MSG(dp_buffer_write(NULL, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_buffer_write(fx->b0, 0, NULL, 8), DP_INVALID_ARGUMENT, "src");

    CHECK_STATUS_MSG(dp_buffer_read(NULL, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    CHECK(data[0] == 9 && data[7] == 9);
    CHECK_STATUS_MSG(dp_buffer_read(fx->b0, 0, NULL, 8), DP_INVALID_ARGUMENT, "dst");

    CHECK_STATUS_MSG(dp_buffer_copy(NULL, 0, fx->b1, 0, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, 0, NULL, 0, 8), DP_INVALID_ARGUMENT, "src");

    CHECK_STATUS_MSG(dp_buffer_memset(NULL, 0, 0, 8), DP_INVALID_ARGUMENT, "dst");
}

static void test_stream(dp_test_fixture *fx) {
    dp_stream_t *s = SENTINEL(dp_stream_t);
    unsigned char data[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    SECTION("stream functions");
    CHECK_STATUS_MSG(dp_stream_create(NULL, &s), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_stream_t, s);
    CHECK_STATUS_MSG(dp_stream_create(fx->d0, NULL), DP_INVALID_ARGUMENT, "out_stream");

    dp_stream_destroy(NULL);
    CHECK(dp_stream_device(NULL) == NULL);
    {
        uint32_t id = 99;
        CHECK_STATUS_MSG(dp_stream_id(NULL, &id), DP_INVALID_ARGUMENT, "stream");
        CHECK(id == 99);
        CHECK_STATUS_MSG(dp_stream_id(fx->s0, NULL), DP_INVALID_ARGUMENT, "out_id");
    }
    CHECK_STATUS_MSG(dp_stream_synchronize(NULL), DP_INVALID_ARGUMENT, "stream");

    CHECK_STATUS_MSG(dp_stream_wait_event(NULL, fx->e0), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_wait_event(fx->s0, NULL), DP_INVALID_ARGUMENT, "event");

    CHECK_STATUS_MSG(dp_stream_wait_stream(NULL, fx->s0), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, NULL), DP_INVALID_ARGUMENT, "other");

    callback_runs = 0;
    CHECK_STATUS_MSG(dp_stream_host_callback(NULL, count_cb, NULL), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_host_callback(fx->s0, NULL, data), DP_INVALID_ARGUMENT, "fn");
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(NULL, count_status_cb, NULL), DP_INVALID_ARGUMENT,
                     "stream");
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(fx->s0, NULL, data), DP_INVALID_ARGUMENT, "fn");

    CHECK_STATUS_MSG(dp_stream_write(NULL, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_write(fx->s0, NULL, 0, data, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_stream_write(fx->s0, fx->b0, 0, NULL, 8), DP_INVALID_ARGUMENT, "src");

    CHECK_STATUS_MSG(dp_stream_read(NULL, fx->b0, 0, data, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_read(fx->s0, NULL, 0, data, 8), DP_INVALID_ARGUMENT, "src");
    CHECK_STATUS_MSG(dp_stream_read(fx->s0, fx->b0, 0, NULL, 8), DP_INVALID_ARGUMENT, "dst");

    CHECK_STATUS_MSG(dp_stream_copy(NULL, fx->b0, 0, fx->b0, 8, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, NULL, 0, fx->b0, 8, 8), DP_INVALID_ARGUMENT, "dst");
    CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b0, 0, NULL, 8, 8), DP_INVALID_ARGUMENT, "src");

    CHECK_STATUS_MSG(dp_stream_memset(NULL, fx->b0, 0, 0, 8), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_stream_memset(fx->s0, NULL, 0, 0, 8), DP_INVALID_ARGUMENT, "dst");

    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK(callback_runs == 0);
    CHECK(data[0] == 9 && data[7] == 9);
}

static void test_event(dp_test_fixture *fx) {
    dp_event_t *e = SENTINEL(dp_event_t);
    int32_t done = -9;
    SECTION("event functions");
    CHECK_STATUS_MSG(dp_event_create(NULL, &e), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_event_t, e);
    CHECK_STATUS_MSG(dp_event_create(fx->d0, NULL), DP_INVALID_ARGUMENT, "out_event");
    dp_event_destroy(NULL);
    CHECK_STATUS_MSG(dp_event_record(NULL, fx->s0), DP_INVALID_ARGUMENT, "event");
    CHECK_STATUS_MSG(dp_event_record(fx->e0, NULL), DP_INVALID_ARGUMENT, "stream");
    CHECK_STATUS_MSG(dp_event_query(NULL, &done), DP_INVALID_ARGUMENT, "event");
    CHECK(done == -9);
    CHECK_STATUS_MSG(dp_event_query(fx->e0, NULL), DP_INVALID_ARGUMENT, "out_complete");
    CHECK_STATUS_MSG(dp_event_synchronize(NULL), DP_INVALID_ARGUMENT, "event");
    {
        int64_t ns = -9;
        CHECK_STATUS_MSG(dp_event_elapsed_ns(NULL, fx->e0, &ns), DP_INVALID_ARGUMENT, "start");
        CHECK_STATUS_MSG(dp_event_elapsed_ns(fx->e0, NULL, &ns), DP_INVALID_ARGUMENT, "end");
        CHECK(ns == -9);
        CHECK_STATUS_MSG(dp_event_elapsed_ns(fx->e0, fx->e0, NULL), DP_INVALID_ARGUMENT, "out_ns");
    }
}

static void test_tensor(dp_test_fixture *fx) {
    static const int64_t shape[2] = {2, 3};
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t out_shape[4] = {-3, -3, -3, -3};
    float out[6] = {-1, -1, -1, -1, -1, -1};
    dp_tensor_t *t = SENTINEL(dp_tensor_t);
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    SECTION("tensor functions");
    CHECK_STATUS_MSG(dp_tensor_create(NULL, DP_DTYPE_F32, shape, 2, data, sizeof data, &t),
                     DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, NULL, 2, data, sizeof data, &t),
                     DP_INVALID_ARGUMENT, "shape");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, shape, 2, data, sizeof data, NULL),
                     DP_INVALID_ARGUMENT, "out_tensor");

    dp_tensor_retain(NULL);
    dp_tensor_release(NULL);
    CHECK(dp_tensor_dtype(NULL) == 0);
    CHECK(dp_tensor_rank(NULL) == 0);
    CHECK(dp_tensor_num_elements(NULL) == -1);
    CHECK(dp_tensor_byte_size(NULL) == 0);
    CHECK(dp_tensor_device(NULL) == NULL);

    CHECK_STATUS_MSG(dp_tensor_shape(NULL, out_shape, 4), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out_shape[0] == -3 && out_shape[1] == -3);
    CHECK_STATUS_MSG(dp_tensor_shape(fx->t0, NULL, 4), DP_INVALID_ARGUMENT, "out_shape");

    CHECK_STATUS_MSG(dp_tensor_read(NULL, out, sizeof out), DP_INVALID_ARGUMENT, "tensor");
    CHECK(out[0] == -1.f && out[5] == -1.f);
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, NULL, sizeof out), DP_INVALID_ARGUMENT, "dst");

    CHECK_STATUS_MSG(dp_tensor_copy_to(NULL, fx->d1, &t), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_copy_to(fx->t0, NULL, &t), DP_INVALID_ARGUMENT, "device");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_copy_to(fx->t0, fx->d1, NULL), DP_INVALID_ARGUMENT, "out_tensor");

    CHECK_STATUS_MSG(dp_tensor_buffer(NULL, &b), DP_INVALID_ARGUMENT, "tensor");
    CHECK_UNTOUCHED(dp_buffer_t, b);
    CHECK_STATUS_MSG(dp_tensor_buffer(fx->t0, NULL), DP_INVALID_ARGUMENT, "out_buffer");
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
    test_buffer(&fx);
    test_stream(&fx);
    test_event(&fx);
    test_tensor(&fx);
    dp_test_fixture_check_intact(&fx);
    {
        /* nothing leaked from the failed calls: only the fixture's allocations are live */
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
    return DP_TEST_SUMMARY();
}
