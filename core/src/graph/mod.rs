//! Graphs: ops wired together ahead of time, then run many times with different feeds.
//!
//! A [`Graph`] is built node by node; each node's inputs are outputs of nodes added before it,
//! so a graph is acyclic by construction and its nodes are in an order that runs. Nodes are:
//!
//! - **placeholders**, given a tensor by each run (a *feed*);
//! - **constants**, a tensor the graph holds;
//! - **ops**, any op the runtime has, placed when the node is added: the device the caller
//!   names, else the scopes entered on the building thread (a setter sees the node's name),
//!   else the runtime's default device — as TensorFlow's `with tf.device(...)` places graph
//!   nodes. At run time the op dispatches on that device with the usual fallback order
//!   (native kernel → decomposition → soft placement → error); inputs on other devices are
//!   copied, and the placement log says so;
//! - **variable reads** and **assignments** of [`Variable`]s.
//!
//! Each output has a [`PartialSpec`]: what is known of it before running. Constants and
//! variable reads are known whole; a placeholder as declared (`f32 [-1, 784]`: a dynamic
//! batch); an op node's outputs follow from its inputs' ([`crate::op::PartialSpec`] tells
//! how). When an op node is added it is checked as far as its inputs are known — arity,
//! attributes, dtypes, and shapes where no size of the unknown dimensions could make them
//! fit — and a mistake is an `INVALID_ARGUMENT` naming the node; the rest is checked when it
//! runs.
//!
//! [`Graph::run`] takes feeds and *fetches* (outputs to return) and runs only the nodes the
//! fetches need, in order, each on its device; an intermediate tensor is released as soon as
//! its last consumer ran. An assignment runs when it is needed by a fetch (its output is the
//! value assigned). Assignments take effect together once every needed node succeeded, so a
//! run that fails changes no variable; reads within a run see the values from before it. A
//! run that fails names the node, its op and its device. Runs of one graph may proceed on
//! several threads at once.

mod constant;
mod run;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

pub use run::GraphRunOptions;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::op::{Attrs, OpHandle, PartialSpec, TensorSpec};
use crate::placement::Reason;
use crate::runtime::Runtime;
use crate::scope::{OpInfo, OpKind};
use crate::tensor::{DType, Tensor};
use crate::variable::Variable;

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// One output of a graph node: what later nodes take as input and runs feed or fetch. A plain
/// value; it names its graph, so using it with another graph is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeOutput {
    graph: u64,
    node: u32,
    index: u32,
}

impl NodeOutput {
    /// The node's position in its graph (in the order nodes were added).
    pub fn node(&self) -> usize {
        self.node as usize
    }

    /// Which of the node's outputs.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The parts an output is made of (its graph's number, the node, the index): for bindings
    /// that pass outputs by value, as the C API does.
    pub fn to_raw(self) -> (u64, u32, u32) {
        (self.graph, self.node, self.index)
    }

    /// An output from [`NodeOutput::to_raw`]'s parts. Graphs refuse one that names nothing of
    /// theirs, so a made-up value is an error, never another graph's node.
    pub fn from_raw(graph: u64, node: u32, index: u32) -> NodeOutput {
        NodeOutput { graph, node, index }
    }
}

pub(crate) enum NodeKind {
    /// Takes a tensor its output's spec admits.
    Placeholder,
    Constant(constant::Constant),
    Op {
        op: OpHandle,
        attrs: Attrs,
        device: Arc<Device>,
        reason: Reason,
    },
    Read(Variable),
    Assign(Variable),
}

pub(crate) struct Node {
    name: String,
    kind: NodeKind,
    inputs: Vec<NodeOutput>,
    /// Per output: what is known of it before running.
    specs: Vec<PartialSpec>,
}

/// A graph of ops (see the module documentation). Built with `&mut self`, run with `&self`.
pub struct Graph {
    id: u64,
    /// The runtime the graph's ops, devices and constants belong to, once one is added.
    runtime: Option<u64>,
    nodes: Vec<Node>,
    names: HashMap<String, usize>,
    /// Run plans by fetch list; cleared when a node is added.
    plans: Mutex<run::Plans>,
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} nodes)", self.nodes.len())
    }
}

impl Graph {
    /// An empty graph; it belongs to the runtime of the first op, device, constant or
    /// variable added to it.
    pub fn new() -> Graph {
        Graph {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            runtime: None,
            nodes: Vec::new(),
            names: HashMap::new(),
            plans: Mutex::new(run::Plans::default()),
        }
    }

    /// How many nodes the graph has.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The name of the node `output` belongs to.
    pub fn node_name(&self, output: NodeOutput) -> Result<&str> {
        Ok(&self.node(output, "output")?.name)
    }

