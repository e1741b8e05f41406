//! TIR → LLVM IR through inkwell, then native code: object files, assembly,
//! LLVM IR text, or an in-process JIT for tests and the CLI.
//!
//! Kernels follow the ABI in [`super`]; each also gets a packed entry point
//! `<name>_packed(void** args, int64_t task_id, int64_t num_tasks)` so that
//! callers (the JIT, the runtime) need one function-pointer type for all.
//! Pointer parameters are `noalias`; loops are emitted with phi nodes and the
//! module runs LLVM's `default<O3>` pipeline for the target CPU, whose loop
//! vectorizer produces the vector code.

use std::collections::HashMap;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, VectorType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, IntValue, PointerValue, VectorValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate, OptimizationLevel};
use kiln_ir::DataType;

mod compat;

use super::{CodegenError, PackedKernel};
use crate::arith::{simplify, Bounds};
use crate::tir::transform::lane_of;
use crate::tir::{BinOp, Buffer, CmpOp, Expr, ForKind, Intrinsic, PrimFunc, Scope, Stmt, ThreadAxis, Var};

/// Largest kernel-local buffer placed on the stack (the same limit as the C backend).
const MAX_LOCAL_BYTES: usize = 1 << 20;

/// A parsed `llvm …` target string: `llvm -mcpu=native`, `llvm -mcpu=skylake-avx512 -mattr=+avx512f`,
/// `llvm -mtriple=x86_64-unknown-linux-gnu`, `llvm -fast-math`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlvmTarget {
    pub triple: String,
    pub cpu: String,
    pub features: String,
    pub fast_math: bool,
}

impl LlvmTarget {
    /// The host CPU with all its features.
    pub fn native() -> LlvmTarget {
        LlvmTarget::parse("llvm -mcpu=native").unwrap_or(LlvmTarget {
            triple: String::new(),
            cpu: String::new(),
            features: String::new(),
            fast_math: false,
        })
    }

    pub fn parse(s: &str) -> Result<LlvmTarget, CodegenError> {
        let bad = |what: String| CodegenError::BadTarget { target: s.to_string(), message: what };
        let mut words = s.split_whitespace();
        if words.next() != Some("llvm") {
            return Err(bad("an LLVM target string starts with `llvm`".into()));
        }
        let mut t = LlvmTarget {
            triple: TargetMachine::get_default_triple().as_str().to_string_lossy().into_owned(),
            cpu: "generic".into(),
            features: String::new(),
            fast_math: false,
        };
        for w in words {
            if let Some(cpu) = w.strip_prefix("-mcpu=") {
                if cpu == "native" {
                    t.cpu = TargetMachine::get_host_cpu_name().to_string();
                    t.features = TargetMachine::get_host_cpu_features().to_string();
                } else {
                    t.cpu = cpu.to_string();
                }
            } else if let Some(attr) = w.strip_prefix("-mattr=") {
                if !t.features.is_empty() {
                    t.features.push(',');
                }
                t.features.push_str(attr);
            } else if let Some(triple) = w.strip_prefix("-mtriple=") {
                t.triple = triple.to_string();
            } else if w == "-fast-math" {
                t.fast_math = true;
            } else {
                return Err(bad(format!("unknown option `{w}`; expected -mcpu=, -mattr=, -mtriple= or -fast-math")));
            }
        }
        // An unknown CPU would make LLVM abort the whole process later; an
        // unknown feature would be ignored with only a warning.
        crate::target::check_llvm_cpu(&t.triple, &t.cpu).map_err(|e| bad(e.to_string()))?;
        for attrs in s.split_whitespace().filter_map(|w| w.strip_prefix("-mattr=")) {
            crate::target::check_llvm_features(&t.triple, attrs).map_err(|e| bad(e.to_string()))?;
        }
        Ok(t)
    }

    fn machine(&self, target_name: &str) -> Result<TargetMachine, CodegenError> {
        Target::initialize_all(&InitializationConfig::default());
        let triple = TargetTriple::create(&self.triple);
        let fail = |m: String| CodegenError::BadTarget { target: target_name.to_string(), message: m };
        let target = Target::from_triple(&triple).map_err(|e| fail(e.to_string()))?;
        target
            .create_target_machine(
                &triple,
                &self.cpu,
                &self.features,
                OptimizationLevel::Aggressive,
                RelocMode::PIC,
                CodeModel::Default,
            )
            .ok_or_else(|| fail(format!("LLVM cannot make a target machine for `{}` cpu `{}`", self.triple, self.cpu)))
    }
}

/// What to produce.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlvmOutput {
    pub llvm_ir: String,
    pub assembly: String,
    pub object: Vec<u8>,
}

struct FnGen<'a, 'ctx> {
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    b: Builder<'ctx>,
    func: FunctionValue<'ctx>,
    kernel: String,
    vars: HashMap<u32, BasicValueEnum<'ctx>>,
    buffers: HashMap<u32, PointerValue<'ctx>>,
    task_id: IntValue<'ctx>,
    num_tasks: IntValue<'ctx>,
    sliced: bool,
    entry: BasicBlock<'ctx>,
    /// NVPTX kernels: thread-bound loops read the thread/block index, shared
    /// buffers live in address space 3, `log`/`pow` use the PTX approximations.
    gpu: bool,
    /// The buffer the store being emitted writes (see `nan_minmax`).
    accumulator: Option<u32>,
    /// CPU kernels: the `i32` status they return, set by failed `check_index`es.
    status: Option<PointerValue<'ctx>>,
}

fn llvm_err(kernel: &str, e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Llvm { kernel: kernel.to_string(), message: e.to_string() }
}

/// The LLVM intrinsic suffix of a float type (`llvm.floor.f32`).
fn float_suffix(t: DataType) -> &'static str {
    match t {
        DataType::F16 => "f16",
        DataType::F64 => "f64",
        _ => "f32",
    }
}

fn elem_type<'ctx>(ctx: &'ctx Context, t: DataType) -> BasicTypeEnum<'ctx> {
    match t {
        DataType::F32 => ctx.f32_type().into(),
        DataType::F16 => ctx.f16_type().into(),
        DataType::F64 => ctx.f64_type().into(),
        DataType::I64 | DataType::U64 => ctx.i64_type().into(),
        DataType::I32 | DataType::U32 => ctx.i32_type().into(),
        DataType::I16 | DataType::U16 => ctx.i16_type().into(),
        DataType::I8 | DataType::U8 | DataType::Bool => ctx.i8_type().into(),
    }
}

