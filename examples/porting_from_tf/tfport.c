/* tfport.c: a TensorFlow PluggableDevice plugin (SE_InitPlugin + TF_InitKernel) ported to
 * devplug's plugin ABI. docs/porting.md shows each part next to the TensorFlow code it
 * replaces; the comments name the TensorFlow function or field each devplug one takes over.
 *
 * One platform, MY_DEVICE, of device type GPU with priority 50 (so that `GPU:0` means it when
 * it is the GPU platform of highest priority; the CUDA plugin registers GPU at 0). Its "device
 * memory" is host memory from aligned_alloc that the host treats as opaque (the platform is not
 * DPP_PLATFORM_HOST_VISIBLE). Streams are synchronous: every stream operation is done when the
 * call returns, so events are always complete and host callbacks run at once. One kernel: Add
 * for f32, with NumPy broadcasting. One op of its own, tfport.AddRelu, with no kernel: its body
 * runs instead, on every device.
 *
 * Load options: devices=N (1..8, default 1), memory=BYTES (per device, default 256 MiB),
 *               priority=N (default 50).
 */
#include <devplug/plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TFP_ALIGN UINT64_C(256) /* devplug requires 256-byte aligned device addresses */
#define TFP_STREAM_MAGIC 0x5354524dU
#define TFP_EVENT_MAGIC 0x45564e54U
#define TFP_MAX_RANK 8

typedef struct {
  const dpp_host_api_t *host; /* valid until after shutdown */
  int32_t devices;
  int32_t priority;
  uint64_t memory;
} tfp_platform;

typedef struct {
  tfp_platform *platform;
  int32_t ordinal;
  char name[32];
  _Atomic uint64_t in_use;  /* bytes allocate handed out and deallocate did not take back */
  dpp_stream_executor_t se; /* the device's function table, valid until destroy_device */
} tfp_device;

typedef struct {
  uint32_t magic;
  tfp_device *device;
} tfp_stream;

typedef struct {
  uint32_t magic;
  tfp_device *device;
} tfp_event;

/* ---- errors: TF_SetStatus(status, code, msg) becomes set_error + a returned status -------- */

static dpp_status_t fail(const dpp_host_api_t *host, dpp_status_t status, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  host->set_error(host->context, msg); /* per thread: call it on the thread that returns */
  return status;
}
#define HOST(d) ((d)->platform->host)

/* ---- memory: SP_StreamExecutor allocate / deallocate / host_memory_* / device_memory_usage */

static dpp_status_t tfp_allocate(void *device, uint64_t size, dpp_addr_t *out_addr) {
  tfp_device *d = device;
  uint64_t rounded = (size + TFP_ALIGN - 1) / TFP_ALIGN * TFP_ALIGN;
  uint64_t used = atomic_fetch_add(&d->in_use, rounded);
  if (rounded < size || used + rounded > d->platform->memory) {
    atomic_fetch_sub(&d->in_use, rounded);
    return fail(HOST(d), DPP_RESOURCE_EXHAUSTED, "%s: cannot allocate %" PRIu64
                " bytes (%" PRIu64 " of %" PRIu64 " in use)", d->name, size, used,
                d->platform->memory);
  }
  void *p = aligned_alloc((size_t)TFP_ALIGN, (size_t)rounded);
  if (p == NULL) {
    atomic_fetch_sub(&d->in_use, rounded);
    return fail(HOST(d), DPP_RESOURCE_EXHAUSTED, "%s: out of host memory for %" PRIu64
                " bytes", d->name, size);
  }
  *out_addr = (dpp_addr_t)(uintptr_t)p; /* never 0 */
  return DPP_OK;
}

static void tfp_deallocate(void *device, dpp_addr_t addr, uint64_t size) {
  tfp_device *d = device; /* the host passes the size it allocated: no table needed */
  free((void *)(uintptr_t)addr);
  atomic_fetch_sub(&d->in_use, (size + TFP_ALIGN - 1) / TFP_ALIGN * TFP_ALIGN);
}

