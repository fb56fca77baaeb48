/*
 * The malformed-plugin zoo (RELIABILITY.md, "Loading"): ONE source compiled into many device
 * plugins, each with one fault chosen by compile definitions (see CMakeLists.txt beside this
 * file, and tests/tests/zoo.rs for what the host must do with each).
 *
 * Without any fault macro this is a tiny but real plugin: platform ZOO_PLATFORM (default
 * "ZOO") of device type ZOO_DEVICE_TYPE (default "ZOO"), ZOO_DEVICE_COUNT devices (default 1).
 * Device memory is a host-malloc'd arena handed out at fake addresses
 * (ZOO_ADDR_BASE + offset) that the host cannot dereference; every executor function
 * translates and bounds-checks them against the live allocations. Streams are synchronous:
 * every stream-ordered operation runs at once, events are always complete, host callbacks run
 * inline.
 *
 * Nothing here is global and mutable: each init allocates its own state (hanging off the
 * platform data), so several runtimes can load the same library at the same time.
 *
 * Load options:
 *   marker=<file>   lines are appended to <file> as the plugin's functions run: "init <plugin>",
 *                   "registered <platform>", "init ok <plugin>", "created <platform> <ordinal>",
 *                   "destroy_device <platform> <ordinal>", "destroy_platform <platform>",
 *                   "shutdown <plugin>", and "late register_platform returned <status>", so
 *                   tests can check rollbacks and teardown order.
 *
 * Knobs (compile definitions; each fault alone):
 *   ZOO_PLUGIN_NAME="zoo"          dpp_plugin_api_t.name
 *   ZOO_PLATFORM="ZOO"             dpp_platform_t.name
 *   ZOO_DEVICE_TYPE="ZOO"          dpp_platform_t.device_type
 *   ZOO_PRIORITY=0                 dpp_platform_t.priority
 *   ZOO_IDENTITY=0                 what the exported zoo_identity() returns (hardware name,
 *                                  compute units): two libraries with the same symbol
 *   ZOO_NO_ENTRY                   exports devplug_plugin_entry_v0 instead of the entry
 *   ZOO_ENTRY_DATA                 exports devplug_plugin_entry as data (a pointer), not a function
 *   ZOO_ENTRY_NULL                 the entry returns NULL
 *   ZOO_ABI_MAJOR=n, ZOO_ABI_MINOR=n      versions in dpp_plugin_api_t
 *   ZOO_API_STRUCT_SIZE=n          dpp_plugin_api_t.struct_size
 *   ZOO_INIT_NULL                  dpp_plugin_api_t.init = NULL
 *   ZOO_PLUGIN_NAME_NULL           dpp_plugin_api_t.name = NULL
 *   ZOO_PLUGIN_NAME_INVALID        dpp_plugin_api_t.name = "bad name!"
 *   ZOO_PLUGIN_NAME_LONG           dpp_plugin_api_t.name = 100 characters
 *   ZOO_PLATFORM_STRUCT_SIZE=n     dpp_platform_t.struct_size
 *   ZOO_PLATFORM_NAME_LONG         dpp_platform_t.name = 70 characters
 *   ZOO_PLATFORM_NAME_UNTERMINATED dpp_platform_t.name = 300 letters without a NUL
 *   ZOO_FLAGS=n                    dpp_platform_t.flags
 *   ZOO_DEVICE_COUNT=n             dpp_platform_t.device_count
 *   ZOO_CREATE_DEVICE_NULL, ZOO_DESTROY_DEVICE_NULL
 *   ZOO_REGISTER_TWICE             the same platform registered twice
 *   ZOO_IGNORE_REFUSAL             ... and init succeeds anyway (with the first one)
 *   ZOO_INIT_FAIL_STATUS=n         init returns n (before registering anything) ...
 *   ZOO_INIT_FAIL_MESSAGE="..."    ... after set_error(message), when given
 *   ZOO_INIT_FAIL_AFTER_REGISTER   ... after registering its platform
 *   ZOO_SE_NULL                    dpp_device_t.se = NULL
 *   ZOO_SE_STRUCT_SIZE=n           dpp_stream_executor_t.struct_size. Below
 *                                  DPP_STREAM_EXECUTOR_STRUCT_SIZE (e.g.
 *                                  DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0: a plugin built against
 *                                  ABI 1.0-1.3, whose table ends before event_elapsed_ns) the
 *                                  fields past the size hold a trap, as an older plugin's table
 *                                  is followed by memory that is not a field: event_elapsed_ns
 *                                  fails with DPP_INTERNAL and "zoo: event_elapsed_ns lies past
 *                                  this table's struct_size ..." if the host ever calls it.
 *                                  Otherwise event_elapsed_ns is NULL (zoo does not time events)
 *   ZOO_SE_NULL_FIELD=<field>      that dpp_stream_executor_t function is NULL
 *   ZOO_HOST_ALLOC_ONLY            host_allocate set, host_deallocate NULL
 *   ZOO_UNIFIED_ALLOC_ONLY         unified_allocate set (to host_allocate's function),
 *                                  unified_deallocate NULL
 *   ZOO_CREATE_DEVICE_FAIL         create_device fails (DPP_UNAVAILABLE, with a message)
 *   ZOO_ALLOCATOR_STATS_FAIL       allocator_stats is set and always fails (DPP_UNAVAILABLE,
 *                                  with a message); with ZOO_FLAGS=2u (NO_SUBALLOCATOR)
 *   ZOO_CRASH_IN_MEMSET            memset writes to an invalid address (SIGSEGV)
 *   ZOO_MEMSET_STATUS=S            memset fails with status S (any int) and a message
 *   ZOO_MEMSET_ARENA_ONLY          memset checks its range against the arena only, not against
 *                                  the live allocations (no lock, no table): a plugin call doing
 *                                  what the CPU device's does, the plugin benchmark's measure
 *                                  of the ABI boundary alone (not a fault)
 *   ZOO_HANG_IN_SYNCHRONIZE        synchronize_stream never returns
 *   ZOO_EVENTS_FAILED              event_status reports every event DPP_EVENT_ERROR (its stream
 *                                  failed), while event_synchronize returns DPP_OK
 *   ZOO_DROP_HOST_CALLBACKS        host_callback returns DPP_OK and never calls the function
 *   ZOO_HOST_CALLBACK_TWICE        host_callback calls the function twice
 *   ZOO_HOST_CALLBACK_RUN_THEN_FAIL  host_callback calls the function, then fails
 *   ZOO_KERNEL_ZEROS               registers a kernel for ZOO_KERNEL_OP (default "Add"; ZOO,
 *                                  f32) that writes zeros: wrong results for `devplug check`
 *   ZOO_KERNEL_FAIL                ... instead, one that fails every launch
 *                                  (ZOO_KERNEL_FAIL_STATUS, default DPP_FAILED_PRECONDITION,
 *                                  with a message; DPP_UNIMPLEMENTED declines every launch)
 *   ZOO_KERNEL_TEMP                ... instead, a right Reshape that copies through memory from
 *                                  the host's allocate_temp (ABI 1.4); ZOO_KERNEL_TEMP_BYTES=n
 *                                  asks for n bytes instead of the input's size;
 *                                  ZOO_KERNEL_TEMP_OWN_MESSAGE sets its own message on a refusal
 *   ZOO_KERNEL_REDUCE_SUM          ... instead, a right ReduceSum of f32 (with
 *                                  ZOO_KERNEL_OP="ReduceSum"), but for ZOO_REDUCE_SUM_BUG=1
 *                                  (42 for an input of no elements) or 2 (-1 for a rank-0 input);
 *                                  it declines (DPP_UNIMPLEMENTED) reductions to more than
 *                                  ZOO_REDUCE_SUM_MAX_OUT elements (default and at most 1024)
 *   ZOO_KERNEL_TRIPLE              ... instead, f32 y = 3 * x whatever the attributes (for
 *                                  ZOO_OP_BODY "y = Mul(x, @k)" with ZOO_OP_ATTRS "k: float = 3.0")
 *   ZOO_OP_ATTRS="..."             with ZOO_OP_BODY: the op's attributes
 *   ZOO_KERNEL_ADD_TRUNC           ... instead, an Add (with ZOO_KERNEL_DTYPE=DPP_DTYPE_F16 or
 *                                  DPP_DTYPE_F32) of tensors of one shape (others declined)
 *                                  that truncates each sum to the dtype instead of rounding it;
 *                                  f16 with ZOO_ADD_TIES_AWAY: rounds to nearest, but halfway
 *                                  cases away from zero
 *   ZOO_KERNEL_ALL_DTYPES          ... for every dtype (no dtype list)
 *   ZOO_COPY_OVERRUN=n             ZOO_KERNEL_COPY's kernel also writes n bytes past its output
 *   ZOO_COPY_CLOBBERS_INPUT        ZOO_KERNEL_COPY's kernel also zeroes its input
 *   ZOO_KERNEL_COPY_ABOVE          ... and, registered before it, a right kernel for the same
 *                                  op and dtypes at priority 10 that copies input 0 to output 0
 *                                  (Reshape): the one dispatch runs, the other one below it
 *   ZOO_KERNEL_STRUCT_SIZE=n       ... with dpp_kernel_t.struct_size n
 *   ZOO_KERNEL_COMPUTE_NULL        ... with dpp_kernel_t.compute NULL
 *   ZOO_KERNEL_CREATE_FAILS        ... with a create (ABI 1.5) that fails every time
 *   ZOO_KERNEL_DESTROY_ONLY        ... with a destroy but no create
 *   ZOO_KERNEL_CREATE_ONLY         ... with a create (storing no state) but no destroy
 *   ZOO_LOG_ERROR_AT_DESTROY       destroy_device logs an error (a leak of its own, as a
 *                                  plugin reports one)
 *   ZOO_OP_DEF_STRUCT_SIZE=n       with ZOO_OP_BODY: dpp_op_def_t.struct_size n
 *   ZOO_KERNEL_DTYPE=n             ... for dtype n instead of f32
 *   ZOO_KERNEL_DTYPES_NULL         ... with dtypes NULL but num_dtypes 3
 *   ZOO_KERNEL_DEVICE_TYPE="..."   ... with that device_type instead of ZOO_DEVICE_TYPE
 *   ZOO_KERNEL_PLATFORM_NULL       ... with platform NULL instead of ZOO_PLATFORM
 *   ZOO_KERNEL_FIRST               ... registered before the platform, not after it
 *   ZOO_ALIGN=n                    allocate rounds sizes up to n bytes (default 256): its first
 *                                  address is 256-byte aligned, the next ones need not be
 *   ZOO_MISALIGN=n                 allocate returns addresses n bytes past 256-byte alignment
 *                                  (each allocation n bytes larger inside, so all of it works)
 *   ZOO_OP_BODY="..."              registers op ZOO_OP_NAME (default "zoo.Op"; x: T -> y: T,
 *                                  T: {f32, f64}) with that body (ABI 1.2), after its platform
 *   ZOO_KERNEL_LABEL               with ZOO_OP_BODY: the op gets attribute `label: string =
 *                                  "zoo"`, and a kernel for it (ZOO, f32) writes the label's
 *                                  bytes (attr_string, ABI 1.2) into its output as floats,
 *                                  then zeros
 *   ZOO_LATE_REGISTER              create_device calls register_platform (after init) and
 *                                  writes the status it got to the marker
 *   ZOO_KERNEL_STATE               with a kernel (ZOO_KERNEL_COPY, say): a create (ABI 1.5)
 *                                  that makes a state its device records, a destroy that frees
 *                                  it (destroy_device logs an error for states never
 *                                  destroyed), and a compute that fails (DPP_INTERNAL, naming
 *                                  the pointer) when the state it gets is not one its device's
 *                                  create made, then runs the kernel. It reads `state` only when
 *                                  the context's struct_size reaches it (an older host's 80-byte
 *                                  context has none; it then works without), as SIM does ...
 *   ZOO_KERNEL_STATE_UNCHECKED     ... or, the fault, whatever struct_size says: past the end of
 *                                  the context of a host of ABI 1.4 or older
 *   ZOO_MARK_HOST                  init writes "host ABI 1.N, dpp_host_api_t.struct_size S" to
 *                                  the marker (what the host's table says); with
 *                                  ZOO_KERNEL_STATE, create writes "create" and compute
 *                                  "compute: dpp_kernel_context_t.struct_size S, state W" (W:
 *                                  "from create", "not read" or "unknown")
 */
