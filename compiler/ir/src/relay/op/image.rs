//! Resizing: `image.resize2d` and `nn.upsampling` (TVM's `topi.image.resize2d`
//! semantics, NCHW).
//!
//! An output position maps to the input coordinate `(a·o + b) / d`, a
//! rational number for every supported coordinate transformation, so the
//! nearest index and the linear weights are computed exactly in integers (as
//! TVM's newer `Fraction` path does): the interpreter and the compiled
//! kernel pick the same pixels, with no epsilon.

use super::util::{float_dtype, shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec, Attrs};
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::Tensor;
use crate::OpError;

/// How output positions of one axis map to input coordinates: position `o`
/// reads coordinate `(a·o + b) / d` of an axis of `size` positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResizeAxis {
    pub a: i64,
    pub b: i64,
    /// Positive.
    pub d: i64,
    /// The input axis' length (indices are clamped to `0..size`).
    pub size: i64,
}

/// The interpolation of a resize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeMethod {
    /// The input position chosen by a rounding rule.
    Nearest(Rounding),
    /// Bilinear: the two neighbours of each axis, weighted by distance.
    Linear,
}

/// How a coordinate becomes the nearest index (TVM's `rounding_method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Half away from zero... for the non-negative numerators TVM's `round`
    /// meets here, half up: `floor(x + 1/2)`.
    Round,
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

impl ResizeAxis {
    /// The mapping for `coordinate_transformation_mode` from an axis of
    /// `input` positions to one of `output`.
    pub fn new(mode: &str, input: usize, output: usize) -> Result<ResizeAxis, OpError> {
        let (i, o) = (input as i64, output as i64);
        let (a, b, d) = match mode {
            "asymmetric" => (i, 0, o),
            "half_pixel" => (2 * i, i - o, 2 * o),
            "pytorch_half_pixel" if o > 1 => (2 * i, i - o, 2 * o),
            "pytorch_half_pixel" => (0, 0, 1),
            "align_corners" if o > 1 => (i - 1, 0, o - 1),
            "align_corners" => (0, 0, 1),
            "tf_half_pixel_for_nn" => (2 * i, i, 2 * o),
            other => {
                return Err(format!(
                    "coordinate_transformation_mode=\"{other}\" is not supported (asymmetric, half_pixel, \
                     pytorch_half_pixel, align_corners, tf_half_pixel_for_nn)"
                )
                .into())
            }
        };
        Ok(ResizeAxis { a, b, d: d.max(1), size: i })
    }

    /// The numerator of output position `o`'s coordinate.
    pub fn numerator(&self, o: i64) -> i64 {
        self.a * o + self.b
    }

    /// The input index nearest to output position `o`, clamped into the axis.
    pub fn nearest(&self, o: i64, rounding: Rounding) -> i64 {
        let (n, d) = (self.numerator(o), self.d);
        let i = match rounding {
            Rounding::Floor => n.div_euclid(d),
            Rounding::Ceil => -(-n).div_euclid(d),
            Rounding::Round | Rounding::RoundPreferCeil => (2 * n + d).div_euclid(2 * d),
            Rounding::RoundPreferFloor => -(d - 2 * n).div_euclid(2 * d),
        };
        i.clamp(0, self.size - 1)
    }

    /// The two input indices around output position `o` (clamped) and the
    /// weight of the second.
    pub fn linear(&self, o: i64) -> (i64, i64, f64) {
        let (n, d) = (self.numerator(o), self.d);
        let lo = n.div_euclid(d);
        let frac = n.rem_euclid(d) as f64 / d as f64;
        (lo.clamp(0, self.size - 1), (lo + 1).clamp(0, self.size - 1), frac)
    }
}

