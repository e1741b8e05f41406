//! The hot loops of kiln's schedules keep their register tiles in registers
//! on every CPU kiln sizes them for: the layers that dominate ResNet-18,
//! MobileNetV2 and the MLP, compiled for AVX2 (haswell, znver3), AVX-512
//! (skylake-avx512, icelake-server) and AArch64 NEON (neoverse-n1). Read
//! from the emitted assembly, so it runs on any machine: the innermost loops
//! that hold FMAs have no stack-relative vector loads or stores (spills), and
//! their FMAs use the target's full vector width. Where a 3 × 3 layer
//! becomes a Winograd convolution (AVX2), its product (a `batch_matmul`
//! register tile) is checked; its input and output transforms are not:
//! straight-line code over a tile's α² vectors, with no accumulator carried
//! around a loop, where a spill is one store and a reload from L1.
#![cfg(feature = "llvm")]

use std::sync::Arc;

use kiln::codegen::llvm::{compile, LlvmTarget};
use kiln::target::VectorUnit;
use kiln::transform::PassContext;
use kiln::{DataType, Tensor};

/// (label, Relay `@main` over `%x` and the weight `%w`, weight shape).
const LAYERS: &[(&str, &str, &[usize])] = &[
    (
        "resnet18 stage-1 3x3 conv",
        "%x: Tensor[(1, 64, 56, 56), float32], %w: Tensor[(64, 64, 3, 3), float32]) {
           nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=64, kernel_size=[3, 3]))",
        &[64, 64, 3, 3],
    ),
    (
        "resnet18 stage-3 3x3 conv",
        "%x: Tensor[(1, 256, 14, 14), float32], %w: Tensor[(256, 256, 3, 3), float32]) {
           nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=256, kernel_size=[3, 3]))",
        &[256, 256, 3, 3],
    ),
    (
        "resnet18 stage-4 3x3 conv",
        "%x: Tensor[(1, 512, 7, 7), float32], %w: Tensor[(512, 512, 3, 3), float32]) {
           nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=512, kernel_size=[3, 3]))",
        &[512, 512, 3, 3],
    ),
    (
        "resnet18 7x7 stem",
        "%x: Tensor[(1, 3, 224, 224), float32], %w: Tensor[(64, 3, 7, 7), float32]) {
           nn.conv2d(%x, %w, strides=[2, 2], padding=[3, 3, 3, 3], channels=64, kernel_size=[7, 7])",
        &[64, 3, 7, 7],
    ),
    (
        "mobilenetv2 1x1 expansion",
        "%x: Tensor[(1, 16, 112, 112), float32], %w: Tensor[(96, 16, 1, 1), float32]) {
           clip(nn.conv2d(%x, %w, channels=96, kernel_size=[1, 1]), a_min=0f, a_max=6f)",
        &[96, 16, 1, 1],
    ),
    (
        "mobilenetv2 1x1 projection",
        "%x: Tensor[(1, 960, 7, 7), float32], %w: Tensor[(160, 960, 1, 1), float32]) {
           nn.conv2d(%x, %w, channels=160, kernel_size=[1, 1])",
        &[160, 960, 1, 1],
    ),
    (
        "yolov8n 3x3 conv on a 20x20 map",
        "%x: Tensor[(1, 64, 20, 20), float32], %w: Tensor[(64, 64, 3, 3), float32]) {
           nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=64, kernel_size=[3, 3]))",
        &[64, 64, 3, 3],
    ),
    (
        "lenet fc: 120 columns, a partial vector's accumulator",
        "%x: Tensor[(1, 400), float32], %w: Tensor[(400, 120), float32]) {
           nn.relu(nn.matmul(%x, %w))",
        &[400, 120],
    ),
    (
        "mlp dense",
        "%x: Tensor[(1, 784), float32], %w: Tensor[(128, 784), float32]) {
           nn.relu(nn.dense(%x, %w, units=128))",
        &[128, 784],
    ),
];

/// (target, FMA register prefix of its full vector width).
const TARGETS: &[(&str, &str)] = &[
    ("llvm -mcpu=haswell", "%ymm"),
    ("llvm -mcpu=znver3", "%ymm"),
    ("llvm -mcpu=skylake-avx512", "%zmm"),
    ("llvm -mcpu=icelake-server", "%zmm"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", ".4s"),
];

fn weight(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.37).sin() * 0.1).collect();
    Tensor::from_f64(DataType::F32, shape.to_vec(), &vals)
}

