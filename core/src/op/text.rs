//! Op definitions in text, as plugins register them (ABI 1.2, `dpp_op_def_t`): the signature
//! in the notation of TensorFlow's `REGISTER_OP` and a *body*, statements over other ops that
//! compute the op. The body is the op's decomposition (it runs on any device without a kernel
//! for the op) and its shape function (the statements' own shape functions, in order), so an
//! op defined this way runs everywhere by construction.
//!
//! ```text
//! name       mydev.Swish
//! inputs     x: T
//! outputs    y: T
//! type_vars  T: {f32, f64}
//! attrs      beta: float = 1.0
//! body       bx = Mul(x, @beta); s = Sigmoid(bx); y = Mul(x, s)
//! ```
//!
//! A statement is `out[, out2...] = Op(arg, ..., attr=value, ...)`: each `arg` a name defined
//! before (an input or an earlier statement's output), a number (a scalar of the dtype of the
//! statement's first tensor argument) or `@attr` (the op's own float or int attribute, as such
//! a scalar); each attribute value a literal (`1`, `0.5`, `true`, `[0, 1]`, `f32`, `"text"`)
//! or `@attr`. Attribute types: `int`, `float`, `bool`, `ints`, `dtype` and `string` (for
//! the op's kernels to read; a string has no `"` in it and no escapes).
//! Names declared for the op (inputs, outputs, type variables, attributes) are interned and
//! kept for the process's life (op definitions hold `'static` names): each distinct name once.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::op::partial::{PartialContext, Shapes};
use crate::op::{
    ArgDef, ArgType, AttrDef, AttrType, AttrValue, Attrs, BodySize, Emitter, InferContext, OpDef,
    OpHandle, Outputs, PartialRule, PartialSpec, SpecRef, Specs, TensorSpec, TypeVar,
};
use crate::tensor::{DType, Shape, Tensor};

/// An op definition as text (the fields of `dpp_op_def_t`).
#[derive(Clone, Debug, Default)]
pub struct OpText {
    /// `namespace.Name`, e.g. `app.Swish`.
    pub name: String,
    /// The inputs, `,`-separated: `x: T`, `y: f32`, `inputs: T...` (a list, last only).
    pub inputs: String,
    /// The outputs: `y: T`, `mask: bool`, `out: @dtype` (the dtype an attribute gives).
    pub outputs: String,
    /// The type variables and the dtypes each takes: `T: {f32, f64}`.
    pub type_vars: String,
    /// The attributes with optional defaults: `beta: float = 1.0, axes: ints`.
    pub attrs: String,
    /// The statements, `;`-separated, over ops the runtime has: `y = Mul(x, @beta)`.
    pub body: String,
}

/// A value of the body: an input of the op, or an output of a statement.
type Value = usize;

