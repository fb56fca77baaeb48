/*
 * SIM: devplug's reference simulated accelerator (a device plugin written against
 * devplug/plugin.h only). See README.md in this folder for its load options.
 *
 * What it simulates, on purpose:
 *   - Device memory is not host memory. Each device owns a private arena (malloc'd) with its
 *     own first-fit allocator, and hands out addresses in a fake address space
 *     (SIM_ADDR_BASE + device_index * 2^40 + offset). A host that dereferences one crashes.
 *     Every executor function translates and bounds-checks the addresses it is given.
 *   - Streams are asynchronous: every stream (and the device's default stream, used when the
 *     host passes stream == NULL) is a FIFO queue served by its own worker thread, with an
 *     optional injected latency per operation, so a missing synchronization gives wrong
 *     results.
 *   - Events follow CUDA: record_event marks the current end of a stream; the event is pending
 *     until that stream reaches the mark; an event never recorded is complete; waits and
 *     queries refer to the most recent record at the time of the call.
 *   - Faults can be injected through load options (allocation, copies, init).
 *
 * Locking: each device has one mutex (allocator, statistics, stream and event lists, event
 * marks) and one condition variable (broadcast when a mark is reached); each stream has a
 * queue mutex with two condition variables (work queued, work done). Lock order: device
 * mutex, then a stream's mutex; a worker never holds its stream's mutex while it takes the
 * device mutex, and runs host callbacks and copies with no lock held.
 *
 * Nothing here is global and mutable: everything hangs off the platform data of one init, so
 * two runtimes may load the same library at the same time.
 */
#define _POSIX_C_SOURCE 200809L

#include <devplug/plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_VERSION "0.1.0"
#define SIM_PLUGIN_NAME "devplug_sim"
#define SIM_VENDOR "devplug"

/* Device i's addresses are SIM_ADDR_BASE + i * 2^SIM_ADDR_DEVICE_SHIFT + offset. */
#define SIM_ADDR_BASE UINT64_C(0x5100000000000000)
#define SIM_ADDR_DEVICE_SHIFT 40
/* Allocation granularity (and alignment of every address handed out). */
#define SIM_ALIGN UINT64_C(256)
#define SIM_MAX_DEVICES 16
#define SIM_DEFAULT_MEMORY (UINT64_C(64) << 20)
#define SIM_MIN_MEMORY (UINT64_C(4) << 10)
#define SIM_MAX_MEMORY (UINT64_C(256) << 30)
#define SIM_MAX_LATENCY_US UINT64_C(10000000)
#define SIM_NAME_MAX 64
#define SIM_MSG_MAX 512

#define SIM_MAGIC_PLATFORM 0x53494d50u /* "SIMP" */
#define SIM_MAGIC_DEVICE 0x53494d44u   /* "SIMD" */
#define SIM_MAGIC_STREAM 0x53494d53u   /* "SIMS" */
#define SIM_MAGIC_EVENT 0x53494d45u    /* "SIME" */

/* ------------------------------------------------------------------------------------------ */
/* Types */

typedef enum sim_fail_init { SIM_FAIL_INIT_NO, SIM_FAIL_INIT_BEFORE, SIM_FAIL_INIT_AFTER } sim_fail_init;

typedef struct sim_options {
  int devices;
  uint64_t memory;
  char device_type[SIM_NAME_MAX + 1];
  char platform[SIM_NAME_MAX + 1];
  int32_t priority;
  uint64_t latency_us;
  bool fail_alloc; /* fail_alloc_after given */
  uint64_t fail_alloc_after;
  bool fail_copy; /* fail_copy_after given */
  uint64_t fail_copy_after;
  sim_fail_init fail_init;
  bool no_suballocator;
} sim_options;

struct sim_device;
struct sim_plugin;

typedef struct sim_platform {
  uint32_t magic;
  const dpp_host_api_t *host;
  sim_options opt;
  pthread_mutex_t mu; /* guards devices[] */
  struct sim_device *devices[SIM_MAX_DEVICES];
  struct sim_plugin *plugin; /* NULL once the plugin state is gone */
} sim_platform;

typedef struct sim_plugin {
  const dpp_host_api_t *host;
  sim_platform *platform; /* NULL once destroy_platform ran */
} sim_plugin;

/* A mark in a stream: what an event's record (or a stream_wait_stream) waits for. Reference
 * counted under the device mutex: by the event whose latest record it is, by the MARK op that
 * reaches it and by every WAIT op and event_synchronize waiting on it. */
typedef struct sim_marker {
  int refs;
  int32_t state; /* DPP_EVENT_* */
  dpp_status_t status;
  char msg[SIM_MSG_MAX];
} sim_marker;

typedef enum sim_op_kind {
  SIM_OP_HTOD,
  SIM_OP_DTOH,
  SIM_OP_DTOD,
  SIM_OP_MEMSET,
  SIM_OP_CALLBACK,
  SIM_OP_MARK,
  SIM_OP_WAIT,
} sim_op_kind;

typedef struct sim_op {
  struct sim_op *next;
  sim_op_kind kind;
  dpp_addr_t dst, src;
  void *host_dst;
  const void *host_src;
  uint64_t size;
  uint8_t value;
  dpp_host_fn fn;
  void *arg;
  sim_marker *marker;
  bool inject_fail; /* decided at enqueue time (fail_copy_after) */
  uint64_t copy_number;
} sim_op;

typedef struct sim_stream {
  uint32_t magic;
  struct sim_device *dev;
  struct sim_stream *next; /* in the device's list (device mutex) */
  int refs;                /* device mutex: 1 for the list, +1 per synchronize_all in progress */
  bool is_default;
  unsigned id;
  pthread_t thread;
  bool thread_started;
  /* The queue, under mu. */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t done_cv;
  sim_op *head, *tail;
  uint64_t submitted, completed;
  bool quit;
  dpp_status_t err; /* the first error met since the last synchronize */
  char errmsg[SIM_MSG_MAX];
} sim_stream;

typedef struct sim_event {
  uint32_t magic;
  struct sim_device *dev;
  struct sim_event *next;
  sim_marker *marker; /* the latest record; NULL = never recorded */
} sim_event;

typedef struct sim_block {
  uint64_t off;
  uint64_t size; /* bytes of the arena the block spans */
  uint64_t req;  /* bytes requested (used blocks) */
  bool used;
} sim_block;

typedef struct sim_device {
  uint32_t magic;
  sim_platform *plat;
  int index;
  uint64_t base;
  uint64_t mem_size;
  unsigned char *arena;
  uint64_t latency_us;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast when a marker is reached */

  /* Allocator (device mutex). Blocks are sorted by offset and cover the arena. */
  sim_block *blocks;
  size_t nblocks, cap;
  uint64_t bytes_in_use, peak_bytes, bytes_reserved, largest_alloc;
  uint64_t num_allocs_total, live_allocs;
  uint64_t alloc_calls, copy_calls;
  uint64_t live_host_allocs;

  sim_stream *streams; /* including the default stream */
  sim_stream *default_stream;
  unsigned next_stream_id;
  sim_event *events;

  char hardware_name[128];
  char pci_bus_id[32];
} sim_device;

/* ------------------------------------------------------------------------------------------ */
/* Messages */

static void sim_vlog(const sim_platform *p, int32_t level, const char *fmt, va_list ap) {
  if (!p || !p->host || !p->host->log) {
    return;
  }
  char buf[SIM_MSG_MAX];
  vsnprintf(buf, sizeof buf, fmt, ap);
  p->host->log(p->host->context, level, buf);
}

#if defined(__GNUC__)
#define SIM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SIM_PRINTF(a, b)
#endif

static void sim_log(const sim_platform *p, int32_t level, const char *fmt, ...) SIM_PRINTF(3, 4);
static void sim_log(const sim_platform *p, int32_t level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sim_vlog(p, level, fmt, ap);
  va_end(ap);
}

