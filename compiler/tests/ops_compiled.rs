//! Every registered operator, compiled for LLVM (JIT) and for C, matches the
//! reference interpreter: each program of the Relay corpus that compiles
//! ahead of time (no control flow) is optimized, lowered, compiled and run
//! over its planned arena, serially and task-sliced over 3 threads — one
//! test per program (`corpus::<name>`). Together the compiled programs use
//! every operator (checked after them).

mod common;
#[path = "ops_compiled/concatenate.rs"]
mod concatenate;
#[path = "ops_compiled/depthwise.rs"]
mod depthwise;
#[path = "ops_compiled/low_precision.rs"]
mod low_precision;
#[path = "ops_compiled/packed_pixels.rs"]
mod packed_pixels;
#[path = "ops_compiled/pooling.rs"]
mod pooling;
#[path = "ops_compiled/winograd.rs"]
mod winograd;

use common::sweep::{Completion, Coverage, Failed};
use common::{compare, interpreted};
use concatenate::channel_concatenations_copy_each_input_as_vectors_and_match_the_interpreter;
use depthwise::{depthwise_convolutions_match_the_interpreter, large_depthwise_planes_are_padded_a_few_rows_at_a_time};
use low_precision::{
    amx_convolutions_match_the_interpreter, bf16_convolutions_match_the_interpreter,
    byte_activations_between_kernels_match_the_interpreter, integer_convolutions_match_the_interpreter,
};
use packed_pixels::{
    packed_convolutions_prefetch_the_next_blocks_weights_and_match_the_interpreter,
    packed_projections_on_14_by_14_maps_take_overlapping_two_by_six_tiles_on_8_lanes,
    packed_rows_112_wide_take_overlapping_two_by_six_tiles_on_8_lanes,
    stems_prefetch_their_input_rows_ahead_and_match_the_interpreter,
};
use pooling::{
    large_pooling_windows_keep_rows_in_vectors_and_match_the_interpreter,
    strided_padded_copies_are_vectors_and_match_the_interpreter, strided_pooling_rows_match_the_interpreter,
};
use winograd::{
    sigmoid_rows_off_the_vector_width_vectorize_and_match_the_interpreter, winograd_convolutions_match_the_interpreter,
};

use kiln::backend::host;
use kiln::tir::PrimFunc;
use kiln::transform::PassContext;

fn main() {
    let sweep = common::sweep::CorpusSweep {
        unavailable: None,
        check: compiled_matches_the_interpreter,
        exempt: &[],
        min_programs: 40,
        at_least: &[],
    };
    common::sweep::run(
        sweep,
        trials![
            packed_weight_convolutions_match_the_interpreter,
            pointwise_convolutions_over_pixel_vectors_match_the_interpreter,
            pointwise_convolutions_with_overlapping_pixel_tiles_match_the_interpreter,
            pointwise_expansions_on_maps_of_whole_vectors_but_one_match_the_interpreter,
            pointwise_convolutions_on_large_maps_sweep_channel_chunks_and_match_the_interpreter,
            pointwise_expansions_on_small_maps_split_channel_halves_and_match_the_interpreter,
            pointwise_projections_on_small_maps_take_eight_rows_by_two_vectors_and_match_the_interpreter,
            packed_convolutions_with_a_silu_epilogue_match_the_interpreter,
            small_map_pointwise_convolutions_split_channels_and_match_the_interpreter,
            packed_dense_weights_match_the_interpreter,
            wide_dense_panels_take_six_row_tiles_and_match_the_interpreter,
            winograd_convolutions_match_the_interpreter,
            sigmoid_rows_off_the_vector_width_vectorize_and_match_the_interpreter,
            row_reductions_on_vector_lanes_match_the_interpreter,
            large_pooling_windows_keep_rows_in_vectors_and_match_the_interpreter,
            strided_pooling_rows_match_the_interpreter,
            strided_padded_copies_are_vectors_and_match_the_interpreter,
            channel_concatenations_copy_each_input_as_vectors_and_match_the_interpreter,
            depthwise_convolutions_match_the_interpreter,
            large_depthwise_planes_are_padded_a_few_rows_at_a_time,
            unpacked_convolutions_on_partial_vector_rows_match_the_interpreter,
            weight_stationary_convolutions_on_short_rows_match_the_interpreter,
            packed_projections_on_14_by_14_maps_take_overlapping_two_by_six_tiles_on_8_lanes,
            packed_rows_112_wide_take_overlapping_two_by_six_tiles_on_8_lanes,
            stems_prefetch_their_input_rows_ahead_and_match_the_interpreter,
            packed_convolutions_prefetch_the_next_blocks_weights_and_match_the_interpreter,
            integer_convolutions_match_the_interpreter,
            amx_convolutions_match_the_interpreter,
            byte_activations_between_kernels_match_the_interpreter,
            bf16_convolutions_match_the_interpreter,
        ],
    )
}

