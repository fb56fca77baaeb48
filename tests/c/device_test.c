/* Good-input tests of devices: memory statistics, memory limits, cached memory, pinned host
 * memory, synchronize. */
#include "dp_test.h"

static dp_memory_stats_t stats_of(dp_device_t *dev) {
    dp_memory_stats_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_OK(dp_device_memory_stats(dev, &s));
    return s;
}

static void print_stats(const char *label, const dp_memory_stats_t *s) {
    printf("   %s: in_use %llu peak %llu allocs %llu active %llu largest %llu limit %llu reserved "
           "%llu largest_free %llu\n",
           label, (unsigned long long)s->bytes_in_use, (unsigned long long)s->peak_bytes_in_use,
           (unsigned long long)s->num_allocs, (unsigned long long)s->active_allocs,
           (unsigned long long)s->largest_alloc_size, (unsigned long long)s->bytes_limit,
           (unsigned long long)s->bytes_reserved, (unsigned long long)s->largest_free_block);
}

static void test_memory_stats(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_device_t *dev = dp_test_device(rt, 0), *other = dp_test_device(rt, 1);
    dp_memory_stats_t s0, s1, s2, s3, o0, o1;
    dp_buffer_t *a = NULL, *b = NULL;
    const size_t na = 1000, nb = 64 * 1024;
    SECTION("memory stats follow allocations");
    s0 = stats_of(dev);
    o0 = stats_of(other);
    print_stats("start", &s0);
    CHECK(s0.bytes_limit == 0);
    CHECK(s0.struct_size == sizeof s0);
    CHECK(s0.peak_bytes_in_use >= s0.bytes_in_use);
    CHECK(s0.bytes_reserved >= s0.bytes_in_use);

    CHECK_OK(dp_buffer_allocate(dev, na, &a));
    s1 = stats_of(dev);
    print_stats("+1000 B", &s1);
    CHECK(s1.bytes_in_use >= s0.bytes_in_use + na);
    CHECK(s1.active_allocs == s0.active_allocs + 1);
    CHECK(s1.num_allocs == s0.num_allocs + 1);
    CHECK(s1.peak_bytes_in_use >= s1.bytes_in_use);
    CHECK(s1.largest_alloc_size >= na);
    CHECK(s1.bytes_reserved >= s1.bytes_in_use);

    CHECK_OK(dp_buffer_allocate(dev, nb, &b));
    s2 = stats_of(dev);
    print_stats("+64 KiB", &s2);
    CHECK(s2.bytes_in_use >= s1.bytes_in_use + nb);
    CHECK(s2.active_allocs == s0.active_allocs + 2);
    CHECK(s2.num_allocs == s0.num_allocs + 2);
    CHECK(s2.peak_bytes_in_use >= s2.bytes_in_use);
    CHECK(s2.largest_alloc_size >= nb);

    /* the other device is not affected */
    o1 = stats_of(other);
    CHECK(o1.bytes_in_use == o0.bytes_in_use);
    CHECK(o1.num_allocs == o0.num_allocs);
    CHECK(o1.active_allocs == o0.active_allocs);

    dp_buffer_release(b);
    s3 = stats_of(dev);
    print_stats("-64 KiB", &s3);
    CHECK(s3.bytes_in_use == s1.bytes_in_use);
    CHECK(s3.active_allocs == s0.active_allocs + 1);
    CHECK(s3.num_allocs == s0.num_allocs + 2); /* allocations ever made */
    CHECK(s3.peak_bytes_in_use == s2.peak_bytes_in_use);
    CHECK(s3.largest_alloc_size == s2.largest_alloc_size);

    dp_buffer_release(a);
    s3 = stats_of(dev);
    CHECK(s3.bytes_in_use == s0.bytes_in_use);
    CHECK(s3.active_allocs == s0.active_allocs);
    CHECK(s3.peak_bytes_in_use >= s0.bytes_in_use + na + nb);

    SECTION("dp_device_release_cached_memory");
    CHECK_OK(dp_device_release_cached_memory(dev));
    s3 = stats_of(dev);
    print_stats("after release_cached_memory", &s3);
    CHECK(s3.bytes_in_use == s0.bytes_in_use);
    CHECK(s3.bytes_reserved == s3.bytes_in_use); /* nothing cached any more */
    CHECK_OK(dp_device_release_cached_memory(dev)); /* twice is fine */
    /* the allocator still works afterwards */
    CHECK_OK(dp_buffer_allocate(dev, nb, &b));
    {
        unsigned char in[256], out[256];
        dp_test_fill(in, sizeof in, 7);
        memset(out, 0, sizeof out);
        CHECK_OK(dp_buffer_write(b, nb - sizeof in, in, sizeof in));
        CHECK_OK(dp_buffer_read(b, nb - sizeof in, out, sizeof out));
        CHECK(memcmp(in, out, sizeof in) == 0);
    }
    dp_buffer_release(b);

    SECTION("memory stats with a larger (newer caller's) struct_size");
    {
        struct {
            dp_memory_stats_t s;
            unsigned char newer_fields[32];
        } big;
        dp_status_t st;
        memset(&big, 0xA5, sizeof big);
        big.s.struct_size = sizeof big;
        CHECK_OK(st = dp_device_memory_stats(dev, &big.s));
        if (st == DP_OK) {
            CHECK(big.s.bytes_in_use == s0.bytes_in_use);
            CHECK(big.s.bytes_limit == 0);
            CHECKF(dp_test_bytes_are(big.newer_fields, 0, sizeof big.newer_fields, 0xA5),
                   "bytes past the library's struct were written");
        }
    }
    SECTION("memory stats with a smaller (older) struct_size");
    {
        dp_memory_stats_t p;
        dp_status_t st;
        memset(&p, 0xA5, sizeof p);
        p.struct_size = offsetof(dp_memory_stats_t, num_allocs); /* bytes_in_use and peak fit */
        CHECK_OK(st = dp_device_memory_stats(dev, &p));
        if (st == DP_OK) {
            CHECK(p.bytes_in_use == s0.bytes_in_use);
            CHECKF(dp_test_bytes_are(&p, offsetof(dp_memory_stats_t, num_allocs), sizeof p, 0xA5),
                   "bytes past struct_size were written");
        }
    }
    dp_runtime_destroy(rt);
}

