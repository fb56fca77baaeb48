/* Eager ops through the C API, with good input and every value checked against a reference
 * computed here with plain C loops:
 *   - every basis op and composite, in each allowed dtype family: elementwise binary ops with
 *     broadcasting ([2,3]+[3], [2,1]+[1,3], rank-0 scalars), unary ops (f32/f64 with
 *     tolerances, Neg/Abs on integers), comparisons (-> bool), Select, Cast, MatMul (2-D,
 *     transposes, batched with broadcast batch dimensions), reductions (one, several, negative
 *     and empty axes, keep_dims), BroadcastTo, Reshape (-1), Transpose (perm, default reverse),
 *     Concat (axis 0/1/-1, three inputs), Slice (size -1), Fill, Iota, AddN, Relu, Softmax,
 *     LogSoftmax, Gelu; zero-sized dimensions and scalars;
 *   - Gemm (alpha, beta, transposes, broadcast c, fused ReLU);
 *   - the placement log: every op run on the CPU is reported with reason "default" (no device)
 *     or "explicit" (a device) and detail "kernel from built-in"; Gelu, the composite the CPU
 *     has no kernel for, with "decomposed";
 *     the callback's drop runs exactly once when it is replaced and when the runtime dies;
 *   - dispatch fallback with SIM loaded with kernels=0 (no native kernel at all): soft
 *     placement to the CPU ("soft-placed", output on the CPU), strict mode (DP_NOT_FOUND naming
 *     the op, the device, "strict" and where kernels exist), Softmax decomposed on SIM with its
 *     parts soft-placed; inputs living on another device are copied ("input copied");
 *   - SIM with its default kernels (whichever ops are native): the values are the same. */
#include "dp_test.h"

#include <math.h>

#define SIM_PATH DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------------------------
 * Shapes
 * ---------------------------------------------------------------------------------------- */

typedef struct shp {
    size_t rank;
    int64_t d[DP_MAX_RANK];
} shp;

static shp S0(void) {
    shp s;
    memset(&s, 0, sizeof s);
    return s;
}
static shp S1(int64_t a) {
    shp s = S0();
    s.rank = 1;
    s.d[0] = a;
    return s;
}
static shp S2(int64_t a, int64_t b) {
    shp s = S0();
    s.rank = 2;
    s.d[0] = a;
    s.d[1] = b;
    return s;
}
static shp S3(int64_t a, int64_t b, int64_t c) {
    shp s = S0();
    s.rank = 3;
    s.d[0] = a;
    s.d[1] = b;
    s.d[2] = c;
    return s;
}
static shp S4(int64_t a, int64_t b, int64_t c, int64_t d) {
    shp s = S0();
    s.rank = 4;
    s.d[0] = a;
    s.d[1] = b;
    s.d[2] = c;
    s.d[3] = d;
    return s;
}

static size_t numel(shp s) {
    size_t n = 1, i;
    for (i = 0; i < s.rank; ++i) n *= (size_t)s.d[i];
    return n;
}