/// One corpus program compiled at opt levels 0 and 3, for LLVM and C, run
/// serially and on 3 threads.
fn compiled_matches_the_interpreter(case: &common::CorpusCase, coverage: &Coverage) -> Result<Completion, Failed> {
    let common::CorpusCase { name, module: m, transcendental, args, want } = case;
    for opt_level in [0, 3] {
        let ctx = common::sweep_context(opt_level);
        // The compiler's own middle: Relay pipeline, LowerTE, then the TIR
        // pipeline (default schedules, intrinsics, unrolling, vectorization).
        // Programs with control flow, closures or several globals are not compiled ahead of time.
        let result = kiln::build::optimize_and_plan(m.clone(), std::sync::Arc::new(ctx));
        let Some((fused, mut plan)) = common::ahead_of_time(name, result) else {
            return common::sweep::not_ahead_of_time();
        };
        if opt_level == 0 {
            coverage.operators_of(&fused);
        }
        // Small kernels get their outer loop task-sliced too, so that slicing is exercised.
        plan.kernels = plan.kernels.into_iter().map(|k| kiln::schedule::parallelize_outer_above(k, 0)).collect();
        let jit = kiln::codegen::llvm::Jit::new(name, &plan.kernels).map_err(|e| format!("LLVM codegen: {e}"))?;
        let c = common::c_library(&plan.kernels);
        for threads in [1, 3] {
            for (backend, got) in
                [("llvm", host::run(&plan, &jit, args, threads)?), ("C", host::run(&plan, &c, args, threads)?)]
            {
                compare(name, &format!("{backend} opt {opt_level} threads {threads}"), &got, want, *transcendental);
            }
        }
        coverage.program();
    }
    Ok(Completion::Completed)
}

/// Convolutions whose weights are constants (bound at build time) take the
/// packed `OIHW<lanes>o` path (AlterOpLayout + the channel-vectorized schedule):
/// strided, padded, 1×1 and residual forms equal the interpreter on LLVM and C.
fn packed_weight_convolutions_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 9, 11), float32], %w1: Tensor[(32, 16, 3, 3), float32], %b1: Tensor[(32), float32],
          %w2: Tensor[(32, 32, 3, 3), float32], %w3: Tensor[(32, 32, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, strides=[2, 2], padding=[1, 1, 1, 1]);
  %4 = nn.conv2d(%2, %w3, strides=[2, 2]);
  add(%3, %4)
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3"], false, &packed("conv2d.weight_block", 3, true));
}

/// Pointwise (1 × 1, stride-1, unpadded) convolutions with constant weights
/// whose maps are whole vectors of pixels (6 × 16 = two tiles of 3 vectors
/// of 16, 8 × 8 = two of 2) stay OIHW on 8- and 16-lane targets and are
/// vectorized over pixels (rows and columns fused), with a bias and clip
/// epilogue, a residual add, and 24 output channels (three 8-row tiles); a
/// 5 × 7 map (35 pixels) keeps the packed `OIHW<lanes>o` form. On 8 lanes a
/// map on 16-wide rows takes the general tile of two vectors per row
/// instead. All equal the interpreter on LLVM and C.
fn pointwise_convolutions_over_pixel_vectors_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 6, 16), float32], %y: Tensor[(1, 32, 8, 8), float32], %z: Tensor[(1, 32, 5, 7), float32],
          %v: Tensor[(1, 16, 8, 8), float32],
          %w1: Tensor[(32, 16, 1, 1), float32], %b1: Tensor[(32), float32], %w2: Tensor[(24, 32, 1, 1), float32],
          %w3: Tensor[(32, 32, 1, 1), float32], %w4: Tensor[(32, 32, 1, 1), float32], %w5: Tensor[(24, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1);
  %1 = clip(nn.bias_add(%0, %b1), a_min=0f, a_max=6f);
  %2 = nn.conv2d(%y, %w2);
  %3 = add(nn.conv2d(%y, %w3), %y);
  (%1, %2, %3, nn.conv2d(%z, %w4), nn.conv2d(%v, %w5))
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3", "w4", "w5"], false, &|kernels, lanes| {
        // Vectorized over pixels: an OIHW pointwise kernel with rows and columns fused into one loop
        // (itself fused with the channel tiles where both run in parallel).
        let fused_pixels = |k: &PrimFunc| {
            let mut found = false;
            k.body.visit(&mut |s| found |= matches!(s, kiln::tir::Stmt::For(l) if l.var.name.contains("_f_o")));
            found
        };
        let on_pixels = kernels
            .iter()
            .filter(|k| k.attrs.contains_key("conv2d.pointwise") && !k.attrs.contains_key("conv2d.weight_block"))
            .filter(|k| fused_pixels(k))
            .count();
        let packed = kernels.iter().filter(|k| k.attrs.contains_key("conv2d.weight_block")).count();
        let (want_pixels, want_packed) = if lanes == 16 { (4, 1) } else { (3, 1) };
        assert_eq!((on_pixels, packed), (want_pixels, want_packed), "pointwise kernels with {lanes} lanes");
    });
}

/// On 16 lanes, a pointwise expansion (32 → 64 channels) over a 14 × 14
/// map — 12¼ vectors of pixels, the last tile overlapping the one before —
/// stays OIHW and is vectorized over pixels, while the projection back
/// (64 → 32, with a residual add) keeps the packed form; on 8 lanes both are
/// packed (196 pixels are not whole vectors of 8 either). Pixel and channel
/// tiles run in parallel together. All equal the interpreter on LLVM and C,
/// 1 and 2 threads.
fn pointwise_expansions_on_maps_of_whole_vectors_but_one_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 14, 14), float32], %w1: Tensor[(64, 32, 1, 1), float32], %b1: Tensor[(64), float32],
          %w2: Tensor[(32, 64, 1, 1), float32]) {
  %0 = clip(nn.bias_add(nn.conv2d(%x, %w1), %b1), a_min=0f, a_max=6f);
  add(nn.conv2d(%0, %w2), %x)
}
"#;
    check_compiled(text, &["w1", "b1", "w2"], false, &|kernels, lanes| {
        let convolutions: Vec<_> =
            kernels.iter().filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d")).collect();
        assert_eq!(convolutions.len(), 2, "two convolution kernels");
        let packed_outputs: Vec<usize> = convolutions
            .iter()
            .filter(|k| k.attrs.contains_key("conv2d.weight_block"))
            .map(|k| k.params.last().map_or(0, |b| b.shape()[1]))
            .collect();
        let want: &[usize] = if lanes == 16 { &[32] } else { &[64, 32] };
        assert_eq!(packed_outputs, want, "packed kernels' output channels, {lanes} lanes");
    });
}

