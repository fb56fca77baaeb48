//! Operations: definitions (typed inputs and outputs with type variables, attributes with
//! defaults, a shape function, an optional decomposition) and the registry that holds them.
//!
//! The runtime registers the basis set ([`basis`]) in every [`OpRegistry`]; hosts and plugins
//! may add ops under a namespace (`vendor.op`).

mod attr;
pub mod basis;
mod partial;
mod shape;
pub mod text;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
pub use smallvec::{smallvec, SmallVec};

pub use attr::{AttrDef, AttrType, AttrValue, Attrs};
pub(crate) use partial::PartialRule;
pub use partial::PartialSpec;
pub use shape::broadcast_shapes;

use crate::error::{Error, Result};
use crate::tensor::{DType, Shape, Tensor};

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
    /// Its name, unique among the op's inputs, outputs and attributes (messages name
    /// operands by it).
    pub name: &'static str,
    /// What its dtype is.
    pub ty: ArgType,
    /// A variadic list (one or more tensors), allowed for the last input only.
    pub list: bool,
}

/// A type variable and the dtypes it may take.
#[derive(Clone, Debug)]
pub struct TypeVar {
    /// The name arguments refer to with [`ArgType::Var`] (`T`).
    pub name: &'static str,
    /// The dtypes it may take (at least one). The first type variable's binding is what
    /// kernels are chosen by ([`KernelDef::dtypes`](crate::KernelDef::dtypes)).
    pub allowed: Vec<DType>,
}

impl TypeVar {
    /// The first of `dtypes` this type variable does not take, with its index: what a
    /// kernel's dtype list must not hold (such a kernel could never run).
    pub(crate) fn first_not_taken(&self, dtypes: &[DType]) -> Option<(usize, DType)> {
        dtypes
            .iter()
            .copied()
            .enumerate()
            .find(|(_, d)| !self.allowed.contains(d))
    }

    /// The dtypes it takes, for messages: `f32, f64, i32`.
    pub(crate) fn allowed_names(&self) -> String {
        let names: Vec<&str> = self.allowed.iter().map(|d| d.name()).collect();
        names.join(", ")
    }
}

/// The dtype and shape of a tensor, before it exists. The shape is stored inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The element type.
    pub dtype: DType,
    /// The dimensions (at most [`MAX_RANK`](crate::tensor::MAX_RANK)).
    pub shape: Shape,
}

impl TensorSpec {
    /// A spec of `dtype` and `shape`; `INVALID_ARGUMENT` when the rank exceeds
    /// [`MAX_RANK`](crate::tensor::MAX_RANK).
    pub fn new(dtype: DType, shape: &[i64]) -> Result<TensorSpec> {
        Ok(TensorSpec {
            dtype,
            shape: Shape::from_slice(shape)?,
        })
    }
}

/// The outputs of an op run: inline for one tensor (no allocation for most ops). One, not
/// two: every basis op has a single output, and a list that fits in 128 bytes is moved with a
/// few vector stores instead of a `memcpy` call (measured on the eager dispatch path).
pub type Outputs = SmallVec<[Tensor; 1]>;

/// What a shape function returns: one spec per output, inline for one output (see [`Outputs`]).
pub type Specs = SmallVec<[TensorSpec; 1]>;

/// The dtype and shape of an existing input, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct SpecRef<'a> {
    /// The element type.
    pub dtype: DType,
    /// The dimensions.
    pub shape: &'a [i64],
}

impl SpecRef<'_> {
    /// An owned copy ([`TensorSpec::new`]).
    pub fn to_spec(&self) -> Result<TensorSpec> {
        TensorSpec::new(self.dtype, self.shape)
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
///
/// The inputs have passed the signature's checks when the shape function runs: their number
/// is the declared one (at least one tensor for a variadic last input), and each type
/// variable is bound to one dtype it allows.
pub struct InferContext<'a> {
    /// The op's name, for messages ([`InferContext::error`] puts it first).
    pub op: &'a str,
    /// One per input tensor, in order (a variadic list's tensors last).
    pub inputs: &'a [SpecRef<'a>],
    /// The attributes, complete: every declared attribute is there, defaults filled in.
    pub attrs: &'a Attrs,
}

impl InferContext<'_> {
    /// An `INVALID_ARGUMENT` error naming the op.
    pub fn error(&self, message: impl fmt::Display) -> Error {
        Error::invalid_argument(format!("{}: {message}", self.op))
    }
}

