//! Running a graph: the plan for a fetch list (which nodes, how often each output is used),
//! feeds, the nodes in order, and the assignments made at the end.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use super::{Graph, NodeKind, NodeOutput};
use crate::device::Device;
use crate::dispatch::InputCopies;
use crate::error::{Error, Result};
use crate::op::Outputs;
use crate::runtime::Runtime;
use crate::tensor::Tensor;
use crate::variable::Variable;

/// How many fetch lists a graph keeps plans for before it starts over.
const MAX_PLANS: usize = 64;

/// Options of one graph run.
#[derive(Clone, Debug, Default)]
pub struct GraphRunOptions {
    /// Overrides the runtime's soft-placement setting for this run's ops (`Some(false)`:
    /// strict).
    pub soft_placement: Option<bool>,
}

/// The plans of a graph, by fetch list; cleared when a node is added.
#[derive(Default)]
pub(crate) struct Plans {
    /// The plan of the latest lookup: a loop that runs one fetch list finds it with a
    /// compare, without hashing.
    last: Option<(Vec<NodeOutput>, Arc<Plan>)>,
    by_fetches: HashMap<Vec<NodeOutput>, Arc<Plan>>,
}

/// What a fetch list needs: computed once per fetch list, kept until a node is added.
pub(crate) struct Plan {
    /// The nodes to run, in graph order.
    order: Vec<u32>,
    /// Per node of the graph: how many times this run takes its outputs (as inputs of the
    /// nodes in `order`, or as fetches).
    uses: Vec<u32>,
}

/// The copies a node's constant inputs keep on other devices: the first run that needs one on
/// a device makes it (logged as an input copied once), later runs reuse it. Dispatch asks only
/// where the op really runs: a node soft-placed to the CPU takes a constant given on the CPU
/// as it is, not a copy that went to the node's device and back. It also names the node an
/// input comes from, for the placement log of the input's copy.
struct ConstantCopies<'a> {
    rt: &'a Runtime,
    graph: &'a Graph,
    node: usize,
}

impl InputCopies for ConstantCopies<'_> {
    fn on(&self, index: usize, device: &Arc<Device>) -> Option<Result<Tensor>> {
        let node = &self.graph.nodes[self.node];
        let input = &self.graph.nodes[node.inputs.get(index)?.node()];
        let (NodeKind::Constant(c), NodeKind::Op { op, .. }) = (&input.kind, &node.kind) else {
            return None;
        };
        Some(c.on(self.rt, device, &input.name, op.name()))
    }

    fn describe(&self, index: usize) -> Option<String> {
        let node = &self.graph.nodes[self.node];
        let input = &self.graph.nodes[node.inputs.get(index)?.node()];
        Some(format!("graph node '{}'", input.name))
    }
}

impl Graph {
    /// Runs the nodes `fetches` need, with `feeds` for the placeholders among them, and
    /// returns the fetched tensors in order (see [`crate::graph`]).
    pub fn run(
        &self,
        rt: &Runtime,
        feeds: &[(NodeOutput, Tensor)],
        fetches: &[NodeOutput],
    ) -> Result<Vec<Tensor>> {
        self.run_with(rt, feeds, fetches, &GraphRunOptions::default())
    }

    /// [`Graph::run`] with options. Errors: `INVALID_ARGUMENT` for an output of another graph,
    /// a feed that is no placeholder's, fed twice or of the wrong dtype or shape, a placeholder
    /// the fetches need and no feed gives, one variable assigned twice in a run, or a runtime
    /// other than the graph's; otherwise the failing node's error, with its name, op and
    /// device. On error no variable changes.
    pub fn run_with(
        &self,
        rt: &Runtime,
        feeds: &[(NodeOutput, Tensor)],
        fetches: &[NodeOutput],
        options: &GraphRunOptions,
    ) -> Result<Vec<Tensor>> {
        if self.runtime.is_some_and(|r| r != rt.id()) {
            return Err(Error::invalid_argument(
                "graph run: the graph's nodes belong to another runtime",
            ));
        }
        let plan = self.plan(fetches)?;
        // On the stack for small graphs: a run allocates nothing else of its own but the
        // fetched list.
        let mut values: SmallVec<[Option<Outputs>; 8]> = SmallVec::new();
        values.resize_with(self.nodes.len(), || None);
        for (i, (output, tensor)) in feeds.iter().enumerate() {
            self.feed(&mut values, *output, tensor)
                .map_err(|e| e.context(format!("graph run: feed {i}")))?;
        }
        let mut uses: SmallVec<[u32; 16]> = SmallVec::from_slice(&plan.uses);
        let mut assigns: Vec<(&Variable, Tensor)> = Vec::new();
        let soft = options
            .soft_placement
            .unwrap_or_else(|| rt.soft_placement());
        let mut inputs: SmallVec<[Tensor; 4]> = SmallVec::new();
        for &i in &plan.order {
            let i = i as usize;
            let node = &self.nodes[i];
            inputs.clear();
            for o in &node.inputs {
                let input = match &self.nodes[o.node()].kind {
                    // A constant as it was given; an op that runs it on another device takes
                    // its copy there, made once (`ConstantCopies`).
                    NodeKind::Constant(c) => c.value.clone(),
                    // Every input ran before (graph order) and is held until its last use.
                    _ => values[o.node()].as_ref().expect("input computed")[o.index()].clone(),
                };
                inputs.push(input);
            }
            let out: Outputs = match &node.kind {
                NodeKind::Placeholder => {
                    if values[i].is_some() {
                        continue;
                    }
                    return Err(Error::invalid_argument(format!(
                        "graph run: placeholder '{}' is needed by the fetches but not fed",
                        node.name
                    )));
                }
                NodeKind::Constant(c) => smallvec![c.value.clone()],
                NodeKind::Read(v) => smallvec![v.read()],
                NodeKind::Assign(v) => {
                    let copy = v
                        .prepare(&inputs[0])
                        .map_err(|e| e.context(format!("graph node '{}' (Assign)", node.name)))?;
                    assigns.push((v, copy.clone()));
                    smallvec![copy]
                }
                NodeKind::Op {
                    op,
                    attrs,
                    device,
                    reason,
                } => {
                    let mut out = Outputs::new();
                    let copies = ConstantCopies {
                        rt,
                        graph: self,
                        node: i,
                    };
                    crate::dispatch::run_placed(
                        rt, op, device, *reason, &inputs, &copies, attrs, soft, &mut out,
                    )
                    .map_err(|e| {
                        e.context(format!(
                            "graph node '{}' ({} on {})",
                            node.name,
                            op.name(),
                            device.qualified_name()
                        ))
                    })?;
                    out
                }
            };
            values[i] = Some(out);
            // Inputs whose last use this was are released now (their buffers go back to the
            // pool for the nodes that follow).
            for o in &node.inputs {
                let u = &mut uses[o.node()];
                *u -= 1;
                if *u == 0 {
                    values[o.node()] = None;
                }
            }
        }
        let results = fetches
            .iter()
            .map(|f| values[f.node()].as_ref().expect("fetch computed")[f.index()].clone())
            .collect();
        for (v, t) in assigns {
            v.commit(t);
        }
        Ok(results)
    }

