// devplug/plugin_worker.hpp on its own (no host, no plugin): WorkerStream, WorkerEvent and
// WorkerStreams against the ABI's stream rules (plugin guide §1):
// - work runs in order, asynchronously to the caller; move-only jobs; the destructor runs what
//   is queued;
// - the first error is kept, later work still runs, synchronize throws it once and clears it;
//   each kind of exception (Error, Error with DPP_OK, std::bad_alloc, std::exception, int, a
//   class of the test's own) becomes the status plugin.hpp gives it;
// - events: complete when never recorded, pending, complete, error after a stream error with
//   the stream's message, re-recorded (the latest counts), timed (elapsed_ns and its errors);
// - wait_event / wait_stream across streams (an error does not pass through a wait), and on a
//   stream or event destroyed while the wait is queued;
// - host callbacks run exactly once, in stream order, also on a stream in error;
// - synchronize / synchronize_all from a stream's own worker fail instead of hanging;
// - a stream destroyed from its own host callback (no self-join; later work still runs);
// - WorkerStreams: names, synchronize_all over the live streams, destroyed ones forgotten;
// - many threads enqueueing, recording and calling back at once.
// Standalone executable: exits 0 when every check passes.

#include "counting_check.hpp"

#include <devplug/plugin_worker.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#if defined(__linux__) && defined(__GLIBC__)
#include <pthread.h>
#endif

