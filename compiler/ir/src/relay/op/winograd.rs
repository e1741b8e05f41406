//! Winograd convolution F(m × m, 3 × 3) as three operators around a batched
//! matrix product (AlterOpLayout's rewrite of a 3 × 3, stride-1 `nn.conv2d`):
//!
//! ```text
//! U = nn.contrib_conv2d_winograd_weight_transform(W)   [α, α, K, C]  G·g·Gᵀ (folded at build time)
//! V = nn.contrib_winograd_input_transform(x)            [α², C, T]   Bᵀ·d·B per tile
//! M = nn.batch_matmul(reshape(U, [α², K, C]), V)        [α², K, T]
//! Y = nn.contrib_winograd_output_transform(M)           [m², K, T]   Aᵀ·M·A per tile
//! y = nn.contrib_winograd_tiles_to_nchw(Y)              [N, K, OH, OW]
//! ```
//!
//! with α = m + 2 and `T` the `N·⌈OH/m⌉·⌈OW/m⌉` tiles of the output, padded
//! up to whole vector columns of the product (the extra tiles are zero).
//! The matrices are Lavin and Gray's (points 0, ±1 for m = 2; 0, ±1, ±2
//! for m = 4). Every tensor between the transforms keeps the tiles
//! innermost, so that the transforms run on vectors of tiles. The weight
//! transform is TVM's operator of the same name; the others are kiln's (TVM
//! keeps them inside one `contrib_conv2d_winograd_without_weight_transform`
//! compute).

use super::nn::{ints_n, window_out};
use super::util::{float_dtype, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrSpec, Attrs};
use crate::dtype::DataType;
use crate::relay::ty::{check_size, Type};
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// The transform matrices of F(m × m, 3 × 3), row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct WinogradMatrices {
    /// Output tile size m.
    pub m: usize,
    /// Input tile size α = m + 2.
    pub alpha: usize,
    /// Aᵀ: m × α (output transform).
    pub at: Vec<Vec<f64>>,
    /// G: α × 3 (weight transform).
    pub g: Vec<Vec<f64>>,
    /// Bᵀ: α × α (input transform).
    pub bt: Vec<Vec<f64>>,
}

/// The matrices for output tile `m` (2 or 4), or why there are none.
pub fn winograd_matrices(m: i64) -> Result<WinogradMatrices, OpError> {
    let rows = |r: &[&[f64]]| r.iter().map(|row| row.to_vec()).collect::<Vec<_>>();
    match m {
        2 => Ok(WinogradMatrices {
            m: 2,
            alpha: 4,
            at: rows(&[&[1., 1., 1., 0.], &[0., 1., -1., -1.]]),
            g: rows(&[&[1., 0., 0.], &[0.5, 0.5, 0.5], &[0.5, -0.5, 0.5], &[0., 0., 1.]]),
            bt: rows(&[&[1., 0., -1., 0.], &[0., 1., 1., 0.], &[0., -1., 1., 0.], &[0., 1., 0., -1.]]),
        }),
        4 => Ok(WinogradMatrices {
            m: 4,
            alpha: 6,
            at: rows(&[
                &[1., 1., 1., 1., 1., 0.],
                &[0., 1., -1., 2., -2., 0.],
                &[0., 1., 1., 4., 4., 0.],
                &[0., 1., -1., 8., -8., 1.],
            ]),
            g: rows(&[
                &[1. / 4., 0., 0.],
                &[-1. / 6., -1. / 6., -1. / 6.],
                &[-1. / 6., 1. / 6., -1. / 6.],
                &[1. / 24., 1. / 12., 1. / 6.],
                &[1. / 24., -1. / 12., 1. / 6.],
                &[0., 0., 1.],
            ]),
            bt: rows(&[
                &[4., 0., -5., 0., 1., 0.],
                &[0., -4., -4., 1., 1., 0.],
                &[0., 4., -4., -1., 1., 0.],
                &[0., -2., -1., 2., 1., 0.],
                &[0., 2., -1., -2., 1., 0.],
                &[0., 4., 0., -5., 0., 1.],
            ]),
        }),
        _ => Err(format!("tile_size must be 2 or 4, found {m}").into()),
    }
}

