//! Computes of the `nn.*` operators.

use std::sync::Arc;

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::OpMap;
use kiln_ir::OpError;

use super::{expand_ints, in_range, one, out_tensor, select, ComputeCall, ComputeFn, TeValue};
use crate::te::{compute, reduce, reduce_axis, sum, Tensor};
use crate::tir::{BinOp, Combiner, Expr, Intrinsic, TirType};

fn at2(t: &Tensor, a: Expr, b: Expr) -> Expr {
    t.at(&[a, b])
}

/// `pad[n, c, h, w]`: `x` with `pad_value` outside, for pooling and convolution.
pub(super) fn pad_nchw(x: &Tensor, pads: [i64; 4], pad_value: Expr) -> Tensor {
    if pads == [0; 4] {
        return x.clone();
    }
    let s = x.shape().to_vec();
    let shape = [s[0], s[1], s[2] + (pads[0] + pads[2]) as usize, s[3] + (pads[1] + pads[3]) as usize];
    compute("pad", &shape, |i| padded_at(x, pads, &pad_value, [&i[0], &i[1], &i[2], &i[3]]))
}

/// `x` at padded position `[n, c, h, w]`, `pad_value` outside.
fn padded_at(x: &Tensor, pads: [i64; 4], pad_value: &Expr, [n, c, h, w]: [&Expr; 4]) -> Expr {
    let s = x.shape();
    let h = h.clone() - Expr::int(pads[0]);
    let w = w.clone() - Expr::int(pads[1]);
    let inside = Expr::and(in_range(&h, 0, s[2] as i64), in_range(&w, 0, s[3] as i64));
    // Clamp the read so that the unselected side never indexes out of bounds.
    let hc = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, h, Expr::int(0)), Expr::int(s[2] as i64 - 1));
    let wc = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, w, Expr::int(0)), Expr::int(s[3] as i64 - 1));
    select(inside, x.at(&[n.clone(), c.clone(), hc, wc]), pad_value.clone())
}

/// `pad[n, c, h, phase, w2]`: the padded input with each row split into its
/// even and odd columns (padded column `2·w2 + phase`). A stride-2 window
/// then reads contiguous columns of one phase (`w = 2·ow + rx` is phase
/// `rx % 2`, column `ow + rx / 2`) instead of every other element.
fn pad_nchw_phases(x: &Tensor, pads: [i64; 4], pad_value: Expr) -> Tensor {
    let s = x.shape().to_vec();
    let width = s[3] + (pads[1] + pads[3]) as usize;
    let shape = [s[0], s[1], s[2] + (pads[0] + pads[2]) as usize, 2, width.div_ceil(2)];
    compute("pad", &shape, |i| {
        let w = i[4].clone() * Expr::int(2) + i[3].clone();
        padded_at(x, pads, &pad_value, [&i[0], &i[1], &i[2], &w])
    })
}

/// `pad[n, oh, c, ow]`: the input at each output pixel of a 1 × 1 window
/// (every `stride`-th row and column), one output row of every channel
/// contiguous. A packed 1 × 1 convolution's tile broadcasts a few columns of
/// one channel per step: from NCHW those are 7 floats of a 196-byte row on a
/// 7 × 7 map, one cache line each, and the tiles of late layers ran at 45 %
/// of the FMA peak streaming them from L2; from rows they are consecutive.
/// (Named `pad` like the padded input: it is the convolution's materialized
/// input stage.)
fn input_rows(x: &Tensor, strides: &[i64], out_h: usize, out_w: usize) -> Tensor {
    let s = x.shape().to_vec();
    let xc = x.clone();
    let (sh, sw) = (strides[0], strides[1]);
    compute("pad", &[s[0], out_h, s[1], out_w], |i| {
        xc.at(&[i[0].clone(), i[2].clone(), i[1].clone() * Expr::int(sh), i[3].clone() * Expr::int(sw)])
    })
}

fn four(v: &[i64]) -> [i64; 4] {
    [v[0], v[1], v[2], v[3]]
}