    /// The output `index` of the node named `name`; `NOT_FOUND` when there is none.
    pub fn find(&self, name: &str, index: usize) -> Result<NodeOutput> {
        let not_found = || {
            Error::new(
                crate::error::Code::NotFound,
                format!("graph: no node named '{name}' with an output {index}"),
            )
        };
        let &node = self.names.get(name).ok_or_else(not_found)?;
        if index >= self.nodes[node].specs.len() {
            return Err(not_found());
        }
        Ok(self.output(node, index))
    }

    /// The dtype and shape of `output` when both are wholly known before running (see the
    /// module documentation); `None` when only a run tells all of it.
    pub fn spec(&self, output: NodeOutput) -> Result<Option<TensorSpec>> {
        Ok(self.partial_spec(output)?.to_full())
    }

    /// What is known of `output` before running: its dtype, its rank, its dimensions (`-1`
    /// where only a run tells).
    pub fn partial_spec(&self, output: NodeOutput) -> Result<PartialSpec> {
        let node = self.node(output, "output")?;
        Ok(node.specs[output.index()])
    }

    /// Adds a placeholder fed by each run with a tensor of `dtype` and, when `shape` is given,
    /// that shape (a dimension of -1 takes any size). `name` may be empty (one is made up).
    pub fn placeholder(
        &mut self,
        name: &str,
        dtype: DType,
        shape: Option<&[i64]>,
    ) -> Result<NodeOutput> {
        let spec = PartialSpec::new(Some(dtype), shape).map_err(|_| {
            Error::invalid_argument(format!(
                "graph placeholder '{name}': shape {:?} is not a shape (dimensions ≥ 0, or -1 \
                 for any size; rank ≤ {})",
                shape.unwrap_or_default(),
                crate::tensor::MAX_RANK
            ))
        })?;
        self.push(
            name,
            "Placeholder",
            NodeKind::Placeholder,
            Vec::new(),
            vec![spec],
        )
    }

    /// Adds a constant holding `value` (the tensor itself: it stays on its device, and tensors
    /// are not changed in place by devplug's API). A node on another device that takes it gets
    /// a copy made by the first run that needs it and kept with the graph for later runs.
    pub fn constant(&mut self, name: &str, value: &Tensor) -> Result<NodeOutput> {
        self.bind(value.device().runtime_id(), name)?;
        let spec = TensorSpec::new(value.dtype(), value.shape())?;
        self.push(
            name,
            "Constant",
            NodeKind::Constant(constant::Constant::new(value.clone())),
            Vec::new(),
            vec![PartialSpec::full(spec)],
        )
    }

    /// [`Graph::op`] for an op with one output (every basis op): returns it.
    /// `INVALID_ARGUMENT` for an op with several outputs (use [`Graph::op`]); the graph is left
    /// as it was.
    pub fn op1(
        &mut self,
        rt: &Runtime,
        name: &str,
        op: &OpHandle,
        inputs: &[NodeOutput],
        attrs: &Attrs,
        device: Option<&Arc<Device>>,
    ) -> Result<NodeOutput> {
        let n = op.def().outputs.len();
        if n != 1 {
            return Err(Error::invalid_argument(format!(
                "graph node '{name}' ({}): op1 returns one output, but the op has {n}; use op",
                op.name()
            )));
        }
        let mut out = self.op(rt, name, op, inputs, attrs, device)?;
        out.pop()
            .ok_or_else(|| Error::internal(format!("{}: the node has no output", op.name())))
    }

    /// Adds a node running `op` on `inputs` with `attrs`, on `device` or where placement puts
    /// it now (see the module documentation), and returns its outputs. `INVALID_ARGUMENT` for
    /// an output of another graph, a device or op of another runtime, a taken name, or (as
    /// far as the inputs are known) inputs or attributes the op refuses.
    pub fn op(
        &mut self,
        rt: &Runtime,
        name: &str,
        op: &OpHandle,
        inputs: &[NodeOutput],
        attrs: &Attrs,
        device: Option<&Arc<Device>>,
    ) -> Result<Vec<NodeOutput>> {
        let name = self.name_for(name, op.name());
        let context = |e: Error| e.context(format!("graph node '{name}' ({})", op.name()));
        if !rt.owns_op(op) {
            return Err(context(Error::invalid_argument(
                "the op handle was resolved by another runtime",
            )));
        }
        self.bind(rt.id(), &name)?;
        self.check_name(&name)?;
        for (i, input) in inputs.iter().enumerate() {
            self.node(*input, &format!("input {i}")).map_err(context)?;
        }
        let info = OpInfo {
            name: &name,
            op: op.name(),
            kind: OpKind::Compute,
        };
        let (device, reason) = crate::scope::decide(rt, device, &info).map_err(context)?;
        let known: Vec<PartialSpec> = inputs
            .iter()
            .map(|o| self.nodes[o.node()].specs[o.index()])
            .collect();
        let specs = op.0.infer_partial(&known, attrs).map_err(context)?.to_vec();
        let kind = NodeKind::Op {
            op: op.clone(),
            attrs: attrs.clone(),
            device,
            reason,
        };
        let first = self.push(&name, op.name(), kind, inputs.to_vec(), specs)?;
        Ok((0..self.nodes[first.node()].specs.len())
            .map(|i| self.output(first.node(), i))
            .collect())
    }

