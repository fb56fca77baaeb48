//! Operations: definitions (typed inputs and outputs with type variables, attributes with
//! defaults, a shape function, an optional decomposition) and the registry that holds them.
//!
//! The runtime registers the basis set ([`basis`]) in every [`OpRegistry`]; hosts and plugins
//! may add ops under a namespace (`vendor.op`).

mod attr;
pub mod basis;
mod shape;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

pub use attr::{AttrDef, AttrType, AttrValue, Attrs};
pub use shape::broadcast_shapes;

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// What the dtype of an input or output is.
#[derive(Clone, Debug)]
pub enum ArgType {
    /// A type variable of the op (`T`): every argument using it has the same dtype.
    Var(&'static str),
    /// A fixed dtype.
    Fixed(DType),
    /// The dtype given by a dtype attribute (outputs only, e.g. Cast's `dtype`).
    Attr(&'static str),
}

/// One input or output.
#[derive(Clone, Debug)]
pub struct ArgDef {
    pub name: &'static str,
    pub ty: ArgType,
    /// A variadic list (one or more tensors), allowed for the last input only.
    pub list: bool,
}

/// A type variable and the dtypes it may take.
#[derive(Clone, Debug)]
pub struct TypeVar {
    pub name: &'static str,
    pub allowed: Vec<DType>,
}

/// The dtype and shape of a tensor, before it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub dtype: DType,
    pub shape: Vec<i64>,
}

/// The dtype and shape of an existing input, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct SpecRef<'a> {
    pub dtype: DType,
    pub shape: &'a [i64],
}

impl SpecRef<'_> {
    pub fn to_spec(&self) -> TensorSpec {
        TensorSpec {
            dtype: self.dtype,
            shape: self.shape.to_vec(),
        }
    }
}

impl<'a> From<&'a Tensor> for SpecRef<'a> {
    fn from(t: &'a Tensor) -> Self {
        SpecRef {
            dtype: t.dtype(),
            shape: t.shape(),
        }
    }
}

impl<'a> From<&'a TensorSpec> for SpecRef<'a> {
    fn from(t: &'a TensorSpec) -> Self {
        SpecRef {
            dtype: t.dtype,
            shape: &t.shape,
        }
    }
}

/// What a shape function sees: the inputs' dtypes and shapes, and the complete attributes.
pub struct InferContext<'a> {
    pub op: &'a str,
    pub inputs: &'a [SpecRef<'a>],
    pub attrs: &'a Attrs,
}

impl InferContext<'_> {
    /// An `INVALID_ARGUMENT` error naming the op.
    pub fn error(&self, message: impl fmt::Display) -> Error {
        Error::invalid_argument(format!("{}: {message}", self.op))
    }
}

/// Computes the outputs' dtypes and shapes, or explains why the inputs do not fit.
pub type ShapeFn = fn(&InferContext) -> Result<Vec<TensorSpec>>;

/// Runs other ops on the device an op was placed on: what a decomposition is written with.
pub trait Emitter {
    /// Runs `op` (dispatched on the same device, with the same fallback rules).
    fn op(&mut self, op: &str, inputs: &[Tensor], attrs: &Attrs) -> Result<Vec<Tensor>>;
    /// A scalar of `dtype` holding `value`, on the device.
    fn scalar(&mut self, dtype: DType, value: f64) -> Result<Tensor>;
}

/// An op written in terms of other ops.
pub type Decomposition =
    Arc<dyn Fn(&mut dyn Emitter, &[Tensor], &Attrs) -> Result<Vec<Tensor>> + Send + Sync>;

/// An op definition.
#[derive(Clone)]
pub struct OpDef {
    pub name: String,
    pub inputs: Vec<ArgDef>,
    pub outputs: Vec<ArgDef>,
    pub type_vars: Vec<TypeVar>,
    pub attrs: Vec<AttrDef>,
    pub shape_fn: ShapeFn,
    pub decomposition: Option<Decomposition>,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDef({})", self.name)
    }
}

/// A registered op. Hosts resolve a name once and keep the handle: running an op by handle
/// looks nothing up by string.
#[derive(Clone, Debug)]
pub struct OpHandle(pub(crate) Arc<OpEntry>);

#[derive(Debug)]
pub(crate) struct OpEntry {
    /// Index in the registry, for the per-op kernel caches.
    pub(crate) index: usize,
    pub(crate) def: OpDef,
}

impl OpHandle {
    pub fn name(&self) -> &str {
        &self.0.def.name
    }
    pub fn def(&self) -> &OpDef {
        &self.0.def
    }
    pub(crate) fn index(&self) -> usize {
        self.0.index
    }
}

/// All ops of a runtime.
#[derive(Default)]
pub struct OpRegistry {
    ops: RwLock<HashMap<String, OpHandle>>,
}

impl OpRegistry {
    /// A registry holding the basis set.
    pub fn with_basis() -> OpRegistry {
        let r = OpRegistry::default();
        for def in basis::definitions() {
            // The basis set is consistent by construction (tested).
            if let Err(e) = r.register(def) {
                crate::log::error(&format!("basis op refused: {e}"));
            }
        }
        r
    }

