/* Good-input tests of streams and events: stream-ordered copies, host callbacks and their order,
 * events between streams (also across devices), wait_stream, synchronize, the default stream.
 *
 * A "gate" callback blocks a stream's worker until the test opens it. Work queued behind a closed
 * gate is provably pending, so a missing wait or an event that reports completion too early shows
 * as wrong data instead of passing by luck. */
#include "dp_test.h"

#define GATE_TIMEOUT_MS 5000

struct gate {
    int open;
    int entered;
    int timed_out;
};

static void gate_init(struct gate *g) {
    g->open = 0;
    g->entered = 0;
    g->timed_out = 0;
}

static void gate_cb(void *user_data) {
    struct gate *g = (struct gate *)user_data;
    int waited = 0;
    DP_TEST_ATOMIC_INC(g->entered);
    while (DP_TEST_ATOMIC_LOAD(g->open) == 0) {
        if (waited >= GATE_TIMEOUT_MS) {
            DP_TEST_ATOMIC_INC(g->timed_out);
            return;
        }
        dp_test_sleep_ms(1);
        ++waited;
    }
}

static void gate_open(struct gate *g) { DP_TEST_ATOMIC_INC(g->open); }

/* Callbacks that must run in enqueue order. */
struct order_ctx {
    int *counter;
    int *errors;
    int index;
    const unsigned char *host; /* when set: this host memory must already hold `seed`'s pattern */
    size_t host_size;
    unsigned seed;
};

static void order_cb(void *user_data) {
    struct order_ctx *c = (struct order_ctx *)user_data;
    if (*c->counter != c->index) ++*c->errors;
    if (c->host && dp_test_pattern_mismatch(c->host, c->host_size, c->seed) != c->host_size)
        ++*c->errors;
    ++*c->counter;
}

static void set_flag_cb(void *user_data) { DP_TEST_ATOMIC_INC(*(int *)user_data); }

static void slow_set_flag_cb(void *user_data) {
    dp_test_sleep_ms(100);
    DP_TEST_ATOMIC_INC(*(int *)user_data);
}

static void null_user_data_cb(void *user_data) {
    static int calls = 0;
    if (user_data == NULL) DP_TEST_ATOMIC_INC(calls);
    if (DP_TEST_ATOMIC_LOAD(calls) > 1) fprintf(stdout, "null_user_data_cb ran twice\n");
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (p[i] != v) return 0;
    return 1;
}

static void test_default_stream(dp_device_t *dev) {
    dp_stream_t *ds = SENTINEL(dp_stream_t), *ds2 = NULL;
    dp_buffer_t *b = NULL;
    unsigned char in[128], out[128];
    int counter = 0, errors = 0;
    struct order_ctx c;
    SECTION("default stream");
    CHECK_OK(dp_device_default_stream(dev, &ds));
    CHECK(ds != NULL && ds != SENTINEL(dp_stream_t));
    CHECK_OK(dp_device_default_stream(dev, &ds2));
    CHECK(ds == ds2);
    if (ds == NULL || ds == SENTINEL(dp_stream_t)) return;
    CHECK(dp_stream_device(ds) == dev);
    dp_stream_destroy(ds); /* borrowed: a no-op */
    CHECK(dp_stream_device(ds) == dev);
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    dp_test_fill(in, sizeof in, 3);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_stream_write(ds, b, 0, in, sizeof in));
    CHECK_OK(dp_stream_read(ds, b, 0, out, sizeof out));
    CHECK_OK(dp_stream_synchronize(ds));
    CHECK(memcmp(in, out, sizeof in) == 0);
    /* the CPU default stream runs callbacks inline */
    c.counter = &counter;
    c.errors = &errors;
    c.index = 0;
    c.host = out;
    c.host_size = sizeof out;
    c.seed = 3;
    CHECK_OK(dp_stream_host_callback(ds, order_cb, &c));
    CHECKF(counter == 1, "the CPU default stream's callback did not run inline (counter %d)",
           counter);
    CHECK_OK(dp_stream_synchronize(ds));
    CHECK(counter == 1 && errors == 0);
    CHECK_OK(dp_device_default_stream(dev, &ds2));
    CHECK(ds2 == ds);
    dp_buffer_release(b);
}

