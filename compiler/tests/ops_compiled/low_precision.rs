//! Low-precision convolutions: over bytes as integer kernels (VNNI dot
//! products, AMX tiles, bytes between kernels) and the bf16 precision's
//! bfloat16 AMX tiles — each equal to the interpreter.

use super::{check_compiled_on, check_compiled_with};
use kiln::tir::PrimFunc;

/// Convolutions over bytes (a rounding clipped to 221 integers, a weight of
/// integers in [25, 75] after constant folding) become int8 dot products
/// (`relay.IntegerConv2d.enable`; by default only where the target has
/// VNNI): 3 × 3 windows over 20 channels (padded to 24) and 32 (strided),
/// output channels as lanes, and 1 × 1 windows over 24 channels on an 8 × 8
/// map to 24 (not whole blocks of 16) and over 16 on 56 × 56 to 96 (its
/// pixels swept in chunks of channels), pixels as lanes; with a bias and ReLU epilogue, equal to the
/// interpreter's float arithmetic (the sums are integers below 2²⁴, exact
/// both ways), on LLVM — one `vpdpbusd` per accumulator and channel group
/// where this CPU has VNNI, else the same sums widened — and C, 1 and 2
/// threads. A 1 × 1 window over 32 channels on a 9 × 11 map (32 products
/// per output, channels as lanes) stays a float convolution (see
/// `IntegerConv2d`).
pub(super) fn integer_convolutions_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 20, 9, 11), float32], %y: Tensor[(1, 24, 8, 8), float32], %v: Tensor[(1, 16, 56, 56), float32],
          %w1: Tensor[(32, 20, 3, 3), float32], %b1: Tensor[(32), float32], %w2: Tensor[(48, 32, 3, 3), float32],
          %w3: Tensor[(16, 32, 1, 1), float32], %w4: Tensor[(24, 24, 1, 1), float32], %w5: Tensor[(96, 16, 1, 1), float32]) {
  %0 = clip(round(multiply(%x, 100f)), a_min=-20f, a_max=200f);
  %1 = nn.conv2d(%0, round(multiply(%w1, 50f)), padding=[1, 1, 1, 1]);
  %2 = nn.relu(nn.bias_add(%1, round(%b1)));
  %3 = clip(round(multiply(%2, 0.0001f)), a_min=0f, a_max=255f);
  %4 = nn.conv2d(%3, round(multiply(%w2, 50f)), strides=[2, 2], padding=[1, 1, 1, 1]);
  %5 = nn.conv2d(%3, round(multiply(%w3, 50f)));
  %6 = clip(round(multiply(%y, 100f)), a_min=-100f, a_max=120f);
  %7 = nn.relu(nn.conv2d(%6, round(multiply(%w4, 50f))));
  %8 = clip(round(multiply(%v, 100f)), a_min=-100f, a_max=120f);
  %9 = nn.conv2d(%8, round(multiply(%w5, 50f)));
  (%4, %5, %7, %9)
}
"#;
    let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
    // VNNI tiles: AMX (where the CPU has it) is the next test's.
    let config = [("relay.IntegerConv2d.enable", true), ("relay.IntegerConv2d.amx", false)];
    check_compiled_with(text, &["w1", "b1", "w2", "w3", "w4", "w5"], false, &config, &|kernels, lanes| {
        let printed: Vec<String> = kernels.iter().map(kiln::tir::print_prim_func).collect();
        let int8 = printed.iter().filter(|t| t.contains("nn.contrib_conv2d_u8s8")).count();
        assert_eq!(int8, 4, "four int8 convolutions");
        let dots = printed.iter().filter(|t| t.contains("kiln.dot_u8i8")).count();
        // Dot products on 16-lane tiles (an AVX2 unit's tiles are split by LLVM).
        if lanes == 16 {
            assert_eq!(dots, 4, "dot products in every int8 kernel");
        }
        // The 16 → 96 expansion on 56 × 56 sweeps its pixels in chunks of
        // channels: on 16 lanes tiles of 6 channels × 4 vectors, 16 channel
        // tiles in 4 chunks of 24 channels, 49 pixel tiles in one band.
        let expansion = kernels.iter().find(|k| k.params.last().is_some_and(|b| b.shape()[1] == 96)).expect("96");
        let mut extents = Vec::new();
        expansion.body.visit(&mut |s| match s {
            kiln::tir::Stmt::For(l) if l.kind == kiln::tir::ForKind::Parallel => extents.push(l.extent.clone()),
            _ => {}
        });
        if lanes == 16 {
            assert_eq!(extents, [kiln::tir::Expr::int(4)], "bands × chunks of the int8 expansion");
        }
        if !vnni {
            eprintln!(
                "integer convolutions: this CPU has no AVX-512 VNNI; checked the widened sums instead of vpdpbusd"
            );
        }
    });
}