static dpp_status_t sim_host_error(const dpp_host_api_t *host, dpp_status_t status, const char *fmt, ...)
    SIM_PRINTF(3, 4);
/* Tells the host why the current call fails (host->set_error) and returns `status`. */
static dpp_status_t sim_host_error(const dpp_host_api_t *host, dpp_status_t status, const char *fmt, ...) {
  if (host && host->set_error) {
    char buf[SIM_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    host->set_error(host->context, buf);
  }
  return status;
}

/* An error message prefixed with the device ("SIM SIMCUDA:1: allocate: ..."). */
static void sim_devmsg(const sim_device *d, char *out, const char *fn, const char *fmt, ...) SIM_PRINTF(4, 5);
static void sim_devmsg(const sim_device *d, char *out, const char *fn, const char *fmt, ...) {
  int n = snprintf(out, SIM_MSG_MAX, "SIM %s:%d: %s: ", d->plat->opt.platform, d->index, fn);
  if (n < 0 || n >= SIM_MSG_MAX) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + n, (size_t)(SIM_MSG_MAX - n), fmt, ap);
  va_end(ap);
}

static dpp_status_t sim_dev_fail(const sim_device *d, dpp_status_t status, const char *msg) {
  if (d->plat->host && d->plat->host->set_error) {
    d->plat->host->set_error(d->plat->host->context, msg);
  }
  return status;
}

static void sim_sleep_us(uint64_t us) {
  struct timespec ts;
  ts.tv_sec = (time_t)(us / 1000000u);
  ts.tv_nsec = (long)(us % 1000000u) * 1000L;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Handles */

/* The device of an executor call, or NULL (no message can be given without a device: the host
 * table is reached through it). */
static sim_device *sim_dev(void *device) {
  sim_device *d = (sim_device *)device;
  if (!d || d->magic != SIM_MAGIC_DEVICE) {
    return NULL;
  }
  return d;
}

/* Device mutex held. NULL means the default stream; anything else must be in the list (the
 * pointer is compared, never dereferenced, before it is found). */
static sim_stream *sim_find_stream(sim_device *d, void *handle) {
  if (!handle) {
    return d->default_stream;
  }
  for (sim_stream *s = d->streams; s; s = s->next) {
    if ((void *)s == handle) {
      return s;
    }
  }
  return NULL;
}

static sim_event *sim_find_event(sim_device *d, void *handle) {
  for (sim_event *e = d->events; e; e = e->next) {
    if ((void *)e == handle) {
      return e;
    }
  }
  return NULL;
}

/* Device mutex held. */
static void sim_marker_unref(sim_marker *m) {
  if (m && --m->refs == 0) {
    free(m);
  }
}

static sim_marker *sim_marker_new(int refs) {
  sim_marker *m = (sim_marker *)calloc(1, sizeof *m);
  if (m) {
    m->refs = refs;
    m->state = DPP_EVENT_PENDING;
    m->status = DPP_OK;
  }
  return m;
}

/* ------------------------------------------------------------------------------------------ */
/* Allocator (device mutex held) */

static uint64_t sim_round_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

/* Index of the block containing offset `off` (blocks cover [0, mem_size)). */
static size_t sim_block_at(const sim_device *d, uint64_t off) {
  size_t lo = 0, hi = d->nblocks;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (d->blocks[mid].off <= off) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static bool sim_blocks_insert(sim_device *d, size_t at, sim_block b) {
  if (d->nblocks == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    sim_block *nb = (sim_block *)realloc(d->blocks, cap * sizeof *nb);
    if (!nb) {
      return false;
    }
    d->blocks = nb;
    d->cap = cap;
  }
  memmove(&d->blocks[at + 1], &d->blocks[at], (d->nblocks - at) * sizeof *d->blocks);
  d->blocks[at] = b;
  d->nblocks++;
  return true;
}

static void sim_blocks_remove(sim_device *d, size_t at) {
  memmove(&d->blocks[at], &d->blocks[at + 1], (d->nblocks - at - 1) * sizeof *d->blocks);
  d->nblocks--;
}

/* First fit. Returns false when no free block is large enough (or no memory for the list). */
static bool sim_arena_alloc(sim_device *d, uint64_t req, uint64_t *out_off) {
  if (req > d->mem_size) {
    return false;
  }
  uint64_t need = sim_round_up(req, SIM_ALIGN);
  for (size_t i = 0; i < d->nblocks; i++) {
    sim_block *b = &d->blocks[i];
    if (b->used || b->size < need) {
      continue;
    }
    if (b->size > need) {
      sim_block rest = {b->off + need, b->size - need, 0, false};
      if (!sim_blocks_insert(d, i + 1, rest)) {
        return false;
      }
      b = &d->blocks[i]; /* the array may have moved */
      b->size = need;
    }
    b->used = true;
    b->req = req;
    *out_off = b->off;
    return true;
  }
  return false;
}

static void sim_arena_free_index(sim_device *d, size_t i) {
  d->blocks[i].used = false;
  d->blocks[i].req = 0;
  if (i + 1 < d->nblocks && !d->blocks[i + 1].used) {
    d->blocks[i].size += d->blocks[i + 1].size;
    sim_blocks_remove(d, i + 1);
  }
  if (i > 0 && !d->blocks[i - 1].used) {
    d->blocks[i - 1].size += d->blocks[i].size;
    sim_blocks_remove(d, i);
  }
}

static uint64_t sim_largest_free(const sim_device *d) {
  uint64_t m = 0;
  for (size_t i = 0; i < d->nblocks; i++) {
    if (!d->blocks[i].used && d->blocks[i].size > m) {
      m = d->blocks[i].size;
    }
  }
  return m;
}

/* Translates [addr, addr + size) to arena memory, or writes why not into msg. size > 0. */
static bool sim_translate(const sim_device *d, const char *fn, const char *what, dpp_addr_t addr, uint64_t size,
                          unsigned char **out, char *msg) {
  if (addr < d->base || addr - d->base >= d->mem_size) {
    uint64_t rel = addr - SIM_ADDR_BASE;
    if (addr >= SIM_ADDR_BASE && (rel >> SIM_ADDR_DEVICE_SHIFT) < SIM_MAX_DEVICES &&
        (int)(rel >> SIM_ADDR_DEVICE_SHIFT) != d->index) {
      sim_devmsg(d, msg, fn,
                 "%s address 0x%016" PRIx64 " is not an address of this device (it looks like one of "
                 "SIM device %d)",
                 what, addr, (int)(rel >> SIM_ADDR_DEVICE_SHIFT));
    } else {
      sim_devmsg(d, msg, fn, "%s address 0x%016" PRIx64 " is not a device address of this device", what, addr);
    }
    return false;
  }
  uint64_t off = addr - d->base;
  const sim_block *b = &d->blocks[sim_block_at(d, off)];
  if (!b->used || off - b->off >= b->req) {
    sim_devmsg(d, msg, fn,
               "%s address 0x%016" PRIx64 " is not inside a live allocation (never allocated, freed, "
               "or past the end of one)",
               what, addr);
    return false;
  }
  uint64_t avail = b->req - (off - b->off);
  if (size > avail) {
    sim_devmsg(d, msg, fn,
               "%s range 0x%016" PRIx64 " + %" PRIu64 " bytes runs past the end of the allocation at "
               "0x%016" PRIx64 " of %" PRIu64 " bytes (%" PRIu64 " bytes left from that address)",
               what, addr, size, d->base + b->off, b->req, avail);
    return false;
  }
  *out = d->arena + off;
  return true;
}

/* Counts a copy against fail_copy_after; true when this copy must fail. Device mutex held. */
static bool sim_count_copy(sim_device *d, uint64_t *number) {
  *number = ++d->copy_calls;
  return d->plat->opt.fail_copy && d->copy_calls > d->plat->opt.fail_copy_after;
}

static void sim_injected_copy_msg(const sim_device *d, char *msg, const char *fn, uint64_t number) {
  sim_devmsg(d, msg, fn, "injected copy failure (copy #%" PRIu64 ", fail_copy_after=%" PRIu64 ")", number,
             d->plat->opt.fail_copy_after);
}

/* ------------------------------------------------------------------------------------------ */
/* Streams */

static void sim_run_op(sim_stream *s, sim_op *op, dpp_status_t *st, char *msg) {
  sim_device *d = s->dev;
  static const char *const names[] = {"memcpy_htod_async", "memcpy_dtoh_async", "memcpy_dtod_async",
                                      "memset_async", "host_callback", "mark", "wait"};
  const char *fn = names[op->kind];
  if (op->kind != SIM_OP_MARK && op->kind != SIM_OP_WAIT && d->latency_us) {
    sim_sleep_us(d->latency_us);
  }
  switch (op->kind) {
  case SIM_OP_HTOD:
  case SIM_OP_DTOH:
  case SIM_OP_DTOD:
  case SIM_OP_MEMSET: {
    if (op->inject_fail) {
      sim_injected_copy_msg(d, msg, fn, op->copy_number);
      *st = DPP_RESOURCE_EXHAUSTED;
      return;
    }
    /* Translated again: the memory may have been freed since the op was enqueued. The arena
     * itself lives until destroy_device, which joins every worker first, so the pointers stay
     * valid after the device mutex is released. */
    unsigned char *dp = NULL, *sp = NULL;
    bool ok = true;
    pthread_mutex_lock(&d->mu);
    if (op->kind != SIM_OP_DTOH) {
      ok = sim_translate(d, fn, "dst", op->dst, op->size, &dp, msg);
    }
    if (ok && (op->kind == SIM_OP_DTOH || op->kind == SIM_OP_DTOD)) {
      ok = sim_translate(d, fn, "src", op->src, op->size, &sp, msg);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok) {
      *st = DPP_INVALID_ARGUMENT;
      return;
    }
    switch (op->kind) {
    case SIM_OP_HTOD:
      memcpy(dp, op->host_src, (size_t)op->size);
      break;
    case SIM_OP_DTOH:
      memcpy(op->host_dst, sp, (size_t)op->size);
      break;
    case SIM_OP_DTOD:
      memmove(dp, sp, (size_t)op->size);
      break;
    default:
      memset(dp, op->value, (size_t)op->size);
      break;
    }
    return;
  }
  case SIM_OP_CALLBACK:
    op->fn(op->arg);
    return;
  case SIM_OP_MARK: {
    dpp_status_t err;
    char errmsg[SIM_MSG_MAX];
    pthread_mutex_lock(&s->mu);
    err = s->err;
    if (err != DPP_OK) {
      memcpy(errmsg, s->errmsg, sizeof errmsg);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&d->mu);
    if (err == DPP_OK) {
      op->marker->state = DPP_EVENT_COMPLETE;
    } else {
      op->marker->state = DPP_EVENT_ERROR;
      op->marker->status = err;
      memcpy(op->marker->msg, errmsg, sizeof errmsg);
    }
    sim_marker_unref(op->marker);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return;
  }
  case SIM_OP_WAIT:
    pthread_mutex_lock(&d->mu);
    while (op->marker->state == DPP_EVENT_PENDING) {
      pthread_cond_wait(&d->cv, &d->mu);
    }
    sim_marker_unref(op->marker);
    pthread_mutex_unlock(&d->mu);
    return;
  }
}

static void *sim_worker(void *arg) {
  sim_stream *s = (sim_stream *)arg;
  char msg[SIM_MSG_MAX];
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head && !s->quit) {
      pthread_cond_wait(&s->work_cv, &s->mu);
    }
    sim_op *op = s->head;
    if (!op) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    s->head = op->next;
    if (!s->head) {
      s->tail = NULL;
    }
    pthread_mutex_unlock(&s->mu);

    dpp_status_t st = DPP_OK;
    msg[0] = '\0';
    sim_run_op(s, op, &st, msg);
    free(op);

    pthread_mutex_lock(&s->mu);
    if (st != DPP_OK && s->err == DPP_OK) {
      s->err = st;
      memcpy(s->errmsg, msg, sizeof msg);
    }
    s->completed++;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

/* Appends an op. Device mutex held, and `s` found in the device's list, so the stream is not
 * shutting down (quit is set only after it left the list). */
static void sim_enqueue(sim_stream *s, sim_op *op) {
  op->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail) {
    s->tail->next = op;
  } else {
    s->head = op;
  }
  s->tail = op;
  s->submitted++;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
}

static sim_stream *sim_stream_new(sim_device *d, bool is_default) {
  sim_stream *s = (sim_stream *)calloc(1, sizeof *s);
  if (!s) {
    return NULL;
  }
  s->magic = SIM_MAGIC_STREAM;
  s->dev = d;
  s->refs = 1;
  s->is_default = is_default;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  if (pthread_create(&s->thread, NULL, sim_worker, s) != 0) {
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
  }
  s->thread_started = true;
  return s;
}

static void sim_stream_free(sim_stream *s) {
  pthread_cond_destroy(&s->done_cv);
  pthread_cond_destroy(&s->work_cv);
  pthread_mutex_destroy(&s->mu);
  s->magic = 0;
  free(s);
}

/* Device mutex held. */
static void sim_stream_release(sim_stream *s) {
  if (--s->refs == 0) {
    sim_stream_free(s);
  }
}

/* Device mutex held: takes the stream out of the device's list. */
static void sim_stream_unlink(sim_device *d, sim_stream *s) {
  for (sim_stream **pp = &d->streams; *pp; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      s->next = NULL;
      return;
    }
  }
}

