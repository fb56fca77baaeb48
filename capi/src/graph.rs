//! `dp_graph_*` and `dp_variable_*`: graphs built once and run many times, and variables
//! (persistent tensors on a device). The rules are the core's (`devplug_core::graph`,
//! `devplug_core::variable`); docs/c-api.md explains them for C.

use std::ffi::{c_char, CString};

use parking_lot::RwLock;

use devplug_core::{Attrs, Error, Graph, GraphRunOptions, NodeOutput, Tensor, Variable};

use crate::handle::{self, check_out, get, handle, write_out};
use crate::op::{dp_attrs_t, dp_op_t, DP_SOFT_PLACEMENT_DEFAULT};
use crate::runtime::{
    dp_device_t, dp_runtime_t, kept_device_handle, optional_device, runtime_obj, DevicePtr,
    RuntimeObj,
};
use crate::status::{bad_arg, dp_status_t, guard, guard_value, guard_void};
use crate::tensor::{dp_dtype_t, dp_tensor_t, dtype, tensor, TensorObj};

/// The `rank` of [`dp_graph_add_placeholder`] for a placeholder that takes any shape
/// (`SIZE_MAX`; the header defines it by hand, as cbindgen cannot write `usize::MAX`).
pub const DP_GRAPH_ANY_RANK: usize = usize::MAX;

/// One output of a graph node, by value: what later nodes take as input and runs feed or
/// fetch. It names its graph; another graph refuses it. Write no fields by hand: take it from
/// the `dp_graph_add_*` functions or [`dp_graph_find`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dp_graph_output_t {
    /// The graph's number.
    pub graph: u64,
    /// The node's position in the graph.
    pub node: u32,
    /// Which of the node's outputs.
    pub index: u32,
}

impl From<NodeOutput> for dp_graph_output_t {
    fn from(o: NodeOutput) -> Self {
        let (graph, node, index) = o.to_raw();
        dp_graph_output_t { graph, node, index }
    }
}

impl From<dp_graph_output_t> for NodeOutput {
    fn from(o: dp_graph_output_t) -> Self {
        NodeOutput::from_raw(o.graph, o.node, o.index)
    }
}

/// A graph behind its lock, which knows the graphs the calling thread holds: a callback that
/// runs while this thread adds to or runs a graph (a device setter, the placement or the log
/// callback) and calls back into that same graph gets `DP_FAILED_PRECONDITION`, where taking
/// the lock again would deadlock.
#[doc(hidden)]
pub struct GraphCell(RwLock<Graph>);

thread_local! {
    /// The graphs (by address) this thread holds locked.
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A lock guard of a [`GraphCell`], marked as held by this thread while it lives.
struct Held<G> {
    guard: G,
    key: usize,
}

impl<G> Drop for Held<G> {
    fn drop(&mut self) {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|k| *k == self.key) {
                h.swap_remove(i);
            }
        });
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Held<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Held<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

impl GraphCell {
    fn mark(&self) -> devplug_core::Result<usize> {
        let key = self as *const GraphCell as usize;
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if h.contains(&key) {
                return Err(Error::new(
                    devplug_core::Code::FailedPrecondition,
                    "the graph is in use on this thread: a callback that runs while a node is \
                     added to it or while it runs (a device setter, the placement or the log \
                     callback) cannot call into the same graph",
                ));
            }
            h.push(key);
            Ok(key)
        })
    }

    fn read(&self) -> devplug_core::Result<Held<parking_lot::RwLockReadGuard<'_, Graph>>> {
        let key = self.mark()?;
        Ok(Held {
            guard: self.0.read(),
            key,
        })
    }

    fn write(&self) -> devplug_core::Result<Held<parking_lot::RwLockWriteGuard<'_, Graph>>> {
        let key = self.mark()?;
        Ok(Held {
            guard: self.0.write(),
            key,
        })
    }
}