impl<'ctx> FnGen<'_, 'ctx> {
    fn unsupported(&self, what: &str) -> CodegenError {
        CodegenError::Unsupported { kernel: self.kernel.clone(), backend: "LLVM", what: what.to_string() }
    }

    fn e<T>(&self, r: Result<T, inkwell::builder::BuilderError>) -> Result<T, CodegenError> {
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
    /// so those keep plain `maxnum` and skip NaN. Reductions and pooling into
    /// the kernel's buffers propagate NaN.
    fn nan_minmax(
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
                let m = $minmax;
                if plain {
                    return Ok(m);
                }
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

    fn i64c(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v as u64, true)
    }

    /// The register type of a value of `t`: bools are `i1`.
    fn value_type(&self, t: DataType) -> BasicTypeEnum<'ctx> {
        match t {
            DataType::Bool => self.ctx.bool_type().into(),
            other => elem_type(self.ctx, other),
        }
    }

    fn intrinsic(
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

    fn expr(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
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
                    let pred = match op {
                        CmpOp::Eq => FloatPredicate::OEQ,
                        CmpOp::Ne => FloatPredicate::UNE,
                        CmpOp::Lt => FloatPredicate::OLT,
                        CmpOp::Le => FloatPredicate::OLE,
                        CmpOp::Gt => FloatPredicate::OGT,
                        CmpOp::Ge => FloatPredicate::OGE,
                    };
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
                    Intrinsic::Ldexp => {
                        let n = vals.get(1).copied().ok_or_else(|| self.unsupported("ldexp with one argument"))?;
                        self.ldexp(x, n)?
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
    fn gpu_math(
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
    fn check_index(&mut self, i: IntValue<'ctx>, n: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, CodegenError> {
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

    fn ldexp(&self, x: BasicValueEnum<'ctx>, n: BasicValueEnum<'ctx>) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        match (x, n) {
            (BasicValueEnum::FloatValue(x), BasicValueEnum::FloatValue(n)) => {
                let n = self.e(self.b.build_float_to_signed_int(n, i32t, "n"))?;
                let n1 = self.e(self.b.build_right_shift(n, i32t.const_int(1, false), true, "n1"))?;
                let n2 = self.e(self.b.build_int_sub(n, n1, "n2"))?;
                let mut acc = x;
                for k in [n1, n2] {
                    let biased = self.e(self.b.build_int_add(k, i32t.const_int(127, false), "biased"))?;
                    let bits = self.e(self.b.build_left_shift(biased, i32t.const_int(23, false), "bits"))?;
                    let p = self.e(self.b.build_bit_cast(bits, f32t, "pow2"))?.into_float_value();
                    acc = self.e(self.b.build_float_mul(acc, p, "ldexp"))?;
                }
                Ok(acc.into())
            }
            (BasicValueEnum::VectorValue(x), BasicValueEnum::VectorValue(n)) => {
                let lanes = x.get_type().get_size();
                let vi = i32t.vec_type(lanes);
                let splat = |v: u64| VectorType::const_vector(&vec![i32t.const_int(v, false); lanes as usize]);
                let n = self.e(self.b.build_float_to_signed_int(n, vi, "n"))?;
                let n1 = self.e(self.b.build_right_shift(n, splat(1), true, "n1"))?;
                let n2 = self.e(self.b.build_int_sub(n, n1, "n2"))?;
                let mut acc = x;
                for k in [n1, n2] {
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

    fn vector_type(&self, elem: DataType, lanes: u32) -> VectorType<'ctx> {
        match self.value_type(elem) {
            BasicTypeEnum::FloatType(t) => t.vec_type(lanes),
            BasicTypeEnum::IntType(t) => t.vec_type(lanes),
            _ => self.ctx.i8_type().vec_type(lanes),
        }
    }

    fn splat(&self, v: BasicValueEnum<'ctx>, lanes: u32) -> Result<VectorValue<'ctx>, CodegenError> {
        let vt = match v {
            BasicValueEnum::FloatValue(f) => f.get_type().vec_type(lanes),
            BasicValueEnum::IntValue(i) => i.get_type().vec_type(lanes),
            _ => return Err(self.unsupported("a broadcast of a non-scalar")),
        };
        let one = self.e(self.b.build_insert_element(vt.get_undef(), v, self.i64c(0), "one"))?;
        let mask = self.ctx.i32_type().vec_type(lanes).const_zero();
        self.e(self.b.build_shuffle_vector(one, vt.get_undef(), mask, "splat"))
    }

    /// A vector of `e`'s lanes, each computed as a scalar (operations without a vector form).
    fn scalarize(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let t = e.ty();
        let mut v = self.vector_type(t.elem, t.lanes as u32).get_undef();
        for k in 0..t.lanes {
            let lane = self.expr(&simplify(&lane_of(e, k), &Bounds::new()))?;
            v = self.e(self.b.build_insert_element(v, lane, self.i64c(k as i64), "lane"))?;
        }
        Ok(v.into())
    }

    /// `buf[Ramp(base, s)]` for a small constant stride `s` (a stride-2
    /// convolution's input row): one contiguous load of the `(lanes−1)·s+1`
    /// elements from the first lane's to the last's — never past them — then
    /// a shuffle picking every `s`-th.
    fn strided_load(&mut self, buf: &Buffer, idx: &Expr) -> Result<Option<BasicValueEnum<'ctx>>, CodegenError> {
        let Expr::Ramp { base, stride, lanes } = idx else { return Ok(None) };
        let Some(s) = stride.as_int().filter(|s| (2..=4).contains(s)) else { return Ok(None) };
        let span = (*lanes as u32 - 1) * s as u32 + 1;
        let ft = match elem_type(self.ctx, buf.elem()) {
            BasicTypeEnum::FloatType(t) if buf.elem() != DataType::Bool => t,
            _ => return Ok(None),
        };
        let ptr = self.address(buf, std::slice::from_ref(base))?;
        let i32t = self.ctx.i32_type();
        let n = *lanes as u32;
        if span <= 2 * n {
            // Two overlapping whole vectors — the first `n` elements of the
            // span and the last `n` — and one two-input shuffle: an odd-sized
            // `<15 x float>` load was legalized piece by piece (eight inserts).
            let nt = ft.vec_type(n);
            let high_offset = span - n;
            let load = |g: &mut Self, offset: u32, name: &str| -> Result<VectorValue<'ctx>, CodegenError> {
                // SAFETY: the span's elements are in the buffer (the caller's index).
                let p = unsafe { compat::in_bounds_gep(&g.b, ft, ptr, &[g.i64c(offset as i64)], name) };
                let p = g.e(p)?;
                let p = g.e(g.b.build_pointer_cast(p, compat::pointer_to(g.ctx, nt), name))?;
                let v = g.e(compat::load(&g.b, nt, p, name))?;
                if let Some(i) = v.as_instruction_value() {
                    i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&g.kernel, m))?;
                }
                Ok(v.into_vector_value())
            };
            let (low, high) = (load(self, 0, "low")?, load(self, high_offset, "high")?);
            let mask: Vec<IntValue> = (0..n)
                .map(|k| {
                    let j = k * s as u32;
                    i32t.const_int(if j < n { j } else { n + j - high_offset } as u64, false)
                })
                .collect();
            let picked = self.e(self.b.build_shuffle_vector(low, high, VectorType::const_vector(&mask), "strided"))?;
            return Ok(Some(picked.into()));
        }
        let vt = ft.vec_type(span);
        let ptr = self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "sptr"))?;
        let wide = self.e(compat::load(&self.b, vt, ptr, "wide"))?;
        if let Some(i) = wide.as_instruction_value() {
            i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
        }
        let wide = wide.into_vector_value();
        let mask: Vec<IntValue> = (0..*lanes as u64).map(|k| i32t.const_int(k * s as u64, false)).collect();
        let picked =
            self.e(self.b.build_shuffle_vector(wide, vt.get_undef(), VectorType::const_vector(&mask), "strided"))?;
        Ok(Some(picked.into()))
    }

    /// A pointer to `<lanes x T>` at `buf[base]` and that vector type, when
    /// `idx` is `Ramp(base, 1)`.
    fn contiguous(
        &mut self,
        buf: &Buffer,
        idx: &Expr,
    ) -> Result<Option<(PointerValue<'ctx>, VectorType<'ctx>)>, CodegenError> {
        let Expr::Ramp { base, stride, lanes } = idx else { return Ok(None) };
        if stride.as_int() != Some(1) || buf.elem() == DataType::Bool {
            return Ok(None);
        }
        let ptr = self.address(buf, std::slice::from_ref(base))?;
        let vt = match elem_type(self.ctx, buf.elem()) {
            BasicTypeEnum::FloatType(t) => t.vec_type(*lanes as u32),
            BasicTypeEnum::IntType(t) => t.vec_type(*lanes as u32),
            _ => return Ok(None),
        };
        Ok(Some((self.e(self.b.build_pointer_cast(ptr, compat::pointer_to(self.ctx, vt), "vptr"))?, vt)))
    }

    /// Vector expressions (from tir.VectorizeLoop): native vector instructions
    /// for arithmetic, comparisons, selects, contiguous loads and the common
    /// intrinsics; anything else lane by lane.
    fn vexpr(&mut self, e: &Expr) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let t = e.ty();
        let lanes = t.lanes as u32;
        let float_vec = |v: BasicValueEnum<'ctx>| v.into_vector_value();
        Ok(match e {
            Expr::Broadcast(x, n) => {
                let s = self.expr(x)?;
                self.splat(s, *n as u32)?.into()
            }
            Expr::Ramp { base, stride, lanes } => {
                let (b, s) = (self.expr(base)?, self.expr(stride)?);
                let (b, s) = (self.splat(b, *lanes as u32)?, self.splat(s, *lanes as u32)?);
                let iota: Vec<IntValue> = (0..*lanes).map(|k| self.i64c(k as i64)).collect();
                let step = self.e(self.b.build_int_mul(s, VectorType::const_vector(&iota), "step"))?;
                self.e(self.b.build_int_add(b, step, "ramp"))?.into()
            }
            Expr::Bin(BinOp::Add, a, b) if t.elem == DataType::F32 && fma_operands(a, b).is_some() => {
                let (acc, m1, m2) = fma_operands(a, b).expect("checked");
                let acc = self.vexpr_or_splat(acc, lanes)?;
                let (m1, m2) = (self.vexpr_or_splat(m1, lanes)?, self.vexpr_or_splat(m2, lanes)?);
                self.vector_intrinsic(&format!("llvm.fmuladd.v{lanes}f32"), &[m1, m2, acc])?
            }
            Expr::Bin(op, a, b) if t.elem == DataType::F32 => {
                let (x, y) = (float_vec(self.vexpr_or_splat(a, lanes)?), float_vec(self.vexpr_or_splat(b, lanes)?));
                match op {
                    BinOp::Add => self.e(self.b.build_float_add(x, y, "vadd"))?.into(),
                    BinOp::Sub => self.e(self.b.build_float_sub(x, y, "vsub"))?.into(),
                    BinOp::Mul => self.e(self.b.build_float_mul(x, y, "vmul"))?.into(),
                    BinOp::Div => self.e(self.b.build_float_div(x, y, "vdiv"))?.into(),
                    BinOp::Min | BinOp::Max => self.nan_minmax(*op == BinOp::Min, (a, x.into()), (b, y.into()))?,
                    BinOp::FloorDiv | BinOp::FloorMod => return self.scalarize(e),
                }
            }
            Expr::Bin(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), a, b) if t.elem == DataType::I64 => {
                let (x, y) = (
                    self.vexpr_or_splat(a, lanes)?.into_vector_value(),
                    self.vexpr_or_splat(b, lanes)?.into_vector_value(),
                );
                match op {
                    BinOp::Add => self.e(self.b.build_int_add(x, y, "vadd"))?.into(),
                    BinOp::Sub => self.e(self.b.build_int_sub(x, y, "vsub"))?.into(),
                    _ => self.e(self.b.build_int_mul(x, y, "vmul"))?.into(),
                }
            }
            Expr::Cmp(op, a, b) if a.ty().elem == DataType::F32 => {
                let (x, y) = (float_vec(self.vexpr_or_splat(a, lanes)?), float_vec(self.vexpr_or_splat(b, lanes)?));
                let pred = match op {
                    CmpOp::Eq => FloatPredicate::OEQ,
                    CmpOp::Ne => FloatPredicate::UNE,
                    CmpOp::Lt => FloatPredicate::OLT,
                    CmpOp::Le => FloatPredicate::OLE,
                    CmpOp::Gt => FloatPredicate::OGT,
                    CmpOp::Ge => FloatPredicate::OGE,
                };
                self.e(self.b.build_float_compare(pred, x, y, "vcmp"))?.into()
            }
            Expr::Select(c, a, b) if t.elem != DataType::Bool => {
                let c = self.vexpr_or_splat(c, lanes)?.into_vector_value();
                let (x, y) = (self.vexpr_or_splat(a, lanes)?, self.vexpr_or_splat(b, lanes)?);
                self.e(self.b.build_select(c, x, y, "vselect"))?
            }
            Expr::Load(buf, idx) if idx.len() == 1 => match self.contiguous(buf, &idx[0])? {
                Some((ptr, vt)) => {
                    let v = self.e(compat::load(&self.b, vt, ptr, "vload"))?;
                    if let Some(i) = v.as_instruction_value() {
                        i.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
                    }
                    v
                }
                None => match self.strided_load(buf, &idx[0])? {
                    Some(v) => v,
                    None => self.scalarize(e)?,
                },
            },
            Expr::Call(f, args, _) if t.elem == DataType::F32 => {
                let vals: Vec<BasicValueEnum> =
                    args.iter().map(|a| self.vexpr_or_splat(a, lanes)).collect::<Result<_, _>>()?;
                let name = match f {
                    Intrinsic::Fabs => "fabs",
                    Intrinsic::Sqrt => "sqrt",
                    Intrinsic::Floor => "floor",
                    Intrinsic::Ceil => "ceil",
                    Intrinsic::Round => "rint",
                    Intrinsic::Exp => "exp",
                    Intrinsic::Log => "log",
                    Intrinsic::Ldexp => return self.ldexp(vals[0], vals[1]),
                    _ => return self.scalarize(e),
                };
                self.vector_intrinsic(&format!("llvm.{name}.v{lanes}f32"), &vals)?
            }
            _ => self.scalarize(e)?,
        })
    }

    fn vexpr_or_splat(&mut self, e: &Expr, lanes: u32) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        if e.ty().lanes == 1 {
            let s = self.expr(e)?;
            Ok(self.splat(s, lanes)?.into())
        } else {
            self.vexpr(e)
        }
    }

    fn vector_intrinsic(
        &self,
        name: &str,
        args: &[BasicValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let ty = args.first().ok_or_else(|| self.unsupported("an intrinsic without arguments"))?.get_type();
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let params: Vec<BasicMetadataTypeEnum> = args.iter().map(|a| a.get_type().into()).collect();
                self.module.add_function(name, ty.fn_type(&params, false), Some(Linkage::External))
            }
        };
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let call = self.e(self.b.build_call(f, &args, "vcall"))?;
        match call.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            inkwell::values::ValueKind::Instruction(_) => Err(self.unsupported("a void intrinsic")),
        }
    }

    /// A vector store: one store when the lanes are contiguous, else one per lane.
    fn vector_store(&mut self, buf: &Buffer, idx: &Expr, value: &Expr) -> Result<(), CodegenError> {
        let lanes = idx.ty().lanes.max(value.ty().lanes);
        if let (Some((ptr, _)), false) = (self.contiguous(buf, idx)?, value.ty().elem == DataType::Bool) {
            self.accumulator = Some(buf.id());
            let v = self.vexpr_or_splat(value, lanes as u32);
            self.accumulator = None;
            let v = v?;
            let st = self.e(self.b.build_store(ptr, v))?;
            st.set_alignment(buf.elem().size_bytes() as u32).map_err(|m| llvm_err(&self.kernel, m))?;
            return Ok(());
        }
        for k in 0..lanes {
            let i = simplify(&lane_of(idx, k), &Bounds::new());
            self.stmt(&Stmt::Store { buffer: buf.clone(), indices: vec![i], value: lane_of(value, k) })?;
        }
        Ok(())
    }

    fn cast(
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

    fn address(&mut self, buf: &Buffer, idx: &[Expr]) -> Result<PointerValue<'ctx>, CodegenError> {
        if idx.len() != 1 {
            return Err(self.unsupported("a multi-dimensional access (run flatten_buffers first)"));
        }
        let base = *self
            .buffers
            .get(&buf.id())
            .ok_or_else(|| self.unsupported(&format!("unknown buffer `{}`", buf.name())))?;
        let i = self.expr(&idx[0])?.into_int_value();
        // SAFETY (of the generated code): indices come from loops over the buffer's static shape.
        let elem = elem_type(self.ctx, buf.elem());
        unsafe { self.e(compat::in_bounds_gep(&self.b, elem, base, &[i], "addr")) }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), CodegenError> {
        match s {
            Stmt::For(l) => self.for_loop(&l.var, &l.min, &l.extent, l.kind, &l.body),
            Stmt::Store { buffer, indices, value }
                if indices.len() == 1 && (indices[0].ty().lanes > 1 || value.ty().lanes > 1) =>
            {
                self.vector_store(buffer, &indices[0], value)
            }
            Stmt::Store { buffer, indices, value } => {
                self.accumulator = Some(buffer.id());
                let v = self.expr(value);
                self.accumulator = None;
                let mut v = v?;
                if buffer.elem() == DataType::Bool {
                    v = self.e(self.b.build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "frombool"))?.into();
                }
                let ptr = self.address(buffer, indices)?;
                self.e(self.b.build_store(ptr, v))?;
                Ok(())
            }
            Stmt::Allocate { buffer, body } if self.gpu && buffer.scope() == crate::tir::Scope::Shared => {
                // Block-shared memory: a module global in address space 3.
                let ty = elem_type(self.ctx, buffer.elem());
                let arr = match ty {
                    BasicTypeEnum::FloatType(t) => t.array_type(buffer.numel().max(1) as u32),
                    BasicTypeEnum::IntType(t) => t.array_type(buffer.numel().max(1) as u32),
                    _ => return Err(self.unsupported("a shared buffer of this type")),
                };
                let name = format!("{}_{}_shared", self.kernel, buffer.name());
                let g = self.module.add_global(arr, Some(AddressSpace::from(3u16)), &name);
                g.set_initializer(&arr.get_undef());
                g.set_linkage(Linkage::Internal);
                g.set_alignment(16);
                let ptr = self.e(self.b.build_pointer_cast(
                    g.as_pointer_value(),
                    compat::pointer_in(self.ctx, ty, AddressSpace::from(3u16)),
                    "shared",
                ))?;
                self.buffers.insert(buffer.id(), ptr);
                self.stmt(body)
            }
            Stmt::Allocate { buffer, body } => {
                let bytes = buffer.numel() * buffer.elem().size_bytes();
                if bytes > MAX_LOCAL_BYTES {
                    return Err(self.unsupported(&format!("a {bytes}-byte kernel-local buffer `{}`", buffer.name())));
                }
                // Allocas go in the entry block so they are static stack slots.
                let here = self.b.get_insert_block();
                match self.entry.get_first_instruction() {
                    Some(i) => self.b.position_before(&i),
                    None => self.b.position_at_end(self.entry),
                }
                let ty = elem_type(self.ctx, buffer.elem());
                let n = self.i64c(buffer.numel().max(1) as i64);
                let ptr = self.e(self.b.build_array_alloca(ty, n, buffer.name()))?;
                if let Some(bb) = here {
                    self.b.position_at_end(bb);
                }
                self.buffers.insert(buffer.id(), ptr);
                self.stmt(body)
            }
            Stmt::If { cond, then_case, else_case } => {
                let c = self.expr(cond)?.into_int_value();
                let then_bb = self.ctx.append_basic_block(self.func, "then");
                let else_bb = self.ctx.append_basic_block(self.func, "else");
                let join = self.ctx.append_basic_block(self.func, "endif");
                self.e(self.b.build_conditional_branch(c, then_bb, else_bb))?;
                self.b.position_at_end(then_bb);
                self.stmt(then_case)?;
                self.e(self.b.build_unconditional_branch(join))?;
                self.b.position_at_end(else_bb);
                if let Some(e) = else_case {
                    self.stmt(e)?;
                }
                self.e(self.b.build_unconditional_branch(join))?;
                self.b.position_at_end(join);
                Ok(())
            }
            Stmt::Seq(v) => v.iter().try_for_each(|s| self.stmt(s)),
            Stmt::Let { var, value, body } => {
                let v = self.expr(value)?;
                self.vars.insert(var.id, v);
                self.stmt(body)
            }
            Stmt::Evaluate(Expr::Call(Intrinsic::Barrier, ..)) => {
                if !self.gpu {
                    // A GPU-scheduled kernel run serially on the CPU (how tests check GPU
                    // schedules without a GPU): its thread loops run one after another,
                    // so every barrier between them already holds.
                    return Ok(());
                }
                let f = match self.module.get_function("llvm.nvvm.barrier0") {
                    Some(f) => f,
                    None => {
                        self.module.add_function("llvm.nvvm.barrier0", self.ctx.void_type().fn_type(&[], false), None)
                    }
                };
                self.e(self.b.build_call(f, &[], ""))?;
                Ok(())
            }
            Stmt::Evaluate(e) => {
                if !s.is_nop() {
                    self.expr(e)?;
                }
                Ok(())
            }
        }
    }

    fn for_loop(
        &mut self,
        var: &Var,
        min: &Expr,
        extent: &Expr,
        kind: ForKind,
        body: &Stmt,
    ) -> Result<(), CodegenError> {
        let min_v = self.expr(min)?.into_int_value();
        let ext_v = self.expr(extent)?.into_int_value();
        if let (ForKind::ThreadBinding(axis), true) = (kind, self.gpu) {
            // No loop: this thread's (or block's) index, guarded by the extent
            // (the launch may have more threads than this loop has iterations).
            let name = match axis {
                ThreadAxis::ThreadX => "tid.x",
                ThreadAxis::ThreadY => "tid.y",
                ThreadAxis::ThreadZ => "tid.z",
                ThreadAxis::BlockX => "ctaid.x",
                ThreadAxis::BlockY => "ctaid.y",
                ThreadAxis::BlockZ => "ctaid.z",
            };
            let i32t = self.ctx.i32_type();
            let intr = format!("llvm.nvvm.read.ptx.sreg.{name}");
            let f = match self.module.get_function(&intr) {
                Some(f) => f,
                None => self.module.add_function(&intr, i32t.fn_type(&[], false), None),
            };
            let raw = match self.e(self.b.build_call(f, &[], name))?.try_as_basic_value() {
                inkwell::values::ValueKind::Basic(v) => v.into_int_value(),
                inkwell::values::ValueKind::Instruction(_) => return Err(self.unsupported("a thread index")),
            };
            let idx = self.e(self.b.build_int_z_extend(raw, self.ctx.i64_type(), "idx"))?;
            let inside = self.e(self.b.build_int_compare(IntPredicate::SLT, idx, ext_v, "inside"))?;
            let v = self.e(self.b.build_int_add(min_v, idx, &var.name))?;
            let body_bb = self.ctx.append_basic_block(self.func, "bound");
            let exit = self.ctx.append_basic_block(self.func, "bound.exit");
            self.e(self.b.build_conditional_branch(inside, body_bb, exit))?;
            self.b.position_at_end(body_bb);
            self.vars.insert(var.id, v.into());
            self.stmt(body)?;
            self.e(self.b.build_unconditional_branch(exit))?;
            self.b.position_at_end(exit);
            return Ok(());
        }
        let (begin, end) = if kind == ForKind::Parallel && !self.sliced {
            // This task's contiguous slice of the iterations.
            self.sliced = true;
            let lo = self.e(self.b.build_int_mul(ext_v, self.task_id, "lo"))?;
            let lo = self.e(self.b.build_int_signed_div(lo, self.num_tasks, "lo"))?;
            let next = self.e(self.b.build_int_add(self.task_id, self.i64c(1), "next"))?;
            let hi = self.e(self.b.build_int_mul(ext_v, next, "hi"))?;
            let hi = self.e(self.b.build_int_signed_div(hi, self.num_tasks, "hi"))?;
            (self.e(self.b.build_int_add(min_v, lo, "begin"))?, self.e(self.b.build_int_add(min_v, hi, "end"))?)
        } else {
            (min_v, self.e(self.b.build_int_add(min_v, ext_v, "end"))?)
        };
        let pre = self.b.get_insert_block().ok_or_else(|| self.unsupported("a loop outside a block"))?;
        let header = self.ctx.append_basic_block(self.func, "for.header");
        let body_bb = self.ctx.append_basic_block(self.func, "for.body");
        let exit = self.ctx.append_basic_block(self.func, "for.exit");
        self.e(self.b.build_unconditional_branch(header))?;
        self.b.position_at_end(header);
        let phi = self.e(self.b.build_phi(self.ctx.i64_type(), &var.name))?;
        phi.add_incoming(&[(&begin, pre)]);
        let i = phi.as_basic_value().into_int_value();
        let cond = self.e(self.b.build_int_compare(IntPredicate::SLT, i, end, "cond"))?;
        self.e(self.b.build_conditional_branch(cond, body_bb, exit))?;
        self.b.position_at_end(body_bb);
        self.vars.insert(var.id, i.into());
        self.stmt(body)?;
        let latch = self.b.get_insert_block().ok_or_else(|| self.unsupported("a loop body outside a block"))?;
        let next = self.e(self.b.build_int_add(i, self.i64c(1), "next"))?;
        let backedge = self.e(self.b.build_unconditional_branch(header))?;
        if encloses_register_tile(body) {
            self.disable_unrolling(backedge);
        }
        phi.add_incoming(&[(&next, latch)]);
        self.b.position_at_end(exit);
        Ok(())
    }
}

