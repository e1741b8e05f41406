//! kiln from a user's crate: a model declared with `relay_model!`, optimized
//! by the default pipeline, lowered to kernels, compiled (LLVM JIT) and run
//! over a planned arena — and compared with the reference interpreter.

use kiln::backend::aot::plan_executor;
use kiln::backend::host;
use kiln::codegen::llvm::Jit;
use kiln::relay::transform::default_pipeline;
use kiln::relay::{eval_function, infer_module, IRModule, Type, Value};
use kiln::tir::transform::{flatten_buffers, simplify_prim_func};
use kiln::transform::{apply, PassContext};
use kiln::{DataType, Tensor};

kiln::relay_model! {
    /// The seeds' MLP, weights passed as inputs.
    fn mlp(x: Tensor<[1, 784], f32>) -> Tensor<[1, 10], f32> {
        weight w1: [784, 128]; weight b1: [128];
        weight w2: [128, 10];  weight b2: [10];
        let h = relu(matmul(x, w1) + b1);
        matmul(h, w2) + b2
    }

    /// A conv block with batch norm and a residual add.
    fn block(x: Tensor<[1, 4, 7, 7], f32>) -> Tensor<[1, 4, 7, 7], f32> {
        weight w: [4, 4, 3, 3]; weight g: [4]; weight b: [4]; weight m: [4]; weight v: [4];
        let y = batch_norm(conv2d(x, w, padding = [1, 1]), g, b, m, v).0;
        relu(y + x)
    }
}

/// A deterministic input for each parameter (positive, so variances are valid).
fn inputs(m: &IRModule) -> Vec<Tensor> {
    let main = m.main().expect("main");
    let f = m.store.as_function(main).expect("function");
    let mut seed = 1u64;
    f.params
        .iter()
        .map(|&p| {
            let Some(Type::Tensor(t)) = m.store.checked_type(p).cloned() else { panic!("tensor parameter") };
            let vals: Vec<f64> = (0..t.numel())
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    0.05 + ((seed >> 33) % 1000) as f64 / 4000.0
                })
                .collect();
            Tensor::from_f64(DataType::F32, t.shape.clone(), &vals)
        })
        .collect()
}

fn compile_and_compare(mut m: IRModule, threads: usize) {
    infer_module(&mut m).expect("infer");
    let args = inputs(&m);
    let values: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
    let Value::Tensor(want) = eval_function(&m, "main", &values).expect("interpreter") else { panic!("tensor output") };
    let fused =
        apply(&default_pipeline().expect("pipeline"), m, &PassContext::new().with_opt_level(3)).expect("optimize");
    let mut plan = plan_executor(&fused).expect("executor plan");
    plan.kernels = plan.kernels.into_iter().map(|k| simplify_prim_func(flatten_buffers(k))).collect();
    let jit = Jit::new("model", &plan.kernels).expect("jit");
    let got = host::run(&plan, &jit, &args, threads).expect("run");
    let (g, w) = (got[0].to_f64_vec(), want.to_f64_vec());
    let scale = w.iter().fold(0f64, |a, v| a.max(v.abs()));
    for (a, b) in g.iter().zip(&w) {
        assert!((a - b).abs() <= 1e-5 * scale.max(1.0), "{a} vs {b}");
    }
    assert!(plan.arena_bytes >= plan.arena_lower_bound);
}

#[test]
fn mlp_compiles_to_two_kernels_and_matches_the_interpreter() {
    let mut m = mlp();
    infer_module(&mut m).expect("infer");
    let fused = apply(&default_pipeline().expect("pipeline"), m.clone(), &PassContext::new().with_opt_level(3))
        .expect("optimize");
    let plan = plan_executor(&fused).expect("plan");
    let names: Vec<&str> = plan.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["fused_nn_matmul_add_nn_relu", "fused_nn_matmul_add"]);
    compile_and_compare(m, 1);
}

#[test]
fn conv_block_matches_the_interpreter() {
    compile_and_compare(block(), 1);
    compile_and_compare(block(), 3);
}

#[test]
fn mlp_kernels_use_vector_instructions() {
    let mut m = mlp();
    infer_module(&mut m).expect("infer");
    let fused =
        apply(&default_pipeline().expect("pipeline"), m, &PassContext::new().with_opt_level(3)).expect("optimize");
    let plan = plan_executor(&fused).expect("plan");
    let kernels: Vec<_> = plan.kernels.into_iter().map(|k| simplify_prim_func(flatten_buffers(k))).collect();
    let target = kiln::codegen::llvm::LlvmTarget::parse("llvm -mcpu=skylake-avx512").expect("target");
    let out = kiln::codegen::llvm::compile("mlp", &kernels, &target).expect("compile");
    for k in ["fused_nn_matmul_add_nn_relu", "fused_nn_matmul_add"] {
        let start = out.assembly.find(&format!("{k}:")).unwrap_or_else(|| panic!("{k} in the assembly"));
        let body = &out.assembly[start..];
        let body = &body[..body.find(".Lfunc_end").unwrap_or(body.len())];
        assert!(body.contains("zmm") || body.contains("ymm"), "{k} has no vector code:\n{body}");
        assert!(body.contains("vfmadd") || body.contains("vmulps"), "{k} has no vector arithmetic");
    }
}