/// On 16 lanes, a pointwise expansion (16 → 96 channels, bias and clip) on a
/// 56 × 56 map sweeps its pixels in chunks of 32 channels (tiles of 8 rows ×
/// 2 vectors: 12 channel tiles in 3 chunks, 98 pixel tiles in 2 bands),
/// band × chunk in parallel (6 tasks); equal to the interpreter on LLVM and
/// C, 1 and 2 threads. (On 8 lanes 56-wide rows take the general row tiles.)
fn pointwise_convolutions_on_large_maps_sweep_channel_chunks_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 56, 56), float32], %w1: Tensor[(96, 16, 1, 1), float32], %b1: Tensor[(96), float32]) {
  clip(nn.bias_add(nn.conv2d(%x, %w1), %b1), a_min=0f, a_max=6f)
}
"#;
    check_compiled(text, &["w1", "b1"], false, &|kernels, lanes| {
        if lanes != 16 {
            return;
        }
        let conv = kernels.iter().find(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d")).expect("conv");
        let mut extents = Vec::new();
        conv.body.visit(&mut |s| match s {
            kiln::tir::Stmt::For(l) if l.kind == kiln::tir::ForKind::Parallel => extents.push(l.extent.clone()),
            _ => {}
        });
        assert_eq!(extents, [kiln::tir::Expr::int(6)], "bands × chunks in parallel");
    });
}

/// On 16 lanes, a pointwise expansion (32 → 96 channels, bias and clip) on a
/// 28 × 28 map runs its channel tiles in two halves, each sweeping every
/// pixel tile (half × pixel tiles in parallel: two threads each write half
/// of the channels, which the depthwise convolution after it reads by
/// channel), in tiles of 8 channel rows × 2 vectors (49 vectors of pixels:
/// the last tile overlaps); a projection (96 → 32) keeps pixel tiles
/// outermost. Equal to the interpreter on LLVM and C, 1 and 2 threads.
fn pointwise_expansions_on_small_maps_split_channel_halves_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 28, 28), float32], %w1: Tensor[(96, 32, 1, 1), float32], %b1: Tensor[(96), float32],
          %w2: Tensor[(32, 96, 1, 1), float32]) {
  %0 = clip(nn.bias_add(nn.conv2d(%x, %w1), %b1), a_min=0f, a_max=6f);
  add(nn.conv2d(%0, %w2), %x)
}
"#;
    check_compiled(text, &["w1", "b1", "w2"], false, &|kernels, lanes| {
        if lanes != 16 {
            return;
        }
        let convolutions: Vec<_> =
            kernels.iter().filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d")).collect();
        let outermost_parallel: Vec<String> = convolutions.iter().map(|k| first_parallel_loop(k)).collect();
        assert!(
            outermost_parallel[0].starts_with("ax1_o_o"),
            "expansion: channel halves outermost, {outermost_parallel:?}"
        );
        assert!(outermost_parallel[1].starts_with("ax2"), "projection: pixel tiles outermost, {outermost_parallel:?}");
        // 49 vectors of pixels, which neither 2 nor 3 divides: 8 channel rows
        // × 2 vectors, the last tile overlapping (not 8 × 1).
        let expansion = kiln::tir::print_prim_func(convolutions[0]);
        assert!(expansion.contains("_local = T.alloc_buffer([8, 32]"), "an 8 × 32 tile:\n{expansion}");
    });
}

/// On 16 lanes, a pointwise projection on a 28 × 28 map (64 → 16 channels,
/// with a residual add) takes tiles of 8 channel rows × 2 vectors of pixels,
/// the last one overlapping (784 pixels are 24½ such tiles); 64 → 12
/// channels, which 8 rows do not divide, 4 × 2. Equal to the interpreter on
/// LLVM and C, 1 and 2 threads.
fn pointwise_projections_on_small_maps_take_eight_rows_by_two_vectors_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 28, 28), float32], %y: Tensor[(1, 16, 28, 28), float32], %w1: Tensor[(16, 64, 1, 1), float32],
          %w2: Tensor[(12, 64, 1, 1), float32]) {
  (add(nn.conv2d(%x, %w1), %y), nn.conv2d(%x, %w2))
}
"#;
    check_compiled(text, &["w1", "w2"], false, &|kernels, lanes| {
        if lanes != 16 {
            return;
        }
        let mut tiles: Vec<String> = kernels
            .iter()
            .filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d"))
            .filter_map(|k| {
                let text = kiln::tir::print_prim_func(k);
                Some(text.split("_local = T.alloc_buffer([").nth(1)?.split(']').next()?.to_string())
            })
            .collect();
        tiles.sort();
        assert_eq!(tiles, ["4, 32", "8, 32"], "the projections' accumulator tiles");
    });
}

/// Pointwise convolutions over pixels whose tile the map's vectors do not
/// divide: on 8 lanes, 64 channels over 40 pixels (5 vectors) take 4 × 3
/// vectors (12 accumulators) in two tiles, the second moved back to end at
/// the map's end (pixels 16–39, recomputing 16–23), its three vectors kept
/// apart (one 24-lane vector is built lane by lane through the stack); with
/// a SiLU epilogue and a residual add: equal to the interpreter.
fn pointwise_convolutions_with_overlapping_pixel_tiles_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 5, 8), float32], %r: Tensor[(1, 64, 5, 8), float32], %w: Tensor[(64, 32, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w);
  add(multiply(%0, sigmoid(%0)), %r)
}
"#;
    check_compiled(text, &["w"], true, &|kernels, lanes| {
        if lanes == 8 {
            let texts: Vec<String> = kernels.iter().map(kiln::tir::print_prim_func).collect();
            assert!(texts.iter().any(|t| t.contains("T.min((") && t.contains("[4, 3, 8]")), "{texts:?}");
        }
    });
}

