//! TVM v0.16's tests of three standard Relay passes, ported: each test is
//! named after the TVM test it comes from and sits in the module named after
//! its file (`tests/python/relay/test_pass_dead_code_elimination.py`,
//! `test_pass_eliminate_common_subexpr.py`, `test_pass_fold_scale_axis.py`).
//! Each checks what TVM's checks: the module after the pass is structurally
//! equal to TVM's expected module after InferType (compared as printed text,
//! which holds every constant's value in its metadata section). The
//! FoldScaleAxis tests also check that the pass keeps the function's values
//! (kiln's interpreter, on fixed inputs), and use fixed scales where TVM draws
//! random positive (or negative) ones.
//!
//! Ported elsewhere: `test_live_recursion`, `test_dead_recursion`,
//! `test_simple`, `test_tuple_get_time` and `test_tuple_arg` (tvm_passes.rs).
//!
//! Not ported, and why:
//! - DeadCodeElimination: `test_inline_into_function` and `test_complexity`
//!   (kiln's DeadCodeElimination takes no `inline_once` option; the latter
//!   also needs `relay.testing.inception_v3`), `test_impure_op` and
//!   `test_impure_func` (`memory.alloc_storage`/`memory.kill`, virtual
//!   devices), `test_refs` (references).
//! - EliminateCommonSubexpr: `test_callback` (the pass takes no skip callback).
//! - FoldScaleAxis: `test_fold_fwd_conv3d` and `test_fold_bwd_conv3d` (kiln
//!   has no `nn.conv3d`). Of the other tests, the `check`s with blocked layouts
//!   (`NCHW2c`, `OIHW2i4o`, `NHWC2c`, …; kept in `test_fold_bwd_relu_fail`,
//!   whose convolution is dead) and `fail1` of `test_fold_bwd_fail`
//!   (`out_layout="CNHW"`) are left out: kiln's `nn.conv2d` takes NCHW/OIHW
//!   (or NHWC/HWIO) only. Weights TVM leaves untyped (typed by InferType) are
//!   annotated here: kiln's InferType types an untyped weight only from the
//!   `nn.conv2d` that reads it directly, not once the pass scales it.

#[path = "common/tvm_port.rs"]
mod tvm_port;
use tvm_port::*;

use kiln::relay::{eval_function, IRModule, Value};
use kiln::{DataType, Tensor};

mod dead_code_elimination {
    use super::*;

    const DCE: &[&str] = &["DeadCodeElimination"];

    #[test]
    fn test_dead_let() {
        assert_becomes(
            module("def @main(%z: int) {\n  let %x = 1;\n  %z\n}", &[]),
            DCE,
            module("def @main(%z: int) {\n  %z\n}", &[]),
        );
    }

    #[test]
    fn test_one_live_let() {
        assert_becomes(
            module("def @main(%z: int) {\n  let %x = 1;\n  let %y = 2;\n  %x + %x\n}", &[]),
            DCE,
            module("def @main(%z: int) {\n  let %x = 1;\n  %x + %x\n}", &[]),
        );
    }

    #[test]
    fn test_nested_let() {
        assert_becomes(
            module("def @main(%d: int, %b: int) {\n  let %a = %b;\n  let %c = %d;\n  %c\n}", &[]),
            DCE,
            module("def @main(%d: int, %b: int) {\n  let %c = %d;\n  %c\n}", &[]),
        );
    }

    #[test]
    fn test_add_with_let() {
        assert_becomes(
            module("def @main() {\n  (let %a = 1; 3) + 2\n}", &[]),
            DCE,
            module("def @main() {\n  3 + 2\n}", &[]),
        );
    }

    #[test]
    fn test_tuple_get_item() {
        assert_becomes(
            module("def @main() {\n  let %a = 100;\n  (1, 2, 3, 4).0\n}", &[]),
            DCE,
            module("def @main() {\n  (1, 2, 3, 4).0\n}", &[]),
        );
    }
}

/// Every TVM test of this file kiln can express is ported in tvm_passes.rs
/// (`test_simple`, `test_tuple_get_time`, `test_tuple_arg`); `test_callback`
/// is not (no skip callback).
mod eliminate_common_subexpr {}

mod fold_scale_axis {
    use super::*;

    const FORWARD: &[&str] = &["ForwardFoldScaleAxis"];
    const BACKWARD: &[&str] = &["BackwardFoldScaleAxis"];

