//! The models compiled by this crate's `build.rs` and linked into it: their
//! outputs match the reference interpreter, `run` allocates nothing, and
//! inputs of the wrong length do not compile (fixed-size arrays) or are `Err`.
//! A model that is not present (`../shared/models`) shows as ignored, with
//! the reason.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln::relay::{eval_function, infer_module, parse_module, Value};
use kiln::Tensor;
use kiln_user_tests::{convnet, mlp_text, param, CONVNET_RELAY};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// Counts allocations made on this thread while `COUNTING` is set.
struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
thread_local! { static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) }; }

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn close(got: &[f32], want: &[f64]) {
    let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
    for (a, b) in got.iter().zip(want) {
        assert!((*a as f64 - b).abs() <= 1e-4 * scale.max(1e-6), "{a} vs {b}");
    }
}

fn sample(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.13).cos()).collect()
}

fn mlp_from_relay_text_matches_the_interpreter() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/models/mlp.relay")).expect("model");
    let mut m = parse_module(&text).expect("parse");
    infer_module(&mut m).expect("infer");
    let x: [f32; 784] = sample(784).try_into().expect("784");
    let args = vec![
        Value::Tensor(Tensor::from_f32(vec![1, 784], &x)),
        Value::Tensor(param("w1", &[784, 128])),
        Value::Tensor(param("b1", &[128])),
        Value::Tensor(param("w2", &[128, 10])),
        Value::Tensor(param("b2", &[10])),
    ];
    let Ok(Value::Tensor(want)) = eval_function(&m, "main", &args) else { panic!("interpreter") };
    let mut buffer = vec![0u8; mlp_text::ARENA_BYTES + 64];
    let mut model = mlp_text::Model::new(&mut buffer).expect("arena");
    let mut out = [0f32; 10];
    model.run(&x, &mut out).expect("run");
    close(&out, &want.to_f64_vec());
}

fn convnet_compiled_to_c_matches_the_interpreter() {
    let mut m = parse_module(CONVNET_RELAY).expect("parse");
    infer_module(&mut m).expect("infer");
    let x: Vec<f32> = sample(3 * 12 * 12);
    let mut args = vec![Value::Tensor(Tensor::from_f32(vec![1, 3, 12, 12], &x))];
    for (name, shape) in [
        ("c1", [8usize, 3, 3, 3].as_slice()),
        ("g", &[8]),
        ("b", &[8]),
        ("m", &[8]),
        ("v", &[8]),
        ("c2", &[8, 8, 3, 3]),
        ("fc", &[5, 8]),
        ("fb", &[5]),
    ] {
        args.push(Value::Tensor(param(name, shape)));
    }
    let Ok(Value::Tensor(want)) = eval_function(&m, "main", &args) else { panic!("interpreter") };
    let mut model = convnet::OwnedModel::with_threads(2).expect("this CPU runs the model");
    let mut out = [0f32; 5];
    model.run(&x.clone().try_into().expect("432"), &mut out).expect("run");
    close(&out, &want.to_f64_vec());
    assert!((out.iter().sum::<f32>() - 1.0).abs() < 1e-5, "softmax output sums to 1");
}

fn run_allocates_nothing() {
    let x: [f32; 784] = sample(784).try_into().expect("784");
    let mut model = mlp_text::OwnedModel::with_threads(1).expect("this CPU runs the model");
    let mut conv = convnet::OwnedModel::with_threads(1).expect("this CPU runs the model");
    let cx: [f32; 432] = sample(432).try_into().expect("432");
    let (mut out, mut cout) = ([0f32; 10], [0f32; 5]);
    model.run(&x, &mut out).expect("run"); // warm up
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    for _ in 0..100 {
        model.run(&x, &mut out).expect("run");
        conv.run(&cx, &mut cout).expect("run");
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
}

fn a_small_arena_is_an_error() {
    let mut tiny = vec![0u8; 8];
    let e = mlp_text::Model::new(&mut tiny).err().expect("too small");
    assert!(e.to_string().contains("the model needs"), "{e}");
    assert_eq!(mlp_text::X_SHAPE, [1, 784]);
    assert_eq!(mlp_text::OUTPUT0_SHAPE, [1, 10]);
}

/// The reference ONNX models compiled by build.rs, against ONNX Runtime's outputs.
#[cfg(kiln_reference_models)]
fn reference_onnx_models_built_in_build_rs_match_onnx_runtime() -> Result<Completion, Failed> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models");
    let read = |f: &str| kiln::npy::read_npy(&std::fs::read(format!("{dir}/{f}")).expect("file")).expect("npy");
    macro_rules! check {
        ($m:ident, $name:literal, $n_in:literal, $n_out:literal) => {{
            let (x, want) = (read(concat!($name, ".input.npy")), read(concat!($name, ".output.npy")));
            let x: Box<[f32; $n_in]> = x.to_f32_vec().into_boxed_slice().try_into().expect("input size");
            let mut model = kiln_user_tests::$m::OwnedModel::with_threads(2).expect("this CPU runs the model");
            let mut out = [0f32; $n_out];
            model.run(&x, &mut out).expect("run");
            close(&out, &want.to_f64_vec());
        }};
    }
    check!(onnx_mlp, "mlp", 784, 10);
    check!(onnx_lenet, "lenet", 784, 10);
    check!(onnx_resnet18, "resnet18", 150528, 1000);
    check!(onnx_mobilenetv2, "mobilenetv2", 150528, 1000);
    Ok(Completion::Completed)
}