/// With `relay.ByteActivations.enable` (and int8 convolutions forced on),
/// a quantization of the input (integers in [−20, 200]) read by a padded
/// int8 convolution, and that convolution's requantized output (bytes in
/// [0, 255]) read by a second int8 convolution and by an addition, travel
/// between kernels as uint8 (the padding reads the byte of 0); the outputs
/// equal the interpreter's, on LLVM and C, 1 and 2 threads.
pub(super) fn byte_activations_between_kernels_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 20, 9, 11), float32], %w1: Tensor[(32, 20, 3, 3), float32], %w2: Tensor[(16, 32, 3, 3), float32]) {
  %0 = clip(round(multiply(%x, 100f)), a_min=-20f, a_max=200f);
  %1 = nn.conv2d(%0, round(multiply(%w1, 50f)), padding=[1, 1, 1, 1]);
  %2 = clip(round(multiply(%1, 0.0001f)), a_min=0f, a_max=255f);
  %3 = nn.conv2d(%2, round(multiply(%w2, 50f)), padding=[1, 1, 1, 1]);
  (add(%2, 3f), %3)
}
"#;
    let config = [
        ("relay.IntegerConv2d.enable", true),
        ("relay.IntegerConv2d.amx", false),
        ("relay.ByteActivations.enable", true),
    ];
    check_compiled_with(text, &["w1", "w2"], false, &config, &|kernels, _| {
        let byte_params = kernels.iter().flat_map(|k| &k.params).filter(|b| b.elem() == kiln_ir::DataType::U8).count();
        // Written: the quantized input and the first convolution's output;
        // read: the former by the first convolution, the latter by the second
        // convolution and the addition.
        assert_eq!(byte_params, 5, "byte tensors written and read by kernels");
    });
}

/// Where the target has AMX (`relay.IntegerConv2d.amx`, on by default with
/// `amx-int8`), stride-1 int8 convolutions over whole blocks of 16 output
/// channels and 64 or more products per output run as AMX tile products: a padded 3 × 3 over 20 channels
/// (20 bytes per reduction step) to 32 on a 9 × 11 map (one pixel tile per
/// row), a 1 × 1 over 64 to 16 (one weight tile), a 3 × 3 over 16 to 32 on
/// a 6 × 40 map (two 32-pixel tiles per row, the second past the row's end),
/// and a 3 × 3 over 256 to 256 on 4 × 4 (one band of rows: two channel
/// chunks) — with a bias and ReLU epilogue, equal to the interpreter on
/// LLVM, 1 and 2 threads. Skipped, with the reason, on a CPU (or OS)
/// without AMX.
pub(super) fn amx_convolutions_match_the_interpreter() {
    if kiln_runtime::cpu::has_feature("amx-int8") != Some(true) {
        eprintln!("AMX convolutions: skipped, this CPU (or OS) gives no AMX int8 tiles");
        return;
    }
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 20, 9, 11), float32], %y: Tensor[(1, 64, 9, 11), float32], %z: Tensor[(1, 16, 6, 40), float32],
          %v: Tensor[(1, 256, 4, 4), float32],
          %w1: Tensor[(32, 20, 3, 3), float32], %b1: Tensor[(32), float32], %w2: Tensor[(16, 64, 1, 1), float32],
          %w3: Tensor[(32, 16, 3, 3), float32], %w4: Tensor[(256, 256, 3, 3), float32]) {
  %0 = clip(round(multiply(%x, 100f)), a_min=-20f, a_max=200f);
  %1 = nn.relu(nn.bias_add(nn.conv2d(%0, round(multiply(%w1, 50f)), padding=[1, 1, 1, 1]), round(%b1)));
  %2 = clip(round(multiply(%y, 100f)), a_min=0f, a_max=255f);
  %3 = nn.conv2d(%2, round(multiply(%w2, 50f)));
  %4 = clip(round(multiply(%z, 100f)), a_min=-128f, a_max=127f);
  %5 = nn.conv2d(%4, round(multiply(%w3, 50f)), padding=[1, 1, 1, 1]);
  %6 = clip(round(multiply(%v, 100f)), a_min=-100f, a_max=100f);
  %7 = nn.conv2d(%6, round(multiply(%w4, 50f)), padding=[1, 1, 1, 1]);
  (%1, %3, %5, %7)
}
"#;
    let config = [("relay.IntegerConv2d.enable", true), ("relay.IntegerConv2d.amx", true)];
    // AMX tiles are LLVM intrinsics: no C backend.
    check_compiled_on(text, &["w1", "b1", "w2", "w3", "w4"], false, &config, false, &|kernels: &[PrimFunc], _| {
        let printed: Vec<String> = kernels.iter().map(kiln::tir::print_prim_func).collect();
        let amx = printed.iter().filter(|t| t.contains("kiln.amx_dot_s8u8")).count();
        assert_eq!(amx, 4, "AMX tile products in every int8 kernel");
        // Two 32-pixel tiles per row of 40, each of 2 × 2 C tiles.
        let wide = printed.iter().find(|t| t.contains("[1, 32, 6, 40]")).expect("the 6 × 40 convolution");
        assert!(wide.contains("amx_dot_s8u8(3, 5, 7"), "{wide}");
        // 20-byte reduction steps on 20 channels: A tiles 16 rows × 20 bytes, B tiles 5 rows.
        let short = printed.iter().find(|t| t.contains("[32, 3, 3, 20]")).expect("the 20-channel convolution");
        assert!(short.contains("16, 20, 16, 20, 5, 64"), "{short}");
    });
}