/// Computes the outputs' dtypes and shapes, or explains why the inputs do not fit.
pub type ShapeFn = Arc<dyn Fn(&InferContext) -> Result<Specs> + Send + Sync>;

/// Runs other ops on the device an op was placed on: what a decomposition is written with.
///
/// Each op it runs is dispatched on that device with the usual fallback order (native kernel,
/// its own decomposition, soft placement to the CPU when the run allows it), appears in the
/// placement log with the reason `decomposed`, and may return a tensor on the CPU (soft
/// placed). Decompositions may nest 32 levels deep; deeper is an `INTERNAL` error (a cycle).
pub trait Emitter {
    /// Runs `op`, by name (any op of the runtime), with `inputs` (on any device: copied where
    /// needed) and `attrs`, on the decomposed op's device; returns its outputs.
    fn op(&mut self, op: &str, inputs: &[Tensor], attrs: &Attrs) -> Result<Outputs>;
    /// A scalar (shape `[]`) of `dtype` holding `value` converted as Rust's `as` does, on the
    /// device.
    fn scalar(&mut self, dtype: DType, value: f64) -> Result<Tensor>;
}

/// An op written in terms of other ops.
pub type Decomposition =
    Arc<dyn Fn(&mut dyn Emitter, &[Tensor], &Attrs) -> Result<Outputs> + Send + Sync>;

/// An op definition: a name, typed inputs and outputs, attributes, a shape function and an
/// optional decomposition.
///
/// A host builds one in code and registers it with
/// [`Runtime::register_op`](crate::Runtime::register_op), or writes the op in text
/// ([`text`], [`Runtime::register_op_text`](crate::Runtime::register_op_text)), which builds
/// one from a signature and a body. Argument, type-variable and attribute names are
/// `&'static str`: literals in code (a host that makes ops from data at run time leaks its
/// strings, or uses the text form, which interns them).
///
/// **The contract.** Every run checks the inputs against the signature, completes the
/// attributes, then calls the shape function, whose specs are the outputs: a kernel gets its
/// outputs allocated from them. It returns one spec per output, of the dtype the signature
/// gives, or an error (use [`InferContext::error`]) when the inputs do not fit. On a device
/// without a kernel for the op, the decomposition runs there, through an [`Emitter`]; what it
/// returns must be exactly what the shape function said (count, dtypes, shapes). For ops a
/// host built in code, both are checked on every run (`INVALID_ARGUMENT` naming the op and
/// the output). An op without a decomposition runs only where a kernel for it exists (with
/// soft placement, on the CPU if it has one).
///
/// ```
/// use std::sync::Arc;
/// use devplug_core::op::{broadcast_shapes, smallvec, ArgDef, ArgType, AttrDef, AttrType, TensorSpec, TypeVar};
/// use devplug_core::{Attrs, DType, OpDef, Runtime, RuntimeOptions, RunOptions, Tensor};
///
/// let rt = Runtime::new(RuntimeOptions::default())?;
/// let arg = |name| ArgDef { name, ty: ArgType::Var("T"), list: false };
/// let add_scaled = rt.register_op(OpDef {                    // z = x + k·y
///     name: "app.AddScaled".into(),
///     inputs: vec![arg("x"), arg("y")],
///     outputs: vec![arg("z")],
///     type_vars: vec![TypeVar { name: "T", allowed: vec![DType::F32, DType::F64] }],
///     attrs: vec![AttrDef { name: "k", ty: AttrType::Float, default: Some(1.0.into()) }],
///     shape_fn: Arc::new(|cx| {
///         let (x, y) = (&cx.inputs[0], &cx.inputs[1]);
///         let shape = broadcast_shapes(x.shape, y.shape)
///             .ok_or_else(|| cx.error(format!("{:?} and {:?} do not broadcast", x.shape, y.shape)))?;
///         Ok(smallvec![TensorSpec::new(x.dtype, &shape)?])
///     }),
///     decomposition: Some(Arc::new(|em, inputs, attrs| {
///         let k = em.scalar(inputs[1].dtype(), attrs.float("k")?)?;
///         let ky = em.op("Mul", &[inputs[1].clone(), k], &Attrs::new())?;
///         em.op("Add", &[inputs[0].clone(), ky[0].clone()], &Attrs::new())
///     })),
/// })?;
/// let cpu = rt.default_device();
/// let x = Tensor::from_slice(cpu, &[2], &[1.0f32, 2.0])?;
/// let z = rt.run1(&add_scaled, &[x.clone(), x], &Attrs::new().with("k", 0.5), &RunOptions::default())?;
/// assert_eq!(z.to_vec::<f32>()?, [1.5, 3.0]);
/// # Ok::<(), devplug_core::Error>(())
/// ```
#[derive(Clone)]
pub struct OpDef {
    /// `namespace.Name` for ops hosts and plugins add (`app.Swish`); the basis ops have none.
    pub name: String,
    /// The inputs, in order; only the last may be a list.
    pub inputs: Vec<ArgDef>,
    /// The outputs, in order (at least one).
    pub outputs: Vec<ArgDef>,
    /// The type variables the arguments use.
    pub type_vars: Vec<TypeVar>,
    /// The attributes, with their defaults (`None`: required).
    pub attrs: Vec<AttrDef>,
    /// Computes the outputs' dtypes and shapes (see the contract above).
    pub shape_fn: ShapeFn,
    /// The op in terms of other ops, for devices without a kernel for it.
    pub decomposition: Option<Decomposition>,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDef({})", self.name)
    }
}

