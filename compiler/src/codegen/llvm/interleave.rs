//! Interleaved stores: a statement sequence that stores `m` vectors at
//! `buf[Ramp(b + j, m, L)]` for `j` in `0..m`, one after another — a Winograd
//! output's tiles written back to NCHW rows, column `j` of every tile of a
//! row in one vector (see `schedule::winograd::schedule_tiles_to_nchw`) —
//! writes the `m·L` consecutive elements from `b`. The `m` values are
//! computed, their lanes interleaved by one shuffle, and stored as one
//! contiguous run, instead of `m·L` single-lane stores.

use inkwell::types::VectorType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, VectorValue};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{BinOp, Buffer, Expr, Scope, Stmt};

/// The most vectors interleaved into one run (a power of two).
const MAX_INTERLEAVED: i64 = 8;

/// `e` as a base and a constant offset: `B + c`, or `e` and 0.
fn constant_offset(e: &Expr) -> (&Expr, i64) {
    if let Expr::Bin(BinOp::Add, a, b) = e {
        if let Some(c) = b.as_int() {
            return (a, c);
        }
    }
    (e, 0)
}

/// The strided loads in `e` (`buf[Ramp(B + c, m, lanes)]`): buffer, the text
/// of `B`, `c` and the whole index.
fn strided_loads(e: &Expr, m: i64, lanes: u16, out: &mut Vec<(Buffer, String, i64, Expr)>) {
    if let Expr::Load(buf, idx) = e {
        if let [ramp @ Expr::Ramp { base, stride, lanes: l }] = &idx[..] {
            if stride.as_int() == Some(m) && *l == lanes {
                let (at, c) = constant_offset(base);
                out.push((buf.clone(), format!("{at:?}"), c, ramp.clone()));
            }
        }
    }
    e.for_each_child(|c| strided_loads(c, m, lanes, out));
}

/// A load that differs from one value of a group to the next: read as the
/// `m` vectors and interleaved (a tile's column), or, where they are
/// `buf[Ramp(B + c + j, m, L)]`, as the contiguous run they make (a residual).
enum RunLeaf {
    Interleaved(Vec<Expr>),
    Contiguous(Buffer, Expr),
}

/// The index of a placeholder load in [`widened`]'s expression: a whole
/// piece of `width` lanes.
fn piece_index(width: u16) -> Expr {
    Expr::Ramp { base: Box::new(Expr::int(0)), stride: Box::new(Expr::int(1)), lanes: width }
}