#define _POSIX_C_SOURCE 200809L

#include <devplug/plugin.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Knobs and their defaults */

#ifndef ZOO_PLUGIN_NAME
#define ZOO_PLUGIN_NAME "zoo"
#endif
#ifndef ZOO_PLATFORM
#define ZOO_PLATFORM "ZOO"
#endif
#ifndef ZOO_DEVICE_TYPE
#define ZOO_DEVICE_TYPE "ZOO"
#endif
#ifndef ZOO_PRIORITY
#define ZOO_PRIORITY 0
#endif
#ifndef ZOO_IDENTITY
#define ZOO_IDENTITY 0
#endif
#ifndef ZOO_ABI_MAJOR
#define ZOO_ABI_MAJOR DPP_ABI_MAJOR
#endif
#ifndef ZOO_ABI_MINOR
#define ZOO_ABI_MINOR DPP_ABI_MINOR
#endif
#ifndef ZOO_API_STRUCT_SIZE
#define ZOO_API_STRUCT_SIZE DPP_PLUGIN_API_STRUCT_SIZE
#endif
#ifndef ZOO_PLATFORM_STRUCT_SIZE
#define ZOO_PLATFORM_STRUCT_SIZE DPP_PLATFORM_STRUCT_SIZE
#endif
#ifndef ZOO_SE_STRUCT_SIZE
#define ZOO_SE_STRUCT_SIZE DPP_STREAM_EXECUTOR_STRUCT_SIZE
#endif
#ifndef ZOO_FLAGS
#define ZOO_FLAGS 0u
#endif
#ifndef ZOO_DEVICE_COUNT
#define ZOO_DEVICE_COUNT 1
#endif

#define ZOO_VERSION "1.0.0"
#define ZOO_VENDOR "devplug zoo"
#define ZOO_ADDR_BASE UINT64_C(0x2000000000000000)
#define ZOO_ARENA_SIZE (UINT64_C(16) << 20)
#ifndef ZOO_ALIGN
#define ZOO_ALIGN UINT64_C(256)
#endif
#ifndef ZOO_MISALIGN
#define ZOO_MISALIGN UINT64_C(0)
#endif
#define ZOO_MAX_ALLOCS 256
#define ZOO_MARKER_MAX 1024
#define ZOO_MSG_MAX 256

/* Functions some variants leave out of their tables. */
#define ZOO_MAYBE_UNUSED __attribute__((unused))

#define ZOO_MAGIC_DEVICE 0x5a4f4f44u /* "ZOOD" */
#define ZOO_MAGIC_STREAM 0x5a4f4f53u /* "ZOOS" */
#define ZOO_MAGIC_EVENT 0x5a4f4f45u  /* "ZOOE" */

#if defined(ZOO_PLUGIN_NAME_NULL)
#define ZOO_API_NAME NULL
#elif defined(ZOO_PLUGIN_NAME_INVALID)
#define ZOO_API_NAME "bad name!"
#elif defined(ZOO_PLUGIN_NAME_LONG)
/* 100 characters: NUL-terminated, but not within the host's bound of 64 bytes. */
#define ZOO_API_NAME                                                                             \
  "zoo_long_name_0123456789012345678901234567890123456789012345678901234567890123456789_"        \
  "end_of_100_char"
#else
#define ZOO_API_NAME ZOO_PLUGIN_NAME
#endif

#if defined(ZOO_PLATFORM_NAME_LONG)
/* 70 characters, all valid: longer than the 64 a platform name may have. */
#define ZOO_PLATFORM_NAME "ZOO_PLATFORM_NAME_THAT_IS_LONGER_THAN_SIXTY_FOUR_CHARACTERS_0123456789"
#elif defined(ZOO_PLATFORM_NAME_UNTERMINATED)
/* 300 letters and no NUL (filled in by zoo_fill_platform): the host reads at most 256. */
static char zoo_unterminated_name[300];
#define ZOO_PLATFORM_NAME zoo_unterminated_name
#else
#define ZOO_PLATFORM_NAME ZOO_PLATFORM
#endif

/* ------------------------------------------------------------------------------------------ */
/* The symbol every zoo library defines and exports under the same name (not static, default
 * visibility): with RTLD_LOCAL each library must keep calling its own. */

__attribute__((visibility("default"))) int zoo_identity(void);
__attribute__((visibility("default"))) int zoo_identity(void) { return ZOO_IDENTITY; }

/* ------------------------------------------------------------------------------------------ */
/* Types */

typedef struct zoo_platform {
  const dpp_host_api_t *host; /* valid until after shutdown (ABI) */
  char name[80];
  char marker[ZOO_MARKER_MAX]; /* "" when no marker option was given */
} zoo_platform;

typedef struct zoo_alloc {
  uint64_t offset;
  uint64_t size;
} zoo_alloc;

typedef struct zoo_device {
  uint32_t magic;
  int32_t ordinal;
  zoo_platform *platform;
  atomic_flag lock; /* guards allocs, nallocs, in_use */
  unsigned char *arena;
  zoo_alloc allocs[ZOO_MAX_ALLOCS]; /* live allocations, sorted by offset */
  int nallocs;
  uint64_t in_use;
  char hardware_name[64];
  dpp_stream_executor_t se;
  void *kstates; /* ZOO_KERNEL_STATE: the states create made and destroy has not freed, a list */
} zoo_device;

typedef struct zoo_stream {
  uint32_t magic;
  zoo_device *device;
} zoo_stream;

typedef struct zoo_event {
  uint32_t magic;
  zoo_device *device;
} zoo_event;

typedef struct zoo_plugin {
  char marker[ZOO_MARKER_MAX];
} zoo_plugin;

/* ------------------------------------------------------------------------------------------ */
/* Helpers */

static void zoo_mark(const char *marker, const char *line) {
  if (marker == NULL || marker[0] == '\0') {
    return;
  }
  FILE *f = fopen(marker, "a");
  if (f != NULL) {
    fprintf(f, "%s\n", line);
    fclose(f);
  }
}