static void shape_str(shp s, char *buf, size_t cap) {
    size_t i, used = 0;
    used += (size_t)snprintf(buf + used, cap - used, "[");
    for (i = 0; i < s.rank && used < cap; ++i)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "", (long long)s.d[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* NumPy broadcasting of two shapes; 0 when incompatible. */
static int bshape(shp a, shp b, shp *out) {
    size_t r = a.rank > b.rank ? a.rank : b.rank, i;
    shp o = S0();
    o.rank = r;
    for (i = 0; i < r; ++i) {
        int64_t da = i + a.rank >= r ? a.d[i + a.rank - r] : 1;
        int64_t db = i + b.rank >= r ? b.d[i + b.rank - r] : 1;
        if (da == db) o.d[i] = da;
        else if (da == 1) o.d[i] = db;
        else if (db == 1) o.d[i] = da;
        else return 0;
    }
    *out = o;
    return 1;
}

/* The flat index into `in` of element `flat` of the broadcast shape `out`. */
static size_t bidx(shp in, shp out, size_t flat) {
    size_t idx = 0, stride = 1, rem = flat;
    int i;
    for (i = (int)out.rank - 1; i >= 0; --i) {
        size_t od = (size_t)out.d[i];
        size_t c = rem % od;
        int j = i - (int)(out.rank - in.rank);
        rem /= od;
        if (j >= 0) {
            size_t id = (size_t)in.d[j];
            if (id != 1) idx += c * stride;
            stride *= id;
        }
    }
    return idx;
}

/* ------------------------------------------------------------------------------------------
 * Elements: every reference value is a double; tensors hold their dtype
 * ---------------------------------------------------------------------------------------- */

static int is_int(dp_dtype_t dt) {
    return dt == DP_DTYPE_I32 || dt == DP_DTYPE_I64 || dt == DP_DTYPE_U8 || dt == DP_DTYPE_BOOL;
}

/* The value `v` becomes once stored as `dt` (for in-range values). */
static double stored(dp_dtype_t dt, double v) {
    switch (dt) {
    case DP_DTYPE_F32: return (double)(float)v;
    case DP_DTYPE_F64: return v;
    case DP_DTYPE_I32: return (double)(int32_t)v;
    case DP_DTYPE_I64: return (double)(int64_t)v;
    case DP_DTYPE_U8: return (double)(uint8_t)v;
    case DP_DTYPE_BOOL: return v != 0.0 ? 1.0 : 0.0;
    default: return v;
    }
}

static void put(dp_dtype_t dt, unsigned char *p, size_t i, double v) {
    switch (dt) {
    case DP_DTYPE_F32: {
        float f = (float)v;
        memcpy(p + i * 4, &f, 4);
        break;
    }
    case DP_DTYPE_F64: memcpy(p + i * 8, &v, 8); break;
    case DP_DTYPE_I32: {
        int32_t x = (int32_t)v;
        memcpy(p + i * 4, &x, 4);
        break;
    }
    case DP_DTYPE_I64: {
        int64_t x = (int64_t)v;
        memcpy(p + i * 8, &x, 8);
        break;
    }
    case DP_DTYPE_U8: p[i] = (uint8_t)v; break;
    case DP_DTYPE_BOOL: p[i] = v != 0.0 ? 1 : 0; break;
    default: break;
    }
}

static double get(dp_dtype_t dt, const unsigned char *p, size_t i) {
    switch (dt) {
    case DP_DTYPE_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case DP_DTYPE_F64: {
        double d;
        memcpy(&d, p + i * 8, 8);
        return d;
    }
    case DP_DTYPE_I32: {
        int32_t x;
        memcpy(&x, p + i * 4, 4);
        return x;
    }
    case DP_DTYPE_I64: {
        int64_t x;
        memcpy(&x, p + i * 8, 8);
        return (double)x;
    }
    case DP_DTYPE_U8:
    case DP_DTYPE_BOOL: return p[i];
    default: return NAN;
    }
}

/* ------------------------------------------------------------------------------------------
 * Reference math. The C tests are linked without libm (tests/c/CMakeLists.txt links only
 * DevPlug::devplug), so the references use these plain C versions: accurate to a few ulp,
 * which is far inside every tolerance used here.
 * ---------------------------------------------------------------------------------------- */

static double m_abs(double x) { return x < 0 ? -x : x; }

static double m_pow2i(int k) { /* 2^k for -1022 <= k <= 1023 */
    uint64_t b = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &b, 8);
    return d;
}

#define M_LN2_HI 6.93147180369123816490e-01
#define M_LN2_LO 1.90821492927058770002e-10

static double m_exp(double x) {
    double kf, r, term = 1, sum = 1;
    int k, i;
    if (x != x) return x;
    if (x > 709.7) return INFINITY;
    if (x < -745.2) return 0.0;
    kf = x * 1.4426950408889634;
    k = (int)(kf < 0 ? kf - 0.5 : kf + 0.5);
    r = (x - k * M_LN2_HI) - k * M_LN2_LO;
    for (i = 1; i < 30; ++i) {
        term *= r / i;
        sum += term;
    }
    if (k > 1000) {
        sum *= m_pow2i(1000);
        k -= 1000;
    }
    if (k < -1000) {
        sum *= m_pow2i(-1000);
        k += 1000;
    }
    return sum * m_pow2i(k);
}

static double m_log(double x) {
    uint64_t b;
    double m, s, s2, term, sum = 0;
    int e, i;
    if (x != x || x < 0) return NAN;
    if (x == 0) return -INFINITY;
    if (x == INFINITY) return x;
    memcpy(&b, &x, 8);
    e = (int)((b >> 52) & 0x7ff) - 1023; /* normal numbers only */
    b = (b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    memcpy(&m, &b, 8); /* [1, 2) */
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    s = (m - 1) / (m + 1);
    s2 = s * s;
    term = s;
    for (i = 1; i < 80; i += 2) {
        sum += term / i;
        term *= s2;
    }
    return 2 * sum + e * M_LN2_HI + e * M_LN2_LO;
}

static double m_sqrt(double x) {
    double g;
    int i;
    if (x != x || x < 0) return NAN;
    if (x == 0 || x == INFINITY) return x;
    g = m_exp(0.5 * m_log(x));
    for (i = 0; i < 4; ++i) g = 0.5 * (g + x / g);
    return g;
}

static double m_tanh(double x) {
    double em1;
    if (x > 20) return 1.0;
    if (x < -20) return -1.0;
    if (m_abs(x) < 0.5) { /* e^{2x} - 1 without cancellation */
        double term = 1, y = 2 * x;
        int i;
        em1 = 0;
        for (i = 1; i < 40; ++i) {
            term *= y / i;
            em1 += term;
        }
    } else {
        em1 = m_exp(2 * x) - 1;
    }
    return em1 / (em1 + 2);
}

static double m_pow(double x, double y) {
    if (y == (double)(long long)y && m_abs(y) < 64) {
        long long n = (long long)(y < 0 ? -y : y);
        double r = 1, b = x;
        while (n) {
            if (n & 1) r *= b;
            b *= b;
            n >>= 1;
        }
        return y < 0 ? 1 / r : r;
    }
    if (x < 0) return NAN;
    if (x == 0) return y > 0 ? 0.0 : INFINITY;
    return m_exp(y * m_log(x));
}

/* ------------------------------------------------------------------------------------------
 * The placement log
 * ---------------------------------------------------------------------------------------- */

#define LOG_MAX 256
typedef struct plog {
    int n, overflow, drops, bad_struct;
    char op[LOG_MAX][32];
    char device[LOG_MAX][32];
    char reason[LOG_MAX][32];
    char detail[LOG_MAX][160];
} plog;

/* The DP_PLACEMENT_* value of a reason string; -1 for none. */
static int reason_code_of(const char *reason) {
    static const char *const names[] = {"explicit",   "default",     "scope",       "setter",
                                        "decomposed", "soft-placed", "input copied"};
    static const int codes[] = {DP_PLACEMENT_EXPLICIT,   DP_PLACEMENT_DEFAULT,
                                DP_PLACEMENT_SCOPE,      DP_PLACEMENT_SETTER,
                                DP_PLACEMENT_DECOMPOSED, DP_PLACEMENT_SOFT_PLACED,
                                DP_PLACEMENT_INPUT_COPIED};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (reason != NULL && strcmp(reason, names[i]) == 0) return codes[i];
    return -1;
}

/* Counts an event whose struct is short or whose reason_code disagrees with its reason. */
static void on_place(const dp_placement_event_t *e, void *user_data) {
    plog *l = (plog *)user_data;
    if (e == NULL || e->struct_size < sizeof(dp_placement_event_t) ||
        reason_code_of(e->reason) != e->reason_code) {
        l->bad_struct++;
        return;
    }
    if (l->n >= LOG_MAX) {
        l->overflow++;
        return;
    }
    snprintf(l->op[l->n], sizeof l->op[0], "%s", e->op ? e->op : "(null)");
    snprintf(l->device[l->n], sizeof l->device[0], "%s", e->device ? e->device : "(null)");
    snprintf(l->reason[l->n], sizeof l->reason[0], "%s", e->reason ? e->reason : "(null)");
    snprintf(l->detail[l->n], sizeof l->detail[0], "%s", e->detail ? e->detail : "(null)");
    l->n++;
}

static void on_drop(void *user_data) { ((plog *)user_data)->drops++; }

static void log_clear(plog *l) {
    l->n = 0;
    l->overflow = 0;
}

/* Index of the first event matching every non-NULL field (detail: a substring), or -1. */
static int log_find(const plog *l, const char *op, const char *device, const char *reason,
                    const char *detail_part) {
    int i;
    for (i = 0; i < l->n; ++i) {
        if (op && strcmp(l->op[i], op) != 0) continue;
        if (device && strcmp(l->device[i], device) != 0) continue;
        if (reason && strcmp(l->reason[i], reason) != 0) continue;
        if (detail_part && strstr(l->detail[i], detail_part) == NULL) continue;
        return i;
    }
    return -1;
}

static void log_dump(const plog *l) {
    int i;
    fprintf(stdout, "   placement log (%d events):\n", l->n);
    for (i = 0; i < l->n; ++i)
        fprintf(stdout, "     %s on %s: %s (%s)\n", l->op[i], l->device[i], l->reason[i],
                l->detail[i]);
    fflush(stdout);
}

#define CHECK_LOG(l, op, device, reason, detail)                                           \
    do {                                                                                   \
        if (log_find((l), (op), (device), (reason), (detail)) >= 0) {                      \
            dp_test_pass_();                                                               \
        } else {                                                                           \
            char why_[400];                                                                \
            snprintf(why_, sizeof why_, "no placement event {op %s, device %s, reason %s, detail ~%s}", \
                     (op) ? (op) : "*", (device) ? (device) : "*", (reason) ? (reason) : "*", \
                     (detail) ? (detail) : "*");                                           \
            dp_test_fail_(__FILE__, __LINE__, why_);                                       \
            log_dump(l);                                                                   \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------------------------------------
 * The runtime under test, tensors, runs and checks
 * ---------------------------------------------------------------------------------------- */

static dp_runtime_t *g_rt;  /* one CPU device, placement callback -> g_log */
static dp_device_t *g_cpu;  /* its CPU:0 */
static plog g_log;
static int g_check_log = 1; /* check the log after each run on g_rt */
/* the options of every run on g_rt: NULL (default device) in the first pass; CPU:0 given
 * explicitly, strict, in the second */
static const dp_run_options_t *g_opt = NULL;

static dp_runtime_t *new_runtime(uint32_t cpus) { return dp_test_runtime(cpus, 0); }

static dp_device_t *find_device(dp_runtime_t *rt, const char *spec) {
    dp_device_t *d = NULL;
    DP_TEST_MUST(dp_runtime_find_device(rt, spec, &d));
    return d;
}

/* A tensor of `dt` and shape `s` on `dev` from `n` doubles (n must match the shape). */
static dp_tensor_t *mk_(dp_device_t *dev, dp_dtype_t dt, shp s, const double *v, size_t n,
                        const char *file, int line) {
    size_t es = dp_dtype_size(dt), i;
    unsigned char *buf;
    dp_tensor_t *t = NULL;
    dp_status_t st;
    if (n != numel(s)) {
        char why[200];
        snprintf(why, sizeof why, "test bug: %u values for a shape of %u elements", (unsigned)n,
                 (unsigned)numel(s));
        dp_test_fail_(file, line, why);
        return NULL;
    }
    buf = (unsigned char *)malloc(n * es + 1);
    for (i = 0; i < n; ++i) put(dt, buf, i, v[i]);
    st = dp_tensor_create(dev, dt, s.d, s.rank, buf, n * es, &t);
    free(buf);
    if (st != DP_OK) {
        char why[700], msg[512];
        dp_test_copy_message_(msg, sizeof msg);
        snprintf(why, sizeof why, "dp_tensor_create -> %s: %s", dp_status_str(st), msg);
        dp_test_fail_(file, line, why);
        return NULL;
    }
    return t;
}
#define MK(dt, s, arr) mk_(g_cpu, (dt), (s), (arr), COUNT(arr), __FILE__, __LINE__)
#define MK_ON(dev, dt, s, arr) mk_((dev), (dt), (s), (arr), COUNT(arr), __FILE__, __LINE__)
#define MK_N(dt, s, p, n) mk_(g_cpu, (dt), (s), (p), (n), __FILE__, __LINE__)

/* Composite ops without a native CPU kernel (the CPU runs Relu, Softmax, LogSoftmax and Gemm
 * natively). */
static void test_gemm(void);

static int is_composite(const char *op) {
    return strcmp(op, "Gelu") == 0;
}

/* Runs `name`; returns its one output (or NULL after recording a failure). Checks the output
 * count, that outputs[1..] were left alone, and (on g_rt) what the placement log says. */
static dp_tensor_t *run_(dp_runtime_t *rt, const char *name, dp_tensor_t *const *ins, size_t n,
                         const dp_attrs_t *attrs, const dp_run_options_t *opt, const char *file,
                         int line) {
    dp_op_t *op = NULL;
    dp_tensor_t *outs[4];
    size_t count = 99;
    dp_status_t st;
    char why[900], msg[600];
    outs[0] = outs[1] = outs[2] = outs[3] = SENTINEL(dp_tensor_t);
    st = dp_runtime_find_op(rt, name, &op);
    if (st != DP_OK || op == NULL) {
        dp_test_copy_message_(msg, sizeof msg);
        snprintf(why, sizeof why, "dp_runtime_find_op(%s) -> %s: %s", name, dp_status_str(st), msg);
        dp_test_fail_(file, line, why);
        return NULL;
    }
    if (rt == g_rt) log_clear(&g_log);
    st = dp_op_run(rt, op, ins, n, attrs, opt, outs, 4, &count);
    if (st != DP_OK) {
        dp_test_copy_message_(msg, sizeof msg);
        snprintf(why, sizeof why, "dp_op_run(%s) -> %s: \"%s\"", name, dp_status_str(st), msg);
        dp_test_fail_(file, line, why);
        return NULL;
    }
    if (count != 1 || outs[0] == NULL || outs[0] == SENTINEL(dp_tensor_t)) {
        snprintf(why, sizeof why, "dp_op_run(%s): out_count %u, outputs[0] %p", name,
                 (unsigned)count, (void *)outs[0]);
        dp_test_fail_(file, line, why);
        return NULL;
    }
    if (outs[1] != SENTINEL(dp_tensor_t) || outs[2] != SENTINEL(dp_tensor_t) ||
        outs[3] != SENTINEL(dp_tensor_t)) {
        snprintf(why, sizeof why, "dp_op_run(%s) wrote past its one output", name);
        dp_test_fail_(file, line, why);
    } else {
        dp_test_pass_();
    }
    if (rt == g_rt && g_check_log) {
        int explicit_dev = opt != NULL && opt->device != NULL;
        int ok;
        if (is_composite(name)) {
            ok = g_log.n >= 2 && strcmp(g_log.op[0], name) == 0 &&
                 strcmp(g_log.reason[0], "decomposed") == 0 &&
                 strcmp(g_log.device[0], "HOST:0") == 0;
        } else {
            ok = g_log.n == 1 && strcmp(g_log.op[0], name) == 0 &&
                 strcmp(g_log.reason[0], explicit_dev ? "explicit" : "default") == 0 &&
                 strcmp(g_log.detail[0], "kernel from built-in") == 0 &&
                 strcmp(g_log.device[0], "HOST:0") == 0;
        }
        if (ok) {
            dp_test_pass_();
        } else {
            snprintf(why, sizeof why,
                     "placement log of %s: expected %s on HOST:0, reason %s%s", name,
                     is_composite(name) ? "first the composite" : "exactly one event",
                     is_composite(name) ? "decomposed" : (explicit_dev ? "explicit" : "default"),
                     is_composite(name) ? "" : ", detail \"kernel from built-in\"");
            dp_test_fail_(file, line, why);
            log_dump(&g_log);
        }
    }
    return outs[0];
}
#define RUN(name, ins, n, attrs) run_(g_rt, (name), (ins), (n), (attrs), g_opt, __FILE__, __LINE__)
#define RUN_OPT(rt, name, ins, n, attrs, opt) \
    run_((rt), (name), (ins), (n), (attrs), (opt), __FILE__, __LINE__)

/* Checks dtype, shape and every value of `t` (tol 0: exact; else |got-ref| <= tol*(1+|ref|)),
 * then releases it. */
static void expect_(dp_tensor_t *t, dp_dtype_t dt, shp s, const double *ref, size_t nref,
                    double tol, const char *what, const char *file, int line) {
    char why[900], a[96], b[96];
    int64_t got_shape[DP_MAX_RANK];
    size_t rank, i, bytes;
    unsigned char *buf;
    shp gs = S0();
    if (t == NULL) return; /* the run already failed */
    if (nref != numel(s)) {
        snprintf(why, sizeof why, "%s: test bug: %u reference values for %u elements", what,
                 (unsigned)nref, (unsigned)numel(s));
        dp_test_fail_(file, line, why);
        dp_tensor_release(t);
        return;
    }
    if (dp_tensor_dtype(t) != dt) {
        snprintf(why, sizeof why, "%s: dtype %s, expected %s", what,
                 dp_dtype_name(dp_tensor_dtype(t)) ? dp_dtype_name(dp_tensor_dtype(t)) : "?",
                 dp_dtype_name(dt));
        dp_test_fail_(file, line, why);
        dp_tensor_release(t);
        return;
    }
    rank = dp_tensor_rank(t);
    if (rank > DP_MAX_RANK || dp_tensor_shape(t, got_shape, DP_MAX_RANK) != DP_OK) {
        snprintf(why, sizeof why, "%s: cannot read the shape (rank %u)", what, (unsigned)rank);
        dp_test_fail_(file, line, why);
        dp_tensor_release(t);
        return;
    }
    gs.rank = rank;
    for (i = 0; i < rank; ++i) gs.d[i] = got_shape[i];
    if (gs.rank != s.rank || memcmp(gs.d, s.d, sizeof(int64_t) * s.rank) != 0) {
        shape_str(gs, a, sizeof a);
        shape_str(s, b, sizeof b);
        snprintf(why, sizeof why, "%s: shape %s, expected %s", what, a, b);
        dp_test_fail_(file, line, why);
        dp_tensor_release(t);
        return;
    }
    dp_test_pass_();
    bytes = dp_tensor_byte_size(t);
    if (bytes != nref * dp_dtype_size(dt)) {
        snprintf(why, sizeof why, "%s: byte size %u, expected %u", what, (unsigned)bytes,
                 (unsigned)(nref * dp_dtype_size(dt)));
        dp_test_fail_(file, line, why);
        dp_tensor_release(t);
        return;
    }
    buf = (unsigned char *)malloc(bytes + 8);
    if (dp_tensor_read(t, buf, bytes) != DP_OK) {
        char msg[400];
        dp_test_copy_message_(msg, sizeof msg);
        snprintf(why, sizeof why, "%s: dp_tensor_read failed: %s", what, msg);
        dp_test_fail_(file, line, why);
    } else {
        size_t bad = nref;
        for (i = 0; i < nref; ++i) {
            double g = get(dt, buf, i), r = ref[i];
            int ok;
            if (isnan(r)) ok = isnan(g);
            else if (tol == 0.0) ok = g == r;
            else ok = m_abs(g - r) <= tol * (1.0 + m_abs(r));
            if (!ok) {
                bad = i;
                break;
            }
        }
        if (bad == nref) {
            dp_test_pass_();
        } else {
            snprintf(why, sizeof why, "%s: element %u is %.17g, expected %.17g (tolerance %g)",
                     what, (unsigned)bad, get(dt, buf, bad), ref[bad], tol);
            dp_test_fail_(file, line, why);
        }
    }
    free(buf);
    dp_tensor_release(t);
}
#define EXPECT(t, dt, s, ref, tol, what) \
    expect_((t), (dt), (s), (ref), COUNT(ref), (tol), (what), __FILE__, __LINE__)
#define EXPECT_N(t, dt, s, ref, n, tol, what) \
    expect_((t), (dt), (s), (ref), (n), (tol), (what), __FILE__, __LINE__)

static double tol_of(dp_dtype_t dt) {
    return dt == DP_DTYPE_F32 ? 2e-6 : dt == DP_DTYPE_F64 ? 1e-13 : 0.0;
}

/* ---- attributes ---- */

static dp_attrs_t *attrs_new(void) {
    dp_attrs_t *a = NULL;
    DP_TEST_MUST(dp_attrs_create(&a));
    return a;
}

static void release_all(dp_tensor_t **ts, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) dp_tensor_release(ts[i]);
}

/* ------------------------------------------------------------------------------------------
 * References
 * ---------------------------------------------------------------------------------------- */

static int is_compare(const char *op) {
    return strcmp(op, "Equal") == 0 || strcmp(op, "NotEqual") == 0 || strcmp(op, "Less") == 0 ||
           strcmp(op, "LessEqual") == 0 || strcmp(op, "Greater") == 0 ||
           strcmp(op, "GreaterEqual") == 0;
}

static double ref_binary(const char *op, dp_dtype_t dt, double x, double y) {
    if (strcmp(op, "Add") == 0) return x + y;
    if (strcmp(op, "Sub") == 0) return x - y;
    if (strcmp(op, "Mul") == 0) return x * y;
    if (strcmp(op, "Div") == 0) return is_int(dt) ? (double)((long long)x / (long long)y) : x / y;
    if (strcmp(op, "Maximum") == 0) return x > y ? x : y;
    if (strcmp(op, "Minimum") == 0) return x < y ? x : y;
    if (strcmp(op, "Pow") == 0) {
        if (is_int(dt)) {
            long long acc = 1, i;
            for (i = 0; i < (long long)y; ++i) acc *= (long long)x;
            return (double)acc;
        }
        return m_pow(x, y);
    }
    if (strcmp(op, "Equal") == 0) return x == y;
    if (strcmp(op, "NotEqual") == 0) return x != y;
    if (strcmp(op, "Less") == 0) return x < y;
    if (strcmp(op, "LessEqual") == 0) return x <= y;
    if (strcmp(op, "Greater") == 0) return x > y;
    if (strcmp(op, "GreaterEqual") == 0) return x >= y;
    return NAN;
}

static double gelu_ref(double x) {
    const double k = m_sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + m_tanh(k * (x + 0.044715 * x * x * x)));
}

static double ref_unary(const char *op, double x) {
    if (strcmp(op, "Neg") == 0) return -x;
    if (strcmp(op, "Abs") == 0) return x < 0 ? -x : x;
    if (strcmp(op, "Exp") == 0) return m_exp(x);
    if (strcmp(op, "Log") == 0) return m_log(x);
    if (strcmp(op, "Tanh") == 0) return m_tanh(x);
    if (strcmp(op, "Sqrt") == 0) return m_sqrt(x);
    if (strcmp(op, "Rsqrt") == 0) return 1.0 / m_sqrt(x);
    if (strcmp(op, "Sigmoid") == 0) return 1.0 / (1.0 + m_exp(-x));
    if (strcmp(op, "Relu") == 0) return x > 0 ? x : 0.0;
    if (strcmp(op, "Gelu") == 0) return gelu_ref(x);
    return NAN;
}

/* Runs a binary op (or comparison) on x of shape sa and y of shape sb, checks the broadcast
 * result against ref_binary. */
static void binary_case_(const char *op, dp_dtype_t dt, shp sa, const double *a, size_t na, shp sb,
                         const double *b, size_t nb, double tol, const char *file, int line) {
    shp so;
    dp_tensor_t *ins[2], *out;
    double *ref;
    size_t n, i;
    char what[160], sa_s[64], sb_s[64];
    if (!bshape(sa, sb, &so)) {
        dp_test_fail_(file, line, "test bug: shapes do not broadcast");
        return;
    }
    shape_str(sa, sa_s, sizeof sa_s);
    shape_str(sb, sb_s, sizeof sb_s);
    snprintf(what, sizeof what, "%s(%s %s, %s)", op, dp_dtype_name(dt), sa_s, sb_s);
    ins[0] = mk_(g_cpu, dt, sa, a, na, file, line);
    ins[1] = mk_(g_cpu, dt, sb, b, nb, file, line);
    out = run_(g_rt, op, ins, 2, NULL, g_opt, file, line);
    n = numel(so);
    ref = (double *)malloc((n + 1) * sizeof(double));
    for (i = 0; i < n; ++i)
        ref[i] = ref_binary(op, dt, stored(dt, a[bidx(sa, so, i)]), stored(dt, b[bidx(sb, so, i)]));
    expect_(out, is_compare(op) ? DP_DTYPE_BOOL : dt, so, ref, n, is_compare(op) ? 0.0 : tol, what,
            file, line);
    free(ref);
    release_all(ins, 2);
}
#define BINARY(op, dt, sa, a, sb, b, tol) \
    binary_case_((op), (dt), (sa), (a), COUNT(a), (sb), (b), COUNT(b), (tol), __FILE__, __LINE__)

static void unary_case_(const char *op, dp_dtype_t dt, shp s, const double *x, size_t nx,
                        double tol, const char *file, int line) {
    dp_tensor_t *in, *out;
    double *ref;
    size_t i;
    char what[128];
    snprintf(what, sizeof what, "%s(%s)", op, dp_dtype_name(dt));
    in = mk_(g_cpu, dt, s, x, nx, file, line);
    out = run_(g_rt, op, &in, 1, NULL, g_opt, file, line);
    ref = (double *)malloc((nx + 1) * sizeof(double));
    for (i = 0; i < nx; ++i) ref[i] = ref_unary(op, stored(dt, x[i]));
    expect_(out, dt, s, ref, nx, tol, what, file, line);
    free(ref);
    dp_tensor_release(in);
}
#define UNARY(op, dt, s, x, tol) unary_case_((op), (dt), (s), (x), COUNT(x), (tol), __FILE__, __LINE__)

/* MatMul of a (shape sa, transposed when ta) and b, against a triple loop with NumPy batch
 * broadcasting. `set_flags`: 0 = no attrs, 1 = set both flags explicitly. */
static void matmul_case_(dp_dtype_t dt, shp sa, const double *a, size_t na, int ta, shp sb,
                         const double *b, size_t nb, int tb, int set_flags, const char *file,
                         int line) {
    size_t ra = sa.rank, rb = sb.rank, i;
    int64_t m = ta ? sa.d[ra - 1] : sa.d[ra - 2], k = ta ? sa.d[ra - 2] : sa.d[ra - 1];
    int64_t n = tb ? sb.d[rb - 2] : sb.d[rb - 1];
    shp ba = sa, bb = sb, bo, so;
    dp_tensor_t *ins[2], *out;
    dp_attrs_t *attrs = NULL;
    double *ref;
    size_t total;
    char what[160], sa_s[64], sb_s[64];
    ba.rank = ra - 2;
    bb.rank = rb - 2;
    if (!bshape(ba, bb, &bo)) {
        dp_test_fail_(file, line, "test bug: batch shapes do not broadcast");
        return;
    }
    so = bo;
    so.d[so.rank++] = m;
    so.d[so.rank++] = n;
    total = numel(so);
    ref = (double *)malloc((total + 1) * sizeof(double));
    for (i = 0; i < total; ++i) {
        size_t mn = (size_t)(m * n), bi = mn ? i / mn : 0;
        int64_t r = (int64_t)((i % (mn ? mn : 1)) / (size_t)(n ? n : 1)), c = (int64_t)(i % (size_t)(n ? n : 1));
        size_t oa = bidx(ba, bo, bi) * (size_t)(m * k), ob = bidx(bb, bo, bi) * (size_t)(k * n);
        double acc = 0;
        int64_t p;
        for (p = 0; p < k; ++p) {
            double x = stored(dt, a[oa + (size_t)(ta ? p * m + r : r * k + p)]);
            double y = stored(dt, b[ob + (size_t)(tb ? c * k + p : p * n + c)]);
            acc += x * y;
        }
        ref[i] = acc;
    }
    shape_str(sa, sa_s, sizeof sa_s);
    shape_str(sb, sb_s, sizeof sb_s);
    snprintf(what, sizeof what, "MatMul(%s %s%s, %s%s)", dp_dtype_name(dt), sa_s, ta ? "^T" : "", sb_s,
             tb ? "^T" : "");
    if (set_flags) {
        attrs = attrs_new();
        CHECK_OK(dp_attrs_set_bool(attrs, "transpose_a", ta));
        CHECK_OK(dp_attrs_set_bool(attrs, "transpose_b", tb));
    }
    ins[0] = mk_(g_cpu, dt, sa, a, na, file, line);
    ins[1] = mk_(g_cpu, dt, sb, b, nb, file, line);
    out = run_(g_rt, "MatMul", ins, 2, attrs, g_opt, file, line);
    expect_(out, dt, so, ref, total, dt == DP_DTYPE_F32 ? 1e-5 : tol_of(dt), what, file, line);
    free(ref);
    release_all(ins, 2);
    dp_attrs_destroy(attrs);
}
#define MATMUL(dt, sa, a, ta, sb, b, tb)                                                  \
    matmul_case_((dt), (sa), (a), COUNT(a), (ta), (sb), (b), COUNT(b), (tb), 1, __FILE__, \
                 __LINE__)

/* A reduction over `axes` (NULL with n 0 and set_axes 0: the attribute is not set; empty set:
 * all axes). keep: -1 = attribute not set (default false), else its value. */
static void reduce_case_(const char *op, dp_dtype_t dt, shp s, const double *x, size_t nx,
                         const int64_t *axes, size_t naxes, int set_axes, int keep,
                         const char *file, int line) {
    int red[DP_MAX_RANK];
    shp keep_shape = s, out_shape = S0();
    size_t i, j, nout;
    double *acc, *cnt;
    dp_tensor_t *in, *out;
    dp_attrs_t *attrs = NULL;
    char what[160];
    for (i = 0; i < DP_MAX_RANK; ++i) red[i] = naxes == 0;
    for (j = 0; j < naxes; ++j) red[axes[j] < 0 ? axes[j] + (int64_t)s.rank : axes[j]] = 1;
    for (i = 0; i < s.rank; ++i) {
        if (red[i]) keep_shape.d[i] = 1;
        if (!red[i] || keep == 1) out_shape.d[out_shape.rank++] = red[i] ? 1 : s.d[i];
    }
    nout = numel(keep_shape);
    acc = (double *)malloc((nout + 1) * sizeof(double));
    cnt = (double *)malloc((nout + 1) * sizeof(double));
    for (i = 0; i < nout; ++i) {
        acc[i] = strcmp(op, "ReduceMax") == 0 ? -INFINITY : strcmp(op, "ReduceMin") == 0 ? INFINITY : 0;
        cnt[i] = 0;
    }
    for (i = 0; i < nx; ++i) {
        /* the element's index with reduced axes set to 0, in keep_shape */
        size_t rem = i, o = 0, stride = 1;
        int d;
        double v = stored(dt, x[i]);
        for (d = (int)s.rank - 1; d >= 0; --d) {
            size_t c = rem % (size_t)s.d[d];
            rem /= (size_t)s.d[d];
            if (!red[d]) o += c * stride;
            stride *= (size_t)keep_shape.d[d];
        }
        if (strcmp(op, "ReduceMax") == 0) acc[o] = v > acc[o] ? v : acc[o];
        else if (strcmp(op, "ReduceMin") == 0) acc[o] = v < acc[o] ? v : acc[o];
        else acc[o] += v;
        cnt[o] += 1;
    }
    if (strcmp(op, "ReduceMean") == 0)
        for (i = 0; i < nout; ++i)
            acc[i] = is_int(dt) ? (double)((long long)acc[i] / (long long)cnt[i]) : acc[i] / cnt[i];
    {
        char ax[64], ss[64];
        size_t used = 0;
        used += (size_t)snprintf(ax, sizeof ax, "[");
        for (j = 0; j < naxes && used < sizeof ax; ++j)
            used += (size_t)snprintf(ax + used, sizeof ax - used, "%s%lld", j ? "," : "", (long long)axes[j]);
        if (used < sizeof ax) snprintf(ax + used, sizeof ax - used, "]");
        shape_str(s, ss, sizeof ss);
        snprintf(what, sizeof what, "%s(%s %s, axes %s%s, keep_dims %d)", op, dp_dtype_name(dt), ss,
                 set_axes ? ax : "unset", "", keep);
    }
    if (set_axes || keep >= 0) attrs = attrs_new();
    if (set_axes) CHECK_OK(dp_attrs_set_ints(attrs, "axes", axes, naxes));
    if (keep >= 0) CHECK_OK(dp_attrs_set_bool(attrs, "keep_dims", keep));
    in = mk_(g_cpu, dt, s, x, nx, file, line);
    out = run_(g_rt, op, &in, 1, attrs, g_opt, file, line);
    expect_(out, dt, out_shape, acc, nout, dt == DP_DTYPE_F32 ? 1e-5 : tol_of(dt), what, file, line);
    free(acc);
    free(cnt);
    dp_tensor_release(in);
    dp_attrs_destroy(attrs);
}
#define REDUCE(op, dt, s, x, axes, keep) \
    reduce_case_((op), (dt), (s), (x), COUNT(x), (axes), COUNT(axes), 1, (keep), __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------
 * The tests
 * ---------------------------------------------------------------------------------------- */

static const char *const ALL_OPS[] = {
    "Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow", "Neg", "Abs", "Exp", "Log",
    "Tanh", "Sqrt", "Rsqrt", "Sigmoid", "Equal", "NotEqual", "Less", "LessEqual", "Greater",
    "GreaterEqual", "Select", "Cast", "MatMul", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceMean", "BroadcastTo", "Reshape", "Transpose", "Concat", "Slice", "Fill", "Iota",
    "AddN", "Relu", "Softmax", "LogSoftmax", "Gelu", "Gemm"};

static void test_find_ops(void) {
    size_t i;
    SECTION("every op resolves by name to a stable handle that knows its name");
    for (i = 0; i < COUNT(ALL_OPS); ++i) {
        dp_op_t *a = NULL, *b = NULL;
        CHECK_OK(dp_runtime_find_op(g_rt, ALL_OPS[i], &a));
        CHECK_OK(dp_runtime_find_op(g_rt, ALL_OPS[i], &b));
        CHECKF(a != NULL && a == b, "%s: two lookups gave %p and %p", ALL_OPS[i], (void *)a, (void *)b);
        if (a) CHECK_STR(dp_op_name(a), ALL_OPS[i]);
    }

    SECTION("dp_runtime_op_count / dp_runtime_op_at list exactly these ops, sorted by name");
    {
        size_t n = 0, j, seen = 0;
        const char *prev = "";
        dp_op_t *op = SENTINEL(dp_op_t);
        CHECK_OK(dp_runtime_op_count(g_rt, &n));
        CHECKF(n == COUNT(ALL_OPS), "%zu ops listed, %zu expected", n, (size_t)COUNT(ALL_OPS));
        for (j = 0; j < n; ++j) {
            dp_op_t *at = NULL, *found = NULL;
            const char *name;
            CHECK_OK(dp_runtime_op_at(g_rt, j, &at));
            if (at == NULL) continue;
            name = dp_op_name(at);
            CHECKF(strcmp(prev, name) < 0, "op %zu: '%s' after '%s'", j, name, prev);
            prev = name;
            CHECK_OK(dp_runtime_find_op(g_rt, name, &found));
            CHECKF(found == at, "%s: dp_runtime_op_at and dp_runtime_find_op differ", name);
            for (i = 0; i < COUNT(ALL_OPS); ++i) seen += strcmp(ALL_OPS[i], name) == 0;
        }
        CHECKF(seen == COUNT(ALL_OPS), "%zu of the %zu basis and composite ops listed", seen,
               (size_t)COUNT(ALL_OPS));
        CHECK_STATUS_MSG(dp_runtime_op_at(g_rt, n, &op), DP_OUT_OF_RANGE, "past the end");
        CHECK_UNTOUCHED(dp_op_t, op);
        CHECK_STATUS_MSG(dp_runtime_op_at(g_rt, 0, NULL), DP_INVALID_ARGUMENT, "out_op");
        CHECK_STATUS_MSG(dp_runtime_op_at(NULL, 0, &op), DP_INVALID_ARGUMENT, "runtime");
        CHECK_UNTOUCHED(dp_op_t, op);
        CHECK_STATUS_MSG(dp_runtime_op_count(g_rt, NULL), DP_INVALID_ARGUMENT, "out_count");
        CHECK_STATUS_MSG(dp_runtime_op_count(NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    }

    SECTION("dp_op_signature / dp_op_num_outputs: every op's, in the op notation");
    for (i = 0; i < COUNT(ALL_OPS); ++i) {
        dp_op_t *op = NULL;
        const char *sig;
        size_t n = 0, name_len = strlen(ALL_OPS[i]);
        CHECK_OK(dp_runtime_find_op(g_rt, ALL_OPS[i], &op));
        sig = dp_op_signature(op);
        CHECKF(sig != NULL && strncmp(sig, ALL_OPS[i], name_len) == 0 && sig[name_len] == '(' &&
                   strstr(sig, ") -> (") != NULL,
               "%s: signature '%s'", ALL_OPS[i], sig ? sig : "(null)");
        CHECK_OK(dp_op_num_outputs(op, &n));
        CHECKF(n == 1, "%s: %zu outputs", ALL_OPS[i], n);
    }
    {
        dp_op_t *op = NULL;
        size_t n = 7;
        CHECK_OK(dp_runtime_find_op(g_rt, "ReduceSum", &op));
        CHECK_STR(dp_op_signature(op), "ReduceSum(x: T; axes: ints = [], keep_dims: bool = false) -> "
                                       "(y: T) where T: {f32, f64, i32, i64, u8, f16, bf16}");
        CHECK_OK(dp_runtime_find_op(g_rt, "AddN", &op));
        CHECK(strstr(dp_op_signature(op), "AddN(inputs: T...) -> (sum: T)") != NULL);
        CHECK_OK(dp_runtime_find_op(g_rt, "Cast", &op));
        CHECK(strstr(dp_op_signature(op), "; dtype: dtype) -> (y: @dtype)") != NULL);
        CHECK_STATUS_MSG(dp_op_num_outputs(op, NULL), DP_INVALID_ARGUMENT, "out_count");
        CHECK(n == 7); /* untouched by the failures (bad handles: op_bad_args_test.c) */
    }
}

static void test_binary(void) {
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow"};
    static const double a23[] = {1.5, -2.0, 3.25, 0.5, 4.0, -1.75};
    static const double b3[] = {2.0, 0.5, -4.0};
    static const double pa23[] = {1.5, 2.0, 3.25, 0.5, 4.0, 1.75}; /* positive bases for Pow */
    static const double c21[] = {1.0, -3.0};
    static const double d13[] = {0.25, 2.0, -5.0};
    static const double pc21[] = {1.0, 3.0};
    static const double s0[] = {2.0};
    static const double s1[] = {0.5};
    static const double ia23[] = {7, -8, 9, 10, 0, 12};
    static const double ib3[] = {2, 3, 5};
    static const double ip23[] = {2, 3, -2, 0, 1, 4}; /* bases */
    static const double ie3[] = {3, 0, 2};            /* exponents >= 0 */
    static const double ua[] = {10, 200, 3, 40};
    static const double ub[] = {5, 50, 3, 8};
    static const double ba[] = {0, 1, 0, 1};
    static const double bb[] = {0, 0, 1, 1};
    size_t i;
    SECTION("binary elementwise: f32 [2,3] with [3]");
    for (i = 0; i < COUNT(ops); ++i) {
        if (strcmp(ops[i], "Pow") == 0) BINARY(ops[i], DP_DTYPE_F32, S2(2, 3), pa23, S1(3), b3, 1e-5);
        else BINARY(ops[i], DP_DTYPE_F32, S2(2, 3), a23, S1(3), b3, tol_of(DP_DTYPE_F32));
    }
    SECTION("binary elementwise: f64 [2,1] with [1,3], and [3] with [2,3]");
    for (i = 0; i < COUNT(ops); ++i) {
        if (strcmp(ops[i], "Pow") == 0) BINARY(ops[i], DP_DTYPE_F64, S2(2, 1), pc21, S2(1, 3), d13, 1e-13);
        else BINARY(ops[i], DP_DTYPE_F64, S2(2, 1), c21, S2(1, 3), d13, tol_of(DP_DTYPE_F64));
        if (strcmp(ops[i], "Pow") != 0) BINARY(ops[i], DP_DTYPE_F64, S1(3), b3, S2(2, 3), a23, 1e-13);
    }
    SECTION("binary elementwise: f32 with a rank-0 scalar on either side, and two scalars");
    for (i = 0; i < COUNT(ops); ++i) {
        BINARY(ops[i], DP_DTYPE_F32, S2(2, 3), pa23, S0(), s0, 1e-5);
        BINARY(ops[i], DP_DTYPE_F32, S0(), s0, S2(2, 3), pa23, 1e-5);
        BINARY(ops[i], DP_DTYPE_F32, S0(), s0, S0(), s1, 1e-5);
    }
    SECTION("binary elementwise: i32 and i64 (integer division truncates for positive divisors)");
    for (i = 0; i < COUNT(ops); ++i) {
        if (strcmp(ops[i], "Pow") == 0) {
            BINARY(ops[i], DP_DTYPE_I32, S2(2, 3), ip23, S1(3), ie3, 0);
            BINARY(ops[i], DP_DTYPE_I64, S2(2, 3), ip23, S1(3), ie3, 0);
        } else {
            BINARY(ops[i], DP_DTYPE_I32, S2(2, 3), ia23, S1(3), ib3, 0);
            BINARY(ops[i], DP_DTYPE_I64, S2(2, 3), ia23, S0(), s0, 0);
        }
    }
    SECTION("binary elementwise: u8 (in range) and bool (Maximum = or, Minimum = and)");
    BINARY("Add", DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    BINARY("Sub", DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    {
        static const double m1[] = {5, 50, 3};
        static const double m2[] = {2, 5, 85};
        BINARY("Mul", DP_DTYPE_U8, S1(3), m1, S1(3), m2, 0); /* 10, 250, 255 */
    }
    BINARY("Div", DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    BINARY("Maximum", DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    BINARY("Minimum", DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    BINARY("Pow", DP_DTYPE_U8, S1(3), ib3, S1(3), ie3, 0); /* 2^3, 3^0, 5^2 */
    BINARY("Maximum", DP_DTYPE_BOOL, S1(4), ba, S1(4), bb, 0);
    BINARY("Minimum", DP_DTYPE_BOOL, S1(4), ba, S1(4), bb, 0);
}

static void test_unary(void) {
    static const char *const fops[] = {"Neg", "Abs", "Exp", "Log", "Tanh", "Sqrt", "Rsqrt", "Sigmoid"};
    static const double pos[] = {0.25, 1.0, 2.5, 4.0, 9.0, 0.01};
    static const double mixed[] = {-3.0, -0.5, 0.0, 0.75, 2.0, 6.5};
    static const double ints[] = {-7, 0, 5, -1, 2147483, -42};
    static const double u8s[] = {0, 1, 128, 255};
    size_t i;
    SECTION("unary: f32 and f64 (transcendentals with tolerances)");
    for (i = 0; i < COUNT(fops); ++i) {
        int needs_pos = strcmp(fops[i], "Log") == 0 || strcmp(fops[i], "Sqrt") == 0 ||
                        strcmp(fops[i], "Rsqrt") == 0;
        const double *x = needs_pos ? pos : mixed;
        unary_case_(fops[i], DP_DTYPE_F32, S2(2, 3), x, 6, 2e-6, __FILE__, __LINE__);
        unary_case_(fops[i], DP_DTYPE_F64, S3(1, 2, 3), x, 6, 1e-13, __FILE__, __LINE__);
    }
    SECTION("unary: Neg and Abs on i32/i64, Abs on u8");
    UNARY("Neg", DP_DTYPE_I32, S1(6), ints, 0);
    UNARY("Abs", DP_DTYPE_I32, S1(6), ints, 0);
    UNARY("Neg", DP_DTYPE_I64, S2(3, 2), ints, 0);
    UNARY("Abs", DP_DTYPE_I64, S2(3, 2), ints, 0);
    UNARY("Abs", DP_DTYPE_U8, S1(4), u8s, 0);
    SECTION("unary: rank-0 scalars");
    unary_case_("Exp", DP_DTYPE_F32, S0(), pos + 2, 1, 2e-6, __FILE__, __LINE__);
    unary_case_("Neg", DP_DTYPE_I32, S0(), ints + 4, 1, 0, __FILE__, __LINE__);
    unary_case_("Sigmoid", DP_DTYPE_F64, S0(), mixed + 1, 1, 1e-13, __FILE__, __LINE__);
}

static void test_compare(void) {
    static const char *const ops[] = {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"};
    static const double a23[] = {1.0, 0.5, -4.0, 2.0, 3.0, -4.5};
    static const double b3[] = {1.0, 2.0, -4.0};
    static const double ia[] = {-3, 0, 7, 7};
    static const double is[] = {7};
    static const double i21[] = {7, -3};
    static const double ua[] = {0, 200, 255, 3};
    static const double ub[] = {1, 200, 254, 30};
    static const double ba[] = {0, 1, 0, 1};
    static const double bb[] = {0, 0, 1, 1};
    size_t i;
    SECTION("comparisons -> bool: f32 with broadcasting, i32 with a scalar, i64, f64, u8");
    for (i = 0; i < COUNT(ops); ++i) {
        BINARY(ops[i], DP_DTYPE_F32, S2(2, 3), a23, S1(3), b3, 0);
        BINARY(ops[i], DP_DTYPE_F64, S2(3, 1), b3, S2(1, 3), b3, 0);
        BINARY(ops[i], DP_DTYPE_I32, S1(4), ia, S0(), is, 0);
        BINARY(ops[i], DP_DTYPE_I64, S2(2, 2), ia, S2(2, 1), i21, 0);
        BINARY(ops[i], DP_DTYPE_U8, S1(4), ua, S1(4), ub, 0);
    }
    SECTION("Equal / NotEqual on bool");
    BINARY("Equal", DP_DTYPE_BOOL, S1(4), ba, S1(4), bb, 0);
    BINARY("NotEqual", DP_DTYPE_BOOL, S1(4), ba, S1(4), bb, 0);
}

static void test_select(void) {
    static const double cond[] = {1, 0, 1, 0, 0, 1};
    static const double x[] = {1, 2, 3, 4, 5, 6};
    static const double y[] = {-9.5};
    static const double want_f[] = {1, -9.5, 3, -9.5, -9.5, 6};
    static const double c3[] = {0, 1, 1};
    static const double xi[] = {10, 20};
    static const double yi[] = {-1, -2, -3};
    static const double bx[] = {1, 1, 0, 0};
    static const double by[] = {0, 1, 0, 1};
    static const double bc[] = {1, 0, 1, 0};
    static const double want_b[] = {1, 1, 0, 1};
    dp_tensor_t *ins[3];
    SECTION("Select: f32 with a scalar y, i64 with three-way broadcasting, bool");
    ins[0] = MK(DP_DTYPE_BOOL, S2(2, 3), cond);
    ins[1] = MK(DP_DTYPE_F32, S2(2, 3), x);
    ins[2] = MK(DP_DTYPE_F32, S0(), y);
    EXPECT(RUN("Select", ins, 3, NULL), DP_DTYPE_F32, S2(2, 3), want_f, 0, "Select f32");
    release_all(ins, 3);
    ins[0] = MK(DP_DTYPE_BOOL, S1(3), c3);
    ins[1] = MK(DP_DTYPE_I64, S2(2, 1), xi);
    ins[2] = MK(DP_DTYPE_I64, S1(3), yi);
    {
        /* cond [3] = {0,1,1}, x [2,1], y [3] -> [2,3]: x[row] where cond, else y[col] */
        static const double want[] = {-1, 10, 10, -1, 20, 20};
        EXPECT(RUN("Select", ins, 3, NULL), DP_DTYPE_I64, S2(2, 3), want, 0, "Select i64 broadcast");
    }
    release_all(ins, 3);
    ins[0] = MK(DP_DTYPE_BOOL, S1(4), bc);
    ins[1] = MK(DP_DTYPE_BOOL, S1(4), bx);
    ins[2] = MK(DP_DTYPE_BOOL, S1(4), by);
    EXPECT(RUN("Select", ins, 3, NULL), DP_DTYPE_BOOL, S1(4), want_b, 0, "Select bool");
    release_all(ins, 3);
}

static void cast_case_(dp_dtype_t from, dp_dtype_t to, const double *x, const double *want, size_t n,
                       const char *file, int line) {
    dp_attrs_t *a = attrs_new();
    dp_tensor_t *in = mk_(g_cpu, from, S1((int64_t)n), x, n, file, line);
    char what[64];
    snprintf(what, sizeof what, "Cast %s -> %s", dp_dtype_name(from), dp_dtype_name(to));
    CHECK_OK(dp_attrs_set_dtype(a, "dtype", to));
    expect_(run_(g_rt, "Cast", &in, 1, a, g_opt, file, line), to, S1((int64_t)n), want, n, 0, what,
            file, line);
    dp_tensor_release(in);
    dp_attrs_destroy(a);
}
#define CAST(from, to, x, want) cast_case_((from), (to), (x), (want), COUNT(x), __FILE__, __LINE__)

static void test_cast(void) {
    static const double f[] = {1.9, -1.9, 2.5, -0.5, 0.0, 100.99};
    static const double f_trunc[] = {1, -1, 2, 0, 0, 100};
    static const double f_bool[] = {1, 1, 1, 1, 0, 1};
    static const double l[] = {0, 1, 255, 7, 128};
    static const double i[] = {-3, 0, 16777217, 5};
    static const double i_f64[] = {-3, 0, 16777217, 5};
    static const double i_bool[] = {1, 0, 1, 1};
    static const double b[] = {1, 0, 1};
    static const double d[] = {0.1, -2.75, 1e10};
    double d_f32[3];
    size_t k;
    SECTION("Cast: f32->i32 truncates, i64->u8, ->bool, bool->f32, i32->f64, f64->f32, same dtype");
    CAST(DP_DTYPE_F32, DP_DTYPE_I32, f, f_trunc);
    CAST(DP_DTYPE_F64, DP_DTYPE_I64, f, f_trunc);
    CAST(DP_DTYPE_I64, DP_DTYPE_U8, l, l);
    CAST(DP_DTYPE_F32, DP_DTYPE_BOOL, f, f_bool);
    CAST(DP_DTYPE_I32, DP_DTYPE_BOOL, i, i_bool);
    CAST(DP_DTYPE_BOOL, DP_DTYPE_F32, b, b);
    CAST(DP_DTYPE_BOOL, DP_DTYPE_I64, b, b);
    CAST(DP_DTYPE_I32, DP_DTYPE_F64, i, i_f64);
    for (k = 0; k < 3; ++k) d_f32[k] = (double)(float)d[k];
    CAST(DP_DTYPE_F64, DP_DTYPE_F32, d, d_f32);
    CAST(DP_DTYPE_U8, DP_DTYPE_I32, l, l);
    CAST(DP_DTYPE_I32, DP_DTYPE_I32, i, i);
    CAST(DP_DTYPE_BOOL, DP_DTYPE_BOOL, b, b);
}

static void test_matmul(void) {
    static const double a23[] = {1, 2, 3, 4, 5, 6};
    static const double b34[] = {1, -1, 0.5, 2, 0, 1, 3, -2, 4, 0.25, -1, 1};
    static const double a32[] = {1, 4, 2, 5, 3, 6}; /* a23 transposed */
    static const double b43[] = {1, 0, 4, -1, 1, 0.25, 0.5, 3, -1, 2, -2, 1};
    static const double ab223[] = {1, 2, 3, 4, 5, 6, -1, 0, 2, 0.5, 1, -3};
    static const double b32[] = {1, 2, -1, 0.5, 3, -2};
    static const double a4[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; /* [2,1,2,3] */
    static const double b4[] = {1, 0, 2, 1, -1, 3, 0, 1, 1, 2, -2, 0, 0.5, 1, 1, -1, 2, 2}; /* [3,3,2] */
    static const double i23[] = {1, -2, 3, 0, 5, -6};
    static const double i32v[] = {2, 1, 0, -1, 4, 3};
    static const double u22[] = {1, 2, 3, 4};
    SECTION("MatMul: 2-D f32 with every transpose combination");
    matmul_case_(DP_DTYPE_F32, S2(2, 3), a23, 6, 0, S2(3, 4), b34, 12, 0, 0, __FILE__, __LINE__);
    MATMUL(DP_DTYPE_F32, S2(2, 3), a23, 0, S2(3, 4), b34, 0);
    MATMUL(DP_DTYPE_F32, S2(3, 2), a32, 1, S2(3, 4), b34, 0);
    MATMUL(DP_DTYPE_F32, S2(2, 3), a23, 0, S2(4, 3), b43, 1);
    MATMUL(DP_DTYPE_F32, S2(3, 2), a32, 1, S2(4, 3), b43, 1);
    SECTION("MatMul: batched f64, rank 3 x rank 2, [2,1,2,3] x [3,3,2] (broadcast batch)");
    MATMUL(DP_DTYPE_F64, S3(2, 2, 3), ab223, 0, S2(3, 2), b32, 0);
    MATMUL(DP_DTYPE_F64, S3(2, 3, 2), ab223, 1, S2(3, 2), b32, 0);
    MATMUL(DP_DTYPE_F64, S4(2, 1, 2, 3), a4, 0, S3(3, 3, 2), b4, 0);
    MATMUL(DP_DTYPE_F64, S2(2, 3), a23, 0, S3(3, 3, 2), b4, 0);
    SECTION("MatMul: i32, i64, u8");
    MATMUL(DP_DTYPE_I32, S2(2, 3), i23, 0, S2(3, 2), i32v, 0);
    MATMUL(DP_DTYPE_I64, S2(3, 2), i23, 1, S2(2, 3), i32v, 1);
    MATMUL(DP_DTYPE_U8, S2(2, 2), u22, 0, S2(2, 2), u22, 0);
    SECTION("MatMul: k = 0 gives zeros, m = 0 gives an empty result");
    matmul_case_(DP_DTYPE_F32, S2(2, 0), NULL, 0, 0, S2(0, 3), NULL, 0, 0, 0, __FILE__, __LINE__);
    matmul_case_(DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, S2(3, 4), b34, 12, 0, 0, __FILE__, __LINE__);
}

static void test_reduce(void) {
    static const char *const ops[] = {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"};
    double x[24];
    static const double ix[] = {3, -1, 4, 1, -5, 9, 2, 6, -5, 3, 5, 8}; /* [3,4] */
    static const int64_t ax1[] = {1};
    static const int64_t ax02[] = {0, 2};
    static const int64_t axm1[] = {-1};
    static const int64_t axm3m1[] = {-3, 2};
    static const int64_t ax_all[] = {0, 1, 2};
    static const int64_t ax0[] = {0};
    size_t i;
    for (i = 0; i < 24; ++i) x[i] = (double)((int)(i * 7 % 11) - 5) * 0.5;
    SECTION("reductions over one, several, negative and empty axes, with and without keep_dims");
    for (i = 0; i < COUNT(ops); ++i) {
        REDUCE(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, ax1, 0);
        REDUCE(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, ax1, 1);
        REDUCE(ops[i], DP_DTYPE_F64, S3(2, 3, 4), x, ax02, 0);
        REDUCE(ops[i], DP_DTYPE_F64, S3(2, 3, 4), x, ax02, 1);
        REDUCE(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, axm1, -1);
        REDUCE(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, axm3m1, 1);
        REDUCE(ops[i], DP_DTYPE_F64, S3(2, 3, 4), x, ax_all, 0);
        /* empty axes = all */
        reduce_case_(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, 24, NULL, 0, 1, 0, __FILE__, __LINE__);
        reduce_case_(ops[i], DP_DTYPE_F32, S3(2, 3, 4), x, 24, NULL, 0, 1, 1, __FILE__, __LINE__);
        /* no attributes at all: the defaults (all axes, keep_dims false) */
        reduce_case_(ops[i], DP_DTYPE_F64, S3(2, 3, 4), x, 24, NULL, 0, 0, -1, __FILE__, __LINE__);
        /* integers */
        REDUCE(ops[i], DP_DTYPE_I32, S2(3, 4), ix, ax0, 0);
        REDUCE(ops[i], DP_DTYPE_I64, S2(3, 4), ix, axm1, 1);
    }
    SECTION("reductions on u8, and a scalar input");
    {
        static const double u[] = {4, 250, 8, 2, 6, 4};
        static const int64_t a1[] = {1};
        static const double one[] = {2.5};
        static const double us[] = {4, 25, 8, 2, 6, 4};
        REDUCE("ReduceSum", DP_DTYPE_U8, S2(2, 3), us, a1, 0);
        REDUCE("ReduceMax", DP_DTYPE_U8, S2(2, 3), u, a1, 0);
        REDUCE("ReduceMin", DP_DTYPE_U8, S2(2, 3), u, a1, 0);
        reduce_case_("ReduceMean", DP_DTYPE_U8, S2(3, 2), u, 6, a1, 1, 1, 0, __FILE__, __LINE__);
        reduce_case_("ReduceSum", DP_DTYPE_F32, S0(), one, 1, NULL, 0, 1, 0, __FILE__, __LINE__);
    }
    SECTION("ReduceSum over a zero-sized axis gives zeros");
    {
        static const int64_t a0[] = {0};
        reduce_case_("ReduceSum", DP_DTYPE_F32, S2(0, 3), NULL, 0, a0, 1, 1, 0, __FILE__, __LINE__);
        reduce_case_("ReduceSum", DP_DTYPE_I32, S2(0, 3), NULL, 0, a0, 1, 1, 1, __FILE__, __LINE__);
    }
}

static void test_layout(void) {
    dp_attrs_t *a;
    dp_tensor_t *t, *ins[3];
    SECTION("BroadcastTo: [3] -> [2,3], [2,1] -> [2,2,3], scalar -> [2,2], bool, no-op");
    {
        static const double v3[] = {1, 2, 3};
        static const double w23[] = {1, 2, 3, 1, 2, 3};
        static const int64_t s23[] = {2, 3};
        static const double v21[] = {5, -6};
        static const double w223[] = {5, 5, 5, -6, -6, -6, 5, 5, 5, -6, -6, -6};
        static const int64_t s223[] = {2, 2, 3};
        static const double sc[] = {7};
        static const double w22[] = {7, 7, 7, 7};
        static const int64_t s22[] = {2, 2};
        static const double bv[] = {1, 0};
        static const double bw[] = {1, 0, 1, 0, 1, 0};
        static const int64_t s32[] = {3, 2};
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "shape", s23, 2));
        t = MK(DP_DTYPE_F32, S1(3), v3);
        EXPECT(RUN("BroadcastTo", &t, 1, a), DP_DTYPE_F32, S2(2, 3), w23, 0, "BroadcastTo [3]->[2,3]");
        dp_tensor_release(t);
        t = MK(DP_DTYPE_F32, S2(2, 3), w23);
        EXPECT(RUN("BroadcastTo", &t, 1, a), DP_DTYPE_F32, S2(2, 3), w23, 0, "BroadcastTo same shape");
        dp_tensor_release(t);
        CHECK_OK(dp_attrs_set_ints(a, "shape", s223, 3)); /* replaces */
        t = MK(DP_DTYPE_I32, S2(2, 1), v21);
        EXPECT(RUN("BroadcastTo", &t, 1, a), DP_DTYPE_I32, S3(2, 2, 3), w223, 0, "BroadcastTo [2,1]->[2,2,3]");
        dp_tensor_release(t);
        CHECK_OK(dp_attrs_set_ints(a, "shape", s22, 2));
        t = MK(DP_DTYPE_F64, S0(), sc);
        EXPECT(RUN("BroadcastTo", &t, 1, a), DP_DTYPE_F64, S2(2, 2), w22, 0, "BroadcastTo scalar");
        dp_tensor_release(t);
        CHECK_OK(dp_attrs_set_ints(a, "shape", s32, 2));
        t = MK(DP_DTYPE_BOOL, S1(2), bv);
        EXPECT(RUN("BroadcastTo", &t, 1, a), DP_DTYPE_BOOL, S2(3, 2), bw, 0, "BroadcastTo bool");
        dp_tensor_release(t);
        dp_attrs_destroy(a);
    }
    SECTION("Reshape: [2,3] -> [3,-1], [-1], [1,1] -> scalar, zero-sized");
    {
        static const double v[] = {1, 2, 3, 4, 5, 6};
        static const int64_t s3m[] = {3, -1};
        static const int64_t sm[] = {-1};
        static const int64_t s611[] = {6, 1, 1};
        static const double one[] = {42};
        static const int64_t s02[] = {0, 2};
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "shape", s3m, 2));
        t = MK(DP_DTYPE_I64, S2(2, 3), v);
        EXPECT(RUN("Reshape", &t, 1, a), DP_DTYPE_I64, S2(3, 2), v, 0, "Reshape [3,-1]");
        CHECK_OK(dp_attrs_set_ints(a, "shape", sm, 1));
        EXPECT(RUN("Reshape", &t, 1, a), DP_DTYPE_I64, S1(6), v, 0, "Reshape [-1]");
        CHECK_OK(dp_attrs_set_ints(a, "shape", s611, 3));
        EXPECT(RUN("Reshape", &t, 1, a), DP_DTYPE_I64, S3(6, 1, 1), v, 0, "Reshape [6,1,1]");
        dp_tensor_release(t);
        CHECK_OK(dp_attrs_set_ints(a, "shape", NULL, 0));
        t = MK(DP_DTYPE_F32, S2(1, 1), one);
        EXPECT(RUN("Reshape", &t, 1, a), DP_DTYPE_F32, S0(), one, 0, "Reshape [1,1] -> []");
        dp_tensor_release(t);
        CHECK_OK(dp_attrs_set_ints(a, "shape", s02, 2));
        t = MK_N(DP_DTYPE_F32, S3(2, 0, 5), NULL, 0);
        EXPECT_N(RUN("Reshape", &t, 1, a), DP_DTYPE_F32, S2(0, 2), NULL, 0, 0, "Reshape zero-sized");
        dp_tensor_release(t);
        dp_attrs_destroy(a);
    }
    SECTION("Transpose: perm [2,0,1], default reverse, 2-D, zero-sized");
    {
        double v[24], w[24], r[24];
        static const int64_t p201[] = {2, 0, 1};
        static const double m23[] = {1, 2, 3, 4, 5, 6};
        static const double m32[] = {1, 4, 2, 5, 3, 6};
        size_t i0, i1, i2;
        for (i0 = 0; i0 < 24; ++i0) v[i0] = (double)i0;
        /* v[i0][i1][i2] with shape [2,3,4]; w = perm [2,0,1] -> [4,2,3]; r = reverse -> [4,3,2] */
        for (i0 = 0; i0 < 2; ++i0)
            for (i1 = 0; i1 < 3; ++i1)
                for (i2 = 0; i2 < 4; ++i2) {
                    w[(i2 * 2 + i0) * 3 + i1] = v[(i0 * 3 + i1) * 4 + i2];
                    r[(i2 * 3 + i1) * 2 + i0] = v[(i0 * 3 + i1) * 4 + i2];
                }
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "perm", p201, 3));
        t = MK(DP_DTYPE_F32, S3(2, 3, 4), v);
        EXPECT(RUN("Transpose", &t, 1, a), DP_DTYPE_F32, S3(4, 2, 3), w, 0, "Transpose [2,0,1]");
        EXPECT(RUN("Transpose", &t, 1, NULL), DP_DTYPE_F32, S3(4, 3, 2), r, 0, "Transpose default");
        CHECK_OK(dp_attrs_set_ints(a, "perm", NULL, 0));
        EXPECT(RUN("Transpose", &t, 1, a), DP_DTYPE_F32, S3(4, 3, 2), r, 0, "Transpose perm []");
        dp_tensor_release(t);
        t = MK(DP_DTYPE_U8, S2(2, 3), m23);
        EXPECT(RUN("Transpose", &t, 1, NULL), DP_DTYPE_U8, S2(3, 2), m32, 0, "Transpose u8 2-D");
        dp_tensor_release(t);
        t = MK_N(DP_DTYPE_I32, S2(0, 2), NULL, 0);
        EXPECT_N(RUN("Transpose", &t, 1, NULL), DP_DTYPE_I32, S2(2, 0), NULL, 0, 0, "Transpose [0,2]");
        dp_tensor_release(t);
        dp_attrs_destroy(a);
    }
    SECTION("Concat: axis 0, 1 and -1 with three inputs; default axis; a zero-sized part");
    {
        static const double p[] = {1, 2, 3};
        static const double q[] = {4, 5, 6, 7, 8, 9};
        static const double r[] = {10, 11, 12};
        static const double want0[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        static const double c1a[] = {1, 2};
        static const double c1b[] = {3, 4, 5, 6};
        static const double c1c[] = {7, 8, 9, 10, 11, 12};
        static const double want1[] = {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12};
        static const double d1[] = {1, 2, 3, 4};       /* [2,2,1] */
        static const double d2[] = {5, 6, 7, 8};       /* [2,2,1] */
        static const double d3[] = {9, 10, 11, 12, 13, 14, 15, 16}; /* [2,2,2] */
        static const double wantm1[] = {1, 5, 9, 10, 2, 6, 11, 12, 3, 7, 13, 14, 4, 8, 15, 16};
        a = attrs_new();
        ins[0] = MK(DP_DTYPE_F32, S2(1, 3), p);
        ins[1] = MK(DP_DTYPE_F32, S2(2, 3), q);
        ins[2] = MK(DP_DTYPE_F32, S2(1, 3), r);
        CHECK_OK(dp_attrs_set_int(a, "axis", 0));
        EXPECT(RUN("Concat", ins, 3, a), DP_DTYPE_F32, S2(4, 3), want0, 0, "Concat axis 0");
        EXPECT(RUN("Concat", ins, 3, NULL), DP_DTYPE_F32, S2(4, 3), want0, 0, "Concat default axis");
        release_all(ins, 3);
        ins[0] = MK(DP_DTYPE_I32, S2(2, 1), c1a);
        ins[1] = MK(DP_DTYPE_I32, S2(2, 2), c1b);
        ins[2] = MK(DP_DTYPE_I32, S2(2, 3), c1c);
        CHECK_OK(dp_attrs_set_int(a, "axis", 1));
        EXPECT(RUN("Concat", ins, 3, a), DP_DTYPE_I32, S2(2, 6), want1, 0, "Concat axis 1");
        release_all(ins, 3);
        ins[0] = MK(DP_DTYPE_F64, S3(2, 2, 1), d1);
        ins[1] = MK(DP_DTYPE_F64, S3(2, 2, 1), d2);
        ins[2] = MK(DP_DTYPE_F64, S3(2, 2, 2), d3);
        CHECK_OK(dp_attrs_set_int(a, "axis", -1));
        EXPECT(RUN("Concat", ins, 3, a), DP_DTYPE_F64, S3(2, 2, 4), wantm1, 0, "Concat axis -1");
        release_all(ins, 3);
        ins[0] = MK(DP_DTYPE_F32, S2(1, 3), p);
        ins[1] = MK_N(DP_DTYPE_F32, S2(0, 3), NULL, 0);
        ins[2] = MK(DP_DTYPE_F32, S2(1, 3), r);
        CHECK_OK(dp_attrs_set_int(a, "axis", 0));
        {
            static const double want[] = {1, 2, 3, 10, 11, 12};
            EXPECT(RUN("Concat", ins, 3, a), DP_DTYPE_F32, S2(2, 3), want, 0, "Concat with [0,3]");
        }
        EXPECT(RUN("Concat", ins, 1, a), DP_DTYPE_F32, S2(1, 3), p, 0, "Concat of one input");
        release_all(ins, 3);
        dp_attrs_destroy(a);
    }
    SECTION("Slice: begin/size, size -1, zero-sized result");
    {
        double v[12];
        static const int64_t b11[] = {1, 1};
        static const int64_t s2m[] = {2, -1};
        static const double want1[] = {5, 6, 7, 9, 10, 11};
        static const int64_t b02[] = {0, 2};
        static const int64_t sm1[] = {-1, 1};
        static const double want2[] = {2, 6, 10};
        static const int64_t b00[] = {0, 0};
        static const int64_t s03[] = {0, 3};
        static const int64_t smm[] = {-1, -1};
        size_t i;
        for (i = 0; i < 12; ++i) v[i] = (double)i;
        a = attrs_new();
        t = MK(DP_DTYPE_F32, S2(3, 4), v);
        CHECK_OK(dp_attrs_set_ints(a, "begin", b11, 2));
        CHECK_OK(dp_attrs_set_ints(a, "size", s2m, 2));
        EXPECT(RUN("Slice", &t, 1, a), DP_DTYPE_F32, S2(2, 3), want1, 0, "Slice [1,1] [2,-1]");
        CHECK_OK(dp_attrs_set_ints(a, "begin", b02, 2));
        CHECK_OK(dp_attrs_set_ints(a, "size", sm1, 2));
        EXPECT(RUN("Slice", &t, 1, a), DP_DTYPE_F32, S2(3, 1), want2, 0, "Slice [0,2] [-1,1]");
        CHECK_OK(dp_attrs_set_ints(a, "begin", b00, 2));
        CHECK_OK(dp_attrs_set_ints(a, "size", smm, 2));
        EXPECT(RUN("Slice", &t, 1, a), DP_DTYPE_F32, S2(3, 4), v, 0, "Slice everything");
        CHECK_OK(dp_attrs_set_ints(a, "size", s03, 2));
        EXPECT_N(RUN("Slice", &t, 1, a), DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, "Slice size 0");
        dp_tensor_release(t);
        t = MK(DP_DTYPE_I64, S2(3, 4), v);
        CHECK_OK(dp_attrs_set_ints(a, "begin", b11, 2));
        CHECK_OK(dp_attrs_set_ints(a, "size", s2m, 2));
        EXPECT(RUN("Slice", &t, 1, a), DP_DTYPE_I64, S2(2, 3), want1, 0, "Slice i64");
        dp_tensor_release(t);
        dp_attrs_destroy(a);
    }
}

static void test_fill_iota_addn(void) {
    dp_attrs_t *a;
    dp_tensor_t *ins[3];
    SECTION("Fill: default dtype f32, i32 (value given as an int), bool, scalar, zero-sized");
    {
        static const int64_t s23[] = {2, 3};
        static const double f25[] = {2.5, 2.5, 2.5, 2.5, 2.5, 2.5};
        static const double i7[] = {7, 7, 7, 7, 7, 7};
        static const double b1[] = {1, 1, 1, 1, 1, 1};
        static const double neg[] = {-1.25};
        static const int64_t s02[] = {0, 2};
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "shape", s23, 2));
        CHECK_OK(dp_attrs_set_float(a, "value", 2.5));
        EXPECT(RUN("Fill", NULL, 0, a), DP_DTYPE_F32, S2(2, 3), f25, 0, "Fill f32 default");
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_I32));
        CHECK_OK(dp_attrs_set_int(a, "value", 7));
        EXPECT(RUN("Fill", NULL, 0, a), DP_DTYPE_I32, S2(2, 3), i7, 0, "Fill i32");
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_BOOL));
        CHECK_OK(dp_attrs_set_float(a, "value", 1.0));
        EXPECT(RUN("Fill", NULL, 0, a), DP_DTYPE_BOOL, S2(2, 3), b1, 0, "Fill bool");
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_F64));
        CHECK_OK(dp_attrs_set_float(a, "value", -1.25));
        CHECK_OK(dp_attrs_set_ints(a, "shape", NULL, 0));
        EXPECT(RUN("Fill", NULL, 0, a), DP_DTYPE_F64, S0(), neg, 0, "Fill scalar");
        CHECK_OK(dp_attrs_set_ints(a, "shape", s02, 2));
        EXPECT_N(RUN("Fill", NULL, 0, a), DP_DTYPE_F64, S2(0, 2), NULL, 0, 0, "Fill [0,2]");
        dp_attrs_destroy(a);
    }
    SECTION("Iota: default i64 [5], axis 0/1/-1 on [2,3] in f32, i32, u8");
    {
        static const int64_t s5[] = {5};
        static const double w5[] = {0, 1, 2, 3, 4};
        static const int64_t s23[] = {2, 3};
        static const double wa1[] = {0, 1, 2, 0, 1, 2};
        static const double wa0[] = {0, 0, 0, 1, 1, 1};
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "shape", s5, 1));
        EXPECT(RUN("Iota", NULL, 0, a), DP_DTYPE_I64, S1(5), w5, 0, "Iota default");
        CHECK_OK(dp_attrs_set_ints(a, "shape", s23, 2));
        CHECK_OK(dp_attrs_set_int(a, "axis", 1));
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_F32));
        EXPECT(RUN("Iota", NULL, 0, a), DP_DTYPE_F32, S2(2, 3), wa1, 0, "Iota axis 1");
        CHECK_OK(dp_attrs_set_int(a, "axis", 0));
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_I32));
        EXPECT(RUN("Iota", NULL, 0, a), DP_DTYPE_I32, S2(2, 3), wa0, 0, "Iota axis 0");
        CHECK_OK(dp_attrs_set_int(a, "axis", -1));
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_U8));
        EXPECT(RUN("Iota", NULL, 0, a), DP_DTYPE_U8, S2(2, 3), wa1, 0, "Iota axis -1");
        CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_F64));
        CHECK_OK(dp_attrs_set_int(a, "axis", 0));
        CHECK_OK(dp_attrs_set_ints(a, "shape", s5, 1));
        EXPECT(RUN("Iota", NULL, 0, a), DP_DTYPE_F64, S1(5), w5, 0, "Iota f64");
        dp_attrs_destroy(a);
    }
    SECTION("AddN: three f32 inputs, one i32 input, i64, u8, scalars");
    {
        static const double x[] = {1, 2, 3, 4};
        static const double y[] = {0.5, -2, 10, 0};
        static const double z[] = {-1, 1, -1, 1};
        static const double s3[] = {0.5, 1, 12, 5};
        static const double sc[] = {3};
        static const double sc3[] = {9};
        ins[0] = MK(DP_DTYPE_F32, S2(2, 2), x);
        ins[1] = MK(DP_DTYPE_F32, S2(2, 2), y);
        ins[2] = MK(DP_DTYPE_F32, S2(2, 2), z);
        EXPECT(RUN("AddN", ins, 3, NULL), DP_DTYPE_F32, S2(2, 2), s3, 0, "AddN f32 x3");
        release_all(ins, 3);
        ins[0] = MK(DP_DTYPE_I32, S1(4), x);
        EXPECT(RUN("AddN", ins, 1, NULL), DP_DTYPE_I32, S1(4), x, 0, "AddN of one");
        dp_tensor_release(ins[0]);
        ins[0] = MK(DP_DTYPE_I64, S1(4), x);
        ins[1] = MK(DP_DTYPE_I64, S1(4), z);
        {
            static const double want[] = {0, 3, 2, 5};
            EXPECT(RUN("AddN", ins, 2, NULL), DP_DTYPE_I64, S1(4), want, 0, "AddN i64");
        }
        release_all(ins, 2);
        ins[0] = MK(DP_DTYPE_U8, S1(4), x);
        ins[1] = MK(DP_DTYPE_U8, S1(4), x);
        {
            static const double want[] = {2, 4, 6, 8};
            EXPECT(RUN("AddN", ins, 2, NULL), DP_DTYPE_U8, S1(4), want, 0, "AddN u8");
        }
        release_all(ins, 2);
        ins[0] = MK(DP_DTYPE_F64, S0(), sc);
        ins[1] = MK(DP_DTYPE_F64, S0(), sc);
        ins[2] = MK(DP_DTYPE_F64, S0(), sc);
        EXPECT(RUN("AddN", ins, 3, NULL), DP_DTYPE_F64, S0(), sc3, 0, "AddN scalars");
        release_all(ins, 3);
    }
}

