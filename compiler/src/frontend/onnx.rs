//! ONNX → Relay. The message types come from the `onnx-protobuf` crate; this
//! module maps the graph: graph inputs become `@main`'s parameters (a dynamic
//! dimension must be fixed by the caller), initializers and `Constant` nodes
//! become constants, nodes become operator calls whose span is the node's
//! name, so every error names the ONNX node, its operator and what is missing.

use std::collections::HashMap;

use onnx_protobuf::{
    attribute_proto::AttributeType, tensor_proto::DataType as OnnxType, Message, ModelProto, NodeProto, TensorProto,
};
use protobuf::Enum;

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{ExprId, IRModule, Store, Type};
use kiln_ir::span::Span;
use kiln_ir::{DataType, Tensor};

/// What went wrong importing an ONNX model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    #[error("not a valid ONNX model: {0}")]
    Corrupt(String),
    #[error("ONNX node `{node}` ({op}): {message}")]
    Node { node: String, op: String, message: String },
    #[error("ONNX input `{input}`: {message}")]
    Input { input: String, message: String },
}

fn dtype(t: i32) -> Option<DataType> {
    Some(match OnnxType::from_i32(t)? {
        OnnxType::FLOAT => DataType::F32,
        OnnxType::FLOAT16 => DataType::F16,
        OnnxType::INT64 => DataType::I64,
        OnnxType::INT32 => DataType::I32,
        OnnxType::INT8 => DataType::I8,
        OnnxType::UINT8 => DataType::U8,
        OnnxType::BOOL => DataType::Bool,
        _ => return None,
    })
}

/// The largest tensor kiln accepts from a model file (elements).
const MAX_ELEMENTS: usize = 1 << 34;

/// Dimensions as sizes, rejecting negative ones and absurd totals (corrupt files).
fn checked_shape(dims: &[i64]) -> Result<Vec<usize>, String> {
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS);
    n.map(|_| shape).ok_or_else(|| "the tensor is too large".to_string())
}

/// A host tensor from an initializer or `Constant` value.
fn tensor(t: &TensorProto) -> Result<Tensor, String> {
    let dt =
        dtype(t.data_type).ok_or_else(|| format!("tensor `{}` has unsupported data type {}", t.name, t.data_type))?;
    let shape = checked_shape(&t.dims)?;
    let n: usize = shape.iter().product();
    if !t.raw_data.is_empty() {
        return Tensor::from_bytes(dt, shape, t.raw_data.clone())
            .ok_or_else(|| format!("tensor `{}`: raw data does not fit its shape", t.name));
    }
    let vals: Vec<f64> = match dt {
        DataType::F32 => t.float_data.iter().map(|&v| v as f64).collect(),
        DataType::I64 => t.int64_data.iter().map(|&v| v as f64).collect(),
        DataType::I32 | DataType::I8 | DataType::U8 | DataType::Bool | DataType::F16 => {
            t.int32_data.iter().map(|&v| v as f64).collect()
        }
    };
    if vals.len() != n {
        return Err(format!("tensor `{}` has {} values for shape {shape:?}", t.name, vals.len()));
    }
    Ok(Tensor::from_f64(dt, shape, &vals))
}

struct Importer<'a> {
    store: Store,
    values: HashMap<String, ExprId>,
    /// Constant tensors by value name (initializers, `Constant` outputs), for attributes given as inputs.
    constants: HashMap<String, Tensor>,
    input_shapes: &'a [(String, Vec<usize>)],
}

struct Node<'a> {
    n: &'a NodeProto,
    /// The node's name, or `#<index>` for exporters that leave names empty.
    label: String,
}

impl Node<'_> {
    fn err(&self, m: impl Into<String>) -> OnnxError {
        OnnxError::Node { node: self.label.clone(), op: self.n.op_type.clone(), message: m.into() }
    }
    fn attr(&self, name: &str) -> Option<&onnx_protobuf::AttributeProto> {
        self.n.attribute.iter().find(|a| a.name == name)
    }
    fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).map_or(default, |a| a.i)
    }
    fn float(&self, name: &str, default: f32) -> f32 {
        self.attr(name).map_or(default, |a| a.f)
    }
    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name)
            .filter(|a| a.type_.enum_value() == Ok(AttributeType::INTS) || !a.ints.is_empty())
            .map(|a| a.ints.clone())
    }
    fn string(&self, name: &str) -> Option<String> {
        self.attr(name).map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }
}

