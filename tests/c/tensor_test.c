/* Good-input tests of tensors: every dtype, with data and zero-filled, scalars, zero-sized and
 * rank-8 shapes, read, copy_to another device, the backing buffer, retain/release. */
#include "dp_test.h"

static const dp_dtype_t all_dtypes[] = {DP_DTYPE_F32, DP_DTYPE_F64, DP_DTYPE_I32,
                                        DP_DTYPE_I64, DP_DTYPE_U8,  DP_DTYPE_BOOL};
#define NDTYPES 6

/* Fills `n` elements of `dtype` with distinct, dtype-typical values. */
static void fill_values(dp_dtype_t dtype, void *p, size_t n, int seed) {
    size_t i;
    for (i = 0; i < n; ++i) {
        long v = (long)i + seed;
        switch (dtype) {
        case DP_DTYPE_F32: ((float *)p)[i] = (float)v * 1.5f - 3.25f; break;
        case DP_DTYPE_F64: ((double *)p)[i] = (double)v * -2.125 + 1e-300; break;
        case DP_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(v * -7919 + 3); break;
        case DP_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v * ((int64_t)1 << 40) - 5; break;
        case DP_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)(v * 37 + 1); break;
        case DP_DTYPE_BOOL: ((uint8_t *)p)[i] = (uint8_t)(v % 3 == 0); break;
        default: break;
        }
    }
}

static int shape_is(const dp_tensor_t *t, const int64_t *expect, size_t rank) {
    int64_t got[DP_MAX_RANK + 2];
    size_t i;
    for (i = 0; i < DP_MAX_RANK + 2; ++i) got[i] = -777;
    if (dp_tensor_rank(t) != rank) return 0;
    if (dp_tensor_shape(t, got, DP_MAX_RANK + 2) != DP_OK) return 0;
    for (i = 0; i < rank; ++i)
        if (got[i] != expect[i]) return 0;
    for (i = rank; i < DP_MAX_RANK + 2; ++i)
        if (got[i] != -777) return 0; /* nothing written past the rank */
    return 1;
}

/* The tensor's metadata and contents match. `data` NULL means zeros. */
static void check_tensor(const dp_tensor_t *t, dp_device_t *dev, dp_dtype_t dtype,
                         const int64_t *shape, size_t rank, const void *data, const char *what) {
    int64_t n = 1;
    size_t i, bytes;
    unsigned char *got;
    for (i = 0; i < rank; ++i) n *= shape[i];
    bytes = (size_t)n * dp_dtype_size(dtype);
    CHECKF(dp_tensor_dtype(t) == dtype, "%s: dtype %d, expected %d", what, (int)dp_tensor_dtype(t),
           (int)dtype);
    CHECKF(dp_tensor_rank(t) == rank, "%s: rank %u, expected %u", what,
           (unsigned)dp_tensor_rank(t), (unsigned)rank);
    CHECKF(shape_is(t, shape, rank), "%s: shape differs", what);
    CHECKF(dp_tensor_num_elements(t) == n, "%s: num_elements %lld, expected %lld", what,
           (long long)dp_tensor_num_elements(t), (long long)n);
    CHECKF(dp_tensor_byte_size(t) == bytes, "%s: byte_size %u, expected %u", what,
           (unsigned)dp_tensor_byte_size(t), (unsigned)bytes);
    CHECKF(dp_tensor_device(t) == dev, "%s: on the wrong device", what);
    got = (unsigned char *)malloc(bytes + 1);
    if (!got) return;
    memset(got, 0xEE, bytes + 1);
    CHECK_OK(dp_tensor_read(t, bytes ? got : NULL, bytes));
    if (data) {
        CHECKF(memcmp(got, data, bytes) == 0, "%s: contents differ", what);
    } else {
        for (i = 0; i < bytes; ++i)
            if (got[i] != 0) break;
        CHECKF(i == bytes, "%s: byte %u is not zero", what, (unsigned)i);
    }
    CHECK(got[bytes] == 0xEE);
    free(got);
}

