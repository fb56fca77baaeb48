/* Good-input tests of buffers: allocate, size, device, retain/release, and the synchronous
 * write/read/copy/memset with offsets, within one device and across CPU:0 and CPU:1. Every
 * byte of every buffer is checked against a host-side model. */
#include "dp_test.h"

#define N 4096

/* Reads the whole buffer and compares it with `model`; reports the first differing byte. */
static void check_buffer(dp_buffer_t *b, const unsigned char *model, size_t n, const char *what) {
    unsigned char *got = (unsigned char *)malloc(n);
    size_t i;
    if (!got) return;
    memset(got, 0xEE, n);
    CHECK_OK(dp_buffer_read(b, 0, got, n));
    for (i = 0; i < n; ++i)
        if (got[i] != model[i]) break;
    CHECKF(i == n, "%s: byte %u is 0x%02x, expected 0x%02x", what, (unsigned)i,
           i < n ? got[i] : 0, i < n ? model[i] : 0);
    free(got);
}

static void test_allocate(dp_device_t *dev) {
    static const size_t sizes[] = {1, 3, 255, 256, 4097, 1u << 20};
    size_t i;
    SECTION("dp_buffer_allocate / size / device");
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        dp_buffer_t *b = SENTINEL(dp_buffer_t);
        CHECK_OK(dp_buffer_allocate(dev, sizes[i], &b));
        CHECK(b != NULL && b != SENTINEL(dp_buffer_t));
        if (b == NULL || b == SENTINEL(dp_buffer_t)) continue;
        CHECKF(dp_buffer_size(b) == sizes[i], "dp_buffer_size = %u, allocated %u",
               (unsigned)dp_buffer_size(b), (unsigned)sizes[i]);
        CHECK(dp_buffer_device(b) == dev);
        dp_buffer_release(b);
    }
}

static void test_write_read(dp_device_t *dev) {
    dp_buffer_t *b = NULL;
    unsigned char model[N], chunk[N], out[N];
    size_t i;
    SECTION("dp_buffer_write / dp_buffer_read with offsets");
    CHECK_OK(dp_buffer_allocate(dev, N, &b));
    if (!b) return;
    /* whole buffer */
    dp_test_fill(model, N, 1);
    CHECK_OK(dp_buffer_write(b, 0, model, N));
    check_buffer(b, model, N, "full write");
    /* a chunk at an odd offset */
    dp_test_fill(chunk, 1000, 2);
    CHECK_OK(dp_buffer_write(b, 77, chunk, 1000));
    memcpy(model + 77, chunk, 1000);
    check_buffer(b, model, N, "write at offset 77");
    /* the last byte */
    chunk[0] = 0x5a;
    CHECK_OK(dp_buffer_write(b, N - 1, chunk, 1));
    model[N - 1] = 0x5a;
    check_buffer(b, model, N, "write of the last byte");
    /* zero-sized write at the end, with and without a pointer */
    CHECK_OK(dp_buffer_write(b, N, chunk, 0));
    CHECK_OK(dp_buffer_write(b, 10, NULL, 0));
    check_buffer(b, model, N, "zero-sized writes");
    /* partial reads at offsets into out[3..]: every byte checked, nothing else written */
    for (i = 0; i < 4; ++i) {
        static const size_t offs[] = {0, 1, 2049, N - 5};
        static const size_t lens[] = {N - 3, 100, 2047, 5};
        size_t j, bad = 0;
        memset(out, 0xC3, sizeof out);
        CHECK_OK(dp_buffer_read(b, offs[i], out + 3, lens[i]));
        CHECKF(memcmp(out + 3, model + offs[i], lens[i]) == 0, "read of %u bytes at %u differs",
               (unsigned)lens[i], (unsigned)offs[i]);
        for (j = 0; j < N; ++j)
            if ((j < 3 || j >= 3 + lens[i]) && out[j] != 0xC3) ++bad;
        CHECKF(bad == 0, "read of %u bytes at %u wrote %u bytes outside its range",
               (unsigned)lens[i], (unsigned)offs[i], (unsigned)bad);
    }
    CHECK_OK(dp_buffer_read(b, N, out, 0));
    CHECK_OK(dp_buffer_read(b, 0, NULL, 0));
    dp_buffer_release(b);
}

static void test_memset(dp_device_t *dev) {
    dp_buffer_t *b = NULL;
    unsigned char model[N];
    SECTION("dp_buffer_memset with offsets");
    CHECK_OK(dp_buffer_allocate(dev, N, &b));
    if (!b) return;
    CHECK_OK(dp_buffer_memset(b, 0, 0x00, N));
    memset(model, 0, N);
    check_buffer(b, model, N, "memset 0 everywhere");
    CHECK_OK(dp_buffer_memset(b, 5, 0xAB, 300));
    memset(model + 5, 0xAB, 300);
    check_buffer(b, model, N, "memset 0xAB at 5..305");
    CHECK_OK(dp_buffer_memset(b, N - 1, 0xFF, 1));
    model[N - 1] = 0xFF;
    check_buffer(b, model, N, "memset of the last byte");
    CHECK_OK(dp_buffer_memset(b, N, 0x11, 0));
    CHECK_OK(dp_buffer_memset(b, 100, 0x11, 0));
    check_buffer(b, model, N, "zero-sized memsets");
    dp_buffer_release(b);
}