impl OpDef {
    /// The op's signature on one line, in the notation op definitions in text use (TensorFlow
    /// `REGISTER_OP` terms): inputs, then attributes after `;` with their defaults, the
    /// outputs, and what each type variable takes:
    ///
    /// ```text
    /// MatMul(a: T, b: T; transpose_a: bool = false, transpose_b: bool = false) -> (product: T) where T: {f32, ...}
    /// AddN(inputs: T...) -> (sum: T) where T: {...}
    /// Cast(x: T; dtype: dtype) -> (y: @dtype) where T: {...}
    /// ```
    ///
    /// A variadic input ends in `...`; an output whose dtype an attribute gives is `@attr`.
    pub fn signature(&self) -> String {
        let arg = |a: &ArgDef| {
            let ty = match a.ty {
                ArgType::Var(v) => v.to_string(),
                ArgType::Fixed(d) => d.name().to_string(),
                ArgType::Attr(n) => format!("@{n}"),
            };
            format!("{}: {ty}{}", a.name, if a.list { "..." } else { "" })
        };
        let join = |v: Vec<String>| v.join(", ");
        let mut s = format!(
            "{}({}",
            self.name,
            join(self.inputs.iter().map(arg).collect())
        );
        if !self.attrs.is_empty() {
            let attrs = self.attrs.iter().map(|a| match &a.default {
                Some(d) => format!("{}: {} = {d}", a.name, a.ty.keyword()),
                None => format!("{}: {}", a.name, a.ty.keyword()),
            });
            s += "; ";
            s += &join(attrs.collect());
        }
        s += &format!(") -> ({})", join(self.outputs.iter().map(arg).collect()));
        if !self.type_vars.is_empty() {
            let vars = self
                .type_vars
                .iter()
                .map(|v| format!("{}: {{{}}}", v.name, v.allowed_names()));
            s += &format!(" where {}", join(vars.collect()));
        }
        s
    }
}

/// A registered op. Hosts resolve a name once and keep the handle: running an op by handle
/// looks nothing up by string. A handle works with the runtime that resolved it only (another
/// runtime refuses it with `INVALID_ARGUMENT`); cloning it is cheap, and it is `Send + Sync`.
#[derive(Clone, Debug)]
pub struct OpHandle(pub(crate) Arc<OpEntry>);

pub(crate) struct OpEntry {
    /// Index in the registry, for the per-op kernel caches.
    pub(crate) index: usize,
    /// The id of the registry (0 for a provisional handle, in none).
    registry: u64,
    pub(crate) def: OpDef,
    sig: Signature,
    /// Whether dispatch checks the shape function's output dtypes against the signature: for
    /// ops a host built in code ([`OpRegistry::register_unchecked`]); the basis set's are
    /// tested and text ops' follow from their body.
    pub(crate) check_specs: bool,
    /// What the outputs are from partial inputs ([`partial`]): the basis ops' rules, a text
    /// op's body; `None` for ops built in code (their outputs' shapes are known only from
    /// whole inputs).
    partial: Option<PartialRule>,
    /// How far a text op's body reaches through the bodies of the text ops it calls (zero
    /// for other ops).
    pub(crate) body: BodySize,
}

/// How large a text op's body is once the bodies of the text ops it calls are expanded: its
/// shape function, partial rule and decomposition walk all of it on every run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BodySize {
    /// Text op bodies nested: 1 for a body of basis ops, 0 for an op without a text body.
    pub(crate) depth: u32,
    /// The statements of ops without a text body, all bodies expanded.
    pub(crate) statements: u64,
}

