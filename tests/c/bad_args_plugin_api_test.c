/* The runtime's plugin functions (added to the header after the draft): their state with no
 * plugins, and the bad-argument classes that need no plugin file: NULL pointers, a destroyed
 * runtime, a wrong kind of handle, an index past the end. Loading real and malformed plugins is
 * the plugin zoo's job. Ends with a good round trip. */
#include "dp_test.h"

static dp_runtime_t *runtime_without_plugins(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    dp_runtime_options_init(&o, sizeof o);
    o.cpu_device_count = 2;
    o.plugin_path = NULL;
    o.discover_plugins = 0;
    DP_TEST_MUST(dp_runtime_create(&o, &rt));
    return rt;
}

static dp_runtime_t *dead_runtime(void) {
    dp_runtime_t *rt = runtime_without_plugins();
    dp_runtime_destroy(rt);
    return rt;
}

static void test_empty(dp_runtime_t *rt) {
    size_t n = 4242;
    dp_plugin_info_t info;
    dp_plugin_failure_t fail;
    dp_runtime_options_t o;
    SECTION("no plugins: counts are 0, index 0 is past the end");
    memset(&o, 0xA5, sizeof o);
    dp_runtime_options_init(&o, sizeof o);
    CHECK(o.struct_size == sizeof o);
    CHECK(o.plugin_path == NULL);
    CHECK(o.discover_plugins == 1);
    CHECK_OK(dp_runtime_plugin_count(rt, &n));
    CHECK(n == 0);
    n = 4242;
    CHECK_OK(dp_runtime_plugin_failure_count(rt, &n));
    CHECK(n == 0);
    memset(&info, 0xA5, sizeof info);
    info.struct_size = sizeof info;
    CHECK_STATUS_MSG(dp_runtime_plugin_info(rt, 0, &info), DP_OUT_OF_RANGE, "index");
    CHECK_STATUS_MSG(dp_runtime_plugin_info(rt, SIZE_MAX, &info), DP_OUT_OF_RANGE, "index");
    CHECKF(dp_test_bytes_are(&info, sizeof(size_t), sizeof info, 0xA5), "info written on failure");
    memset(&fail, 0xA5, sizeof fail);
    fail.struct_size = sizeof fail;
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(rt, 0, &fail), DP_OUT_OF_RANGE, "index");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(rt, SIZE_MAX, &fail), DP_OUT_OF_RANGE, "index");
    CHECKF(dp_test_bytes_are(&fail, sizeof(size_t), sizeof fail, 0xA5),
           "failure written on failure");
}

static void test_null(dp_runtime_t *rt) {
    size_t n = 4242;
    dp_plugin_info_t info;
    dp_plugin_failure_t fail;
    SECTION("NULL pointers");
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    memset(&fail, 0, sizeof fail);
    fail.struct_size = sizeof fail;
    CHECK_STATUS_MSG(dp_runtime_load_plugin(NULL, "/nonexistent/libx.so", NULL, 0),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, NULL, NULL, 0), DP_INVALID_ARGUMENT, "path");
    CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, "/nonexistent/libx.so", NULL, 2),
                     DP_INVALID_ARGUMENT, "options");
    CHECK_STATUS_MSG(dp_runtime_load_plugin_path(NULL, "/nonexistent"), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_load_plugin_path(rt, NULL), DP_INVALID_ARGUMENT, "search_path");
    CHECK_STATUS_MSG(dp_runtime_plugin_count(NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_plugin_count(rt, NULL), DP_INVALID_ARGUMENT, "out_count");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure_count(NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_plugin_failure_count(rt, NULL), DP_INVALID_ARGUMENT, "out_count");
    CHECK_STATUS_MSG(dp_runtime_plugin_info(NULL, 0, &info), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_info(rt, 0, NULL), DP_INVALID_ARGUMENT, "out_info");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(NULL, 0, &fail), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(rt, 0, NULL), DP_INVALID_ARGUMENT, "out_failure");
    /* none of these was a load attempt that could be listed as a plugin failure */
    n = 4242;
    CHECK_OK(dp_runtime_plugin_failure_count(rt, &n));
    CHECK(n == 0);
}

static void test_bad_handles(dp_runtime_t *rt) {
    dp_device_t *dev = dp_test_device(rt, 0);
    dp_runtime_t *wrong = (dp_runtime_t *)(void *)dev;
    dp_plugin_info_t info;
    dp_plugin_failure_t fail;
    size_t n = 4242;
    SECTION("destroyed runtime, wrong kind of handle");
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    memset(&fail, 0, sizeof fail);
    fail.struct_size = sizeof fail;
    CHECK_STATUS_MSG(dp_runtime_load_plugin(dead_runtime(), "/nonexistent/libx.so", NULL, 0),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_load_plugin_path(dead_runtime(), "/nonexistent"),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_count(dead_runtime(), &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure_count(dead_runtime(), &n), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_info(dead_runtime(), 0, &info), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(dead_runtime(), 0, &fail), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_load_plugin(wrong, "/nonexistent/libx.so", NULL, 0),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_load_plugin_path(wrong, "/nonexistent"), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_count(wrong, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure_count(wrong, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_info(wrong, 0, &info), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_plugin_failure(wrong, 0, &fail), DP_INVALID_ARGUMENT, "runtime");
    {
        const char *name = "untouched";
        CHECK_STATUS_MSG(dp_runtime_plugin_op(dead_runtime(), 0, 0, &name), DP_INVALID_ARGUMENT,
                         "runtime");
        CHECK_STATUS_MSG(dp_runtime_plugin_op(wrong, 0, 0, &name), DP_INVALID_ARGUMENT, "runtime");
        CHECK_STATUS_MSG(dp_runtime_plugin_op(rt, 0, 0, &name), DP_OUT_OF_RANGE, "plugin index 0");
        CHECK_STR(name, "untouched");
    }
    CHECK(n == 4242);
    CHECK_STR(dp_device_name(dev), "CPU:0");
}

int main(void) {
    dp_runtime_t *rt, *marker;
    dp_test_watchdog(120);
    marker = dp_test_runtime(1, 0);
    dp_test_set_marker_runtime(marker);
    rt = runtime_without_plugins();
    test_empty(rt);
    test_null(rt);
    test_bad_handles(rt);
    dp_test_round_trip(rt);
    dp_runtime_destroy(rt);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(marker);
    return DP_TEST_SUMMARY();
}