/* No lock held; `s` is out of the list. Lets the worker drain the queue, then joins it. */
static void sim_stream_stop(sim_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->quit = true;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  if (s->thread_started) {
    pthread_join(s->thread, NULL);
    s->thread_started = false;
  }
}

/* No lock held; the caller holds a reference. Waits for the work enqueued so far and takes
 * (clears) the stream's error. */
static dpp_status_t sim_stream_wait(sim_stream *s, char *msg) {
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->submitted;
  while (s->completed < target) {
    pthread_cond_wait(&s->done_cv, &s->mu);
  }
  dpp_status_t err = s->err;
  if (err != DPP_OK) {
    memcpy(msg, s->errmsg, SIM_MSG_MAX);
    s->err = DPP_OK;
    s->errmsg[0] = '\0';
  }
  pthread_mutex_unlock(&s->mu);
  return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Executor: memory */

static dpp_status_t sim_allocate(void *device, uint64_t size, dpp_addr_t *out_addr) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_addr || size == 0) {
    sim_devmsg(d, msg, "allocate", "%s", !out_addr ? "out_addr is NULL" : "size is 0");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  d->alloc_calls++;
  if (d->plat->opt.fail_alloc && d->alloc_calls > d->plat->opt.fail_alloc_after) {
    sim_devmsg(d, msg, "allocate",
               "injected allocation failure (allocation #%" PRIu64 " of %" PRIu64 " bytes, fail_alloc_after=%" PRIu64
               ")",
               d->alloc_calls, size, d->plat->opt.fail_alloc_after);
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  uint64_t off = 0;
  if (!sim_arena_alloc(d, size, &off)) {
    sim_devmsg(d, msg, "allocate",
               "out of device memory: %" PRIu64 " bytes requested, %" PRIu64 " of %" PRIu64
               " bytes in use, largest free block %" PRIu64 " bytes",
               size, d->bytes_reserved, d->mem_size, sim_largest_free(d));
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  d->bytes_in_use += size;
  d->bytes_reserved += d->blocks[sim_block_at(d, off)].size;
  if (d->bytes_in_use > d->peak_bytes) {
    d->peak_bytes = d->bytes_in_use;
  }
  if (size > d->largest_alloc) {
    d->largest_alloc = size;
  }
  d->num_allocs_total++;
  d->live_allocs++;
  pthread_mutex_unlock(&d->mu);
  *out_addr = d->base + off;
  return DPP_OK;
}

static void sim_deallocate(void *device, dpp_addr_t addr, uint64_t size) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return;
  }
  pthread_mutex_lock(&d->mu);
  bool in_range = addr >= d->base && addr - d->base < d->mem_size;
  size_t i = in_range ? sim_block_at(d, addr - d->base) : 0;
  if (!in_range || !d->blocks[i].used || d->blocks[i].off != addr - d->base) {
    pthread_mutex_unlock(&d->mu);
    sim_log(d->plat, DPP_LOG_ERROR,
            "SIM %s:%d: deallocate: address 0x%016" PRIx64 " is not the start of a live allocation "
            "(double free, or not from allocate); ignored",
            d->plat->opt.platform, d->index, addr);
    return;
  }
  uint64_t req = d->blocks[i].req;
  d->bytes_in_use -= req;
  d->bytes_reserved -= d->blocks[i].size;
  d->live_allocs--;
  sim_arena_free_index(d, i);
  pthread_mutex_unlock(&d->mu);
  if (size != req) {
    sim_log(d->plat, DPP_LOG_WARN,
            "SIM %s:%d: deallocate: address 0x%016" PRIx64 " was allocated with %" PRIu64
            " bytes but freed with size %" PRIu64,
            d->plat->opt.platform, d->index, addr, req, size);
  }
}