/// Attach this module's computes to their operators.
pub(super) fn register(m: &mut OpMap<ComputeFn>) {
    m.set_all(&["nn.dense", "nn.matmul"], Arc::new(dense));
    m.set("nn.contrib_dense_pack", Arc::new(contrib_dense_pack));
    m.set("nn.contrib_batch_matmul_pack", Arc::new(contrib_batch_matmul_pack));
    m.set("nn.batch_matmul", Arc::new(batch_matmul));
    m.set("nn.bias_add", Arc::new(bias_add));
    m.set("nn.conv2d", Arc::new(conv2d));
    m.set_all(&["nn.max_pool2d", "nn.avg_pool2d"], Arc::new(pool2d));
    m.set("nn.global_avg_pool2d", Arc::new(global_avg_pool2d));
    m.set("nn.adaptive_avg_pool2d", Arc::new(adaptive_avg_pool2d));
    m.set("nn.conv2d_transpose", Arc::new(conv2d_transpose));
    m.set("nn.softmax", Arc::new(softmax));
    m.set("nn.batch_norm", Arc::new(batch_norm));
    m.set("nn.layer_norm", Arc::new(layer_norm));
    m.set("nn.dropout", Arc::new(dropout));
}

fn dense(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let (ta, tb) =
        if c.op == "nn.dense" { (false, true) } else { (c.attrs.bool("transpose_a")?, c.attrs.bool("transpose_b")?) };
    let k_dim = if ta { x.shape()[0] } else { x.shape()[x.ndim() - 1] };
    let k = reduce_axis(k_dim, "k");
    let kv = Expr::var(&k.0);
    one(compute(c.op.trim_start_matches("nn."), &shape, |i| {
        let n = i.len();
        let lhs = if ta {
            at2(&x, kv.clone(), i[n - 2].clone())
        } else {
            let mut idx = i[..n - 1].to_vec();
            idx.push(kv.clone());
            x.at(&idx)
        };
        let rhs = if tb { at2(&w, i[n - 1].clone(), kv.clone()) } else { at2(&w, kv.clone(), i[n - 1].clone()) };
        sum(lhs * rhs, &[k.clone()])
    }))
}

/// Index `i` of a blocked axis as (block, lane): `i / b`, `i % b`.
fn blocked(i: &Expr, b: &Expr) -> (Expr, Expr) {
    (Expr::bin(BinOp::FloorDiv, i.clone(), b.clone()), Expr::bin(BinOp::FloorMod, i.clone(), b.clone()))
}

fn contrib_dense_pack(c: &ComputeCall) -> Result<TeValue, OpError> {
    // Weight [units / b, in, b]: column j is lane j % b of panel j / b.
    let (shape, _) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let b = Expr::int(w.shape()[2] as i64);
    let k = reduce_axis(x.shape()[x.ndim() - 1], "k");
    let kv = Expr::var(&k.0);
    one(compute("dense_pack", &shape, |i| {
        let n = i.len();
        let mut idx = i[..n - 1].to_vec();
        idx.push(kv.clone());
        let (panel, lane) = blocked(&i[n - 1], &b);
        sum(x.at(&idx) * w.at(&[panel, kv.clone(), lane]), &[k.clone()])
    }))
}

fn batch_matmul(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    let (ta, tb) = (c.attrs.bool("transpose_a")?, c.attrs.bool("transpose_b")?);
    let k_dim = if ta { a.shape()[1] } else { a.shape()[2] };
    let k = reduce_axis(k_dim, "k");
    let kv = Expr::var(&k.0);
    let batch = |t: &Tensor, i: &Expr| if t.shape()[0] == 1 { Expr::int(0) } else { i.clone() };
    one(compute("batch_matmul", &shape, |i| {
        let lhs = if ta {
            a.at(&[batch(&a, &i[0]), kv.clone(), i[1].clone()])
        } else {
            a.at(&[batch(&a, &i[0]), i[1].clone(), kv.clone()])
        };
        let rhs = if tb {
            b.at(&[batch(&b, &i[0]), i[2].clone(), kv.clone()])
        } else {
            b.at(&[batch(&b, &i[0]), kv.clone(), i[2].clone()])
        };
        sum(lhs * rhs, &[k.clone()])
    }))
}