    /// Adds a read of `variable`: its value when the run starts.
    pub fn read(&mut self, name: &str, variable: &Variable) -> Result<NodeOutput> {
        self.bind(variable.device().runtime_id(), name)?;
        let spec = TensorSpec::new(variable.dtype(), &variable.shape())?;
        self.push(
            name,
            "Read",
            NodeKind::Read(variable.clone()),
            Vec::new(),
            vec![PartialSpec::full(spec)],
        )
    }

    /// Adds an assignment of `value` to `variable`; its output is the value assigned. It runs
    /// when a fetch needs it, and takes effect when the whole run succeeded. As far as
    /// `value`'s dtype and shape are known, they are checked against the variable's now.
    pub fn assign(
        &mut self,
        name: &str,
        variable: &Variable,
        value: NodeOutput,
    ) -> Result<NodeOutput> {
        let name = self.name_for(name, "Assign");
        self.bind(variable.device().runtime_id(), &name)?;
        let spec = self
            .node(value, "value")
            .map(|n| n.specs[value.index()])
            .map_err(|e| e.context(format!("graph node '{name}' (Assign)")))?;
        let want = TensorSpec::new(variable.dtype(), &variable.shape())?;
        if !spec.admits(want.dtype, &want.shape) {
            return Err(Error::invalid_argument(format!(
                "graph node '{name}' (Assign): variable '{}' holds {} {:?}; the value is {spec}",
                variable.name(),
                want.dtype,
                &*want.shape,
            )));
        }
        self.push(
            &name,
            "Assign",
            NodeKind::Assign(variable.clone()),
            vec![value],
            vec![PartialSpec::full(want)],
        )
    }

    fn output(&self, node: usize, index: usize) -> NodeOutput {
        NodeOutput {
            graph: self.id,
            node: node as u32,
            index: index as u32,
        }
    }

    /// The node `output` belongs to; `INVALID_ARGUMENT` naming `what` for an output of another
    /// graph or one the node does not have.
    fn node(&self, output: NodeOutput, what: &str) -> Result<&Node> {
        if output.graph != self.id {
            return Err(Error::invalid_argument(format!(
                "graph: {what} is an output of another graph"
            )));
        }
        self.nodes
            .get(output.node())
            .filter(|n| output.index() < n.specs.len())
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "graph: {what} names output {} of node {}, which the graph does not have",
                    output.index, output.node
                ))
            })
    }

    fn name_for(&self, name: &str, op: &str) -> String {
        if !name.is_empty() {
            return name.to_string();
        }
        let mut n = self.nodes.len();
        loop {
            let made = format!("{op}_{n}");
            if !self.names.contains_key(&made) {
                return made;
            }
            n += 1;
        }
    }

    fn check_name(&self, name: &str) -> Result<()> {
        if let Some(&i) = self.names.get(name) {
            return Err(Error::invalid_argument(format!(
                "graph: a node named '{name}' exists (node {i}); node names are unique"
            )));
        }
        Ok(())
    }

    /// Ties the graph to the runtime `runtime` (the first node that names one does).
    fn bind(&mut self, runtime: u64, name: &str) -> Result<()> {
        match self.runtime {
            Some(r) if r != runtime => Err(Error::invalid_argument(format!(
                "graph node '{name}': its op, device, tensor or variable belongs to another \
                 runtime than the graph's other nodes"
            ))),
            _ => {
                self.runtime = Some(runtime);
                Ok(())
            }
        }
    }

    fn push(
        &mut self,
        name: &str,
        op: &str,
        kind: NodeKind,
        inputs: Vec<NodeOutput>,
        specs: Vec<PartialSpec>,
    ) -> Result<NodeOutput> {
        let name = self.name_for(name, op);
        self.check_name(&name)?;
        if self.nodes.len() >= u32::MAX as usize {
            return Err(Error::new(
                crate::error::Code::ResourceExhausted,
                "graph: too many nodes",
            ));
        }
        let index = self.nodes.len();
        self.names.insert(name.clone(), index);
        self.nodes.push(Node {
            name,
            kind,
            inputs,
            specs,
        });
        *self.plans.get_mut() = run::Plans::default();
        Ok(self.output(index, 0))
    }
}
