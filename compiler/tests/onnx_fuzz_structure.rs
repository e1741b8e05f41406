//! Structural fuzzing of the ONNX importer. Small valid seed models (a CNN,
//! an MLP, the exporters' Shape → Gather → Concat → Reshape pattern, Split
//! and Slice, shape-making operators fed constants, Attention and
//! LayerNormalization) are mutated the way broken or hostile files are:
//! wrong element types, missing, undefined or duplicated names, cycles and
//! broken node order, dimensions of 0, negative or 2^40, data shorter or
//! longer than the shape, absurd constant shapes, bad attributes, opsets and
//! outputs. Every mutant imports or fails with an error, never a panic; one
//! that imports also goes through the Relay pipeline. Absurd sizes are
//! refused before anything is allocated: the process stays small.
//!
//! A failure names the mutant; `KILN_FUZZ_CASE=<n>` runs that one alone.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kiln::frontend::onnx::{self, OnnxError};
use kiln::relay::IRModule;
use kiln::transform::{apply, PassContext};
use kiln::{DataType, Tensor};
use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_proto::DataLocation;
use onnx_protobuf::{
    type_proto, AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use protobuf::EnumOrUnknown;

const BIG: i64 = 1 << 40;
/// Element types: valid ones kiln has and lacks, and codes no ONNX type has.
const DTYPES: [i32; 13] = [0, 1, 2, 3, 6, 7, 9, 10, 11, 16, 17, 999, -1];
const DIMS: [i64; 9] = [0, -1, -7, BIG, i64::MAX, i64::MIN, 1 << 31, 1 << 32, 3];
const VALUES: [i64; 9] = [0, -1, -7, BIG, i64::MAX, i64::MIN, 1 << 31, 2, 100];

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

// ---- building models ----------------------------------------------------------

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for &d in dims {
        let mut dim = onnx_protobuf::tensor_shape_proto::Dimension::new();
        dim.set_dim_value(d);
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = elem;
    tt.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(type_proto::Value::TensorType(tt));
    let mut v = ValueInfoProto::new();
    v.name = name.into();
    v.type_ = Some(ty).into();
    v
}

fn f32s(name: &str, dims: &[i64], vals: &[f32]) -> TensorProto {
    let mut t = TensorProto::new();
    (t.name, t.dims, t.data_type) = (name.into(), dims.to_vec(), 1);
    t.raw_data = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    t
}

fn i64s(name: &str, dims: &[i64], vals: &[i64]) -> TensorProto {
    let mut t = TensorProto::new();
    (t.name, t.dims, t.data_type, t.int64_data) = (name.into(), dims.to_vec(), 7, vals.to_vec());
    t
}

fn attr(name: &str, ty: AttributeType, set: impl FnOnce(&mut AttributeProto)) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.type_ = ty.into();
    set(&mut a);
    a
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    attr(name, AttributeType::INTS, |a| a.ints = v.to_vec())
}

fn int(name: &str, v: i64) -> AttributeProto {
    attr(name, AttributeType::INT, |a| a.i = v)
}

fn node(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.into();
    n.name = format!("{op}_{}", outs.first().copied().unwrap_or("none"));
    n.input = ins.iter().map(|s| s.to_string()).collect();
    n.output = outs.iter().map(|s| s.to_string()).collect();
    n.attribute = attrs;
    n
}

fn model(
    opset: i64,
    inputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
    outputs: &[&str],
) -> ModelProto {
    let mut g = GraphProto::new();
    g.name = "fuzz".into();
    (g.input, g.initializer, g.node) = (inputs, inits, nodes);
    g.output = outputs.iter().map(|o| vi(o, 1, &[])).collect();
    let mut o = OperatorSetIdProto::new();
    o.version = opset;
    let mut m = ModelProto::new();
    (m.ir_version, m.opset_import, m.graph) = (8, vec![o], Some(g).into());
    m
}

fn wave(n: usize, s: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * s).sin()).collect()
}