impl fmt::Debug for OpEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpEntry({} #{})", self.def.name, self.index)
    }
}

/// What an input's dtype must be, resolved at registration for the dispatch hot path.
#[derive(Clone, Copy, Debug)]
enum InputRule {
    /// Type variable number `n` (its allowed dtypes in `Signature::allowed[n]`).
    Var(u8),
    Fixed(DType),
    Free,
}

/// Declared inputs and type variables the precomputed rules hold; an op with more always
/// takes the explaining path (correct, only slower).
const SIG_INPUTS: usize = 8;
const SIG_VARS: usize = 4;

/// An op's input rules in the form [`check_inputs`] can test without strings: a rule per
/// declared input and a bit mask of allowed dtypes per type variable, in fixed arrays (this
/// runs on every eager op).
#[derive(Debug)]
struct Signature {
    rules: [InputRule; SIG_INPUTS],
    /// Declared inputs (`rules[..len]`).
    len: u8,
    allowed: [u16; SIG_VARS],
    /// The variable of `def.type_vars[0]`, whose dtype keys the kernel choice.
    first: Option<u8>,
    variadic: bool,
    /// False when the op has more inputs or type variables than the arrays hold.
    usable: bool,
}

/// One bit per dtype (their values are 1 to 8).
fn dtype_bit(d: DType) -> u16 {
    1 << (d as i32 as u32 & 15)
}

impl Signature {
    fn of(def: &OpDef) -> Signature {
        let mut names: SmallVec<[&'static str; 4]> = SmallVec::new();
        let mut allowed: SmallVec<[u16; 4]> = SmallVec::new();
        let mut var = |name: &'static str| -> u8 {
            if let Some(i) = names.iter().position(|n| same_name(n, name)) {
                return i as u8;
            }
            names.push(name);
            allowed.push(
                match def.type_vars.iter().find(|t| same_name(t.name, name)) {
                    Some(tv) => tv.allowed.iter().fold(0, |m, d| m | dtype_bit(*d)),
                    None => u16::MAX,
                },
            );
            (names.len() - 1) as u8
        };
        let mut rules = [InputRule::Free; SIG_INPUTS];
        for (rule, a) in rules.iter_mut().zip(&def.inputs) {
            *rule = match &a.ty {
                ArgType::Var(v) => InputRule::Var(var(v)),
                ArgType::Fixed(d) => InputRule::Fixed(*d),
                ArgType::Attr(_) => InputRule::Free,
            };
        }
        let first = def.type_vars.first().map(|tv| var(tv.name));
        let usable = def.inputs.len() <= SIG_INPUTS && allowed.len() <= SIG_VARS;
        let mut masks = [0u16; SIG_VARS];
        for (m, a) in masks.iter_mut().zip(&allowed) {
            *m = *a;
        }
        Signature {
            rules,
            len: def.inputs.len().min(SIG_INPUTS) as u8,
            allowed: masks,
            first,
            variadic: def.inputs.last().is_some_and(|a| a.list),
            usable,
        }
    }

    /// The dtype of the first type variable if `inputs` satisfy every rule; `None` when they
    /// do not (the slow path then explains why).
    #[inline]
    fn check(&self, inputs: &[SpecRef]) -> Option<Option<DType>> {
        let len = self.len as usize;
        let fixed = len.checked_sub(usize::from(self.variadic))?;
        let arity_ok = if self.variadic {
            inputs.len() > fixed
        } else {
            inputs.len() == fixed
        };
        if !arity_ok || !self.usable {
            return None;
        }
        let mut bound: [Option<DType>; SIG_VARS] = [None; SIG_VARS];
        for (i, spec) in inputs.iter().enumerate() {
            // Past the declared inputs (a variadic list's tail), the last rule applies.
            match self.rules[i.min(len - 1)] {
                InputRule::Var(v) => {
                    // `usable`: every variable number is below `SIG_VARS`.
                    let v = v as usize;
                    match bound[v] {
                        Some(d) if d != spec.dtype => return None,
                        Some(_) => {}
                        None if self.allowed[v] & dtype_bit(spec.dtype) == 0 => return None,
                        None => bound[v] = Some(spec.dtype),
                    }
                }
                InputRule::Fixed(d) if d != spec.dtype => return None,
                InputRule::Fixed(_) | InputRule::Free => {}
            }
        }
        Some(self.first.and_then(|v| bound[v as usize]))
    }
}