__attribute__((format(printf, 3, 4))) static dpp_status_t zoo_fail(const zoo_device *d,
                                                                    dpp_status_t status,
                                                                    const char *fmt, ...) {
  char msg[ZOO_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const dpp_host_api_t *host = d->platform->host;
  host->set_error(host->context, msg);
  return status;
}

static void zoo_lock(zoo_device *d) {
  while (atomic_flag_test_and_set_explicit(&d->lock, memory_order_acquire)) {
  }
}

static void zoo_unlock(zoo_device *d) { atomic_flag_clear_explicit(&d->lock, memory_order_release); }

static zoo_device *zoo_dev(void *device) {
  zoo_device *d = (zoo_device *)device;
  return (d != NULL && d->magic == ZOO_MAGIC_DEVICE) ? d : NULL;
}

/* The host pointer for [addr, addr + size) inside one live allocation, or NULL. */
static unsigned char *zoo_at(zoo_device *d, dpp_addr_t addr, uint64_t size) {
  if (addr < ZOO_ADDR_BASE) {
    return NULL;
  }
  uint64_t off = addr - ZOO_ADDR_BASE;
  unsigned char *p = NULL;
  zoo_lock(d);
  for (int i = 0; i < d->nallocs; i++) {
    const zoo_alloc *a = &d->allocs[i];
    if (off >= a->offset && off - a->offset < a->size) {
      if (size <= a->size - (off - a->offset)) {
        p = d->arena + off;
      }
      break;
    }
  }
  zoo_unlock(d);
  return p;
}

#define ZOO_DEVICE_OR_FAIL(d, device)                                                            \
  zoo_device *d = zoo_dev(device);                                                               \
  if (d == NULL) {                                                                               \
    return DPP_INVALID_ARGUMENT;                                                                 \
  }

#define ZOO_RANGE_OR_FAIL(p, d, addr, size, what)                                                \
  unsigned char *p = zoo_at(d, addr, size);                                                      \
  if (p == NULL) {                                                                               \
    return zoo_fail(d, DPP_INVALID_ARGUMENT,                                                     \
                    "zoo: " what ": [0x%llx, +%llu) lies outside every live allocation",         \
                    (unsigned long long)(addr), (unsigned long long)(size));                     \
  }

static dpp_status_t zoo_check_stream(zoo_device *d, void *stream) {
  const zoo_stream *s = (const zoo_stream *)stream;
  if (s == NULL || s->magic != ZOO_MAGIC_STREAM || s->device != d) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: %p is not a stream of this device", stream);
  }
  return DPP_OK;
}

static dpp_status_t zoo_check_event(zoo_device *d, void *event) {
  const zoo_event *e = (const zoo_event *)event;
  if (e == NULL || e->magic != ZOO_MAGIC_EVENT || e->device != d) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: %p is not an event of this device", event);
  }
  return DPP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Memory */

static dpp_status_t zoo_allocate(void *device, uint64_t size, dpp_addr_t *out_addr) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (out_addr == NULL || size == 0) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: allocate(%llu): size 0 or NULL out_addr",
                    (unsigned long long)size);
  }
  if (size > ZOO_ARENA_SIZE) {
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: allocate(%llu): more than the device's %llu bytes",
                    (unsigned long long)size, (unsigned long long)ZOO_ARENA_SIZE);
  }
  uint64_t rounded = (size + ZOO_MISALIGN + ZOO_ALIGN - 1) / ZOO_ALIGN * ZOO_ALIGN;
  zoo_lock(d);
  if (d->nallocs == ZOO_MAX_ALLOCS) {
    zoo_unlock(d);
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: allocate(%llu): %llu allocations live",
                    (unsigned long long)size, (unsigned long long)ZOO_MAX_ALLOCS);
  }
  /* First fit over the gaps between the sorted live allocations. */
  uint64_t start = 0;
  int at = 0;
  for (; at < d->nallocs; at++) {
    if (d->allocs[at].offset - start >= rounded) {
      break;
    }
    start = d->allocs[at].offset + d->allocs[at].size;
  }
  if (ZOO_ARENA_SIZE - start < rounded) {
    zoo_unlock(d);
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED,
                    "zoo: allocate(%llu): no free block that large in %llu bytes",
                    (unsigned long long)size, (unsigned long long)ZOO_ARENA_SIZE);
  }
  memmove(&d->allocs[at + 1], &d->allocs[at], (size_t)(d->nallocs - at) * sizeof d->allocs[0]);
  d->allocs[at].offset = start;
  d->allocs[at].size = rounded;
  d->nallocs++;
  d->in_use += rounded;
  zoo_unlock(d);
  *out_addr = ZOO_ADDR_BASE + start + ZOO_MISALIGN;
  return DPP_OK;
}

static void zoo_deallocate(void *device, dpp_addr_t addr, uint64_t size) {
  (void)size;
  zoo_device *d = zoo_dev(device);
  if (d == NULL || addr < ZOO_ADDR_BASE + ZOO_MISALIGN) {
    return;
  }
  uint64_t off = addr - ZOO_ADDR_BASE - ZOO_MISALIGN;
  zoo_lock(d);
  for (int i = 0; i < d->nallocs; i++) {
    if (d->allocs[i].offset == off) {
      d->in_use -= d->allocs[i].size;
      memmove(&d->allocs[i], &d->allocs[i + 1],
              (size_t)(d->nallocs - i - 1) * sizeof d->allocs[0]);
      d->nallocs--;
      break;
    }
  }
  zoo_unlock(d);
}

static dpp_status_t zoo_host_allocate(void *device, uint64_t size, void **out_ptr) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (out_ptr == NULL || size == 0) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: host_allocate(%llu): size 0 or NULL out_ptr",
                    (unsigned long long)size);
  }
  *out_ptr = malloc((size_t)size);
  if (*out_ptr == NULL) {
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: host_allocate(%llu): out of memory",
                    (unsigned long long)size);
  }
  return DPP_OK;
}

static void zoo_host_deallocate(void *device, void *ptr, uint64_t size) {
  (void)device;
  (void)size;
  free(ptr);
}

static dpp_status_t zoo_memory_usage(void *device, uint64_t *out_free, uint64_t *out_total) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (out_free == NULL || out_total == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  zoo_lock(d);
  *out_free = ZOO_ARENA_SIZE - d->in_use;
  zoo_unlock(d);
  *out_total = ZOO_ARENA_SIZE;
  return DPP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Copies (synchronous; the _async ones run at once too) */

static dpp_status_t zoo_memcpy_htod(void *device, dpp_addr_t dst, const void *src, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (size == 0) {
    return DPP_OK;
  }
  if (src == NULL) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: memcpy_htod: NULL source");
  }
  ZOO_RANGE_OR_FAIL(p, d, dst, size, "memcpy_htod destination");
  memcpy(p, src, (size_t)size);
  return DPP_OK;
}

static dpp_status_t zoo_memcpy_dtoh(void *device, void *dst, dpp_addr_t src, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (size == 0) {
    return DPP_OK;
  }
  if (dst == NULL) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: memcpy_dtoh: NULL destination");
  }
  ZOO_RANGE_OR_FAIL(p, d, src, size, "memcpy_dtoh source");
  memcpy(dst, p, (size_t)size);
  return DPP_OK;
}

static dpp_status_t zoo_memcpy_dtod(void *device, dpp_addr_t dst, dpp_addr_t src, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (size == 0) {
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(pd, d, dst, size, "memcpy_dtod destination");
  ZOO_RANGE_OR_FAIL(ps, d, src, size, "memcpy_dtod source");
  memmove(pd, ps, (size_t)size);
  return DPP_OK;
}

static dpp_status_t zoo_memset(void *device, dpp_addr_t dst, uint8_t value, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
#if defined(ZOO_CRASH_IN_MEMSET)
  {
    /* A real invalid write, as a buggy plugin makes (a raise() would be caught once by the
     * Rust runtime's own SIGSEGV handler, which then returns). */
    volatile int *nowhere = (volatile int *)(uintptr_t)16;
    *nowhere = 1;
  }
#endif
#if defined(ZOO_MEMSET_STATUS)
  /* A status memset has no business returning (or one that is no status at all). */
  return zoo_fail(d, (dpp_status_t)(ZOO_MEMSET_STATUS), "zoo: memset returns status %d on purpose",
                  (int)(ZOO_MEMSET_STATUS));
#endif
  if (size == 0) {
    return DPP_OK;
  }
#if defined(ZOO_MEMSET_ARENA_ONLY)
  /* As a driver's memset of a device pointer: the address is checked against the memory there
   * is, not against what the plugin handed out. */
  if (dst < ZOO_ADDR_BASE || dst - ZOO_ADDR_BASE > ZOO_ARENA_SIZE ||
      size > ZOO_ARENA_SIZE - (dst - ZOO_ADDR_BASE)) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: memset destination outside the arena");
  }
  unsigned char *p = d->arena + (dst - ZOO_ADDR_BASE);
#else
  ZOO_RANGE_OR_FAIL(p, d, dst, size, "memset destination");
#endif
  memset(p, value, (size_t)size);
  return DPP_OK;
}

static dpp_status_t zoo_memcpy_htod_async(void *device, void *stream, dpp_addr_t dst,
                                          const void *src, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_memcpy_htod(device, dst, src, size);
}

static dpp_status_t zoo_memcpy_dtoh_async(void *device, void *stream, void *dst, dpp_addr_t src,
                                          uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_memcpy_dtoh(device, dst, src, size);
}

static dpp_status_t zoo_memcpy_dtod_async(void *device, void *stream, dpp_addr_t dst,
                                          dpp_addr_t src, uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_memcpy_dtod(device, dst, src, size);
}

