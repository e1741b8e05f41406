//! Structural fuzzing of the ONNX importer. Small valid seed models (a CNN,
//! an MLP, the exporters' Shape → Gather → Concat → Reshape pattern, Split
//! and Slice, shape-making operators fed constants, Attention and
//! LayerNormalization) are mutated the way broken or hostile files are:
//! wrong element types, missing, undefined or duplicated names, cycles and
//! broken node order, dimensions of 0, negative or 2^40, data shorter or
//! longer than the shape, absurd constant shapes, bad attributes, opsets and
//! outputs. Every mutant imports or fails with an error, never a panic; one
//! that imports also goes through the compiler's middle end
//! (`optimize_and_plan`). Absurd sizes are refused before anything is
//! allocated: the process stays small. The tests at the end pin the defects
//! this fuzzing found (overflowing size arithmetic in type relations and
//! ConvTranspose, absurd intermediate shapes).
//!
//! The mutations' choices come from proptest (a fixed seed; shrunk to the
//! smallest failing mutant, which the failure shows with what it mutated);
//! `KILN_FUZZ_MUTANTS=<n>` tries more (10,000 by default).

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use kiln::build::optimize_and_plan;
use kiln::frontend::onnx::proto::attribute_proto::AttributeType;
use kiln::frontend::onnx::proto::tensor_proto::DataLocation;
use kiln::frontend::onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln::frontend::onnx::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use kiln::frontend::onnx::{self, OnnxError};
use kiln::relay::IRModule;
use kiln::transform::PassContext;
use kiln::{DataType, Tensor};
use prost::Message;

const BIG: i64 = 1 << 40;
/// Element types: valid ones kiln has and lacks, and codes no ONNX type has.
const DTYPES: [i32; 13] = [0, 1, 2, 3, 6, 7, 9, 10, 11, 16, 17, 999, -1];
const DIMS: [i64; 9] = [0, -1, -7, BIG, i64::MAX, i64::MIN, 1 << 31, 1 << 32, 3];
const VALUES: [i64; 9] = [0, -1, -7, BIG, i64::MAX, i64::MIN, 1 << 31, 2, 100];

/// The mutations' random choices, drawn (and shrunk) by proptest.
#[path = "../ir/tests/support/randomized.rs"]
mod randomized;

use randomized::Choices;

// ---- building models ----------------------------------------------------------

/// A dimension of a declared shape: a size, or a symbolic name.
fn dim(value: dimension::Value) -> Dimension {
    Dimension { value: Some(value), ..Default::default() }
}

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let shape = TensorShapeProto { dim: dims.iter().map(|&d| dim(dimension::Value::DimValue(d))).collect() };
    let tt = type_proto::Tensor { elem_type: Some(elem), shape: Some(shape) };
    let ty = TypeProto { value: Some(type_proto::Value::TensorType(tt)), ..Default::default() };
    ValueInfoProto { name: Some(name.into()), r#type: Some(ty), ..Default::default() }
}

fn f32s(name: &str, dims: &[i64], vals: &[f32]) -> TensorProto {
    let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

fn i64s(name: &str, dims: &[i64], vals: &[i64]) -> TensorProto {
    let (name, dims, int64_data) = (Some(name.into()), dims.to_vec(), vals.to_vec());
    TensorProto { name, dims, data_type: Some(7), int64_data, ..Default::default() }
}

/// A 1-D int64 initializer.
fn vec64(name: &str, vals: &[i64]) -> TensorProto {
    i64s(name, &[vals.len() as i64], vals)
}

fn attr(name: &str, ty: AttributeType, set: impl FnOnce(&mut AttributeProto)) -> AttributeProto {
    let mut a = AttributeProto { name: Some(name.into()), r#type: Some(ty.into()), ..Default::default() };
    set(&mut a);
    a
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    attr(name, AttributeType::Ints, |a| a.ints = v.to_vec())
}

fn int(name: &str, v: i64) -> AttributeProto {
    attr(name, AttributeType::Int, |a| a.i = Some(v))
}

fn string(name: &str, v: &str) -> AttributeProto {
    attr(name, AttributeType::String, |a| a.s = Some(v.as_bytes().to_vec()))
}

fn tensor(name: &str, t: TensorProto) -> AttributeProto {
    attr(name, AttributeType::Tensor, |a| a.t = Some(t))
}

/// A node; inputs and outputs are space-separated names, `_` the empty name.
fn n(op: &str, ins: &str, outs: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    let names = |s: &str| s.split_whitespace().map(|v| if v == "_" { String::new() } else { v.into() }).collect();
    let mut n = NodeProto { op_type: Some(op.into()), input: names(ins), output: names(outs), ..Default::default() };
    n.attribute = attrs;
    n.name = Some(format!("{op}_{}", n.output.first().map_or("", String::as_str)));
    n
}

fn model(v: i64, ins: Vec<ValueInfoProto>, inits: Vec<TensorProto>, nodes: Vec<NodeProto>, outs: &str) -> ModelProto {
    let output = outs.split_whitespace().map(|o| vi(o, 1, &[])).collect();
    let (name, input, initializer, node) = (Some("fuzz".into()), ins, inits, nodes);
    let g = GraphProto { name, input, initializer, node, output, ..Default::default() };
    let o = OperatorSetIdProto { version: Some(v), ..Default::default() };
    ModelProto { ir_version: Some(8), opset_import: vec![o], graph: Some(g), ..Default::default() }
}

fn wave(n: usize, s: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * s).sin()).collect()
}

