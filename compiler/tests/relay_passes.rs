//! Relay passes: text in, text out (inline snapshots; bless with
//! UPDATE_EXPECT=1), the seeds' FoldConstant cases, FuseOps groupings, and a
//! property test that every pass preserves what the program computes.

mod common;

use std::sync::Arc;

use expect_test::{expect, Expect};
use kiln::attrs::{AttrValue, Attrs};
use kiln::relay::{eval_function, infer_module, parse_module, print_module, IRModule, Store, Type, Value};
use kiln::transform::{apply, ConfigValue, PassContext, Sequential};
use kiln::{DataType, Tensor};

fn parse(text: &str) -> IRModule {
    let mut m = parse_module(&format!("#[version = \"0.0.5\"]\n{text}")).expect("parse");
    infer_module(&mut m).expect("infer");
    m
}

fn run_passes(m: IRModule, passes: &[&str], ctx: PassContext) -> IRModule {
    let mut names = passes.to_vec();
    names.push("InferType");
    let seq = Sequential::from_names("Test", &names).expect("pipeline");
    let ctx = Arc::new(ctx.with_required(passes));
    ctx.scope(|ctx| apply(&seq, m, ctx)).expect("passes")
}

fn check(text: &str, passes: &[&str], expected: Expect) {
    let out = run_passes(parse(text), passes, PassContext::new().with_opt_level(3));
    expected.assert_eq(&print_module(&out));
}

#[test]
fn fold_constant_seed_cases() {
    // A call whose arguments are all constant is evaluated.
    check(
        "def @main(%x: Tensor[(2), float32]) {\n  %0 = add(1f, 2f);\n  multiply(%x, %0)\n}",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(2), float32]) {
              multiply(%x, 3f) /* ty=Tensor[(2), float32] */
            }
        "#]],
    );
    // `let` of a constant propagates into the body and disappears.
    check(
        "def @main(%x: float32) {\n  let %c = multiply(2f, 3f);\n  add(%x, %c)\n}",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: float32) {
              add(%x, 6f) /* ty=float32 */
            }
        "#]],
    );
    // A projection of a literal tuple becomes the field.
    check(
        "def @main(%x: float32) {\n  %0 = (%x, 2f);\n  add(%0.0, %0.1)\n}",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: float32) {
              add(%x, 2f) /* ty=float32 */
            }
        "#]],
    );
    // Zero-argument calls are not folded (it would only bloat the program).
    check(
        "def @main(%x: Tensor[(4, 5), float32]) {\n  add(%x, ones(shape=[4, 5]))\n}",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(4, 5), float32]) {
              %0 = ones(shape=[4, 5]) /* ty=Tensor[(4, 5), float32] */;
              add(%x, %0) /* ty=Tensor[(4, 5), float32] */
            }
        "#]],
    );
    // Constant chains fold through; tensors become metadata constants.
    check(
        "def @main(%x: Tensor[(2), float32]) {\n  %0 = meta[relay.Constant][0];\n  %1 = exp(%0);\n  %2 = (%1, %0);\n  %3 = concatenate(%2);\n  %4 = sum(%3);\n  add(%x, %4)\n}\n#[metadata]\nrelay.Constant[0]: Tensor[(2), float32] = \"0000000000000000\"",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(2), float32]) {
              add(%x, 2f) /* ty=Tensor[(2), float32] */
            }
        "#]],
    );
    // `if` on a constant keeps the branch taken.
    check(
        "def @main(%x: float32) {\n  if (True) { exp(%x) } else { %x }\n}",
        &["FoldConstant"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: float32) {
              exp(%x) /* ty=float32 */
            }
        "#]],
    );
}

/// Constant chains large enough to fold on several threads (two independent
/// chains of 1 MB tensors, each two calls deep) fold to the values the
/// unfolded program computes, and a call whose evaluation fails stays a call,
/// with the calls that read it.
#[test]
fn fold_constant_in_parallel_keeps_values_and_failures() {
    let values = parse(
        "def @main(%x: Tensor[(262144), float32]) {
  %0 = full(1.5f, shape=[262144]);
  %1 = exp(%0);
  %2 = full(2f, shape=[262144]);
  %3 = multiply(%2, 3f);
  %4 = add(%x, %1);
  add(%4, %3)
}",
    );
    let folded = run_passes(values.clone(), &["FoldConstant"], PassContext::new().with_opt_level(3));
    let printed = print_module(&folded);
    assert!(!["full(", "exp(", "multiply("].iter().any(|op| printed.contains(op)), "{printed}");
    let x: Vec<f32> = (0..262144).map(|k| k as f32 * 1e-3).collect();
    let args = [Value::Tensor(Tensor::from_f32(vec![262144], &x))];
    let want = flat(&eval_function(&values, "main", &args).expect("eval"));
    assert_eq!(flat(&eval_function(&folded, "main", &args).expect("eval")), want);

    let failing = parse(
        "def @main(%x: Tensor[(262144), float32], %i: int32) {
  %0 = full(2f, shape=[262144]);
  %1 = multiply(%0, 3f);
  %2 = divide(7, 0);
  %3 = add(%2, 1);
  (add(%x, %1), add(%i, %3))
}",
    );
    let printed = print_module(&run_passes(failing, &["FoldConstant"], PassContext::new().with_opt_level(3)));
    assert!(!printed.contains("multiply("), "{printed}");
    let head = &printed[..printed.find("#[metadata]").unwrap_or(printed.len())];
    assert!(head.contains("%1 = divide(7, 0)") && head.contains("%2 = add(%1, 1)"), "{head}");
}