static dpp_status_t zoo_memset_async(void *device, void *stream, dpp_addr_t dst, uint8_t value,
                                     uint64_t size) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_memset(device, dst, value, size);
}

/* ------------------------------------------------------------------------------------------ */
/* Streams and events (synchronous: all work is done when it is enqueued) */

static dpp_status_t zoo_create_stream(void *device, void **out_stream) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (out_stream == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  zoo_stream *s = (zoo_stream *)calloc(1, sizeof *s);
  if (s == NULL) {
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: create_stream: out of memory");
  }
  s->magic = ZOO_MAGIC_STREAM;
  s->device = d;
  *out_stream = s;
  return DPP_OK;
}

static void zoo_destroy_stream(void *device, void *stream) {
  zoo_device *d = zoo_dev(device);
  zoo_stream *s = (zoo_stream *)stream;
  if (d != NULL && s != NULL && s->magic == ZOO_MAGIC_STREAM && s->device == d) {
    s->magic = 0;
    free(s);
  }
}

static dpp_status_t zoo_synchronize_stream(void *device, void *stream) {
  ZOO_DEVICE_OR_FAIL(d, device);
#if defined(ZOO_HANG_IN_SYNCHRONIZE)
  for (;;) {
    pause();
  }
#endif
  return zoo_check_stream(d, stream);
}

static dpp_status_t zoo_stream_wait_stream(void *device, void *stream, void *other) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_check_stream(d, other);
}

static dpp_status_t zoo_host_callback(void *device, void *stream, dpp_host_fn func, void *arg) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  if (st != DPP_OK) {
    return st;
  }
  if (func == NULL) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: host_callback: NULL function");
  }
#if defined(ZOO_DROP_HOST_CALLBACKS)
  /* A plugin bug: OK, and the function never runs (its argument leaks). */
  (void)arg;
  return DPP_OK;
#elif defined(ZOO_HOST_CALLBACK_TWICE)
  /* A plugin bug: the function runs twice. */
  func(arg);
  func(arg);
  return DPP_OK;
#elif defined(ZOO_HOST_CALLBACK_RUN_THEN_FAIL)
  /* A plugin bug: the function runs, and then the call fails (the host drops a refused one). */
  func(arg);
  return zoo_fail(d, DPP_UNAVAILABLE, "zoo: host_callback: refused after running it");
#else
  func(arg);
  return DPP_OK;
#endif
}

static dpp_status_t zoo_create_event(void *device, void **out_event) {
  ZOO_DEVICE_OR_FAIL(d, device);
  if (out_event == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  zoo_event *e = (zoo_event *)calloc(1, sizeof *e);
  if (e == NULL) {
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: create_event: out of memory");
  }
  e->magic = ZOO_MAGIC_EVENT;
  e->device = d;
  *out_event = e;
  return DPP_OK;
}

static void zoo_destroy_event(void *device, void *event) {
  zoo_device *d = zoo_dev(device);
  zoo_event *e = (zoo_event *)event;
  if (d != NULL && e != NULL && e->magic == ZOO_MAGIC_EVENT && e->device == d) {
    e->magic = 0;
    free(e);
  }
}

static dpp_status_t zoo_record_event(void *device, void *stream, void *event) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_check_event(d, event);
}

static dpp_status_t zoo_event_status(void *device, void *event, int32_t *out_status) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_event(d, event);
  if (st != DPP_OK) {
    return st;
  }
  if (out_status == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
#if defined(ZOO_EVENTS_FAILED)
  *out_status = DPP_EVENT_ERROR; /* as if its stream had failed; event_synchronize says DPP_OK */
#else
  *out_status = DPP_EVENT_COMPLETE;
#endif
  return DPP_OK;
}

static dpp_status_t zoo_stream_wait_event(void *device, void *stream, void *event) {
  ZOO_DEVICE_OR_FAIL(d, device);
  dpp_status_t st = zoo_check_stream(d, stream);
  return st != DPP_OK ? st : zoo_check_event(d, event);
}

static dpp_status_t zoo_event_synchronize(void *device, void *event) {
  ZOO_DEVICE_OR_FAIL(d, device);
  return zoo_check_event(d, event);
}

static dpp_status_t zoo_synchronize_all(void *device) {
  ZOO_DEVICE_OR_FAIL(d, device);
  return DPP_OK;
}

/* What lies in event_elapsed_ns's place when ZOO_SE_STRUCT_SIZE ends the table before it
 * (see ZOO_SE_STRUCT_SIZE): a host that reads a field past struct_size calls this. */
static dpp_status_t zoo_event_elapsed_ns_past_size(void *device, void *start, void *end, int64_t *out_ns) {
  ZOO_DEVICE_OR_FAIL(d, device);
  (void)start;
  (void)end;
  (void)out_ns;
  return zoo_fail(d, DPP_INTERNAL,
                  "zoo: event_elapsed_ns lies past this table's struct_size (%llu bytes): the host must not "
                  "call it",
                  (unsigned long long)ZOO_SE_STRUCT_SIZE);
}

