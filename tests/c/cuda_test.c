/* A C host with the CUDA plugin. Everywhere: the plugin loads (with no devices when the machine
 * has no GPU or driver), registers platform CUDA of type GPU, and refuses bad load options with
 * the option's name. With a GPU: ops run on CUDA:0 through its own kernels (strict placement)
 * with the CPU's results, f16 through its encodings, stream copies from ordinary host memory
 * keep their order, and an op it has no kernel for fails in strict mode naming where kernels
 * exist. Without one, the GPU part prints "skipped: no CUDA device".
 *
 * DEVPLUG_CUDA_PLUGIN may name the plugin library (to run this test away from its build);
 * DEVPLUG_TEST_EXPECT_GPU=1 makes a missing GPU a failure (ctest runs it so on the fake CUDA
 * driver, plugins/cuda/fake). */
#include "dp_test.h"

#include <devplug/devplug.h>

#include <stdlib.h>
#include <string.h>

static const char *plugin_path(void) {
    const char *p = getenv("DEVPLUG_CUDA_PLUGIN");
    return p != NULL && p[0] != '\0' ? p : DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_cuda.so";
}

static dp_runtime_t *make_runtime(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    dp_runtime_options_init(&o, sizeof o);
    o.discover_plugins = 0;
    DP_TEST_MUST(dp_runtime_create(&o, &rt));
    return rt;
}

static void load_everywhere(void) {
    SECTION("the plugin loads with or without a GPU; bad options are refused by name");
    dp_runtime_t *rt = make_runtime();
    const char *bad[] = {"devices=-3"};
    CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, plugin_path(), bad, 1), DP_INVALID_ARGUMENT,
                     "devices");
    const char *bad2[] = {"tf32=2"};
    CHECK_STATUS_MSG(dp_runtime_load_plugin(rt, plugin_path(), bad2, 1), DP_INVALID_ARGUMENT,
                     "tf32");
    size_t failures = 0;
    CHECK_OK(dp_runtime_plugin_failure_count(rt, &failures));
    CHECK(failures == 2);
    CHECK_OK(dp_runtime_load_plugin(rt, plugin_path(), NULL, 0));
    size_t plugins = 0;
    CHECK_OK(dp_runtime_plugin_count(rt, &plugins));
    CHECK(plugins == 1);
    dp_plugin_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(dp_runtime_plugin_info(rt, 0, &info));
    CHECK_STR(info.name, "cuda");
    CHECK(info.platform_count == 1);
    dp_runtime_destroy(rt);
}

static dp_tensor_t *tensor(dp_device_t *d, dp_dtype_t dt, const int64_t *shape, size_t rank,
                           const void *data, size_t bytes) {
    dp_tensor_t *t = NULL;
    CHECK_OK(dp_tensor_create(d, dt, shape, rank, data, bytes, &t));
    return t;
}

static dp_tensor_t *run(dp_runtime_t *rt, const char *name, dp_tensor_t **ins, size_t n,
                        const dp_attrs_t *attrs, dp_device_t *dev) {
    dp_op_t *op = NULL;
    dp_run_options_t o;
    dp_tensor_t *out = NULL;
    dp_run_options_init(&o, sizeof o);
    o.device = dev;
    o.soft_placement = DP_SOFT_PLACEMENT_OFF;
    CHECK_OK(dp_runtime_find_op(rt, name, &op));
    CHECK_OK(dp_op_run(rt, op, ins, n, attrs, &o, &out, 1, NULL));
    return out;
}

