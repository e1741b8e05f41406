//! ONNX → Relay. The message types come from the `onnx-protobuf` crate.
//!
//! - `proto` turns protobuf tensors and element types into kiln's;
//! - `importer` holds the import state (values by name, typed calls that
//!   fold constants) and a typed view of the node being converted;
//! - `ops` is the converter table: one function per ONNX operator family,
//!   each listing the attributes it understands (any other attribute on a
//!   node is an error, never ignored).
//!
//! Graph inputs become `@main`'s parameters (a symbolic dimension must be
//! fixed by name), initializers and `Constant` nodes become constants, nodes
//! become operator calls whose span is the node's name, so every error names
//! the ONNX node, its operator and what is missing.

use std::collections::HashSet;

use onnx_protobuf::{Message, ModelProto, ValueInfoProto};

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::{IRModule, Type};
use kiln_ir::span::Span;
use kiln_ir::Tensor;

mod importer;
mod ops;
mod proto;

use importer::{Importer, Node};

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

/// The default-domain opsets kiln imports (ONNX 1.2 to 1.23)
pub const OPSETS: std::ops::RangeInclusive<i64> = 7..=28;

/// The ONNX operators kiln imports, sorted.
pub fn supported_operators() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = ops::table().keys().copied().collect();
    v.sort_unstable();
    v
}

/// Import an ONNX model. `input_shapes` fixes input shapes by input name: a
/// symbolic dimension (`batch`, `sequence`) must be fixed this way, and a
/// given shape must agree with every fixed dimension the model declares.
pub fn import(bytes: &[u8], input_shapes: &[(String, Vec<usize>)]) -> Result<IRModule, OnnxError> {
    import_with(bytes, input_shapes, &[])
}

