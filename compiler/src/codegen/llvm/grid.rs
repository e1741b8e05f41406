//! Row reads on a grid of whole vectors. A depthwise convolution read in
//! place loads each input row once per window column: at columns `16j − 1`,
//! `16j` and `16j + 1` for output vector `j`, three loads that each span two
//! cache lines (a row of 56 floats starts on a 32-byte boundary at best).
//! Zen 5's load unit does two line accesses a cycle, a masked load split
//! over two lines about every 1.4 cycles (C microbenchmark): with 48 such
//! loads per 72 FMAs the loads, not the multiply-adds, bound the tile. In a
//! kernel marked with [`crate::codegen::GRID_ROW_ATTR`] such a read is the
//! vectors of its row at columns `16k` — one load each, shared by every
//! window column and output vector that covers it (LLVM merges the
//! identical loads) — and a shift of two of them (one permute). Shifts in of
//! zeros (column −1, the columns past the row) stay the masked load they
//! were, except on rows of one or two vectors, more than half of one filled
//! (14 × 14, 28 × 28): a permute with zeros. MobileNetV2's 56 × 56 kernel
//! 0.87× the time at one thread, 0.85× at two (Zen 5, `scripts/ab_kernels.py`;
//! a C model of the same loop 0.67×), its 28 × 28 ones 0.98–0.99×,
//! PP-LCNet's 0.96–1.01×; 7 × 7 rows keep their loads. A stride-2 read is
//! every other lane of the grid vectors its span covers: three permutes per
//! window row and output vector (see [`FnGen::grid_stride_two`]; the
//! schedule's figures in `schedule/conv2d/depthwise.rs`).

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, IntValue, VectorValue};
use kiln_ir::arith::{simplify, Bounds};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::transform::lane_of;
use crate::tir::{BinOp, Buffer, Expr};

/// `e` as a part without a constant term and that constant.
fn split_constant(e: &Expr) -> (Expr, i64) {
    if let Some(k) = e.as_int() {
        return (Expr::int(0), k);
    }
    let join = |a: Expr, b: Expr, sub: bool| match (a.as_int(), b.as_int()) {
        (_, Some(0)) => a,
        (Some(0), _) if !sub => b,
        _ if sub => a - b,
        _ => a + b,
    };
    match e {
        Expr::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let ((sa, ca), (sb, cb)) = (split_constant(a), split_constant(b));
            let sub = *op == BinOp::Sub;
            (join(sa, sb, sub), if sub { ca - cb } else { ca + cb })
        }
        e => (e.clone(), 0),
    }
}

/// Whether every value of integer `e` is a multiple of `w` (from its form:
/// sums and differences of multiples, products with a multiple).
fn multiple_of(e: &Expr, w: i64) -> bool {
    match e {
        Expr::Bin(BinOp::Add | BinOp::Sub, a, b) => multiple_of(a, w) && multiple_of(b, w),
        Expr::Bin(BinOp::Mul, a, b) => multiple_of(a, w) || multiple_of(b, w),
        e => e.as_int().is_some_and(|k| k % w == 0),
    }
}

/// How many stride-2 reads a kernel keeps for reuse, the latest first: a
/// read's permute is shared with the window column two columns on (see
/// [`FnGen::grid_stride_two`]), twice as many reads later as the tile has
/// vectors — up to a wide stride-2 tile's four. A tile of seven rows (a
/// 14 → 7 plane) re-reads instead: kept until its next window row reads the
/// same input row, each row's permute stayed live through the tile and
/// spilled (MobileNetV2's 14 → 7 kernel 1.10–1.20× slower, PP-LCNet's 5 × 5
/// one 1.13×).
const GRID_REUSE_READS: usize = 8;

