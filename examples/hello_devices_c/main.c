/* hello_devices (C99): lists devplug's devices and round-trips 1 MiB through device memory
 * on two streams ordered by an event.
 *
 * Build: as a CMake project with find_package(DevPlug) (see CMakeLists.txt), linked against
 * either DevPlug::devplug (shared) or DevPlug::devplug_static; the code is the same. */
#include <devplug/devplug.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAYLOAD_SIZE ((size_t)1 << 20)

/* Prints the failed call with the status name and the thread's last error message. */
static void report(const char *call, dp_status_t status) {
  /* The message is valid until the next failing devplug call on this thread: copy it. */
  const char *message = dp_last_error_message();
  char copy[512];
  snprintf(copy, sizeof copy, "%s", message != NULL ? message : "");
  fprintf(stderr, "hello_devices: %s failed: %s: %s\n", call, dp_status_str(status), copy);
}

/* Runs a devplug call; on failure reports it and jumps to the cleanup label. */
#define TRY(call)                  \
  do {                             \
    dp_status_t status_ = (call);  \
    if (status_ != DP_OK) {        \
      report(#call, status_);      \
      goto cleanup;                \
    }                              \
  } while (0)

static const char *or_empty(const char *s) { return s != NULL ? s : ""; }

static int print_memory_stats(const dp_device_t *device) {
  dp_memory_stats_t stats;
  dp_status_t status;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  status = dp_device_memory_stats(device, &stats);
  if (status != DP_OK) {
    report("dp_device_memory_stats", status);
    return 0;
  }
  printf("memory stats of %s: in use %" PRIu64 " B, peak %" PRIu64 " B, allocations %" PRIu64
         " (active %" PRIu64 "), largest %" PRIu64 " B, limit %" PRIu64 " B, reserved %" PRIu64
         " B, largest free block %" PRIu64 " B\n",
         or_empty(dp_device_name(device)), stats.bytes_in_use, stats.peak_bytes_in_use,
         stats.num_allocs, stats.active_allocs, stats.largest_alloc_size, stats.bytes_limit,
         stats.bytes_reserved, stats.largest_free_block);
  return 1;
}

int main(void) {
  int ok = 0;
  dp_runtime_t *runtime = NULL;
  dp_device_t *device = NULL;
  dp_buffer_t *buffer = NULL;
  dp_stream_t *producer = NULL;
  dp_stream_t *consumer = NULL;
  dp_event_t *written = NULL;
  unsigned char *source = NULL;
  unsigned char *result = NULL;
  size_t count = 0;
  size_t i;
  uint32_t v = dp_version();
  dp_runtime_options_t options;

  /* ---- versions: the header we compiled against and the library we run with ---- */
  printf("devplug %s (library %u.%u.%u, header %d.%d.%d, plugin ABI %u.%u)\n",
         or_empty(dp_version_string()), (unsigned)(v >> 16), (unsigned)((v >> 8) & 0xff),
         (unsigned)(v & 0xff), DP_VERSION_MAJOR, DP_VERSION_MINOR, DP_VERSION_PATCH,
         (unsigned)(dp_abi_version() >> 16), (unsigned)(dp_abi_version() & 0xffff));
  if ((v >> 16) != DP_VERSION_MAJOR || ((v >> 8) & 0xff) < DP_VERSION_MINOR) {
    fprintf(stderr, "hello_devices: library version is older than the header\n");
    return 1;
  }

  /* ---- a runtime with the default options ---- */
  dp_runtime_options_init(&options, sizeof options);
  TRY(dp_runtime_create(&options, &runtime));

  /* ---- every device and its properties ---- */
  TRY(dp_runtime_device_count(runtime, &count));
  printf("%zu device(s):\n", count);
  for (i = 0; i < count; ++i) {
    dp_device_t *d = NULL;
    dp_device_properties_t p;
    TRY(dp_runtime_device(runtime, i, &d));
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p; /* the runtime fills the fields that fit */
    TRY(dp_device_get_properties(d, &p));
    printf("  %-8s type %s, platform %s (priority %" PRId32 "%s), vendor \"%s\", hardware \"%s\", "
           "memory %" PRIu64 " B%s\n",
           or_empty(p.name), or_empty(p.device_type), or_empty(p.platform), p.priority,
           p.is_active_platform ? ", active" : "", or_empty(p.vendor), or_empty(p.hardware_name),
           p.total_memory, p.host_visible ? ", host-visible" : "");
  }
  if (count == 0) {
    fprintf(stderr, "hello_devices: no devices\n");
    goto cleanup;
  }
  TRY(dp_runtime_device(runtime, 0, &device));

  /* ---- 1 MiB of patterned bytes through device memory ---- */
  source = (unsigned char *)malloc(PAYLOAD_SIZE);
  result = (unsigned char *)malloc(PAYLOAD_SIZE);
  if (source == NULL || result == NULL) {
    fprintf(stderr, "hello_devices: out of host memory\n");
    goto cleanup;
  }
  for (i = 0; i < PAYLOAD_SIZE; ++i) source[i] = (unsigned char)((i * 131u + (i >> 12)) & 0xff);
  memset(result, 0, PAYLOAD_SIZE);

  TRY(dp_buffer_allocate(device, PAYLOAD_SIZE, &buffer));
  TRY(dp_stream_create(device, &producer));
  TRY(dp_stream_create(device, &consumer));
  TRY(dp_event_create(device, &written));

  /* producer: host -> device, then mark the point where the data is in place */
  TRY(dp_stream_write(producer, buffer, 0, source, PAYLOAD_SIZE));
  TRY(dp_event_record(written, producer));
  /* consumer: wait for that point, then device -> host */
  TRY(dp_stream_wait_event(consumer, written));
  TRY(dp_stream_read(consumer, buffer, 0, result, PAYLOAD_SIZE));
  TRY(dp_stream_synchronize(consumer));

  for (i = 0; i < PAYLOAD_SIZE; ++i) {
    if (result[i] != source[i]) {
      fprintf(stderr, "hello_devices: byte %zu is 0x%02x, expected 0x%02x\n", i, result[i],
              source[i]);
      goto cleanup;
    }
  }
  printf("round trip of %zu bytes through %s: verified\n", (size_t)PAYLOAD_SIZE,
         or_empty(dp_device_name(device)));
  if (!print_memory_stats(device)) goto cleanup;
  ok = 1;

cleanup:
  /* destroy/release accept NULL; the runtime goes last */
  dp_event_destroy(written);
  dp_stream_destroy(consumer);
  dp_stream_destroy(producer);
  dp_buffer_release(buffer);
  dp_runtime_destroy(runtime);
  free(result);
  free(source);
  if (!ok) return 1;
  printf("hello_devices: OK\n");
  return 0;
}
