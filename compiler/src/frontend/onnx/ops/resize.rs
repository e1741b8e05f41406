//! Resize and Upsample: separable gathers with constant indices and
//! weights, computed at import from the static shapes.

use kiln_ir::attrs::AttrValue;
use kiln_ir::relay::ExprId;
use kiln_ir::{DataType, Tensor};

use super::{one, Table};
use crate::frontend::onnx::importer::{attrs, Importer, Node};
use crate::frontend::onnx::OnnxError;

pub(super) fn register(t: &mut Table) {
    t.add(
        &["Resize"],
        resize,
        &[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ],
    );
    t.add(&["Upsample"], resize, &["mode", "scales"]);
}

/// Resize and Upsample as separable gathers with constant indices and
/// weights, one axis at a time: nearest is one `take`; linear two taps and
/// cubic four, each weighted by a constant. Every mode and coordinate
/// transformation of the ONNX spec is computed at import from the static shapes.
fn resize(im: &mut Importer, node: &Node) -> Result<Vec<ExprId>, OnnxError> {
    let x = im.input(node, 0)?;
    let shape = im.shape_of(node, x)?;
    let dt = im.dtype_of(node, x)?;
    let rank = shape.len();
    let mode = node.string("mode")?.unwrap_or_else(|| "nearest".into());
    let (scales, sizes): (Option<Vec<f64>>, Option<Vec<i64>>) = if node.op() == "Upsample" {
        let s = match node.floats("scales")? {
            Some(s) => s.iter().map(|&v| v as f64).collect(),
            None => im.const_input(node, 1, "scales")?.ok_or_else(|| node.err("missing scales"))?.to_f64_vec(),
        };
        (Some(s), None)
    } else {
        if node.int("antialias", 0)? != 0 {
            return Err(node.err("antialias=1 is not supported"));
        }
        if node.int("exclude_outside", 0)? != 0 && mode == "cubic" {
            return Err(node.err("exclude_outside=1 is not supported"));
        }
        if node.string("keep_aspect_ratio_policy")?.is_some_and(|p| p != "stretch") {
            return Err(node.err("keep_aspect_ratio_policy other than \"stretch\" is not supported"));
        }
        if node.ints("axes")?.is_some() {
            return Err(node.err("the axes attribute is not supported"));
        }
        if im.optional_input(node, 1)?.is_some() {
            let roi = im.const_input(node, 1, "roi")?.unwrap_or_else(|| Tensor::zeros(DataType::F32, vec![0]));
            let ctm = node.string("coordinate_transformation_mode")?.unwrap_or_default();
            if roi.numel() > 0 && ctm == "tf_crop_and_resize" {
                return Err(node.err("coordinate_transformation_mode=tf_crop_and_resize is not supported"));
            }
        }
        let scales = im.const_input(node, 2, "scales")?.filter(|t| t.numel() > 0).map(|t| t.to_f64_vec());
        let sizes = im.const_ints(node, 3, "sizes")?.filter(|v| !v.is_empty());
        (scales, sizes)
    };
    let ctm = if node.op() == "Upsample" {
        "asymmetric".to_string()
    } else {
        node.string("coordinate_transformation_mode")?.unwrap_or_else(|| "half_pixel".into())
    };
    let nearest_mode = node.string("nearest_mode")?.unwrap_or_else(|| "round_prefer_floor".into());
    let nearest_mode = if node.op() == "Upsample" { "floor".to_string() } else { nearest_mode };
    let cubic_a = node.float("cubic_coeff_a", -0.75)? as f64;
    // `extrapolation_value` only matters to tf_crop_and_resize, refused above.
    let (out_sizes, scales): (Vec<usize>, Vec<f64>) = match (sizes, scales) {
        (Some(s), _) => {
            if s.len() != rank || s.iter().any(|&v| v < 0) {
                return Err(node.err(format!("sizes {s:?} do not fit an input of rank {rank}")));
            }
            let out: Vec<usize> = s.iter().map(|&v| v as usize).collect();
            let sc = out.iter().zip(&shape).map(|(&o, &i)| o as f64 / i.max(1) as f64).collect();
            (out, sc)
        }
        (None, Some(sc)) => {
            if sc.len() != rank || sc.iter().any(|&v| v <= 0.0 || !v.is_finite()) {
                return Err(node.err(format!("scales {sc:?} do not fit an input of rank {rank}")));
            }
            let out = shape.iter().zip(&sc).map(|(&i, &s)| (i as f64 * s).floor() as usize).collect();
            (out, sc)
        }
        (None, None) => return Err(node.err("needs scales or sizes")),
    };
    let dims: Vec<i64> = out_sizes.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect();
    crate::frontend::onnx::proto::checked_shape(&dims, dt).map_err(|m| node.err(m))?;
    if out_sizes.iter().zip(&shape).any(|(&o, &i)| o > 0 && i == 0) {
        return Err(node.err("cannot resize an empty axis"));
    }
    if dt != DataType::F32 && mode != "nearest" {
        return Err(node.err(format!("{mode} resizing of {dt} is not supported")));
    }
    let how = Interpolation { mode: &mode, ctm: &ctm, nearest_mode: &nearest_mode, cubic_a };
    // The taps are tables built here, one entry per output position (none
    // for an axis left as it is).
    let mut taps = Vec::with_capacity(rank);
    for axis in 0..rank {
        if out_sizes[axis] == shape[axis] && scales[axis] == 1.0 {
            taps.push(None);
            continue;
        }
        if out_sizes[axis] > MAX_RESIZED_AXIS {
            return Err(node.err(format!(
                "axis {axis} would be resized to {} positions; kiln resizes an axis to at most {MAX_RESIZED_AXIS}",
                out_sizes[axis]
            )));
        }
        taps.push(Some(axis_taps(node, &how, shape[axis], out_sizes[axis], scales[axis])?));
    }
    if let Some((kh, kw)) = integer_upsampling(&mode, &shape, &taps) {
        let a = attrs(&[
            ("scale_h", AttrValue::Float(kh as f64)),
            ("scale_w", AttrValue::Float(kw as f64)),
            ("layout", AttrValue::Str("NCHW".into())),
            ("method", AttrValue::Str("nearest_neighbor".into())),
        ]);
        return one(im.call(node, "nn.upsampling", vec![x], a)?);
    }
    let mut y = x;
    for (axis, t) in taps.iter().enumerate() {
        if let Some(t) = t {
            y = gather_axis(im, node, y, axis, rank, t, dt)?;
        }
    }
    one(y)
}