#[doc(hidden)]
pub struct GraphObj {
    graph: GraphCell,
    /// Node names handed out as C strings ([`dp_graph_node_name`]), by node.
    names: parking_lot::Mutex<Vec<Option<CString>>>,
}

handle!(
    /// A graph. Owned: [`dp_graph_create`] / [`dp_graph_destroy`]. Nodes may be added and runs
    /// made from several threads; adding a node waits for runs in progress.
    dp_graph_t,
    GraphObj,
    0x6470_4752_0000_000b
);

#[doc(hidden)]
pub struct VariableObj {
    variable: Variable,
    device: DevicePtr,
    name: CString,
}

handle!(
    /// A variable, shared: [`dp_variable_retain`] adds a reference, [`dp_variable_release`]
    /// drops one. Graphs that read or assign it hold their own.
    dp_variable_t,
    VariableObj,
    0x6470_5641_0000_000c
);

/// # Safety
/// `g` is a graph handle (the C API contract).
unsafe fn graph<'a>(g: *const dp_graph_t) -> devplug_core::Result<&'a GraphCell> {
    // SAFETY: forwarded.
    Ok(&unsafe { get(g, "graph")? }.graph)
}

/// # Safety
/// `v` is a variable handle.
unsafe fn variable<'a>(v: *const dp_variable_t) -> devplug_core::Result<&'a VariableObj> {
    // SAFETY: forwarded.
    unsafe { get(v, "variable") }
}

/// A node name from C: NULL or empty lets the graph make one up.
///
/// # Safety
/// `name` is NULL or a C string.
unsafe fn node_name<'a>(name: *const c_char) -> devplug_core::Result<&'a str> {
    if name.is_null() {
        return Ok("");
    }
    // SAFETY: the caller's contract.
    unsafe { handle::c_str(name, "name") }
}

/// `count` values at `ptr` (NULL allowed when `count` is 0).
///
/// # Safety
/// `ptr` is NULL or readable for `count` values.
unsafe fn array<'a, T>(ptr: *const T, count: usize, arg: &str) -> devplug_core::Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(bad_arg(arg, &format!("is NULL but the count is {count}")));
    }
    if count > 1 << 24 {
        return Err(bad_arg(arg, &format!("has {count} entries, too many")));
    }
    // SAFETY: non-NULL, `count` values long (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// A new tensor handle for `t`, with its device's handle.
fn tensor_handle(rt: &RuntimeObj, t: Tensor) -> *mut dp_tensor_t {
    let dev = rt.handle_of(t.device()).unwrap_or(std::ptr::null_mut());
    handle::new::<dp_tensor_t>(TensorObj {
        tensor: t,
        device: DevicePtr(dev),
    })
}

/// Creates an empty graph.
///
/// # Safety
/// `out_graph` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_create(out_graph: *mut *mut dp_graph_t) -> dp_status_t {
    guard("dp_graph_create", || {
        check_out(out_graph, "out_graph")?;
        let h = handle::new::<dp_graph_t>(GraphObj {
            graph: GraphCell(RwLock::new(Graph::new())),
            names: parking_lot::Mutex::new(Vec::new()),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_graph, "out_graph", h) }
    })
}

/// Destroys a graph (the variables and tensors it holds are released). NULL is a no-op.
///
/// # Safety
/// `graph` is NULL or a graph handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_destroy(graph: *mut dp_graph_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_graph_destroy", || unsafe {
        handle::destroy(graph, "graph")
    });
}