static void test_stream_ops(dp_device_t *dev, dp_device_t *other) {
    dp_stream_t *s = SENTINEL(dp_stream_t);
    dp_buffer_t *a = NULL, *b = NULL, *x = NULL;
    unsigned char in[1024], out[1024], model[1024];
    SECTION("stream write / memset / copy / read");
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK(s != NULL && s != SENTINEL(dp_stream_t));
    if (s == NULL || s == SENTINEL(dp_stream_t)) return;
    CHECK(dp_stream_device(s) == dev);
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &a));
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    CHECK_OK(dp_buffer_allocate(other, sizeof in, &x));
    if (!a || !b || !x) return;
    dp_test_fill(in, sizeof in, 5);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_stream_memset(s, a, 0, 0x42, sizeof in));
    CHECK_OK(dp_stream_write(s, a, 100, in, 500));
    CHECK_OK(dp_stream_memset(s, a, 550, 0x17, 10));
    CHECK_OK(dp_stream_memset(s, b, 0, 0x00, sizeof in));
    CHECK_OK(dp_stream_copy(s, b, 1, a, 0, sizeof in - 1));
    CHECK_OK(dp_stream_read(s, b, 0, out, sizeof out));
    CHECK_OK(dp_stream_synchronize(s));
    memset(model, 0x42, sizeof model);
    memcpy(model + 100, in, 500);
    memset(model + 550, 0x17, 10);
    memmove(model + 1, model, sizeof model - 1);
    model[0] = 0x00;
    CHECK(memcmp(out, model, sizeof out) == 0);
    /* zero-sized operations are fine */
    CHECK_OK(dp_stream_write(s, a, sizeof in, in, 0));
    CHECK_OK(dp_stream_read(s, a, 0, NULL, 0));
    CHECK_OK(dp_stream_memset(s, a, 3, 0x99, 0));
    CHECK_OK(dp_stream_copy(s, b, sizeof in, a, 0, 0));
    /* the synchronous copy to another device sees the stream's work after synchronize */
    CHECK_OK(dp_stream_synchronize(s));
    CHECK_OK(dp_buffer_copy(x, 0, b, 0, sizeof in));
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_read(x, 0, out, sizeof out));
    CHECK(memcmp(out, model, sizeof out) == 0);
    dp_stream_destroy(s);
    dp_buffer_release(a);
    dp_buffer_release(b);
    dp_buffer_release(x);
}

#define NCB 100

static void test_callback_order(dp_device_t *dev) {
    dp_stream_t *s = NULL;
    dp_buffer_t *b = NULL;
    struct order_ctx ctx[NCB];
    static unsigned char host[NCB][64];
    static unsigned char inputs[NCB][64];
    int counter = 0, errors = 0, i;
    struct gate g;
    SECTION("host callbacks run once each, in enqueue order, after earlier work");
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_buffer_allocate(dev, 64, &b));
    if (!s || !b) return;
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s, gate_cb, &g)); /* everything below is queued behind it */
    for (i = 0; i < NCB; ++i) {
        memset(host[i], 0, 64);
        ctx[i].counter = &counter;
        ctx[i].errors = &errors;
        ctx[i].index = i;
        ctx[i].host = NULL;
        ctx[i].host_size = 0;
        ctx[i].seed = 0;
        if (i % 10 == 0) {
            /* a write + read before this callback: the callback must see the read's data. The
             * host memory of both stays untouched until the stream has run them. */
            dp_test_fill(inputs[i], 64, (unsigned)i);
            CHECK_OK(dp_stream_write(s, b, 0, inputs[i], 64));
            CHECK_OK(dp_stream_read(s, b, 0, host[i], 64));
            ctx[i].host = host[i];
            ctx[i].host_size = 64;
            ctx[i].seed = (unsigned)i;
        }
        CHECK_OK(dp_stream_host_callback(s, order_cb, &ctx[i]));
    }
    CHECKF(DP_TEST_ATOMIC_LOAD(counter) == 0, "callbacks ran before the gate opened (%d)", counter);
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s));
    CHECK(g.timed_out == 0);
    CHECKF(counter == NCB, "%d of %d callbacks ran", counter, NCB);
    CHECKF(errors == 0, "%d callbacks ran out of order or before their stream's earlier work",
           errors);
    CHECK_OK(dp_stream_host_callback(s, null_user_data_cb, NULL));
    CHECK_OK(dp_stream_synchronize(s));
    dp_stream_destroy(s);
    dp_buffer_release(b);
}