static dpp_status_t tfp_host_allocate(void *device, uint64_t size, void **out_ptr) {
  tfp_device *d = device;
  void *p = malloc((size_t)size);
  if (p == NULL) {
    return fail(HOST(d), DPP_RESOURCE_EXHAUSTED, "%s: cannot allocate %" PRIu64
                " bytes of host memory", d->name, size);
  }
  *out_ptr = p;
  return DPP_OK;
}

static void tfp_host_deallocate(void *device, void *ptr, uint64_t size) {
  (void)device;
  (void)size;
  free(ptr);
}

static dpp_status_t tfp_memory_usage(void *device, uint64_t *out_free, uint64_t *out_total) {
  tfp_device *d = device;
  uint64_t used = atomic_load(&d->in_use);
  *out_total = d->platform->memory;
  *out_free = used < *out_total ? *out_total - used : 0;
  return DPP_OK;
}

/* ---- synchronous copies and memset: sync_memcpy_htod / _dtoh / _dtod; mem_zero, memset ---- */

static void *ptr(dpp_addr_t addr) { return (void *)(uintptr_t)addr; }

static dpp_status_t tfp_memcpy_htod(void *device, dpp_addr_t dst, const void *src, uint64_t size) {
  (void)device;
  if (size > 0) memcpy(ptr(dst), src, (size_t)size);
  return DPP_OK;
}

static dpp_status_t tfp_memcpy_dtoh(void *device, void *dst, dpp_addr_t src, uint64_t size) {
  (void)device;
  if (size > 0) memcpy(dst, ptr(src), (size_t)size);
  return DPP_OK;
}

static dpp_status_t tfp_memcpy_dtod(void *device, dpp_addr_t dst, dpp_addr_t src, uint64_t size) {
  (void)device;
  if (size > 0) memmove(ptr(dst), ptr(src), (size_t)size); /* the ranges may overlap */
  return DPP_OK;
}

static dpp_status_t tfp_memset(void *device, dpp_addr_t dst, uint8_t value, uint64_t size) {
  (void)device;
  if (size > 0) memset(ptr(dst), value, (size_t)size);
  return DPP_OK;
}

/* ---- streams: create_stream / destroy_stream / create_stream_dependency / block_host_until_done
 * ------------------------------------------------------------------------------------------ */

static dpp_status_t check_stream(tfp_device *d, void *stream) {
  const tfp_stream *s = stream;
  if (s == NULL || s->magic != TFP_STREAM_MAGIC || s->device != d) {
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: %p is not a stream of this device", d->name,
                stream);
  }
  return DPP_OK;
}

static dpp_status_t tfp_create_stream(void *device, void **out_stream) {
  tfp_device *d = device;
  tfp_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return fail(HOST(d), DPP_RESOURCE_EXHAUSTED, "%s: out of host memory", d->name);
  s->magic = TFP_STREAM_MAGIC;
  s->device = d;
  *out_stream = s;
  return DPP_OK;
}

static void tfp_destroy_stream(void *device, void *stream) {
  (void)device;
  tfp_stream *s = stream; /* nothing is pending on a synchronous stream */
  s->magic = 0;
  free(s);
}

static dpp_status_t tfp_synchronize_stream(void *device, void *stream) {
  return check_stream(device, stream); /* and return (then clear) the stream's first error */
}

static dpp_status_t tfp_stream_wait_stream(void *device, void *stream, void *other) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : check_stream(device, other);
}

/* ---- stream work: memcpy_htod / memcpy_dtoh / memcpy_dtod (TF's, which take a stream), memset
 * on a stream, host_callback -------------------------------------------------------------- */

static dpp_status_t tfp_memcpy_htod_async(void *device, void *stream, dpp_addr_t dst,
                                          const void *src, uint64_t size) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : tfp_memcpy_htod(device, dst, src, size);
}

static dpp_status_t tfp_memcpy_dtoh_async(void *device, void *stream, void *dst, dpp_addr_t src,
                                          uint64_t size) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : tfp_memcpy_dtoh(device, dst, src, size);
}

static dpp_status_t tfp_memcpy_dtod_async(void *device, void *stream, dpp_addr_t dst,
                                          dpp_addr_t src, uint64_t size) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : tfp_memcpy_dtod(device, dst, src, size);
}