/// A packed convolution with a SiLU epilogue (`x · sigmoid(x)`, YOLOv8's
/// activation) on a 40-wide row takes one vector of columns per tile on 8
/// lanes, not the 2 × 5 the rule takes without an epilogue, and writes it
/// back along the columns, transposed in registers; 16 lanes keep 2 × 10
/// (40 is no whole number of their vectors), whose 10 columns fill no
/// vector: the sigmoid runs on the accumulators, whole vectors of channels
/// (`epilogue_along_channels`). A stem-like 3 → 16 stride-2 convolution's
/// 160-wide rows take 16-column tiles, transposed on AVX-512 in four rounds
/// of interleaves (`codegen/llvm/transpose.rs`). Equal to the interpreter.
fn packed_convolutions_with_a_silu_epilogue_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 10, 13), float32], %y: Tensor[(1, 16, 5, 40), float32], %z: Tensor[(1, 3, 6, 320), float32],
          %w1: Tensor[(32, 16, 3, 3), float32], %b1: Tensor[(32), float32], %w2: Tensor[(32, 16, 3, 3), float32],
          %w3: Tensor[(16, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.conv2d(%y, %w2, padding=[1, 1, 1, 1]);
  %3 = nn.conv2d(%z, %w3, strides=[2, 2], padding=[1, 1, 1, 1]);
  (multiply(%1, sigmoid(%1)), multiply(%2, sigmoid(%2)), multiply(%3, sigmoid(%3)))
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3"], true, &|kernels, lanes| {
        assert_eq!(packed_kernels(kernels, "conv2d.weight_block", lanes), 3, "packed convolutions with {lanes} lanes");
        let wide: Vec<PrimFunc> = kernels.iter().filter(|k| k.params[0].shape() == [1, 16, 5, 40]).cloned().collect();
        assert_eq!(writes_back_along_columns(&wide), lanes == 8, "the 40-wide rows' write-back, {lanes} lanes");
        // The 40-wide rows' tile: columns × channel vectors × lanes.
        let tile = |k: &PrimFunc| {
            let text = kiln::tir::print_prim_func(k);
            text.split("_local = T.alloc_buffer([").nth(1)?.split(']').next().map(str::to_string)
        };
        let tiles: Vec<String> =
            kernels.iter().filter(|k| k.params[0].shape() == [1, 16, 5, 40]).filter_map(tile).collect();
        let want = if lanes == 8 { "8, 1, 8" } else { "10, 2, 16" };
        assert_eq!(tiles, [want], "the 40-wide rows' tile, {lanes} lanes");
        let stem: Vec<PrimFunc> = kernels.iter().filter(|k| k.params[0].shape() == [1, 3, 6, 320]).cloned().collect();
        if lanes == 16 {
            assert_eq!(stem.iter().filter_map(tile).collect::<Vec<_>>(), ["16, 1, 16"], "the stem's tile");
            assert!(writes_back_along_columns(&stem), "the stem's 16 columns are written back transposed");
        }
    });
}

/// Packed 1 × 1 convolutions on small maps of few rows with more output
/// channels than pixels (MobileNetV2's expansions) run their channel tiles
/// in parallel and read the input in place; with fewer channels than pixels
/// (32), too few channel tiles to share (48), or rows enough to share (256
/// channels on a 9 × 9 map: `MIN_SHARED_ROWS`), rows stay in parallel. A
/// clipped expansion, a projection with a residual epilogue and two plain
/// ones equal the interpreter on LLVM and C, 1 and 2 threads, for 8- and
/// 16-lane units.
fn small_map_pointwise_convolutions_split_channels_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 5, 7), float32], %y: Tensor[(1, 48, 9, 9), float32], %w1: Tensor[(384, 32, 1, 1), float32],
          %b1: Tensor[(384), float32], %w2: Tensor[(48, 384, 1, 1), float32], %w3: Tensor[(32, 384, 1, 1), float32],
          %w4: Tensor[(256, 48, 1, 1), float32]) {
  %0 = clip(nn.bias_add(nn.conv2d(%x, %w1), %b1), a_min=0f, a_max=6f);
  %1 = nn.conv2d(%0, %w2);
  %2 = add(nn.conv2d(%0, %w3), %x);
  %3 = nn.conv2d(%y, %w4);
  (%1, %2, %3)
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3", "w4"], false, &|kernels, lanes| {
        let mut split: Vec<(usize, bool)> = kernels
            .iter()
            .filter(|k| k.attrs.contains_key("conv2d.weight_block"))
            .map(|k| (k.params.last().map_or(0, |b| b.shape()[1]), first_parallel_loop(k).starts_with("ax1")))
            .collect();
        split.sort();
        assert_eq!(split, [(32, false), (48, false), (256, false), (384, true)], "{lanes} lanes");
    });
}

/// On 16 lanes (32 registers), a product over four or more packed panels of
/// four vectors (256 columns as 4 panels of 64) takes tiles of 6 rows and a
/// tail tile of the rows left over (20 rows: 3 × 6 + 2), with a bias and a
/// residual add; equal to the interpreter on LLVM and C, 1 and 2 threads.
fn wide_dense_panels_take_six_row_tiles_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 20, 128), float32], %r: Tensor[(1, 20, 256), float32], %w: Tensor[(256, 128), float32],
          %b: Tensor[(256), float32]) {
  add(add(nn.dense(%x, %w), %b), %r)
}
"#;
    check_compiled(text, &["w", "b"], false, &|kernels, lanes| {
        if lanes != 16 {
            return;
        }
        let dense = kernels.iter().find(|k| k.attrs.contains_key("dense_pack.panel")).expect("a packed dense");
        let text = kiln::tir::print_prim_func(dense);
        let tiles: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("_local") && l.contains(" = T.alloc_buffer(["))
            .filter_map(|l| l.split(" = T.alloc_buffer([").nth(1)?.split(']').next())
            .collect();
        assert_eq!(tiles, ["6, 64", "2, 64"], "six-row tiles and a tail:\n{text}");
    });
}

