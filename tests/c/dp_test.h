/* Tiny assertion helpers for devplug's C tests. Valid C99 and C++ (every test is compiled as
 * both). Include this header first in a test: it asks for POSIX declarations (alarm).
 *
 *   CHECK(cond)                        a plain assertion
 *   CHECK_OK(call)                     call returns DP_OK; otherwise prints the status name and
 *                                      dp_last_error_message()
 *   CHECK_STATUS(call, expected)       call returns `expected`, and the thread's last error
 *                                      message is non-empty (and, when a marker runtime is set,
 *                                      was written by this very call)
 *   CHECK_STATUS_MSG(call, exp, "a|b") as CHECK_STATUS, and the message contains one of the
 *                                      '|'-separated words (case-insensitive)
 *   CHECK_STR(a, b)                    two C strings are equal (NULL-safe)
 *   SECTION("name")                    prints a progress line (so a crash shows where it was)
 *   DP_TEST_SUMMARY()                  prints "N passed, M failed"; returns the exit code
 *
 * Counters are updated atomically, so checks may run on several threads at once.
 *
 * The marker: a test that calls dp_test_set_marker_runtime(rt) makes every CHECK_STATUS first
 * provoke a known, unique failure on `rt` (dp_runtime_find_device with a malformed spec) and then
 * verify that the call under test replaced that message. Since successful calls never clear the
 * message, this is the only way to tell "this call wrote a message" from "an earlier one did".
 * Use it from one thread only. */
#ifndef DP_TEST_H
#define DP_TEST_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <time.h>
#include <unistd.h>
#define DP_TEST_HAVE_ALARM 1
#endif

#include <devplug/devplug.h>

#if defined(__GNUC__) || defined(__clang__)
#define DP_TEST_ATOMIC_INC(x) ((void)__sync_fetch_and_add(&(x), 1))
#define DP_TEST_ATOMIC_LOAD(x) (__sync_fetch_and_add(&(x), 0))
#else
#define DP_TEST_ATOMIC_INC(x) ((void)++(x))
#define DP_TEST_ATOMIC_LOAD(x) (x)
#endif

static int dp_test_passed_ = 0;
static int dp_test_failed_ = 0;
static const dp_runtime_t *dp_test_marker_rt_ = NULL;
static int dp_test_marker_seq_ = 0;
static char dp_test_marker_msg_[512];
static int dp_test_marker_valid_ = 0;

/* A value that no out-parameter should ever receive; used to prove "not written on failure". */
#define DP_TEST_SENTINEL_BITS ((uintptr_t)0x5E5E5E50u)
#define SENTINEL(T) ((T *)DP_TEST_SENTINEL_BITS)

static inline void dp_test_pass_(void) { DP_TEST_ATOMIC_INC(dp_test_passed_); }

static inline void dp_test_fail_(const char *file, int line, const char *what) {
    DP_TEST_ATOMIC_INC(dp_test_failed_);
    fprintf(stdout, "FAIL %s:%d: %s\n", file, line, what);
    fflush(stdout);
}

/* Copies the current last-error message (it is only valid until the next devplug call). */
static inline void dp_test_copy_message_(char *dst, size_t cap) {
    const char *m = dp_last_error_message();
    if (m == NULL) {
        snprintf(dst, cap, "<dp_last_error_message() returned NULL>");
    } else {
        snprintf(dst, cap, "%s", m);
    }
}

static inline int dp_test_contains_ci_(const char *hay, const char *needle, size_t nlen) {
    size_t i, j;
    if (nlen == 0) return 1;
    for (i = 0; hay[i] != '\0'; ++i) {
        for (j = 0; j < nlen; ++j) {
            if (hay[i + j] == '\0') return 0;
            if (tolower((unsigned char)hay[i + j]) != tolower((unsigned char)needle[j])) break;
        }
        if (j == nlen) return 1;
    }
    return 0;
}

