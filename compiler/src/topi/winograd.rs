//! Computes of the Winograd input and output transforms (see
//! `kiln_ir::relay::op::winograd_matrices`).
//!
//! A transform matrix is a function of the output element's position in its
//! tile (ξ, ν for the input transform; the pixel's row and column in the
//! tile for the output transform). The computes write it as a chain of
//! selects on that position, each branch the explicit linear combination of
//! its row — no multiplication by 0 or ±1. The schedules unroll the position
//! loops; each copy then folds its selects (UnrollLoop simplifies) to the one
//! combination it needs, and LLVM shares the loads and partial sums between
//! copies.

use std::sync::Arc;

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::op::{winograd_matrices, WinogradTiles};
use kiln_ir::relay::{OpMap, Type};
use kiln_ir::DataType;
use kiln_ir::OpError;

use super::nn::pad_nchw;
use super::{one, out_tensor, select, zero, ComputeCall, ComputeFn};
use crate::te::{compute, Tensor};
use crate::tir::{BinOp, CmpOp, Expr};

/// `Σ coef·term`, skipping zero coefficients and multiplications by ±1.
fn linear(terms: impl IntoIterator<Item = (f64, Expr)>, dt: DataType) -> Expr {
    let mut acc: Option<Expr> = None;
    for (c, e) in terms {
        if c == 0.0 {
            continue;
        }
        let negative = c < 0.0;
        let e = if c.abs() == 1.0 { e } else { Expr::constant(c.abs(), dt) * e };
        acc = Some(match (acc, negative) {
            (None, false) => e,
            (None, true) => Expr::bin(BinOp::Sub, zero(dt), e),
            (Some(a), false) => a + e,
            (Some(a), true) => Expr::bin(BinOp::Sub, a, e),
        });
    }
    acc.unwrap_or_else(|| zero(dt))
}

/// `branches[index]` as a select chain (the last branch is the default).
fn by_index(index: &Expr, mut branches: Vec<Expr>) -> Expr {
    let mut e = branches.pop().expect("at least one branch");
    while let Some(b) = branches.pop() {
        e = select(Expr::cmp(CmpOp::Eq, index.clone(), Expr::int(branches.len() as i64)), b, e);
    }
    e
}

fn div(a: Expr, c: usize) -> Expr {
    Expr::bin(BinOp::FloorDiv, a, Expr::int(c as i64))
}

fn rem(a: Expr, c: usize) -> Expr {
    Expr::bin(BinOp::FloorMod, a, Expr::int(c as i64))
}

/// `U[ξ, ν, k, c] = (G·g·Gᵀ)[ξ, ν]` of the 3 × 3 kernel `g = W[k, c]`.
/// (AlterOpLayout's weights are constants, folded by the interpreter; this
/// compute serves a weight known only at run time.)
fn weight_transform(w: &Tensor, attrs: &Attrs, out: &Type) -> Result<Tensor, OpError> {
    let (shape, dt) = out_tensor(out)?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    Ok(compute("winograd_weight", &shape, |i| {
        let (xi, nu, k, c) = (&i[0], &i[1], &i[2], &i[3]);
        let g = |r: usize, s: usize| w.at(&[k.clone(), c.clone(), Expr::int(r as i64), Expr::int(s as i64)]);
        // (g·Gᵀ)[r, ν], by ν.
        let right: Vec<Expr> = (0..3)
            .map(|r| by_index(nu, (0..t.alpha).map(|v| linear((0..3).map(|s| (t.g[v][s], g(r, s))), dt)).collect()))
            .collect();
        by_index(xi, (0..t.alpha).map(|x| linear((0..3).map(|r| (t.g[x][r], right[r].clone())), dt)).collect())
    }))
}

