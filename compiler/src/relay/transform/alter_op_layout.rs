//! AlterOpLayout: weights known at build time get the layout the kernels read
//! fastest.
//!
//! - `nn.dense(x, W)` and `nn.matmul(x, W)` (either orientation of `W`) with
//!   a constant `W` become `nn.contrib_dense_pack(x, P)` (TVM's name), `P`
//!   the weight in column panels `[units / b, in, b]`: the matmul schedule's
//!   register tile covers `b` columns, which are then contiguous for every
//!   reduction step and panel after panel in memory — one sequential stream
//!   per tile instead of rows a matrix width apart (which defeats the
//!   prefetcher; the classifier of MobileNetV2 streamed its 5 MB at 9 GB/s),
//!   and no panel copy at run time. Columns that would take a one-vector
//!   tile (GPT's 1000-token head on AVX2: 4 × 8) or no whole-vector tile
//!   (1000 columns on AVX-512) are zero-padded to whole panels of a
//!   wider one (`units` then stops short of the last panel; the product
//!   computes whole tiles and writes back the real columns). Where no
//!   whole-vector panel fits, `nn.matmul(x, transpose(W))` keeps the
//!   columns contiguous.
//! - `nn.conv2d` with a constant OIHW weight becomes `OIHW<lanes>o` — or,
//!   for a 3 × 3 stride-1 convolution where [`winograd_tile`] picks it, a
//!   Winograd F(m × m, 3 × 3) convolution: the weight transformed at build
//!   time, input and output transforms around a `nn.batch_matmul` over the
//!   α² tile positions (`kiln_ir::relay::op::winograd_matrices`). The
//!   configuration key `relay.AlterOpLayout.winograd=false` keeps every
//!   convolution direct.
//!
//! FoldConstant then turns the reshapes and transposes into the packed constant.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, Call, ExprId, ExprKind, ExprMutator, Store};

use kiln_ir::relay::op::WinogradTiles;

use crate::schedule::{matmul_tile, packed_product_rows, pointwise_over_pixels};
use crate::target::VectorUnit;

struct Alter {
    unit: VectorUnit,
    winograd: bool,
}

impl ExprMutator for Alter {
    fn rewrite_call(&mut self, store: &mut Store, pre: ExprId, post: ExprId) -> ExprId {
        let Some(name) = store.op_name(post) else { return post };
        let Some(call) = store.as_call(post).cloned() else { return post };
        if name == "nn.conv2d" {
            return self
                .winograd
                .then(|| winograd_conv2d(store, pre, post, &call, self.unit))
                .flatten()
                .or_else(|| {
                    if pixels_as_lanes(store, pre, self.unit) {
                        None
                    } else {
                        pack_conv2d_weight(store, post, &call, self.unit.f32_lanes)
                    }
                })
                .unwrap_or(post);
        }
        let transposed_weight = match name {
            "nn.dense" => true,
            "nn.matmul" if !call.attrs.bool("transpose_a").unwrap_or(true) => {
                call.attrs.bool("transpose_b").unwrap_or(false)
            }
            _ => return post,
        };
        let [_, w] = call.args[..] else { return post };
        if !matches!(store.kind(w), ExprKind::Constant(_)) {
            return post;
        }
        pack_dense_weight(store, pre, post, &call, transposed_weight, self.unit)
            .or_else(|| transpose_dense_weight(store, post, &call, transposed_weight))
            .unwrap_or(post)
    }
}

/// A product narrower than one wide panel is padded to it only where the
/// padding adds at most `1 / PANEL_PADDING_DIVISOR` of its columns.
const PANEL_PADDING_DIVISOR: usize = 7;

/// The weight bytes from which a one-row product splits its one panel in two
/// (see `pack_dense_weight`): past L1 (48 KiB on Zen 5), where the product
/// is bound by the L2's bandwidth, not the FMAs.
const GEMV_HALVES_BYTES: usize = 128 * 1024;