impl Rounding {
    /// TVM's `rounding_method` string; `""` is TVM's default for the mode
    /// (`round` with `align_corners`, else `floor`).
    pub fn parse(name: &str, mode: &str) -> Result<Rounding, OpError> {
        Ok(match name {
            "" if mode == "align_corners" => Rounding::Round,
            "" | "floor" => Rounding::Floor,
            "round" => Rounding::Round,
            "round_prefer_floor" => Rounding::RoundPreferFloor,
            "round_prefer_ceil" => Rounding::RoundPreferCeil,
            "ceil" => Rounding::Ceil,
            other => return Err(format!("rounding_method=\"{other}\" is not supported").into()),
        })
    }
}

/// A resize call's interpolation and the mappings of its H and W axes.
#[derive(Clone, Copy, Debug)]
pub struct ResizePlan {
    pub method: ResizeMethod,
    pub rows: ResizeAxis,
    pub cols: ResizeAxis,
}

/// What `image.resize2d` / `nn.upsampling` with `attrs` does to an NCHW
/// input of `shape`, and the output shape.
pub fn resize_plan(op: &str, shape: &[usize], attrs: &Attrs) -> Result<(ResizePlan, Vec<usize>), OpError> {
    if shape.len() != 4 {
        return Err(format!("{op} needs 4-D NCHW data, found {}", shape_str(shape)).into());
    }
    if attrs.str("layout")? != "NCHW" {
        return Err(format!("only the NCHW layout is supported, found {}", attrs.str("layout")?).into());
    }
    let (method, mode, rounding, out_h, out_w) = if op == "nn.upsampling" {
        let scaled = |d: usize, s: f64| -> Result<usize, OpError> {
            let v = (d as f64 * s).round();
            if !(s > 0.0 && v.is_finite() && v >= 0.0 && v <= u32::MAX as f64) {
                return Err(format!("scale {s} does not give a valid size for an axis of {d}").into());
            }
            Ok(v as usize)
        };
        let (h, w) = (scaled(shape[2], attrs.float("scale_h")?)?, scaled(shape[3], attrs.float("scale_w")?)?);
        let mode = if attrs.bool("align_corners")? { "align_corners" } else { "asymmetric" };
        let method = match attrs.str("method")? {
            "bilinear" => "linear",
            m => m,
        };
        (method, mode, "", h, w)
    } else {
        let size = attrs.ints("size")?;
        let [h, w] = size[..] else {
            return Err(format!("size must have 2 values (height, width), found {size:?}").into());
        };
        if h < 0 || w < 0 || h > u32::MAX as i64 || w > u32::MAX as i64 {
            return Err(format!("size {size:?} is not a valid output size").into());
        }
        let mode = attrs.str("coordinate_transformation_mode")?;
        if mode == "tf_crop_and_resize" {
            return Err("coordinate_transformation_mode=\"tf_crop_and_resize\" is not supported".into());
        }
        (attrs.str("method")?, mode, attrs.str("rounding_method")?, h as usize, w as usize)
    };
    let method = match method {
        "nearest_neighbor" => ResizeMethod::Nearest(Rounding::parse(rounding, mode)?),
        "linear" => ResizeMethod::Linear,
        other => {
            return Err(format!("method=\"{other}\" is not supported (nearest_neighbor, linear/bilinear)").into());
        }
    };
    if (shape[2] == 0 && out_h > 0) || (shape[3] == 0 && out_w > 0) {
        return Err(format!("cannot resize an empty axis of {}", shape_str(shape)).into());
    }
    let plan = ResizePlan {
        method,
        rows: ResizeAxis::new(mode, shape[2], out_h)?,
        cols: ResizeAxis::new(mode, shape[3], out_w)?,
    };
    Ok((plan, vec![shape[0], shape[1], out_h, out_w]))
}

/// The plan, output shape and output dtype of a resize of `x` (the dtype
/// checked: linear interpolation needs a float input).
fn resize_type(
    op: &str,
    x: &crate::relay::ty::TensorType,
    attrs: &Attrs,
) -> Result<(ResizePlan, Vec<usize>, crate::dtype::DataType), OpError> {
    let (plan, shape) = resize_plan(op, &x.shape, attrs)?;
    if plan.method == ResizeMethod::Linear {
        float_dtype(x, "data")?;
    }
    // `image.resize2d`'s `out_dtype` ("" keeps the input's); `nn.upsampling` has none.
    let dtype = match attrs.get("out_dtype") {
        Some(_) if !attrs.str("out_dtype")?.is_empty() => attrs.dtype("out_dtype")?,
        _ => x.dtype,
    };
    Ok((plan, shape, dtype))
}