/// Whether a loop's body holds a register tile the schedule unrolled: a run
/// of at least four vector stores into one kernel-local buffer (TIR expands
/// unrolled loops before code generation), each a whole number of registers
/// wide. Vectors of other widths (10 columns) are legalized lane by lane; as
/// values carried around a loop they cost more than LLVM's unrolling.
fn encloses_register_tile(body: &Stmt) -> bool {
    let whole_vector = |indices: &[Expr]| matches!(indices.last(), Some(Expr::Ramp { lanes, .. }) if *lanes >= 4 && lanes.is_power_of_two());
    let mut found = false;
    body.visit(&mut |s| {
        if let Stmt::Seq(parts) = s {
            let tile_stores = parts
                .iter()
                .filter(|p| {
                    matches!(p, Stmt::Store { buffer, indices, .. }
                        if buffer.scope() == Scope::Local && whole_vector(indices))
                })
                .count();
            found |= tile_stores >= 4;
        }
    });
    found
}

impl FnGen<'_, '_> {
    /// Marks the loop whose backedge is `branch` `llvm.loop.unroll.disable`.
    /// Around a register tile the schedule has decided the unrolling: LLVM
    /// fully unrolls a 3-long window loop and then keeps the input values
    /// shared by neighbouring copies live across them — more vectors than
    /// registers, spilled in the hottest loop.
    fn disable_unrolling(&self, branch: inkwell::values::InstructionValue<'_>) {
        use inkwell::llvm_sys::core::{
            LLVMGetMDKindIDInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2, LLVMMetadataAsValue,
            LLVMSetMetadata,
        };
        use inkwell::llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        use inkwell::values::AsValueRef;
        let ctx = self.ctx.raw();
        let (kind, option) = ("llvm.loop", "llvm.loop.unroll.disable");
        // SAFETY: every pointer comes from this function's live context and
        // instruction; a loop ID refers to itself (its first operand), so it
        // is made from a temporary node that is then replaced by the result.
        unsafe {
            let name = LLVMMDStringInContext2(ctx, option.as_ptr().cast(), option.len());
            let mut disable = [name];
            let disable = LLVMMDNodeInContext2(ctx, disable.as_mut_ptr(), 1);
            let temp = LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
            let mut operands = [temp, disable];
            let id = LLVMMDNodeInContext2(ctx, operands.as_mut_ptr(), 2);
            LLVMMetadataReplaceAllUsesWith(temp, id); // also frees `temp`
            let kind = LLVMGetMDKindIDInContext(ctx, kind.as_ptr().cast(), kind.len() as u32);
            LLVMSetMetadata(branch.as_value_ref(), kind, LLVMMetadataAsValue(ctx, id));
        }
    }
}

