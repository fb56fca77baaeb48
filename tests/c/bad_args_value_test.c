/* Bad-argument classes "bad enum", "bad size/range", "bad struct_size", "bad spec/index" and
 * "cross-device misuse", for every function where they apply. Expected statuses: the draft's
 * where it names one (OUT_OF_RANGE for offset + size past the end and for a device index past the
 * end, NOT_FOUND for a well-formed spec naming no device, RESOURCE_EXHAUSTED for an allocation
 * that cannot be satisfied), otherwise INVALID_ARGUMENT. Every failure leaves out-parameters,
 * buffers, host memory and streams untouched. Ends with a good round trip. */
#include "dp_test.h"

static const dp_dtype_t bad_dtypes[] = {0, 9, -1, 1000, INT32_MIN, INT32_MAX};
#define NBAD_DTYPES 6

static void test_enums(dp_test_fixture *fx) {
    static const int64_t shape[1] = {2};
    float data[2] = {1.f, 2.f};
    size_t i;
    SECTION("bad dtype");
    for (i = 0; i < NBAD_DTYPES; ++i) {
        dp_tensor_t *t = SENTINEL(dp_tensor_t);
        CHECK(dp_dtype_size(bad_dtypes[i]) == 0);
        CHECK(dp_dtype_name(bad_dtypes[i]) == NULL);
        CHECK_STATUS_MSG(dp_tensor_create(fx->d0, bad_dtypes[i], shape, 1, NULL, 0, &t),
                         DP_INVALID_ARGUMENT, "dtype");
        CHECK_UNTOUCHED(dp_tensor_t, t);
        CHECK_STATUS_MSG(dp_tensor_create(fx->d0, bad_dtypes[i], shape, 1, data, sizeof data, &t),
                         DP_INVALID_ARGUMENT, "dtype");
        CHECK_UNTOUCHED(dp_tensor_t, t);
    }
    SECTION("unknown status codes");
    CHECK_STR(dp_status_str(16), "UNKNOWN_STATUS");
    CHECK_STR(dp_status_str(-1), "UNKNOWN_STATUS");
    CHECK_STR(dp_status_str(1000), "UNKNOWN_STATUS");
}

static void test_runtime_options(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = SENTINEL(dp_runtime_t);
    /* 0.1 is the first version: the whole struct is the oldest supported size */
    static const size_t bad_sizes[] = {0, 1, sizeof(size_t) - 1, sizeof(size_t),
                                       offsetof(dp_runtime_options_t, cpu_memory_limit)};
    static const uint32_t bad_counts[] = {0, 65, 1000, UINT32_MAX};
    size_t i;
    SECTION("dp_runtime_create: bad struct_size, bad cpu_device_count");
    for (i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; ++i) {
        dp_runtime_options_init(&o, sizeof o);
        o.struct_size = bad_sizes[i];
        CHECK_STATUS_MSG(dp_runtime_create(&o, &rt), DP_INVALID_ARGUMENT, "struct_size");
        CHECK_UNTOUCHED(dp_runtime_t, rt);
    }
    for (i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; ++i) {
        dp_runtime_options_init(&o, sizeof o);
        o.cpu_device_count = bad_counts[i];
        CHECK_STATUS_MSG(dp_runtime_create(&o, &rt), DP_INVALID_ARGUMENT, "cpu_device_count");
        CHECK_UNTOUCHED(dp_runtime_t, rt);
    }
}