static void test_every_dtype(dp_device_t *d0, dp_device_t *d1) {
    static const int64_t shape[2] = {2, 3};
    size_t k;
    SECTION("every dtype: create with data / zeros, read, copy_to, buffer");
    for (k = 0; k < NDTYPES; ++k) {
        dp_dtype_t dt = all_dtypes[k];
        size_t es = dp_dtype_size(dt), bytes = 6 * es;
        double data[6], back[6]; /* 48 bytes, aligned for every dtype */
        dp_tensor_t *t = SENTINEL(dp_tensor_t), *z = NULL, *c = SENTINEL(dp_tensor_t);
        dp_buffer_t *b = SENTINEL(dp_buffer_t);
        char what[64];
        snprintf(what, sizeof what, "%s [2,3]", dp_dtype_name(dt) ? dp_dtype_name(dt) : "?");
        fill_values(dt, data, 6, (int)k);
        CHECK_OK(dp_tensor_create(d0, dt, shape, 2, data, bytes, &t));
        CHECK(t != NULL && t != SENTINEL(dp_tensor_t));
        if (t == NULL || t == SENTINEL(dp_tensor_t)) continue;
        check_tensor(t, d0, dt, shape, 2, data, what);

        CHECK_OK(dp_tensor_create(d0, dt, shape, 2, NULL, 0, &z));
        if (z) check_tensor(z, d0, dt, shape, 2, NULL, "zeros");
        dp_tensor_release(z);

        CHECK_OK(dp_tensor_copy_to(t, d1, &c));
        CHECK(c != NULL && c != SENTINEL(dp_tensor_t) && c != t);
        if (c && c != SENTINEL(dp_tensor_t)) {
            check_tensor(c, d1, dt, shape, 2, data, "copy on CPU:1");
            dp_tensor_release(c);
        }

        CHECK_OK(dp_tensor_buffer(t, &b));
        CHECK(b != NULL && b != SENTINEL(dp_buffer_t));
        if (b && b != SENTINEL(dp_buffer_t)) {
            CHECK(dp_buffer_size(b) == bytes);
            CHECK(dp_buffer_device(b) == d0);
            memset(back, 0, sizeof back);
            CHECK_OK(dp_buffer_read(b, 0, back, bytes));
            CHECK(memcmp(back, data, bytes) == 0);
            dp_buffer_release(b);
        }
        check_tensor(t, d0, dt, shape, 2, data, "after the buffer was released");
        dp_tensor_release(t);
    }
}

static void test_scalars(dp_device_t *d0, dp_device_t *d1) {
    size_t k;
    SECTION("0-d scalars");
    for (k = 0; k < NDTYPES; ++k) {
        dp_dtype_t dt = all_dtypes[k];
        double v[1]; /* aligned for every dtype */
        int64_t unused_shape[1] = {42};
        int64_t out[2] = {-5, -5};
        dp_tensor_t *t = NULL, *t2 = NULL, *c = NULL;
        fill_values(dt, v, 1, 11);
        CHECK_OK(dp_tensor_create(d0, dt, NULL, 0, v, dp_dtype_size(dt), &t));
        if (!t) continue;
        check_tensor(t, d0, dt, NULL, 0, v, "scalar");
        CHECK(dp_tensor_num_elements(t) == 1);
        CHECK(dp_tensor_byte_size(t) == dp_dtype_size(dt));
        CHECK_OK(dp_tensor_shape(t, NULL, 0));
        CHECK_OK(dp_tensor_shape(t, out, 2));
        CHECK(out[0] == -5 && out[1] == -5);
        /* a shape pointer with rank 0 is ignored */
        CHECK_OK(dp_tensor_create(d0, dt, unused_shape, 0, NULL, 0, &t2));
        if (t2) check_tensor(t2, d0, dt, NULL, 0, NULL, "zero scalar");
        CHECK_OK(dp_tensor_copy_to(t, d1, &c));
        if (c) check_tensor(c, d1, dt, NULL, 0, v, "scalar copy");
        dp_tensor_release(t);
        dp_tensor_release(t2);
        dp_tensor_release(c);
    }
}