/// TVM's `DeadCodeElimination` is a function pass over `let`s: it never
/// removes a global function (`RemoveUnusedFunctions` does).
/// (`tests/python/relay/test_pass_dead_code_elimination.py`: globals survive DCE.)
#[test]
fn test_dead_code_elimination_keeps_global_functions() {
    let out = run_passes(
        parse("def @unused(%a: float32) {\n  %a\n}\n\ndef @main(%x: float32) {\n  let %dead = exp(%x);\n  %x\n}"),
        &["DeadCodeElimination"],
        PassContext::new().with_opt_level(3),
    );
    let text = print_module(&out);
    assert!(text.contains("def @unused") && !text.contains("%dead"), "{text}");
}

#[test]
fn dead_code_and_cse() {
    check(
        "def @unused(%a: float32) {\n  %a\n}\n\ndef @main(%x: float32) {\n  let %dead = exp(%x);\n  let %alive = log(%x);\n  %alive\n}",
        &["RemoveUnusedFunctions", "DeadCodeElimination"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: float32) {
              let %alive = log(%x) /* ty=float32 */;
              %alive
            }
        "#]],
    );
    check(
        "def @main(%x: Tensor[(3), float32]) {\n  %0 = exp(%x);\n  %1 = exp(%x);\n  %2 = add(%0, %x);\n  %3 = add(%1, %x);\n  multiply(%2, %3)\n}",
        &["EliminateCommonSubexpr"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(3), float32]) {
              %0 = exp(%x) /* ty=Tensor[(3), float32] */;
              %1 = add(%0, %x) /* ty=Tensor[(3), float32] */;
              multiply(%1, %1) /* ty=Tensor[(3), float32] */
            }
        "#]],
    );
}

#[test]
fn simplify_inference_and_expr() {
    check(
        "def @main(%x: Tensor[(1, 2, 2, 2), float32], %g: Tensor[(2), float32], %b: Tensor[(2), float32], %m: Tensor[(2), float32], %v: Tensor[(2), float32]) {\n  %0 = nn.batch_norm(%x, %g, %b, %m, %v);\n  %1 = nn.dropout(%0.0);\n  %1.0\n}",
        &["SimplifyInference"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(1, 2, 2, 2), float32], %g: Tensor[(2), float32], %b: Tensor[(2), float32], %m: Tensor[(2), float32], %v: Tensor[(2), float32]) {
              %0 = add(%v, 1e-5f) /* ty=Tensor[(2), float32] */;
              %1 = sqrt(%0) /* ty=Tensor[(2), float32] */;
              %2 = divide(1f, %1) /* ty=Tensor[(2), float32] */;
              %3 = multiply(%2, %g) /* ty=Tensor[(2), float32] */;
              %4 = expand_dims(%3, axis=1, num_newaxis=2) /* ty=Tensor[(2, 1, 1), float32] */;
              %5 = multiply(%x, %4) /* ty=Tensor[(1, 2, 2, 2), float32] */;
              %6 = negative(%m) /* ty=Tensor[(2), float32] */;
              %7 = multiply(%6, %3) /* ty=Tensor[(2), float32] */;
              %8 = add(%7, %b) /* ty=Tensor[(2), float32] */;
              %9 = expand_dims(%8, axis=1, num_newaxis=2) /* ty=Tensor[(2, 1, 1), float32] */;
              add(%5, %9) /* ty=Tensor[(1, 2, 2, 2), float32] */
            }
        "#]],
    );
    check(
        "def @main(%x: Tensor[(2, 3), float32]) {\n  %0 = add(%x, 0f);\n  %1 = multiply(1f, %0);\n  %2 = transpose(%1);\n  %3 = transpose(%2);\n  %4 = reshape(%3, newshape=[3, 2]);\n  %5 = reshape(%4, newshape=[6]);\n  negative(negative(%5))\n}",
        &["SimplifyExpr"],
        expect![[r#"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(2, 3), float32]) {
              reshape(%x, newshape=[6]) /* ty=Tensor[(6), float32] */
            }
        "#]],
    );
    // Small integer powers of floats become products (GELU's x³); others stay.
    check(
        "def @main(%x: Tensor[(2, 3), float32], %n: Tensor[(2, 3), int32]) {\n  %0 = power(%x, 3f);\n  %1 = power(%x, 2f);\n  %2 = power(%x, 0.5f);\n  %3 = power(%n, 2);\n  (%0, %1, %2, %3)\n}",
        &["SimplifyExpr"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(2, 3), float32], %n: Tensor[(2, 3), int32]) {
              %0 = multiply(%x, %x) /* ty=Tensor[(2, 3), float32] */;
              %1 = multiply(%0, %x) /* ty=Tensor[(2, 3), float32] */;
              %2 = multiply(%x, %x) /* ty=Tensor[(2, 3), float32] */;
              %3 = power(%x, 0.5f) /* ty=Tensor[(2, 3), float32] */;
              %4 = power(%n, 2) /* ty=Tensor[(2, 3), int32] */;
              (%1, %2, %3, %4) /* ty=(Tensor[(2, 3), float32], Tensor[(2, 3), float32], Tensor[(2, 3), float32], Tensor[(2, 3), int32]) */
            }
        "##]],
    );
}