/// `nn.contrib_dense_pack(x, panels(W))`, where the matmul tile for `x`'s
/// rows spans whole vectors (see the module docs).
fn pack_dense_weight(
    store: &mut Store,
    pre: ExprId,
    post: ExprId,
    call: &Call,
    transposed: bool,
    unit: VectorUnit,
) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let shape = store.constant_data(*c).shape().to_vec();
    // The rows of one product (the schedule's `i` loop): the data's
    // second-to-last axis, read from the call's type before the rewrite.
    let pre_x = *store.as_call(pre)?.args.first()?;
    let x_shape = store.checked_type(pre_x)?.as_tensor()?.shape.clone();
    let rows = if x_shape.len() >= 2 { x_shape[x_shape.len() - 2] } else { 1 };
    let [a, b] = shape[..] else { return None };
    let (k, n) = if transposed { (b, a) } else { (a, b) };
    let (mi, panel) = matmul_tile(rows as i64, n as i64, unit);
    let mut panel = panel as usize;
    // Columns that admit only a one-vector tile (GPT's 1000-token head on
    // AVX2: 4 × 8, four accumulators) or no whole-vector tile at all (1000
    // columns on AVX-512: a 10-column tile, 2.8 GFLOP/s in MobileNetV2's
    // classifier) get zero-padded to whole panels of a wider tile; the
    // product computes whole tiles and writes back the real columns.
    let lanes = unit.f32_lanes;
    let padded = n.next_multiple_of(2 * lanes);
    let (_, wide) = matmul_tile(rows as i64, padded as i64, unit);
    let wide = wide as usize;
    // (Fewer columns than one wide panel stay as they were where padding
    // would add more than a seventh — a 10-class head's 10 → 32 — but not
    // LeNet's 400 → 120, 128 columns: its product as a 120-column matmul
    // took 3.4 µs of the model's 10.)
    let pads_little = (padded - n) * PANEL_PADDING_DIVISOR <= n;
    let narrow = (mi == 4 && panel == lanes) || (panel % lanes != 0 && (n > wide || pads_little));
    if narrow && wide > panel && padded - n < wide {
        panel = wide;
    }
    // A single row whose weights are one panel of at least four vectors
    // and too large for L1 takes two panels: the product then streams from
    // both cores' L2 caches at two threads, a panel each (the MLP's 784 →
    // 128 at two threads 2.0 → 1.2 µs on Zen 5; at one thread each panel's
    // sum runs in two partial tiles, `split_accumulation`, as fast as one).
    if rows == 1 && panel >= n && panel >= 4 * lanes && (panel / 2) % lanes == 0 && k * panel * 4 >= GEMV_HALVES_BYTES {
        panel /= 2;
    }
    let columns = n.next_multiple_of(panel);
    if panel % lanes != 0 || columns - n >= panel {
        return None;
    }
    let span = store.span(post).clone();
    let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&d| d as i64).collect());
    // Zero columns up to whole panels: `W` [N, K] gets `columns - N` more
    // rows, `W` [K, N] more columns (a new constant; FoldConstant packs it).
    let w = if columns > n {
        let data = store.constant_data(*c);
        let v = data.to_f64_vec();
        let (r1, c1) = if transposed { (columns, k) } else { (k, columns) };
        let mut out = vec![0.0; r1 * c1];
        for (i, row) in v.chunks(b).enumerate() {
            out[i * c1..i * c1 + b].copy_from_slice(row);
        }
        store.constant(kiln_ir::Tensor::from_f64(data.dtype(), vec![r1, c1], &out))
    } else {
        w
    };
    // [N, K] → [N/b, b, K] → [N/b, K, b]; [K, N] → [K, N/b, b] → [N/b, K, b].
    let (split, axes) = if transposed {
        (ints(&[columns / panel, panel, k]), [0, 2, 1])
    } else {
        (ints(&[k, columns / panel, panel]), [1, 0, 2])
    };
    let r = store.call_op_at("reshape", vec![w], Attrs::from_pairs([("newshape", split)]), span.clone()).ok()?;
    let packed =
        store.call_op_at("transpose", vec![r], Attrs::from_pairs([("axes", ints(&axes))]), span.clone()).ok()?;
    let attrs = Attrs::from_pairs([
        ("units", AttrValue::Int(n as i64)),
        ("weight_layout", AttrValue::Str(format!("NC{panel}n"))),
    ]);
    store.call_op_at("nn.contrib_dense_pack", vec![x, packed], attrs, span).ok()
}