static void test_zero_sized(dp_device_t *d0, dp_device_t *d1) {
    static const int64_t shape[3] = {3, 0, 2};
    static const int64_t shape1[1] = {0};
    dp_tensor_t *t = NULL, *t2 = NULL, *c = NULL;
    unsigned char dummy[4] = {1, 2, 3, 4};
    SECTION("zero-sized dimensions");
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_F32, shape, 3, NULL, 0, &t));
    if (!t) return;
    check_tensor(t, d0, DP_DTYPE_F32, shape, 3, NULL, "[3,0,2]");
    CHECK(dp_tensor_num_elements(t) == 0);
    CHECK(dp_tensor_byte_size(t) == 0);
    CHECK_OK(dp_tensor_read(t, NULL, 0));
    CHECK_OK(dp_tensor_read(t, dummy, 0));
    CHECK(dummy[0] == 1 && dummy[3] == 4);
    CHECK_OK(dp_tensor_create(d1, DP_DTYPE_I64, shape1, 1, dummy, 0, &t2)); /* data, size 0 */
    if (t2) check_tensor(t2, d1, DP_DTYPE_I64, shape1, 1, NULL, "[0]");
    CHECK_OK(dp_tensor_copy_to(t, d1, &c));
    if (c) check_tensor(c, d1, DP_DTYPE_F32, shape, 3, NULL, "[3,0,2] copy");
    dp_tensor_release(t);
    dp_tensor_release(t2);
    dp_tensor_release(c);
}

static void test_max_rank_and_large(dp_device_t *d0, dp_device_t *d1) {
    static const int64_t shape8[DP_MAX_RANK] = {1, 2, 1, 2, 1, 2, 1, 3};
    static const int64_t big[2] = {256, 1024};
    int32_t data8[24];
    float *bigdata;
    dp_tensor_t *t = NULL, *c = NULL;
    SECTION("rank DP_MAX_RANK, and a 1 MiB tensor");
    CHECK(DP_MAX_RANK == 8);
    fill_values(DP_DTYPE_I32, data8, 24, 5);
    CHECK_OK(dp_tensor_create(d1, DP_DTYPE_I32, shape8, DP_MAX_RANK, data8, sizeof data8, &t));
    if (t) check_tensor(t, d1, DP_DTYPE_I32, shape8, DP_MAX_RANK, data8, "rank 8");
    dp_tensor_release(t);
    t = NULL;
    bigdata = (float *)malloc(256 * 1024 * sizeof(float));
    if (!bigdata) return;
    fill_values(DP_DTYPE_F32, bigdata, 256 * 1024, 1);
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_F32, big, 2, bigdata, 256 * 1024 * sizeof(float), &t));
    if (t) {
        check_tensor(t, d0, DP_DTYPE_F32, big, 2, bigdata, "[256,1024]");
        CHECK_OK(dp_tensor_copy_to(t, d1, &c));
        if (c) check_tensor(c, d1, DP_DTYPE_F32, big, 2, bigdata, "[256,1024] on CPU:1");
    }
    dp_tensor_release(t);
    dp_tensor_release(c);
    free(bigdata);
}

static void test_buffer_is_storage(dp_device_t *d0) {
    static const int64_t shape[1] = {4};
    int32_t v[4] = {1, 2, 3, 4}, w[4] = {0, 0, 0, 0}, patch = 99;
    dp_tensor_t *t = NULL, *c = NULL;
    dp_buffer_t *b = NULL;
    SECTION("dp_tensor_buffer is the tensor's storage; copies are independent");
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_I32, shape, 1, v, sizeof v, &t));
    if (!t) return;
    CHECK_OK(dp_tensor_copy_to(t, d0, &c)); /* same device: still a separate tensor */
    CHECK(c != NULL && c != t);
    CHECK_OK(dp_tensor_buffer(t, &b));
    if (!b || !c) return;
    CHECK_OK(dp_buffer_write(b, 2 * sizeof(int32_t), &patch, sizeof patch));
    CHECK_OK(dp_tensor_read(t, w, sizeof w));
    CHECK(w[0] == 1 && w[1] == 2 && w[2] == 99 && w[3] == 4);
    CHECK_OK(dp_tensor_read(c, w, sizeof w));
    CHECK(w[0] == 1 && w[1] == 2 && w[2] == 3 && w[3] == 4);
    /* the (retained) buffer outlives the tensor */
    dp_tensor_release(t);
    memset(w, 0, sizeof w);
    CHECK(dp_buffer_size(b) == sizeof w);
    CHECK_OK(dp_buffer_read(b, 0, w, sizeof w));
    CHECK(w[0] == 1 && w[1] == 2 && w[2] == 99 && w[3] == 4);
    dp_buffer_release(b);
    dp_tensor_release(c);
}