namespace {

namespace dp = devplug::plugin;
using dp::EventStatus;
using dp::worker::WorkerEvent;
using dp::worker::WorkerStream;
using dp::worker::WorkerStreams;

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The devplug::plugin::Error `f` throws: its code and message (DPP_OK and "" when none; any
// other exception is reported as code -1).
template <class F>
std::pair<dpp_status_t, std::string> plugin_error_of(F&& f) {
  try {
    f();
  } catch (const dp::Error& e) {
    return {e.code(), e.message()};
  } catch (...) {
    return {static_cast<dpp_status_t>(-1), "not a devplug::plugin::Error"};
  }
  return {DPP_OK, ""};
}

#define CHECK_ERROR(call, code, part)                                                               \
  do {                                                                                              \
    const auto e_ = plugin_error_of([&] { call; });                                                 \
    CHECK_MSG(e_.first == (code) && contains(e_.second, part),                                      \
              std::string("got ") + dp::status_name(e_.first) + " \"" + e_.second + "\", expected " + \
                  dp::status_name(code) + " with \"" + (part) + "\"");                              \
  } while (0)

// A door jobs wait at until the test opens it.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A thread-safe log of what ran, in order.
class Log {
 public:
  void add(int v) {
    std::lock_guard<std::mutex> lock(mu_);
    v_.push_back(v);
  }
  std::vector<int> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return v_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<int> v_;
};

// Waits up to 10 s for `done`; false on a timeout (a deadlock or a lost job).
template <class F>
bool eventually(F&& done) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A host function counting its calls (HostCallback wraps a dpp_host_fn + argument).
void count_call(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

void test_order_and_asynchrony() {
  section("order, asynchrony, move-only jobs, the destructor runs what is queued");
  WorkerStream s("order");
  CHECK(s.name() == "order");
  CHECK(!s.is_worker_thread());
  Log log;
  Gate gate;
  s.enqueue([&] { gate.wait(); });
  for (int i = 0; i < 1000; ++i) s.enqueue([&log, i] { log.add(i); });
  // Held at the gate: nothing ran yet, though enqueue returned.
  std::this_thread::sleep_for(10ms);
  CHECK(log.get().empty());
  gate.open();
  s.synchronize();
  const std::vector<int> got = log.get();
  bool in_order = got.size() == 1000;
  for (size_t i = 0; in_order && i < got.size(); ++i) in_order = got[i] == static_cast<int>(i);
  CHECK_MSG(in_order, "1000 jobs ran in the order enqueued (" + std::to_string(got.size()) + " ran)");

  // Jobs run on the stream's thread, which says so; move-only callables are fine.
  std::atomic<bool> on_worker{false};
  std::atomic<bool> other_thread{false};
  const std::thread::id me = std::this_thread::get_id();
  auto owned = std::make_unique<int>(42);
  std::atomic<int> seen{0};
  s.enqueue([&, p = std::move(owned)] {
    on_worker = s.is_worker_thread();
    other_thread = std::this_thread::get_id() != me;
    seen = *p;
  });
  s.synchronize();
  CHECK(on_worker.load() && other_thread.load() && seen.load() == 42);
  CHECK(!s.is_worker_thread());

  // Destroying a stream runs what is queued first (then joins).
  Log log2;
  Gate g2;
  std::thread opener;
  {
    WorkerStream t("drained");
    t.enqueue([&] { g2.wait(); });
    for (int i = 0; i < 5; ++i) t.enqueue([&log2, i] { log2.add(i); });
    opener = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      g2.open();
    });
    // t's destructor waits for the gate, then the five jobs.
  }
  opener.join();
  CHECK((log2.get() == std::vector<int>{0, 1, 2, 3, 4}));

#if defined(__linux__) && defined(__GLIBC__)
  // The worker thread carries the stream's name (Linux keeps 15 bytes).
  WorkerStream named("a-long-stream-name-here");
  std::string thread_name;
  named.enqueue([&] {
    char buf[32] = {};
    pthread_getname_np(pthread_self(), buf, sizeof buf);
    thread_name = buf;
  });
  named.synchronize();
  CHECK_MSG(thread_name == "a-long-stream-n", "thread name \"" + thread_name + "\"");
#endif
}

void test_first_error() {
  section("the first error is kept, later work runs, synchronize reports it once");
  WorkerStream s("errors");
  Log log;
  s.enqueue([&] { log.add(1); });
  s.enqueue([&]() -> void { throw dp::Error::invalid_argument("the first error"); });
  s.enqueue([&] { log.add(2); });
  s.enqueue([&]() -> void { throw dp::Error::not_found("the second error"); });
  s.enqueue([&] { log.add(3); });
  CHECK_ERROR(s.synchronize(), DPP_INVALID_ARGUMENT, "the first error");
  CHECK((log.get() == std::vector<int>{1, 2, 3}));  // later work still ran
  CHECK_ERROR(s.synchronize(), DPP_OK, "");         // reported once, then cleared
  // The message is the job's, untouched (no prefix added).
  s.enqueue([]() -> void { throw dp::Error::unimplemented("exactly this"); });
  const auto e = plugin_error_of([&] { s.synchronize(); });
  CHECK(e.first == DPP_UNIMPLEMENTED && e.second == "exactly this");
  // A new error after a synchronize is kept again.
  s.enqueue([]() -> void { throw dp::Error::unavailable("again"); });
  CHECK_ERROR(s.synchronize(), DPP_UNAVAILABLE, "again");
  CHECK_ERROR(s.synchronize(), DPP_OK, "");
}

struct Custom {
  int value;
};

void test_exceptions() {
  section("every kind of exception becomes the stream's error, as plugin.hpp maps it");
  WorkerStream s("exceptions");
  std::atomic<int> after{0};
  auto then_more = [&] { s.enqueue([&] { ++after; }); };

  s.enqueue([]() -> void { throw std::runtime_error("a runtime_error's what"); });
  then_more();
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "a runtime_error's what");

  s.enqueue([]() -> void { throw std::logic_error("a logic_error"); });
  then_more();
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "a logic_error");

  s.enqueue([]() -> void { throw std::bad_alloc(); });
  then_more();
  CHECK_ERROR(s.synchronize(), DPP_RESOURCE_EXHAUSTED, "std::bad_alloc");

  s.enqueue([]() -> void { throw dp::Error(DPP_OK, "an Error with DPP_OK"); });
  then_more();
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "an Error with DPP_OK");

  s.enqueue([]() -> void { throw 42; });
  then_more();
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "unknown C++ exception");
#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
  s.enqueue([]() -> void { throw 42; });
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "unknown C++ exception of type int");
  s.enqueue([]() -> void { throw Custom{7}; });
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "Custom");
#endif
  s.synchronize();
  CHECK(after.load() == 5);  // the worker survived every one of them
}