static void test_memory_limit(void) {
    const uint64_t limit = 1u << 20; /* 1 MiB per device */
    dp_runtime_t *rt = dp_test_runtime(2, limit);
    dp_device_t *dev = dp_test_device(rt, 0), *dev1 = dp_test_device(rt, 1);
    dp_buffer_t *half = NULL, *big = SENTINEL(dp_buffer_t), *b = NULL, *b1 = NULL;
    dp_memory_stats_t s;
    dp_device_properties_t p;
    SECTION("memory limit");
    s = stats_of(dev);
    CHECK(s.bytes_limit == limit);
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(dp_device_get_properties(dev, &p));
    CHECK(p.total_memory == limit);

    /* one allocation larger than the limit */
    CHECK_STATUS(dp_buffer_allocate(dev, (size_t)(2 * limit), &big), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, big);
    s = stats_of(dev);
    CHECK(s.active_allocs == 0);
    CHECK(s.bytes_in_use == 0);

    /* the usage is capped by the limit */
    {
        uint64_t free_b = 0, total = 0;
        CHECK_OK(dp_device_memory_usage(dev, &free_b, &total));
        CHECK(total == limit);
        CHECK(free_b <= limit);
    }

    /* below the limit works */
    CHECK_OK(dp_buffer_allocate(dev, (size_t)(limit / 2), &half));
    {
        uint64_t free_b = 0, total = 0;
        CHECK_OK(dp_device_memory_usage(dev, &free_b, &total));
        CHECK(total == limit);
        CHECKF(free_b <= limit - limit / 2, "free %llu with half of the limit in use", (unsigned long long)free_b);
    }
    /* the sum would pass the limit */
    big = SENTINEL(dp_buffer_t);
    CHECK_STATUS(dp_buffer_allocate(dev, (size_t)(limit * 3 / 4), &big), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, big);
    /* the limit is per device: CPU:1 has its own MiB */
    CHECK_OK(dp_buffer_allocate(dev1, (size_t)(limit * 3 / 4), &b1));
    dp_buffer_release(b1);
    /* a small allocation still fits next to `half` */
    CHECK_OK(dp_buffer_allocate(dev, 4096, &b));
    dp_buffer_release(b);
    dp_buffer_release(half);
    /* after releasing, the larger one fits */
    b = NULL;
    CHECK_OK(dp_buffer_allocate(dev, (size_t)(limit * 3 / 4), &b));
    if (b) {
        unsigned char v = 0;
        CHECK(dp_buffer_size(b) == (size_t)(limit * 3 / 4));
        CHECK_OK(dp_buffer_memset(b, 0, 0x3c, dp_buffer_size(b)));
        CHECK_OK(dp_buffer_read(b, dp_buffer_size(b) - 1, &v, 1));
        CHECK(v == 0x3c);
    }
    dp_buffer_release(b);
    s = stats_of(dev);
    CHECK(s.bytes_in_use == 0);
    CHECK(s.active_allocs == 0);
    CHECK(s.peak_bytes_in_use <= limit);
    CHECK(s.bytes_reserved <= limit);
    CHECK_OK(dp_device_release_cached_memory(dev));
    /* exactly the limit (if the allocator's rounding allows it) or one byte over: over fails */
    big = SENTINEL(dp_buffer_t);
    CHECK_STATUS(dp_buffer_allocate(dev, (size_t)limit + 1, &big), DP_RESOURCE_EXHAUSTED);
    CHECK_UNTOUCHED(dp_buffer_t, big);
    dp_runtime_destroy(rt);
}

