//! TVM v0.16's own tests of the standard Relay passes, ported: each test is
//! named after the TVM test it comes from (`tests/python/relay/
//! test_pass_fold_constant.py`, `test_pass_eliminate_common_subexpr.py`)
//! and checks what TVM's checks: the module after the pass is structurally
//! equal to TVM's expected module after InferType (compared as printed text,
//! which holds every constant's value in its metadata section).
//!
//! Not ported, and why: `test_fold_const_with_on_device` and
//! `test_fold_let_with_on_device` (kiln has no device annotations), the QNN tests (no QNN dialect), `test_callback`
//! (EliminateCommonSubexpr takes no skip callback) and `test_pass_link_params`
//! (no executor attributes).

#[path = "common/tvm_port.rs"]
mod tvm_port;
use tvm_port::*;

use kiln::relay::IRModule;
use kiln::{DataType, Tensor};

// ---- test_pass_fold_constant.py ------------------------------------------------

/// `@main` returning the constant `c`.
fn returns_constant(c: Tensor) -> IRModule {
    module("def @main() {\n  meta[relay.Constant][0]\n}", &[c])
}

/// `concatenate((c, c), axis=0)` folds to `folded`.
fn assert_concatenation_folds(c: Tensor, folded: Tensor) {
    assert_becomes(
        module("def @main() {\n  concatenate((meta[relay.Constant][0], meta[relay.Constant][0]), axis=0)\n}", &[c]),
        &["FoldConstant"],
        returns_constant(folded),
    );
}

#[test]
fn test_concatenate_const() {
    // `tvm.nd.array(np.array([1.0, 2.0, 3.0]))`: float64.
    let c = Tensor::from_f64(DataType::F64, vec![3], &[1.0, 2.0, 3.0]);
    assert_concatenation_folds(c, Tensor::from_f64(DataType::F64, vec![6], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
}

#[test]
fn test_fold_const() {
    let c = f32s(&[3], &[1.0, 2.0, 3.0]);
    let folded = f32s(&[3], &[4.0, 8.0, 12.0]);
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1, 2, 3), float32]) {
  %0 = add(meta[relay.Constant][0], meta[relay.Constant][0]);
  %1 = multiply(%0, 2f);
  %2 = add(%x, %1);
  add(%2, meta[relay.Constant][0])
}",
            &[c.clone()],
        ),
        &["FoldConstant"],
        module(
            "def @main(%x: Tensor[(1, 2, 3), float32]) {
  %0 = add(%x, meta[relay.Constant][0]);
  add(%0, meta[relay.Constant][1])
}",
            &[folded, c],
        ),
    );
}

#[test]
fn test_fold_let() {
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1), float32]) {
  let %t1 = 1f;
  let %t2 = add(%t1, %t1);
  let %t3 = add(%t2, %x);
  %t3
}",
            &[],
        ),
        &["FoldConstant"],
        module("def @main(%x: Tensor[(1), float32]) {\n  let %t3 = add(2f, %x);\n  %t3\n}", &[]),
    );
}

#[test]
fn test_fold_tuple() {
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1), float32]) {
  %0 = (%x, 1f);
  %1 = add(%0.1, 1f);
  add(%1, %0.0)
}",
            &[],
        ),
        &["FoldConstant"],
        module("def @main(%x: Tensor[(1), float32]) {\n  add(2f, %x)\n}", &[]),
    );
}

#[test]
fn test_fold_concat() {
    assert_concatenation_folds(f32s(&[1, 3], &[1.0, 2.0, 3.0]), f32s(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
}

#[test]
fn test_fold_if() {
    let x = f32s(&[1, 3], &[1.0, 2.0, 3.0]);
    for (cond, folded) in [("True", [2.0, 4.0, 6.0]), ("False", [0.0, 0.0, 0.0])] {
        let text = format!(
            "def @main() {{
  if ({cond}) {{
    add(meta[relay.Constant][0], meta[relay.Constant][0])
  }} else {{
    subtract(meta[relay.Constant][0], meta[relay.Constant][0])
  }}
}}"
        );
        assert_becomes(
            module(&text, std::slice::from_ref(&x)),
            &["FoldConstant"],
            returns_constant(f32s(&[1, 3], &folded)),
        );
    }
}

