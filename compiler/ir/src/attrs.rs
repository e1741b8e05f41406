//! Attributes of calls and functions, and the schemas operators declare.
//!
//! A call's attributes are normalized against its operator's schema when the
//! call is built: unknown names and mistyped values are errors, missing ones
//! take their defaults, and the stored order is the schema's order. Printing
//! shows only values that differ from the default (as TVM's printer does).

use crate::OpError;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::dtype::DataType;

/// One attribute value.
#[derive(Clone, Debug)]
pub enum AttrValue {
    /// `None` in text: "not given" for optional attributes (e.g. `axis=None`).
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer (`axis=1`).
    Int(i64),
    /// A float, printed with an `f` suffix (`1e-05f`); compares and hashes by bit pattern.
    Float(f64),
    /// A string (`layout="NCHW"`).
    Str(String),
    /// A list of integers (`strides=[2, 2]`).
    Ints(Vec<i64>),
    /// A list of floats; each compares and hashes by bit pattern.
    Floats(Vec<f64>),
    /// A data type, printed as its TVM name in quotes (`dtype="float32"`).
    DType(DataType),
}

// Floats compare and hash by bit pattern so attributes can live in hash-consed nodes.
impl PartialEq for AttrValue {
    fn eq(&self, other: &Self) -> bool {
        use AttrValue::*;
        match (self, other) {
            (None, None) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Str(a), Str(b)) => a == b,
            (Ints(a), Ints(b)) => a == b,
            (Floats(a), Floats(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            (DType(a), DType(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for AttrValue {}

impl Hash for AttrValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            AttrValue::None => {}
            AttrValue::Bool(v) => v.hash(state),
            AttrValue::Int(v) => v.hash(state),
            AttrValue::Float(v) => v.to_bits().hash(state),
            AttrValue::Str(v) => v.hash(state),
            AttrValue::Ints(v) => v.hash(state),
            AttrValue::Floats(v) => v.iter().for_each(|x| x.to_bits().hash(state)),
            AttrValue::DType(v) => v.hash(state),
        }
    }
}

impl AttrValue {
    /// A short description of the value's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::None => "None",
            AttrValue::Bool(_) => "bool",
            AttrValue::Int(_) => "integer",
            AttrValue::Float(_) => "float",
            AttrValue::Str(_) => "string",
            AttrValue::Ints(_) => "list of integers",
            AttrValue::Floats(_) => "list of floats",
            AttrValue::DType(_) => "dtype",
        }
    }
}

/// Formats a float so that it parses back to the same bits and reads like TVM (`1e-05f`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".to_string() } else { "-inf".to_string() };
    }
    let s = format!("{v:?}");
    // `{:?}` gives the shortest text that round-trips, e.g. `1e-5`, `0.5`, `2.0`.
    if s.contains('e') || s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// `s` as a Relay string literal: only the escapes the lexer reads (`\"`,
/// `\\`, `\n`, `\t`); every other character as itself, so printed text
/// parses back to the same string (Rust's `{:?}` writes `\u{7f}`, which it
/// does not).
fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T>(f: &mut fmt::Formatter<'_>, xs: &[T], g: impl Fn(&T) -> String) -> fmt::Result {
            f.write_str("[")?;
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(&g(x))?;
            }
            f.write_str("]")
        }
        match self {
            AttrValue::None => f.write_str("None"),
            AttrValue::Bool(true) => f.write_str("True"),
            AttrValue::Bool(false) => f.write_str("False"),
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{}f", format_float(*v)),
            AttrValue::Str(s) => write_quoted(f, s),
            AttrValue::Ints(v) => list(f, v, |x| x.to_string()),
            AttrValue::Floats(v) => list(f, v, |x| format!("{}f", format_float(*x))),
            AttrValue::DType(d) => write!(f, "\"{d}\""),
        }
    }
}

/// The declared kind of an attribute in an operator's schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// `True` / `False` (also accepts the integers 0 and 1).
    Bool,
    /// An integer (also accepts a bool, as 0 or 1).
    Int,
    /// An integer or `None`.
    OptInt,
    /// A float (also accepts an integer).
    Float,
    /// A string.
    Str,
    /// A list of integers (also accepts a bare integer, as a one-element list).
    Ints,
    /// A list of integers or `None` (e.g. reduction axes: `None` means all).
    OptInts,
    /// A data type, written as a string (`dtype="float32"`).
    DType,
    /// A list of floats (also accepts integers: `roi=[0, 0, 1, 1]`).
    Floats,
    /// An integer or a list of integers, kept apart (`split`'s `indices_or_sections`).
    IntOrInts,
}

