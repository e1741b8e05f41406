//! The import state shared by every converter: the Relay store being built,
//! the value of each ONNX name, and a view of the node being converted with
//! typed attribute access. Calls built here are typed at once (so a shape
//! error names the node) and folded to constants when every argument is a
//! constant, which is how exporters' shape arithmetic (`Shape → Gather →
//! Concat → Reshape`) disappears at import.

use std::collections::HashMap;

use super::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::op::op_registry;
use kiln_ir::relay::{Callee, ExprId, ExprKind, Store, Type, Value};
use kiln_ir::span::Span;
use kiln_ir::{DataType, Tensor};

use super::OnnxError;

/// Constants up to this many elements are computed at import; larger results
/// stay expressions (FoldConstant and the kernels deal with them).
const FOLD_LIMIT: usize = 1 << 22;

pub(crate) struct Importer {
    pub store: Store,
    /// The Relay value of each ONNX value name defined so far.
    pub values: HashMap<String, ExprId>,
    /// The default-domain opset the model imports.
    pub opset: i64,
}

/// The node being converted: its protobuf and a label for errors.
pub(crate) struct Node<'a> {
    pub n: &'a NodeProto,
    /// The node's name, or `#<index>` for exporters that leave names empty.
    pub label: String,
}

impl Node<'_> {
    pub fn err(&self, m: impl Into<String>) -> OnnxError {
        OnnxError::Node { node: self.label.clone(), op: self.n.op_type().to_string(), message: m.into() }
    }

    pub fn op(&self) -> &str {
        self.n.op_type()
    }

    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.n.attribute.iter().find(|a| a.name() == name)
    }

    /// Attribute `name` if present, which must be of type `want` (errors
    /// name types as ONNX does: `INT`, `FLOATS`).
    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&AttributeProto>, OnnxError> {
        let Some(a) = self.attr(name) else { return Ok(None) };
        // An unset type reads as UNDEFINED, as in proto3 files.
        let code = a.r#type.unwrap_or(AttributeType::Undefined as i32);
        match AttributeType::try_from(code) {
            Ok(t) if t == want => Ok(Some(a)),
            // Some exporters leave the type unset; accept a value of the expected kind.
            Ok(AttributeType::Undefined) => Ok(Some(a)),
            other => Err(self.err(format!(
                "attribute `{name}` must be {}, found {}",
                want.as_str_name(),
                other.map_or_else(|_| format!("type {code}"), |t| t.as_str_name().to_string())
            ))),
        }
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        Ok(self.typed(name, AttributeType::Int)?.map_or(default, |a| a.i()))
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, OnnxError> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        Ok(self.typed(name, AttributeType::Float)?.map_or(default, |a| a.f()))
    }

    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, OnnxError> {
        Ok(self.typed(name, AttributeType::Float)?.map(|a| a.f()))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, OnnxError> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, OnnxError> {
        Ok(self.typed(name, AttributeType::String)?.map(|a| String::from_utf8_lossy(a.s()).into_owned()))
    }

    /// Whether input `i` is given (present and not the empty name).
    pub fn has_input(&self, i: usize) -> bool {
        self.n.input.get(i).is_some_and(|s| !s.is_empty())
    }

    pub fn num_inputs(&self) -> usize {
        self.n.input.len()
    }

    pub fn num_outputs(&self) -> usize {
        self.n.output.iter().filter(|s| !s.is_empty()).count()
    }
}

/// Attributes from name/value pairs.
pub(crate) fn attrs(pairs: &[(&str, AttrValue)]) -> Attrs {
    Attrs::from_pairs(pairs.iter().map(|(k, v)| (*k, v.clone())))
}

impl Importer {
    pub fn new(opset: i64) -> Self {
        Importer { store: Store::new(), values: HashMap::new(), opset }
    }

    /// Input `i` of the node, which must be given and defined.
    pub fn input(&self, node: &Node, i: usize) -> Result<ExprId, OnnxError> {
        let name =
            node.n.input.get(i).filter(|s| !s.is_empty()).ok_or_else(|| node.err(format!("missing input {i}")))?;
        self.values
            .get(name)
            .copied()
            .ok_or_else(|| node.err(format!("input `{name}` is not defined before this node")))
    }