static void test_events(dp_device_t *dev) {
    dp_stream_t *s1 = NULL, *s2 = NULL;
    dp_event_t *e = SENTINEL(dp_event_t);
    dp_buffer_t *b = NULL;
    unsigned char in[2048], out[2048];
    int32_t done = 77;
    struct gate g;
    SECTION("events: query/record/wait/synchronize between two streams");
    CHECK_OK(dp_stream_create(dev, &s1));
    CHECK_OK(dp_stream_create(dev, &s2));
    CHECK_OK(dp_event_create(dev, &e));
    CHECK(e != NULL && e != SENTINEL(dp_event_t));
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    if (!s1 || !s2 || !b || e == NULL || e == SENTINEL(dp_event_t)) return;
    /* never recorded: complete */
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 1);
    CHECK_OK(dp_event_synchronize(e));

    dp_test_fill(in, sizeof in, 8);
    memset(out, 0xEE, sizeof out);
    CHECK_OK(dp_buffer_memset(b, 0, 0, sizeof in));
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s1, gate_cb, &g));
    CHECK_OK(dp_stream_write(s1, b, 0, in, sizeof in));
    CHECK_OK(dp_event_record(e, s1));
    done = 77;
    CHECK_OK(dp_event_query(e, &done));
    CHECKF(done == 0, "event behind a closed gate reports %d, expected 0 (pending)", (int)done);
    CHECK_OK(dp_stream_wait_event(s2, e));
    CHECK_OK(dp_stream_read(s2, b, 0, out, sizeof out));
    dp_test_sleep_ms(20);
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 0);
    CHECKF(all_bytes(out, sizeof out, 0xEE), "s2 read the buffer before the event it waits on");
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s2));
    CHECK(g.timed_out == 0);
    CHECKF(dp_test_pattern_mismatch(out, sizeof out, 8) == sizeof out,
           "s2 read stale data: byte %u", (unsigned)dp_test_pattern_mismatch(out, sizeof out, 8));
    /* s2 waited for s1's event, so it is complete now */
    done = 77;
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 1);
    CHECK_OK(dp_event_synchronize(e));

    SECTION("events: re-record, synchronize on the event");
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s1, gate_cb, &g));
    CHECK_OK(dp_event_record(e, s1));
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 0);
    gate_open(&g);
    CHECK_OK(dp_event_synchronize(e));
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 1);
    CHECK(g.timed_out == 0);
    /* recorded on an idle stream: complete after synchronize */
    CHECK_OK(dp_event_record(e, s2));
    CHECK_OK(dp_stream_synchronize(s2));
    CHECK_OK(dp_event_query(e, &done));
    CHECK(done == 1);
    /* recorded on the default stream */
    {
        dp_stream_t *ds = NULL;
        CHECK_OK(dp_device_default_stream(dev, &ds));
        CHECK_OK(dp_event_record(e, ds));
        CHECK_OK(dp_event_synchronize(e));
        CHECK_OK(dp_event_query(e, &done));
        CHECK(done == 1);
        CHECK_OK(dp_stream_wait_event(ds, e));
    }
    dp_event_destroy(e);
    dp_stream_destroy(s1);
    dp_stream_destroy(s2);
    dp_buffer_release(b);
}

static void sleep_cb(void *user_data) { dp_test_sleep_ms(*(const int *)user_data); }