/// A quantization round trip (QuantizeLinear then DequantizeLinear, as the
/// ONNX importer writes them) loses its conversions and its zero point's
/// two additions; a cast that can overflow, a clip to non-integral bounds, a
/// value that is not an integer, or two different zero points stay.
#[test]
fn simplify_expr_drops_quantization_round_trips() {
    check(
        "def @main(%x: Tensor[(4), float32]) {\n  %0 = divide(%x, 0.5f);\n  %1 = round(%0);\n  %2 = add(%1, -3f);\n  %3 = clip(%2, a_min=-128f, a_max=127f);\n  %4 = cast(%3, dtype=\"int8\");\n  %5 = cast(%4, dtype=\"float32\");\n  %6 = subtract(%5, -3f);\n  %7 = clip(%2, a_min=0f, a_max=255f);\n  %8 = cast(%7, dtype=\"int8\");\n  %9 = cast(%8, dtype=\"float32\");\n  %10 = clip(%0, a_min=0f, a_max=100f);\n  %11 = cast(%10, dtype=\"uint8\");\n  %12 = cast(%11, dtype=\"float32\");\n  %13 = clip(%2, a_min=0.5f, a_max=100f);\n  %14 = cast(%13, dtype=\"uint8\");\n  %15 = cast(%14, dtype=\"float32\");\n  %16 = subtract(%3, 2f);\n  (%6, %9, %12, %15, %16)\n}",
        &["SimplifyExpr"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(4), float32]) {
              %0 = divide(%x, 0.5f) /* ty=Tensor[(4), float32] */;
              %1 = round(%0) /* ty=Tensor[(4), float32] */;
              %2 = clip(%1, a_min=-125.0f, a_max=130.0f) /* ty=Tensor[(4), float32] */;
              %3 = add(%1, -3f) /* ty=Tensor[(4), float32] */;
              %4 = clip(%3, a_min=0.0f, a_max=255.0f) /* ty=Tensor[(4), float32] */;
              %5 = cast(%4, dtype="int8") /* ty=Tensor[(4), int8] */;
              %6 = cast(%5, dtype="float32") /* ty=Tensor[(4), float32] */;
              %7 = clip(%0, a_min=0.0f, a_max=100.0f) /* ty=Tensor[(4), float32] */;
              %8 = cast(%7, dtype="uint8") /* ty=Tensor[(4), uint8] */;
              %9 = cast(%8, dtype="float32") /* ty=Tensor[(4), float32] */;
              %10 = clip(%3, a_min=0.5f, a_max=100.0f) /* ty=Tensor[(4), float32] */;
              %11 = cast(%10, dtype="uint8") /* ty=Tensor[(4), uint8] */;
              %12 = cast(%11, dtype="float32") /* ty=Tensor[(4), float32] */;
              %13 = clip(%3, a_min=-128.0f, a_max=127.0f) /* ty=Tensor[(4), float32] */;
              %14 = subtract(%13, 2f) /* ty=Tensor[(4), float32] */;
              (%2, %6, %9, %12, %14) /* ty=(Tensor[(4), float32], Tensor[(4), float32], Tensor[(4), float32], Tensor[(4), float32], Tensor[(4), float32]) */
            }
        "##]],
    );
    // Integers may wrap in the sum: their zero point stays.
    check(
        "def @main(%n: Tensor[(4), int8]) {\n  %0 = round(%n);\n  %1 = add(%0, 3i8);\n  %2 = clip(%1, a_min=-128f, a_max=127f);\n  subtract(%2, 3i8)\n}",
        &["SimplifyExpr"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%n: Tensor[(4), int8]) {
              %0 = round(%n) /* ty=Tensor[(4), int8] */;
              %1 = add(%0, 3i8) /* ty=Tensor[(4), int8] */;
              %2 = clip(%1, a_min=-128.0f, a_max=127.0f) /* ty=Tensor[(4), int8] */;
              subtract(%2, 3i8) /* ty=Tensor[(4), int8] */
            }
        "##]],
    );
}