/* softmax (log: log-softmax) of a [r, c] matrix along `axis` (0 or 1) */
static void softmax_ref(const double *x, int r, int c, int axis, int log_, double *out) {
    int i, j;
    int outer = axis == 1 ? r : c, inner = axis == 1 ? c : r;
    for (i = 0; i < outer; ++i) {
        double m = -INFINITY, s = 0;
#define AT(k) (axis == 1 ? (i * c + (k)) : ((k) * c + i))
        for (j = 0; j < inner; ++j) m = x[AT(j)] > m ? x[AT(j)] : m;
        for (j = 0; j < inner; ++j) s += m_exp(x[AT(j)] - m);
        for (j = 0; j < inner; ++j)
            out[AT(j)] = log_ ? (x[AT(j)] - m) - m_log(s) : m_exp(x[AT(j)] - m) / s;
#undef AT
    }
}

static void test_composites(void) {
    static const double xs[] = {-3.0, -0.5, 0.0, 0.25, 2.0, 5.5};
    static const double ints[] = {-3, -1, 0, 1, 2, 7};
    static const double sm[] = {1.0, 2.0, 3.0, -1.0, 0.0, 100.0};
    double ref[6], f32in[6];
    dp_tensor_t *t, *out;
    dp_attrs_t *a;
    size_t i;
    SECTION("Relu on f32, f64, i32, i64 (native on the CPU: reason default)");
    UNARY("Relu", DP_DTYPE_F32, S2(2, 3), xs, 0);
    UNARY("Relu", DP_DTYPE_F64, S1(6), xs, 0);
    UNARY("Relu", DP_DTYPE_I32, S1(6), ints, 0);
    UNARY("Relu", DP_DTYPE_I64, S2(3, 2), ints, 0);
    SECTION("Gelu on f32 and f64 (tanh approximation; decomposed on the CPU)");
    UNARY("Gelu", DP_DTYPE_F32, S2(2, 3), xs, 1e-5);
    UNARY("Gelu", DP_DTYPE_F64, S1(6), xs, 1e-12);
    SECTION("Softmax: rows sum to 1 and match the reference; axis 0; large values");
    for (i = 0; i < 6; ++i) f32in[i] = (double)(float)sm[i];
    softmax_ref(f32in, 2, 3, 1, 0, ref);
    t = MK(DP_DTYPE_F32, S2(2, 3), sm);
    out = RUN("Softmax", &t, 1, NULL);
    if (out) {
        float got[6];
        CHECK_OK(dp_tensor_read(out, got, sizeof got));
        CHECKF(m_abs((double)got[0] + got[1] + got[2] - 1.0) < 1e-6, "row 0 sums to %.9g", (double)got[0] + got[1] + got[2]);
        CHECKF(m_abs((double)got[3] + got[4] + got[5] - 1.0) < 1e-6, "row 1 sums to %.9g", (double)got[3] + got[4] + got[5]);
        dp_tensor_retain(out);
        EXPECT(out, DP_DTYPE_F32, S2(2, 3), ref, 1e-6, "Softmax f32 axis -1");
        dp_tensor_release(out);
    }
    dp_tensor_release(t);
    a = attrs_new();
    CHECK_OK(dp_attrs_set_int(a, "axis", 0));
    softmax_ref(sm, 2, 3, 0, 0, ref);
    t = MK(DP_DTYPE_F64, S2(2, 3), sm);
    EXPECT(RUN("Softmax", &t, 1, a), DP_DTYPE_F64, S2(2, 3), ref, 1e-13, "Softmax f64 axis 0");
    SECTION("LogSoftmax: f64 axis 0 and f32 axis -1; exp of it sums to 1");
    softmax_ref(sm, 2, 3, 0, 1, ref);
    EXPECT(RUN("LogSoftmax", &t, 1, a), DP_DTYPE_F64, S2(2, 3), ref, 1e-13, "LogSoftmax f64 axis 0");
    dp_tensor_release(t);
    CHECK_OK(dp_attrs_set_int(a, "axis", -1));
    softmax_ref(f32in, 2, 3, 1, 1, ref);
    t = MK(DP_DTYPE_F32, S2(2, 3), sm);
    out = RUN("LogSoftmax", &t, 1, a);
    if (out) {
        float got[6];
        CHECK_OK(dp_tensor_read(out, got, sizeof got));
        CHECKF(m_abs(m_exp(got[0]) + m_exp(got[1]) + m_exp(got[2]) - 1.0) < 1e-5, "m_exp(row 0) sums to %.9g",
               m_exp(got[0]) + m_exp(got[1]) + m_exp(got[2]));
        EXPECT(out, DP_DTYPE_F32, S2(2, 3), ref, 1e-5, "LogSoftmax f32 axis -1");
    }
    dp_tensor_release(t);
    dp_attrs_destroy(a);
    test_gemm();
}

