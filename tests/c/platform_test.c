/* dp_runtime_platform_count / dp_runtime_platform_info: the built-in HOST platform (device type
 * CPU, cpu_device_count devices), SIM loaded from its built path with its plugin's name, the
 * CUDA plugin with no devices (listed all the same), the order (registration order, the order of
 * dp_runtime_device's devices), a struct_size of an older or too small struct, and every bad
 * argument: NULL, an index past the end, a destroyed runtime, a handle of another kind. */
#include "dp_test.h"

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"
#define CUDA DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_cuda.so"

static dp_runtime_t *make_runtime(uint32_t cpus) { return dp_test_runtime(cpus, 0); }

static dp_platform_info_t info_at(dp_runtime_t *rt, size_t i) {
    dp_platform_info_t p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(dp_runtime_platform_info(rt, i, &p));
    return p;
}

static void host_only(void) {
    size_t n = 4242;
    dp_device_properties_t props;
    dp_device_t *cpu0 = NULL;
    SECTION("a runtime without plugins: HOST, device type CPU, cpu_device_count devices");
    dp_runtime_t *rt = make_runtime(3);
    CHECK_OK(dp_runtime_platform_count(rt, &n));
    CHECK(n == 1);
    dp_platform_info_t p = info_at(rt, 0);
    CHECK(p.struct_size == sizeof p);
    CHECK_STR(p.name, "HOST");
    CHECK_STR(p.device_type, "CPU");
    CHECK_STR(p.plugin, "built-in");
    CHECK(p.device_count == 3);
    CHECK(p.is_active == 1);
    CHECK(p.host_visible == 1);
    CHECK(p.vendor != NULL && p.vendor[0] != '\0');
    CHECK(p.version != NULL && p.version[0] != '\0');
    /* what the devices say about their platform agrees */
    CHECK_OK(dp_runtime_find_device(rt, "CPU:0", &cpu0));
    memset(&props, 0, sizeof props);
    props.struct_size = sizeof props;
    CHECK_OK(dp_device_get_properties(cpu0, &props));
    CHECK_STR(props.platform, p.name);
    CHECK(props.priority == p.priority);
    dp_runtime_destroy(rt);

    rt = make_runtime(1);
    p = info_at(rt, 0);
    CHECK(p.device_count == 1);
    dp_runtime_destroy(rt);
}

static void with_plugins(void) {
    size_t n = 0, devices = 0, total = 0;
    const char *sim_opts[] = {"devices=2"};
    const char *cuda_opts[] = {"devices=0"};
    dp_plugin_info_t plugin;
    SECTION("SIM from its built path, and CUDA without devices: listed, in registration order");
    dp_runtime_t *rt = make_runtime(2);
    CHECK_OK(dp_runtime_load_plugin(rt, SIM, sim_opts, 1));
    CHECK_OK(dp_runtime_load_plugin(rt, CUDA, cuda_opts, 1));
    CHECK_OK(dp_runtime_platform_count(rt, &n));
    CHECK(n == 3);
    if (n != 3) {
        dp_runtime_destroy(rt);
        return;
    }
    dp_platform_info_t host = info_at(rt, 0), sim = info_at(rt, 1), cuda = info_at(rt, 2);
    CHECK_STR(host.name, "HOST");
    CHECK(host.device_count == 2);

    CHECK_STR(sim.name, "SIM");
    CHECK_STR(sim.device_type, "SIM");
    memset(&plugin, 0, sizeof plugin);
    plugin.struct_size = sizeof plugin;
    CHECK_OK(dp_runtime_plugin_info(rt, 0, &plugin));
    CHECK_STR(plugin.name, "devplug_sim");
    CHECK_STR(sim.plugin, plugin.name);
    CHECK(sim.device_count == 2);
    CHECK(sim.is_active == 1);
    CHECK(sim.host_visible == 0);
    CHECK(sim.vendor != NULL && sim.version != NULL);

    CHECK_STR(cuda.name, "CUDA");
    CHECK_STR(cuda.device_type, "GPU");
    CHECK_STR(cuda.plugin, "cuda");
    CHECK(cuda.device_count == 0); /* no devices, listed all the same */

    /* the devices are the platforms' devices, in the same order */
    CHECK_OK(dp_runtime_device_count(rt, &devices));
    total = host.device_count + sim.device_count + cuda.device_count;
    CHECK(devices == total);
    for (size_t i = 0; i < devices && i < total; ++i) {
        dp_device_t *d = NULL;
        dp_device_properties_t props;
        memset(&props, 0, sizeof props);
        props.struct_size = sizeof props;
        CHECK_OK(dp_runtime_device(rt, i, &d));
        CHECK_OK(dp_device_get_properties(d, &props));
        CHECK_STR(props.platform, i < host.device_count ? "HOST" : "SIM");
    }

    /* the strings stay valid (and the same) across calls */
    dp_platform_info_t again = info_at(rt, 1);
    CHECK(again.name == sim.name && again.plugin == sim.plugin);
    CHECK_STR(sim.name, "SIM");

    SECTION("an index past the end: DP_OUT_OF_RANGE naming the count; nothing written");
    dp_test_set_marker_runtime(rt);
    dp_platform_info_t untouched;
    memset(&untouched, 0xA5, sizeof untouched);
    untouched.struct_size = sizeof untouched;
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, 3, &untouched), DP_OUT_OF_RANGE,
                     "platform index 3 is past the end: the runtime has 3 platforms");
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, SIZE_MAX, &untouched), DP_OUT_OF_RANGE, "index");
    CHECK(dp_test_bytes_are(&untouched, sizeof(size_t), sizeof untouched, 0xA5));
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(rt);
}