    fn feed(&self, values: &mut [Option<Outputs>], output: NodeOutput, t: &Tensor) -> Result<()> {
        let node = self.node(output, "the fed output")?;
        let NodeKind::Placeholder = &node.kind else {
            return Err(Error::invalid_argument(format!(
                "node '{}' is not a placeholder; only placeholders are fed",
                node.name
            )));
        };
        let i = output.node();
        if values[i].is_some() {
            return Err(Error::invalid_argument(format!(
                "placeholder '{}' is fed twice",
                node.name
            )));
        }
        let want = node.specs[0];
        if !want.admits(t.dtype(), t.shape()) {
            return Err(Error::invalid_argument(format!(
                "placeholder '{}' takes {want}; fed {} {:?}",
                node.name,
                t.dtype(),
                t.shape()
            )));
        }
        values[i] = Some(smallvec![t.clone()]);
        Ok(())
    }

    /// The plan for `fetches`: the last one used when it is for the same fetches (a compare,
    /// no hashing), else from the cache, else made now.
    fn plan(&self, fetches: &[NodeOutput]) -> Result<Arc<Plan>> {
        {
            let mut plans = self.plans.lock();
            if let Some((last, p)) = &plans.last {
                if last.as_slice() == fetches {
                    return Ok(p.clone());
                }
            }
            if let Some(p) = plans.by_fetches.get(fetches).cloned() {
                plans.last = Some((fetches.to_vec(), p.clone()));
                return Ok(p);
            }
        }
        let plan = Arc::new(self.make_plan(fetches)?);
        let mut plans = self.plans.lock();
        if plans.by_fetches.len() >= MAX_PLANS {
            plans.by_fetches.clear();
        }
        plans.by_fetches.insert(fetches.to_vec(), plan.clone());
        plans.last = Some((fetches.to_vec(), plan.clone()));
        Ok(plan)
    }

    fn make_plan(&self, fetches: &[NodeOutput]) -> Result<Plan> {
        let n = self.nodes.len();
        let mut needed = vec![false; n];
        let mut uses = vec![0u32; n];
        for (i, f) in fetches.iter().enumerate() {
            self.node(*f, &format!("fetch {i}"))
                .map_err(|e| e.context("graph run"))?;
            needed[f.node()] = true;
            uses[f.node()] += 1;
        }
        // Inputs come before their consumers, so one backward pass marks everything needed.
        for i in (0..n).rev() {
            if needed[i] {
                for o in &self.nodes[i].inputs {
                    needed[o.node()] = true;
                    uses[o.node()] += 1;
                }
            }
        }
        let order: Vec<u32> = (0..n as u32).filter(|&i| needed[i as usize]).collect();
        let mut assigned: Vec<(u64, &str)> = Vec::new();
        for &i in &order {
            let node = &self.nodes[i as usize];
            if let NodeKind::Assign(v) = &node.kind {
                if let Some((_, other)) = assigned.iter().find(|(id, _)| *id == v.id()) {
                    return Err(Error::invalid_argument(format!(
                        "graph run: variable '{}' is assigned by nodes '{other}' and '{}' in \
                         one run",
                        v.name(),
                        node.name
                    )));
                }
                assigned.push((v.id(), &node.name));
            }
        }
        Ok(Plan { order, uses })
    }
}
