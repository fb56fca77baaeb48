//! Op attributes: typed values with defaults, looked up by name.

use std::borrow::Cow;
use std::fmt;

use crate::error::{Error, Result};
use crate::tensor::DType;

/// The type of an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    Int,
    Float,
    Bool,
    Ints,
    DType,
    Str,
}

impl fmt::Display for AttrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttrType::Int => "an int",
            AttrType::Float => "a float",
            AttrType::Bool => "a bool",
            AttrType::Ints => "an int list",
            AttrType::DType => "a dtype",
            AttrType::Str => "a string",
        })
    }
}

impl AttrType {
    /// The type's keyword in the op notation (`int`, `float`, `bool`, `ints`, `dtype`,
    /// `string`), as op definitions in text declare it.
    pub fn keyword(self) -> &'static str {
        match self {
            AttrType::Int => "int",
            AttrType::Float => "float",
            AttrType::Bool => "bool",
            AttrType::Ints => "ints",
            AttrType::DType => "dtype",
            AttrType::Str => "string",
        }
    }

    /// The type of `keyword` (see [`AttrType::keyword`]).
    pub fn from_keyword(keyword: &str) -> Option<AttrType> {
        [
            AttrType::Int,
            AttrType::Float,
            AttrType::Bool,
            AttrType::Ints,
            AttrType::DType,
            AttrType::Str,
        ]
        .into_iter()
        .find(|t| t.keyword() == keyword)
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    DType(DType),
    Str(String),
}

impl AttrValue {
    pub fn ty(&self) -> AttrType {
        match self {
            AttrValue::Int(_) => AttrType::Int,
            AttrValue::Float(_) => AttrType::Float,
            AttrValue::Bool(_) => AttrType::Bool,
            AttrValue::Ints(_) => AttrType::Ints,
            AttrValue::DType(_) => AttrType::DType,
            AttrValue::Str(_) => AttrType::Str,
        }
    }
}

/// The value as a literal of the op notation: `1`, `0.5`, `true`, `[0, 1]`, `f32`, `"text"`.
impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(i) => write!(f, "{i}"),
            // Debug keeps a fractional part (`1.0`), so the literal stays a float.
            AttrValue::Float(x) => write!(f, "{x:?}"),
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            AttrValue::DType(d) => f.write_str(d.name()),
            AttrValue::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

/// Attribute values from Rust values: `Attrs::new().with("axes", [1]).with("keep_dims", true)`.
macro_rules! attr_value_from {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {
        $(impl From<$t> for AttrValue {
            fn from($v: $t) -> AttrValue {
                $e
            }
        })*
    };
}

attr_value_from! {
    i64 => |v| AttrValue::Int(v),
    i32 => |v| AttrValue::Int(v.into()),
    f64 => |v| AttrValue::Float(v),
    f32 => |v| AttrValue::Float(v.into()),
    bool => |v| AttrValue::Bool(v),
    Vec<i64> => |v| AttrValue::Ints(v),
    &[i64] => |v| AttrValue::Ints(v.to_vec()),
    DType => |v| AttrValue::DType(v),
    String => |v| AttrValue::Str(v),
    &str => |v| AttrValue::Str(v.to_string()),
}

impl<const N: usize> From<[i64; N]> for AttrValue {
    fn from(v: [i64; N]) -> AttrValue {
        AttrValue::Ints(v.to_vec())
    }
}

/// An attribute an op declares.
#[derive(Clone, Debug)]
pub struct AttrDef {
    pub name: &'static str,
    pub ty: AttrType,
    /// `None`: required.
    pub default: Option<AttrValue>,
}

/// Attribute values by name, as passed to an op (small: a vector, searched linearly).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(Vec<(Cow<'static, str>, AttrValue)>);

impl Attrs {
    pub const fn new() -> Attrs {
        Attrs(Vec::new())
    }

