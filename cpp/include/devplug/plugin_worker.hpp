/**
 * @file plugin_worker.hpp
 * @brief Ready-made streams and events for C++ plugins whose devices run their work on host
 *        threads (header-only, C++17; the C++ twin of the Rust SDK's `worker` module).
 *
 * Most of a Device for a simulator, or for a device whose memory the host can reach, is the
 * same plumbing: an ordered queue per stream run by a worker thread, the stream's first error,
 * events, host callbacks, waits between streams, `synchronize_all`, and exceptions thrown on
 * the worker. This header is that plumbing, written once to the ABI's rules (plugin guide §1,
 * "Streams, events and errors"):
 *
 * - worker::WorkerStream (a devplug::plugin::Stream): an ordered queue run by its own thread.
 *   Work is any callable (WorkerStream::enqueue()); an exception it throws becomes the
 *   stream's **first** error if the stream holds none, later work still runs, and
 *   WorkerStream::synchronize() throws the error once and clears it. The worker never dies of
 *   an exception:
 *
 *   | thrown by a job               | the stream's error                                  |
 *   | ----------------------------- | --------------------------------------------------- |
 *   | `devplug::plugin::Error`      | its code and message (`DPP_OK` becomes `DPP_INTERNAL`) |
 *   | `std::bad_alloc`              | `DPP_RESOURCE_EXHAUSTED`                            |
 *   | any other `std::exception`    | `DPP_INTERNAL`, message `what()`                    |
 *   | anything else                 | `DPP_INTERNAL`, "unknown C++ exception of type T"   |
 *
 *   (the same table as plugin.hpp's entry points).
 * - worker::WorkerEvent (a devplug::plugin::Event): a marker in a stream, re-recordable (the
 *   latest record counts); it reports EventStatus::Error when its stream reached it while in
 *   error (and its synchronize() throws that error), and it is timed (the instant the stream
 *   reached it) for Device::event_elapsed_ns().
 * - worker::WorkerStreams: the streams of one device, for Device::synchronize_all().
 *
 * With them each stream and event function of Device is one line; you write memory, the
 * synchronous copies, the four `*_async` operations (check the arguments at once, then enqueue
 * the work) and kernels (enqueue on `cx.stream<WorkerStream>()`).
 *
 * **When to use it:** devices that do their work on host threads — simulators, reference
 * devices, devices whose memory the host can address, or hardware driven synchronously from
 * the host. **When not to:** real accelerators with queues of their own (CUDA streams and
 * events, a command queue): map Device's streams and events onto those; a worker thread per
 * stream in front of an asynchronous queue only adds a hop.
 *
 * Threads: each stream owns one thread (link `Threads::Threads`), joined when the stream is
 * destroyed, after it ran what is queued (the host destroys every stream before its device
 * and the plugin, so no worker outlives the library). A stream destroyed from its own worker
 * (the host destroyed it inside one of its host callbacks) cannot join itself: its thread runs
 * what is queued and ends by itself. Every member function may be called from any thread,
 * concurrently.
 *
 * The stream and event half of a device (the memory half is elided; plugins/simdml/simdml.cpp
 * is a whole device):
 *
 * @code
 * #include <devplug/plugin_worker.hpp>
 * namespace dp = devplug::plugin;
 * using dp::worker::WorkerEvent;
 * using dp::worker::WorkerStream;
 * using dp::worker::WorkerStreams;
 *
 * class MyDevice : public dp::Device {
 *  public:
 *   explicit MyDevice(int ordinal) : streams_("mydev:" + std::to_string(ordinal)) {}
 *
 *   std::unique_ptr<dp::Stream> create_stream() override { return streams_.create(); }
 *   // ~WorkerStream runs what is queued, then joins (not from its own worker).
 *   void destroy_stream(std::unique_ptr<dp::Stream>) override {}
 *   void synchronize_stream(dp::Stream& s) override { WorkerStream::of(s).synchronize(); }
 *   void stream_wait_stream(dp::Stream& s, dp::Stream& other) override {
 *     WorkerStream::of(s).wait_stream(WorkerStream::of(other));
 *   }
 *   void host_callback(dp::Stream& s, dp::HostCallback cb) override { WorkerStream::of(s).host_callback(cb); }
 *   std::unique_ptr<dp::Event> create_event() override { return std::make_unique<WorkerEvent>(); }
 *   void record_event(dp::Stream& s, dp::Event& e) override { WorkerStream::of(s).record(WorkerEvent::of(e)); }
 *   dp::EventStatus event_status(dp::Event& e) override { return WorkerEvent::of(e).status(); }
 *   void stream_wait_event(dp::Stream& s, dp::Event& e) override {
 *     WorkerStream::of(s).wait_event(WorkerEvent::of(e));
 *   }
 *   void event_synchronize(dp::Event& e) override { WorkerEvent::of(e).synchronize(); }
 *   int64_t event_elapsed_ns(dp::Event& start, dp::Event& end) override {  // optional (ABI 1.4)
 *     return WorkerEvent::of(start).elapsed_ns(WorkerEvent::of(end));
 *   }
 *   void synchronize_all() override { streams_.synchronize_all(); }
 *
 *   // Asynchronous work: check the arguments now (an exception fails the call), then enqueue.
 *   void memset_async(dp::Stream& s, dp::Addr dst, uint8_t value, uint64_t size) override {
 *     uint8_t* p = at(dst, size);                         // throws for a bad range
 *     WorkerStream::of(s).enqueue([p, value, size] {     // an exception here becomes
 *       if (size != 0) std::memset(p, value, size);      // the stream's error
 *     });
 *   }
 *   // ... memory, synchronous copies, the other *_async operations ...
 *
 *  private:
 *   WorkerStreams streams_;
 * };
 * @endcode
 */
