//! bfloat16 conversions (`kiln.bf16_bits`, `kiln.bf16_value`) on scalars and
//! vectors alike: integer arithmetic on the float32 bits, as LLVM 14 has no
//! bfloat16 conversion instructions for x86.

use inkwell::types::BasicTypeEnum;
use inkwell::values::BasicValueEnum;
use inkwell::IntPredicate;

use super::*;
use crate::codegen::CodegenError;
use crate::tir::Intrinsic;

/// One integer operation on two scalars or two vectors alike.
macro_rules! int_op {
    ($self:ident, $a:expr, $b:expr, |$x:ident, $y:ident| $build:expr) => {
        match ($a, $b) {
            (BasicValueEnum::IntValue($x), BasicValueEnum::IntValue($y)) => $self.e($build)?.into(),
            (BasicValueEnum::VectorValue($x), BasicValueEnum::VectorValue($y)) => $self.e($build)?.into(),
            _ => return Err($self.unsupported("a bfloat16 conversion of mixed operands")),
        }
    };
}

impl<'ctx> FnGen<'_, 'ctx> {
    /// `f` (`Bf16Bits`: float32 → its bfloat16 bits, rounded to nearest even,
    /// NaN a quiet NaN; `Bf16Value`: bits in the low half → float32) of `v`,
    /// a scalar or a vector.
    pub(super) fn bf16_convert(
        &mut self,
        f: Intrinsic,
        v: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>, CodegenError> {
        let lanes = match v {
            BasicValueEnum::VectorValue(x) => Some(x.get_type().get_size()),
            _ => None,
        };
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        let (int_type, float_type): (BasicTypeEnum, BasicTypeEnum) = match lanes {
            Some(n) => (i32t.vec_type(n).into(), f32t.vec_type(n).into()),
            None => (i32t.into(), f32t.into()),
        };
        let c = |k: u64| -> BasicValueEnum<'ctx> {
            match lanes {
                Some(n) => inkwell::types::VectorType::const_vector(&vec![i32t.const_int(k, false); n as usize]).into(),
                None => i32t.const_int(k, false).into(),
            }
        };
        match f {
            Intrinsic::Bf16Value => {
                let bits: BasicValueEnum = match v {
                    BasicValueEnum::IntValue(x) => self.e(self.b.build_int_cast(x, i32t, "bits"))?.into(),
                    BasicValueEnum::VectorValue(x) => {
                        let t = int_type.into_vector_type();
                        self.e(self.b.build_int_cast(x, t, "bits"))?.into()
                    }
                    _ => return Err(self.unsupported("kiln.bf16_value of a float")),
                };
                let low: BasicValueEnum = int_op!(self, bits, c(0xffff), |x, y| self.b.build_and(x, y, "low"));
                let high: BasicValueEnum = int_op!(self, low, c(16), |x, y| self.b.build_left_shift(x, y, "high"));
                Ok(self.e(self.b.build_bit_cast(high, float_type, "bf16"))?)
            }
            Intrinsic::Bf16Bits => {
                let bits = self.e(self.b.build_bit_cast(v, int_type, "bits"))?;
                let odd: BasicValueEnum =
                    int_op!(self, bits, c(16), |x, y| self.b.build_right_shift(x, y, false, "odd"));
                let odd: BasicValueEnum = int_op!(self, odd, c(1), |x, y| self.b.build_and(x, y, "odd"));
                let bias: BasicValueEnum = int_op!(self, odd, c(0x7fff), |x, y| self.b.build_int_add(x, y, "bias"));
                let rounded: BasicValueEnum = int_op!(self, bits, bias, |x, y| self.b.build_int_add(x, y, "rounded"));
                let rounded: BasicValueEnum =
                    int_op!(self, rounded, c(16), |x, y| self.b.build_right_shift(x, y, false, "bf16"));
                // NaN: a quiet NaN (rounding could carry into the sign bit).
                let magnitude: BasicValueEnum =
                    int_op!(self, bits, c(0x7fff_ffff), |x, y| self.b.build_and(x, y, "magnitude"));
                let nan: BasicValueEnum = int_op!(self, magnitude, c(0x7f80_0000), |x, y| self.b.build_int_compare(
                    IntPredicate::UGT,
                    x,
                    y,
                    "nan"
                ));
                Ok(match nan {
                    BasicValueEnum::IntValue(n) => self.e(self.b.build_select(n, c(0x7fc0), rounded, "bf16"))?,
                    BasicValueEnum::VectorValue(n) => self.e(self.b.build_select(n, c(0x7fc0), rounded, "bf16"))?,
                    _ => return Err(self.unsupported("a bfloat16 rounding")),
                })
            }
            _ => Err(self.unsupported(&format!("{} as a bfloat16 conversion", f.name()))),
        }
    }
}