#[cfg(not(kiln_reference_models))]
fn reference_onnx_models_built_in_build_rs_match_onnx_runtime() -> Result<Completion, Failed> {
    Ok(Completion::ignored_with("the reference models (../shared/models) are not present"))
}

/// The GPT-style decoder compiled by build.rs: int64 token ids in, logits
/// out, against ONNX Runtime's output.
#[cfg(kiln_gpt_tiny)]
fn gpt_tiny_built_in_build_rs_matches_onnx_runtime() -> Result<Completion, Failed> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models");
    let read = |f: &str| kiln::npy::read_npy(&std::fs::read(format!("{dir}/{f}")).expect("file")).expect("npy");
    let (ids, want) = (read("gpt_tiny.input.npy"), read("gpt_tiny.output.npy"));
    let ids: Vec<i64> = ids.to_f64_vec().iter().map(|&v| v as i64).collect();
    let ids: Box<[i64; 64]> = ids.into_boxed_slice().try_into().expect("input size");
    let mut model = kiln_user_tests::onnx_gpt_tiny::OwnedModel::with_threads(2).expect("this CPU runs the model");
    let mut logits: Box<[f32; 64_000]> = vec![0f32; 64_000].into_boxed_slice().try_into().expect("output size");
    model.run(&ids, &mut logits).expect("run");
    close(&logits[..], &want.to_f64_vec());

    // A token id past the vocabulary (1000 ids) is an error naming the
    // embedding's kernel — not a wrapped or clipped row — and the next good
    // run succeeds.
    let mut bad = ids.clone();
    for id in [1000, -1001, 1 << 40] {
        bad[7] = id;
        let e = model.run(&bad, &mut logits).expect_err("an out-of-range token id");
        assert!(matches!(e, kiln_runtime::Error::Kernel { .. }), "{e}");
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    model.run(&ids, &mut logits).expect("run");
    close(&logits[..], &want.to_f64_vec());
    Ok(Completion::Completed)
}

#[cfg(not(kiln_gpt_tiny))]
fn gpt_tiny_built_in_build_rs_matches_onnx_runtime() -> Result<Completion, Failed> {
    Ok(Completion::ignored_with("../shared/models/gpt_tiny.onnx is not present"))
}

/// Models real exporters wrote (ultralytics YOLOv8n, PaddlePaddle PP-LCNet),
/// compiled by build.rs with their symbolic dimensions fixed, against ONNX
/// Runtime's outputs.
#[cfg(kiln_real_models)]
fn real_exported_models_built_in_build_rs_match_onnx_runtime() -> Result<Completion, Failed> {
    let dir = env!("KILN_REAL_MODELS_DIR");
    let read = |f: &str| kiln::npy::read_npy(&std::fs::read(format!("{dir}/{f}")).expect("file")).expect("npy");
    macro_rules! check {
        ($m:ident, $name:literal, $input:literal, $n_in:literal, $n_out:literal) => {{
            let x = read(concat!($name, ".input.", $input, ".npy"));
            let want = read(concat!($name, ".output.npy"));
            let x: Box<[f32; $n_in]> = x.to_f32_vec().into_boxed_slice().try_into().expect("input size");
            let mut model = kiln_user_tests::$m::OwnedModel::with_threads(2).expect("this CPU runs the model");
            let mut out: Box<[f32; $n_out]> = vec![0f32; $n_out].into_boxed_slice().try_into().expect("output size");
            model.run(&x, &mut out).expect("run");
            close(&out[..], &want.to_f64_vec());
        }};
    }
    check!(onnx_yolov8n, "yolov8n", "images", 307_200, 46_200);
    check!(onnx_pplcnet, "pplcnet", "x", 150_528, 4);
    Ok(Completion::Completed)
}