/// A max pooling between a quantization's two conversions (ResNet's pool in
/// a QOperator model: bytes in, floats out) moves before them and the round
/// trip goes; with ceil mode, or a pad as wide as the window, it stays (a
/// window may then hold padding alone, whose identity differs by type).
#[test]
fn simplify_expr_moves_max_pooling_out_of_a_round_trip() {
    check(
        "def @main(%x: Tensor[(1, 2, 6, 6), float32]) {\n  %0 = clip(round(%x), a_min=0f, a_max=255f);\n  %1 = cast(%0, dtype=\"uint8\");\n  %2 = nn.max_pool2d(%1, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);\n  %3 = cast(%2, dtype=\"float32\");\n  %4 = nn.max_pool2d(%1, pool_size=[2, 2], padding=[2, 2, 2, 2]);\n  %5 = cast(%4, dtype=\"float32\");\n  (%3, %5)\n}",
        &["SimplifyExpr"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(1, 2, 6, 6), float32]) {
              %0 = round(%x) /* ty=Tensor[(1, 2, 6, 6), float32] */;
              %1 = clip(%0, a_min=0.0f, a_max=255.0f) /* ty=Tensor[(1, 2, 6, 6), float32] */;
              %2 = nn.max_pool2d(%1, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]) /* ty=Tensor[(1, 2, 3, 3), float32] */;
              %3 = cast(%1, dtype="uint8") /* ty=Tensor[(1, 2, 6, 6), uint8] */;
              %4 = nn.max_pool2d(%3, pool_size=[2, 2], padding=[2, 2, 2, 2]) /* ty=Tensor[(1, 2, 9, 9), uint8] */;
              %5 = cast(%4, dtype="float32") /* ty=Tensor[(1, 2, 9, 9), float32] */;
              (%2, %5) /* ty=(Tensor[(1, 2, 3, 3), float32], Tensor[(1, 2, 9, 9), float32]) */
            }
        "##]],
    );
}

#[test]
fn fold_scale_axis_moves_scales_into_weights() {
    check(
        "def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 2, 3, 3), float32], %s: Tensor[(3, 1, 1), float32], %t: Tensor[(2, 1, 1), float32]) {\n  %0 = multiply(%x, %t);\n  %1 = nn.conv2d(%0, %w, padding=[1, 1, 1, 1]);\n  multiply(%1, %s)\n}",
        &["FoldScaleAxis"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 2, 3, 3), float32], %s: Tensor[(3, 1, 1), float32], %t: Tensor[(2, 1, 1), float32]) {
              %0 = squeeze(%s, axis=[1, 2]) /* ty=Tensor[(3), float32] */;
              %1 = expand_dims(%0, axis=1, num_newaxis=3) /* ty=Tensor[(3, 1, 1, 1), float32] */;
              %2 = multiply(%w, %1) /* ty=Tensor[(3, 2, 3, 3), float32] */;
              %3 = squeeze(%t, axis=[1, 2]) /* ty=Tensor[(2), float32] */;
              %4 = expand_dims(%3, axis=1, num_newaxis=2) /* ty=Tensor[(2, 1, 1), float32] */;
              %5 = multiply(%2, %4) /* ty=Tensor[(3, 2, 3, 3), float32] */;
              nn.conv2d(%x, %5, padding=[1, 1, 1, 1]) /* ty=Tensor[(1, 3, 4, 4), float32] */
            }
        "##]],
    );
}