/* Pinned host memory: plain aligned host memory here. */
static dpp_status_t sim_host_allocate(void *device, uint64_t size, void **out_ptr) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_ptr || size == 0 || size > SIZE_MAX - 64) {
    sim_devmsg(d, msg, "host_allocate", "%s", !out_ptr ? "out_ptr is NULL" : "invalid size");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  void *p = aligned_alloc(64, (size_t)sim_round_up(size, 64));
  if (!p) {
    sim_devmsg(d, msg, "host_allocate", "out of host memory (%" PRIu64 " bytes)", size);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  d->live_host_allocs++;
  pthread_mutex_unlock(&d->mu);
  *out_ptr = p;
  return DPP_OK;
}

static void sim_host_deallocate(void *device, void *ptr, uint64_t size) {
  (void)size;
  sim_device *d = sim_dev(device);
  if (!d || !ptr) {
    return;
  }
  pthread_mutex_lock(&d->mu);
  d->live_host_allocs--;
  pthread_mutex_unlock(&d->mu);
  free(ptr);
}

static dpp_status_t sim_memory_usage(void *device, uint64_t *out_free, uint64_t *out_total) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_free || !out_total) {
    sim_devmsg(d, msg, "memory_usage", "an out-pointer is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  *out_free = d->mem_size - d->bytes_reserved;
  *out_total = d->mem_size;
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

static dpp_status_t sim_allocator_stats(void *device, dpp_allocator_stats_t *st) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!st || st->struct_size < offsetof(dpp_allocator_stats_t, num_allocs)) {
    sim_devmsg(d, msg, "allocator_stats", "%s", !st ? "out_stats is NULL" : "out_stats->struct_size is too small");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  /* Only the fields the host's struct has (struct_size is the host's). */
#define SIM_SET(field, value)                                                                                  \
  do {                                                                                                         \
    if (st->struct_size >= offsetof(dpp_allocator_stats_t, field) + sizeof st->field) {                        \
      st->field = (value);                                                                                     \
    }                                                                                                          \
  } while (0)
  SIM_SET(num_allocs, d->num_allocs_total);
  SIM_SET(bytes_in_use, d->bytes_in_use);
  SIM_SET(peak_bytes_in_use, d->peak_bytes);
  SIM_SET(largest_alloc_size, d->largest_alloc);
  SIM_SET(bytes_limit, d->mem_size);
  SIM_SET(bytes_reserved, d->bytes_reserved);
  SIM_SET(largest_free_block, sim_largest_free(d));
#undef SIM_SET
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Executor: synchronous copies. They act at once, on the calling thread: like cudaMemcpy with
 * streams the host created, they do not wait for work queued on any stream. */

static dpp_status_t sim_memcpy_htod(void *device, dpp_addr_t dst, const void *src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *dp;
  uint64_t n;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  if (!src) {
    sim_devmsg(d, msg, "memcpy_htod", "src is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  if (!sim_translate(d, "memcpy_htod", "dst", dst, size, &dp, msg)) {
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  bool fail = sim_count_copy(d, &n);
  pthread_mutex_unlock(&d->mu);
  if (fail) {
    sim_injected_copy_msg(d, msg, "memcpy_htod", n);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  memcpy(dp, src, (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memcpy_dtoh(void *device, void *dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *sp;
  uint64_t n;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  if (!dst) {
    sim_devmsg(d, msg, "memcpy_dtoh", "dst is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  if (!sim_translate(d, "memcpy_dtoh", "src", src, size, &sp, msg)) {
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  bool fail = sim_count_copy(d, &n);
  pthread_mutex_unlock(&d->mu);
  if (fail) {
    sim_injected_copy_msg(d, msg, "memcpy_dtoh", n);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  memcpy(dst, sp, (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memcpy_dtod(void *device, dpp_addr_t dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *dp, *sp;
  uint64_t n;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  pthread_mutex_lock(&d->mu);
  if (!sim_translate(d, "memcpy_dtod", "dst", dst, size, &dp, msg) ||
      !sim_translate(d, "memcpy_dtod", "src", src, size, &sp, msg)) {
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  bool fail = sim_count_copy(d, &n);
  pthread_mutex_unlock(&d->mu);
  if (fail) {
    sim_injected_copy_msg(d, msg, "memcpy_dtod", n);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  memmove(dp, sp, (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memset(void *device, dpp_addr_t dst, uint8_t value, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *dp;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  pthread_mutex_lock(&d->mu);
  if (!sim_translate(d, "memset", "dst", dst, size, &dp, msg)) {
    pthread_mutex_unlock(&d->mu);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_unlock(&d->mu);
  memset(dp, value, (size_t)size);
  return DPP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Executor: streams */

static dpp_status_t sim_create_stream(void *device, void **out_stream) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_stream) {
    sim_devmsg(d, msg, "create_stream", "out_stream is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_stream *s = sim_stream_new(d, false);
  if (!s) {
    sim_devmsg(d, msg, "create_stream", "cannot create the stream's worker thread");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  s->id = ++d->next_stream_id;
  s->next = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->mu);
  *out_stream = s;
  return DPP_OK;
}

static void sim_destroy_stream(void *device, void *stream) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return;
  }
  if (!stream) {
    sim_log(d->plat, DPP_LOG_ERROR, "SIM %s:%d: destroy_stream: the default stream (NULL) cannot be destroyed",
            d->plat->opt.platform, d->index);
    return;
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  if (!s || s->is_default) {
    pthread_mutex_unlock(&d->mu);
    sim_log(d->plat, DPP_LOG_ERROR, "SIM %s:%d: destroy_stream: %p is not a live stream of this device; ignored",
            d->plat->opt.platform, d->index, stream);
    return;
  }
  if (pthread_equal(pthread_self(), s->thread)) {
    pthread_mutex_unlock(&d->mu);
    sim_log(d->plat, DPP_LOG_ERROR,
            "SIM %s:%d: destroy_stream: called from a host callback of that same stream; ignored",
            d->plat->opt.platform, d->index);
    return;
  }
  sim_stream_unlink(d, s);
  pthread_mutex_unlock(&d->mu);

  sim_stream_stop(s); /* drains the queue: queued callbacks still run exactly once */

  char msg[SIM_MSG_MAX];
  pthread_mutex_lock(&s->mu);
  dpp_status_t err = s->err;
  memcpy(msg, s->errmsg, sizeof msg);
  pthread_mutex_unlock(&s->mu);
  if (err != DPP_OK) {
    sim_log(d->plat, DPP_LOG_WARN, "SIM %s:%d: destroy_stream: stream %u had an unreported error: %s",
            d->plat->opt.platform, d->index, s->id, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_stream_release(s);
  pthread_mutex_unlock(&d->mu);
}

static dpp_status_t sim_synchronize_stream(void *device, void *stream) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  if (!s) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "synchronize_stream", "%p is not a live stream of this device", stream);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  s->refs++;
  pthread_mutex_unlock(&d->mu);
  dpp_status_t st = sim_stream_wait(s, msg);
  pthread_mutex_lock(&d->mu);
  sim_stream_release(s);
  pthread_mutex_unlock(&d->mu);
  return st == DPP_OK ? DPP_OK : sim_dev_fail(d, st, msg);
}

static dpp_status_t sim_synchronize_all(void *device) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX], first_msg[SIM_MSG_MAX];
  dpp_status_t first = DPP_OK;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&d->mu);
  size_t n = 0;
  for (sim_stream *s = d->streams; s; s = s->next) {
    n++;
  }
  sim_stream **all = (sim_stream **)malloc(n * sizeof *all);
  if (!all) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "synchronize_all", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  n = 0;
  for (sim_stream *s = d->streams; s; s = s->next) {
    s->refs++;
    all[n++] = s;
  }
  pthread_mutex_unlock(&d->mu);
  for (size_t i = 0; i < n; i++) {
    dpp_status_t st = sim_stream_wait(all[i], msg);
    if (st != DPP_OK && first == DPP_OK) {
      first = st;
      memcpy(first_msg, msg, sizeof msg);
    }
  }
  pthread_mutex_lock(&d->mu);
  for (size_t i = 0; i < n; i++) {
    sim_stream_release(all[i]);
  }
  pthread_mutex_unlock(&d->mu);
  free(all);
  return first == DPP_OK ? DPP_OK : sim_dev_fail(d, first, first_msg);
}

/* What an async op needs checked at enqueue time. */
enum { SIM_CHECK_DST = 1, SIM_CHECK_SRC = 2, SIM_COUNT_COPY = 4 };

/* Validates and enqueues `op` (taking it, on success and failure). */
static dpp_status_t sim_submit(sim_device *d, void *stream, sim_op *op, const char *fn, int checks) {
  char msg[SIM_MSG_MAX];
  unsigned char *unused;
  dpp_status_t st = DPP_OK;
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  if (!s) {
    sim_devmsg(d, msg, fn, "%p is not a live stream of this device", stream);
    st = DPP_INVALID_ARGUMENT;
  } else if (op->size == 0 && (checks & (SIM_CHECK_DST | SIM_CHECK_SRC))) {
    /* nothing to do */
    pthread_mutex_unlock(&d->mu);
    free(op);
    return DPP_OK;
  } else if ((checks & SIM_CHECK_DST) && !sim_translate(d, fn, "dst", op->dst, op->size, &unused, msg)) {
    st = DPP_INVALID_ARGUMENT;
  } else if ((checks & SIM_CHECK_SRC) && !sim_translate(d, fn, "src", op->src, op->size, &unused, msg)) {
    st = DPP_INVALID_ARGUMENT;
  } else {
    if (checks & SIM_COUNT_COPY) {
      op->inject_fail = sim_count_copy(d, &op->copy_number);
    }
    sim_enqueue(s, op);
  }
  pthread_mutex_unlock(&d->mu);
  if (st != DPP_OK) {
    free(op);
    return sim_dev_fail(d, st, msg);
  }
  return DPP_OK;
}

static sim_op *sim_op_new(sim_device *d, sim_op_kind kind, const char *fn) {
  sim_op *op = (sim_op *)calloc(1, sizeof *op);
  if (!op) {
    char msg[SIM_MSG_MAX];
    sim_devmsg(d, msg, fn, "out of host memory");
    sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
    return NULL;
  }
  op->kind = kind;
  return op;
}

static dpp_status_t sim_memcpy_htod_async(void *device, void *stream, dpp_addr_t dst, const void *src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!src && size) {
    sim_devmsg(d, msg, "memcpy_htod_async", "src is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_op *op = sim_op_new(d, SIM_OP_HTOD, "memcpy_htod_async");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  op->dst = dst;
  op->host_src = src;
  op->size = size;
  return sim_submit(d, stream, op, "memcpy_htod_async", SIM_CHECK_DST | SIM_COUNT_COPY);
}

static dpp_status_t sim_memcpy_dtoh_async(void *device, void *stream, void *dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!dst && size) {
    sim_devmsg(d, msg, "memcpy_dtoh_async", "dst is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_op *op = sim_op_new(d, SIM_OP_DTOH, "memcpy_dtoh_async");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  op->host_dst = dst;
  op->src = src;
  op->size = size;
  return sim_submit(d, stream, op, "memcpy_dtoh_async", SIM_CHECK_SRC | SIM_COUNT_COPY);
}

static dpp_status_t sim_memcpy_dtod_async(void *device, void *stream, dpp_addr_t dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_op *op = sim_op_new(d, SIM_OP_DTOD, "memcpy_dtod_async");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  op->dst = dst;
  op->src = src;
  op->size = size;
  return sim_submit(d, stream, op, "memcpy_dtod_async", SIM_CHECK_DST | SIM_CHECK_SRC | SIM_COUNT_COPY);
}

static dpp_status_t sim_memset_async(void *device, void *stream, dpp_addr_t dst, uint8_t value, uint64_t size) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_op *op = sim_op_new(d, SIM_OP_MEMSET, "memset_async");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  op->dst = dst;
  op->value = value;
  op->size = size;
  return sim_submit(d, stream, op, "memset_async", SIM_CHECK_DST);
}

static dpp_status_t sim_host_callback(void *device, void *stream, dpp_host_fn func, void *arg) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!func) {
    sim_devmsg(d, msg, "host_callback", "func is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_op *op = sim_op_new(d, SIM_OP_CALLBACK, "host_callback");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  op->fn = func;
  op->arg = arg;
  return sim_submit(d, stream, op, "host_callback", 0);
}

static dpp_status_t sim_stream_wait_stream(void *device, void *stream, void *other) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_op *mark = sim_op_new(d, SIM_OP_MARK, "stream_wait_stream");
  sim_op *wait = sim_op_new(d, SIM_OP_WAIT, "stream_wait_stream");
  sim_marker *m = sim_marker_new(2);
  if (!mark || !wait || !m) {
    free(mark);
    free(wait);
    free(m);
    sim_devmsg(d, msg, "stream_wait_stream", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_stream *o = sim_find_stream(d, other);
  if (!s || !o) {
    pthread_mutex_unlock(&d->mu);
    free(mark);
    free(wait);
    free(m);
    sim_devmsg(d, msg, "stream_wait_stream", "%s %p is not a live stream of this device", !s ? "stream" : "other",
               !s ? stream : other);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  if (s == o) {
    pthread_mutex_unlock(&d->mu);
    free(mark);
    free(wait);
    free(m);
    return DPP_OK;
  }
  mark->marker = m;
  wait->marker = m;
  sim_enqueue(o, mark);
  sim_enqueue(s, wait);
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Executor: events */

static dpp_status_t sim_create_event(void *device, void **out_event) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_event) {
    sim_devmsg(d, msg, "create_event", "out_event is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_event *e = (sim_event *)calloc(1, sizeof *e);
  if (!e) {
    sim_devmsg(d, msg, "create_event", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  e->magic = SIM_MAGIC_EVENT;
  e->dev = d;
  pthread_mutex_lock(&d->mu);
  e->next = d->events;
  d->events = e;
  pthread_mutex_unlock(&d->mu);
  *out_event = e;
  return DPP_OK;
}

/* Device mutex held. */
static void sim_event_free(sim_event *e) {
  sim_marker_unref(e->marker);
  e->magic = 0;
  free(e);
}

static void sim_destroy_event(void *device, void *event) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return;
  }
  pthread_mutex_lock(&d->mu);
  for (sim_event **pp = &d->events; *pp; pp = &(*pp)->next) {
    if ((void *)*pp == event) {
      sim_event *e = *pp;
      *pp = e->next;
      sim_event_free(e); /* a record still queued keeps its own reference to the marker */
      pthread_mutex_unlock(&d->mu);
      return;
    }
  }
  pthread_mutex_unlock(&d->mu);
  if (event) {
    sim_log(d->plat, DPP_LOG_ERROR, "SIM %s:%d: destroy_event: %p is not a live event of this device; ignored",
            d->plat->opt.platform, d->index, event);
  }
}

static dpp_status_t sim_record_event(void *device, void *stream, void *event) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_op *op = sim_op_new(d, SIM_OP_MARK, "record_event");
  sim_marker *m = sim_marker_new(2); /* the event's and the MARK op's */
  if (!op || !m) {
    free(op);
    free(m);
    sim_devmsg(d, msg, "record_event", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_event *e = sim_find_event(d, event);
  if (!s || !e) {
    pthread_mutex_unlock(&d->mu);
    free(op);
    free(m);
    sim_devmsg(d, msg, "record_event", "%s %p is not a live %s of this device", !s ? "stream" : "event",
               !s ? stream : event, !s ? "stream" : "event");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_marker_unref(e->marker);
  e->marker = m;
  op->marker = m;
  sim_enqueue(s, op);
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

static dpp_status_t sim_event_status(void *device, void *event, int32_t *out_status) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_status) {
    sim_devmsg(d, msg, "event_status", "out_status is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_event *e = sim_find_event(d, event);
  if (!e) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "event_status", "%p is not a live event of this device", event);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  *out_status = e->marker ? e->marker->state : DPP_EVENT_COMPLETE;
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

static dpp_status_t sim_stream_wait_event(void *device, void *stream, void *event) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_op *op = sim_op_new(d, SIM_OP_WAIT, "stream_wait_event");
  if (!op) {
    return DPP_RESOURCE_EXHAUSTED;
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_event *e = sim_find_event(d, event);
  if (!s || !e) {
    pthread_mutex_unlock(&d->mu);
    free(op);
    sim_devmsg(d, msg, "stream_wait_event", "%s %p is not a live %s of this device", !s ? "stream" : "event",
               !s ? stream : event, !s ? "stream" : "event");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  if (!e->marker || e->marker->state != DPP_EVENT_PENDING) {
    /* Never recorded, or already reached: nothing to wait for. */
    pthread_mutex_unlock(&d->mu);
    free(op);
    return DPP_OK;
  }
  op->marker = e->marker;
  e->marker->refs++;
  sim_enqueue(s, op);
  pthread_mutex_unlock(&d->mu);
  return DPP_OK;
}

static dpp_status_t sim_event_synchronize(void *device, void *event) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  pthread_mutex_lock(&d->mu);
  sim_event *e = sim_find_event(d, event);
  if (!e) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "event_synchronize", "%p is not a live event of this device", event);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_marker *m = e->marker;
  if (!m) {
    pthread_mutex_unlock(&d->mu);
    return DPP_OK;
  }
  m->refs++;
  while (m->state == DPP_EVENT_PENDING) {
    pthread_cond_wait(&d->cv, &d->mu);
  }
  dpp_status_t st = m->state == DPP_EVENT_ERROR ? m->status : DPP_OK;
  if (st != DPP_OK) {
    snprintf(msg, sizeof msg, "%s", m->msg);
  }
  sim_marker_unref(m);
  pthread_mutex_unlock(&d->mu);
  return st == DPP_OK ? DPP_OK : sim_dev_fail(d, st, msg);
}

/* Every function is filled except unified memory, which a discrete accelerator does not
 * have (see README.md). */
static const dpp_stream_executor_t sim_executor = {
    .struct_size = DPP_STREAM_EXECUTOR_STRUCT_SIZE,
    .ext = NULL,
    .allocate = sim_allocate,
    .deallocate = sim_deallocate,
    .host_allocate = sim_host_allocate,
    .host_deallocate = sim_host_deallocate,
    .unified_allocate = NULL,
    .unified_deallocate = NULL,
    .memory_usage = sim_memory_usage,
    .allocator_stats = sim_allocator_stats,
    .memcpy_htod = sim_memcpy_htod,
    .memcpy_dtoh = sim_memcpy_dtoh,
    .memcpy_dtod = sim_memcpy_dtod,
    .memset = sim_memset,
    .create_stream = sim_create_stream,
    .destroy_stream = sim_destroy_stream,
    .synchronize_stream = sim_synchronize_stream,
    .stream_wait_stream = sim_stream_wait_stream,
    .memcpy_htod_async = sim_memcpy_htod_async,
    .memcpy_dtoh_async = sim_memcpy_dtoh_async,
    .memcpy_dtod_async = sim_memcpy_dtod_async,
    .memset_async = sim_memset_async,
    .host_callback = sim_host_callback,
    .create_event = sim_create_event,
    .destroy_event = sim_destroy_event,
    .record_event = sim_record_event,
    .event_status = sim_event_status,
    .stream_wait_event = sim_stream_wait_event,
    .event_synchronize = sim_event_synchronize,
    .synchronize_all = sim_synchronize_all,
};

/* ------------------------------------------------------------------------------------------ */
/* Devices */

/* Stops every stream, frees events, checks for leaks, frees the device. */
static void sim_device_free(sim_device *d) {
  sim_platform *p = d->plat;
  size_t user_streams = 0, events = 0;

  pthread_mutex_lock(&d->mu);
  sim_stream *list = d->streams;
  d->streams = NULL;
  d->default_stream = NULL;
  pthread_mutex_unlock(&d->mu);
  while (list) {
    sim_stream *s = list;
    list = s->next;
    s->next = NULL;
    if (!s->is_default) {
      user_streams++;
    }
    sim_stream_stop(s);
    pthread_mutex_lock(&d->mu);
    sim_stream_release(s); /* a synchronize_all in progress would be a host bug; see README */
    pthread_mutex_unlock(&d->mu);
  }

  pthread_mutex_lock(&d->mu);
  while (d->events) {
    sim_event *e = d->events;
    d->events = e->next;
    sim_event_free(e);
    events++;
  }
  uint64_t live = d->live_allocs, bytes = d->bytes_in_use, host_live = d->live_host_allocs;
  pthread_mutex_unlock(&d->mu);

  if (user_streams || events) {
    sim_log(p, DPP_LOG_WARN, "SIM %s:%d: destroy_device: %zu stream(s) and %zu event(s) were still alive; destroyed",
            p->opt.platform, d->index, user_streams, events);
  }
  if (live) {
    sim_log(p, DPP_LOG_WARN,
            "SIM %s:%d: destroy_device: %" PRIu64 " device allocation(s) of %" PRIu64 " bytes leaked",
            p->opt.platform, d->index, live, bytes);
  }
  if (host_live) {
    sim_log(p, DPP_LOG_WARN, "SIM %s:%d: destroy_device: %" PRIu64 " pinned host allocation(s) leaked",
            p->opt.platform, d->index, host_live);
  }
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d->blocks);
  free(d->arena);
  d->magic = 0;
  free(d);
}

static dpp_status_t sim_create_device(void *platform_data, int32_t ordinal, dpp_device_t *out) {
  sim_platform *p = (sim_platform *)platform_data;
  if (!p || p->magic != SIM_MAGIC_PLATFORM) {
    return DPP_INVALID_ARGUMENT;
  }
  const dpp_host_api_t *host = p->host;
  if (!out || out->struct_size < DPP_DEVICE_STRUCT_SIZE) {
    return sim_host_error(host, DPP_INVALID_ARGUMENT, "SIM %s: create_device: %s", p->opt.platform,
                          !out ? "device is NULL" : "dpp_device_t.struct_size is smaller than the ABI 1.0 size");
  }
  if (ordinal < 0 || ordinal >= p->opt.devices) {
    return sim_host_error(host, DPP_INVALID_ARGUMENT, "SIM %s: create_device: ordinal %d is not in 0..%d",
                          p->opt.platform, (int)ordinal, p->opt.devices - 1);
  }

  sim_device *d = (sim_device *)calloc(1, sizeof *d);
  if (!d) {
    return sim_host_error(host, DPP_RESOURCE_EXHAUSTED, "SIM %s:%d: create_device: out of host memory",
                          p->opt.platform, (int)ordinal);
  }
  d->magic = SIM_MAGIC_DEVICE;
  d->plat = p;
  d->index = ordinal;
  d->base = SIM_ADDR_BASE + ((uint64_t)ordinal << SIM_ADDR_DEVICE_SHIFT);
  d->mem_size = p->opt.memory;
  d->latency_us = p->opt.latency_us;
  /* calloc: fresh device memory reads as zeros (deterministic), and pages nobody touches cost
   * no host memory. Freed and reused memory keeps what was written there, as on a device. */
  d->arena = (unsigned char *)calloc(1, (size_t)d->mem_size);
  d->blocks = (sim_block *)malloc(64 * sizeof *d->blocks);
  if (!d->arena || !d->blocks) {
    free(d->arena);
    free(d->blocks);
    free(d);
    return sim_host_error(host, DPP_RESOURCE_EXHAUSTED,
                          "SIM %s:%d: create_device: cannot allocate the %" PRIu64 "-byte device memory arena",
                          p->opt.platform, (int)ordinal, p->opt.memory);
  }
  d->cap = 64;
  d->nblocks = 1;
  d->blocks[0] = (sim_block){0, d->mem_size, 0, false};
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  snprintf(d->hardware_name, sizeof d->hardware_name, "devplug SIM simulated accelerator (%s)", p->opt.platform);
  snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "0000:51:%02x.0", (unsigned)ordinal);

  d->default_stream = sim_stream_new(d, true);
  if (!d->default_stream) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d->arena);
    free(d->blocks);
    free(d);
    return sim_host_error(host, DPP_RESOURCE_EXHAUSTED,
                          "SIM %s:%d: create_device: cannot start the default stream's worker thread",
                          p->opt.platform, (int)ordinal);
  }
  d->streams = d->default_stream;

  pthread_mutex_lock(&p->mu);
  bool taken = p->devices[ordinal] != NULL;
  if (!taken) {
    p->devices[ordinal] = d;
  }
  pthread_mutex_unlock(&p->mu);
  if (taken) {
    sim_device_free(d);
    return sim_host_error(host, DPP_ALREADY_EXISTS, "SIM %s:%d: create_device: device %d exists already",
                          p->opt.platform, (int)ordinal, (int)ordinal);
  }

  out->device_data = d;
  out->hardware_name = d->hardware_name;
  out->vendor = SIM_VENDOR;
  out->pci_bus_id = d->pci_bus_id;
  out->total_memory = d->mem_size;
  out->numa_node = -1;
  out->compute_units = 8;
  out->se = &sim_executor;
  sim_log(p, DPP_LOG_DEBUG, "SIM %s:%d: created (%" PRIu64 " bytes, addresses from 0x%016" PRIx64 ")",
          p->opt.platform, (int)ordinal, d->mem_size, d->base);
  return DPP_OK;
}

static void sim_destroy_device(void *platform_data, dpp_device_t *device) {
  sim_platform *p = (sim_platform *)platform_data;
  if (!p || p->magic != SIM_MAGIC_PLATFORM || !device) {
    return;
  }
  sim_device *d = sim_dev(device->device_data);
  if (!d || d->plat != p) {
    sim_log(p, DPP_LOG_ERROR, "SIM %s: destroy_device: not a device of this platform; ignored", p->opt.platform);
    return;
  }
  pthread_mutex_lock(&p->mu);
  if (p->devices[d->index] == d) {
    p->devices[d->index] = NULL;
  }
  pthread_mutex_unlock(&p->mu);
  sim_device_free(d);
  device->device_data = NULL;
  device->se = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Platform and plugin */

static void sim_platform_free(sim_platform *p) {
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    if (p->devices[i]) {
      sim_log(p, DPP_LOG_ERROR, "SIM %s: device %d was not destroyed before its platform; destroying it",
              p->opt.platform, i);
      sim_device_free(p->devices[i]);
      p->devices[i] = NULL;
    }
  }
  pthread_mutex_destroy(&p->mu);
  p->magic = 0;
  free(p);
}

static void sim_destroy_platform(void *platform_data) {
  sim_platform *p = (sim_platform *)platform_data;
  if (!p || p->magic != SIM_MAGIC_PLATFORM) {
    return;
  }
  if (p->plugin) {
    p->plugin->platform = NULL;
  }
  sim_platform_free(p);
}

/* ---- option parsing ---- */

static bool sim_parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) {
    return false;
  }
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') {
      return false;
    }
    unsigned digit = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - digit) / 10) {
      return false;
    }
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

static bool sim_parse_i32(const char *s, int32_t *out) {
  bool neg = false;
  uint64_t v;
  if (s && (*s == '-' || *s == '+')) {
    neg = *s == '-';
    s++;
  }
  if (!sim_parse_u64(s, &v) || v > (neg ? UINT64_C(2147483648) : UINT64_C(2147483647))) {
    return false;
  }
  *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
  return true;
}

/* "<digits>[K|M|G|T][B|iB]" (binary multiples, case-insensitive suffix). */
static bool sim_parse_size(const char *s, uint64_t *out) {
  char digits[32];
  size_t n = 0;
  if (!s) {
    return false;
  }
  while (s[n] >= '0' && s[n] <= '9') {
    if (n + 1 >= sizeof digits) {
      return false;
    }
    digits[n] = s[n];
    n++;
  }
  digits[n] = '\0';
  uint64_t v;
  if (!sim_parse_u64(digits, &v)) {
    return false;
  }
  const char *suf = s + n;
  unsigned shift = 0;
  switch (*suf) {
  case 'k': case 'K': shift = 10; suf++; break;
  case 'm': case 'M': shift = 20; suf++; break;
  case 'g': case 'G': shift = 30; suf++; break;
  case 't': case 'T': shift = 40; suf++; break;
  default: break;
  }
  if (shift && (*suf == 'i' || *suf == 'I') && (suf[1] == 'b' || suf[1] == 'B') && suf[2] == '\0') {
    suf += 2;
  } else if ((*suf == 'b' || *suf == 'B') && suf[1] == '\0') {
    suf += 1;
  }
  if (*suf != '\0') {
    return false;
  }
  if (shift && v > (UINT64_MAX >> shift)) {
    return false;
  }
  *out = v << shift;
  return true;
}

/* [A-Z][A-Z0-9_]*, 1 to 64 characters. */
static bool sim_valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SIM_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z')) {
    return false;
  }
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

static bool sim_parse_bool(const char *s, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcmp(s, yes[i]) == 0) {
      *out = true;
      return true;
    }
    if (strcmp(s, no[i]) == 0) {
      *out = false;
      return true;
    }
  }
  return false;
}

static const char *sim_opt(const dpp_host_api_t *host, const char *key) {
  return host->get_option ? host->get_option(host->context, key) : NULL;
}

static dpp_status_t sim_bad_option(const dpp_host_api_t *host, const char *key, const char *value, const char *expected) {
  return sim_host_error(host, DPP_INVALID_ARGUMENT, "SIM: load option %s='%.64s' is invalid: expected %s", key, value,
                        expected);
}

static dpp_status_t sim_read_options(const dpp_host_api_t *host, sim_options *o) {
  const char *v;
  uint64_t u;
  memset(o, 0, sizeof *o);
  o->devices = 1;
  o->memory = SIM_DEFAULT_MEMORY;
  strcpy(o->device_type, "SIM");
  strcpy(o->platform, "SIM");

  if ((v = sim_opt(host, "devices")) != NULL) {
    if (!sim_parse_u64(v, &u) || u < 1 || u > SIM_MAX_DEVICES) {
      return sim_bad_option(host, "devices", v, "an integer from 1 to 16");
    }
    o->devices = (int)u;
  }
  if ((v = sim_opt(host, "memory")) != NULL) {
    if (!sim_parse_size(v, &u) || u < SIM_MIN_MEMORY || u > SIM_MAX_MEMORY) {
      return sim_bad_option(host, "memory", v, "a size in bytes from 4K to 256G (suffixes K, M, G, T)");
    }
    o->memory = u;
  }
  if ((v = sim_opt(host, "device_type")) != NULL) {
    if (!sim_valid_name(v)) {
      return sim_bad_option(host, "device_type", v, "a name matching [A-Z][A-Z0-9_]* of at most 64 characters");
    }
    strcpy(o->device_type, v);
  }
  if ((v = sim_opt(host, "platform")) != NULL) {
    if (!sim_valid_name(v)) {
      return sim_bad_option(host, "platform", v, "a name matching [A-Z][A-Z0-9_]* of at most 64 characters");
    }
    strcpy(o->platform, v);
  }
  if ((v = sim_opt(host, "priority")) != NULL) {
    if (!sim_parse_i32(v, &o->priority)) {
      return sim_bad_option(host, "priority", v, "a 32-bit signed integer");
    }
  }
  if ((v = sim_opt(host, "latency_us")) != NULL) {
    if (!sim_parse_u64(v, &u) || u > SIM_MAX_LATENCY_US) {
      return sim_bad_option(host, "latency_us", v, "microseconds from 0 to 10000000");
    }
    o->latency_us = u;
  }
  if ((v = sim_opt(host, "fail_alloc_after")) != NULL) {
    if (!sim_parse_u64(v, &o->fail_alloc_after)) {
      return sim_bad_option(host, "fail_alloc_after", v, "a non-negative integer");
    }
    o->fail_alloc = true;
  }
  if ((v = sim_opt(host, "fail_copy_after")) != NULL) {
    if (!sim_parse_u64(v, &o->fail_copy_after)) {
      return sim_bad_option(host, "fail_copy_after", v, "a non-negative integer");
    }
    o->fail_copy = true;
  }
  if ((v = sim_opt(host, "fail_init")) != NULL) {
    bool b;
    if (strcmp(v, "after_register") == 0) {
      o->fail_init = SIM_FAIL_INIT_AFTER;
    } else if (*v == '\0') {
      o->fail_init = SIM_FAIL_INIT_BEFORE;
    } else if (sim_parse_bool(v, &b)) {
      o->fail_init = b ? SIM_FAIL_INIT_BEFORE : SIM_FAIL_INIT_NO;
    } else {
      return sim_bad_option(host, "fail_init", v, "1/true/yes/on, 0/false/no/off, or after_register");
    }
  }
  if ((v = sim_opt(host, "no_suballocator")) != NULL) {
    if (!sim_parse_bool(v, &o->no_suballocator)) {
      return sim_bad_option(host, "no_suballocator", v, "1/true/yes/on or 0/false/no/off");
    }
  }
  return DPP_OK;
}

static dpp_status_t sim_init(const dpp_host_api_t *host, void **out_plugin_data) {
  if (!host || host->struct_size < DPP_HOST_API_STRUCT_SIZE) {
    /* The host table is too old (or absent) to even say why. */
    return host ? DPP_ABI_MISMATCH : DPP_INVALID_ARGUMENT;
  }
  if (host->abi_major != DPP_ABI_MAJOR) {
    return sim_host_error(host, DPP_ABI_MISMATCH, "SIM: host ABI %u.%u, plugin built for ABI %d.%d",
                          (unsigned)host->abi_major, (unsigned)host->abi_minor, DPP_ABI_MAJOR, DPP_ABI_MINOR);
  }
  if (!out_plugin_data || !host->register_platform) {
    return sim_host_error(host, DPP_INVALID_ARGUMENT, "SIM: init: %s",
                          !out_plugin_data ? "out_plugin_data is NULL" : "host register_platform is NULL");
  }

  sim_options opt;
  dpp_status_t st = sim_read_options(host, &opt);
  if (st != DPP_OK) {
    return st;
  }
  if (opt.fail_init == SIM_FAIL_INIT_BEFORE) {
    return sim_host_error(host, DPP_INTERNAL, "SIM: injected init failure");
  }

  sim_plugin *plugin = (sim_plugin *)calloc(1, sizeof *plugin);
  sim_platform *p = (sim_platform *)calloc(1, sizeof *p);
  if (!plugin || !p) {
    free(plugin);
    free(p);
    return sim_host_error(host, DPP_RESOURCE_EXHAUSTED, "SIM: init: out of host memory");
  }
  p->magic = SIM_MAGIC_PLATFORM;
  p->host = host;
  p->opt = opt;
  pthread_mutex_init(&p->mu, NULL);
  p->plugin = plugin;
  plugin->host = host;
  plugin->platform = p;

  dpp_platform_t reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = DPP_PLATFORM_STRUCT_SIZE;
  reg.ext = NULL;
  reg.name = p->opt.platform;
  reg.device_type = p->opt.device_type;
  reg.priority = p->opt.priority;
  reg.flags = p->opt.no_suballocator ? DPP_PLATFORM_NO_SUBALLOCATOR : 0;
  reg.vendor = SIM_VENDOR;
  reg.version = SIM_VERSION;
  reg.device_count = p->opt.devices;
  reg.platform_data = p;
  reg.create_device = sim_create_device;
  reg.destroy_device = sim_destroy_device;
  reg.destroy_platform = sim_destroy_platform;

  st = host->register_platform(host->context, &reg);
  if (st != DPP_OK) {
    /* Refused: the host kept nothing (it has set the error message). */
    p->plugin = NULL;
    sim_platform_free(p);
    free(plugin);
    return st;
  }
  if (opt.fail_init == SIM_FAIL_INIT_AFTER) {
    /* Registered, then failing: the host rolls the registration back and calls
     * destroy_platform, which frees the platform; shutdown is not called after a failed init. */
    p->plugin = NULL;
    free(plugin);
    return sim_host_error(host, DPP_INTERNAL, "SIM: injected init failure");
  }
  sim_log(p, DPP_LOG_INFO, "SIM: platform %s (type %s, priority %d): %d device(s) of %" PRIu64 " bytes",
          p->opt.platform, p->opt.device_type, (int)p->opt.priority, p->opt.devices, p->opt.memory);
  *out_plugin_data = plugin;
  return DPP_OK;
}

static void sim_shutdown(void *plugin_data) {
  sim_plugin *plugin = (sim_plugin *)plugin_data;
  if (!plugin) {
    return;
  }
  if (plugin->platform) {
    /* The host never called destroy_platform (it is optional for the host to call only
     * after devices existed): free it here. */
    sim_platform *p = plugin->platform;
    p->plugin = NULL;
    sim_platform_free(p);
  }
  free(plugin);
}

static const dpp_plugin_api_t sim_plugin_api = {
    .struct_size = DPP_PLUGIN_API_STRUCT_SIZE,
    .ext = NULL,
    .abi_major = DPP_ABI_MAJOR,
    .abi_minor = DPP_ABI_MINOR,
    .name = SIM_PLUGIN_NAME,
    .version = SIM_VERSION,
    .init = sim_init,
    .shutdown = sim_shutdown,
};

DPP_EXPORT const dpp_plugin_api_t *devplug_plugin_entry(void) {
  return &sim_plugin_api;
}
