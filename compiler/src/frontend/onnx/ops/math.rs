//! Element-wise operators: arithmetic, math functions, activations,
//! comparisons and logic, and the variadic Min/Max/Sum/Mean.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::DataType;

use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(&["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"], binary, &[]);
    t.add(&["And", "Or", "Xor"], binary, &[]);
    t.add(&["BitwiseAnd", "BitwiseOr", "BitwiseXor"], binary, &[]);
    t.add(&["BitShift"], bit_shift, &["direction"]);
    t.add(&["Pow"], pow, &[]);
    t.add(&["Mod"], modulo, &["fmod"]);
    t.add(
        &[
            "Abs",
            "Neg",
            "Sign",
            "Floor",
            "Ceil",
            "Round",
            "Exp",
            "Log",
            "Sqrt",
            "Sin",
            "Cos",
            "Tan",
            "Asin",
            "Acos",
            "Atan",
            "Sinh",
            "Cosh",
            "Asinh",
            "Acosh",
            "Atanh",
            "Erf",
            "Sigmoid",
            "Tanh",
            "Relu",
            "Not",
            "IsNaN",
            "BitwiseNot",
        ],
        unary,
        &[],
    );
    t.add(&["IsInf"], is_inf, &["detect_negative", "detect_positive"]);
    t.add(&["Reciprocal"], reciprocal, &[]);
    t.add(&["Identity"], identity, &[]);
    t.add(&["Dropout"], dropout, &["seed", "ratio", "is_test"]);
    t.add(&["Clip"], clip, &["min", "max"]);
    t.add(&["Where"], where_, &[]);
    t.add(&["Max", "Min", "Sum", "Mean"], variadic, &[]);
    t.add(&["Cast"], cast, &["to", "saturate"]);
    t.add(&["CastLike"], cast_like, &["saturate"]);
    t.add(&["LeakyRelu"], leaky_relu, &["alpha"]);
    t.add(&["PRelu"], prelu, &[]);
    t.add(&["Elu", "Celu"], elu, &["alpha"]);
    t.add(&["Selu"], selu, &["alpha", "gamma"]);
    t.add(&["ThresholdedRelu"], thresholded_relu, &["alpha"]);
    t.add(&["HardSigmoid"], hard_sigmoid, &["alpha", "beta"]);
    t.add(&["HardSwish"], hard_swish, &[]);
    t.add(&["Softplus", "Softsign", "Mish"], soft, &[]);
    t.add(&["Gelu"], gelu, &["approximate"]);
    t.add(&["Shrink"], shrink, &["bias", "lambd"]);
}

fn float_input(im: &mut Importer, node: &Node, x: ExprId) -> Result<DataType, OnnxError> {
    let dt = im.dtype_of(node, x)?;
    if !dt.is_float() {
        return Err(node.err(format!("needs a floating-point input, found {dt}")));
    }
    Ok(dt)
}

fn binary(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    let logical = matches!(node.op(), "And" | "Or" | "Xor");
    if logical && im.dtype_of(node, a)? != DataType::Bool {
        return Err(node.err("needs bool inputs"));
    }
    let op = match node.op() {
        "Add" => "add",
        "Sub" => "subtract",
        "Mul" => "multiply",
        "Div" => "divide",
        "Equal" => "equal",
        "Less" => "less",
        "Greater" => "greater",
        "LessOrEqual" => "less_equal",
        "GreaterOrEqual" => "greater_equal",
        "And" => "logical_and",
        "Or" => "logical_or",
        "Xor" => "logical_xor",
        "BitwiseAnd" => "bitwise_and",
        "BitwiseOr" => "bitwise_or",
        _ => "bitwise_xor",
    };
    one(im.op(node, op, vec![a, b])?)
}

/// `x << y` or `x >> y` (arithmetic on signed types, which recent opsets
/// allow); amounts outside `[0, bits)` shift every bit out.
fn bit_shift(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    let dt = im.dtype_of(node, a)?;
    if !dt.is_int() {
        return Err(node.err(format!("needs integer inputs, found {dt}")));
    }
    let op = match node.string("direction")?.as_deref() {
        Some("LEFT") => "left_shift",
        Some("RIGHT") => "right_shift",
        Some(d) => return Err(node.err(format!("direction `{d}` is not LEFT or RIGHT"))),
        None => return Err(node.err("missing attribute `direction`")),
    };
    one(im.op(node, op, vec![a, b])?)
}