#[test]
fn to_a_normal_form_binds_in_the_right_scope() {
    check(
        "def @main(%c: bool, %x: float32) {\n  %0 = exp(%x);\n  %1 = if (%c) { add(%0, log(%x)) } else { %0 };\n  negative(%1)\n}",
        &["ToANormalForm"],
        expect![[r##"
            #[version = "0.0.5"]
            def @main(%c: bool, %x: float32) {
              let %x1: float32 = exp(%x) /* ty=float32 */;
              let %x4: float32 = if (%c) {
                let %x2: float32 = log(%x) /* ty=float32 */;
                let %x3: float32 = add(%x1, %x2) /* ty=float32 */;
                %x3
              } else {
                %x1
              };
              let %x5: float32 = negative(%x4) /* ty=float32 */;
              %x5
            }
        "##]],
    );
}

fn fuse(text: &str, ctx: PassContext) -> String {
    let m = run_passes(parse(text), &["FuseOps"], ctx);
    print_module(&m)
}

/// Each primitive function's operators, in order: the grouping FuseOps chose.
fn groups(printed: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in printed.lines() {
        if line.contains("Primitive=1") {
            current = Some(Vec::new());
        } else if line.trim() == "};" || line.trim().starts_with("}") {
            if let Some(g) = current.take() {
                out.push(g);
            }
        } else if let Some(g) = current.as_mut() {
            let body = line.split('=').nth(if line.trim_start().starts_with('%') { 1 } else { 0 }).unwrap_or(line);
            if let Some(op) = body.trim().split('(').next() {
                if !op.is_empty() && !op.starts_with('%') {
                    g.push(op.to_string());
                }
            }
        }
    }
    out
}

fn fuse_groups(text: &str) -> Vec<Vec<String>> {
    groups(&fuse(text, PassContext::new()))
}

fn g(ops: &[&str]) -> Vec<String> {
    ops.iter().map(|s| s.to_string()).collect()
}

#[test]
fn fuse_conv_epilogue() {
    let gs = fuse_groups("def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 3, 3), float32], %b: Tensor[(2), float32]) {\n  %0 = nn.conv2d(%x, %w, padding=[1, 1]);\n  %1 = nn.bias_add(%0, %b);\n  nn.relu(%1)\n}");
    assert_eq!(gs, [g(&["nn.conv2d", "nn.bias_add", "nn.relu"])]);
}

#[test]
fn fuse_elementwise_diamond() {
    let gs = fuse_groups("def @main(%x: Tensor[(4), float32]) {\n  %0 = add(%x, 1f);\n  %1 = exp(%0);\n  %2 = sqrt(%0);\n  add(%1, %2)\n}");
    assert_eq!(gs, [g(&["add", "exp", "sqrt", "add"])]);
}

#[test]
fn fuse_diamond_after_conv_stops_at_the_post_dominator() {
    // conv → relu → two elementwise branches → add: the conv group takes its
    // epilogue up to the add, which post-dominates everything.
    let gs = fuse_groups("def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 1, 1), float32]) {\n  %0 = nn.conv2d(%x, %w);\n  %1 = nn.relu(%0);\n  %2 = exp(%1);\n  %3 = negative(%1);\n  add(%2, %3)\n}");
    assert_eq!(gs, [g(&["nn.conv2d", "nn.relu", "exp", "negative", "add"])]);
}

#[test]
fn fuse_tuple_into_concatenate() {
    let gs = fuse_groups("def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {\n  %0 = exp(%x);\n  %1 = log(%y);\n  %2 = (%0, %1);\n  concatenate(%2)\n}");
    assert_eq!(gs, [g(&["exp", "log", "concatenate"])]);
}

#[test]
fn fuse_reduction_takes_its_inputs_not_its_users() {
    let gs = fuse_groups(
        "def @main(%x: Tensor[(4, 4), float32]) {\n  %0 = exp(%x);\n  %1 = sum(%0, axis=[1]);\n  sqrt(%1)\n}",
    );
    assert_eq!(gs, [g(&["exp", "sum"]), g(&["sqrt"])]);
}

#[test]
fn fuse_softmax_takes_its_elementwise_users_not_the_dense_before() {
    // nn.softmax is OutEWiseFusable, as in TVM; dense's epilogue cannot be a softmax.
    let gs = fuse_groups("def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]) {\n  %0 = nn.dense(%x, %w);\n  %1 = nn.softmax(%0);\n  exp(%1)\n}");
    assert_eq!(gs, [g(&["nn.dense"]), g(&["nn.softmax", "exp"])]);
}

#[test]
fn fuse_residual_block() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ir/tests/data/relay/residual_block.relay"))
            .expect("corpus file");
    let text = text.trim_start_matches("#[version = \"0.0.5\"]\n");
    let m = run_passes(
        parse(text),
        &["SimplifyInference", "FoldScaleAxis", "FoldConstant", "FuseOps"],
        PassContext::new().with_opt_level(3),
    );
    let gs = groups(&print_module(&m));
    // Each conv2d's group holds its batch-norm shift, its relu, and (the
    // second) the residual add; the scale went into the weights.
    let conv_groups: Vec<&Vec<String>> = gs.iter().filter(|g| g.contains(&"nn.conv2d".to_string())).collect();
    assert_eq!(conv_groups.len(), 2, "{gs:?}");
    assert!(conv_groups.iter().all(|g| g.contains(&"nn.relu".to_string()) && g.contains(&"add".to_string())), "{gs:?}");
    assert!(conv_groups[1].iter().filter(|op| *op == "add").count() >= 2, "residual add fused: {gs:?}");
    assert!(!gs.iter().flatten().any(|op| op == "nn.batch_norm"));
}

#[test]
fn fuse_respects_max_depth() {
    let text = "def @main(%x: Tensor[(4), float32]) {\n  %0 = exp(%x);\n  %1 = exp(%0);\n  %2 = exp(%1);\n  %3 = exp(%2);\n  %4 = exp(%3);\n  exp(%4)\n}";
    assert_eq!(fuse_groups(text), [g(&["exp"; 6])]);
    let ctx = PassContext::new().with_config("relay.FuseOps.max_depth", ConfigValue::Int(2)).expect("config");
    let gs = groups(&fuse(text, ctx));
    assert!(gs.iter().all(|g| g.len() <= 2), "{gs:?}");
    assert_eq!(gs.iter().map(Vec::len).sum::<usize>(), 6);
    // At opt level 0 nothing fuses.
    let gs = groups(&fuse(text, PassContext::new().with_opt_level(0)));
    assert_eq!(gs.len(), 6);
}

// ---- semantics preservation ------------------------------------------------

use common::randomized;
use proptest::prelude::*;
use proptest::sample::Index;

/// `values` (cycled) as an f32 tensor of `shape`.
fn tensor(values: &[f64], shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f64(DataType::F32, shape.to_vec(), &values.iter().copied().cycle().take(n).collect::<Vec<_>>())
}

/// Values in [-1, 1) for a tensor of `n` elements.
fn values(n: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-1.0f64..1.0, n)
}