/// Adds a placeholder that each run feeds with a tensor of `dtype` and shape
/// `shape[0..rank]`, where a dimension of -1 takes any size; `rank` `DP_GRAPH_ANY_RANK` (with
/// `shape` NULL) takes any shape. `name` NULL or empty: one is made up. Node names are unique
/// (`DP_INVALID_ARGUMENT` for a taken one).
///
/// # Safety
/// `graph` is a graph handle; `name` NULL or a C string; `shape` readable for `rank` values
/// (unless `rank` is 0 or `DP_GRAPH_ANY_RANK`); `out_output` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_add_placeholder(
    graph: *mut dp_graph_t,
    name: *const c_char,
    dtype: dp_dtype_t,
    shape: *const i64,
    rank: usize,
    out_output: *mut dp_graph_output_t,
) -> dp_status_t {
    guard("dp_graph_add_placeholder", || {
        // SAFETY: the caller's contract.
        let (g, name) = unsafe { (self::graph(graph)?, node_name(name)?) };
        let d = self::dtype(dtype, "dtype")?;
        let shape = if rank == DP_GRAPH_ANY_RANK {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { crate::tensor::shape(shape, rank)? })
        };
        check_out(out_output, "out_output")?;
        let o = g.write()?.placeholder(name, d, shape)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_output, "out_output", o.into()) }
    })
}

/// Adds a constant node holding `value` (the graph keeps a reference; the tensor stays on its
/// device).
///
/// # Safety
/// `graph` is a graph handle; `name` NULL or a C string; `value` a tensor handle;
/// `out_output` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_add_constant(
    graph: *mut dp_graph_t,
    name: *const c_char,
    value: *const dp_tensor_t,
    out_output: *mut dp_graph_output_t,
) -> dp_status_t {
    guard("dp_graph_add_constant", || {
        // SAFETY: the caller's contract.
        let (g, name, t) = unsafe {
            (
                self::graph(graph)?,
                node_name(name)?,
                tensor(value, "value")?,
            )
        };
        check_out(out_output, "out_output")?;
        let o = g.write()?.constant(name, &t.tensor)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_output, "out_output", o.into()) }
    })
}

/// Adds a node running `op` (of `runtime`) on `inputs[0..num_inputs]` with `attrs` (NULL:
/// none), on `device`, or with `device` NULL where the scopes entered on this thread place it
/// now (a setter sees the node's name), else on the runtime's default device. Its outputs are
/// written to `outputs[0..n]`, `n` (the op's output count, at most `capacity`) to
/// `*out_count` (may be NULL). The node is checked now as far as its inputs are known (a
/// placeholder's `-1` sizes and unknown shapes are not): `DP_INVALID_ARGUMENT` naming the
/// node and the op for inputs or attributes the op refuses whatever the unknown sizes are
/// (`MatMul` of `[-1, 784]` by `[100, 10]`, `f32` added to `i32`), an output of another graph,
/// a taken name, an op or device of another runtime.
///
/// # Safety
/// `graph` is a graph handle, `runtime` a runtime handle, `op` an op handle; `name` NULL or a
/// C string; `inputs` readable for `num_inputs` outputs; `attrs` NULL or an attrs handle;
/// `device` NULL or a device handle; `outputs` writable for `capacity` outputs.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dp_graph_add_op(
    graph: *mut dp_graph_t,
    runtime: *const dp_runtime_t,
    name: *const c_char,
    op: *const dp_op_t,
    inputs: *const dp_graph_output_t,
    num_inputs: usize,
    attrs: *const dp_attrs_t,
    device: *mut dp_device_t,
    outputs: *mut dp_graph_output_t,
    capacity: usize,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_graph_add_op", || {
        // SAFETY: the caller's contract.
        let (g, rt, name, op) = unsafe {
            (
                self::graph(graph)?,
                runtime_obj(runtime)?,
                node_name(name)?,
                get(op, "op")?,
            )
        };
        // SAFETY: the caller's contract.
        let ins = unsafe { array(inputs, num_inputs, "inputs")? };
        let ins: Vec<NodeOutput> = ins.iter().map(|&o| o.into()).collect();
        static EMPTY: Attrs = Attrs::new();
        let attrs = if attrs.is_null() {
            &EMPTY
        } else {
            // SAFETY: the caller's contract.
            unsafe { get(attrs, "attrs")? }
        };
        // SAFETY: the caller's contract.
        let dev = unsafe { optional_device(device, "device")? };
        crate::op::output_room(op, outputs.is_null(), capacity)?;
        let outs = g
            .write()?
            .op(rt.runtime(), name, &op.op, &ins, attrs, dev)?;
        for (i, o) in outs.iter().enumerate() {
            // SAFETY: writable for `capacity >= n` outputs (the caller's contract).
            unsafe { outputs.add(i).write((*o).into()) };
        }
        if !out_count.is_null() {
            // SAFETY: non-NULL and writable (the caller's contract).
            unsafe { out_count.write(outs.len()) };
        }
        Ok(())
    })
}