#ifndef DEVPLUG_PLUGIN_WORKER_HPP
#define DEVPLUG_PLUGIN_WORKER_HPP

#include <devplug/plugin.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__linux__) && defined(__GLIBC__)
#include <pthread.h>  // pthread_setname_np: the worker's thread name
#endif

namespace devplug {
namespace plugin {
/** @brief Ready-made streams and events for devices that run their work on host threads. */
namespace worker {

class WorkerStream;
class WorkerEvent;
class WorkerStreams;

namespace detail {

using Clock = std::chrono::steady_clock;

/** A job as the worker runs it: its argument is the stream's error (one not yet reported by
 *  synchronize), or null. */
class Job {
 public:
  virtual ~Job() = default;
  virtual void run(const Error* stream_error) = 0;
};

template <class F>
class JobOf final : public Job {
 public:
  explicit JobOf(F f) : f_(std::move(f)) {}
  void run(const Error* stream_error) override { f_(stream_error); }

 private:
  F f_;
};

template <class F>
std::unique_ptr<Job> make_job(F&& f) {
  return std::make_unique<JobOf<std::decay_t<F>>>(std::forward<F>(f));
}

/** "name" in double quotes, for messages. */
inline std::string quoted(const std::string& name) { return "\"" + name + "\""; }

/** What a stream shares with its worker, with work of other streams waiting on it, and with
 *  its WorkerStreams. */
struct StreamState {
  explicit StreamState(std::string n)
      : name(std::move(n)),
        oom(Error::resource_exhausted("out of memory while keeping an exception of a job as the stream's error")) {}

  const std::string name;
  /** Kept ready: an error to keep when building the real one fails (copies never throw). */
  const Error oom;
  std::mutex mu;
  std::condition_variable work;      // the queue got a job, or the stream is closing
  std::condition_variable progress;  // completed went up
  std::deque<std::unique_ptr<Job>> queue;
  uint64_t submitted = 0;  // jobs enqueued so far (the ticket of the latest)
  uint64_t completed = 0;  // jobs done so far (in order: job k is done when completed >= k)
  std::optional<Error> error;  // the first error not yet reported by synchronize
  bool closing = false;        // the stream is being destroyed: no more jobs
  std::thread::id worker;      // set before any job can be enqueued

  bool on_worker() const noexcept { return worker == std::this_thread::get_id(); }

  /** Enqueues @p job; returns its ticket. Throws Error::unavailable once the stream closes
   *  (the job is then destroyed, never run). */
  uint64_t submit(std::unique_ptr<Job> job) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!closing) {
        queue.push_back(std::move(job));
        const uint64_t ticket = ++submitted;
        work.notify_one();
        return ticket;
      }
    }
    throw Error::unavailable("stream " + quoted(name) + ": it is being destroyed; its worker takes no more work");
  }