/* 1 if `msg` contains one of the '|'-separated alternatives in `words` (case-insensitive). */
static inline int dp_test_message_matches_(const char *msg, const char *words) {
    const char *p = words;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (dp_test_contains_ci_(msg, p, n)) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

static inline void dp_test_stamp_(void);

/* Sets (or, with NULL, clears) the marker runtime; checks that the marker works. */
static inline void dp_test_set_marker_runtime(const dp_runtime_t *rt) {
    dp_test_marker_rt_ = rt;
    if (rt == NULL) return;
    dp_test_stamp_();
    if (dp_test_marker_valid_ && dp_test_marker_msg_[0] != '\0') {
        dp_test_pass_();
    } else {
        dp_test_fail_(__FILE__, __LINE__,
                      "the marker (dp_runtime_find_device with a malformed spec) set no message; "
                      "CHECK_STATUS cannot tell whether a call wrote its own message");
    }
}

/* Writes a fresh, unique message into the thread's last error (see the header comment). */
static inline void dp_test_stamp_(void) {
    char spec[64];
    dp_device_t *dev = NULL;
    dp_status_t st;
    dp_test_marker_valid_ = 0;
    if (dp_test_marker_rt_ == NULL) return;
    snprintf(spec, sizeof spec, "?dp_test_marker_%d", ++dp_test_marker_seq_);
    st = dp_runtime_find_device(dp_test_marker_rt_, spec, &dev);
    if (st == DP_OK) return; /* cannot happen for a malformed spec; then no stamp */
    dp_test_copy_message_(dp_test_marker_msg_, sizeof dp_test_marker_msg_);
    dp_test_marker_valid_ = 1;
}

static inline void dp_test_check_ok_(dp_status_t st, const char *expr, const char *file, int line) {
    char msg[512];
    char what[1024];
    if (st == DP_OK) {
        dp_test_pass_();
        return;
    }
    dp_test_copy_message_(msg, sizeof msg); /* before any other devplug call */
    snprintf(what, sizeof what, "%s -> %s (%d): \"%s\"", expr, dp_status_str(st), (int)st, msg);
    dp_test_fail_(file, line, what);
}

static inline void dp_test_check_status_(dp_status_t st, dp_status_t expected, const char *words,
                                         const char *expr, const char *file, int line) {
    char msg[512];
    char what[1400];
    const char *got_name, *exp_name;
    int stamped = dp_test_marker_valid_;
    dp_test_copy_message_(msg, sizeof msg); /* before any other devplug call */
    got_name = dp_status_str(st);
    exp_name = dp_status_str(expected);
    if (st != expected) {
        snprintf(what, sizeof what, "%s -> %s (%d), expected %s (%d); message \"%s\"", expr,
                 got_name ? got_name : "?", (int)st, exp_name ? exp_name : "?", (int)expected, msg);
        dp_test_fail_(file, line, what);
        return;
    }
    if (msg[0] == '\0') {
        snprintf(what, sizeof what, "%s -> %s as expected, but dp_last_error_message() is empty",
                 expr, got_name ? got_name : "?");
        dp_test_fail_(file, line, what);
        return;
    }
    if (stamped && strcmp(msg, dp_test_marker_msg_) == 0) {
        snprintf(what, sizeof what,
                 "%s -> %s as expected, but it did not set dp_last_error_message() (still the "
                 "previous call's \"%s\")",
                 expr, got_name ? got_name : "?", msg);
        dp_test_fail_(file, line, what);
        return;
    }
    if (words != NULL && !dp_test_message_matches_(msg, words)) {
        snprintf(what, sizeof what, "%s -> %s as expected, but the message \"%s\" names none of [%s]",
                 expr, got_name ? got_name : "?", msg, words);
        dp_test_fail_(file, line, what);
        return;
    }
    dp_test_pass_();
}

static inline void dp_test_check_str_(const char *a, const char *b, const char *ea, const char *eb,
                                      const char *file, int line) {
    char what[768];
    if ((a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0)) {
        dp_test_pass_();
        return;
    }
    snprintf(what, sizeof what, "%s == %s: \"%s\" vs \"%s\"", ea, eb, a ? a : "(null)",
             b ? b : "(null)");
    dp_test_fail_(file, line, what);
}

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) dp_test_pass_();                                                    \
        else dp_test_fail_(__FILE__, __LINE__, #cond);                                \
    } while (0)

/* CHECK with a printf-style explanation on failure. */
#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        if (cond) {                                                                   \
            dp_test_pass_();                                                          \
        } else {                                                                      \
            char dp_test_why_[2048];                                                   \
            snprintf(dp_test_why_, sizeof dp_test_why_, __VA_ARGS__);                 \
            dp_test_fail_(__FILE__, __LINE__, dp_test_why_);                          \
        }                                                                             \
    } while (0)