/// Products with constant weights take AlterOpLayout's column panels
/// (`nn.contrib_dense_pack`, weight `[units / b, in, b]`): dense and matmul
/// weights of either orientation, a single row (a classifier's GEMV: 80
/// columns are five vectors of 8 or of 16), rows of a 3-D input, an
/// epilogue, and a weight zero-padded to whole panels (also one narrower
/// than a panel where the padding is under a seventh); 20 columns fit no
/// panel of whole vectors and keep the transposed matmul. All equal the interpreter on LLVM and C, for 8- and
/// 16-lane units.
fn packed_dense_weights_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 24), float32], %w1: Tensor[(80, 24), float32], %w2: Tensor[(80, 48), float32],
          %b2: Tensor[(48), float32], %w3: Tensor[(20, 48), float32]) {
  %0 = nn.dense(%x, %w1);
  %1 = nn.matmul(%0, %w2);
  %2 = nn.relu(add(%1, %b2));
  nn.matmul(%2, %w3, transpose_b=True)
}
"#;
    check_compiled(text, &["w1", "w2", "b2", "w3"], false, &packed("dense_pack.panel", 2, false));
    let rows = r#"#[version = "0.0.5"]
def @main(%y: Tensor[(1, 6, 32), float32], %w: Tensor[(64, 32), float32]) {
  sigmoid(nn.matmul(%y, %w, transpose_b=True))
}
"#;
    check_compiled(rows, &["w"], true, &packed("dense_pack.panel", 1, true));
    // Two images of 13 rows over one 16-column panel: on 8 lanes two 6-row
    // tiles and a 1-row tail per image (the batch loop outside them).
    let batched = r#"#[version = "0.0.5"]
def @main(%y: Tensor[(2, 13, 32), float32], %w: Tensor[(32, 16), float32]) {
  nn.relu(nn.matmul(%y, %w))
}
"#;
    check_compiled(batched, &["w"], false, &|kernels, lanes| {
        let mut tiles = Vec::new();
        for k in kernels.iter().filter(|k| k.attrs.contains_key("dense_pack.panel")) {
            k.body.visit(&mut |s| {
                if let kiln::tir::Stmt::Allocate { buffer, .. } = s {
                    tiles.push(buffer.shape().to_vec());
                }
            });
        }
        if lanes == 8 {
            assert_eq!(tiles, [vec![6, 16], vec![1, 16]], "register tiles with {lanes} lanes");
        }
    });
    // 8 rows × 40 columns: one vector of 8 divides 40, two do not; on 8 lanes
    // the weight is zero-padded to three panels of 16 (whole tiles), computed
    // as a 6 × 16 tile (12 accumulators of 16 registers) and a 2 × 16 tile for
    // the last rows, each written back whole where its panel is inside the 40
    // columns and lane by lane, checking them, for the last panel (an
    // if/else per tile); on 16 lanes it keeps the transposed matmul.
    let head = r#"#[version = "0.0.5"]
def @main(%h: Tensor[(8, 24), float32], %w: Tensor[(40, 24), float32], %b: Tensor[(40), float32]) {
  add(nn.dense(%h, %w), %b)
}
"#;
    check_compiled(head, &["w", "b"], false, &|kernels, lanes| {
        let panels: Vec<&str> =
            kernels.iter().filter_map(|k| k.attrs.get("dense_pack.panel").map(String::as_str)).collect();
        let want: &[&str] = if lanes == 8 { &["16"] } else { &[] };
        assert_eq!(panels, want, "padded panels with {lanes} lanes");
        let (mut tiles, mut split_writebacks) = (Vec::new(), 0);
        for k in kernels.iter().filter(|k| k.attrs.contains_key("dense_pack.panel")) {
            k.body.visit(&mut |s| match s {
                kiln::tir::Stmt::Allocate { buffer, .. } => tiles.push(buffer.shape().to_vec()),
                kiln::tir::Stmt::If { else_case: Some(_), .. } => split_writebacks += 1,
                _ => {}
            });
        }
        let want: Vec<Vec<usize>> = if lanes == 8 { vec![vec![6, 16], vec![2, 16]] } else { vec![] };
        assert_eq!(tiles, want, "register tiles with {lanes} lanes");
        assert_eq!(split_writebacks, want.len(), "whole and guarded write-backs with {lanes} lanes");
    });
    // LeNet's 400 → 120: on 16 lanes 128 columns (8 zero columns, under a
    // seventh of 120) in two panels of 64 — 200 KB of weights, past L1: a
    // panel per thread at two threads — on 8 lanes three panels of 40. Each
    // panel's sum of 4 or 5 vectors runs in two interleaved partial tiles,
    // and a 10-class head (one vector) in eight (`split_accumulation`).
    let lenet = r#"#[version = "0.0.5"]
