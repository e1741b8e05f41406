//! Run-time values of the reference interpreter.

use crate::tensor::Tensor;
use crate::OpError;

use super::expr::ExprId;

/// A value: a tensor, a tuple of values, or a closure (a function with the
/// values of the variables it captured).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A tensor.
    Tensor(Tensor),
    /// A tuple of the field values, in order.
    Tuple(Vec<Value>),
    /// A function value.
    Closure(Closure),
}

/// A function value: the `Function` node and the captured environment.
#[derive(Clone, Debug, PartialEq)]
pub struct Closure {
    /// The `Function` node.
    pub function: ExprId,
    /// The bindings in scope where the function was evaluated (`Var` node → value), empty for a global.
    pub captured: Vec<(ExprId, Value)>,
    /// The `let` variable bound to this closure, which its body may call
    /// (`let %f = fn (…) { … %f(…) … }`): bound to the closure itself on each call.
    pub recursive: Option<ExprId>,
}

impl Value {
    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The tensor, or an error naming what was found instead.
    pub fn tensor(&self) -> Result<&Tensor, OpError> {
        match self {
            Value::Tensor(t) => Ok(t),
            Value::Tuple(_) => Err("expected a tensor, found a tuple".into()),
            Value::Closure(_) => Err("expected a tensor, found a function".into()),
        }
    }

    /// The tuple fields, or an error naming what was found instead.
    pub fn tuple(&self) -> Result<&[Value], OpError> {
        match self {
            Value::Tuple(v) => Ok(v),
            Value::Tensor(_) => Err("expected a tuple, found a tensor".into()),
            Value::Closure(_) => Err("expected a tuple, found a function".into()),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}