#define CHECK_OK(call) dp_test_check_ok_((call), #call, __FILE__, __LINE__)

#define CHECK_STATUS(call, expected)                                                  \
    do {                                                                              \
        dp_status_t dp_test_st_;                                                      \
        dp_test_stamp_();                                                             \
        dp_test_st_ = (call);                                                         \
        dp_test_check_status_(dp_test_st_, (expected), NULL, #call, __FILE__, __LINE__); \
    } while (0)

#define CHECK_STATUS_MSG(call, expected, words)                                       \
    do {                                                                              \
        dp_status_t dp_test_st_;                                                      \
        dp_test_stamp_();                                                             \
        dp_test_st_ = (call);                                                         \
        dp_test_check_status_(dp_test_st_, (expected), (words), #call, __FILE__, __LINE__); \
    } while (0)

#define CHECK_STR(a, b) dp_test_check_str_((a), (b), #a, #b, __FILE__, __LINE__)

/* The out-parameter still holds SENTINEL(T). */
#define CHECK_UNTOUCHED(T, p) CHECKF((p) == SENTINEL(T), "%s was written on failure", #p)

#define SECTION(name)                                                                 \
    do {                                                                              \
        fprintf(stdout, "-- %s\n", (name));                                           \
        fflush(stdout);                                                               \
    } while (0)

/* Kills a hung test after `seconds` (SIGALRM's default action), instead of hanging ctest. */
static inline void dp_test_watchdog(unsigned seconds) {
#ifdef DP_TEST_HAVE_ALARM
    alarm(seconds);
#else
    (void)seconds;
#endif
}

/* Sleeps about `ms` milliseconds (used to make ordering bugs visible, never to time things). */
static inline void dp_test_sleep_ms(int ms) {
#ifdef DP_TEST_HAVE_ALARM
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
#else
    (void)ms;
#endif
}

static inline int dp_test_summary_(const char *name) {
    int passed = DP_TEST_ATOMIC_LOAD(dp_test_passed_);
    int failed = DP_TEST_ATOMIC_LOAD(dp_test_failed_);
    fprintf(stdout, "%s: %d passed, %d failed\n", name, passed, failed);
    fflush(stdout);
    return failed == 0 && passed > 0 ? 0 : 1;
}

#define DP_TEST_SUMMARY() dp_test_summary_(__FILE__)

/* ---- small shared fixtures ---- */

/* Fills `p[0..n)` with a pattern that depends on `seed` and on the position. */
static inline void dp_test_fill(void *p, size_t n, unsigned seed) {
    unsigned char *b = (unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i) b[i] = (unsigned char)((i * 131u + seed * 29u + (i >> 8)) & 0xffu);
}

/* 1 if bytes [from, to) of the object at p all equal v (to prove "not written"). */
static inline int dp_test_bytes_are(const void *p, size_t from, size_t to, unsigned char v) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = from; i < to; ++i)
        if (b[i] != v) return 0;
    return 1;
}

/* Index of the first byte of p[0..n) that differs from the pattern, or n if none. */
static inline size_t dp_test_pattern_mismatch(const void *p, size_t n, unsigned seed) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i)
        if (b[i] != (unsigned char)((i * 131u + seed * 29u + (i >> 8)) & 0xffu)) return i;
    return n;
}

/* A runtime with `cpu_devices` CPU devices (and an optional per-device memory limit), and no
 * plugins but those the test loads (DEVPLUG_PLUGIN_PATH is not read). */
static inline dp_runtime_t *dp_test_runtime(uint32_t cpu_devices, uint64_t limit) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    dp_status_t st;
    dp_runtime_options_init(&o, sizeof o);
    o.cpu_device_count = cpu_devices;
    o.cpu_memory_limit = limit;
    o.discover_plugins = 0;
    st = dp_runtime_create(&o, &rt);
    if (st != DP_OK || rt == NULL) {
        char msg[512];
        dp_test_copy_message_(msg, sizeof msg);
        fprintf(stdout, "FATAL: dp_runtime_create(%u devices) -> %d: %s\n", (unsigned)cpu_devices,
                (int)st, msg);
        fflush(stdout);
        exit(2);
    }
    return rt;
}