static void test_runtime_index_and_specs(dp_test_fixture *fx) {
    static const char *const malformed[] = {
        "",        ":",         ":0",           "CPU:",          "CPU:-1",
        "CPU:x",   "CPU:0:1",   "1CPU",         "C-PU",          "CPU: 0",
        " CPU",    "CPU ",      "/device:",     "/gpu:0",        "/",
        "/device:CPU:0/device:CPU:1",           "/job:localhost", "CPU:99999999",
        "CPU:1.0", "CPU:0x1",   "\xc3\xa9:0",
    };
    static const char *const missing[] = {"CPU:2", "cpu:64", "HOST:2", "GPU", "GPU:0",
                                          "/device:GPU:0", "NOSUCHPLATFORM:0", "SIM:0"};
    static const size_t bad_index[] = {2, 3, 1000, SIZE_MAX};
    size_t i;
    SECTION("dp_runtime_device: index past the end");
    for (i = 0; i < sizeof bad_index / sizeof bad_index[0]; ++i) {
        dp_device_t *d = SENTINEL(dp_device_t);
        CHECK_STATUS_MSG(dp_runtime_device(fx->rt, bad_index[i], &d), DP_OUT_OF_RANGE, "index");
        CHECK_UNTOUCHED(dp_device_t, d);
    }
    SECTION("dp_runtime_find_device: malformed specs");
    for (i = 0; i < sizeof malformed / sizeof malformed[0]; ++i) {
        dp_device_t *d = SENTINEL(dp_device_t);
        dp_status_t st;
        char msg[512];
        dp_test_stamp_();
        st = dp_runtime_find_device(fx->rt, malformed[i], &d);
        dp_test_copy_message_(msg, sizeof msg);
        CHECKF(st == DP_INVALID_ARGUMENT, "find_device(\"%s\") -> %s, expected INVALID_ARGUMENT (%s)",
               malformed[i], dp_status_str(st), msg);
        CHECKF(msg[0] != '\0' && (malformed[i][0] == '\0' || strstr(msg, malformed[i]) != NULL),
               "find_device(\"%s\"): the message \"%s\" does not quote the spec", malformed[i], msg);
        CHECK_UNTOUCHED(dp_device_t, d);
    }
    SECTION("dp_runtime_find_device: well-formed specs naming no device");
    for (i = 0; i < sizeof missing / sizeof missing[0]; ++i) {
        dp_device_t *d = SENTINEL(dp_device_t);
        dp_status_t st;
        char msg[512];
        dp_test_stamp_();
        st = dp_runtime_find_device(fx->rt, missing[i], &d);
        dp_test_copy_message_(msg, sizeof msg);
        CHECKF(st == DP_NOT_FOUND, "find_device(\"%s\") -> %s, expected NOT_FOUND (%s)", missing[i],
               dp_status_str(st), msg);
        CHECKF(msg[0] != '\0' && strcmp(msg, dp_test_marker_msg_) != 0,
               "find_device(\"%s\") set no message", missing[i]);
        CHECK_UNTOUCHED(dp_device_t, d);
    }
    {
        /* a spec that is not NUL-terminated within any sane bound: long, but terminated */
        char longspec[5000];
        dp_device_t *d = SENTINEL(dp_device_t);
        memset(longspec, 'A', sizeof longspec - 1);
        longspec[sizeof longspec - 1] = '\0';
        CHECK_STATUS_MSG(dp_runtime_find_device(fx->rt, longspec, &d), DP_INVALID_ARGUMENT, "spec");
        CHECK_UNTOUCHED(dp_device_t, d);
    }
}

static void test_struct_sizes(dp_test_fixture *fx) {
    static const size_t bad[] = {0, 1, 4, sizeof(size_t) - 1};
    size_t i;
    SECTION("dp_device_get_properties / dp_device_memory_stats: struct_size too small");
    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        dp_device_properties_t p;
        dp_memory_stats_t s;
        memset(&p, 0xA5, sizeof p);
        p.struct_size = bad[i];
        CHECK_STATUS_MSG(dp_device_get_properties(fx->d0, &p), DP_INVALID_ARGUMENT, "struct_size");
        CHECK(p.struct_size == bad[i]);
        CHECKF(dp_test_bytes_are(&p, sizeof(size_t), sizeof p, 0xA5),
               "properties written with struct_size %u", (unsigned)bad[i]);
        memset(&s, 0xA5, sizeof s);
        s.struct_size = bad[i];
        CHECK_STATUS_MSG(dp_device_memory_stats(fx->d0, &s), DP_INVALID_ARGUMENT, "struct_size");
        CHECK(s.struct_size == bad[i]);
        CHECKF(dp_test_bytes_are(&s, sizeof(size_t), sizeof s, 0xA5),
               "stats written with struct_size %u", (unsigned)bad[i]);
    }
}