/// `nn.matmul(x, transpose(W))` for a `W` stored `[units, in]`: the matmul
/// schedule vectorizes over the output columns, contiguous after this.
fn transpose_dense_weight(store: &mut Store, post: ExprId, call: &Call, transposed: bool) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    if !transposed {
        return None;
    }
    let span = store.span(post).clone();
    let wt = store
        .call_op_at("transpose", vec![w], Attrs::from_pairs([("axes", AttrValue::Ints(vec![1, 0]))]), span.clone())
        .ok()?;
    let mut attrs = vec![("transpose_a", AttrValue::Bool(false)), ("transpose_b", AttrValue::Bool(false))];
    if let Ok(Some(units)) = call.attrs.opt_int("units") {
        attrs.push(("units", AttrValue::Int(units)));
    }
    store.call_op_at("nn.matmul", vec![x, wt], Attrs::from_pairs(attrs), span).ok()
}

/// The shortest reduction per output (I·KH·KW) whose convolution is packed:
/// MobileNetV2's 3 × 3 × 3 stem (27: 480–640 -> 416–421 µs, interleaved A/B
/// on Zen 3), LeNet's 6 × 5 × 5 and ResNet's 3 × 7 × 7 stem are packed; 1 × 1
/// layers of 16 or 24 channels are not.
const MIN_PACKED_REDUCTION: usize = 27;

/// Packs a constant OIHW weight into `OIHW<block>o`: `block` output channels
/// (one vector of the target) contiguous.
fn pack_conv2d_weight(store: &mut Store, post: ExprId, call: &Call, block: usize) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let shape = store.constant_data(*c).shape().to_vec();
    let layout = call.attrs.str("kernel_layout").ok()?;
    // A short reduction per output (an image's 3 channels × 3 × 3) does not
    // pay for the channel-major write-back: such layers keep OIHW. Few input
    // channels over a large window (LeNet's 6 × 5 × 5, ResNet's 3 × 7 × 7
    // stem) do pay, and rows of 10 or 28 columns fit no whole vector.
    if layout != "OIHW"
        || call.attrs.int("groups").ok()? != 1
        || shape.len() != 4
        || shape[0] % block != 0
        || shape[1] * shape[2] * shape[3] < MIN_PACKED_REDUCTION
    {
        return None;
    }
    let span = store.span(post).clone();
    let k = block as i64;
    let split: Vec<i64> = vec![shape[0] as i64 / k, k, shape[1] as i64, shape[2] as i64, shape[3] as i64];
    let r = store
        .call_op_at("reshape", vec![w], Attrs::from_pairs([("newshape", AttrValue::Ints(split))]), span.clone())
        .ok()?;
    let axes = AttrValue::Ints(vec![0, 2, 3, 4, 1]);
    let packed = store.call_op_at("transpose", vec![r], Attrs::from_pairs([("axes", axes)]), span.clone()).ok()?;
    let mut attrs = call.attrs.clone();
    attrs.set("kernel_layout", AttrValue::Str(format!("OIHW{block}o")));
    store.call_op_at("nn.conv2d", vec![x, packed], attrs, span).ok()
}

/// Whether a convolution stays OIHW for the schedule's pixel-vectorized
/// pointwise strategy: a pointwise convolution
/// ([`crate::topi::is_pointwise_conv2d`]) whose map passes
/// [`crate::schedule::pointwise_over_pixels`] (whole vectors of pixels, or on
/// a 16-lane target an expansion over whole vectors but one). Its lanes are
/// then pixels, contiguous in the input and in the NCHW output; packed
/// (`OIHW<k>o`), the lanes are output channels a plane apart, and with
/// MobileNetV2's short reductions (16 to 32 input channels) scattering them
/// cost as much as the multiply-adds on AVX-512. Maps of 7 × 7 and
/// projections on 14 × 14 stay packed.
fn pixels_as_lanes(store: &Store, pre: ExprId, unit: VectorUnit) -> bool {
    let Some(call) = store.as_call(pre) else { return false };
    let shape = |e: ExprId| store.checked_type(e).and_then(|t| t.as_tensor().map(|t| t.shape.clone()));
    let (Some(out), Some(weight)) = (shape(pre), call.args.get(1).and_then(|&w| shape(w))) else { return false };
    let pixels = out.iter().skip(2).product::<usize>();
    crate::topi::is_pointwise_conv2d(store, call)
        && weight.len() == 4
        && pointwise_over_pixels(pixels, weight[1], weight[0], unit)
}