static inline dp_device_t *dp_test_device(const dp_runtime_t *rt, size_t index) {
    dp_device_t *d = NULL;
    dp_status_t st = dp_runtime_device(rt, index, &d);
    if (st != DP_OK || d == NULL) {
        char msg[512];
        dp_test_copy_message_(msg, sizeof msg);
        fprintf(stdout, "FATAL: dp_runtime_device(%u) -> %d: %s\n", (unsigned)index, (int)st, msg);
        fflush(stdout);
        exit(2);
    }
    return d;
}

/* ---- the fixture of the bad-argument tests ---- */

#define DP_TEST_BUF 64 /* bytes in each fixture buffer */

/* Live objects of every kind, on two devices, with known contents. */
typedef struct dp_test_fixture {
    dp_runtime_t *rt;
    dp_device_t *d0, *d1;
    dp_stream_t *s0, *s1; /* created streams on CPU:0 and CPU:1 */
    dp_event_t *e0, *e1;  /* events of CPU:0 and CPU:1 */
    dp_buffer_t *b0, *b1; /* DP_TEST_BUF bytes on CPU:0 / CPU:1, pattern seeds 1 / 2 */
    dp_tensor_t *t0;      /* f32 [2,3] = {0,1,2,3,4,5} on CPU:0 */
} dp_test_fixture;

static const int64_t dp_test_t0_shape[2] = {2, 3};
static const float dp_test_t0_data[6] = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};

static inline void dp_test_fatal_(const char *what, dp_status_t st) {
    char msg[512];
    dp_test_copy_message_(msg, sizeof msg);
    fprintf(stdout, "FATAL: %s -> %d: %s\n", what, (int)st, msg);
    fflush(stdout);
    exit(2);
}