/// The seed models, each valid.
fn seeds() -> Vec<(&'static str, ModelProto)> {
    let (x4, x2) = (vi("x", 1, &[1, 2, 6, 6]), vi("x", 1, &[2, 3]));
    let cnn = model(
        17,
        vec![x4],
        vec![
            f32s("W", &[3, 2, 3, 3], &wave(54, 0.3)),
            f32s("B", &[3], &wave(3, 1.0)),
            vec64("shape", &[1, 27]),
            f32s("W2", &[4, 27], &wave(108, 0.1)),
            f32s("C", &[4], &wave(4, 0.5)),
        ],
        vec![
            n("Conv", "x W B", "h", vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])]),
            n("Relu", "h", "r", vec![]),
            n("MaxPool", "r", "p", vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])]),
            n("Reshape", "p shape", "f", vec![]),
            n("Gemm", "f W2 C", "y", vec![int("transB", 1), attr("alpha", AttributeType::Float, |a| a.f = Some(0.5))]),
        ],
        "y",
    );
    let mlp = model(
        13,
        vec![vi("x", 1, &[2, 8])],
        vec![f32s("W", &[8, 6], &wave(48, 0.2)), f32s("b", &[6], &wave(6, 0.7))],
        vec![
            n("MatMul", "x W", "h", vec![]),
            n("Add", "h b", "a", vec![]),
            n("Softmax", "a", "y", vec![int("axis", -1)]),
        ],
        "y",
    );
    let exporter = model(
        17,
        vec![vi("x", 1, &[2, 3, 4])],
        vec![i64s("zero", &[], &[0]), vec64("ax0", &[0])],
        vec![
            n("Shape", "x", "s", vec![]),
            n("Gather", "s zero", "n", vec![int("axis", 0)]),
            n("Unsqueeze", "n ax0", "n1", vec![]),
            n("Constant", "", "m1", vec![tensor("value", vec64("m1", &[-1]))]),
            n("Concat", "n1 m1", "ns", vec![int("axis", 0)]),
            n("Reshape", "x ns", "y", vec![]),
        ],
        "y",
    );
    let split = model(
        17,
        vec![vi("x", 1, &[4, 6])],
        vec![vec64("sp", &[2, 4]), vec64("st", &[0]), vec64("en", &[6]), vec64("ax", &[1]), vec64("steps", &[2])],
        vec![
            n("Split", "x sp", "a b", vec![int("axis", 1)]),
            n("Concat", "b a", "c", vec![int("axis", 1)]),
            n("Slice", "c st en ax steps", "d", vec![]),
            n("Transpose", "d", "y", vec![ints("perm", &[1, 0])]),
        ],
        "y",
    );
    let scalars = [i64s("r0", &[], &[0]), i64s("r1", &[], &[6]), i64s("r2", &[], &[1])];
    let shapes = model(
        17,
        vec![x2],
        [vec64("cs", &[2, 3]), vec64("es", &[2, 2, 3]), vec64("reps", &[2, 1]), vec64("pads", &[0, 1, 0, 1])]
            .into_iter()
            .chain(scalars)
            .chain([vec64("uax", &[0, 1]), f32s("scales", &[4], &[1.0, 1.0, 2.0, 2.0])])
            .collect(),
        vec![
            n("ConstantOfShape", "cs", "c", vec![tensor("value", f32s("one", &[1], &[1.0]))]),
            n("Add", "x c", "a", vec![]),
            n("Expand", "a es", "e", vec![]),
            n("Tile", "x reps", "t", vec![]),
            n("Range", "r0 r1 r2", "r", vec![]),
            n("Pad", "x pads", "p", vec![string("mode", "edge")]),
            n("Unsqueeze", "x uax", "x4", vec![]),
            n("Resize", "x4 _ scales", "z", vec![string("mode", "linear")]),
            // A 2× nearest upsampling (imported as `nn.upsampling`).
            n(
                "Resize",
                "x4 _ scales",
                "u",
                vec![string("coordinate_transformation_mode", "asymmetric"), string("nearest_mode", "floor")],
            ),
        ],
        "e t r p z u",
    );
    let qkv = ["q", "k", "v"].map(|s| vi(s, 1, &[1, 4, 8])).to_vec();
    let heads = vec![int("q_num_heads", 2), int("kv_num_heads", 2), int("is_causal", 1)];
    let attention = model(
        23,
        qkv,
        vec![f32s("g", &[8], &wave(8, 0.4)), f32s("bt", &[8], &wave(8, 0.9))],
        vec![n("Attention", "q k v", "o", heads), n("LayerNormalization", "o g bt", "y", vec![int("axis", -1)])],
        "y",
    );
    let seeds = [("cnn", cnn), ("mlp", mlp), ("exporter", exporter), ("split", split), ("shapes", shapes)];
    seeds.into_iter().chain([("attention", attention)]).collect()
}