/* dp_tensor_data: the elements of a CPU tensor in place (reads and writes without a copy; an
 * op's output is done when dp_op_run returns); refused for SIM's memory, which the host cannot
 * touch. dp_tensor_from_buffer: a tensor over a buffer's memory, sharing it; a buffer too small
 * is refused. Bad arguments write nothing. */
static void test_data_in_place(dp_runtime_t *rt, dp_device_t *d0) {
    static const int64_t shape[2] = {2, 2}, big[1] = {5};
    dp_tensor_t *x = NULL, *y = NULL, *s = NULL, *v = NULL;
    dp_tensor_t *outs[1] = {NULL};
    dp_buffer_t *b = NULL;
    dp_device_t *sim = NULL;
    dp_op_t *add = NULL;
    float *px = NULL, *py = NULL;
    void *p = SENTINEL(void);
    float w[4] = {0, 0, 0, 0};
    size_t n_out = 0;
    SECTION("dp_tensor_data and dp_tensor_from_buffer");
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_F32, shape, 2, NULL, 0, &x));
    if (!x) return;
    CHECK_OK(dp_tensor_data(x, (void **)&px));
    CHECK(px != NULL);
    if (!px) return;
    px[0] = 1.5f, px[1] = 2.5f, px[2] = -3.f, px[3] = 4.f; /* written in place */
    CHECK_OK(dp_tensor_read(x, w, sizeof w));
    CHECK(w[0] == 1.5f && w[2] == -3.f && w[3] == 4.f);
    CHECK_OK(dp_runtime_find_op(rt, "Add", &add));
    {
        dp_tensor_t *const in[2] = {x, x};
        dp_run_options_t o;
        dp_run_options_init(&o, sizeof o);
        o.device = d0;
        CHECK_OK(dp_op_run(rt, add, in, 2, NULL, &o, outs, 1, &n_out));
    }
    y = outs[0];
    CHECK(n_out == 1 && y != NULL);
    if (y) {
        CHECK_OK(dp_tensor_data(y, (void **)&py));
        CHECK(py != NULL && py[0] == 3.f && py[2] == -6.f && py[3] == 8.f);
    }
    /* Bad arguments. */
    CHECK_STATUS_MSG(dp_tensor_data(NULL, &p), DP_INVALID_ARGUMENT, "tensor");
    CHECK_STATUS_MSG(dp_tensor_data(x, NULL), DP_INVALID_ARGUMENT, "out_data");
    CHECK(p == SENTINEL(void));
    /* SIM's memory is not the host's. */
    if (dp_runtime_load_plugin(rt, DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so", NULL, 0) == DP_OK &&
        dp_runtime_find_device(rt, "SIM:0", &sim) == DP_OK) {
        CHECK_OK(dp_tensor_copy_to(x, sim, &s));
        CHECK_STATUS_MSG(dp_tensor_data(s, &p), DP_FAILED_PRECONDITION,
                         "the tensor is on SIM:0, whose memory the host cannot touch");
        CHECK(p == SENTINEL(void));
    } else {
        CHECKF(0, "SIM did not load: %s", dp_last_error_message());
    }
    /* A tensor over a buffer shares its memory; the buffer may be larger. */
    CHECK_OK(dp_buffer_allocate(d0, 4 * sizeof(float) + 8, &b));
    if (b) {
        static const float four[4] = {9.f, 8.f, 7.f, 6.f};
        CHECK_OK(dp_buffer_write(b, 0, four, sizeof four));
        CHECK_OK(dp_tensor_from_buffer(b, DP_DTYPE_F32, shape, 2, &v));
        if (v) {
            CHECK(dp_tensor_byte_size(v) == sizeof four);
            CHECK(dp_tensor_device(v) == d0);
            CHECK_OK(dp_tensor_read(v, w, sizeof w));
            CHECK(w[0] == 9.f && w[3] == 6.f);
            CHECK_OK(dp_tensor_data(v, &p));
            ((float *)p)[1] = 0.5f; /* the buffer sees it */
            CHECK_OK(dp_buffer_read(b, 0, w, sizeof w));
            CHECK(w[1] == 0.5f);
        }
        {
            dp_tensor_t *none = SENTINEL(dp_tensor_t);
            CHECK_STATUS_MSG(dp_tensor_from_buffer(b, DP_DTYPE_F64, big, 1, &none),
                             DP_INVALID_ARGUMENT, "needs 40 bytes; the buffer has 24");
            CHECK_STATUS_MSG(dp_tensor_from_buffer(NULL, DP_DTYPE_F32, shape, 2, &none),
                             DP_INVALID_ARGUMENT, "buffer");
            CHECK_STATUS_MSG(dp_tensor_from_buffer(b, 99, shape, 2, &none), DP_INVALID_ARGUMENT,
                             "dtype");
            CHECK_STATUS_MSG(dp_tensor_from_buffer(b, DP_DTYPE_F32, NULL, 2, &none),
                             DP_INVALID_ARGUMENT, "shape");
            CHECK_STATUS_MSG(dp_tensor_from_buffer(b, DP_DTYPE_F32, shape, 2, NULL),
                             DP_INVALID_ARGUMENT, "out_tensor");
            CHECK(none == SENTINEL(dp_tensor_t));
        }
        dp_buffer_release(b); /* the tensor keeps the memory */
        if (v) {
            CHECK_OK(dp_tensor_read(v, w, sizeof w));
            CHECK(w[0] == 9.f && w[1] == 0.5f);
        }
    }
    dp_tensor_release(v);
    dp_tensor_release(s);
    dp_tensor_release(y);
    dp_tensor_release(x);
}