/// The CPU and its features on a function, so that every code generator —
/// the target machine and MCJIT, which otherwise picks a generic x86-64 —
/// emits the same instructions (the packed entry points too: the kernel is
/// inlined into them).
fn set_target_attributes<'ctx>(ctx: &'ctx Context, func: FunctionValue<'ctx>, target: &LlvmTarget) {
    if !target.cpu.is_empty() {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("target-cpu", &target.cpu));
    }
    if !target.features.is_empty() {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("target-features", &target.features));
    }
    // LLVM tunes Skylake-class AVX-512 CPUs to vectorize its own loops 256
    // bits wide (a frequency concern of 2017 parts); kiln's tiles are sized
    // for the full 512-bit registers, so its loops use them.
    let spelled = format!("llvm -mcpu={} -mattr={} -mtriple={}", target.cpu, target.features, target.triple);
    if crate::target::VectorUnit::of_target(&spelled) == crate::target::VectorUnit::AVX512 {
        func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute("prefer-vector-width", "512"));
    }
}

/// `acc + m1·m2` (either order): LLVM's `fmuladd`, which the backend may
/// contract into one FMA instruction (C's default FP_CONTRACT semantics).
fn fma_operands<'e>(a: &'e Expr, b: &'e Expr) -> Option<(&'e Expr, &'e Expr, &'e Expr)> {
    match (a, b) {
        (acc, Expr::Bin(BinOp::Mul, m1, m2)) | (Expr::Bin(BinOp::Mul, m1, m2), acc) => Some((acc, m1, m2)),
        _ => None,
    }
}

