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
 *     queries refer to the most recent record at the time of the call. The worker notes the
 *     time (CLOCK_MONOTONIC) when it reaches a mark, which event_elapsed_ns (ABI 1.4) reads.
 *   - Faults can be injected through load options (allocation, copies, init).
 *   - Native kernels (ABI 1.1) for part of the basis set only (Add, Mul, MatMul, ReduceSum), so
 *     that the runtime's decomposition and soft-placement paths run. compute validates and
 *     enqueues on the stream; the worker computes later, so results need a synchronize.
 *
 * Locking: each device has one mutex (allocator, statistics, stream and event lists, event
 * marks) and one condition variable (broadcast when a mark is reached); each stream has a
 * producers' lock (`plock`, a spinlock: the ring's tail and the overflow list) and a mutex with
 * two condition variables (work queued, work done; errors; stopping). Lock order: device mutex,
 * then a stream's `plock`, then its `mu`; a worker takes `plock` only to take the overflow list,
 * with nothing else held, never holds a stream mutex while it takes the device mutex, and runs
 * host callbacks, copies and kernels with no lock held.
 *
 * Launch overhead (a kernel launch should cost the host about what an op on the CPU costs):
 *   - A stream's queue is a ring of SIM_RING slots, each holding one op by value, published
 *     by its sequence number (`seq`). The worker runs the op in its slot and frees the slot
 *     with one store; it never takes a lock for an op. An enqueue that finds the ring full puts
 *     the op on an overflow list (malloc'd) that the worker runs once the ring is drained, so
 *     an enqueue never waits long for the worker (a host callback may enqueue on its own
 *     stream); a kernel launch first waits a little for a slot (sim_wait_for_slot).
 *   - A queued kernel is packed (sim_kqueued): an elementwise one of rank <= 1 fits its slot's
 *     first cache line, the one line a launch writes and the worker reads.
 *   - Enqueuing threads take a spinlock of their own (`plock`) and write only its cache line
 *     and the slot; lines the next enqueues write are fetched for writing at once. The worker's
 *     state is read on each enqueue but written only when it dozes, sleeps or is woken.
 *   - A worker that ran out of work first polls (SIM_POLL_US, unless it simulates latency),
 *     looking at the ring every SIM_POLL_LOOK_NS only and yielding its core in between, so that
 *     it finds several ops at each look. The enqueuer never signals a polling worker.
 *   - Then it dozes: it waits on work_cv for at most SIM_DOZE_US, then sleeps until signalled.
 *     An enqueue signals a sleeping worker at once; a dozing one only for an event mark or
 *     wait (someone may block on those), or once SIM_WAKE_BATCH ops wait; otherwise the worker
 *     finds them when its doze ends. So a host launching back to back signals rarely, and an op
 *     never waits more than SIM_DOZE_US for the worker. A synchronize wakes the worker itself.
 *   - Completions are counted in an atomic; the worker takes the stream mutex to wake waiters
 *     only when it completes the op a synchronize waits for (`wake_at`).
 *   - A kernel launch finds its stream and translates its addresses from a per-thread memo
 *     (`sim_launch_memo`) while no stream was destroyed and no allocation freed since: no lock.
 *     The worker translates again when it runs if an allocation was freed in between.
 *   - Add and Mul remember, per thread, the dtype and shapes they last validated and the job
 *     they packed (`sim_kmemo`): a launch with the same ones skips the checks they passed,
 *     copies the packed job and checks its addresses only.
 *
 * Nothing here is global and mutable but a counter of device serial numbers and the per-thread
 * memos: everything hangs off the platform data of one init, so two runtimes may load the
 * same library at the same time.
 */
#define _POSIX_C_SOURCE 200809L

#include <devplug/plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
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
/* How long a worker that ran out of work polls for more (no lock) before it
 * dozes (see "Launch overhead" above). 0: it dozes at once. */
#ifndef SIM_POLL_US
#define SIM_POLL_US 20
#endif
/* How often a polling worker looks at the ring (see sim_poll). */
#ifndef SIM_POLL_LOOK_NS
#define SIM_POLL_LOOK_NS 1000
#endif
/* How a polling worker passes the time between two looks: yield its core, or pause. */
#ifndef SIM_POLL_YIELD
#define SIM_POLL_YIELD 1
#endif
#ifndef SIM_POLL_PAUSES
#define SIM_POLL_PAUSES 16
#endif
/* How long a worker that ran out of work waits for more before it sleeps until signalled
 * (see "Launch overhead" above). */
#ifndef SIM_DOZE_US
#define SIM_DOZE_US 50
#endif
/* Slots in a stream's ring (a power of two). */
#ifndef SIM_RING
#define SIM_RING 256
#endif
/* A dozing worker is signalled by the enqueue that makes this many ops wait in its queue: a
 * quarter of the ring, so that the ring still has room for what the host enqueues while the
 * worker wakes up (ops that find it full go to the slower overflow list). */
#ifndef SIM_WAKE_BATCH
#define SIM_WAKE_BATCH (SIM_RING / 4)
#endif
#define SIM_RING_MASK ((uint64_t)SIM_RING - 1)
/* How many slots ahead an enqueue fetches a slot's first line for writing (see sim_push). */
#ifndef SIM_PREFETCH_AHEAD
#define SIM_PREFETCH_AHEAD 4
#endif
/* How long a kernel launch that finds the ring full waits for a slot (see sim_wait_for_slot). */
#ifndef SIM_FULL_WAIT_NS
#define SIM_FULL_WAIT_NS 20000
#endif
/* Allocations a thread's launch memo remembers from kernel launches' address checks. */
#define SIM_TMEMO 4

#define SIM_MAGIC_PLATFORM 0x53494d50u /* "SIMP" */
#define SIM_MAGIC_DEVICE 0x53494d44u   /* "SIMD" */
#define SIM_MAGIC_STREAM 0x53494d53u   /* "SIMS" */
#define SIM_MAGIC_EVENT 0x53494d45u    /* "SIME" */

/* Serial numbers of devices (for the launch memos, which must not take a device created where
 * a destroyed one lay for that one). The one mutable global; it holds no state of a runtime. */
static _Atomic uint64_t sim_device_serials;

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
  uint64_t fail_alloc_at; /* fail_alloc_at: only this allocation (1-based) fails; 0: none */
  bool fail_copy; /* fail_copy_after given */
  uint64_t fail_copy_after;
  sim_fail_init fail_init;
  bool no_suballocator;
  bool kernels;            /* register native kernels (kernels=1, the default) */
  int32_t kernel_priority; /* their priority */
  bool log_kernel_states;  /* log each kernel state made and destroyed (ABI 1.5), at info */
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
  int64_t reached_ns; /* CLOCK_MONOTONIC when the worker reached it (set with `state`) */
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
  SIM_OP_KERNEL,
} sim_op_kind;

/* Native kernels (ABI 1.1). Tensors have at most SIM_MAX_RANK dimensions (the host's limit). */
#define SIM_MAX_RANK 8

typedef enum sim_kernel_id { SIM_K_ADD, SIM_K_MUL, SIM_K_MATMUL, SIM_K_REDUCE_SUM } sim_kernel_id;

/* A tensor of a queued kernel, captured by value at enqueue time (the host's shape arrays are
 * only valid during compute). */
typedef struct sim_ktensor {
  int32_t rank;
  int64_t shape[SIM_MAX_RANK];
  int64_t count; /* elements */
  dpp_addr_t data;
  uint64_t bytes;
} sim_ktensor;

/* What a queued kernel runs: everything by value. */
typedef struct sim_kjob {
  sim_kernel_id id;
  const char *op; /* static string, for messages */
  int32_t dtype;
  int nin;
  sim_ktensor in[2];
  sim_ktensor out;
  bool transpose_a, transpose_b;   /* MatMul */
  bool reduced[SIM_MAX_RANK];      /* ReduceSum: the input's reduced axes */
  uint32_t frees; /* see sim_kqueued */
} sim_kjob;

/* A kernel as it waits in a queue: a sim_kjob packed so that, with its slot's sequence number,
 * an elementwise kernel of rank <= 1 fits one cache line, which the launch writes and the
 * worker reads (each line costs a transfer between their cores). Shapes follow one another,
 * only up to the ranks used; an elementwise kernel's output shape is left out (the worker
 * broadcasts the inputs' again); host addresses are not queued (the worker computes them, or
 * translates again if something was freed since: see `frees`). Packed by sim_kpack, unpacked
 * by the worker (sim_kunpack). */
typedef struct sim_kqueued {
  uint8_t kind;  /* SIM_OP_KERNEL: the op's kind (see sim_op) */
  uint8_t id;    /* sim_kernel_id */
  uint8_t dtype; /* DPP_DTYPE_* */
  uint8_t flags; /* SIM_KQ_* */
  uint8_t rank[3]; /* in[0], in[1], out */
  uint8_t reduced; /* ReduceSum: bit r set when the input's axis r is reduced */
  /* The low 32 bits of the device's count of frees when the addresses were checked: equal at
   * run time means nothing was freed since (2^32 frees in between would go unnoticed). */
  uint32_t frees;
  dpp_addr_t data[3];
  int64_t dims[3 * SIM_MAX_RANK]; /* in[0]'s, in[1]'s, then out's unless elementwise */
} sim_kqueued;

#define SIM_KQ_TRANSPOSE_A 1u
#define SIM_KQ_TRANSPOSE_B 2u

/* A queued op: its kind first in every form (a union of structs with that common first
 * member). */
typedef union sim_op {
  uint8_t kind; /* sim_op_kind */
  struct {      /* every kind but SIM_OP_KERNEL */
    uint8_t kind_;
    bool inject_fail; /* decided at enqueue time (fail_copy_after) */
    uint8_t value;
    dpp_addr_t dst, src;
    void *host_dst;
    const void *host_src;
    uint64_t size;
    dpp_host_fn fn;
    void *arg;
    sim_marker *marker;
    uint64_t copy_number;
  };
  sim_kqueued kernel; /* SIM_OP_KERNEL: only its first sim_kqueued_size() bytes are set */
} sim_op;

/* An op on a stream's overflow list (see sim_push). */
typedef struct sim_overflow_op {
  struct sim_overflow_op *next;
  sim_op op;
} sim_overflow_op;

/* The bytes of an op that are copied into a queue: the fields of the other kinds (for a kernel,
 * see sim_kqueued_size). */
#define SIM_OP_HEAD_SIZE (offsetof(sim_op, copy_number) + sizeof(uint64_t))

/* True for the kernels whose output shape is the broadcast of their inputs'. */
static inline bool sim_kernel_elementwise(unsigned id) {
  return id == SIM_K_ADD || id == SIM_K_MUL;
}

/* The bytes of a kernel op that are copied into a queue. */
static inline size_t sim_kqueued_size(const sim_kqueued *q) {
  size_t dims = (size_t)q->rank[0] + q->rank[1] + (sim_kernel_elementwise(q->id) ? 0 : q->rank[2]);
  return offsetof(sim_kqueued, dims) + sizeof(int64_t) * dims;
}

/* One entry of a stream's ring (see "Launch overhead"): `seq` is the ring position the slot
 * is free for, or that position + 1 once an op was published there. */
typedef struct sim_slot {
  _Alignas(64) _Atomic uint64_t seq;
  sim_op op;
} sim_slot;
/* The bytes of an op in its slot's first cache line. */
#define SIM_SLOT_FIRST_LINE (64 - offsetof(sim_slot, op))
_Static_assert(offsetof(sim_kqueued, dims) + 2 * sizeof(int64_t) <= SIM_SLOT_FIRST_LINE,
               "an elementwise kernel of rank 1 fits its slot's first cache line");
_Static_assert(sizeof(sim_slot) >= 128, "a slot has a second line (prefetched in sim_push)");

typedef enum sim_worker_state {
  SIM_WORKER_BUSY,   /* running ops, polling, or about to look at the ring: never signalled */
  SIM_WORKER_DOZING, /* waiting at most SIM_DOZE_US: signal only if needed at once */
  SIM_WORKER_ASLEEP, /* waiting until signalled */
} sim_worker_state;