/// The integer factors `(kh, kw)` of a nearest resize of NCHW data (`taps`
/// per axis, none where it is left as it is) that repeats each input row
/// `kh` times and each column `kw` times (every output position `o` reads
/// `o / k`; the images and channels unchanged) — YOLO's and FPNs' 2×
/// upsampling: `nn.upsampling`, which the kernels compute as index
/// arithmetic instead of two gathers through index tables. None for any
/// other resize.
fn integer_upsampling(mode: &str, shape: &[usize], taps: &[Option<AxisTaps>]) -> Option<(usize, usize)> {
    if mode != "nearest" || shape.len() != 4 || taps[0].is_some() || taps[1].is_some() {
        return None;
    }
    let factor = |a: usize| match &taps[a] {
        None => Some(1),
        Some(t) => {
            let (i, o) = (shape[a], t.len());
            let k = (i > 0 && o % i == 0).then(|| o / i)?;
            t.iter().enumerate().all(|(p, t)| t.len() == 1 && t[0].0 == p / k).then_some(k)
        }
    };
    match (factor(2)?, factor(3)?) {
        (kh, kw) if kh > 1 || kw > 1 => Some((kh, kw)),
        _ => None,
    }
}

/// For each output position along one axis, the input positions and weights.
type AxisTaps = Vec<Vec<(usize, f64)>>;

/// How Resize maps output positions to input positions and weights.
struct Interpolation<'a> {
    mode: &'a str,
    /// `coordinate_transformation_mode`.
    ctm: &'a str,
    nearest_mode: &'a str,
    cubic_a: f64,
}

/// The longest axis Resize produces (its interpolation tables are built at import).
const MAX_RESIZED_AXIS: usize = 1 << 24;