fn has_parallel_loop(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |s| found |= matches!(s, Stmt::For(l) if l.kind == ForKind::Parallel));
    found
}

/// Declare kernel `f` — one `noalias nocapture` pointer per buffer, then, on
/// the CPU, `task_id` and `num_tasks` — and a generator positioned in its
/// entry block with the buffers bound. GPU kernels take only the buffers.
fn start_kernel<'a, 'ctx>(
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    f: &PrimFunc,
    gpu: bool,
) -> Result<FnGen<'a, 'ctx>, CodegenError> {
    let i64t = ctx.i64_type();
    let mut params: Vec<BasicMetadataTypeEnum> =
        f.params.iter().map(|b| compat::pointer_to(ctx, elem_type(ctx, b.elem())).into()).collect();
    if !gpu {
        params.extend([BasicMetadataTypeEnum::from(i64t), i64t.into()]);
    }
    let fn_ty = if gpu { ctx.void_type().fn_type(&params, false) } else { ctx.i32_type().fn_type(&params, false) };
    let func = module.add_function(&f.name, fn_ty, Some(Linkage::External));
    let noalias = ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("noalias"), 0);
    let nocapture = ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("nocapture"), 0);
    let mut buffers = HashMap::new();
    for (i, buf) in f.params.iter().enumerate() {
        func.add_attribute(AttributeLoc::Param(i as u32), noalias);
        func.add_attribute(AttributeLoc::Param(i as u32), nocapture);
        let p = func.get_nth_param(i as u32).ok_or_else(|| llvm_err(&f.name, "missing parameter"))?;
        p.set_name(buf.name());
        buffers.insert(buf.id(), p.into_pointer_value());
    }
    let (task_id, num_tasks) = if gpu {
        (i64t.const_zero(), i64t.const_int(1, false))
    } else {
        let n = f.params.len() as u32;
        let param = |k: u32, what: &str| {
            func.get_nth_param(k).map(|p| p.into_int_value()).ok_or_else(|| llvm_err(&f.name, what))
        };
        (param(n, "no task_id")?, param(n + 1, "no num_tasks")?)
    };
    let entry = ctx.append_basic_block(func, "entry");
    let b = ctx.create_builder();
    b.position_at_end(entry);
    let status = if gpu {
        None
    } else {
        let e = |x: inkwell::builder::BuilderError| llvm_err(&f.name, x);
        let slot = b.build_alloca(ctx.i32_type(), "status").map_err(e)?;
        b.build_store(slot, ctx.i32_type().const_zero()).map_err(e)?;
        Some(slot)
    };
    Ok(FnGen {
        ctx,
        module,
        b,
        func,
        kernel: f.name.clone(),
        vars: HashMap::new(),
        buffers,
        task_id,
        num_tasks,
        // A GPU kernel has no task slices.
        sliced: gpu,
        entry,
        gpu,
        accumulator: None,
        status,
    })
}