impl OpEntry {
    /// [`check_inputs`] for this op: the precomputed rules first, the explaining path on a
    /// mismatch.
    pub(crate) fn check_inputs(&self, inputs: &[SpecRef]) -> Result<Option<DType>> {
        match self.sig.check(inputs) {
            Some(d) => Ok(d),
            None => check_inputs(&self.def, inputs),
        }
    }
}

impl OpHandle {
    /// A handle of `def` outside any registry, for checking definitions that refer to ops
    /// about to be registered together (its index is no cache key: never dispatch by it).
    pub(crate) fn provisional(
        def: OpDef,
        partial: Option<PartialRule>,
        body: BodySize,
    ) -> OpHandle {
        OpHandle(Arc::new(OpEntry {
            index: usize::MAX,
            registry: 0,
            sig: Signature::of(&def),
            check_specs: false,
            partial,
            body,
            def,
        }))
    }

    /// The op's name (`MatMul`, `app.Swish`).
    pub fn name(&self) -> &str {
        &self.0.def.name
    }
    /// The op's definition: its inputs, outputs, type variables and attributes with their
    /// defaults; [`OpDef::signature`] writes them on one line.
    pub fn def(&self) -> &OpDef {
        &self.0.def
    }
    pub(crate) fn index(&self) -> usize {
        self.0.index
    }
}

/// All ops of a runtime.
pub struct OpRegistry {
    ops: RwLock<Ops>,
    /// Unique in the process (never 0): the handles it made carry it.
    id: u64,
}

/// The ops by name, and in name order (for listing by index).
#[derive(Default)]
struct Ops {
    by_name: HashMap<String, OpHandle>,
    sorted: Vec<OpHandle>,
}