def @main(%v: Tensor[(1, 400), float32], %w: Tensor[(120, 400), float32], %w2: Tensor[(10, 120), float32]) {
  nn.dense(nn.relu(nn.dense(%v, %w)), %w2)
}
"#;
    check_compiled(lenet, &["w", "w2"], false, &|kernels, lanes| {
        let panels: Vec<&str> =
            kernels.iter().filter_map(|k| k.attrs.get("dense_pack.panel").map(String::as_str)).collect();
        let want: &[&str] = if lanes == 8 { &["40"] } else { &["64"] };
        assert_eq!(panels, want, "LeNet's panels with {lanes} lanes");
        let mut partial_tiles = Vec::new();
        for k in kernels {
            k.body.visit(&mut |s| match s {
                kiln::tir::Stmt::Allocate { buffer, .. } if buffer.name().ends_with("_split") => {
                    partial_tiles.push(buffer.shape()[0])
                }
                _ => {}
            });
        }
        partial_tiles.sort();
        assert_eq!(partial_tiles, [2, 8], "partial tiles of the one-row products with {lanes} lanes");
    });
}

/// Reductions along contiguous rows accumulate per vector lane
/// (`rfactor_lanes`: a local `*_rf` partial, folded after the row, the
/// rest of the row as a serial tail): softmax and log-softmax rows of 37
/// (whole vectors of 8 and 16 plus a tail), a row maximum, minimum, sum and
/// mean of 50, a row of 6 (shorter than a vector: one partial vector), and a layer
/// normalization of rows of 40 (kept whole on CPUs: one kernel, its sum and
/// squared deviations on lanes), and a softmax over 4 × 32 rows of 64 — with
/// its polynomial `exp`s enough work for the threads: its row loop runs in
/// parallel inside the allocations of the rows' maxima and sums. All equal
/// the interpreter on LLVM and C, for 8- and 16-lane units, on 1 and 2 threads.
fn row_reductions_on_vector_lanes_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(3, 37), float32], %y: Tensor[(2, 3, 50), float32], %z: Tensor[(4, 6), float32],
          %h: Tensor[(5, 40), float32], %a: Tensor[(4, 32, 64), float32], %c: Tensor[(2, 20, 3), float32],
          %v: Tensor[(300), float32], %u: Tensor[(1, 20000), float32], %g: Tensor[(40), float32],
          %b: Tensor[(40), float32]) {
  %0 = nn.softmax(%x);
  %1 = max(%y, axis=[2]);
  %2 = min(%y, axis=[2], keepdims=True);
  %3 = sum(%y, axis=[-1]);
  %4 = mean(%y, axis=[2]);
  %5 = nn.layer_norm(%h, %g, %b);
  (%0, %1, %2, %3, %4, sum(%z, axis=[1]), %5, nn.softmax(%a), nn.softmax(%c, axis=1), nn.softmax(%v), nn.softmax(%u))
}
"#;
    check_compiled(text, &["g", "b"], true, &|kernels, lanes| {
        let mut partials = 0;
        for k in kernels {
            k.body.visit(&mut |s| {
                partials +=
                    usize::from(matches!(s, kiln::tir::Stmt::Allocate { buffer, .. } if buffer.name().ends_with("_rf")))
            });
        }
        // softmaxes along rows (the 1-d and the 20000-wide one too) and
        // layer norm: two each — the 32 rows of 64, two rows at a time, four
        // —; then max, min, sum, mean and the sum of 6: one each.
        assert_eq!(partials, 17, "row reductions on vector lanes with {lanes} lanes");
        let anchored =
            |op: &'static str| kernels.iter().filter(move |k| k.attrs.get("anchor").is_some_and(|a| a == op));
        assert_eq!(anchored("nn.layer_norm").count(), 1, "layer norm kernels with {lanes} lanes");
        let parallel: Vec<bool> = anchored("nn.softmax").map(|k| k.body.has_parallel_loop()).collect();
        assert_eq!(parallel[..2], [false, true], "softmax kernels in parallel with {lanes} lanes");
        // A softmax along its last axis computes each row's exponentials
        // once, into a row of a kernel-local buffer read by its sum and its
        // quotients — an even number of rows two rows at a time, a buffer
        // each (`schedule::softmax_rows`); along another axis, of a 1-d
        // tensor or over rows past 64 KiB (20000 floats) they stay inlined
        // (no buffer).
        let exp_rows: Vec<Vec<Vec<usize>>> = anchored("nn.softmax")
            .map(|k| {
                let mut rows = Vec::new();
                k.body.visit(&mut |s| match s {
                    kiln::tir::Stmt::Allocate { buffer, .. } if buffer.name().starts_with("softmax_exp") => {
                        rows.push(buffer.shape().to_vec())
                    }
                    _ => {}
                });
                rows
            })
            .collect();
        let pair = vec![vec![1, 1, 64]; 2];
        assert_eq!(exp_rows, [vec![vec![1, 37]], pair, vec![], vec![], vec![]], "with {lanes} lanes");
    });
}

/// The name of the first parallel loop of a kernel (its outermost one), or
/// "" for none: `ax1…` for output channel blocks, `ax2…` for rows.
fn first_parallel_loop(k: &PrimFunc) -> String {
    let mut name = None;
    k.body.visit(&mut |s| {
        if let kiln::tir::Stmt::For(l) = s {
            if l.kind == kiln::tir::ForKind::Parallel && name.is_none() {
                name = Some(l.var.name.to_string());
            }
        }
    });
    name.unwrap_or_default()
}

/// The kernels packed for `lanes`-lane vectors: attribute `attr` holding a
/// whole number of them.
fn packed_kernels(kernels: &[PrimFunc], attr: &str, lanes: usize) -> usize {
    let whole_vectors = |v: &String| v.parse::<usize>().is_ok_and(|b| b % lanes == 0);
    kernels.iter().filter(|k| k.attrs.get(attr).is_some_and(whole_vectors)).count()
}