/* Gemm: relu?(alpha * a' x b' + beta * c), c broadcast to [m, n]; checked against loops. */
static void gemm_ref(const double *a, const double *b, const double *c, size_t cr, size_t cc, int ta,
                     int tb, double alpha, double beta, int relu, size_t m, size_t k, size_t n,
                     double *out) {
    size_t i, j, p;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) {
            double acc = 0, v;
            for (p = 0; p < k; ++p) acc += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            v = alpha * acc + beta * c[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
            out[i * n + j] = relu && v < 0 ? 0 : v;
        }
}

static void test_gemm(void) {
    static const double a23[] = {1.5, -2.0, 3.25, 0.5, 4.0, -1.75};
    static const double b34[] = {1, -1, 2, 0.5, -3, 2, 1, 1, 0.25, 4, -2, 1};
    static const double c4[] = {0.5, -8, 1, 2};
    static const double c21[] = {10, -10};
    double ref[8];
    int dt, relu, ta;
    SECTION("Gemm: alpha, beta, transposes, c as [n] and [m,1], fused ReLU; f32 and f64");
    for (dt = 0; dt < 2; ++dt)
        for (relu = 0; relu < 2; ++relu)
            for (ta = 0; ta < 2; ++ta) {
                const dp_dtype_t d = dt ? DP_DTYPE_F64 : DP_DTYPE_F32;
                dp_attrs_t *at = attrs_new();
                dp_tensor_t *ins[3];
                /* a stored [3,2] when transposed: its transpose is a23 as [2,3]. */
                double at32[6];
                size_t i, p;
                for (i = 0; i < 2; ++i)
                    for (p = 0; p < 3; ++p) at32[p * 2 + i] = a23[i * 3 + p];
                CHECK_OK(dp_attrs_set_bool(at, "transpose_a", ta));
                CHECK_OK(dp_attrs_set_float(at, "alpha", 0.5));
                CHECK_OK(dp_attrs_set_float(at, "beta", 2.0));
                CHECK_OK(dp_attrs_set_bool(at, "relu", relu));
                ins[0] = ta ? MK(d, S2(3, 2), at32) : MK(d, S2(2, 3), a23);
                ins[1] = MK(d, S2(3, 4), b34);
                ins[2] = MK(d, S1(4), c4);
                gemm_ref(a23, b34, c4, 1, 4, 0, 0, 0.5, 2.0, relu, 2, 3, 4, ref);
                EXPECT(RUN("Gemm", ins, 3, at), d, S2(2, 4), ref, dt ? 1e-12 : 1e-5, "Gemm c [4]");
                dp_tensor_release(ins[2]);
                ins[2] = MK(d, S2(2, 1), c21);
                gemm_ref(a23, b34, c21, 2, 1, 0, 0, 0.5, 2.0, relu, 2, 3, 4, ref);
                EXPECT(RUN("Gemm", ins, 3, at), d, S2(2, 4), ref, dt ? 1e-12 : 1e-5, "Gemm c [2,1]");
                release_all(ins, 3);
                dp_attrs_destroy(at);
            }
    {
        dp_tensor_t *ins[3];
        dp_tensor_t *out = NULL;
        dp_op_t *op = NULL;
        SECTION("Gemm: a c that does not broadcast to [m, n] is INVALID_ARGUMENT naming 'c'");
        ins[0] = MK(DP_DTYPE_F32, S2(2, 3), a23);
        ins[1] = MK(DP_DTYPE_F32, S2(3, 4), b34);
        ins[2] = MK_N(DP_DTYPE_F32, S1(3), c4, 3);
        CHECK_OK(dp_runtime_find_op(g_rt, "Gemm", &op));
        CHECK_STATUS_MSG(dp_op_run(g_rt, op, ins, 3, NULL, NULL, &out, 1, NULL), DP_INVALID_ARGUMENT,
                         "input 'c'");
        CHECK(out == NULL);
        release_all(ins, 3);
    }
}