  /** Blocks until the stream has done its first @p ticket jobs. */
  void wait_for(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mu);
    progress.wait(lock, [&] { return completed >= ticket; });
  }

  void synchronize() {
    if (on_worker()) {
      // Waiting here would wait for the job that is waiting.
      throw Error::failed_precondition("stream " + quoted(name) +
                                       " synchronized from its own worker thread (inside its work or one of its "
                                       "host callbacks): it would wait for itself");
    }
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t ticket = submitted;
    progress.wait(lock, [&] { return completed >= ticket; });
    if (error) {
      Error e = std::move(*error);
      error.reset();
      throw e;
    }
  }

  /** The stream's error for what @p job threw (see the file comment's table). */
  std::optional<Error> run_job(Job& job, const Error* held) const noexcept {
    try {
      try {
        job.run(held);
        return std::nullopt;
      } catch (const Error& e) {
        if (e.code() == DPP_OK) return Error::internal(e.message());
        return e;
      } catch (const std::bad_alloc&) {
        return Error::resource_exhausted("out of memory (std::bad_alloc)");
      } catch (const std::exception& e) {
        return Error::internal(e.what());
      } catch (...) {
        return Error::internal(plugin::detail::Trampolines::unknown_exception());
      }
    } catch (...) {
      return oom;  // building the error threw (std::bad_alloc)
    }
  }

  /** The worker thread's body: ends when the stream closes and the queue is empty. */
  static void run(const std::shared_ptr<StreamState>& s) noexcept {
#if defined(__linux__) && defined(__GLIBC__)
    char thread_name[16] = {};  // Linux keeps 15 bytes
    s->name.copy(thread_name, sizeof thread_name - 1);
    pthread_setname_np(pthread_self(), thread_name);
#endif
    std::unique_lock<std::mutex> lock(s->mu);
    for (;;) {
      s->work.wait(lock, [&] { return s->closing || !s->queue.empty(); });
      if (s->queue.empty()) return;  // closing, and everything queued has run
      std::unique_ptr<Job> job = std::move(s->queue.front());
      s->queue.pop_front();
      const std::optional<Error> held = s->error;  // a copy: synchronize may clear it meanwhile
      lock.unlock();
      // The job runs holding no lock, so it may call anything but this stream's synchronize.
      std::optional<Error> failed = s->run_job(*job, held ? &*held : nullptr);
      job.reset();  // what it captured goes now, outside the lock (it may be this stream)
      lock.lock();
      if (failed && !s->error) s->error = std::move(failed);
      ++s->completed;
      s->progress.notify_all();
    }
  }
};

/** What an event shares with the work that records it or waits for it. */
struct EventState {
  std::mutex mu;
  std::condition_variable changed;
  uint64_t recorded = 0;        // generation of the latest record (0: never recorded)
  uint64_t reached = 0;         // highest generation reached
  std::optional<Error> error;   // the error its stream held when it reached `reached`
  Clock::time_point reached_at;  // when the stream reached `reached`