void test_events() {
  section("events: never recorded, pending, complete, error, re-recorded");
  WorkerStream s("events");
  WorkerEvent e;
  CHECK(e.status() == EventStatus::Complete);  // never recorded
  CHECK(!e.error());
  e.synchronize();  // nothing to wait for

  Gate gate;
  s.enqueue([&] { gate.wait(); });
  s.record(e);
  CHECK(e.status() == EventStatus::Pending);
  CHECK(!e.error());
  std::atomic<bool> synced{false};
  std::thread waiter([&] {
    e.synchronize();
    synced = true;
  });
  std::this_thread::sleep_for(10ms);
  CHECK(!synced.load());  // event_synchronize waits for the record
  gate.open();
  waiter.join();
  CHECK(synced.load());
  CHECK(e.status() == EventStatus::Complete);

  // Reached while the stream holds an error: Error, with the stream's error; the stream still
  // reports it on synchronize; a later record (after the synchronize) is complete again.
  s.enqueue([]() -> void { throw dp::Error::invalid_argument("bad address 0x10"); });
  s.record(e);
  CHECK_ERROR(e.synchronize(), DPP_INVALID_ARGUMENT,
              "the stream failed before reaching the event: bad address 0x10");  // the ABI's rule
  CHECK(e.status() == EventStatus::Error);
  const std::optional<dp::Error> why = e.error();
  CHECK(why && why->code() == DPP_INVALID_ARGUMENT && contains(why->message(), "bad address 0x10"));
  CHECK_ERROR(s.synchronize(), DPP_INVALID_ARGUMENT, "bad address 0x10");
  CHECK(e.status() == EventStatus::Error);  // keeps it until recorded again
  s.record(e);
  s.synchronize();
  CHECK(e.status() == EventStatus::Complete);
  CHECK(!e.error());

  // Re-recorded while pending: the latest record counts.
  Gate g2;
  s.record(e);
  s.enqueue([&] { g2.wait(); });
  s.record(e);
  std::this_thread::sleep_for(5ms);
  CHECK(e.status() == EventStatus::Pending);  // the first record is reached, the latest not
  g2.open();
  e.synchronize();
  CHECK(e.status() == EventStatus::Complete);

  // The host may destroy an event while a record of it and a wait for it are still queued
  // (destroy_event's rule): the queued work keeps what it needs.
  Gate g3;
  s.enqueue([&] { g3.wait(); });
  WorkerStream other("other");
  {
    auto doomed = std::make_unique<WorkerEvent>();
    s.record(*doomed);
    other.wait_event(*doomed);
  }
  std::atomic<bool> after{false};
  other.enqueue([&] { after = true; });
  std::this_thread::sleep_for(5ms);
  CHECK(!after.load());  // still waiting for the (destroyed) event's record
  g3.open();
  other.synchronize();
  CHECK(after.load());
  s.synchronize();

  // of(): the right type, or INTERNAL.
  dp::Event& base = e;
  CHECK(&WorkerEvent::of(base) == &e);
  struct OtherEvent : dp::Event {} other_event;
  CHECK_ERROR(WorkerEvent::of(other_event), DPP_INTERNAL, "not a devplug::plugin::worker::WorkerEvent");
  dp::Stream& sbase = s;
  CHECK(&WorkerStream::of(sbase) == &s);
  struct OtherStream : dp::Stream {} other_stream;
  CHECK_ERROR(WorkerStream::of(other_stream), DPP_INTERNAL, "not a devplug::plugin::worker::WorkerStream");
}

