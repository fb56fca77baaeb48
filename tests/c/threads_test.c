/* Concurrency: 4 threads create streams, events, buffers and tensors on the shared devices of one
 * runtime, copy data through them (also across devices and through one shared buffer and one
 * shared tensor) and destroy them, all at once; meanwhile two more runtimes are used from two
 * other threads (they must not see each other's allocations or limits) and two threads create
 * and destroy whole runtimes. Every result is checked; error messages must stay per-thread. */
#include "dp_test.h"

#include <pthread.h>

#define NWORKERS 4
#define ITERS 200
#define REGION 1024

static dp_runtime_t *shared_rt;
static dp_device_t *shared_dev[2];
static dp_buffer_t *shared_buf; /* NWORKERS regions of REGION bytes on CPU:0 */
static dp_tensor_t *shared_tensor;
static const int64_t shared_shape[1] = {256};
static int32_t shared_values[256];

static void worker_iteration(int tid, int iter) {
    dp_device_t *dev = shared_dev[(tid + iter) % 2], *other = shared_dev[(tid + iter + 1) % 2];
    dp_stream_t *s = NULL;
    dp_event_t *e = NULL;
    dp_buffer_t *a = NULL, *b = NULL, *c = NULL;
    size_t n = 1000 + (size_t)tid * 37 + (size_t)iter;
    unsigned seed = (unsigned)(tid * 1000 + iter);
    unsigned char *in = (unsigned char *)malloc(n), *out = (unsigned char *)malloc(n),
                  *out2 = (unsigned char *)malloc(n);
    if (!in || !out || !out2) {
        free(in);
        free(out);
        free(out2);
        return;
    }
    dp_test_fill(in, n, seed);
    memset(out, 0, n);
    memset(out2, 0, n);

    /* buffers and streams: host -> a (dev) -> c (dev) -> b (other) -> host */
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_event_create(dev, &e));
    CHECK_OK(dp_buffer_allocate(dev, n, &a));
    CHECK_OK(dp_buffer_allocate(dev, n, &c));
    CHECK_OK(dp_buffer_allocate(other, n, &b));
    if (s && e && a && b && c) {
        CHECK_OK(dp_stream_write(s, a, 0, in, n));
        CHECK_OK(dp_stream_copy(s, c, 0, a, 0, n));
        CHECK_OK(dp_event_record(e, s));
        CHECK_OK(dp_stream_read(s, c, 0, out2, n));
        CHECK_OK(dp_event_synchronize(e));
        CHECK_OK(dp_buffer_copy(b, 0, c, 0, n));
        CHECK_OK(dp_buffer_read(b, 0, out, n));
        CHECKF(dp_test_pattern_mismatch(out, n, seed) == n, "thread %d iter %d: cross-device data",
               tid, iter);
        CHECK_OK(dp_stream_synchronize(s));
        CHECKF(dp_test_pattern_mismatch(out2, n, seed) == n, "thread %d iter %d: stream read",
               tid, iter);
    }
    dp_event_destroy(e);
    dp_stream_destroy(s);
    dp_buffer_release(a);
    dp_buffer_release(b);
    dp_buffer_release(c);

    /* tensors: create on dev, copy to other, read back */
    {
        int64_t shape[2];
        int32_t vals[4 * 17], back[4 * 17];
        size_t k, count = (size_t)(tid + 1) * 17;
        dp_tensor_t *t = NULL, *t2 = NULL;
        shape[0] = tid + 1;
        shape[1] = 17;
        for (k = 0; k < count; ++k) vals[k] = (int32_t)(seed * 7 + k);
        memset(back, 0, sizeof back);
        CHECK_OK(dp_tensor_create(dev, DP_DTYPE_I32, shape, 2, vals, count * sizeof(int32_t), &t));
        if (t) CHECK_OK(dp_tensor_copy_to(t, other, &t2));
        if (t2) {
            CHECK(dp_tensor_device(t2) == other);
            CHECK(dp_tensor_num_elements(t2) == (int64_t)count);
            CHECK_OK(dp_tensor_read(t2, back, count * sizeof(int32_t)));
            CHECKF(memcmp(vals, back, count * sizeof(int32_t)) == 0, "thread %d iter %d: tensor",
                   tid, iter);
        }
        dp_tensor_release(t);
        dp_tensor_release(t2);
    }

    /* the shared buffer: each thread owns one region */
    {
        unsigned char chunk[REGION], back[REGION];
        dp_test_fill(chunk, REGION, seed + 5);
        CHECK_OK(dp_buffer_write(shared_buf, (size_t)tid * REGION, chunk, REGION));
        memset(back, 0, REGION);
        CHECK_OK(dp_buffer_read(shared_buf, (size_t)tid * REGION, back, REGION));
        CHECKF(memcmp(chunk, back, REGION) == 0, "thread %d iter %d: shared buffer region", tid,
               iter);
    }

    /* the shared tensor: retain, read, release */
    {
        int32_t back[256];
        int k;
        for (k = 0; k < 10; ++k) dp_tensor_retain(shared_tensor);
        CHECK_OK(dp_tensor_read(shared_tensor, back, sizeof back));
        CHECK(memcmp(back, shared_values, sizeof back) == 0);
        for (k = 0; k < 10; ++k) dp_tensor_release(shared_tensor);
    }

    /* the error message is per thread */
    {
        char spec[48], token[32], msg[512];
        dp_device_t *d = SENTINEL(dp_device_t);
        dp_status_t st;
        snprintf(token, sizeof token, "NOSUCH%dX%d", tid, iter);
        snprintf(spec, sizeof spec, "%s:0", token);
        st = dp_runtime_find_device(shared_rt, spec, &d);
        dp_test_copy_message_(msg, sizeof msg);
        CHECK(st == DP_NOT_FOUND);
        CHECKF(dp_test_message_matches_(msg, token), "thread %d got message \"%s\" for %s", tid,
               msg, spec);
        CHECK(d == SENTINEL(dp_device_t));
    }
    free(in);
    free(out);
    free(out2);
}