/// The tiling of a Winograd convolution's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WinogradTiles {
    /// Number of maps N.
    pub batch: usize,
    /// Output height OH, in pixels.
    pub height: usize,
    /// Output width OW, in pixels.
    pub width: usize,
    /// Tiles along the output's rows (`⌈OH/m⌉`).
    pub rows: usize,
    /// Tiles along the output's columns (`⌈OW/m⌉`).
    pub cols: usize,
    /// The tiles holding output pixels (`N·⌈OH/m⌉·⌈OW/m⌉`).
    pub count: usize,
}

impl WinogradTiles {
    /// The tiling of `batch` maps of `height` × `width` in `m` × `m` tiles,
    /// or an error where the tile count overflows (hostile sizes).
    pub fn new(batch: usize, height: usize, width: usize, m: usize) -> Result<Self, OpError> {
        let (rows, cols) = (height.div_ceil(m), width.div_ceil(m));
        let count = batch
            .checked_mul(rows)
            .and_then(|n| n.checked_mul(cols))
            .ok_or_else(|| format!("{batch} maps of {height} × {width} hold too many tiles"))?;
        Ok(WinogradTiles { batch, height, width, rows, cols, count })
    }

    /// The output tiling of the 3 × 3 stride-1 convolution (a Winograd input
    /// transform's attributes `tile_size` and `padding`) whose input has
    /// shape `x` [N, C, H, W], and the padding [top, left, bottom, right].
    pub fn of_input(x: &[usize], attrs: &Attrs) -> Result<(Self, [i64; 4]), OpError> {
        let m = winograd_matrices(attrs.int("tile_size")?)?.m;
        let p = ints_n(attrs, "padding", 4)?;
        let height = window_out(x[2], (p[0], p[2]), 3, 1, 1, false)?;
        let width = window_out(x[3], (p[1], p[3]), 3, 1, 1, false)?;
        Ok((WinogradTiles::new(x[0], height, width, m)?, [p[0], p[1], p[2], p[3]]))
    }
}

/// `ty`, where type inference would accept its size.
fn sized(ty: Type) -> Result<Type, OpError> {
    check_size(&ty)?;
    Ok(ty)
}

/// The `tiles` attribute: at least the real tiles, at most one padding
/// block (a vector multiple) more than them.
fn padded_tiles(attrs: &Attrs, real: usize) -> Result<usize, OpError> {
    match attrs.opt_int("tiles")? {
        None => Ok(real),
        Some(t) if t >= real as i64 && t <= 2 * real as i64 + 64 => Ok(t as usize),
        Some(t) => {
            Err(format!("tiles={t} must cover the {real} tiles of the output (and pad them by at most 64)").into())
        }
    }
}

// ---- weight transform -------------------------------------------------------------

fn rel_weight_transform(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let w = tensor_arg(args, 0, "weight")?;
    float_dtype(w, "weight")?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    if w.rank() != 4 || w.shape[2] != 3 || w.shape[3] != 3 {
        return Err(format!("weight must be OIHW with a 3 × 3 kernel, found shape {}", shape_str(&w.shape)).into());
    }
    match panel_rows(attrs)? {
        None => sized(Type::tensor([t.alpha, t.alpha, w.shape[0], w.shape[1]], w.dtype)),
        Some(r) => sized(Type::tensor([t.alpha * t.alpha, w.shape[0].div_ceil(r), w.shape[1], r], w.dtype)),
    }
}

/// The weight transform's `panel_rows`: None (0, TVM's layout `[α, α, O, I]`)
/// or `r`, the layout `[α², ⌈O / r⌉, I, r]` that `nn.contrib_batch_matmul_pack`
/// reads (output channels zero-padded to whole panels of `r`).
fn panel_rows(attrs: &Attrs) -> Result<Option<usize>, OpError> {
    match attrs.opt_int("panel_rows")? {
        None | Some(0) => Ok(None),
        Some(r) if (1..=64).contains(&r) => Ok(Some(r as usize)),
        Some(r) => Err(format!("panel_rows={r}: expected 0 (unpacked) or 1 to 64").into()),
    }
}