/// Emit `f` and its packed entry point into `module`.
fn emit_kernel<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    f: &PrimFunc,
    target: &LlvmTarget,
) -> Result<(), CodegenError> {
    let i64t = ctx.i64_type();
    let mut g = start_kernel(ctx, module, f, false)?;
    let (func, task_id) = (g.func, g.task_id);
    // Fast math only where the target (`-fast-math`) or the kernel's pass
    // context (`tir.fast_math`) allows it.
    if target.fast_math || f.attrs.get("fast_math").is_some_and(|v| v == "true") {
        for key in
            ["unsafe-fp-math", "no-nans-fp-math", "no-infs-fp-math", "no-signed-zeros-fp-math", "approx-func-fp-math"]
        {
            func.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(key, "true"));
        }
    }
    set_target_attributes(ctx, func, target);
    if !has_parallel_loop(&f.body) {
        // Serial kernels do all the work in task 0.
        let work = ctx.append_basic_block(func, "work");
        let done = ctx.append_basic_block(func, "done");
        let is_first = g.e(g.b.build_int_compare(IntPredicate::EQ, task_id, i64t.const_zero(), "first"))?;
        g.e(g.b.build_conditional_branch(is_first, work, done))?;
        g.b.position_at_end(done);
        g.e(g.b.build_return(Some(&ctx.i32_type().const_zero())))?;
        g.b.position_at_end(work);
    }
    g.stmt(&f.body)?;
    let slot = g.status.ok_or_else(|| llvm_err(&f.name, "a CPU kernel without a status"))?;
    let status = g.e(compat::load(&g.b, ctx.i32_type(), slot, "status"))?;
    g.e(g.b.build_return(Some(&status)))?;

    // `i32 <name>_packed(i8** args, i64 task_id, i64 num_tasks)`.
    let i8p = compat::pointer_to(ctx, ctx.i8_type());
    let i8pp = compat::pointer_to(ctx, i8p);
    let packed_ty = ctx.i32_type().fn_type(&[i8pp.into(), i64t.into(), i64t.into()], false);
    let packed = module.add_function(&format!("{}_packed", f.name), packed_ty, Some(Linkage::External));
    set_target_attributes(ctx, packed, target);
    let bb = ctx.append_basic_block(packed, "entry");
    let pb = ctx.create_builder();
    pb.position_at_end(bb);
    let kernel = f.name.clone();
    let e = move |x: inkwell::builder::BuilderError| llvm_err(&kernel, x);
    let args = packed.get_nth_param(0).ok_or_else(|| llvm_err(&f.name, "packed args"))?.into_pointer_value();
    let mut call_args: Vec<BasicMetadataValueEnum> = Vec::new();
    for (i, buf) in f.params.iter().enumerate() {
        let index = [i64t.const_int(i as u64, false)];
        let slot = unsafe { compat::in_bounds_gep(&pb, i8p, args, &index, "slot").map_err(&e)? };
        let raw = compat::load(&pb, i8p, slot, "raw").map_err(&e)?.into_pointer_value();
        let typed =
            pb.build_pointer_cast(raw, compat::pointer_to(ctx, elem_type(ctx, buf.elem())), "arg").map_err(&e)?;
        call_args.push(typed.into());
    }
    for k in 1..3 {
        call_args.push(packed.get_nth_param(k).ok_or_else(|| llvm_err(&f.name, "packed task"))?.into());
    }
    let status = match pb.build_call(func, &call_args, "status").map_err(&e)?.try_as_basic_value() {
        inkwell::values::ValueKind::Basic(v) => v,
        _ => return Err(llvm_err(&f.name, "the kernel returns no status")),
    };
    pb.build_return(Some(&status)).map_err(&e)?;
    Ok(())
}

