//! The reference ONNX models (`../shared/models`: mlp, lenet, resnet18,
//! mobilenetv2, each with an ONNX Runtime output) imported, compiled (LLVM
//! JIT) and run: outputs within 1e-4 × max |reference|. Skipped, with a
//! message, where the models are not present. Corrupted files are errors.

#![cfg(feature = "llvm")]
use std::path::Path;
use std::sync::Arc;

use kiln::backend::host;
use kiln::build::optimize_and_plan;
use kiln::codegen::llvm::Jit;
use kiln::frontend::onnx;
use kiln::npy::read_npy;
use kiln::relay::infer_module;
use kiln::transform::PassContext;

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models");

#[test]
fn reference_models_match_onnx_runtime() {
    let dir = Path::new(MODELS);
    if !dir.join("mlp.onnx").exists() {
        println!("skipped: the reference models are not at {MODELS}");
        return;
    }
    for name in ["mlp", "lenet", "resnet18", "mobilenetv2"] {
        let bytes = std::fs::read(dir.join(format!("{name}.onnx"))).expect("model");
        let input = read_npy(&std::fs::read(dir.join(format!("{name}.input.npy"))).expect("input")).expect("npy");
        let want = read_npy(&std::fs::read(dir.join(format!("{name}.output.npy"))).expect("output")).expect("npy");
        let mut m = onnx::import(&bytes, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        infer_module(&mut m).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (_, plan) = optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3)))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let jit = Jit::new(name, &plan.kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = host::run(&plan, &jit, &[input], 2).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (g, w) = (got[0].to_f64_vec(), want.to_f64_vec());
        assert_eq!(g.len(), w.len(), "{name}");
        let scale = w.iter().fold(0f64, |a, v| a.max(v.abs()));
        let err = g.iter().zip(&w).fold(0f64, |a, (x, y)| a.max((x - y).abs()));
        println!(
            "{name}: max abs error {err:e}, tolerance {:e}, {} kernels, arena {} bytes",
            1e-4 * scale,
            plan.kernels.len(),
            plan.arena_bytes
        );
        assert!(err <= 1e-4 * scale, "{name}: max abs error {err} > {}", 1e-4 * scale);
    }
}

/// A small MatMul → Add → Relu model, built with the ONNX message types.
/// A float tensor graph input/output of shape `dims`.
fn value_info(name: &str, dims: &[i64]) -> onnx_protobuf::ValueInfoProto {
    use onnx_protobuf::{type_proto, TensorShapeProto, TypeProto, ValueInfoProto};
    let mut shape = TensorShapeProto::new();
    for &d in dims {
        let mut dim = onnx_protobuf::tensor_shape_proto::Dimension::new();
        dim.set_dim_value(d);
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = 1;
    tt.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(type_proto::Value::TensorType(tt));
    let mut v = ValueInfoProto::new();
    v.name = name.into();
    v.type_ = Some(ty).into();
    v
}

/// An import of the default operator set at `version`.
fn opset(version: i64) -> onnx_protobuf::OperatorSetIdProto {
    let mut o = onnx_protobuf::OperatorSetIdProto::new();
    o.version = version;
    o
}

fn tiny_model() -> Vec<u8> {
    use onnx_protobuf::{GraphProto, Message, ModelProto, NodeProto, TensorProto};
    let node = |op: &str, ins: &[&str], out: &str| {
        let mut n = NodeProto::new();
        n.op_type = op.into();
        n.name = format!("{op}_0");
        n.input = ins.iter().map(|s| s.to_string()).collect();
        n.output = vec![out.into()];
        n
    };
    let mut w = TensorProto::new();
    w.name = "W".into();
    w.dims = vec![4, 3];
    w.data_type = 1;
    w.raw_data = (0..12).flat_map(|i| (i as f32 * 0.1).to_le_bytes()).collect();
    let mut b = TensorProto::new();
    b.name = "B".into();
    b.dims = vec![3];
    b.data_type = 1;
    b.float_data = vec![0.5, -0.5, 0.0];
    let mut g = GraphProto::new();
    g.name = "tiny".into();
    g.input.push(value_info("x", &[1, 4]));
    g.output.push(value_info("y", &[1, 3]));
    g.initializer = vec![w, b];
    g.node = vec![node("MatMul", &["x", "W"], "h"), node("Add", &["h", "B"], "a"), node("Relu", &["a"], "y")];
    let mut m = ModelProto::new();
    m.opset_import.push(opset(17));
    m.ir_version = 8;
    m.graph = Some(g).into();
    m.write_to_bytes().expect("serialize")
}

#[test]
fn tiny_model_imports_and_unsupported_ops_name_the_node() {
    let mut m = onnx::import(&tiny_model(), &[]).expect("import");
    infer_module(&mut m).expect("infer");
    let text = kiln::relay::print_module(&m);
    assert!(text.contains("nn.matmul(%x, meta[relay.Constant][0])") && text.contains("nn.relu("), "{text}");
    let e = onnx::import(b"definitely not protobuf \xff\xff\xff", &[]).unwrap_err();
    assert!(matches!(e, onnx::OnnxError::Corrupt(_)), "{e}");
}

#[test]
fn five_thousand_corrupted_models_never_panic() {
    let mut seeds = vec![tiny_model()];
    let lenet = Path::new(MODELS).join("lenet.onnx");
    if let Ok(b) = std::fs::read(lenet) {
        seeds.push(b);
    }
    let mut state = 0x0123_4567_89AB_CDEFu64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut errors = 0;
    for i in 0..5000 {
        let mut bytes = seeds[i % seeds.len()].clone();
        match next() % 3 {
            0 => bytes.truncate((next() as usize) % (bytes.len() + 1)),
            1 => {
                for _ in 0..1 + next() % 8 {
                    let at = (next() as usize) % bytes.len().max(1);
                    if let Some(b) = bytes.get_mut(at) {
                        *b = next() as u8;
                    }
                }
            }
            _ => {
                // Corrupt the small prefix where the structure lives.
                let at = (next() as usize) % bytes.len().clamp(1, 200);
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= 1 << (next() % 8);
                }
            }
        }
        match onnx::import(&bytes, &[]) {
            Err(_) => errors += 1,
            Ok(mut m) => {
                let _ = infer_module(&mut m);
            }
        }
    }
    assert!(errors > 1000, "only {errors} corrupted files were rejected");
}