fn rel_resize(op: &str, args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let (_, shape, dtype) = resize_type(op, tensor_arg(args, 0, "data")?, attrs)?;
    Ok(Type::tensor(shape, dtype))
}

fn rel_resize2d(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    rel_resize("image.resize2d", args, attrs)
}

fn rel_upsampling(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    rel_resize("nn.upsampling", args, attrs)
}

fn eval_resize(op: &str, args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let ty = crate::relay::ty::TensorType { shape: x.shape().to_vec(), dtype: x.dtype() };
    let (plan, shape, out_dtype) = resize_type(op, &ty, attrs)?;
    let [n, c, h, w] = [shape[0], shape[1], shape[2], shape[3]];
    let (ih, iw) = (x.shape()[2], x.shape()[3]);
    let xv = x.to_f64_vec();
    let mut res = Vec::with_capacity(n * c * h * w);
    for plane in 0..n * c {
        let at = |y: i64, z: i64| xv[(plane * ih + y as usize) * iw + z as usize];
        for y in 0..h as i64 {
            for z in 0..w as i64 {
                res.push(match plan.method {
                    ResizeMethod::Nearest(r) => at(plan.rows.nearest(y, r), plan.cols.nearest(z, r)),
                    ResizeMethod::Linear => {
                        let (y0, y1, ty) = plan.rows.linear(y);
                        let (z0, z1, tz) = plan.cols.linear(z);
                        let top = at(y0, z0) * (1.0 - tz) + at(y0, z1) * tz;
                        let bottom = at(y1, z0) * (1.0 - tz) + at(y1, z1) * tz;
                        top * (1.0 - ty) + bottom * ty
                    }
                });
            }
        }
    }
    Ok(Value::Tensor(Tensor::from_f64(out_dtype, shape, &res)))
}

fn eval_resize2d(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    eval_resize("image.resize2d", args, attrs)
}

fn eval_upsampling(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    eval_resize("nn.upsampling", args, attrs)
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    defs.push(
        OpDef::new(
            "image.resize2d",
            &["data"],
            OpPattern::Injective,
            rel_resize2d,
            eval_resize2d,
            "Resize the H and W axes of NCHW data to `size` (nearest_neighbor or linear).",
        )
        .attr(AttrSpec::floats("roi", &[0.0, 0.0, 0.0, 0.0]))
        .attr(AttrSpec::required("size", AttrKind::Ints))
        .attr(AttrSpec::str("layout", "NCHW"))
        .attr(AttrSpec::str("method", "linear"))
        .attr(AttrSpec::str("coordinate_transformation_mode", "half_pixel"))
        .attr(AttrSpec::str("rounding_method", ""))
        .attr(AttrSpec::float("cubic_alpha", -0.5))
        .attr(AttrSpec::int("cubic_exclude", 0))
        .attr(AttrSpec::float("extrapolation_value", 0.0))
        .attr(AttrSpec::str("out_dtype", "")),
    );
    defs.push(
        OpDef::new(
            "nn.upsampling",
            &["data"],
            OpPattern::Injective,
            rel_upsampling,
            eval_upsampling,
            "Scale the H and W axes of NCHW data by `scale_h` and `scale_w` (nearest_neighbor or bilinear).",
        )
        .attr(AttrSpec::float("scale_h", 1.0))
        .attr(AttrSpec::float("scale_w", 1.0))
        .attr(AttrSpec::str("layout", "NCHW"))
        .attr(AttrSpec::str("method", "nearest_neighbor"))
        .attr(AttrSpec::bool("align_corners", false)),
    );
}