static dpp_status_t tfp_memset_async(void *device, void *stream, dpp_addr_t dst, uint8_t value,
                                     uint64_t size) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : tfp_memset(device, dst, value, size);
}

static dpp_status_t tfp_host_callback(void *device, void *stream, dpp_host_fn func, void *arg) {
  dpp_status_t st = check_stream(device, stream);
  if (st != DPP_OK) return st; /* refused: func must not be called */
  func(arg);                   /* all earlier work is done; no lock of ours is held */
  return DPP_OK;
}

/* ---- events: create_event / destroy_event / record_event / get_event_status / wait_for_event /
 * block_host_for_event; synchronize_all_activity ------------------------------------------ */

static dpp_status_t check_event(tfp_device *d, void *event) {
  const tfp_event *e = event;
  if (e == NULL || e->magic != TFP_EVENT_MAGIC || e->device != d) {
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: %p is not an event of this device", d->name,
                event);
  }
  return DPP_OK;
}

static dpp_status_t tfp_create_event(void *device, void **out_event) {
  tfp_device *d = device;
  tfp_event *e = calloc(1, sizeof *e);
  if (e == NULL) return fail(HOST(d), DPP_RESOURCE_EXHAUSTED, "%s: out of host memory", d->name);
  e->magic = TFP_EVENT_MAGIC;
  e->device = d;
  *out_event = e;
  return DPP_OK;
}

static void tfp_destroy_event(void *device, void *event) {
  (void)device;
  tfp_event *e = event; /* no queued work can still refer to it: streams are synchronous */
  e->magic = 0;
  free(e);
}

static dpp_status_t tfp_record_event(void *device, void *stream, void *event) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : check_event(device, event);
}

static dpp_status_t tfp_event_status(void *device, void *event, int32_t *out_status) {
  dpp_status_t st = check_event(device, event);
  if (st != DPP_OK) return st;
  *out_status = DPP_EVENT_COMPLETE; /* DPP_EVENT_*, not SE_EVENT_*: the values differ */
  return DPP_OK;
}

static dpp_status_t tfp_stream_wait_event(void *device, void *stream, void *event) {
  dpp_status_t st = check_stream(device, stream);
  return st != DPP_OK ? st : check_event(device, event);
}

static dpp_status_t tfp_event_synchronize(void *device, void *event) {
  return check_event(device, event);
}

static dpp_status_t tfp_synchronize_all(void *device) {
  (void)device;
  return DPP_OK;
}

/* ---- devices: SP_PlatformFns create_device + create_stream_executor + create_device_fns ---- */

static dpp_status_t tfp_create_device(void *platform_data, int32_t ordinal, dpp_device_t *device) {
  tfp_platform *pd = platform_data;
  tfp_device *d = calloc(1, sizeof *d);
  if (d == NULL) return fail(pd->host, DPP_RESOURCE_EXHAUSTED, "tfport: out of host memory");
  d->platform = pd;
  d->ordinal = ordinal;
  snprintf(d->name, sizeof d->name, "MY_DEVICE:%d", (int)ordinal);
  atomic_init(&d->in_use, 0);

  dpp_stream_executor_t *se = &d->se; /* calloc'ed: optional functions stay NULL */
  se->struct_size = DPP_STREAM_EXECUTOR_STRUCT_SIZE;
  se->allocate = tfp_allocate;
  se->deallocate = tfp_deallocate;
  se->host_allocate = tfp_host_allocate;
  se->host_deallocate = tfp_host_deallocate;
  se->memory_usage = tfp_memory_usage;
  se->memcpy_htod = tfp_memcpy_htod;
  se->memcpy_dtoh = tfp_memcpy_dtoh;
  se->memcpy_dtod = tfp_memcpy_dtod;
  se->memset = tfp_memset;
  se->create_stream = tfp_create_stream;
  se->destroy_stream = tfp_destroy_stream;
  se->synchronize_stream = tfp_synchronize_stream;
  se->stream_wait_stream = tfp_stream_wait_stream;
  se->memcpy_htod_async = tfp_memcpy_htod_async;
  se->memcpy_dtoh_async = tfp_memcpy_dtoh_async;
  se->memcpy_dtod_async = tfp_memcpy_dtod_async;
  se->memset_async = tfp_memset_async;
  se->host_callback = tfp_host_callback;
  se->create_event = tfp_create_event;
  se->destroy_event = tfp_destroy_event;
  se->record_event = tfp_record_event;
  se->event_status = tfp_event_status;
  se->stream_wait_event = tfp_stream_wait_event;
  se->event_synchronize = tfp_event_synchronize;
  se->synchronize_all = tfp_synchronize_all;
  /* event_elapsed_ns (SP_TimerFns) stays NULL: see the end of docs/porting.md §5 */

  /* The host allocated *device and set struct_size and ordinal; we fill the rest. */
  device->device_data = d;           /* SP_Device.device_handle */
  device->hardware_name = "tfport simulated device";
  device->vendor = "Example Corp";   /* SP_Device.device_vendor */
  device->pci_bus_id = NULL;
  device->total_memory = pd->memory;
  device->numa_node = -1;            /* SP_DeviceFns.get_numa_node */
  device->compute_units = 1;
  device->se = &d->se;
  return DPP_OK;
}

