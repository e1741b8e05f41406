//! Depthwise convolutions: their own schedule's tiles, bands and padded
//! images, equal to the interpreter.

use super::common;
use super::common::{compare, interpreted};
use kiln::backend::host;
use kiln::tir::PrimFunc;
use kiln::transform::PassContext;

/// Depthwise convolutions take their own schedule (per-channel padded image,
/// unrolled window, whole-vector tiles computed past a row's end, a
/// phase-split image for stride 2): rows that are whole vectors and rows
/// that are not, strides 1 and 2, 3×3 and 5×5 windows, a channel multiplier,
/// and no padding (no image to read past the end: the general schedule)
/// equal the interpreter on LLVM and C, for 8- and 16-lane vector units
/// (also padding on one side only, and a dilated window).
/// On 8 lanes a stride-2 map of 32 output rows or more whose padded plane
/// is past L1 runs in bands of rows (each band's padded image per channel,
/// band × channel in parallel): 128 × 72 (four bands); 96 × 96 at stride 1
/// is padded a few rows at a time instead, as both are on 32 registers; a
/// 32 × 32 map (a 4.6 KB plane) runs whole. Rows of partial vectors take tiles of up to 4
/// vectors on 16 registers, 8 on 32. A stride-2 image with 28-wide phase
/// rows (on an AVX-512 host loaded in pieces of whole and masked vectors)
/// is among them. Output planes of at most 64 pixels (or 196 under a 5 × 5
/// window) pad two channels per image (an even number of channels; three
/// are padded one by one) — on 16 lanes masked loads read in place a
/// stride-1 plane that fits L1 and a stride-2 one whose output rows fit a
/// vector.
pub(super) fn depthwise_convolutions_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x1: Tensor[(1, 8, 7, 7), float32], %w1: Tensor[(8, 1, 3, 3), float32],
          %x2: Tensor[(1, 8, 14, 13), float32], %w2: Tensor[(8, 1, 3, 3), float32],
          %x3: Tensor[(1, 4, 16, 16), float32], %w3: Tensor[(4, 1, 3, 3), float32],
          %x4: Tensor[(1, 4, 11, 20), float32], %w4: Tensor[(4, 1, 5, 5), float32],
          %x5: Tensor[(1, 4, 9, 9), float32], %w5: Tensor[(4, 1, 3, 3), float32],
          %x6: Tensor[(1, 4, 10, 10), float32], %w6: Tensor[(8, 1, 3, 3), float32],
          %x7: Tensor[(1, 4, 96, 96), float32], %w7: Tensor[(4, 1, 3, 3), float32],
          %x8: Tensor[(1, 4, 128, 72), float32], %w8: Tensor[(4, 1, 3, 3), float32],
          %x9: Tensor[(1, 4, 32, 32), float32], %w9: Tensor[(4, 1, 3, 3), float32],
          %x10: Tensor[(1, 2, 8, 56), float32], %w10: Tensor[(2, 1, 3, 3), float32],
          %x11: Tensor[(1, 3, 7, 7), float32], %w11: Tensor[(3, 1, 3, 3), float32],
          %x12: Tensor[(1, 2, 14, 14), float32], %w12: Tensor[(2, 1, 5, 5), float32],
          %x13: Tensor[(1, 2, 14, 14), float32], %w13: Tensor[(2, 1, 3, 3), float32],
          %x14: Tensor[(1, 2, 12, 13), float32], %w14: Tensor[(2, 1, 3, 3), float32],
          %x15: Tensor[(1, 2, 6, 28), float32], %w15: Tensor[(2, 1, 3, 3), float32]) {
  %0 = nn.conv2d(%x1, %w1, padding=[1, 1, 1, 1], groups=8);
  %1 = nn.conv2d(%x2, %w2, strides=[2, 2], padding=[1, 1, 1, 1], groups=8);
  %2 = nn.conv2d(%x3, %w3, padding=[1, 1, 1, 1], groups=4);
  %3 = nn.conv2d(%x4, %w4, strides=[2, 2], padding=[2, 2, 2, 2], groups=4);
  %4 = nn.conv2d(%x5, %w5, groups=4);
  %5 = nn.conv2d(%x6, %w6, padding=[1, 1, 1, 1], groups=4);
  %6 = nn.conv2d(%x7, %w7, padding=[1, 1, 1, 1], groups=4);
  %7 = nn.conv2d(%x8, %w8, strides=[2, 2], padding=[1, 1, 1, 1], groups=4);
  %8 = nn.conv2d(%x9, %w9, padding=[1, 1, 1, 1], groups=4);
  %9 = nn.conv2d(%x10, %w10, strides=[2, 2], padding=[1, 1, 1, 1], groups=2);
  %10 = nn.conv2d(%x11, %w11, padding=[1, 1, 1, 1], groups=3);
  %11 = nn.conv2d(%x12, %w12, padding=[2, 2, 2, 2], groups=2);
  %12 = nn.conv2d(%x13, %w13, strides=[2, 2], padding=[0, 0, 1, 1], groups=2);
  %13 = nn.conv2d(%x14, %w14, padding=[0, 1, 2, 1], dilation=[2, 1], groups=2);
  %14 = nn.conv2d(%x15, %w15, padding=[1, 1, 1, 1], groups=2);
  (clip(%0, a_min=0f, a_max=6f), %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14)
}
"#;
    let (m, args, want) = interpreted(text);
    for unit in [kiln::target::VectorUnit::AVX2, kiln::target::VectorUnit::AVX512] {
        let plan = plan_for(&m, unit);
        let depthwise: Vec<_> = plan.kernels.iter().filter(|k| k.attrs.contains_key("conv2d.groups")).collect();
        assert_eq!(depthwise.len(), 15, "fifteen grouped convolutions");
        // Only the unpadded convolution (7-wide rows, nothing to read past their end) falls back.
        let fallbacks: Vec<_> = depthwise.iter().filter(|k| k.attrs.contains_key("depthwise")).collect();
        assert_eq!(fallbacks.len(), 1, "{:?}", fallbacks.iter().map(|k| &k.attrs).collect::<Vec<_>>());
        // On 8 lanes the stride-2 map past L1 in four bands of rows: 4 × 4
        // channels in parallel (read in place on 16 lanes, without bands;
        // the stride-1 one pads a few rows at a time on both).
        let parallel_extents = |k: &PrimFunc| {
            let mut extents = Vec::new();
            k.body.visit(&mut |s| match s {
                kiln::tir::Stmt::For(l) if l.kind == kiln::tir::ForKind::Parallel => extents.push(l.extent.clone()),
                _ => {}
            });
            extents
        };
        let banded = depthwise
            .iter()
            .filter(|k| k.params[0].shape()[2] >= 32)
            .filter(|k| parallel_extents(k) == [kiln::tir::Expr::int(16)])
            .count();
        assert_eq!(banded, if unit.masked_loads() { 0 } else { 1 }, "{} lanes", unit.f32_lanes);
        // The 7 × 7 map: one row per tile on 16 registers, all 7 on 32.
        let small = depthwise.iter().find(|k| k.params[0].shape() == [1, 8, 7, 7]).expect("the 7 × 7 map");
        let mut tile_rows = Vec::new();
        small.body.visit(&mut |s| match s {
            kiln::tir::Stmt::Allocate { buffer, .. } if buffer.name().ends_with("_local") => {
                tile_rows.push(buffer.shape()[0])
            }
            _ => {}
        });
        assert_eq!(tile_rows, [if unit.registers >= 32 { 7 } else { 1 }], "{} lanes", unit.f32_lanes);
        // Output planes of at most 64 pixels pad two channels at a time (an
        // even count of them): the 7 × 7 maps at strides 1 and 2 and the
        // 6 × 10 one, not the 10 × 10 one nor three channels; 14 × 14 under
        // a 5 × 5 window, not 16 × 16 under 3 × 3.
        let channels_padded = |input: &[usize]| {
            let k = depthwise.iter().find(|k| k.params[0].shape() == input).expect("the kernel");
            padded_images(k).iter().map(|shape| shape[1]).collect::<Vec<_>>()
        };
        // With 16-lane masked loads a stride-1 plane that fits L1 is read in
        // place: no padded image, its accumulator updates kept whole.
        let in_place = unit.masked_loads();
        let stride_one = |pairs: usize| if in_place { vec![] } else { vec![pairs] };
        assert_eq!(channels_padded(&[1, 8, 7, 7]), stride_one(2));
        // At stride 2 so is every map (rows of several vectors read on the
        // grid of `codegen/llvm/grid.rs`).
        assert_eq!(channels_padded(&[1, 8, 14, 13]), stride_one(2));
        assert_eq!(channels_padded(&[1, 4, 11, 20]), stride_one(2));
        assert_eq!(channels_padded(&[1, 2, 8, 56]), stride_one(1));
        assert_eq!(channels_padded(&[1, 4, 10, 10]), stride_one(1));
        assert_eq!(channels_padded(&[1, 3, 7, 7]), stride_one(1));
        assert_eq!(channels_padded(&[1, 2, 14, 14]), stride_one(2));
        assert_eq!(channels_padded(&[1, 4, 16, 16]), stride_one(1));
        let read_in_place = depthwise
            .iter()
            .filter(|k| k.attrs.contains_key(kiln::tir::transform::loop_partition::MASKED_UPDATES_ATTR))
            .count();
        // 7 × 7 (twice), 16 × 16, 10 × 10, 32 × 32 and the 5 × 5 window's
        // 14 × 14; at stride 2 the 7 × 7, 6 × 10, 64 × 36 and 4 × 28
        // outputs; padded on one side only (TensorFlow's SAME at stride 2)
        // and dilated rows; 28-wide rows (two vectors, the second's columns
        // past the row shifted in as zeros by a permute).
        assert_eq!(read_in_place, if in_place { 13 } else { 0 }, "{} lanes", unit.f32_lanes);
        // Every kernel read in place reads its rows on the grid.
        let on_grid = depthwise.iter().filter(|k| k.attrs.contains_key(kiln::codegen::GRID_ROW_ATTR)).count();
        assert_eq!(on_grid, read_in_place, "{} lanes", unit.f32_lanes);
        let jit = kiln::codegen::llvm::Jit::new("depthwise", &plan.kernels).expect("jit");
        let c = common::c_library(&plan.kernels);
        for threads in [1, 2] {
            compare("depthwise", "llvm", &host::run(&plan, &jit, &args, threads).expect("run"), &want, false);
            compare("depthwise", "C", &host::run(&plan, &c, &args, threads).expect("run"), &want, false);
        }
    }
}