fn eval_weight_transform(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let w = tensor_val(args, 0)?;
    let ty = rel_weight_transform(&[Type::tensor(w.shape().to_vec(), w.dtype())], attrs)?;
    let ty = ty.as_tensor().ok_or("not a tensor")?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    let a = t.alpha;
    let layout = Layout { panel_rows: panel_rows(attrs)?.unwrap_or(1), outputs: w.shape()[0], inputs: w.shape()[1] };
    // Computed in f64 either way. A float32 weight is read, and its result
    // written, as bytes in place: no f64 copies of ResNet-18's 38 MB of
    // transformed weights.
    if ty.dtype == DataType::F32 {
        let bytes = w.bytes();
        let load = |kernels: &[Option<usize>], g: &mut KernelBlock| {
            for (b, kc) in kernels.iter().enumerate() {
                let taps = kc.and_then(|kc| bytes.get(kc * 36..kc * 36 + 36));
                for r in 0..9 {
                    g[r][b] = taps.map_or(0.0, |v| {
                        f32::from_le_bytes([v[4 * r], v[4 * r + 1], v[4 * r + 2], v[4 * r + 3]]) as f64
                    });
                }
            }
        };
        let mut u = vec![[0u8; 4]; a * a * layout.plane()];
        transform_kernels(&t, &load, &mut u, layout, |v| (v as f32).to_le_bytes());
        let u = u.into_flattened();
        return Ok(Value::Tensor(Tensor::from_bytes(ty.dtype, ty.shape.clone(), u).ok_or("result size")?));
    }
    let g = w.to_f64_vec();
    let mut u = vec![0.0; a * a * layout.plane()];
    let load = |kernels: &[Option<usize>], k: &mut KernelBlock| {
        for (b, kc) in kernels.iter().enumerate() {
            let taps = kc.and_then(|kc| g.get(kc * 9..kc * 9 + 9));
            for r in 0..9 {
                k[r][b] = taps.map_or(0.0, |v| v[r]);
            }
        }
    };
    transform_kernels(&t, &load, &mut u, layout, |v| v);
    Ok(Value::Tensor(Tensor::from_f64(ty.dtype, ty.shape.clone(), &u)))
}

/// How the transformed kernels of an OIHW weight (`outputs` × `inputs` 3 × 3
/// kernels) lie in each of the α² planes: in OIHW order (`panel_rows` 1), or
/// in panels of `r` output channels — position `(o / r)·r·inputs + i·r + o % r`,
/// the channels zero-padded to whole panels — as `nn.contrib_batch_matmul_pack`
/// reads them. The transform walks the positions in order and finds the
/// kernel of each: its writes stay sequential, and there is no second pass
/// over ResNet-18's 97 MB of transformed weights.
#[derive(Clone, Copy)]
struct Layout {
    panel_rows: usize,
    outputs: usize,
    inputs: usize,
}

impl Layout {
    /// Positions per panel: ranges of positions split at multiples of it
    /// hold whole panels.
    fn panel(self) -> usize {
        self.panel_rows * self.inputs
    }

    /// Positions per plane (the padding included).
    fn plane(self) -> usize {
        self.outputs.div_ceil(self.panel_rows) * self.panel()
    }

    /// The kernel (OIHW index) at `position`; None in the padding.
    fn kernel_at(self, position: usize) -> Option<usize> {
        let r = self.panel_rows;
        let (panel, within) = (position / self.panel().max(1), position % self.panel().max(1));
        let o = panel * r + within % r;
        (o < self.outputs).then_some(o * self.inputs + within / r)
    }
}

/// Kernels transformed together: each tap of all of them in one row, so that
/// every step of `G·g·Gᵀ` runs along a row (vectorized) rather than kernel by
/// kernel through the α² output planes.
const BLOCK: usize = 16;