static void ops_on_the_gpu(dp_runtime_t *rt, dp_device_t *gpu) {
    SECTION("Add, MatMul, ReduceSum and f16 on CUDA:0, strictly");
    const int64_t s23[] = {2, 3}, s32[] = {3, 2};
    const float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, -1, 2, 0.5f, 4};
    dp_tensor_t *ta = tensor(gpu, DP_DTYPE_F32, s23, 2, a, sizeof a);
    dp_tensor_t *tb = tensor(gpu, DP_DTYPE_F32, s32, 2, b, sizeof b);
    dp_tensor_t *ins[2] = {ta, ta};
    dp_tensor_t *sum = run(rt, "Add", ins, 2, NULL, gpu);
    float got[6] = {0};
    CHECK_OK(dp_tensor_read(sum, got, sizeof got));
    for (int i = 0; i < 6; ++i) CHECKF(got[i] == 2 * a[i], "Add[%d] = %g", i, got[i]);

    ins[1] = tb;
    dp_tensor_t *prod = run(rt, "MatMul", ins, 2, NULL, gpu);
    float p[4] = {0};
    CHECK_OK(dp_tensor_read(prod, p, sizeof p));
    /* [[1,2,3],[4,5,6]] x [[1,0],[-1,2],[0.5,4]] */
    CHECK(p[0] == 0.5f && p[1] == 16 && p[2] == 2 && p[3] == 34);

    dp_attrs_t *axes = NULL;
    DP_TEST_MUST(dp_attrs_create(&axes));
    const int64_t last[] = {-1};
    CHECK_OK(dp_attrs_set_ints(axes, "axes", last, 1));
    dp_tensor_t *rows = run(rt, "ReduceSum", &ta, 1, axes, gpu);
    float r[2] = {0};
    CHECK_OK(dp_tensor_read(rows, r, sizeof r));
    CHECK(r[0] == 6 && r[1] == 15);

    /* f16 as encodings: 1.5 + 2.25 = 3.75 (0x3E00 + 0x4080 = 0x4380). */
    const uint16_t h[] = {0x3E00, 0x4080};
    const int64_t s2[] = {2};
    dp_tensor_t *th = tensor(gpu, DP_DTYPE_F16, s2, 1, h, sizeof h);
    dp_tensor_t *one[2] = {th, th};
    dp_tensor_t *hh = run(rt, "Add", one, 2, NULL, gpu);
    uint16_t hs[2] = {0};
    CHECK_OK(dp_tensor_read(hh, hs, sizeof hs));
    CHECK(hs[0] == 0x4200 && hs[1] == 0x4480); /* 3.0, 4.5 */

    SECTION("integer MatMul has no CUDA kernel: strict mode names where kernels exist");
    const int32_t iv[] = {1, 2, 3, 4};
    const int64_t s22[] = {2, 2};
    dp_tensor_t *ti = tensor(gpu, DP_DTYPE_I32, s22, 2, iv, sizeof iv);
    dp_tensor_t *iins[2] = {ti, ti};
    dp_op_t *mm = NULL;
    dp_run_options_t o;
    dp_run_options_init(&o, sizeof o);
    o.device = gpu;
    o.soft_placement = DP_SOFT_PLACEMENT_OFF;
    CHECK_OK(dp_runtime_find_op(rt, "MatMul", &mm));
    dp_tensor_t *out = SENTINEL(dp_tensor_t);
    CHECK_STATUS_MSG(dp_op_run(rt, mm, iins, 2, NULL, &o, &out, 1, NULL), DP_NOT_FOUND, "CPU");
    CHECK_UNTOUCHED(dp_tensor_t, out);
    o.soft_placement = DP_SOFT_PLACEMENT_ON;
    out = NULL;
    CHECK_OK(dp_op_run(rt, mm, iins, 2, NULL, &o, &out, 1, NULL));
    int32_t iprod[4] = {0};
    CHECK_OK(dp_tensor_read(out, iprod, sizeof iprod));
    CHECK(iprod[0] == 7 && iprod[1] == 10 && iprod[2] == 15 && iprod[3] == 22);

    dp_tensor_release(out);
    dp_tensor_release(ti);
    dp_tensor_release(hh);
    dp_tensor_release(th);
    dp_attrs_destroy(axes);
    dp_tensor_release(rows);
    dp_tensor_release(prod);
    dp_tensor_release(sum);
    dp_tensor_release(tb);
    dp_tensor_release(ta);
}

static void streams_on_the_gpu(dp_device_t *gpu) {
    SECTION("stream copies from ordinary host memory keep their order");
    enum { N = 1 << 20 };
    unsigned char *src = (unsigned char *)malloc(N), *dst = (unsigned char *)malloc(N);
    dp_test_fill(src, N, 11);
    memset(dst, 0, N);
    dp_buffer_t *buf = NULL, *other = NULL;
    dp_stream_t *s = NULL;
    CHECK_OK(dp_buffer_allocate(gpu, N, &buf));
    CHECK_OK(dp_buffer_allocate(gpu, N, &other));
    CHECK_OK(dp_stream_create(gpu, &s));
    CHECK_OK(dp_stream_write(s, buf, 0, src, N));
    CHECK_OK(dp_stream_copy(s, other, 0, buf, 0, N));
    CHECK_OK(dp_stream_read(s, other, 0, dst, N));
    CHECK_OK(dp_stream_synchronize(s));
    CHECK(dp_test_pattern_mismatch(dst, N, 11) == N);
    dp_stream_destroy(s);
    dp_buffer_release(other);
    dp_buffer_release(buf);
    free(dst);
    free(src);
}

int main(void) {
    dp_test_watchdog(300);
    load_everywhere();
    dp_runtime_t *rt = make_runtime();
    CHECK_OK(dp_runtime_load_plugin(rt, plugin_path(), NULL, 0));
    dp_device_t *gpu = NULL;
    dp_status_t st = dp_runtime_find_device(rt, "CUDA:0", &gpu);
    const char *expect = getenv("DEVPLUG_TEST_EXPECT_GPU"); /* set on the fake driver */
    if (st == DP_NOT_FOUND && !(expect != NULL && expect[0] == '1')) {
        fprintf(stdout, "skipped: no CUDA device (the GPU sections need one)\n");
    } else {
        CHECK_OK(st);
        ops_on_the_gpu(rt, gpu);
        streams_on_the_gpu(gpu);
    }
    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