/// A depthwise convolution whose padded plane outgrows L1 (112 × 112: 52
/// KB) pads a few rows per tile, channels in parallel, no bands: on 8 lanes
/// a stride-1 one, two output rows per tile (a stride-2 image keeps its
/// plane); on 32 registers stride 1, whole-vector rows seven output rows
/// per tile (stride 2 is read in place with masked loads). A 56 × 56 plane
/// (13 KB) is read in place with masked loads, else padded once per channel.
/// All equal the interpreter on LLVM, 1 and 2 threads.
pub(super) fn large_depthwise_planes_are_padded_a_few_rows_at_a_time() {
    let text = r#"#[version = "0.0.5"]
def @main(%x1: Tensor[(1, 2, 112, 112), float32], %w1: Tensor[(2, 1, 3, 3), float32],
          %x2: Tensor[(1, 2, 56, 56), float32], %w2: Tensor[(2, 1, 3, 3), float32],
          %x3: Tensor[(1, 2, 112, 112), float32], %w3: Tensor[(2, 1, 3, 3), float32]) {
  %0 = nn.conv2d(%x1, %w1, padding=[1, 1, 1, 1], groups=2);
  %1 = nn.conv2d(%x2, %w2, padding=[1, 1, 1, 1], groups=2);
  %2 = nn.conv2d(%x3, %w3, strides=[2, 2], padding=[1, 1, 1, 1], groups=2);
  (clip(%0, a_min=0f, a_max=6f), %1, %2)
}
"#;
    let (m, args, want) = interpreted(text);
    for unit in [kiln::target::VectorUnit::AVX2, kiln::target::VectorUnit::AVX512] {
        let plan = plan_for(&m, unit);
        // The padded images of the depthwise kernel over `input` (phase-split, 5-d, at stride 2).
        let padded = |input: &[usize], stride_two: bool| {
            let rows = if stride_two { input[2] / 2 } else { input[2] };
            (plan.kernels.iter())
                .filter(|k| k.params[0].shape() == input && k.attrs.contains_key("conv2d.groups"))
                .find(|k| k.params.last().is_some_and(|out| out.shape()[2] == rows))
                .map(padded_images)
                .expect("the depthwise kernel")
        };
        let eight = unit.f32_lanes == 8;
        let rows: Vec<usize> = if eight { vec![1, 1, 4, 114] } else { vec![1, 1, 9, 114] };
        assert_eq!(padded(&[1, 2, 112, 112], false), [rows], "{} lanes", unit.f32_lanes);
        // The whole plane, not a few rows per tile (read in place with masked loads).
        let plane = padded(&[1, 2, 56, 56], false);
        if unit.masked_loads() {
            assert!(plane.is_empty(), "{plane:?}");
        } else {
            assert!(plane.len() == 1 && plane[0][2] == 58, "{} lanes: {plane:?}", unit.f32_lanes);
        }
        // Phase-split: the whole plane on 8 lanes; read in place with masked loads on 16.
        let stride_two = padded(&[1, 2, 112, 112], true);
        if unit.masked_loads() {
            assert!(stride_two.is_empty(), "{stride_two:?}");
        } else {
            assert!(stride_two.len() == 1 && stride_two[0][2] == 57, "{} lanes: {stride_two:?}", unit.f32_lanes);
        }
        // Its register tile: at most four accumulator vectors (with eight, a
        // 112-wide stride-2 row read on the grid ran 1.3× slower).
        let tile = (plan.kernels.iter())
            .filter(|k| k.params[0].shape() == [1, 2, 112, 112] && k.attrs.contains_key("conv2d.groups"))
            .find(|k| k.params.last().is_some_and(|out| out.shape()[2] == 56))
            .map(|k| accumulator_elements(&k.body))
            .expect("the stride-2 depthwise kernel");
        assert!(tile <= 4 * unit.f32_lanes, "{} lanes: a tile of {tile} accumulators", unit.f32_lanes);
        let jit = kiln::codegen::llvm::Jit::new("depthwise_planes", &plan.kernels).expect("jit");
        for threads in [1, 2] {
            compare("depthwise_planes", "llvm", &host::run(&plan, &jit, &args, threads).expect("run"), &want, false);
        }
    }
}

/// The elements of a kernel's register tile (its `…_local` allocations).
fn accumulator_elements(body: &kiln::tir::Stmt) -> usize {
    let mut n = 0;
    body.visit(&mut |s| {
        if let kiln::tir::Stmt::Allocate { buffer, .. } = s {
            if buffer.name().ends_with("_local") {
                n = n.max(buffer.shape().iter().product());
            }
        }
    });
    n
}

/// The shapes of a kernel's padded images (`pad…` allocations).
fn padded_images(k: &PrimFunc) -> Vec<Vec<usize>> {
    let mut shapes = Vec::new();
    k.body.visit(&mut |s| {
        if let kiln::tir::Stmt::Allocate { buffer, .. } = s {
            if buffer.name().starts_with("pad") {
                shapes.push(buffer.shape().to_vec());
            }
        }
    });
    shapes
}

/// `m` optimized and planned for `unit` at opt level 3.
fn plan_for(m: &kiln::relay::IRModule, unit: kiln::target::VectorUnit) -> kiln::backend::aot::ExecutorPlan {
    let mut ctx = PassContext::new().with_opt_level(3);
    unit.configure(&mut ctx);
    kiln::build::optimize_and_plan(m.clone(), std::sync::Arc::new(ctx)).expect("compile").1
}