    /// A fixed positive per-channel scale in `[0.5, 1]` (TVM's
    /// `_get_positive_scale` draws it at random), negated when `negative`.
    fn scale(shape: &[usize], negative: bool) -> Tensor {
        let n: usize = shape.iter().product();
        let sign = if negative { -1.0 } else { 1.0 };
        let values: Vec<f32> = (0..n).map(|i| sign * (0.5 + 0.5 * ((i * 7 % 11) as f32) / 10.0)).collect();
        f32s(shape, &values)
    }

    /// Fixed inputs for `@main`'s parameters, from their types.
    fn inputs(m: &IRModule) -> Vec<Value> {
        let f = m.function("main").expect("@main");
        let params = m.store.as_function(f).expect("function").params.clone();
        params
            .iter()
            .enumerate()
            .map(|(p, &v)| {
                let t = m.store.checked_type(v).and_then(|t| t.as_tensor()).expect("a tensor parameter");
                let n: usize = t.shape.iter().product();
                let values: Vec<f64> = (0..n).map(|i| (((i * 37 + p * 11) % 17) as f64 - 8.0) / 8.0).collect();
                Value::Tensor(Tensor::from_f64(t.dtype, t.shape.clone(), &values))
            })
            .collect()
    }

    /// `passes` keep `@main`'s value on fixed inputs.
    fn assert_values_kept(before: &IRModule, passes: &[&str]) {
        let args = inputs(before);
        let value =
            |m: &IRModule| eval_function(m, "main", &args).expect("eval").tensor().expect("a tensor").to_f64_vec();
        let (want, got) = (value(before), value(&run(before.clone(), passes)));
        assert_eq!(want.len(), got.len());
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert!((w - g).abs() <= 1e-4 * (1.0 + w.abs()), "element {i}: {g}, want {w}");
        }
    }

    /// The values, then TVM's structure.
    fn assert_folds(before: IRModule, passes: &[&str], expected: IRModule) {
        assert_values_kept(&before, passes);
        assert_becomes(before, passes, expected);
    }

    // ---- forward ------------------------------------------------------------

    #[test]
    fn test_fold_fwd_simple() {
        let s = scale(&[4, 1, 1], false);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(2, 4, 3, 3), float32], %in_bias: Tensor[(4, 1, 1), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = multiply(%x, meta[relay.Constant][0]);
  %1 = nn.relu(%0);
  %2 = add(%1, %in_bias);
  nn.conv2d(%2, %weight, padding=[1, 1], channels=2, kernel_size=[3, 3])
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.relu(%x);
  %1 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %2 = divide(%in_bias, expand_dims(%1, axis=1, num_newaxis=2));
  %3 = add(%0, %2);
  %4 = multiply(%weight, expand_dims(%1, axis=1, num_newaxis=2));
  nn.conv2d(%3, %4, padding=[1, 1], channels=2, kernel_size=[3, 3])
}}"
            ),
            &[s],
        );
        assert_folds(before, FORWARD, expected);
    }

    #[test]
    fn test_fold_fwd_dual_path() {
        let s = scale(&[3], false);
        let params = "%x: Tensor[(2, 4, 10, 3), float32], %weight: Tensor[(3, 3, 1, 3), float32], %in_bias: Tensor[(3), float32]";
        let conv =
            "padding=[1, 1], groups=3, channels=3, kernel_size=[3, 3], data_layout=\"NHWC\", kernel_layout=\"HWIO\"";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = multiply(meta[relay.Constant][0], %x);
  %1 = nn.relu(%0);
  %2 = subtract(%1, %in_bias);
  %3 = nn.conv2d(%2, %weight, {conv});
  %4 = nn.conv2d(%2, %weight, {conv});
  add(%3, %4)
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.relu(%x);
  %1 = divide(%in_bias, meta[relay.Constant][0]);
  %2 = subtract(%0, %1);
  %3 = nn.conv2d(%2, multiply(%weight, meta[relay.Constant][0]), {conv});
  %4 = nn.conv2d(%2, multiply(%weight, meta[relay.Constant][0]), {conv});
  add(%3, %4)
}}"
            ),
            &[s],
        );
        assert_folds(before, FORWARD, expected);
    }

    #[test]
    fn test_fold_fwd_fail() {
        // The scaled value also reaches the output around the convolution.
        let before = module(
            "def @main(%x: Tensor[(2, 11, 10, 4), float32], %weight: Tensor[(3, 3, 4, 4), float32]) {
  %0 = multiply(%x, meta[relay.Constant][0]);
  %1 = nn.leaky_relu(%0, alpha=0.1f);
  %2 = nn.conv2d(%1, %weight, padding=[1, 1], channels=4, kernel_size=[3, 3], data_layout=\"NHWC\", kernel_layout=\"HWIO\");
  add(%2, %0)
}",
            &[scale(&[4], false)],
        );
        assert_unchanged(before, FORWARD);
    }

    #[test]
    fn test_fold_fwd_relu_fail() {
        let body = |s: &str| {
            format!(
                "  %0 = multiply(%x, {s});
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %weight, padding=[1, 1], channels=4, kernel_size=[3, 3], data_layout=\"NHWC\", kernel_layout=\"HWIO\");
  add(%2, %0)"
            )
        };
        let (x, w) = ("%x: Tensor[(2, 11, 10, 4), float32]", "%weight: Tensor[(3, 3, 4, 4), float32]");
        // A scale known only at run time, then a negative one.
        let by_variable = format!("def @main({x}, %in_scale: Tensor[(4), float32], {w}) {{\n{}\n}}", body("%in_scale"));
        assert_unchanged(module(&by_variable, &[]), FORWARD);
        let negative = format!("def @main({x}, {w}) {{\n{}\n}}", body("meta[relay.Constant][0]"));
        assert_unchanged(module(&negative, &[scale(&[4], true)]), FORWARD);
    }

    #[test]
    fn test_fold_fwd_let_fail() {
        let before = module(
            "def @main(%x: Tensor[(2, 11, 10, 4), float32], %weight: Tensor[(3, 3, 4, 4), float32], %in_bias: Tensor[(4), float32]) {
  %0 = multiply(%x, meta[relay.Constant][0]);
  %1 = nn.relu(%0);
  %2 = add(%1, %in_bias);
  let %x_var = %2;
  %3 = nn.conv2d(%x_var, %weight, padding=[1, 1], channels=4, kernel_size=[3, 3], data_layout=\"NHWC\", kernel_layout=\"HWIO\");
  add(%3, %2)
}",
            &[scale(&[4], false)],
        );
        assert_unchanged(before, FORWARD);
    }

    fn fwd_negative_scale() -> (IRModule, IRModule) {
        let s = scale(&[4, 1, 1], true);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(4, 4, 3, 3), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = multiply(%x, meta[relay.Constant][0]);
  nn.conv2d(%0, %weight, padding=[1, 1], channels=4, kernel_size=[3, 3])
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = multiply(%weight, expand_dims(%0, axis=1, num_newaxis=2));
  nn.conv2d(%x, %1, padding=[1, 1], channels=4, kernel_size=[3, 3])
}}"
            ),
            &[s],
        );
        (before, expected)
    }

    #[test]
    fn test_fold_fwd_negative_scale() {
        let (before, expected) = fwd_negative_scale();
        assert_folds(before, FORWARD, expected);
    }

    #[test]
    fn test_fold_fwd_dense() {
        for (n, units, k) in [(2, 3, 4), (3, 4, 5)] {
            let s = scale(&[k], false);
            let params = format!(
                "%x: Tensor[({n}, {k}), float32], %weight: Tensor[({units}, {k}), float32], %in_bias: Tensor[({k}), float32]"
            );
            let before = module(
                &format!(
                    "def @main({params}) {{
  %0 = multiply(%x, meta[relay.Constant][0]);
  %1 = nn.relu(%0);
  %2 = add(%1, %in_bias);
  nn.dense(%2, %weight)
}}"
                ),
                std::slice::from_ref(&s),
            );
            let expected = module(
                &format!(
                    "def @main({params}) {{
  %0 = nn.relu(%x);
  %1 = divide(%in_bias, meta[relay.Constant][0]);
  %2 = add(%0, %1);
  nn.dense(%2, multiply(%weight, meta[relay.Constant][0]))
}}"
                ),
                &[s],
            );
            assert_folds(before, FORWARD, expected);
        }
    }

    // ---- backward -----------------------------------------------------------

    const CONV8: &str = "padding=[1, 1], channels=8, kernel_size=[3, 3]";
    const CONV4: &str = "padding=[1, 1], channels=4, kernel_size=[3, 3]";

    #[test]
    fn test_fold_bwd_simple() {
        let s = scale(&[8, 1, 1], false);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(8, 4, 3, 3), float32], %out_bias: Tensor[(8), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.conv2d(%x, %weight, {CONV8});
  %1 = add(%0, expand_dims(%out_bias, axis=1, num_newaxis=2));
  %2 = nn.relu(%1);
  multiply(%2, meta[relay.Constant][0])
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = multiply(%weight, expand_dims(%0, axis=1, num_newaxis=3));
  %2 = nn.conv2d(%x, %1, {CONV8});
  %3 = multiply(expand_dims(%out_bias, axis=1, num_newaxis=2), expand_dims(%0, axis=1, num_newaxis=2));
  %4 = add(%2, %3);
  nn.relu(%4)
}}"
            ),
            &[s],
        );
        assert_folds(before, BACKWARD, expected);
    }

    #[test]
    fn test_fold_bwd_dual_path() {
        let s = scale(&[8, 1, 1], false);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(8, 4, 3, 3), float32], %out_bias: Tensor[(8), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.relu(nn.conv2d(%x, %weight, {CONV8}));
  %1 = nn.relu(nn.conv2d(%x, %weight, {CONV8}));
  %2 = add(%0, %1);
  multiply(%2, meta[relay.Constant][0])
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = nn.conv2d(%x, multiply(%weight, expand_dims(%0, axis=1, num_newaxis=3)), {CONV8});
  %2 = nn.conv2d(%x, multiply(%weight, expand_dims(%0, axis=1, num_newaxis=3)), {CONV8});
  add(nn.relu(%1), nn.relu(%2))
}}"
            ),
            &[s],
        );
        assert_folds(before, BACKWARD, expected);
    }

    #[test]
    fn test_fold_bwd_simple_constant() {
        // `create_workload` with every parameter zero, bound as constants;
        // InferType, then FoldScaleAxis at opt level 3: the `* 2f` goes.
        let zeros = |shape: &[usize]| Tensor::full(DataType::F32, shape.to_vec(), 0.0);
        let params = [zeros(&[16, 3, 3, 3]), zeros(&[16, 1, 1])];
        let body = "%0 = nn.conv2d(%data, meta[relay.Constant][0], padding=[1, 1], channels=16, kernel_size=[3, 3]);
  %1 = add(%0, meta[relay.Constant][1]);
  %2 = nn.relu(%1);";
        let before = module(
            &format!("def @main(%data: Tensor[(1, 3, 200, 200), float32]) {{\n  {body}\n  multiply(%2, 2f)\n}}"),
            &params,
        );
        let expected =
            module(&format!("def @main(%data: Tensor[(1, 3, 200, 200), float32]) {{\n  {body}\n  %2\n}}"), &params);
        assert_becomes(before, &["FoldScaleAxis"], expected);
    }

    fn bwd_dual_consumer() -> (IRModule, IRModule) {
        let s = scale(&[4, 1, 1], false);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(4, 4, 3, 3), float32], %out_bias: Tensor[(4), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.relu(multiply(nn.conv2d(%x, %weight, {CONV4}), meta[relay.Constant][0]));
  %1 = nn.relu(multiply(nn.conv2d(%0, %weight, {CONV4}), meta[relay.Constant][0]));
  %2 = nn.relu(multiply(nn.conv2d(%0, %weight, {CONV4}), meta[relay.Constant][0]));
  add(%1, %2)
}}"
            ),
            std::slice::from_ref(&s),
        );
        let w = "multiply(%weight, expand_dims(squeeze(meta[relay.Constant][0], axis=[1, 2]), axis=1, num_newaxis=3))";
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.relu(nn.conv2d(%x, {w}, {CONV4}));
  %1 = nn.relu(nn.conv2d(%0, {w}, {CONV4}));
  %2 = nn.relu(nn.conv2d(%0, {w}, {CONV4}));
  add(%1, %2)
}}"
            ),
            &[s],
        );
        (before, expected)
    }

    #[test]
    fn test_fold_bwd_dual_consumer() {
        let (before, expected) = bwd_dual_consumer();
        assert_folds(before, BACKWARD, expected);
    }

    #[test]
    fn test_fold_bwd_fail() {
        // `fail2`: the convolution's result is used unscaled too.
        let before = module(
            &format!(
                "def @main(%x: Tensor[(4, 4, 10, 10), float32], %weight: Tensor[(4, 4, 3, 3), float32], %out_bias: Tensor[(4, 1, 1), float32]) {{
  %0 = nn.conv2d(%x, %weight, {CONV4});
  %1 = multiply(%0, meta[relay.Constant][0]);
  add(%1, nn.relu(%0))
}}"
            ),
            &[scale(&[4, 1, 1], false)],
        );
        assert_unchanged(before, BACKWARD);
    }

    #[test]
    fn test_fold_bwd_relu_fail() {
        // TVM's function scales `%x`, not the convolution (which is dead and
        // not in it); the negative scales are float64 constants cast to float32.
        for (x, s) in [("(4, 4, 10, 10)", [4, 1, 1].as_slice()), ("(4, 2, 10, 10, 2)", [1, 2, 1, 1, 2].as_slice())] {
            let shape: Vec<String> = s.iter().map(|d| d.to_string()).collect();
            let by_variable = format!(
                "def @main(%x: Tensor[{x}, float32], %in_scale: Tensor[({}), float32]) {{\n  multiply(%x, %in_scale)\n}}",
                shape.join(", ")
            );
            assert_unchanged(module(&by_variable, &[]), BACKWARD);
            let n: usize = s.iter().product();
            let values: Vec<f64> = (0..n).map(|i| -0.1 - 0.8 * i as f64 / n as f64).collect();
            let negative = Tensor::from_f64(DataType::F64, s.to_vec(), &values);
            let by_constant = format!(
                "def @main(%x: Tensor[{x}, float32]) {{\n  multiply(%x, cast(meta[relay.Constant][0], dtype=\"float32\"))\n}}"
            );
            assert_unchanged(module(&by_constant, &[negative]), BACKWARD);
        }
    }

    fn bwd_negative_scale() -> (IRModule, IRModule) {
        let s = scale(&[8, 1, 1], true);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(8, 4, 3, 3), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{\n  multiply(nn.conv2d(%x, %weight, {CONV8}), meta[relay.Constant][0])\n}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = multiply(%weight, expand_dims(%0, axis=1, num_newaxis=3));
  nn.conv2d(%x, %1, {CONV8})
}}"
            ),
            &[s],
        );
        (before, expected)
    }

    #[test]
    fn test_fold_bwd_negative_scale() {
        let (before, expected) = bwd_negative_scale();
        assert_folds(before, BACKWARD, expected);
    }

    #[test]
    fn test_fold_bwd_dense() {
        for (n, units, k) in [(2, 3, 4), (3, 4, 5)] {
            let s = scale(&[units], false);
            let params = format!(
                "%x: Tensor[({n}, {k}), float32], %weight: Tensor[({units}, {k}), float32], %in_bias: Tensor[({units}), float32]"
            );
            let before = module(
                &format!(
                    "def @main({params}) {{
  %0 = nn.dense(%x, %weight);
  %1 = add(%0, %in_bias);
  %2 = nn.relu(%1);
  multiply(%2, meta[relay.Constant][0])
}}"
                ),
                std::slice::from_ref(&s),
            );
            let expected = module(
                &format!(
                    "def @main({params}) {{
  %0 = multiply(%weight, expand_dims(meta[relay.Constant][0], axis=1));
  %1 = nn.dense(%x, %0);
  %2 = multiply(%in_bias, meta[relay.Constant][0]);
  %3 = add(%1, %2);
  nn.relu(%3)
}}"
                ),
                &[s],
            );
            assert_folds(before, BACKWARD, expected);
        }
    }

    #[test]
    fn test_fold_bwd_bias_add() {
        let s = scale(&[4, 1, 1], false);
        let params = "%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(4, 4, 3, 3), float32], %out_bias: Tensor[(4), float32]";
        let before = module(
            &format!(
                "def @main({params}) {{
  %0 = nn.conv2d(%x, %weight, {CONV4});
  %1 = nn.bias_add(%0, %out_bias);
  %2 = nn.relu(%1);
  multiply(%2, meta[relay.Constant][0])
}}"
            ),
            std::slice::from_ref(&s),
        );
        let expected = module(
            &format!(
                "def @main({params}) {{
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = multiply(%weight, expand_dims(%0, axis=1, num_newaxis=3));
  %2 = nn.conv2d(%x, %1, {CONV4});
  %3 = nn.bias_add(%2, multiply(%out_bias, %0));
  nn.relu(%3)
}}"
            ),
            &[s],
        );
        assert_folds(before, BACKWARD, expected);
    }

    // ---- kiln's own rules (not TVM tests) ------------------------------------

    /// A scale known only at run time stays a multiply when the weight is a
    /// constant (a squeeze-and-excitation gate), before or after the
    /// convolution; TVM folds it.
    #[test]
    fn run_time_scale_stays_out_of_a_constant_weight() {
        let w = scale(&[4, 4, 3, 3], false);
        let x = "%x: Tensor[(1, 4, 10, 10), float32], %gate: Tensor[(1, 4, 1, 1), float32]";
        let backward =
            format!("def @main({x}) {{\n  multiply(nn.conv2d(%x, meta[relay.Constant][0], {CONV4}), %gate)\n}}");
        assert_unchanged(module(&backward, std::slice::from_ref(&w)), BACKWARD);
        let forward =
            format!("def @main({x}) {{\n  nn.conv2d(multiply(%x, %gate), meta[relay.Constant][0], {CONV4})\n}}");
        assert_unchanged(module(&forward, std::slice::from_ref(&w)), FORWARD);
        // Also when the backward half has just folded a batch norm's scale
        // into that weight (`multiply(W, s)`, computed by FoldConstant only
        // after the forward half): PP-LCNet's gated 512 × 512 convolutions.
        let bn = scale(&[4, 1, 1], false);
        let both = format!(
            "def @main({x}) {{\n  multiply(nn.conv2d(multiply(%x, %gate), meta[relay.Constant][0], {CONV4}), meta[relay.Constant][1])\n}}"
        );
        let folded = run(module(&both, &[w, bn]), &["FoldScaleAxis"]);
        let text = kiln::relay::print_module(&folded);
        assert!(text.contains("multiply(%x, %gate)"), "the gate must stay a multiply:\n{text}");
        assert!(!text.contains("%gate) /* ty=Tensor[(4, 4, 3, 3)"), "{text}");
    }

    /// A constant scale with a zero cannot divide a bias: the forward pass
    /// applies it before the bias instead (TVM divides by zero).
    #[test]
    fn zero_scale_is_not_moved_past_a_bias() {
        let s = f32s(&[4, 1, 1], &[0.5, 0.0, 1.0, 2.0]);
        let before = module(
            "def @main(%x: Tensor[(2, 4, 10, 10), float32], %weight: Tensor[(2, 4, 3, 3), float32], %in_bias: Tensor[(4, 1, 1), float32]) {
  %0 = multiply(%x, meta[relay.Constant][0]);
  %1 = nn.relu(%0);
  %2 = add(%1, %in_bias);
  nn.conv2d(%2, %weight, padding=[1, 1], channels=2, kernel_size=[3, 3])
}",
            &[s],
        );
        let printed = after(before.clone(), FORWARD);
        assert!(!printed.contains("divide"), "{printed}");
        assert_values_kept(&before, FORWARD);
    }

    /// Two scaled paths meet at an add where one broadcasts onto the other:
    /// the broadcast one (behind a relu) is scaled as a bias, so a negative
    /// scale still folds into the other path's weight and never passes the
    /// relu (TVM scales both paths whenever both could take a scale).
    #[test]
    fn negative_scale_does_not_pass_the_relu_of_a_broadcast_path() {
        let before = module(
            &format!(
                "def @main(%x: Tensor[(1, 4, 10, 10), float32], %weight: Tensor[(4, 4, 3, 3), float32], %y: Tensor[(1, 4, 3, 3), float32]) {{
  %0 = nn.conv2d(%x, %weight, {CONV4});
  %1 = nn.relu(nn.conv2d(%y, %weight, channels=4, kernel_size=[3, 3]));
  multiply(add(%0, %1), meta[relay.Constant][0])
}}"
            ),
            &[scale(&[4, 1, 1], true)],
        );
        let printed = after(before.clone(), BACKWARD);
        assert!(printed.contains("multiply(%weight"), "nothing folded:\n{printed}");
        assert_values_kept(&before, BACKWARD);
    }
}