static void test_host_memory(dp_test_fixture *fx) {
    void *p = SENTINEL(void), *good = NULL;
    static char not_ours[64];
    void *heap;
    SECTION("dp_device_host_allocate / host_free: impossible sizes, foreign pointers");
    CHECK_STATUS(dp_device_host_allocate(fx->d0, SIZE_MAX, &p), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(void, p);
    CHECK_STATUS(dp_device_host_allocate(fx->d0, SIZE_MAX / 2, &p), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(void, p);
    heap = malloc(64);
    CHECK_STATUS_MSG(dp_device_host_free(fx->d0, heap), DP_INVALID_ARGUMENT, "ptr|not host memory");
    free(heap);
    CHECK_STATUS_MSG(dp_device_host_free(fx->d0, not_ours), DP_INVALID_ARGUMENT, "ptr|not host memory");
    CHECK_OK(dp_device_host_allocate(fx->d0, 64, &good));
    if (!good) return;
    CHECK_STATUS_MSG(dp_device_host_free(fx->d0, (char *)good + 1), DP_INVALID_ARGUMENT, "ptr|not host memory");
    CHECK_OK(dp_device_host_free(fx->d0, good));
    CHECK_STATUS_MSG(dp_device_host_free(fx->d0, good), DP_INVALID_ARGUMENT, "ptr|not host memory"); /* twice */
}

static void test_buffer_allocate(dp_test_fixture *fx) {
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    SECTION("dp_buffer_allocate: impossible sizes");
    CHECK_STATUS(dp_buffer_allocate(fx->d0, SIZE_MAX, &b), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, b);
    CHECK_STATUS(dp_buffer_allocate(fx->d0, SIZE_MAX / 2 + 1, &b), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, b);
    CHECK_STATUS(dp_buffer_allocate(fx->d1, (size_t)1 << 52, &b), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, b);
}

/* (offset, size) pairs that do not lie inside a DP_TEST_BUF-byte buffer. */
static const size_t bad_off[] = {0, DP_TEST_BUF - 1, DP_TEST_BUF, DP_TEST_BUF + 1, SIZE_MAX, 1,
                                 SIZE_MAX - 2, DP_TEST_BUF / 2};
static const size_t bad_len[] = {DP_TEST_BUF + 1, 2, 1, 0, 2, SIZE_MAX, 8, SIZE_MAX / 2};
#define NBAD_RANGES 8
#define RANGE_WORDS "offset|size|range|bound|end"

static void test_buffer_ranges(dp_test_fixture *fx) {
    unsigned char host[DP_TEST_BUF + 8];
    size_t i;
    SECTION("synchronous write/read/memset/copy: offset + size past the end, overflow");
    memset(host, 0x3C, sizeof host);
    for (i = 0; i < NBAD_RANGES; ++i) {
        /* the host side is big enough for the requested size only when the size is small; the
         * range check must come first in any case */
        size_t o = bad_off[i], n = bad_len[i];
        printf("   range offset %llu size %llu\n", (unsigned long long)o, (unsigned long long)n);
        CHECK_STATUS_MSG(dp_buffer_write(fx->b0, o, host, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_buffer_read(fx->b0, o, host, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK(dp_test_bytes_are(host, 0, sizeof host, 0x3C));
        CHECK_STATUS_MSG(dp_buffer_memset(fx->b0, o, 0x00, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        /* copy: the bad range on the destination side, then on the source side */
        CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, o, fx->b1, 0, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_buffer_copy(fx->b1, 0, fx->b0, o, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, 0, fx->b0, o, n), DP_OUT_OF_RANGE, RANGE_WORDS);
    }
    /* a range valid in the source but not in a smaller destination */
    {
        dp_buffer_t *small = NULL;
        DP_TEST_MUST(dp_buffer_allocate(fx->d1, DP_TEST_BUF / 2, &small));
        CHECK_STATUS_MSG(dp_buffer_copy(small, 0, fx->b0, 0, DP_TEST_BUF), DP_OUT_OF_RANGE,
                         RANGE_WORDS);
        CHECK_STATUS_MSG(dp_buffer_copy(fx->b0, 0, small, 0, DP_TEST_BUF), DP_OUT_OF_RANGE,
                         RANGE_WORDS);
        dp_buffer_release(small);
    }
}

static void test_stream_ranges(dp_test_fixture *fx) {
    unsigned char host[DP_TEST_BUF + 8];
    size_t i;
    SECTION("stream write/read/memset/copy: offset + size past the end, overflow");
    memset(host, 0x3C, sizeof host);
    for (i = 0; i < NBAD_RANGES; ++i) {
        size_t o = bad_off[i], n = bad_len[i];
        CHECK_STATUS_MSG(dp_stream_write(fx->s0, fx->b0, o, host, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_stream_read(fx->s0, fx->b0, o, host, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_stream_memset(fx->s0, fx->b0, o, 0x00, n), DP_OUT_OF_RANGE, RANGE_WORDS);
        CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b0, o, fx->b0, 0, n), DP_OUT_OF_RANGE,
                         RANGE_WORDS);
        CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b0, 0, fx->b0, o, n), DP_OUT_OF_RANGE,
                         RANGE_WORDS);
    }
    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK(dp_test_bytes_are(host, 0, sizeof host, 0x3C));
}

static void test_tensor_create(dp_test_fixture *fx) {
    static const int64_t neg[2] = {2, -1};
    static const int64_t neg_min[1] = {INT64_MIN};
    static const int64_t ok9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const int64_t overflow_elems[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
    static const int64_t overflow_max[2] = {INT64_MAX, 2};
    static const int64_t overflow_bytes[1] = {(int64_t)1 << 61}; /* x 8 bytes = 2^64 */
    static const int64_t huge[1] = {(int64_t)1 << 50};          /* 1 PiB of u8: valid, too big */
    static const int64_t shape23[2] = {2, 3};
    float data[6] = {1, 2, 3, 4, 5, 6};
    dp_tensor_t *t = SENTINEL(dp_tensor_t);
    SECTION("dp_tensor_create: bad shape, rank, data_size");
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, neg, 2, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "shape|dim");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_U8, neg_min, 1, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "shape|dim");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, ok9, 9, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "rank");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, ok9, SIZE_MAX, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "rank");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_U8, overflow_elems, 2, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "shape|overflow");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_U8, overflow_max, 2, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "shape|overflow");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F64, overflow_bytes, 1, NULL, 0, &t),
                     DP_INVALID_ARGUMENT, "shape|overflow|size");
    CHECK_UNTOUCHED(dp_tensor_t, t);
    CHECK_STATUS(dp_tensor_create(fx->d0, DP_DTYPE_U8, huge, 1, NULL, 0, &t),
                 DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_tensor_t, t);
    /* data_size must equal the byte size (24) when data is given */
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, shape23, 2, data, 23, &t),
                     DP_INVALID_ARGUMENT, "data_size|given|data");
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, shape23, 2, data, 25, &t),
                     DP_INVALID_ARGUMENT, "data_size|given|data");
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, shape23, 2, data, 0, &t),
                     DP_INVALID_ARGUMENT, "data_size|given|data");
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F64, shape23, 2, data, sizeof data, &t),
                     DP_INVALID_ARGUMENT, "data_size|given|data"); /* 24 bytes given, f64 needs 48 */
    CHECK_STATUS_MSG(dp_tensor_create(fx->d0, DP_DTYPE_F32, shape23, 2, data, SIZE_MAX, &t),
                     DP_INVALID_ARGUMENT, "data_size|given|data");
    CHECK_UNTOUCHED(dp_tensor_t, t);
}