/* A tensor, a buffer, a created stream and a variable outlive their runtime: they can still be
 * used, but their device handles went with the runtime, so asking for the device gives NULL (or
 * DP_FAILED_PRECONDITION) and says why (not a dead handle that a later device handle could take
 * the place of). A default stream's handle goes with the runtime. */
static void test_outliving_the_runtime(void) {
    static const int64_t shape[1] = {3};
    static const float v[3] = {1.0f, 2.0f, 3.0f};
    static const unsigned char bytes[4] = {9, 8, 7, 6};
    float back[3] = {0};
    unsigned char got[4] = {0};
    dp_runtime_t *rt = dp_test_runtime(1, 0);
    dp_device_t *d = dp_test_device(rt, 0);
    dp_device_t *where = SENTINEL(dp_device_t);
    dp_tensor_t *t = NULL, *value = NULL;
    dp_buffer_t *b = NULL;
    dp_stream_t *s = NULL, *def = NULL;
    dp_variable_t *var = NULL;
    const char *m;
    SECTION("a tensor, a buffer, a stream and a variable outliving their runtime");
    CHECK_OK(dp_tensor_create(d, DP_DTYPE_F32, shape, 1, v, sizeof v, &t));
    CHECK_OK(dp_buffer_allocate(d, 64, &b));
    CHECK_OK(dp_stream_create(d, &s));
    CHECK_OK(dp_device_default_stream(d, &def));
    CHECK_OK(dp_variable_create(rt, "w", t, d, &var));
    CHECK(dp_tensor_device(t) == d);
    CHECK(dp_buffer_device(b) == d);
    CHECK(dp_stream_device(s) == d);
    CHECK(dp_stream_device(def) == d);
    CHECK_OK(dp_variable_device(var, &where));
    CHECK(where == d);
    dp_runtime_destroy(rt);
    CHECK(dp_tensor_device(t) == NULL);
    m = dp_last_error_message();
    CHECKF(m != NULL && strstr(m, "dp_tensor_device") && strstr(m, "was destroyed"),
           "dp_tensor_device after the runtime: message '%s'", m ? m : "(null)");
    CHECK(dp_buffer_device(b) == NULL);
    m = dp_last_error_message();
    CHECKF(m != NULL && strstr(m, "dp_buffer_device") && strstr(m, "was destroyed"),
           "dp_buffer_device after the runtime: message '%s'", m ? m : "(null)");
    CHECK(dp_stream_device(s) == NULL);
    m = dp_last_error_message();
    CHECKF(m != NULL && strstr(m, "dp_stream_device") &&
               strstr(m, "the runtime of the stream's device HOST:0 was destroyed"),
           "dp_stream_device after the runtime: message '%s'", m ? m : "(null)");
    where = SENTINEL(dp_device_t);
    CHECK_STATUS_MSG(dp_variable_device(var, &where), DP_FAILED_PRECONDITION,
                     "runtime of the variable's device HOST:0 was destroyed");
    CHECK_UNTOUCHED(dp_device_t, where);
    /* the default stream's handle went with the runtime: refused as a destroyed handle */
    CHECK(dp_stream_device(def) == NULL);
    m = dp_last_error_message();
    CHECKF(m != NULL && strstr(m, "dp_stream_device") && strstr(m, "destroyed"),
           "dp_stream_device on a destroyed default stream: message '%s'", m ? m : "(null)");
    /* ... while the objects themselves still work */
    CHECK_OK(dp_tensor_read(t, back, sizeof back));
    CHECK(back[0] == 1.0f && back[1] == 2.0f && back[2] == 3.0f);
    CHECK_OK(dp_stream_write(s, b, 0, bytes, sizeof bytes));
    CHECK_OK(dp_stream_synchronize(s));
    CHECK_OK(dp_buffer_read(b, 0, got, sizeof got));
    CHECK(memcmp(got, bytes, sizeof got) == 0);
    CHECK_OK(dp_variable_read(var, &value));
    memset(back, 0, sizeof back);
    CHECK_OK(dp_tensor_read(value, back, sizeof back));
    CHECK(back[0] == 1.0f && back[1] == 2.0f && back[2] == 3.0f);
    dp_tensor_release(value);
    dp_variable_release(var);
    dp_stream_destroy(s);
    dp_tensor_release(t);
    dp_buffer_release(b);
}