static void test_zero_sized_and_scalars(void) {
    static const double v3[] = {1, 2, 3};
    static const double one[] = {4};
    static const double two[] = {-2.5};
    dp_tensor_t *ins[2];
    SECTION("zero-sized dims and scalars through elementwise ops");
    ins[0] = MK_N(DP_DTYPE_F32, S2(0, 3), NULL, 0);
    ins[1] = MK(DP_DTYPE_F32, S1(3), v3);
    EXPECT_N(RUN("Add", ins, 2, NULL), DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, "Add [0,3]+[3]");
    EXPECT_N(RUN("Less", ins, 2, NULL), DP_DTYPE_BOOL, S2(0, 3), NULL, 0, 0, "Less [0,3] [3]");
    EXPECT_N(RUN("Exp", ins, 1, NULL), DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, "Exp [0,3]");
    EXPECT_N(RUN("Relu", ins, 1, NULL), DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, "Relu [0,3]");
    EXPECT_N(RUN("Softmax", ins, 1, NULL), DP_DTYPE_F32, S2(0, 3), NULL, 0, 0, "Softmax [0,3]");
    release_all(ins, 2);
    ins[0] = MK_N(DP_DTYPE_I64, S1(0), NULL, 0);
    ins[1] = MK(DP_DTYPE_I64, S0(), one);
    EXPECT_N(RUN("Mul", ins, 2, NULL), DP_DTYPE_I64, S1(0), NULL, 0, 0, "Mul [0]*scalar");
    release_all(ins, 2);
    ins[0] = MK(DP_DTYPE_F64, S0(), one);
    ins[1] = MK(DP_DTYPE_F64, S0(), two);
    {
        static const double sum[] = {1.5};
        static const double prod[] = {-10};
        static const double neg[] = {-4};
        EXPECT(RUN("Add", ins, 2, NULL), DP_DTYPE_F64, S0(), sum, 0, "scalar + scalar");
        EXPECT(RUN("Mul", ins, 2, NULL), DP_DTYPE_F64, S0(), prod, 0, "scalar * scalar");
        EXPECT(RUN("Neg", ins, 1, NULL), DP_DTYPE_F64, S0(), neg, 0, "Neg scalar");
    }
    release_all(ins, 2);
}

