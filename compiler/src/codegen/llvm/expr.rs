//! Scalar expressions: arithmetic, comparisons, casts, loads and the math
//! intrinsics (NaN-propagating min/max, ldexp, GPU libdevice calls).

use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum, VectorType};
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, IntValue, PointerValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};
use kiln_ir::DataType;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{BinOp, Buffer, CmpOp, Expr, Intrinsic, Scope};

impl<'ctx> FnGen<'_, 'ctx> {
    pub(super) fn unsupported(&self, what: &str) -> CodegenError {
        CodegenError::Unsupported { kernel: self.kernel.clone(), backend: "LLVM", what: what.to_string() }
    }

    pub(super) fn e<T>(&self, r: Result<T, inkwell::builder::BuilderError>) -> Result<T, CodegenError> {
        r.map_err(|e| llvm_err(&self.kernel, e))
    }

    /// NumPy's `minimum`/`maximum`: a NaN operand gives NaN (LLVM's
    /// `minnum`/`maxnum` alone would return the other operand). Against a
    /// constant number (relu, clip, the clamps of the polynomial exp): `c ⋗ x
    /// ? c : x`, one compare, where a NaN `x` stays; otherwise `uno(x, y) ?
    /// x + y : maxnum(x, y)`. Scalars or vectors.
    ///
    /// Except in a reduction's update into a kernel-local buffer (`acc =
    /// max(acc, v)` with `acc` an `alloca`): LLVM 14's vectorizers miscompile
    /// the select form there (an update read the accumulator from before the
    /// previous step's store: an argmax over a middle axis came out wrong),
    /// so those skip a NaN value: x86's own `maxps(v, acc)` on 16, 8 or 4
    /// lanes (the accumulator second: a NaN `v` leaves it, as `maxnum` did,
    /// and an accumulator that is NaN — one started from a NaN element —
    /// stays so; one instruction where `maxnum` is three, on a softmax row's
    /// critical path), else plain `maxnum`. Reductions and pooling into the
    /// kernel's buffers propagate NaN.
    pub(super) fn nan_minmax(
        &self,
        is_min: bool,
        (ea, a): (&Expr, BasicValueEnum<'ctx>),
        (eb, b): (&Expr, BasicValueEnum<'ctx>),
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        fn number(e: &Expr) -> bool {
            match e {
                Expr::Float(v, _) => !v.is_nan(),
                Expr::Broadcast(x, _) => number(x),
                _ => false,
            }
        }
        let name = if is_min { "llvm.minnum" } else { "llvm.maxnum" };
        let pred = if is_min { FloatPredicate::OLT } else { FloatPredicate::OGT };
        let accumulates = |e: &Expr| matches!(e, Expr::Load(buf, _) if Some(buf.id()) == self.accumulator && buf.scope() != Scope::Global);
        let plain = accumulates(ea) || accumulates(eb);
        // (constant, other) when one operand is a constant number.
        let constant = match (number(ea), number(eb)) {
            (_, true) => Some((b, a)),
            (true, false) => Some((a, b)),
            _ => None,
        };
        macro_rules! pick {
            ($as:ident, $minmax:expr) => {{
                if let (Some((c, x)), false) = (constant, plain) {
                    let wins = self.e(self.b.build_float_compare(pred, c.$as(), x.$as(), "wins"))?;
                    return self.e(self.b.build_select(wins, c, x, "minmax"));
                }
                if plain {
                    if let Some(m) = self.x86_minmax(is_min, if accumulates(ea) { (b, a) } else { (a, b) })? {
                        return Ok(m);
                    }
                    return Ok($minmax);
                }
                let m = $minmax;
                let nan = self.e(self.b.build_float_compare(FloatPredicate::UNO, a.$as(), b.$as(), "nan"))?;
                let sum: BasicValueEnum<'ctx> = self.e(self.b.build_float_add(a.$as(), b.$as(), "nan_sum"))?.into();
                self.e(self.b.build_select(nan, sum, m, "minmax"))
            }};
        }
        match (a, b) {
            (BasicValueEnum::FloatValue(x), BasicValueEnum::FloatValue(_)) => {
                let suffix = match x.get_type().get_bit_width() {
                    16 => "f16",
                    64 => "f64",
                    _ => "f32",
                };
                pick!(into_float_value, self.intrinsic(&format!("{name}.{suffix}"), &[a, b], a.get_type())?)
            }
            (BasicValueEnum::VectorValue(x), BasicValueEnum::VectorValue(_)) => {
                let lanes = x.get_type().get_size();
                pick!(into_vector_value, self.vector_intrinsic(&format!("{name}.v{lanes}f32"), &[a, b])?)
            }
            _ => Err(self.unsupported("min/max of mismatched float operands")),
        }
    }

    /// `other` where it is the larger (smaller), else `acc` — a NaN `other`
    /// too: x86's `maxps`/`minps` on an f32 vector of 16 lanes (AVX-512), 8
    /// or 4 (AVX); `None` for other types or targets.
    fn x86_minmax(
        &self,
        is_min: bool,
        (other, acc): (BasicValueEnum<'ctx>, BasicValueEnum<'ctx>),
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let BasicValueEnum::VectorValue(v) = other else { return Ok(None) };
        if v.get_type().get_element_type() != self.ctx.f32_type().into() {
            return Ok(None);
        }
        let op = if is_min { "min" } else { "max" };
        let current_rounding = self.ctx.i32_type().const_int(4, false).into();
        match v.get_type().get_size() {
            16 if self.features.x86_minmax_lanes >= 16 => {
                let name = format!("llvm.x86.avx512.{op}.ps.512");
                self.vector_intrinsic(&name, &[other, acc, current_rounding]).map(Some)
            }
            8 if self.features.x86_minmax_lanes >= 8 => {
                self.vector_intrinsic(&format!("llvm.x86.avx.{op}.ps.256"), &[other, acc]).map(Some)
            }
            4 if self.features.x86_minmax_lanes >= 8 => {
                self.vector_intrinsic(&format!("llvm.x86.sse.{op}.ps"), &[other, acc]).map(Some)
            }
            _ => Ok(None),
        }
    }

    pub(super) fn i64c(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v as u64, true)
    }

    /// The register type of a value of `t`: bools are `i1`.
    pub(super) fn value_type(&self, t: DataType) -> BasicTypeEnum<'ctx> {
        match t {
            DataType::Bool => self.ctx.bool_type().into(),
            other => elem_type(self.ctx, other),
        }
    }

    pub(super) fn intrinsic(
        &self,
        name: &str,
        args: &[BasicValueEnum<'ctx>],
        ty: BasicTypeEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let params: Vec<BasicMetadataTypeEnum> = args.iter().map(|_| ty.into()).collect();
                let fn_ty = ty.into_float_type().fn_type(&params, false);
                self.module.add_function(name, fn_ty, Some(Linkage::External))
            }
        };
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let call = self.e(self.b.build_call(f, &args, "call"))?;
        match call.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            inkwell::values::ValueKind::Instruction(_) => Err(self.unsupported("a void intrinsic")),
        }
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let ty = e.ty();
        if ty.lanes != 1 {
            return self.vexpr(e);
        }
        let dt = ty.elem;
        Ok(match e {
            Expr::Int(v, t) => match self.value_type(t.elem) {
                BasicTypeEnum::IntType(it) => it.const_int(*v as u64, !t.elem.is_unsigned()).into(),
                BasicTypeEnum::FloatType(ft) => ft.const_float(*v as f64).into(),
                _ => return Err(self.unsupported("this constant")),
            },
            Expr::Float(v, t) => self.value_type(t.elem).into_float_type().const_float(*v).into(),
            Expr::Var(v) => {
                *self.vars.get(&v.id).ok_or_else(|| self.unsupported(&format!("unbound variable `{}`", v.name)))?
            }
            Expr::Bin(BinOp::Add, a, b) if dt == DataType::F32 && fma_operands(a, b).is_some() => {
                let (acc, m1, m2) = fma_operands(a, b).expect("checked");
                let (acc, m1, m2) = (self.expr(acc)?, self.expr(m1)?, self.expr(m2)?);
                self.intrinsic("llvm.fmuladd.f32", &[m1, m2, acc], self.ctx.f32_type().into())?
            }
            Expr::Bin(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                if dt.is_float() {
                    let (x, y) = (x.into_float_value(), y.into_float_value());
                    match op {
                        BinOp::Add => self.e(self.b.build_float_add(x, y, "add"))?.into(),
                        BinOp::Sub => self.e(self.b.build_float_sub(x, y, "sub"))?.into(),
                        BinOp::Mul => self.e(self.b.build_float_mul(x, y, "mul"))?.into(),
                        BinOp::Div => self.e(self.b.build_float_div(x, y, "div"))?.into(),
                        BinOp::Min | BinOp::Max => self.nan_minmax(*op == BinOp::Min, (a, x.into()), (b, y.into()))?,
                        BinOp::FloorDiv | BinOp::FloorMod => {
                            let q = self.e(self.b.build_float_div(x, y, "q"))?;
                            let name = format!("llvm.floor.{}", float_suffix(dt));
                            let fq = self.intrinsic(&name, &[q.into()], x.get_type().into())?.into_float_value();
                            if *op == BinOp::FloorDiv {
                                fq.into()
                            } else {
                                let m = self.e(self.b.build_float_mul(fq, y, "m"))?;
                                self.e(self.b.build_float_sub(x, m, "fmod"))?.into()
                            }
                        }
                    }
                } else {
                    let (x, y) = (x.into_int_value(), y.into_int_value());
                    let unsigned = dt.is_unsigned();
                    match op {
                        BinOp::Add => self.e(self.b.build_int_add(x, y, "add"))?.into(),
                        BinOp::Sub => self.e(self.b.build_int_sub(x, y, "sub"))?.into(),
                        BinOp::Mul => self.e(self.b.build_int_mul(x, y, "mul"))?.into(),
                        BinOp::Div if unsigned => self.e(self.b.build_int_unsigned_div(x, y, "div"))?.into(),
                        BinOp::Div => self.e(self.b.build_int_signed_div(x, y, "div"))?.into(),
                        BinOp::Min | BinOp::Max => {
                            let pred = match (op, unsigned) {
                                (BinOp::Min, false) => IntPredicate::SLT,
                                (BinOp::Min, true) => IntPredicate::ULT,
                                (_, false) => IntPredicate::SGT,
                                (_, true) => IntPredicate::UGT,
                            };
                            let c = self.e(self.b.build_int_compare(pred, x, y, "cmp"))?;
                            self.e(self.b.build_select(c, x, y, "minmax"))?
                        }
                        // Unsigned: truncation is flooring.
                        BinOp::FloorDiv if unsigned => self.e(self.b.build_int_unsigned_div(x, y, "div"))?.into(),
                        BinOp::FloorMod if unsigned => self.e(self.b.build_int_unsigned_rem(x, y, "rem"))?.into(),
                        // A non-negative dividend over a positive constant:
                        // truncating is flooring (LLVM turns either into a
                        // multiply and shifts; this form needs no correction,
                        // which in a gather's per-lane indices was most of
                        // the code LLVM had to simplify).
                        BinOp::FloorDiv if self.non_negative(a) && positive_constant(b) => {
                            self.e(self.b.build_int_unsigned_div(x, y, "div"))?.into()
                        }
                        BinOp::FloorMod if self.non_negative(a) && positive_constant(b) => {
                            self.e(self.b.build_int_unsigned_rem(x, y, "rem"))?.into()
                        }
                        BinOp::FloorDiv | BinOp::FloorMod => {
                            // Truncating division, corrected toward negative infinity.
                            let q = self.e(self.b.build_int_signed_div(x, y, "q"))?;
                            let r = self.e(self.b.build_int_signed_rem(x, y, "r"))?;
                            let zero = x.get_type().const_zero();
                            let r_nz = self.e(self.b.build_int_compare(IntPredicate::NE, r, zero, "rnz"))?;
                            let r_neg = self.e(self.b.build_int_compare(IntPredicate::SLT, r, zero, "rneg"))?;
                            let y_neg = self.e(self.b.build_int_compare(IntPredicate::SLT, y, zero, "yneg"))?;
                            let signs = self.e(self.b.build_xor(r_neg, y_neg, "signs"))?;
                            let fix = self.e(self.b.build_and(r_nz, signs, "fix"))?;
                            if *op == BinOp::FloorDiv {
                                let q1 = self.e(self.b.build_int_sub(q, x.get_type().const_int(1, false), "q1"))?;
                                self.e(self.b.build_select(fix, q1, q, "floordiv"))?
                            } else {
                                let r1 = self.e(self.b.build_int_add(r, y, "r1"))?;
                                self.e(self.b.build_select(fix, r1, r, "floormod"))?
                            }
                        }
                    }
                }
            }
            Expr::Cmp(op, a, b) => {
                let at = a.ty().elem;
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                if at.is_float() {
                    let pred = float_predicate(*op);
                    self.e(self.b.build_float_compare(pred, x.into_float_value(), y.into_float_value(), "fcmp"))?.into()
                } else {
                    let unsigned = at.is_unsigned();
                    let pred = match (op, unsigned) {
                        (CmpOp::Eq, _) => IntPredicate::EQ,
                        (CmpOp::Ne, _) => IntPredicate::NE,
                        (CmpOp::Lt, false) => IntPredicate::SLT,
                        (CmpOp::Le, false) => IntPredicate::SLE,
                        (CmpOp::Gt, false) => IntPredicate::SGT,
                        (CmpOp::Ge, false) => IntPredicate::SGE,
                        (CmpOp::Lt, true) => IntPredicate::ULT,
                        (CmpOp::Le, true) => IntPredicate::ULE,
                        (CmpOp::Gt, true) => IntPredicate::UGT,
                        (CmpOp::Ge, true) => IntPredicate::UGE,
                    };
                    self.e(self.b.build_int_compare(pred, x.into_int_value(), y.into_int_value(), "icmp"))?.into()
                }
            }
            Expr::And(a, b) => {
                let (x, y) = (self.expr(a)?.into_int_value(), self.expr(b)?.into_int_value());
                self.e(self.b.build_and(x, y, "and"))?.into()
            }
            Expr::Or(a, b) => {
                let (x, y) = (self.expr(a)?.into_int_value(), self.expr(b)?.into_int_value());
                self.e(self.b.build_or(x, y, "or"))?.into()
            }
            Expr::Not(a) => {
                let x = self.expr(a)?.into_int_value();
                self.e(self.b.build_not(x, "not"))?.into()
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(c)?.into_int_value();
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                self.e(self.b.build_select(c, x, y, "select"))?
            }
            Expr::Cast(t, a) => {
                let from = a.ty().elem;
                let v = self.expr(a)?;
                self.cast(v, from, t.elem)?
            }
            Expr::Load(buf, idx) => {
                if let Some(v) = self.register_load(buf, idx)? {
                    return Ok(v);
                }
                let ptr = self.address(buf, idx)?;
                let v = self.e(compat::load(&self.b, elem_type(self.ctx, buf.elem()), ptr, "load"))?;
                if buf.elem() == DataType::Bool {
                    let zero = self.ctx.i8_type().const_zero();
                    self.e(self.b.build_int_compare(IntPredicate::NE, v.into_int_value(), zero, "tobool"))?.into()
                } else {
                    v
                }
            }
            Expr::Call(f, args, t) => {
                let vals: Vec<BasicValueEnum> = args.iter().map(|a| self.expr(a)).collect::<Result<_, _>>()?;
                let ft = self.value_type(t.elem);
                let suffix = float_suffix(t.elem);
                // `sinf` for f32; the double functions (`sin`) otherwise.
                let libm =
                    |n: &str| if t.elem == DataType::F32 { n.to_string() } else { n.trim_end_matches('f').to_string() };
                let x = vals.first().copied().ok_or_else(|| self.unsupported("an intrinsic without arguments"))?;
                if self.gpu {
                    if let Some(v) = self.gpu_math(*f, &vals)? {
                        return Ok(v);
                    }
                }
                let int_pair = || -> Result<(IntValue<'ctx>, IntValue<'ctx>), CodegenError> {
                    let y =
                        vals.get(1).copied().ok_or_else(|| self.unsupported("a bit operation with one argument"))?;
                    Ok((x.into_int_value(), y.into_int_value()))
                };
                match f {
                    Intrinsic::Barrier => return Err(self.unsupported("a barrier used as a value")),
                    Intrinsic::CheckIndex => {
                        let (i, n) = int_pair()?;
                        return self.check_index(i, n);
                    }
                    Intrinsic::Bf16Bits | Intrinsic::Bf16Value => return self.bf16_convert(*f, x),
                    Intrinsic::BitAnd => {
                        let (a, b) = int_pair()?;
                        self.e(self.b.build_and(a, b, "and"))?.into()
                    }
                    Intrinsic::BitOr => {
                        let (a, b) = int_pair()?;
                        self.e(self.b.build_or(a, b, "or"))?.into()
                    }
                    Intrinsic::BitXor => {
                        let (a, b) = int_pair()?;
                        self.e(self.b.build_xor(a, b, "xor"))?.into()
                    }
                    Intrinsic::BitNot => self.e(self.b.build_not(x.into_int_value(), "not"))?.into(),
                    Intrinsic::ShiftLeft => {
                        let (a, b) = int_pair()?;
                        self.e(self.b.build_left_shift(a, b, "shl"))?.into()
                    }
                    Intrinsic::ShiftRight => {
                        let (a, b) = int_pair()?;
                        self.e(self.b.build_right_shift(a, b, !t.elem.is_unsigned(), "shr"))?.into()
                    }
                    Intrinsic::Exp => self.intrinsic(&format!("llvm.exp.{suffix}"), &[x], ft)?,
                    Intrinsic::Log => self.intrinsic(&format!("llvm.log.{suffix}"), &[x], ft)?,
                    Intrinsic::Sqrt => self.intrinsic(&format!("llvm.sqrt.{suffix}"), &[x], ft)?,
                    Intrinsic::Fabs => self.intrinsic(&format!("llvm.fabs.{suffix}"), &[x], ft)?,
                    Intrinsic::Floor => self.intrinsic(&format!("llvm.floor.{suffix}"), &[x], ft)?,
                    Intrinsic::Ceil => self.intrinsic(&format!("llvm.ceil.{suffix}"), &[x], ft)?,
                    Intrinsic::Round => self.intrinsic(&format!("llvm.rint.{suffix}"), &[x], ft)?,
                    Intrinsic::Fmod => {
                        let y = vals.get(1).copied().ok_or_else(|| self.unsupported("fmod with one argument"))?;
                        self.e(self.b.build_float_rem(x.into_float_value(), y.into_float_value(), "fmod"))?.into()
                    }
                    Intrinsic::Pow => {
                        let y = vals.get(1).copied().ok_or_else(|| self.unsupported("pow with one argument"))?;
                        self.intrinsic(&format!("llvm.pow.{suffix}"), &[x, y], ft)?
                    }
                    Intrinsic::Rsqrt => {
                        let s = self.intrinsic(&format!("llvm.sqrt.{suffix}"), &[x], ft)?.into_float_value();
                        let one = ft.into_float_type().const_float(1.0);
                        self.e(self.b.build_float_div(one, s, "rsqrt"))?.into()
                    }
                    Intrinsic::Sigmoid => {
                        let neg = self.e(self.b.build_float_neg(x.into_float_value(), "neg"))?;
                        let ex = self.intrinsic(&format!("llvm.exp.{suffix}"), &[neg.into()], ft)?.into_float_value();
                        let one = ft.into_float_type().const_float(1.0);
                        let den = self.e(self.b.build_float_add(one, ex, "den"))?;
                        self.e(self.b.build_float_div(one, den, "sigmoid"))?.into()
                    }
                    Intrinsic::Ldexp | Intrinsic::LdexpNormal => {
                        let n = vals.get(1).copied().ok_or_else(|| self.unsupported("ldexp with one argument"))?;
                        self.ldexp(x, n, *f == Intrinsic::LdexpNormal)?
                    }
                    Intrinsic::Tanh => self.intrinsic(&libm("tanhf"), &[x], ft)?,
                    Intrinsic::Erf => self.intrinsic(&libm("erff"), &[x], ft)?,
                    // The rest: the libm unary functions (`Intrinsic::is_libm_unary`); NVPTX has no libm.
                    f => {
                        debug_assert!(f.is_libm_unary(), "no LLVM lowering for `{}`", f.name());
                        if self.gpu {
                            return Err(self.unsupported(&format!("`{}` on the GPU", f.name())));
                        }
                        self.intrinsic(&libm(&format!("{}f", f.name())), &[x], ft)?
                    }
                }
            }
            Expr::Ramp { .. } | Expr::Broadcast(..) => return Err(self.unsupported("a vector expression")),
            Expr::Reduce(_) => return Err(self.unsupported("an unlowered reduction")),
        })
    }

    /// `log`, `pow` and `exp` on NVPTX, which has no libm: the PTX
    /// approximations `lg2.approx`/`ex2.approx` (about 2 ulp). None for the
    /// intrinsics the common path handles.
    pub(super) fn gpu_math(
        &self,
        f: Intrinsic,
        vals: &[BasicValueEnum<'ctx>],
    ) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let f32t = self.ctx.f32_type();
        let (Some(x), true) = (vals.first().copied(), matches!(f, Intrinsic::Log | Intrinsic::Pow | Intrinsic::Exp))
        else {
            return Ok(None);
        };
        if !x.is_float_value() || x.into_float_value().get_type() != f32t {
            return Ok(None);
        }
        let x = x.into_float_value();
        let lg2 =
            |v: inkwell::values::FloatValue<'ctx>| self.intrinsic("llvm.nvvm.lg2.approx.f", &[v.into()], f32t.into());
        let ex2 =
            |v: inkwell::values::FloatValue<'ctx>| self.intrinsic("llvm.nvvm.ex2.approx.f", &[v.into()], f32t.into());
        let c = |v: f64| f32t.const_float(v);
        Ok(Some(match f {
            Intrinsic::Log => {
                let l = lg2(x)?.into_float_value();
                self.e(self.b.build_float_mul(l, c(std::f64::consts::LN_2), "log"))?.into()
            }
            Intrinsic::Exp => {
                let t = self.e(self.b.build_float_mul(x, c(std::f64::consts::LOG2_E), "t"))?;
                ex2(t)?
            }
            _ => {
                // pow(x, y) = 2^(y·log2|x|), negative for a negative x and odd integral y,
                // NaN for a negative x and fractional y, 1 for y = 0.
                let y =
                    vals.get(1).copied().ok_or_else(|| self.unsupported("pow with one argument"))?.into_float_value();
                let ax = self.intrinsic("llvm.fabs.f32", &[x.into()], f32t.into())?.into_float_value();
                let l = lg2(ax)?.into_float_value();
                let t = self.e(self.b.build_float_mul(y, l, "t"))?;
                let r = ex2(t)?.into_float_value();
                let fy = self.intrinsic("llvm.floor.f32", &[y.into()], f32t.into())?.into_float_value();
                let integral = self.e(self.b.build_float_compare(FloatPredicate::OEQ, fy, y, "integral"))?;
                let half = self.e(self.b.build_float_mul(y, c(0.5), "half"))?;
                let fh = self.intrinsic("llvm.floor.f32", &[half.into()], f32t.into())?.into_float_value();
                let odd = self.e(self.b.build_float_compare(FloatPredicate::ONE, fh, half, "odd"))?;
                let neg_r = self.e(self.b.build_float_neg(r, "neg"))?;
                let signed = self.e(self.b.build_select(odd, neg_r, r, "signed"))?.into_float_value();
                let nan = c(f64::NAN);
                let negative = self.e(self.b.build_select(integral, signed, nan, "negative"))?.into_float_value();
                let is_neg = self.e(self.b.build_float_compare(FloatPredicate::OLT, x, c(0.0), "isneg"))?;
                let v = self.e(self.b.build_select(is_neg, negative, r, "pow"))?.into_float_value();
                let y0 = self.e(self.b.build_float_compare(FloatPredicate::OEQ, y, c(0.0), "y0"))?;
                self.e(self.b.build_select(y0, c(1.0), v, "pow"))?
            }
        }))
    }

    /// `x · 2ⁿ` (scalars or vectors of f32): two exponent-field multiplies, so
    /// that every n in exp's range (−127…128) stays a normal power of two.
    /// `i` if `0 <= i < n` (one unsigned compare), else 0. A failure sets
    /// the status a CPU kernel returns; a GPU kernel, which has no status,
    /// traps (the launch fails) rather than compute from a wrong index.
    pub(super) fn check_index(
        &mut self,
        i: IntValue<'ctx>,
        n: IntValue<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let ok = self.e(self.b.build_int_compare(IntPredicate::ULT, i, n, "in_range"))?;
        match self.status {
            Some(slot) => {
                let i32t = self.ctx.i32_type();
                let code = i32t.const_int(kiln_runtime::STATUS_INDEX_OUT_OF_RANGE as u64, false);
                let flag = self.e(self.b.build_select(ok, i32t.const_zero(), code, "flag"))?.into_int_value();
                let old = self.e(compat::load(&self.b, i32t, slot, "old_status"))?.into_int_value();
                let new = self.e(self.b.build_or(old, flag, "new_status"))?;
                self.e(self.b.build_store(slot, new))?;
            }
            None => {
                let fail = self.ctx.append_basic_block(self.func, "index_out_of_range");
                let cont = self.ctx.append_basic_block(self.func, "index_ok");
                self.e(self.b.build_conditional_branch(ok, cont, fail))?;
                self.b.position_at_end(fail);
                let trap = match self.module.get_function("llvm.trap") {
                    Some(f) => f,
                    None => self.module.add_function("llvm.trap", self.ctx.void_type().fn_type(&[], false), None),
                };
                self.e(self.b.build_call(trap, &[], ""))?;
                self.e(self.b.build_unreachable())?;
                self.b.position_at_end(cont);
            }
        }
        self.e(self.b.build_select(ok, i, i.get_type().const_zero(), "index"))
    }

    /// `x · 2ⁿ`: `2ⁿ` built in the exponent field, in two factors
    /// (`2^⌊n/2⌋ · 2^⌈n/2⌉`) so that every `n` of the polynomial `exp` is
    /// covered (`2¹²⁸` is no f32), or in one where `normal` says that `2ⁿ` is
    /// a normal f32 (`LdexpNormal`).
    pub(super) fn ldexp(
        &self,
        x: BasicValueEnum<'ctx>,
        n: BasicValueEnum<'ctx>,
        normal: bool,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        match (x, n) {
            (BasicValueEnum::FloatValue(x), BasicValueEnum::FloatValue(n)) => {
                let n = self.e(self.b.build_float_to_signed_int(n, i32t, "n"))?;
                let parts = if normal {
                    vec![n]
                } else {
                    let n1 = self.e(self.b.build_right_shift(n, i32t.const_int(1, false), true, "n1"))?;
                    vec![n1, self.e(self.b.build_int_sub(n, n1, "n2"))?]
                };
                let mut acc = x;
                for k in parts {
                    let biased = self.e(self.b.build_int_add(k, i32t.const_int(127, false), "biased"))?;
                    let bits = self.e(self.b.build_left_shift(biased, i32t.const_int(23, false), "bits"))?;
                    let p = self.e(self.b.build_bit_cast(bits, f32t, "pow2"))?.into_float_value();
                    acc = self.e(self.b.build_float_mul(acc, p, "ldexp"))?;
                }
                Ok(acc.into())
            }
            (BasicValueEnum::VectorValue(x), BasicValueEnum::VectorValue(n))
                if self.features.scalef
                    && x.get_type().get_element_type() == f32t.into()
                    && x.get_type().get_size() % 16 == 0 =>
            {
                self.scalef(x, n)
            }
            (BasicValueEnum::VectorValue(x), BasicValueEnum::VectorValue(n)) => {
                let lanes = x.get_type().get_size();
                let vi = i32t.vec_type(lanes);
                let splat = |v: u64| VectorType::const_vector(&vec![i32t.const_int(v, false); lanes as usize]);
                let n = self.e(self.b.build_float_to_signed_int(n, vi, "n"))?;
                let parts = if normal {
                    vec![n]
                } else {
                    let n1 = self.e(self.b.build_right_shift(n, splat(1), true, "n1"))?;
                    vec![n1, self.e(self.b.build_int_sub(n, n1, "n2"))?]
                };
                let mut acc = x;
                for k in parts {
                    let biased = self.e(self.b.build_int_add(k, splat(127), "biased"))?;
                    let bits = self.e(self.b.build_left_shift(biased, splat(23), "bits"))?;
                    let p = self.e(self.b.build_bit_cast(bits, f32t.vec_type(lanes), "pow2"))?.into_vector_value();
                    acc = self.e(self.b.build_float_mul(acc, p, "ldexp"))?;
                }
                Ok(acc.into())
            }
            _ => Err(self.unsupported("ldexp of mixed scalar and vector operands")),
        }
    }

    /// `x · 2ⁿ` for f32 vectors of 16 lanes or a multiple as AVX-512's
    /// `vscalefps`, one per 16 lanes (exact, overflow to ∞ and underflow to 0
    /// included; `n` is integral here): the `exp` of softmax and SiLU, nine
    /// instructions fewer. Narrower vectors (Winograd's 5- and 10-lane tile
    /// rows) keep the exponent-field form: padded to 16 lanes they ran
    /// 1.01–1.05× slower.
    fn scalef(&self, x: VectorValue<'ctx>, n: VectorValue<'ctx>) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let i32t = self.ctx.i32_type();
        let (all_lanes, current_rounding) = (self.ctx.i16_type().const_all_ones(), i32t.const_int(4, false));
        let sixteen = |v: VectorValue<'ctx>, from: u32| {
            let pick: Vec<IntValue> = (from..from + 16).map(|k| i32t.const_int(k as u64, false)).collect();
            let undef = v.get_type().get_undef();
            self.e(self.b.build_shuffle_vector(v, undef, VectorType::const_vector(&pick), "lanes16"))
        };
        let lanes = x.get_type().get_size();
        let mut pieces = Vec::new();
        for from in (0..lanes).step_by(16) {
            let (xs, ns) = match lanes {
                16 => (x, n),
                _ => (sixteen(x, from)?, sixteen(n, from)?),
            };
            let args = [xs.into(), ns.into(), xs.into(), all_lanes.into(), current_rounding.into()];
            pieces.push(self.vector_intrinsic("llvm.x86.avx512.mask.scalef.ps.512", &args)?.into_vector_value());
        }
        // The pieces joined pairwise (an odd count padded to a power of two:
        // 48 lanes come back as 64), then cut to the vector's own lanes.
        let joined = self.concat_vectors(pieces)?;
        Ok(self.first_lanes(joined, lanes)?.into())
    }

    pub(super) fn cast(
        &self,
        v: BasicValueEnum<'ctx>,
        from: DataType,
        to: DataType,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let target = self.value_type(to);
        if from == to {
            return Ok(v);
        }
        Ok(match (from.is_float(), to.is_float()) {
            // x86 has no double → half instruction and LLVM 14's libcall
            // (`__truncdfhf2`) disagrees with libgcc's on the return register:
            // go through f32 (F16C converts that).
            (true, true) if from == DataType::F64 && to == DataType::F16 => {
                let f = self.cast(v, from, DataType::F32)?;
                self.cast(f, DataType::F32, to)?
            }
            (true, true) => {
                self.e(self.b.build_float_cast(v.into_float_value(), target.into_float_type(), "fcast"))?.into()
            }
            (true, false) if to == DataType::Bool => {
                let zero = v.into_float_value().get_type().const_zero();
                self.e(self.b.build_float_compare(FloatPredicate::UNE, v.into_float_value(), zero, "tobool"))?.into()
            }
            (true, false) if to.is_unsigned_int() => self
                .e(self.b.build_float_to_unsigned_int(v.into_float_value(), target.into_int_type(), "fptoui"))?
                .into(),
            (true, false) => {
                self.e(self.b.build_float_to_signed_int(v.into_float_value(), target.into_int_type(), "fptosi"))?.into()
            }
            (false, true) if from.is_unsigned() => self
                .e(self.b.build_unsigned_int_to_float(v.into_int_value(), target.into_float_type(), "uitofp"))?
                .into(),
            (false, true) => {
                self.e(self.b.build_signed_int_to_float(v.into_int_value(), target.into_float_type(), "sitofp"))?.into()
            }
            (false, false) if to == DataType::Bool => {
                let zero = v.into_int_value().get_type().const_zero();
                self.e(self.b.build_int_compare(IntPredicate::NE, v.into_int_value(), zero, "tobool"))?.into()
            }
            (false, false) => {
                let signed = !from.is_unsigned();
                self.e(self.b.build_int_cast_sign_flag(v.into_int_value(), target.into_int_type(), signed, "icast"))?
                    .into()
            }
        })
    }

    /// The pointer to `buf`'s first element.
    pub(super) fn buffer_base(&self, buf: &Buffer) -> Result<PointerValue<'ctx>, CodegenError> {
        self.buffers
            .get(&buf.id())
            .copied()
            .ok_or_else(|| self.unsupported(&format!("unknown buffer `{}`", buf.name())))
    }

    pub(super) fn address(&mut self, buf: &Buffer, idx: &[Expr]) -> Result<PointerValue<'ctx>, CodegenError> {
        if idx.len() != 1 {
            return Err(self.unsupported("a multi-dimensional access (run flatten_buffers first)"));
        }
        let base = self.buffer_base(buf)?;
        let i = self.expr(&idx[0])?.into_int_value();
        // SAFETY (of the generated code): indices come from loops over the buffer's static shape.
        let elem = elem_type(self.ctx, buf.elem());
        unsafe { self.e(compat::in_bounds_gep(&self.b, elem, base, &[i], "addr")) }
    }
}

/// Whether `e` is an integer constant above zero.
fn positive_constant(e: &Expr) -> bool {
    matches!(e, Expr::Int(v, _) if *v > 0)
}

impl FnGen<'_, '_> {
    /// Whether the integer expression `e` is never negative, as far as its
    /// form shows: constants, non-negative variables, and sums, products,
    /// minima, maxima, floor divisions and remainders of such (by positive
    /// constants); any unsigned value.
    pub(super) fn non_negative(&self, e: &Expr) -> bool {
        if e.ty().elem.is_unsigned() {
            return true;
        }
        match e {
            Expr::Int(v, _) => *v >= 0,
            Expr::Var(v) => self.non_negative_vars.contains(&v.id),
            Expr::Bin(BinOp::Add | BinOp::Mul | BinOp::Min | BinOp::Max, a, b) => {
                self.non_negative(a) && self.non_negative(b)
            }
            Expr::Bin(BinOp::FloorDiv, a, b) => self.non_negative(a) && positive_constant(b),
            Expr::Bin(BinOp::FloorMod, _, b) => positive_constant(b),
            _ => false,
        }
    }
}