  /** Record @p generation was reached, its stream holding @p stream_error (or not), now. */
  void reach(uint64_t generation, const Error* stream_error) noexcept {
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      // Records on different streams may be reached out of order: the latest counts.
      if (generation >= reached) {
        reached = generation;
        if (stream_error != nullptr) {
          error = *stream_error;  // copies never throw
        } else {
          error.reset();
        }
        reached_at = now;
      }
    }
    changed.notify_all();
  }

  void wait_for(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return reached >= generation; });
  }

  uint64_t latest() {
    std::lock_guard<std::mutex> lock(mu);
    return recorded;
  }

  /** When the stream reached the latest record; throws Error::failed_precondition naming the
   *  event as @p which otherwise. */
  Clock::time_point reached_time(const char* which) {
    std::lock_guard<std::mutex> lock(mu);
    const std::string event = std::string("the ") + which + " event";
    if (recorded == 0) throw Error::failed_precondition(event + " was never recorded");
    if (reached < recorded) {
      throw Error::failed_precondition(event + " is still pending (its stream has not reached the record)");
    }
    if (error) {
      throw Error::failed_precondition(event + " reports an error: its stream failed before reaching it: " +
                                       error->message());
    }
    return reached_at;
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------
// WorkerEvent
// ------------------------------------------------------------------------------------------

/**
 * @brief An event: a marker in a WorkerStream, re-recordable (the latest record counts).
 *
 * Return it from Device::create_event(). Never recorded, it is EventStatus::Complete (the
 * ABI's rule). Its state is shared with the work that records it or waits for it, so the
 * host may destroy it (Device::destroy_event's default deletes it) while such work is still
 * queued. Every member function may be called from any thread.
 */
class WorkerEvent : public Event {
 public:
  /** @brief A new event, never recorded (complete). */
  WorkerEvent() : state_(std::make_shared<detail::EventState>()) {}

  /**
   * @brief @p event as a WorkerEvent (Device's event functions get an `Event&`).
   * @throws Error `DPP_INTERNAL` when it is another kind of event.
   */
  static WorkerEvent& of(Event& event) {
    auto* e = dynamic_cast<WorkerEvent*>(&event);
    if (e == nullptr) throw Error::internal("the event is not a devplug::plugin::worker::WorkerEvent");
    return *e;
  }

  /** @brief Device::event_status(): pending until its stream reaches the latest record; then
   *         complete, or error if the stream held an error then. */
  EventStatus status() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->reached < state_->recorded) return EventStatus::Pending;
    return state_->error ? EventStatus::Error : EventStatus::Complete;
  }

  /**
   * @brief Device::event_synchronize(): blocks until the event, as recorded now, is reached
   *        (at once when never recorded).
   * @throws Error the stream's error when the stream failed before reaching it, as the ABI
   *         asks: its code, and its message after "the stream failed before reaching the
   *         event: " (error() gives it as it was); the stream still reports it too, once, from
   *         its own synchronize().
   */
  void synchronize() const {
    state_->wait_for(state_->latest());
    if (std::optional<Error> why = error()) {
      throw Error(why->code(),
                  "the stream failed before reaching the event: " + std::string(why->message()));
    }
  }

  /**
   * @brief The stream's error when it reached the latest record (its code and message), or
   *        nothing while pending, complete, or never recorded.
   */
  std::optional<Error> error() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->reached < state_->recorded) return std::nullopt;
    return state_->error;
  }

  /**
   * @brief Device::event_elapsed_ns() (ABI 1.4): nanoseconds from when a stream reached this
   *        event to when a stream reached @p end (negative when @p end was reached first; 0
   *        for the same event twice), each from its latest record.
   * @throws Error `DPP_FAILED_PRECONDITION` when either event was never recorded, is still
   *         pending, or was reached after its stream failed; the message names it ("the start
   *         event is still pending …").
   */
  int64_t elapsed_ns(const WorkerEvent& end) const {
    const detail::Clock::time_point s = state_->reached_time("start");
    const detail::Clock::time_point e = end.state_->reached_time("end");
    return std::chrono::duration_cast<std::chrono::nanoseconds>(e - s).count();
  }

 private:
  friend class WorkerStream;
  std::shared_ptr<detail::EventState> state_;
};

// ------------------------------------------------------------------------------------------
// WorkerStream
// ------------------------------------------------------------------------------------------

/**
 * @brief A stream whose work runs in order on a thread of its own.
 *
 * Return it from Device::create_stream() (through WorkerStreams::create(), for
 * synchronize_all). Each job is a callable; the first exception one throws becomes the
 * stream's error (see the file comment for the status of each kind), which synchronize()
 * throws once and clears. Later jobs still run (the ABI's rule), and events the stream
 * reaches while it holds an error report EventStatus::Error.
 *
 * Every member function may be called from any thread, concurrently. Destroying the stream
 * runs what is queued, then joins the worker; destroyed from its worker itself (inside one of
 * its jobs or host callbacks) it cannot join: the thread runs what is queued and ends by
 * itself. An error no synchronize reported goes with the stream.
 */