// ---- importing ---------------------------------------------------------------

thread_local! {
    /// Where the last panic on this thread happened, for the report.
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs `f`, catching a panic as its message and location.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            PANIC_AT.with(|p| *p.borrow_mut() = at);
            default(info);
        }));
    });
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        format!("{} at {}", msg.unwrap_or_default(), PANIC_AT.with(|p| p.borrow().clone()))
    })
}

/// The compiler's middle end as `kiln build` runs it: the Relay pipeline,
/// then the executor plan with its kernels lowered and scheduled.
fn optimize(m: IRModule) -> Result<(), String> {
    optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3))).map(|_| ()).map_err(|e| e.to_string())
}

enum Outcome {
    Imported,
    Refused,
    Panicked(String),
}

/// Import (and, when that works, optimize) without letting a panic escape.
fn run(m: &ModelProto) -> Outcome {
    let bytes = m.encode_to_vec();
    match catch(|| onnx::import(&bytes, &[])) {
        Err(p) => Outcome::Panicked(format!("import: {p}")),
        Ok(Err(_)) => Outcome::Refused,
        Ok(Ok(module)) => match catch(|| optimize(module)) {
            Err(p) => Outcome::Panicked(format!("optimize_and_plan: {p}")),
            Ok(_) => Outcome::Imported,
        },
    }
}

/// Imports `m` expecting an error that mentions one of `words`.
fn refused(what: &str, m: &ModelProto, words: &[&str]) {
    let bytes = m.encode_to_vec();
    match catch(|| onnx::import(&bytes, &[])) {
        Err(p) => panic!("{what}: the importer panicked: {p}"),
        Ok(Ok(_)) => panic!("{what}: imported"),
        Ok(Err(e)) => {
            let s = e.to_string();
            assert!(words.iter().any(|w| s.contains(w)), "{what}: the error `{s}` mentions none of {words:?}");
        }
    }
}

/// The peak resident set of this process stays under 2 GiB (Linux).
fn assert_small_process() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().strip_suffix("kB"));
    if let Some(kb) = kb.and_then(|v| v.trim().parse::<u64>().ok()) {
        assert!(kb < 2 << 20, "peak resident set {} MiB: something large was allocated", kb >> 10);
    }
}

// ---- mutations -----------------------------------------------------------------

fn defined_names(g: &GraphProto) -> Vec<String> {
    let inits = g.initializer.iter().map(|t| t.name().to_string());
    let outs = g.node.iter().flat_map(|n| n.output.iter().cloned());
    g.input.iter().map(|i| i.name().to_string()).chain(inits).chain(outs).filter(|s| !s.is_empty()).collect()
}

/// Every stored tensor: the initializers and the tensors of node attributes.
fn tensors_mut(g: &mut GraphProto) -> Vec<&mut TensorProto> {
    let attrs = g.node.iter_mut().flat_map(|n| n.attribute.iter_mut().filter_map(|a| a.t.as_mut()));
    g.initializer.iter_mut().chain(attrs).collect()
}