static void tfp_destroy_device(void *platform_data, dpp_device_t *device) {
  tfp_platform *pd = platform_data;
  tfp_device *d = device->device_data;
  uint64_t left = atomic_load(&d->in_use);
  if (left != 0) { /* the host freed every allocation first: anything left is our bug */
    char msg[128];
    snprintf(msg, sizeof msg, "tfport: %s: %" PRIu64 " bytes still allocated at destroy_device",
             d->name, left);
    pd->host->log(pd->host->context, DPP_LOG_ERROR, msg);
  }
  free(d);
}

static void tfp_destroy_platform(void *platform_data) { free(platform_data); }

/* ---- the Add kernel: TF_NewKernelBuilder("AddV2", "GPU", NULL, &add_compute, NULL) ---------- */

/* Tensor i of a host array. Steps by the first element's struct_size, so that a later host's
 * larger dpp_tensor_t is still read correctly. */
static const dpp_tensor_t *tensor_at(const dpp_tensor_t *array, size_t i) {
  return (const dpp_tensor_t *)((const unsigned char *)array + i * array->struct_size);
}

/* Element strides of `t` broadcast to `rank` dimensions of `shape` (NumPy rules, aligned at
 * the end; 0 along a dimension of size 1 that is broadcast). False when it does not broadcast. */
