//! Packed 1 × 1 convolutions over fused pixels: their register tiles.

use super::check_compiled;
use kiln::tir::PrimFunc;

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