/// Adds a read of `variable`: its value as the run starts.
///
/// # Safety
/// `graph` is a graph handle, `variable` a variable handle; `name` NULL or a C string;
/// `out_output` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_add_read(
    graph: *mut dp_graph_t,
    name: *const c_char,
    variable: *const dp_variable_t,
    out_output: *mut dp_graph_output_t,
) -> dp_status_t {
    guard("dp_graph_add_read", || {
        // SAFETY: the caller's contract.
        let (g, name, v) = unsafe {
            (
                self::graph(graph)?,
                node_name(name)?,
                self::variable(variable)?,
            )
        };
        check_out(out_output, "out_output")?;
        let o = g.write()?.read(name, &v.variable)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_output, "out_output", o.into()) }
    })
}

/// Adds an assignment of `value` to `variable`; its output is the value assigned. It runs when
/// a run fetches it (or a node that needs it), and takes effect only when that whole run
/// succeeds. What is known of the value's dtype and shape now is checked against the
/// variable's.
///
/// # Safety
/// `graph` is a graph handle, `variable` a variable handle; `name` NULL or a C string;
/// `out_output` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_add_assign(
    graph: *mut dp_graph_t,
    name: *const c_char,
    variable: *const dp_variable_t,
    value: dp_graph_output_t,
    out_output: *mut dp_graph_output_t,
) -> dp_status_t {
    guard("dp_graph_add_assign", || {
        // SAFETY: the caller's contract.
        let (g, name, v) = unsafe {
            (
                self::graph(graph)?,
                node_name(name)?,
                self::variable(variable)?,
            )
        };
        check_out(out_output, "out_output")?;
        let o = g.write()?.assign(name, &v.variable, value.into())?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_output, "out_output", o.into()) }
    })
}

/// Writes the number of nodes to `*out_count`.
///
/// # Safety
/// `graph` is a graph handle; `out_count` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_node_count(
    graph: *const dp_graph_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_graph_node_count", || {
        // SAFETY: the caller's contract.
        let g = unsafe { self::graph(graph)? };
        check_out(out_count, "out_count")?;
        let n = g.read()?.node_count();
        // SAFETY: the caller's contract.
        unsafe { write_out(out_count, "out_count", n) }
    })
}

/// Writes output `index` of the node named `name` to `*out_output`; `DP_NOT_FOUND` when the
/// graph has no such node or output.
///
/// # Safety
/// `graph` is a graph handle; `name` a C string; `out_output` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_find(
    graph: *const dp_graph_t,
    name: *const c_char,
    index: usize,
    out_output: *mut dp_graph_output_t,
) -> dp_status_t {
    guard("dp_graph_find", || {
        // SAFETY: the caller's contract.
        let (g, name) = unsafe { (self::graph(graph)?, handle::c_str(name, "name")?) };
        check_out(out_output, "out_output")?;
        let o = g.read()?.find(name, index)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_output, "out_output", o.into()) }
    })
}