static void *worker(void *arg) {
    int tid = (int)(intptr_t)arg, iter;
    const char *m = dp_last_error_message();
    /* a new thread starts with an empty message, whatever other threads did */
    CHECKF(m != NULL && m[0] == '\0', "thread %d starts with message \"%s\"", tid, m ? m : "(null)");
    for (iter = 0; iter < ITERS; ++iter) worker_iteration(tid, iter);
    return NULL;
}

/* Two independent runtimes, each used from its own thread. */
struct solo {
    dp_runtime_t *rt;
    uint64_t limit;
    int id;
};

static void *solo_runtime(void *arg) {
    struct solo *so = (struct solo *)arg;
    dp_device_t *dev = dp_test_device(so->rt, 0);
    int round;
    for (round = 0; round < 20; ++round) {
        dp_buffer_t *bufs[4] = {NULL, NULL, NULL, NULL};
        const size_t size = 256 * 1024;
        dp_memory_stats_t st;
        size_t k;
        for (k = 0; k < 3; ++k) CHECK_OK(dp_buffer_allocate(dev, size, &bufs[k]));
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        CHECK_OK(dp_device_memory_stats(dev, &st));
        CHECKF(st.active_allocs == 3, "runtime %d sees %llu live allocations, made 3", so->id,
               (unsigned long long)st.active_allocs);
        CHECK(st.bytes_in_use >= 3 * size);
        CHECK(st.bytes_limit == so->limit);
        if (so->limit != 0) {
            /* 3 x 256 KiB in use of 1 MiB: 512 KiB more does not fit */
            dp_buffer_t *big = SENTINEL(dp_buffer_t);
            dp_status_t s = dp_buffer_allocate(dev, 2 * size, &big);
            CHECKF(s == DP_RESOURCE_EXHAUSTED, "limited runtime: %s", dp_status_str(s));
            CHECK(big == SENTINEL(dp_buffer_t));
        } else {
            /* the other runtime's limit does not apply here */
            CHECK_OK(dp_buffer_allocate(dev, 16 * size, &bufs[3]));
        }
        {
            unsigned char in[512], out[512];
            dp_test_fill(in, sizeof in, (unsigned)(so->id * 100 + round));
            CHECK_OK(dp_buffer_write(bufs[1], size - sizeof in, in, sizeof in));
            CHECK_OK(dp_buffer_copy(bufs[2], 0, bufs[1], size - sizeof in, sizeof in));
            memset(out, 0, sizeof out);
            CHECK_OK(dp_buffer_read(bufs[2], 0, out, sizeof out));
            CHECK(memcmp(in, out, sizeof in) == 0);
        }
        for (k = 0; k < 4; ++k) dp_buffer_release(bufs[k]);
        CHECK_OK(dp_device_memory_stats(dev, &st));
        CHECK(st.active_allocs == 0);
        CHECK(st.bytes_in_use == 0);
    }
    return NULL;
}