impl AttrKind {
    /// The kind as error messages name it (`"integer or None"`).
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Bool => "bool",
            AttrKind::Int => "integer",
            AttrKind::OptInt => "integer or None",
            AttrKind::Float => "float",
            AttrKind::Str => "string",
            AttrKind::Ints => "list of integers",
            AttrKind::OptInts => "list of integers or None",
            AttrKind::DType => "dtype string",
            AttrKind::Floats => "list of floats",
            AttrKind::IntOrInts => "integer or list of integers",
        }
    }

    /// Coerce `value` to this kind, or say why not.
    pub fn coerce(self, value: AttrValue) -> Result<AttrValue, OpError> {
        use AttrValue as V;
        let bad = |v: &AttrValue| Err(format!("expected {}, found {} `{v}`", self.name(), v.kind_name()).into());
        match (self, value) {
            (AttrKind::Bool, V::Bool(b)) => Ok(V::Bool(b)),
            (AttrKind::Bool, V::Int(i)) if i == 0 || i == 1 => Ok(V::Bool(i == 1)),
            (AttrKind::Int | AttrKind::OptInt, V::Int(i)) => Ok(V::Int(i)),
            (AttrKind::Int | AttrKind::OptInt, V::Bool(b)) => Ok(V::Int(b as i64)),
            (AttrKind::OptInt | AttrKind::OptInts, V::None) => Ok(V::None),
            (AttrKind::Float, V::Float(x)) => Ok(V::Float(x)),
            (AttrKind::Float, V::Int(i)) => Ok(V::Float(i as f64)),
            (AttrKind::Str, V::Str(s)) => Ok(V::Str(s)),
            (AttrKind::Ints | AttrKind::OptInts, V::Ints(v)) => Ok(V::Ints(v)),
            // A bare integer where a list is expected is a one-element list (`axis=1`).
            (AttrKind::Ints | AttrKind::OptInts, V::Int(i)) => Ok(V::Ints(vec![i])),
            (AttrKind::IntOrInts, V::Int(i)) => Ok(V::Int(i)),
            (AttrKind::IntOrInts, V::Ints(v)) => Ok(V::Ints(v)),
            (AttrKind::DType, V::DType(d)) => Ok(V::DType(d)),
            (AttrKind::Floats, V::Floats(v)) => Ok(V::Floats(v)),
            (AttrKind::Floats, V::Ints(v)) => Ok(V::Floats(v.into_iter().map(|i| i as f64).collect())),
            (AttrKind::Floats, V::Float(x)) => Ok(V::Floats(vec![x])),
            (AttrKind::DType, V::Str(s)) => match DataType::from_name(&s) {
                Some(d) => Ok(V::DType(d)),
                None => Err(format!("unknown dtype \"{s}\"").into()),
            },
            (_, v) => bad(&v),
        }
    }
}

/// One attribute in an operator's schema.
#[derive(Clone, Debug)]
pub struct AttrSpec {
    /// The attribute's name in text and in [`Attrs`].
    pub name: &'static str,
    /// The kind values are coerced to.
    pub kind: AttrKind,
    /// `None` means the attribute is required.
    pub default: Option<AttrValue>,
}