static int broadcast_strides(const dpp_tensor_t *t, int32_t rank, const int64_t *shape,
                             int64_t *strides) {
  if (t->rank > rank) return 0;
  int64_t stride = 1;
  for (int32_t i = rank - 1; i >= 0; i--) {
    int32_t j = i - (rank - t->rank); /* t's dimension aligned with output dimension i */
    int64_t n = j >= 0 ? t->shape[j] : 1;
    if (n != shape[i] && n != 1) return 0;
    strides[i] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return 1;
}

/* compute_func of Add: z = x + y for f32 (the registration's dtypes keep every other dtype
 * away). The host allocated z with the op's output shape (the broadcast of x's and y's) before
 * the call: there is no TF_AllocateOutput. Everything is checked before anything is written: a
 * failing compute must leave no work behind. The stream is synchronous, so the work is done
 * here; a device with real streams enqueues it on context->stream and returns. */
static dpp_status_t tfp_add_f32(const dpp_kernel_context_t *cx) {
  if (cx->struct_size < DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1) return DPP_INVALID_ARGUMENT;
  tfp_device *d = cx->device; /* one of our devices: the kernel is bound to our platform */
  dpp_status_t st = check_stream(d, cx->stream); /* TF_GetStream */
  if (st != DPP_OK) return st;
  if (cx->num_inputs != 2 || cx->num_outputs != 1) { /* TF_NumInputs, TF_NumOutputs */
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: Add: expects 2 inputs and 1 output, got %zu "
                "and %zu", d->name, cx->num_inputs, cx->num_outputs);
  }
  const dpp_tensor_t *x = tensor_at(cx->inputs, 0), *y = tensor_at(cx->inputs, 1); /* TF_GetInput */
  const dpp_tensor_t *z = tensor_at(cx->outputs, 0);
  if (x->dtype != DPP_DTYPE_F32 || y->dtype != DPP_DTYPE_F32 || z->dtype != DPP_DTYPE_F32) {
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: Add: f32 only", d->name);
  }
  if (z->rank > TFP_MAX_RANK) {
    return fail(HOST(d), DPP_UNIMPLEMENTED, "%s: Add: rank %d; at most %d", d->name,
                (int)z->rank, TFP_MAX_RANK);
  }
  int64_t sx[TFP_MAX_RANK], sy[TFP_MAX_RANK];
  if (!broadcast_strides(x, z->rank, z->shape, sx) ||
      !broadcast_strides(y, z->rank, z->shape, sy)) {
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: Add: the inputs do not broadcast to the "
                "output's shape", d->name);
  }
  uint64_t n = 1, nx = 1, ny = 1;
  for (int32_t i = 0; i < z->rank; i++) n *= (uint64_t)z->shape[i];
  for (int32_t i = 0; i < x->rank; i++) nx *= (uint64_t)x->shape[i];
  for (int32_t i = 0; i < y->rank; i++) ny *= (uint64_t)y->shape[i];
  if (z->byte_size != 4 * n || x->byte_size != 4 * nx || y->byte_size != 4 * ny) {
    return fail(HOST(d), DPP_INVALID_ARGUMENT, "%s: Add: byte sizes do not match the shapes",
                d->name);
  }
  if (n == 0) return DPP_OK; /* an empty output: nothing to write */
  const float *px = ptr(x->data), *py = ptr(y->data);
  float *pz = ptr(z->data);
  int64_t index[TFP_MAX_RANK] = {0}; /* the output element's coordinates */
  int64_t ox = 0, oy = 0;            /* and the inputs' elements it reads */
  for (uint64_t k = 0; k < n; k++) {
    pz[k] = px[ox] + py[oy];
    for (int32_t i = z->rank - 1; i >= 0; i--) { /* next coordinate, last dimension fastest */
      ox += sx[i];
      oy += sy[i];
      if (++index[i] < z->shape[i]) break;
      ox -= sx[i] * index[i];
      oy -= sy[i] * index[i];
      index[i] = 0;
    }
  }
  return DPP_OK;
}

/* ---- init: SE_InitPlugin and TF_InitKernel in one function --------------------------------- */

/* Load option `key` as an integer in [lo, hi], or `def` when absent. */
static dpp_status_t int_option(const dpp_host_api_t *host, const char *key, long long lo,
                               long long hi, long long def, long long *out) {
  const char *v = host->get_option(host->context, key);
  *out = def;
  if (v == NULL) return DPP_OK;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    return fail(host, DPP_INVALID_ARGUMENT, "tfport: load option %s='%s' is invalid: expected "
                "an integer from %lld to %lld", key, v, lo, hi);
  }
  *out = x;
  return DPP_OK;
}

/* REGISTER_OP (TF_NewOpDefinitionBuilder ... TF_RegisterOpDefinition) becomes register_op: the
 * signature in the same notation, and a body in other ops instead of a shape function. The body
 * is also the op's decomposition: it runs wherever no kernel for the op exists (here: everywhere,
 * as this plugin registers none), so a program using tfport.AddRelu runs on every device. */
static dpp_status_t tfp_register_ops(const dpp_host_api_t *host) {
  /* register_op came with ABI 1.2: check that the host's table reaches it. */
  const size_t needed = offsetof(dpp_host_api_t, register_op) + sizeof host->register_op;
  if (host->struct_size < needed || host->register_op == NULL) return DPP_OK;
  static const dpp_op_def_t add_relu = {
      .struct_size = DPP_OP_DEF_STRUCT_SIZE,
      .name = "tfport.AddRelu", /* a namespace is required */
      .inputs = "x: T, y: T",
      .outputs = "z: T",
      .type_vars = "T: {f32, f64}",
      .attrs = "",
      .body = "s = Add(x, y); z = Relu(s)",
  };
  return host->register_op(host->context, &add_relu);
}