/// One step of a random program: an operation (`kind`) on two earlier
/// values (`a`, `b`), with constants drawn from `constants`.
#[derive(Clone, Debug)]
struct Step {
    kind: usize,
    a: Index,
    b: Index,
    constants: Vec<f64>,
}

/// A random program's recipe: its steps and which earlier value joins the
/// last in the result. Shrinking removes steps and moves operands earlier.
fn program_recipe() -> impl Strategy<Value = (Vec<Step>, Index)> {
    let step = (0..12usize, any::<Index>(), any::<Index>(), values(12)).prop_map(|(kind, a, b, constants)| Step {
        kind,
        a,
        b,
        constants,
    });
    (prop::collection::vec(step, 6..16), any::<Index>())
}

/// The well-typed program over [2, 3] tensors `x`, `y` that `recipe`
/// describes: elementwise, broadcast, reductions, data movement, constants,
/// lets and a tuple.
fn random_program((steps, other): &(Vec<Step>, Index)) -> IRModule {
    let mut s = Store::new();
    let ty = Type::tensor([2, 3], DataType::F32);
    let x = s.var("x", Some(ty.clone()));
    let y = s.var("y", Some(ty));
    let mut pool = vec![x, y];
    let mut lets = Vec::new();
    let attrs = |pairs: &[(&str, AttrValue)]| Attrs::from_pairs(pairs.iter().map(|(k, v)| (*k, v.clone())));
    for step in steps {
        let (a, b) = (*step.a.get(&pool), *step.b.get(&pool));
        let constant = |s: &mut Store, at: usize, shape: &[usize]| s.constant(tensor(&step.constants[at..], shape));
        let e = match step.kind {
            0 => s.call_op("add", vec![a, b], Attrs::new()),
            1 => s.call_op("multiply", vec![a, b], Attrs::new()),
            2 => s.call_op("subtract", vec![a, b], Attrs::new()),
            3 => s.call_op("tanh", vec![a], Attrs::new()),
            4 => s.call_op("nn.relu", vec![a], Attrs::new()),
            5 => {
                let c = constant(&mut s, 0, &[3]);
                s.call_op("add", vec![a, c], Attrs::new())
            }
            6 => {
                let c = constant(&mut s, 0, &[2, 3]);
                let k = constant(&mut s, 6, &[2, 3]);
                let ck = s.call_op("multiply", vec![c, k], Attrs::new()).expect("op");
                s.call_op("maximum", vec![a, ck], Attrs::new())
            }
            7 => {
                let r = s
                    .call_op(
                        "sum",
                        vec![a],
                        attrs(&[("axis", AttrValue::Ints(vec![1])), ("keepdims", AttrValue::Bool(true))]),
                    )
                    .expect("op");
                let denominator = s_exp_plus_one(&mut s, r);
                s.call_op("divide", vec![b, denominator], Attrs::new())
            }
            8 => {
                let t = s.call_op("transpose", vec![a], Attrs::new()).expect("op");
                s.call_op("transpose", vec![t], Attrs::new())
            }
            9 => {
                let r = s.call_op("reshape", vec![a], attrs(&[("newshape", AttrValue::Ints(vec![3, 2]))])).expect("op");
                s.call_op("reshape", vec![r], attrs(&[("newshape", AttrValue::Ints(vec![2, 3]))]))
            }
            10 => {
                let zero = s.constant(Tensor::scalar(DataType::F32, 0.0));
                s.call_op("add", vec![a, zero], Attrs::new())
            }
            _ => {
                let v = s.var(format!("l{}", lets.len()), None);
                let value = s.call_op("sigmoid", vec![a], Attrs::new()).expect("op");
                lets.push((v, value));
                Ok(v)
            }
        }
        .expect("op");
        pool.push(e);
    }
    let last = *pool.last().expect("nonempty");
    let other = *other.get(&pool);
    let mut body = s.tuple(vec![last, other]);
    for (v, value) in lets.into_iter().rev() {
        body = s.let_(v, value, body);
    }
    let f = s.function(vec![x, y], body, None, Attrs::new());
    IRModule::from_main(s, f).expect("module")
}