/// The fewest input and output channels of a Winograd convolution: the
/// transforms cost per channel, the product saves per channel pair. Single
/// 3 × 3 layers on AVX2 Zen 3 (min of interleaved runs, Winograd / direct):
/// 0.50–0.56 with 64–256 channels on 14–56-wide maps, 0.78 at 512 × 7 × 7,
/// 0.63–0.72 with 32, 1.03 with 16.
const WINOGRAD_MIN_CHANNELS: usize = 32;

/// The most bytes of transformed weights (α²·K·C floats) a Winograd
/// convolution may stream per call: ResNet-18's last stage at m = 2 (16.8 MB)
/// still wins over its direct convolution, which reads 9.4 MB, on AVX2 (Zen 3)...
const WINOGRAD_MAX_WEIGHT_BYTES: usize = 20 << 20;
/// ...but not on AVX-512 (Sapphire Rapids, 2 MB L2 per core), where the
/// direct convolution keeps its weights stationary over the 7 × 7 map at
/// ~110 GFLOP/s and the product, one 16-tile vector of columns per weight,
/// streamed its 16.8 MB at 55 GFLOP/s (2.4 ms against ORT's 1.9 ms per
/// layer). The 14 × 14 stage's F(4 × 4) weights (9.4 MB) still win there.
const WINOGRAD_MAX_WEIGHT_BYTES_16_LANES: usize = 12 << 20;

/// The tile count of a Winograd product is padded to a multiple of this: the
/// product's column tile, two vectors on AVX2 and one on AVX-512 (whose
/// product tile takes 8 rows to keep 8 accumulators). Padding to two AVX-512
/// vectors made ResNet-18's 14 × 14 stage take F(2 × 2) with 64 tiles
/// instead of F(4 × 4) with 16, and its 7 × 7 stage no Winograd at all.
const WINOGRAD_TILE_BLOCK: usize = 16;

/// The Winograd output tile `m` (4 or 2) and the tile count padded to whole
/// product columns, for a 3 × 3 stride-1 convolution of `c` → `k` channels
/// onto `n` maps of `oh` × `ow` — or `None` where the direct convolution is
/// the better choice. The rule: the product must do at most 0.6× the direct
/// convolution's multiply-adds (α²·tiles vs 9·OH·OW, the tile count rounded
/// up to `WINOGRAD_TILE_BLOCK`, the product tile's columns), with at least
/// `WINOGRAD_MIN_CHANNELS` each way, and transformed weights of at most
/// `WINOGRAD_MAX_WEIGHT_BYTES` (`WINOGRAD_MAX_WEIGHT_BYTES_16_LANES` on AVX-512);
/// the larger tile first (fewer products). Targets of 8 or more lanes (AVX2,
/// AVX-512); narrower ones keep direct convolutions.
///
/// `integral`: the weights are integers (a quantized product's, which must
/// come out exact): only F(2 × 2, 3 × 3), whose transforms keep integers
/// integers (quarters in the transformed weights), so that the products sum
/// exactly in float32 while the sums stay below 2²²; F(4 × 4)'s sixths and
/// twenty-fourths would round.
pub fn winograd_tile(
    n: usize,
    c: usize,
    k: usize,
    oh: usize,
    ow: usize,
    unit: VectorUnit,
    integral: bool,
) -> Option<(usize, usize)> {
    if unit.f32_lanes < 8 || c < WINOGRAD_MIN_CHANNELS || k < WINOGRAD_MIN_CHANNELS {
        return None;
    }
    let block = WINOGRAD_TILE_BLOCK.max(unit.f32_lanes);
    let tiles: &[usize] = if integral { &[2] } else { &[4, 2] };
    tiles.iter().copied().find_map(|m| {
        let alpha = m + 2;
        let tiles = WinogradTiles::new(n, oh, ow, m).ok()?.count.next_multiple_of(block);
        let cheaper = 10 * alpha * alpha * tiles <= 6 * 9 * n * oh * ow;
        let weights = alpha * alpha * k * c * 4;
        let max_weights =
            if unit.f32_lanes >= 16 { WINOGRAD_MAX_WEIGHT_BYTES_16_LANES } else { WINOGRAD_MAX_WEIGHT_BYTES };
        (cheaper && weights <= max_weights).then_some((m, tiles))
    })
}

