//! The basis set: the ops every device is expected to cover (in the spirit of XLA's HLO), and
//! the composite ops defined by a decomposition into them (Relu, Softmax, LogSoftmax, Gelu,
//! and Gemm: `relu?(alpha * a x b + beta * c)`, ONNX's Gemm with ONNX Runtime's fused ReLU).
//!
//! Attribute conventions: axes may be negative (counted from the end); `axes = []` on a
//! reduction means all axes; `perm = []` on Transpose reverses the axes; Slice's `size` entry
//! `-1` means "to the end"; Reshape's `shape` may hold one `-1`.

use std::sync::Arc;

use crate::error::Result;
use crate::op::shape;
use crate::op::{
    ArgDef, ArgType, AttrDef, AttrType, AttrValue, Attrs, Decomposition, Emitter, InferContext,
    OpDef, Outputs, Specs, TypeVar,
};
use crate::tensor::{DType, Tensor};

/// Numeric dtypes.
pub const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::F16,
    DType::BF16,
];
/// Floating-point dtypes.
pub const FLOAT: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
/// Signed dtypes.
pub const SIGNED: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
];

/// Binary elementwise ops with broadcasting (`x`, `y` → `z`).
pub const BINARY: [&str; 7] = ["Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow"];
/// Unary elementwise ops.
pub const UNARY: [&str; 8] = [
    "Neg", "Abs", "Exp", "Log", "Tanh", "Sqrt", "Rsqrt", "Sigmoid",
];
/// Comparisons (→ bool) with broadcasting.
pub const COMPARE: [&str; 6] = [
    "Equal",
    "NotEqual",
    "Less",
    "LessEqual",
    "Greater",
    "GreaterEqual",
];
/// Reductions (`axes`, `keep_dims`).
pub const REDUCE: [&str; 4] = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"];

fn arg(name: &'static str, ty: ArgType) -> ArgDef {
    ArgDef {
        name,
        ty,
        list: false,
    }
}

fn t(name: &'static str) -> ArgDef {
    arg(name, ArgType::Var("T"))
}

fn attr(name: &'static str, ty: AttrType, default: Option<AttrValue>) -> AttrDef {
    AttrDef { name, ty, default }
}

fn def(
    name: &str,
    inputs: Vec<ArgDef>,
    outputs: Vec<ArgDef>,
    allowed: &[DType],
    attrs: Vec<AttrDef>,
    shape_fn: fn(&InferContext) -> Result<Specs>,
) -> OpDef {
    OpDef {
        name: name.to_string(),
        inputs,
        outputs,
        type_vars: if allowed.is_empty() {
            Vec::new()
        } else {
            vec![TypeVar {
                name: "T",
                allowed: allowed.to_vec(),
            }]
        },
        attrs,
        shape_fn: Arc::new(shape_fn),
        decomposition: None,
    }
}