static void test_tensor_sizes(dp_test_fixture *fx) {
    int64_t shape[2] = {-3, -3};
    float out[8];
    SECTION("dp_tensor_shape capacity, dp_tensor_read dst_size");
    CHECK_STATUS_MSG(dp_tensor_shape(fx->t0, shape, 1), DP_INVALID_ARGUMENT, "capacity");
    CHECK(shape[0] == -3 && shape[1] == -3);
    CHECK_STATUS_MSG(dp_tensor_shape(fx->t0, shape, 0), DP_INVALID_ARGUMENT, "capacity");
    CHECK(shape[0] == -3);
    /* t0 is 6 f32 = 24 bytes */
    memset(out, 0x3C, sizeof out);
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, out, 23), DP_INVALID_ARGUMENT, "dst_size");
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, out, 4), DP_INVALID_ARGUMENT, "dst_size");
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, out, 0), DP_INVALID_ARGUMENT, "dst_size");
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, out, 25), DP_INVALID_ARGUMENT, "dst_size");
    CHECK_STATUS_MSG(dp_tensor_read(fx->t0, out, SIZE_MAX), DP_INVALID_ARGUMENT, "dst_size");
    CHECK(dp_test_bytes_are(out, 0, sizeof out, 0x3C));
}

static void test_cross_device(dp_test_fixture *fx) {
    int32_t done = -1;
    SECTION("cross-device misuse");
    /* an event of CPU:0 recorded on a stream of CPU:1 */
    CHECK_STATUS_MSG(dp_event_record(fx->e0, fx->s1), DP_INVALID_ARGUMENT, "device|CPU:");
    CHECK_STATUS_MSG(dp_event_record(fx->e1, fx->s0), DP_INVALID_ARGUMENT, "device|CPU:");
    CHECK_OK(dp_event_query(fx->e0, &done));
    CHECK(done == 1); /* still "never recorded" */
    {
        dp_stream_t *ds1 = NULL;
        DP_TEST_MUST(dp_device_default_stream(fx->d1, &ds1));
        CHECK_STATUS_MSG(dp_event_record(fx->e0, ds1), DP_INVALID_ARGUMENT, "device|CPU:");
        /* wait_stream across devices */
        CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, ds1), DP_INVALID_ARGUMENT, "device|CPU:");
    }
    CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, fx->s1), DP_INVALID_ARGUMENT, "device|CPU:");
    CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s1, fx->s0), DP_INVALID_ARGUMENT, "device|CPU:");
    /* stream-ordered copies: the buffer must live on the stream's device (for a copy, one of
     * the two must) */
    {
        unsigned char host[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        CHECK_STATUS_MSG(dp_stream_write(fx->s0, fx->b1, 0, host, 8), DP_INVALID_ARGUMENT,
                         "device|CPU:");
        CHECK_STATUS_MSG(dp_stream_read(fx->s0, fx->b1, 0, host, 8), DP_INVALID_ARGUMENT,
                         "device|CPU:");
        CHECK_STATUS_MSG(dp_stream_copy(fx->s0, fx->b1, 0, fx->b1, 8, 8), DP_INVALID_ARGUMENT,
                         "device|CPU:");
        CHECK_STATUS_MSG(dp_stream_memset(fx->s0, fx->b1, 0, 0, 8), DP_INVALID_ARGUMENT,
                         "device|CPU:");
        CHECK_OK(dp_stream_synchronize(fx->s0));
        CHECK(host[0] == 9 && host[7] == 9);
    }
    /* tensors and devices of two different runtimes do not mix */
    {
        dp_runtime_t *other = dp_test_runtime(1, 0);
        dp_device_t *od = dp_test_device(other, 0);
        dp_stream_t *os = NULL;
        DP_TEST_MUST(dp_stream_create(od, &os));
        CHECK_STATUS_MSG(dp_event_record(fx->e0, os), DP_INVALID_ARGUMENT, "device|runtime");
        CHECK_STATUS_MSG(dp_stream_wait_stream(fx->s0, os), DP_INVALID_ARGUMENT, "device|runtime");
        dp_stream_destroy(os);
        dp_runtime_destroy(other);
    }
}

int main(void) {
    dp_test_fixture fx;
    dp_runtime_t *marker;
    dp_test_watchdog(120);
    marker = dp_test_runtime(1, 0);
    dp_test_set_marker_runtime(marker);
    dp_test_fixture_setup(&fx);
    test_enums(&fx);
    test_runtime_options();
    test_runtime_index_and_specs(&fx);
    test_struct_sizes(&fx);
    test_host_memory(&fx);
    test_buffer_allocate(&fx);
    test_buffer_ranges(&fx);
    test_stream_ranges(&fx);
    test_tensor_create(&fx);
    test_tensor_sizes(&fx);
    test_cross_device(&fx);
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
    return DP_TEST_SUMMARY();
}