class WorkerStream : public Stream {
 public:
  /**
   * @brief Starts a stream; @p name names its worker thread (Linux keeps the first 15 bytes)
   *        and appears in its messages.
   * @throws Error `DPP_RESOURCE_EXHAUSTED` when the thread cannot be started.
   */
  explicit WorkerStream(std::string name) : state_(std::make_shared<detail::StreamState>(std::move(name))) {
    try {
      std::shared_ptr<detail::StreamState> s = state_;
      thread_ = std::thread([s] { detail::StreamState::run(s); });
    } catch (const std::system_error& e) {
      throw Error::resource_exhausted("cannot start the worker thread of stream " + detail::quoted(state_->name) +
                                      ": " + e.what());
    }
    // Set before any job can be enqueued (no one else has the stream yet).
    state_->worker = thread_.get_id();
  }

  /** @brief Runs what is queued, then joins the worker (unless called on the worker itself). */
  ~WorkerStream() override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->closing = true;
    }
    state_->work.notify_all();
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) {
      // Destroyed inside one of its own jobs (a host callback): the thread ends by itself once
      // this job returns and the rest of the queue has run; it cannot join itself.
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  /**
   * @brief @p stream as a WorkerStream (Device's stream functions get a `Stream&`).
   * @throws Error `DPP_INTERNAL` when it is another kind of stream.
   */
  static WorkerStream& of(Stream& stream) {
    auto* s = dynamic_cast<WorkerStream*>(&stream);
    if (s == nullptr) throw Error::internal("the stream is not a devplug::plugin::worker::WorkerStream");
    return *s;
  }

  /** @brief The name given to the constructor. */
  const std::string& name() const noexcept { return state_->name; }

  /** @brief Whether the calling thread is this stream's worker (inside one of its jobs or
   *         host callbacks). */
  bool is_worker_thread() const noexcept { return state_->on_worker(); }

  /**
   * @brief Enqueues @p job (a callable taking no argument; what it returns is ignored), to run
   *        on the worker after all earlier work of the stream.
   *
   * An exception it throws becomes the stream's error if the stream holds none; later work
   * still runs. @p job runs with no lock of the stream held, so it may call anything (another
   * stream's functions, a HostCallback), except synchronize() of this stream, which would wait
   * for itself (it throws instead). It may be move-only; it is destroyed on the worker after
   * it ran.
   *
   * Check what can be checked **before** enqueuing (a bad address should fail the `*_async`
   * call itself, not the stream).
   *
   * @throws Error `DPP_UNAVAILABLE` when the stream is being destroyed, or std::bad_alloc; the
   *         job is then destroyed without running.
   */
  template <class F>
  void enqueue(F&& job) {
    static_assert(std::is_invocable<std::decay_t<F>&>::value, "WorkerStream::enqueue: the job must be callable with no argument");
    state_->submit(detail::make_job([f = std::decay_t<F>(std::forward<F>(job))](const Error*) mutable { f(); }));
  }

  /**
   * @brief Device::host_callback(): enqueues @p callback, so the host's function runs exactly
   *        once, on the worker, after all earlier work (whether or not the stream holds an
   *        error), holding no lock, and later work waits for it to return. When this throws
   *        the callback was not enqueued and will never run.
   */
  void host_callback(HostCallback callback) {
    enqueue([callback] { callback(); });
  }

  /**
   * @brief Device::synchronize_stream(): blocks until the work enqueued so far is done; throws
   *        the stream's first error and clears it.
   * @throws Error the stream's error; `DPP_FAILED_PRECONDITION` when called from the stream's
   *         own worker (inside one of its jobs or host callbacks), where it would wait for itself.
   */
  void synchronize() { state_->synchronize(); }

  /**
   * @brief Device::stream_wait_stream(): later work on this stream waits until @p other has
   *        done the work enqueued on it so far. @p other may be this stream (nothing to do) or a
   *        stream of another device. Waiting does not pass @p other's error on.
   */
  void wait_stream(const WorkerStream& other) {
    if (other.state_ == state_) return;
    uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(other.state_->mu);
      ticket = other.state_->submitted;
    }
    if (ticket == 0) return;
    std::shared_ptr<detail::StreamState> o = other.state_;
    state_->submit(detail::make_job([o, ticket](const Error*) { o->wait_for(ticket); }));
  }

  /**
   * @brief Device::record_event(): marks the current end of this stream in @p event (replacing
   *        its earlier record). The event is pending until the stream gets there, then
   *        complete, or EventStatus::Error if the stream holds an error then.
   */
  void record(WorkerEvent& event) {
    std::shared_ptr<detail::EventState> e = event.state_;
    // The new generation becomes visible to waits only once its record is queued (under the
    // event's lock), so a wait always points at work queued before it: waits form no cycle.
    // When this throws, the event keeps its earlier record.
    std::lock_guard<std::mutex> lock(e->mu);
    const uint64_t generation = e->recorded + 1;
    state_->submit(detail::make_job(
        [e, generation](const Error* stream_error) { e->reach(generation, stream_error); }));
    e->recorded = generation;
  }

  /**
   * @brief Device::stream_wait_event(): later work on this stream waits until @p event, as
   *        recorded now, is reached (nothing to wait for when it was never recorded). Events
   *        of any WorkerStream work, of any device.
   */
  void wait_event(const WorkerEvent& event) {
    std::shared_ptr<detail::EventState> e = event.state_;
    const uint64_t generation = e->latest();
    if (generation == 0) return;
    state_->submit(detail::make_job([e, generation](const Error*) { e->wait_for(generation); }));
  }

 private:
  friend class WorkerStreams;
  std::shared_ptr<detail::StreamState> state_;
  std::thread thread_;
};

