//! Packed convolutions whose register tiles overlap at the end of a run: 1 × 1
//! ones over fused pixels, and rows of 112 columns.

use super::check_compiled;
use kiln::tir::{Expr, Intrinsic, PrimFunc, Stmt};

/// A 1 × 1 projection on a 14 × 14 map (196 pixels, no whole vectors on 8
/// lanes: packed, its rows and columns fused into one run of pixels) to 64
/// output channels takes 2 channel vectors × 6 pixels on 8 lanes (12
/// accumulators; 2 × 4 divides 196 but leaves 8), its last tile overlapping
/// the one before (the pixel index clamped with a `min`); to 96 channels
/// 3 × 4 as before. With a residual add and a bias; all equal the
/// interpreter on LLVM and C, 1 and 2 threads.
pub(super) fn packed_projections_on_14_by_14_maps_take_overlapping_two_by_six_tiles_on_8_lanes() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 128, 14, 14), float32], %r: Tensor[(1, 64, 14, 14), float32],
          %w1: Tensor[(64, 128, 1, 1), float32], %b1: Tensor[(64), float32], %w2: Tensor[(96, 128, 1, 1), float32]) {
  %0 = add(nn.bias_add(nn.conv2d(%x, %w1), %b1), %r);
  (%0, nn.conv2d(%x, %w2))
}
"#;
    check_compiled(text, &["w1", "b1", "w2"], false, &|kernels, lanes| {
        let tile = |channels: usize| {
            let k: &PrimFunc = kernels
                .iter()
                .find(|k| {
                    k.attrs.contains_key("conv2d.weight_block") && k.params.last().unwrap().shape()[1] == channels
                })
                .expect("the projection");
            let text = kiln::tir::print_prim_func(k);
            let shape = text
                .lines()
                .find(|l| l.contains("_local = T.alloc_buffer(["))
                .and_then(|l| l.split(" = T.alloc_buffer([").nth(1)?.split(']').next().map(str::to_string));
            (shape.expect("an accumulator tile"), text.contains("T.min("))
        };
        if lanes == 8 {
            assert_eq!(tile(64), ("6, 2, 8".to_string(), true), "64 channels, 8 lanes");
            assert_eq!(tile(96), ("4, 3, 8".to_string(), false), "96 channels, 8 lanes");
        } else {
            assert!(!tile(64).1, "no overlapping tile on 16 lanes");
        }
    });
}

/// A packed 3 × 3, stride-2 convolution of 3 input channels to 32 (a
/// MobileNetV2-style stem) on a 112-wide output row: its 2 channel vectors ×
/// 4 columns grow to 2 × 6 on 8 lanes, 19 tiles a row, the last overlapping
/// the one before (its first column clamped with a `min`); 16 lanes take 1
/// channel vector × 16 columns (a stem's short reduction). With a bias and a clip; all equal the interpreter on LLVM and C, 1
/// and 2 threads.
pub(super) fn packed_rows_112_wide_take_overlapping_two_by_six_tiles_on_8_lanes() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 224, 224), float32], %w: Tensor[(32, 3, 3, 3), float32], %b: Tensor[(32), float32]) {
  clip(nn.bias_add(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1]), %b), a_min=0f, a_max=6f)
}
"#;
    check_compiled(text, &["w", "b"], false, &|kernels, lanes| {
        let k: &PrimFunc =
            kernels.iter().find(|k| k.attrs.contains_key("conv2d.weight_block")).expect("the packed convolution");
        let text = kiln::tir::print_prim_func(k);
        let tile = text
            .lines()
            .find(|l| l.contains("_local = T.alloc_buffer(["))
            .and_then(|l| l.split(" = T.alloc_buffer([").nth(1)?.split(']').next().map(str::to_string))
            .expect("an accumulator tile");
        // The last of 19 tiles starts at column 106 = 112 - 6.
        let overlapping = text.contains("T.serial(19)") && text.contains("* 6), 106)");
        if lanes == 8 {
            assert_eq!(tile, "6, 2, 8", "8 lanes: {text}");
            assert!(overlapping, "19 tiles, the last overlapping: {text}");
        } else {
            assert!(!overlapping, "no overlapping tile on 16 lanes: {text}");
            // A stem's short reduction: a whole vector of columns per tile.
            assert_eq!(tile, "16, 1, 16", "16 lanes: {text}");
        }
    });
}