/// The nine taps of up to [`BLOCK`] kernels: `[tap][kernel]`.
type KernelBlock = [[f64; BLOCK]; 9];

/// `G·g·Gᵀ` of every kernel of `layout`, laid out `[α, α, layout.plane()]`
/// in `out`, each value as `encode` makes it (float32 bytes in place of a
/// weight, or f64). `load(kernels, block)` reads the taps of up to [`BLOCK`]
/// kernels (zeros for None) into `block`. Split over up to four threads by
/// ranges of whole panels of positions (ResNet-18's weights-only rebuild
/// spent 0.13 s here on one); every value is computed alike whatever the split.
fn transform_kernels<T: Send, L, E>(t: &WinogradMatrices, load: &L, out: &mut [T], layout: Layout, encode: E)
where
    L: Fn(&[Option<usize>], &mut KernelBlock) + Sync,
    E: Fn(f64) -> T + Copy + Send,
{
    const KERNELS_PER_THREAD: usize = 1 << 14;
    let plane = layout.plane();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(4).min(plane.div_ceil(KERNELS_PER_THREAD)).max(1);
    let per = plane.div_ceil(threads).next_multiple_of(layout.panel().max(1));
    // Thread i's part of every plane: positions [i·per, (i + 1)·per).
    let mut parts: Vec<Vec<&mut [T]>> = (0..threads).map(|_| Vec::new()).collect();
    for plane in out.chunks_mut(plane.max(1)) {
        let mut rest = plane;
        for part in &mut parts {
            let (mine, tail) = rest.split_at_mut(per.min(rest.len()));
            part.push(mine);
            rest = tail;
        }
    }
    if threads == 1 {
        let part = parts.pop().unwrap_or_default();
        return transform_range(0, part, t, load, layout, encode);
    }
    std::thread::scope(|s| {
        for (i, part) in parts.into_iter().enumerate() {
            s.spawn(move || transform_range(i * per, part, t, load, layout, encode));
        }
    });
}

/// [`transform_kernels`] for the positions from `first` on, into each
/// plane's slice in `planes`, [`BLOCK`] positions at a time. Each value is
/// summed in the order of the definition, `(x₀ + x₁) + x₂`, whatever the
/// blocking.
fn transform_range<T, L, E>(
    first: usize,
    mut planes: Vec<&mut [T]>,
    t: &WinogradMatrices,
    load: &L,
    layout: Layout,
    encode: E,
) where
    L: Fn(&[Option<usize>], &mut KernelBlock),
    E: Fn(f64) -> T,
{
    let a = t.alpha;
    let count = planes.first().map_or(0, |p| p.len());
    let mut g = [[0.0; BLOCK]; 9];
    let mut kernels = [None; BLOCK];
    // G·g (α × 3 rows of the block), reused: no allocation per block.
    let mut gg = vec![[0.0; BLOCK]; a * 3];
    for k0 in (0..count).step_by(BLOCK) {
        let n = BLOCK.min(count - k0);
        for (b, k) in kernels[..n].iter_mut().enumerate() {
            *k = layout.kernel_at(first + k0 + b);
        }
        load(&kernels[..n], &mut g);
        // The coefficients are locals and the rows whole arrays: LLVM then
        // vectorizes each row's loop (with `t.g`'s rows indexed inside it, a
        // bounds check per element kept it scalar: ResNet-18's 256 × 256
        // transform took 1.25× the time on one thread, faults included).
        for (e, row) in gg.iter_mut().enumerate() {
            let (c0, c1, c2) = coefficients(&t.g[e / 3]);
            let (r0, r1, r2) = (&g[e % 3], &g[3 + e % 3], &g[6 + e % 3]);
            for b in 0..BLOCK {
                row[b] = c0 * r0[b] + c1 * r1[b] + c2 * r2[b];
            }
        }
        for xi in 0..a {
            let [r0, r1, r2] = [&gg[xi * 3], &gg[xi * 3 + 1], &gg[xi * 3 + 2]];
            for nu in 0..a {
                let (c0, c1, c2) = coefficients(&t.g[nu]);
                let mut v = [0.0; BLOCK];
                for b in 0..BLOCK {
                    v[b] = r0[b] * c0 + r1[b] * c1 + r2[b] * c2;
                }
                for (o, &x) in planes[xi * a + nu][k0..k0 + n].iter_mut().zip(&v) {
                    *o = encode(x);
                }
            }
        }
    }
}