#if defined(ZOO_ALLOCATOR_STATS_FAIL)
static dpp_status_t zoo_allocator_stats(void *device, dpp_allocator_stats_t *out_stats) {
  ZOO_DEVICE_OR_FAIL(d, device);
  (void)out_stats;
  return zoo_fail(d, DPP_UNAVAILABLE, "zoo: allocator statistics are not available (the firmware is busy)");
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* Platform: devices */

static void zoo_fill_executor(dpp_stream_executor_t *se) {
  memset(se, 0, sizeof *se);
  se->struct_size = ZOO_SE_STRUCT_SIZE;
  se->ext = NULL;
  se->allocate = zoo_allocate;
  se->deallocate = zoo_deallocate;
  se->host_allocate = zoo_host_allocate;
  se->host_deallocate = zoo_host_deallocate;
  se->unified_allocate = NULL;
  se->unified_deallocate = NULL;
  se->memory_usage = zoo_memory_usage;
#if defined(ZOO_ALLOCATOR_STATS_FAIL)
  se->allocator_stats = zoo_allocator_stats;
#else
  se->allocator_stats = NULL;
#endif
  se->memcpy_htod = zoo_memcpy_htod;
  se->memcpy_dtoh = zoo_memcpy_dtoh;
  se->memcpy_dtod = zoo_memcpy_dtod;
  se->memset = zoo_memset;
  se->create_stream = zoo_create_stream;
  se->destroy_stream = zoo_destroy_stream;
  se->synchronize_stream = zoo_synchronize_stream;
  se->stream_wait_stream = zoo_stream_wait_stream;
  se->memcpy_htod_async = zoo_memcpy_htod_async;
  se->memcpy_dtoh_async = zoo_memcpy_dtoh_async;
  se->memcpy_dtod_async = zoo_memcpy_dtod_async;
  se->memset_async = zoo_memset_async;
  se->host_callback = zoo_host_callback;
  se->create_event = zoo_create_event;
  se->destroy_event = zoo_destroy_event;
  se->record_event = zoo_record_event;
  se->event_status = zoo_event_status;
  se->stream_wait_event = zoo_stream_wait_event;
  se->event_synchronize = zoo_event_synchronize;
  se->synchronize_all = zoo_synchronize_all;
  /* (ABI 1.4) zoo does not time events; a table of an older size ends before the field. */
  se->event_elapsed_ns = NULL;
  if (se->struct_size < DPP_STREAM_EXECUTOR_STRUCT_SIZE) {
    se->event_elapsed_ns = zoo_event_elapsed_ns_past_size;
  }
#ifdef ZOO_SE_NULL_FIELD
  se->ZOO_SE_NULL_FIELD = NULL;
#endif
#ifdef ZOO_HOST_ALLOC_ONLY
  se->host_deallocate = NULL;
#endif
#ifdef ZOO_UNIFIED_ALLOC_ONLY
  se->unified_allocate = zoo_host_allocate;
#endif
}

static void zoo_fill_platform(dpp_platform_t *p, zoo_platform *pd);

ZOO_MAYBE_UNUSED static dpp_status_t zoo_create_device(void *platform_data, int32_t ordinal, dpp_device_t *device) {
  zoo_platform *pd = (zoo_platform *)platform_data;
  const dpp_host_api_t *host = pd->host;
  char line[ZOO_MSG_MAX];
  if (device == NULL || device->struct_size < DPP_DEVICE_STRUCT_SIZE) {
    host->set_error(host->context, "zoo: create_device: bad dpp_device_t");
    return DPP_INVALID_ARGUMENT;
  }
#ifdef ZOO_CREATE_DEVICE_FAIL
  snprintf(line, sizeof line, "zoo: device %d of %s did not power up", (int)ordinal, pd->name);
  host->set_error(host->context, line);
  return DPP_UNAVAILABLE;
#endif
#ifdef ZOO_LATE_REGISTER
  {
    /* register_platform is for init only: the host must refuse this one. */
    dpp_platform_t p;
    zoo_fill_platform(&p, pd);
    p.name = "ZOOLATE";
    p.priority = ZOO_PRIORITY + 1000;
    dpp_status_t st = host->register_platform(host->context, &p);
    snprintf(line, sizeof line, "late register_platform returned %d", (int)st);
    zoo_mark(pd->marker, line);
  }
#endif
  zoo_device *d = (zoo_device *)calloc(1, sizeof *d);
  unsigned char *arena = (unsigned char *)malloc((size_t)ZOO_ARENA_SIZE);
  if (d == NULL || arena == NULL) {
    free(d);
    free(arena);
    host->set_error(host->context, "zoo: create_device: out of host memory");
    return DPP_RESOURCE_EXHAUSTED;
  }
  d->magic = ZOO_MAGIC_DEVICE;
  d->ordinal = ordinal;
  d->platform = pd;
  atomic_flag_clear(&d->lock);
  d->arena = arena;
  snprintf(d->hardware_name, sizeof d->hardware_name, "zoo-%x", (unsigned)zoo_identity());
  zoo_fill_executor(&d->se);

  device->device_data = d;
  device->hardware_name = d->hardware_name;
  device->vendor = ZOO_VENDOR;
  device->pci_bus_id = NULL;
  device->total_memory = ZOO_ARENA_SIZE;
  device->numa_node = -1;
  device->compute_units = (uint32_t)zoo_identity();
#ifdef ZOO_SE_NULL
  device->se = NULL;
#else
  device->se = &d->se;
#endif
  snprintf(line, sizeof line, "created %s %d", pd->name, (int)ordinal);
  zoo_mark(pd->marker, line);
  return DPP_OK;
}

ZOO_MAYBE_UNUSED static void zoo_destroy_device(void *platform_data, dpp_device_t *device) {
  zoo_platform *pd = (zoo_platform *)platform_data;
  char line[ZOO_MSG_MAX];
  snprintf(line, sizeof line, "destroy_device %s %d", pd->name, device ? (int)device->ordinal : -1);
  zoo_mark(pd->marker, line);
  if (device == NULL) {
    return;
  }
  zoo_device *d = zoo_dev(device->device_data);
#if defined(ZOO_LOG_ERROR_AT_DESTROY)
  /* As a plugin that finds a leak of its own reports it: an error in the host's log. */
  pd->host->log(pd->host->context, DPP_LOG_ERROR, "zoo: a device resource leaked (on purpose)");
#endif
  if (d != NULL && d->kstates != NULL) {
    /* The host destroys every state before destroy_device (ABI 1.5): one left is its bug. */
    pd->host->log(pd->host->context, DPP_LOG_ERROR, "zoo: kernel states never destroyed at destroy_device");
  }
  if (d != NULL) {
    d->magic = 0;
    free(d->arena);
    free(d);
  }
  device->device_data = NULL;
  device->se = NULL;
}

static void zoo_destroy_platform(void *platform_data) {
  zoo_platform *pd = (zoo_platform *)platform_data;
  char line[ZOO_MSG_MAX];
  snprintf(line, sizeof line, "destroy_platform %s", pd->name);
  zoo_mark(pd->marker, line);
  free(pd);
}

static void zoo_fill_platform(dpp_platform_t *p, zoo_platform *pd) {
  memset(p, 0, sizeof *p);
  p->struct_size = ZOO_PLATFORM_STRUCT_SIZE;
  p->ext = NULL;
#if defined(ZOO_PLATFORM_NAME_UNTERMINATED)
  memset(zoo_unterminated_name, 'Z', sizeof zoo_unterminated_name);
#endif
  p->name = ZOO_PLATFORM_NAME;
  p->device_type = ZOO_DEVICE_TYPE;
  p->priority = ZOO_PRIORITY;
  p->flags = ZOO_FLAGS;
  p->vendor = ZOO_VENDOR;
  p->version = ZOO_VERSION;
  p->device_count = ZOO_DEVICE_COUNT;
  p->platform_data = pd;
#ifdef ZOO_CREATE_DEVICE_NULL
  p->create_device = NULL;
#else
  p->create_device = zoo_create_device;
#endif
#ifdef ZOO_DESTROY_DEVICE_NULL
  p->destroy_device = NULL;
#else
  p->destroy_device = zoo_destroy_device;
#endif
  p->destroy_platform = zoo_destroy_platform;
}

/* ------------------------------------------------------------------------------------------ */
/* Plugin */

/* Registers the zoo's platform with fresh platform data; on refusal the data is freed here
 * (the host only destroys what it accepted). */
ZOO_MAYBE_UNUSED static dpp_status_t zoo_register(const dpp_host_api_t *host, const char *marker) {
  zoo_platform *pd = (zoo_platform *)calloc(1, sizeof *pd);
  if (pd == NULL) {
    host->set_error(host->context, "zoo: init: out of host memory");
    return DPP_RESOURCE_EXHAUSTED;
  }
  pd->host = host;
  /* A bounded read: ZOO_PLATFORM_NAME_UNTERMINATED's name has no NUL. */
  snprintf(pd->name, sizeof pd->name, "%.*s", (int)sizeof pd->name - 1, ZOO_PLATFORM_NAME);
  snprintf(pd->marker, sizeof pd->marker, "%s", marker);
  dpp_platform_t p;
  zoo_fill_platform(&p, pd);
  dpp_status_t st = host->register_platform(host->context, &p);
  if (st != DPP_OK) {
    free(pd);
    return st;
  }
  char line[ZOO_MSG_MAX];
  snprintf(line, sizeof line, "registered %s", pd->name);
  zoo_mark(marker, line);
  return DPP_OK;
}

#if (defined(ZOO_KERNEL_ZEROS) + defined(ZOO_KERNEL_COPY) + defined(ZOO_KERNEL_FAIL) + defined(ZOO_KERNEL_TEMP) + \
     defined(ZOO_KERNEL_REDUCE_SUM) + defined(ZOO_KERNEL_ADD_TRUNC) + defined(ZOO_KERNEL_TRIPLE)) > 1
#error "ZOO_KERNEL_ZEROS, _COPY, _FAIL, _TEMP, _REDUCE_SUM, _ADD_TRUNC and _TRIPLE are kernels for one registration: define one"
#endif

#if defined(ZOO_KERNEL_TRIPLE)
/* f32 output 0 = 3 * input 0, whatever the op's attributes say: with ZOO_OP_BODY
 * "y = Mul(x, @k)" and ZOO_OP_ATTRS "k: float = 3.0", right at the default only. */