/// The assembly of one layer's kernels, scheduled and compiled for `target`.
fn assembly(relay: &str, shape: &[usize], target: &str) -> String {
    assembly_of(relay, shape, target, &|k| !k.attrs.contains_key("winograd.tile"))
}

/// The assembly of those of one layer's kernels that `keep` keeps.
fn assembly_of(relay: &str, shape: &[usize], target: &str, keep: &dyn Fn(&kiln::tir::PrimFunc) -> bool) -> String {
    let text = format!("#[version = \"0.0.5\"]\ndef @main({relay}\n}}\n");
    let m = kiln::relay::parse_module(&text).expect("parse");
    let mut b = kiln::Build::new("layer");
    b.module(m).weight("w", weight(shape)).target(target);
    let m = b.prepare().expect("prepare");
    let mut ctx = PassContext::new().with_opt_level(3);
    VectorUnit::of_target(target).configure(&mut ctx);
    let (_, plan) = kiln::build::optimize_and_plan(m, Arc::new(ctx)).expect("plan");
    let llvm = LlvmTarget::parse(target).expect("target");
    let tiled: Vec<_> = plan.kernels.into_iter().filter(|k| keep(k)).collect();
    compile("layer", &tiled, &llvm).expect("compile").assembly
}

/// The innermost loops of `asm` that hold an FMA: the lines between a label
/// and the backward branch to it, with no loop inside.
fn hot_loops(asm: &str) -> Vec<Vec<&str>> {
    let lines: Vec<&str> = asm.lines().map(str::trim).collect();
    let mut labels = std::collections::HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(name) = l.strip_suffix(':') {
            labels.insert(name, i);
        }
    }
    let is_branch = |l: &str| l.starts_with('j') || l.starts_with("b.") || l.starts_with("b\t") || l.starts_with("cb");
    let mut loops = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !is_branch(l) {
            continue;
        }
        let Some(target) = l.split([' ', '\t', ',']).rev().find(|w| w.starts_with(".LBB")) else { continue };
        if let Some(&start) = labels.get(target) {
            if start < i {
                loops.push((start, i));
            }
        }
    }
    let innermost = |&(s, e): &(usize, usize)| !loops.iter().any(|&(s2, e2)| (s2, e2) != (s, e) && s <= s2 && e2 <= e);
    loops
        .iter()
        .filter(|l| innermost(l))
        .map(|&(s, e)| lines[s..=e].to_vec())
        .filter(|body| body.iter().any(|l| is_fma(l)))
        .collect()
}

fn is_fma(line: &str) -> bool {
    line.starts_with("vfmadd") || line.starts_with("vfnmadd") || line.starts_with("fmla")
}

/// A load or store of a vector register at a stack address.
fn is_vector_spill(line: &str) -> bool {
    let x86 = line.contains("(%rsp)") && (line.contains("%ymm") || line.contains("%zmm") || line.contains("%xmm"));
    let aarch64 =
        line.contains("[sp") && (line.starts_with("ldr\tq") || line.starts_with("str\tq") || line.contains("\tq"));
    x86 || aarch64
}