static dpp_status_t tfp_register_kernels(const dpp_host_api_t *host) {
  /* register_kernel came with ABI 1.1: check that the host's table reaches it. */
  const size_t needed = offsetof(dpp_host_api_t, register_kernel) + sizeof host->register_kernel;
  if (host->struct_size < needed || host->register_kernel == NULL) {
    host->log(host->context, DPP_LOG_INFO, "tfport: the host takes no kernels; ops fall back");
    return DPP_OK;
  }
  static const int32_t f32_only[] = {DPP_DTYPE_F32}; /* TF_KernelBuilder_TypeConstraint */
  dpp_kernel_t k;
  memset(&k, 0, sizeof k);
  k.struct_size = DPP_KERNEL_STRUCT_SIZE;
  k.op = "Add";         /* devplug's op (TensorFlow's AddV2): core/src/op/basis.rs */
  k.device_type = "GPU";
  k.platform = NULL;    /* bound to this plugin's one GPU platform, MY_DEVICE */
  k.dtypes = f32_only;
  k.num_dtypes = 1;
  k.priority = 0;       /* TF_KernelBuilder_Priority */
  k.kernel_data = NULL; /* create_func's result goes to create/state instead (none here) */
  k.compute = tfp_add_f32;
  return host->register_kernel(host->context, &k); /* the host copies the strings */
}

static dpp_status_t tfp_init(const dpp_host_api_t *host, void **out_plugin_data) {
  if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_0) return DPP_ABI_MISMATCH;
  long long devices, memory, priority;
  dpp_status_t st;
  if ((st = int_option(host, "devices", 1, 8, 1, &devices)) != DPP_OK ||
      (st = int_option(host, "memory", 1 << 20, 1LL << 40, 256LL << 20, &memory)) != DPP_OK ||
      (st = int_option(host, "priority", INT32_MIN, INT32_MAX, 50, &priority)) != DPP_OK) {
    return st; /* the message was set by int_option */
  }
  tfp_platform *pd = calloc(1, sizeof *pd);
  if (pd == NULL) return fail(host, DPP_RESOURCE_EXHAUSTED, "tfport: out of host memory");
  pd->host = host;
  pd->devices = (int32_t)devices;
  pd->memory = (uint64_t)memory;
  pd->priority = (int32_t)priority;

  dpp_platform_t p; /* may live on the stack: the host copies what it needs */
  memset(&p, 0, sizeof p);
  p.struct_size = DPP_PLATFORM_STRUCT_SIZE;
  p.name = "MY_DEVICE";          /* SP_Platform.name */
  p.device_type = "GPU";         /* SP_Platform.type */
  p.priority = pd->priority;     /* decides what GPU:0 means; equal priorities are refused */
  p.flags = 0;                   /* the host's suballocator sits over allocate: use_bfc_allocator */
  p.vendor = "Example Corp";
  p.version = "1.0.0";
  p.device_count = pd->devices;  /* SP_PlatformFns.get_device_count */
  p.platform_data = pd;
  p.create_device = tfp_create_device;
  p.destroy_device = tfp_destroy_device;
  p.destroy_platform = tfp_destroy_platform;
  st = host->register_platform(host->context, &p);
  if (st != DPP_OK) {
    free(pd);  /* refused: the host will never call destroy_platform for it */
    return st; /* the host recorded why */
  }
  /* TF_InitKernel's work, after the platform: ops first, then the kernels (for them too). */
  if ((st = tfp_register_ops(host)) != DPP_OK || (st = tfp_register_kernels(host)) != DPP_OK) {
    return st; /* the host rolls back the platform: destroy_platform frees pd */
  }
  *out_plugin_data = NULL;
  return DPP_OK;
}

static const dpp_plugin_api_t tfp_api = {
    .struct_size = DPP_PLUGIN_API_STRUCT_SIZE,
    .abi_major = DPP_ABI_MAJOR,
    .abi_minor = DPP_ABI_MINOR,
    .name = "tfport",
    .version = "1.0.0",
    .init = tfp_init,
    .shutdown = NULL,
};

/* The one exported symbol (declared, with default visibility, by devplug/plugin.h). */
const dpp_plugin_api_t *devplug_plugin_entry(void) { return &tfp_api; }