typedef struct sim_stream {
  uint32_t magic;
  struct sim_device *dev;
  struct sim_stream *next; /* in the device's list (device mutex) */
  int refs;                /* device mutex: 1 for the list, +1 per synchronize_all in progress */
  bool is_default;
  unsigned id;
  pthread_t thread;
  bool thread_started;
  /* Wake-ups, errors and stopping, under mu. */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t done_cv;
  bool quit;
  _Atomic bool stopping; /* `quit`, for a polling worker */
  dpp_status_t err; /* the first error met since the last synchronize */
  char errmsg[SIM_MSG_MAX];
  /* The producers' side, under plock (which the worker takes only to take the overflow list):
   * a cache line that only enqueuing threads write. */
  _Alignas(64) _Atomic bool plock; /* see sim_plock */
  uint64_t tail;                          /* the ring position the next op goes to */
  sim_overflow_op *overflow_head, *overflow_tail; /* ops that found the ring full, in order (malloc'd) */
  _Atomic uint64_t submitted;             /* ops enqueued so far (written under plock) */
  /* Read by every enqueue; written when the worker dozes, sleeps or is woken, and when an op
   * goes to the overflow list. */
  _Alignas(64) _Atomic int state; /* sim_worker_state; changed under mu */
  _Atomic bool overflow_pending;  /* the overflow list is not empty */
  /* Written by the worker after every op. */
  _Alignas(64) _Atomic uint64_t completed; /* written by the worker alone */
  /* The smallest `completed` a synchronize waits for (UINT64_MAX: none); changed under mu. */
  _Atomic uint64_t wake_at;
  sim_slot ring[SIM_RING];
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
  _Atomic uint64_t live_states; /* kernel states (ABI 1.5) made and not destroyed yet */
  _Atomic uint64_t frees; /* frees of arena blocks so far (changed under the device mutex) */
  /* Streams destroyed so far (changed under the device mutex): a launch memo that names a
   * stream holds while this is unchanged (see sim_launch_memo). */
  _Atomic uint64_t streams_gone;
  uint64_t serial; /* unique among the devices of this process, for the launch memos */

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

/* CLOCK_MONOTONIC in nanoseconds: the device's clock (event times) and the pollers'. */
static int64_t sim_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
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
  atomic_fetch_add(&d->frees, 1); /* translations made before this may no longer hold */
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

/* Allocations a thread found live lately, so that its next call on one of them skips the
 * device mutex: an entry [lo, lo + len), as the host addresses it, holds while its device
 * (`serial`: a device created at the same address later is another) has freed nothing since
 * (`gen`, the device's `frees` then: no block is freed or moved before that count moves). The
 * host keeps an allocation alive while it uses it. Used by synchronous copies and memsets
 * (sim_xlate_hit) and by kernel launches (sim_launch_memo). */
typedef struct sim_block_memo {
  const sim_device *dev;
  uint64_t serial;
  struct {
    dpp_addr_t lo;
    uint64_t len;
    uint64_t gen;
  } mem[SIM_TMEMO];
  unsigned next;
} sim_block_memo;

/* True when entry `e` of `m` holds [addr, addr + size) at the count of frees `gen`. */
static inline bool sim_block_entry_holds(const sim_block_memo *m, unsigned e, uint64_t gen, dpp_addr_t addr,
                                         uint64_t size) {
  uint64_t at = addr - m->mem[e].lo; /* wraps (huge) below lo */
  return m->mem[e].gen == gen && at < m->mem[e].len && size <= m->mem[e].len - at;
}

/* The entry of `m` that holds [addr, addr + size) at the count of frees `gen`, looking at entry
 * `first` first; -1 when none does. `m` is the memo of the device `addr` is of. */
static inline int sim_block_memo_find(const sim_block_memo *m, uint64_t gen, dpp_addr_t addr, uint64_t size,
                                      unsigned first) {
  if (sim_block_entry_holds(m, first % SIM_TMEMO, gen, addr, size)) {
    return (int)(first % SIM_TMEMO);
  }
  for (unsigned e = 0; e < SIM_TMEMO; e++) {
    if (sim_block_entry_holds(m, e, gen, addr, size)) {
      return (int)e;
    }
  }
  return -1;
}

/* True when `m` knows [addr, addr + size) as live on `d` at the count of frees `gen`. */
static bool sim_block_memo_knows(const sim_block_memo *m, const sim_device *d, uint64_t gen, dpp_addr_t addr,
                                 uint64_t size) {
  return m->dev == d && m->serial == d->serial && sim_block_memo_find(m, gen, addr, size, 0) >= 0;
}

/* Makes `m` the memo of `d`: emptied first when it was another device's. */
static void sim_block_memo_take(sim_block_memo *m, const sim_device *d) {
  if (m->dev != d || m->serial != d->serial) {
    memset(m, 0, sizeof *m);
    for (int e = 0; e < SIM_TMEMO; e++) {
      m->mem[e].gen = UINT64_MAX; /* never a count of frees: empty */
    }
    m->dev = d;
    m->serial = d->serial;
  }
}

/* Device mutex held; `addr` just passed sim_translate, `gen` is the device's `frees` now.
 * Notes its allocation in `m`; the entry it went to. */
static unsigned sim_block_memo_note(sim_block_memo *m, const sim_device *d, dpp_addr_t addr, uint64_t gen) {
  sim_block_memo_take(m, d);
  const sim_block *b = &d->blocks[sim_block_at(d, addr - d->base)];
  unsigned e = m->next++ % SIM_TMEMO;
  m->mem[e].lo = d->base + b->off;
  m->mem[e].len = b->req;
  m->mem[e].gen = gen;
  return e;
}

/* The allocations this thread's synchronous copies and memsets found live. */
static _Thread_local sim_block_memo sim_thread_xlate;

#if defined(__GNUC__)
__attribute__((noinline))
#endif
static sim_block_memo *sim_xlate_get(void) {
  return &sim_thread_xlate;
}

/* No lock held. The host address of [addr, addr + size) from this thread's memo, as
 * sim_translate would give it; false when the memo cannot tell (then translate under the
 * mutex and sim_xlate_note). */
static bool sim_xlate_hit(const sim_device *d, dpp_addr_t addr, uint64_t size, unsigned char **out) {
  uint64_t gen = atomic_load_explicit(&d->frees, memory_order_acquire);
  if (!sim_block_memo_knows(sim_xlate_get(), d, gen, addr, size)) {
    return false;
  }
  *out = d->arena + (addr - d->base);
  return true;
}

/* Device mutex held; `addr` just passed sim_translate. Notes its allocation in the memo. */
static void sim_xlate_note(const sim_device *d, dpp_addr_t addr) {
  uint64_t gen = atomic_load_explicit(&d->frees, memory_order_relaxed); /* stable: mutex held */
  sim_block_memo_note(sim_xlate_get(), d, addr, gen);
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

static void sim_run_kernel(sim_device *d, const sim_kjob *j, dpp_status_t *st, char *msg);
static void sim_kunpack(const sim_kqueued *q, sim_kjob *j);

static void sim_run_op(sim_stream *s, sim_op *op, dpp_status_t *st, char *msg) {
  sim_device *d = s->dev;
  static const char *const names[] = {"memcpy_htod_async", "memcpy_dtoh_async", "memcpy_dtod_async",
                                      "memset_async", "host_callback", "mark", "wait", "kernel"};
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
    /* The time the stream reached the mark: after the latency of the work before it. */
    const int64_t reached_ns = sim_now_ns();
    dpp_status_t err;
    char errmsg[SIM_MSG_MAX];
    pthread_mutex_lock(&s->mu);
    err = s->err;
    if (err != DPP_OK) {
      memcpy(errmsg, s->errmsg, sizeof errmsg);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&d->mu);
    op->marker->reached_ns = reached_ns;
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
  case SIM_OP_KERNEL: {
    sim_kjob job;
    sim_kunpack(&op->kernel, &job);
    sim_run_kernel(d, &job, st, msg);
    return;
  }
  }
}

/* The clock of work_cv's timed waits (macOS has no pthread_condattr_setclock). */
#if defined(__APPLE__)
#define SIM_CV_CLOCK CLOCK_REALTIME
#else
#define SIM_CV_CLOCK CLOCK_MONOTONIC
#endif

/* Now plus `us` on SIM_CV_CLOCK. */
static struct timespec sim_deadline_us(uint64_t us) {
  struct timespec t;
  clock_gettime(SIM_CV_CLOCK, &t);
  uint64_t ns = (uint64_t)t.tv_nsec + us * 1000;
  t.tv_sec += (time_t)(ns / 1000000000);
  t.tv_nsec = (long)(ns % 1000000000);
  return t;
}

/* A pause for a polling loop. */
static inline void sim_cpu_relax(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Asks for the cache line at `p` in a state that allows writing (PREFETCHW: a no-op on x86
 * processors without it; compilers emit it for __builtin_prefetch only when told the target
 * has it). */
static inline void sim_prefetch_for_write(const void *p) {
#if defined(__GNUC__) && defined(__x86_64__)
  __asm__ __volatile__("prefetchw %0" : : "m"(*(const volatile char *)p));
#elif defined(__GNUC__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

/* The producers' lock: held for a few dozen instructions (an enqueue's tail and slot, or the
 * worker taking the overflow list), never across anything that blocks, so a spinlock: one
 * atomic exchange to take it and a plain store to give it back, where a mutex costs two
 * read-modify-writes and two calls on every enqueue. A thread that finds it taken for long
 * (its holder was preempted) yields its core. */
static inline void sim_plock(sim_stream *s) {
  while (atomic_exchange_explicit(&s->plock, true, memory_order_acquire)) {
    for (unsigned spins = 1; atomic_load_explicit(&s->plock, memory_order_relaxed); spins++) {
      if (spins % 64 == 0) {
        sched_yield();
      } else {
        sim_cpu_relax();
      }
    }
  }
}

static inline void sim_punlock(sim_stream *s) {
  atomic_store_explicit(&s->plock, false, memory_order_release);
}

/* Back-pressure, as a GPU driver's full push buffer: a kernel launch that finds the ring full
 * waits up to SIM_FULL_WAIT_NS for the worker to free the slot at `pos`, rather than going to
 * the overflow list at once (an allocation per op, which the worker then frees: slower for both,
 * so a host that got ahead once would stay there). Only kernels, which are enqueued with no SIM
 * lock but `plock` held (the worker takes `plock` only for a non-empty overflow list, and this
 * waits only while it is empty), and never on the stream's own worker (a host callback that
 * launches): the worker is then free to drain the ring. After the bound the op spills as before,
 * so the wait never turns into a hang (e.g. when a host callback the worker runs blocks). */
static void sim_wait_for_slot(sim_stream *s, sim_slot *slot, uint64_t pos) {
  if (atomic_load_explicit(&slot->seq, memory_order_acquire) == pos || pthread_equal(pthread_self(), s->thread)) {
    return;
  }
  int64_t start = sim_now_ns();
  for (unsigned spins = 1; atomic_load_explicit(&slot->seq, memory_order_acquire) != pos; spins++) {
    sim_cpu_relax();
    if (spins % 64 == 0 && sim_now_ns() - start >= SIM_FULL_WAIT_NS) {
      return;
    }
  }
}

/* True when the op at ring position `pos` was published. */
static inline bool sim_published(sim_stream *s, uint64_t pos) {
  return atomic_load_explicit(&s->ring[pos & SIM_RING_MASK].seq, memory_order_acquire) == pos + 1;
}

/* True when the worker at ring position `pos` has an op to run. Sequentially consistent: see
 * sim_idle and sim_push. */
static inline bool sim_has_work(sim_stream *s, uint64_t pos) {
  return atomic_load(&s->ring[pos & SIM_RING_MASK].seq) == pos + 1 || atomic_load(&s->overflow_pending);
}

/* Whether the op just enqueued must wake the worker now: a sleeping one always, a dozing one
 * for an event mark or wait (someone may block on those) or once SIM_WAKE_BATCH ops wait. */
static bool sim_needs_wake(sim_stream *s, bool urgent) {
  int state = atomic_load(&s->state);
  return state == SIM_WORKER_ASLEEP ||
         (state == SIM_WORKER_DOZING &&
          (urgent || atomic_load(&s->submitted) - atomic_load(&s->completed) >= SIM_WAKE_BATCH));
}

/* Enqueues a copy of the first `size` bytes of `op` (SIM_OP_HEAD_SIZE, or sim_kqueued_size for a
 * kernel) on `s`, in FIFO order with every other enqueue. When the ring is full the op goes to
 * the overflow list, which the worker runs once it has drained the ring; only a kernel launch
 * first waits a little for a slot (sim_wait_for_slot), so an enqueue never waits long for the
 * worker. False only when there is no host memory for an overflow op. The caller keeps `s` alive
 * (device mutex held with `s` in the device's list, or a launch memo: see sim_launch_memo). */
static bool sim_push(sim_stream *s, const sim_op *op, size_t size) {
  bool urgent = op->kind == SIM_OP_MARK || op->kind == SIM_OP_WAIT;
  sim_plock(s);
  uint64_t pos = s->tail;
  sim_slot *slot = &s->ring[pos & SIM_RING_MASK];
  if (op->kind == SIM_OP_KERNEL && !s->overflow_head) {
    sim_wait_for_slot(s, slot, pos);
  }
  if (!s->overflow_head && atomic_load_explicit(&slot->seq, memory_order_acquire) == pos) {
    if (size <= SIM_SLOT_FIRST_LINE) {
      /* A constant size: a couple of vector moves instead of a string copy (`op` is a whole
       * sim_op, so the bytes past `size` are there to read). */
      memcpy(&slot->op, op, SIM_SLOT_FIRST_LINE);
    } else {
      memcpy(&slot->op, op, size);
    }
    s->tail = pos + 1;
    /* Publishes the op. An exchange, so that the load of `state` below cannot pass it (the
     * worker stores `state` before it looks at the ring for the last time: one of the two
     * sees the other's store). */
    atomic_exchange(&slot->seq, pos + 1);
    /* Lines enqueues will write soon, fetched for writing now so that those enqueues do not
     * wait for them (the worker wrote each slot's first line when it freed it, a ring ago):
     * the next slot's second line (a copy's or a larger kernel's), and the first line of the
     * slot SIM_PREFETCH_AHEAD further on — not the next one's, which a worker that caught up
     * looks at while it waits for it. */
    const char *next = (const char *)&s->ring[(pos + 1) & SIM_RING_MASK];
    sim_prefetch_for_write(next + 64);
    sim_prefetch_for_write(&s->ring[(pos + SIM_PREFETCH_AHEAD) & SIM_RING_MASK]);
  } else {
    sim_overflow_op *copy = (sim_overflow_op *)malloc(sizeof *copy);
    if (!copy) {
      sim_punlock(s);
      return false;
    }
    memcpy(&copy->op, op, size);
    copy->next = NULL;
    if (s->overflow_tail) {
      s->overflow_tail->next = copy;
    } else {
      s->overflow_head = copy;
    }
    s->overflow_tail = copy;
    atomic_store(&s->overflow_pending, true); /* before the load of `state`, as above */
  }
  atomic_store_explicit(&s->submitted, atomic_load_explicit(&s->submitted, memory_order_relaxed) + 1,
                        memory_order_release);
  sim_punlock(s);
  /* Without the mutex first (a dozing worker this does not wake looks at the ring again
   * before it sleeps), then again under it, where the worker changes its state. */
  if (sim_needs_wake(s, urgent)) {
    pthread_mutex_lock(&s->mu);
    if (sim_needs_wake(s, urgent)) {
      atomic_store(&s->state, SIM_WORKER_BUSY);
      pthread_cond_signal(&s->work_cv);
    }
    pthread_mutex_unlock(&s->mu);
  }
  return true;
}

/* No lock held. Waits up to SIM_POLL_US for an op at `pos` (or a stop), looking at the ring
 * every SIM_POLL_LOOK_NS only: each look takes the line the enqueuer writes next away from its
 * cache, so looking less often costs the enqueuer less, and the worker finds several ops at
 * once. True when work came. */
static bool sim_poll(sim_stream *s, uint64_t pos) {
  int64_t start = sim_now_ns(), looked = start;
  for (;;) {
#if SIM_POLL_YIELD
    sched_yield(); /* a thread waiting for this core (the host's, on a busy machine) runs */
#else
    for (int k = 0; k < SIM_POLL_PAUSES; k++) {
      sim_cpu_relax();
    }
#endif
    int64_t now = sim_now_ns();
    if (now - looked < SIM_POLL_LOOK_NS) {
      continue;
    }
    looked = now;
    if (atomic_load_explicit(&s->stopping, memory_order_relaxed)) {
      return false;
    }
    if (sim_published(s, pos) || atomic_load_explicit(&s->overflow_pending, memory_order_acquire)) {
      return true;
    }
    if (now - start >= (int64_t)SIM_POLL_US * 1000) {
      return false;
    }
  }
}

/* The worker found nothing at `pos`: polls (unless it simulates latency), dozes, then sleeps
 * until signalled. True when the stream stops with nothing left to run. */
static bool sim_idle(sim_stream *s, uint64_t pos) {
  if (SIM_POLL_US > 0 && s->dev->latency_us == 0 && sim_poll(s, pos)) {
    return false;
  }
  bool stop = false;
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  struct timespec until = sim_deadline_us(SIM_DOZE_US);
  atomic_store(&s->state, SIM_WORKER_DOZING);
  for (;;) {
    /* After the store of `state` (sequentially consistent, like the publishing exchange in
     * sim_push): an op this misses sees the new state, and its enqueuer decides to wake. */
    if (sim_has_work(s, pos)) {
      break;
    }
    if (s->quit) {
      stop = true;
      break;
    }
    int state = atomic_load(&s->state);
    if (state == SIM_WORKER_BUSY) {
      /* Woken with nothing to run (every waker publishes work first, so this is only a
       * safeguard): doze again. */
      until = sim_deadline_us(SIM_DOZE_US);
      rc = 0;
      atomic_store(&s->state, SIM_WORKER_DOZING);
    } else if (state == SIM_WORKER_DOZING && rc == ETIMEDOUT) {
      atomic_store(&s->state, SIM_WORKER_ASLEEP); /* and look at the ring once more */
    } else if (state == SIM_WORKER_DOZING) {
      rc = pthread_cond_timedwait(&s->work_cv, &s->mu, &until);
    } else {
      pthread_cond_wait(&s->work_cv, &s->mu);
    }
  }
  atomic_store(&s->state, SIM_WORKER_BUSY);
  pthread_mutex_unlock(&s->mu);
  return stop;
}

/* Runs `op`, notes its error, counts it done and wakes a synchronize waiting for it. */
static void sim_complete(sim_stream *s, sim_op *op, uint64_t *done, char *msg) {
  dpp_status_t st = DPP_OK;
  msg[0] = '\0';
  sim_run_op(s, op, &st, msg);
  if (st != DPP_OK) {
    /* Before the op counts as done: a synchronize that sees it done sees its error, and so
     * does a later MARK of this stream. */
    pthread_mutex_lock(&s->mu);
    if (s->err == DPP_OK) {
      s->err = st;
      memcpy(s->errmsg, msg, SIM_MSG_MAX);
    }
    pthread_mutex_unlock(&s->mu);
  }
  /* Sequentially consistent, with the loads of `wake_at` here and of `completed` in
   * sim_stream_wait (which stores `wake_at` first): either the waiter sees this count or this
   * thread sees its target and wakes it under the mutex. Woken waiters whose target is further
   * set `wake_at` again. */
  atomic_store(&s->completed, ++*done);
  if (*done >= atomic_load(&s->wake_at)) {
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->wake_at, UINT64_MAX);
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
  }
}

static void *sim_worker(void *arg) {
  sim_stream *s = (sim_stream *)arg;
  char msg[SIM_MSG_MAX];
  uint64_t pos = 0;  /* the ring position of the next op */
  uint64_t done = 0; /* this thread alone writes s->completed */
  for (;;) {
    sim_slot *slot = &s->ring[pos & SIM_RING_MASK];
    if (atomic_load_explicit(&slot->seq, memory_order_acquire) == pos + 1) {
      sim_complete(s, &slot->op, &done, msg); /* in place: the slot stays taken until it ran */
      atomic_store_explicit(&slot->seq, pos + SIM_RING, memory_order_release);
      pos++;
      continue;
    }
    if (atomic_load_explicit(&s->overflow_pending, memory_order_acquire)) {
      /* The ring is drained, and every op in the list was enqueued after what it held and
       * before what it holds next (an enqueue uses the ring only while the list is empty). */
      sim_plock(s);
      sim_overflow_op *op = s->overflow_head;
      s->overflow_head = s->overflow_tail = NULL;
      atomic_store(&s->overflow_pending, false);
      sim_punlock(s);
      while (op) {
        sim_overflow_op *next = op->next;
        sim_complete(s, &op->op, &done, msg);
        free(op);
        op = next;
      }
      continue;
    }
    if (sim_idle(s, pos)) {
      break;
    }
  }
  return NULL;
}

static sim_stream *sim_stream_new(sim_device *d, bool is_default) {
  /* Aligned as the struct says (calloc does not promise 64 bytes). */
  sim_stream *s = (sim_stream *)aligned_alloc(_Alignof(sim_stream), sizeof *s);
  if (!s) {
    return NULL;
  }
  memset(s, 0, sizeof *s);
  s->magic = SIM_MAGIC_STREAM;
  s->dev = d;
  s->refs = 1;
  s->is_default = is_default;
  for (uint64_t i = 0; i < SIM_RING; i++) {
    atomic_init(&s->ring[i].seq, i);
  }
  atomic_init(&s->submitted, 0);
  atomic_init(&s->completed, 0);
  atomic_init(&s->state, SIM_WORKER_BUSY);
  atomic_init(&s->overflow_pending, false);
  atomic_init(&s->stopping, false);
  atomic_init(&s->wake_at, UINT64_MAX);
  atomic_init(&s->plock, false);
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
#if !defined(__APPLE__)
  pthread_condattr_setclock(&attr, SIM_CV_CLOCK);
#endif
  pthread_cond_init(&s->work_cv, &attr);
  pthread_condattr_destroy(&attr);
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

/* The worker has stopped (it drains the ring and the overflow list first). */
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

/* Device mutex held: takes the stream out of the device's list (and out of every launch
 * memo). */
static void sim_stream_unlink(sim_device *d, sim_stream *s) {
  atomic_fetch_add(&d->streams_gone, 1);
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
  atomic_store_explicit(&s->stopping, true, memory_order_relaxed);
  atomic_store(&s->state, SIM_WORKER_BUSY);
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
  uint64_t target = atomic_load_explicit(&s->submitted, memory_order_acquire);
  if (atomic_load(&s->completed) < target) {
    if (atomic_load(&s->state) != SIM_WORKER_BUSY) { /* ops left to the doze's end */
      atomic_store(&s->state, SIM_WORKER_BUSY);
      pthread_cond_signal(&s->work_cv);
    }
    for (;;) {
      if (target < atomic_load(&s->wake_at)) {
        atomic_store(&s->wake_at, target); /* before the next load: see sim_complete */
      }
      if (atomic_load(&s->completed) >= target) {
        break;
      }
      pthread_cond_wait(&s->done_cv, &s->mu);
    }
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
  if (d->alloc_calls == d->plat->opt.fail_alloc_at) {
    sim_devmsg(d, msg, "allocate",
               "injected allocation failure (allocation #%" PRIu64 " of %" PRIu64 " bytes, fail_alloc_at=%" PRIu64 ")",
               d->alloc_calls, size, d->plat->opt.fail_alloc_at);
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

/* The checks of a synchronous copy or memset: translates the `count` device ranges `addr[i]`
 * + `size` (named `what[i]` in messages) into `out[i]` — from this thread's memo when it can,
 * else under the device mutex, noting them there — and counts a copy against fail_copy_after
 * (which needs the mutex: while failures are injected, copies skip the memo). DPP_OK, or the
 * failure with its message set. */
static dpp_status_t sim_sync_ranges(sim_device *d, const char *fn, bool is_copy, int count, const char *const *what,
                                    const dpp_addr_t *addr, unsigned char **out, uint64_t size) {
  char msg[SIM_MSG_MAX];
  bool known = !(is_copy && d->plat->opt.fail_copy);
  for (int i = 0; i < count && known; i++) {
    known = sim_xlate_hit(d, addr[i], size, &out[i]);
  }
  if (known) {
    return DPP_OK;
  }
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < count; i++) {
    if (!sim_translate(d, fn, what[i], addr[i], size, &out[i], msg)) {
      pthread_mutex_unlock(&d->mu);
      return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
    }
  }
  for (int i = 0; i < count; i++) {
    sim_xlate_note(d, addr[i]);
  }
  uint64_t n = 0;
  bool fail = is_copy && sim_count_copy(d, &n);
  pthread_mutex_unlock(&d->mu);
  if (fail) {
    sim_injected_copy_msg(d, msg, fn, n);
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  return DPP_OK;
}

static dpp_status_t sim_memcpy_htod(void *device, dpp_addr_t dst, const void *src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *dp = NULL;
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
  static const char *const what[] = {"dst"};
  dpp_status_t st = sim_sync_ranges(d, "memcpy_htod", true, 1, what, &dst, &dp, size);
  if (st != DPP_OK) {
    return st;
  }
  memcpy(dp, src, (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memcpy_dtoh(void *device, void *dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  unsigned char *sp = NULL;
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
  static const char *const what[] = {"src"};
  dpp_status_t st = sim_sync_ranges(d, "memcpy_dtoh", true, 1, what, &src, &sp, size);
  if (st != DPP_OK) {
    return st;
  }
  memcpy(dst, sp, (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memcpy_dtod(void *device, dpp_addr_t dst, dpp_addr_t src, uint64_t size) {
  sim_device *d = sim_dev(device);
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  static const char *const what[] = {"dst", "src"};
  const dpp_addr_t addr[] = {dst, src};
  unsigned char *p[2] = {NULL, NULL};
  dpp_status_t st = sim_sync_ranges(d, "memcpy_dtod", true, 2, what, addr, p, size);
  if (st != DPP_OK) {
    return st;
  }
  memmove(p[0], p[1], (size_t)size);
  return DPP_OK;
}

static dpp_status_t sim_memset(void *device, dpp_addr_t dst, uint8_t value, uint64_t size) {
  sim_device *d = sim_dev(device);
  unsigned char *dp = NULL;
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (size == 0) {
    return DPP_OK;
  }
  static const char *const what[] = {"dst"};
  dpp_status_t st = sim_sync_ranges(d, "memset", false, 1, what, &dst, &dp, size);
  if (st != DPP_OK) {
    return st;
  }
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

/* Validates and enqueues (a copy of) `op`. */
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
  } else if ((checks & SIM_CHECK_DST) && !sim_translate(d, fn, "dst", op->dst, op->size, &unused, msg)) {
    st = DPP_INVALID_ARGUMENT;
  } else if ((checks & SIM_CHECK_SRC) && !sim_translate(d, fn, "src", op->src, op->size, &unused, msg)) {
    st = DPP_INVALID_ARGUMENT;
  } else {
    if (checks & SIM_COUNT_COPY) {
      op->inject_fail = sim_count_copy(d, &op->copy_number);
    }
    if (!sim_push(s, op, SIM_OP_HEAD_SIZE)) {
      sim_devmsg(d, msg, fn, "out of host memory");
      st = DPP_RESOURCE_EXHAUSTED;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return st == DPP_OK ? DPP_OK : sim_dev_fail(d, st, msg);
}

/* An op of `kind`, every other field zero. */
static sim_op sim_op_of(sim_op_kind kind) {
  sim_op op;
  memset(&op, 0, SIM_OP_HEAD_SIZE);
  op.kind = (uint8_t)kind;
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
  sim_op o = sim_op_of(SIM_OP_HTOD), *op = &o;
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
  sim_op o = sim_op_of(SIM_OP_DTOH), *op = &o;
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
  sim_op o = sim_op_of(SIM_OP_DTOD), *op = &o;
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
  sim_op o = sim_op_of(SIM_OP_MEMSET), *op = &o;
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
  sim_op o = sim_op_of(SIM_OP_CALLBACK), *op = &o;
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
  sim_marker *m = sim_marker_new(2); /* the MARK op's and the WAIT op's */
  if (!m) {
    sim_devmsg(d, msg, "stream_wait_stream", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_stream *o = sim_find_stream(d, other);
  if (!s || !o) {
    pthread_mutex_unlock(&d->mu);
    free(m);
    sim_devmsg(d, msg, "stream_wait_stream", "%s %p is not a live stream of this device", !s ? "stream" : "other",
               !s ? stream : other);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  if (s == o) {
    pthread_mutex_unlock(&d->mu);
    free(m);
    return DPP_OK;
  }
  sim_op mark = sim_op_of(SIM_OP_MARK), wait = sim_op_of(SIM_OP_WAIT);
  mark.marker = m;
  wait.marker = m;
  bool ok = sim_push(o, &mark, SIM_OP_HEAD_SIZE);
  if (!ok) {
    free(m);
  } else if (!sim_push(s, &wait, SIM_OP_HEAD_SIZE)) {
    ok = false;
    sim_marker_unref(m); /* the WAIT's reference; the queued MARK keeps its own */
  }
  pthread_mutex_unlock(&d->mu);
  if (!ok) {
    sim_devmsg(d, msg, "stream_wait_stream", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
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
  sim_marker *m = sim_marker_new(2); /* the event's and the MARK op's */
  if (!m) {
    sim_devmsg(d, msg, "record_event", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_event *e = sim_find_event(d, event);
  if (!s || !e) {
    pthread_mutex_unlock(&d->mu);
    free(m);
    sim_devmsg(d, msg, "record_event", "%s %p is not a live %s of this device", !s ? "stream" : "event",
               !s ? stream : event, !s ? "stream" : "event");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  sim_op op = sim_op_of(SIM_OP_MARK);
  op.marker = m;
  if (!sim_push(s, &op, SIM_OP_HEAD_SIZE)) {
    pthread_mutex_unlock(&d->mu);
    free(m);
    sim_devmsg(d, msg, "record_event", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  sim_marker_unref(e->marker);
  e->marker = m;
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
  pthread_mutex_lock(&d->mu);
  sim_stream *s = sim_find_stream(d, stream);
  sim_event *e = sim_find_event(d, event);
  if (!s || !e) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "stream_wait_event", "%s %p is not a live %s of this device", !s ? "stream" : "event",
               !s ? stream : event, !s ? "stream" : "event");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  if (!e->marker || e->marker->state != DPP_EVENT_PENDING) {
    /* Never recorded, or already reached: nothing to wait for. */
    pthread_mutex_unlock(&d->mu);
    return DPP_OK;
  }
  sim_op op = sim_op_of(SIM_OP_WAIT);
  op.marker = e->marker;
  if (!sim_push(s, &op, SIM_OP_HEAD_SIZE)) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "stream_wait_event", "out of host memory");
    return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);
  }
  e->marker->refs++; /* the WAIT op's (it runs only after this: the device mutex is held) */
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

/* Device mutex held. Why `m` (the latest record of event `handle`, named `which`) has no
 * time to give, into `msg`; DPP_OK when it was reached without an error. */
static dpp_status_t sim_event_reached(const sim_device *d, const sim_marker *m, const char *which, void *handle,
                                      char *msg) {
  if (!m) {
    sim_devmsg(d, msg, "event_elapsed_ns", "%s event %p was never recorded", which, handle);
    return DPP_FAILED_PRECONDITION;
  }
  if (m->state == DPP_EVENT_PENDING) {
    sim_devmsg(d, msg, "event_elapsed_ns", "%s event %p is still pending (its stream has not reached the record)",
               which, handle);
    return DPP_FAILED_PRECONDITION;
  }
  if (m->state == DPP_EVENT_ERROR) {
    sim_devmsg(d, msg, "event_elapsed_ns", "%s event %p reports an error: its stream failed before reaching it (%s)",
               which, handle, m->msg);
    return DPP_FAILED_PRECONDITION;
  }
  return DPP_OK;
}

/* ABI 1.4: the worker's clock from reaching `start`'s latest record to reaching `end`'s. The
 * events may be of different streams of the device (one clock for all its workers). */
static dpp_status_t sim_event_elapsed_ns(void *device, void *start, void *end, int64_t *out_ns) {
  sim_device *d = sim_dev(device);
  char msg[SIM_MSG_MAX];
  if (!d) {
    return DPP_INVALID_ARGUMENT;
  }
  if (!out_ns) {
    sim_devmsg(d, msg, "event_elapsed_ns", "out_ns is NULL");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&d->mu);
  sim_event *es = sim_find_event(d, start);
  sim_event *ee = sim_find_event(d, end);
  if (!es || !ee) {
    pthread_mutex_unlock(&d->mu);
    sim_devmsg(d, msg, "event_elapsed_ns", "%s %p is not a live event of this device", !es ? "start" : "end",
               !es ? start : end);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  dpp_status_t st = sim_event_reached(d, es->marker, "start", start, msg);
  if (st == DPP_OK) {
    st = sim_event_reached(d, ee->marker, "end", end, msg);
  }
  int64_t ns = st == DPP_OK ? ee->marker->reached_ns - es->marker->reached_ns : 0;
  pthread_mutex_unlock(&d->mu);
  if (st != DPP_OK) {
    return sim_dev_fail(d, st, msg);
  }
  *out_ns = ns;
  return DPP_OK;
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
    .event_elapsed_ns = sim_event_elapsed_ns,
};

/* ------------------------------------------------------------------------------------------ */
/* Native kernels (ABI 1.1)
 *
 * SIM implements part of the basis set on purpose (see README.md): Add, Mul, MatMul, ReduceSum.
 * A kernel's compute validates the context (counts, dtypes, shapes against the op's rules,
 * addresses inside live allocations, the stream), captures everything it needs by value in a
 * SIM_OP_KERNEL op and enqueues it on context->stream. The stream's worker runs it later (after
 * latency_us, like any data operation), translating the addresses again: memory freed in
 * between is a stream error, reported by the next synchronize. Elements are loaded and stored
 * with memcpy, so no alignment is assumed. */

static size_t sim_dtype_size(int32_t dtype) {
  switch (dtype) {
  case DPP_DTYPE_F32:
  case DPP_DTYPE_I32:
    return 4;
  case DPP_DTYPE_F64:
  case DPP_DTYPE_I64:
    return 8;
  case DPP_DTYPE_U8:
  case DPP_DTYPE_BOOL:
    return 1;
  default:
    return 0;
  }
}

static const char *sim_dtype_name(int32_t dtype) {
  switch (dtype) {
  case DPP_DTYPE_F32: return "f32";
  case DPP_DTYPE_F64: return "f64";
  case DPP_DTYPE_I32: return "i32";
  case DPP_DTYPE_I64: return "i64";
  case DPP_DTYPE_U8: return "u8";
  case DPP_DTYPE_BOOL: return "bool";
  default: return "an unknown dtype";
  }
}

/* "[2, 3]" into buf (truncated to n bytes). */
static const char *sim_fmt_shape(char *buf, size_t n, int rank, const int64_t *shape) {
  size_t at = 0;
  int w = snprintf(buf, n, "[");
  at = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < rank && at < n; i++) {
    w = snprintf(buf + at, n - at, "%s%" PRId64, i ? ", " : "", shape[i]);
    at += w > 0 ? (size_t)w : 0;
  }
  if (at < n) {
    snprintf(buf + at, n - at, "]");
  }
  return buf;
}

static bool sim_same_shape(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) {
    return false;
  }
  for (int i = 0; i < ra; i++) {
    if (a[i] != b[i]) {
      return false;
    }
  }
  return true;
}

/* NumPy broadcasting of two shapes; false when incompatible. */
static bool sim_broadcast(int ra, const int64_t *a, int rb, const int64_t *b, int *out_rank, int64_t *out) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - ra), ib = i - (r - rb);
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return false;
    }
  }
  *out_rank = r;
  return true;
}

/* Element strides of a row-major tensor of `rank` dims `shape` broadcast to `out_rank` dims:
 * aligned at the end, 0 along the dims it is broadcast over. */
static void sim_bcast_strides(int rank, const int64_t *shape, int out_rank, int64_t *strides) {
  int64_t st = 1;
  for (int i = out_rank - 1; i >= 0; i--) {
    int k = i - (out_rank - rank);
    if (k < 0) {
      strides[i] = 0;
      continue;
    }
    strides[i] = shape[k] == 1 ? 0 : st;
    st *= shape[k];
  }
}

#define SIM_LDST(SUF, T)                                                                                        \
  static inline T sim_ld_##SUF(const unsigned char *p, int64_t i) {                                            \
    T v;                                                                                                       \
    memcpy(&v, p + (size_t)i * sizeof(T), sizeof(T));                                                          \
    return v;                                                                                                  \
  }                                                                                                            \
  static inline void sim_st_##SUF(unsigned char *p, int64_t i, T v) {                                          \
    memcpy(p + (size_t)i * sizeof(T), &v, sizeof(T));                                                          \
  }
SIM_LDST(f32, float)
SIM_LDST(f64, double)
SIM_LDST(i32, int32_t)
SIM_LDST(i64, int64_t)
#undef SIM_LDST

/* Two's-complement wrapping without implementation-defined conversions. */
static inline int32_t sim_wrap32(uint32_t u) {
  return u <= (uint32_t)INT32_MAX ? (int32_t)u : (int32_t)(u - UINT32_C(0x80000000)) + INT32_MIN;
}
static inline int64_t sim_wrap64(uint64_t u) {
  return u <= (uint64_t)INT64_MAX ? (int64_t)u : (int64_t)(u - UINT64_C(0x8000000000000000)) + INT64_MIN;
}

static inline float sim_add_f32(float a, float b) { return a + b; }
static inline float sim_mul_f32(float a, float b) { return a * b; }
static inline double sim_add_f64(double a, double b) { return a + b; }
static inline double sim_mul_f64(double a, double b) { return a * b; }
static inline int32_t sim_add_i32(int32_t a, int32_t b) { return sim_wrap32((uint32_t)a + (uint32_t)b); }
static inline int32_t sim_mul_i32(int32_t a, int32_t b) { return sim_wrap32((uint32_t)a * (uint32_t)b); }
static inline int64_t sim_add_i64(int64_t a, int64_t b) { return sim_wrap64((uint64_t)a + (uint64_t)b); }
static inline int64_t sim_mul_i64(int64_t a, int64_t b) { return sim_wrap64((uint64_t)a * (uint64_t)b); }

/* z = FN(x, y) over the output's elements, the outer dims walked with an odometer. */
#define SIM_BINARY_LOOP(SUF, FN)                                                                               \
  do {                                                                                                         \
    for (int64_t row = 0; row < rows; row++) {                                                                 \
      for (int64_t k = 0; k < inner; k++) {                                                                    \
        sim_st_##SUF(z, zi++, FN(sim_ld_##SUF(x, ox + k * ix), sim_ld_##SUF(y, oy + k * iy)));                 \
      }                                                                                                        \
      for (int dd = R - 2; dd >= 0; dd--) {                                                                    \
        ox += sx[dd];                                                                                          \
        oy += sy[dd];                                                                                          \
        if (++idx[dd] < o->shape[dd]) {                                                                        \
          break;                                                                                               \
        }                                                                                                      \
        ox -= sx[dd] * o->shape[dd];                                                                           \
        oy -= sy[dd] * o->shape[dd];                                                                           \
        idx[dd] = 0;                                                                                           \
      }                                                                                                        \
    }                                                                                                          \
  } while (0)

/* z = EXPR(a[i], b[i]) when neither input is broadcast (the three share one element order):
 * in chunks through local arrays, a few instructions an element even in a build without
 * optimization, where the general loop's calls per element are what a small launch costs. */
#define SIM_FLAT_CHUNK 64
#define SIM_FLAT_LOOP(T, EXPR)                                                                                \
  do {                                                                                                         \
    T a[SIM_FLAT_CHUNK], b[SIM_FLAT_CHUNK];                                                                    \
    for (int64_t at = 0; at < n; at += SIM_FLAT_CHUNK) {                                                       \
      size_t m = (size_t)(n - at < SIM_FLAT_CHUNK ? n - at : SIM_FLAT_CHUNK), off = (size_t)at * sizeof(T);     \
      memcpy(a, x + off, m * sizeof(T));                                                                       \
      memcpy(b, y + off, m * sizeof(T));                                                                       \
      for (size_t i = 0; i < m; i++) {                                                                         \
        a[i] = EXPR;                                                                                           \
      }                                                                                                        \
      memcpy(z + off, a, m * sizeof(T));                                                                       \
    }                                                                                                          \
  } while (0)

static void sim_k_binary_flat(const sim_kjob *j, const unsigned char *x, const unsigned char *y, unsigned char *z) {
  int64_t n = j->out.count;
  bool mul = j->id == SIM_K_MUL;
  switch (j->dtype) {
  case DPP_DTYPE_F32:
    if (mul) {
      SIM_FLAT_LOOP(float, a[i] * b[i]);
    } else {
      SIM_FLAT_LOOP(float, a[i] + b[i]);
    }
    break;
  case DPP_DTYPE_F64:
    if (mul) {
      SIM_FLAT_LOOP(double, a[i] * b[i]);
    } else {
      SIM_FLAT_LOOP(double, a[i] + b[i]);
    }
    break;
  case DPP_DTYPE_I32:
    if (mul) {
      SIM_FLAT_LOOP(int32_t, sim_mul_i32(a[i], b[i]));
    } else {
      SIM_FLAT_LOOP(int32_t, sim_add_i32(a[i], b[i]));
    }
    break;
  case DPP_DTYPE_I64:
    if (mul) {
      SIM_FLAT_LOOP(int64_t, sim_mul_i64(a[i], b[i]));
    } else {
      SIM_FLAT_LOOP(int64_t, sim_add_i64(a[i], b[i]));
    }
    break;
  default:
    break; /* refused by compute */
  }
}
#undef SIM_FLAT_LOOP

static void sim_k_binary(const sim_kjob *j, const unsigned char *x, const unsigned char *y, unsigned char *z) {
  const sim_ktensor *o = &j->out;
  if (o->count == 0) {
    return;
  }
  if (j->in[0].count == o->count && j->in[1].count == o->count) {
    /* Nothing broadcast (a broadcast dimension would make the output larger). */
    sim_k_binary_flat(j, x, y, z);
    return;
  }
  int R = o->rank;
  int64_t sx[SIM_MAX_RANK] = {0}, sy[SIM_MAX_RANK] = {0}, idx[SIM_MAX_RANK] = {0};
  sim_bcast_strides(j->in[0].rank, j->in[0].shape, R, sx);
  sim_bcast_strides(j->in[1].rank, j->in[1].shape, R, sy);
  int64_t inner = R ? o->shape[R - 1] : 1, ix = R ? sx[R - 1] : 0, iy = R ? sy[R - 1] : 0;
  int64_t rows = o->count / inner, ox = 0, oy = 0, zi = 0;
  bool mul = j->id == SIM_K_MUL;
  switch (j->dtype) {
  case DPP_DTYPE_F32:
    if (mul) {
      SIM_BINARY_LOOP(f32, sim_mul_f32);
    } else {
      SIM_BINARY_LOOP(f32, sim_add_f32);
    }
    break;
  case DPP_DTYPE_F64:
    if (mul) {
      SIM_BINARY_LOOP(f64, sim_mul_f64);
    } else {
      SIM_BINARY_LOOP(f64, sim_add_f64);
    }
    break;
  case DPP_DTYPE_I32:
    if (mul) {
      SIM_BINARY_LOOP(i32, sim_mul_i32);
    } else {
      SIM_BINARY_LOOP(i32, sim_add_i32);
    }
    break;
  case DPP_DTYPE_I64:
    if (mul) {
      SIM_BINARY_LOOP(i64, sim_mul_i64);
    } else {
      SIM_BINARY_LOOP(i64, sim_add_i64);
    }
    break;
  default:
    break; /* refused by compute */
  }
}
#undef SIM_BINARY_LOOP

/* A plain triple loop per matrix of the batch, accumulating in double. */
#define SIM_MATMUL_LOOP(SUF, T)                                                                                \
  do {                                                                                                         \
    for (int64_t bi = 0; bi < nbatch; bi++) {                                                                  \
      for (int64_t i = 0; i < m; i++) {                                                                        \
        for (int64_t jn = 0; jn < n; jn++) {                                                                   \
          double acc = 0.0;                                                                                    \
          for (int64_t p = 0; p < k; p++) {                                                                    \
            acc += (double)sim_ld_##SUF(a, oa + i * ai + p * ap) * (double)sim_ld_##SUF(b, ob + p * bp + jn * bj); \
          }                                                                                                    \
          sim_st_##SUF(c, oc++, (T)acc);                                                                       \
        }                                                                                                      \
      }                                                                                                        \
      for (int dd = BR - 1; dd >= 0; dd--) {                                                                   \
        oa += sa[dd];                                                                                          \
        ob += sb[dd];                                                                                          \
        if (++idx[dd] < o->shape[dd]) {                                                                        \
          break;                                                                                               \
        }                                                                                                      \
        oa -= sa[dd] * o->shape[dd];                                                                           \
        ob -= sb[dd] * o->shape[dd];                                                                           \
        idx[dd] = 0;                                                                                           \
      }                                                                                                        \
    }                                                                                                          \
  } while (0)

static void sim_k_matmul(const sim_kjob *j, const unsigned char *a, const unsigned char *b, unsigned char *c) {
  const sim_ktensor *A = &j->in[0], *B = &j->in[1], *o = &j->out;
  if (o->count == 0) {
    return;
  }
  int ra = A->rank, rb = B->rank, BR = o->rank - 2;
  int64_t m = o->shape[BR], n = o->shape[BR + 1];
  int64_t k = j->transpose_a ? A->shape[ra - 2] : A->shape[ra - 1];
  /* A(i, p) = a[oa + i * ai + p * ap], B(p, j) = b[ob + p * bp + j * bj]. */
  int64_t ai = j->transpose_a ? 1 : k, ap = j->transpose_a ? m : 1;
  int64_t bp = j->transpose_b ? 1 : n, bj = j->transpose_b ? k : 1;
  int64_t sa[SIM_MAX_RANK] = {0}, sb[SIM_MAX_RANK] = {0}, idx[SIM_MAX_RANK] = {0};
  sim_bcast_strides(ra - 2, A->shape, BR, sa); /* in matrices */
  sim_bcast_strides(rb - 2, B->shape, BR, sb);
  int64_t nbatch = 1;
  for (int i = 0; i < BR; i++) {
    sa[i] *= m * k;
    sb[i] *= k * n;
    nbatch *= o->shape[i];
  }
  int64_t oa = 0, ob = 0, oc = 0;
  if (j->dtype == DPP_DTYPE_F32) {
    SIM_MATMUL_LOOP(f32, float);
  } else if (j->dtype == DPP_DTYPE_F64) {
    SIM_MATMUL_LOOP(f64, double);
  }
}
#undef SIM_MATMUL_LOOP

/* Neumaier's compensated sum (Kahan's, also right when the next term is the larger). */
typedef struct sim_fsum {
  double s, c;
} sim_fsum;

static inline double sim_abs(double v) {
  return v < 0 ? -v : v;
}

static inline void sim_fsum_add(sim_fsum *a, double v) {
  double t = a->s + v;
  if (sim_abs(a->s) >= sim_abs(v)) {
    a->c += (a->s - t) + v;
  } else {
    a->c += (v - t) + a->s;
  }
  a->s = t;
}

static inline double sim_fsum_get(const sim_fsum *a) {
  /* With an infinity or a NaN the compensation is NaN: the plain sum is the answer then. */
  return a->s - a->s == 0 ? a->s + a->c : a->s;
}

static void sim_k_reduce_sum(const sim_kjob *j, const unsigned char *x, unsigned char *y) {
  const sim_ktensor *in = &j->in[0];
  int r = in->rank, nk = 0, nr = 0;
  int64_t stride[SIM_MAX_RANK], kshape[SIM_MAX_RANK], kstr[SIM_MAX_RANK], rshape[SIM_MAX_RANK], rstr[SIM_MAX_RANK];
  int64_t st = 1, nout = 1, nred = 1;
  for (int i = r - 1; i >= 0; i--) {
    stride[i] = st;
    st *= in->shape[i];
  }
  for (int i = 0; i < r; i++) {
    if (j->reduced[i]) {
      rshape[nr] = in->shape[i];
      rstr[nr++] = stride[i];
      nred *= in->shape[i];
    } else {
      kshape[nk] = in->shape[i];
      kstr[nk++] = stride[i];
      nout *= in->shape[i];
    }
  }
  bool is_float = j->dtype == DPP_DTYPE_F32 || j->dtype == DPP_DTYPE_F64;
  int64_t kidx[SIM_MAX_RANK] = {0}, base = 0;
  for (int64_t o = 0; o < nout; o++) {
    int64_t ridx[SIM_MAX_RANK] = {0}, off = base;
    sim_fsum fs = {0.0, 0.0};
    uint64_t is = 0;
    for (int64_t t = 0; t < nred; t++) {
      switch (j->dtype) {
      case DPP_DTYPE_F32: sim_fsum_add(&fs, (double)sim_ld_f32(x, off)); break;
      case DPP_DTYPE_F64: sim_fsum_add(&fs, sim_ld_f64(x, off)); break;
      case DPP_DTYPE_I32: is += (uint64_t)(int64_t)sim_ld_i32(x, off); break;
      default: is += (uint64_t)sim_ld_i64(x, off); break;
      }
      for (int dd = nr - 1; dd >= 0; dd--) {
        off += rstr[dd];
        if (++ridx[dd] < rshape[dd]) {
          break;
        }
        off -= rstr[dd] * rshape[dd];
        ridx[dd] = 0;
      }
    }
    if (is_float) {
      double v = sim_fsum_get(&fs);
      if (j->dtype == DPP_DTYPE_F32) {
        sim_st_f32(y, o, (float)v);
      } else {
        sim_st_f64(y, o, v);
      }
    } else if (j->dtype == DPP_DTYPE_I32) {
      sim_st_i32(y, o, sim_wrap32((uint32_t)is));
    } else {
      sim_st_i64(y, o, sim_wrap64(is));
    }
    for (int dd = nk - 1; dd >= 0; dd--) {
      base += kstr[dd];
      if (++kidx[dd] < kshape[dd]) {
        break;
      }
      base -= kstr[dd] * kshape[dd];
      kidx[dd] = 0;
    }
  }
}

/* What SIM implements, and how. */
typedef struct sim_kernel_desc {
  const char *op;
  int nin;
  const char *in_names[2];
  const char *out_name;
  const int32_t *dtypes;
  size_t num_dtypes;
  /* For messages, spelled out so that no launch formats them: "kernel OP", "input 'NAME'",
   * "output 'NAME'". */
  const char *fn;
  const char *in_what[2];
  const char *out_what;
} sim_kernel_desc;

static const int32_t sim_numeric_dtypes[] = {DPP_DTYPE_F32, DPP_DTYPE_F64, DPP_DTYPE_I32, DPP_DTYPE_I64};
static const int32_t sim_float_dtypes[] = {DPP_DTYPE_F32, DPP_DTYPE_F64};

/* Indexed by sim_kernel_id. */
static const sim_kernel_desc sim_kernel_descs[] = {
    {"Add", 2, {"x", "y"}, "z", sim_numeric_dtypes, 4, "kernel Add", {"input 'x'", "input 'y'"}, "output 'z'"},
    {"Mul", 2, {"x", "y"}, "z", sim_numeric_dtypes, 4, "kernel Mul", {"input 'x'", "input 'y'"}, "output 'z'"},
    {"MatMul", 2, {"a", "b"}, "product", sim_float_dtypes, 2, "kernel MatMul", {"input 'a'", "input 'b'"},
     "output 'product'"},
    {"ReduceSum", 1, {"x", NULL}, "y", sim_numeric_dtypes, 4, "kernel ReduceSum", {"input 'x'", NULL}, "output 'y'"},
};

static void sim_run_kernel(sim_device *d, const sim_kjob *j, dpp_status_t *st, char *msg) {
  const sim_kernel_desc *k = &sim_kernel_descs[j->id];
  unsigned char *in[2] = {NULL, NULL}, *out = NULL;
  /* Checked at enqueue time; translated again if anything was freed since (the memory may
   * have been: the arena lives until destroy_device, which joins the workers first). */
  if ((uint32_t)atomic_load(&d->frees) == j->frees) {
    for (int i = 0; i < j->nin; i++) {
      in[i] = j->in[i].bytes ? d->arena + (j->in[i].data - d->base) : NULL;
    }
    out = j->out.bytes ? d->arena + (j->out.data - d->base) : NULL;
  } else {
    bool ok = true;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; ok && i < j->nin; i++) {
      if (j->in[i].bytes) {
        ok = sim_translate(d, k->fn, k->in_what[i], j->in[i].data, j->in[i].bytes, &in[i], msg);
      }
    }
    if (ok && j->out.bytes) {
      ok = sim_translate(d, k->fn, k->out_what, j->out.data, j->out.bytes, &out, msg);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok) {
      *st = DPP_INVALID_ARGUMENT;
      return;
    }
  }
  switch (j->id) {
  case SIM_K_ADD:
  case SIM_K_MUL:
    sim_k_binary(j, in[0], in[1], out);
    break;
  case SIM_K_MATMUL:
    sim_k_matmul(j, in[0], in[1], out);
    break;
  case SIM_K_REDUCE_SUM:
    sim_k_reduce_sum(j, in[0], out);
    break;
  }
}

/* True when a * b * c (all >= 0) fits in int64_t. */
static inline bool sim_mul_ok(int64_t a, int64_t b, int64_t c) {
#if defined(__GNUC__)
  int64_t ab, abc;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, &abc);
#else
  return b == 0 || c == 0 || a <= INT64_MAX / c / b;
#endif
}

/* Copies the host's tensor `t` into `out`, checking what SIM relies on. */
static bool sim_ktensor_read(const sim_device *d, const char *fn, const char *what, const dpp_tensor_t *t,
                             sim_ktensor *out, int32_t *dtype, char *msg) {
  char sh[160];
  if (t->struct_size < DPP_TENSOR_STRUCT_SIZE) {
    sim_devmsg(d, msg, fn, "%s: dpp_tensor_t.struct_size is %zu, smaller than the ABI 1.1 size %d", what,
               t->struct_size, DPP_TENSOR_STRUCT_SIZE);
    return false;
  }
  size_t es = sim_dtype_size(t->dtype);
  if (!es) {
    sim_devmsg(d, msg, fn, "%s has the unknown dtype %d", what, (int)t->dtype);
    return false;
  }
  if (t->rank < 0 || t->rank > SIM_MAX_RANK) {
    sim_devmsg(d, msg, fn, "%s has rank %d; SIM supports ranks 0 to %d", what, (int)t->rank, SIM_MAX_RANK);
    return false;
  }
  if (t->rank > 0 && !t->shape) {
    sim_devmsg(d, msg, fn, "%s has rank %d but its shape is NULL", what, (int)t->rank);
    return false;
  }
  int64_t count = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t dim = t->shape[i];
    if (dim < 0) {
      sim_devmsg(d, msg, fn, "%s has the negative dimension %" PRId64 " in %s", what, dim,
                 sim_fmt_shape(sh, sizeof sh, t->rank, t->shape));
      return false;
    }
    if (!sim_mul_ok(count, dim, (int64_t)es)) {
      sim_devmsg(d, msg, fn, "%s shape %s has too many elements", what, sim_fmt_shape(sh, sizeof sh, t->rank, t->shape));
      return false;
    }
    count *= dim;
  }
  if ((uint64_t)count * es != t->byte_size) {
    sim_devmsg(d, msg, fn, "%s: byte_size is %" PRIu64 " but shape %s of %s is %" PRIu64 " bytes", what,
               t->byte_size, sim_fmt_shape(sh, sizeof sh, t->rank, t->shape), sim_dtype_name(t->dtype),
               (uint64_t)count * es);
    return false;
  }
  out->rank = t->rank;
  for (int i = 0; i < t->rank; i++) {
    out->shape[i] = t->shape[i];
  }
  out->count = count;
  out->data = t->data;
  out->bytes = t->byte_size;
  *dtype = t->dtype;
  return true;
}

/* Reads a bool attribute: true when read (or absent: `*out` keeps its default). */
static bool sim_attr_bool(const sim_device *d, const char *fn, const void *attrs, const char *name, bool *out,
                          bool *found, char *msg) {
  const dpp_host_api_t *host = d->plat->host;
  int32_t v = 0;
  *found = false;
  if (!host->attr_bool) {
    sim_devmsg(d, msg, fn, "the host table has no attr_bool to read attribute '%s'", name);
    return false;
  }
  dpp_status_t st = host->attr_bool(attrs, name, &v);
  if (st == DPP_NOT_FOUND) {
    return true;
  }
  if (st != DPP_OK) {
    sim_devmsg(d, msg, fn, "cannot read bool attribute '%s' (status %d)", name, (int)st);
    return false;
  }
  *out = v != 0;
  *found = true;
  return true;
}

/* One tensor as sim_kmemo remembers it: what sim_ktensor_read checked of it. */
typedef struct sim_tkey {
  int32_t dtype;
  int32_t rank;
  uint64_t bytes;
  int64_t shape[SIM_MAX_RANK];
} sim_tkey;

/* The dtype, ranks and shapes an elementwise kernel (Add, Mul) was last validated with on this
 * thread: a launch whose tensors have the same ones (an eager loop, a model run again) passes
 * the same checks, so only what can differ (the addresses, checked after this) is checked
 * again. The checks depend on nothing else (these kernels read no attributes, and a shape is
 * valid or not on any device). */
typedef struct sim_kmemo {
  bool valid;
  sim_kernel_id id;
  sim_tkey key[3];    /* inputs, then the output, as validated */
  sim_kqueued queued; /* the job as queued: dtype, ranks, input shapes (its addresses unused) */
  size_t queued_size; /* sim_kqueued_size(&queued) */
} sim_kmemo;

/* The stream and allocations a thread's kernel launches found lately, so that a launch like
 * the one before takes no lock: `stream` is the live stream `handle` names on the device of
 * `blocks` while the device's `streams_gone` equals `streams_gone` (a stream leaves the
 * device's list, and is freed, only after that count moved); `blocks` as sim_block_memo says. A
 * launch that finds everything here does not translate under the device mutex; the worker
 * translates again if anything was freed before it runs (as for every launch). As with CUDA,
 * destroying a stream while another thread launches on it is a host bug SIM does not catch on
 * this path. */
typedef struct sim_launch_memo {
  sim_block_memo blocks;
  void *handle;
  sim_stream *stream;
  uint64_t streams_gone;
  unsigned hint[3]; /* the entry of `blocks` each tensor (in sim_launch_tensors' order) was in last */
} sim_launch_memo;

/* What a thread remembers between kernel launches. */
typedef struct sim_tls {
  sim_kmemo shapes;
  sim_launch_memo launch;
} sim_tls;

static _Thread_local sim_tls sim_thread_memo;

/* This thread's memos. Not inlined: compilers recompute a TLS address at every use (a call,
 * in a shared library) rather than keep it in a register. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static sim_tls *sim_tls_get(void) {
  return &sim_thread_memo;
}

/* The addresses of a launch's tensors, in the queue's order: in[0], in[1], out (a one-input
 * kernel's in[1] has no bytes). */
typedef struct sim_launch_tensors {
  dpp_addr_t data[3];
  uint64_t bytes[3];
} sim_launch_tensors;

/* The stream the launch goes to, from the memo, its tensors' addresses checked (in `frees` the
 * count of frees they were checked at): NULL when the memo does not know them all (then
 * sim_launch_locked finds them). */
static sim_stream *sim_launch_memo_hit(sim_launch_memo *m, const sim_device *d, void *handle,
                                       const sim_launch_tensors *t, uint64_t *frees) {
  if (m->blocks.dev != d || m->blocks.serial != d->serial || m->handle != handle ||
      m->streams_gone != atomic_load_explicit(&d->streams_gone, memory_order_acquire)) {
    return NULL;
  }
  uint64_t gen = atomic_load_explicit(&d->frees, memory_order_acquire);
  for (int i = 0; i < 3; i++) {
    if (t->bytes[i]) {
      int e = sim_block_memo_find(&m->blocks, gen, t->data[i], t->bytes[i], m->hint[i]);
      if (e < 0) {
        return NULL;
      }
      m->hint[i] = (unsigned)e;
    }
  }
  *frees = gen;
  return m->stream;
}

/* Device mutex held. Finds the launch's stream and checks its tensors' addresses (as
 * sim_launch_memo_hit), and notes them in the memo. NULL (with `msg`) when the stream or an
 * address is not valid. */
static sim_stream *sim_launch_locked(sim_launch_memo *m, sim_device *d, void *handle, const sim_kernel_desc *k,
                                     const sim_launch_tensors *t, uint64_t *frees, char *msg) {
  sim_stream *s = sim_find_stream(d, handle);
  if (!s) {
    sim_devmsg(d, msg, k->fn, "context->stream %p is not a live stream of this device", handle);
    return NULL;
  }
  uint64_t gen = atomic_load_explicit(&d->frees, memory_order_relaxed); /* stable: mutex held */
  sim_block_memo_take(&m->blocks, d); /* the stream below is of this device */
  m->handle = handle;
  m->stream = s;
  m->streams_gone = atomic_load_explicit(&d->streams_gone, memory_order_relaxed);
  for (int i = 0; i < 3; i++) {
    bool is_out = i == 2;
    unsigned char *unused;
    if (!t->bytes[i]) {
      continue;
    }
    if (!sim_translate(d, k->fn, is_out ? k->out_what : k->in_what[i], t->data[i], t->bytes[i], &unused, msg)) {
      return NULL;
    }
    m->hint[i] = sim_block_memo_note(&m->blocks, d, t->data[i], gen);
  }
  *frees = gen;
  return s;
}

/* True when `x` has the dtype, rank, shape and size of `k`. */
static inline bool sim_tkey_matches(const sim_tkey *k, const dpp_tensor_t *x) {
  if (x->struct_size < DPP_TENSOR_STRUCT_SIZE || x->dtype != k->dtype || x->rank != k->rank ||
      x->byte_size != k->bytes || (k->rank > 0 && !x->shape)) {
    return false;
  }
  for (int r = 0; r < k->rank; r++) {
    if (x->shape[r] != k->shape[r]) {
      return false;
    }
  }
  return true;
}

/* True when the context's tensors have the dtype, ranks, shapes and sizes of the memo's (its
 * kernel's checks passed for them), their addresses then in `t`. Called for two-input kernels. */
static bool sim_memo_hit(const sim_kmemo *m, const dpp_kernel_context_t *cx, sim_kernel_id id, sim_launch_tensors *t) {
  if (!m->valid || m->id != id || !sim_tkey_matches(&m->key[0], &cx->inputs[0]) ||
      !sim_tkey_matches(&m->key[1], &cx->inputs[1]) || !sim_tkey_matches(&m->key[2], &cx->outputs[0])) {
    return false;
  }
  t->data[0] = cx->inputs[0].data;
  t->data[1] = cx->inputs[1].data;
  t->data[2] = cx->outputs[0].data;
  t->bytes[0] = m->key[0].bytes;
  t->bytes[1] = m->key[1].bytes;
  t->bytes[2] = m->key[2].bytes;
  return true;
}

/* The queued form of job `j` (see sim_kqueued), but its addresses and `frees`. */
static void sim_kpack(const sim_kjob *j, sim_kqueued *q) {
  q->kind = SIM_OP_KERNEL;
  q->id = (uint8_t)j->id;
  q->dtype = (uint8_t)j->dtype; /* a known dtype: sim_ktensor_read checked */
  q->flags = (uint8_t)((j->transpose_a ? SIM_KQ_TRANSPOSE_A : 0) | (j->transpose_b ? SIM_KQ_TRANSPOSE_B : 0));
  q->reduced = 0;
  for (int r = 0; r < SIM_MAX_RANK; r++) {
    q->reduced |= (uint8_t)(j->reduced[r] << r);
  }
  const sim_ktensor *t[3] = {&j->in[0], &j->in[1], &j->out};
  int64_t *dims = q->dims;
  for (int i = 0; i < 3; i++) {
    q->rank[i] = (uint8_t)t[i]->rank;
    if (i == 2 && sim_kernel_elementwise(j->id)) {
      break;
    }
    for (int r = 0; r < t[i]->rank; r++) {
      *dims++ = t[i]->shape[r];
    }
  }
}

/* The job a queued kernel runs: counts and sizes from the shapes (sim_ktensor_read checked that
 * they match the byte sizes; a missing second input has rank 0 and no bytes), an elementwise
 * output's shape broadcast again (checked at enqueue). Host addresses are left to
 * sim_run_kernel. */
static void sim_kunpack(const sim_kqueued *q, sim_kjob *j) {
  const sim_kernel_desc *k = &sim_kernel_descs[q->id];
  j->id = (sim_kernel_id)q->id;
  j->op = k->op;
  j->nin = k->nin;
  j->dtype = q->dtype;
  j->transpose_a = (q->flags & SIM_KQ_TRANSPOSE_A) != 0;
  j->transpose_b = (q->flags & SIM_KQ_TRANSPOSE_B) != 0;
  j->frees = q->frees;
  for (int r = 0; r < SIM_MAX_RANK; r++) {
    j->reduced[r] = (q->reduced >> r) & 1;
  }
  sim_ktensor *t[3] = {&j->in[0], &j->in[1], &j->out};
  const int64_t *dims = q->dims;
  for (int i = 0; i < 3; i++) {
    t[i]->rank = q->rank[i];
    if (i == 2 && sim_kernel_elementwise(q->id)) {
      int rank = 0;
      sim_broadcast(t[0]->rank, t[0]->shape, t[1]->rank, t[1]->shape, &rank, t[2]->shape);
    } else {
      for (int r = 0; r < q->rank[i]; r++) {
        t[i]->shape[r] = *dims++;
      }
    }
  }
  size_t es = sim_dtype_size(q->dtype);
  for (int i = 0; i < 3; i++) {
    int64_t count = i != 1 || k->nin == 2 ? 1 : 0;
    for (int r = 0; r < t[i]->rank; r++) {
      count *= t[i]->shape[r];
    }
    t[i]->count = count;
    t[i]->bytes = (uint64_t)count * es;
    t[i]->data = q->data[i];
  }
}

/* ReduceSum's attributes: read once per kernel state (ABI 1.5, sim_reduce_create) or, from an
 * older host, at every launch. */
typedef struct sim_reduce_params {
  uint32_t magic; /* SIM_STATE_MAGIC while alive */
  sim_device *d;  /* the device the state was made for */
  size_t naxes;
  int64_t axes[SIM_MAX_RANK];
  bool keep_dims, keep_dims_known;
} sim_reduce_params;

#define SIM_STATE_MAGIC 0x53696d53u /* "SimS" */

/* Reads `axes` and `keep_dims` from `attrs` (a kernel or create context's). */
static bool sim_reduce_params_read(const sim_device *d, const char *fn, const void *attrs, sim_reduce_params *p,
                                   char *msg) {
  const dpp_host_api_t *host = d->plat->host;
  const int64_t *axes = NULL;
  size_t naxes = 0;
  memset(p, 0, sizeof *p);
  if (!host->attr_ints) {
    sim_devmsg(d, msg, fn, "the host table has no attr_ints to read attribute 'axes'");
    return false;
  }
  dpp_status_t st = host->attr_ints(attrs, "axes", &axes, &naxes);
  if (st == DPP_NOT_FOUND) {
    naxes = 0;
  } else if (st != DPP_OK) {
    sim_devmsg(d, msg, fn, "cannot read int-list attribute 'axes' (status %d)", (int)st);
    return false;
  } else if (naxes && !axes) {
    sim_devmsg(d, msg, fn, "attr_ints gave %zu axes and a NULL array", naxes);
    return false;
  }
  if (naxes > SIM_MAX_RANK) {
    sim_devmsg(d, msg, fn, "%zu axes, more than the %d dimensions a SIM tensor may have", naxes, SIM_MAX_RANK);
    return false;
  }
  p->naxes = naxes;
  if (naxes) {
    memcpy(p->axes, axes, naxes * sizeof *axes);
  }
  p->keep_dims_known = true;
  return sim_attr_bool(d, fn, attrs, "keep_dims", &p->keep_dims, &p->keep_dims_known, msg);
}

/* The launch's ReduceSum state, or NULL when the host passed none (older than ABI 1.5). */
static const sim_reduce_params *sim_reduce_state(const dpp_kernel_context_t *cx) {
  if (cx->struct_size < DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5 || !cx->state) {
    return NULL;
  }
  const sim_reduce_params *p = (const sim_reduce_params *)cx->state;
  return p->magic == SIM_STATE_MAGIC && p->d == sim_dev(cx->device) ? p : NULL;
}

/* ABI 1.5: ReduceSum's state for one device and attribute set: its attributes, read and
 * checked once. Counted per device (leaks are reported at destroy_device). */
static dpp_status_t sim_reduce_create(const dpp_kernel_create_context_t *cx, void **out_state) {
  if (!cx || cx->struct_size < DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE || !out_state) {
    return DPP_INVALID_ARGUMENT;
  }
  sim_plugin *plugin = (sim_plugin *)cx->kernel_data;
  sim_device *d = sim_dev(cx->device);
  if (!d || !plugin || d->plat->plugin != plugin) {
    return plugin ? sim_host_error(plugin->host, DPP_INVALID_ARGUMENT,
                                   "SIM: kernel ReduceSum: create: context->device is not a device of this SIM platform")
                  : DPP_INVALID_ARGUMENT;
  }
  char msg[SIM_MSG_MAX];
  sim_reduce_params *p = (sim_reduce_params *)malloc(sizeof *p);
  if (!p) {
    return sim_host_error(plugin->host, DPP_RESOURCE_EXHAUSTED, "SIM: kernel ReduceSum: create: out of memory");
  }
  if (!sim_reduce_params_read(d, "kernel ReduceSum: create", cx->attrs, p, msg)) {
    free(p);
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }
  p->magic = SIM_STATE_MAGIC;
  p->d = d;
  uint64_t live = atomic_fetch_add(&d->live_states, 1) + 1;
  if (d->plat->opt.log_kernel_states) {
    sim_log(d->plat, DPP_LOG_INFO, "SIM %s:%d: kernel ReduceSum: state created (%zu axes, keep_dims %d); %" PRIu64 " live",
            d->plat->opt.platform, d->index, p->naxes, (int)p->keep_dims, live);
  }
  *out_state = p;
  return DPP_OK;
}

/* ABI 1.5: frees a state sim_reduce_create made. */
static void sim_reduce_destroy(void *kernel_data, void *state) {
  (void)kernel_data;
  sim_reduce_params *p = (sim_reduce_params *)state;
  if (!p || p->magic != SIM_STATE_MAGIC) {
    return; /* not ours: a host bug; nothing safe to do */
  }
  sim_device *d = p->d;
  uint64_t live = atomic_fetch_sub(&d->live_states, 1) - 1;
  if (d->plat->opt.log_kernel_states) {
    sim_log(d->plat, DPP_LOG_INFO, "SIM %s:%d: kernel ReduceSum: state destroyed; %" PRIu64 " live",
            d->plat->opt.platform, d->index, live);
  }
  p->magic = 0;
  free(p);
}

/* Validates the context and enqueues kernel `id` on context->stream. */
static dpp_status_t sim_kernel_compute(const dpp_kernel_context_t *cx, sim_kernel_id id) {
  const sim_kernel_desc *k = &sim_kernel_descs[id];
  const char *fn = k->fn;
  char msg[SIM_MSG_MAX], s1[160], s2[160], s3[160];
  if (!cx || cx->struct_size < DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1) {
    return DPP_INVALID_ARGUMENT; /* nothing to reach the host table through */
  }
  sim_plugin *plugin = (sim_plugin *)cx->kernel_data;
  sim_device *d = sim_dev(cx->device);
  if (!d || !plugin || d->plat->plugin != plugin) {
    return plugin ? sim_host_error(plugin->host, DPP_INVALID_ARGUMENT,
                                   "SIM: kernel %s: context->device is not a device of this SIM platform", k->op)
                  : DPP_INVALID_ARGUMENT;
  }
  if (cx->num_inputs != (size_t)k->nin || !cx->inputs || cx->num_outputs != 1 || !cx->outputs) {
    sim_devmsg(d, msg, fn, "expects %d input(s) and 1 output, got %zu input(s)%s and %zu output(s)%s", k->nin,
               cx->num_inputs, cx->num_inputs && !cx->inputs ? " (NULL array)" : "", cx->num_outputs,
               cx->num_outputs && !cx->outputs ? " (NULL array)" : "");
    return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
  }

  sim_op op; /* the queued job: every field the worker reads is set below (launches are hot) */
  sim_launch_tensors t;
  sim_tls *tls = sim_tls_get();
  sim_kmemo *memo = sim_kernel_elementwise(id) ? &tls->shapes : NULL;
  size_t qsize; /* the bytes of op.kernel to queue */
  if (memo && sim_memo_hit(memo, cx, id, &t)) {
    qsize = memo->queued_size;
    if (qsize <= SIM_SLOT_FIRST_LINE) {
      memcpy(&op.kernel, &memo->queued, SIM_SLOT_FIRST_LINE); /* a constant size: a few moves */
    } else {
      memcpy(&op.kernel, &memo->queued, qsize);
    }
    goto shapes_checked;
  }

  sim_kjob job; /* the job, validated (then packed into `op`) */
  sim_kjob *j = &job;
  j->transpose_a = j->transpose_b = false;
  memset(j->reduced, 0, sizeof j->reduced);
  j->frees = 0;
  j->in[1].rank = 0;
  j->in[1].count = 0;
  j->in[1].data = 0;
  j->in[1].bytes = 0;
  j->id = id;
  j->op = k->op;
  j->nin = k->nin;
  const sim_ktensor *x = &j->in[0], *y = &j->in[1], *o = &j->out;

  /* Tensors and dtypes. */
  int32_t dtypes[3] = {0, 0, 0};
  for (int i = 0; i <= k->nin; i++) {
    bool is_out = i == k->nin;
    const char *what = is_out ? k->out_what : k->in_what[i];
    if (!sim_ktensor_read(d, fn, what, is_out ? &cx->outputs[0] : &cx->inputs[i], is_out ? &j->out : &j->in[i],
                          &dtypes[i], msg)) {
      goto invalid;
    }
    if (i == 0) {
      bool supported = false;
      for (size_t t = 0; t < k->num_dtypes; t++) {
        supported = supported || k->dtypes[t] == dtypes[0];
      }
      if (!supported) {
        sim_devmsg(d, msg, fn, "%s has dtype %s, which SIM's %s does not support (%s)", what,
                   sim_dtype_name(dtypes[0]), k->op, k->num_dtypes == 4 ? "f32, f64, i32, i64" : "f32, f64");
        goto invalid;
      }
    } else if (dtypes[i] != dtypes[0]) {
      sim_devmsg(d, msg, fn, "%s has dtype %s but input '%s' has %s", what, sim_dtype_name(dtypes[i]), k->in_names[0],
                 sim_dtype_name(dtypes[0]));
      goto invalid;
    }
  }
  j->dtype = dtypes[0];

  /* Shapes (the op's shape function, checked against the output the host allocated). */
  int64_t want[SIM_MAX_RANK + 2];
  int want_rank = 0;
  bool keep_dims_known = true;
  bool keep_dims = false;
  switch (id) {
  case SIM_K_ADD:
  case SIM_K_MUL:
    if (!sim_broadcast(x->rank, x->shape, y->rank, y->shape, &want_rank, want)) {
      sim_devmsg(d, msg, fn, "shapes %s ('x') and %s ('y') cannot be broadcast together",
                 sim_fmt_shape(s1, sizeof s1, x->rank, x->shape), sim_fmt_shape(s2, sizeof s2, y->rank, y->shape));
      goto invalid;
    }
    break;
  case SIM_K_MATMUL: {
    bool found;
    if (!sim_attr_bool(d, fn, cx->attrs, "transpose_a", &j->transpose_a, &found, msg) ||
        !sim_attr_bool(d, fn, cx->attrs, "transpose_b", &j->transpose_b, &found, msg)) {
      goto invalid;
    }
    if (x->rank < 2 || y->rank < 2) {
      sim_devmsg(d, msg, fn, "inputs must have rank >= 2, got 'a' %s and 'b' %s",
                 sim_fmt_shape(s1, sizeof s1, x->rank, x->shape), sim_fmt_shape(s2, sizeof s2, y->rank, y->shape));
      goto invalid;
    }
    int ra = x->rank, rb = y->rank;
    int64_t m = j->transpose_a ? x->shape[ra - 1] : x->shape[ra - 2];
    int64_t ka = j->transpose_a ? x->shape[ra - 2] : x->shape[ra - 1];
    int64_t kb = j->transpose_b ? y->shape[rb - 1] : y->shape[rb - 2];
    int64_t n = j->transpose_b ? y->shape[rb - 2] : y->shape[rb - 1];
    if (ka != kb) {
      sim_devmsg(d, msg, fn, "inner dimensions differ: 'a' %s%s has %" PRId64 ", 'b' %s%s has %" PRId64,
                 sim_fmt_shape(s1, sizeof s1, ra, x->shape), j->transpose_a ? " (transposed)" : "", ka,
                 sim_fmt_shape(s2, sizeof s2, rb, y->shape), j->transpose_b ? " (transposed)" : "", kb);
      goto invalid;
    }
    if (!sim_broadcast(ra - 2, x->shape, rb - 2, y->shape, &want_rank, want)) {
      sim_devmsg(d, msg, fn, "batch dimensions of 'a' %s and 'b' %s cannot be broadcast",
                 sim_fmt_shape(s1, sizeof s1, ra, x->shape), sim_fmt_shape(s2, sizeof s2, rb, y->shape));
      goto invalid;
    }
    want[want_rank++] = m;
    want[want_rank++] = n;
    break;
  }
  case SIM_K_REDUCE_SUM: {
    /* The attributes: from the kernel's state (ABI 1.5: read once, in sim_reduce_create), or
     * read now from an older host. */
    sim_reduce_params read_now;
    const sim_reduce_params *rp = sim_reduce_state(cx);
    if (!rp) {
      if (!sim_reduce_params_read(d, fn, cx->attrs, &read_now, msg)) {
        goto invalid;
      }
      rp = &read_now;
    }
    const size_t naxes = rp->naxes;
    const int64_t *axes = rp->axes;
    keep_dims = rp->keep_dims;
    keep_dims_known = rp->keep_dims_known;
    for (size_t i = 0; i < naxes; i++) {
      int64_t a = axes[i], nrm = a < 0 ? a + x->rank : a;
      if (nrm < 0 || nrm >= x->rank) {
        sim_devmsg(d, msg, fn, "axis %" PRId64 " is out of range for rank %d", a, (int)x->rank);
        goto invalid;
      }
      if (j->reduced[nrm]) {
        sim_devmsg(d, msg, fn, "axis %" PRId64 " appears twice", a);
        goto invalid;
      }
      j->reduced[nrm] = true;
    }
    if (naxes == 0) {
      for (int i = 0; i < x->rank; i++) {
        j->reduced[i] = true;
      }
    }
    for (int i = 0; i < x->rank; i++) {
      if (!j->reduced[i]) {
        want[want_rank++] = x->shape[i];
      } else if (keep_dims) {
        want[want_rank++] = 1;
      }
    }
    break;
  }
  }
  if (!sim_same_shape(o->rank, o->shape, want_rank, want)) {
    bool ok = false;
    if (id == SIM_K_REDUCE_SUM && !keep_dims_known) {
      /* keep_dims unknown (the host gave no such attribute): the other form is fine too. */
      int alt_rank = 0;
      int64_t alt[SIM_MAX_RANK];
      for (int i = 0; i < x->rank; i++) {
        if (!j->reduced[i]) {
          alt[alt_rank++] = x->shape[i];
        } else {
          alt[alt_rank++] = 1;
        }
      }
      ok = sim_same_shape(o->rank, o->shape, alt_rank, alt);
    }
    if (!ok) {
      sim_devmsg(d, msg, fn, "output '%s' has shape %s but %s %s gives %s", k->out_name,
                 sim_fmt_shape(s1, sizeof s1, o->rank, o->shape), k->op,
                 k->nin == 2 ? "of these inputs" : "of this input", sim_fmt_shape(s3, sizeof s3, want_rank, want));
      goto invalid;
    }
  }

  sim_kpack(j, &op.kernel);
  qsize = sim_kqueued_size(&op.kernel);
  const sim_ktensor *kts[3] = {&j->in[0], &j->in[1], o};
  for (int i = 0; i < 3; i++) {
    t.data[i] = kts[i]->data;
    t.bytes[i] = kts[i]->bytes;
  }
  if (memo) {
    memo->valid = true;
    memo->id = id;
    for (int i = 0; i < 3; i++) {
      sim_tkey *key = &memo->key[i];
      key->dtype = j->dtype;
      key->rank = kts[i]->rank;
      key->bytes = kts[i]->bytes;
      memcpy(key->shape, kts[i]->shape, sizeof(int64_t) * (size_t)kts[i]->rank);
    }
    memo->queued_size = qsize;
    memcpy(&memo->queued, &op.kernel, qsize);
  }

shapes_checked:;
  /* The output must not overlap an input (an elementwise op may work in place). */
  const int out = 2;
  for (int i = 0; i < k->nin; i++) {
    bool overlap = t.bytes[out] && t.bytes[i] && t.data[out] < t.data[i] + t.bytes[i] &&
                   t.data[i] < t.data[out] + t.bytes[out];
    bool in_place = sim_kernel_elementwise(id) && t.data[out] == t.data[i] && t.bytes[out] == t.bytes[i];
    if (overlap && !in_place) {
      sim_devmsg(d, msg, fn, "output '%s' (0x%016" PRIx64 ", %" PRIu64 " bytes) overlaps input '%s' (0x%016" PRIx64
                 ", %" PRIu64 " bytes)", k->out_name, t.data[out], t.bytes[out], k->in_names[i], t.data[i], t.bytes[i]);
      goto invalid;
    }
  }

  /* The stream and the addresses (from this thread's memo, or under the device mutex), then
   * enqueue. */
  sim_kqueued *q = &op.kernel;
  uint64_t frees = 0;
  sim_stream *s = sim_launch_memo_hit(&tls->launch, d, cx->stream, &t, &frees);
  if (!s) {
    pthread_mutex_lock(&d->mu);
    s = sim_launch_locked(&tls->launch, d, cx->stream, k, &t, &frees, msg);
    pthread_mutex_unlock(&d->mu);
    if (!s) {
      goto invalid;
    }
  }
  q->frees = (uint32_t)frees;
  memcpy(q->data, t.data, sizeof q->data);
  if (sim_push(s, &op, qsize)) {
    return DPP_OK;
  }
  sim_devmsg(d, msg, fn, "out of host memory");
  return sim_dev_fail(d, DPP_RESOURCE_EXHAUSTED, msg);

invalid:
  return sim_dev_fail(d, DPP_INVALID_ARGUMENT, msg);
}

static dpp_status_t sim_compute_add(const dpp_kernel_context_t *cx) {
  return sim_kernel_compute(cx, SIM_K_ADD);
}
static dpp_status_t sim_compute_mul(const dpp_kernel_context_t *cx) {
  return sim_kernel_compute(cx, SIM_K_MUL);
}
static dpp_status_t sim_compute_matmul(const dpp_kernel_context_t *cx) {
  return sim_kernel_compute(cx, SIM_K_MATMUL);
}
static dpp_status_t sim_compute_reduce_sum(const dpp_kernel_context_t *cx) {
  return sim_kernel_compute(cx, SIM_K_REDUCE_SUM);
}

/* Registers SIM's kernels for its platform (init). Sets *out_count to how many. */
static dpp_status_t sim_register_kernels(const dpp_host_api_t *host, sim_plugin *plugin, const sim_platform *p,
                                         int *out_count) {
  static dpp_status_t (*const computes[])(const dpp_kernel_context_t *) = {
      sim_compute_add, sim_compute_mul, sim_compute_matmul, sim_compute_reduce_sum};
  *out_count = 0;
  if (!p->opt.kernels) {
    return DPP_OK;
  }
  if (host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_1 || !host->register_kernel) {
    sim_log(p, DPP_LOG_INFO, "SIM: the host (ABI %u.%u) cannot register kernels; SIM registers none",
            (unsigned)host->abi_major, (unsigned)host->abi_minor);
    return DPP_OK;
  }
  for (size_t i = 0; i < sizeof computes / sizeof computes[0]; i++) {
    const sim_kernel_desc *k = &sim_kernel_descs[i];
    if ((i == SIM_K_MATMUL && !host->attr_bool) || (i == SIM_K_REDUCE_SUM && !host->attr_ints)) {
      sim_log(p, DPP_LOG_WARN, "SIM: the host table has no %s, which kernel %s needs; %s not registered",
              i == SIM_K_MATMUL ? "attr_bool" : "attr_ints", k->op, k->op);
      continue;
    }
    dpp_kernel_t reg;
    memset(&reg, 0, sizeof reg);
    reg.struct_size = DPP_KERNEL_STRUCT_SIZE;
    reg.ext = NULL;
    reg.op = k->op;
    reg.device_type = p->opt.device_type;
    reg.platform = p->opt.platform;
    reg.dtypes = k->dtypes;
    reg.num_dtypes = k->num_dtypes;
    reg.priority = p->opt.kernel_priority;
    reg.kernel_data = plugin;
    reg.compute = computes[i];
    if (i == SIM_K_REDUCE_SUM) {
      /* ABI 1.5: its attributes are read once per state (a host older than 1.5 reads the kernel
       * struct's first 80 bytes only, and ReduceSum then reads them at every launch). */
      reg.create = sim_reduce_create;
      reg.destroy = sim_reduce_destroy;
    }
    dpp_status_t st = host->register_kernel(host->context, &reg);
    if (st != DPP_OK) {
      return sim_host_error(host, st, "SIM: the host refused kernel %s for %s bound to %s (status %d)", k->op,
                            p->opt.device_type, p->opt.platform, (int)st);
    }
    ++*out_count;
  }
  return DPP_OK;
}

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
  uint64_t states = atomic_load(&d->live_states);
  if (states) {
    sim_log(p, DPP_LOG_WARN,
            "SIM %s:%d: destroy_device: %" PRIu64 " kernel state(s) were never destroyed (the host must destroy them "
            "before the device)",
            p->opt.platform, d->index, states);
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
  atomic_init(&d->frees, 0);
  atomic_init(&d->streams_gone, 0);
  d->serial = atomic_fetch_add(&sim_device_serials, 1) + 1;
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
  if ((v = sim_opt(host, "fail_alloc_at")) != NULL) {
    if (!sim_parse_u64(v, &o->fail_alloc_at) || o->fail_alloc_at == 0) {
      return sim_bad_option(host, "fail_alloc_at", v, "a positive integer");
    }
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
  if ((v = sim_opt(host, "log_kernel_states")) != NULL) {
    if (!sim_parse_bool(v, &o->log_kernel_states)) {
      return sim_bad_option(host, "log_kernel_states", v, "1/true/yes/on or 0/false/no/off");
    }
  }
  o->kernels = true;
  if ((v = sim_opt(host, "kernels")) != NULL) {
    if (!sim_parse_bool(v, &o->kernels)) {
      return sim_bad_option(host, "kernels", v, "1/true/yes/on or 0/false/no/off");
    }
  }
  if ((v = sim_opt(host, "kernel_priority")) != NULL) {
    if (!sim_parse_i32(v, &o->kernel_priority)) {
      return sim_bad_option(host, "kernel_priority", v, "a 32-bit signed integer");
    }
  }
  return DPP_OK;
}

static dpp_status_t sim_init(const dpp_host_api_t *host, void **out_plugin_data) {
  if (!host || host->struct_size < DPP_HOST_API_STRUCT_SIZE_1_0) {
    /* The host table is too small (or absent) to even say why. A 1.0 table (without
     * register_kernel and the attr_* readers) is fine: SIM then registers no kernels. */
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
  int nkernels = 0;
  st = sim_register_kernels(host, plugin, p, &nkernels);
  if (st != DPP_OK) {
    /* As below: the host rolls the platform back and calls destroy_platform. */
    p->plugin = NULL;
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
  sim_log(p, DPP_LOG_INFO,
          "SIM: platform %s (type %s, priority %d): %d device(s) of %" PRIu64 " bytes, %d native kernel(s) (priority %d)",
          p->opt.platform, p->opt.device_type, (int)p->opt.priority, p->opt.devices, p->opt.memory, nkernels,
          (int)p->opt.kernel_priority);
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