/* dp_event_elapsed_ns: the device's time between two events; the errors leave *out_ns alone. */
static void test_event_timing(dp_device_t *dev, dp_device_t *other) {
    static const int ms = 20;
    dp_stream_t *s = NULL, *s2 = NULL;
    dp_event_t *a = NULL, *b = NULL, *c = NULL, *never = NULL, *elsewhere = NULL;
    int64_t ns = -1, back = 1, untouched = 12345;
    struct gate g;
    SECTION("events: dp_event_elapsed_ns times the work between two events");
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_stream_create(dev, &s2));
    {
        /* stream ids (what a trace names device tracks by): 0 for the default stream, created
         * streams numbered from 1 in creation order */
        dp_stream_t *ds = NULL;
        uint32_t id0 = 99, id1 = 0, id2 = 0;
        CHECK_OK(dp_device_default_stream(dev, &ds));
        CHECK_OK(dp_stream_id(ds, &id0));
        CHECK_OK(dp_stream_id(s, &id1));
        CHECK_OK(dp_stream_id(s2, &id2));
        CHECKF(id0 == 0 && id1 >= 1 && id2 > id1, "stream ids %u, %u, %u", id0, id1, id2);
    }
    CHECK_OK(dp_event_create(dev, &a));
    CHECK_OK(dp_event_create(dev, &b));
    CHECK_OK(dp_event_create(dev, &c));
    CHECK_OK(dp_event_create(dev, &never));
    CHECK_OK(dp_event_create(other, &elsewhere));
    if (!s || !s2 || !a || !b || !c || !never || !elsewhere) return;
    CHECK_OK(dp_event_record(a, s));
    CHECK_OK(dp_stream_host_callback(s, sleep_cb, (void *)&ms));
    CHECK_OK(dp_event_record(b, s));
    CHECK_OK(dp_event_synchronize(b));
    CHECK_OK(dp_event_elapsed_ns(a, b, &ns));
    CHECKF(ns >= (int64_t)(ms - 1) * 1000000 && ns < (int64_t)ms * 10 * 1000000,
           "%lld ns around a %d ms sleep", (long long)ns, ms);
    CHECK_OK(dp_event_elapsed_ns(b, a, &back));
    CHECKF(back == -ns, "%lld one way, %lld back", (long long)ns, (long long)back);
    CHECK_OK(dp_event_elapsed_ns(a, a, &back));
    CHECK(back == 0);
    /* another stream of the device: the same clock */
    CHECK_OK(dp_stream_wait_event(s2, b));
    CHECK_OK(dp_event_record(c, s2));
    CHECK_OK(dp_stream_synchronize(s2));
    CHECK_OK(dp_event_elapsed_ns(a, c, &back));
    CHECK(back >= ns);

    SECTION("events: dp_event_elapsed_ns refuses events it cannot time");
    CHECK_STATUS_MSG(dp_event_elapsed_ns(a, never, &untouched), DP_FAILED_PRECONDITION, "never recorded");
    CHECK_STATUS_MSG(dp_event_elapsed_ns(never, a, &untouched), DP_FAILED_PRECONDITION, "never recorded");
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s, gate_cb, &g));
    CHECK_OK(dp_event_record(c, s));
    CHECK_STATUS_MSG(dp_event_elapsed_ns(a, c, &untouched), DP_FAILED_PRECONDITION, "pending");
    gate_open(&g);
    CHECK_OK(dp_event_synchronize(c));
    CHECK(g.timed_out == 0);
    CHECK_OK(dp_event_elapsed_ns(a, c, &ns));
    CHECK(ns >= 0);
    CHECK_STATUS_MSG(dp_event_elapsed_ns(a, elsewhere, &untouched), DP_INVALID_ARGUMENT, "two devices");
    CHECK(untouched == 12345);
    dp_event_destroy(a);
    dp_event_destroy(b);
    dp_event_destroy(c);
    dp_event_destroy(never);
    dp_event_destroy(elsewhere);
    dp_stream_destroy(s);
    dp_stream_destroy(s2);
}

static void test_wait_stream(dp_device_t *dev) {
    dp_stream_t *s1 = NULL, *s2 = NULL;
    dp_buffer_t *b = NULL;
    unsigned char in[1000], out[1000];
    struct gate g;
    SECTION("dp_stream_wait_stream");
    CHECK_OK(dp_stream_create(dev, &s1));
    CHECK_OK(dp_stream_create(dev, &s2));
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    if (!s1 || !s2 || !b) return;
    dp_test_fill(in, sizeof in, 9);
    memset(out, 0xEE, sizeof out);
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s1, gate_cb, &g));
    CHECK_OK(dp_stream_write(s1, b, 0, in, sizeof in));
    CHECK_OK(dp_stream_wait_stream(s2, s1));
    CHECK_OK(dp_stream_read(s2, b, 0, out, sizeof out));
    dp_test_sleep_ms(20);
    CHECKF(all_bytes(out, sizeof out, 0xEE), "s2 ran before the stream it waits on");
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s2));
    CHECK(g.timed_out == 0);
    CHECK(dp_test_pattern_mismatch(out, sizeof out, 9) == sizeof out);
    /* the default stream can wait for a created one, and the other way round */
    {
        dp_stream_t *ds = NULL;
        CHECK_OK(dp_device_default_stream(dev, &ds));
        CHECK_OK(dp_stream_memset(s1, b, 0, 0x61, sizeof in));
        CHECK_OK(dp_stream_wait_stream(ds, s1));
        CHECK_OK(dp_stream_read(ds, b, 0, out, sizeof out));
        CHECK_OK(dp_stream_synchronize(ds));
        CHECK(all_bytes(out, sizeof out, 0x61));
        CHECK_OK(dp_stream_wait_stream(s1, ds));
        CHECK_OK(dp_stream_synchronize(s1));
    }
    dp_stream_destroy(s1);
    dp_stream_destroy(s2);
    dp_buffer_release(b);
}