fn s_exp_plus_one(s: &mut Store, r: kiln::relay::ExprId) -> kiln::relay::ExprId {
    let e = s.call_op("exp", vec![r], Attrs::new()).expect("op");
    let one = s.constant(Tensor::scalar(DataType::F32, 1.0));
    s.call_op("add", vec![e, one], Attrs::new()).expect("op")
}

fn flat(v: &Value) -> Vec<f64> {
    match v {
        Value::Tensor(t) => t.to_f64_vec(),
        Value::Tuple(f) => f.iter().flat_map(flat).collect(),
        Value::Closure(_) => vec![],
    }
}

/// Every pass, and the default pipeline, keeps the values of random programs.
fn check_passes_preserve(m: &IRModule, args: &[Value]) -> Result<(), TestCaseError> {
    let passes = [
        "FoldConstant",
        "EliminateCommonSubexpr",
        "DeadCodeElimination",
        "SimplifyExpr",
        "SimplifyInference",
        "FoldScaleAxis",
        "ToANormalForm",
        "FuseOps",
    ];
    let want = flat(&eval_function(m, "main", args).expect("eval"));
    for pass in passes {
        let out = run_passes(m.clone(), &[pass], PassContext::new().with_opt_level(3));
        let got =
            flat(&eval_function(&out, "main", args).map_err(|e| fail(format!("{pass}: {e}\n{}", print_module(&out))))?);
        prop_assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            prop_assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{}: {} vs {}\n{}", pass, a, b, print_module(m));
        }
    }
    // And the whole default pipeline.
    let seq = kiln::relay::transform::default_pipeline().expect("pipeline");
    let out = apply(&seq, m.clone(), &PassContext::new().with_opt_level(3)).expect("pipeline runs");
    let got = flat(&eval_function(&out, "main", args).expect("eval"));
    for (a, b) in got.iter().zip(&want) {
        prop_assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "default pipeline: {} vs {}", a, b);
    }
    Ok(())
}

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// A random conv/dense block: conv2d (maybe grouped) → bias → batch norm →
/// activation → per-channel scale → residual; and a dense head with a scale
/// and layer norm — the shapes SimplifyInference and FoldScaleAxis rewrite.
#[derive(Clone, Debug)]
struct Block {
    channels: usize,
    grouped: bool,
    bias: usize,
    activation: usize,
    scale_side: usize,
    /// The parameters' values, in order (cycled).
    values: Vec<f64>,
}

fn block_recipe() -> impl Strategy<Value = Block> {
    (2..5usize, any::<bool>(), 0..3usize, 0..3usize, 0..2usize, values(64)).prop_map(
        |(channels, grouped, bias, activation, scale_side, values)| Block {
            channels,
            grouped,
            bias,
            activation,
            scale_side,
            values,
        },
    )
}

fn random_block(block: &Block) -> (IRModule, Vec<Value>) {
    let c = block.channels;
    let groups = if block.grouped { c } else { 1 };
    let bias = ["nn.bias_add", "add", ""][block.bias];
    let act = ["nn.relu(%3)", "clip(%3, a_min=0f, a_max=6f)", "%3"][block.activation];
    let scale_side = block.scale_side;
    let text = format!(
        "def @main(%x: Tensor[(1, {c}, 5, 5), float32], %w: Tensor[({c}, {icpg}, 3, 3), float32], %b: Tensor[({c}), float32], %bb: Tensor[({c}, 1, 1), float32],
                   %g: Tensor[({c}), float32], %be: Tensor[({c}), float32], %m: Tensor[({c}), float32], %v: Tensor[({c}), float32],
                   %s: Tensor[({c}, 1, 1), float32], %t: Tensor[({c}, 1, 1), float32], %wd: Tensor[(4, {flat}), float32], %sd: Tensor[(4), float32],
                   %lg: Tensor[(4), float32], %lb: Tensor[(4), float32]) {{
           %0 = nn.conv2d(multiply(%x, %t), %w, padding=[1, 1], groups={groups});
           %1 = {bias_expr};
           %2 = nn.batch_norm(%1, %g, %be, %m, %v);
           %3 = %2.0;
           %4 = {act};
           %5 = {scaled};
           %6 = add(%5, %x);
           %7 = nn.batch_flatten(%6);
           %8 = nn.dense(%7, %wd);
           %9 = multiply(%8, %sd);
           %10 = nn.dropout(%9);
           nn.layer_norm(%10.0, %lg, %lb)
         }}",
        icpg = c / groups,
        flat = c * 25,
        bias_expr = match bias {
            "nn.bias_add" => "nn.bias_add(%0, %b)",
            "add" => "add(%0, %bb)",
            _ => "%0",
        },
        scaled = if scale_side == 0 { "multiply(%4, %s)" } else { "multiply(%s, %4)" },
    );
    let m = parse(&text);
    let main = m.main().expect("main");
    let f = m.store.as_function(main).expect("function");
    let mut args = Vec::new();
    for (k, &p) in f.params.iter().enumerate() {
        let Type::Tensor(t) = m.store.checked_type(p).expect("typed").clone() else { panic!("tensor params") };
        let mut x = tensor(&block.values[(k * 7) % block.values.len()..], &t.shape);
        // Variances must be positive.
        if m.store.as_var(p).is_some_and(|v| v.name == "v") {
            x = Tensor::from_f64(
                DataType::F32,
                t.shape.clone(),
                &x.to_f64_vec().iter().map(|v| v.abs() + 0.5).collect::<Vec<_>>(),
            );
        }
        args.push(Value::Tensor(x));
    }
    (m, args)
}