/// The seed models, each valid.
fn seeds() -> Vec<(&'static str, ModelProto)> {
    let cnn = model(
        17,
        vec![vi("x", 1, &[1, 2, 6, 6])],
        vec![
            f32s("W", &[3, 2, 3, 3], &wave(54, 0.3)),
            f32s("B", &[3], &wave(3, 1.0)),
            i64s("shape", &[2], &[1, 27]),
            f32s("W2", &[4, 27], &wave(108, 0.1)),
            f32s("C", &[4], &wave(4, 0.5)),
        ],
        vec![
            node("Conv", &["x", "W", "B"], &["h"], vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])]),
            node("Relu", &["h"], &["r"], vec![]),
            node("MaxPool", &["r"], &["p"], vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])]),
            node("Reshape", &["p", "shape"], &["f"], vec![]),
            node(
                "Gemm",
                &["f", "W2", "C"],
                &["y"],
                vec![int("transB", 1), attr("alpha", AttributeType::FLOAT, |a| a.f = 0.5)],
            ),
        ],
        &["y"],
    );
    let mlp = model(
        13,
        vec![vi("x", 1, &[2, 8])],
        vec![f32s("W", &[8, 6], &wave(48, 0.2)), f32s("b", &[6], &wave(6, 0.7))],
        vec![
            node("MatMul", &["x", "W"], &["h"], vec![]),
            node("Add", &["h", "b"], &["a"], vec![]),
            node("Softmax", &["a"], &["y"], vec![int("axis", -1)]),
        ],
        &["y"],
    );
    let minus_one = attr("value", AttributeType::TENSOR, |a| a.t = Some(i64s("m1", &[1], &[-1])).into());
    let exporter = model(
        17,
        vec![vi("x", 1, &[2, 3, 4])],
        vec![i64s("zero", &[], &[0]), i64s("ax0", &[1], &[0])],
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Gather", &["s", "zero"], &["n"], vec![int("axis", 0)]),
            node("Unsqueeze", &["n", "ax0"], &["n1"], vec![]),
            node("Constant", &[], &["m1"], vec![minus_one]),
            node("Concat", &["n1", "m1"], &["ns"], vec![int("axis", 0)]),
            node("Reshape", &["x", "ns"], &["y"], vec![]),
        ],
        &["y"],
    );
    let split = model(
        17,
        vec![vi("x", 1, &[4, 6])],
        vec![
            i64s("sp", &[2], &[2, 4]),
            i64s("st", &[1], &[0]),
            i64s("en", &[1], &[6]),
            i64s("ax", &[1], &[1]),
            i64s("steps", &[1], &[2]),
        ],
        vec![
            node("Split", &["x", "sp"], &["a", "b"], vec![int("axis", 1)]),
            node("Concat", &["b", "a"], &["c"], vec![int("axis", 1)]),
            node("Slice", &["c", "st", "en", "ax", "steps"], &["d"], vec![]),
            node("Transpose", &["d"], &["y"], vec![ints("perm", &[1, 0])]),
        ],
        &["y"],
    );
    let value = attr("value", AttributeType::TENSOR, |a| a.t = Some(f32s("one", &[1], &[1.0])).into());
    let shapes = model(
        17,
        vec![vi("x", 1, &[2, 3])],
        vec![
            i64s("cs", &[2], &[2, 3]),
            i64s("es", &[3], &[2, 2, 3]),
            i64s("reps", &[2], &[2, 1]),
            i64s("r0", &[], &[0]),
            i64s("r1", &[], &[6]),
            i64s("r2", &[], &[1]),
            i64s("pads", &[4], &[0, 1, 0, 1]),
            i64s("uax", &[2], &[0, 1]),
            f32s("scales", &[4], &[1.0, 1.0, 2.0, 2.0]),
        ],
        vec![
            node("ConstantOfShape", &["cs"], &["c"], vec![value]),
            node("Add", &["x", "c"], &["a"], vec![]),
            node("Expand", &["a", "es"], &["e"], vec![]),
            node("Tile", &["x", "reps"], &["t"], vec![]),
            node("Range", &["r0", "r1", "r2"], &["r"], vec![]),
            node("Pad", &["x", "pads"], &["p"], vec![attr("mode", AttributeType::STRING, |a| a.s = b"edge".to_vec())]),
            node("Unsqueeze", &["x", "uax"], &["x4"], vec![]),
            node(
                "Resize",
                &["x4", "", "scales"],
                &["z"],
                vec![attr("mode", AttributeType::STRING, |a| a.s = b"linear".to_vec())],
            ),
        ],
        &["e", "t", "r", "p", "z"],
    );
    let attention = model(
        23,
        vec![vi("q", 1, &[1, 4, 8]), vi("k", 1, &[1, 4, 8]), vi("v", 1, &[1, 4, 8])],
        vec![f32s("g", &[8], &wave(8, 0.4)), f32s("bt", &[8], &wave(8, 0.9))],
        vec![
            node(
                "Attention",
                &["q", "k", "v"],
                &["o"],
                vec![int("q_num_heads", 2), int("kv_num_heads", 2), int("is_causal", 1)],
            ),
            node("LayerNormalization", &["o", "g", "bt"], &["y"], vec![int("axis", -1)]),
        ],
        &["y"],
    );
    vec![
        ("cnn", cnn),
        ("mlp", mlp),
        ("exporter", exporter),
        ("split", split),
        ("shapes", shapes),
        ("attention", attention),
    ]
}