/// Every op of the basis set and the composites.
pub fn definitions() -> Vec<OpDef> {
    let mut v = Vec::new();
    let all = DType::ALL;
    for name in BINARY {
        let allowed: &[DType] = match name {
            "Maximum" | "Minimum" => &all,
            _ => &NUMERIC,
        };
        v.push(def(
            name,
            vec![t("x"), t("y")],
            vec![t("z")],
            allowed,
            vec![],
            shape::binary,
        ));
    }
    for name in UNARY {
        let allowed: &[DType] = match name {
            "Neg" => &SIGNED,
            "Abs" => &NUMERIC,
            _ => &FLOAT,
        };
        v.push(def(
            name,
            vec![t("x")],
            vec![t("y")],
            allowed,
            vec![],
            shape::same,
        ));
    }
    for name in COMPARE {
        let allowed: &[DType] = match name {
            "Equal" | "NotEqual" => &all,
            _ => &NUMERIC,
        };
        v.push(def(
            name,
            vec![t("x"), t("y")],
            vec![arg("z", ArgType::Fixed(DType::Bool))],
            allowed,
            vec![],
            shape::compare,
        ));
    }
    v.push(def(
        "Select",
        vec![
            arg("condition", ArgType::Fixed(DType::Bool)),
            t("x"),
            t("y"),
        ],
        vec![t("z")],
        &all,
        vec![],
        shape::select,
    ));
    v.push(def(
        "Cast",
        vec![t("x")],
        vec![arg("y", ArgType::Attr("dtype"))],
        &all,
        vec![attr("dtype", AttrType::DType, None)],
        shape::cast,
    ));
    v.push(def(
        "MatMul",
        vec![t("a"), t("b")],
        vec![t("product")],
        &NUMERIC,
        vec![
            attr("transpose_a", AttrType::Bool, Some(AttrValue::Bool(false))),
            attr("transpose_b", AttrType::Bool, Some(AttrValue::Bool(false))),
        ],
        shape::matmul,
    ));
    for name in REDUCE {
        v.push(def(
            name,
            vec![t("x")],
            vec![t("y")],
            &NUMERIC,
            vec![
                attr("axes", AttrType::Ints, Some(AttrValue::Ints(vec![]))),
                attr("keep_dims", AttrType::Bool, Some(AttrValue::Bool(false))),
            ],
            shape::reduce,
        ));
    }
    v.push(def(
        "BroadcastTo",
        vec![t("x")],
        vec![t("y")],
        &all,
        vec![attr("shape", AttrType::Ints, None)],
        shape::broadcast_to,
    ));
    v.push(def(
        "Reshape",
        vec![t("x")],
        vec![t("y")],
        &all,
        vec![attr("shape", AttrType::Ints, None)],
        shape::reshape,
    ));
    v.push(def(
        "Transpose",
        vec![t("x")],
        vec![t("y")],
        &all,
        vec![attr("perm", AttrType::Ints, Some(AttrValue::Ints(vec![])))],
        shape::transpose,
    ));
    v.push(def(
        "Concat",
        vec![ArgDef {
            name: "inputs",
            ty: ArgType::Var("T"),
            list: true,
        }],
        vec![t("y")],
        &all,
        vec![attr("axis", AttrType::Int, Some(AttrValue::Int(0)))],
        shape::concat,
    ));
    v.push(def(
        "Slice",
        vec![t("x")],
        vec![t("y")],
        &all,
        vec![
            attr("begin", AttrType::Ints, None),
            attr("size", AttrType::Ints, None),
        ],
        shape::slice,
    ));
    v.push(def(
        "Fill",
        vec![],
        vec![arg("y", ArgType::Attr("dtype"))],
        &[],
        vec![
            attr("shape", AttrType::Ints, None),
            attr("value", AttrType::Float, None),
            attr("dtype", AttrType::DType, Some(AttrValue::DType(DType::F32))),
        ],
        shape::fill,
    ));
    v.push(def(
        "Iota",
        vec![],
        vec![arg("y", ArgType::Attr("dtype"))],
        &[],
        vec![
            attr("shape", AttrType::Ints, None),
            attr("axis", AttrType::Int, Some(AttrValue::Int(0))),
            attr("dtype", AttrType::DType, Some(AttrValue::DType(DType::I64))),
        ],
        shape::iota,
    ));
    v.push(def(
        "AddN",
        vec![ArgDef {
            name: "inputs",
            ty: ArgType::Var("T"),
            list: true,
        }],
        vec![t("sum")],
        &NUMERIC,
        vec![],
        shape::add_n,
    ));
    v.extend(composites());
    v
}

fn one(mut v: Outputs) -> crate::Result<Tensor> {
    v.pop()
        .ok_or_else(|| crate::Error::internal("an op returned no output"))
}

fn axis_attrs(axis: i64) -> Attrs {
    Attrs::new()
        .with("axes", AttrValue::Ints(vec![axis]))
        .with("keep_dims", AttrValue::Bool(true))
}

type DecompositionFn = fn(&mut dyn Emitter, &[Tensor], &Attrs) -> crate::Result<Outputs>;

fn decomposition(f: DecompositionFn) -> Option<Decomposition> {
    Some(Arc::new(f))
}