static dpp_status_t zoo_kernel_triple(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_inputs != 1 || cx->num_outputs != 1 ||
      cx->inputs[0].byte_size != cx->outputs[0].byte_size) {
    return DPP_INVALID_ARGUMENT;
  }
  if (cx->outputs[0].byte_size == 0) {
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(src, d, cx->inputs[0].data, cx->inputs[0].byte_size, "kernel input");
  ZOO_RANGE_OR_FAIL(dst, d, cx->outputs[0].data, cx->outputs[0].byte_size, "kernel output");
  for (uint64_t i = 0; i < cx->outputs[0].byte_size / sizeof(float); i++) {
    float v;
    memcpy(&v, src + i * sizeof v, sizeof v);
    v *= 3.0f;
    memcpy(dst + i * sizeof v, &v, sizeof v);
  }
  return DPP_OK;
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_triple
#endif

#if defined(ZOO_KERNEL_ADD_TRUNC)
/* An f16 (or f32) Add of two tensors of one shape (others declined) that is right on whole
 * numbers but truncates every sum to the dtype instead of rounding it to nearest: the bug
 * devplug check's signed fractions find. Finite values only (what the check's samples hold). */
static float zoo_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = (float)man / 1024.0f / 16384.0f; /* subnormal: man * 2^-24 */
  } else {
    uint32_t bits = ((exp + 112) << 23) | (man << 13);
    memcpy(&mag, &bits, sizeof mag);
  }
  uint32_t out;
  memcpy(&out, &mag, sizeof out);
  out |= sign;
  memcpy(&mag, &out, sizeof mag);
  return mag;
}
static uint16_t zoo_f32_to_f16_truncating(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
#if defined(ZOO_ADD_TIES_AWAY)
  /* Half a unit of f16's last place added to the magnitude, then truncated: to nearest, but
   * halfway cases away from zero instead of to even. */
  x += 0x1000u;
#endif
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  const int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) {
    return sign; /* tiny: flushed (not in the check's samples) */
  }
  return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)((x >> 13) & 0x3ff));
}
static dpp_status_t zoo_kernel_f16_add_trunc(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_inputs != 2 || cx->num_outputs != 1) {
    return DPP_INVALID_ARGUMENT;
  }
  const dpp_tensor_t *a = &cx->inputs[0], *b = &cx->inputs[1], *o = &cx->outputs[0];
  int same = a->rank == b->rank;
  for (int32_t i = 0; same && i < a->rank; i++) same = a->shape[i] == b->shape[i];
  if (!same) {
    return zoo_fail(d, DPP_UNIMPLEMENTED, "zoo: Add: tensors of one shape only");
  }
  if (o->byte_size == 0) {
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(pa, d, a->data, a->byte_size, "kernel input");
  ZOO_RANGE_OR_FAIL(pb, d, b->data, b->byte_size, "kernel input");
  ZOO_RANGE_OR_FAIL(po, d, o->data, o->byte_size, "kernel output");
  if (o->dtype == DPP_DTYPE_F32) {
    /* The exact sum (in double), truncated to float: toward zero, one ulp off half the time. */
    for (uint64_t i = 0; i < o->byte_size / 4; i++) {
      float x, y;
      memcpy(&x, pa + 4 * i, 4);
      memcpy(&y, pb + 4 * i, 4);
      const double exact = (double)x + (double)y;
      float z = (float)exact;
      if ((z < 0 ? -(double)z : (double)z) > (exact < 0 ? -exact : exact)) {
        uint32_t bits; /* rounded away from zero: one ulp back toward it */
        memcpy(&bits, &z, 4);
        bits -= 1;
        memcpy(&z, &bits, 4);
      }
      memcpy(po + 4 * i, &z, 4);
    }
    return DPP_OK;
  }
  for (uint64_t i = 0; i < o->byte_size / 2; i++) {
    uint16_t x, y, z;
    memcpy(&x, pa + 2 * i, 2);
    memcpy(&y, pb + 2 * i, 2);
    z = zoo_f32_to_f16_truncating(zoo_f16_to_f32(x) + zoo_f16_to_f32(y));
    memcpy(po + 2 * i, &z, 2);
  }
  return DPP_OK;
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_f16_add_trunc
#endif
#if defined(ZOO_KERNEL_ZEROS)
/* A kernel with wrong results: every output is set to zero bytes. */
ZOO_MAYBE_UNUSED static dpp_status_t zoo_kernel_zeros(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < cx->num_outputs; i++) {
    ZOO_RANGE_OR_FAIL(p, d, cx->outputs[i].data, cx->outputs[i].byte_size, "kernel output");
    memset(p, 0, (size_t)cx->outputs[i].byte_size);
  }
  return DPP_OK;
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_zeros
#endif

#if defined(ZOO_KERNEL_REDUCE_SUM)
#ifndef ZOO_REDUCE_SUM_BUG
#define ZOO_REDUCE_SUM_BUG 0
#endif
#ifndef ZOO_REDUCE_SUM_MAX_OUT /* more output elements: declined (DPP_UNIMPLEMENTED) */
#define ZOO_REDUCE_SUM_MAX_OUT 1024
#endif
#if ZOO_REDUCE_SUM_MAX_OUT > 1024
#error "ZOO_REDUCE_SUM_MAX_OUT is at most 1024 (the kernel's sums array)"
#endif
#define ZOO_MAX_RANK 8
/* ReduceSum of f32 (register it with ZOO_KERNEL_OP="ReduceSum"): y = the sum of x over `axes`
 * (none: every axis), `keep_dims` or not. With ZOO_REDUCE_SUM_BUG=1 it writes 42 for an input
 * of no elements, with 2 it writes -1 for a rank-0 input: right on every other shape. */
static dpp_status_t zoo_kernel_reduce_sum(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_inputs != 1 || cx->num_outputs != 1) {
    return DPP_INVALID_ARGUMENT;
  }
  const dpp_host_api_t *host = d->platform->host;
  const dpp_tensor_t *x = &cx->inputs[0], *y = &cx->outputs[0];
  if (x->dtype != DPP_DTYPE_F32 || y->dtype != DPP_DTYPE_F32 || x->rank > ZOO_MAX_RANK) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: ReduceSum: f32 of rank at most %d only", (int)ZOO_MAX_RANK);
  }
  const int64_t *axes = NULL;
  size_t naxes = 0;
  int32_t keep = 0;
  if (host->attr_ints(cx->attrs, "axes", &axes, &naxes) != DPP_OK ||
      host->attr_bool(cx->attrs, "keep_dims", &keep) != DPP_OK) {
    return zoo_fail(d, DPP_INTERNAL, "zoo: ReduceSum: cannot read its attributes");
  }
  const int32_t r = x->rank;
  int reduced[ZOO_MAX_RANK] = {0};
  for (int32_t i = 0; i < r; i++) {
    reduced[i] = naxes == 0;
  }
  for (size_t i = 0; i < naxes; i++) {
    const int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r) {
      return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: ReduceSum: axis %lld out of range", (long long)axes[i]);
    }
    reduced[a] = 1;
  }
  /* The output's strides over the input's axes (0 on a reduced one). */
  int64_t ystride[ZOO_MAX_RANK];
  uint64_t nx = 1, ny = 1;
  for (int32_t i = r - 1; i >= 0; i--) {
    ystride[i] = reduced[i] ? 0 : (int64_t)ny;
    ny *= reduced[i] ? 1 : (uint64_t)x->shape[i];
    nx *= (uint64_t)x->shape[i];
  }
  if (y->byte_size != ny * sizeof(float)) {
    return zoo_fail(d, DPP_INVALID_ARGUMENT, "zoo: ReduceSum: %llu output bytes, expected %llu",
                    (unsigned long long)y->byte_size, (unsigned long long)(ny * sizeof(float)));
  }
  if (ny > ZOO_REDUCE_SUM_MAX_OUT) {
    return zoo_fail(d, DPP_UNIMPLEMENTED, "zoo: ReduceSum: more than %d output elements",
                    (int)ZOO_REDUCE_SUM_MAX_OUT);
  }
  if (ny == 0) {
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(py, d, y->data, y->byte_size, "kernel output");
  float *out = (float *)(void *)py;
  if (nx == 0) {
    for (uint64_t k = 0; k < ny; k++) {
      out[k] = ZOO_REDUCE_SUM_BUG == 1 ? 42.0f : 0.0f;
    }
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(px, d, x->data, x->byte_size, "kernel input");
  double sums[1024] = {0};
  int64_t idx[ZOO_MAX_RANK] = {0};
  int64_t oy = 0;
  for (uint64_t k = 0; k < nx; k++) {
    float v;
    memcpy(&v, px + k * sizeof v, sizeof v);
    sums[oy] += v;
    for (int32_t i = r - 1; i >= 0; i--) { /* the next input index, odometer-wise */
      idx[i]++;
      oy += ystride[i];
      if (idx[i] < x->shape[i]) {
        break;
      }
      oy -= ystride[i] * idx[i];
      idx[i] = 0;
    }
  }
  for (uint64_t k = 0; k < ny; k++) {
    out[k] = (float)sums[k];
  }
  if (r == 0 && ZOO_REDUCE_SUM_BUG == 2) {
    out[0] = -1.0f;
  }
  return DPP_OK;
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_reduce_sum
#endif

#if defined(ZOO_KERNEL_COPY) || defined(ZOO_KERNEL_COPY_ABOVE)
#ifndef ZOO_COPY_OVERRUN
#define ZOO_COPY_OVERRUN 0
#endif
/* A right kernel for an op that keeps its input's bytes (Reshape): output 0 is input 0 (but
 * for ZOO_COPY_OVERRUN and ZOO_COPY_CLOBBERS_INPUT). */
static dpp_status_t zoo_kernel_copy(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_inputs != 1 || cx->num_outputs != 1 ||
      cx->inputs[0].byte_size != cx->outputs[0].byte_size) {
    return DPP_INVALID_ARGUMENT;
  }
  ZOO_RANGE_OR_FAIL(src, d, cx->inputs[0].data, cx->inputs[0].byte_size, "kernel input");
  ZOO_RANGE_OR_FAIL(dst, d, cx->outputs[0].data, cx->outputs[0].byte_size + ZOO_COPY_OVERRUN,
                    "kernel output");
  memcpy(dst, src, (size_t)cx->outputs[0].byte_size);
#if ZOO_COPY_OVERRUN > 0
  memset(dst + cx->outputs[0].byte_size, 0x5A, ZOO_COPY_OVERRUN); /* past the output: a bug */
#endif
#if defined(ZOO_COPY_CLOBBERS_INPUT)
  memset(src, 0, (size_t)cx->inputs[0].byte_size); /* its input overwritten: a bug */
#endif
  return DPP_OK;
}
#endif
#if defined(ZOO_KERNEL_COPY)
#define ZOO_KERNEL_COMPUTE zoo_kernel_copy
#endif

#if defined(ZOO_KERNEL_TEMP)
#ifndef ZOO_KERNEL_TEMP_BYTES
#define ZOO_KERNEL_TEMP_BYTES 0 /* 0: the input's size */
#endif
/* A right kernel for Reshape that copies through temporary memory (ABI 1.4 allocate_temp):
 * input 0 -> a temporary of ZOO_KERNEL_TEMP_BYTES (or the input's size) -> output 0. It asks
 * through a copy of its context (the host must accept one), and checks first that a size of 0
 * and a NULL out-pointer are refused without writing anything. A refusal of the real request is
 * returned as is: the host has said why. */
static dpp_status_t zoo_kernel_temp(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_inputs != 1 || cx->num_outputs != 1 ||
      cx->inputs[0].byte_size != cx->outputs[0].byte_size) {
    return DPP_INVALID_ARGUMENT;
  }
  const dpp_host_api_t *host = d->platform->host;
  if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_4 || host->allocate_temp == NULL) {
    return zoo_fail(d, DPP_UNIMPLEMENTED, "zoo: the host has no allocate_temp (ABI 1.4)");
  }
  uint64_t n = cx->inputs[0].byte_size;
  dpp_addr_t untouched = 7;
  if (host->allocate_temp(cx, 0, &untouched) != DPP_INVALID_ARGUMENT || untouched != 7 ||
      host->allocate_temp(cx, 8, NULL) != DPP_INVALID_ARGUMENT) {
    return zoo_fail(d, DPP_INTERNAL, "zoo: allocate_temp took a size of 0 or a NULL out-pointer");
  }
  dpp_kernel_context_t copy = *cx;
  uint64_t bytes = ZOO_KERNEL_TEMP_BYTES ? (uint64_t)ZOO_KERNEL_TEMP_BYTES : n;
  dpp_addr_t tmp = 0;
  dpp_status_t st = host->allocate_temp(&copy, bytes ? bytes : 1, &tmp);
  if (st != DPP_OK) {
#if defined(ZOO_KERNEL_TEMP_OWN_MESSAGE)
    return zoo_fail(d, st, "zoo: no temporary memory for the copy"); /* replaces the host's */
#else
    return st;
#endif
  }
  if (tmp % 256 != 0) {
    return zoo_fail(d, DPP_INTERNAL, "zoo: allocate_temp gave an address that is not 256-byte aligned");
  }
  if (n == 0) {
    return DPP_OK;
  }
  ZOO_RANGE_OR_FAIL(src, d, cx->inputs[0].data, n, "kernel input");
  ZOO_RANGE_OR_FAIL(t, d, tmp, n, "temporary memory");
  ZOO_RANGE_OR_FAIL(dst, d, cx->outputs[0].data, n, "kernel output");
  memcpy(t, src, (size_t)n);
  memcpy(dst, t, (size_t)n);
  return DPP_OK;
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_temp
#endif