#define DP_TEST_MUST(call)                                                            \
    do {                                                                              \
        dp_status_t dp_test_must_st_ = (call);                                        \
        if (dp_test_must_st_ != DP_OK) dp_test_fatal_(#call, dp_test_must_st_);       \
    } while (0)

static inline void dp_test_fixture_setup(dp_test_fixture *fx) {
    unsigned char pat[DP_TEST_BUF];
    fx->rt = dp_test_runtime(2, 0);
    fx->d0 = dp_test_device(fx->rt, 0);
    fx->d1 = dp_test_device(fx->rt, 1);
    DP_TEST_MUST(dp_stream_create(fx->d0, &fx->s0));
    DP_TEST_MUST(dp_stream_create(fx->d1, &fx->s1));
    DP_TEST_MUST(dp_event_create(fx->d0, &fx->e0));
    DP_TEST_MUST(dp_event_create(fx->d1, &fx->e1));
    DP_TEST_MUST(dp_buffer_allocate(fx->d0, DP_TEST_BUF, &fx->b0));
    DP_TEST_MUST(dp_buffer_allocate(fx->d1, DP_TEST_BUF, &fx->b1));
    dp_test_fill(pat, DP_TEST_BUF, 1);
    DP_TEST_MUST(dp_buffer_write(fx->b0, 0, pat, DP_TEST_BUF));
    dp_test_fill(pat, DP_TEST_BUF, 2);
    DP_TEST_MUST(dp_buffer_write(fx->b1, 0, pat, DP_TEST_BUF));
    DP_TEST_MUST(dp_tensor_create(fx->d0, DP_DTYPE_F32, dp_test_t0_shape, 2, dp_test_t0_data,
                                  sizeof dp_test_t0_data, &fx->t0));
}

/* Every fixture object still works and holds its contents: failed calls changed nothing. */
static inline void dp_test_fixture_check_intact(dp_test_fixture *fx) {
    unsigned char got[DP_TEST_BUF];
    float t[6];
    int32_t done = -1;
    SECTION("fixture intact after the bad calls");
    CHECK_OK(dp_stream_synchronize(fx->s0));
    CHECK_OK(dp_stream_synchronize(fx->s1));
    CHECK(dp_buffer_size(fx->b0) == DP_TEST_BUF);
    CHECK(dp_buffer_size(fx->b1) == DP_TEST_BUF);
    memset(got, 0, sizeof got);
    CHECK_OK(dp_buffer_read(fx->b0, 0, got, DP_TEST_BUF));
    CHECKF(dp_test_pattern_mismatch(got, DP_TEST_BUF, 1) == DP_TEST_BUF,
           "buffer b0 changed at byte %u", (unsigned)dp_test_pattern_mismatch(got, DP_TEST_BUF, 1));
    memset(got, 0, sizeof got);
    CHECK_OK(dp_buffer_read(fx->b1, 0, got, DP_TEST_BUF));
    CHECKF(dp_test_pattern_mismatch(got, DP_TEST_BUF, 2) == DP_TEST_BUF,
           "buffer b1 changed at byte %u", (unsigned)dp_test_pattern_mismatch(got, DP_TEST_BUF, 2));
    CHECK(dp_tensor_dtype(fx->t0) == DP_DTYPE_F32);
    CHECK(dp_tensor_num_elements(fx->t0) == 6);
    memset(t, 0, sizeof t);
    CHECK_OK(dp_tensor_read(fx->t0, t, sizeof t));
    CHECK(memcmp(t, dp_test_t0_data, sizeof t) == 0);
    CHECK_OK(dp_event_record(fx->e0, fx->s0));
    CHECK_OK(dp_event_synchronize(fx->e0));
    CHECK_OK(dp_event_query(fx->e0, &done));
    CHECK(done == 1);
    CHECK_OK(dp_event_record(fx->e1, fx->s1));
    CHECK_OK(dp_event_synchronize(fx->e1));
    CHECK(dp_stream_device(fx->s0) == fx->d0);
    CHECK(dp_stream_device(fx->s1) == fx->d1);
    CHECK_STR(dp_device_name(fx->d0), "CPU:0");
    CHECK_STR(dp_device_name(fx->d1), "CPU:1");
}

static inline void dp_test_fixture_teardown(dp_test_fixture *fx) {
    dp_tensor_release(fx->t0);
    dp_buffer_release(fx->b0);
    dp_buffer_release(fx->b1);
    dp_event_destroy(fx->e0);
    dp_event_destroy(fx->e1);
    dp_stream_destroy(fx->s0);
    dp_stream_destroy(fx->s1);
    dp_runtime_destroy(fx->rt);
}

/* One complete good round trip on a runtime's first two devices: the runtime still works. */
static inline void dp_test_round_trip(dp_runtime_t *rt) {
    dp_device_t *d0 = NULL, *d1 = NULL;
    dp_stream_t *s = NULL;
    dp_event_t *e = NULL;
    dp_buffer_t *a = NULL, *b = NULL;
    dp_tensor_t *t = NULL, *c = NULL;
    unsigned char in[300], out[300];
    static const int64_t shape[1] = {3};
    const int32_t v[3] = {7, -8, 9};
    int32_t w[3] = {0, 0, 0};
    SECTION("good round trip");
    CHECK_OK(dp_runtime_find_device(rt, "CPU:0", &d0));
    CHECK_OK(dp_runtime_find_device(rt, "CPU:1", &d1));
    if (!d0 || !d1) return;
    CHECK_OK(dp_stream_create(d0, &s));
    CHECK_OK(dp_event_create(d0, &e));
    CHECK_OK(dp_buffer_allocate(d0, sizeof in, &a));
    CHECK_OK(dp_buffer_allocate(d1, sizeof in, &b));
    if (!s || !e || !a || !b) return;
    dp_test_fill(in, sizeof in, 77);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_stream_write(s, a, 0, in, sizeof in));
    CHECK_OK(dp_event_record(e, s));
    CHECK_OK(dp_event_synchronize(e));
    CHECK_OK(dp_buffer_copy(b, 0, a, 0, sizeof in));
    CHECK_OK(dp_buffer_read(b, 0, out, sizeof out));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_OK(dp_tensor_create(d0, DP_DTYPE_I32, shape, 1, v, sizeof v, &t));
    if (t) CHECK_OK(dp_tensor_copy_to(t, d1, &c));
    if (c) {
        CHECK_OK(dp_tensor_read(c, w, sizeof w));
        CHECK(w[0] == 7 && w[1] == -8 && w[2] == 9);
        CHECK(dp_tensor_device(c) == d1);
    }
    dp_tensor_release(c);
    dp_tensor_release(t);
    dp_buffer_release(a);
    dp_buffer_release(b);
    dp_event_destroy(e);
    dp_stream_destroy(s);
    CHECK_OK(dp_runtime_synchronize(rt));
}

#endif /* DP_TEST_H */