/// What is known of `output` before running (see [`dp_graph_add_op`]): writes the dtype to
/// `*out_dtype` (`0` where only a run tells), the rank to `*out_rank` (`DP_GRAPH_ANY_RANK`
/// where only a run tells) and, for a known rank, the dimensions to `shape[0..rank]`, `-1` for
/// each size only a run tells (`capacity` must hold them: `DP_INVALID_ARGUMENT` naming
/// `capacity` otherwise, nothing written). `DP_INVALID_ARGUMENT` for an output of another
/// graph or one the node does not have.
///
/// # Safety
/// `graph` is a graph handle; `out_dtype` and `out_rank` writable; `shape` writable for
/// `capacity` values (may be NULL when `capacity` is 0).
#[no_mangle]
pub unsafe extern "C" fn dp_graph_output_spec(
    graph: *const dp_graph_t,
    output: dp_graph_output_t,
    out_dtype: *mut dp_dtype_t,
    shape: *mut i64,
    capacity: usize,
    out_rank: *mut usize,
) -> dp_status_t {
    guard("dp_graph_output_spec", || {
        // SAFETY: the caller's contract.
        let g = unsafe { self::graph(graph)? };
        check_out(out_dtype, "out_dtype")?;
        check_out(out_rank, "out_rank")?;
        if capacity > 0 && shape.is_null() {
            return Err(bad_arg(
                "shape",
                &format!("is NULL but capacity is {capacity}"),
            ));
        }
        let spec = g.read()?.partial_spec(output.into())?;
        let dtype = spec.dtype.map_or(0, |d| d as dp_dtype_t);
        let Some(dims) = spec.shape else {
            // SAFETY: both checked writable (the caller's contract).
            unsafe {
                out_dtype.write(dtype);
                out_rank.write(DP_GRAPH_ANY_RANK);
            }
            return Ok(());
        };
        if dims.len() > capacity {
            return Err(bad_arg(
                "capacity",
                &format!("is {capacity}, but the output has rank {}", dims.len()),
            ));
        }
        // SAFETY: writable for `capacity >= dims.len()` values, and the out-pointers checked.
        unsafe {
            std::ptr::copy_nonoverlapping(dims.as_ptr(), shape, dims.len());
            out_dtype.write(dtype);
            out_rank.write(dims.len());
        }
        Ok(())
    })
}

/// The name of the node `output` belongs to, valid while the graph lives; NULL for an invalid
/// handle or an output the graph does not have.
///
/// # Safety
/// `graph` is a graph handle.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_node_name(
    graph: *const dp_graph_t,
    output: dp_graph_output_t,
) -> *const c_char {
    guard_value("dp_graph_node_name", std::ptr::null(), || {
        // SAFETY: the caller's contract.
        let obj = unsafe { get(graph, "graph")? };
        let output = NodeOutput::from(output);
        let name = CString::new(obj.graph.read()?.node_name(output)?).unwrap_or_default();
        // Kept with the graph, one per node asked about: a CString's bytes do not move when
        // the list grows, so the pointer stays valid while the graph lives.
        let mut names = obj.names.lock();
        let i = output.node();
        if names.len() <= i {
            names.resize_with(i + 1, || None);
        }
        Ok(names[i].get_or_insert(name).as_ptr())
    })
}

/// Options of [`dp_graph_run`]. Initialize with [`dp_graph_run_options_init`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_graph_run_options_t {
    /// Set by the init function.
    pub struct_size: usize,
    /// `DP_SOFT_PLACEMENT_DEFAULT` (default), `_OFF` (strict) or `_ON`, for every op node.
    pub soft_placement: i32,
}

impl Default for dp_graph_run_options_t {
    fn default() -> Self {
        dp_graph_run_options_t {
            struct_size: std::mem::size_of::<dp_graph_run_options_t>(),
            soft_placement: DP_SOFT_PLACEMENT_DEFAULT,
        }
    }
}

/// Sets `*options` to the defaults, writing at most `struct_size` bytes (the caller's
/// `sizeof(dp_graph_run_options_t)`). NULL or a too small size is a no-op.
///
/// # Safety
/// `options` is NULL or writable for `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_graph_run_options_init(
    options: *mut dp_graph_run_options_t,
    struct_size: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { handle::init_sized(options, dp_graph_run_options_t::default(), struct_size) }
}

