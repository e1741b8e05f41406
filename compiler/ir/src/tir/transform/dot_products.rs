//! DotProducts: a vectorized update that adds four byte products per int32
//! lane becomes one `kiln.dot_u8i8` call (x86 VNNI's `vpdpbusd`).
//!
//! The int8 convolution's compute (`nn.contrib_conv2d_u8s8`) writes the four
//! products of an input-channel group out, and its schedule vectorizes the
//! 16 output channels, so each update reads, after VectorizeLoop,
//!
//! ```text
//! acc[R] = acc[R] + B(i32(img[p] % 256)) · i32(w[Ramp(q, 4, 16)])
//!                 + B(i32(img[p] / 256 % 256)) · i32(w[Ramp(q + 1, 4, 16)]) + … (four)
//! ```
//!
//! — the four bytes of one 32-bit word of the image broadcast, four
//! strided reads of the weight, which packs 16 channels × 4 bytes
//! contiguously. That is `dot_u8i8(acc[R], img[p], w[Ramp(q, 1, 64)])`: one
//! 64-byte load and one instruction instead of 4 broadcasts, 4 gathers, 8
//! conversions, 4 multiplications and 4 additions. Anything else is left
//! as it is (and stays correct: LLVM computes the plain form).
//!
//! With pixels as lanes (`OIHW4i` weights) the roles turn: byte `j` of 16
//! consecutive words of the image times one broadcast weight byte `w[q + j]`
//! is `dot_u8i8(acc[R], img[Ramp(p, 1, 16)], w[Ramp(q, 1, 4)])`.

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

/// An integer constant, or one broadcast (a vectorized operand).
fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Broadcast(x, _) => x.as_int(),
        e => e.as_int(),
    }
}

/// `(img[p] / 256ʲ) % 256` (the modulo optional for the top byte), as int32
/// of `lanes` lanes: byte `j` of a uint32 word of the image (one word, or
/// one per lane at `Ramp(p, 1, 16)`), with the word's buffer and index.
fn byte_of_word(e: &Expr, lanes: u16) -> Option<(Buffer, Expr, i64)> {
    let Expr::Cast(t, x) = e else { return None };
    if t.elem != DataType::I32 || t.lanes != lanes {
        return None;
    }
    let (x, masked) = match &**x {
        Expr::Bin(BinOp::FloorMod, x, m) if constant(m) == Some(256) => (&**x, true),
        x => (x, false),
    };
    let (load, j) = match x {
        Expr::Bin(BinOp::FloorDiv, l, d) => {
            let d = constant(d)?;
            let j = [1i64 << 8, 1 << 16, 1 << 24].iter().position(|&p| p == d)? as i64 + 1;
            (&**l, j)
        }
        l => (l, 0),
    };
    let Expr::Load(b, idx) = load else { return None };
    let index_fits = match &idx[..] {
        [Expr::Ramp { stride, lanes: LANES, .. }] => lanes == LANES && stride.as_int() == Some(1),
        [i] => lanes == 1 && i.ty().lanes == 1,
        _ => false,
    };
    (b.elem() == DataType::U32 && index_fits && (masked || j == GROUP - 1)).then(|| (b.clone(), idx[0].clone(), j))
}

/// `B(e)` or the conversion of a broadcast, where the broadcast value is `f`'s.
fn broadcast<T>(e: &Expr, f: impl Fn(&Expr) -> Option<T>) -> Option<T> {
    match e {
        Expr::Broadcast(x, LANES) => f(x),
        Expr::Cast(t, x) if t.lanes == LANES => match &**x {
            Expr::Broadcast(w, LANES) => f(&Expr::cast(TirType::scalar(t.elem), (**w).clone())),
            _ => None,
        },
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

/// `i32(w[q])`: one signed byte (broadcast to every lane).
fn one_byte(e: &Expr) -> Option<(Buffer, Expr)> {
    let Expr::Cast(t, x) = e else { return None };
    let Expr::Load(b, idx) = &**x else { return None };
    let [i] = &idx[..] else { return None };
    (t.elem == DataType::I32 && t.lanes == 1 && b.elem() == DataType::I8 && i.ty().lanes == 1)
        .then(|| (b.clone(), i.clone()))
}

/// The two shapes of a dot product's term: output channels as lanes (a
/// broadcast byte of one word times 16 strided weight bytes) or pixels as
/// lanes (a byte of 16 words times one broadcast weight byte).
#[derive(Clone, Copy, PartialEq)]
enum Lanes {
    Channels,
    Pixels,
}

/// One byte product: the image's word (buffer, index) and byte, the weight's
/// (buffer, index of byte `j` or its ramp's base).
struct Product {
    lanes: Lanes,
    image: Buffer,
    at: Expr,
    byte: i64,
    weight: Buffer,
    base: Expr,
}

fn product(e: &Expr) -> Option<Product> {
    let Expr::Bin(BinOp::Mul, a, b) = e else { return None };
    let channels = |x: &Expr, y: &Expr| {
        let (image, at, byte) = broadcast(x, |w| byte_of_word(w, 1))?;
        let (weight, base) = strided_bytes(y)?;
        Some(Product { lanes: Lanes::Channels, image, at, byte, weight, base })
    };
    let pixels = |x: &Expr, y: &Expr| {
        let (image, at, byte) = byte_of_word(x, LANES)?;
        let (weight, base) = broadcast(y, one_byte)?;
        Some(Product { lanes: Lanes::Pixels, image, at, byte, weight, base })
    };
    channels(a, b).or_else(|| channels(b, a)).or_else(|| pixels(a, b)).or_else(|| pixels(b, a))
}

/// `a − b` as a constant, where it simplifies to one (ramps: their bases).
fn offset(a: &Expr, b: &Expr) -> Option<i64> {
    let base = |e: &Expr| match e {
        Expr::Ramp { base, .. } => (**base).clone(),
        e => e.clone(),
    };
    simplify(&Expr::bin(BinOp::Sub, base(a), base(b)), &Bounds::new()).as_int()
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
    // Byte j of one word (per lane) of the image times weight byte j: one
    // word, the weight's bytes j apart, every byte once.
    let mut bytes = Vec::new();
    for p in &products {
        if p.lanes != first.lanes || p.image != first.image || p.weight != first.weight || p.at != first.at {
            return None;
        }
        if offset(&p.base, &first.base)? != p.byte - first.byte {
            return None;
        }
        bytes.push(p.byte);
    }
    bytes.sort_unstable();
    if bytes != (0..GROUP).collect::<Vec<_>>() {
        return None;
    }
    let lowest = products.iter().find(|p| p.byte == 0)?;
    let weight_lanes = if first.lanes == Lanes::Channels { LANES * GROUP as u16 } else { GROUP as u16 };
    let weight = Expr::Load(
        lowest.weight.clone(),
        vec![Expr::Ramp { base: Box::new(lowest.base.clone()), stride: Box::new(Expr::int(1)), lanes: weight_lanes }],
    );
    let image = Expr::Load(lowest.image.clone(), vec![lowest.at.clone()]);
    let acc_now = Expr::Load(acc.clone(), indices.to_vec());
    Some(Expr::Call(Intrinsic::DotU8I8, vec![acc_now, image, weight], TirType::scalar(DataType::I32).with_lanes(LANES)))
}
