/* What handing one item to a thread on the other core costs the producer, for three ring
 * designs (docs/performance.md, "SIM native kernel, launch overhead", fifth session).
 *
 *   cc -O2 -DOPSZ=56 -o handoff docs/experiments/handoff.c -lpthread
 *   ./handoff DESIGN WORK LOOK_NS     e.g. ./handoff 0 100 1000
 *
 * DESIGN 0: SIM's ring: a sequence number per slot, published with an exchange, freed by the
 *           consumer with a store into the slot; the slot 4 ahead fetched for writing.
 * DESIGN 1: a single-producer ring: the tail published with a release store, the consumer's
 *           head (its own line) read only when the ring looks full.
 * DESIGN 2: as 1, but the tail published with an exchange (a fence on a line the consumer
 *           polls).
 * WORK:     iterations of private work per item (100 ≈ 100 ns here), LOOK_NS: how often the
 *           consumer looks at the ring (yielding in between), as SIM's polling worker.
 *
 * Prints the producer's ns per item with no consumer (a private ring) and with the consumer
 * running, in the same process, three times. An experiment, not part of any build. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef OPSZ
#define OPSZ 56
#endif
#define RING 256
#define MASK (RING - 1)

static int64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

typedef struct {
  _Alignas(64) _Atomic uint64_t seq;
  char op[56];
} slot_a;
typedef struct {
  char op[OPSZ];
} slot_b;

static slot_a ring_a[RING];
static _Alignas(64) slot_b ring_b[RING];
static _Alignas(64) _Atomic uint64_t tail_b;
static _Alignas(64) _Atomic uint64_t head_b;
static _Alignas(64) _Atomic int stop;
static _Alignas(64) volatile uint64_t acc; /* the producer's work (its own line) */
static volatile uint64_t sink;             /* what the consumer read, at the end */
static int design, look_ns;
static _Alignas(64) char priv[1 << 16];

static void work(int iters) {
  uint64_t x = acc;
  for (int i = 0; i < iters; i++) {
    x += (uint64_t)priv[(i * 64) & 0xffff];
    x *= 1664525;
  }
  acc = x;
}

static void look_later(void) {
  if (look_ns) {
    int64_t t = now();
    while (now() - t < look_ns) {
      sched_yield();
    }
  }
}

static void *consumer(void *arg) {
  (void)arg;
  uint64_t pos = 0, s = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    if (design == 0) {
      slot_a *sl = &ring_a[pos & MASK];
      if (atomic_load_explicit(&sl->seq, memory_order_acquire) == pos + 1) {
        s += (uint64_t)sl->op[0];
        atomic_store_explicit(&sl->seq, pos + RING, memory_order_release);
        pos++;
      } else {
        look_later();
      }
    } else {
      uint64_t t = atomic_load_explicit(&tail_b, memory_order_acquire);
      if (t == pos) {
        look_later();
        continue;
      }
      while (pos < t) {
        s += (uint64_t)ring_b[pos & MASK].op[0];
        pos++;
      }
      atomic_store_explicit(&head_b, pos, memory_order_release);
    }
  }
  sink = s;
  return NULL;
}

static uint64_t ptail, cached_head;

static void push(int consumer_on) {
  uint64_t pos = ptail;
  if (design == 0) {
    slot_a *sl = &ring_a[pos & MASK];
    while (consumer_on && atomic_load_explicit(&sl->seq, memory_order_acquire) != pos) {
    }
    memcpy(sl->op, priv, 56);
    ptail = pos + 1;
    atomic_exchange(&sl->seq, pos + 1);
    __builtin_prefetch(&ring_a[(pos + 4) & MASK], 1, 3);
    if (!consumer_on) {
      atomic_store_explicit(&sl->seq, pos + RING, memory_order_relaxed);
    }
  } else {
    while (consumer_on && pos - cached_head >= RING) {
      cached_head = atomic_load_explicit(&head_b, memory_order_acquire);
    }
    memcpy(ring_b[pos & MASK].op, priv, OPSZ);
    ptail = pos + 1;
    if (design == 1) {
      atomic_store_explicit(&tail_b, pos + 1, memory_order_release);
    } else {
      atomic_exchange(&tail_b, pos + 1);
    }
    __builtin_prefetch(&ring_b[(pos + 8) & MASK], 1, 3);
  }
}

static void reset(void) {
  for (int i = 0; i < RING; i++) {
    atomic_store(&ring_a[i].seq, (uint64_t)i);
  }
  ptail = cached_head = 0;
  atomic_store(&tail_b, 0);
  atomic_store(&head_b, 0);
  atomic_store(&stop, 0);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DESIGN(0|1|2) WORK LOOK_NS\n", argv[0]);
    return 2;
  }
  design = atoi(argv[1]);
  int iters = atoi(argv[2]);
  look_ns = atoi(argv[3]);
  const int n = 2000000;
  for (int rep = 0; rep < 3; rep++) {
    reset();
    int64_t t0 = now();
    for (int i = 0; i < n; i++) {
      work(iters);
      push(0);
    }
    double alone = (double)(now() - t0) / n;
    reset();
    pthread_t th;
    pthread_create(&th, NULL, consumer, NULL);
    t0 = now();
    for (int i = 0; i < n; i++) {
      work(iters);
      push(1);
    }
    double with = (double)(now() - t0) / n;
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    printf("design %d, %d-byte items, work %d, look %d ns: alone %.1f ns, consumer running %.1f ns (%+.1f)\n",
           design, OPSZ, iters, look_ns, alone, with, with - alone);
  }
  return 0;
}