    /// Adds or replaces `name`. `value` is an [`AttrValue`] or a Rust value that converts to
    /// one: `i64`/`i32` (int), `f64`/`f32` (float), `bool`, `Vec<i64>`/`[i64; N]`/`&[i64]` (int
    /// list), [`DType`], `&str`/`String` (string).
    pub fn set(&mut self, name: &str, value: impl Into<AttrValue>) -> &mut Attrs {
        let value = value.into();
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((Cow::Owned(name.to_string()), value)),
        }
        self
    }

    /// Builder form of [`Attrs::set`]:
    /// `Attrs::new().with("axes", [1]).with("keep_dims", true)`.
    pub fn with(mut self, name: &str, value: impl Into<AttrValue>) -> Attrs {
        self.set(name, value);
        self
    }

    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.0.iter().map(|(n, v)| (n.as_ref(), v))
    }

    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Ok(*v),
            other => Err(wrong(name, "an int", other)),
        }
    }

    pub fn float(&self, name: &str) -> Result<f64> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(AttrValue::Int(v)) => Ok(*v as f64),
            other => Err(wrong(name, "a float", other)),
        }
    }

    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            Some(AttrValue::Bool(v)) => Ok(*v),
            other => Err(wrong(name, "a bool", other)),
        }
    }

    pub fn ints(&self, name: &str) -> Result<&[i64]> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Ok(v),
            other => Err(wrong(name, "an int list", other)),
        }
    }

    pub fn dtype(&self, name: &str) -> Result<DType> {
        match self.get(name) {
            Some(AttrValue::DType(v)) => Ok(*v),
            other => Err(wrong(name, "a dtype", other)),
        }
    }

    /// A string attribute (`string` in op definitions).
    pub fn str(&self, name: &str) -> Result<&str> {
        match self.get(name) {
            Some(AttrValue::Str(v)) => Ok(v),
            other => Err(wrong(name, "a string", other)),
        }
    }

    /// Checks `self` against an op's declarations and fills in defaults: unknown names, wrong
    /// types and missing required attributes are errors naming the op and the attribute.
    #[inline]
    pub(crate) fn complete(&self, op: &str, defs: &[AttrDef]) -> Result<Cow<'_, Attrs>> {
        if self.0.is_empty() && defs.is_empty() {
            // An op without attributes, run without: the common eager case.
            return Ok(Cow::Borrowed(self));
        }
        self.complete_declared(op, defs)
    }

    fn complete_declared(&self, op: &str, defs: &[AttrDef]) -> Result<Cow<'_, Attrs>> {
        for (name, value) in &self.0 {
            let def = defs.iter().find(|d| d.name == name).ok_or_else(|| {
                let known: Vec<&str> = defs.iter().map(|d| d.name).collect();
                Error::invalid_argument(format!(
                    "{op}: unknown attribute '{name}' (the op has: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            })?;
            let ok =
                value.ty() == def.ty || (def.ty == AttrType::Float && value.ty() == AttrType::Int);
            if !ok {
                return Err(Error::invalid_argument(format!(
                    "{op}: attribute '{name}' must be {}, not {}",
                    def.ty,
                    value.ty()
                )));
            }
        }
        if self.0.len() == defs.len() {
            return Ok(Cow::Borrowed(self));
        }
        let mut out = self.clone();
        for d in defs {
            if out.get(d.name).is_none() {
                match &d.default {
                    Some(v) => {
                        // Declared names are static: filling in a default allocates no name.
                        out.0.push((Cow::Borrowed(d.name), v.clone()));
                    }
                    None => {
                        return Err(Error::invalid_argument(format!(
                            "{op}: required attribute '{}' ({}) is missing",
                            d.name, d.ty
                        )))
                    }
                }
            }
        }
        Ok(Cow::Owned(out))
    }
}

fn wrong(name: &str, want: &str, got: Option<&AttrValue>) -> Error {
    match got {
        None => Error::invalid_argument(format!("attribute '{name}' is missing")),
        Some(v) => {
            Error::invalid_argument(format!("attribute '{name}' must be {want}, not {}", v.ty()))
        }
    }
}