impl AttrSpec {
    /// A required attribute.
    pub fn required(name: &'static str, kind: AttrKind) -> Self {
        AttrSpec { name, kind, default: None }
    }
    /// An attribute with a default value.
    pub fn with_default(name: &'static str, kind: AttrKind, default: AttrValue) -> Self {
        AttrSpec { name, kind, default: Some(default) }
    }
    /// An integer with a default.
    pub fn int(name: &'static str, default: i64) -> Self {
        Self::with_default(name, AttrKind::Int, AttrValue::Int(default))
    }
    /// An optional integer, `None` by default.
    pub fn opt_int(name: &'static str) -> Self {
        Self::with_default(name, AttrKind::OptInt, AttrValue::None)
    }
    /// A float with a default.
    pub fn float(name: &'static str, default: f64) -> Self {
        Self::with_default(name, AttrKind::Float, AttrValue::Float(default))
    }
    /// A bool with a default.
    pub fn bool(name: &'static str, default: bool) -> Self {
        Self::with_default(name, AttrKind::Bool, AttrValue::Bool(default))
    }
    /// A string with a default.
    pub fn str(name: &'static str, default: &str) -> Self {
        Self::with_default(name, AttrKind::Str, AttrValue::Str(default.to_string()))
    }
    /// A list of integers with a default.
    pub fn ints(name: &'static str, default: &[i64]) -> Self {
        Self::with_default(name, AttrKind::Ints, AttrValue::Ints(default.to_vec()))
    }
    /// An optional list of integers, `None` by default.
    pub fn opt_ints(name: &'static str) -> Self {
        Self::with_default(name, AttrKind::OptInts, AttrValue::None)
    }
    /// A list of floats with a default.
    pub fn floats(name: &'static str, default: &[f64]) -> Self {
        Self::with_default(name, AttrKind::Floats, AttrValue::Floats(default.to_vec()))
    }
    /// A data type with a default.
    pub fn dtype(name: &'static str, default: DataType) -> Self {
        Self::with_default(name, AttrKind::DType, AttrValue::DType(default))
    }
}

/// An ordered list of named attribute values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attrs {
    entries: Vec<(String, AttrValue)>,
}

impl Attrs {
    /// No attributes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attributes from `(name, value)` pairs, in the given order.
    pub fn from_pairs<S: Into<String>>(pairs: impl IntoIterator<Item = (S, AttrValue)>) -> Self {
        let mut a = Attrs::new();
        for (k, v) in pairs {
            a.set(k, v);
        }
        a
    }

    /// Set `name`, replacing an earlier value.
    pub fn set(&mut self, name: impl Into<String>, value: AttrValue) {
        let name = name.into();
        match self.entries.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.entries.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The entries in order (the schema's order once normalized).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn require(&self, name: &str) -> Result<&AttrValue, OpError> {
        self.get(name).ok_or_else(|| OpError::from(format!("missing attribute `{name}`")))
    }

    /// The integer `name` (a bool reads as 0 or 1); an error when missing or of another kind.
    pub fn int(&self, name: &str) -> Result<i64, OpError> {
        match self.require(name)? {
            AttrValue::Int(i) => Ok(*i),
            AttrValue::Bool(b) => Ok(*b as i64),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected an integer", v.kind_name()).into()),
        }
    }

    /// An optional integer: `None` when absent or `None`.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, OpError> {
        match self.get(name) {
            None | Some(AttrValue::None) => Ok(None),
            Some(_) => self.int(name).map(Some),
        }
    }

    /// The float `name` (an integer is converted); an error when missing or of another kind.
    pub fn float(&self, name: &str) -> Result<f64, OpError> {
        match self.require(name)? {
            AttrValue::Float(x) => Ok(*x),
            AttrValue::Int(i) => Ok(*i as f64),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a float", v.kind_name()).into()),
        }
    }

    /// The bool `name` (an integer reads as `!= 0`); an error when missing or of another kind.
    pub fn bool(&self, name: &str) -> Result<bool, OpError> {
        match self.require(name)? {
            AttrValue::Bool(b) => Ok(*b),
            AttrValue::Int(i) => Ok(*i != 0),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a bool", v.kind_name()).into()),
        }
    }

    /// The string `name`; an error when missing or of another kind.
    pub fn str(&self, name: &str) -> Result<&str, OpError> {
        match self.require(name)? {
            AttrValue::Str(s) => Ok(s),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a string", v.kind_name()).into()),
        }
    }

    /// The integer list `name`; an error when missing or of another kind.
    pub fn ints(&self, name: &str) -> Result<&[i64], OpError> {
        match self.require(name)? {
            AttrValue::Ints(v) => Ok(v),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a list of integers", v.kind_name()).into()),
        }
    }

    /// The float list `name`; an error when missing or of another kind.
    pub fn floats(&self, name: &str) -> Result<&[f64], OpError> {
        match self.require(name)? {
            AttrValue::Floats(v) => Ok(v),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a list of floats", v.kind_name()).into()),
        }
    }