/// `x ^ y`. The exponent may have another type than the base (opset 12+);
/// integer powers are computed in float32 and rounded back.
fn pow(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, y) = (im.input(node, 0)?, im.input(node, 1)?);
    let (dx, dy) = (im.dtype_of(node, x)?, im.dtype_of(node, y)?);
    if dx.is_float() {
        let y = if dy == dx { y } else { cast_to(im, node, y, dx)? };
        return one(im.op(node, "power", vec![x, y])?);
    }
    if !dx.is_int() || dy == DataType::Bool {
        return Err(node.err(format!("power of {dx} by {dy} is not supported")));
    }
    let xf = cast_to(im, node, x, DataType::F32)?;
    let yf = cast_to(im, node, y, DataType::F32)?;
    let p = im.op(node, "power", vec![xf, yf])?;
    let r = im.op(node, "round", vec![p])?;
    one(cast_to(im, node, r, dx)?)
}

fn modulo(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (a, b) = (im.input(node, 0)?, im.input(node, 1)?);
    let fmod = node.int("fmod", 0)? != 0;
    one(im.op(node, if fmod { "mod" } else { "floor_mod" }, vec![a, b])?)
}

fn unary(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let op = match node.op() {
        "Abs" => "abs",
        "Neg" => "negative",
        "Sign" => "sign",
        "Floor" => "floor",
        "Ceil" => "ceil",
        "Round" => "round",
        "Exp" => "exp",
        "Log" => "log",
        "Sqrt" => "sqrt",
        "Sin" => "sin",
        "Cos" => "cos",
        "Tan" => "tan",
        "Asin" => "asin",
        "Acos" => "acos",
        "Atan" => "atan",
        "Sinh" => "sinh",
        "Cosh" => "cosh",
        "Asinh" => "asinh",
        "Acosh" => "acosh",
        "Atanh" => "atanh",
        "Erf" => "erf",
        "Sigmoid" => "sigmoid",
        "Tanh" => "tanh",
        "Relu" => "nn.relu",
        "Not" => "logical_not",
        "IsNaN" => "isnan",
        _ => "bitwise_not",
    };
    one(im.op(node, op, vec![x])?)
}

fn is_inf(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = float_input(im, node, x)?;
    let (neg, pos) = (node.int("detect_negative", 1)? != 0, node.int("detect_positive", 1)? != 0);
    let test = |im: &mut Importer, v: f64| -> Result<ExprId, OnnxError> {
        let c = im.scalar(dt, v);
        im.op(node, "equal", vec![x, c])
    };
    let r = match (neg, pos) {
        (true, true) => {
            let (a, b) = (test(im, f64::NEG_INFINITY)?, test(im, f64::INFINITY)?);
            im.op(node, "logical_or", vec![a, b])?
        }
        (true, false) => test(im, f64::NEG_INFINITY)?,
        (false, true) => test(im, f64::INFINITY)?,
        (false, false) => {
            let shape = im.shape_of(node, x)?;
            im.constant(kiln_ir::Tensor::zeros(DataType::Bool, shape))
        }
    };
    one(r)
}

fn reciprocal(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = float_input(im, node, x)?;
    let c = im.scalar(dt, 1.0);
    one(im.op(node, "divide", vec![c, x])?)
}

fn identity(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    one(im.input(node, 0)?)
}

/// Inference: the identity. The mask output and training mode are refused.
fn dropout(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    if node.int("is_test", 1)? == 0 && im.opset < 7 {
        return Err(node.err("training-mode dropout is not supported"));
    }
    if let Some(t) = im.const_input(node, 2, "training_mode")? {
        if t.get_f64(0) != 0.0 {
            return Err(node.err("training_mode=true is not supported (kiln compiles inference)"));
        }
    }
    if node.num_outputs() > 1 {
        let shape = im.shape_of(node, x)?;
        let mask = im.constant(kiln_ir::Tensor::full(DataType::Bool, shape, 1.0));
        return Ok(vec![x, mask]);
    }
    one(x)
}

/// `min(max(x, lo), hi)` as NumPy's clip: bounds from inputs (opset 11+) or
/// attributes; an absent bound does not apply.
fn clip(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = im.dtype_of(node, x)?;
    let bound = |im: &mut Importer, i: usize, attr: &str| -> Result<Option<ExprId>, OnnxError> {
        if let Some(b) = im.optional_input(node, i)? {
            return Ok(Some(b));
        }
        Ok(node.opt_float(attr)?.map(|v| im.scalar(dt, v as f64)))
    };
    let lo = bound(im, 1, "min")?;
    let hi = bound(im, 2, "max")?;
    // Both bounds constant scalars within the dtype, in order: one `clip`.
    let konst = |im: &Importer, b: Option<ExprId>| {
        b.and_then(|b| im.constant_value(b)).filter(|t| t.numel() == 1).map(|t| t.get_f64(0))
    };
    let (clo, chi) = (konst(im, lo), konst(im, hi));
    let (dmin, dmax) = DataType::value_range(dt);
    if let (Some(l), Some(h)) = (clo, chi) {
        if l <= h && dt.is_float() && l.is_finite() && h.is_finite() {
            let a = attrs(&[("a_min", AttrValue::Float(l)), ("a_max", AttrValue::Float(h))]);
            return one(im.call(node, "clip", vec![x], a)?);
        }
    }
    let mut y = x;
    if let Some(lo) = lo.filter(|_| clo.is_none_or(|l| l > dmin)) {
        y = im.op(node, "maximum", vec![y, lo])?;
    }
    if let Some(hi) = hi.filter(|_| chi.is_none_or(|h| h < dmax)) {
        y = im.op(node, "minimum", vec![y, hi])?;
    }
    one(y)
}