/// A stem (a 3-channel image, 3 × 3 stride 2, padded, SiLU after it) asks
/// for its input rows two output rows ahead of each padded row's copy: one
/// `kiln.prefetch` per 16 columns of a padded input row (50 columns: four,
/// unrolled) after the copy of each channel's rows; the convolution after it, whose
/// input has 16 channels, asks for nothing. Both equal the interpreter on
/// LLVM and C (a prefetch near the image's end reads no element past it).
pub(super) fn stems_prefetch_their_input_rows_ahead_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 50, 48), float32], %w1: Tensor[(16, 3, 3, 3), float32], %w2: Tensor[(16, 16, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, strides=[2, 2], padding=[1, 1, 1, 1]);
  %1 = multiply(%0, sigmoid(%0));
  nn.conv2d(%1, %w2, padding=[1, 1, 1, 1])
}
"#;
    check_compiled(text, &["w1", "w2"], true, &|kernels, lanes| {
        let prefetches = |k: &PrimFunc| {
            let mut n = 0;
            k.body.visit(&mut |s| n += matches!(s, Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, ..))) as usize);
            n
        };
        let stem = kernels.iter().find(|k| k.params[0].shape() == [1, 3, 50, 48]).expect("the stem");
        // Four lines of a row, in the loops over the channels and rows an output row copies.
        assert_eq!(prefetches(stem), 4, "{lanes} lanes: {} asks for its input ahead", stem.name);
        let after = kernels.iter().find(|k| k.params[0].shape() == [1, 16, 25, 24]).expect("the convolution after it");
        assert_eq!(prefetches(after), 0, "{lanes} lanes: {} prefetches", after.name);
    });
}

/// A packed convolution whose parallel loop walks blocks of output channels
/// asks, in its reduction loop, for the weights the next block reads
/// (`kiln.prefetch(w[…], 1)`: the address may run past the weights in the
/// last block) — MobileNetV2's 160 → 960 on a 7 × 7 map. A 1 × 1 map (a
/// squeeze-excitation: each weight read once) asks for nothing, nor does a
/// convolution whose blocks are too large for two to stay in L2 (512 → 32,
/// 3 × 3: 147 KB a block of 8 channels, 295 KB of 16). All equal the interpreter on LLVM and C (which
/// clamps the address into the weights).
pub(super) fn packed_convolutions_prefetch_the_next_blocks_weights_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 160, 7, 7), float32], %y: Tensor[(1, 512, 1, 1), float32], %z: Tensor[(1, 512, 4, 4), float32],
          %w1: Tensor[(960, 160, 1, 1), float32], %w2: Tensor[(1280, 512, 1, 1), float32], %w3: Tensor[(32, 512, 3, 3), float32]) {
  (clip(nn.conv2d(%x, %w1), a_min=0f, a_max=6f), nn.conv2d(%y, %w2), nn.conv2d(%z, %w3, padding=[1, 1, 1, 1]))
}
"#;
    check_compiled(text, &["w1", "w2", "w3"], false, &|kernels, lanes| {
        let prefetches = |input: &[usize]| {
            let k = kernels.iter().find(|k| k.params[0].shape() == input).expect("the convolution");
            let mut found = Vec::new();
            k.body.visit(&mut |s| {
                if let Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, args, _)) = s {
                    found.push(args.clone());
                }
            });
            (k.attrs.contains_key("conv2d.weight_block"), found)
        };
        let (packed, ahead) = prefetches(&[1, 160, 7, 7]);
        assert!(packed, "{lanes} lanes: the 160 → 960 convolution is packed");
        assert!(!ahead.is_empty(), "{lanes} lanes: the 160 → 960 convolution asks for the next block's weights");
        for args in &ahead {
            assert!(matches!(&args[..], [Expr::Load(w, _), Expr::Int(1, _)] if w.shape().len() == 5), "{args:?}");
        }
        assert!(prefetches(&[1, 512, 1, 1]).1.is_empty(), "{lanes} lanes: a 1 × 1 map prefetches");
        assert!(prefetches(&[1, 512, 4, 4]).1.is_empty(), "{lanes} lanes: blocks of 147 KB or more prefetch");
    });
}