/// Runs the nodes `fetches[0..num_fetches]` need, feeding placeholder `feed_outputs[i]` with
/// `feed_tensors[i]` (`num_feeds` pairs), and writes the fetched tensors (new references the
/// caller releases) to `results[0..num_fetches]` — nothing on error. Each op runs on the
/// device its node was placed on, with the fallback order of `dp_op_run`; intermediates are
/// released after their last use; assignments take effect only when the run succeeds.
/// Errors: `DP_INVALID_ARGUMENT` for an output of another graph, a feed that is no
/// placeholder's, fed twice or of the wrong dtype or shape, a needed placeholder not fed, one
/// variable assigned twice, or another runtime than the graph's; otherwise the failing node's
/// error, naming the node, its op and its device.
///
/// # Safety
/// `graph` is a graph handle, `runtime` a runtime handle; `feed_outputs` and `feed_tensors`
/// readable for `num_feeds` entries (tensor handles); `fetches` readable and `results` writable
/// for `num_fetches` entries; `options` NULL or initialized.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dp_graph_run(
    graph: *const dp_graph_t,
    runtime: *const dp_runtime_t,
    feed_outputs: *const dp_graph_output_t,
    feed_tensors: *const *mut dp_tensor_t,
    num_feeds: usize,
    fetches: *const dp_graph_output_t,
    num_fetches: usize,
    options: *const dp_graph_run_options_t,
    results: *mut *mut dp_tensor_t,
) -> dp_status_t {
    guard("dp_graph_run", || {
        // SAFETY: the caller's contract.
        let (g, rt) = unsafe { (self::graph(graph)?, runtime_obj(runtime)?) };
        // SAFETY: the caller's contract.
        let (fo, ft, fetch) = unsafe {
            (
                array(feed_outputs, num_feeds, "feed_outputs")?,
                array(feed_tensors, num_feeds, "feed_tensors")?,
                array(fetches, num_fetches, "fetches")?,
            )
        };
        if num_fetches > 0 && results.is_null() {
            return Err(bad_arg("results", "is NULL"));
        }
        let mut feeds = Vec::with_capacity(num_feeds);
        for (i, (&o, &t)) in fo.iter().zip(ft).enumerate() {
            // SAFETY: the caller's contract.
            let t = unsafe { tensor(t, "feed_tensors[i]") }.map_err(|e| {
                Error::new(
                    e.code,
                    e.message
                        .replace("feed_tensors[i]", &format!("feed_tensors[{i}]")),
                )
            })?;
            feeds.push((NodeOutput::from(o), t.tensor.clone()));
        }
        let fetch: Vec<NodeOutput> = fetch.iter().map(|&o| o.into()).collect();
        // SAFETY: the caller's contract.
        let o = unsafe {
            handle::read_options(
                options,
                std::mem::size_of::<dp_graph_run_options_t>(),
                "options",
            )?
        };
        let soft_placement = crate::op::soft_placement(o.soft_placement)?;
        let out = g.read()?.run_with(
            rt.runtime(),
            &feeds,
            &fetch,
            &GraphRunOptions { soft_placement },
        )?;
        for (i, t) in out.into_iter().enumerate() {
            // SAFETY: writable for `num_fetches` handles (the caller's contract).
            unsafe { results.add(i).write(tensor_handle(rt, t)) };
        }
        Ok(())
    })
}