#if defined(ZOO_KERNEL_FAIL)
#ifndef ZOO_KERNEL_FAIL_STATUS
#define ZOO_KERNEL_FAIL_STATUS DPP_FAILED_PRECONDITION
#endif
/* A kernel that fails every launch, with its own status and message. */
static dpp_status_t zoo_kernel_fail(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  return zoo_fail(d, ZOO_KERNEL_FAIL_STATUS, "zoo: the kernel fails on purpose");
}
#define ZOO_KERNEL_COMPUTE zoo_kernel_fail
#endif

#if defined(ZOO_KERNEL_CREATE_FAILS) || defined(ZOO_KERNEL_DESTROY_ONLY)
/* ABI 1.5: a destroy that is never called (there is no state to free): calling it is a host bug. */
static void zoo_kernel_destroy(void *kernel_data, void *state) {
  (void)kernel_data;
  (void)state;
  fprintf(stderr, "zoo: kernel destroy called for a state that was never made\n");
  abort();
}
#endif
#if defined(ZOO_KERNEL_CREATE_ONLY)
/* ABI 1.5: a create that succeeds without storing a state (the host's NULL stays), and no
 * destroy: the host warns at load; compute gets a NULL state. */
static dpp_status_t zoo_kernel_create_null(const dpp_kernel_create_context_t *cx, void **out_state) {
  return cx != NULL && out_state != NULL && *out_state == NULL ? DPP_OK : DPP_INVALID_ARGUMENT;
}
#endif
#if defined(ZOO_KERNEL_CREATE_FAILS)
/* ABI 1.5: a create that refuses every attribute set, with its own status and message. */
static dpp_status_t zoo_kernel_create_fails(const dpp_kernel_create_context_t *cx, void **out_state) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || out_state == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  return zoo_fail(d, DPP_UNIMPLEMENTED, "zoo: no state for %s with %zu input(s) on purpose", cx->op,
                  cx->num_inputs);
}
#endif

#if defined(ZOO_KERNEL_STATE)
#if !defined(ZOO_KERNEL_COMPUTE)
#error "ZOO_KERNEL_STATE wraps a kernel: define ZOO_KERNEL_COPY (or another kernel) too"
#endif
/* ABI 1.5 kernel state: what create made, recorded by its device until destroy frees it. */
typedef struct zoo_kstate {
  zoo_device *device;
  struct zoo_kstate *next;
} zoo_kstate;

static dpp_status_t zoo_kernel_state_create(const dpp_kernel_create_context_t *cx, void **out_state) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || out_state == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  zoo_kstate *st = (zoo_kstate *)calloc(1, sizeof *st);
  if (st == NULL) {
    return zoo_fail(d, DPP_RESOURCE_EXHAUSTED, "zoo: create: out of host memory");
  }
  st->device = d;
  zoo_lock(d);
  st->next = (zoo_kstate *)d->kstates;
  d->kstates = st;
  zoo_unlock(d);
  zoo_mark(d->platform->marker, "create");
  *out_state = st;
  return DPP_OK;
}

static void zoo_kernel_state_destroy(void *kernel_data, void *state) {
  (void)kernel_data;
  zoo_kstate *st = (zoo_kstate *)state;
  if (st == NULL) {
    return;
  }
  zoo_device *d = st->device;
  zoo_lock(d);
  for (zoo_kstate **p = (zoo_kstate **)&d->kstates; *p != NULL; p = &(*p)->next) {
    if (*p == st) {
      *p = st->next;
      break;
    }
  }
  zoo_unlock(d);
  free(st);
}

/* True when `state` is one of the states create made for `d` that destroy has not freed;
 * compared by address only, never read (it may be anything). */
static bool zoo_kernel_state_known(zoo_device *d, const void *state) {
  bool known = false;
  zoo_lock(d);
  for (const zoo_kstate *k = (const zoo_kstate *)d->kstates; k != NULL && !known; k = k->next) {
    known = (const void *)k == state;
  }
  zoo_unlock(d);
  return known;
}

/* The kernel, run only when the state it gets is one its create made: from a host of ABI 1.5
 * every launch has one (create runs first); from an older host, whose 80-byte context ends
 * before `state`, there is none, and the kernel works without (unless it reads past the end:
 * ZOO_KERNEL_STATE_UNCHECKED). */
static dpp_status_t zoo_kernel_stateful(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
#if defined(ZOO_KERNEL_STATE_UNCHECKED)
  const bool has_state = true; /* the fault: struct_size not checked */
#else
  const bool has_state = cx->struct_size >= DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5;
#endif
  const void *state = has_state ? cx->state : NULL;
  const bool known = has_state && zoo_kernel_state_known(d, state);
#if defined(ZOO_MARK_HOST)
  char line[ZOO_MSG_MAX];
  snprintf(line, sizeof line, "compute: dpp_kernel_context_t.struct_size %zu, state %s", cx->struct_size,
           !has_state ? "not read" : known ? "from create" : "unknown");
  zoo_mark(d->platform->marker, line);
#endif
  if (has_state && !known) {
    return zoo_fail(d, DPP_INTERNAL,
                    "zoo: compute got state %p, which no create of this plugin made (the context's "
                    "struct_size is %zu)",
                    state, cx->struct_size);
  }
  return ZOO_KERNEL_COMPUTE(cx);
}
#endif

#if defined(ZOO_KERNEL_COMPUTE)
#ifndef ZOO_KERNEL_STRUCT_SIZE
#define ZOO_KERNEL_STRUCT_SIZE DPP_KERNEL_STRUCT_SIZE
#endif
#ifndef ZOO_KERNEL_OP
#define ZOO_KERNEL_OP "Add"
#endif
#ifndef ZOO_KERNEL_DTYPE
#define ZOO_KERNEL_DTYPE DPP_DTYPE_F32
#endif
static dpp_status_t zoo_register_kernel(const dpp_host_api_t *host) {
  static const int32_t f32[1] = {ZOO_KERNEL_DTYPE};
  dpp_kernel_t k;
  memset(&k, 0, sizeof k);
  k.struct_size = ZOO_KERNEL_STRUCT_SIZE;
  k.op = ZOO_KERNEL_OP;
#ifdef ZOO_KERNEL_DEVICE_TYPE
  k.device_type = ZOO_KERNEL_DEVICE_TYPE;
#else
  k.device_type = ZOO_DEVICE_TYPE;
#endif
#ifdef ZOO_KERNEL_PLATFORM_NULL
  k.platform = NULL;
#else
  k.platform = ZOO_PLATFORM_NAME;
#endif
#if defined(ZOO_KERNEL_ALL_DTYPES)
  (void)f32;
  k.dtypes = NULL; /* every dtype: for a plugin of ABI 1.2 or older, every dtype it knew of */
  k.num_dtypes = 0;
#elif defined(ZOO_KERNEL_DTYPES_NULL)
  (void)f32;
  k.dtypes = NULL;
  k.num_dtypes = 3;
#else
  k.dtypes = f32;
  k.num_dtypes = 1;
#endif
#if defined(ZOO_KERNEL_COMPUTE_NULL)
  k.compute = NULL;
#elif defined(ZOO_KERNEL_STATE)
  k.compute = zoo_kernel_stateful;
#else
  k.compute = ZOO_KERNEL_COMPUTE;
#endif
#if defined(ZOO_KERNEL_STATE)
  k.create = zoo_kernel_state_create;
  k.destroy = zoo_kernel_state_destroy;
#elif defined(ZOO_KERNEL_CREATE_FAILS)
  k.create = zoo_kernel_create_fails;
  k.destroy = zoo_kernel_destroy;
#elif defined(ZOO_KERNEL_DESTROY_ONLY)
  k.destroy = zoo_kernel_destroy;
#elif defined(ZOO_KERNEL_CREATE_ONLY)
  k.create = zoo_kernel_create_null;
#endif
#if defined(ZOO_KERNEL_COPY_ABOVE)
  dpp_kernel_t above = k;
  above.compute = zoo_kernel_copy;
  above.create = NULL;
  above.destroy = NULL;
  above.priority = 10;
  dpp_status_t st = host->register_kernel(host->context, &above);
  if (st != DPP_OK) {
    return st;
  }
#endif
  return host->register_kernel(host->context, &k);
}
#endif