/* The placement callback: events, replacement, removal, and exactly one drop per install. */
static plog cb_a, cb_b, cb_c, cb_d;

static void test_placement_callback(void) {
    static const double v[] = {1, 2, 3};
    static const double w[] = {2, 4, 6};
    dp_runtime_t *rt = new_runtime(2);
    dp_device_t *c0 = find_device(rt, "CPU:0"), *c1 = find_device(rt, "CPU:1");
    dp_tensor_t *ins[2];
    dp_run_options_t o;
    int n_before;
    SECTION("placement callback: reasons default / explicit, detail, decomposed parts");
    memset(&cb_a, 0, sizeof cb_a);
    memset(&cb_b, 0, sizeof cb_b);
    memset(&cb_c, 0, sizeof cb_c);
    memset(&cb_d, 0, sizeof cb_d);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &cb_a, on_drop));
    ins[0] = MK_ON(c0, DP_DTYPE_F32, S1(3), v);
    ins[1] = MK_ON(c0, DP_DTYPE_F32, S1(3), v);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add default");
    CHECK(cb_a.n == 1);
    CHECK_LOG(&cb_a, "Add", "HOST:0", "default", "kernel from built-in");
    CHECK(strcmp(cb_a.detail[0], "kernel from built-in") == 0);
    dp_run_options_init(&o, sizeof o);
    o.device = c0;
    log_clear(&cb_a);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, &o), DP_DTYPE_F32, S1(3), w, 0, "Add on CPU:0");
    CHECK(cb_a.n == 1);
    CHECK_LOG(&cb_a, "Add", "HOST:0", "explicit", "kernel from built-in");
    release_all(ins, 2);
    ins[0] = MK_ON(c1, DP_DTYPE_F32, S1(3), v);
    ins[1] = MK_ON(c1, DP_DTYPE_F32, S1(3), v);
    o.device = c1;
    log_clear(&cb_a);
    {
        dp_tensor_t *out = RUN_OPT(rt, "Mul", ins, 2, NULL, &o);
        static const double sq[] = {1, 4, 9};
        if (out) CHECK(dp_tensor_device(out) == c1);
        EXPECT(out, DP_DTYPE_F32, S1(3), sq, 0, "Mul on CPU:1");
    }
    CHECK(cb_a.n == 1);
    CHECK_LOG(&cb_a, "Mul", "HOST:1", "explicit", "kernel from built-in");
    release_all(ins, 2);
    ins[0] = MK_ON(c0, DP_DTYPE_F32, S2(1, 3), v);
    log_clear(&cb_a);
    {
        dp_tensor_t *out = RUN_OPT(rt, "Gelu", ins, 1, NULL, NULL);
        dp_tensor_release(out);
    }
    CHECK_LOG(&cb_a, "Gelu", "HOST:0", "decomposed", NULL);
    CHECK_LOG(&cb_a, "Mul", "HOST:0", "decomposed", "kernel from built-in");
    CHECK_LOG(&cb_a, "Add", "HOST:0", "decomposed", "kernel from built-in");
    CHECK_LOG(&cb_a, "Tanh", "HOST:0", "decomposed", "kernel from built-in");
    log_clear(&cb_a);
    {
        /* Softmax has a CPU kernel: one event, no decomposition. */
        dp_tensor_t *out = RUN_OPT(rt, "Softmax", ins, 1, NULL, NULL);
        dp_tensor_release(out);
    }
    CHECK(cb_a.n == 1);
    CHECK_LOG(&cb_a, "Softmax", "HOST:0", "default", "kernel from built-in");
    CHECK(cb_a.bad_struct == 0 && cb_a.overflow == 0);
    dp_tensor_release(ins[0]);

    SECTION("placement callback: replaced (old drop once), removed, runtime destroyed");
    ins[0] = MK_ON(c0, DP_DTYPE_F32, S1(3), v);
    ins[1] = MK_ON(c0, DP_DTYPE_F32, S1(3), v);
    CHECK(cb_a.drops == 0);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &cb_b, on_drop));
    CHECK(cb_a.drops == 1);
    CHECK(cb_b.drops == 0);
    n_before = cb_a.n;
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add after replace");
    CHECK(cb_a.n == n_before);
    CHECK(cb_b.n == 1);
    CHECK_LOG(&cb_b, "Add", "HOST:0", "default", "kernel from built-in");
    /* removing it: drop runs, nothing is reported any more */
    CHECK_OK(dp_runtime_set_placement_callback(rt, NULL, NULL, NULL));
    CHECK(cb_b.drops == 1);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add without callback");
    CHECK(cb_b.n == 1 && cb_a.n == n_before);
    /* fn NULL with a drop: nothing is installed, so the drop runs at once (exactly once) */
    CHECK_OK(dp_runtime_set_placement_callback(rt, NULL, &cb_d, on_drop));
    CHECK(cb_d.drops == 1);
    /* the same user data installed twice: one drop per installation */
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &cb_c, on_drop));
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &cb_c, on_drop));
    CHECK(cb_c.drops == 1);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add reinstalled");
    CHECK(cb_c.n == 1);
    release_all(ins, 2);
    dp_runtime_destroy(rt);
    CHECK(cb_c.drops == 2);
    CHECK(cb_a.drops == 1 && cb_b.drops == 1 && cb_d.drops == 1);
    /* a runtime destroyed with a callback installed and never replaced: drop exactly once */
    rt = new_runtime(1);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &cb_d, on_drop));
    dp_runtime_destroy(rt);
    CHECK(cb_d.drops == 2);
}