/// `shape_of(%x + %y)` (or `ndarray_size`) of statically shaped values folds
/// to a constant although neither value is constant.
fn assert_shape_query_folds(op: &str, dtype: &str, folded: Tensor) {
    let params = "%x: Tensor[(8, 9, 10), float32], %y: Tensor[(8, 9, 10), float32]";
    assert_becomes(
        module(&format!("def @main({params}) {{\n  {op}(add(%x, %y), dtype=\"{dtype}\")\n}}"), &[]),
        &["FoldConstant"],
        module(&format!("def @main({params}) {{\n  meta[relay.Constant][0]\n}}"), &[folded]),
    );
}

#[test]
fn test_fold_shape_of() {
    assert_shape_query_folds("shape_of", "int32", Tensor::from_f64(DataType::I32, vec![3], &[8.0, 9.0, 10.0]));
    assert_shape_query_folds("shape_of", "float32", f32s(&[3], &[8.0, 9.0, 10.0]));
}

#[test]
fn test_fold_ndarray_size() {
    assert_shape_query_folds("ndarray_size", "int32", Tensor::from_f64(DataType::I32, vec![], &[720.0]));
    assert_shape_query_folds("ndarray_size", "float32", f32s(&[], &[720.0]));
}

#[test]
fn test_fold_batch_norm() {
    // `create_workload` with every parameter zero, bound as constants; then
    // InferType, SimplifyInference, FoldConstant, FoldScaleAxis at opt level 3.
    let zeros = |shape: &[usize]| Tensor::full(DataType::F32, shape.to_vec(), 0.0);
    let params = [zeros(&[16, 3, 3, 3]), zeros(&[16]), zeros(&[16]), zeros(&[16]), zeros(&[16])];
    let before = module(
        "def @main(%data: Tensor[(1, 3, 224, 224), float32]) {
  %0 = nn.conv2d(%data, meta[relay.Constant][0], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, meta[relay.Constant][1], meta[relay.Constant][2], meta[relay.Constant][3], meta[relay.Constant][4]);
  %1.0
}",
        &params,
    );
    let expected = module(
        "def @main(%data: Tensor[(1, 3, 224, 224), float32]) {
  %0 = nn.conv2d(%data, meta[relay.Constant][0], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  add(%0, meta[relay.Constant][1])
}",
        &[zeros(&[16, 3, 3, 3]), zeros(&[16, 1, 1])],
    );
    assert_becomes(before, &["SimplifyInference", "FoldConstant", "FoldScaleAxis"], expected);
}

#[test]
fn test_fold_dropout() {
    // nn.dropout is stateful: nothing folds.
    let data = f32s(&[10], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let text = "def @main() {\n  %0 = nn.dropout(meta[relay.Constant][0]);\n  add(%0.0, 1f)\n}";
    assert_becomes(module(text, std::slice::from_ref(&data)), &["FoldConstant"], module(text, &[data]));
}

/// Not a TVM test, but TVM's behaviour (its ConstantFolder inlines a let
/// only when the bound value folds to a Constant node): a `let` bound to a
/// tuple of constants stays, and so does the projection through it.
#[test]
fn fold_constant_keeps_a_let_bound_to_a_tuple_of_constants() {
    let text = "def @main(%x: float32) {\n  let %t = (1f, 2f);\n  add(%x, %t.0)\n}";
    assert_becomes(module(text, &[]), &["FoldConstant"], module(text, &[]));
}

// ---- test_pass_eliminate_common_subexpr.py -------------------------------------

#[test]
fn test_simple() {
    // The two `1f` are distinct nodes; scalar constants compare by value.
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1, 16), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(%x);
  %2 = add(%0, 1f);
  %3 = add(%1, 1f);
  add(%2, %3)
}",
            &[],
        ),
        &["EliminateCommonSubexpr"],
        module(
            "def @main(%x: Tensor[(1, 16), float32]) {
  %0 = nn.relu(%x);
  %1 = add(%0, 1f);
  add(%1, %1)
}",
            &[],
        ),
    );
}