/// [`import`], with some graph inputs bound to values known at build time:
/// each becomes a constant (its dtype and shape checked against the
/// declaration), so operators that need it constant (a `Reshape` shape,
/// `Resize` scales, `Slice` starts) accept it, and it is no longer an input.
pub fn import_with(
    bytes: &[u8],
    input_shapes: &[(String, Vec<usize>)],
    bound: &[(String, Tensor)],
) -> Result<IRModule, OnnxError> {
    let model = ModelProto::parse_from_bytes(bytes).map_err(|e| OnnxError::Corrupt(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or_else(|| OnnxError::Corrupt("the model has no graph".into()))?;
    let opset = default_opset(&model)?;
    let mut im = Importer::new(opset);
    let mut defined: HashSet<&str> = HashSet::new();
    let named = |name: &str, what: &str| -> Result<(), OnnxError> {
        match name.is_empty() {
            true => Err(OnnxError::Corrupt(format!("{what} has an empty name"))),
            false => Ok(()),
        }
    };
    for init in &graph.initializer {
        named(&init.name, "an initializer")?;
        let t = proto::tensor(init).map_err(|m| OnnxError::Corrupt(format!("initializer `{}`: {m}", init.name)))?;
        if !defined.insert(init.name.as_str()) {
            return Err(OnnxError::Corrupt(format!("initializer `{}` is defined twice", init.name)));
        }
        let c = im.constant(t);
        im.values.insert(init.name.clone(), c);
    }
    let mut params = Vec::new();
    for input in &graph.input {
        if im.values.contains_key(&input.name) {
            continue; // an initializer listed as an input (older exporters)
        }
        named(&input.name, "a graph input")?;
        if !defined.insert(input.name.as_str()) {
            return Err(OnnxError::Corrupt(format!("graph input `{}` is defined twice", input.name)));
        }
        if let Some((_, t)) = bound.iter().find(|(n, _)| n == &input.name) {
            let ty = input_type(input, Some(t.shape()))?;
            if ty.as_tensor().map(|tt| tt.dtype) != Some(t.dtype()) {
                return Err(OnnxError::Input {
                    input: input.name.clone(),
                    message: format!("is declared {ty}, the bound value is {}", t.dtype()),
                });
            }
            let c = im.constant(t.clone());
            im.values.insert(input.name.clone(), c);
            continue;
        }
        let given = input_shapes.iter().find(|(n, _)| n == &input.name).map(|(_, s)| s.as_slice());
        let ty = input_type(input, given)?;
        let v = im.store.var(input.name.clone(), Some(ty.clone()));
        im.store.set_span(v, Span::node(&input.name));
        im.store.set_checked_type(v, ty);
        im.values.insert(input.name.clone(), v);
        params.push(v);
    }
    let given_names = input_shapes.iter().map(|(n, _)| n).chain(bound.iter().map(|(n, _)| n));
    if let Some(name) = given_names.into_iter().find(|n| !graph.input.iter().any(|i| &i.name == *n)) {
        return Err(OnnxError::Input {
            input: name.to_string(),
            message: "the model has no input of this name".into(),
        });
    }
    let table = ops::table();
    for (index, n) in graph.node.iter().enumerate() {
        let label = if n.name.is_empty() { format!("#{index}") } else { n.name.clone() };
        let node = Node { n, label };
        if !n.domain.is_empty() && n.domain != "ai.onnx" {
            return Err(node.err(format!("operators of domain `{}` are not supported", n.domain)));
        }
        let conv = table.get(n.op_type.as_str()).ok_or_else(|| node.err("this operator is not supported"))?;
        if let Some(a) = n.attribute.iter().find(|a| !conv.attrs.contains(&a.name.as_str())) {
            return Err(node.err(format!("attribute `{}` is not supported", a.name)));
        }
        let outs = (conv.convert)(&mut im, &node)?;
        if outs.len() < node.num_outputs() {
            return Err(node.err(format!("produces {} output(s), the node names {}", outs.len(), node.num_outputs())));
        }
        for (name, e) in n.output.iter().zip(outs) {
            if name.is_empty() {
                continue; // an unused optional output
            }
            if !defined.insert(name.as_str()) {
                return Err(node.err(format!("output `{name}` is already defined (a graph is single-assignment)")));
            }
            im.values.insert(name.clone(), e);
        }
    }
    if graph.output.is_empty() {
        return Err(OnnxError::Corrupt("the graph has no outputs".into()));
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

/// The version of the default operator set, which must be one kiln knows.
fn default_opset(model: &ModelProto) -> Result<i64, OnnxError> {
    let versions: Vec<i64> =
        model.opset_import.iter().filter(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version).collect();
    let v = match versions.as_slice() {
        [] => return Err(OnnxError::Corrupt("the model imports no default-domain operator set".into())),
        [v] => *v,
        _ => return Err(OnnxError::Corrupt("the model imports the default operator set twice".into())),
    };
    if !OPSETS.contains(&v) {
        return Err(OnnxError::Corrupt(format!(
            "operator set {v} is not supported (kiln imports {} to {})",
            OPSETS.start(),
            OPSETS.end()
        )));
    }
    Ok(v)
}

/// The type of a graph input: its declared element type and shape, with
/// symbolic dimensions fixed by `given` (which must agree with the fixed ones).
fn input_type(input: &ValueInfoProto, given: Option<&[usize]>) -> Result<Type, OnnxError> {
    use onnx_protobuf::tensor_shape_proto::dimension::Value as Dim;
    let err = |m: String| OnnxError::Input { input: input.name.clone(), message: m };
    let Some(onnx_protobuf::type_proto::Value::TensorType(tt)) = input.type_.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(err("only tensor inputs are supported".into()));
    };
    let dt = proto::dtype(tt.elem_type)
        .ok_or_else(|| err(format!("element type {} is not supported", proto::onnx_type_name(tt.elem_type))))?;
    let declared = tt.shape.as_ref().map(|s| s.dim.as_slice());
    let shape: Vec<usize> = match (declared, given) {
        (_, Some(g)) => {
            if let Some(dims) = declared {
                if dims.len() != g.len() {
                    return Err(err(format!("the model declares rank {}, the given shape {g:?} has rank {}", dims.len(), g.len())));
                }
                for (k, (d, &s)) in dims.iter().zip(g).enumerate() {
                    if let Some(Dim::DimValue(v)) = &d.value {
                        if *v > 0 && *v as usize != s {
                            return Err(err(format!(
                                "dimension {k} is declared {v}, the given shape {g:?} has {s}"
                            )));
                        }
                    }
                }
            }
            g.to_vec()
        }
        (None, None) => return Err(err("the model declares no shape; give one (Build::input_shape)".into())),
        (Some(dims), None) => dims
            .iter()
            .enumerate()
            .map(|(k, d)| match &d.value {
                Some(Dim::DimValue(v)) if *v >= 0 => Ok(*v as usize),
                Some(Dim::DimParam(p)) if !p.is_empty() => Err(err(format!(
                    "dimension {k} is symbolic (`{p}`); fix it with Build::input_shape(\"{}\", shape) or an input of that shape",
                    input.name
                ))),
                _ => Err(err(format!(
                    "dimension {k} is unknown; fix it with Build::input_shape(\"{}\", shape) or an input of that shape",
                    input.name
                ))),
            })
            .collect::<Result<_, _>>()?,
    };
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let shape = proto::checked_shape(&dims, dt).map_err(err)?;
    Ok(Type::tensor(shape, dt))
}