/* A failed allocation's status and message (copied before any other call). */
static dp_status_t allocate_failing(dp_device_t *dev, size_t size, char *msg, size_t cap) {
    dp_buffer_t *b = SENTINEL(dp_buffer_t);
    dp_status_t st = dp_buffer_allocate(dev, size, &b);
    snprintf(msg, cap, "%s", dp_last_error_message());
    CHECK_UNTOUCHED(dp_buffer_t, b);
    if (st == DP_OK) dp_buffer_release(b);
    return st;
}

static void test_set_memory_limit(void) {
    const uint64_t mib = 1u << 20;
    dp_runtime_t *rt = dp_test_runtime(2, mib); /* cpu_memory_limit: the initial value */
    dp_device_t *dev = dp_test_device(rt, 0), *dev1 = dp_test_device(rt, 1);
    dp_buffer_t *a = NULL, *b = NULL, *c = NULL;
    dp_device_properties_t p;
    uint64_t limit = 7, free_b = 0, total = 0;
    char msg[512];
    SECTION("the memory limit set at any time");
    CHECK_OK(dp_device_memory_limit(dev, &limit));
    CHECK(limit == mib);

    /* raised: everything that reports it follows */
    CHECK_OK(dp_device_set_memory_limit(dev, 4 * mib));
    CHECK_OK(dp_device_memory_limit(dev, &limit));
    CHECK(limit == 4 * mib);
    CHECK(stats_of(dev).bytes_limit == 4 * mib);
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(dp_device_get_properties(dev, &p));
    CHECK(p.total_memory == 4 * mib);
    CHECK_OK(dp_device_memory_usage(dev, &free_b, &total));
    CHECK(total == 4 * mib);
    CHECK(free_b <= 4 * mib);
    /* per device: CPU:1 keeps its own */
    CHECK_OK(dp_device_memory_limit(dev1, &limit));
    CHECK(limit == mib);

    CHECK_OK(dp_buffer_allocate(dev, (size_t)(mib / 2), &a));
    CHECK_OK(dp_buffer_allocate(dev, (size_t)(2 * mib), &b)); /* past the old limit */

    /* lowered below what is in use: allowed, nothing in use is touched, allocations fail */
    CHECK_OK(dp_device_set_memory_limit(dev, mib));
    CHECK(stats_of(dev).bytes_in_use >= mib / 2 + 2 * mib);
    CHECK(allocate_failing(dev, (size_t)(mib / 4), msg, sizeof msg) == DP_RESOURCE_EXHAUSTED);
    CHECKF(strstr(msg, "CPU:0") != NULL && strstr(msg, "limit 1048576") != NULL,
           "the message names the device and the limit: \"%s\"", msg);
    CHECK_OK(dp_device_memory_usage(dev, &free_b, &total));
    CHECK(total == mib);
    CHECK(free_b == 0);
    CHECK_OK(dp_buffer_memset(b, 0, 0x5a, dp_buffer_size(b)));
    {
        unsigned char v = 0;
        CHECK_OK(dp_buffer_read(b, dp_buffer_size(b) - 1, &v, 1));
        CHECK(v == 0x5a);
    }
    /* freed: it fits again, and what is held comes down to the limit */
    dp_buffer_release(b);
    CHECK_OK(dp_buffer_allocate(dev, (size_t)(mib / 4), &c));
    CHECK(stats_of(dev).bytes_reserved <= mib);
    dp_buffer_release(c);

    /* 0 removes the limit */
    CHECK_OK(dp_device_set_memory_limit(dev, 0));
    CHECK_OK(dp_device_memory_limit(dev, &limit));
    CHECK(limit == 0);
    CHECK(stats_of(dev).bytes_limit == 0);
    b = NULL;
    CHECK_OK(dp_buffer_allocate(dev, (size_t)(8 * mib), &b));
    dp_buffer_release(b);
    dp_buffer_release(a);
    dp_runtime_destroy(rt);
}

