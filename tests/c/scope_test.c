/* Device scopes and device setters through the C API:
 *   - no scope: an op without a device runs on CPU:0 (reason "default");
 *   - device scopes nest (the innermost decides, reason "scope"), a device in the run options
 *     wins over them, exiting restores the scope around;
 *   - a setter sees the op's name, type and kind, places what it has an opinion on (reason
 *     "setter") and leaves the rest to the scopes around it; a failing setter fails the op
 *     with its status; a setter choosing another runtime's device or a non-device is refused;
 *   - a captured context is re-entered inside another scope and on another thread and places
 *     ops as where it was captured; captured with no scope entered it restores the default;
 *   - the setter's drop function runs exactly once (after destroy; at once when creation fails);
 *   - bad input: NULL everywhere, wrong-kind and destroyed handles, another runtime's device,
 *     exiting a scope that is not the innermost or not entered (DP_FAILED_PRECONDITION, nothing
 *     changes), destroying a scope still entered (not destroyed: it can still be exited). */
#include "dp_test.h"

#include <pthread.h>

static dp_runtime_t *rt;
static dp_device_t *cpu[3];
static dp_op_t *add_op, *matmul_op;
static char last_reason[64], last_device[64];

static void on_placement(const dp_placement_event_t *e, void *user) {
    (void)user;
    if (strcmp(e->reason, "input copied") == 0) return;
    snprintf(last_reason, sizeof last_reason, "%s", e->reason);
    snprintf(last_device, sizeof last_device, "%s", e->device);
}

/* Runs `op` on two 1x1 f32 tensors on CPU:0 with no device named (or `device`); returns the
 * output's device (NULL on failure, with the status in *st). */
static dp_device_t *run_on(dp_runtime_t *r, dp_device_t *input_dev, dp_op_t *op, dp_device_t *device,
                           dp_status_t *st) {
    int64_t shape[2] = {1, 1};
    float v = 3.0f;
    dp_tensor_t *x = NULL, *out = NULL;
    dp_run_options_t o;
    dp_device_t *where = NULL;
    last_reason[0] = last_device[0] = '\0';
    CHECK_OK(dp_tensor_create(input_dev, DP_DTYPE_F32, shape, 2, &v, sizeof v, &x));
    dp_run_options_init(&o, sizeof o);
    o.device = device;
    {
        dp_tensor_t *ins[2] = {x, x};
        *st = dp_op_run(r, op, ins, 2, NULL, &o, &out, 1, NULL);
    }
    if (*st == DP_OK) {
        where = dp_tensor_device(out);
        dp_tensor_release(out);
    }
    dp_tensor_release(x);
    return where;
}

static dp_device_t *run(dp_op_t *op) {
    dp_status_t st;
    dp_device_t *d = run_on(rt, cpu[0], op, NULL, &st);
    CHECK_OK(st);
    return d;
}

/* ---- setters ---------------------------------------------------------------------------- */

typedef struct setter_state {
    int calls, drops;
    int saw_bad_query;
    dp_device_t *matmul_to; /* where MatMul goes; everything else: no opinion */
    dp_status_t fail_with;  /* DP_OK: decide */
    dp_device_t *answer;    /* when set, the answer for every op (even a bogus one) */
} setter_state;

static dp_status_t setter(const dp_placement_query_t *q, void *user, dp_device_t **out) {
    setter_state *s = (setter_state *)user;
    s->calls++;
    if (q == NULL || q->struct_size < sizeof(dp_placement_query_t) || q->kind != DP_OP_KIND_COMPUTE ||
        q->name == NULL || q->op == NULL || strcmp(q->name, q->op) != 0 || *out != NULL) {
        s->saw_bad_query = 1;
    }
    if (s->fail_with != DP_OK) return s->fail_with;
    if (s->answer != NULL) {
        *out = s->answer;
    } else if (strcmp(q->op, "MatMul") == 0) {
        *out = s->matmul_to;
    }
    return DP_OK;
}