static void struct_sizes(void) {
    unsigned char raw[sizeof(dp_platform_info_t) + 16];
    dp_platform_info_t *p = (dp_platform_info_t *)(void *)raw;
    SECTION("struct_size: an older struct gets the fields it has; too small is refused");
    dp_runtime_t *rt = make_runtime(1);
    dp_test_set_marker_runtime(rt);

    /* a caller whose struct ends before device_count: nothing past it is written */
    memset(raw, 0xA5, sizeof raw);
    p->struct_size = offsetof(dp_platform_info_t, device_count);
    CHECK_OK(dp_runtime_platform_info(rt, 0, p));
    CHECK(p->struct_size == offsetof(dp_platform_info_t, device_count));
    CHECK_STR(p->name, "HOST");
    CHECK_STR(p->plugin, "built-in");
    CHECK(p->is_active == 1);
    CHECKF(dp_test_bytes_are(raw, offsetof(dp_platform_info_t, device_count), sizeof raw, 0xA5),
           "written past the caller's struct_size");

    /* a caller with a newer, larger struct: the fields this library knows, nothing more */
    memset(raw, 0xA5, sizeof raw);
    p->struct_size = sizeof raw;
    CHECK_OK(dp_runtime_platform_info(rt, 0, p));
    CHECK(p->device_count == 1);
    CHECKF(dp_test_bytes_are(raw, sizeof(dp_platform_info_t), sizeof raw, 0xA5),
           "written past dp_platform_info_t");

    /* too small to hold struct_size itself */
    memset(raw, 0xA5, sizeof raw);
    p->struct_size = 0;
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, 0, p), DP_INVALID_ARGUMENT, "struct_size 0");
    p->struct_size = sizeof(size_t) - 1;
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, 0, p), DP_INVALID_ARGUMENT, "out_info");
    CHECK(dp_test_bytes_are(raw, sizeof(size_t), sizeof raw, 0xA5));
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(rt);
}

static void bad_arguments(void) {
    size_t n = 4242;
    dp_platform_info_t p;
    dp_device_t *d = NULL;
    SECTION("NULL, a destroyed runtime, a handle of another kind");
    dp_runtime_t *rt = make_runtime(1);
    dp_runtime_t *dead = make_runtime(1);
    dp_runtime_destroy(dead);
    CHECK_OK(dp_runtime_device(rt, 0, &d));
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    dp_test_set_marker_runtime(rt);
    CHECK_STATUS_MSG(dp_runtime_platform_count(NULL, &n), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_platform_count(rt, NULL), DP_INVALID_ARGUMENT, "out_count");
    CHECK_STATUS_MSG(dp_runtime_platform_count(dead, &n), DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_runtime_platform_count((dp_runtime_t *)(void *)d, &n), DP_INVALID_ARGUMENT,
                     "runtime");
    CHECK(n == 4242);
    CHECK_STATUS_MSG(dp_runtime_platform_info(NULL, 0, &p), DP_INVALID_ARGUMENT, "runtime");
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, 0, NULL), DP_INVALID_ARGUMENT, "out_info");
    CHECK_STATUS_MSG(dp_runtime_platform_info(rt, 9, NULL), DP_INVALID_ARGUMENT, "out_info");
    CHECK_STATUS_MSG(dp_runtime_platform_info(dead, 0, &p), DP_INVALID_ARGUMENT, "destroyed");
    CHECK_STATUS_MSG(dp_runtime_platform_info((dp_runtime_t *)(void *)d, 0, &p),
                     DP_INVALID_ARGUMENT, "runtime");
    CHECK(p.name == NULL);
    dp_test_set_marker_runtime(NULL);
    dp_runtime_destroy(rt);
}

int main(void) {
    dp_test_watchdog(120);
    host_only();
    with_plugins();
    struct_sizes();
    bad_arguments();
    return DP_TEST_SUMMARY();
}
