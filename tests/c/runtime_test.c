/* Good-input tests of the process-wide functions (versions, status names, dtypes, the last-error
 * message) and of the runtime: options, creation, devices, device specs, synchronize. */
#include "dp_test.h"

static void test_first_message_is_empty(void) {
    const char *m;
    SECTION("dp_last_error_message before any failure");
    m = dp_last_error_message(); /* the very first devplug call of this thread */
    CHECK(m != NULL);
    CHECK(m != NULL && m[0] == '\0');
}

static void test_versions(void) {
    char expect[32];
    const char *s1, *s2;
    SECTION("versions");
    CHECK(dp_version() == (((uint32_t)DP_VERSION_MAJOR << 16) | ((uint32_t)DP_VERSION_MINOR << 8) |
                           (uint32_t)DP_VERSION_PATCH));
    CHECK(DP_VERSION_MAJOR == 0 && DP_VERSION_MINOR == 1 && DP_VERSION_PATCH == 0);
    snprintf(expect, sizeof expect, "%d.%d.%d", (int)DP_VERSION_MAJOR, (int)DP_VERSION_MINOR,
             (int)DP_VERSION_PATCH);
    s1 = dp_version_string();
    CHECK_STR(s1, expect);
    s2 = dp_version_string();
    CHECK(s1 == s2); /* static */
    CHECK(dp_abi_version() ==
          (((uint32_t)DP_ABI_VERSION_MAJOR << 16) | (uint32_t)DP_ABI_VERSION_MINOR));
    CHECK(DP_ABI_VERSION_MAJOR == 1 && DP_ABI_VERSION_MINOR == 5);
}

