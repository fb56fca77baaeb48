//! Op attributes: typed values with defaults, looked up by name.

use std::borrow::Cow;
use std::fmt;

use crate::error::{Error, Result};
use crate::tensor::DType;

/// The type of an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// An `i64` (`int` in op definitions).
    Int,
    /// An `f64` (`float`); an int value is accepted for it.
    Float,
    /// A `bool` (`bool`).
    Bool,
    /// A list of `i64` (`ints`), e.g. axes or a shape.
    Ints,
    /// A [`DType`] (`dtype`), e.g. Cast's target.
    DType,
    /// A string (`string`), for the op's kernels to read.
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

/// An attribute value. Rust values convert into it (`From`): `i64`/`i32` into `Int`,
/// `f64`/`f32` into `Float`, `bool`, `Vec<i64>`/`[i64; N]`/`&[i64]` into `Ints`, [`DType`],
/// `&str`/`String` into `Str`; so [`Attrs::with`] takes them directly.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A dtype.
    DType(DType),
    /// A string.
    Str(String),
}

impl AttrValue {
    /// The type of this value.
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

/// A `usize` or `u32` as an int: a value above `i64::MAX` (no size, axis or count is) saturates,
/// which the op then refuses as out of range.
fn int_of<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

attr_value_from! {
    usize => |v| AttrValue::Int(int_of(v)),
    u32 => |v| AttrValue::Int(v.into()),
    &Vec<i64> => |v| AttrValue::Ints(v.clone()),
    Vec<i32> => |v| AttrValue::Ints(v.into_iter().map(i64::from).collect()),
    &[i32] => |v| AttrValue::Ints(v.iter().map(|x| i64::from(*x)).collect()),
    Vec<usize> => |v| AttrValue::Ints(v.into_iter().map(int_of).collect()),
    &[usize] => |v| AttrValue::Ints(v.iter().map(|x| int_of(*x)).collect()),
}

impl<const N: usize> From<[i64; N]> for AttrValue {
    fn from(v: [i64; N]) -> AttrValue {
        AttrValue::Ints(v.to_vec())
    }
}

impl<const N: usize> From<[i32; N]> for AttrValue {
    fn from(v: [i32; N]) -> AttrValue {
        AttrValue::Ints(v.iter().map(|x| i64::from(*x)).collect())
    }
}

impl<const N: usize> From<[usize; N]> for AttrValue {
    fn from(v: [usize; N]) -> AttrValue {
        AttrValue::Ints(v.iter().map(|x| int_of(*x)).collect())
    }
}

/// An attribute an op declares ([`OpDef::attrs`](crate::OpDef::attrs)).
#[derive(Clone, Debug)]
pub struct AttrDef {
    /// The name hosts pass the value under (`static`: ops live as long as the process may
    /// refer to them; op text interns its names).
    pub name: &'static str,
    /// Its type; a value of another type is refused (an int is accepted for a float).
    pub ty: AttrType,
    /// `None`: required.
    pub default: Option<AttrValue>,
}

/// Attribute values by name, as passed to an op (small: a vector, searched linearly).
///
/// ```
/// use devplug_core::{Attrs, DType};
/// let a = Attrs::new().with("axes", [0, 1]).with("keep_dims", true).with("dtype", DType::F16);
/// assert_eq!(a.ints("axes")?, [0, 1]);
/// assert!(a.bool("keep_dims")?);
/// assert!(a.float("axes").is_err());
/// # Ok::<(), devplug_core::Error>(())
/// ```
///
/// An op checks the attributes it is run with against its declarations ([`AttrDef`]):
/// unknown names, wrong types and missing required attributes are `INVALID_ARGUMENT` errors
/// naming the op and the attribute; defaults fill in the rest, so a kernel, shape function or
/// decomposition sees every declared attribute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(Vec<(Cow<'static, str>, AttrValue)>);

impl Attrs {
    /// No attributes (every attribute takes its default).
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

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether no attribute is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The attributes set, in the order they were first set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.0.iter().map(|(n, v)| (n.as_ref(), v))
    }