/// SimplifyInference, FoldScaleAxis and their neighbours keep a block's values.
fn check_block_passes_preserve(block: &Block) -> Result<(), TestCaseError> {
    {
        let (m, args) = random_block(block);
        let want = flat(&eval_function(&m, "main", &args).expect("eval"));
        let pipelines: [&[&str]; 5] = [
            &["SimplifyInference"],
            &["SimplifyInference", "FoldScaleAxis"],
            &["SimplifyInference", "FoldScaleAxis", "FoldConstant", "SimplifyExpr"],
            &["SimplifyInference", "FoldScaleAxis", "FuseOps"],
            &["ToANormalForm", "DeadCodeElimination"],
        ];
        for passes in pipelines {
            let out = run_passes(m.clone(), passes, PassContext::new().with_opt_level(3));
            let got = flat(&eval_function(&out, "main", &args).map_err(|e| fail(format!("{passes:?}: {e}")))?);
            for (a, b) in got.iter().zip(&want) {
                prop_assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{:?}: {} vs {}\n{}",
                    passes,
                    a,
                    b,
                    print_module(&out)
                );
            }
        }
        // SimplifyInference removed every batch_norm, layer_norm and dropout; FoldScaleAxis every scale after conv2d.
        let out = run_passes(m.clone(), &["SimplifyInference", "FoldScaleAxis"], PassContext::new().with_opt_level(3));
        let text = print_module(&out);
        prop_assert!(
            !text.contains("nn.batch_norm") && !text.contains("nn.layer_norm") && !text.contains("nn.dropout"),
            "{}",
            text
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(randomized::config(60))]

    #[test]
    fn every_pass_preserves_semantics_on_random_programs(recipe in program_recipe(), x in values(6), y in values(6)) {
        let mut m = random_program(&recipe);
        infer_module(&mut m).expect("random programs are well-typed");
        let args = [Value::Tensor(tensor(&x, &[2, 3])), Value::Tensor(tensor(&y, &[2, 3]))];
        check_passes_preserve(&m, &args)?;
    }
}

proptest! {
    #![proptest_config(randomized::config(30))]

    #[test]
    fn inference_and_scale_passes_preserve_semantics_on_random_blocks(block in block_recipe()) {
        check_block_passes_preserve(&block)?;
    }

    /// The corpus's residual block, optimized by the default pipeline, on random positive inputs.
    #[test]
    fn optimized_residual_block_computes_the_same_values(input in values(64)) {
        optimized_residual_block_on(&input)?;
    }
}

fn optimized_residual_block_on(input: &[f64]) -> Result<(), TestCaseError> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ir/tests/data/relay/residual_block.relay"))
            .expect("corpus file");
    let mut m = parse_module(&text).expect("parse");
    infer_module(&mut m).expect("infer");
    let main = m.main().expect("main");
    let f = m.store.as_function(main).expect("function");
    let args: Vec<Value> = f
        .params
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let Type::Tensor(t) = m.store.checked_type(p).expect("typed").clone() else { panic!("tensor") };
            let x = tensor(&input[(k * 7) % input.len()..], &t.shape);
            let vals: Vec<f64> = x.to_f64_vec().iter().map(|v| v.abs() + 0.1).collect();
            Value::Tensor(Tensor::from_f64(DataType::F32, t.shape.clone(), &vals))
        })
        .collect();
    let want = flat(&eval_function(&m, "main", &args).expect("eval"));
    let seq = kiln::relay::transform::default_pipeline().expect("pipeline");
    let out = apply(&seq, m, &PassContext::new().with_opt_level(3)).expect("opt");
    let got = flat(&eval_function(&out, "main", &args).expect("eval optimized"));
    for (a, b) in got.iter().zip(&want) {
        prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{} vs {}", a, b);
    }
    Ok(())
}