impl<'ctx> FnGen<'_, 'ctx> {
    /// `buf[base + stride·lane]` for `n` lanes (stride 1 or 2), each lane
    /// zero where `lane_valid` (constant per lane; `None`: every lane) says
    /// so or where `uniform` (the same in every lane) is false, as whole
    /// vectors of the row on the grid (see the module). None where the
    /// kernel has no grid, or the read is not one a grid serves: not f32
    /// from a global buffer the kernel does not store to, a lane-invariant
    /// part that is not a multiple of the row, or lanes valid other than
    /// exactly those inside the row.
    pub(super) fn grid_load(
        &mut self,
        buf: &Buffer,
        (base, stride): (&Expr, i64),
        n: u32,
        uniform: Option<&Expr>,
        lane_valid: Option<&[bool]>,
    ) -> Result<Option<VectorValue<'ctx>>, CodegenError> {
        let Some(w) = self.grid_row else { return Ok(None) };
        if !self.features.masked_partial
            || buf.elem() != DataType::F32
            || buf.scope() != crate::tir::Scope::Global
            || self.stored.contains(&buf.id())
            || !n.is_power_of_two()
            || n * 32 > 512
            || !matches!(stride, 1 | 2)
            // Whole rows: a row that starts in the buffer ends in it.
            || buf.numel() as i64 % w != 0
        {
            return Ok(None);
        }
        let n64 = n as i64;
        let (row, offset) = split_constant(&simplify(base, &Bounds::new()));
        if !multiple_of(&row, w) {
            return Ok(None);
        }
        // The offset from a multiple of the row is a row start plus a column:
        // the column the lanes' validity says (column −1 of one row is the
        // address of column w − 1 of the row before).
        let inside = |col: i64| (0..w).contains(&col);
        let fits = |col: i64| {
            let expected = (0..n64).map(|k| inside(col + stride * k));
            match lane_valid {
                Some(v) => expected.eq(v.iter().copied()),
                None => expected.into_iter().all(|v| v),
            }
        };
        let near = offset.rem_euclid(w);
        let Some(col) = [near, near - w].into_iter().find(|&c| fits(c)) else { return Ok(None) };
        let row = GridRow { buf, start: (&row, offset - col), n, uniform };
        if stride == 2 {
            return self.grid_stride_two(row, col).map(Some);
        }
        // A shift in of zeros (a row's column −1, the columns past its end)
        // stays the one masked load it was, but on short rows (below).
        let at = col - col.rem_euclid(n64);
        let reaches = |c: i64| (0..n64).any(|k| inside(c + k));
        if at != col && !(reaches(at) && reaches(at + n64)) {
            if n != 16 || 2 * w <= n64 || w > 2 * n64 {
                return Ok(None);
            }
            let inside_at = if reaches(at) { at } else { at + n64 };
            return self.grid_shift_with_zeros(row, inside_at, col).map(Some);
        }
        self.grid_window(row, col).map(Some)
    }

    /// The `n` elements of a row of one or two vectors, more than half of
    /// one (14 × 14, 28 × 28), from column `col`: the grid vector at
    /// `inside_at` — the one of the two the lanes span that reaches into the
    /// row — shifted with zeros by one permute (`vpermt2ps`; for a generic
    /// shuffle with zeros LLVM picks `vexpandps` or `valignd`, and rows so
    /// ran 1.10–1.24× slower than masked loads) instead of a masked load of
    /// its own. Zen 5, per kernel in the model, one thread: PP-LCNet's 5 × 5
    /// 14 × 14 kernels 0.89–0.91×, MobileNetV2's 3 × 3 ones 0.94–0.99×,
    /// 28 × 28 ones 0.95–0.96× (both models); 7-wide rows 1.03–1.04× slower
    /// and 56-wide 1.00–1.02× (kept as masked loads). (LLVM 19 folds the
    /// intrinsic into a generic shuffle and emits half of these shifts as
    /// `vexpandps`: not measured.)
    fn grid_shift_with_zeros(
        &mut self,
        row: GridRow,
        inside_at: i64,
        col: i64,
    ) -> Result<VectorValue<'ctx>, CodegenError> {
        let n64 = row.n as i64;
        let v = self.grid_vector(row, inside_at)?;
        let zero = v.get_type().const_zero();
        // Lane k takes column col + k: from `v` (operand 0) or zeros (operand 1).
        let pick = self.shuffle_mask((0..n64).map(|k| {
            let c = col + k - inside_at;
            if (0..n64).contains(&c) {
                c
            } else {
                n64
            }
        }));
        let shifted =
            self.vector_intrinsic("llvm.x86.avx512.vpermi2var.ps.512", &[v.into(), pick.into(), zero.into()])?;
        Ok(shifted.into_vector_value())
    }

    /// Every other element of the row from column `col` (`n` of them), from
    /// the grid vectors `v0, v1, v2` at the multiples of `n` from `col`'s.
    /// Starting in `v0`'s first two columns it is one permute of `v0` and
    /// `v1`. Starting later, the lanes past `v0` are the stride-2 read that
    /// starts in `v1`'s first two columns — the permute another window
    /// column of the tile builds (a 3 × 3 window at stride 2 reads columns
    /// `2x − 1`, `2x` and `2x + 1`: the odd lanes of the pair are both the
    /// right column's read and most of the left one's), kept from one to the
    /// other (LLVM narrowed each to the lanes it used, and merged neither) —
    /// and one more permute takes `v0`'s lanes in front. Three permutes per
    /// window row and output vector where the even lanes of two shifted
    /// windows took four or five: the permutes, one a cycle, bound
    /// MobileNetV2's 112 → 56 kernel (51 per output row to 36 FMAs). Zen 5,
    /// per kernel in the model (`scripts/ab_kernels.py`, one thread): its
    /// 112 → 56 kernel 0.78–0.86×, 56 → 28 0.86–0.88×, 28 → 14 0.95×;
    /// PP-LCNet's 3 × 3 ones 0.78×, 0.85× and 0.91× (its kernel linked into a
    /// C harness, data in cache: 70 → 54–60 µs).
    fn grid_stride_two(&mut self, row: GridRow, col: i64) -> Result<VectorValue<'ctx>, CodegenError> {
        let n64 = row.n as i64;
        let shift = col.rem_euclid(n64);
        let at = col - shift;
        if shift <= 1 {
            let key = row.key(col);
            if let Some(v) = self.grid_value(&key) {
                return Ok(v);
            }
            let v0 = self.grid_vector(row, at)?;
            let v1 = self.grid_vector(row, at + n64)?;
            let v =
                self.b.build_shuffle_vector(v0, v1, self.shuffle_mask((0..n64).map(|k| shift + 2 * k)), "gridevens");
            let v = self.e(v)?;
            return Ok(self.keep_grid_value(key, v));
        }
        let w = self.grid_row.unwrap_or(0);
        let outside = |c: i64| c + n64 <= 0 || c >= w;
        if [at, at + n64, at + 2 * n64].into_iter().filter(|&c| !outside(c)).count() <= 1 {
            // One grid vector holds every lane (a row of one vector's column
            // −1): one permute of it with zeros, as the even lanes of the two
            // windows the lanes span. Through the read at `v1` below, the
            // permute of a tile row stays live from the window's right column
            // to its left one: MobileNetV2's 14 → 7 kernel (seven rows a tile)
            // spilled, 1.10–1.20× slower.
            let lo = self.grid_window(row, col)?;
            let hi = self.grid_window(row, col + n64)?;
            let v = self.b.build_shuffle_vector(lo, hi, self.shuffle_mask((0..n64).map(|k| 2 * k)), "gridevens");
            return self.e(v);
        }
        // Lanes `0..from_v0` come from v0; the rest are the read at `v1`'s column `later`.
        let from_v0 = (n64 - shift + 1) / 2;
        let later = shift + 2 * from_v0 - n64;
        let v0 = self.grid_vector(row, at)?;
        let rest = self.grid_stride_two(row, at + n64 + later)?;
        let front = self.shuffle_mask((0..n64).map(|k| if k < from_v0 { n64 + shift + 2 * k } else { k - from_v0 }));
        let v = self.b.build_shuffle_vector(rest, v0, front, "gridfront");
        self.e(v)
    }

    /// The `n` elements of the row from column `col` (zero outside the row):
    /// the grid vector there, or a shift of the two it spans.
    fn grid_window(&mut self, row: GridRow, col: i64) -> Result<VectorValue<'ctx>, CodegenError> {
        let n64 = row.n as i64;
        let shift = col.rem_euclid(n64);
        let at = col - shift;
        let lo = self.grid_vector(row, at)?;
        if shift == 0 {
            return Ok(lo);
        }
        let hi = self.grid_vector(row, at + n64)?;
        let v = self.b.build_shuffle_vector(lo, hi, self.shuffle_mask((0..n64).map(|k| shift + k)), "gridshift");
        self.e(v)
    }

    /// A constant shuffle mask of these lane indices.
    fn shuffle_mask(&self, lanes: impl Iterator<Item = i64>) -> VectorValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let m: Vec<IntValue> = lanes.map(|k| i32t.const_int(k as u64, false)).collect();
        VectorType::const_vector(&m)
    }

    /// A plain contiguous read `buf[Ramp(base, 1, n)]` as grid vectors (see
    /// [`Self::grid_load`]), every lane inside its row.
    pub(super) fn grid_plain_load(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<VectorValue<'ctx>>, CodegenError> {
        match idx {
            Expr::Ramp { base, stride, lanes } if stride.as_int() == Some(1) => {
                self.grid_load(buf, (base, 1), *lanes as u32, None, None)
            }
            _ => Ok(None),
        }
    }

    /// The value built for `key` in the block being emitted, among the last
    /// [`GRID_REUSE_READS`] kept.
    fn grid_value(&self, key: &str) -> Option<VectorValue<'ctx>> {
        let block = self.b.get_insert_block()?;
        self.grid_values.iter().find(|(b, k, _)| *b == block && k == key).map(|&(_, _, v)| v)
    }

    fn keep_grid_value(&mut self, key: String, v: VectorValue<'ctx>) -> VectorValue<'ctx> {
        if let Some(block) = self.b.get_insert_block() {
            if self.grid_values.len() == GRID_REUSE_READS {
                self.grid_values.pop_front();
            }
            self.grid_values.push_back((block, key, v));
        }
        v
    }

    /// The grid vector of `row` at column `col`: its lanes inside the row
    /// (columns `0..w`) under the row's `uniform` test, zero elsewhere — a
    /// plain load where every lane is read, a masked one where some are,
    /// none where none are.
    fn grid_vector(&mut self, row: GridRow, col: i64) -> Result<VectorValue<'ctx>, CodegenError> {
        let GridRow { buf, start: (row, row_start), n, uniform } = row;
        let w = self.grid_row.unwrap_or(0);
        let vt = self.vector_type(DataType::F32, n);
        let lanes: Vec<bool> = (0..n as i64).map(|k| (0..w).contains(&(col + k))).collect();
        if lanes.iter().all(|&l| !l) {
            return Ok(vt.const_zero());
        }
        let first = self.expr(&simplify(&(row.clone() + Expr::int(row_start + col)), &Bounds::new()))?.into_int_value();
        let origin = self.buffer_base(buf)?;
        // Not `inbounds`: a row's column −16 lies before a plane's first row (no lane of it is read).
        let ptr = self.e(compat::gep(&self.b, elem_type(self.ctx, DataType::F32), origin, &[first], "gridaddr"))?;
        if uniform.is_none() && lanes.iter().all(|&l| l) {
            let vptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "gridptr"))?;
            let v = self.e(compat::load(&self.b, vt, vptr, "grid"))?;
            if let Some(i) = v.as_instruction_value() {
                i.set_alignment(4).map_err(|m| llvm_err(&self.kernel, m))?;
            }
            return Ok(v.into_vector_value());
        }
        let bit = self.ctx.bool_type();
        let on: Vec<IntValue> = lanes.iter().map(|&l| bit.const_int(l as u64, false)).collect();
        let mask = self.lanes_if(uniform, VectorType::const_vector(&on))?;
        self.masked_load_at(ptr, vt, mask, vt.const_zero(), 4)
    }
}