void test_elapsed() {
  section("timed events: elapsed_ns and its errors");
  WorkerStream s1("time1"), s2("time2");
  WorkerEvent e0, e1, e2, never;
  s1.record(e0);
  s1.enqueue([] { std::this_thread::sleep_for(5ms); });
  s1.record(e1);
  s1.synchronize();
  const int64_t ns = e0.elapsed_ns(e1);
  CHECK_MSG(ns >= 5000000, "elapsed " + std::to_string(ns) + " ns around a 5 ms job");
  CHECK(e1.elapsed_ns(e0) == -ns);
  CHECK(e0.elapsed_ns(e0) == 0);
  // Across streams: s2 waits for e1, sleeps, records e2.
  s1.record(e1);
  s2.wait_event(e1);
  s2.enqueue([] { std::this_thread::sleep_for(2ms); });
  s2.record(e2);
  s2.synchronize();
  CHECK(e1.elapsed_ns(e2) >= 2000000);

  CHECK_ERROR(never.elapsed_ns(e0), DPP_FAILED_PRECONDITION, "the start event was never recorded");
  CHECK_ERROR(e0.elapsed_ns(never), DPP_FAILED_PRECONDITION, "the end event was never recorded");
  Gate gate;
  s1.enqueue([&] { gate.wait(); });
  s1.record(e1);
  CHECK_ERROR(e0.elapsed_ns(e1), DPP_FAILED_PRECONDITION, "the end event is still pending");
  gate.open();
  s1.synchronize();
  CHECK(e0.elapsed_ns(e1) > 0);
  s1.enqueue([]() -> void { throw dp::Error::invalid_argument("the stream's own message"); });
  s1.record(e1);
  CHECK_ERROR(e1.synchronize(), DPP_INVALID_ARGUMENT,
              "the stream failed before reaching the event: the stream's own message");
  const auto err = plugin_error_of([&] { e1.elapsed_ns(e0); });
  CHECK(err.first == DPP_FAILED_PRECONDITION &&
        contains(err.second, "the start event reports an error: its stream failed before reaching it") &&
        contains(err.second, "the stream's own message"));
  CHECK_ERROR(s1.synchronize(), DPP_INVALID_ARGUMENT, "the stream's own message");
}

void test_waits() {
  section("wait_event and wait_stream across streams");
  WorkerStream s1("wait1"), s2("wait2");
  Log log;
  // wait_event: s2's later work runs after s1 reached the event.
  Gate gate;
  WorkerEvent e;
  s1.enqueue([&] { gate.wait(); });
  s1.enqueue([&] { log.add(1); });
  s1.record(e);
  s2.wait_event(e);
  s2.enqueue([&] { log.add(2); });
  std::this_thread::sleep_for(10ms);
  CHECK(log.get().empty());  // s2 is held behind s1's gate
  gate.open();
  s2.synchronize();
  CHECK((log.get() == std::vector<int>{1, 2}));
  s1.synchronize();

  // wait_stream: s2 waits for everything enqueued on s1 so far; its own is a no-op.
  Gate g2;
  s1.enqueue([&] { g2.wait(); });
  s1.enqueue([&] { log.add(3); });
  s2.wait_stream(s1);
  s2.wait_stream(s2);
  s2.enqueue([&] { log.add(4); });
  std::this_thread::sleep_for(10ms);
  CHECK(log.get().size() == 2);
  g2.open();
  s2.synchronize();
  CHECK((log.get() == std::vector<int>{1, 2, 3, 4}));

  // An error does not pass through a wait: s2 is fine, s1 reports its own.
  s1.enqueue([]() -> void { throw dp::Error::internal("s1 failed"); });
  s1.record(e);
  s2.wait_stream(s1);
  s2.wait_event(e);
  s2.enqueue([&] { log.add(5); });
  CHECK_ERROR(s2.synchronize(), DPP_OK, "");
  CHECK(log.get().back() == 5);
  CHECK_ERROR(s1.synchronize(), DPP_INTERNAL, "s1 failed");

  // Nothing to wait for: a never-recorded event, an empty stream.
  WorkerEvent fresh;
  WorkerStream empty("empty");
  s2.wait_event(fresh);
  s2.wait_stream(empty);
  s2.synchronize();

  // Waits on a stream (or event) that is gone by the time the wait runs still return.
  Gate g3;
  s2.enqueue([&] { g3.wait(); });
  {
    WorkerStream brief("brief");
    brief.enqueue([] {});
    s2.wait_stream(brief);
  }  // destroyed (its work done) before s2 gets to the wait
  g3.open();
  s2.synchronize();
}