/// The bf16 precision (`relay.Bf16Precision.enable`): convolutions that fit AMX
/// tiles compute bfloat16 products summed in float32 — a padded 3 × 3 over
/// 20 channels to 32 on 18 × 22, a 1 × 1 over 64 to 32 on 28 × 28 — and so
/// do products with a constant weight — 2 × 33 rows (whole row tiles past
/// each block) by 400 features (40-byte steps) to 40 columns (padded to 64),
/// 50 rows by 448 to 48 columns (one B tile); each over the default floor
/// of 2²⁰ multiply-adds — on data and weights that bfloat16
/// holds exactly (eighths and sixteenths), so the products are exact and
/// the sums equal the interpreter's float32 ones within rounding; a strided
/// convolution stays float32. LLVM, 1 and 2 threads. Skipped, with the reason, on a CPU (or OS) without AMX-BF16.
pub(super) fn bf16_convolutions_match_the_interpreter() {
    if kiln_runtime::cpu::has_feature("amx-bf16") != Some(true) {
        eprintln!("bf16 convolutions: skipped, this CPU (or OS) gives no AMX-BF16 tiles");
        return;
    }
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 20, 18, 22), float32], %y: Tensor[(1, 64, 28, 28), float32], %z: Tensor[(2, 33, 400), float32],
          %u: Tensor[(50, 448), float32],
          %w1: Tensor[(32, 20, 3, 3), float32], %w2: Tensor[(32, 64, 1, 1), float32], %w3: Tensor[(16, 20, 3, 3), float32],
          %w4: Tensor[(40, 400), float32], %w5: Tensor[(48, 448), float32]) {
  %0 = divide(round(multiply(%x, 8f)), 8f);
  %1 = nn.relu(nn.conv2d(%0, divide(round(multiply(%w1, 16f)), 16f), padding=[1, 1, 1, 1]));
  %2 = divide(round(multiply(%y, 8f)), 8f);
  %3 = nn.conv2d(%2, divide(round(multiply(%w2, 16f)), 16f));
  %4 = nn.conv2d(%0, %w3, strides=[2, 2], padding=[1, 1, 1, 1]);
  %5 = nn.dense(divide(round(multiply(%z, 8f)), 8f), divide(round(multiply(%w4, 16f)), 16f));
  %6 = nn.relu(nn.dense(divide(round(multiply(%u, 8f)), 8f), divide(round(multiply(%w5, 16f)), 16f)));
  (%1, %3, %4, %5, %6)
}
"#;
    let config = [("relay.Bf16Precision.enable", true)];
    check_compiled_on(text, &["w1", "w2", "w3", "w4", "w5"], false, &config, false, &|kernels: &[PrimFunc], _| {
        let printed: Vec<String> = kernels.iter().map(kiln::tir::print_prim_func).collect();
        let bf16 = printed.iter().filter(|t| t.contains("kiln.amx_dot_bf16")).count();
        assert_eq!(bf16, 4, "bfloat16 tile products in the stride-1 convolutions and the products");
        assert!(printed.iter().any(|t| t.contains("\"anchor\": \"nn.conv2d\"")), "the strided one stays float32");
    });
}