/// Relu, Softmax, LogSoftmax, Gelu and Gemm: defined by decompositions into the basis set.
fn composites() -> Vec<OpDef> {
    let mut relu = def(
        "Relu",
        vec![t("x")],
        vec![t("y")],
        &SIGNED,
        vec![],
        shape::same,
    );
    relu.decomposition = decomposition(|e, x, _| {
        let zero = e.scalar(x[0].dtype(), 0.0)?;
        e.op("Maximum", &[x[0].clone(), zero], &Attrs::new())
    });
    let axis = || vec![attr("axis", AttrType::Int, Some(AttrValue::Int(-1)))];
    let mut softmax = def(
        "Softmax",
        vec![t("x")],
        vec![t("y")],
        &FLOAT,
        axis(),
        shape::same_along_axis,
    );
    softmax.decomposition = decomposition(|e, x, a| {
        let axis = a.int("axis")?;
        let max = one(e.op("ReduceMax", &[x[0].clone()], &axis_attrs(axis))?)?;
        let shifted = one(e.op("Sub", &[x[0].clone(), max], &Attrs::new())?)?;
        let ex = one(e.op("Exp", &[shifted], &Attrs::new())?)?;
        let sum = one(e.op("ReduceSum", std::slice::from_ref(&ex), &axis_attrs(axis))?)?;
        e.op("Div", &[ex, sum], &Attrs::new())
    });
    let mut log_softmax = def(
        "LogSoftmax",
        vec![t("x")],
        vec![t("y")],
        &FLOAT,
        axis(),
        shape::same_along_axis,
    );
    log_softmax.decomposition = decomposition(|e, x, a| {
        let axis = a.int("axis")?;
        let max = one(e.op("ReduceMax", &[x[0].clone()], &axis_attrs(axis))?)?;
        let shifted = one(e.op("Sub", &[x[0].clone(), max], &Attrs::new())?)?;
        let ex = one(e.op("Exp", std::slice::from_ref(&shifted), &Attrs::new())?)?;
        let sum = one(e.op("ReduceSum", &[ex], &axis_attrs(axis))?)?;
        let log = one(e.op("Log", &[sum], &Attrs::new())?)?;
        e.op("Sub", &[shifted, log], &Attrs::new())
    });
    // The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    let mut gelu = def(
        "Gelu",
        vec![t("x")],
        vec![t("y")],
        &FLOAT,
        vec![],
        shape::same,
    );
    gelu.decomposition = decomposition(|e, x, _| {
        let d = x[0].dtype();
        let none = Attrs::new();
        let x = x[0].clone();
        let x2 = one(e.op("Mul", &[x.clone(), x.clone()], &none)?)?;
        let x3 = one(e.op("Mul", &[x2, x.clone()], &none)?)?;
        let c = e.scalar(d, 0.044715)?;
        let cx3 = one(e.op("Mul", &[x3, c], &none)?)?;
        let inner = one(e.op("Add", &[x.clone(), cx3], &none)?)?;
        let k = e.scalar(d, (2.0 / std::f64::consts::PI).sqrt())?;
        let scaled = one(e.op("Mul", &[inner, k], &none)?)?;
        let th = one(e.op("Tanh", &[scaled], &none)?)?;
        let one_ = e.scalar(d, 1.0)?;
        let p = one(e.op("Add", &[th, one_], &none)?)?;
        let half = e.scalar(d, 0.5)?;
        let hx = one(e.op("Mul", &[x, half], &none)?)?;
        e.op("Mul", &[hx, p], &none)
    });
    let mut gemm = def(
        "Gemm",
        vec![t("a"), t("b"), t("c")],
        vec![t("y")],
        &FLOAT,
        vec![
            attr("transpose_a", AttrType::Bool, Some(AttrValue::Bool(false))),
            attr("transpose_b", AttrType::Bool, Some(AttrValue::Bool(false))),
            attr("alpha", AttrType::Float, Some(AttrValue::Float(1.0))),
            attr("beta", AttrType::Float, Some(AttrValue::Float(1.0))),
            attr("relu", AttrType::Bool, Some(AttrValue::Bool(false))),
        ],
        shape::gemm,
    );
    gemm.decomposition = decomposition(|e, x, a| {
        let none = Attrs::new();
        let d = x[0].dtype();
        let mm = Attrs::new()
            .with("transpose_a", AttrValue::Bool(a.bool("transpose_a")?))
            .with("transpose_b", AttrValue::Bool(a.bool("transpose_b")?));
        let mut y = one(e.op("MatMul", &[x[0].clone(), x[1].clone()], &mm)?)?;
        let (alpha, beta) = (a.float("alpha")?, a.float("beta")?);
        if alpha != 1.0 {
            let s = e.scalar(d, alpha)?;
            y = one(e.op("Mul", &[y, s], &none)?)?;
        }
        let mut c = x[2].clone();
        if beta != 1.0 {
            let s = e.scalar(d, beta)?;
            c = one(e.op("Mul", &[c, s], &none)?)?;
        }
        let y = e.op("Add", &[y, c], &none)?;
        if a.bool("relu")? {
            e.op("Relu", &y, &none)
        } else {
            Ok(y)
        }
    });
    vec![relu, softmax, log_softmax, gelu, gemm]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::OpRegistry;

    #[test]
    fn the_basis_set_registers_cleanly() {
        let r = OpRegistry::with_basis();
        assert_eq!(r.len(), definitions().len());
        for name in [
            "Add",
            "MatMul",
            "ReduceMean",
            "Concat",
            "Iota",
            "AddN",
            "Relu",
            "Gelu",
            "Softmax",
            "LogSoftmax",
            "Gemm",
        ] {
            assert!(r.find(name).is_ok(), "{name}");
        }
        assert!(r.find("Relu").unwrap().def().decomposition.is_some());
        assert_eq!(r.find("Nope").unwrap_err().code, crate::Code::NotFound);
    }

    #[test]
    fn ops_are_listed_by_index_in_name_order() {
        let r = OpRegistry::with_basis();
        let names = r.names();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.at(i).unwrap().name(), n);
        }
        assert!(r.at(names.len()).is_none());
    }

    #[test]
    fn signatures_read_as_the_op_notation() {
        let r = OpRegistry::with_basis();
        let sig = |name: &str| r.find(name).unwrap().def().signature();
        assert_eq!(
            sig("MatMul"),
            "MatMul(a: T, b: T; transpose_a: bool = false, transpose_b: bool = false) -> \
             (product: T) where T: {f32, f64, i32, i64, u8, f16, bf16}"
        );
        assert!(
            sig("AddN").starts_with("AddN(inputs: T...) -> (sum: T) where T: {"),
            "{}",
            sig("AddN")
        );
        assert!(
            sig("Cast").starts_with("Cast(x: T; dtype: dtype) -> (y: @dtype) where T: {"),
            "{}",
            sig("Cast")
        );
        assert_eq!(
            sig("Fill"),
            "Fill(; shape: ints, value: float, dtype: dtype = f32) -> (y: @dtype)"
        );
        assert!(sig("ReduceSum").contains("; axes: ints = [], keep_dims: bool = false)"));
        assert!(
            sig("Select").starts_with("Select(condition: bool, "),
            "{}",
            sig("Select")
        );
    }
}