/// Conv (1-D: pads, stride, 3 output channels) then MaxPool (1-D) over [1, 2, 9]:
/// imported as their 2-D forms over a unit height, and computed right.
#[test]
fn one_dimensional_conv_and_pool_run_as_2d() {
    use onnx_protobuf::{AttributeProto, GraphProto, Message, ModelProto, NodeProto, TensorProto};
    let ints = |name: &str, v: &[i64]| {
        let mut a = AttributeProto::new();
        a.name = name.into();
        a.ints = v.to_vec();
        a.type_ = onnx_protobuf::attribute_proto::AttributeType::INTS.into();
        a
    };
    let (c, l, o, k) = (2usize, 9usize, 3usize, 3usize);
    let wdata: Vec<f32> = (0..o * c * k).map(|i| (i as f32 * 0.7).sin()).collect();
    let mut w = TensorProto::new();
    w.name = "W".into();
    w.dims = vec![o as i64, c as i64, k as i64];
    w.data_type = 1;
    w.float_data = wdata.clone();
    let mut conv = NodeProto::new();
    conv.op_type = "Conv".into();
    conv.name = "conv1d".into();
    conv.input = vec!["x".into(), "W".into()];
    conv.output = vec!["h".into()];
    conv.attribute = vec![ints("kernel_shape", &[3]), ints("pads", &[1, 1]), ints("strides", &[2])];
    let mut pool = NodeProto::new();
    pool.op_type = "MaxPool".into();
    pool.name = "pool1d".into();
    pool.input = vec!["h".into()];
    pool.output = vec!["y".into()];
    pool.attribute = vec![ints("kernel_shape", &[2])];
    let mut g = GraphProto::new();
    g.name = "conv1d".into();
    g.input.push(value_info("x", &[1, c as i64, l as i64]));
    g.output.push(value_info("y", &[1, o as i64, 4]));
    g.initializer = vec![w];
    g.node = vec![conv, pool];
    let mut m = ModelProto::new();
    m.opset_import.push(opset(17));
    m.ir_version = 8;
    m.graph = Some(g).into();
    let bytes = m.write_to_bytes().expect("serialize");

    let mut module = onnx::import(&bytes, &[]).expect("import");
    infer_module(&mut module).expect("infer");
    let x: Vec<f32> = (0..c * l).map(|i| (i as f32 * 0.3).cos()).collect();
    // Reference: conv with pad 1, stride 2 → length 5; max-pool 2 (stride 1) → length 4.
    let conv_at = |oc: usize, t: usize| -> f32 {
        let mut acc = 0.0;
        for ic in 0..c {
            for r in 0..k {
                let pos = (t * 2 + r) as i64 - 1;
                if (0..l as i64).contains(&pos) {
                    acc += x[ic * l + pos as usize] * wdata[(oc * c + ic) * k + r];
                }
            }
        }
        acc
    };
    let want: Vec<f32> = (0..o)
        .flat_map(|oc| (0..4).map(move |t| (oc, t)))
        .map(|(oc, t)| conv_at(oc, t).max(conv_at(oc, t + 1)))
        .collect();
    let (_, plan) = optimize_and_plan(module, Arc::new(PassContext::new().with_opt_level(3))).expect("compile");
    let jit = Jit::new("conv1d", &plan.kernels).expect("jit");
    let input = kiln::Tensor::from_f32(vec![1, c, l], &x);
    let out = host::run(&plan, &jit, &[input], 1).expect("run");
    assert_eq!(out[0].shape(), &[1, o, 4]);
    for (g, w) in out[0].to_f64_vec().iter().zip(&want) {
        assert!((g - *w as f64).abs() < 1e-5, "{g} vs {w}");
    }
}