fn attrs(pairs: &[(&str, AttrValue)]) -> Attrs {
    Attrs::from_pairs(pairs.iter().map(|(k, v)| (*k, v.clone())))
}

impl Importer<'_> {
    fn input(&self, node: &Node, i: usize) -> Result<ExprId, OnnxError> {
        let name =
            node.n.input.get(i).filter(|s| !s.is_empty()).ok_or_else(|| node.err(format!("missing input {i}")))?;
        self.values
            .get(name)
            .copied()
            .ok_or_else(|| node.err(format!("input `{name}` is not defined before this node")))
    }

    fn optional_input(&self, node: &Node, i: usize) -> Option<ExprId> {
        node.n.input.get(i).filter(|s| !s.is_empty()).and_then(|n| self.values.get(n).copied())
    }

    /// The type of an already imported value (its shape is static).
    fn type_of(&mut self, node: &Node, x: ExprId) -> Result<Type, OnnxError> {
        kiln_ir::relay::infer_expr(&mut self.store, x).map_err(|e| node.err(e.message().to_string()))
    }

    fn shape_of(&mut self, node: &Node, x: ExprId) -> Result<Vec<usize>, OnnxError> {
        match self.type_of(node, x)? {
            Type::Tensor(t) => Ok(t.shape),
            other => Err(node.err(format!("expected a tensor, found {other}"))),
        }
    }

    fn rank_of(&mut self, node: &Node, x: ExprId) -> Result<usize, OnnxError> {
        Ok(self.shape_of(node, x)?.len())
    }

    fn const_input(&self, node: &Node, i: usize) -> Option<&Tensor> {
        node.n.input.get(i).and_then(|n| self.constants.get(n))
    }

    fn call(&mut self, node: &Node, op: &str, args: Vec<ExprId>, a: Attrs) -> Result<ExprId, OnnxError> {
        let span = Span::node(&node.label);
        self.store.call_op_at(op, args, a, span).map_err(|e| node.err(e.message().to_string()))
    }

    fn scalar(&mut self, v: f64) -> ExprId {
        self.store.constant(Tensor::scalar(DataType::F32, v))
    }

    /// Pads `[x1_begin, x2_begin, x1_end, x2_end]` → kiln's `[top, left, bottom, right]` (the same order).
    /// Explicit pads, or those `auto_pad=SAME_UPPER|SAME_LOWER` implies for
    /// input `x` and a window of `kernel` (so the output is ⌈in / stride⌉).
    fn pads(&mut self, node: &Node, x: ExprId, kernel: &[i64]) -> Result<Vec<i64>, OnnxError> {
        let mode = node.string("auto_pad").unwrap_or_default();
        match mode.as_str() {
            "" | "NOTSET" => Ok(node.ints("pads").unwrap_or_else(|| vec![0, 0, 0, 0])),
            "VALID" => Ok(vec![0, 0, 0, 0]),
            "SAME_UPPER" | "SAME_LOWER" => {
                let shape = self.shape_of(node, x)?;
                if shape.len() != 4 || kernel.len() != 2 {
                    return Err(node.err("auto_pad needs a 4-D input and a 2-D kernel"));
                }
                let strides = node.ints("strides").unwrap_or_else(|| vec![1, 1]);
                let dil = node.ints("dilations").unwrap_or_else(|| vec![1, 1]);
                let mut begin = [0i64; 2];
                let mut end = [0i64; 2];
                for d in 0..2 {
                    let (n, s, k, r) = (
                        shape[2 + d] as i64,
                        strides.get(d).copied().unwrap_or(1).max(1),
                        kernel[d],
                        dil.get(d).copied().unwrap_or(1),
                    );
                    let out = (n + s - 1) / s;
                    let total = ((out - 1) * s + (k - 1) * r + 1 - n).max(0);
                    let small = total / 2;
                    (begin[d], end[d]) =
                        if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                }
                Ok(vec![begin[0], begin[1], end[0], end[1]])
            }
            other => Err(node.err(format!("auto_pad={other} is not supported"))),
        }
    }

    /// A 1-D Conv, MaxPool or AveragePool (input [N, C, L]) as its 2-D form
    /// over [N, C, 1, L]: the input (and weight) gain a unit height, every
    /// spatial attribute a leading 1 (pads a leading 0 at each end), and the
    /// result drops the height again. None when the node is not 1-D.
    fn lift_1d(&mut self, n: &NodeProto, index: usize) -> Option<Result<(), OnnxError>> {
        if !matches!(n.op_type.as_str(), "Conv" | "MaxPool" | "AveragePool") {
            return None;
        }
        let label = if n.name.is_empty() { format!("#{index}") } else { n.name.clone() };
        let node = Node { n, label };
        let x = self.input(&node, 0).ok()?;
        let shape = self.shape_of(&node, x).ok()?;
        if shape.len() != 3 {
            return None;
        }
        Some((|| {
            let mut n2 = n.clone();
            let unsqueeze = |me: &mut Self, v: ExprId, name: &str| -> Result<String, OnnxError> {
                let s = me.shape_of(&node, v)?;
                let newshape: Vec<i64> =
                    [s[0] as i64, s[1] as i64, 1].into_iter().chain(s[2..].iter().map(|&d| d as i64)).collect();
                let y = me.call(&node, "reshape", vec![v], attrs(&[("newshape", AttrValue::Ints(newshape))]))?;
                let lifted = format!("{name}\u{0}2d");
                me.values.insert(lifted.clone(), y);
                Ok(lifted)
            };
            n2.input[0] = unsqueeze(self, x, &n.input[0])?;
            if n.op_type == "Conv" {
                let w = self.input(&node, 1)?;
                n2.input[1] = unsqueeze(self, w, &n.input[1])?;
            }
            for a in n2.attribute.iter_mut() {
                match a.name.as_str() {
                    "kernel_shape" | "strides" | "dilations" if a.ints.len() == 1 => a.ints.insert(0, 1),
                    "pads" if a.ints.len() == 2 => a.ints = vec![0, a.ints[0], 0, a.ints[1]],
                    _ => {}
                }
            }
            let out = n.output.first().cloned().ok_or_else(|| node.err("no output"))?;
            n2.output = vec![format!("{out}\u{0}2d")];
            self.node(&n2, index)?;
            let y = *self.values.get(&n2.output[0]).ok_or_else(|| node.err("no 2-D result"))?;
            let s = self.shape_of(&node, y)?;
            let newshape = vec![s[0] as i64, s[1] as i64, s[3] as i64];
            let y = self.call(&node, "reshape", vec![y], attrs(&[("newshape", AttrValue::Ints(newshape))]))?;
            self.values.insert(out, y);
            Ok(())
        })())
    }

    fn node(&mut self, n: &NodeProto, index: usize) -> Result<(), OnnxError> {
        if let Some(r) = self.lift_1d(n, index) {
            return r;
        }
        let label = if n.name.is_empty() { format!("#{index}") } else { n.name.clone() };
        let node = Node { n, label };
        let op = n.op_type.as_str();
        let unary = |name: &'static str| name;
        let out = match op {
            "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
                let name = match op {
                    "Add" => "add",
                    "Sub" => "subtract",
                    "Mul" => "multiply",
                    "Div" => "divide",
                    _ => "power",
                };
                let (a, b) = (self.input(&node, 0)?, self.input(&node, 1)?);
                self.call(&node, name, vec![a, b], Attrs::new())?
            }
            "Relu" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "Sqrt" | "Neg" | "Erf" => {
                let name = match op {
                    "Relu" => unary("nn.relu"),
                    "Sigmoid" => "sigmoid",
                    "Tanh" => "tanh",
                    "Exp" => "exp",
                    "Log" => "log",
                    "Sqrt" => "sqrt",
                    "Neg" => "negative",
                    _ => "erf",
                };
                let x = self.input(&node, 0)?;
                self.call(&node, name, vec![x], Attrs::new())?
            }
            "Reciprocal" => {
                let x = self.input(&node, 0)?;
                let one = self.scalar(1.0);
                self.call(&node, "divide", vec![one, x], Attrs::new())?
            }
            "Identity" | "Dropout" => self.input(&node, 0)?,
            "MatMul" => {
                let (a, b) = (self.input(&node, 0)?, self.input(&node, 1)?);
                self.call(&node, "nn.matmul", vec![a, b], Attrs::new())?
            }
            "Gemm" => {
                let (a, b) = (self.input(&node, 0)?, self.input(&node, 1)?);
                let (ta, tb) = (node.int("transA", 0) != 0, node.int("transB", 0) != 0);
                let (alpha, beta) = (node.float("alpha", 1.0), node.float("beta", 1.0));
                let mut y = self.call(
                    &node,
                    "nn.matmul",
                    vec![a, b],
                    attrs(&[("transpose_a", AttrValue::Bool(ta)), ("transpose_b", AttrValue::Bool(tb))]),
                )?;
                if alpha != 1.0 {
                    let s = self.scalar(alpha as f64);
                    y = self.call(&node, "multiply", vec![y, s], Attrs::new())?;
                }
                if let Some(c) = self.optional_input(&node, 2) {
                    let c = if beta != 1.0 {
                        let s = self.scalar(beta as f64);
                        self.call(&node, "multiply", vec![c, s], Attrs::new())?
                    } else {
                        c
                    };
                    y = self.call(&node, "add", vec![y, c], Attrs::new())?;
                }
                y
            }
            "Conv" => {
                let (x, w) = (self.input(&node, 0)?, self.input(&node, 1)?);
                if node.ints("kernel_shape").is_some_and(|k| k.len() != 2) {
                    return Err(node.err("only 1-D and 2-D convolution (NCL, NCHW) are supported"));
                }
                let kernel = match node.ints("kernel_shape") {
                    Some(k) => k,
                    None => self.shape_of(&node, w)?.iter().skip(2).map(|&d| d as i64).collect(),
                };
                let pads = self.pads(&node, x, &kernel)?;
                let mut a = vec![
                    ("padding", AttrValue::Ints(pads)),
                    ("strides", AttrValue::Ints(node.ints("strides").unwrap_or_else(|| vec![1, 1]))),
                    ("dilation", AttrValue::Ints(node.ints("dilations").unwrap_or_else(|| vec![1, 1]))),
                    ("groups", AttrValue::Int(node.int("group", 1))),
                ];
                if let Some(k) = node.ints("kernel_shape") {
                    a.push(("kernel_size", AttrValue::Ints(k)));
                }
                let y = self.call(&node, "nn.conv2d", vec![x, w], attrs(&a))?;
                match self.optional_input(&node, 2) {
                    Some(b) => self.call(&node, "nn.bias_add", vec![y, b], Attrs::new())?,
                    None => y,
                }
            }
            "MaxPool" | "AveragePool" => {
                let x = self.input(&node, 0)?;
                let k = node.ints("kernel_shape").ok_or_else(|| node.err("missing kernel_shape"))?;
                if k.len() != 2 {
                    return Err(node.err(format!(
                        "only 1-D and 2-D pooling (NCL, NCHW) are supported, found a {}-D kernel",
                        k.len()
                    )));
                }
                let pads = self.pads(&node, x, &k)?;
                let mut a = vec![
                    ("pool_size", AttrValue::Ints(k)),
                    ("strides", AttrValue::Ints(node.ints("strides").unwrap_or_else(|| vec![1, 1]))),
                    ("padding", AttrValue::Ints(pads)),
                    ("ceil_mode", AttrValue::Bool(node.int("ceil_mode", 0) != 0)),
                ];
                if let Some(d) = node.ints("dilations") {
                    a.push(("dilation", AttrValue::Ints(d)));
                }
                let name = if op == "MaxPool" { "nn.max_pool2d" } else { "nn.avg_pool2d" };
                if op == "AveragePool" {
                    a.push(("count_include_pad", AttrValue::Bool(node.int("count_include_pad", 0) != 0)));
                }
                self.call(&node, name, vec![x], attrs(&a))?
            }
            "GlobalAveragePool" => {
                let x = self.input(&node, 0)?;
                self.call(&node, "nn.global_avg_pool2d", vec![x], Attrs::new())?
            }
            "BatchNormalization" => {
                let args = (0..5).map(|i| self.input(&node, i)).collect::<Result<Vec<_>, _>>()?;
                let bn = self.call(
                    &node,
                    "nn.batch_norm",
                    args,
                    attrs(&[("epsilon", AttrValue::Float(node.float("epsilon", 1e-5) as f64))]),
                )?;
                self.store.tuple_get_item(bn, 0)
            }
            "Flatten" => {
                let x = self.input(&node, 0)?;
                if node.int("axis", 1) != 1 {
                    return Err(node.err("only axis=1 is supported"));
                }
                self.call(&node, "nn.batch_flatten", vec![x], Attrs::new())?
            }
            "Softmax" => {
                let x = self.input(&node, 0)?;
                self.call(&node, "nn.softmax", vec![x], attrs(&[("axis", AttrValue::Int(node.int("axis", -1)))]))?
            }
            "Clip" => {
                let x = self.input(&node, 0)?;
                // Opset ≥ 11: min and max are (constant) inputs; before, attributes.
                let bound = |i: usize, attr: &str, default: f64, me: &Self| -> Result<f64, OnnxError> {
                    match (node.n.input.get(i).filter(|s| !s.is_empty()), me.const_input(&node, i)) {
                        (None, _) => Ok(node.attr(attr).map_or(default, |a| a.f as f64)),
                        (Some(_), Some(t)) if t.numel() == 1 => Ok(t.get_f64(0)),
                        (Some(name), _) => Err(node.err(format!("`{name}` must be a constant scalar"))),
                    }
                };
                let lo = bound(1, "min", f32::MIN as f64, self)?;
                let hi = bound(2, "max", f32::MAX as f64, self)?;
                self.call(
                    &node,
                    "clip",
                    vec![x],
                    attrs(&[("a_min", AttrValue::Float(lo)), ("a_max", AttrValue::Float(hi))]),
                )?
            }
            "Reshape" => {
                let x = self.input(&node, 0)?;
                let shape = self.const_input(&node, 1).ok_or_else(|| node.err("the new shape must be a constant"))?;
                let newshape: Vec<i64> = shape.to_f64_vec().iter().map(|&v| v as i64).collect();
                self.call(&node, "reshape", vec![x], attrs(&[("newshape", AttrValue::Ints(newshape))]))?
            }
            "Transpose" => {
                let x = self.input(&node, 0)?;
                let a = match node.ints("perm") {
                    Some(p) => attrs(&[("axes", AttrValue::Ints(p))]),
                    None => Attrs::new(),
                };
                self.call(&node, "transpose", vec![x], a)?
            }
            "Concat" => {
                let fields = (0..n.input.len()).map(|i| self.input(&node, i)).collect::<Result<Vec<_>, _>>()?;
                let t = self.store.tuple(fields);
                self.call(&node, "concatenate", vec![t], attrs(&[("axis", AttrValue::Int(node.int("axis", 0)))]))?
            }
            "LeakyRelu" => {
                let x = self.input(&node, 0)?;
                let alpha = node.float("alpha", 0.01) as f64;
                self.call(&node, "nn.leaky_relu", vec![x], attrs(&[("alpha", AttrValue::Float(alpha))]))?
            }
            "Equal" | "Less" => {
                let (a, b) = (self.input(&node, 0)?, self.input(&node, 1)?);
                self.call(&node, if op == "Equal" { "equal" } else { "less" }, vec![a, b], Attrs::new())?
            }
            "Not" => {
                let x = self.input(&node, 0)?;
                self.call(&node, "logical_not", vec![x], Attrs::new())?
            }
            "Where" => {
                let (c, x, y) = (self.input(&node, 0)?, self.input(&node, 1)?, self.input(&node, 2)?);
                self.call(&node, "where", vec![c, x, y], Attrs::new())?
            }
            "Gather" => {
                // Negative indices count from the end (mode "wrap").
                let (d, i) = (self.input(&node, 0)?, self.input(&node, 1)?);
                let a =
                    attrs(&[("axis", AttrValue::Int(node.int("axis", 0))), ("mode", AttrValue::Str("wrap".into()))]);
                self.call(&node, "take", vec![d, i], a)?
            }
            "Gelu" => {
                if node.string("approximate").is_some_and(|a| a != "none" && !a.is_empty()) {
                    return Err(node.err("only approximate=\"none\" is supported"));
                }
                // x · (1 + erf(x / √2)) / 2
                let x = self.input(&node, 0)?;
                let k = self.scalar(std::f64::consts::FRAC_1_SQRT_2);
                let xs = self.call(&node, "multiply", vec![x, k], Attrs::new())?;
                let e = self.call(&node, "erf", vec![xs], Attrs::new())?;
                let one = self.scalar(1.0);
                let e1 = self.call(&node, "add", vec![e, one], Attrs::new())?;
                let xe = self.call(&node, "multiply", vec![x, e1], Attrs::new())?;
                let half = self.scalar(0.5);
                self.call(&node, "multiply", vec![xe, half], Attrs::new())?
            }
            "LayerNormalization" => {
                let (x, g) = (self.input(&node, 0)?, self.input(&node, 1)?);
                let b = match self.optional_input(&node, 2) {
                    Some(b) => b,
                    None => {
                        let t = self
                            .const_input(&node, 1)
                            .cloned()
                            .ok_or_else(|| node.err("a bias is needed when the scale is not a constant"))?;
                        self.store.constant(Tensor::zeros(t.dtype(), t.shape().to_vec()))
                    }
                };
                let a = attrs(&[
                    ("axis", AttrValue::Int(node.int("axis", -1))),
                    ("epsilon", AttrValue::Float(node.float("epsilon", 1e-5) as f64)),
                ]);
                self.call(&node, "nn.layer_norm", vec![x, g, b], a)?
            }
            "Cast" => {
                let x = self.input(&node, 0)?;
                let to = dtype(node.int("to", 1) as i32)
                    .ok_or_else(|| node.err(format!("cast to ONNX type {} is not supported", node.int("to", 1))))?;
                self.call(&node, "cast", vec![x], attrs(&[("dtype", AttrValue::DType(to))]))?
            }
            "Squeeze" | "Unsqueeze" | "ReduceSum" | "ReduceMean" | "ReduceMax" => {
                let x = self.input(&node, 0)?;
                // Axes: an attribute before opset 13, an input after.
                let axes: Option<Vec<i64>> = match node.ints("axes") {
                    Some(a) => Some(a),
                    None => self.const_input(&node, 1).map(|t| t.to_f64_vec().iter().map(|&v| v as i64).collect()),
                };
                if node.n.input.get(1).is_some_and(|s| !s.is_empty()) && self.const_input(&node, 1).is_none() {
                    return Err(node.err("the axes must be a constant"));
                }
                match op {
                    "Squeeze" => {
                        let a = axes.map_or_else(Attrs::new, |a| attrs(&[("axis", AttrValue::Ints(a))]));
                        self.call(&node, "squeeze", vec![x], a)?
                    }
                    "Unsqueeze" => {
                        let mut axes = axes.ok_or_else(|| node.err("missing axes"))?;
                        // Insert one axis at a time, in increasing order of the output position.
                        let rank = self.rank_of(&node, x)? as i64 + axes.len() as i64;
                        for a in axes.iter_mut() {
                            if *a < 0 {
                                *a += rank;
                            }
                        }
                        axes.sort_unstable();
                        let mut y = x;
                        for a in axes {
                            y = self.call(&node, "expand_dims", vec![y], attrs(&[("axis", AttrValue::Int(a))]))?;
                        }
                        y
                    }
                    _ => {
                        let name = match op {
                            "ReduceSum" => "sum",
                            "ReduceMean" => "mean",
                            _ => "max",
                        };
                        if axes.is_none() && node.int("noop_with_empty_axes", 0) != 0 {
                            x
                        } else {
                            let mut a = vec![("keepdims", AttrValue::Bool(node.int("keepdims", 1) != 0))];
                            if let Some(axes) = axes {
                                a.push(("axis", AttrValue::Ints(axes)));
                            }
                            self.call(&node, name, vec![x], attrs(&a))?
                        }
                    }
                }
            }
            "Shape" => {
                // Shapes are static: the result is a constant.
                let x = self.input(&node, 0)?;
                let shape: Vec<i64> = self.shape_of(&node, x)?.iter().map(|&d| d as i64).collect();
                let t = Tensor::from_i64(vec![shape.len()], &shape);
                if let Some(name) = n.output.first() {
                    self.constants.insert(name.clone(), t.clone());
                }
                self.store.constant(t)
            }
            "Slice" => {
                let x = self.input(&node, 0)?;
                let konst = |i: usize, me: &Self| -> Result<Option<Vec<i64>>, OnnxError> {
                    match node.n.input.get(i).filter(|s| !s.is_empty()) {
                        None => Ok(None),
                        Some(name) => me
                            .const_input(&node, i)
                            .map(|t| {
                                Some(
                                    t.to_f64_vec()
                                        .iter()
                                        .map(|&v| v.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
                                        .collect(),
                                )
                            })
                            .ok_or_else(|| node.err(format!("`{name}` must be a constant"))),
                    }
                };
                let starts =
                    konst(1, self)?.or_else(|| node.ints("starts")).ok_or_else(|| node.err("missing starts"))?;
                let ends = konst(2, self)?.or_else(|| node.ints("ends")).ok_or_else(|| node.err("missing ends"))?;
                let axes = konst(3, self)?.or_else(|| node.ints("axes"));
                let steps = konst(4, self)?;
                let rank = self.rank_of(&node, x)? as i64;
                let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
                let axes: Vec<i64> = axes.iter().map(|&a| if a < 0 { a + rank } else { a }).collect();
                let mut a = vec![
                    ("begin", AttrValue::Ints(starts)),
                    ("end", AttrValue::Ints(ends)),
                    ("axes", AttrValue::Ints(axes)),
                ];
                if let Some(st) = steps {
                    a.push(("strides", AttrValue::Ints(st)));
                }
                self.call(&node, "strided_slice", vec![x], attrs(&a))?
            }
            "Split" => {
                let x = self.input(&node, 0)?;
                let axis = node.int("axis", 0);
                let sizes: Option<Vec<i64>> = match node.ints("split") {
                    Some(s) => Some(s),
                    None => self.const_input(&node, 1).map(|t| t.to_f64_vec().iter().map(|&v| v as i64).collect()),
                };
                let ios = match sizes {
                    Some(sizes) => {
                        let mut points = Vec::new();
                        let mut acc = 0;
                        for s in &sizes[..sizes.len().saturating_sub(1)] {
                            acc += s;
                            points.push(acc);
                        }
                        AttrValue::Ints(points)
                    }
                    None => AttrValue::Int(n.output.len() as i64),
                };
                let t = self.call(
                    &node,
                    "split",
                    vec![x],
                    attrs(&[("indices_or_sections", ios), ("axis", AttrValue::Int(axis))]),
                )?;
                for (k, name) in n.output.iter().enumerate() {
                    let item = self.store.tuple_get_item(t, k);
                    self.store.set_span(item, Span::node(&node.label));
                    self.values.insert(name.clone(), item);
                }
                return Ok(());
            }
            "Expand" => {
                let x = self.input(&node, 0)?;
                let shape = self.const_input(&node, 1).ok_or_else(|| node.err("the shape must be a constant"))?;
                let shape: Vec<i64> = shape.to_f64_vec().iter().map(|&v| v as i64).collect();
                // ONNX broadcasts both ways: the result has the broadcast of both shapes.
                let own: Vec<usize> = self.shape_of(&node, x)?;
                let target: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
                let full = kiln_ir::relay::op::broadcast_shapes(&own, &target).map_err(|m| node.err(m))?;
                let full: Vec<i64> = full.iter().map(|&d| d as i64).collect();
                self.call(&node, "broadcast_to", vec![x], attrs(&[("shape", AttrValue::Ints(full))]))?
            }
            "Constant" => {
                let t = node
                    .attr("value")
                    .and_then(|a| a.t.as_ref())
                    .ok_or_else(|| node.err("only tensor `value` constants are supported"))?;
                let t = tensor(t).map_err(|m| node.err(m))?;
                if let Some(name) = n.output.first() {
                    self.constants.insert(name.clone(), t.clone());
                }
                self.store.constant(t)
            }
            other => return Err(node.err(format!("operator `{other}` is not supported"))),
        };
        self.store.set_span(out, Span::node(&node.label));
        let name = n.output.first().ok_or_else(|| node.err("the node has no output"))?;
        self.values.insert(name.clone(), out);
        Ok(())
    }
}