fn where_(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (c, x, y) = (im.input(node, 0)?, im.input(node, 1)?, im.input(node, 2)?);
    one(im.op(node, "where", vec![c, x, y])?)
}

fn variadic(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let xs = im.inputs(node)?;
    let Some((&first, rest)) = xs.split_first() else { return Err(node.err("needs at least one input")) };
    let op = match node.op() {
        "Max" => "maximum",
        "Min" => "minimum",
        _ => "add",
    };
    let mut y = first;
    for &x in rest {
        y = im.op(node, op, vec![y, x])?;
    }
    if node.op() == "Mean" {
        let dt = float_input(im, node, y)?;
        let n = im.scalar(dt, xs.len() as f64);
        y = im.op(node, "divide", vec![y, n])?;
    }
    one(y)
}

pub(crate) fn cast_to(im: &mut Importer, node: &Node, x: ExprId, to: DataType) -> Result<ExprId, OnnxError> {
    if im.dtype_of(node, x)? == to {
        return Ok(x);
    }
    im.call(node, "cast", vec![x], attrs(&[("dtype", AttrValue::DType(to))]))
}

fn cast(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let code = node.opt_int("to")?.ok_or_else(|| node.err("missing attribute `to`"))?;
    let to = crate::frontend::onnx::proto::dtype(code as i32).ok_or_else(|| {
        node.err(format!("cast to {} is not supported", crate::frontend::onnx::proto::onnx_type_name(code as i32)))
    })?;
    one(cast_to(im, node, x, to)?)
}

fn cast_like(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, like) = (im.input(node, 0)?, im.input(node, 1)?);
    let to = im.dtype_of(node, like)?;
    one(cast_to(im, node, x, to)?)
}

fn leaky_relu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let alpha = node.float("alpha", 0.01)? as f64;
    one(im.call(node, "nn.leaky_relu", vec![x], attrs(&[("alpha", AttrValue::Float(alpha))]))?)
}

/// `x < 0 ? slope·x : x`, the slope broadcast (unidirectionally) to x.
fn prelu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let (x, slope) = (im.input(node, 0)?, im.input(node, 1)?);
    let dt = im.dtype_of(node, x)?;
    let zero = im.scalar(dt, 0.0);
    let neg = im.op(node, "less", vec![x, zero])?;
    let scaled = im.op(node, "multiply", vec![x, slope])?;
    one(im.op(node, "where", vec![neg, scaled, x])?)
}

/// `x > 0 ? x : α(e^(x/k) − 1)` (Elu: k = 1; Celu: k = α, which equals
/// Celu's `max(0, x) + min(0, α(e^(x/α) − 1))`).
fn elu_of(im: &mut Importer, node: &Node, x: ExprId, alpha: f64, celu: bool) -> Result<ExprId, OnnxError> {
    let dt = float_input(im, node, x)?;
    let (zero, a, one_) = (im.scalar(dt, 0.0), im.scalar(dt, alpha), im.scalar(dt, 1.0));
    let inner = if celu { im.op(node, "divide", vec![x, a])? } else { x };
    let e = im.op(node, "exp", vec![inner])?;
    let em1 = im.op(node, "subtract", vec![e, one_])?;
    let neg = im.op(node, "multiply", vec![em1, a])?;
    let pos = im.op(node, "less", vec![zero, x])?;
    im.op(node, "where", vec![pos, x, neg])
}

fn elu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let alpha = node.float("alpha", 1.0)? as f64;
    one(elu_of(im, node, x, alpha, node.op() == "Celu")?)
}

/// `γ · Elu(x; α)`.
fn selu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let alpha = node.float("alpha", 1.673_263_2)? as f64;
    let gamma = node.float("gamma", 1.050_701)? as f64;
    let y = elu_of(im, node, x, alpha, false)?;
    let dt = im.dtype_of(node, y)?;
    let g = im.scalar(dt, gamma);
    one(im.op(node, "multiply", vec![y, g])?)
}