/// An `inspect` for [`check_compiled`]: `n` kernels packed (attribute `attr`
/// holding a whole number of vectors), and whether a packed convolution's
/// tile writes back along the columns (`along_columns`: the row-ordered
/// convolutions of these small maps do, whatever their epilogue; a product's
/// panels never do).
fn packed(attr: &'static str, n: usize, along_columns: bool) -> impl Fn(&[PrimFunc], usize) {
    move |kernels, lanes| {
        assert_eq!(packed_kernels(kernels, attr, lanes), n, "kernels packed ({attr}) with {lanes} lanes");
        let convolution = attr == "conv2d.weight_block";
        assert_eq!(writes_back_along_columns(kernels), along_columns && convolution);
    }
}

/// Whether some kernel reads its accumulator tile across the channel lanes
/// (a ramp over the tile with a stride other than 1): the column-wise write-back.
fn writes_back_along_columns(kernels: &[kiln::tir::PrimFunc]) -> bool {
    kernels.iter().any(|k| {
        let text = kiln::tir::print_prim_func(k);
        text.split("_local[T.Ramp(").skip(1).any(|rest| rest.split(", ").nth(1).is_some_and(|stride| stride != "1"))
    })
}

/// Compiles `text` with the named parameters (the last ones) bound as
/// constant weights for 8- and 16-lane vector units, hands the kernels and
/// the lanes to `inspect`, and compares LLVM and C, 1 and 2 threads, with
/// the interpreter (`transcendental`: at the tolerance of polynomial
/// exp/tanh).
fn check_compiled(text: &str, weights: &[&str], transcendental: bool, inspect: &dyn Fn(&[PrimFunc], usize)) {
    check_compiled_with(text, weights, transcendental, &[], inspect)
}

fn check_compiled_with(
    text: &str,
    weights: &[&str],
    transcendental: bool,
    config: &[(&str, bool)],
    inspect: &dyn Fn(&[PrimFunc], usize),
) {
    check_compiled_on(text, weights, transcendental, config, true, inspect)
}

/// [`check_compiled_with`], on the C backend too where `c_backend`.
fn check_compiled_on(
    text: &str,
    weights: &[&str],
    transcendental: bool,
    config: &[(&str, bool)],
    c_backend: bool,
    inspect: &dyn Fn(&[PrimFunc], usize),
) {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("packed.relay");
    std::fs::write(&file, text).expect("write");
    let (_, all, want) = interpreted(text);
    let mut b = kiln::Build::new("packed");
    b.relay_file(&file);
    let n_inputs = all.len() - weights.len();
    for (name, t) in weights.iter().zip(&all[n_inputs..]) {
        b.weight(name, t.clone());
    }
    let bound = b.prepare().expect("bind");
    // Packed for an AVX2 vector unit (8 lanes) and an AVX-512 one (16): the
    // block follows the target; both run here (LLVM splits wider vectors).
    for unit in [kiln::target::VectorUnit::AVX2, kiln::target::VectorUnit::AVX512] {
        let mut ctx = PassContext::new().with_opt_level(3);
        for (key, value) in config {
            ctx.set_config(key, kiln::transform::ConfigValue::Bool(*value)).expect("config key");
        }
        unit.configure(&mut ctx);
        // The rest of a CPU target's configuration (`nn.layer_norm` kept whole).
        kiln::target::configure_context("llvm", &mut ctx);
        let (_, plan) = kiln::build::optimize_and_plan(bound.clone(), std::sync::Arc::new(ctx)).expect("compile");
        inspect(&plan.kernels, unit.f32_lanes);
        let jit = kiln::codegen::llvm::Jit::new("packed", &plan.kernels).expect("jit");
        let c = c_backend.then(|| common::c_library(&plan.kernels));
        for threads in [1, 2] {
            let llvm_out = host::run(&plan, &jit, &all[..n_inputs], threads);
            compare("packed", "llvm", &llvm_out.expect("run"), &want, transcendental);
            if let Some(c) = &c {
                compare(
                    "packed",
                    "C",
                    &host::run(&plan, c, &all[..n_inputs], threads).expect("run"),
                    &want,
                    transcendental,
                );
            }
        }
    }
}