impl Default for OpRegistry {
    fn default() -> OpRegistry {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        OpRegistry {
            ops: RwLock::default(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl OpRegistry {
    /// Whether `op` is a handle this registry made.
    pub fn owns(&self, op: &OpHandle) -> bool {
        op.0.registry == self.id
    }

    /// A registry holding the basis set (what every runtime starts with).
    #[doc(hidden)]
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

    /// Registers one of the runtime's own ops (the basis set), with its partial shape rule;
    /// refused when the name is taken or the definition is inconsistent. Hosts register
    /// through [`Runtime::register_op`](crate::Runtime::register_op) or
    /// [`Runtime::register_op_text`](crate::Runtime::register_op_text), which also require a
    /// namespace and check a host-built op's shape function on every run.
    fn register(&self, def: OpDef) -> Result<OpHandle> {
        // Only the basis ops are named without a namespace.
        let partial = if is_namespaced(&def.name) {
            None
        } else {
            partial::basis_rule(&def.name)
        };
        self.register_as(def, false, partial, BodySize::default())
    }

    /// Registers an op parsed from text, with its body's partial shape rule.
    pub(crate) fn register_text(&self, op: text::Parsed) -> Result<OpHandle> {
        self.register_as(op.def, false, Some(op.partial), op.body)
    }

    /// [`OpRegistry::register`] for an op whose shape function nothing vouches for (built in
    /// code by a host): dispatch checks the dtypes it gives against the signature.
    pub(crate) fn register_unchecked(&self, def: OpDef) -> Result<OpHandle> {
        self.register_as(def, true, None, BodySize::default())
    }

    fn register_as(
        &self,
        def: OpDef,
        check_specs: bool,
        partial: Option<PartialRule>,
        body: BodySize,
    ) -> Result<OpHandle> {
        validate(&def)?;
        let mut ops = self.ops.write();
        if ops.by_name.contains_key(&def.name) {
            return Err(Error::already_exists(format!(
                "op '{}' is already registered",
                def.name
            )));
        }
        let h = OpHandle(Arc::new(OpEntry {
            index: ops.by_name.len(),
            registry: self.id,
            sig: Signature::of(&def),
            check_specs,
            partial,
            body,
            def,
        }));
        ops.by_name.insert(h.name().to_string(), h.clone());
        let at = ops.sorted.partition_point(|o| o.name() < h.name());
        ops.sorted.insert(at, h.clone());
        Ok(h)
    }

    /// The op named `name` (case-sensitive); `NOT_FOUND` when there is none, suggesting the
    /// op meant where the name is another case of one, or another framework's name for one
    /// (TensorFlow's `Sum`, `AddV2`, `BatchMatMulV2`; ONNX's and PyTorch's spellings).
    pub fn find(&self, name: &str) -> Result<OpHandle> {
        let ops = self.ops.read();
        match ops.by_name.get(name) {
            Some(h) => Ok(h.clone()),
            None => Err(unknown_op(name, &ops.sorted)),
        }
    }

    /// The names of all ops, sorted.
    pub fn names(&self) -> Vec<String> {
        let ops = self.ops.read();
        ops.sorted.iter().map(|o| o.name().to_string()).collect()
    }

    /// The op at `index` in name order (as [`OpRegistry::names`] lists them); `None` past the
    /// end. An op registered meanwhile shifts the indexes after it.
    pub fn at(&self, index: usize) -> Option<OpHandle> {
        self.ops.read().sorted.get(index).cloned()
    }

    /// How many ops the registry holds.
    pub fn len(&self) -> usize {
        self.ops.read().by_name.len()
    }

    /// Whether the registry holds no op (never, for a runtime's).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `name` is `namespace.Name` (dot-separated parts of letters, digits and `_`, each
/// starting with a letter): what ops that hosts and plugins define are named.
pub(crate) fn is_namespaced(name: &str) -> bool {
    name.split('.').count() >= 2
        && name.split('.').all(|p| {
            let mut c = p.chars();
            c.next().is_some_and(|c| c.is_ascii_alphabetic())
                && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
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
    // Every name an op declares is its own: an input, an output, an attribute.
    let names = def
        .inputs
        .iter()
        .chain(&def.outputs)
        .map(|a| a.name)
        .chain(def.attrs.iter().map(|a| a.name));
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if seen.contains(&n) {
            return bad(format!(
                "'{n}' is declared twice (inputs, outputs and attributes need distinct names)"
            ));
        }
        seen.push(n);
    }
    if def.outputs.is_empty() {
        return bad("the op must have at least one output".into());
    }
    for (i, t) in def.type_vars.iter().enumerate() {
        if t.allowed.is_empty() {
            return bad(format!("type variable '{}' allows no dtype", t.name));
        }
        if def.type_vars[..i].iter().any(|u| u.name == t.name) {
            return bad(format!("type variable '{}' is declared twice", t.name));
        }
    }
    for a in &def.attrs {
        if let Some(d) = &a.default {
            let fits = d.ty() == a.ty || (a.ty == AttrType::Float && d.ty() == AttrType::Int);
            if !fits {
                return bad(format!(
                    "attribute '{}' is {} but its default {d} is {}",
                    a.name,
                    a.ty,
                    d.ty()
                ));
            }
        }
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

/// Name equality for the `'static` names of op definitions: the same literal is usually the
/// same address, which is checked before the bytes.
#[inline]
fn same_name(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Whether `def` takes `count` inputs; `INVALID_ARGUMENT` naming the op when not. Returns
/// how many inputs come before a variadic list (all of them when there is none).
pub(crate) fn check_arity(def: &OpDef, count: usize) -> Result<usize> {
    let variadic = def.inputs.last().is_some_and(|a| a.list);
    let fixed = def.inputs.len() - usize::from(variadic);
    let arity_ok = if variadic {
        count > fixed
    } else {
        count == fixed
    };
    if !arity_ok {
        let want = if variadic {
            format!("at least {}", fixed + 1)
        } else {
            fixed.to_string()
        };
        return Err(Error::invalid_argument(format!(
            "{}: expected {want} input(s), got {count}",
            def.name
        )));
    }
    Ok(fixed)
}

/// Checks what an op's shape function gave against its signature: one spec per output, each
/// of the dtype its declaration makes it (a type variable's binding by the inputs, a fixed
/// dtype, a dtype attribute's value). `attrs` are complete.
pub(crate) fn check_specs(
    def: &OpDef,
    inputs: &[SpecRef],
    attrs: &Attrs,
    specs: &[TensorSpec],
) -> Result<()> {
    let bad = |why: String| {
        Error::invalid_argument(format!("op '{}': its shape function {why}", def.name))
    };
    if specs.len() != def.outputs.len() {
        return Err(bad(format!(
            "gives {} output(s), but the op declares {}",
            specs.len(),
            def.outputs.len()
        )));
    }
    for (spec, out) in specs.iter().zip(&def.outputs) {
        // A variable's binding: its first input's dtype (inputs passed check_inputs).
        let want = declared_dtype(&out.ty, attrs, |v| {
            def.inputs
                .iter()
                .position(|a| matches!(a.ty, ArgType::Var(w) if same_name(w, v)))
                .and_then(|i| inputs.get(i))
                .map(|s| s.dtype)
        });
        if let Some(want) = want.filter(|w| *w != spec.dtype) {
            return Err(bad(format!(
                "gives {} for output '{}', but the signature makes it {want}",
                spec.dtype, out.name
            )));
        }
    }
    Ok(())
}

/// Checks inputs against an op's signature: arity, and the type variables' bindings. Returns
/// the dtype bound to the op's first type variable (what kernels are chosen by), if any.
pub(crate) fn check_inputs(def: &OpDef, inputs: &[SpecRef]) -> Result<Option<DType>> {
    let bound = bind_types(def, inputs.len(), |i| Some(inputs[i].dtype))?;
    Ok(def.type_vars.first().and_then(|tv| bound.get(tv.name)))
}

/// The dtypes the inputs bind the op's type variables to. Ops have one or two variables; no
/// allocation.
pub(crate) struct Bindings {
    /// (variable, dtype, index of the input that bound it).
    vars: [(&'static str, DType, usize); 4],
    len: usize,
}

impl Bindings {
    /// The dtype bound to the type variable `var`, if an input bound it.
    pub(crate) fn get(&self, var: &str) -> Option<DType> {
        self.vars[..self.len]
            .iter()
            .find(|(n, _, _)| same_name(n, var))
            .map(|(_, d, _)| *d)
    }
}

/// Checks `count` inputs against an op's signature: the arity, and each input whose dtype
/// `dtype_of` knows against its declared type (a fixed dtype, or a type variable: allowed, and
/// the same as the variable's other inputs). Inputs of unknown dtype (a graph's partial
/// knowledge) bind nothing.
pub(crate) fn bind_types(
    def: &OpDef,
    count: usize,
    dtype_of: impl Fn(usize) -> Option<DType>,
) -> Result<Bindings> {
    let op = &def.name;
    let fixed = check_arity(def, count)?;
    let mut bound = Bindings {
        vars: [("", DType::F32, 0); 4],
        len: 0,
    };
    let operand = |i: usize| -> String {
        let arg = &def.inputs[i.min(def.inputs.len() - 1)];
        if arg.list {
            format!("{}[{}]", arg.name, i - fixed)
        } else {
            arg.name.to_string()
        }
    };
    for i in 0..count {
        let Some(dtype) = dtype_of(i) else { continue };
        let arg = &def.inputs[i.min(def.inputs.len() - 1)];
        match &arg.ty {
            ArgType::Fixed(d) if *d != dtype => {
                return Err(Error::invalid_argument(format!(
                    "{op}: input '{}' must be {d}, not {dtype}",
                    operand(i),
                )))
            }
            ArgType::Var(v) => {
                if let Some((_, d, first)) = bound.vars[..bound.len]
                    .iter()
                    .find(|(n, _, _)| same_name(n, v))
                {
                    if *d != dtype {
                        return Err(Error::invalid_argument(format!(
                            "{op}: input '{}' is {dtype} but '{}' is {d}; both have type {v}",
                            operand(i),
                            operand(*first)
                        )));
                    }
                } else {
                    let tv = def.type_vars.iter().find(|t| same_name(t.name, v));
                    if let Some(tv) = tv {
                        if !tv.allowed.contains(&dtype) {
                            let allowed: Vec<&str> = tv.allowed.iter().map(|d| d.name()).collect();
                            return Err(Error::invalid_argument(format!(
                                "{op}: input '{}' is {dtype}, but {v} must be one of {}",
                                operand(i),
                                allowed.join(", ")
                            )));
                        }
                    }
                    if bound.len == bound.vars.len() {
                        return Err(Error::internal(format!(
                            "{op}: more than {} type variables",
                            bound.vars.len()
                        )));
                    }
                    bound.vars[bound.len] = (v, dtype, i);
                    bound.len += 1;
                }
            }
            _ => {}
        }
    }
    Ok(bound)
}

/// The dtype an output declared `ty` has, where known: a fixed dtype, a dtype attribute's
/// value (`attrs` complete), a type variable's binding (`var`).
pub(crate) fn declared_dtype(
    ty: &ArgType,
    attrs: &Attrs,
    var: impl Fn(&str) -> Option<DType>,
) -> Option<DType> {
    match ty {
        ArgType::Fixed(d) => Some(*d),
        ArgType::Attr(n) => attrs.dtype(n).ok(),
        ArgType::Var(v) => var(v),
    }
}

/// The `NOT_FOUND` error for an op named `name`, which none of `ops` is, with a hint where one
/// is likely meant.
#[cold]
fn unknown_op(name: &str, ops: &[OpHandle]) -> Error {
    let same_letters = ops
        .iter()
        .find(|o| o.name().eq_ignore_ascii_case(name))
        .map(|o| format!("'{}'", o.name()));
    // Other frameworks' names for basis ops (where a name is another op here, both).
    let other = match name {
        "Sum" => Some("ReduceSum (a reduction) or AddN (of several tensors)"),
        "Max" => Some("ReduceMax (a reduction) or Maximum (elementwise)"),
        "Min" => Some("ReduceMin (a reduction) or Minimum (elementwise)"),
        "Mean" => Some("ReduceMean"),
        "AddV2" | "BiasAdd" => Some("Add (it broadcasts)"),
        "Subtract" => Some("Sub"),
        "Multiply" => Some("Mul"),
        "RealDiv" | "Divide" => Some("Div"),
        "Negative" => Some("Neg"),
        "BatchMatMul" | "BatchMatMulV2" | "BatchMatMulV3" | "Bmm" | "Mm" => {
            Some("MatMul (it batches, with transpose_a and transpose_b)")
        }
        "ConcatV2" | "Cat" => Some("Concat"),
        "SelectV2" | "Where" => Some("Select"),
        "Range" | "Arange" => Some("Iota"),
        "ExpandDims" | "Squeeze" | "Unsqueeze" | "View" | "Flatten" => Some("Reshape"),
        "Expand" => Some("BroadcastTo"),
        "Permute" => Some("Transpose"),
        _ => None,
    };
    let hint = match (same_letters, other) {
        (Some(op), _) => format!(" (did you mean {op}? op names are case-sensitive)"),
        (None, Some(ops)) => format!(" (devplug's name: {ops})"),
        (None, None) => String::new(),
    };
    Error::not_found(format!("unknown op '{name}'{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unknown op's error suggests the op meant: another case of a name, another
    /// framework's name; every op a hint names exists; an unknown name gets no hint.
    #[test]
    fn unknown_ops_suggest_the_op_meant() {
        let rt = crate::Runtime::new(crate::RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .unwrap();
        let message = |name: &str| rt.op(name).unwrap_err().message;
        assert_eq!(
            message("add"),
            "unknown op 'add' (did you mean 'Add'? op names are case-sensitive)"
        );
        assert_eq!(
            message("Sum"),
            "unknown op 'Sum' (devplug's name: ReduceSum (a reduction) or AddN (of several \
             tensors))"
        );
        assert_eq!(message("Frobnicate"), "unknown op 'Frobnicate'");
        let all = rt.ops().names();
        for name in [
            "Sum",
            "Max",
            "Min",
            "Mean",
            "AddV2",
            "BiasAdd",
            "Subtract",
            "Multiply",
            "RealDiv",
            "Divide",
            "Negative",
            "BatchMatMulV2",
            "Bmm",
            "ConcatV2",
            "SelectV2",
            "Where",
            "Range",
            "ExpandDims",
            "Squeeze",
            "Expand",
            "Permute",
        ] {
            let m = message(name);
            let hint = m
                .split("devplug's name: ")
                .nth(1)
                .unwrap_or_else(|| panic!("{m}"));
            let named = hint.split(|c: char| !c.is_ascii_alphanumeric());
            let ops: Vec<&str> = named.filter(|w| all.iter().any(|o| o == w)).collect();
            assert!(!ops.is_empty(), "{name}: {m}");
            let first = hint
                .split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap();
            assert!(
                all.iter().any(|o| o == first),
                "{name}: '{first}' is no op: {m}"
            );
        }
    }

    /// The precomputed rules accept exactly what the explaining path accepts, with the same
    /// dtype, for every basis op and every dtype combination of up to three inputs.
    #[test]
    fn fast_input_check_agrees_with_the_explaining_check() {
        let shape: [i64; 1] = [2];
        for def in basis::definitions() {
            let sig = Signature::of(&def);
            for n in 0..=3usize {
                let combos = DType::ALL.len().pow(n as u32);
                for mut c in 0..combos {
                    let specs: Vec<SpecRef> = (0..n)
                        .map(|_| {
                            let d = DType::ALL[c % DType::ALL.len()];
                            c /= DType::ALL.len();
                            SpecRef {
                                dtype: d,
                                shape: &shape,
                            }
                        })
                        .collect();
                    let slow = check_inputs(&def, &specs).ok();
                    assert_eq!(sig.check(&specs), slow, "{} with {:?}", def.name, specs);
                }
            }
        }
    }
}