/// The `m` values of an interleaved group (`lanes` lanes each) as one
/// expression of `width` lanes over pieces of their run: each load that
/// differs between them becomes a load of a placeholder buffer, the piece
/// of its run (registered per piece, see `run_epilogue`); broadcasts widen;
/// everything else must be the same in every value. `None` where they differ
/// otherwise.
fn widened(values: &[&Expr], m: i64, lanes: u16, width: u16, leaves: &mut Vec<(Buffer, RunLeaf)>) -> Option<Expr> {
    let e0 = values[0];
    let same = values.iter().all(|v| *v == e0);
    if same && e0.ty().lanes == 1 {
        return Some(e0.clone());
    }
    match e0 {
        Expr::Broadcast(x, _) if same => Some(Expr::Broadcast(x.clone(), width)),
        Expr::Load(buf, _) if !same => {
            let mut indices = Vec::with_capacity(values.len());
            for v in values {
                let Expr::Load(b, idx) = v else { return None };
                let [i] = &idx[..] else { return None };
                if b.id() != buf.id() || i.ty().lanes != lanes {
                    return None;
                }
                indices.push(i.clone());
            }
            // A strided run: `Ramp(B + c + j, m, L)` for j in 0..m.
            let run = indices.iter().enumerate().all(|(j, i)| match (i, &indices[0]) {
                (Expr::Ramp { base, stride, .. }, Expr::Ramp { base: b0, .. }) => {
                    let ((at, c), (at0, c0)) = (constant_offset(base), constant_offset(b0));
                    stride.as_int() == Some(m) && at == at0 && c == c0 + j as i64
                }
                _ => false,
            });
            let leaf = match (&indices[0], run) {
                (Expr::Ramp { base, .. }, true) => {
                    let run =
                        Expr::Ramp { base: base.clone(), stride: Box::new(Expr::int(1)), lanes: lanes * m as u16 };
                    RunLeaf::Contiguous(buf.clone(), run)
                }
                _ => RunLeaf::Interleaved(values.iter().map(|v| (*v).clone()).collect()),
            };
            let piece =
                Buffer::new(&format!("run_piece_{}", leaves.len()), buf.elem(), vec![width as usize], Scope::Local);
            leaves.push((piece.clone(), leaf));
            Some(Expr::Load(piece, vec![piece_index(width)]))
        }
        Expr::Load(..) | Expr::Ramp { .. } | Expr::Broadcast(..) => None,
        _ => {
            // The same node in every value, its children widened in turn.
            let shape = |e: &Expr| e.map_children(|_| Expr::int(0));
            let s0 = shape(e0);
            if values.iter().any(|v| shape(v) != s0) {
                return None;
            }
            let children: Vec<Vec<Expr>> = values
                .iter()
                .map(|v| {
                    let mut c = Vec::new();
                    v.for_each_child(|x| c.push(x.clone()));
                    c
                })
                .collect();
            let mut wide = Vec::with_capacity(children[0].len());
            for i in 0..children[0].len() {
                let column: Vec<&Expr> = children.iter().map(|c| &c[i]).collect();
                wide.push(widened(&column, m, lanes, width, leaves)?);
            }
            let mut next = wide.into_iter();
            let rebuilt = e0.map_children(|_| next.next().expect("one per child"));
            Some(match rebuilt {
                Expr::Call(f, args, t) if t.lanes == lanes => Expr::Call(f, args, t.with_lanes(width)),
                Expr::Cast(t, x) if t.lanes == lanes => Expr::Cast(t.with_lanes(width), x),
                e => e,
            })
        }
    }
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// Loads `values` make at `buf[Ramp(B + c + j, m, lanes)]` for every `j`
    /// in `0..m` — the residual a Winograd output adds, read like the row
    /// it is stored to — as one contiguous run of `m·lanes` elements split
    /// into its `m` strided vectors (kept in `deinterleaved` for the group).
    fn deinterleave_loads(&mut self, values: &[&Expr], m: i64, lanes: u16) -> Result<(), CodegenError> {
        let mut loads = Vec::new();
        for v in values {
            strided_loads(v, m, lanes, &mut loads);
        }
        // Runs by buffer, base and first offset (a multiple of `m` past the
        // base): the index of each of their `m` strided loads.
        let mut runs: Vec<(Buffer, String, i64, Vec<Option<Expr>>)> = Vec::new();
        for (buf, at, c, idx) in loads {
            let start = c - c.rem_euclid(m);
            let i = match runs.iter().position(|(b, a, s, _)| *b == buf && *a == at && *s == start) {
                Some(i) => i,
                None => {
                    runs.push((buf, at, start, vec![None; m as usize]));
                    runs.len() - 1
                }
            };
            runs[i].3[(c - start) as usize] = Some(idx);
        }
        for (buf, _, _, indices) in runs {
            // Only a whole run: each of its elements is read by one of the loads.
            let Some(indices) = indices.into_iter().collect::<Option<Vec<Expr>>>() else { continue };
            let Expr::Ramp { base, .. } = &indices[0] else { continue };
            let run = Expr::Ramp { base: base.clone(), stride: Box::new(Expr::int(1)), lanes: lanes * m as u16 };
            let Some(whole) = self.load_run(&buf, &run)? else { continue };
            let i32t = self.ctx.i32_type();
            for (j, idx) in indices.iter().enumerate() {
                let picks: Vec<IntValue> =
                    (0..lanes as i64).map(|t| i32t.const_int((t * m + j as i64) as u64, false)).collect();
                let undef = whole.get_type().get_undef();
                let v =
                    self.e(self.b.build_shuffle_vector(whole, undef, VectorType::const_vector(&picks), "strided"))?;
                self.deinterleaved.insert((buf.id(), format!("{idx:?}")), v);
            }
        }
        Ok(())
    }

    /// The run of an interleaved group whose values compute a function (a
    /// SiLU after a Winograd output): computed on the run itself, in whole
    /// vectors of the unit, where that takes fewer vectors than the `m`
    /// values of `lanes` lanes each (a 40 × 40 map's rows: 10 tiles a
    /// vector, four vectors of 16 lanes for 40 elements, three on the run;
    /// on 8 lanes eight for five). The values' differing loads are
    /// interleaved (or read as their contiguous run) first.
    fn run_epilogue(
        &mut self,
        values: &[&Expr],
        m: i64,
        lanes: u16,
    ) -> Result<Option<VectorValue<'ctx>>, CodegenError> {
        let width = self.features.transpose_lanes as u16;
        let total = lanes as u32 * m as u32;
        let on_run = total.div_ceil(width as u32);
        let per_value = m as u32 * (lanes as u32).div_ceil(width as u32);
        if width < 4 || on_run >= per_value || !values[0].calls_a_function() {
            return Ok(None);
        }
        let mut leaves = Vec::new();
        let Some(template) = widened(values, m, lanes, width, &mut leaves) else { return Ok(None) };
        let i32t = self.ctx.i32_type();
        let mut runs = Vec::with_capacity(leaves.len());
        for (_, leaf) in &leaves {
            let run = match leaf {
                RunLeaf::Contiguous(buf, idx) => match self.load_run(buf, idx)? {
                    Some(v) => v,
                    None => return Ok(None),
                },
                RunLeaf::Interleaved(loads) => {
                    let vs = loads
                        .iter()
                        .map(|l| Ok(self.vexpr(l)?.into_vector_value()))
                        .collect::<Result<Vec<_>, CodegenError>>()?;
                    self.interleave(vs, m, lanes)?
                }
            };
            runs.push(run);
        }
        let piece_key = format!("{:?}", piece_index(width));
        let mut pieces = Vec::with_capacity(on_run as usize);
        for p in 0..on_run {
            for ((placeholder, _), run) in leaves.iter().zip(&runs) {
                let pick: Vec<IntValue> = (0..width as u32)
                    .map(|k| {
                        let at = p * width as u32 + k;
                        if at < total {
                            i32t.const_int(at as u64, false)
                        } else {
                            i32t.get_undef()
                        }
                    })
                    .collect();
                let undef = run.get_type().get_undef();
                let piece =
                    self.e(self.b.build_shuffle_vector(*run, undef, VectorType::const_vector(&pick), "piece"))?;
                self.deinterleaved.insert((placeholder.id(), piece_key.clone()), piece);
            }
            let v = self.vexpr(&template);
            self.deinterleaved.clear();
            pieces.push(v?.into_vector_value());
        }
        let joined = self.concat_vectors(pieces)?;
        Ok(Some(self.first_lanes(joined, total)?))
    }

    /// `buf[idx]` split from its run by [`Self::deinterleave_loads`], if it was.
    pub(super) fn deinterleaved_load(&self, buf: &Buffer, idx: &Expr) -> Option<BasicValueEnum<'ctx>> {
        if self.deinterleaved.is_empty() {
            return None;
        }
        self.deinterleaved.get(&(buf.id(), format!("{idx:?}"))).map(|v| (*v).into())
    }

    /// The interleaved group at the head of `stmts`, stored as one run (see
    /// the module's note): how many statements it covered, or None where the
    /// head is no such group. The group's values must not read the buffer
    /// (they are all computed before any of them is stored).
    pub(super) fn interleaved_stores(&mut self, stmts: &[Stmt]) -> Result<Option<usize>, CodegenError> {
        let Some(Stmt::Store { buffer, indices, .. }) = stmts.first() else { return Ok(None) };
        let [Expr::Ramp { base, stride, lanes }] = &indices[..] else { return Ok(None) };
        let Some(m) = stride.as_int() else { return Ok(None) };
        if self.gpu
            || buffer.elem() == DataType::Bool
            || !(2..=MAX_INTERLEAVED).contains(&m)
            || !(m as u64).is_power_of_two()
            || stmts.len() < m as usize
        {
            return Ok(None);
        }
        let (first, c0) = constant_offset(base);
        let first_key = format!("{first:?}");
        let mut values = Vec::with_capacity(m as usize);
        for (j, s) in stmts[..m as usize].iter().enumerate() {
            let Stmt::Store { buffer: b, indices, value } = s else { return Ok(None) };
            let [Expr::Ramp { base: bj, stride: sj, lanes: lj }] = &indices[..] else { return Ok(None) };
            let (at, cj) = constant_offset(bj);
            if b.id() != buffer.id()
                || sj.as_int() != Some(m)
                || lj != lanes
                || value.ty().lanes != *lanes
                || cj != c0 + j as i64
                || format!("{at:?}") != first_key
                || value.reads(buffer)
            {
                return Ok(None);
            }
            values.push(value);
        }
        let run = Expr::Ramp { base: base.clone(), stride: Box::new(Expr::int(1)), lanes: lanes * m as u16 };
        let Some((ptr, vt)) = self.contiguous(buffer, &run)? else { return Ok(None) };
        if let Some(run_value) = self.run_epilogue(&values, m, *lanes)? {
            self.store_run(buffer, ptr, vt, run_value)?;
            return Ok(Some(m as usize));
        }
        self.deinterleave_loads(&values, m, *lanes)?;
        let mut vs: Vec<VectorValue<'ctx>> = Vec::with_capacity(m as usize);
        for v in values {
            match self.vexpr_or_splat(v, *lanes as u32) {
                Ok(v) => vs.push(v.into_vector_value()),
                Err(e) => {
                    self.deinterleaved.clear();
                    return Err(e);
                }
            }
        }
        self.deinterleaved.clear();
        let run_value = self.interleave(vs, m, *lanes)?;
        self.store_run(buffer, ptr, vt, run_value)?;
        Ok(Some(m as usize))
    }

    /// The `m` vectors of `lanes` lanes as their run: element `t·m + j` is
    /// lane `t` of vector `j`.
    fn interleave(&self, vs: Vec<VectorValue<'ctx>>, m: i64, lanes: u16) -> Result<VectorValue<'ctx>, CodegenError> {
        // Vector `j` at lanes `j·L…` of the joined vector.
        let joined = self.concat_vectors(vs)?;
        let (l, m) = (lanes as u64, m as u64);
        let i32t = self.ctx.i32_type();
        let order: Vec<IntValue> = (0..m * l).map(|k| i32t.const_int((k % m) * l + k / m, false)).collect();
        let undef = joined.get_type().get_undef();
        self.e(self.b.build_shuffle_vector(joined, undef, VectorType::const_vector(&order), "interleaved"))
    }

    /// `buf[idx]` as one load where `idx` is contiguous (element-aligned).
    fn load_run(&mut self, buf: &Buffer, idx: &Expr) -> Result<Option<VectorValue<'ctx>>, CodegenError> {
        let Some((ptr, vt)) = self.contiguous(buf, idx)? else { return Ok(None) };
        let v = self.e(compat::load(&self.b, vt, ptr, "run"))?;
        if let Some(i) = v.as_instruction_value() {
            i.set_alignment(buf.elem().size_bytes() as u32).map_err(|e| llvm_err(&self.kernel, e))?;
        }
        Ok(Some(v.into_vector_value()))
    }

    /// Stores an interleaved group's run at `ptr` (masked where the unit has
    /// no vector of its lanes).
    fn store_run(
        &mut self,
        buffer: &Buffer,
        ptr: inkwell::values::PointerValue<'ctx>,
        vt: VectorType<'ctx>,
        run_value: VectorValue<'ctx>,
    ) -> Result<(), CodegenError> {
        match self.masked_access(buffer, vt) {
            Some(wt) => self.masked_store(buffer, ptr, (vt, wt), run_value)?,
            None => {
                let st = self.e(self.b.build_store(ptr, run_value))?;
                st.set_alignment(buffer.elem().size_bytes() as u32).map_err(|e| llvm_err(&self.kernel, e))?;
            }
        }
        self.forget_transposes_of(buffer);
        Ok(())
    }
}