fn contrib_batch_matmul_pack(c: &ComputeCall) -> Result<TeValue, OpError> {
    // A [batch, units / r, in, r]: row i is lane i % r of panel i / r.
    let (shape, _) = c.out_tensor()?;
    let (a, b) = (c.tensor(0)?, c.tensor(1)?);
    let r = Expr::int(a.shape()[3] as i64);
    let k = reduce_axis(a.shape()[2], "k");
    let kv = Expr::var(&k.0);
    one(compute("batch_matmul", &shape, |i| {
        let (panel, lane) = blocked(&i[1], &r);
        let lhs = a.at(&[i[0].clone(), panel, kv.clone(), lane]);
        sum(lhs * b.at(&[i[0].clone(), kv.clone(), i[2].clone()]), &[k.clone()])
    }))
}

fn bias_add(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, _) = c.out_tensor()?;
    let (x, b) = (c.tensor(0)?, c.tensor(1)?);
    let axis = c.attrs.int("axis")?;
    let axis = if axis < 0 { axis + shape.len() as i64 } else { axis } as usize;
    one(compute("bias_add", &shape, |i| x.at(i) + b.at(&[i[axis].clone()])))
}

fn conv2d(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let strides = expand_ints(c.attrs, "strides", 2)?;
    let dilation = expand_ints(c.attrs, "dilation", 2)?;
    let pads = four(&expand_ints(c.attrs, "padding", 4)?);
    let groups = c.attrs.int("groups")?.max(1) as usize;
    // OIHW, or OIHW<k>o: [O/k, I, KH, KW, k], read at [oc / k, …, oc % k].
    let block = kiln_ir::relay::op::conv2d_weight_block(c.attrs)?;
    let o = w.shape()[0] * block.unwrap_or(1);
    let (icpg, kh, kw) = (w.shape()[1], w.shape()[2], w.shape()[3]);
    let opg = (o / groups).max(1) as i64;
    // A depthwise window of stride 2 along rows reads a phase-split image.
    let phases = groups > 1 && icpg == 1 && block.is_none() && strides[1] == 2 && dilation[1] == 1;
    // A packed 1 × 1 window reads its input as rows of every channel.
    let rows = block.is_some() && kh == 1 && kw == 1 && pads == [0; 4];
    let padded = if phases {
        pad_nchw_phases(&x, pads, Expr::constant(0.0, dt))
    } else if rows {
        input_rows(&x, &strides, shape[2], shape[3])
    } else {
        pad_nchw(&x, pads, Expr::constant(0.0, dt))
    };
    let (rc, rh, rw) = (reduce_axis(icpg, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx"));
    let (c, y, z) = (Expr::var(&rc.0), Expr::var(&rh.0), Expr::var(&rw.0));
    one(compute("conv2d", &shape, |i| {
        let group = Expr::bin(BinOp::FloorDiv, i[1].clone(), Expr::int(opg));
        let ic = group * Expr::int(icpg as i64) + c.clone();
        let h = i[2].clone() * Expr::int(strides[0]) + y.clone() * Expr::int(dilation[0]);
        let ww = i[3].clone() * Expr::int(strides[1]) + z.clone() * Expr::int(dilation[1]);
        let data = if phases {
            let two = Expr::int(2);
            let (phase, column) = (
                Expr::bin(BinOp::FloorMod, z.clone(), two.clone()),
                i[3].clone() + Expr::bin(BinOp::FloorDiv, z.clone(), two),
            );
            padded.at(&[i[0].clone(), ic, h, phase, column])
        } else if rows {
            padded.at(&[i[0].clone(), i[2].clone(), ic, i[3].clone()])
        } else {
            padded.at(&[i[0].clone(), ic, h, ww])
        };
        let weight = match block {
            None => w.at(&[i[1].clone(), c.clone(), y.clone(), z.clone()]),
            Some(k) => {
                let (ob, oi) = blocked(&i[1], &Expr::int(k as i64));
                w.at(&[ob, c.clone(), y.clone(), z.clone(), oi])
            }
        };
        sum(data * weight, &[rc.clone(), rh.clone(), rw.clone()])
    }))
}

/// The name of a max pooling's row-maximum stage (see [`pool2d`]), which
/// its CPU schedule places.
pub(crate) const POOL_ROWS_STAGE: &str = "pool_rows";

/// Whether a max pooling with `attrs` reads its window's rows through a
/// [`POOL_ROWS_STAGE`] (windows of several rows).
pub(crate) fn has_pool_rows(attrs: &Attrs) -> bool {
    expand_ints(attrs, "pool_size", 2).is_ok_and(|p| p[0] > 1)
}

fn pool2d(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let pool = expand_ints(c.attrs, "pool_size", 2)?;
    let strides = expand_ints(c.attrs, "strides", 2)?;
    let dilation = expand_ints(c.attrs, "dilation", 2)?;
    let pads = four(&expand_ints(c.attrs, "padding", 4)?);
    let is_max = c.op == "nn.max_pool2d";
    // ceil_mode may read past the padded input: pad the far side enough for every window.
    let (h, w) = (x.shape()[2] as i64, x.shape()[3] as i64);
    let need_h = (shape[2] as i64 - 1) * strides[0] + (pool[0] - 1) * dilation[0] + 1;
    let need_w = (shape[3] as i64 - 1) * strides[1] + (pool[1] - 1) * dilation[1] + 1;
    let far = [pads[0], pads[1], (need_h - h - pads[0]).max(pads[2]), (need_w - w - pads[1]).max(pads[3])];
    let pad_value = if is_max { crate::tir::Combiner::Max.identity(dt) } else { Expr::constant(0.0, dt) };
    let padded = pad_nchw(&x, far, pad_value);
    let (ry, rx) = (reduce_axis(pool[0] as usize, "ry"), reduce_axis(pool[1] as usize, "rx"));
    let (y, z) = (Expr::var(&ry.0), Expr::var(&rx.0));
    let window = |i: &[Expr]| {
        let hh = i[2].clone() * Expr::int(strides[0]) + y.clone() * Expr::int(dilation[0]);
        let ww = i[3].clone() * Expr::int(strides[1]) + z.clone() * Expr::int(dilation[1]);
        (hh, ww)
    };
    if is_max && has_pool_rows(c.attrs) {
        // Separable: the maximum over the window's rows first, along whole
        // contiguous rows (a stage the CPU schedule computes per output row),
        // then over its columns — per output row `ph` row loads and `pw`
        // strided ones instead of `ph · pw` strided ones. A maximum is
        // associative (a NaN anywhere wins either way).
        // Laid out [N, C, columns, output rows]: FuseSiblingLoops then fuses
        // its nest with the pooling's over the images and channels only, and
        // the schedule computes it per output row (a contiguous row).
        let rows = compute(POOL_ROWS_STAGE, &[shape[0], shape[1], need_w as usize, shape[2]], |i| {
            let row = |k: i64| {
                let hh = i[3].clone() * Expr::int(strides[0]) + Expr::int(k * dilation[0]);
                padded.at(&[i[0].clone(), i[1].clone(), hh, i[2].clone()])
            };
            (1..pool[0]).fold(row(0), |acc, k| Expr::bin(BinOp::Max, acc, row(k)))
        });
        return one(compute("pool", &shape, |i| {
            let ww = i[3].clone() * Expr::int(strides[1]) + z.clone() * Expr::int(dilation[1]);
            reduce(Combiner::Max, rows.at(&[i[0].clone(), i[1].clone(), ww, i[2].clone()]), &[rx.clone()])
        }));
    }
    let combiner = if is_max { Combiner::Max } else { Combiner::Sum };
    let pooled = compute("pool", &shape, |i| {
        let (hh, ww) = window(i);
        reduce(combiner, padded.at(&[i[0].clone(), i[1].clone(), hh, ww]), &[ry.clone(), rx.clone()])
    });
    if is_max {
        return one(pooled);
    }
    let include_pad = c.attrs.bool("count_include_pad")?;
    let (ph, pw) = (pool[0], pool[1]);
    one(compute("avg_pool2d", &shape, |i| {
        // The number of window positions `start + k·dil` (k < p) inside the
        // input (or inside the padding too): k from ⌈(clo − start)/dil⌉ to
        // ⌊(chi − 1 − start)/dil⌋, clamped to the window.
        let count = |o: &Expr, stride: i64, dil: i64, p: i64, lo: i64, hi: i64, extent: i64| {
            let start = o.clone() * Expr::int(stride) - Expr::int(lo);
            let (clo, chi) = if include_pad { (-lo, extent + hi) } else { (0, extent) };
            let first = Expr::int(0) - Expr::bin(BinOp::FloorDiv, start.clone() - Expr::int(clo), Expr::int(dil));
            let first = Expr::bin(BinOp::Max, first, Expr::int(0));
            let last = Expr::bin(BinOp::FloorDiv, Expr::int(chi - 1) - start, Expr::int(dil));
            let last = Expr::bin(BinOp::Min, last, Expr::int(p - 1));
            Expr::bin(BinOp::Max, last - first + Expr::int(1), Expr::int(0))
        };
        let ch = count(&i[2], strides[0], dilation[0], ph, pads[0], pads[2], h);
        let cw = count(&i[3], strides[1], dilation[1], pw, pads[1], pads[3], w);
        let n = Expr::cast(TirType::scalar(dt), Expr::bin(BinOp::Max, ch * cw, Expr::int(1)));
        Expr::bin(BinOp::Div, pooled.at(i), n)
    }))
}

/// The mean of each adaptive bin: a window of the widest bin's size, masked
/// to the bin (`start = ⌊o·I/O⌋`, `end = ⌈(o+1)·I/O⌉`).
fn adaptive_avg_pool2d(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let (ih, iw) = (x.shape()[2], x.shape()[3]);
    let widest = |size: usize, out: usize| {
        (0..out).map(|o| kiln_ir::relay::op::adaptive_bin(o, size, out)).map(|(a, b)| b - a).max().unwrap_or(1).max(1)
    };
    let (ry, rx) = (reduce_axis(widest(ih, shape[2]), "ry"), reduce_axis(widest(iw, shape[3]), "rx"));
    let (y, z) = (Expr::var(&ry.0), Expr::var(&rx.0));
    // start and end of output position `o`'s bin along an axis of `size` (to `out`).
    let bin = |o: &Expr, size: usize, out: usize| {
        let (size, out) = (size as i64, out as i64);
        let start = Expr::bin(BinOp::FloorDiv, o.clone() * Expr::int(size), Expr::int(out));
        let end = Expr::bin(
            BinOp::FloorDiv,
            (o.clone() + Expr::int(1)) * Expr::int(size) + Expr::int(out - 1),
            Expr::int(out),
        );
        (start, end)
    };
    let clamp = |e: Expr, size: usize| Expr::bin(BinOp::Min, e, Expr::int(size as i64 - 1));
    let summed = compute("adaptive_pool_sum", &shape, |i| {
        let ((y0, y1), (z0, z1)) = (bin(&i[2], ih, shape[2]), bin(&i[3], iw, shape[3]));
        let (h, w) = (y0 + y.clone(), z0 + z.clone());
        let inside =
            Expr::and(Expr::cmp(crate::tir::CmpOp::Lt, h.clone(), y1), Expr::cmp(crate::tir::CmpOp::Lt, w.clone(), z1));
        let value = x.at(&[i[0].clone(), i[1].clone(), clamp(h, ih), clamp(w, iw)]);
        sum(select(inside, value, Expr::constant(0.0, dt)), &[ry.clone(), rx.clone()])
    });
    one(compute("adaptive_avg_pool2d", &shape, |i| {
        let ((y0, y1), (z0, z1)) = (bin(&i[2], ih, shape[2]), bin(&i[3], iw, shape[3]));
        let count = Expr::cast(TirType::scalar(dt), (y1 - y0) * (z1 - z0));
        Expr::bin(BinOp::Div, summed.at(i), count)
    }))
}

/// Transposed convolution as a gather: output pixel `y` takes input row
/// `(y + pad − ky·dilation) / stride` of each kernel row where that divides
/// exactly and lands inside the input.
fn conv2d_transpose(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let (x, w) = (c.tensor(0)?, c.tensor(1)?);
    let t = kiln_ir::relay::op::ConvTranspose2d::of(x.shape(), w.shape(), c.attrs)?;
    let cpg = x.shape()[1] / t.groups;
    let opg = t.out_per_group as i64;
    let (rc, ry, rx) = (reduce_axis(cpg, "rc"), reduce_axis(t.kernel[0], "ry"), reduce_axis(t.kernel[1], "rx"));
    let (rcv, yv, zv) = (Expr::var(&rc.0), Expr::var(&ry.0), Expr::var(&rx.0));
    let source = |o: &Expr, k: &Expr, axis: usize| {
        let n = o.clone() + Expr::int(t.padding[axis]) - k.clone() * Expr::int(t.dilation[axis]);
        let (s, size) = (t.strides[axis], x.shape()[2 + axis] as i64);
        let q = Expr::bin(BinOp::FloorDiv, n.clone(), Expr::int(s));
        let valid = Expr::and(
            Expr::cmp(crate::tir::CmpOp::Eq, Expr::bin(BinOp::FloorMod, n, Expr::int(s)), Expr::int(0)),
            in_range(&q, 0, size),
        );
        let read = Expr::bin(BinOp::Min, Expr::bin(BinOp::Max, q, Expr::int(0)), Expr::int(size - 1));
        (valid, read)
    };
    one(compute("conv2d_transpose", &shape, |i| {
        let group = Expr::bin(BinOp::FloorDiv, i[1].clone(), Expr::int(opg));
        let ic = group * Expr::int(cpg as i64) + rcv.clone();
        let (vy, hy) = source(&i[2], &yv, 0);
        let (vx, hx) = source(&i[3], &zv, 1);
        let product = x.at(&[i[0].clone(), ic.clone(), hy, hx])
            * w.at(&[ic, Expr::bin(BinOp::FloorMod, i[1].clone(), Expr::int(opg)), yv.clone(), zv.clone()]);
        sum(select(Expr::and(vy, vx), product, Expr::constant(0.0, dt)), &[rc.clone(), ry.clone(), rx.clone()])
    }))
}

fn global_avg_pool2d(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let (ry, rx) = (reduce_axis(x.shape()[2], "ry"), reduce_axis(x.shape()[3], "rx"));
    let area = (x.shape()[2] * x.shape()[3]) as f64;
    let total = compute("pool_sum", &shape, |i| {
        sum(x.at(&[i[0].clone(), i[1].clone(), Expr::var(&ry.0), Expr::var(&rx.0)]), &[ry.clone(), rx.clone()])
    });
    one(compute("global_avg_pool2d", &shape, |i| Expr::bin(BinOp::Div, total.at(i), Expr::constant(area, dt))))
}

/// A softmax's exponentials: LowerTE keeps them a stage of their own, which
/// the schedule computes one row at a time (`schedule_reduction`), so that
/// each is computed once for the row's sum and its normalized values, not
/// twice inlined into both.
pub(crate) const SOFTMAX_EXP_STAGE: &str = "softmax_exp";

fn softmax(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let x = c.tensor(0)?;
    let nd = shape.len() as i64;
    let axis = c.attrs.int("axis")?;
    let axis = (if axis < 0 { axis + nd } else { axis }) as usize;
    let mut red_shape = shape.clone();
    red_shape[axis] = 1;
    let r = reduce_axis(shape[axis], "k");
    let with_axis = |i: &[Expr], e: Expr| {
        let mut v = i.to_vec();
        v[axis] = e;
        v
    };
    let mx = compute("softmax_max", &red_shape, |i| {
        reduce(Combiner::Max, x.at(&with_axis(i, Expr::var(&r.0))), &[r.clone()])
    });
    let t = TirType::scalar(dt);
    let ex = compute(SOFTMAX_EXP_STAGE, &shape, |i| {
        Expr::call(Intrinsic::Exp, vec![x.at(i) - mx.at(&with_axis(i, Expr::int(0)))], t)
    });
    let r2 = reduce_axis(shape[axis], "k2");
    let total = compute("softmax_sum", &red_shape, |i| sum(ex.at(&with_axis(i, Expr::var(&r2.0))), &[r2.clone()]));
    one(compute("softmax", &shape, |i| Expr::bin(BinOp::Div, ex.at(i), total.at(&with_axis(i, Expr::int(0))))))
}

fn batch_norm(c: &ComputeCall) -> Result<TeValue, OpError> {
    let fields = c.out.as_tuple().ok_or("batch_norm returns a tuple")?;
    let (shape, dt) = out_tensor(&fields[0])?;
    let (x, gamma, beta, mean, var) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?, c.tensor(3)?, c.tensor(4)?);
    let nd = shape.len() as i64;
    let axis = c.attrs.int("axis")?;
    let axis = (if axis < 0 { axis + nd } else { axis }) as usize;
    let eps = c.attrs.float("epsilon")?;
    let (scale, center) = (c.attrs.bool("scale")?, c.attrs.bool("center")?);
    let t = TirType::scalar(dt);
    let y = compute("batch_norm", &shape, |i| {
        let c = [i[axis].clone()];
        let inv = Expr::call(Intrinsic::Rsqrt, vec![var.at(&c) + Expr::constant(eps, dt)], t);
        let mut v = (x.at(i) - mean.at(&c)) * inv;
        if scale {
            v = v * gamma.at(&c);
        }
        if center {
            v = v + beta.at(&c);
        }
        v
    });
    let (m2, v2) = (mean.clone(), var.clone());
    let mean_out = compute("bn_mean", mean.shape(), |i| m2.at(i));
    let var_out = compute("bn_var", var.shape(), |i| v2.at(i));
    Ok(TeValue::Tuple(vec![TeValue::Tensor(y), TeValue::Tensor(mean_out), TeValue::Tensor(var_out)]))
}

fn layer_norm(c: &ComputeCall) -> Result<TeValue, OpError> {
    let (shape, dt) = c.out_tensor()?;
    let (x, gamma, beta) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
    let nd = shape.len() as i64;
    let axis = c.attrs.int("axis")?;
    let axis = (if axis < 0 { axis + nd } else { axis }) as usize;
    let eps = c.attrs.float("epsilon")?;
    let (scale, center) = (c.attrs.bool("scale")?, c.attrs.bool("center")?);
    let n = shape[axis] as f64;
    let mut red_shape = shape.clone();
    red_shape[axis] = 1;
    let with_axis = |i: &[Expr], e: Expr| {
        let mut v = i.to_vec();
        v[axis] = e;
        v
    };
    let r = reduce_axis(shape[axis], "k");
    let s = compute("ln_sum", &red_shape, |i| sum(x.at(&with_axis(i, Expr::var(&r.0))), &[r.clone()]));
    let mean = compute("ln_mean", &red_shape, |i| Expr::bin(BinOp::Div, s.at(i), Expr::constant(n, dt)));
    let r2 = reduce_axis(shape[axis], "k2");
    let sq = compute("ln_sqsum", &red_shape, |i| {
        let d = x.at(&with_axis(i, Expr::var(&r2.0))) - mean.at(i);
        sum(d.clone() * d, &[r2.clone()])
    });
    let t = TirType::scalar(dt);
    one(compute("layer_norm", &shape, |i| {
        let m = mean.at(&with_axis(i, Expr::int(0)));
        let var = Expr::bin(BinOp::Div, sq.at(&with_axis(i, Expr::int(0))), Expr::constant(n, dt));
        let mut v = (x.at(i) - m) * Expr::call(Intrinsic::Rsqrt, vec![var + Expr::constant(eps, dt)], t);
        if scale {
            v = v * gamma.at(&[i[axis].clone()]);
        }
        if center {
            v = v + beta.at(&[i[axis].clone()]);
        }
        v
    }))
}

fn dropout(c: &ComputeCall) -> Result<TeValue, OpError> {
    let fields = c.out.as_tuple().ok_or("dropout returns a tuple")?;
    let (shape, _) = out_tensor(&fields[0])?;
    let x = c.tensor(0)?;
    let y = compute("dropout", &shape, |i| x.at(i));
    let (mshape, mdt) = out_tensor(&fields[1])?;
    let mask = compute("dropout_mask", &mshape, |_| Expr::constant(1.0, mdt));
    Ok(TeValue::Tuple(vec![TeValue::Tensor(y), TeValue::Tensor(mask)]))
}