void test_host_callbacks() {
  section("host callbacks: exactly once, also on a stream in error; self-synchronize fails");
  WorkerStream s("callbacks");
  std::atomic<int> calls{0};
  s.host_callback(dp::HostCallback(&count_call, &calls));
  s.synchronize();
  CHECK(calls.load() == 1);

  // On a stream in error: still called, once.
  s.enqueue([]() -> void { throw dp::Error::internal("broken"); });
  s.host_callback(dp::HostCallback(&count_call, &calls));
  CHECK_ERROR(s.synchronize(), DPP_INTERNAL, "broken");
  CHECK(calls.load() == 2);

  // After earlier work, before later work.
  Log log;
  s.enqueue([&] { log.add(1); });
  struct Arg {
    Log* log;
  } arg{&log};
  s.host_callback(dp::HostCallback([](void* p) { static_cast<Arg*>(p)->log->add(2); }, &arg));
  s.enqueue([&] { log.add(3); });
  s.synchronize();
  CHECK((log.get() == std::vector<int>{1, 2, 3}));

  // Inside a job or a host callback, synchronizing its own stream (or all streams, one of
  // which is its own) fails instead of waiting for itself; another stream may be synchronized.
  WorkerStreams streams("dev:9");
  std::unique_ptr<WorkerStream> own = streams.create();
  WorkerStream other("other");
  std::pair<dpp_status_t, std::string> self_sync, self_all, other_sync;
  own->enqueue([&] {
    self_sync = plugin_error_of([&] { own->synchronize(); });
    self_all = plugin_error_of([&] { streams.synchronize_all(); });
    other_sync = plugin_error_of([&] { other.synchronize(); });
  });
  own->synchronize();
  CHECK(self_sync.first == DPP_FAILED_PRECONDITION && contains(self_sync.second, "\"dev:9-stream0\"") &&
        contains(self_sync.second, "would wait for itself"));
  CHECK(self_all.first == DPP_FAILED_PRECONDITION && contains(self_all.second, "synchronize_all") &&
        contains(self_all.second, "dev:9-stream0"));
  CHECK(other_sync.first == DPP_OK);
  CHECK_ERROR(own->synchronize(), DPP_OK, "");  // the failed calls left no error on the stream
}

void test_destroy_from_own_callback() {
  section("a stream destroyed from its own host callback");
  WorkerStreams streams("dev:1");
  std::unique_ptr<WorkerStream> keep = streams.create();
  struct Holder {
    std::unique_ptr<WorkerStream> stream;
    std::atomic<bool> destroyed{false};
  } holder;
  holder.stream = streams.create();
  CHECK(streams.size() == 2);
  std::atomic<int> after{0};
  std::atomic<int> calls{0};
  Gate gate;
  holder.stream->enqueue([&] { gate.wait(); });
  holder.stream->host_callback(dp::HostCallback(
      [](void* p) {
        auto* h = static_cast<Holder*>(p);
        h->stream.reset();  // ~WorkerStream on its own worker: must not join itself
        h->destroyed = true;
      },
      &holder));
  // Work queued behind the callback still runs, on the (now detached) worker.
  holder.stream->enqueue([&] { ++after; });
  holder.stream->host_callback(dp::HostCallback(&count_call, &calls));
  gate.open();
  CHECK_MSG(eventually([&] { return holder.destroyed.load() && after.load() == 1 && calls.load() == 1; }),
            "the callback destroyed its stream and the rest of the queue ran");
  CHECK(eventually([&] { return streams.size() == 1; }));  // forgotten once its thread let go
  streams.synchronize_all();                                 // only `keep` is left
  keep->synchronize();
}