/// The rows a grid read reads from: `buf`'s row starting at
/// `start.0 + start.1` (a multiple of the row and a constant), read `n` lanes
/// at a time, each load also under the `uniform` (same in every lane) test.
#[derive(Clone, Copy)]
struct GridRow<'e> {
    buf: &'e Buffer,
    start: (&'e Expr, i64),
    n: u32,
    uniform: Option<&'e Expr>,
}

impl GridRow<'_> {
    /// What a stride-2 read from column `col` reads, as a key of
    /// [`FnGen::grid_values`]: the same text is the same value while no store
    /// intervenes — the kernel stores to none of the buffers a grid serves.
    fn key(&self, col: i64) -> String {
        let (row, row_start) = self.start;
        format!("{} {row:?} {} {} {:?}", self.buf.id(), row_start + col, self.n, self.uniform)
    }
}

/// The value of each lane of a per-lane condition, where each is a constant.
pub(super) fn constant_lanes(c: &Expr, n: u32) -> Option<Vec<bool>> {
    (0..n as u16).map(|k| simplify(&lane_of(c, k), &Bounds::new()).as_int().map(|v| v != 0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::Var;

    #[test]
    fn a_row_start_and_its_column_are_told_apart() {
        let (c, r) = (Var::index("c"), Var::index("r"));
        let row = Expr::var(&c) * Expr::int(3136) + Expr::var(&r) * Expr::int(56);
        let (s, k) = split_constant(&(row.clone() + Expr::int(17)));
        assert_eq!((s.clone(), k), (row.clone(), 17));
        assert!(multiple_of(&s, 56));
        assert!(!multiple_of(&(row.clone() + Expr::var(&r)), 56));
        assert_eq!(split_constant(&(row.clone() - Expr::int(1))), (row.clone(), -1));
        // A constant inside the sum (a row start's −56) is found too.
        let nested = (Expr::var(&c) * Expr::int(3136) - Expr::int(56)) + Expr::var(&r) * Expr::int(56) + Expr::int(15);
        let (s, k) = split_constant(&nested);
        assert_eq!(k, -41);
        assert!(multiple_of(&s, 56));
    }
}