fn input_tensor_type(v: &mut ValueInfoProto) -> Option<&mut type_proto::Tensor> {
    match v.r#type.as_mut()?.value.as_mut()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

fn show(a: &AttributeProto) -> String {
    format!("`{}` ({:?}) i={} ints={:?} f={}", a.name(), a.r#type, a.i(), a.ints, a.f())
}

/// What a node may become (`_`: no operator).
const OPS: &str =
    "Relu Conv ConvTranspose Reshape Split Concat Attention Resize Tile Range ConstantOfShape Pad Slice Dropout Trilu TopK _";

/// Applies one random structural mutation; says what it did.
fn mutate(m: &mut ModelProto, r: &mut Choices) -> String {
    let kind = r.below(18);
    if kind == 11 {
        let Some(o) = m.opset_import.first_mut() else { return "no opset to mutate".into() };
        match r.below(4) {
            0 => m.opset_import.clear(),
            1 => o.version = Some(r.pick(&[0, 1, 6, 29, 10_000, -1, i64::MAX])),
            2 => m.opset_import.extend_from_within(..1),
            _ => o.domain = Some("com.microsoft".into()),
        }
        return format!("opsets {:?}", m.opset_import.iter().map(|o| (o.domain(), o.version())).collect::<Vec<_>>());
    }
    let g = m.graph.get_or_insert_with(GraphProto::default);
    let names = defined_names(g);
    let name = names[r.below(names.len())].clone();
    let (nodes, inputs, k) = (g.node.len(), g.input.len(), r.below(g.node.len()));
    let outputless = g.node.iter().any(|n| n.output.is_empty());
    if (inputs == 0 && matches!(kind, 1 | 7 | 15))
        || (outputless && matches!(kind, 3 | 4 | 14))
        || (g.output.is_empty() && kind == 12)
    {
        return "nothing to mutate".into();
    }
    match kind {
        0 | 6 | 8 | 9 | 17 => return mutate_tensor(g, kind, r),
        1 | 7 | 15 => return mutate_input(g, kind, r),
        4 => {
            let (a, b) = (r.below(nodes), r.below(nodes));
            let (a, b) = (a.min(b), a.max(b));
            let (first, later) = (g.node[a].output[0].clone(), g.node[b].output[0].clone());
            g.node[a].input.push(later);
            g.node[b].input.insert(0, first);
            return format!("cycle: nodes {a} and {b} consume each other's output");
        }
        5 => {
            let b = r.below(nodes);
            g.node.swap(k, b);
            return format!("nodes {k} and {b} swapped");
        }
        12 => {
            match r.below(4) {
                0 => g.output.clear(),
                1 => g.output[0].name = Some("ghost".into()),
                2 => g.output.push(g.output[0].clone()),
                _ => g.output[0].name = Some(name),
            }
            return format!("graph outputs {:?}", g.output.iter().map(|o| o.name()).collect::<Vec<_>>());
        }
        _ => {}
    }
    let n = &mut g.node[k];
    let j = r.below(n.input.len());
    match kind {
        2 => match (r.below(4), n.input.is_empty()) {
            (_, true) => n.input.push("x".into()),
            (0, _) => _ = n.input.remove(j),
            (1, _) => n.input[j] = "ghost".into(),
            (2, _) => n.input[j] = String::new(),
            _ => n.input[j] = name,
        },
        3 => n.output[0] = name,
        10 if n.attribute.is_empty() || r.below(4) == 0 => n.attribute.push(match r.below(3) {
            0 => int("axis", r.pick(&VALUES)),
            1 => ints("axes", &[r.pick(&VALUES)]),
            _ => attr("bogus", AttributeType::Float, |a| a.f = Some(f32::NAN)),
        }),
        10 if r.below(6) == 0 => _ = n.attribute.remove(r.below(n.attribute.len())),
        10 => {
            let a = r.below(n.attribute.len());
            let a = &mut n.attribute[a];
            match r.below(6) {
                0 => a.r#type = Some(r.pick(&[0, 1, 2, 3, 4, 6, 7, 8, 99])),
                1 => a.ints.clear(),
                2 if !a.ints.is_empty() => {
                    let d = r.below(a.ints.len());
                    a.ints[d] = r.pick(&VALUES);
                }
                3 => a.i = Some(r.pick(&VALUES)),
                4 => a.t = None,
                _ => a.f = Some(f32::INFINITY),
            }
        }
        13 => n.op_type = Some(r.pick(&OPS.split(' ').collect::<Vec<_>>()).replace('_', "")),
        14 => match r.below(3) {
            0 => n.output.push("extra".into()),
            1 => n.output.clear(),
            _ => n.output[0] = String::new(),
        },
        _ => n.domain = Some(r.pick(&["com.microsoft", "ai.onnx", "ai.onnx.ml"]).into()),
    }
    let attrs: Vec<String> = n.attribute.iter().map(show).collect();
    format!("node {k}: `{}` of `{}`, {:?} → {:?}, attributes {attrs:?}", n.op_type(), n.domain(), n.input, n.output)
}

/// Mutates a graph input: element type, dims, or the list of inputs.
fn mutate_input(g: &mut GraphProto, kind: usize, r: &mut Choices) -> String {
    let j = r.below(g.input.len());
    if kind == 15 && r.below(2) == 0 {
        return format!("input `{}` removed", g.input.remove(j).name());
    } else if kind == 15 {
        g.input.push(g.input[j].clone());
        return format!("input `{}` listed twice", g.input[j].name());
    }
    let v = &mut g.input[j];
    let tt = input_tensor_type(v).expect("tensor input");
    let shape = tt.shape.get_or_insert_with(TensorShapeProto::default);
    match r.below(6) {
        0 => tt.elem_type = Some(r.pick(&DTYPES)),
        1 | 2 if !shape.dim.is_empty() => {
            let d = r.below(shape.dim.len());
            shape.dim[d] = dim(dimension::Value::DimValue(r.pick(&DIMS)));
        }
        3 if !shape.dim.is_empty() => shape.dim[0] = dim(dimension::Value::DimParam("batch".into())),
        4 => shape.dim.truncate(1),
        _ => tt.shape = None,
    }
    let dims = tt.shape.as_ref().map(|s| s.dim.iter().map(|d| format!("{:?}", d.value)).collect::<Vec<_>>());
    let dt = tt.elem_type();
    format!("input `{}`: elem_type {dt}, dims {dims:?}", v.name())
}

/// Mutates an initializer or attribute tensor: element type, storage, dims, data or values.
fn mutate_tensor(g: &mut GraphProto, kind: usize, r: &mut Choices) -> String {
    let mut ts = tensors_mut(g);
    if kind == 9 {
        ts.retain(|t| !t.int64_data.is_empty());
    }
    let j = r.below(ts.len());
    let Some(t) = ts.get_mut(j) else { return "no tensor to mutate".into() };
    let (rl, il) = (t.raw_data().len(), t.int64_data.len());
    let resize = |t: &mut TensorProto, raw: usize, ints: usize| {
        let mut bytes = t.raw_data.take().map(|b| b.to_vec()).unwrap_or_default();
        bytes.resize(raw, 0);
        t.raw_data = Some(bytes.into());
        t.int64_data.resize(ints, 1);
    };
    match kind {
        0 => t.data_type = Some(r.pick(&DTYPES)),
        6 => match r.below(4) {
            0 if !t.dims.is_empty() => {
                let d = r.below(t.dims.len());
                t.dims[d] = r.pick(&DIMS);
            }
            1 => t.dims = vec![1 << 16; 5],
            2 => t.dims.push(r.pick(&DIMS)),
            _ => t.dims.clear(),
        },
        8 => match r.below(6) {
            0 => resize(t, rl / 2, il / 2),
            1 => resize(t, rl.saturating_sub(1), il.saturating_sub(1)),
            2 => resize(t, rl + 5, il + 1),
            3 => resize(t, 0, 0),
            4 => (t.float_data, t.int32_data) = (vec![1.0; 3], vec![7; 2]),
            _ => {
                t.raw_data =
                    Some(t.int64_data.iter().flat_map(|v| v.to_le_bytes()).take(12).collect::<Vec<u8>>().into())
            }
        },
        9 => {
            let d = r.below(t.int64_data.len());
            t.int64_data[d] = r.pick(&VALUES);
        }
        _ => t.data_location = Some(DataLocation::External.into()),
    }
    let (name, dt, raw) = (t.name(), t.data_type(), t.raw_data().len());
    format!("tensor `{name}`: type {dt}, dims {:?}, {raw} raw bytes, int64 values {:?}", t.dims, t.int64_data)
}

// ---- tests -----------------------------------------------------------------------

#[test]
fn seeds_import_and_optimize() {
    for (name, m) in seeds() {
        let module = onnx::import(&m.encode_to_vec(), &[]);
        optimize(module.unwrap_or_else(|e| panic!("seed {name}: {e}"))).unwrap_or_else(|e| panic!("seed {name}: {e}"));
    }
}

/// A mutant: which seed, and the choices of one or two mutations.
fn mutant(seeds: &[(&'static str, ModelProto)], choices: &Choices) -> (&'static str, ModelProto, Vec<String>) {
    let mut r = choices.clone();
    let (seed, base) = &seeds[r.below(seeds.len())];
    let mut m = base.clone();
    let steps: Vec<String> = (0..1 + r.below(2)).map(|_| mutate(&mut m, &mut r)).collect();
    (seed, m, steps)
}

#[test]
fn structurally_mutated_models_never_panic() {
    let mutants = std::env::var("KILN_FUZZ_MUTANTS").ok().and_then(|v| v.parse::<u32>().ok()).unwrap_or(10_000);
    let seeds = seeds();
    let (imported, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let start = std::time::Instant::now();
    let mut runner = proptest::test_runner::TestRunner::new(randomized::config(mutants));
    let result = runner.run(&Choices::strategy(24), |choices| {
        let (seed, m, steps) = mutant(&seeds, &choices);
        match run(&m) {
            Outcome::Imported => imported.set(imported.get() + 1),
            Outcome::Refused => refused.set(refused.get() + 1),
            Outcome::Panicked(p) => {
                let message = format!("seed {seed}; {}: {p}", steps.join("; "));
                return Err(proptest::test_runner::TestCaseError::fail(message));
            }
        }
        Ok(())
    });
    let (imported, refused) = (imported.get(), refused.get());
    eprintln!(
        "{} mutants in {:.2?}: {imported} imported and planned, {refused} refused",
        imported + refused,
        start.elapsed()
    );
    if let Err(e) = result {
        panic!("a mutant panicked (the smallest proptest found): {e}");
    }
    assert!(imported > mutants / 20 && refused > mutants / 2, "{imported} imported, {refused} refused");
    assert_small_process();
}

/// `y = op(x, s)` with the constant int64 `s` (`ConstantOfShape(s)`, `Resize(x, _, _, s)`).
fn with_constant(op: &str, x: &[i64], s: &[i64]) -> ModelProto {
    let ins = match op {
        "Resize" => "x _ _ s",
        "ConstantOfShape" => "s",
        _ => "x s",
    };
    model(18, vec![vi("x", 1, x)], vec![vec64("s", s)], vec![n(op, ins, "y", vec![])], "y")
}

#[test]
fn absurd_initializers_are_refused_before_allocation() {
    let cases: [(&str, Vec<i64>, usize); 7] = [
        ("2^40 floats, no data", vec![BIG], 0),
        ("2^40 floats, 8 bytes", vec![BIG], 8),
        ("2^40 × 2^40 (overflows)", vec![BIG, BIG], 4),
        ("2^63 elements (overflows with the element size)", vec![1 << 21; 3], 4),
        ("i64::MAX", vec![i64::MAX], 4),
        ("negative", vec![-7, 2], 4),
        ("2^16 five times", vec![1 << 16; 5], 4),
    ];
    let words = ["`huge`", "larger than", "negative"];
    for (what, dims, raw) in cases {
        let mut t = f32s("huge", &dims, &[]);
        t.raw_data = Some(vec![0; raw].into());
        let m = model(17, vec![], vec![t.clone()], vec![n("Identity", "huge", "y", vec![])], "y");
        refused(what, &m, &words);
        let m = model(17, vec![], vec![], vec![n("Constant", "", "y", vec![tensor("value", t)])], "y");
        refused(&format!("{what}, in a Constant"), &m, &words);
    }
    for (what, t) in
        [("int64 data short of 2^40", i64s("short", &[BIG], &[1, 2])), ("3 of 4", i64s("short", &[4], &[1, 2, 3]))]
    {
        let m = model(17, vec![], vec![t], vec![n("Identity", "short", "y", vec![])], "y");
        refused(what, &m, &["`short`"]);
    }
    assert_small_process();
}

#[test]
fn absurd_graph_inputs_are_refused_before_allocation() {
    for dims in [vec![BIG], vec![1 << 32, 1 << 32], vec![i64::MAX], vec![1 << 16; 5], vec![-1, 3]] {
        let m = model(17, vec![vi("x", 1, &dims)], vec![], vec![n("Relu", "x", "y", vec![])], "y");
        refused(&format!("input dims {dims:?}"), &m, &["`x`"]);
    }
    // Shapes given at build time, and values bound to inputs, are checked too.
    let m = model(17, vec![vi("x", 1, &[2, 3])], vec![], vec![n("Relu", "x", "y", vec![])], "y");
    let bytes = m.encode_to_vec();
    for given in [vec![usize::MAX, 3], vec![1 << 40, 3], vec![2, 3, 1]] {
        let r = catch(|| onnx::import(&bytes, &[("x".to_string(), given.clone())]));
        assert!(matches!(r, Ok(Err(OnnxError::Input { .. }))), "given shape {given:?}");
    }
    for t in [Tensor::from_i64(vec![2, 3], &[0; 6]), Tensor::from_f64(DataType::F32, vec![3, 2], &[0.0; 6])] {
        let r = catch(|| onnx::import_with(&bytes, &[], &[("x".to_string(), t.clone())]));
        assert!(matches!(r, Ok(Err(_))), "bound value {t:?}");
    }
    assert_small_process();
}

#[test]
fn absurd_constant_shapes_are_refused_before_allocation() {
    let (x, x4) = (&[2, 3][..], &[1, 1, 2, 3][..]);
    let cases = [
        ("ConstantOfShape", x, vec![vec![BIG], vec![BIG, BIG], vec![i64::MAX], vec![-1]]),
        ("Expand", x, vec![vec![BIG, 1], vec![i64::MAX, 2, 3], vec![-1, 3]]),
        ("Tile", x, vec![vec![BIG, 1], vec![BIG, BIG], vec![1, i64::MAX]]),
        ("Reshape", x, vec![vec![BIG, -1], vec![i64::MAX, i64::MAX]]),
        ("Pad", x, vec![vec![0, 0, 0, BIG], vec![0, 0, 0, i64::MAX]]),
        ("Resize", x4, vec![vec![1, 1, BIG, 3], vec![1, 1, i64::MAX, i64::MAX]]),
    ];
    for (op, x, s) in cases.iter().flat_map(|(op, x, ss)| ss.iter().map(move |s| (op, x, s))) {
        refused(&format!("{op} with {s:?}"), &with_constant(op, x, s), &[op]);
    }
    let scales = f32s("s", &[4], &[1.0, 1.0, 1e12, 1e12]);
    let m = model(18, vec![vi("x", 1, x4)], vec![scales], vec![n("Resize", "x _ s", "y", vec![])], "y");
    refused("Resize by 10^12", &m, &["Resize"]);
    for (start, limit, delta) in [(0, BIG, 1), (0, i64::MAX, 1), (i64::MIN, i64::MAX, 1 << 31)] {
        let abc = vec![i64s("a", &[], &[start]), i64s("b", &[], &[limit]), i64s("c", &[], &[delta])];
        let m = model(17, vec![], abc, vec![n("Range", "a b c", "y", vec![])], "y");
        refused(&format!("Range({start}, {limit}, {delta})"), &m, &["Range"]);
    }
    assert_small_process();
}

/// Sizes or offsets that overflow `i64`/`usize`, and axes a tensor lacks, are errors.
#[test]
fn overflows_and_missing_axes_are_errors() {
    let x = |dims: &[i64]| vec![vi("x", 1, dims)];
    let inits = vec![i64s("s", &[], &[3]), vec64("st", &[0]), vec64("en", &[1])];
    refused("Slice of a scalar", &model(17, vec![], inits, vec![n("Slice", "s st en", "y", vec![])], "y"), &["Slice"]);
    let sp = vec64("sp", &[i64::MAX, i64::MAX]);
    let m = model(17, x(&[4, 6]), vec![sp], vec![n("Split", "x sp", "a b", vec![int("axis", 1)])], "a");
    refused("Split sizes summing past i64::MAX", &m, &["Split"]);
    // Range of mixed element types: int64 start and delta, a huge float limit.
    let abc = vec![i64s("a", &[], &[1]), f32s("b", &[], &[1.5e19]), i64s("c", &[], &[i64::MAX])];
    let m = model(17, vec![], abc, vec![n("Range", "a b c", "y", vec![])], "y");
    refused("Range(1, 1.5e19, i64::MAX)", &m, &["Range"]);
    for (op, b) in [("DepthToSpace", 1i64 << 32), ("SpaceToDepth", BIG), ("SpaceToDepth", i64::MAX)] {
        let m = model(17, x(&[1, 1, 0, 0]), vec![], vec![n(op, "x", "y", vec![int("blocksize", b)])], "y");
        refused(&format!("{op} blocksize {b}"), &m, &[op]);
    }
    // A constant folded at import whose type's element count overflows.
    let inits = vec![f32s("c", &[1, 1, 2, 2], &[1.0; 4]), f32s("W", &[1, 1, 1, 1], &[1.0])];
    let conv = n("Conv", "c W", "y", vec![ints("pads", &[BIG; 4])]);
    let bytes = model(17, vec![], inits, vec![conv], "y").encode_to_vec();
    catch(|| onnx::import(&bytes, &[])).unwrap_or_else(|p| panic!("Conv of a constant, pads 2^40: {p}")).ok();
    assert_small_process();
}

/// kiln-ir's type relations with a slice step, window padding or stride near
/// `i64::MAX`, or a huge group count (`slice_plan`, `window_out`,
/// `rel_conv2d` overflowed).
#[test]
fn huge_steps_pads_and_groups_never_panic() {
    let x = |dims: &[i64]| vec![vi("x", 1, dims)];
    let mut cases = Vec::new();
    for (start, end, step) in [(0, 6, i64::MAX), (-1, i64::MIN, i64::MIN)] {
        let inits = [vec64("st", &[start]), vec64("en", &[end]), vec64("ax", &[1]), vec64("steps", &[step])];
        let slice = n("Slice", "x st en ax steps", "y", vec![]);
        cases.push((format!("Slice step {step}"), model(17, x(&[4, 6]), inits.to_vec(), vec![slice], "y")));
    }
    let conv = n("Conv", "x W", "y", vec![ints("pads", &[i64::MAX; 4])]);
    let w = vec![f32s("W", &[1, 1, 1, 1], &[1.0])];
    cases.push(("Conv pads i64::MAX".into(), model(17, x(&[1, 1, 4, 4]), w, vec![conv], "y")));
    let window = vec![ints("kernel_shape", &[1, 1]), ints("strides", &[i64::MAX; 2]), int("ceil_mode", 1)];
    let pool = n("MaxPool", "x", "y", window);
    cases.push(("MaxPool strides i64::MAX, ceil_mode".into(), model(17, x(&[1, 1, 4, 4]), vec![], vec![pool], "y")));
    let conv = n("Conv", "x W", "y", vec![int("group", 1 << 62)]);
    let w = vec![f32s("W", &[0, 4, 1, 1], &[])];
    cases.push(("Conv group 2^62 over no channels".into(), model(17, x(&[1, 0, 4, 4]), w, vec![conv], "y")));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(what, m)| match run(m) {
            Outcome::Panicked(p) => Some(format!("{what}: {p}")),
            _ => None,
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ConvTranspose with strides, dilations, output_padding or group near
/// `i64::MAX` (its size arithmetic overflowed), and a dilation and padding
/// of 2^40 each (a valid, 3-element output whose spread input would need
/// 2^41 elements): errors, nothing allocated.
#[test]
fn conv_transpose_huge_attributes_are_errors() {
    let model_with = |c: i64, attrs: Vec<AttributeProto>| {
        let w = f32s("W", &[c, 4, 3], &vec![1.0; 12 * c as usize]);
        model(17, vec![vi("x", 1, &[1, c, 3])], vec![w], vec![n("ConvTranspose", "x W", "y", attrs)], "y")
    };
    let cases = [
        ("strides i64::MAX", model_with(1, vec![ints("strides", &[i64::MAX])])),
        ("dilations i64::MAX", model_with(1, vec![ints("dilations", &[i64::MAX])])),
        ("output_padding i64::MAX", model_with(1, vec![ints("output_padding", &[i64::MAX])])),
        ("group 2^62 over no channels", model_with(0, vec![int("group", 1 << 62)])),
        ("dilations and pads 2^40", model_with(1, vec![ints("dilations", &[BIG]), ints("pads", &[BIG, BIG])])),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(what, m)| match run(m) {
            Outcome::Refused => None,
            Outcome::Imported => Some(format!("{what}: imported")),
            Outcome::Panicked(p) => Some(format!("{what}: {p}")),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_small_process();
}

/// Small inputs whose intermediate results are absurd (window padding of
/// 2^40; the outer product of two 2^20-vectors, 2^40 elements) are refused
/// when the node is typed, before an operator such as Dropout builds a
/// constant of that shape.
#[test]
fn absurd_intermediate_shapes_are_refused() {
    let w = vec![f32s("W", &[1, 1, 1, 1], &[1.0])];
    let conv = n("Conv", "x W", "y", vec![ints("pads", &[BIG; 4])]);
    refused("Conv pads 2^40", &model(17, vec![vi("x", 1, &[1, 1, 4, 4])], w, vec![conv], "y"), &["Conv"]);
    let ab = vec![vi("a", 1, &[1 << 20, 1]), vi("b", 1, &[1, 1 << 20])];
    let nodes = vec![n("MatMul", "a b", "p", vec![]), n("Dropout", "p", "y mask", vec![])];
    refused("a Dropout mask of 2^40 elements", &model(17, ab, vec![], nodes, "y"), &["Dropout", "MatMul"]);
    assert_small_process();
}

/// A model nesting graphs in node attributes 100,000 deep (a few hundred
/// KiB): the protobuf decoder's recursion limit refuses it as a corrupt
/// model, with no stack overflow.
#[test]
fn deeply_nested_graphs_are_decode_errors() {
    fn varint(mut v: usize, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let len = |v: usize| {
        let mut b = Vec::new();
        varint(v, &mut b);
        b.len()
    };
    // Inside out, the sizes of each level's attribute (AttributeProto.g, field
    // 6), node (NodeProto.attribute, field 5) and graph (GraphProto.node, field 1).
    let (mut levels, mut graph) = (Vec::new(), 0usize);
    for _ in 0..100_000 {
        let attr = 1 + len(graph) + graph;
        let node = 1 + len(attr) + attr;
        levels.push((graph, attr, node));
        graph = 1 + len(node) + node;
    }
    // ModelProto.graph (field 7), then each level outside in: 0x0a, 0x2a and
    // 0x32 are the length-delimited tags of fields 1, 5 and 6.
    let mut bytes = vec![0x3a];
    varint(graph, &mut bytes);
    for &(inner, attr, node) in levels.iter().rev() {
        bytes.push(0x0a);
        varint(node, &mut bytes);
        bytes.push(0x2a);
        varint(attr, &mut bytes);
        bytes.push(0x32);
        varint(inner, &mut bytes);
    }
    match catch(|| onnx::import(&bytes, &[])) {
        Err(p) => panic!("the importer panicked: {p}"),
        Ok(Ok(_)) => panic!("a graph nested 100,000 deep imported"),
        Ok(Err(e)) => assert!(matches!(&e, OnnxError::Corrupt(m) if m.contains("recursion limit")), "{e}"),
    }
}
