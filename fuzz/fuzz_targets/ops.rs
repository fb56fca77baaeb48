//! Every op the runtime has, run on the CPU with inputs and attributes chosen by the input:
//! any op, 0 to 4 inputs of any dtype and of rank 0 to 4 (dimensions 0 to 5, zero-sized ones
//! included), attributes of the op's own names and of other names, of the right type or not.
//! An op either runs, and then its outputs are as many as its definition says and hold what
//! their shapes say, or is refused with a clear error; it never panics, never aborts. An op
//! that runs is also added to a graph whose placeholders know part of each input (some sizes
//! `-1`, or no shape, chosen by the input): the node is accepted, and what the graph says it
//! knows of each output is what the run gave (partial shape inference is sound).
#![no_main]

use std::sync::OnceLock;

use devplug_core::op::AttrType;
use devplug_core::{
    AttrValue, Attrs, Code, DType, Graph, OpHandle, RunOptions, Runtime, RuntimeOptions,
};
use devplug_core::{Error, Tensor};
use libfuzzer_sys::fuzz_target;

struct World {
    rt: Runtime,
    ops: Vec<OpHandle>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = Runtime::new(RuntimeOptions {
            discover_from_env: false,
            intra_op_threads: 1,
            ..Default::default()
        })
        .expect("a runtime");
        let mut names = rt.ops().names();
        names.sort();
        let ops = names.iter().map(|n| rt.op(n).expect("listed")).collect();
        World { rt, ops }
    })
}

/// Reads the fuzzer's bytes as choices; zeros once they run out.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
    /// A small signed number, -5 to 5 (axes, sizes, counts).
    fn small(&mut self) -> i64 {
        i64::from(self.byte() % 11) - 5
    }
}

const DTYPES: [DType; 8] = DType::ALL;

fn tensor(rt: &Runtime, c: &mut Choices) -> Result<Tensor, Error> {
    let dtype = DTYPES[c.below(DTYPES.len())];
    let rank = c.below(5);
    let shape: Vec<i64> = (0..rank).map(|_| c.below(6) as i64).collect();
    let count: usize = shape.iter().product::<i64>() as usize;
    let mut bytes: Vec<u8> = (0..count * dtype.size()).map(|_| c.byte()).collect();
    if dtype == DType::Bool {
        for b in &mut bytes {
            *b &= 1;
        }
    }
    Tensor::from_bytes(rt.default_device(), dtype, &shape, &bytes)
}

fn value(ty: AttrType, c: &mut Choices) -> AttrValue {
    match ty {
        AttrType::Int => AttrValue::Int(c.small()),
        AttrType::Float => AttrValue::Float(c.small() as f64 * 0.5),
        AttrType::Bool => AttrValue::Bool(c.byte() & 1 == 1),
        AttrType::Ints => {
            let n = c.below(5);
            AttrValue::Ints((0..n).map(|_| c.small()).collect())
        }
        AttrType::DType => AttrValue::DType(DTYPES[c.below(DTYPES.len())]),
        AttrType::Str => AttrValue::Str(["", "fast", "x"][c.below(3)].to_string()),
    }
}

const TYPES: [AttrType; 6] = [
    AttrType::Int,
    AttrType::Float,
    AttrType::Bool,
    AttrType::Ints,
    AttrType::DType,
    AttrType::Str,
];

fuzz_target!(|data: &[u8]| {
    let w = world();
    let mut c = Choices(data);
    let op = &w.ops[c.below(w.ops.len())];
    let def = op.def();
    let n_inputs = c.below(5);
    let mut inputs = Vec::new();
    for _ in 0..n_inputs {
        match tensor(&w.rt, &mut c) {
            Ok(t) => inputs.push(t),
            Err(e) => panic!("a small tensor was refused: {e}"),
        }
    }
    let mut attrs = Attrs::new();
    for _ in 0..c.below(4) {
        // Mostly the op's own attributes with a value of their type; sometimes another type, or
        // a name the op does not have.
        let pick = c.byte();
        let (name, ty) = match def.attrs.get(usize::from(pick) % (def.attrs.len() + 1)) {
            Some(a) if pick & 0x80 == 0 => (a.name.to_string(), a.ty),
            Some(a) => (a.name.to_string(), TYPES[c.below(TYPES.len())]),
            None => ("frobnicate".to_string(), TYPES[c.below(TYPES.len())]),
        };
        attrs.set(&name, value(ty, &mut c));
    }
    match w.rt.run(op, &inputs, &attrs, &RunOptions::default()) {
        Ok(outputs) => {
            assert_eq!(outputs.len(), def.outputs.len(), "{}", def.name);
            for t in &outputs {
                let bytes = t.to_bytes().expect("an output reads back");
                assert_eq!(bytes.len() as u64, t.byte_size(), "{}", def.name);
            }
            check_partial(&w.rt, op, &inputs, &attrs, &outputs, &mut c);
        }
        Err(e) => assert!(
            matches!(
                e.code,
                Code::InvalidArgument | Code::NotFound | Code::Unimplemented | Code::OutOfRange
            ),
            "{}: unexpected {e}",
            def.name
        ),
    }
});

/// The op node of a graph whose placeholders know part of `inputs` (the rest of the input
/// chooses what is forgotten) is accepted, and its outputs' partial specs admit `outputs`.
fn check_partial(
    rt: &Runtime,
    op: &OpHandle,
    inputs: &[Tensor],
    attrs: &Attrs,
    outputs: &[Tensor],
    c: &mut Choices,
) {
    let mut g = Graph::new();
    let mut feeds = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let forget = c.byte();
        let shape: Vec<i64> = t
            .shape()
            .iter()
            .enumerate()
            .map(|(d, &n)| if forget & (1 << (d % 7)) != 0 { -1 } else { n })
            .collect();
        let known = (forget & 0x80 == 0).then_some(&shape[..]);
        let p = g
            .placeholder(&format!("in{i}"), t.dtype(), known)
            .expect("a placeholder of an input's dtype and rank");
        feeds.push(p);
    }
    let outs = g
        .op(rt, "node", op, &feeds, attrs, None)
        .unwrap_or_else(|e| panic!("{}: runs eagerly, refused in a graph: {e}", op.name()));
    for (o, t) in outs.iter().zip(outputs) {
        let spec = g.partial_spec(*o).expect("an output of the graph");
        assert!(
            spec.admits(t.dtype(), t.shape()),
            "{}: the graph says {spec}, the run gave {} {:?}",
            op.name(),
            t.dtype(),
            t.shape()
        );
    }
}