fn axis_taps(node: &Node, how: &Interpolation, n_in: usize, n_out: usize, scale: f64) -> Result<AxisTaps, OnnxError> {
    let Interpolation { mode, ctm, nearest_mode, cubic_a } = *how;
    let last = n_in as i64 - 1;
    let clampi = |v: i64| v.clamp(0, last) as usize;
    let mut taps = Vec::with_capacity(n_out);
    for o in 0..n_out {
        let of = o as f64;
        // ONNX's reference uses the unrounded resized length `n_in · scale`.
        let len_resized = n_in as f64 * scale;
        let x = match ctm {
            "half_pixel" => (of + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let adj = n_out as f64 / (scale * n_in as f64);
                let center = n_in as f64 / 2.0;
                center * (1.0 - adj) + (of + 0.5) / scale - 0.5
            }
            "pytorch_half_pixel" => {
                if len_resized > 1.0 {
                    (of + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            "align_corners" => {
                if len_resized != 1.0 {
                    of * (n_in as f64 - 1.0) / (len_resized - 1.0)
                } else {
                    0.0
                }
            }
            "asymmetric" => of / scale,
            other => return Err(node.err(format!("coordinate_transformation_mode={other} is not supported"))),
        };
        let t = match mode {
            "nearest" => {
                let i = match nearest_mode {
                    "round_prefer_floor" => {
                        if x.fract() == 0.5 || x - x.floor() == 0.5 {
                            x.floor()
                        } else {
                            x.round()
                        }
                    }
                    "round_prefer_ceil" => {
                        if x - x.floor() == 0.5 {
                            x.ceil()
                        } else {
                            x.round()
                        }
                    }
                    "floor" => x.floor(),
                    "ceil" => x.ceil(),
                    other => return Err(node.err(format!("nearest_mode={other} is not supported"))),
                };
                vec![(clampi(i as i64), 1.0)]
            }
            "linear" => {
                let xc = x.clamp(0.0, last as f64);
                let f = xc.floor();
                let w = xc - f;
                vec![(clampi(f as i64), 1.0 - w), (clampi(f as i64 + 1), w)]
            }
            "cubic" => {
                let f = x.floor();
                let t = x - f;
                let a = cubic_a;
                let k = |d: f64| {
                    let d = d.abs();
                    if d <= 1.0 {
                        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
                    } else if d < 2.0 {
                        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
                    } else {
                        0.0
                    }
                };
                (-1..=2).map(|j| (clampi(f as i64 + j), k(t - j as f64))).collect()
            }
            other => return Err(node.err(format!("mode={other} is not a Resize mode"))),
        };
        taps.push(t);
    }
    Ok(taps)
}

/// `Σ_j w_j[o] · x[…, idx_j[o], …]` along `axis`.
fn gather_axis(
    im: &mut Importer,
    node: &Node,
    x: ExprId,
    axis: usize,
    rank: usize,
    taps: &[Vec<(usize, f64)>],
    dt: DataType,
) -> Result<ExprId, OnnxError> {
    let n_out = taps.len();
    let ntaps = taps.iter().map(Vec::len).max().unwrap_or(1);
    let mut acc: Option<ExprId> = None;
    for j in 0..ntaps {
        let idx: Vec<f64> = taps.iter().map(|t| t[j.min(t.len() - 1)].0 as f64).collect();
        let idx = im.constant(Tensor::from_f64(DataType::I64, vec![n_out], &idx));
        let a = attrs(&[("axis", AttrValue::Int(axis as i64)), ("mode", AttrValue::Str("clip".into()))]);
        let g = im.call(node, "take", vec![x, idx], a)?;
        if ntaps == 1 {
            return Ok(g);
        }
        let mut wshape = vec![1; rank];
        wshape[axis] = n_out;
        let w: Vec<f64> = taps.iter().map(|t| t.get(j).map_or(0.0, |p| p.1)).collect();
        let w = im.constant(Tensor::from_f64(dt, wshape, &w));
        let term = im.op(node, "multiply", vec![g, w])?;
        acc = Some(match acc {
            None => term,
            Some(a) => im.op(node, "add", vec![a, term])?,
        });
    }
    acc.ok_or_else(|| node.err("no taps"))
}