/// Creates a variable named `name` (not empty) holding a copy of `initial`, on `device`, or
/// with `device` NULL where the scopes entered on this thread place a variable of that name
/// (a setter is asked with `DP_OP_KIND_VARIABLE`), else on the runtime's default device.
///
/// # Safety
/// `runtime` is a runtime handle; `name` a C string; `initial` a tensor handle; `device` NULL
/// or a device handle; `out_variable` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_create(
    runtime: *const dp_runtime_t,
    name: *const c_char,
    initial: *const dp_tensor_t,
    device: *mut dp_device_t,
    out_variable: *mut *mut dp_variable_t,
) -> dp_status_t {
    guard("dp_variable_create", || {
        // SAFETY: the caller's contract.
        let (rt, name, t) = unsafe {
            (
                runtime_obj(runtime)?,
                handle::c_str(name, "name")?,
                tensor(initial, "initial")?,
            )
        };
        // SAFETY: the caller's contract.
        let dev = unsafe { optional_device(device, "device")? };
        check_out(out_variable, "out_variable")?;
        let v = rt.runtime().variable(name, &t.tensor, dev)?;
        let dev = rt.handle_of(v.device()).unwrap_or(std::ptr::null_mut());
        let h = handle::new::<dp_variable_t>(VariableObj {
            name: CString::new(name).unwrap_or_default(),
            variable: v,
            device: DevicePtr(dev),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_variable, "out_variable", h) }
    })
}

/// Adds a reference to a variable.
///
/// # Safety
/// `variable` is a variable handle.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_retain(variable: *mut dp_variable_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_variable_retain", || unsafe {
        handle::retain(variable, "variable")
    });
}

/// Drops a reference to a variable (graphs keep their own). NULL is a no-op.
///
/// # Safety
/// `variable` is NULL or a variable handle.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_release(variable: *mut dp_variable_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_variable_release", || unsafe {
        handle::release(variable, "variable")
    });
}

/// The variable's name, valid while the handle lives; NULL for an invalid handle.
///
/// # Safety
/// `variable` is a variable handle.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_name(variable: *const dp_variable_t) -> *const c_char {
    // SAFETY: the caller's contract.
    guard_value("dp_variable_name", std::ptr::null(), || {
        Ok(unsafe { self::variable(variable)? }.name.as_ptr())
    })
}

/// Writes the device the variable lives on (borrowed from the runtime) to `*out_device`.
/// `DP_FAILED_PRECONDITION` once the device's runtime was destroyed: its device handles went
/// with it, though the variable can still be read and assigned.
///
/// # Safety
/// `variable` is a variable handle; `out_device` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_device(
    variable: *const dp_variable_t,
    out_device: *mut *mut dp_device_t,
) -> dp_status_t {
    guard("dp_variable_device", || {
        // SAFETY: the caller's contract.
        let v = unsafe { self::variable(variable)? };
        check_out(out_device, "out_device")?;
        // SAFETY: a device handle this library made, kept by the variable.
        let d = unsafe {
            kept_device_handle(
                v.device,
                v.variable.device(),
                "variable",
                "read and assigned",
            )?
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_device, "out_device", d) }
    })
}

/// Writes the current value (a new tensor reference the caller releases; later assignments
/// leave it as it is) to `*out_tensor`. It is the variable's tensor, not a copy: writing into
/// its buffer (`dp_tensor_buffer`) writes into the variable.
///
/// # Safety
/// `variable` is a variable handle; `out_tensor` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_read(
    variable: *const dp_variable_t,
    out_tensor: *mut *mut dp_tensor_t,
) -> dp_status_t {
    guard("dp_variable_read", || {
        // SAFETY: the caller's contract.
        let v = unsafe { self::variable(variable)? };
        check_out(out_tensor, "out_tensor")?;
        let h = handle::new::<dp_tensor_t>(TensorObj {
            tensor: v.variable.read(),
            device: v.device,
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_tensor, "out_tensor", h) }
    })
}

/// Copies `value` onto the variable's device and makes it the current value.
/// `DP_INVALID_ARGUMENT` naming the variable when the dtype or shape differs; on any error the
/// variable keeps its value.
///
/// # Safety
/// `variable` is a variable handle; `value` a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_variable_assign(
    variable: *const dp_variable_t,
    value: *const dp_tensor_t,
) -> dp_status_t {
    guard("dp_variable_assign", || {
        // SAFETY: the caller's contract.
        let (v, t) = unsafe { (self::variable(variable)?, tensor(value, "value")?) };
        v.variable.assign(&t.tensor)
    })
}