/// Convolutions that keep the general (unpacked NCHW) tile — a stem with one
/// or three input channels — on rows that are not whole vectors compute
/// whole vectors past the row's end inside the padded image and store only
/// the row: LeNet's 28-wide stem (two 16-column tiles on 8 lanes, one of 32
/// on 16), a 7-wide stride-2 row (one vector), a 20-wide one and an 8-wide
/// stride-2 one, with a bias and ReLU epilogue. Where the registers hold two
/// output rows (on 32 registers) and the rows are even, a tile takes two:
/// LeNet's stem and the 8-wide rows on 16 lanes, over a padded image filled
/// whole first. Equal to the interpreter on LLVM and C, 1 and 2 threads.
fn unpacked_convolutions_on_partial_vector_rows_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 28, 28), float32], %y: Tensor[(1, 3, 13, 13), float32], %z: Tensor[(1, 3, 5, 20), float32],
          %u: Tensor[(1, 3, 16, 16), float32],
          %w1: Tensor[(6, 1, 5, 5), float32], %b1: Tensor[(6), float32], %w2: Tensor[(5, 3, 3, 3), float32],
          %w3: Tensor[(4, 3, 3, 3), float32], %w4: Tensor[(3, 3, 3, 3), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w1, padding=[2, 2, 2, 2]), %b1));
  %1 = nn.conv2d(%y, %w2, strides=[2, 2], padding=[1, 1, 1, 1]);
  %2 = nn.conv2d(%z, %w3, padding=[1, 1, 1, 1]);
  %3 = nn.conv2d(%u, %w4, strides=[2, 2], padding=[1, 1, 1, 1]);
  (%0, %1, %2, %3)
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3", "w4"], false, &|kernels, lanes| {
        // The accumulator tile's shape ([rows,] channels, columns), per unpacked convolution.
        let mut tiles: Vec<String> = kernels
            .iter()
            .filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d"))
            .filter(|k| !k.attrs.contains_key("conv2d.weight_block"))
            .filter_map(|k| {
                let text = kiln::tir::print_prim_func(k);
                Some(text.split("_local = T.alloc_buffer([").nth(1)?.split(']').next()?.to_string())
            })
            .collect();
        tiles.sort();
        // (The 8-wide rows are whole vectors on 8 lanes: another tile.)
        let want: &[&str] =
            if lanes == 8 { &["3, 8", "4, 16", "5, 8", "6, 16"] } else { &["2, 3, 16", "2, 6, 32", "4, 32", "5, 16"] };
        assert_eq!(tiles, want, "accumulator tiles of the unpacked convolutions, {lanes} lanes");
        // Two-row tiles read a padded image filled whole before them (at
        // most 16 KiB: LeNet's 32 × 32 plane, three 18 × 18 ones), not a few
        // rows per tile: the image has every input row.
        for k in kernels.iter().filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d")) {
            let text = kiln::tir::print_prim_func(k);
            if !text.contains("_local = T.alloc_buffer([2, ") {
                continue;
            }
            let mut image_rows = Vec::new();
            k.body.visit(&mut |st| {
                if let kiln::tir::Stmt::Allocate { buffer, .. } = st {
                    if buffer.name().starts_with("pad") {
                        image_rows.push(buffer.shape()[2]);
                    }
                }
            });
            let input_rows = k.params[0].shape()[2];
            assert!(
                image_rows.len() == 1 && image_rows[0] > input_rows,
                "{}: a whole padded image ({image_rows:?} rows for {input_rows})",
                k.name
            );
        }
    });
}

/// Weight-stationary packed convolutions (weights over 256 KB on a map of at
/// most 64 pixels) on 7-wide rows take two rows per tile and a tile of one
/// row for an odd row — on 8 lanes a row is too short to hide the FMA
/// latency with one channel vector, on 16 lanes two rows of two channel
/// vectors (28 accumulators) load each weight vector once for 14 FMAs, not
/// 7: a 1 × 1 expansion with a bias and ReLU on 7 × 7, a padded stride-2
/// 3 × 3 on 13 × 13 and a stride-2 1 × 1 onto 5 × 7. A 960 → 160 projection on 7 × 7 — few output
/// channels — reads its input in place instead, and fewer than 8 channel
/// tiles (its 5 on 16 lanes) run in parallel together with the rows. All
/// equal the interpreter on LLVM and C, 1 and 2 threads.
fn weight_stationary_convolutions_on_short_rows_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 96, 7, 7), float32], %y: Tensor[(1, 64, 13, 13), float32], %z: Tensor[(1, 128, 9, 13), float32],
          %u: Tensor[(1, 960, 7, 7), float32],
          %w1: Tensor[(1024, 96, 1, 1), float32], %b1: Tensor[(1024), float32],
          %w2: Tensor[(512, 64, 3, 3), float32], %w3: Tensor[(640, 128, 1, 1), float32],
          %w4: Tensor[(160, 960, 1, 1), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w1, padding=[0, 0, 0, 0]), %b1));
  %1 = nn.conv2d(%y, %w2, strides=[2, 2], padding=[1, 1, 1, 1]);
  %2 = nn.conv2d(%z, %w3, strides=[2, 2], padding=[0, 0, 0, 0]);
  (%0, %1, %2, nn.conv2d(%u, %w4))
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3", "w4"], false, &|kernels, lanes| {
        // On 16 lanes the 960 → 160 projection reads its input in place (few
        // output channels: no padded copy) and its 5 tiles of two channel
        // vectors run in parallel with the 7 rows (35 tasks); on 8 lanes it
        // pads its input once (in-place reads outrun the L2 there).
        let is_projection = |k: &PrimFunc| k.params.last().is_some_and(|b| b.shape()[1] == 160);
        let projection = kernels.iter().find(|k| is_projection(k)).expect("160");
        let text = kiln::tir::print_prim_func(projection);
        assert_eq!(text.contains("pad"), lanes == 8, "{lanes} lanes: the projection pads only on 8:\n{text}");
        let mut extents = Vec::new();
        projection.body.visit(&mut |s| match s {
            kiln::tir::Stmt::For(l) if l.kind == kiln::tir::ForKind::Parallel => extents.push(l.extent.clone()),
            _ => {}
        });
        assert_eq!(extents.len(), 1, "one parallel loop");
        if lanes == 16 {
            assert_eq!(extents, [kiln::tir::Expr::int(35)], "the projection's parallel loop");
        }
        // Per packed convolution, its accumulators' shapes: the main tile's, then the odd row's.
        let tiles: Vec<Vec<String>> = kernels
            .iter()
            .filter(|k| k.attrs.contains_key("conv2d.weight_block") && !is_projection(k))
            .map(|k| {
                let text = kiln::tir::print_prim_func(k);
                text.lines()
                    .filter(|l| l.contains("_local") && l.contains(" = T.alloc_buffer(["))
                    .filter_map(|l| l.split(" = T.alloc_buffer([").nth(1)?.split(']').next().map(str::to_string))
                    .collect()
            })
            .collect();
        assert_eq!(tiles.len(), 3, "three weight-stationary convolutions: {tiles:?}");
        for t in &tiles {
            assert!(
                t.len() == 2 && t[0].starts_with("2, ") && t[1].starts_with("1, 1, "),
                "two-row tiles, an odd row, {lanes} lanes: {t:?}"
            );
        }
    });
}