fn thresholded_relu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = float_input(im, node, x)?;
    let alpha = node.float("alpha", 1.0)? as f64;
    let (a, zero) = (im.scalar(dt, alpha), im.scalar(dt, 0.0));
    let above = im.op(node, "less", vec![a, x])?;
    one(im.op(node, "where", vec![above, x, zero])?)
}

/// `max(0, min(1, αx + β))`.
fn hard_sigmoid_of(im: &mut Importer, node: &Node, x: ExprId, alpha: f64, beta: f64) -> Result<ExprId, OnnxError> {
    let dt = float_input(im, node, x)?;
    let (a, b) = (im.scalar(dt, alpha), im.scalar(dt, beta));
    let ax = im.op(node, "multiply", vec![x, a])?;
    let y = im.op(node, "add", vec![ax, b])?;
    im.call(node, "clip", vec![y], attrs(&[("a_min", AttrValue::Float(0.0)), ("a_max", AttrValue::Float(1.0))]))
}

fn hard_sigmoid(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let (alpha, beta) = (node.float("alpha", 0.2)? as f64, node.float("beta", 0.5)? as f64);
    one(hard_sigmoid_of(im, node, x, alpha, beta)?)
}

/// `x · HardSigmoid(x; 1/6, 1/2)`.
fn hard_swish(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let h = hard_sigmoid_of(im, node, x, 1.0 / 6.0, 0.5)?;
    one(im.op(node, "multiply", vec![x, h])?)
}

/// Softplus `ln(1 + eˣ)`, Softsign `x / (1 + |x|)`, Mish `x · tanh(softplus(x))`.
fn soft(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = float_input(im, node, x)?;
    let one_ = im.scalar(dt, 1.0);
    if node.op() == "Softsign" {
        let a = im.op(node, "abs", vec![x])?;
        let d = im.op(node, "add", vec![a, one_])?;
        return one(im.op(node, "divide", vec![x, d])?);
    }
    let e = im.op(node, "exp", vec![x])?;
    let s = im.op(node, "add", vec![e, one_])?;
    let sp = im.op(node, "log", vec![s])?;
    if node.op() == "Softplus" {
        return one(sp);
    }
    let t = im.op(node, "tanh", vec![sp])?;
    one(im.op(node, "multiply", vec![x, t])?)
}

/// Exact `x·(1 + erf(x/√2))/2` or the tanh approximation.
fn gelu(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = float_input(im, node, x)?;
    let approx = node.string("approximate")?.unwrap_or_else(|| "none".into());
    let (one_, half) = (im.scalar(dt, 1.0), im.scalar(dt, 0.5));
    let inner = match approx.as_str() {
        "none" => {
            let k = im.scalar(dt, std::f64::consts::FRAC_1_SQRT_2);
            let xs = im.op(node, "multiply", vec![x, k])?;
            im.op(node, "erf", vec![xs])?
        }
        "tanh" => {
            // tanh(√(2/π) · (x + 0.044715 x³))
            let (c, k) = (im.scalar(dt, 0.044_715), im.scalar(dt, (2.0 / std::f64::consts::PI).sqrt()));
            let x2 = im.op(node, "multiply", vec![x, x])?;
            let x3 = im.op(node, "multiply", vec![x2, x])?;
            let cx3 = im.op(node, "multiply", vec![x3, c])?;
            let s = im.op(node, "add", vec![x, cx3])?;
            let ks = im.op(node, "multiply", vec![s, k])?;
            im.op(node, "tanh", vec![ks])?
        }
        other => return Err(node.err(format!("approximate=\"{other}\" is not a Gelu mode"))),
    };
    let e1 = im.op(node, "add", vec![inner, one_])?;
    let xe = im.op(node, "multiply", vec![x, e1])?;
    one(im.op(node, "multiply", vec![xe, half])?)
}

/// `x < −λ ? x + bias : x > λ ? x − bias : 0`.
fn shrink(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let dt = im.dtype_of(node, x)?;
    let (bias, lambd) = (node.float("bias", 0.0)? as f64, node.float("lambd", 0.5)? as f64);
    let (b, l, nl, zero) = (im.scalar(dt, bias), im.scalar(dt, lambd), im.scalar(dt, -lambd), im.scalar(dt, 0.0));
    let low = im.op(node, "less", vec![x, nl])?;
    let high = im.op(node, "less", vec![l, x])?;
    let plus = im.op(node, "add", vec![x, b])?;
    let minus = im.op(node, "subtract", vec![x, b])?;
    let hi = im.op(node, "where", vec![high, minus, zero])?;
    one(im.op(node, "where", vec![low, plus, hi])?)
}