static void test_copy(dp_device_t *d0, dp_device_t *d1) {
    dp_buffer_t *a = NULL, *b = NULL, *c = NULL;
    unsigned char ma[N], mb[N], mc[N];
    SECTION("dp_buffer_copy within a buffer, within a device, across devices");
    CHECK_OK(dp_buffer_allocate(d0, N, &a));
    CHECK_OK(dp_buffer_allocate(d0, N, &b));
    CHECK_OK(dp_buffer_allocate(d1, N, &c));
    if (!a || !b || !c) return;
    dp_test_fill(ma, N, 11);
    dp_test_fill(mb, N, 12);
    dp_test_fill(mc, N, 13);
    CHECK_OK(dp_buffer_write(a, 0, ma, N));
    CHECK_OK(dp_buffer_write(b, 0, mb, N));
    CHECK_OK(dp_buffer_write(c, 0, mc, N));

    /* within one buffer, non-overlapping ranges */
    CHECK_OK(dp_buffer_copy(a, 3000, a, 10, 1000));
    memmove(ma + 3000, ma + 10, 1000);
    check_buffer(a, ma, N, "copy inside one buffer");
    /* two buffers of one device */
    CHECK_OK(dp_buffer_copy(b, 1, a, 2, 4000));
    memcpy(mb + 1, ma + 2, 4000);
    check_buffer(b, mb, N, "copy CPU:0 -> CPU:0");
    check_buffer(a, ma, N, "source unchanged");
    /* CPU:0 -> CPU:1 */
    CHECK_OK(dp_buffer_copy(c, 100, a, 0, 2000));
    memcpy(mc + 100, ma, 2000);
    check_buffer(c, mc, N, "copy CPU:0 -> CPU:1");
    /* CPU:1 -> CPU:0, the whole buffer */
    CHECK_OK(dp_buffer_copy(b, 0, c, 0, N));
    memcpy(mb, mc, N);
    check_buffer(b, mb, N, "copy CPU:1 -> CPU:0");
    /* the last byte, and zero-sized copies at the ends */
    CHECK_OK(dp_buffer_copy(c, N - 1, a, N - 1, 1));
    mc[N - 1] = ma[N - 1];
    CHECK_OK(dp_buffer_copy(c, N, a, N, 0));
    CHECK_OK(dp_buffer_copy(c, 0, a, N, 0));
    check_buffer(c, mc, N, "copy of the last byte");
    check_buffer(a, ma, N, "a unchanged");
    dp_buffer_release(a);
    dp_buffer_release(b);
    dp_buffer_release(c);
}

static void test_retain_release(dp_device_t *dev) {
    dp_buffer_t *b = NULL;
    unsigned char v[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
    SECTION("dp_buffer_retain / dp_buffer_release");
    CHECK_OK(dp_buffer_allocate(dev, 4, &b));
    if (!b) return;
    CHECK_OK(dp_buffer_write(b, 0, v, 4));
    dp_buffer_retain(b);
    dp_buffer_retain(b);
    dp_buffer_release(b);
    dp_buffer_release(b);
    /* one reference left: still alive, contents intact */
    CHECK(dp_buffer_size(b) == 4);
    CHECK_OK(dp_buffer_read(b, 0, out, 4));
    CHECK(memcmp(v, out, 4) == 0);
    dp_buffer_release(b);
    /* gone (the handle is quarantined, so asking is defined) */
    CHECK(dp_buffer_size(b) == 0);
    CHECK(dp_buffer_device(b) == NULL);
    dp_buffer_release(NULL);
    dp_buffer_retain(NULL);
}

static void test_default_stream_ordering(dp_device_t *dev) {
    dp_buffer_t *b = NULL;
    dp_stream_t *ds = NULL;
    unsigned char in[512], out[512];
    SECTION("synchronous copies are ordered after the default stream's work");
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    CHECK_OK(dp_device_default_stream(dev, &ds));
    if (!b || !ds) return;
    dp_test_fill(in, sizeof in, 21);
    CHECK_OK(dp_stream_memset(ds, b, 0, 0x77, sizeof in));
    CHECK_OK(dp_stream_write(ds, b, 0, in, 256));
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_read(b, 0, out, sizeof out));
    CHECK(memcmp(out, in, 256) == 0);
    {
        size_t i;
        for (i = 256; i < sizeof out; ++i)
            if (out[i] != 0x77) break;
        CHECK(i == sizeof out);
    }
    dp_buffer_release(b);
}

int main(void) {
    dp_runtime_t *rt;
    dp_device_t *d0, *d1;
    dp_test_watchdog(120);
    rt = dp_test_runtime(2, 0);
    d0 = dp_test_device(rt, 0);
    d1 = dp_test_device(rt, 1);
    test_allocate(d0);
    test_allocate(d1);
    test_write_read(d0);
    test_write_read(d1);
    test_memset(d0);
    test_copy(d0, d1);
    test_retain_release(d0);
    test_default_stream_ordering(d1);
    {
        dp_memory_stats_t s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        CHECK_OK(dp_device_memory_stats(d0, &s));
        CHECKF(s.active_allocs == 0, "%llu buffers still allocated on CPU:0",
               (unsigned long long)s.active_allocs);
        CHECK_OK(dp_device_memory_stats(d1, &s));
        CHECKF(s.active_allocs == 0, "%llu buffers still allocated on CPU:1",
               (unsigned long long)s.active_allocs);
    }
    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