/// The three coefficients of a row of G (α × 3).
fn coefficients(row: &[f64]) -> (f64, f64, f64) {
    match row {
        [c0, c1, c2, ..] => (*c0, *c1, *c2),
        _ => (0.0, 0.0, 0.0),
    }
}

// ---- input transform --------------------------------------------------------------

fn rel_input_transform(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    float_dtype(x, "data")?;
    if x.rank() != 4 {
        return Err(format!("data must be 4-D (NCHW), found shape {}", shape_str(&x.shape)).into());
    }
    let alpha = winograd_matrices(attrs.int("tile_size")?)?.alpha;
    let (tiles, _) = WinogradTiles::of_input(&x.shape, attrs)?;
    let t = padded_tiles(attrs, tiles.count)?;
    sized(Type::tensor([alpha * alpha, x.shape[1], t], x.dtype))
}

fn eval_input_transform(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = rel_input_transform(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?;
    let ty = ty.as_tensor().ok_or("not a tensor")?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    let (tiles, pad) = WinogradTiles::of_input(x.shape(), attrs)?;
    let (c, h, w, a, m) = (x.shape()[1], x.shape()[2] as i64, x.shape()[3] as i64, t.alpha, t.m as i64);
    let total = ty.shape[2];
    let xv = x.to_f64_vec();
    let mut v = vec![0.0; a * a * c * total];
    for p in 0..tiles.count {
        let (n, ty_, tx) = (p / (tiles.rows * tiles.cols), (p / tiles.cols) % tiles.rows, p % tiles.cols);
        for ch in 0..c {
            let d = |i: usize, j: usize| {
                let (y, xx) = (ty_ as i64 * m + i as i64 - pad[0], tx as i64 * m + j as i64 - pad[1]);
                if (0..h).contains(&y) && (0..w).contains(&xx) {
                    xv[((n * c + ch) * h as usize + y as usize) * w as usize + xx as usize]
                } else {
                    0.0
                }
            };
            for xi in 0..a {
                for nu in 0..a {
                    let mut s = 0.0;
                    for i in 0..a {
                        for j in 0..a {
                            s += t.bt[xi][i] * t.bt[nu][j] * d(i, j);
                        }
                    }
                    v[((xi * a + nu) * c + ch) * total + p] = s;
                }
            }
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(ty.dtype, ty.shape.clone(), &v)))
}

// ---- output transform -------------------------------------------------------------

fn rel_output_transform(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    float_dtype(x, "data")?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    if x.rank() != 3 || x.shape[0] != t.alpha * t.alpha {
        return Err(format!(
            "data must be [{}, K, tiles] (α², channels, tiles), found shape {}",
            t.alpha * t.alpha,
            shape_str(&x.shape)
        )
        .into());
    }
    Ok(Type::tensor([t.m * t.m, x.shape[1], x.shape[2]], x.dtype))
}

fn eval_output_transform(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = rel_output_transform(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?;
    let ty = ty.as_tensor().ok_or("not a tensor")?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    let (a, m, kt) = (t.alpha, t.m, x.shape()[1] * x.shape()[2]);
    let xv = x.to_f64_vec();
    let mut y = vec![0.0; m * m * kt];
    for r in 0..m {
        for s in 0..m {
            for e in 0..kt {
                let mut acc = 0.0;
                for xi in 0..a {
                    for nu in 0..a {
                        acc += t.at[r][xi] * t.at[s][nu] * xv[(xi * a + nu) * kt + e];
                    }
                }
                y[(r * m + s) * kt + e] = acc;
            }
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(ty.dtype, ty.shape.clone(), &y)))
}

// ---- tiles to NCHW ----------------------------------------------------------------

/// The output tiling named by the attributes of `nn.contrib_winograd_tiles_to_nchw`.
fn output_tiling(attrs: &Attrs) -> Result<WinogradTiles, OpError> {
    let m = winograd_matrices(attrs.int("tile_size")?)?.m;
    let dims = [attrs.int("batch")?, attrs.int("height")?, attrs.int("width")?];
    if dims.iter().any(|&d| d < 1 || d > i32::MAX as i64) {
        return Err(format!("batch, height and width must be positive, found {dims:?}").into());
    }
    WinogradTiles::new(dims[0] as usize, dims[1] as usize, dims[2] as usize, m)
}

fn rel_tiles_to_nchw(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    let m = winograd_matrices(attrs.int("tile_size")?)?.m;
    let tiles = output_tiling(attrs)?;
    if x.rank() != 3 || x.shape[0] != m * m || x.shape[2] < tiles.count {
        return Err(format!(
            "data must be [{}, K, ≥{}] (m², channels, tiles), found shape {}",
            m * m,
            tiles.count,
            shape_str(&x.shape)
        )
        .into());
    }
    sized(Type::tensor([tiles.batch, x.shape[1], tiles.height, tiles.width], x.dtype))
}

fn eval_tiles_to_nchw(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = rel_tiles_to_nchw(&[Type::tensor(x.shape().to_vec(), x.dtype())], attrs)?;
    let ty = ty.as_tensor().ok_or("not a tensor")?;
    let tiles = output_tiling(attrs)?;
    let m = winograd_matrices(attrs.int("tile_size")?)?.m;
    let (k, total, h, w) = (x.shape()[1], x.shape()[2], tiles.height, tiles.width);
    let xv = x.to_f64_vec();
    let mut y = vec![0.0; ty.shape.iter().product()];
    for n in 0..tiles.batch {
        for ch in 0..k {
            for yy in 0..h {
                for xx in 0..w {
                    let p = (n * tiles.rows + yy / m) * tiles.cols + xx / m;
                    let q = (yy % m) * m + xx % m;
                    y[((n * k + ch) * h + yy) * w + xx] = xv[(q * k + ch) * total + p];
                }
            }
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(ty.dtype, ty.shape.clone(), &y)))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    use OpPattern::*;
    defs.push(
        OpDef::new(
            "nn.contrib_conv2d_winograd_weight_transform",
            &["weight"],
            Opaque,
            rel_weight_transform,
            eval_weight_transform,
            "Winograd weight transform G·g·Gᵀ of an OIHW 3 × 3 weight: [α, α, O, I], or with panel_rows=r \
             [α², ⌈O/r⌉, I, r] (folded at build time).",
        )
        .attr(AttrSpec::int("tile_size", 4))
        .attr(AttrSpec::opt_int("panel_rows")),
    );
    defs.push(
        OpDef::new(
            "nn.contrib_winograd_input_transform",
            &["data"],
            OutEWiseFusable,
            rel_input_transform,
            eval_input_transform,
            "Winograd input transform Bᵀ·d·B of every α × α input tile (3 × 3, stride 1): [α², C, tiles].",
        )
        .attr(AttrSpec::int("tile_size", 4))
        .attr(AttrSpec::ints("padding", &[0, 0, 0, 0]))
        .attr(AttrSpec::opt_int("tiles")),
    );
    defs.push(
        OpDef::new(
            "nn.contrib_winograd_output_transform",
            &["data"],
            OutEWiseFusable,
            rel_output_transform,
            eval_output_transform,
            "Winograd output transform Aᵀ·M·A of every tile's products [α², K, tiles]: [m², K, tiles].",
        )
        .attr(AttrSpec::int("tile_size", 4)),
    );
    // Out-element-wise fusable, like the convolution it finishes: its bias,
    // activation and residual fuse into it, a concatenation after it does
    // not — fused, YOLOv8n's C2f concatenations computed the write-back
    // under per-channel selects with gathered loads (its six such kernels
    // ~330 µs on Zen 5; as a write-back per column of the tiles and a
    // plain copy −130 µs, the model 1–2 % faster).
    defs.push(
        OpDef::new(
            "nn.contrib_winograd_tiles_to_nchw",
            &["data"],
            OutEWiseFusable,
            rel_tiles_to_nchw,
            eval_tiles_to_nchw,
            "The m × m output tiles [m², K, tiles] of a Winograd convolution as an NCHW map [batch, K, height, width] (cropped).",
        )
        .attr(AttrSpec::int("tile_size", 4))
        .attr(AttrSpec::int("batch", 1))
        .attr(AttrSpec::int("height", 1))
        .attr(AttrSpec::int("width", 1)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split over threads by ranges of kernels (a count that does not divide
    /// evenly), the weight transform writes what one range over all of them does.
    #[test]
    fn weight_transform_is_the_same_split_or_not() {
        let t = winograd_matrices(4).unwrap();
        let kc_count = 3 * (1 << 14) + 7;
        let tap = |kc: usize, r: usize| ((kc * 9 + r) % 97) as f64 / 31.0 - 1.5;
        let load = |kernels: &[Option<usize>], g: &mut KernelBlock| {
            for (b, kc) in kernels.iter().enumerate() {
                for (r, row) in g.iter_mut().enumerate() {
                    row[b] = kc.map_or(0.0, |kc| tap(kc, r));
                }
            }
        };
        let encode = |v: f64| (v as f32).to_le_bytes();
        let size = t.alpha * t.alpha * kc_count;
        let mut split = vec![[0u8; 4]; size];
        let plain = Layout { panel_rows: 1, outputs: kc_count, inputs: 1 };
        transform_kernels(&t, &load, &mut split, plain, encode);
        let mut whole = vec![[0u8; 4]; size];
        transform_range(0, whole.chunks_mut(kc_count).collect(), &t, &load, plain, encode);
        assert!(split == whole, "the split transform differs from one range");
        // Every value by the definition, (G·g·Gᵀ)[ξ][ν] summed in its order.
        for kc in [0, 5, BLOCK - 1, BLOCK, kc_count / 3 + 1, kc_count - 1] {
            let g: Vec<f64> = (0..9).map(|r| tap(kc, r)).collect();
            for (xi, nu) in [(0, 0), (1, 1), (3, 4), (5, 5)] {
                let gg: Vec<f64> = (0..3).map(|c| (0..3).map(|r| t.g[xi][r] * g[r * 3 + c]).sum()).collect();
                let want = (0..3).map(|c| gg[c] * t.g[nu][c]).sum::<f64>() as f32;
                let got = f32::from_le_bytes(split[(xi * t.alpha + nu) * kc_count + kc]);
                assert_eq!(got.to_bits(), want.to_bits(), "kernel {kc} at ({xi}, {nu}): {got} vs {want}");
            }
        }
        // 7 inputs per output channel in panels of 6 channels (the last
        // padded with zeros), split over threads: kernel (o, i) of each plane
        // at (o / 6)·42 + i·6 + o % 6, the same value as unpacked.
        let (outputs, inputs) = (kc_count / 7 + 1, 7);
        let packed = Layout { panel_rows: 6, outputs, inputs };
        let mut panels = vec![[0u8; 4]; t.alpha * t.alpha * packed.plane()];
        transform_kernels(&t, &load, &mut panels, packed, encode);
        let unpacked = Layout { panel_rows: 1, outputs, inputs };
        let mut reference = vec![[0u8; 4]; t.alpha * t.alpha * unpacked.plane()];
        transform_kernels(&t, &load, &mut reference, unpacked, encode);
        for p in [0, 7, t.alpha * t.alpha - 1] {
            for x in 0..packed.plane() {
                let (o, i) = (x / 42 * 6 + x % 6, x % 42 / 6);
                let want = if o < outputs { reference[p * unpacked.plane() + o * inputs + i] } else { [0; 4] };
                assert_eq!(panels[p * packed.plane() + x], want, "plane {p}, position {x}");
            }
        }
    }
}