static void test_memory_usage(void) {
    dp_runtime_t *rt = dp_test_runtime(1, 0);
    dp_device_t *dev = dp_test_device(rt, 0);
    dp_device_properties_t p;
    uint64_t free_b = 0, total = 0;
    SECTION("dp_device_memory_usage: the host's available and total memory on the CPU");
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(dp_device_get_properties(dev, &p));
    CHECK_OK(dp_device_memory_usage(dev, &free_b, &total));
    printf("   free %llu of %llu\n", (unsigned long long)free_b, (unsigned long long)total);
    CHECK(total == p.total_memory);
    CHECK(free_b > 0 && free_b <= total);
    dp_runtime_destroy(rt);
}

static void test_host_memory(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_device_t *dev = dp_test_device(rt, 0), *dev1 = dp_test_device(rt, 1);
    static const size_t sizes[] = {1, 7, 64, 4096, 1u << 20};
    void *ptrs[5];
    size_t i;
    SECTION("dp_device_host_allocate / dp_device_host_free");
    for (i = 0; i < 5; ++i) {
        ptrs[i] = SENTINEL(void);
        CHECK_OK(dp_device_host_allocate(i % 2 ? dev1 : dev, sizes[i], &ptrs[i]));
        CHECK(ptrs[i] != NULL && ptrs[i] != SENTINEL(void));
        if (ptrs[i] == NULL || ptrs[i] == SENTINEL(void)) return;
        dp_test_fill(ptrs[i], sizes[i], (unsigned)i);
    }
    /* distinct, non-overlapping blocks: every byte still holds its own pattern */
    for (i = 0; i < 5; ++i) CHECK(dp_test_pattern_mismatch(ptrs[i], sizes[i], (unsigned)i) == sizes[i]);
    /* host memory can be the source and target of device copies */
    {
        dp_buffer_t *b = NULL;
        CHECK_OK(dp_buffer_allocate(dev, 4096, &b));
        CHECK_OK(dp_buffer_write(b, 0, ptrs[3], 4096));
        memset(ptrs[3], 0, 4096);
        CHECK_OK(dp_buffer_read(b, 0, ptrs[3], 4096));
        CHECK(dp_test_pattern_mismatch(ptrs[3], 4096, 3) == 4096);
        dp_buffer_release(b);
    }
    for (i = 0; i < 5; ++i) CHECK_OK(dp_device_host_free(i % 2 ? dev1 : dev, ptrs[i]));
    dp_runtime_destroy(rt);
}

struct slow_flag {
    volatile int done;
};

static void slow_cb(void *user_data) {
    struct slow_flag *f = (struct slow_flag *)user_data;
    dp_test_sleep_ms(100);
    f->done = 1;
}

static void test_synchronize(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_device_t *dev = dp_test_device(rt, 0), *dev1 = dp_test_device(rt, 1);
    dp_stream_t *s = NULL, *s1 = NULL;
    struct slow_flag f0, f1;
    SECTION("dp_device_synchronize / dp_runtime_synchronize wait for the devices' streams");
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_stream_create(dev1, &s1));
    if (!s || !s1) return;
    f0.done = 0;
    CHECK_OK(dp_stream_host_callback(s, slow_cb, &f0));
    CHECK_OK(dp_device_synchronize(dev));
    CHECK(f0.done == 1);
    f0.done = 0;
    f1.done = 0;
    CHECK_OK(dp_stream_host_callback(s, slow_cb, &f0));
    CHECK_OK(dp_stream_host_callback(s1, slow_cb, &f1));
    CHECK_OK(dp_runtime_synchronize(rt));
    CHECK(f0.done == 1);
    CHECK(f1.done == 1);
    CHECK_OK(dp_device_synchronize(dev1)); /* nothing pending: returns at once */
    dp_stream_destroy(s);
    dp_stream_destroy(s1);
    dp_runtime_destroy(rt);
}

int main(void) {
    dp_test_watchdog(120);
    test_memory_stats();
    test_memory_limit();
    test_set_memory_limit();
    test_memory_usage();
    test_host_memory();
    test_synchronize();
    return DP_TEST_SUMMARY();
}