struct cross_ctx {
    int *marker;
    int saw_marker;
    int ran;
};

static void cross_check_cb(void *user_data) {
    struct cross_ctx *c = (struct cross_ctx *)user_data;
    c->saw_marker = DP_TEST_ATOMIC_LOAD(*c->marker);
    DP_TEST_ATOMIC_INC(c->ran);
}

static void test_cross_device_event(dp_device_t *d0, dp_device_t *d1) {
    dp_stream_t *s0 = NULL, *s1 = NULL;
    dp_event_t *e1 = NULL;
    int marker = 0;
    struct cross_ctx c;
    struct gate g;
    SECTION("a stream of CPU:0 waits for an event of CPU:1");
    CHECK_OK(dp_stream_create(d0, &s0));
    CHECK_OK(dp_stream_create(d1, &s1));
    CHECK_OK(dp_event_create(d1, &e1));
    if (!s0 || !s1 || !e1) return;
    c.marker = &marker;
    c.saw_marker = -1;
    c.ran = 0;
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s1, gate_cb, &g));
    CHECK_OK(dp_stream_host_callback(s1, set_flag_cb, &marker));
    CHECK_OK(dp_event_record(e1, s1));
    CHECK_OK(dp_stream_wait_event(s0, e1));
    CHECK_OK(dp_stream_host_callback(s0, cross_check_cb, &c));
    dp_test_sleep_ms(20);
    CHECK(DP_TEST_ATOMIC_LOAD(c.ran) == 0);
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s0));
    CHECK(c.ran == 1);
    CHECKF(c.saw_marker == 1, "CPU:0's stream ran before CPU:1's event (marker %d)", c.saw_marker);
    CHECK(g.timed_out == 0);
    dp_event_destroy(e1);
    dp_stream_destroy(s0);
    dp_stream_destroy(s1);
}

/* dp_stream_copy: "One of them must live on the stream's device; the other may live on any
 * device." */
static void test_stream_copy_across_devices(dp_device_t *d0, dp_device_t *d1) {
    dp_stream_t *s = NULL;
    dp_buffer_t *a = NULL, *x = NULL;
    unsigned char in[700], out[700], model[700];
    struct gate g;
    SECTION("stream copies between a buffer of the stream's device and one of another device");
    CHECK_OK(dp_stream_create(d0, &s));
    CHECK_OK(dp_buffer_allocate(d0, sizeof in, &a));
    CHECK_OK(dp_buffer_allocate(d1, sizeof in, &x));
    if (!s || !a || !x) return;
    dp_test_fill(in, sizeof in, 41);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_memset(x, 0, 0x99, sizeof in));
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s, gate_cb, &g));
    CHECK_OK(dp_stream_write(s, a, 0, in, sizeof in));
    CHECK_OK(dp_stream_copy(s, x, 50, a, 0, 600));  /* CPU:0 -> CPU:1 */
    CHECK_OK(dp_stream_copy(s, a, 0, x, 0, 100));   /* CPU:1 -> CPU:0 */
    CHECK_OK(dp_stream_read(s, a, 0, out, sizeof out));
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s));
    CHECK(g.timed_out == 0);
    /* model: x = 0x99.., x[50..650) = in[0..600); a = in; a[0..100) = x[0..100) */
    memcpy(model, in, sizeof in);
    memset(model, 0x99, 50);
    memcpy(model + 50, in, 50);
    CHECK(memcmp(out, model, sizeof out) == 0);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_read(x, 0, out, sizeof out));
    memset(model, 0x99, sizeof model);
    memcpy(model + 50, in, 600);
    CHECK(memcmp(out, model, sizeof out) == 0);
    dp_stream_destroy(s);
    dp_buffer_release(a);
    dp_buffer_release(x);
}