static void test_status_names(void) {
    static const struct {
        dp_status_t code;
        const char *name;
    } names[] = {
        {DP_OK, "OK"},
        {DP_CANCELLED, "CANCELLED"},
        {DP_UNKNOWN, "UNKNOWN"},
        {DP_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
        {DP_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
        {DP_NOT_FOUND, "NOT_FOUND"},
        {DP_ALREADY_EXISTS, "ALREADY_EXISTS"},
        {DP_PERMISSION_DENIED, "PERMISSION_DENIED"},
        {DP_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
        {DP_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
        {DP_ABORTED, "ABORTED"},
        {DP_OUT_OF_RANGE, "OUT_OF_RANGE"},
        {DP_UNIMPLEMENTED, "UNIMPLEMENTED"},
        {DP_INTERNAL, "INTERNAL"},
        {DP_UNAVAILABLE, "UNAVAILABLE"},
        {DP_DATA_LOSS, "DATA_LOSS"},
        {DP_ABI_MISMATCH, "ABI_MISMATCH"},
    };
    static const dp_status_t unknown[] = {16, 17, 99, 101, 1000, -1, -100, INT32_MAX, INT32_MIN};
    size_t i;
    SECTION("dp_status_str");
    CHECK(DP_OK == 0 && DP_INVALID_ARGUMENT == 3 && DP_NOT_FOUND == 5 &&
          DP_RESOURCE_EXHAUSTED == 8 && DP_OUT_OF_RANGE == 11 && DP_ABI_MISMATCH == 100);
    for (i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const char *got = dp_status_str(names[i].code);
        CHECK_STR(got, names[i].name);
        CHECK(got == dp_status_str(names[i].code)); /* static */
    }
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; ++i) {
        const char *got = dp_status_str(unknown[i]);
        CHECK_STR(got, "UNKNOWN_STATUS");
    }
}

static void test_dtypes(void) {
    static const struct {
        dp_dtype_t dtype;
        size_t size;
        const char *name;
    } dtypes[] = {
        {DP_DTYPE_F32, 4, "f32"}, {DP_DTYPE_F64, 8, "f64"}, {DP_DTYPE_I32, 4, "i32"},
        {DP_DTYPE_I64, 8, "i64"}, {DP_DTYPE_U8, 1, "u8"},   {DP_DTYPE_BOOL, 1, "bool"},
        {DP_DTYPE_F16, 2, "f16"}, {DP_DTYPE_BF16, 2, "bf16"},
    };
    static const dp_dtype_t invalid[] = {0, 9, 10, -1, 1000, INT32_MAX, INT32_MIN};
    size_t i;
    SECTION("dtypes");
    for (i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i) {
        CHECKF(dp_dtype_size(dtypes[i].dtype) == dtypes[i].size, "dp_dtype_size(%d) = %u",
               (int)dtypes[i].dtype, (unsigned)dp_dtype_size(dtypes[i].dtype));
        CHECK_STR(dp_dtype_name(dtypes[i].dtype), dtypes[i].name);
    }
    for (i = 0; i < sizeof invalid / sizeof invalid[0]; ++i) {
        CHECKF(dp_dtype_size(invalid[i]) == 0, "dp_dtype_size(%d) should be 0", (int)invalid[i]);
        CHECKF(dp_dtype_name(invalid[i]) == NULL, "dp_dtype_name(%d) should be NULL",
               (int)invalid[i]);
    }
}

static void test_options_init(void) {
    dp_runtime_options_t o;
    SECTION("dp_runtime_options_init");
    memset(&o, 0xA5, sizeof o);
    dp_runtime_options_init(&o, sizeof o);
    CHECK(o.struct_size == sizeof(dp_runtime_options_t));
    CHECK(o.cpu_device_count == 1);
    CHECK(o.cpu_memory_limit == 0);
    dp_runtime_options_init(NULL, 0); /* no-op, no crash */
    /* An older caller's shorter struct: nothing is written past what it declared. */
    memset(&o, 0xA5, sizeof o);
    dp_runtime_options_init(&o, offsetof(dp_runtime_options_t, plugin_path));
    CHECK(o.struct_size == offsetof(dp_runtime_options_t, plugin_path));
    CHECK(o.cpu_device_count == 1);
    {
        const unsigned char *tail = (const unsigned char *)&o + offsetof(dp_runtime_options_t, plugin_path);
        size_t i, untouched = 1;
        for (i = 0; i < sizeof o - offsetof(dp_runtime_options_t, plugin_path); ++i)
            if (tail[i] != 0xA5) untouched = 0;
        CHECK(untouched);
    }
    memset(&o, 0xA5, sizeof o);
    dp_runtime_options_init(&o, 4); /* too small to hold struct_size: no-op */
    CHECK(((const unsigned char *)&o)[0] == 0xA5);
}

/* "Fields are only ever appended; struct_size says which the caller knows": a caller compiled
 * against the first layout (struct_size, cpu_device_count, cpu_memory_limit) still works. */
static void test_options_first_layout(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    size_t n = 0;
    dp_memory_stats_t s;
    SECTION("dp_runtime_create with the first options layout (an older caller)");
    dp_runtime_options_init(&o, sizeof o);
    o.struct_size = offsetof(dp_runtime_options_t, cpu_memory_limit) + sizeof(uint64_t);
    o.cpu_device_count = 3;
    o.cpu_memory_limit = 1u << 20;
    CHECK_OK(dp_runtime_create(&o, &rt));
    if (!rt) return;
    CHECK_OK(dp_runtime_device_count(rt, &n));
    CHECK(n == 3);
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_OK(dp_device_memory_stats(dp_test_device(rt, 2), &s));
    CHECK(s.bytes_limit == 1u << 20);
    dp_runtime_destroy(rt);
}

static void check_cpu_device(dp_device_t *dev, int ordinal, uint64_t limit) {
    dp_device_properties_t p;
    char name[32];
    snprintf(name, sizeof name, "CPU:%d", ordinal);
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(dp_device_get_properties(dev, &p));
    CHECK_STR(p.name, name);
    CHECK_STR(p.device_type, "CPU");
    CHECK_STR(p.platform, "HOST");
    CHECK(p.vendor != NULL);
    CHECK(p.hardware_name != NULL);
    CHECK(p.ordinal == ordinal);
    CHECK(p.is_active_platform == 1);
    CHECK(p.host_visible == 1);
    if (limit != 0) {
        CHECKF(p.total_memory == limit, "total_memory %llu, limit %llu",
               (unsigned long long)p.total_memory, (unsigned long long)limit);
    } else {
        CHECK(p.total_memory > 0);
    }
    CHECK(p.struct_size == sizeof p);
    CHECK_STR(dp_device_name(dev), name);
}

static void test_default_runtime(void) {
    dp_runtime_t *rt = SENTINEL(dp_runtime_t);
    dp_device_t *dev = SENTINEL(dp_device_t), *d2 = NULL;
    size_t n = 12345;
    SECTION("dp_runtime_create(NULL options)");
    CHECK_OK(dp_runtime_create(NULL, &rt));
    CHECK(rt != NULL && rt != SENTINEL(dp_runtime_t));
    if (rt == NULL || rt == SENTINEL(dp_runtime_t)) return;
    CHECK_OK(dp_runtime_device_count(rt, &n));
    CHECK(n == 1);
    CHECK_OK(dp_runtime_device(rt, 0, &dev));
    CHECK(dev != NULL && dev != SENTINEL(dp_device_t));
    CHECK_OK(dp_runtime_device(rt, 0, &d2));
    CHECK(d2 == dev); /* the same borrowed handle every time */
    check_cpu_device(dev, 0, 0);
    CHECK_OK(dp_runtime_synchronize(rt));
    dp_runtime_destroy(rt);
}

static void test_runtime_with_options(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    dp_device_t *devs[3] = {NULL, NULL, NULL};
    size_t n = 0, i;
    SECTION("dp_runtime_create(cpu_device_count = 3)");
    dp_runtime_options_init(&o, sizeof o);
    o.cpu_device_count = 3;
    CHECK_OK(dp_runtime_create(&o, &rt));
    if (rt == NULL) return;
    CHECK_OK(dp_runtime_device_count(rt, &n));
    CHECK(n == 3);
    for (i = 0; i < 3; ++i) {
        CHECK_OK(dp_runtime_device(rt, i, &devs[i]));
        if (devs[i] == NULL) return;
        check_cpu_device(devs[i], (int)i, 0);
    }
    CHECK(devs[0] != devs[1] && devs[1] != devs[2] && devs[0] != devs[2]);

    SECTION("dp_runtime_find_device");
    {
        static const struct {
            const char *spec;
            int index;
        } specs[] = {
            {"CPU", 0},
            {"cpu", 0},
            {"cpu:1", 1},
            {"CPU:2", 2},
            {"/device:CPU:0", 0},
            {"HOST:2", 2},
            {"HOST", 0},
            {"host:1", 1},
            {"/device:cpu:1", 1},
            {"/DEVICE:Host:2", 2},
            {"/job:localhost/replica:0/task:0/device:CPU:2", 2},
        };
        for (i = 0; i < sizeof specs / sizeof specs[0]; ++i) {
            dp_device_t *d = SENTINEL(dp_device_t);
            dp_status_t st = dp_runtime_find_device(rt, specs[i].spec, &d);
            CHECKF(st == DP_OK, "dp_runtime_find_device(\"%s\") -> %s", specs[i].spec,
                   dp_status_str(st));
            CHECKF(d == devs[specs[i].index], "dp_runtime_find_device(\"%s\") gave %s, expected CPU:%d",
                   specs[i].spec, (st == DP_OK && d) ? dp_device_name(d) : "?", specs[i].index);
        }
    }
    CHECK_OK(dp_runtime_synchronize(rt));
    dp_runtime_destroy(rt);
}

static void test_runtime_64_devices(void) {
    dp_runtime_t *rt = dp_test_runtime(64, 0);
    size_t n = 0;
    dp_device_t *d = NULL;
    SECTION("64 CPU devices (the maximum)");
    CHECK_OK(dp_runtime_device_count(rt, &n));
    CHECK(n == 64);
    CHECK_OK(dp_runtime_device(rt, 63, &d));
    CHECK_STR(d ? dp_device_name(d) : NULL, "CPU:63");
    CHECK_OK(dp_runtime_find_device(rt, "cpu:63", &d));
    CHECK_STR(d ? dp_device_name(d) : NULL, "CPU:63");
    dp_runtime_destroy(rt);
}

static void test_partial_properties(void) {
    dp_runtime_t *rt = dp_test_runtime(1, 0);
    dp_device_t *dev = dp_test_device(rt, 0);
    dp_device_properties_t p;
    struct {
        dp_device_properties_t p;
        unsigned char newer_fields[32];
    } big;
    dp_status_t st;
    SECTION("dp_device_get_properties with a larger (newer caller's) struct_size");
    memset(&big, 0xA5, sizeof big);
    big.p.struct_size = sizeof big;
    CHECK_OK(st = dp_device_get_properties(dev, &big.p));
    if (st == DP_OK) {
        CHECK_STR(big.p.name, "CPU:0");
        CHECK_STR(big.p.platform, "HOST");
        CHECK(big.p.host_visible == 1);
        CHECK(big.p.total_memory > 0);
        CHECKF(dp_test_bytes_are(big.newer_fields, 0, sizeof big.newer_fields, 0xA5),
               "bytes past the library's struct were written");
    }

    SECTION("dp_device_get_properties with a smaller (older) struct_size");
    /* "caller sets sizeof(dp_device_properties_t); runtime fills fields that fit" */
    memset(&p, 0xA5, sizeof p);
    p.struct_size = offsetof(dp_device_properties_t, device_type); /* only `name` fits */
    CHECK_OK(st = dp_device_get_properties(dev, &p));
    if (st == DP_OK) {
        CHECK_STR(p.name, "CPU:0");
        CHECKF(dp_test_bytes_are(&p, offsetof(dp_device_properties_t, device_type), sizeof p, 0xA5),
               "bytes past struct_size were written");
    }
    /* up to and including `ordinal` */
    memset(&p, 0xA5, sizeof p);
    p.struct_size = offsetof(dp_device_properties_t, ordinal) + sizeof(int32_t);
    CHECK_OK(st = dp_device_get_properties(dev, &p));
    if (st == DP_OK) {
        CHECK(p.ordinal == 0);
        CHECK_STR(p.platform, "HOST");
        CHECK(p.priority == (int32_t)0xA5A5A5A5);
    }
    dp_runtime_destroy(rt);
}

static void test_messages(void) {
    dp_runtime_t *rt = dp_test_runtime(1, 0);
    dp_device_t *d = NULL;
    char first[512];
    size_t n = 0;
    SECTION("the last error message is thread-local state that successful calls keep");
    CHECK_STATUS_MSG(dp_runtime_find_device(rt, "NOSUCHTHING:0", &d), DP_NOT_FOUND, "NOSUCHTHING");
    dp_test_copy_message_(first, sizeof first);
    CHECK_OK(dp_runtime_device_count(rt, &n));
    CHECK_OK(dp_runtime_device(rt, 0, &d));
    CHECK_STR(dp_last_error_message(), first); /* successful calls do not clear it */
    CHECK_STATUS_MSG(dp_runtime_find_device(rt, "CPU:7", &d), DP_NOT_FOUND, "CPU:7");
    CHECK(strcmp(dp_last_error_message(), first) != 0); /* replaced by the newer failure */
    dp_runtime_destroy(rt);
}

static void test_two_runtimes_are_independent(void) {
    dp_runtime_t *a = dp_test_runtime(2, 0);
    dp_runtime_t *b = dp_test_runtime(1, 0);
    dp_device_t *da = dp_test_device(a, 0), *db = dp_test_device(b, 0), *d = NULL;
    size_t n = 0;
    SECTION("two runtimes");
    CHECK(da != db);
    CHECK_STR(dp_device_name(da), "CPU:0");
    CHECK_STR(dp_device_name(db), "CPU:0");
    CHECK_OK(dp_runtime_device_count(a, &n));
    CHECK(n == 2);
    CHECK_OK(dp_runtime_device_count(b, &n));
    CHECK(n == 1);
    CHECK_STATUS(dp_runtime_find_device(b, "CPU:1", &d), DP_NOT_FOUND);
    dp_runtime_destroy(a);
    /* b still works after a is gone */
    CHECK_OK(dp_runtime_device_count(b, &n));
    CHECK(n == 1);
    CHECK_OK(dp_runtime_find_device(b, "CPU:0", &d));
    CHECK(d == db);
    CHECK_STR(dp_device_name(db), "CPU:0");
    dp_runtime_destroy(b);
    dp_runtime_destroy(NULL); /* no-op */
}

/* The real header: "Its device handles become invalid; buffers, tensors and streams the host
 * still holds stay usable until released." */
static void test_objects_outlive_runtime(void) {
    dp_runtime_t *rt = dp_test_runtime(2, 0);
    dp_device_t *d0 = dp_test_device(rt, 0), *d1 = dp_test_device(rt, 1);
    dp_stream_t *s = NULL;
    dp_buffer_t *a = NULL, *b = NULL;
    dp_tensor_t *t = NULL;
    static const int64_t shape[1] = {4};
    const int32_t v[4] = {5, 6, 7, 8};
    int32_t w[4] = {0, 0, 0, 0};
    unsigned char in[100], out[100];
    SECTION("streams, buffers and tensors outlive their runtime until released");
    CHECK_OK(dp_stream_create(d0, &s));
    CHECK_OK(dp_buffer_allocate(d0, sizeof in, &a));
    CHECK_OK(dp_buffer_allocate(d1, sizeof in, &b));
    CHECK_OK(dp_tensor_create(d1, DP_DTYPE_I32, shape, 1, v, sizeof v, &t));
    if (!s || !a || !b || !t) return;
    dp_test_fill(in, sizeof in, 4);
    CHECK_OK(dp_buffer_write(a, 0, in, sizeof in));
    dp_runtime_destroy(rt);
    CHECK(dp_buffer_size(a) == sizeof in);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_read(a, 0, out, sizeof out));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_OK(dp_buffer_copy(b, 0, a, 0, sizeof in));
    memset(out, 0, sizeof out);
    CHECK_OK(dp_stream_memset(s, a, 0, 0x21, 10));
    CHECK_OK(dp_stream_read(s, a, 0, out, sizeof out));
    CHECK_OK(dp_stream_synchronize(s));
    CHECK(out[0] == 0x21 && out[9] == 0x21 && memcmp(out + 10, in + 10, sizeof in - 10) == 0);
    memset(out, 0, sizeof out);
    CHECK_OK(dp_buffer_read(b, 0, out, sizeof out));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK(dp_tensor_num_elements(t) == 4);
    CHECK_OK(dp_tensor_read(t, w, sizeof w));
    CHECK(memcmp(v, w, sizeof v) == 0);
    dp_stream_destroy(s);
    dp_buffer_release(a);
    dp_buffer_release(b);
    dp_tensor_release(t);
}

static void test_create_destroy_many(void) {
    int i;
    SECTION("create/destroy 50 runtimes");
    for (i = 0; i < 50; ++i) {
        dp_runtime_t *rt = NULL;
        dp_runtime_options_t o;
        dp_runtime_options_init(&o, sizeof o);
        o.cpu_device_count = (uint32_t)(1 + i % 4);
        CHECK_OK(dp_runtime_create(&o, &rt));
        dp_runtime_destroy(rt);
    }
}

int main(void) {
    dp_test_watchdog(120);
    test_first_message_is_empty();
    test_versions();
    test_status_names();
    test_dtypes();
    test_options_init();
    test_options_first_layout();
    test_default_runtime();
    test_runtime_with_options();
    test_runtime_64_devices();
    test_partial_properties();
    test_messages();
    test_two_runtimes_are_independent();
    test_objects_outlive_runtime();
    test_create_destroy_many();
    return DP_TEST_SUMMARY();
}