#[derive(Clone, Debug)]
enum Arg {
    Value(Value),
    /// A number, as a scalar of the dtype of the statement's first value argument.
    Scalar(f64),
    /// The op's attribute, as such a scalar.
    AttrScalar(&'static str),
}

#[derive(Clone, Debug)]
enum AttrSource {
    Literal(AttrValue),
    /// The op's attribute of that name.
    Ref(&'static str),
}

#[derive(Clone, Debug)]
struct Statement {
    /// The statement as written, for messages.
    text: String,
    op: OpHandle,
    args: Vec<Arg>,
    attrs: Vec<(String, AttrSource)>,
    /// The first value argument: the dtype of the statement's scalars.
    like: Option<Value>,
    outputs: usize,
}

/// The parsed body of an op.
#[derive(Debug)]
struct Body {
    op: String,
    inputs: usize,
    statements: Vec<Statement>,
    /// The value of each output of the op.
    outputs: Vec<Value>,
    /// The declared type of each output, checked against what the body gives.
    output_types: Vec<ArgType>,
    /// The declared type of each input (to bind the type variables for that check).
    input_types: Vec<ArgType>,
}

/// The `'static` copy of a name declared in op text. Names are interned: each distinct name is
/// kept once for the process's life, so parsing the same definitions again (a plugin loaded
/// and unloaded in a loop, a registration refused as a duplicate) keeps nothing more.
fn leak(s: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock();
    if let Some(&n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.insert(n);
    n
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn dtype_named(s: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == s)
}

/// Splits `s` at top-level `sep` (outside brackets, parentheses and `"` quotes); empty parts
/// dropped.
fn split_top(s: &str, seps: &[char]) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut quoted = false;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            _ if quoted => {}
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && !quoted && seps.contains(&c) {
            if !cur.trim().is_empty() {
                parts.push(cur.trim().to_string());
            }
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        parts.push(cur.trim().to_string());
    }
    parts
}

/// `name: rest`, with `name` an identifier.
fn name_and<'a>(item: &'a str, what: &str) -> std::result::Result<(&'a str, &'a str), String> {
    let (n, rest) = item
        .split_once(':')
        .ok_or_else(|| format!("{what} `{item}` is not `name: ...`"))?;
    let n = n.trim();
    if !is_ident(n) {
        return Err(format!(
            "{what} `{item}`: '{n}' is not a name ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    Ok((n, rest.trim()))
}

/// A literal attribute value: `1`, `-2`, `0.5`, `true`, `[0, 1]`, `f32`, `"text"` (a string
/// without `"` in it; no escapes).
fn literal(s: &str) -> Option<AttrValue> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return (!inner.contains('"')).then(|| AttrValue::Str(inner.to_string()));
    }
    if s == "true" || s == "false" {
        return Some(AttrValue::Bool(s == "true"));
    }
    if let Some(d) = dtype_named(s) {
        return Some(AttrValue::DType(d));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        let v: Option<Vec<i64>> = split_top(inner, &[','])
            .iter()
            .map(|x| x.parse::<i64>().ok())
            .collect();
        return v.map(AttrValue::Ints);
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(AttrValue::Int(i));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(AttrValue::Float)
}

fn attr_type(s: &str) -> Option<AttrType> {
    AttrType::from_keyword(s)
}

/// Whether a value of type `got` may stand where `want` is declared (an int for a float).
fn fits(want: AttrType, got: AttrType) -> bool {
    want == got || (want == AttrType::Float && got == AttrType::Int)
}

/// Parses `text` into an op definition whose statements call the ops `lookup` finds (by
/// name: at run time the decomposition calls them by name). Errors are `INVALID_ARGUMENT`
/// naming the op, the field and, in the body, the statement; the caller adds who defined it.
pub fn parse(text: &OpText, lookup: &dyn Fn(&str) -> Option<OpHandle>) -> Result<OpDef> {
    parse_op(text, lookup).map(|p| p.def)
}

/// An op parsed from text: its definition, and its body's statements as its partial shape
/// rule (what graphs know of its outputs before running).
#[derive(Clone)]
pub(crate) struct Parsed {
    pub(crate) def: OpDef,
    pub(crate) partial: PartialRule,
    pub(crate) body: BodySize,
}

/// The most text op bodies one may nest (an op whose body calls an op defined by a body, …):
/// each level is a call deeper in every shape inference and decomposition, and dispatch runs
/// decompositions at most 32 deep.
const MAX_BODY_DEPTH: u32 = 16;
/// The most statements of ops without a text body a body may expand to: its shape function
/// walks all of them on every run (a body calling an op three times, whose body does the
/// same, … grows as 3^depth).
const MAX_BODY_STATEMENTS: u64 = 10_000;

/// How large `body` is, all the text op bodies it calls expanded; refused beyond the limits.
fn body_size(body: &Body, fail: &dyn Fn(&str, String) -> Error) -> Result<BodySize> {
    let depth = 1 + body
        .statements
        .iter()
        .map(|st| st.op.0.body.depth)
        .max()
        .unwrap_or(0);
    let statements = body.statements.iter().fold(0u64, |n, st| {
        n.saturating_add(st.op.0.body.statements.max(1))
    });
    if depth > MAX_BODY_DEPTH {
        return Err(fail(
            "body",
            format!(
                "it nests ops defined by bodies {depth} deep (each calling the next), more \
                 than {MAX_BODY_DEPTH}: write a deeper body out in fewer ops"
            ),
        ));
    }
    if statements > MAX_BODY_STATEMENTS {
        return Err(fail(
            "body",
            format!(
                "with the bodies of the ops it calls expanded, it is {statements} statements, \
                 more than {MAX_BODY_STATEMENTS}: every run of the op would walk them all"
            ),
        ));
    }
    Ok(BodySize { depth, statements })
}

/// [`parse`], keeping the partial shape rule.
pub(crate) fn parse_op(text: &OpText, lookup: &dyn Fn(&str) -> Option<OpHandle>) -> Result<Parsed> {
    let name = text.name.trim();
    let fail =
        |field: &str, why: String| Error::invalid_argument(format!("op '{name}': {field}: {why}"));
    if !crate::op::is_namespaced(name) {
        return Err(fail(
            "name",
            "must be `namespace.Name` (letters, digits, `_`; a namespace is required, e.g. `mydev.Swish`)"
                .into(),
        ));
    }

    // Type variables.
    let mut type_vars: Vec<TypeVar> = Vec::new();
    for item in split_top(&text.type_vars, &[';', '\n']) {
        let (n, rest) = name_and(&item, "type variable").map_err(|w| fail("type_vars", w))?;
        let set = rest
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .ok_or_else(|| {
                fail(
                    "type_vars",
                    format!("`{item}`: the dtypes go in braces, `{n}: {{f32, f64}}`"),
                )
            })?;
        let mut allowed = Vec::new();
        for d in split_top(set, &[',']) {
            allowed.push(dtype_named(&d).ok_or_else(|| {
                fail(
                    "type_vars",
                    format!(
                        "`{item}`: '{d}' is not a dtype ({})",
                        DType::ALL.map(|d| d.name()).join(", ")
                    ),
                )
            })?);
        }
        if allowed.is_empty() {
            return Err(fail("type_vars", format!("`{item}` allows no dtype")));
        }
        if type_vars.iter().any(|t| t.name == n) {
            return Err(fail("type_vars", format!("'{n}' is declared twice")));
        }
        type_vars.push(TypeVar {
            name: leak(n),
            allowed,
        });
    }

    // Inputs and outputs.
    let args = |field: &str, list: &str| -> Result<Vec<ArgDef>> {
        let mut out: Vec<ArgDef> = Vec::new();
        for item in split_top(list, &[',']) {
            let (n, ty) = name_and(&item, "argument").map_err(|w| fail(field, w))?;
            let ty = if let Some(v) = type_vars.iter().find(|t| t.name == ty) {
                ArgType::Var(v.name)
            } else if let Some(d) = dtype_named(ty) {
                ArgType::Fixed(d)
            } else {
                return Err(fail(
                    field,
                    format!("`{item}`: '{ty}' is neither a declared type variable nor a dtype"),
                ));
            };
            if out.iter().any(|a| a.name == n) {
                return Err(fail(field, format!("'{n}' is declared twice")));
            }
            out.push(ArgDef {
                name: leak(n),
                ty,
                list: false,
            });
        }
        Ok(out)
    };
    let inputs = args("inputs", &text.inputs)?;
    let outputs = args("outputs", &text.outputs)?;
    if outputs.is_empty() {
        return Err(fail(
            "outputs",
            "the op must have at least one output".into(),
        ));
    }
    if let Some(o) = outputs
        .iter()
        .find(|o| inputs.iter().any(|i| i.name == o.name))
    {
        return Err(fail("outputs", format!("'{}' is also an input", o.name)));
    }

    // Attributes.
    let mut attrs: Vec<AttrDef> = Vec::new();
    for item in split_top(&text.attrs, &[';', '\n']) {
        let (n, rest) = name_and(&item, "attribute").map_err(|w| fail("attrs", w))?;
        let (ty_s, default) = match rest.split_once('=') {
            Some((t, d)) => (t.trim(), Some(d.trim())),
            None => (rest, None),
        };
        let ty = attr_type(ty_s).ok_or_else(|| {
            fail(
                "attrs",
                format!(
                    "`{item}`: '{ty_s}' is not an attribute type (int, float, bool, ints, dtype, string)"
                ),
            )
        })?;
        let default = match default {
            None => None,
            Some(d) => {
                let v = literal(d)
                    .filter(|v| fits(ty, v.ty()))
                    .ok_or_else(|| fail("attrs", format!("`{item}`: '{d}' is not {ty}")))?;
                Some(match (ty, v) {
                    (AttrType::Float, AttrValue::Int(i)) => AttrValue::Float(i as f64),
                    (_, v) => v,
                })
            }
        };
        if attrs.iter().any(|a| a.name == n) {
            return Err(fail("attrs", format!("'{n}' is declared twice")));
        }
        attrs.push(AttrDef {
            name: leak(n),
            ty,
            default,
        });
    }

    let body = parse_body(text, &inputs, &outputs, &attrs, lookup, &fail)?;
    let size = body_size(&body, &fail)?;
    let body = Arc::new(body);
    let (infer_body, run_body, partial_body) = (body.clone(), body.clone(), body);
    let def = OpDef {
        name: name.to_string(),
        inputs,
        outputs,
        type_vars,
        attrs,
        shape_fn: Arc::new(move |cx: &InferContext| infer_body.infer(cx)),
        decomposition: Some(Arc::new(
            move |em: &mut dyn Emitter, inputs: &[Tensor], attrs: &Attrs| {
                run_body.run(em, inputs, attrs)
            },
        )),
    };
    let parsed = Parsed {
        def,
        partial: Arc::new(move |cx: &PartialContext| partial_body.infer_partial(cx)),
        body: size,
    };
    check_declared_dtypes(&parsed)?;
    Ok(parsed)
}

/// Refuses a signature that promises dtypes its body cannot take: each dtype of each type
/// variable (the others at their first) runs through the body's statements with the inputs'
/// shapes unknown, which fails only where no run of that dtype could succeed (`T: {f32, i32}`
/// with `y = Exp(x)`: Exp takes no i32). Attributes are at their defaults; an op with an
/// attribute without a default is left to its runs, which may pass any value.
fn check_declared_dtypes(op: &Parsed) -> Result<()> {
    let def = &op.def;
    let none = Attrs::new();
    let Ok(attrs) = none.complete(&def.name, &def.attrs) else {
        return Ok(());
    };
    let first: Vec<DType> = def.type_vars.iter().map(|v| v.allowed[0]).collect();
    for (vi, var) in def.type_vars.iter().enumerate() {
        for &d in &var.allowed {
            let bound = |name: &str| {
                let i = def.type_vars.iter().position(|v| v.name == name)?;
                Some(if i == vi { d } else { first[i] })
            };
            let inputs: Vec<PartialSpec> = def
                .inputs
                .iter()
                .map(|a| PartialSpec {
                    dtype: match &a.ty {
                        ArgType::Fixed(f) => Some(*f),
                        ArgType::Var(n) => bound(n),
                        ArgType::Attr(_) => None,
                    },
                    shape: None,
                })
                .collect();
            (op.partial)(&PartialContext {
                op: &def.name,
                inputs: &inputs,
                attrs: &attrs,
            })
            .map_err(|e| {
                Error::invalid_argument(format!(
                    "op '{}': type_vars: `{}` allows {d}, which its body cannot take: {}",
                    def.name, var.name, e.message
                ))
            })?;
        }
    }
    Ok(())
}

fn parse_body(
    text: &OpText,
    inputs: &[ArgDef],
    outputs: &[ArgDef],
    attrs: &[AttrDef],
    lookup: &dyn Fn(&str) -> Option<OpHandle>,
    fail: &dyn Fn(&str, String) -> Error,
) -> Result<Body> {
    let mut names: Vec<String> = inputs.iter().map(|a| a.name.to_string()).collect();
    let mut statements = Vec::new();
    let own_attr = |r: &str| attrs.iter().find(|a| a.name == r);
    for (k, st) in split_top(&text.body, &[';', '\n']).into_iter().enumerate() {
        let at = |why: String| fail("body", format!("statement {} (`{st}`): {why}", k + 1));
        let (lhs, rhs) = st
            .split_once('=')
            .ok_or_else(|| at("is not `name = Op(...)`".into()))?;
        let outs: Vec<String> = split_top(lhs, &[',']);
        for o in &outs {
            if !is_ident(o) {
                return Err(at(format!("'{o}' is not a name")));
            }
            if names.contains(o) {
                return Err(at(format!("'{o}' is already defined")));
            }
        }
        let rhs = rhs.trim();
        let (op_name, rest) = rhs
            .split_once('(')
            .ok_or_else(|| at("the right side is not a call `Op(...)`".into()))?;
        let args_s = rest
            .trim_end()
            .strip_suffix(')')
            .ok_or_else(|| at("the call does not end with `)`".into()))?;
        let op_name = op_name.trim();
        let op = lookup(op_name).ok_or_else(|| {
            at(format!(
                "'{op_name}' is not an op the runtime knows (a basis op or one registered before)"
            ))
        })?;
        let def = op.def();
        let mut args = Vec::new();
        let mut node_attrs: Vec<(String, AttrSource)> = Vec::new();
        let mut like = None;
        for a in split_top(args_s, &[',']) {
            if let Some((key, value)) = a.split_once('=') {
                let (key, value) = (key.trim(), value.trim());
                let decl = def.attrs.iter().find(|d| d.name == key).ok_or_else(|| {
                    let known: Vec<&str> = def.attrs.iter().map(|d| d.name).collect();
                    at(format!(
                        "{op_name} has no attribute '{key}' (it has: {})",
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    ))
                })?;
                let source = if let Some(r) = value.strip_prefix('@') {
                    let own = own_attr(r)
                        .ok_or_else(|| at(format!("'@{r}': the op has no attribute '{r}'")))?;
                    if !fits(decl.ty, own.ty) {
                        return Err(at(format!(
                            "'{key}' of {op_name} is {}, but '@{r}' is {}",
                            decl.ty, own.ty
                        )));
                    }
                    AttrSource::Ref(own.name)
                } else {
                    let v = literal(value)
                        .filter(|v| fits(decl.ty, v.ty()))
                        .ok_or_else(|| {
                            at(format!(
                                "'{value}' is not {} (attribute '{key}' of {op_name})",
                                decl.ty
                            ))
                        })?;
                    AttrSource::Literal(v)
                };
                node_attrs.push((key.to_string(), source));
            } else if let Some(r) = a.strip_prefix('@') {
                let own = own_attr(r)
                    .ok_or_else(|| at(format!("'@{r}': the op has no attribute '{r}'")))?;
                if !matches!(own.ty, AttrType::Int | AttrType::Float) {
                    return Err(at(format!(
                        "'@{r}' is {}; only an int or float attribute can be an argument",
                        own.ty
                    )));
                }
                args.push(Arg::AttrScalar(own.name));
            } else if let Some(i) = names.iter().position(|n| *n == a) {
                like.get_or_insert(i);
                args.push(Arg::Value(i));
            } else if let Ok(f) = a.parse::<f64>() {
                args.push(Arg::Scalar(f));
            } else {
                return Err(at(format!(
                    "'{a}' is not defined before this statement (nor a number)"
                )));
            }
        }
        if like.is_none() && args.iter().any(|a| !matches!(a, Arg::Value(_))) {
            return Err(at(
                "a number needs a tensor argument in the same call to take its dtype from".into(),
            ));
        }
        let variadic = def.inputs.last().is_some_and(|i| i.list);
        let fixed = def.inputs.len() - usize::from(variadic);
        let arity_ok = if variadic {
            args.len() > fixed
        } else {
            args.len() == fixed
        };
        if !arity_ok {
            return Err(at(format!(
                "{op_name} takes {}{} input(s), got {}",
                if variadic { "at least " } else { "" },
                if variadic { fixed + 1 } else { fixed },
                args.len()
            )));
        }
        if outs.len() != def.outputs.len() {
            return Err(at(format!(
                "{op_name} has {} output(s), the statement names {}",
                def.outputs.len(),
                outs.len()
            )));
        }
        names.extend(outs.iter().cloned());
        statements.push(Statement {
            text: st.clone(),
            op,
            args,
            attrs: node_attrs,
            like,
            outputs: outs.len(),
        });
    }
    let mut out_values = Vec::new();
    for o in outputs {
        let v = names
            .iter()
            .rposition(|n| n == o.name)
            .filter(|&i| i >= inputs.len())
            .ok_or_else(|| fail("body", format!("output '{}' is never assigned", o.name)))?;
        out_values.push(v);
    }
    Ok(Body {
        op: text.name.trim().to_string(),
        inputs: inputs.len(),
        statements,
        outputs: out_values,
        output_types: outputs.iter().map(|o| o.ty.clone()).collect(),
        input_types: inputs.iter().map(|i| i.ty.clone()).collect(),
    })
}

impl Statement {
    /// The statement's attributes, the op's own (`@name`) filled in from `attrs`.
    fn attrs(&self, attrs: &Attrs) -> Result<Attrs> {
        let mut out = Attrs::new();
        for (k, src) in &self.attrs {
            let v = match src {
                AttrSource::Literal(v) => v.clone(),
                AttrSource::Ref(r) => attrs
                    .get(r)
                    .cloned()
                    .ok_or_else(|| Error::internal(format!("attribute '{r}' was not completed")))?,
            };
            out.set(k, v);
        }
        Ok(out)
    }

    fn scalar(&self, arg: &Arg, attrs: &Attrs) -> Result<Option<f64>> {
        Ok(match arg {
            Arg::Value(_) => None,
            Arg::Scalar(f) => Some(*f),
            Arg::AttrScalar(r) => Some(match attrs.get(r) {
                Some(AttrValue::Int(i)) => *i as f64,
                Some(AttrValue::Float(f)) => *f,
                _ => return Err(Error::internal(format!("attribute '{r}' is not a number"))),
            }),
        })
    }
}

impl Body {
    fn context(&self, st: &Statement) -> String {
        format!("{} (its body: `{}`)", self.op, st.text)
    }

    /// The shape function: the statements' own, in order.
    fn infer(&self, cx: &InferContext) -> Result<Specs> {
        let mut values: Vec<TensorSpec> = cx
            .inputs
            .iter()
            .map(|s| s.to_spec())
            .collect::<Result<_>>()?;
        for st in &self.statements {
            let wrap = |e: Error| e.context(self.context(st));
            let mut specs: Vec<TensorSpec> = Vec::with_capacity(st.args.len());
            for a in &st.args {
                specs.push(match a {
                    Arg::Value(v) => values[*v],
                    _ => TensorSpec::new(values[st.like.expect("checked at parse")].dtype, &[])?,
                });
            }
            let refs: Vec<SpecRef> = specs.iter().map(SpecRef::from).collect();
            let def = st.op.def();
            st.op.0.check_inputs(&refs).map_err(wrap)?;
            let attrs = st.attrs(cx.attrs)?;
            let attrs = attrs.complete(&def.name, &def.attrs).map_err(wrap)?;
            let outs = (def.shape_fn)(&InferContext {
                op: &def.name,
                inputs: &refs,
                attrs: &attrs,
            })
            .map_err(wrap)?;
            values.extend(outs);
        }
        // The outputs' dtypes as declared: a type variable takes the dtype its inputs bound.
        let bound = |v: &str| {
            self.input_types
                .iter()
                .zip(cx.inputs)
                .find(|(t, _)| matches!(t, ArgType::Var(n) if *n == v))
                .map(|(_, s)| s.dtype)
        };
        let mut out = Specs::new();
        for (i, (&v, ty)) in self.outputs.iter().zip(&self.output_types).enumerate() {
            let got = values[v];
            let want = match ty {
                ArgType::Fixed(d) => Some(*d),
                ArgType::Var(n) => bound(n),
                ArgType::Attr(_) => None,
            };
            if want.is_some_and(|w| w != got.dtype) {
                return Err(Error::invalid_argument(format!(
                    "{}: its body gives output {i} as {}, but the definition declares {}",
                    self.op,
                    got.dtype,
                    want.expect("checked")
                )));
            }
            out.push(got);
        }
        Ok(out)
    }

    /// The partial shape rule: the statements' own, in order, on what is known.
    fn infer_partial(&self, cx: &PartialContext) -> Result<Shapes> {
        let mut values: Vec<PartialSpec> = cx.inputs.to_vec();
        for st in &self.statements {
            let args: Vec<PartialSpec> = st
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => values[*v],
                    _ => PartialSpec {
                        dtype: values[st.like.expect("checked at parse")].dtype,
                        shape: Some(Shape::scalar()),
                    },
                })
                .collect();
            let attrs = st.attrs(cx.attrs)?;
            let outs = st
                .op
                .0
                .infer_partial(&args, &attrs)
                .map_err(|e| e.context(self.context(st)))?;
            values.extend(outs);
        }
        Ok(self.outputs.iter().map(|&v| values[v].shape).collect())
    }

    /// The decomposition: the statements, run by `em` on the op's device.
    fn run(&self, em: &mut dyn Emitter, inputs: &[Tensor], attrs: &Attrs) -> Result<Outputs> {
        debug_assert_eq!(inputs.len(), self.inputs);
        let mut values: Vec<Tensor> = inputs.to_vec();
        for st in &self.statements {
            let mut args = Vec::with_capacity(st.args.len());
            for a in &st.args {
                match (a, st.scalar(a, attrs)?) {
                    (Arg::Value(v), _) => args.push(values[*v].clone()),
                    (_, Some(x)) => {
                        let dtype = values[st.like.expect("checked at parse")].dtype();
                        args.push(em.scalar(dtype, x)?);
                    }
                    (_, None) => unreachable!("a non-value argument has a scalar"),
                }
            }
            let node_attrs = st.attrs(attrs)?;
            let outs = em.op(st.op.name(), &args, &node_attrs)?;
            if outs.len() != st.outputs {
                return Err(Error::internal(format!(
                    "{}: {} gave {} outputs",
                    self.context(st),
                    st.op.name(),
                    outs.len()
                )));
            }
            values.extend(outs);
        }
        Ok(self.outputs.iter().map(|&v| values[v].clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::OpRegistry;

    fn text(body: &str) -> OpText {
        OpText {
            name: "t.Swish".into(),
            inputs: "x: T".into(),
            outputs: "y: T".into(),
            type_vars: "T: {f32, f64}".into(),
            attrs: "beta: float = 1.0".into(),
            body: body.into(),
        }
    }

    fn basis(name: &str) -> Option<OpHandle> {
        thread_local!(static OPS: OpRegistry = OpRegistry::with_basis());
        OPS.with(|o| o.find(name).ok())
    }

    fn err(t: &OpText) -> String {
        parse(t, &basis).map(|_| ()).unwrap_err().message
    }

    /// A signature that promises a dtype its body cannot take is refused when registered,
    /// not on the first run of that dtype; one the body takes, or one whose attributes decide
    /// (no default), is taken.
    #[test]
    fn dtypes_the_body_cannot_take_are_refused_at_registration() {
        let mut t = text("y = Exp(x)");
        t.type_vars = "T: {f32, i32}".into();
        t.attrs = String::new();
        assert_eq!(
            err(&t),
            "op 't.Swish': type_vars: `T` allows i32, which its body cannot take: t.Swish (its \
             body: `y = Exp(x)`): Exp: input 'x' is i32, but T must be one of f32, f64, f16, \
             bf16"
        );
        t.type_vars = "T: {f32, f64, f16}".into();
        parse(&t, &basis).unwrap();
        // A second type variable: each of its dtypes too.
        t.inputs = "x: T, n: U".into();
        t.type_vars = "T: {f32}; U: {f32, i64}".into();
        t.body = "s = Add(x, n); y = Exp(s)".into();
        assert!(
            err(&t).starts_with("op 't.Swish': type_vars: `U` allows i64"),
            "{}",
            err(&t)
        );
        // An attribute without a default: its runs decide.
        t.attrs = "k: int".into();
        parse(&t, &basis).unwrap();
    }

    #[test]
    fn parsing_again_keeps_no_new_names() {
        let t = text("bx = Mul(x, @beta); s = Sigmoid(bx); y = Mul(x, s)");
        let (a, b) = (parse(&t, &basis).unwrap(), parse(&t, &basis).unwrap());
        let names = |d: &OpDef| {
            let mut v: Vec<&'static str> = d.inputs.iter().map(|a| a.name).collect();
            v.extend(d.outputs.iter().map(|a| a.name));
            v.extend(d.type_vars.iter().map(|t| t.name));
            v.extend(d.attrs.iter().map(|a| a.name));
            v
        };
        let (na, nb) = (names(&a), names(&b));
        assert_eq!(na, ["x", "y", "T", "beta"]);
        for (x, y) in na.iter().zip(&nb) {
            assert!(std::ptr::eq(*x, *y), "'{x}' was copied again");
        }
    }

    #[test]
    fn a_definition_parses() {
        let d = parse(
            &text("bx = Mul(x, @beta)\ns = Sigmoid(bx); y = Mul(x, s)"),
            &basis,
        )
        .unwrap();
        assert_eq!(d.inputs.len(), 1);
        assert_eq!(d.attrs[0].default, Some(AttrValue::Float(1.0)));
        assert!(d.decomposition.is_some());
    }

    #[test]
    fn a_string_attribute_has_a_quoted_default() {
        let mut t = text("y = Mul(x, @beta)");
        t.attrs = "beta: float = 1.0; mode: string = \"a; b, c=d\"; tag: string".into();
        let d = parse(&t, &basis).unwrap();
        assert_eq!(d.attrs.len(), 3);
        assert_eq!(d.attrs[1].ty, AttrType::Str);
        assert_eq!(d.attrs[1].default, Some(AttrValue::Str("a; b, c=d".into())));
        assert_eq!(d.attrs[2].default, None);
        for (attrs, words) in [
            ("mode: string = 3", "'3' is not a string"),
            ("mode: string = \"a\"b\"", "is not a string"),
            ("mode: int = \"a\"", "is not an int"),
        ] {
            let mut t = text("y = Neg(x)");
            t.attrs = attrs.into();
            let e = err(&t);
            assert!(e.contains(words), "{attrs}: {e}");
        }
        let mut t = text("y = Mul(x, @mode)");
        t.attrs = "mode: string = \"fast\"".into();
        assert!(
            err(&t).contains("only an int or float attribute"),
            "{}",
            err(&t)
        );
    }

    #[test]
    fn mistakes_are_named() {
        let mut t = text("y = Mul(x, x)");
        t.name = "Swish".into();
        assert!(err(&t).contains("namespace"), "{}", err(&t));
        for (body, words) in [
            ("y = Mul(x, z)", "'z' is not defined"),
            ("y = Mull(x, x)", "'Mull' is not an op"),
            ("y = Mul(x)", "takes 2 input(s), got 1"),
            ("y = Neg(x, 1)", "takes 1 input(s), got 2"),
            ("s = Neg(x)", "output 'y' is never assigned"),
            ("y = ReduceSum(x, axis=1)", "has no attribute 'axis'"),
            ("y = ReduceSum(x, axes=1.5)", "'1.5' is not"),
            ("y = ReduceSum(x, axes=@gamma)", "no attribute 'gamma'"),
            ("y = ReduceSum(x, axes=@beta)", "'@beta' is a float"),
            ("y = Mul(2, 3)", "a number needs a tensor"),
            ("x = Neg(x); y = Neg(x)", "'x' is already defined"),
            ("y Neg(x)", "not `name = Op(...)`"),
            ("y = Neg x", "not a call"),
            (
                "a, b = Neg(x); y = Neg(a)",
                "Neg has 1 output(s), the statement names 2",
            ),
        ] {
            let e = err(&text(body));
            assert!(e.contains(words), "{body}: {e}");
            assert!(e.starts_with("op 't.Swish': body: "), "{body}: {e}");
        }
        let mut t = text("y = Neg(x)");
        t.type_vars = "T: {f32, f15}".into();
        assert!(err(&t).contains("'f15' is not a dtype"), "{}", err(&t));
        t.type_vars = "T: {f32}".into();
        t.inputs = "x: U".into();
        assert!(err(&t).contains("'U' is neither"), "{}", err(&t));
        t.inputs = "x: T".into();
        t.attrs = "beta: float = yes".into();
        assert!(err(&t).contains("'yes' is not a float"), "{}", err(&t));
        t.attrs = "beta: complex".into();
        assert!(err(&t).contains("not an attribute type"), "{}", err(&t));
        t.attrs = String::new();
        t.outputs = String::new();
        assert!(err(&t).contains("at least one output"), "{}", err(&t));
    }

    /// Op text is a plugin's input: mutated definitions (every field, separators and quotes
    /// repeated, cut, replaced) parse or are refused with INVALID_ARGUMENT naming the op —
    /// never a panic.
    #[test]
    fn mutated_op_text_parses_or_is_refused() {
        let seeds = [
            text("bx = Mul(x, @beta); s = Sigmoid(bx); y = Mul(x, s)"),
            OpText {
                name: "v.Pair".into(),
                inputs: "a: T; b: T".into(),
                outputs: "s: T; d: T".into(),
                type_vars: "T: {f32, f64, i32}".into(),
                attrs: "k: int = 2; axes: ints = [0, 1]; on: bool = true; m: string = \"a;b\""
                    .into(),
                body: "s = Add(a, b)\nd = Sub(a, b)".into(),
            },
            OpText {
                name: "v.Sum".into(),
                inputs: "x: T".into(),
                outputs: "y: T".into(),
                type_vars: "T: {f32}".into(),
                attrs: "keep: bool = false".into(),
                body: "y = ReduceSum(x, axes=[0], keep_dims=@keep)".into(),
            },
        ];
        let mut m = crate::testing::Mutator::new(0x5eed_7e47);
        let (mut parsed, mut refused) = (0, 0);
        for i in 0..20_000 {
            let mut t = seeds[i % seeds.len()].clone();
            let field = match m.below(6) {
                0 => &mut t.name,
                1 => &mut t.inputs,
                2 => &mut t.outputs,
                3 => &mut t.type_vars,
                4 => &mut t.attrs,
                _ => &mut t.body,
            };
            *field = m.mutate_str(field);
            match parse(&t, &basis) {
                Ok(_) => parsed += 1,
                Err(e) => {
                    assert_eq!(e.code, crate::error::Code::InvalidArgument, "{t:?}: {e}");
                    assert!(e.message.starts_with("op '"), "{t:?}: {e}");
                    refused += 1;
                }
            }
        }
        assert!(
            parsed > 0 && refused > 0,
            "{parsed} parsed, {refused} refused"
        );
    }
}