    /// Optional input `i`: absent (or the empty name) is `None`; a name that
    /// is given but not defined is an error, never a silently dropped input.
    pub fn optional_input(&self, node: &Node, i: usize) -> Result<Option<ExprId>, OnnxError> {
        if node.has_input(i) {
            self.input(node, i).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Every given input, in order (variadic operators).
    pub fn inputs(&self, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
        (0..node.num_inputs()).map(|i| self.input(node, i)).collect()
    }

    /// The checked type of an imported value.
    pub fn type_of(&mut self, node: &Node, x: ExprId) -> Result<Type, OnnxError> {
        if let Some(t) = self.store.checked_type(x) {
            return Ok(t.clone());
        }
        kiln_ir::relay::infer_expr(&mut self.store, x).map_err(|e| node.err(e.message().to_string()))
    }

    pub fn shape_of(&mut self, node: &Node, x: ExprId) -> Result<Vec<usize>, OnnxError> {
        match self.type_of(node, x)? {
            Type::Tensor(t) => Ok(t.shape),
            other => Err(node.err(format!("expected a tensor, found {other}"))),
        }
    }

    pub fn dtype_of(&mut self, node: &Node, x: ExprId) -> Result<DataType, OnnxError> {
        match self.type_of(node, x)? {
            Type::Tensor(t) => Ok(t.dtype),
            other => Err(node.err(format!("expected a tensor, found {other}"))),
        }
    }

    pub fn rank_of(&mut self, node: &Node, x: ExprId) -> Result<usize, OnnxError> {
        Ok(self.shape_of(node, x)?.len())
    }

    /// The value of `x` if it is a constant (an initializer, a `Constant`, or folded).
    pub fn constant_value(&self, x: ExprId) -> Option<&Tensor> {
        match self.store.kind(x) {
            ExprKind::Constant(c) => Some(self.store.constant_data(*c)),
            _ => None,
        }
    }

    /// Input `i` as a constant tensor (`None` when absent); an input that is
    /// given but computed at run time is an error naming `what`.
    pub fn const_input(&self, node: &Node, i: usize, what: &str) -> Result<Option<Tensor>, OnnxError> {
        match self.optional_input(node, i)? {
            None => Ok(None),
            Some(x) => {
                self.constant_value(x).cloned().map(Some).ok_or_else(|| {
                    node.err(format!("{what} (input `{}`) must be known at build time", node.n.input[i]))
                })
            }
        }
    }

    /// Input `i` as constant integers (axes, shapes, pads, sizes).
    pub fn const_ints(&self, node: &Node, i: usize, what: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        Ok(self.const_input(node, i, what)?.map(|t| ints_of(&t)))
    }

    /// A call of a Relay operator at this node: typed now (errors name the
    /// node) and computed now when every argument is a constant.
    pub fn call(&mut self, node: &Node, op: &str, args: Vec<ExprId>, a: Attrs) -> Result<ExprId, OnnxError> {
        let span = Span::node(&node.label);
        let e = self.store.call_op_at(op, args, a, span).map_err(|e| node.err(e.message().to_string()))?;
        self.type_new(node, e)?;
        Ok(self.fold(e))
    }

    /// `call` without attributes.
    pub fn op(&mut self, node: &Node, op: &str, args: Vec<ExprId>) -> Result<ExprId, OnnxError> {
        self.call(node, op, args, Attrs::new())
    }

    /// A constant, typed.
    pub fn constant(&mut self, t: Tensor) -> ExprId {
        let ty = Type::tensor(t.shape().to_vec(), t.dtype());
        let c = self.store.constant(t);
        self.store.set_checked_type(c, ty);
        c
    }

    /// A scalar constant of `dt`.
    pub fn scalar(&mut self, dt: DataType, v: f64) -> ExprId {
        self.constant(Tensor::scalar(dt, v))
    }

    /// A tuple of values.
    pub fn tuple(&mut self, node: &Node, fields: Vec<ExprId>) -> Result<ExprId, OnnxError> {
        let t = self.store.tuple(fields);
        self.store.set_span(t, Span::node(&node.label));
        self.type_new(node, t)?;
        Ok(t)
    }

    /// Field `k` of a tuple value (the field itself when the tuple is literal).
    pub fn item(&mut self, node: &Node, t: ExprId, k: usize) -> Result<ExprId, OnnxError> {
        if let ExprKind::Tuple(fields) = self.store.kind(t) {
            if let Some(&f) = fields.get(k) {
                return Ok(f);
            }
        }
        let e = self.store.tuple_get_item(t, k);
        self.store.set_span(e, Span::node(&node.label));
        self.type_new(node, e)?;
        Ok(e)
    }

    /// Type a node just built here from its operands' checked types. Every
    /// value the importer makes is typed when made, so this is constant work
    /// per node; `infer_expr` would walk the whole graph below the node again
    /// (quadratic import time). Falls back to it for an untyped operand.
    fn type_new(&mut self, node: &Node, e: ExprId) -> Result<Type, OnnxError> {
        let typed = |im: &Self, ids: &[ExprId]| -> Option<Vec<Type>> {
            ids.iter().map(|&a| im.store.checked_type(a).cloned()).collect()
        };
        let ty = match self.store.kind(e) {
            ExprKind::Call(call) => match (call.callee, typed(self, &call.args)) {
                (Callee::Op(op), Some(args)) => {
                    let def = op_registry().get(op);
                    (def.type_rel)(&args, &call.attrs).map_err(|m| {
                        let arg_types: Vec<String> = args.iter().map(Type::to_string).collect();
                        node.err(format!("{}: {m}; argument types: ({})", def.name, arg_types.join(", ")))
                    })?
                }
                _ => return self.type_of(node, e),
            },
            ExprKind::Tuple(fields) => match typed(self, fields) {
                Some(types) => Type::Tuple(types),
                None => return self.type_of(node, e),
            },
            &ExprKind::TupleGetItem { tuple, index } => match self.store.checked_type(tuple) {
                Some(Type::Tuple(fields)) if index < fields.len() => fields[index].clone(),
                _ => return self.type_of(node, e),
            },
            _ => return self.type_of(node, e),
        };
        kiln_ir::relay::ty::check_size(&ty).map_err(|m| node.err(m))?;
        self.store.set_checked_type(e, ty.clone());
        Ok(ty)
    }

    /// The call `e` computed by the reference interpreter when its arguments
    /// are constants and its result is small; `e` itself otherwise (also
    /// when the interpreter refuses, e.g. an integer division by zero, which
    /// then fails where the value is used at run time instead).
    fn fold(&mut self, e: ExprId) -> ExprId {
        let Some(call) = self.store.as_call(e) else { return e };
        let Callee::Op(op) = call.callee else { return e };
        let def = op_registry().get(op);
        if def.stateful {
            return e;
        }
        let mut vals = Vec::with_capacity(call.args.len());
        for &a in &call.args {
            match self.constant_or_tuple(a) {
                Some(v) => vals.push(v),
                None => return e,
            }
        }
        // A checked count: a type's shape may multiply past usize.
        let small = |s: &[usize]| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_some_and(|n| n <= FOLD_LIMIT);
        let fits = |t: &Type| match t {
            Type::Tensor(t) => small(&t.shape),
            Type::Tuple(f) => f.iter().all(|t| t.as_tensor().is_some_and(|t| small(&t.shape))),
            Type::Func(_) | Type::Var(_) => false,
        };
        if !self.store.checked_type(e).is_some_and(fits) {
            return e;
        }
        let attrs = call.attrs.clone();
        match (def.eval)(&vals, &attrs) {
            Ok(Value::Tensor(t)) => self.constant(t),
            Ok(Value::Tuple(fields)) => {
                let mut ids = Vec::with_capacity(fields.len());
                for f in fields {
                    match f {
                        Value::Tensor(t) => ids.push(self.constant(t)),
                        _ => return e,
                    }
                }
                let t = self.store.tuple(ids);
                let ty = self.store.checked_type(e).cloned();
                if let Some(ty) = ty {
                    self.store.set_checked_type(t, ty);
                }
                t
            }
            _ => e,
        }
    }

    fn constant_or_tuple(&self, a: ExprId) -> Option<Value> {
        match self.store.kind(a) {
            ExprKind::Constant(c) => Some(Value::Tensor(self.store.constant_data(*c).clone())),
            ExprKind::Tuple(fields) => {
                fields.iter().map(|&f| self.constant_or_tuple(f)).collect::<Option<Vec<_>>>().map(Value::Tuple)
            }
            _ => None,
        }
    }
}

/// The elements of an integer (or any) tensor as `i64`, saturating.
pub(crate) fn ints_of(t: &Tensor) -> Vec<i64> {
    t.to_f64_vec().iter().map(|&v| v.clamp(i64::MIN as f64, i64::MAX as f64) as i64).collect()
}