/// Import an ONNX model. `input_shapes` fixes dynamic input dimensions by input name.
pub fn import(bytes: &[u8], input_shapes: &[(String, Vec<usize>)]) -> Result<IRModule, OnnxError> {
    let model = ModelProto::parse_from_bytes(bytes).map_err(|e| OnnxError::Corrupt(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or_else(|| OnnxError::Corrupt("the model has no graph".into()))?;
    let mut im = Importer { store: Store::new(), values: HashMap::new(), constants: HashMap::new(), input_shapes };
    for init in &graph.initializer {
        let t = tensor(init).map_err(|m| OnnxError::Corrupt(format!("initializer `{}`: {m}", init.name)))?;
        im.constants.insert(init.name.clone(), t.clone());
        let c = im.store.constant(t);
        im.values.insert(init.name.clone(), c);
    }
    let mut params = Vec::new();
    for input in &graph.input {
        if im.values.contains_key(&input.name) {
            continue; // an initializer listed as an input (older exporters)
        }
        let err = |m: String| OnnxError::Input { input: input.name.clone(), message: m };
        let Some(onnx_protobuf::type_proto::Value::TensorType(tt)) =
            input.type_.as_ref().and_then(|t| t.value.as_ref())
        else {
            return Err(err("only tensor inputs are supported".into()));
        };
        let dt = dtype(tt.elem_type).ok_or_else(|| err(format!("unsupported element type {}", tt.elem_type)))?;
        let given = im.input_shapes.iter().find(|(n, _)| n == &input.name).map(|(_, s)| s.clone());
        let shape: Vec<usize> = match given {
            Some(s) => s,
            None => {
                let dims = tt.shape.as_ref().map(|s| s.dim.clone()).unwrap_or_default();
                dims.iter()
                    .map(|d| match &d.value {
                        Some(onnx_protobuf::tensor_shape_proto::dimension::Value::DimValue(v)) if *v > 0 => {
                            Ok(*v as usize)
                        }
                        _ => Err(err("has a dynamic dimension; fix it with Build::input_shape(name, shape)".into())),
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let v = im.store.var(input.name.clone(), Some(Type::tensor(shape, dt)));
        im.store.set_span(v, Span::node(&input.name));
        im.values.insert(input.name.clone(), v);
        params.push(v);
    }
    for (i, n) in graph.node.iter().enumerate() {
        im.node(n, i)?;
    }
    let outs = graph
        .output
        .iter()
        .map(|o| {
            im.values
                .get(&o.name)
                .copied()
                .ok_or_else(|| OnnxError::Corrupt(format!("graph output `{}` is never computed", o.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let body = match outs.as_slice() {
        [one] => *one,
        _ => im.store.tuple(outs),
    };
    let f = im.store.function(params, body, None, Attrs::new());
    IRModule::from_main(im.store, f).map_err(|e| OnnxError::Corrupt(e.to_string()))
}