    /// Registers an op; refused when the name is taken or the definition is inconsistent.
    pub fn register(&self, def: OpDef) -> Result<OpHandle> {
        validate(&def)?;
        let mut ops = self.ops.write();
        if ops.contains_key(&def.name) {
            return Err(Error::already_exists(format!(
                "op '{}' is already registered",
                def.name
            )));
        }
        let h = OpHandle(Arc::new(OpEntry {
            index: ops.len(),
            def,
        }));
        ops.insert(h.name().to_string(), h.clone());
        Ok(h)
    }

    pub fn find(&self, name: &str) -> Result<OpHandle> {
        self.ops
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("unknown op '{name}'")))
    }

    /// The names of all ops, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ops.read().keys().cloned().collect();
        v.sort();
        v
    }

    pub fn len(&self) -> usize {
        self.ops.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn validate(def: &OpDef) -> Result<()> {
    let bad = |why: String| {
        Err(Error::invalid_argument(format!(
            "op definition '{}': {why}",
            def.name
        )))
    };
    let mut chars = def.name.chars();
    let name_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && def.name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !name_ok {
        return bad("the name must match [A-Za-z][A-Za-z0-9_.]*".into());
    }
    for (i, a) in def.inputs.iter().enumerate() {
        if a.list && i + 1 != def.inputs.len() {
            return bad(format!(
                "only the last input may be a list ('{}' is not last)",
                a.name
            ));
        }
    }
    for a in def.inputs.iter().chain(def.outputs.iter()) {
        match &a.ty {
            ArgType::Var(v) if !def.type_vars.iter().any(|t| t.name == *v) => {
                return bad(format!(
                    "argument '{}' uses the undeclared type variable '{v}'",
                    a.name
                ))
            }
            ArgType::Attr(n)
                if !def
                    .attrs
                    .iter()
                    .any(|d| d.name == *n && d.ty == AttrType::DType) =>
            {
                return bad(format!(
                    "argument '{}' takes its dtype from '{n}', which is no dtype attribute",
                    a.name
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks inputs against an op's signature: arity, and the type variables' bindings. Returns
/// the dtype bound to the op's first type variable (what kernels are chosen by), if any.
pub(crate) fn check_inputs(def: &OpDef, inputs: &[SpecRef]) -> Result<Option<DType>> {
    let op = &def.name;
    let variadic = def.inputs.last().is_some_and(|a| a.list);
    let fixed = def.inputs.len() - usize::from(variadic);
    let arity_ok = if variadic {
        inputs.len() > fixed
    } else {
        inputs.len() == fixed
    };
    if !arity_ok {
        let want = if variadic {
            format!("at least {}", fixed + 1)
        } else {
            fixed.to_string()
        };
        return Err(Error::invalid_argument(format!(
            "{op}: expected {want} input(s), got {}",
            inputs.len()
        )));
    }
    // The bindings of the type variables: (variable, dtype, index of the input that bound it).
    // Ops have one or two variables; no allocation on this path.
    let mut bound: [(&'static str, DType, usize); 4] = [("", DType::F32, 0); 4];
    let mut nbound = 0;
    let operand = |i: usize| -> String {
        let arg = &def.inputs[i.min(def.inputs.len() - 1)];
        if arg.list {
            format!("{}[{}]", arg.name, i - fixed)
        } else {
            arg.name.to_string()
        }
    };
    for (i, spec) in inputs.iter().enumerate() {
        let arg = &def.inputs[i.min(def.inputs.len() - 1)];
        match &arg.ty {
            ArgType::Fixed(d) if *d != spec.dtype => {
                return Err(Error::invalid_argument(format!(
                    "{op}: input '{}' must be {d}, not {}",
                    operand(i),
                    spec.dtype
                )))
            }
            ArgType::Var(v) => {
                if let Some((_, d, first)) = bound[..nbound].iter().find(|(n, _, _)| n == v) {
                    if *d != spec.dtype {
                        return Err(Error::invalid_argument(format!(
                            "{op}: input '{}' is {} but '{}' is {d}; both have type {v}",
                            operand(i),
                            spec.dtype,
                            operand(*first)
                        )));
                    }
                } else {
                    let tv = def.type_vars.iter().find(|t| t.name == *v);
                    if let Some(tv) = tv {
                        if !tv.allowed.contains(&spec.dtype) {
                            let allowed: Vec<&str> = tv.allowed.iter().map(|d| d.name()).collect();
                            return Err(Error::invalid_argument(format!(
                                "{op}: input '{}' is {}, but {v} must be one of {}",
                                operand(i),
                                spec.dtype,
                                allowed.join(", ")
                            )));
                        }
                    }
                    if nbound == bound.len() {
                        return Err(Error::internal(format!(
                            "{op}: more than {} type variables",
                            bound.len()
                        )));
                    }
                    bound[nbound] = (v, spec.dtype, i);
                    nbound += 1;
                }
            }
            _ => {}
        }
    }
    Ok(def
        .type_vars
        .first()
        .and_then(|tv| bound[..nbound].iter().find(|(n, _, _)| *n == tv.name))
        .map(|(_, d, _)| *d))
}