    /// An optional list: `None` when absent or `None`.
    pub fn opt_ints(&self, name: &str) -> Result<Option<&[i64]>, OpError> {
        match self.get(name) {
            None | Some(AttrValue::None) => Ok(None),
            Some(_) => self.ints(name).map(Some),
        }
    }

    /// The data type `name` (a string is parsed as a TVM name); an error when missing or of another kind.
    pub fn dtype(&self, name: &str) -> Result<DataType, OpError> {
        match self.require(name)? {
            AttrValue::DType(d) => Ok(*d),
            AttrValue::Str(s) => DataType::from_name(s).ok_or_else(|| OpError::from(format!("unknown dtype \"{s}\""))),
            v => Err(format!("attribute `{name}` is {} `{v}`, expected a dtype", v.kind_name()).into()),
        }
    }

    /// Check `given` against `schema`: reject unknown names and wrong kinds,
    /// fill defaults, and order the result as the schema does.
    /// Errors name the attribute and list the valid ones.
    pub fn normalize(given: &Attrs, schema: &[AttrSpec], op_name: &str) -> Result<Attrs, OpError> {
        for (name, _) in given.iter() {
            if !schema.iter().any(|s| s.name == name) {
                let valid: Vec<&str> = schema.iter().map(|s| s.name).collect();
                return Err(OpError::from(if valid.is_empty() {
                    format!("operator `{op_name}` takes no attributes, found `{name}`")
                } else {
                    format!(
                        "unknown attribute `{name}` for operator `{op_name}`; valid attributes: {}",
                        valid.join(", ")
                    )
                }));
            }
        }
        let mut out = Attrs::new();
        for spec in schema {
            let value = match (given.get(spec.name), &spec.default) {
                (Some(v), _) => {
                    spec.kind.coerce(v.clone()).map_err(|e| format!("attribute `{}` of `{op_name}`: {e}", spec.name))?
                }
                (None, Some(default)) => default.clone(),
                (None, None) => {
                    return Err(format!(
                        "operator `{op_name}` requires attribute `{}` ({})",
                        spec.name,
                        spec.kind.name()
                    )
                    .into())
                }
            };
            out.entries.push((spec.name.to_string(), value));
        }
        Ok(out)
    }

    /// The entries whose value differs from the schema default (what the printer shows).
    pub fn non_default<'a>(&'a self, schema: &'a [AttrSpec]) -> impl Iterator<Item = (&'a str, &'a AttrValue)> {
        self.iter().filter(move |(k, v)| match schema.iter().find(|s| s.name == *k).and_then(|s| s.default.as_ref()) {
            Some(default) => default != *v,
            None => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Vec<AttrSpec> {
        vec![AttrSpec::int("axis", -1), AttrSpec::opt_int("units"), AttrSpec::required("eps", AttrKind::Float)]
    }

    #[test]
    fn normalize_fills_defaults_and_orders() {
        let given = Attrs::from_pairs([("eps", AttrValue::Int(1))]);
        let n = Attrs::normalize(&given, &schema(), "op").unwrap();
        let names: Vec<_> = n.iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["axis", "units", "eps"]);
        assert_eq!(n.float("eps").unwrap(), 1.0);
        assert_eq!(n.non_default(&schema()).count(), 1);
    }

    #[test]
    fn normalize_rejects_unknown_and_mistyped() {
        let unknown = Attrs::from_pairs([("eps", AttrValue::Float(1.0)), ("axes", AttrValue::Int(0))]);
        let e = Attrs::normalize(&unknown, &schema(), "op").unwrap_err().to_string();
        assert!(e.contains("unknown attribute `axes`") && e.contains("axis, units, eps"), "{e}");
        let mistyped = Attrs::from_pairs([("eps", AttrValue::Str("x".into()))]);
        let e = Attrs::normalize(&mistyped, &schema(), "op").unwrap_err().to_string();
        assert!(e.contains("expected float"), "{e}");
        let missing = Attrs::new();
        assert!(Attrs::normalize(&missing, &schema(), "op")
            .unwrap_err()
            .to_string()
            .contains("requires attribute `eps`"));
    }

    #[test]
    fn floats_print_round_trippable() {
        assert_eq!(AttrValue::Float(1e-5).to_string(), "1e-5f");
        assert_eq!(AttrValue::Float(2.0).to_string(), "2.0f");
        assert_eq!(AttrValue::Ints(vec![1, 2]).to_string(), "[1, 2]");
    }
}