/* dp_event_destroy: "Streams already waiting for it still see it reached." */
static void test_destroy_awaited_event(dp_device_t *dev) {
    dp_stream_t *s1 = NULL, *s2 = NULL;
    dp_event_t *e = NULL;
    int marker = 0;
    struct cross_ctx c;
    struct gate g;
    SECTION("an event destroyed while a stream waits for it");
    CHECK_OK(dp_stream_create(dev, &s1));
    CHECK_OK(dp_stream_create(dev, &s2));
    CHECK_OK(dp_event_create(dev, &e));
    if (!s1 || !s2 || !e) return;
    c.marker = &marker;
    c.saw_marker = -1;
    c.ran = 0;
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s1, gate_cb, &g));
    CHECK_OK(dp_stream_host_callback(s1, set_flag_cb, &marker));
    CHECK_OK(dp_event_record(e, s1));
    CHECK_OK(dp_stream_wait_event(s2, e));
    CHECK_OK(dp_stream_host_callback(s2, cross_check_cb, &c));
    dp_event_destroy(e);
    dp_test_sleep_ms(20);
    CHECK(DP_TEST_ATOMIC_LOAD(c.ran) == 0);
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s2));
    CHECK(c.ran == 1);
    CHECKF(c.saw_marker == 1, "the waiting stream ran before the destroyed event was reached");
    CHECK(g.timed_out == 0);
    dp_stream_destroy(s1);
    dp_stream_destroy(s2);
}

static void test_destroy_waits(dp_device_t *dev) {
    dp_stream_t *s = NULL;
    dp_event_t *e = NULL;
    int flag = 0;
    SECTION("dp_stream_destroy waits for enqueued work");
    CHECK_OK(dp_stream_create(dev, &s));
    if (!s) return;
    CHECK_OK(dp_stream_host_callback(s, slow_set_flag_cb, &flag));
    dp_stream_destroy(s);
    CHECK(DP_TEST_ATOMIC_LOAD(flag) == 1);
    /* an event recorded on a stream that is then destroyed still completes */
    flag = 0;
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_event_create(dev, &e));
    if (!s || !e) return;
    CHECK_OK(dp_stream_host_callback(s, slow_set_flag_cb, &flag));
    CHECK_OK(dp_event_record(e, s));
    dp_stream_destroy(s);
    CHECK_OK(dp_event_synchronize(e));
    {
        int32_t done = 0;
        CHECK_OK(dp_event_query(e, &done));
        CHECK(done == 1);
    }
    CHECK(flag == 1);
    dp_event_destroy(e);
}

static void test_stream_keeps_buffers_alive(dp_device_t *dev) {
    dp_stream_t *s = NULL;
    dp_buffer_t *b = NULL;
    unsigned char in[512], out[512];
    struct gate g;
    SECTION("enqueued work keeps its buffers alive");
    CHECK_OK(dp_stream_create(dev, &s));
    CHECK_OK(dp_buffer_allocate(dev, sizeof in, &b));
    if (!s || !b) return;
    dp_test_fill(in, sizeof in, 31);
    memset(out, 0, sizeof out);
    gate_init(&g);
    CHECK_OK(dp_stream_host_callback(s, gate_cb, &g));
    CHECK_OK(dp_stream_write(s, b, 0, in, sizeof in));
    CHECK_OK(dp_stream_read(s, b, 0, out, sizeof out));
    dp_buffer_release(b); /* our only reference; the stream holds its own */
    gate_open(&g);
    CHECK_OK(dp_stream_synchronize(s));
    CHECK(g.timed_out == 0);
    CHECK(memcmp(in, out, sizeof in) == 0);
    dp_stream_destroy(s);
}

static void test_many_streams(dp_device_t *dev) {
    dp_stream_t *s[16];
    int flags[16];
    int i;
    SECTION("16 streams at once");
    for (i = 0; i < 16; ++i) {
        s[i] = NULL;
        flags[i] = 0;
        CHECK_OK(dp_stream_create(dev, &s[i]));
    }
    for (i = 0; i < 16; ++i)
        if (s[i]) CHECK_OK(dp_stream_host_callback(s[i], set_flag_cb, &flags[i]));
    CHECK_OK(dp_device_synchronize(dev));
    for (i = 0; i < 16; ++i) CHECK(flags[i] == 1);
    for (i = 0; i < 16; ++i) dp_stream_destroy(s[i]);
}

static dp_status_t status_cb(void *user_data) {
    DP_TEST_ATOMIC_INC(((int *)user_data)[0]);
    return (dp_status_t)((int *)user_data)[1];
}

