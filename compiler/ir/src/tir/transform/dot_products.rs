//! DotProducts: a vectorized update that adds four byte products per int32
//! lane becomes one `kiln.dot_u8i8` call (x86 VNNI's `vpdpbusd`).
//!
//! The int8 convolution's compute (`nn.contrib_conv2d_u8s8`) writes the four
//! products of an input-channel group out, and its schedule vectorizes the
//! 16 output channels, so each update reads, after VectorizeLoop,
//!
//! ```text
//! acc[R] = acc[R] + B(i32(img[p])) · i32(w[Ramp(q, 4, 16)])
//!                 + B(i32(img[p + 1])) · i32(w[Ramp(q + 1, 4, 16)]) + … (four)
//! ```
//!
//! — four bytes of the image broadcast, four strided reads of the weight,
//! which packs 16 channels × 4 bytes contiguously. That is
//! `dot_u8i8(acc[R], img[Ramp(p, 1, 4)], w[Ramp(q, 1, 64)])`: one 64-byte
//! load and one instruction instead of 4 broadcasts, 4 gathers, 8
//! conversions, 4 multiplications and 4 additions. Anything else is left
//! as it is (and stays correct: LLVM computes the plain form).

use crate::arith::{simplify, Bounds};
use crate::dtype::DataType;
use crate::tir::{BinOp, Buffer, Expr, Intrinsic, PrimFunc, Stmt, TirType};

/// Int32 lanes of one dot-product vector (a 512-bit register).
const LANES: u16 = 16;
/// Bytes per lane.
const GROUP: i64 = 4;

/// Rewrites every update of `f` that matches (see the module docs).
pub fn dot_products(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    f.body = body.map_post(&mut |s| match s {
        Stmt::Store { buffer, indices, value } => {
            let value = dot(&buffer, &indices, &value).unwrap_or(value);
            Stmt::Store { buffer, indices, value }
        }
        s => s,
    });
    f
}

fn add_terms<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Bin(BinOp::Add, a, b) => {
            add_terms(a, out);
            add_terms(b, out);
        }
        e => out.push(e),
    }
}

/// One byte product: (image, its scalar index), (weight, its ramp's base).
struct Product {
    image: Buffer,
    at: Expr,
    weight: Buffer,
    base: Expr,
}

/// `B(i32(img[p]))` or `i32(B(img[p]))`: the unsigned byte broadcast.
fn broadcast_byte(e: &Expr) -> Option<(Buffer, Expr)> {
    let load = match e {
        Expr::Broadcast(x, LANES) => match &**x {
            Expr::Cast(t, l) if t.elem == DataType::I32 && t.lanes == 1 => &**l,
            _ => return None,
        },
        Expr::Cast(t, x) if t.elem == DataType::I32 && t.lanes == LANES => match &**x {
            Expr::Broadcast(l, LANES) => &**l,
            _ => return None,
        },
        _ => return None,
    };
    match load {
        Expr::Load(b, idx) if b.elem() == DataType::U8 && idx.len() == 1 => Some((b.clone(), idx[0].clone())),
        _ => None,
    }
}

/// `i32(w[Ramp(q, 4, 16)])`: 16 signed bytes, one per lane's group.
fn strided_bytes(e: &Expr) -> Option<(Buffer, Expr)> {
    let Expr::Cast(t, x) = e else { return None };
    let Expr::Load(b, idx) = &**x else { return None };
    let [Expr::Ramp { base, stride, lanes: LANES }] = &idx[..] else { return None };
    (t.elem == DataType::I32 && t.lanes == LANES && b.elem() == DataType::I8 && stride.as_int() == Some(GROUP))
        .then(|| (b.clone(), (**base).clone()))
}

fn product(e: &Expr) -> Option<Product> {
    let Expr::Bin(BinOp::Mul, a, b) = e else { return None };
    let ((image, at), (weight, base)) =
        broadcast_byte(a).zip(strided_bytes(b)).or_else(|| broadcast_byte(b).zip(strided_bytes(a)))?;
    Some(Product { image, at, weight, base })
}

/// `a − b` as a constant, where it simplifies to one.
fn offset(a: &Expr, b: &Expr) -> Option<i64> {
    simplify(&Expr::bin(BinOp::Sub, a.clone(), b.clone()), &Bounds::new()).as_int()
}

fn dot(acc: &Buffer, indices: &[Expr], value: &Expr) -> Option<Expr> {
    if acc.elem() != DataType::I32 || !matches!(indices, [Expr::Ramp { lanes: LANES, .. }]) {
        return None;
    }
    let mut terms = Vec::new();
    add_terms(value, &mut terms);
    let (own, rest): (Vec<&Expr>, Vec<&Expr>) =
        terms.into_iter().partition(|t| matches!(t, Expr::Load(b, i) if b == acc && i == indices));
    if own.len() != 1 || rest.len() != GROUP as usize {
        return None;
    }
    let products = rest.into_iter().map(product).collect::<Option<Vec<_>>>()?;
    let first = &products[0];
    // Each product's byte j of the group: the same step from the first
    // along the image and the weight, the four steps consecutive.
    let mut steps = Vec::new();
    for p in &products {
        if p.image != first.image || p.weight != first.weight {
            return None;
        }
        let (di, dw) = (offset(&p.at, &first.at)?, offset(&p.base, &first.base)?);
        if di != dw {
            return None;
        }
        steps.push(di);
    }
    let low = *steps.iter().min()?;
    let mut sorted = steps.clone();
    sorted.sort_unstable();
    if sorted != (low..low + GROUP).collect::<Vec<_>>() {
        return None;
    }
    let lowest = &products[steps.iter().position(|&d| d == low)?];
    let ramp =
        |base: &Expr, lanes: u16| Expr::Ramp { base: Box::new(base.clone()), stride: Box::new(Expr::int(1)), lanes };
    let image = Expr::Load(lowest.image.clone(), vec![ramp(&lowest.at, GROUP as u16)]);
    let weight = Expr::Load(lowest.weight.clone(), vec![ramp(&lowest.base, LANES * GROUP as u16)]);
    let acc_now = Expr::Load(acc.clone(), indices.to_vec());
    Some(Expr::Call(Intrinsic::DotU8I8, vec![acc_now, image, weight], TirType::scalar(DataType::I32).with_lanes(LANES)))
}