#[cfg(not(kiln_real_models))]
fn real_exported_models_built_in_build_rs_match_onnx_runtime() -> Result<Completion, Failed> {
    Ok(Completion::ignored_with(
        "yolov8n/pplcnet are not present (run ../shared/models/fetch_real_models.py ../shared/models/real, \
         or set KILN_REAL_MODELS)",
    ))
}

fn a_model_built_for_a_cpu_feature_this_cpu_lacks_is_refused() -> Result<Completion, Failed> {
    use kiln_user_tests::{mlp_amx, mlp_zen};
    // One model per feature (AMX: Intel's; SSE4A: AMD's): each is refused
    // where this CPU lacks its feature.
    macro_rules! check_refused {
        ($model:ident, $feature:literal) => {
            if kiln_runtime::cpu::has_feature($feature) == Some(false) {
                let want = kiln_runtime::Error::MissingCpuFeature { feature: $feature, target: $model::TARGET };
                assert_eq!($model::OwnedModel::with_threads(1).err(), Some(want));
                let mut buffer = vec![0u8; $model::ARENA_BYTES + 63];
                assert_eq!($model::Model::new(&mut buffer).err(), Some(want));
                let message = want.to_string();
                assert!(message.contains(concat!("`", $feature, "`")), "{message}");
                assert!(message.contains($model::TARGET), "{message}");
                assert!($model::CPU_FEATURES.contains(&$feature));
                true
            } else {
                false
            }
        };
    }
    let amx = check_refused!(mlp_amx, "amx-tile");
    let zen = check_refused!(mlp_zen, "sse4a");
    if !amx && !zen {
        return Ok(Completion::ignored_with("this CPU has both AMX and SSE4A (or they cannot be checked here)"));
    }
    // The same model without them runs here.
    assert!(kiln_user_tests::mlp_text::CPU_FEATURES.iter().all(|f| kiln_runtime::cpu::has_feature(f) != Some(false)));
    Ok(Completion::Completed)
}

/// A test that may find its model absent (ignored, with the reason).
type GatedTest = fn() -> Result<Completion, Failed>;

/// One trial per test; the models' tests are ignored, with the reason, where
/// build.rs did not find them.
fn main() {
    let args = Arguments::from_args();
    let plain: [(&str, fn()); 4] = [
        ("mlp_from_relay_text_matches_the_interpreter", mlp_from_relay_text_matches_the_interpreter),
        ("convnet_compiled_to_c_matches_the_interpreter", convnet_compiled_to_c_matches_the_interpreter),
        ("run_allocates_nothing", run_allocates_nothing),
        ("a_small_arena_is_an_error", a_small_arena_is_an_error),
    ];
    let gated: [(&str, GatedTest); 4] = [
        (
            "reference_onnx_models_built_in_build_rs_match_onnx_runtime",
            reference_onnx_models_built_in_build_rs_match_onnx_runtime,
        ),
        ("gpt_tiny_built_in_build_rs_matches_onnx_runtime", gpt_tiny_built_in_build_rs_matches_onnx_runtime),
        (
            "real_exported_models_built_in_build_rs_match_onnx_runtime",
            real_exported_models_built_in_build_rs_match_onnx_runtime,
        ),
        (
            "a_model_built_for_a_cpu_feature_this_cpu_lacks_is_refused",
            a_model_built_for_a_cpu_feature_this_cpu_lacks_is_refused,
        ),
    ];
    let mut trials: Vec<Trial> = plain
        .into_iter()
        .map(|(name, test)| {
            Trial::test(name, move || {
                test();
                Ok(())
            })
        })
        .collect();
    trials.extend(gated.into_iter().map(|(name, test)| Trial::ignorable_test(name, test)));
    libtest_mimic::run(&args, trials).exit()
}
