//! Relay types: tensors with static shapes, tuples and function types.
//!
//! `Type` is a plain value; a `Store` hash-conses them so that an expression's
//! annotation or checked type is a `TypeId` handle.

use crate::OpError;
use std::fmt;

use crate::arena::Handle;
use crate::dtype::DataType;

/// A handle to a hash-consed [`Type`] in a [`Store`](super::Store).
pub type TypeId = Handle<Type>;

/// A tensor type: static shape and element type. A scalar has an empty shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Dimensions, outermost first; every one static.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DataType,
}

impl TensorType {
    /// A tensor type of `shape` and `dtype`.
    pub fn new(shape: impl Into<Vec<usize>>, dtype: DataType) -> Self {
        TensorType { shape: shape.into(), dtype }
    }

    /// A 0-d tensor type.
    pub fn scalar(dtype: DataType) -> Self {
        TensorType { shape: vec![], dtype }
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Elements (saturating at `usize::MAX`; types larger than
    /// [`MAX_TENSOR_BYTES`] are refused by type inference).
    pub fn numel(&self) -> usize {
        crate::tensor::numel(&self.shape)
    }

    /// Bytes of one tensor of this type (saturating).
    pub fn size_bytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size_bytes())
    }
}

/// The largest tensor a program may describe, in bytes (16 GiB): far below
/// the address space, so that no size computation after type inference can
/// overflow, and larger than any model kiln compiles for a CPU.
pub const MAX_TENSOR_BYTES: usize = 1 << 34;

/// The highest tensor rank a program may use (NumPy allows 64 too).
pub const MAX_RANK: usize = 64;

/// An error when `ty` holds a tensor over [`MAX_TENSOR_BYTES`] or [`MAX_RANK`].
pub fn check_size(ty: &Type) -> Result<(), OpError> {
    match ty {
        Type::Tensor(t) if t.shape.len() > MAX_RANK => {
            Err(format!("a tensor of rank {} is more than the {MAX_RANK} kiln allows", t.shape.len()).into())
        }
        // Also with a zero elsewhere (no elements): loop extents and index
        // arithmetic still use every dimension.
        Type::Tensor(t) if t.shape.iter().any(|&d| d > MAX_TENSOR_BYTES) => Err(format!(
            "a tensor of type {ty} has a dimension over the {} GiB kiln allows for one tensor",
            MAX_TENSOR_BYTES >> 30
        )
        .into()),
        Type::Tensor(t) => {
            let bytes = t.shape.iter().try_fold(t.dtype.size_bytes(), |a, &d| a.checked_mul(d));
            match bytes {
                Some(b) if b <= MAX_TENSOR_BYTES => Ok(()),
                _ => Err(format!(
                    "a tensor of type {ty} would take more than the {} GiB kiln allows for one tensor",
                    MAX_TENSOR_BYTES >> 30
                )
                .into()),
            }
        }
        Type::Tuple(fields) => fields.iter().try_for_each(check_size),
        Type::Func(f) => f.params.iter().chain([&*f.ret]).try_for_each(check_size),
        Type::Var(_) => Ok(()),
    }
}

/// A function type: type parameters, parameter types and result type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FuncType {
    /// The names of the type parameters of a polymorphic function
    /// (`fn [A](A) -> A`); empty for a monomorphic one.
    pub type_params: Vec<String>,
    /// Parameter types, in order.
    pub params: Vec<Type>,
    /// The result type.
    pub ret: Box<Type>,
}

/// A Relay type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A tensor of static shape.
    Tensor(TensorType),
    /// A tuple of the field types, in order (`()` when empty).
    Tuple(Vec<Type>),
    /// A function.
    Func(FuncType),
    /// A type parameter of an enclosing polymorphic function (`A` in
    /// `def @id[A](%x: A) -> A`): inside that function an opaque type equal
    /// only to itself; at a call, solved from the argument types.
    Var(String),
}

impl Type {
    /// A tensor type of `shape` and `dtype`.
    pub fn tensor(shape: impl Into<Vec<usize>>, dtype: DataType) -> Type {
        Type::Tensor(TensorType::new(shape, dtype))
    }

    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The field types, if this is a tuple.
    pub fn as_tuple(&self) -> Option<&[Type]> {
        match self {
            Type::Tuple(f) => Some(f),
            _ => None,
        }
    }
}

impl From<TensorType> for Type {
    fn from(t: TensorType) -> Type {
        Type::Tensor(t)
    }
}

impl fmt::Display for TensorType {
    /// TVM's syntax: `Tensor[(1, 784), float32]`; a scalar is `float32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shape.is_empty() {
            return write!(f, "{}", self.dtype);
        }
        f.write_str("Tensor[(")?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "), {}]", self.dtype)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Tuple(fields) => {
                f.write_str("(")?;
                for (i, t) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                // A one-element tuple keeps its comma, as in Python and TVM.
                if fields.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            Type::Func(ft) => {
                // TVM's printer: `fn [A, B](A) -> B`.
                f.write_str("fn ")?;
                if !ft.type_params.is_empty() {
                    write!(f, "[{}]", ft.type_params.join(", "))?;
                }
                f.write_str("(")?;
                for (i, t) in ft.params.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ") -> {}", ft.ret)
            }
            Type::Var(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_tvm() {
        assert_eq!(Type::tensor([1, 784], DataType::F32).to_string(), "Tensor[(1, 784), float32]");
        assert_eq!(Type::tensor([10], DataType::I64).to_string(), "Tensor[(10), int64]");
        assert_eq!(Type::tensor([], DataType::Bool).to_string(), "bool");
        let t = Type::Tuple(vec![Type::tensor([2], DataType::F32)]);
        assert_eq!(t.to_string(), "(Tensor[(2), float32],)");
        let f = Type::Func(FuncType { type_params: vec![], params: vec![t.clone()], ret: Box::new(t) });
        assert_eq!(f.to_string(), "fn ((Tensor[(2), float32],)) -> (Tensor[(2), float32],)");
    }
}
