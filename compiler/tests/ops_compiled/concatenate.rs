//! Concatenations along channels: the selects that pick each element's
//! input hoisted to the channel loop (`schedule/unswitch.rs`), each input
//! copied as runs of whole vectors — equal to the interpreter on LLVM and C.

use super::check_compiled;
use kiln::tir::{Expr, PrimFunc, Stmt};

/// YOLO-style channel concatenations on 20 × 20 maps (rows of 20: not whole
/// vectors, planes of 400: whole ones): of two inputs and a channel slice
/// of one; of a 2× upsampling and an input (the upsampled rows stay rows);
/// and of two element-wise functions of an input under a product — a
/// select under arithmetic, whose arms simplify to each input's own
/// indices. No concatenation kernel selects per element any more, each
/// test is on the channel loop, and every kernel stores vectors.
pub(super) fn channel_concatenations_copy_each_input_as_vectors_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 20, 20), float32], %y: Tensor[(1, 32, 20, 20), float32], %z: Tensor[(1, 16, 10, 10), float32]) {
  %0 = strided_slice(%x, begin=[0, 32, 0, 0], end=[1, 64, 20, 20], strides=[1, 1, 1, 1]);
  %1 = concatenate((%x, %0, %y), axis=1);
  %2 = nn.upsampling(%z, scale_h=2f, scale_w=2f, layout="NCHW");
  %3 = concatenate((%2, %y), axis=1);
  %4 = concatenate((add(%y, 1f), exp(%y)), axis=1);
  (%1, %3, multiply(%4, 2f))
}
"#;
    check_compiled(text, &[], true, &|kernels, lanes| {
        let concatenations: Vec<&PrimFunc> = kernels.iter().filter(|k| k.name.contains("concatenate")).collect();
        assert_eq!(concatenations.len(), 3, "{lanes} lanes: {:?}", kernels.iter().map(|k| &k.name).collect::<Vec<_>>());
        for k in concatenations {
            let text = kiln::tir::print_prim_func(k);
            let (mut tests, mut vector_stores) = (0, 0);
            k.body.visit(&mut |s| match s {
                Stmt::If { .. } => tests += 1,
                Stmt::Store { indices, value, .. } => {
                    assert!(!selects(value), "{lanes} lanes: {} still selects its input per element:\n{text}", k.name);
                    vector_stores += matches!(indices.last(), Some(Expr::Ramp { .. })) as usize;
                }
                _ => {}
            });
            assert!(tests >= 1, "{lanes} lanes: {} tests its channel:\n{text}", k.name);
            assert!(vector_stores >= 1, "{lanes} lanes: {} stores vectors:\n{text}", k.name);
        }
    });
}

/// Whether `e` selects on an index (an input's channels; the selects of a
/// lowered `exp` test loaded values).
fn selects(e: &Expr) -> bool {
    fn loads(e: &Expr) -> bool {
        let mut found = matches!(e, Expr::Load(..));
        e.for_each_child(|c| found |= loads(c));
        found
    }
    let mut found = matches!(e, Expr::Select(c, _, _) if !loads(c));
    e.for_each_child(|c| found |= selects(c));
    found
}