static void setter_drop(void *user) { ((setter_state *)user)->drops++; }

/* ---- capture on another thread ------------------------------------------------------------ */

typedef struct thread_arg {
    dp_scope_t *captured;
    dp_device_t *seen;
    dp_status_t st;
} thread_arg;

static void *in_thread(void *p) {
    thread_arg *a = (thread_arg *)p;
    a->st = dp_scope_enter(a->captured);
    if (a->st == DP_OK) {
        dp_status_t st;
        a->seen = run_on(rt, cpu[0], add_op, NULL, &st);
        if (st != DP_OK) a->st = st;
        if (dp_scope_exit(a->captured) != DP_OK) a->st = DP_INTERNAL;
    }
    return NULL;
}

int main(void) {
    dp_runtime_options_t ro;
    dp_scope_t *s1 = NULL, *s2 = NULL, *ss = NULL, *cap = NULL, *empty = NULL, *bad = NULL;
    dp_runtime_t *other = NULL;
    dp_device_t *other_cpu = NULL;
    dp_stream_t *stream = NULL;
    setter_state st_state;
    dp_status_t st;
    int i;

    dp_runtime_options_init(&ro, sizeof ro);
    ro.cpu_device_count = 3;
    CHECK_OK(dp_runtime_create(&ro, &rt));
    for (i = 0; i < 3; ++i) {
        char spec[16];
        snprintf(spec, sizeof spec, "CPU:%d", i);
        CHECK_OK(dp_runtime_find_device(rt, spec, &cpu[i]));
    }
    CHECK_OK(dp_runtime_find_op(rt, "Add", &add_op));
    CHECK_OK(dp_runtime_find_op(rt, "MatMul", &matmul_op));
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_placement, NULL, NULL));
    CHECK_OK(dp_runtime_create(NULL, &other));
    CHECK_OK(dp_runtime_find_device(other, "CPU:0", &other_cpu));

    SECTION("no scope: the default device");
    CHECK(run(add_op) == cpu[0]);
    CHECK_STR(last_reason, "default");

    SECTION("device scopes nest; a device in the run options wins");
    CHECK_OK(dp_scope_create_device(rt, cpu[1], &s1));
    CHECK_OK(dp_scope_create_device(rt, cpu[2], &s2));
    CHECK_OK(dp_scope_enter(s1));
    CHECK(run(add_op) == cpu[1]);
    CHECK_STR(last_reason, "scope");
    CHECK_STR(last_device, "HOST:1");
    CHECK_OK(dp_scope_enter(s2));
    CHECK(run(add_op) == cpu[2]);
    CHECK(run_on(rt, cpu[0], add_op, cpu[0], &st) == cpu[0]);
    CHECK_OK(st);
    CHECK_STR(last_reason, "explicit");
    /* Exiting the outer one first is refused, and nothing changes. */
    dp_test_set_marker_runtime(rt);
    CHECK_STATUS_MSG(dp_scope_exit(s1), DP_FAILED_PRECONDITION, "innermost");
    dp_test_set_marker_runtime(NULL);
    CHECK(run(add_op) == cpu[2]);
    CHECK_OK(dp_scope_exit(s2));
    CHECK(run(add_op) == cpu[1]);
    CHECK_OK(dp_scope_exit(s1));
    CHECK(run(add_op) == cpu[0]);
    CHECK_STR(last_reason, "default");
    CHECK_STATUS_MSG(dp_scope_exit(s1), DP_FAILED_PRECONDITION, "not entered");

    SECTION("a scope of one runtime does not place another runtime's ops");
    {
        dp_op_t *other_add = NULL;
        CHECK_OK(dp_runtime_find_op(other, "Add", &other_add));
        CHECK_OK(dp_scope_enter(s1));
        CHECK(run_on(other, other_cpu, other_add, NULL, &st) == other_cpu);
        CHECK_OK(st);
        CHECK_OK(dp_scope_exit(s1));
    }

    SECTION("a setter places what it has an opinion on");
    memset(&st_state, 0, sizeof st_state);
    st_state.matmul_to = cpu[2];
    CHECK_OK(dp_scope_create_setter(rt, setter, &st_state, setter_drop, &ss));
    CHECK_OK(dp_scope_enter(s1));
    CHECK_OK(dp_scope_enter(ss));
    CHECK(run(matmul_op) == cpu[2]);
    CHECK_STR(last_reason, "setter");
    CHECK(run(add_op) == cpu[1]); /* no opinion: the scope around decides */
    CHECK_STR(last_reason, "scope");
    CHECK(st_state.calls == 2);
    CHECK(!st_state.saw_bad_query);

    SECTION("a failing setter fails the op with its status");
    st_state.fail_with = DP_UNAVAILABLE;
    CHECK(run_on(rt, cpu[0], add_op, NULL, &st) == NULL);
    CHECK(st == DP_UNAVAILABLE);
    CHECK(strstr(dp_last_error_message(), "device setter failed") != NULL);
    /* the status is the code the call returns: the message does not say it again */
    CHECKF(strstr(dp_last_error_message(), "UNAVAILABLE") == NULL &&
               strstr(dp_last_error_message(), "14") == NULL,
           "the setter's status is repeated in '%s'", dp_last_error_message());
    SECTION("a setter returning a value that is not a status fails the op with DP_UNKNOWN, naming it");
    st_state.fail_with = 42;
    CHECK(run_on(rt, cpu[0], add_op, NULL, &st) == NULL);
    CHECK(st == DP_UNKNOWN);
    CHECKF(strstr(dp_last_error_message(), "device setter failed: it returned 42, which is not a status code") != NULL,
           "message '%s'", dp_last_error_message());
    st_state.fail_with = DP_OK;

    SECTION("a setter choosing another runtime's device, or no device at all, is refused");
    st_state.answer = other_cpu;
    CHECK(run_on(rt, cpu[0], add_op, NULL, &st) == NULL);
    CHECK(st == DP_INVALID_ARGUMENT);
    CHECK(strstr(dp_last_error_message(), "another runtime") != NULL);
    CHECK_OK(dp_stream_create(cpu[0], &stream));
    st_state.answer = (dp_device_t *)(void *)stream; /* a stream handle, not a device */
    CHECK(run_on(rt, cpu[0], add_op, NULL, &st) == NULL);
    CHECK(st == DP_INVALID_ARGUMENT);
    CHECK(strstr(dp_last_error_message(), "out_device") != NULL);
    st_state.answer = NULL;

    SECTION("capture, and re-enter inside another scope and on another thread");
    CHECK_OK(dp_scope_capture(rt, &cap)); /* s1 > setter */
    CHECK_OK(dp_scope_exit(ss));
    CHECK_OK(dp_scope_exit(s1));
    CHECK_OK(dp_scope_enter(s2));
    CHECK_OK(dp_scope_enter(cap));
    CHECK(run(add_op) == cpu[1]);   /* the captured s1, not the s2 around */
    CHECK(run(matmul_op) == cpu[2]); /* the captured setter */
    CHECK_OK(dp_scope_exit(cap));
    CHECK(run(add_op) == cpu[2]);
    CHECK_OK(dp_scope_exit(s2));
    {
        pthread_t th;
        thread_arg a;
        memset(&a, 0, sizeof a);
        a.captured = cap;
        CHECK(pthread_create(&th, NULL, in_thread, &a) == 0);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK_OK(a.st);
        CHECK(a.seen == cpu[1]);
    }
    CHECK_OK(dp_scope_capture(rt, &empty)); /* nothing entered */
    CHECK_OK(dp_scope_enter(s2));
    CHECK_OK(dp_scope_enter(empty));
    CHECK(run(add_op) == cpu[0]);
    CHECK_STR(last_reason, "default");
    CHECK_OK(dp_scope_exit(empty));
    CHECK_OK(dp_scope_exit(s2));

    SECTION("destroy: refused while entered; the setter's drop runs once");
    CHECK_OK(dp_scope_enter(s1));
    dp_scope_destroy(s1); /* still entered: not destroyed */
    CHECK(run(add_op) == cpu[1]);
    CHECK_OK(dp_scope_exit(s1));
    dp_scope_destroy(s1);
    dp_scope_destroy(ss);
    CHECK(st_state.drops == 0); /* the captured scope still holds the setter */
    dp_scope_destroy(cap);
    CHECK(st_state.drops == 1);
    dp_scope_destroy(s2);
    dp_scope_destroy(empty);
    dp_scope_destroy(NULL);
    {
        setter_state s;
        memset(&s, 0, sizeof s);
        CHECK_STATUS(dp_scope_create_setter(rt, setter, &s, setter_drop, NULL), DP_INVALID_ARGUMENT);
        CHECK(s.drops == 1);
        CHECK_STATUS_MSG(dp_scope_create_setter(rt, NULL, &s, setter_drop, &bad), DP_INVALID_ARGUMENT, "setter");
        CHECK(s.drops == 2);
        CHECK(bad == NULL);
    }

    SECTION("bad input");
    dp_test_set_marker_runtime(rt);
    bad = SENTINEL(dp_scope_t);
    CHECK_STATUS_MSG(dp_scope_create_device(NULL, cpu[0], &bad), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_scope_create_device(rt, NULL, &bad), DP_INVALID_ARGUMENT, "device");
    CHECK_STATUS_MSG(dp_scope_create_device(rt, cpu[0], NULL), DP_INVALID_ARGUMENT, "out_scope");
    CHECK_STATUS_MSG(dp_scope_create_device(rt, other_cpu, &bad), DP_INVALID_ARGUMENT, "another runtime");
    CHECK_STATUS_MSG(dp_scope_create_device(rt, (dp_device_t *)(void *)stream, &bad), DP_INVALID_ARGUMENT,
                     "device");
    CHECK_STATUS_MSG(dp_scope_create_device((dp_runtime_t *)(void *)stream, cpu[0], &bad), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_scope_create_setter(NULL, setter, NULL, NULL, &bad), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_scope_create_setter(rt, setter, NULL, NULL, NULL), DP_INVALID_ARGUMENT, "out_scope");
    CHECK_STATUS_MSG(dp_scope_capture(NULL, &bad), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_scope_capture(rt, NULL), DP_INVALID_ARGUMENT, "out_scope");
    CHECK(bad == SENTINEL(dp_scope_t));
    CHECK_STATUS_MSG(dp_scope_enter(NULL), DP_INVALID_ARGUMENT, "scope");
    CHECK_STATUS_MSG(dp_scope_exit(NULL), DP_INVALID_ARGUMENT, "scope");
    CHECK_STATUS_MSG(dp_scope_enter((dp_scope_t *)(void *)stream), DP_INVALID_ARGUMENT, "scope");
    CHECK_STATUS_MSG(dp_scope_exit((dp_scope_t *)(void *)stream), DP_INVALID_ARGUMENT, "scope");
    CHECK_STATUS_MSG(dp_scope_enter(s1), DP_INVALID_ARGUMENT, "destroyed"); /* destroyed above */
    CHECK_STATUS_MSG(dp_scope_exit(s1), DP_INVALID_ARGUMENT, "destroyed");
    /* Destroying a handle of another kind, or one destroyed before, does nothing. */
    dp_scope_destroy((dp_scope_t *)(void *)stream);
    dp_scope_destroy(s1);
    CHECK_OK(dp_stream_synchronize(stream));
    dp_test_set_marker_runtime(NULL);
    CHECK(run(add_op) == cpu[0]); /* nothing was left entered */

    dp_stream_destroy(stream);
    dp_runtime_destroy(other);
    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