static void test_callback_with_status(dp_device_t *dev) {
    dp_stream_t *s = NULL, *ds = NULL;
    int ok[2] = {0, DP_OK}, bad[2] = {0, DP_UNAVAILABLE}, odd[2] = {0, 12345};
    SECTION("a host callback's failure is reported by the next synchronize");
    CHECK_OK(dp_stream_create(dev, &s));
    if (s == NULL) return;
    CHECK_OK(dp_stream_host_callback_with_status(s, status_cb, ok));
    CHECK_OK(dp_stream_host_callback_with_status(s, status_cb, bad)); /* enqueued fine */
    CHECK_OK(dp_stream_host_callback_with_status(s, status_cb, ok));  /* still runs after it */
    CHECK_STATUS_MSG(dp_stream_synchronize(s), DP_UNAVAILABLE, "a host callback returned UNAVAILABLE");
    CHECK(ok[0] == 2 && bad[0] == 1);
    CHECK_OK(dp_stream_synchronize(s)); /* reported once */
    /* The device's synchronize reports it too, and a status that is none is INTERNAL. */
    CHECK_OK(dp_stream_host_callback_with_status(s, status_cb, odd));
    CHECK_STATUS_MSG(dp_device_synchronize(dev), DP_INTERNAL, "12345");
    CHECK(odd[0] == 1);
    CHECK_OK(dp_stream_synchronize(s));
    /* On the CPU's default stream the callback runs inline: the call returns its status. */
    CHECK_OK(dp_device_default_stream(dev, &ds));
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(ds, status_cb, bad), DP_UNAVAILABLE, "UNAVAILABLE");
    CHECK(bad[0] == 2);
    CHECK_OK(dp_stream_synchronize(ds));
    /* An event recorded after the failure is marked failed once the stream gets there (query
     * and synchronize return the failure; one recorded before is fine); the stream still
     * reports it once, and the event is fine once recorded again. */
    {
        dp_event_t *before = NULL, *after = NULL;
        int done = -1;
        CHECK_OK(dp_event_create(dev, &before));
        CHECK_OK(dp_event_create(dev, &after));
        if (before && after) {
            CHECK_OK(dp_event_record(before, s));
            CHECK_OK(dp_stream_host_callback_with_status(s, status_cb, bad));
            CHECK_OK(dp_event_record(after, s));
            CHECK_STATUS_MSG(dp_event_synchronize(after), DP_UNAVAILABLE, "before the record failed");
            CHECK_STATUS_MSG(dp_event_query(after, &done), DP_UNAVAILABLE, "UNAVAILABLE");
            CHECK(done == -1); /* nothing written */
            CHECK_OK(dp_event_synchronize(before));
            CHECK_OK(dp_event_query(before, &done));
            CHECK(done == 1);
            CHECK_STATUS_MSG(dp_stream_synchronize(s), DP_UNAVAILABLE, "a host callback returned UNAVAILABLE");
            CHECK_OK(dp_stream_synchronize(s));
            CHECK_STATUS(dp_event_synchronize(after), DP_UNAVAILABLE);
            CHECK_OK(dp_event_record(after, s));
            CHECK_OK(dp_event_synchronize(after));
        }
        dp_event_destroy(before);
        dp_event_destroy(after);
    }
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(s, NULL, ok), DP_INVALID_ARGUMENT, "fn");
    CHECK_STATUS_MSG(dp_stream_host_callback_with_status(NULL, status_cb, ok), DP_INVALID_ARGUMENT, "stream");
    dp_stream_destroy(s);
}

int main(void) {
    dp_runtime_t *rt;
    dp_device_t *d0, *d1;
    dp_test_watchdog(120);
    rt = dp_test_runtime(2, 0);
    d0 = dp_test_device(rt, 0);
    d1 = dp_test_device(rt, 1);
    test_default_stream(d0);
    test_stream_ops(d0, d1);
    test_stream_ops(d1, d0);
    test_callback_order(d0);
    test_events(d0);
    test_events(d1);
    test_event_timing(d0, d1);
    test_wait_stream(d1);
    test_cross_device_event(d0, d1);
    test_stream_copy_across_devices(d0, d1);
    test_destroy_awaited_event(d1);
    test_destroy_waits(d0);
    test_stream_keeps_buffers_alive(d1);
    test_many_streams(d0);
    test_callback_with_status(d1);
    CHECK_OK(dp_runtime_synchronize(rt));
    dp_event_destroy(NULL);
    dp_stream_destroy(NULL);
    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