// ---- importing ---------------------------------------------------------------

enum Outcome {
    Imported,
    Refused(OnnxError),
    Panicked(String),
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// The Relay optimization pipeline the build runs before lowering.
fn optimize(m: IRModule) -> Result<IRModule, String> {
    let seq = kiln::relay::transform::default_pipeline().map_err(|e| e.to_string())?;
    apply(&seq, m, &PassContext::new().with_opt_level(3)).map_err(|e| e.to_string())
}

/// Import (and, when that works, optimize) without letting a panic escape.
fn run(m: &ModelProto) -> Outcome {
    let bytes = m.write_to_bytes().expect("serialize");
    match catch_unwind(|| onnx::import(&bytes, &[])) {
        Err(p) => Outcome::Panicked(format!("import: {}", panic_message(p))),
        Ok(Err(e)) => Outcome::Refused(e),
        Ok(Ok(module)) => match catch_unwind(AssertUnwindSafe(|| optimize(module))) {
            Err(p) => Outcome::Panicked(format!("Relay pipeline: {}", panic_message(p))),
            Ok(_) => Outcome::Imported,
        },
    }
}

/// The peak resident set of this process, in bytes (Linux).
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

fn assert_small_process() {
    if let Some(b) = peak_rss() {
        assert!(b < 2 << 30, "peak resident set {} MiB: something large was allocated", b >> 20);
    }
}

// ---- mutations -----------------------------------------------------------------

fn defined_names(g: &GraphProto) -> Vec<String> {
    let inits = g.initializer.iter().map(|t| t.name.clone());
    let outs = g.node.iter().flat_map(|n| n.output.iter().cloned());
    g.input.iter().map(|i| i.name.clone()).chain(inits).chain(outs).filter(|s| !s.is_empty()).collect()
}

/// Every stored tensor: the initializers and the tensors of `Constant`s and `ConstantOfShape`s.
fn tensors_mut(g: &mut GraphProto) -> Vec<&mut TensorProto> {
    let attrs = g.node.iter_mut().flat_map(|n| n.attribute.iter_mut().filter_map(|a| a.t.as_mut()));
    g.initializer.iter_mut().chain(attrs).collect()
}

fn input_tensor_type(v: &mut ValueInfoProto) -> Option<&mut type_proto::Tensor> {
    match v.type_.as_mut()?.value.as_mut()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

const OPS: [&str; 16] = [
    "Relu",
    "Conv",
    "Reshape",
    "Split",
    "Concat",
    "Attention",
    "Resize",
    "Tile",
    "Range",
    "ConstantOfShape",
    "Pad",
    "Slice",
    "Dropout",
    "Trilu",
    "TopK",
    "",
];

/// Applies one random structural mutation; returns what it did.
fn mutate(m: &mut ModelProto, r: &mut Rng) -> String {
    let kind = r.below(18);
    if kind == 11 {
        return match (r.below(4), m.opset_import.is_empty()) {
            (0, _) => {
                m.opset_import.clear();
                "no opset import".into()
            }
            (_, true) => "no opset to mutate".into(),
            (1, _) => {
                let v = r.pick(&[0, 1, 6, 29, 10_000, -1, i64::MAX]);
                m.opset_import[0].version = v;
                format!("opset {v}")
            }
            (2, _) => {
                m.opset_import.push(m.opset_import[0].clone());
                "the default opset imported twice".into()
            }
            _ => {
                m.opset_import[0].domain = "com.microsoft".into();
                "the only opset is of another domain".into()
            }
        };
    }
    let g = m.graph.mut_or_insert_default();
    let names = defined_names(g);
    let (nn, ni) = (g.node.len(), g.input.len());
    let k = r.below(nn);
    let outputless = g.node.iter().any(|n| n.output.is_empty());
    if (ni == 0 && matches!(kind, 1 | 7 | 15)) || (outputless && matches!(kind, 3 | 4 | 14)) {
        return "nothing to mutate".into();
    }
    if g.output.is_empty() && kind == 12 {
        return "no output to mutate".into();
    }
    match kind {
        0 | 17 => {
            let mut ts = tensors_mut(g);
            let j = r.below(ts.len());
            let t = &mut ts[j];
            if kind == 17 {
                t.data_location = DataLocation::EXTERNAL.into();
                return format!("tensor `{}` stored externally", t.name);
            }
            t.data_type = r.pick(&DTYPES);
            format!("tensor `{}` data_type {}", t.name, t.data_type)
        }
        1 => {
            let (j, dt) = (r.below(ni), r.pick(&DTYPES));
            let v = &mut g.input[j];
            input_tensor_type(v).expect("tensor input").elem_type = dt;
            format!("input `{}` elem_type {dt}", v.name)
        }
        2 => {
            let n = &mut g.node[k];
            if n.input.is_empty() {
                n.input.push("x".into());
                return format!("node `{}` gains input x", n.name);
            }
            let j = r.below(n.input.len());
            let new = match r.below(4) {
                0 => {
                    n.input.remove(j);
                    return format!("node `{}` loses input {j}", n.name);
                }
                1 => "ghost".to_string(),
                2 => String::new(),
                _ => names[r.below(names.len())].clone(),
            };
            n.input[j] = new;
            format!("node `{}` input {j} = `{}`", n.name, n.input[j])
        }
        3 => {
            let name = names[r.below(names.len())].clone();
            let n = &mut g.node[k];
            n.output[0] = name;
            format!("node `{}` output 0 = `{}` (defined again)", n.name, n.output[0])
        }
        4 => {
            let (a, b) = (r.below(nn), r.below(nn));
            let (a, b) = (a.min(b), a.max(b));
            let later = g.node[b].output[0].clone();
            g.node[a].input.push(later.clone());
            let first = g.node[a].output[0].clone();
            g.node[b].input.insert(0, first);
            format!("cycle: node {a} consumes `{later}` of node {b}, which consumes node {a}'s output")
        }
        5 => {
            let b = r.below(nn);
            g.node.swap(k, b);
            format!("nodes {k} and {b} swapped")
        }
        6 => {
            let mut ts = tensors_mut(g);
            let j = r.below(ts.len());
            let t = &mut ts[j];
            match r.below(4) {
                0 if !t.dims.is_empty() => {
                    let d = r.below(t.dims.len());
                    t.dims[d] = r.pick(&DIMS);
                }
                1 => t.dims = vec![1 << 16; 5],
                2 => t.dims.push(r.pick(&DIMS)),
                _ => t.dims.clear(),
            }
            format!("tensor `{}` dims {:?}", t.name, t.dims)
        }
        7 => {
            let j = r.below(ni);
            let v = &mut g.input[j];
            let tt = input_tensor_type(v).expect("tensor input");
            let shape = tt.shape.mut_or_insert_default();
            match r.below(5) {
                0 | 1 if !shape.dim.is_empty() => {
                    let d = r.below(shape.dim.len());
                    shape.dim[d].set_dim_value(r.pick(&DIMS));
                }
                2 if !shape.dim.is_empty() => shape.dim[0].set_dim_param("batch".into()),
                3 => shape.dim.truncate(1),
                _ => tt.shape.clear(),
            }
            format!("input `{}` type {:?}", v.name, v.type_)
        }
        8 => {
            let mut ts = tensors_mut(g);
            let j = r.below(ts.len());
            let t = &mut ts[j];
            let what = match r.below(6) {
                0 => {
                    let n = t.raw_data.len() / 2;
                    t.raw_data.truncate(n);
                    t.int64_data.truncate(t.int64_data.len() / 2);
                    "halved"
                }
                1 => {
                    t.raw_data.pop();
                    t.int64_data.pop();
                    "one short"
                }
                2 => {
                    t.raw_data.extend([0; 5]);
                    t.int64_data.push(1);
                    "longer"
                }
                3 => {
                    t.raw_data.clear();
                    t.int64_data.clear();
                    "without data"
                }
                4 => {
                    t.float_data = vec![1.0; 3];
                    t.int32_data = vec![7; 2];
                    "with stray typed data"
                }
                _ => {
                    t.raw_data = t.int64_data.iter().flat_map(|v| v.to_le_bytes()).take(12).collect();
                    "with 12 bytes of raw data"
                }
            };
            format!("tensor `{}` {what}", t.name)
        }
        9 => {
            let mut ts: Vec<_> = tensors_mut(g).into_iter().filter(|t| !t.int64_data.is_empty()).collect();
            if ts.is_empty() {
                return "no integer tensor".into();
            }
            let j = r.below(ts.len());
            let t = &mut ts[j];
            let d = r.below(t.int64_data.len());
            t.int64_data[d] = r.pick(&VALUES);
            format!("tensor `{}` values {:?}", t.name, t.int64_data)
        }
        10 => {
            let n = &mut g.node[k];
            if n.attribute.is_empty() || r.below(4) == 0 {
                let a = match r.below(3) {
                    0 => int("axis", r.pick(&VALUES)),
                    1 => ints("axes", &[r.pick(&VALUES)]),
                    _ => attr("bogus", AttributeType::FLOAT, |a| a.f = f32::NAN),
                };
                n.attribute.push(a);
                return format!("node `{}` gains attribute {:?}", n.name, n.attribute.last());
            }
            let j = r.below(n.attribute.len());
            let a = &mut n.attribute[j];
            match r.below(6) {
                0 => a.type_ = EnumOrUnknown::from_i32(r.pick(&[0, 1, 2, 3, 4, 6, 7, 8, 99])),
                1 => a.ints.clear(),
                2 if !a.ints.is_empty() => {
                    let d = r.below(a.ints.len());
                    a.ints[d] = r.pick(&VALUES);
                }
                3 => a.i = r.pick(&VALUES),
                4 => a.t.clear(),
                _ => {
                    n.attribute.remove(j);
                    return format!("node `{}` loses attribute {j}", n.name);
                }
            }
            format!("node `{}` attribute {:?}", n.name, n.attribute[j])
        }
        12 => {
            let what = match r.below(5) {
                0 => {
                    g.output.clear();
                    "no graph outputs".to_string()
                }
                1 => {
                    g.output[0].name = "ghost".into();
                    "graph output `ghost`".into()
                }
                2 => {
                    let o = g.output[0].clone();
                    g.output.push(o);
                    "graph output listed twice".into()
                }
                _ => {
                    g.output[0].name = names[r.below(names.len())].clone();
                    format!("graph output `{}`", g.output[0].name)
                }
            };
            what
        }
        13 => {
            let op = r.pick(&OPS);
            g.node[k].op_type = op.into();
            format!("node {k} becomes `{op}`")
        }
        14 => {
            let n = &mut g.node[k];
            match r.below(3) {
                0 => n.output.push("extra".into()),
                1 => n.output.clear(),
                _ => n.output[0] = String::new(),
            }
            format!("node `{}` outputs {:?}", n.name, n.output)
        }
        15 => {
            let j = r.below(ni);
            if r.below(2) == 0 {
                let v = g.input.remove(j);
                format!("input `{}` removed", v.name)
            } else {
                let v = g.input[j].clone();
                g.input.push(v);
                format!("input `{}` listed twice", g.input[j].name)
            }
        }
        _ => {
            let n = &mut g.node[k];
            n.domain = r.pick(&["com.microsoft", "ai.onnx", "ai.onnx.ml"]).into();
            format!("node `{}` domain `{}`", n.name, n.domain)
        }
    }
}

// ---- tests -----------------------------------------------------------------------

#[test]
fn seeds_import_and_optimize() {
    for (name, m) in seeds() {
        let bytes = m.write_to_bytes().expect("serialize");
        let module = onnx::import(&bytes, &[]).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        optimize(module).unwrap_or_else(|e| panic!("seed {name}: {e}"));
    }
}

#[test]
fn structurally_mutated_models_never_panic() {
    const MUTANTS: u64 = 3000;
    let seeds = seeds();
    let only: Option<u64> = std::env::var("KILN_FUZZ_CASE").ok().and_then(|v| v.parse().ok());
    let (mut imported, mut refused, mut failures) = (0, 0, Vec::new());
    let start = std::time::Instant::now();
    for case in (0..MUTANTS).filter(|c| only.is_none_or(|o| o == *c)) {
        let mut r = Rng::new(case + 1);
        let (seed, base) = &seeds[r.below(seeds.len())];
        let mut m = base.clone();
        let steps: Vec<String> = (0..1 + r.below(3)).map(|_| mutate(&mut m, &mut r)).collect();
        match run(&m) {
            Outcome::Imported => imported += 1,
            Outcome::Refused(_) => refused += 1,
            Outcome::Panicked(p) => failures.push(format!("case {case} (seed {seed}; {}): {p}", steps.join("; "))),
        }
    }
    eprintln!(
        "{} mutants in {:.2?}: {imported} imported and optimized, {refused} refused, {} panicked",
        imported + refused + failures.len(),
        start.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "panics (rerun one with KILN_FUZZ_CASE=<case>):\n{}", failures.join("\n"));
    assert!(only.is_some() || refused > MUTANTS as usize / 2, "only {refused} mutants were refused");
    assert_small_process();
}

/// Imports `m` expecting an error that mentions one of `words`.
fn refused(what: &str, m: &ModelProto, words: &[&str]) {
    let bytes = m.write_to_bytes().expect("serialize");
    match catch_unwind(|| onnx::import(&bytes, &[])) {
        Err(p) => panic!("{what}: the importer panicked: {}", panic_message(p)),
        Ok(Ok(_)) => panic!("{what}: imported"),
        Ok(Err(e)) => {
            let s = e.to_string();
            assert!(words.iter().any(|w| s.contains(w)), "{what}: the error `{s}` mentions none of {words:?}");
        }
    }
}

/// `y = op(x, constant shape input)` over a [2, 3] float input.
fn with_shape_input(op: &str, x_dims: &[i64], shape: &[i64], attrs: Vec<AttributeProto>) -> ModelProto {
    let ins: Vec<&str> = match op {
        "Resize" => vec!["x", "", "", "s"],
        "ConstantOfShape" => vec!["s"],
        _ => vec!["x", "s"],
    };
    model(
        18,
        vec![vi("x", 1, x_dims)],
        vec![i64s("s", &[shape.len() as i64], shape)],
        vec![node(op, &ins, &["y"], attrs)],
        &["y"],
    )
}

#[test]
fn absurd_initializers_are_refused_before_allocation() {
    let cases: [(&str, Vec<i64>, usize); 7] = [
        ("2^40 floats, no data", vec![BIG], 0),
        ("2^40 floats, 8 bytes", vec![BIG], 8),
        ("2^40 × 2^40 (overflows)", vec![BIG, BIG], 4),
        ("2^21 × 2^21 × 2^21 (overflows with the element size)", vec![1 << 21; 3], 4),
        ("i64::MAX", vec![i64::MAX], 4),
        ("negative", vec![-7, 2], 4),
        ("2^16 five times", vec![1 << 16; 5], 4),
    ];
    for (what, dims, raw) in cases {
        let mut t = f32s("huge", &dims, &[]);
        t.raw_data = vec![0; raw];
        let m = model(17, vec![], vec![t], vec![node("Identity", &["huge"], &["y"], vec![])], &["y"]);
        refused(what, &m, &["huge", "larger than", "negative"]);
        // The same in a Constant node's value.
        let mut t = f32s("huge", &dims, &[]);
        t.raw_data = vec![0; raw];
        let value = attr("value", AttributeType::TENSOR, |a| a.t = Some(t).into());
        let m = model(17, vec![], vec![], vec![node("Constant", &[], &["y"], vec![value])], &["y"]);
        refused(what, &m, &["huge", "larger than", "negative"]);
    }
    let short = i64s("short", &[BIG], &[1, 2, 3]);
    let m = model(17, vec![], vec![short], vec![node("Identity", &["short"], &["y"], vec![])], &["y"]);
    refused("int64 data shorter than 2^40", &m, &["short", "larger than"]);
    let short = i64s("short", &[4], &[1, 2, 3]);
    let m = model(17, vec![], vec![short], vec![node("Identity", &["short"], &["y"], vec![])], &["y"]);
    refused("3 values for 4", &m, &["short"]);
    assert_small_process();
}

#[test]
fn absurd_graph_inputs_are_refused_before_allocation() {
    for dims in [vec![BIG], vec![1 << 32, 1 << 32], vec![i64::MAX], vec![1 << 16; 5], vec![-1, 3]] {
        let m = model(17, vec![vi("x", 1, &dims)], vec![], vec![node("Relu", &["x"], &["y"], vec![])], &["y"]);
        refused(&format!("input dims {dims:?}"), &m, &["`x`"]);
    }
    // Shapes given at build time, and values bound to inputs, are checked too.
    let m = model(17, vec![vi("x", 1, &[2, 3])], vec![], vec![node("Relu", &["x"], &["y"], vec![])], &["y"]);
    let bytes = m.write_to_bytes().expect("serialize");
    for given in [vec![usize::MAX, 3], vec![1 << 40, 3], vec![2, 3, 1]] {
        let r = catch_unwind(|| onnx::import(&bytes, &[("x".to_string(), given.clone())]));
        assert!(matches!(r, Ok(Err(OnnxError::Input { .. }))), "given shape {given:?}");
    }
    let wrong = [Tensor::from_i64(vec![2, 3], &[0; 6]), Tensor::from_f64(DataType::F32, vec![3, 2], &[0.0; 6])];
    for t in wrong {
        let r = catch_unwind(|| onnx::import_with(&bytes, &[], &[("x".to_string(), t.clone())]));
        assert!(matches!(r, Ok(Err(_))), "bound value {t:?}");
    }
    assert_small_process();
}

#[test]
fn absurd_constant_shapes_are_refused_before_allocation() {
    let pads = |v: i64| vec![0, 0, 0, v];
    for (op, x, shape) in [
        ("ConstantOfShape", vec![2, 3], vec![BIG]),
        ("ConstantOfShape", vec![2, 3], vec![BIG, BIG]),
        ("ConstantOfShape", vec![2, 3], vec![i64::MAX]),
        ("ConstantOfShape", vec![2, 3], vec![-1]),
        ("Expand", vec![2, 3], vec![BIG, 1]),
        ("Expand", vec![2, 3], vec![i64::MAX, 2, 3]),
        ("Expand", vec![2, 3], vec![-1, 3]),
        ("Tile", vec![2, 3], vec![BIG, 1]),
        ("Tile", vec![2, 3], vec![BIG, BIG]),
        ("Tile", vec![2, 3], vec![1, i64::MAX]),
        ("Reshape", vec![2, 3], vec![BIG, -1]),
        ("Reshape", vec![2, 3], vec![i64::MAX, i64::MAX]),
        ("Pad", vec![2, 3], pads(BIG)),
        ("Pad", vec![2, 3], pads(i64::MAX)),
        ("Resize", vec![1, 1, 2, 3], vec![1, 1, BIG, 3]),
        ("Resize", vec![1, 1, 2, 3], vec![1, 1, i64::MAX, 3]),
    ] {
        let m = with_shape_input(op, &x, &shape, vec![]);
        refused(&format!("{op} to {shape:?}"), &m, &[op]);
    }
    for limit in [BIG, i64::MAX] {
        let m = model(
            17,
            vec![],
            vec![i64s("a", &[], &[0]), i64s("b", &[], &[limit]), i64s("c", &[], &[1])],
            vec![node("Range", &["a", "b", "c"], &["y"], vec![])],
            &["y"],
        );
        refused(&format!("Range(0, {limit}, 1)"), &m, &["Range"]);
    }
    assert_small_process();
}

/// Values that make sizes or offsets overflow `i64`/`usize` must be errors.
#[test]
fn overflowing_sizes_and_strides_are_errors() {
    let split = model(
        17,
        vec![vi("x", 1, &[4, 6])],
        vec![i64s("sp", &[2], &[i64::MAX, i64::MAX])],
        vec![node("Split", &["x", "sp"], &["a", "b"], vec![int("axis", 1)])],
        &["a"],
    );
    refused("Split sizes summing past i64::MAX", &split, &["Split"]);
    // Range of mixed element types: start and delta int64, limit a huge float.
    let mut limit = f32s("b", &[], &[1.5e19]);
    limit.dims = vec![];
    let range = model(
        17,
        vec![],
        vec![i64s("a", &[], &[1]), limit, i64s("c", &[], &[i64::MAX])],
        vec![node("Range", &["a", "b", "c"], &["y"], vec![])],
        &["y"],
    );
    let bytes = range.write_to_bytes().expect("serialize");
    let r = catch_unwind(|| onnx::import(&bytes, &[]));
    assert!(r.is_ok(), "Range(1, 1.5e19, i64::MAX) panicked: {}", r.err().map(panic_message).unwrap_or_default());
    for steps in [i64::MAX, i64::MIN] {
        let m = model(
            17,
            vec![vi("x", 1, &[4, 6])],
            vec![i64s("st", &[1], &[0]), i64s("en", &[1], &[6]), i64s("ax", &[1], &[1]), i64s("steps", &[1], &[steps])],
            vec![node("Slice", &["x", "st", "en", "ax", "steps"], &["y"], vec![])],
            &["y"],
        );
        let bytes = m.write_to_bytes().expect("serialize");
        let r = catch_unwind(|| onnx::import(&bytes, &[]));
        assert!(r.is_ok(), "Slice step {steps} panicked: {}", r.err().map(panic_message).unwrap_or_default());
    }
    for p in [i64::MAX, BIG] {
        let conv = model(
            17,
            vec![vi("x", 1, &[1, 1, 4, 4])],
            vec![f32s("W", &[1, 1, 1, 1], &[1.0])],
            vec![node("Conv", &["x", "W"], &["y"], vec![ints("pads", &[p, p, p, p])])],
            &["y"],
        );
        refused(&format!("Conv pads {p}"), &conv, &["Conv"]);
    }
    assert_small_process();
}

/// Small inputs whose intermediate results are absurd: an outer product of
/// two 2^20-vectors (2^40 elements) must not be materialized by an operator
/// that builds a constant of its shape (Dropout's mask).
#[test]
fn absurd_intermediate_shapes_are_not_materialized() {
    let m = model(
        17,
        vec![vi("a", 1, &[1 << 20, 1]), vi("b", 1, &[1, 1 << 20])],
        vec![],
        vec![node("MatMul", &["a", "b"], &["p"], vec![]), node("Dropout", &["p"], &["y", "mask"], vec![])],
        &["y"],
    );
    let bytes = m.write_to_bytes().expect("serialize");
    let r = catch_unwind(|| onnx::import(&bytes, &[]));
    assert!(r.is_ok(), "panicked: {}", r.err().map(panic_message).unwrap_or_default());
    assert_small_process();
}
