//! Computes of the resizing operators (`image.resize2d`, `nn.upsampling`):
//! the input coordinate of each output position in exact integer arithmetic
//! (kiln-ir's [`ResizeAxis`]), so kernels pick the pixels the interpreter picks.

use std::sync::Arc;

use kiln_ir::relay::op::{resize_plan, ResizeAxis, ResizeMethod, Rounding};
use kiln_ir::relay::OpMap;
use kiln_ir::OpError;

use super::{one, ComputeCall, ComputeFn, TeValue};
use crate::te::compute;
use crate::tir::{BinOp, Expr, TirType};

pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set_all(&["image.resize2d", "nn.upsampling"], Arc::new(resize));
}

fn floor_div(a: Expr, k: i64) -> Expr {
    Expr::bin(BinOp::FloorDiv, a, Expr::int(k))
}

fn clamp(e: Expr, size: i64) -> Expr {
    Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, e, Expr::int(0)), Expr::int(size - 1))
}

/// `a·o + b`, the numerator of output position `o`'s coordinate.
fn numerator(axis: &ResizeAxis, o: &Expr) -> Expr {
    o.clone() * Expr::int(axis.a) + Expr::int(axis.b)
}

/// The nearest input index (as [`ResizeAxis::nearest`]).
fn nearest(axis: &ResizeAxis, o: &Expr, rounding: Rounding) -> Expr {
    // An integer upsampling (`o · i / (k · i)`, rounded down): `o / k`, in
    // range without a clamp — index arithmetic the vectorizer and LLVM see
    // through.
    if rounding == Rounding::Floor
        && axis.b == 0
        && axis.a > 0
        && axis.d % axis.a == 0
        && axis.d / axis.a * axis.size == axis.d
    {
        return floor_div(o.clone(), axis.d / axis.a);
    }
    let (n, d) = (numerator(axis, o), axis.d);
    let i = match rounding {
        Rounding::Floor => floor_div(n, d),
        Rounding::Ceil => Expr::int(0) - floor_div(Expr::int(0) - n, d),
        Rounding::Round | Rounding::RoundPreferCeil => floor_div(n * Expr::int(2) + Expr::int(d), 2 * d),
        Rounding::RoundPreferFloor => Expr::int(0) - floor_div(Expr::int(d) - n * Expr::int(2), 2 * d),
    };
    clamp(i, axis.size)
}

/// The two input indices around `o` and the second one's weight (as [`ResizeAxis::linear`]).
fn linear(axis: &ResizeAxis, o: &Expr, ty: TirType) -> (Expr, Expr, Expr) {
    let (n, d) = (numerator(axis, o), axis.d);
    let lo = floor_div(n.clone(), d);
    let frac = Expr::bin(
        BinOp::Div,
        Expr::cast(ty, Expr::bin(BinOp::FloorMod, n, Expr::int(d))),
        Expr::cast(ty, Expr::int(d)),
    );
    (clamp(lo.clone(), axis.size), clamp(lo + Expr::int(1), axis.size), frac)
}

fn resize(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let (plan, _) = resize_plan(c.op, x.shape(), c.attrs)?;
    let in_ty = TirType::scalar(x.dtype());
    let out_ty = TirType::scalar(dt);
    one(compute("resize", &shape, |i| {
        let at = |y: Expr, z: Expr| x.at(&[i[0].clone(), i[1].clone(), y, z]);
        let value = match plan.method {
            ResizeMethod::Nearest(r) => at(nearest(&plan.rows, &i[2], r), nearest(&plan.cols, &i[3], r)),
            ResizeMethod::Linear => {
                let (y0, y1, ty) = linear(&plan.rows, &i[2], in_ty);
                let (z0, z1, tz) = linear(&plan.cols, &i[3], in_ty);
                let lerp = |a: Expr, b: Expr, t: Expr| a * (Expr::constant(1.0, x.dtype()) - t.clone()) + b * t;
                let top = lerp(at(y0.clone(), z0.clone()), at(y0, z1.clone()), tz.clone());
                let bottom = lerp(at(y1.clone(), z0), at(y1, z1), tz);
                lerp(top, bottom, ty)
            }
        };
        if in_ty == out_ty {
            value
        } else {
            Expr::cast(out_ty, value)
        }
    }))
}
