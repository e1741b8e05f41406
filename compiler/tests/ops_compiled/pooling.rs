//! Poolings, and kernels that read every second to fourth element of a
//! row: strided poolings, and the padded image of a stride-2 1 × 1
//! convolution.

use super::check_compiled;
use kiln::tir::{Expr, PrimFunc, Scope, Stmt};

/// Poolings whose output rows read every second, third or fourth input
/// (strided loads: on AVX-512 whole and masked vectors picked by one permute
/// where a row is not a power of two lanes): LeNet's 2 × 2 stride 2 over
/// 28-wide rows (14 lanes), a 3 × 3 stride-2 padded one over 14 (7 lanes),
/// 3 × 3 stride 3 over 30 (10 lanes) and a 4 × 4 average at stride 4 over 24
/// (6 lanes). Equal to the interpreter on LLVM and C, for 8- and 16-lane
/// units, 1 and 2 threads.
pub(super) fn strided_pooling_rows_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 6, 28, 28), float32], %y: Tensor[(1, 4, 14, 14), float32], %z: Tensor[(1, 3, 30, 30), float32],
          %v: Tensor[(1, 2, 24, 24), float32]) {
  (nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]),
   nn.max_pool2d(%y, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]),
   nn.max_pool2d(%z, pool_size=[3, 3], strides=[3, 3]),
   nn.avg_pool2d(%v, pool_size=[4, 4], strides=[4, 4]))
}
"#;
    check_compiled(text, &[], false, &|kernels, lanes| {
        assert_eq!(kernels.iter().filter(|k| k.name.contains("pool")).count(), 4, "pooling kernels with {lanes} lanes");
    });
}

/// A stride-2 1 × 1 convolution (ResNet-18's downsampling, 64 → 128 onto
/// 14 × 14, with a residual add) copies every second column of its input
/// rows into a kernel-local padded image: as vectors of stride-2 loads
/// (`tir.VectorizeCopies`, once loop partitioning has removed the clamped
/// index; LLVM left the copy scalar), on 8 and 16 lanes. Equal to the
/// interpreter on LLVM and C, 1 and 2 threads.
pub(super) fn strided_padded_copies_are_vectors_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 28, 28), float32], %y: Tensor[(1, 128, 14, 14), float32], %w: Tensor[(128, 64, 1, 1), float32]) {
  add(nn.conv2d(%x, %w, strides=[2, 2]), %y)
}
"#;
    check_compiled(text, &["w"], false, &|kernels, lanes| {
        let mut strided_copies = 0;
        for k in kernels {
            k.body.visit(&mut |s| {
                if let Stmt::Store { buffer, indices, value } = s {
                    let vector_store = indices.iter().any(|i| matches!(i, Expr::Ramp { .. }));
                    if buffer.scope() == Scope::Local && vector_store && reads_every_second(value) {
                        strided_copies += 1;
                    }
                }
            });
        }
        assert!(strided_copies > 0, "vectorized stride-2 copies with {lanes} lanes");
    });
}

/// Whether `e` loads a vector of every second element.
fn reads_every_second(e: &Expr) -> bool {
    let mut found = matches!(e, Expr::Load(_, idx) if idx.iter().any(|i| matches!(i, Expr::Ramp { stride, .. } if stride.as_int() == Some(2))));
    e.for_each_child(|c| found |= reads_every_second(c));
    found
}

/// Poolings over windows larger than the unrolling limit (YOLOv8n's 5 × 5
/// SPPF, stride 1, padding 2, on 10 × 10 maps; a 5 × 5 average without the
/// padding counted, 7 × 7 maps) keep each row's result in a kernel-local
/// vector across the window. A max pooling is separable: per output row, the
/// maximum over the window's rows is one kernel-local row of the padded
/// width (14 for the 5 × 5 windows on 10 columns, 131 for the 3 × 3 one on
/// 130), read in place with its borders' tests, then the maximum over the
/// window's columns reads that row — no padded plane, a batch of images
/// included. Equal to the interpreter on LLVM and C, for 8- and 16-lane
/// units, 1 and 2 threads.
pub(super) fn large_pooling_windows_keep_rows_in_vectors_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 10, 10), float32], %y: Tensor[(1, 4, 7, 7), float32], %z: Tensor[(1, 2, 130, 130), float32],
          %b: Tensor[(2, 3, 10, 10), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[5, 5], padding=[2, 2, 2, 2]);
  (nn.max_pool2d(%0, pool_size=[5, 5], padding=[2, 2, 2, 2]),
   nn.avg_pool2d(%y, pool_size=[5, 5], padding=[2, 2, 2, 2], count_include_pad=False),
   nn.max_pool2d(%z, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]),
   nn.max_pool2d(%b, pool_size=[5, 5], padding=[2, 2, 2, 2]))
}
"#;
    check_compiled(text, &[], false, &|kernels, lanes| {
        let pools: Vec<&PrimFunc> = kernels.iter().filter(|k| k.name.contains("pool")).collect();
        // (The two equal max poolings are one kernel, called twice.)
        assert_eq!(pools.len(), 4, "the pooling kernels");
        let (mut planes, mut rows) = (Vec::new(), Vec::new());
        for k in pools {
            let mut local = false;
            k.body.visit(&mut |s| {
                if let kiln::tir::Stmt::Allocate { buffer, .. } = s {
                    local |= buffer.scope() == kiln::tir::Scope::Local;
                    if buffer.name().starts_with("pad") {
                        planes.push(buffer.shape().to_vec());
                    }
                    if buffer.name().starts_with("pool_rows") {
                        rows.push(buffer.shape().to_vec());
                    }
                }
            });
            assert!(local, "{} accumulates in a kernel-local row with {lanes} lanes", k.name);
        }
        assert!(planes.is_empty(), "no padded planes with {lanes} lanes: {planes:?}");
        rows.sort();
        let want = [vec![1, 1, 14, 1], vec![1, 1, 14, 1], vec![1, 1, 131, 1]];
        assert_eq!(rows, want, "one row of row maxima per output row with {lanes} lanes");
    });
}