#[test]
fn test_tuple_get_time() {
    let text = |body: &str| {
        format!(
            "def @main(%x: Tensor[(1, 16, 1, 1), float32], %var: Tensor[(16), float32], %mean: Tensor[(16), float32],
          %beta: Tensor[(16), float32], %gamma: Tensor[(16), float32]) {{
  %0 = nn.batch_norm(%x, %gamma, %beta, %mean, %var, epsilon=1e-05f);
{body}
}}"
        )
    };
    assert_becomes(
        module(&text("  %1 = %0.0;\n  %2 = %0.0;\n  add(%1, %2)"), &[]),
        &["EliminateCommonSubexpr"],
        module(&text("  %1 = %0.0;\n  add(%1, %1)"), &[]),
    );
}

#[test]
fn test_tuple_arg() {
    let ones = Tensor::full(DataType::F32, vec![1, 16], 1.0);
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1, 16), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(%x);
  %2 = add(%0, 1f);
  %3 = add(%1, 1f);
  %4 = concatenate((%2, meta[relay.Constant][0]), axis=0);
  %5 = concatenate((%3, meta[relay.Constant][0]), axis=0);
  add(%4, %5)
}",
            std::slice::from_ref(&ones),
        ),
        &["EliminateCommonSubexpr"],
        module(
            "def @main(%x: Tensor[(1, 16), float32]) {
  %0 = nn.relu(%x);
  %1 = add(%0, 1f);
  %2 = concatenate((%1, meta[relay.Constant][0]), axis=0);
  add(%2, %2)
}",
            &[ones],
        ),
    );
}

// ---- test_pass_fuse_ops.py -----------------------------------------------------

#[test]
fn test_fuse_simple() {
    // The scalar constant stays inside the kernel: one parameter, not two.
    assert_becomes(
        module("def @main(%x: Tensor[(10, 20), float32]) {\n  squeeze(exp(add(%x, 1f)))\n}", &[]),
        &["FuseOps"],
        module(
            "def @main(%x: Tensor[(10, 20), float32]) {
  %0 = fn (%p0: Tensor[(10, 20), float32], Primitive=1) -> Tensor[(10, 20), float32] {
    squeeze(exp(add(%p0, 1f)))
  };
  %0(%x)
}",
            &[],
        ),
    );
}

#[test]
fn test_fuse_tuple_get_elemwise() {
    assert_becomes(
        module(
            "def @main(%X: Tensor[(1, 10), float32], %W: Tensor[(30, 10), float32]) {
  %0 = nn.dense(%X, %W);
  %1 = split(%0, indices_or_sections=3, axis=1);
  add(sigmoid(%1.0), multiply(tanh(%1.1), exp(%1.2)))
}",
            &[],
        ),
        &["FuseOps"],
        module(
            "def @main(%X: Tensor[(1, 10), float32], %W: Tensor[(30, 10), float32]) {
  %0 = fn (%p0: Tensor[(1, 10), float32], %p1: Tensor[(30, 10), float32], Primitive=1) -> Tensor[(1, 30), float32] {
    nn.dense(%p0, %p1)
  };
  %1 = fn (%p01: Tensor[(1, 30), float32], Primitive=1) -> Tensor[(1, 10), float32] {
    %2 = split(%p01, indices_or_sections=3, axis=1);
    add(sigmoid(%2.0), multiply(tanh(%2.1), exp(%2.2)))
  };
  %1(%0(%X, %W))
}",
            &[],
        ),
    );
}

#[test]
fn test_tuple_get_root() {
    assert_becomes(
        module(
            "def @main(%X: Tensor[(1, 30), float32], %W: Tensor[(10, 10), float32]) {
  %0 = split(%X, indices_or_sections=3, axis=1);
  nn.dense(%0.0, %W)
}",
            &[],
        ),
        &["FuseOps"],
        module(
            "def @main(%X: Tensor[(1, 30), float32], %W: Tensor[(10, 10), float32]) {
  %0 = fn (%p0: Tensor[(1, 30), float32], Primitive=1) -> Tensor[(1, 10), float32] {
    %1 = split(%p0, indices_or_sections=3, axis=1);
    %1.0
  };
  %2 = fn (%p01: Tensor[(1, 10), float32], %p1: Tensor[(10, 10), float32], Primitive=1) -> Tensor[(1, 10), float32] {
    nn.dense(%p01, %p1)
  };
  %2(%0(%X), %W)
}",
            &[],
        ),
    );
}