/// A named block of read-only data (a model weight) placed in the object.
#[derive(Clone, Debug)]
pub struct DataSymbol<'a> {
    pub symbol: String,
    pub bytes: &'a [u8],
}

fn build_module<'ctx>(
    ctx: &'ctx Context,
    name: &str,
    funcs: &[PrimFunc],
    data: &[DataSymbol<'_>],
    target: &LlvmTarget,
) -> Result<Module<'ctx>, CodegenError> {
    let module = ctx.create_module(name);
    for f in funcs {
        emit_kernel(ctx, &module, f, target)?;
    }
    for d in data {
        let init = ctx.const_string(d.bytes, false);
        let g = module.add_global(init.get_type(), None, &d.symbol);
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_alignment(64);
        g.set_linkage(Linkage::External);
    }
    module.verify().map_err(|m| llvm_err(name, format!("invalid LLVM IR: {m}")))?;
    let tm = target.machine("llvm")?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|m| llvm_err(name, format!("optimization pipeline: {m}")))?;
    Ok(module)
}

/// Compile `funcs` for `target`: optimized LLVM IR, assembly and an object file.
pub fn compile(name: &str, funcs: &[PrimFunc], target: &LlvmTarget) -> Result<LlvmOutput, CodegenError> {
    compile_with_data(name, funcs, &[], target)
}