static void test_retain_release(dp_device_t *d0) {
    static const int64_t shape[1] = {3};
    double v[3] = {1.0, -2.0, 3.5}, w[3] = {0, 0, 0};
    dp_tensor_t *t = NULL;
    SECTION("dp_tensor_retain / dp_tensor_release");
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_F64, shape, 1, v, sizeof v, &t));
    if (!t) return;
    dp_tensor_retain(t);
    dp_tensor_release(t);
    /* the retained reference survives one release */
    CHECK(dp_tensor_dtype(t) == DP_DTYPE_F64);
    CHECK(dp_tensor_num_elements(t) == 3);
    CHECK_OK(dp_tensor_read(t, w, sizeof w));
    CHECK(memcmp(v, w, sizeof v) == 0);
    dp_tensor_retain(t);
    dp_tensor_retain(t);
    dp_tensor_release(t);
    dp_tensor_release(t);
    CHECK_OK(dp_tensor_read(t, w, sizeof w));
    dp_tensor_release(t);
    /* the last reference is gone; the handle is quarantined, so asking is defined */
    CHECK(dp_tensor_dtype(t) == 0);
    CHECK(dp_tensor_num_elements(t) == -1);
    dp_tensor_release(NULL);
    dp_tensor_retain(NULL);
}

int main(void) {
    dp_runtime_t *rt;
    dp_device_t *d0, *d1;
    dp_test_watchdog(120);
    rt = dp_test_runtime(2, 0);
    d0 = dp_test_device(rt, 0);
    d1 = dp_test_device(rt, 1);
    test_every_dtype(d0, d1);
    test_every_dtype(d1, d0);
    test_scalars(d0, d1);
    test_zero_sized(d0, d1);
    test_max_rank_and_large(d0, d1);
    test_buffer_is_storage(d0);
    test_retain_release(d1);
    test_data_in_place(rt, d0);
    {
        dp_memory_stats_t s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        CHECK_OK(dp_device_memory_stats(d0, &s));
        CHECKF(s.active_allocs == 0, "%llu allocations left on CPU:0 after all tensors were released",
               (unsigned long long)s.active_allocs);
        CHECK_OK(dp_device_memory_stats(d1, &s));
        CHECKF(s.active_allocs == 0, "%llu allocations left on CPU:1 after all tensors were released",
               (unsigned long long)s.active_allocs);
    }
    dp_runtime_destroy(rt);
    test_outliving_the_runtime();
    return DP_TEST_SUMMARY();
}