    /// An int attribute; `INVALID_ARGUMENT` when it is missing or of another type (so are the
    /// other getters).
    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Ok(*v),
            other => Err(wrong(name, "an int", other)),
        }
    }

    /// A float attribute; an int value reads as a float.
    pub fn float(&self, name: &str) -> Result<f64> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(AttrValue::Int(v)) => Ok(*v as f64),
            other => Err(wrong(name, "a float", other)),
        }
    }

    /// A bool attribute.
    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            Some(AttrValue::Bool(v)) => Ok(*v),
            other => Err(wrong(name, "a bool", other)),
        }
    }

    /// An int-list attribute.
    pub fn ints(&self, name: &str) -> Result<&[i64]> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Ok(v),
            other => Err(wrong(name, "an int list", other)),
        }
    }

    /// A dtype attribute.
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
        // An int given for a float attribute is stored as the float it stands for, so that
        // kernels (and kernel states, ABI 1.5) see one value for `2` and `2.0`.
        let mut widen = false;
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
            widen |= def.ty != value.ty();
        }
        if self.0.len() == defs.len() && !widen {
            return Ok(Cow::Borrowed(self));
        }
        let mut out = self.clone();
        if widen {
            for (name, value) in &mut out.0 {
                if let AttrValue::Int(i) = *value {
                    if defs
                        .iter()
                        .any(|d| d.name == name && d.ty == AttrType::Float)
                    {
                        *value = AttrValue::Float(i as f64);
                    }
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer attributes from the integer types Rust code holds sizes and axes in; an
    /// unsuffixed literal list is an int list.
    #[test]
    fn int_attributes_from_rust_integers() {
        let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
        assert_eq!(AttrValue::from([0, 1]), ints(&[0, 1]));
        assert_eq!(AttrValue::from([2i32, -1]), ints(&[2, -1]));
        assert_eq!(AttrValue::from([3usize]), ints(&[3]));
        assert_eq!(AttrValue::from(vec![1i32, 2]), ints(&[1, 2]));
        assert_eq!(AttrValue::from(vec![4usize, 5]), ints(&[4, 5]));
        assert_eq!(AttrValue::from(&[6usize][..]), ints(&[6]));
        assert_eq!(AttrValue::from(&[7i32][..]), ints(&[7]));
        assert_eq!(AttrValue::from(&vec![8i64]), ints(&[8]));
        assert_eq!(AttrValue::from(9usize), AttrValue::Int(9));
        assert_eq!(AttrValue::from(10u32), AttrValue::Int(10));
        assert_eq!(AttrValue::from(usize::MAX), AttrValue::Int(i64::MAX));
        let a = Attrs::new().with("axes", [1]).with("perm", vec![1usize, 0]);
        assert_eq!(a.get("axes"), Some(&ints(&[1])));
        assert_eq!(a.get("perm"), Some(&ints(&[1, 0])));
    }

    fn defs() -> Vec<AttrDef> {
        vec![
            AttrDef {
                name: "k",
                ty: AttrType::Float,
                default: Some(AttrValue::Float(1.0)),
            },
            AttrDef {
                name: "n",
                ty: AttrType::Int,
                default: None,
            },
        ]
    }

    /// An int given for a float attribute is completed as that float: kernels (and kernel
    /// states) see one value for `2` and `2.0`; ints for int attributes stay ints.
    #[test]
    fn an_int_for_a_float_attribute_is_completed_as_a_float() {
        let given = Attrs::new().with("k", 2i64).with("n", 3i64);
        let done = given.complete("t.Op", &defs()).unwrap();
        assert_eq!(done.get("k"), Some(&AttrValue::Float(2.0)));
        assert_eq!(done.get("n"), Some(&AttrValue::Int(3)));
        let as_float = Attrs::new().with("n", 3i64).with("k", 2.0);
        let done2 = as_float.complete("t.Op", &defs()).unwrap();
        assert!(
            matches!(done2, Cow::Borrowed(_)),
            "nothing to change: borrowed"
        );
        assert_eq!(done2.get("k"), done.get("k"));
        // Defaults are filled in as before.
        let only_n = Attrs::new().with("n", 1i64);
        let done3 = only_n.complete("t.Op", &defs()).unwrap();
        assert_eq!(done3.get("k"), Some(&AttrValue::Float(1.0)));
        // A float for an int attribute is still refused.
        let e = Attrs::new()
            .with("n", 1.5)
            .complete("t.Op", &defs())
            .unwrap_err();
        assert!(
            e.message
                .contains("attribute 'n' must be an int, not a float"),
            "{e}"
        );
    }
}