/// [`compile`], with read-only data symbols (the model's weights) in the object.
pub fn compile_with_data(
    name: &str,
    funcs: &[PrimFunc],
    data: &[DataSymbol<'_>],
    target: &LlvmTarget,
) -> Result<LlvmOutput, CodegenError> {
    let ctx = Context::create();
    let module = build_module(&ctx, name, funcs, data, target)?;
    let tm = target.machine("llvm")?;
    let asm = tm.write_to_memory_buffer(&module, FileType::Assembly).map_err(|m| llvm_err(name, m))?;
    let obj = tm.write_to_memory_buffer(&module, FileType::Object).map_err(|m| llvm_err(name, m))?;
    Ok(LlvmOutput {
        llvm_ir: module.print_to_string().to_string(),
        assembly: String::from_utf8_lossy(asm.as_slice()).into_owned(),
        object: obj.as_slice().to_vec(),
    })
}

/// Kernels compiled in process. The LLVM context is leaked on purpose: the
/// JIT'd code must outlive every borrow of it, and a process JITs few modules.
pub struct Jit {
    engine: ExecutionEngine<'static>,
    _module: Module<'static>,
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jit")
    }
}

impl Jit {
    /// JIT-compile `funcs` for the host.
    pub fn new(name: &str, funcs: &[PrimFunc]) -> Result<Jit, CodegenError> {
        Jit::for_target(name, funcs, &LlvmTarget::native())
    }

    /// JIT-compile `funcs` for `target`'s CPU and features, which must be
    /// this machine's architecture: an AVX2 build (`-mcpu=znver3`) runs on an
    /// AVX-512 machine too. The caller checks that this CPU has the features
    /// (`TargetDescription::first_missing_on_this_cpu`) before running a kernel.
    pub fn for_target(name: &str, funcs: &[PrimFunc], target: &LlvmTarget) -> Result<Jit, CodegenError> {
        Target::initialize_native(&InitializationConfig::default()).map_err(|m| llvm_err(name, m))?;
        let ctx: &'static Context = Box::leak(Box::new(Context::create()));
        let module = build_module(ctx, name, funcs, &[], target)?;
        let engine =
            module.create_jit_execution_engine(OptimizationLevel::Aggressive).map_err(|m| llvm_err(name, m))?;
        Ok(Jit { engine, _module: module })
    }

    /// The packed entry point of kernel `name`.
    pub fn kernel(&self, name: &str) -> Result<PackedKernel, CodegenError> {
        let addr = self
            .engine
            .get_function_address(&format!("{name}_packed"))
            .map_err(|e| llvm_err(name, format!("no JIT'd kernel: {e}")))?;
        // SAFETY: `<name>_packed` was emitted with exactly the `PackedKernel` signature.
        Ok(unsafe { std::mem::transmute::<usize, PackedKernel>(addr) })
    }
}

/// A parsed `cuda` target string: `cuda`, `cuda -arch=sm_80` (the default SM;
/// PTX for an older SM runs on newer GPUs through the driver's JIT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaTarget {
    pub arch: String,
}

impl CudaTarget {
    pub fn parse(s: &str) -> Result<CudaTarget, CodegenError> {
        let bad = |what: String| CodegenError::BadTarget { target: s.to_string(), message: what };
        let mut words = s.split_whitespace();
        if words.next() != Some("cuda") {
            return Err(bad("a CUDA target string starts with `cuda`".into()));
        }
        let mut t = CudaTarget { arch: "sm_80".into() };
        for w in words {
            match w.strip_prefix("-arch=") {
                Some(a) if a.strip_prefix("sm_").is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n >= 35)) => {
                    t.arch = a.to_string()
                }
                Some(a) => return Err(bad(format!("unknown architecture `{a}`; expected sm_NN (35 or newer)"))),
                None => return Err(bad(format!("unknown option `{w}`; expected -arch=sm_NN"))),
            }
        }
        Ok(t)
    }

    /// The PTX ISA version LLVM 14 needs for this SM (the oldest that has it).
    fn ptx_feature(&self) -> &'static str {
        match self.arch.trim_start_matches("sm_").parse::<u32>().unwrap_or(80) {
            n if n >= 86 => "+ptx71",
            n if n >= 80 => "+ptx70",
            n if n >= 75 => "+ptx63",
            n if n >= 70 => "+ptx60",
            _ => "+ptx50",
        }
    }
}

/// Emit the GPU kernel `f` (loops bound to thread and block indices by the GPU
/// schedule) as a `ptx_kernel` taking one pointer per buffer.
fn emit_gpu_kernel<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>, f: &PrimFunc) -> Result<(), CodegenError> {
    let mut g = start_kernel(ctx, module, f, true)?;
    let func = g.func;
    g.stmt(&f.body)?;
    g.e(g.b.build_return(None))?;
    let kernel_md = ctx.metadata_node(&[
        func.as_global_value().as_pointer_value().into(),
        ctx.metadata_string("kernel").into(),
        ctx.i32_type().const_int(1, false).into(),
    ]);
    module.add_global_metadata("nvvm.annotations", &kernel_md).map_err(|e| llvm_err(&f.name, e))?;
    Ok(())
}

/// Compile GPU-scheduled kernels to PTX text for `target`.
pub fn compile_ptx(name: &str, funcs: &[PrimFunc], target: &CudaTarget) -> Result<String, CodegenError> {
    Target::initialize_nvptx(&InitializationConfig::default());
    let ctx = Context::create();
    let module = ctx.create_module(name);
    let triple = TargetTriple::create("nvptx64-nvidia-cuda");
    let fail = |m: String| CodegenError::BadTarget { target: format!("cuda -arch={}", target.arch), message: m };
    let t = Target::from_triple(&triple).map_err(|e| fail(e.to_string()))?;
    let tm = t
        .create_target_machine(
            &triple,
            &target.arch,
            target.ptx_feature(),
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| fail(format!("LLVM cannot make an NVPTX target machine for `{}`", target.arch)))?;
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    for f in funcs {
        emit_gpu_kernel(&ctx, &module, f)?;
    }
    module.verify().map_err(|m| llvm_err(name, format!("invalid LLVM IR: {m}")))?;
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|m| llvm_err(name, format!("optimization pipeline: {m}")))?;
    let ptx = tm.write_to_memory_buffer(&module, FileType::Assembly).map_err(|m| llvm_err(name, m))?;
    Ok(String::from_utf8_lossy(ptx.as_slice()).into_owned())
}
