/**
 * @file graph.hpp
 * @brief devplug's graphs and variables for C++17 (wraps `dp_graph_*` and `dp_variable_*`).
 *
 * Included by `devplug/devplug.hpp`; see docs/c-api.md ("Graphs and variables").
 *
 * @code
 * devplug::Variable w = rt.variable("w", devplug::Tensor::from_vector<float>(cpu, {2}, {2, 3}));
 * devplug::Graph g;
 * auto x = g.placeholder("x", devplug::DType::F32, {-1, 2});
 * devplug::GraphOutput y = g.op1(rt, "y", rt.op("Mul"), {x, g.read("w_read", w)});
 * std::vector<devplug::Tensor> out = g.run(rt, {{x, batch}}, {y});
 * @endcode
 */
#ifndef DEVPLUG_GRAPH_HPP
#define DEVPLUG_GRAPH_HPP

#include <devplug/devplug.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devplug {

/**
 * @brief What is known of a graph output before running (`Graph::partial_spec()`): a
 *        placeholder `f32 [-1, 784]` (a dynamic batch) makes a MatMul by `[784, 128]`
 *        `f32 [-1, 128]`.
 */
struct GraphSpec {
  /** @brief The dtype; empty where only a run tells. */
  std::optional<DType> dtype;
  /** @brief The dimensions, -1 for a size only a run tells; empty where the rank is unknown. */
  std::optional<Shape> shape;
  /** @brief Whether the dtype and every size are known. */
  bool complete() const {
    if (!dtype || !shape) return false;
    for (int64_t d : *shape) {
      if (d < 0) return false;
    }
    return true;
  }
};

/**
 * @brief A persistent tensor on a device (`dp_variable_t`), made by `Runtime::variable()`.
 *        Copies share the variable (they hold references). Graphs that read or assign it hold
 *        their own.
 */
class Variable {
 public:
  /** @brief Empty. */
  Variable() noexcept = default;
  /** @brief Wraps @p handle, taking over the caller's reference. */
  static Variable adopt(dp_variable_t* handle) noexcept { return Variable(handle); }