/* Whole runtimes created, used and destroyed concurrently. */
static void *churn(void *arg) {
    int id = (int)(intptr_t)arg, k;
    for (k = 0; k < 20; ++k) {
        dp_runtime_t *rt = NULL;
        dp_runtime_options_t o;
        dp_runtime_options_init(&o, sizeof o);
        o.cpu_device_count = (uint32_t)(2 + (k + id) % 3);
        CHECK_OK(dp_runtime_create(&o, &rt));
        if (!rt) continue;
        {
            dp_device_t *d = NULL;
            dp_stream_t *s = NULL;
            dp_buffer_t *b = NULL;
            uint32_t v = (uint32_t)(id * 1000 + k), w = 0;
            CHECK_OK(dp_runtime_find_device(rt, "CPU:1", &d));
            if (d) {
                CHECK_OK(dp_stream_create(d, &s));
                CHECK_OK(dp_buffer_allocate(d, sizeof v, &b));
                if (s && b) {
                    CHECK_OK(dp_stream_write(s, b, 0, &v, sizeof v));
                    CHECK_OK(dp_stream_read(s, b, 0, &w, sizeof w));
                    CHECK_OK(dp_stream_synchronize(s));
                    CHECK(v == w);
                }
                dp_buffer_release(b);
                dp_stream_destroy(s);
            }
        }
        dp_runtime_destroy(rt);
    }
    return NULL;
}

int main(void) {
    pthread_t workers[NWORKERS], solos[2], churners[2];
    struct solo so[2];
    int i;
    dp_test_watchdog(300);

    /* make the main thread's message non-empty: the workers must not see it */
    {
        dp_device_t *d = NULL;
        shared_rt = dp_test_runtime(2, 0);
        CHECK(dp_runtime_find_device(shared_rt, "MAINTHREAD:0", &d) == DP_NOT_FOUND);
    }
    shared_dev[0] = dp_test_device(shared_rt, 0);
    shared_dev[1] = dp_test_device(shared_rt, 1);
    DP_TEST_MUST(dp_buffer_allocate(shared_dev[0], NWORKERS * REGION, &shared_buf));
    for (i = 0; i < 256; ++i) shared_values[i] = i * i - 1000;
    DP_TEST_MUST(dp_tensor_create(shared_dev[1], DP_DTYPE_I32, shared_shape, 1, shared_values,
                                  sizeof shared_values, &shared_tensor));
    so[0].rt = dp_test_runtime(1, 1u << 20);
    so[0].limit = 1u << 20;
    so[0].id = 1;
    so[1].rt = dp_test_runtime(1, 0);
    so[1].limit = 0;
    so[1].id = 2;

    SECTION("starting 4 workers on one runtime, 2 threads on their own runtimes, 2 churners");
    for (i = 0; i < NWORKERS; ++i)
        if (pthread_create(&workers[i], NULL, worker, (void *)(intptr_t)i) != 0) return 2;
    for (i = 0; i < 2; ++i)
        if (pthread_create(&solos[i], NULL, solo_runtime, &so[i]) != 0) return 2;
    for (i = 0; i < 2; ++i)
        if (pthread_create(&churners[i], NULL, churn, (void *)(intptr_t)i) != 0) return 2;
    for (i = 0; i < NWORKERS; ++i) pthread_join(workers[i], NULL);
    for (i = 0; i < 2; ++i) pthread_join(solos[i], NULL);
    for (i = 0; i < 2; ++i) pthread_join(churners[i], NULL);

    SECTION("after the threads");
    {
        /* the main thread's own message is still its own */
        CHECK(dp_test_message_matches_(dp_last_error_message(), "MAINTHREAD"));
    }
    {
        /* the last worker iteration's regions are in the shared buffer */
        unsigned char back[REGION];
        for (i = 0; i < NWORKERS; ++i) {
            CHECK_OK(dp_buffer_read(shared_buf, (size_t)i * REGION, back, REGION));
            CHECK(dp_test_pattern_mismatch(back, REGION, (unsigned)(i * 1000 + ITERS - 1) + 5) ==
                  REGION);
        }
    }
    {
        /* the shared tensor has exactly one reference left */
        int32_t back[256];
        CHECK_OK(dp_tensor_read(shared_tensor, back, sizeof back));
        CHECK(memcmp(back, shared_values, sizeof back) == 0);
        dp_tensor_release(shared_tensor);
        CHECK(dp_tensor_dtype(shared_tensor) == 0);
    }
    dp_buffer_release(shared_buf);
    {
        dp_memory_stats_t st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        for (i = 0; i < 2; ++i) {
            CHECK_OK(dp_device_memory_stats(shared_dev[i], &st));
            CHECKF(st.active_allocs == 0, "CPU:%d: %llu allocations leaked", i,
                   (unsigned long long)st.active_allocs);
        }
    }
    dp_test_round_trip(shared_rt);
    dp_runtime_destroy(shared_rt);
    dp_runtime_destroy(so[0].rt);
    dp_runtime_destroy(so[1].rt);
    return DP_TEST_SUMMARY();
}