// ------------------------------------------------------------------------------------------
// WorkerStreams
// ------------------------------------------------------------------------------------------

/**
 * @brief The streams of one device, for Device::synchronize_all().
 *
 * create() starts a stream and remembers it (weakly: a destroyed stream is forgotten);
 * synchronize_all() synchronizes every live one. Thread safe.
 */
class WorkerStreams {
 public:
  /** @brief No streams yet; @p name (e.g. the device's, `"mydev:0"`) names their threads
   *         `<name>-stream<n>`. */
  explicit WorkerStreams(std::string name) : name_(std::move(name)) {}
  WorkerStreams(const WorkerStreams&) = delete;
  WorkerStreams& operator=(const WorkerStreams&) = delete;

  /** @brief The name given to the constructor. */
  const std::string& name() const noexcept { return name_; }

  /**
   * @brief Device::create_stream(): starts a WorkerStream named `<name>-stream<n>` and
   *        remembers it.
   * @throws Error `DPP_RESOURCE_EXHAUSTED` when its thread cannot be started.
   */
  std::unique_ptr<WorkerStream> create() {
    const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
    auto stream = std::make_unique<WorkerStream>(name_ + "-stream" + std::to_string(n));
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                  [](const std::weak_ptr<detail::StreamState>& s) { return s.expired(); }),
                   streams_.end());  // forget destroyed streams
    streams_.push_back(stream->state_);
    return stream;
  }

  /** @brief How many streams made by create() are alive. */
  size_t size() const { return live().size(); }
  /** @brief Whether no stream made by create() is alive. */
  bool empty() const { return size() == 0; }

  /**
   * @brief Device::synchronize_all(): synchronizes every live stream; throws the first error
   *        met (every stream's error is cleared).
   * @throws Error that error; `DPP_FAILED_PRECONDITION`, changing nothing, when called from
   *         the worker of one of these streams (inside its work or a host callback), where it
   *         would wait for itself.
   */
  void synchronize_all() const {
    const std::vector<std::shared_ptr<detail::StreamState>> streams = live();
    for (const auto& s : streams) {
      if (s->on_worker()) {
        throw Error::failed_precondition("synchronize_all called from the worker thread of stream " +
                                         detail::quoted(s->name) +
                                         " (inside its work or one of its host callbacks): it would wait for itself");
      }
    }
    std::optional<Error> first;
    for (const auto& s : streams) {
      try {
        s->synchronize();
      } catch (const Error& e) {
        if (!first) first = e;
      }
    }
    if (first) throw *first;
  }

 private:
  std::vector<std::shared_ptr<detail::StreamState>> live() const {
    std::vector<std::shared_ptr<detail::StreamState>> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : streams_) {
      if (auto s = w.lock()) out.push_back(std::move(s));
    }
    return out;
  }

  const std::string name_;
  std::atomic<uint64_t> next_{0};
  mutable std::mutex mu_;
  std::vector<std::weak_ptr<detail::StreamState>> streams_;
};

}  // namespace worker
}  // namespace plugin
}  // namespace devplug

#endif  // DEVPLUG_PLUGIN_WORKER_HPP