/* A callback that runs an op is not called again for that op's event (it would call itself
 * without end); the op's result is right, and the next op outside the callback is reported. */
typedef struct reentry {
    dp_runtime_t *rt;
    int calls, ran, ok;
    char ops[8][32];
} reentry;

static void on_place_run(const dp_placement_event_t *e, void *user_data) {
    reentry *r = (reentry *)user_data;
    static const double v[] = {1, 2};
    if (r->calls < 8) snprintf(r->ops[r->calls], sizeof r->ops[0], "%s", e->op);
    r->calls++;
    if (r->calls > 8) return; /* a runaway recursion would end here, and fail below */
    {
        dp_tensor_t *in = MK_ON(find_device(r->rt, "CPU:0"), DP_DTYPE_F32, S1(2), v);
        dp_tensor_t *out = NULL;
        dp_op_t *neg = NULL;
        float got[2] = {0, 0};
        if (dp_runtime_find_op(r->rt, "Neg", &neg) == DP_OK &&
            dp_op_run(r->rt, neg, &in, 1, NULL, NULL, &out, 1, NULL) == DP_OK &&
            dp_tensor_read(out, got, sizeof got) == DP_OK && got[0] == -1.0f && got[1] == -2.0f)
            r->ok++;
        r->ran++;
        dp_tensor_release(out);
        dp_tensor_release(in);
    }
}

static void test_placement_callback_runs_ops(void) {
    static const double v[] = {1, 2, 3};
    static const double w[] = {2, 4, 6};
    static reentry r;
    dp_runtime_t *rt = new_runtime(1);
    dp_tensor_t *ins[2];
    SECTION("placement callback that runs ops: not called for them, no recursion");
    memset(&r, 0, sizeof r);
    r.rt = rt;
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place_run, &r, NULL));
    ins[0] = MK_ON(find_device(rt, "CPU:0"), DP_DTYPE_F32, S1(3), v);
    ins[1] = MK_ON(find_device(rt, "CPU:0"), DP_DTYPE_F32, S1(3), v);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add");
    CHECK(r.calls == 1 && r.ran == 1 && r.ok == 1);
    CHECK(strcmp(r.ops[0], "Add") == 0);
    EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, NULL), DP_DTYPE_F32, S1(3), w, 0, "Add again");
    CHECK(r.calls == 2 && r.ok == 2);
    CHECK(strcmp(r.ops[1], "Add") == 0);
    release_all(ins, 2);
    dp_runtime_destroy(rt);
}

/* Inputs on another device than the op's are copied there ("input copied"). */
static void test_input_copied(void) {
    static const double x[] = {1, 2, 3, 4};
    static const double y[] = {10, 20, 30, 40};
    static const double sum[] = {11, 22, 33, 44};
    static plog l;
    dp_runtime_t *rt = new_runtime(2);
    dp_device_t *c0 = find_device(rt, "CPU:0"), *c1 = find_device(rt, "CPU:1");
    dp_tensor_t *ins[2], *out;
    dp_run_options_t o;
    SECTION("inputs on CPU:1, op run on CPU:0: copied and logged");
    memset(&l, 0, sizeof l);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &l, on_drop));
    ins[0] = MK_ON(c1, DP_DTYPE_F32, S1(4), x);
    ins[1] = MK_ON(c0, DP_DTYPE_F32, S1(4), y);
    dp_run_options_init(&o, sizeof o);
    o.device = c0;
    out = RUN_OPT(rt, "Add", ins, 2, NULL, &o);
    if (out) CHECKF(dp_tensor_device(out) == c0, "output on %s", dp_device_name(dp_tensor_device(out)));
    EXPECT(out, DP_DTYPE_F32, S1(4), sum, 0, "Add with an input on CPU:1");
    CHECK_LOG(&l, "Add", "HOST:0", "input copied", "HOST:1");
    CHECK_LOG(&l, "Add", "HOST:0", "explicit", "kernel from built-in");
    CHECK(log_find(&l, NULL, NULL, "input copied", NULL) >= 0 && l.n == 2);
    /* the inputs are unchanged and still where they were */
    CHECK(dp_tensor_device(ins[0]) == c1);
    dp_tensor_retain(ins[0]);
    EXPECT(ins[0], DP_DTYPE_F32, S1(4), x, 0, "input unchanged");
    SECTION("both inputs on CPU:1, no device given: the default device CPU:0, two copies");
    dp_tensor_release(ins[1]);
    ins[1] = MK_ON(c1, DP_DTYPE_F32, S1(4), y);
    log_clear(&l);
    out = RUN_OPT(rt, "Add", ins, 2, NULL, NULL);
    if (out) CHECK(dp_tensor_device(out) == c0);
    EXPECT(out, DP_DTYPE_F32, S1(4), sum, 0, "Add on the default device");
    CHECK_LOG(&l, "Add", "HOST:0", "default", "kernel from built-in");
    {
        int i, copies = 0;
        for (i = 0; i < l.n; ++i) copies += strcmp(l.reason[i], "input copied") == 0;
        CHECKF(copies == 2, "%d input copies logged, expected 2", copies);
    }
    release_all(ins, 2);
    dp_runtime_destroy(rt);
    CHECK(l.drops == 1);
}

static dp_runtime_t *sim_runtime(const char *const *opts, size_t n, dp_device_t **sim, dp_device_t **cpu) {
    dp_runtime_t *rt = new_runtime(1);
    dp_status_t st = dp_runtime_load_plugin(rt, SIM_PATH, opts, n);
    if (st != DP_OK) {
        char msg[512];
        dp_test_copy_message_(msg, sizeof msg);
        CHECKF(0, "loading %s -> %s: %s", SIM_PATH, dp_status_str(st), msg);
        dp_runtime_destroy(rt);
        return NULL;
    }
    *sim = find_device(rt, "SIM:0");
    *cpu = find_device(rt, "CPU:0");
    return rt;
}