/// A 3 × 3 stride-1 `nn.conv2d` with a constant OIHW weight as a Winograd
/// convolution, where [`winograd_tile`] picks one (see the module docs).
fn winograd_conv2d(store: &mut Store, pre: ExprId, post: ExprId, call: &Call, unit: VectorUnit) -> Option<ExprId> {
    let [x, w] = call.args[..] else { return None };
    let ExprKind::Constant(c) = store.kind(w) else { return None };
    let wshape = store.constant_data(*c).shape().to_vec();
    let a = &call.attrs;
    let ones = |name: &str| a.ints(name).is_ok_and(|v| v.iter().all(|&s| s == 1));
    if a.str("kernel_layout").ok()? != "OIHW"
        || a.str("data_layout").ok()? != "NCHW"
        || a.int("groups").ok()? != 1
        || !ones("strides")
        || !ones("dilation")
        || wshape.len() != 4
        || wshape[2..] != [3, 3]
    {
        return None;
    }
    let pre_call = store.as_call(pre)?;
    let x_ty = store.checked_type(*pre_call.args.first()?)?.as_tensor()?.clone();
    let out_ty = store.checked_type(pre)?.as_tensor()?.clone();
    if x_ty.dtype != kiln_ir::DataType::F32 || x_ty.shape.len() != 4 || out_ty.shape.len() != 4 {
        return None;
    }
    let padding = crate::topi::expand_ints(a, "padding", 4).ok()?;
    let (k, ch) = (wshape[0], wshape[1]);
    let [n, _, oh, ow] = out_ty.shape[..] else { return None };
    let weight = store.constant_data(*c);
    let integral = weight.dtype() == kiln_ir::DataType::F32
        && weight.bytes().chunks_exact(4).all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).fract() == 0.0);
    let (m, tiles) = winograd_tile(n, ch, k, oh, ow, unit, integral)?;
    let alpha = (m + 2) as i64;
    let span = store.span(post).clone();
    let mut call = |op: &str, args: Vec<ExprId>, attrs: Vec<(&str, AttrValue)>| {
        store.call_op_at(op, args, Attrs::from_pairs(attrs), span.clone()).ok()
    };
    let (int, no) = (AttrValue::Int, AttrValue::Bool(false));
    let tile = ("tile_size", int(m as i64));
    let input_attrs = vec![tile.clone(), ("padding", AttrValue::Ints(padding)), ("tiles", int(tiles as i64))];
    let v = call("nn.contrib_winograd_input_transform", vec![x], input_attrs)?;
    let products = match packed_product_rows(k as i64, tiles as i64, unit) {
        // The weights in panels of the product's tile rows (the transform
        // writes them so, zero-padded to whole panels): each tile then reads
        // one sequential stream of them instead of one per row. A product of
        // few tiles streams its weights from memory: ResNet-18's 512 × 512 on
        // 7 × 7 went 59 → 87 GFLOP/s, its 256 × 256 on 14 × 14 50 → 86.
        Some(r) => {
            let packing = vec![tile.clone(), ("panel_rows", int(r))];
            let u = call("nn.contrib_conv2d_winograd_weight_transform", vec![w], packing)?;
            call("nn.contrib_batch_matmul_pack", vec![u, v], vec![("units", int(k as i64))])?
        }
        None => {
            let u = call("nn.contrib_conv2d_winograd_weight_transform", vec![w], vec![tile.clone()])?;
            let shape = AttrValue::Ints(vec![alpha * alpha, k as i64, ch as i64]);
            let u = call("reshape", vec![u], vec![("newshape", shape)])?;
            call("nn.batch_matmul", vec![u, v], vec![("transpose_a", no.clone()), ("transpose_b", no)])?
        }
    };
    let y = call("nn.contrib_winograd_output_transform", vec![products], vec![tile.clone()])?;
    let dims = [("batch", n), ("height", oh), ("width", ow)].map(|(name, d)| (name, int(d as i64)));
    call("nn.contrib_winograd_tiles_to_nchw", vec![y], [&[tile][..], &dims[..]].concat())
}

/// Rewrite one function; returns the new function handle. `winograd`
/// allows the Winograd rewrite of 3 × 3 convolutions.
pub fn alter_op_layout(store: &mut Store, func: ExprId, unit: VectorUnit, winograd: bool) -> ExprId {
    mutate(store, func, &mut Alter { unit, winograd })
}