#[test]
fn test_fuse_softmax() {
    // nn.softmax is OutEWiseFusable: the cast after it is the same kernel.
    // (The compiled numbers: corpus program softmax_epilogue.relay, in every sweep.)
    assert_becomes(
        module("def @main(%x: Tensor[(16, 16), float32]) {\n  cast(nn.softmax(%x), dtype=\"float16\")\n}", &[]),
        &["FuseOps"],
        module(
            "def @main(%x: Tensor[(16, 16), float32]) {
  %0 = fn (%p0: Tensor[(16, 16), float32], Primitive=1) -> Tensor[(16, 16), float16] {
    cast(nn.softmax(%p0), dtype=\"float16\")
  };
  %0(%x)
}",
            &[],
        ),
    );
}

#[test]
fn test_concatenate() {
    // Upsampling (injective) joins the concatenation and its epilogue; the
    // pooling stays alone.
    let before = "def @main(%x: Tensor[(1, 16, 64, 64), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2], padding=[0, 0]);
  %1 = nn.upsampling(%0, scale_h=2f, scale_w=2f, layout=\"NCHW\");
  add(concatenate((%1, %x), axis=1), 1f)
}";
    assert_becomes(
        module(before, &[]),
        &["FuseOps"],
        module(
            "def @main(%x: Tensor[(1, 16, 64, 64), float32]) {
  %0 = fn (%p0: Tensor[(1, 16, 64, 64), float32], Primitive=1) -> Tensor[(1, 16, 32, 32), float32] {
    nn.max_pool2d(%p0, pool_size=[2, 2], strides=[2, 2], padding=[0, 0])
  };
  %1 = fn (%p01: Tensor[(1, 16, 32, 32), float32], %p1: Tensor[(1, 16, 64, 64), float32], Primitive=1) -> Tensor[(1, 32, 64, 64), float32] {
    %2 = nn.upsampling(%p01, scale_h=2f, scale_w=2f, layout=\"NCHW\");
    add(concatenate((%2, %p1), axis=1), 1f)
  };
  %1(%0(%x), %x)
}",
            &[],
        ),
    );
}

#[test]
fn test_tuple_root() {
    assert_becomes(
        module(
            "def @main(%x: Tensor[(1, 16, 64, 64), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2], padding=[0, 0]);
  (nn.upsampling(%0, scale_h=2f, scale_w=2f, layout=\"NCHW\"), %x)
}",
            &[],
        ),
        &["FuseOps"],
        module(
            "def @main(%x: Tensor[(1, 16, 64, 64), float32]) {
  %0 = fn (%p0: Tensor[(1, 16, 64, 64), float32], Primitive=1) -> Tensor[(1, 16, 32, 32), float32] {
    nn.max_pool2d(%p0, pool_size=[2, 2], strides=[2, 2], padding=[0, 0])
  };
  %1 = fn (%p01: Tensor[(1, 16, 32, 32), float32], Primitive=1) -> Tensor[(1, 16, 64, 64), float32] {
    nn.upsampling(%p01, scale_h=2f, scale_w=2f, layout=\"NCHW\")
  };
  (%1(%0(%x)), %x)
}",
            &[],
        ),
    );
}

#[test]
fn test_stop_fusion() {
    // The annotation splits `exp(add(x, 1))` into two kernels and is gone.
    assert_becomes(
        module("def @main(%x: Tensor[(10, 20), float32]) {\n  exp(annotation.stop_fusion(add(%x, 1f)))\n}", &[]),
        &["FuseOps"],
        module(
            "def @main(%x: Tensor[(10, 20), float32]) {
  %0 = fn (%p0: Tensor[(10, 20), float32], Primitive=1) -> Tensor[(10, 20), float32] {
    add(%p0, 1f)
  };
  %1 = fn (%p01: Tensor[(10, 20), float32], Primitive=1) -> Tensor[(10, 20), float32] {
    exp(%p01)
  };
  %1(%0(%x))
}",
            &[],
        ),
    );
}