void test_synchronize_all() {
  section("WorkerStreams: synchronize_all over the live streams");
  WorkerStreams streams("dev:0");
  CHECK(streams.name() == "dev:0");
  CHECK(streams.empty() && streams.size() == 0);
  streams.synchronize_all();  // nothing to do
  std::unique_ptr<WorkerStream> a = streams.create(), b = streams.create(), c = streams.create();
  CHECK(a->name() == "dev:0-stream0" && b->name() == "dev:0-stream1" && c->name() == "dev:0-stream2");
  CHECK(streams.size() == 3);
  std::atomic<int> done{0};
  for (WorkerStream* s : {a.get(), b.get(), c.get()}) {
    s->enqueue([&] {
      std::this_thread::sleep_for(2ms);
      ++done;
    });
  }
  streams.synchronize_all();
  CHECK(done.load() == 3);  // waited for every stream

  b->enqueue([]() -> void { throw dp::Error::not_found("b failed"); });
  c->enqueue([]() -> void { throw dp::Error::invalid_argument("c failed"); });
  CHECK_ERROR(streams.synchronize_all(), DPP_NOT_FOUND, "b failed");  // the first met, in order
  // Every stream's error was cleared.
  CHECK_ERROR(b->synchronize(), DPP_OK, "");
  CHECK_ERROR(c->synchronize(), DPP_OK, "");
  CHECK_ERROR(streams.synchronize_all(), DPP_OK, "");

  // A destroyed stream is forgotten; one made with WorkerStream(name) was never known.
  b.reset();
  CHECK(streams.size() == 2);
  WorkerStream loose("loose");
  loose.enqueue([]() -> void { throw dp::Error::internal("loose failed"); });
  streams.synchronize_all();
  CHECK_ERROR(loose.synchronize(), DPP_INTERNAL, "loose failed");
  std::unique_ptr<WorkerStream> d = streams.create();
  CHECK(d->name() == "dev:0-stream3" && streams.size() == 3);
}

void test_threads() {
  section("many threads at once: enqueue, record, wait, host callbacks");
  WorkerStreams streams("dev:7");
  std::vector<std::unique_ptr<WorkerStream>> ss;
  for (int i = 0; i < 3; ++i) ss.push_back(streams.create());
  std::vector<std::unique_ptr<WorkerEvent>> es;
  for (int i = 0; i < 3; ++i) es.push_back(std::make_unique<WorkerEvent>());
  std::atomic<int> jobs{0}, calls{0};
  const int threads = 4, rounds = 300;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        WorkerStream& s = *ss[static_cast<size_t>((t + i) % 3)];
        s.enqueue([&] { ++jobs; });
        s.host_callback(dp::HostCallback(&count_call, &calls));
        s.record(*es[static_cast<size_t>(i % 3)]);
        s.wait_event(*es[static_cast<size_t>((i + 1) % 3)]);
        if (i % 50 == 0) s.wait_stream(*ss[static_cast<size_t>((t + i + 1) % 3)]);
        if (i % 100 == 0) (void)es[0]->status();
      }
    });
  }
  for (auto& th : pool) th.join();
  streams.synchronize_all();
  CHECK(jobs.load() == threads * rounds);
  CHECK(calls.load() == threads * rounds);
  for (auto& e : es) CHECK(e->status() == EventStatus::Complete);
}

}  // namespace

int main() {
  test_order_and_asynchrony();
  test_first_error();
  test_exceptions();
  test_events();
  test_elapsed();
  test_waits();
  test_host_callbacks();
  test_destroy_from_own_callback();
  test_synchronize_all();
  test_threads();
  return summary("plugin_worker_test");
}