/* SIM registers no kernel at all: everything falls back. */
static void test_sim_without_kernels(void) {
    static const char *const opts[] = {"kernels=0"};
    static const double x[] = {1, 2, 3, 4, 5, 6};
    static const double y[] = {10, 20, 30};
    static const double sum[] = {11, 22, 33, 14, 25, 36};
    static const double sm[] = {1.0, 2.0, 3.0, -1.0, 0.0, 100.0};
    static plog l;
    dp_device_t *sim = NULL, *cpu = NULL;
    dp_runtime_t *rt;
    dp_tensor_t *ins[2], *out;
    dp_run_options_t o;
    SECTION("SIM with kernels=0: Add soft-placed to the CPU (default soft placement, and ON)");
    rt = sim_runtime(opts, 1, &sim, &cpu);
    if (rt == NULL) return;
    memset(&l, 0, sizeof l);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &l, on_drop));
    ins[0] = MK_ON(sim, DP_DTYPE_F32, S2(2, 3), x);
    ins[1] = MK_ON(sim, DP_DTYPE_F32, S1(3), y);
    dp_run_options_init(&o, sizeof o);
    CHECK(o.struct_size == sizeof o && o.device == NULL && o.soft_placement == DP_SOFT_PLACEMENT_DEFAULT);
    o.device = sim;
    out = RUN_OPT(rt, "Add", ins, 2, NULL, &o);
    if (out) CHECKF(dp_tensor_device(out) == cpu, "soft-placed output on %s, expected CPU:0",
                    dp_device_name(dp_tensor_device(out)));
    EXPECT(out, DP_DTYPE_F32, S2(2, 3), sum, 0, "Add soft-placed");
    CHECK_LOG(&l, "Add", "HOST:0", "soft-placed", NULL);
    /* DESIGN.md: the log records op, device, reason *and the kernel's source*; a soft-placed
     * op ran the CPU's built-in kernel, so its event should say so */
    CHECK_LOG(&l, "Add", "HOST:0", "soft-placed", "built-in");
    CHECK_LOG(&l, "Add", "HOST:0", "input copied", "SIM:0");
    CHECKF(log_find(&l, "Add", "SIM:0", NULL, NULL) < 0, "an event says Add ran on SIM:0");
    o.soft_placement = DP_SOFT_PLACEMENT_ON;
    log_clear(&l);
    out = RUN_OPT(rt, "Add", ins, 2, NULL, &o);
    if (out) CHECK(dp_tensor_device(out) == cpu);
    EXPECT(out, DP_DTYPE_F32, S2(2, 3), sum, 0, "Add soft placement ON");
    CHECK_LOG(&l, "Add", "HOST:0", "soft-placed", NULL);

    SECTION("SIM with kernels=0, strict: DP_NOT_FOUND naming op, device, strict, kernel places");
    o.soft_placement = DP_SOFT_PLACEMENT_OFF;
    {
        dp_op_t *add = NULL;
        dp_tensor_t *outs[2];
        size_t count = 4242;
        char msg[1024];
        outs[0] = outs[1] = SENTINEL(dp_tensor_t);
        CHECK_OK(dp_runtime_find_op(rt, "Add", &add));
        CHECK_STATUS_MSG(dp_op_run(rt, add, ins, 2, NULL, &o, outs, 2, &count), DP_NOT_FOUND, "Add");
        dp_test_copy_message_(msg, sizeof msg);
        CHECKF(strstr(msg, "SIM:0") != NULL, "message does not name the device SIM:0: %s", msg);
        CHECKF(dp_test_message_matches_(msg, "strict"), "message does not say strict: %s", msg);
        CHECKF(strstr(msg, "CPU bound to HOST") != NULL, "message does not list the CPU kernel: %s", msg);
        CHECK_UNTOUCHED(dp_tensor_t, outs[0]);
        CHECK_UNTOUCHED(dp_tensor_t, outs[1]);
        CHECK(count == 4242);
    }
    release_all(ins, 2);

    SECTION("SIM with kernels=0: Softmax decomposed on SIM, its parts soft-placed");
    ins[0] = MK_ON(sim, DP_DTYPE_F32, S2(2, 3), sm);
    o.soft_placement = DP_SOFT_PLACEMENT_DEFAULT;
    log_clear(&l);
    out = RUN_OPT(rt, "Softmax", ins, 1, NULL, &o);
    {
        double ref[6], f[6];
        size_t i;
        for (i = 0; i < 6; ++i) f[i] = (double)(float)sm[i];
        softmax_ref(f, 2, 3, 1, 0, ref);
        EXPECT(out, DP_DTYPE_F32, S2(2, 3), ref, 1e-6, "Softmax on SIM without kernels");
    }
    CHECK_LOG(&l, "Softmax", "SIM:0", "decomposed", NULL);
    CHECK_LOG(&l, NULL, "HOST:0", "soft-placed", NULL);
    CHECK_LOG(&l, "ReduceMax", "HOST:0", "soft-placed", NULL);
    CHECK_LOG(&l, "Exp", "HOST:0", "soft-placed", NULL);
    CHECK_LOG(&l, "Div", "HOST:0", "soft-placed", NULL);
    {
        dp_op_t *softmax = NULL;
        dp_tensor_t *outs[1];
        char msg[1024];
        outs[0] = SENTINEL(dp_tensor_t);
        o.soft_placement = DP_SOFT_PLACEMENT_OFF;
        CHECK_OK(dp_runtime_find_op(rt, "Softmax", &softmax));
        CHECK_STATUS_MSG(dp_op_run(rt, softmax, ins, 1, NULL, &o, outs, 1, NULL), DP_NOT_FOUND, "Softmax");
        dp_test_copy_message_(msg, sizeof msg);
        CHECKF(strstr(msg, "ReduceMax") != NULL, "strict Softmax on SIM: message does not name the missing part: %s", msg);
        CHECKF(dp_test_message_matches_(msg, "strict"), "message does not say strict: %s", msg);
        CHECK_UNTOUCHED(dp_tensor_t, outs[0]);
    }
    dp_tensor_release(ins[0]);

    SECTION("SIM with kernels=0: Relu (CPU-native, decomposable) decomposes on SIM");
    {
        static const double r[] = {-1, 2, -3, 4};
        static const double want[] = {0, 2, 0, 4};
        ins[0] = MK_ON(sim, DP_DTYPE_F32, S1(4), r);
        o.soft_placement = DP_SOFT_PLACEMENT_DEFAULT;
        log_clear(&l);
        EXPECT(RUN_OPT(rt, "Relu", ins, 1, NULL, &o), DP_DTYPE_F32, S1(4), want, 0, "Relu on SIM");
        CHECK_LOG(&l, "Relu", "SIM:0", "decomposed", NULL);
        CHECK_LOG(&l, "Maximum", "HOST:0", "soft-placed", NULL);
        dp_tensor_release(ins[0]);
    }
    dp_runtime_destroy(rt);
    CHECK(l.drops == 1);
}

/* SIM as it is shipped (native kernels for whatever ops it has): the same values. */
static void test_sim_default(void) {
    static const double x[] = {1, 2, 3, 4, 5, 6};
    static const double y[] = {10, 20, 30};
    static const double w[] = {1, 0, -1, 2, 0.5, 1}; /* [3,2] */
    static plog l;
    dp_device_t *sim = NULL, *cpu = NULL;
    dp_runtime_t *rt;
    dp_tensor_t *ins[2], *t;
    dp_run_options_t o;
    dp_attrs_t *a;
    SECTION("SIM with its default kernels: Add, Mul, Sub, MatMul, ReduceSum, Softmax values");
    rt = sim_runtime(NULL, 0, &sim, &cpu);
    if (rt == NULL) return;
    memset(&l, 0, sizeof l);
    CHECK_OK(dp_runtime_set_placement_callback(rt, on_place, &l, on_drop));
    dp_run_options_init(&o, sizeof o);
    o.device = sim;
    ins[0] = MK_ON(sim, DP_DTYPE_F32, S2(2, 3), x);
    ins[1] = MK_ON(sim, DP_DTYPE_F32, S1(3), y);
    {
        static const double sum[] = {11, 22, 33, 14, 25, 36};
        static const double prod[] = {10, 40, 90, 40, 100, 180};
        static const double diff[] = {-9, -18, -27, -6, -15, -24};
        EXPECT(RUN_OPT(rt, "Add", ins, 2, NULL, &o), DP_DTYPE_F32, S2(2, 3), sum, 0, "Add on SIM");
        EXPECT(RUN_OPT(rt, "Mul", ins, 2, NULL, &o), DP_DTYPE_F32, S2(2, 3), prod, 0, "Mul on SIM");
        EXPECT(RUN_OPT(rt, "Sub", ins, 2, NULL, &o), DP_DTYPE_F32, S2(2, 3), diff, 0, "Sub on SIM");
        CHECK_LOG(&l, "Add", NULL, NULL, NULL);
        CHECK_LOG(&l, "Mul", NULL, NULL, NULL);
        CHECK_LOG(&l, "Sub", NULL, NULL, NULL);
    }
    dp_tensor_release(ins[1]);
    ins[1] = MK_ON(sim, DP_DTYPE_F32, S2(3, 2), w);
    {
        static const double mm[] = {0.5, 7, 2, 16};
        static const int64_t ax1[] = {1};
        static const double rs[] = {6, 15};
        EXPECT(RUN_OPT(rt, "MatMul", ins, 2, NULL, &o), DP_DTYPE_F32, S2(2, 2), mm, 0, "MatMul on SIM");
        a = attrs_new();
        CHECK_OK(dp_attrs_set_ints(a, "axes", ax1, 1));
        EXPECT(RUN_OPT(rt, "ReduceSum", ins, 1, a, &o), DP_DTYPE_F32, S1(2), rs, 0, "ReduceSum on SIM");
        dp_attrs_destroy(a);
    }
    {
        double ref[6], f[6];
        size_t i;
        for (i = 0; i < 6; ++i) f[i] = (double)(float)x[i];
        softmax_ref(f, 2, 3, 1, 0, ref);
        t = RUN_OPT(rt, "Softmax", ins, 1, NULL, &o);
        EXPECT(t, DP_DTYPE_F32, S2(2, 3), ref, 1e-6, "Softmax on SIM");
        CHECK_LOG(&l, "Softmax", "SIM:0", "decomposed", NULL);
    }
    /* strict mode still works for ops SIM has natively or can decompose; for the rest it is a
     * clear DP_NOT_FOUND: either way never a crash or a wrong value. */
    o.soft_placement = DP_SOFT_PLACEMENT_OFF;
    {
        dp_op_t *add = NULL;
        dp_tensor_t *out = NULL;
        static const double sum[] = {2, 4, 6, 8, 10, 12};
        dp_tensor_t *same[2];
        dp_status_t st;
        same[0] = same[1] = ins[0];
        CHECK_OK(dp_runtime_find_op(rt, "Add", &add));
        st = dp_op_run(rt, add, same, 2, NULL, &o, &out, 1, NULL);
        CHECKF(st == DP_OK || st == DP_NOT_FOUND, "strict Add on SIM -> %s", dp_status_str(st));
        if (st == DP_OK) {
            CHECK(dp_tensor_device(out) == sim);
            EXPECT(out, DP_DTYPE_F32, S2(2, 3), sum, 0, "strict Add on SIM");
        }
    }
    release_all(ins, 2);
    dp_runtime_destroy(rt);
    CHECK(l.drops == 1);
}

/* Output count, NULL out_count, capacity larger than needed, attrs reused and replaced. */
static void test_run_api(void) {
    static const double v[] = {1, 2};
    static const double twice[] = {2, 4};
    dp_op_t *add = NULL, *cast = NULL;
    dp_tensor_t *ins[2], *outs[3];
    dp_attrs_t *a;
    size_t count = 77;
    dp_run_options_t o;
    SECTION("dp_op_run: out_count NULL, extra capacity untouched, options NULL or initialized");
    CHECK_OK(dp_runtime_find_op(g_rt, "Add", &add));
    CHECK_OK(dp_runtime_find_op(g_rt, "Cast", &cast));
    ins[0] = MK(DP_DTYPE_F64, S1(2), v);
    ins[1] = MK(DP_DTYPE_F64, S1(2), v);
    outs[0] = outs[1] = outs[2] = SENTINEL(dp_tensor_t);
    CHECK_OK(dp_op_run(g_rt, add, ins, 2, NULL, NULL, outs, 3, NULL));
    CHECK(outs[1] == SENTINEL(dp_tensor_t) && outs[2] == SENTINEL(dp_tensor_t));
    EXPECT(outs[0], DP_DTYPE_F64, S1(2), twice, 0, "Add, out_count NULL");
    outs[0] = SENTINEL(dp_tensor_t);
    dp_run_options_init(&o, sizeof o);
    o.soft_placement = DP_SOFT_PLACEMENT_OFF; /* strict changes nothing where a kernel exists */
    CHECK_OK(dp_op_run(g_rt, add, ins, 2, NULL, &o, outs, 1, &count));
    CHECK(count == 1);
    EXPECT(outs[0], DP_DTYPE_F64, S1(2), twice, 0, "Add, strict on the CPU");
    outs[0] = SENTINEL(dp_tensor_t);
    o.device = g_cpu;
    o.soft_placement = DP_SOFT_PLACEMENT_ON;
    CHECK_OK(dp_op_run(g_rt, add, ins, 2, NULL, &o, outs, 1, &count));
    if (outs[0] != SENTINEL(dp_tensor_t)) CHECK(dp_tensor_device(outs[0]) == g_cpu);
    EXPECT(outs[0], DP_DTYPE_F64, S1(2), twice, 0, "Add, explicit CPU:0");
    SECTION("attributes: one set reused for several runs; setting a name again replaces it");
    a = attrs_new();
    CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_I32));
    CHECK_OK(dp_attrs_set_dtype(a, "dtype", DP_DTYPE_U8));
    outs[0] = SENTINEL(dp_tensor_t);
    CHECK_OK(dp_op_run(g_rt, cast, ins, 1, a, NULL, outs, 1, &count));
    EXPECT(outs[0], DP_DTYPE_U8, S1(2), v, 0, "Cast with a replaced dtype");
    outs[0] = SENTINEL(dp_tensor_t);
    CHECK_OK(dp_op_run(g_rt, cast, ins + 1, 1, a, NULL, outs, 1, &count));
    EXPECT(outs[0], DP_DTYPE_U8, S1(2), v, 0, "Cast with the same attrs again");
    dp_attrs_destroy(a);
    /* the inputs were not consumed: still valid and unchanged */
    CHECK(dp_tensor_num_elements(ins[0]) == 2 && dp_tensor_num_elements(ins[1]) == 2);
    release_all(ins, 2);
}

int main(void) {
    dp_runtime_t *marker;
    dp_run_options_t explicit_cpu;
    int pass;
    dp_test_watchdog(600);
    marker = new_runtime(1);
    dp_test_set_marker_runtime(marker);
    g_rt = new_runtime(1);
    g_cpu = find_device(g_rt, "CPU:0");
    memset(&g_log, 0, sizeof g_log);
    CHECK_OK(dp_runtime_set_placement_callback(g_rt, on_place, &g_log, on_drop));

    test_find_ops();
    for (pass = 0; pass < 2; ++pass) {
        if (pass == 1) {
            /* again with the device given (reason "explicit") and strict mode: every op has a
             * CPU kernel or a decomposition, so nothing changes but the reason */
            SECTION("---- second pass: device CPU:0 given explicitly, soft placement off ----");
            dp_run_options_init(&explicit_cpu, sizeof explicit_cpu);
            explicit_cpu.device = g_cpu;
            explicit_cpu.soft_placement = DP_SOFT_PLACEMENT_OFF;
            g_opt = &explicit_cpu;
        }
        test_binary();
        test_unary();
        test_compare();
        test_select();
        test_cast();
        test_matmul();
        test_reduce();
        test_layout();
        test_fill_iota_addn();
        test_composites();
        test_zero_sized_and_scalars();
    }
    g_opt = NULL;
    g_check_log = 0;
    test_run_api();
    g_check_log = 1;
    test_placement_callback();
    test_placement_callback_runs_ops();
    test_input_copied();
    test_sim_without_kernels();
    test_sim_default();

    CHECK(g_log.bad_struct == 0 && g_log.drops == 0);
    dp_runtime_destroy(g_rt);
    CHECK(g_log.drops == 1);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(marker);
    return DP_TEST_SUMMARY();
}