// ---- test_pass_dead_code_elimination.py -----------------------------------------

/// TVM's recursive `%f` over a `%data` of `dtype` (TVM's test: int32, whose
/// `log` type-checks), followed by `tail`.
fn recursion_then(dtype: &str, tail: &str) -> IRModule {
    module(
        &format!(
            "def @main() {{
  let %f = fn (%n: int, %data: {dtype}) -> {dtype} {{
    if (%n == 0) {{
      %data
    }} else {{
      %f(%n - 1, log(%data))
    }}
  }};
  {tail}
}}"
        ),
        &[],
    )
}

#[test]
fn test_live_recursion() {
    let m = recursion_then("int32", "%f(2, 10000)");
    assert_becomes(m.clone(), &["DeadCodeElimination"], m.clone());
    // Running it reaches `log` of an int32, which kiln (like TVM's
    // compilers) refuses to compute rather than round.
    let e = kiln::relay::eval_function(&m, "main", &[]).expect_err("log of an int32").to_string();
    assert!(e.contains("floating-point tensors only, found int32"), "{e}");
    // With a float32 `%data` the interpreter runs it: log(log(10000)).
    let m = recursion_then("float32", "%f(2, 10000f)");
    let out = kiln::relay::eval_function(&m, "main", &[]).expect("eval");
    let got = out.tensor().expect("tensor").get_f64(0);
    assert!((got - 10000f64.ln().ln()).abs() < 1e-5, "{got}");
}

#[test]
fn test_dead_recursion() {
    // A function used only by its own body is dead.
    assert_becomes(recursion_then("int32", "()"), &["DeadCodeElimination"], module("def @main() {\n  ()\n}", &[]));
}

#[test]
fn test_conv2d_fuse() {
    // The weights are untyped, as in TVM: each convolution's `channels` and
    // `kernel_size` type them. The 3 × 3 convolution on the second path is a
    // kernel of its own; the 1 × 1 one takes the final add.
    let before = "def @main(%x: Tensor[(1, 16, 64, 64), float32], %w1, %w2, %w3) {
  %0 = add(%x, 1f);
  %1 = nn.conv2d(%0, %w1, padding=[1, 1], channels=16, kernel_size=[3, 3]);
  %2 = add(%1, add(1f, %1));
  %3 = nn.conv2d(%2, %w2, padding=[0, 0], channels=16, kernel_size=[1, 1]);
  %4 = nn.conv2d(%2, %w3, padding=[1, 1], channels=16, kernel_size=[3, 3]);
  add(%3, %4)
}";
    let expected = "def @main(%x: Tensor[(1, 16, 64, 64), float32], %w1, %w2, %w3) {
  %0 = fn (%p0: Tensor[(1, 16, 64, 64), float32], Primitive=1) -> Tensor[(1, 16, 64, 64), float32] {
    add(%p0, 1f)
  };
  %1 = fn (%p0: Tensor[(1, 16, 64, 64), float32], %p1: Tensor[(16, 16, 3, 3), float32], Primitive=1) -> Tensor[(1, 16, 64, 64), float32] {
    %2 = nn.conv2d(%p0, %p1, padding=[1, 1], channels=16, kernel_size=[3, 3]);
    add(%2, add(1f, %2))
  };
  %3 = %1(%0(%x), %w1);
  %4 = fn (%p0: Tensor[(1, 16, 64, 64), float32], %p1: Tensor[(16, 16, 3, 3), float32], Primitive=1) -> Tensor[(1, 16, 64, 64), float32] {
    nn.conv2d(%p0, %p1, padding=[1, 1], channels=16, kernel_size=[3, 3])
  };
  %5 = fn (%p0: Tensor[(1, 16, 64, 64), float32], %p1: Tensor[(16, 16, 1, 1), float32], %p2: Tensor[(1, 16, 64, 64), float32], Primitive=1) -> Tensor[(1, 16, 64, 64), float32] {
    add(nn.conv2d(%p0, %p1, padding=[0, 0], channels=16, kernel_size=[1, 1]), %p2)
  };
  %5(%3, %w2, %4(%3, %w3))
}";
    assert_becomes(module(before, &[]), &["FuseOps"], module(expected, &[]));
}