/// `V[ξ·α + ν, c, p] = (Bᵀ·d·B)[ξ, ν]` for tile `p` of channel `c`, in
/// three stages over the same `[positions, channels, tiles]` space: the tile
/// `D[i·α + j] = d[i, j]` gathered from the padded image, the right factor
/// `R[i·α + ν] = (d·B)[i, ν]`, then `V` from `R`. The CPU schedule computes
/// the first two per vector of tiles (each input gathered once, each partial
/// sum formed once: 2·α³ terms instead of α⁴), which also keeps the unrolled
/// kernel small for LLVM; other schedules inline them back.
fn input_transform(x: &Tensor, attrs: &Attrs, out: &Type) -> Result<Tensor, OpError> {
    let (shape, dt) = out_tensor(out)?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    let (tiles, pads) = WinogradTiles::of_input(x.shape(), attrs)?;
    let s = x.shape();
    let (a, m, real) = (t.alpha, t.m as i64, tiles.count);
    // The padded image covers every tile whole (zeros past the map): the
    // schedule computes it once per channel, and the tiles read it plainly.
    let (h, w) = ((tiles.rows * t.m + 2) as i64, (tiles.cols * t.m + 2) as i64);
    let far = [pads[0], pads[1], h - s[2] as i64 - pads[0], w - s[3] as i64 - pads[1]];
    let padded = pad_nchw(x, far, zero(dt));
    let tile = compute(WINOGRAD_TILE_STAGE, &shape, |i| {
        let (q, c, p) = (&i[0], &i[1], &i[2]);
        // Tiles past the real ones (vector padding) read the last image; `V` gives 0 there.
        let n = Expr::bin(BinOp::Min, div(p.clone(), tiles.rows * tiles.cols), Expr::int(s[0] as i64 - 1));
        let (ty, tx) = (rem(div(p.clone(), tiles.cols), tiles.rows), rem(p.clone(), tiles.cols));
        let h = ty * Expr::int(m) + div(q.clone(), a);
        let w = tx * Expr::int(m) + rem(q.clone(), a);
        padded.at(&[n, c.clone(), h, w])
    });
    let right = compute(WINOGRAD_RIGHT_STAGE, &shape, |i| {
        let (q, c, p) = (&i[0], &i[1], &i[2]);
        let row = div(q.clone(), a) * Expr::int(a as i64);
        let d = |j: usize| tile.at(&[row.clone() + Expr::int(j as i64), c.clone(), p.clone()]);
        by_index(&rem(q.clone(), a), (0..a).map(|v| linear((0..a).map(|j| (t.bt[v][j], d(j))), dt)).collect())
    });
    Ok(compute("winograd_input", &shape, |i| {
        let (q, c, p) = (&i[0], &i[1], &i[2]);
        let nu = rem(q.clone(), a);
        let r = |i: usize| right.at(&[Expr::int((i * a) as i64) + nu.clone(), c.clone(), p.clone()]);
        let xi = div(q.clone(), a);
        let v = by_index(&xi, (0..a).map(|row| linear((0..a).map(|i| (t.bt[row][i], r(i))), dt)).collect());
        if shape[2] > real {
            select(Expr::cmp(CmpOp::Lt, p.clone(), Expr::int(real as i64)), v, zero(dt))
        } else {
            v
        }
    }))
}

/// The names of the input transform's intermediate stages (see
/// [`input_transform`]), which its CPU schedule places.
const WINOGRAD_TILE_STAGE: &str = "winograd_tile";
const WINOGRAD_RIGHT_STAGE: &str = "winograd_right";
/// Both, for the lowering that keeps them and the schedules that find them.
pub(crate) const WINOGRAD_INPUT_STAGES: [&str; 2] = [WINOGRAD_TILE_STAGE, WINOGRAD_RIGHT_STAGE];

/// `Y[r·m + s, k, p] = (Aᵀ·M·A)[r, s]` of tile `p`.
fn output_transform(mt: &Tensor, attrs: &Attrs, out: &Type) -> Result<Tensor, OpError> {
    let (shape, dt) = out_tensor(out)?;
    let t = winograd_matrices(attrs.int("tile_size")?)?;
    let (a, m) = (t.alpha, t.m);
    Ok(compute("winograd_output", &shape, |i| {
        let (q, k, p) = (&i[0], &i[1], &i[2]);
        let at = |xi: usize, nu: usize| mt.at(&[Expr::int((xi * a + nu) as i64), k.clone(), p.clone()]);
        // (M·A)[ξ, s], by the tile column s.
        let col = rem(q.clone(), m);
        let right: Vec<Expr> = (0..a)
            .map(|xi| by_index(&col, (0..m).map(|s| linear((0..a).map(|nu| (t.at[s][nu], at(xi, nu))), dt)).collect()))
            .collect();
        let row = div(q.clone(), m);
        by_index(&row, (0..m).map(|r| linear((0..a).map(|xi| (t.at[r][xi], right[xi].clone())), dt)).collect())
    }))
}

/// `y[n, k, y, x] = Y[(y % m)·m + x % m, k, tile of (n, y, x)]`.
fn tiles_to_nchw(yt: &Tensor, attrs: &Attrs, out: &Type) -> Result<Tensor, OpError> {
    let (shape, _) = out_tensor(out)?;
    let m = winograd_matrices(attrs.int("tile_size")?)?.m;
    let tiles = WinogradTiles::new(shape[0], shape[2], shape[3], m)?;
    Ok(compute("winograd_nchw", &shape, |i| {
        let (n, k, y, x) = (&i[0], &i[1], &i[2], &i[3]);
        let p = (n.clone() * Expr::int(tiles.rows as i64) + div(y.clone(), m)) * Expr::int(tiles.cols as i64)
            + div(x.clone(), m);
        let q = rem(y.clone(), m) * Expr::int(m as i64) + rem(x.clone(), m);
        yt.at(&[q, k.clone(), p])
    }))
}

/// Attach the Winograd transforms' computes to their operators.
pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    type Transform = fn(&Tensor, &Attrs, &Type) -> Result<Tensor, OpError>;
    let transforms: [(&str, Transform); 4] = [
        ("nn.contrib_conv2d_winograd_weight_transform", weight_transform),
        ("nn.contrib_winograd_input_transform", input_transform),
        ("nn.contrib_winograd_output_transform", output_transform),
        ("nn.contrib_winograd_tiles_to_nchw", tiles_to_nchw),
    ];
    for (op, transform) in transforms {
        m.set(op, Arc::new(move |c: &ComputeCall| one(transform(&c.tensor(0)?, c.attrs, c.out)?)));
    }
}