/* A body of two statements, for ZOO_OP_BODY=ZOO_BODY_MUL_NEG (CMake splits lists at ';'). */
#define ZOO_BODY_MUL_NEG "t = Mul(x, 3); y = Neg(t)"

#if defined(ZOO_OP_BODY)
#ifndef ZOO_OP_NAME
#define ZOO_OP_NAME "zoo.Op"
#endif
#if defined(ZOO_KERNEL_LABEL)
/* Writes the bytes of string attribute `label` into output 0 (f32), then zeros. */
static dpp_status_t zoo_kernel_label(const dpp_kernel_context_t *cx) {
  zoo_device *d = cx ? zoo_dev(cx->device) : NULL;
  if (d == NULL || cx->num_outputs != 1 || cx->outputs[0].dtype != DPP_DTYPE_F32) {
    return DPP_INVALID_ARGUMENT;
  }
  const dpp_host_api_t *host = d->platform->host;
  if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_2 || host->attr_string == NULL) {
    return zoo_fail(d, DPP_UNIMPLEMENTED, "zoo: the host has no attr_string");
  }
  const char *label = NULL;
  size_t len = 0;
  dpp_status_t st = host->attr_string(cx->attrs, "label", &label, &len);
  if (st != DPP_OK) {
    return zoo_fail(d, st, "zoo: attr_string(label) failed with status %d", (int)st);
  }
  ZOO_RANGE_OR_FAIL(p, d, cx->outputs[0].data, cx->outputs[0].byte_size, "kernel output");
  const size_t n = (size_t)cx->outputs[0].byte_size / sizeof(float);
  for (size_t i = 0; i < n; i++) {
    const float v = i < len ? (float)(unsigned char)label[i] : 0.0f;
    memcpy(p + i * sizeof v, &v, sizeof v);
  }
  return DPP_OK;
}

static dpp_status_t zoo_register_label_kernel(const dpp_host_api_t *host) {
  static const int32_t f32[1] = {DPP_DTYPE_F32};
  dpp_kernel_t k;
  memset(&k, 0, sizeof k);
  k.struct_size = DPP_KERNEL_STRUCT_SIZE;
  k.op = ZOO_OP_NAME;
  k.device_type = ZOO_DEVICE_TYPE;
  k.platform = ZOO_PLATFORM_NAME;
  k.dtypes = f32;
  k.num_dtypes = 1;
  k.compute = zoo_kernel_label;
  return host->register_kernel(host->context, &k);
}
#endif
/* An op of the plugin's own: the host parses the text when it commits the load. */
static dpp_status_t zoo_register_op(const dpp_host_api_t *host) {
  dpp_op_def_t op;
  memset(&op, 0, sizeof op);
#ifdef ZOO_OP_DEF_STRUCT_SIZE
  op.struct_size = ZOO_OP_DEF_STRUCT_SIZE;
#else
  op.struct_size = DPP_OP_DEF_STRUCT_SIZE;
#endif
  op.name = ZOO_OP_NAME;
  op.inputs = "x: T";
  op.outputs = "y: T";
  op.type_vars = "T: {f32, f64}";
  op.body = ZOO_OP_BODY;
#if defined(ZOO_OP_ATTRS)
  op.attrs = ZOO_OP_ATTRS;
#endif
#if defined(ZOO_KERNEL_LABEL)
  op.attrs = "label: string = \"zoo\"";
  dpp_status_t st = host->register_op(host->context, &op);
  return st != DPP_OK ? st : zoo_register_label_kernel(host);
#else
  return host->register_op(host->context, &op);
#endif
}
#endif

ZOO_MAYBE_UNUSED static dpp_status_t zoo_init(const dpp_host_api_t *host, void **out_plugin_data) {
  if (host == NULL || host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_0 || out_plugin_data == NULL) {
    return DPP_INVALID_ARGUMENT;
  }
  const char *marker = host->get_option(host->context, "marker");
  if (marker == NULL) {
    marker = "";
  }
  if (strlen(marker) >= ZOO_MARKER_MAX) {
    host->set_error(host->context, "zoo: init: the marker path is too long");
    return DPP_INVALID_ARGUMENT;
  }
  zoo_mark(marker, "init " ZOO_PLUGIN_NAME);
#if defined(ZOO_MARK_HOST)
  {
    char line[ZOO_MSG_MAX];
    snprintf(line, sizeof line, "host ABI %u.%u, dpp_host_api_t.struct_size %zu", (unsigned)host->abi_major,
             (unsigned)host->abi_minor, host->struct_size);
    zoo_mark(marker, line);
  }
#endif
#if defined(ZOO_KERNEL_COMPUTE) || defined(ZOO_OP_BODY)
  /* Kernels and ops of its own: register_kernel (1.1), register_op and attr_string (1.2). */
  if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_2) {
    char why[ZOO_MSG_MAX];
    snprintf(why, sizeof why, "zoo: init: the host's table (ABI %u.%u, %zu bytes) ends before ABI 1.2's",
             (unsigned)host->abi_major, (unsigned)host->abi_minor, host->struct_size);
    host->set_error(host->context, why);
    return DPP_ABI_MISMATCH;
  }
#endif

#if defined(ZOO_INIT_FAIL_STATUS) && !defined(ZOO_INIT_FAIL_AFTER_REGISTER)
#ifdef ZOO_INIT_FAIL_MESSAGE
  host->set_error(host->context, ZOO_INIT_FAIL_MESSAGE);
#endif
  return ZOO_INIT_FAIL_STATUS;
#endif

#if defined(ZOO_KERNEL_COMPUTE) && defined(ZOO_KERNEL_FIRST)
  dpp_status_t st = zoo_register_kernel(host);
  if (st != DPP_OK) {
    return st;
  }
  st = zoo_register(host, marker);
  if (st != DPP_OK) {
    return st;
  }
#else
  dpp_status_t st = zoo_register(host, marker);
  if (st != DPP_OK) {
    return st; /* the host's own refusal says why */
  }
#if defined(ZOO_KERNEL_COMPUTE)
  st = zoo_register_kernel(host);
  if (st != DPP_OK) {
    return st;
  }
#endif
#endif
#if defined(ZOO_OP_BODY)
  st = zoo_register_op(host);
  if (st != DPP_OK) {
    return st;
  }
#endif
#ifdef ZOO_REGISTER_TWICE
  st = zoo_register(host, marker);
#ifdef ZOO_IGNORE_REFUSAL
  if (st != DPP_OK) {
    zoo_mark(marker, "went on without the refused registration");
    st = DPP_OK;
  }
#endif
  if (st != DPP_OK) {
    return st;
  }
#endif
#if defined(ZOO_INIT_FAIL_STATUS) && defined(ZOO_INIT_FAIL_AFTER_REGISTER)
#ifdef ZOO_INIT_FAIL_MESSAGE
  host->set_error(host->context, ZOO_INIT_FAIL_MESSAGE);
#endif
  return ZOO_INIT_FAIL_STATUS;
#endif

  zoo_plugin *plugin = (zoo_plugin *)calloc(1, sizeof *plugin);
  if (plugin == NULL) {
    host->set_error(host->context, "zoo: init: out of host memory");
    return DPP_RESOURCE_EXHAUSTED;
  }
  snprintf(plugin->marker, sizeof plugin->marker, "%s", marker);
  *out_plugin_data = plugin;
  zoo_mark(marker, "init ok " ZOO_PLUGIN_NAME);
  return DPP_OK;
}

static void zoo_shutdown(void *plugin_data) {
  zoo_plugin *plugin = (zoo_plugin *)plugin_data;
  if (plugin != NULL) {
    zoo_mark(plugin->marker, "shutdown " ZOO_PLUGIN_NAME);
    free(plugin);
  }
}

static const dpp_plugin_api_t zoo_api = {
    .struct_size = ZOO_API_STRUCT_SIZE,
    .ext = NULL,
    .abi_major = ZOO_ABI_MAJOR,
    .abi_minor = ZOO_ABI_MINOR,
    .name = ZOO_API_NAME,
    .version = ZOO_VERSION,
#ifdef ZOO_INIT_NULL
    .init = NULL,
#else
    .init = zoo_init,
#endif
    .shutdown = zoo_shutdown,
};

#if defined(ZOO_ENTRY_DATA)
/* Exports the entry's name as data (a pointer to the table), not as a function: what a Rust
 * `#[no_mangle] static` gives. Called, it would execute the pointer's bytes. (The header
 * declares the name as a function, so the variable gets it through an asm label: GCC, Clang.) */
DPP_EXPORT extern const dpp_plugin_api_t *const zoo_entry_data __asm__("devplug_plugin_entry");
DPP_EXPORT const dpp_plugin_api_t *const zoo_entry_data = &zoo_api;
#elif defined(ZOO_NO_ENTRY)
/* Exports something, but not the devplug entry point. */
DPP_EXPORT const dpp_plugin_api_t *devplug_plugin_entry_v0(void);
DPP_EXPORT const dpp_plugin_api_t *devplug_plugin_entry_v0(void) { return &zoo_api; }
#else
DPP_EXPORT const dpp_plugin_api_t *devplug_plugin_entry(void) {
#ifdef ZOO_ENTRY_NULL
  (void)zoo_api;
  return NULL;
#else
  return &zoo_api;
#endif
}
#endif