  ~Variable() { dp_variable_release(handle_); }
  /** @brief Another reference to the same variable. */
  Variable(const Variable& other) noexcept : handle_(other.handle_) {
    if (handle_ != nullptr) dp_variable_retain(handle_);
  }
  Variable& operator=(const Variable& other) noexcept {
    if (this != &other) {
      if (other.handle_ != nullptr) dp_variable_retain(other.handle_);
      dp_variable_release(handle_);
      handle_ = other.handle_;
    }
    return *this;
  }
  Variable(Variable&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Variable& operator=(Variable&& other) noexcept {
    if (this != &other) {
      dp_variable_release(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }

  /** @brief The C handle. */
  dp_variable_t* get() const noexcept { return handle_; }
  /** @brief Whether this holds a variable. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /** @brief The variable's name. */
  std::string name() const {
    const char* n = dp_variable_name(h("name"));
    if (n == nullptr) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return n;
  }
  /** @brief The device it lives on. Throws `FAILED_PRECONDITION` once the device's runtime was
   *         destroyed (its device handles went with it; the variable can still be read). */
  Device device() const {
    dp_device_t* d = nullptr;
    check(dp_variable_device(h("device"), &d));
    return Device(d);
  }
  /** @brief The current value; later assignments leave the returned tensor as it is. */
  Tensor read() const {
    dp_tensor_t* t = nullptr;
    check(dp_variable_read(h("read"), &t));
    return Tensor::adopt(t);
  }
  /**
   * @brief Copies @p value onto the variable's device and makes it the current value.
   * @throws Error `DP_INVALID_ARGUMENT` naming the variable when the dtype or shape differs
   *         (the value stays).
   */
  void assign(const Tensor& value) { check(dp_variable_assign(h("assign"), value.get())); }

 private:
  explicit Variable(dp_variable_t* handle) noexcept : handle_(handle) {}
  dp_variable_t* h(const char* method) const { return detail::live(handle_, "Variable", method); }
  dp_variable_t* handle_ = nullptr;
};

/** @brief One output of a graph node (`dp_graph_output_t`), a plain value. */
using GraphOutput = dp_graph_output_t;

/**
 * @brief The feeds of `Graph::run`: (placeholder, tensor) pairs, the tensor by reference, by
 *        pointer or a temporary: `{{x, batch}, {y, &labels}}`, or a
 *        `std::vector<std::pair<GraphOutput, const Tensor*>>`; `{}` for none. Like `Inputs`, it
 *        borrows the tensors' handles: they must live until the run returns, as they do when
 *        the feeds are written in the call. A null pointer or an empty tensor goes to the C
 *        library as NULL, which it refuses, naming the feed.
 */
class Feeds {
 public:
  /** @brief One feed: a placeholder and its tensor. */
  class Feed {
   public:
    /** @brief @p tensor for @p placeholder. */
    Feed(GraphOutput placeholder, const Tensor& tensor) noexcept : output_(placeholder), tensor_(tensor.get()) {}
    /** @brief @p tensor (which may be null: an error naming the feed) for @p placeholder. */
    Feed(GraphOutput placeholder, const Tensor* tensor) noexcept
        : output_(placeholder), tensor_(tensor != nullptr ? tensor->get() : nullptr) {}
    /** @brief The placeholder. */
    GraphOutput output() const noexcept { return output_; }
    /** @brief The tensor's handle (borrowed; NULL for a null pointer or an empty tensor). */
    dp_tensor_t* tensor() const noexcept { return tensor_; }

   private:
    GraphOutput output_;
    dp_tensor_t* tensor_;
  };

  /** @brief No feeds. */
  Feeds() noexcept = default;
  /** @brief Braces: `{{x, batch}, {y, &labels}}`. */
  Feeds(std::initializer_list<Feed> feeds) {
    outputs_.reserve(feeds.size());
    tensors_.reserve(feeds.size());
    for (const Feed& f : feeds) add(f.output(), f.tensor());
  }
  /** @brief A list of (placeholder, tensor pointer) pairs, as `Graph::run` took before. */
  Feeds(const std::vector<std::pair<GraphOutput, const Tensor*>>& feeds) {
    outputs_.reserve(feeds.size());
    tensors_.reserve(feeds.size());
    for (const auto& f : feeds) add(f.first, f.second != nullptr ? f.second->get() : nullptr);
  }

  /** @brief The number of feeds. */
  size_t size() const noexcept { return outputs_.size(); }
  /** @brief The placeholders, in order. */
  const GraphOutput* outputs() const noexcept { return outputs_.data(); }
  /** @brief The tensors' handles, in order. */
  dp_tensor_t* const* tensors() const noexcept { return tensors_.data(); }

 private:
  void add(GraphOutput output, dp_tensor_t* tensor) {
    outputs_.push_back(output);
    tensors_.push_back(tensor);
  }
  std::vector<GraphOutput> outputs_;
  std::vector<dp_tensor_t*> tensors_;
};

/**
 * @brief A graph (`dp_graph_t`): placeholders, constants, ops, variable reads and
 *        assignments, built once and run many times. Move-only. Each op node is placed when
 *        it is added (its device, else the scopes entered on this thread, else the default
 *        device); a run executes only what its fetches need, and its assignments take effect
 *        only when it succeeds.
 */
class Graph {
 public:
  /** @brief An empty graph (`dp_graph_create()`). */
  Graph() { check(dp_graph_create(&handle_)); }
  ~Graph() { dp_graph_destroy(handle_); }
  Graph(Graph&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Graph& operator=(Graph&& other) noexcept {
    if (this != &other) {
      dp_graph_destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /** @brief The C handle. */
  dp_graph_t* get() const noexcept { return handle_; }

  /** @brief A placeholder of @p dtype and @p shape (a dimension of -1 takes any size). An
   *  empty name: one is made up. */
  GraphOutput placeholder(const std::string& name, DType dtype, const Shape& shape) {
    static const int64_t scalar_shape = 0;  // a valid pointer for rank 0
    GraphOutput o{};
    check(dp_graph_add_placeholder(h("placeholder"), name.c_str(), to_c(dtype),
                                   shape.empty() ? &scalar_shape : shape.data(), shape.size(),
                                   &o));
    return o;
  }
  /** @brief A placeholder of @p dtype that takes any shape. */
  GraphOutput placeholder(const std::string& name, DType dtype) {
    GraphOutput o{};
    check(dp_graph_add_placeholder(h("placeholder"), name.c_str(), to_c(dtype), nullptr,
                                   DP_GRAPH_ANY_RANK, &o));
    return o;
  }
  /** @brief A constant holding @p value. */
  GraphOutput constant(const std::string& name, const Tensor& value) {
    GraphOutput o{};
    check(dp_graph_add_constant(h("constant"), name.c_str(), value.get(), &o));
    return o;
  }
  /**
   * @brief A node running @p op on @p inputs, on @p device or, when it is empty, where
   *        placement puts it now; returns its outputs (`Op::num_outputs()` of them).
   * @param attrs the attributes, or `nullptr` for none (overloads take them by reference, or
   *        only a device: `g.op(rt, "n", op, {x}, attrs)`, `g.op(rt, "n", op, {x}, gpu)`).
   * @throws Error `DP_INVALID_ARGUMENT` naming the node for inputs the op refuses (where their
   *         shapes are known), a taken name, outputs of another graph.
   */
  std::vector<GraphOutput> op(const Runtime& rt, const std::string& name, const Op& op,
                              const std::vector<GraphOutput>& inputs, const Attrs* attrs = nullptr,
                              const Device& device = Device()) {
    return add_op(rt, name, op, inputs, detail::attrs_handle(attrs, "Graph::op"), device);
  }
  /** @brief op() with attributes by reference. */
  std::vector<GraphOutput> op(const Runtime& rt, const std::string& name, const Op& op,
                              const std::vector<GraphOutput>& inputs, const Attrs& attrs,
                              const Device& device = Device()) {
    return add_op(rt, name, op, inputs, detail::attrs_handle(&attrs, "Graph::op"), device);
  }
  /** @brief op() without attributes, on @p device. */
  std::vector<GraphOutput> op(const Runtime& rt, const std::string& name, const Op& op,
                              const std::vector<GraphOutput>& inputs, const Device& device) {
    return add_op(rt, name, op, inputs, nullptr, device);
  }
  /** @brief op() for ops with one output. */
  GraphOutput op1(const Runtime& rt, const std::string& name, const Op& op,
                  const std::vector<GraphOutput>& inputs, const Attrs* attrs = nullptr,
                  const Device& device = Device()) {
    return one(op, this->op(rt, name, op, inputs, attrs, device));
  }
  /** @brief op1() with attributes by reference. */
  GraphOutput op1(const Runtime& rt, const std::string& name, const Op& op,
                  const std::vector<GraphOutput>& inputs, const Attrs& attrs, const Device& device = Device()) {
    return one(op, this->op(rt, name, op, inputs, attrs, device));
  }
  /** @brief op1() without attributes, on @p device. */
  GraphOutput op1(const Runtime& rt, const std::string& name, const Op& op,
                  const std::vector<GraphOutput>& inputs, const Device& device) {
    return one(op, this->op(rt, name, op, inputs, device));
  }
  /** @brief A read of @p variable (its value as the run starts). */
  GraphOutput read(const std::string& name, const Variable& variable) {
    GraphOutput o{};
    check(dp_graph_add_read(h("read"), name.c_str(), variable.get(), &o));
    return o;
  }
  /** @brief An assignment of @p value to @p variable; its output is the value assigned. */
  GraphOutput assign(const std::string& name, const Variable& variable, GraphOutput value) {
    GraphOutput o{};
    check(dp_graph_add_assign(h("assign"), name.c_str(), variable.get(), value, &o));
    return o;
  }
  /** @brief Output @p index of the node named @p name. @throws Error `DP_NOT_FOUND`. */
  GraphOutput find(const std::string& name, size_t index = 0) const {
    GraphOutput o{};
    check(dp_graph_find(h("find"), name.c_str(), index, &o));
    return o;
  }
  /** @brief The name of the node @p output belongs to (`dp_graph_node_name()`). */
  std::string node_name(GraphOutput output) const {
    const char* n = dp_graph_node_name(h("node_name"), output);
    if (n == nullptr) throw Error::from_last_error(DP_INVALID_ARGUMENT);
    return n;
  }
  /**
   * @brief What is known of @p output before running (`dp_graph_output_spec()`): its dtype,
   *        its rank, its dimensions (-1 where only a run tells the size).
   */
  GraphSpec partial_spec(GraphOutput output) const {
    dp_dtype_t dtype = 0;
    size_t rank = 0;
    Shape shape(DP_MAX_RANK);
    check(dp_graph_output_spec(h("partial_spec"), output, &dtype, shape.data(), shape.size(), &rank));
    GraphSpec out;
    if (dtype != 0) out.dtype = static_cast<DType>(dtype);
    if (rank != DP_GRAPH_ANY_RANK) {
      shape.resize(rank);
      out.shape = std::move(shape);
    }
    return out;
  }
  /**
   * @brief The dtype and shape of @p output where both are wholly known before running;
   *        empty where a run tells any of it (`partial_spec()` has the rest).
   */
  std::optional<std::pair<DType, Shape>> spec(GraphOutput output) const {
    GraphSpec s = partial_spec(output);
    if (!s.complete()) return std::nullopt;
    return std::make_pair(*s.dtype, *s.shape);
  }
  /** @brief How many nodes the graph has. */
  size_t node_count() const {
    size_t n = 0;
    check(dp_graph_node_count(h("node_count"), &n));
    return n;
  }

  /**
   * @brief Runs what @p fetches need with @p feeds (placeholder, tensor: `{{x, batch}}` or
   *        `{{x, &batch}}`, see `Feeds`) and returns the fetched tensors (`dp_graph_run()`).
   * @param soft_placement `SoftPlacement::Default`, `Off` (strict) or `On` (or
   *        `DP_SOFT_PLACEMENT_*`).
   * @throws Error naming the node, its op and device when one fails; nothing is assigned then.
   */
  std::vector<Tensor> run(const Runtime& rt, const Feeds& feeds, const std::vector<GraphOutput>& fetches,
                          int32_t soft_placement = SoftPlacement::Default) const {
    dp_graph_t* graph = h("run");
    dp_graph_run_options_t o;
    dp_graph_run_options_init(&o, sizeof o);
    o.soft_placement = soft_placement;
    std::vector<dp_tensor_t*> results(fetches.size(), nullptr);
    check(dp_graph_run(graph, rt.get(), feeds.outputs(), feeds.tensors(), feeds.size(), fetches.data(),
                       fetches.size(), &o, results.data()));
    std::vector<Tensor> out;
    out.reserve(results.size());
    for (dp_tensor_t* t : results) out.push_back(Tensor::adopt(t));
    return out;
  }

 private:
  dp_graph_t* h(const char* method) const { return detail::live(handle_, "Graph", method); }
  std::vector<GraphOutput> add_op(const Runtime& rt, const std::string& name, const Op& op,
                                  const std::vector<GraphOutput>& inputs, const dp_attrs_t* attrs,
                                  const Device& device) {
    dp_graph_t* graph = h("op");
    detail::OutputRoom<GraphOutput> out(op);
    size_t n = 0;
    check(dp_graph_add_op(graph, rt.get(), name.c_str(), op.get(), inputs.data(), inputs.size(), attrs,
                          device.get(), out.data(), out.size(), &n));
    return std::vector<GraphOutput>(out.data(), out.data() + n);
  }
  static GraphOutput one(const Op& op, const std::vector<GraphOutput>& outputs) {
    if (outputs.size() != 1) throw Error(DP_INVALID_ARGUMENT, op.name() + " does not have exactly one output");
    return outputs.front();
  }
  dp_graph_t* handle_ = nullptr;
};

inline Variable Runtime::variable(const std::string& name, const Tensor& initial,
                                  const Device& device) const {
  dp_variable_t* v = nullptr;
  check(dp_variable_create(h("variable"), name.c_str(), initial.get(), device.get(), &v));
  return Variable::adopt(v);
}

}  // namespace devplug

#endif  // DEVPLUG_GRAPH_HPP