#[test]
fn hot_loops_keep_their_tiles_in_registers_on_every_cpu() {
    let mut failures = Vec::new();
    for (target, full_width) in TARGETS {
        for (label, relay, shape) in LAYERS {
            let asm = assembly(relay, shape, target);
            let loops = hot_loops(&asm);
            if loops.is_empty() {
                failures.push(format!("{target}, {label}: no loop with FMAs found"));
            }
            for body in &loops {
                let spills: Vec<&&str> = body.iter().filter(|l| is_vector_spill(l)).collect();
                if !spills.is_empty() {
                    failures.push(format!(
                        "{target}, {label}: {} stack accesses in a hot loop, e.g. `{}`",
                        spills.len(),
                        spills[0]
                    ));
                }
                let narrow: Vec<&&str> = body.iter().filter(|l| is_fma(l) && !l.contains(full_width)).collect();
                if !narrow.is_empty() {
                    failures.push(format!(
                        "{target}, {label}: {} FMAs narrower than {full_width}, e.g. `{}`",
                        narrow.len(),
                        narrow[0]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// On AVX-512, LLVM vectorized the copies a schedule makes into local
/// buffers (a product's panel of B, a transposed image) with gathers and
/// scatters, one element per lane, after unrolling their short contiguous
/// loop: YOLOv8n's Winograd products held 256 of each and spent half their
/// time copying. The schedule vectorizes those copies itself now; checked
/// on the convolutions' and products' kernels.
#[test]
fn avx512_kernels_copy_without_gathers_or_scatters() {
    let mut failures = Vec::new();
    for (label, relay, shape) in LAYERS {
        // The convolutions and products (transforms and element-wise
        // kernels may gather where their reads are strided).
        let tiled = |k: &kiln::tir::PrimFunc| {
            k.attrs.get("anchor").is_some_and(|a| a == "nn.conv2d" || a.contains("matmul") || a.contains("dense"))
        };
        let asm = assembly_of(relay, shape, "llvm -mcpu=skylake-avx512", &tiled);
        let slow: Vec<&str> =
            asm.lines().map(str::trim).filter(|l| l.starts_with("vgather") || l.starts_with("vscatter")).collect();
        if !slow.is_empty() {
            failures.push(format!("{label}: {} gathers/scatters, e.g. `{}`", slow.len(), slow[0]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// On AVX-512, a row of 14 lanes (a 14 × 14 map's, written back by a packed
/// 1 × 1 projection with a residual add) is read and written as one masked
/// access each — not 8 + 4 + 2 lanes, three accesses joined or split by
/// shuffles; AVX2 has no mask registers and keeps the pieces.
#[test]
fn partial_vector_rows_are_one_masked_access_on_avx512() {
    let relay = "%x: Tensor[(1, 384, 14, 14), float32], %y: Tensor[(1, 64, 14, 14), float32], %w: Tensor[(64, 384, 1, 1), float32]) {
           add(nn.conv2d(%x, %w, channels=64, kernel_size=[1, 1]), %y)";
    let masked = |asm: &str, op: &str| asm.lines().filter(|l| l.contains(op) && l.contains("{%k")).count();
    let avx512 = assembly(relay, &[64, 384, 1, 1], "llvm -mcpu=skylake-avx512");
    // 32 output rows per tile: each residual row read, each output row written once.
    assert!(masked(&avx512, "vmovups") >= 64, "masked row loads and stores:\n{avx512}");
    let avx2 = assembly(relay, &[64, 384, 1, 1], "llvm -mcpu=haswell");
    let avx2_masked = masked(&avx2, "vmovups") + avx2.lines().filter(|l| l.contains("vmaskmov")).count();
    assert_eq!(avx2_masked, 0, "no masked accesses on AVX2");
}

/// On AVX-512 a strided row of a pooling that is not a power of two lanes
/// (LeNet's 2 × 2 stride-2 max pooling: 14 outputs from 27 inputs) is one
/// whole load, one masked load and a two-input permute — not two overlapping
/// 14-lane loads legalized as 8 + 4 + 2 lanes and joined by inserts (LeNet's
/// first pooling 0.73× the time on Zen 5).
#[test]
fn strided_partial_rows_are_whole_and_masked_loads_on_avx512() {
    let relay = "%x: Tensor[(1, 6, 28, 28), float32], %w: Tensor[(1, 6, 28, 28), float32]) {
           nn.max_pool2d(add(%x, %w), pool_size=[2, 2], strides=[2, 2])";
    let avx512 = assembly(relay, &[1, 6, 28, 28], "llvm -mcpu=skylake-avx512");
    let count = |op: &str| avx512.lines().filter(|l| l.contains(op)).count();
    let masked_loads = avx512.lines().filter(|l| l.contains("vmovups") && l.contains("{z}")).count();
    assert!(masked_loads > 0 && count("vpermt2ps") > 0, "masked loads and permutes:\n{avx512}");
    assert_eq!(count("vinsertf128") + count("vinsertf64x4"), 0, "no pieces joined by inserts:\n{avx512}");
}

/// On an Intel AVX-512 CPU a Winograd input transform reads each tile
/// position of a vector of 16 tiles with a gather (`vgatherdps`, 32-bit
/// indices) — not lane by lane, 16 scalar loads and as many `vinsertps` per
/// position, which took ResNet-18's and YOLOv8n's transforms 13–43 % longer
/// on Sapphire Rapids; AVX2 keeps the lane loads (not measured there), and
/// so do AVX-512 CPUs without fast gathers — a CPU LLVM does not name
/// (Zen 5 under LLVM 14: lane loads 0.83–0.89× the time of gathers). Those
/// read each row of a tile's positions per tile and transpose the rows
/// (`row_gather.rs`): shuffles, not an insert per element.
#[test]
fn winograd_input_transforms_gather_their_tiles_on_avx512() {
    let (_, relay, shape) = LAYERS[0];
    let transform =
        |k: &kiln::tir::PrimFunc| k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_input_transform");
    let count = |asm: &str, op: &str| asm.lines().filter(|l| l.trim().starts_with(op)).count();
    let avx512 = assembly_of(relay, shape, "llvm -mcpu=skylake-avx512", &transform);
    // F(4 × 4): 36 positions per vector of tiles (LLVM may split one into
    // two `vgatherqps` where it cannot narrow the indices).
    assert!(count(&avx512, "vgather") >= 36, "a gather per tile position:\n{avx512}");
    assert!(count(&avx512, "vinsertps") < 36, "no lane-by-lane tiles:\n{avx512}");
    let avx2 = assembly_of(relay, shape, "llvm -mcpu=haswell", &transform);
    assert_eq!(count(&avx2, "vgather"), 0, "lane loads on AVX2:\n{avx2}");
    // (LLVM's own vectorizers may still form a few gathers from the lane
    // loads of the tile buffer — 8 in a debug build of kiln, none in a
    // release one, the same LLVM — but not one per tile position.)
    let unnamed = "llvm -mcpu=x86-64-v4";
    let amd = assembly_of(relay, shape, unnamed, &transform);
    assert!(count(&amd, "vgather") < 36, "lane loads on an AVX-512 CPU without fast gathers:\n{amd}");
    for (cpu, asm) in [("x86-64-v4", &amd), ("haswell", &avx2)] {
        assert!(count(asm, "vinsertps") < 36, "{cpu}: rows, not an insert per element:\n{asm}");
    }
    assert!(count(&amd, "vpermt2ps") >= 36, "transposed rows on AVX-512:\n{amd}");
}

/// An integer nearest upsampling (`nn.upsampling`, what ONNX's 2× Resize
/// imports as) reads each output row's input as one contiguous span and a
/// shuffle repeating its elements (`constant_offsets_load`) — on AVX-512 and
/// AVX2, on rows that whole vectors do not divide (40) — not an element per
/// lane (YOLOv8n's two upsampling kernels 0.27× the time on Zen 5).
#[test]
fn upsampled_rows_are_spans_and_shuffles() {
    let relay = "%x: Tensor[(1, 4, 20, 20), float32], %w: Tensor[(1), float32]) {
           add(nn.upsampling(%x, scale_h=2f, scale_w=2f), %w)";
    for cpu in ["x86-64-v4", "haswell"] {
        let asm = assembly(relay, &[1], &format!("llvm -mcpu={cpu}"));
        let count = |op: &str| asm.lines().filter(|l| l.trim().starts_with(op)).count();
        assert_eq!(count("vinsertps") + count("vpinsrd"), 0, "{cpu}: no element per lane:\n{asm}");
        assert!(count("vperm") > 0, "{cpu}: repeated by a shuffle:\n{asm}");
    }
}

/// A packed tile written back along 16 columns (YOLOv8n's stem: 3 → 16
/// channels, stride 2, a SiLU epilogue computed on whole column vectors) is
/// transposed in `log2 16` rounds of two-input interleaves on AVX-512 — 64
/// shuffles per 16 × 16 tile (on AVX2, 8 × 8 in three) — not column by column, which LLVM built with
/// ~14 inserts and shuffles each (242 in this kernel, as many cycles of port
/// 5 as its multiply-adds; the stem 0.70× the time with the transpose).
#[test]
fn column_tiles_are_transposed_in_rounds_of_interleaves() {
    let relay = "%x: Tensor[(1, 3, 8, 320), float32], %w: Tensor[(16, 3, 3, 3), float32]) {
           %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
           multiply(%0, sigmoid(%0))";
    let packed = |k: &kiln::tir::PrimFunc| k.attrs.contains_key("conv2d.weight_block");
    // Shuffles of f32 data: the stem's prefetch addresses (its input rows
    // ahead, 64-bit integers that LLVM computes a few rows at a time in
    // vectors: `vblendvpd`, `vextracti128`) are not the tile's.
    let shuffles = |asm: &str| {
        let ops = ["vperm", "vshuf", "vunpck", "vinsert", "vextract", "vblend", "vmovlhps", "vmovhlps"];
        asm.lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|op| ops.iter().any(|o| op.starts_with(o)) && !op.ends_with("pd") && !op.ends_with("i128"))
            .count()
    };
    let avx512 = assembly_of(relay, &[16, 3, 3, 3], "llvm -mcpu=skylake-avx512", &packed);
    // A 160-wide output row: ten 16 × 16 tiles, one loop body; ~5 shuffles
    // a column at most (~14 lane by lane).
    let n = shuffles(&avx512);
    assert!(n <= 80, "{n} shuffles for a 16 × 16 tile:\n{avx512}");
    // On AVX2 the tile is 8 columns of two 8-lane channel vectors: two 8 × 8
    // transposes in three rounds (72 instructions; 97 lane by lane).
    let avx2 = assembly_of(relay, &[16, 3, 3, 3], "llvm -mcpu=haswell", &packed);
    let n = shuffles(&avx2);
    assert!(n <= 80, "{n} shuffles for two 8 × 8 tiles:\n{avx2}");
    // Seven columns (MobileNetV2's 576 → 96 on 14 × 14: 7 pixels × 48
    // channels a tile) pad to eight, the rounds as `vpermi2var`.
    let relay = "%x: Tensor[(1, 576, 14, 14), float32], %w: Tensor[(96, 576, 1, 1), float32]) {
           nn.conv2d(%x, %w, channels=96, kernel_size=[1, 1])";
    let avx512 = assembly_of(relay, &[96, 576, 1, 1], "llvm -mcpu=skylake-avx512", &packed);
    let n = shuffles(&avx512);
    assert!(n <= 150, "{n} shuffles for a 7 × 48 tile:\n{avx512}");
}

/// A Winograd convolution's output over rows of whole tiles (24 × 24, 4 × 4
/// tiles, a residual add and ReLU) is written back as one vector per column
/// of the tiles, and the LLVM backend interleaves the four into contiguous
/// row stores — and reads the residual as contiguous loads split by shuffles
/// — with no element stored or loaded one lane at a time (the default
/// schedule stored each output element from a computed position: ResNet-18's
/// kernels 0.30–0.62× the time so).
#[test]
fn winograd_rows_of_whole_tiles_are_stored_whole() {
    let relay = "%x: Tensor[(1, 64, 24, 24), float32], %w: Tensor[(64, 64, 3, 3), float32]) {
           nn.relu(add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]), %x))";
    let output =
        |k: &kiln::tir::PrimFunc| k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_tiles_to_nchw");
    for cpu in ["x86-64-v4", "haswell"] {
        let asm = assembly_of(relay, &[64, 64, 3, 3], &format!("llvm -mcpu={cpu}"), &output);
        let lane_by_lane = asm
            .lines()
            .map(str::trim)
            .filter(|l| ["vmovss", "vextractps", "vpextrd", "vinsertps", "vpinsrd"].iter().any(|op| l.starts_with(op)))
            .count();
        assert_eq!(lane_by_lane, 0, "{cpu}: no element moved alone:\n{asm}");
        let vector_stores = asm
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("vmovups"))
            .filter(|operands| operands.trim().starts_with('%') && operands.contains('('))
            .count();
        assert!(vector_stores > 0, "{cpu}: rows stored as vectors:\n{asm}");
    }
}

/// A Winograd output with a SiLU (and a residual add) on rows of whole
/// tiles that do not fill the unit's vectors (a 40 × 40 map: ten 4 × 4
/// tiles a row, each column of the tiles a 10-lane vector) computes the
/// sigmoid on the row's run once it is interleaved — three 16-lane pieces
/// of the 40 elements, not four 10-lane vectors (one `vscalefps` each) —
/// and reads the residual as the contiguous run (AVX-512, YOLOv8n's SiLU
/// write-backs 0.45–0.86× the time).
#[test]
fn winograd_silu_rows_are_computed_on_the_interleaved_run() {
    let relay = "%x: Tensor[(1, 32, 40, 40), float32], %w: Tensor[(32, 32, 3, 3), float32]) {
           %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
           add(multiply(%0, sigmoid(%0)), %x)";
    let output =
        |k: &kiln::tir::PrimFunc| k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_tiles_to_nchw");
    let asm = assembly_of(relay, &[32, 32, 3, 3], "llvm -mcpu=x86-64-v4", &output);
    let count = |op: &str| asm.lines().map(str::trim).filter(|l| l.starts_with(op)).count();
    assert_eq!(count("vscalefps"), 3, "one exponential per 16 elements of a 40-element row:\n{asm}");
    assert_eq!(count("vdivps"), 3, "one quotient per 16 elements of a row:\n{asm}");
}

/// A separable max pooling over windows of several rows on rows of at most
/// a vector (YOLOv8n's SPPF: 5 × 5, stride 1, on 10 × 10) keeps each row of
/// vertical maxima — its `-inf` borders and the row, stored in three pieces
/// and read at the window's five column offsets — in a register
/// (`codegen/llvm/register_buffer.rs`), not on the stack, where every read
/// spanned several stores that cannot forward to it (0.60× the time).
#[test]
fn pooling_rows_of_a_vector_stay_in_registers() {
    let relay = "%x: Tensor[(1, 8, 10, 10), float32], %w: Tensor[(1), float32]) {
           add(nn.max_pool2d(%x, pool_size=[5, 5], padding=[2, 2, 2, 2]), %w)";
    let asm = assembly(relay, &[1], "llvm -mcpu=x86-64-v4");
    let stack_vectors = asm
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with('v')
                && l.contains("(%rsp)")
                && (l.contains("%xmm") || l.contains("%ymm") || l.contains("%zmm"))
        })
        .count();
    assert_eq!(stack_vectors, 0, "no row of maxima through the stack:\n{asm}");
    assert!(asm.lines().any(|l| l.trim().starts_with("vmaxps")), "vector maxima:\n{asm}");
}

/// On AVX-512 a stride-1 depthwise convolution whose padded plane fits L1
/// reads its input in place: each input row one masked load (the lanes
/// outside the image — the columns past a 14-wide row — neither read nor
/// stored; the rows above and below, known in the two unrolled row tiles,
/// not loaded) and two permutes with zeros for the window's side columns
/// (`codegen/llvm/grid.rs`; a masked load per window column before), the
/// tile's accumulators whole 16-lane vectors. No padded copy stored per channel
/// and read back at once (a 16-lane load over the several stores of a
/// padded row cannot forward from them), no gathers, no spills; AVX2 keeps
/// the padded image (no masked loads there).
#[test]
fn small_depthwise_planes_are_read_in_place_on_avx512() {
    let relay = "%x: Tensor[(1, 32, 14, 14), float32], %w: Tensor[(32, 1, 3, 3), float32]) {
           clip(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=32), a_min=0f, a_max=6f)";
    let avx512 = assembly(relay, &[32, 1, 3, 3], "llvm -mcpu=skylake-avx512");
    let lines = || avx512.lines().map(str::trim);
    let masked_loads = lines().filter(|l| l.starts_with("vmovups") && l.contains("{z}")).count();
    // (LLVM 19 turns half of the `vpermi2var` shifts into `vexpandps`.)
    let shift_ops = ["vpermt2ps", "vpermi2ps", "vexpandps", "valignd"];
    let shifts = lines().filter(|l| shift_ops.iter().any(|op| l.starts_with(op))).count();
    // Two tiles of seven output rows over the 14 input rows: each row loaded
    // once (not once per window column) and shifted twice.
    assert!((14..=18).contains(&masked_loads), "{masked_loads} masked loads of input rows:\n{avx512}");
    assert!(shifts >= 2 * 14, "{shifts} shifts of the input rows:\n{avx512}");
    let gathers = lines().filter(|l| l.starts_with("vgather") || l.starts_with("vinsertps")).count();
    assert_eq!(gathers, 0, "no lane-by-lane reads:\n{avx512}");
    let full_fmas = lines().filter(|l| is_fma(l) && l.contains("%zmm")).count();
    assert!(full_fmas >= 2 * 63 - 2 * 3, "two unrolled tiles of seven rows, whole-vector FMAs:\n{avx512}");
    // The two tiles' code, interleaved by LLVM, may keep a few values on the
    // stack (measured faster than a loop over the tiles without), not the tiles.
    let stack = lines().filter(|l| is_vector_spill(l)).count();
    assert!(stack * 10 <= full_fmas, "{stack} stack accesses:\n{avx512}");
    let avx2 = assembly(relay, &[32, 1, 3, 3], "llvm -mcpu=haswell");
    assert_eq!(avx2.lines().filter(|l| l.contains("vmaskmov")).count(), 0, "AVX2: the padded image");
    // Stride 2 onto rows of one vector (14 → 7): each window row the masked
    // loads of its span (one where the lanes kept all lie in the first
    // vector) and a permute of their even elements.
    let relay = "%x: Tensor[(1, 32, 14, 14), float32], %w: Tensor[(32, 1, 3, 3), float32]) {
           nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], groups=32)";
    let avx512 = assembly(relay, &[32, 1, 3, 3], "llvm -mcpu=skylake-avx512");
    let lines = || avx512.lines().map(str::trim);
    let masked_loads = lines().filter(|l| l.starts_with("vmovups") && l.contains("{z}")).count();
    let permutes = lines().filter(|l| l.starts_with("vpermt2ps") || l.starts_with("vpermi2ps")).count();
    assert!(masked_loads >= 9 && permutes >= 9, "spans and permutes:\n{avx512}");
    let gathers = lines().filter(|l| l.starts_with("vgather") || l.starts_with("vinsertps")).count();
    assert_eq!(gathers, 0, "no lane-by-lane reads:\n{avx512}");
}

/// On AVX-512 a depthwise plane of several vectors a row (56 × 56), read in
/// place, reads each input row as its vectors at columns 0, 16, 32 and 48,
/// once for the window's three columns and the tile's output vectors, and
/// shifts two of them for the columns in between (`codegen/llvm/grid.rs`):
/// a 2-row × 4-vector tile over 4 input rows loads about 24 vectors (the
/// shifts in of column −1 and of the columns past the row stay masked loads
/// of their own), where a load per window column took 48.
#[test]
fn wide_depthwise_rows_are_read_once_on_the_grid() {
    let relay = "%x: Tensor[(1, 16, 56, 56), float32], %w: Tensor[(16, 1, 3, 3), float32]) {
           clip(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=16), a_min=0f, a_max=6f)";
    let avx512 = assembly(relay, &[16, 1, 3, 3], "llvm -mcpu=skylake-avx512");
    let lines = || avx512.lines().map(str::trim);
    let input_loads = lines()
        .filter(|l| (l.starts_with("vmovups") || l.starts_with("vmovdqu")) && l.contains("%zmm") && l.contains("),"))
        .filter(|l| !l.contains("rsp") && !l.contains("rip"))
        .count();
    let fmas = lines().filter(|l| is_fma(l) && l.contains("%zmm")).count();
    assert!(fmas >= 72, "a tile of 8 output vectors, 9 taps each:\n{avx512}");
    assert!(input_loads * 2 <= fmas, "{input_loads} input loads for {fmas} FMAs:\n{avx512}");
    let shifts = lines().filter(|l| ["vpermt2ps", "vpermi2ps", "valignd"].iter().any(|s| l.starts_with(s))).count();
    assert!(shifts >= 12, "window columns as shifts of the row's vectors:\n{avx512}");
    let stack = lines().filter(|l| is_vector_spill(l)).count();
    assert!(stack * 10 <= fmas, "{stack} stack accesses:\n{avx512}");
}

/// A stride-2 depthwise row wider than a vector (MobileNetV2's 112 → 56)
/// takes three permutes per window row and output vector: the even and the
/// odd lanes of two grid vectors, and for the window's left column the odd
/// lanes again with one lane of the vector before in front — the odd lanes
/// shared with the right column (`codegen/llvm/grid.rs`). The even lanes of
/// two shifted windows took four or five (51 permutes to 36 FMAs a row).
#[test]
fn stride_two_depthwise_rows_take_three_permutes_per_window_row() {
    let relay = "%x: Tensor[(1, 16, 112, 112), float32], %w: Tensor[(16, 1, 3, 3), float32]) {
           clip(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], groups=16), a_min=0f, a_max=6f)";
    let avx512 = assembly(relay, &[16, 1, 3, 3], "llvm -mcpu=skylake-avx512");
    let permutes = ["vpermt2ps", "vpermi2ps", "vpermps", "valignd", "vexpandps"];
    let loops = hot_loops(&avx512);
    assert!(!loops.is_empty(), "no loop with FMAs:\n{avx512}");
    for body in loops {
        let fmas = body.iter().filter(|l| is_fma(l) && l.contains("%zmm")).count();
        let shuffles = body.iter().filter(|l| permutes.iter().any(|p| l.starts_with(p))).count();
        assert!(fmas >= 36, "a row of four output vectors, nine taps each:\n{}", body.join("\n"));
        assert!(shuffles <= fmas, "{shuffles} permutes for {fmas} FMAs:\n{}", body.join("\n"));
    }
}
