//! AMX tile statements (`kiln.amx_*`, made by `schedule/amx.rs`) as LLVM's
//! x86 tile intrinsics with immediate tile registers: `ldtilecfg` of a
//! constant 64-byte configuration, `tilezero`, `tileloadd64`,
//! `tilestored64`, `tdpbsud`, `tdpbf16ps`, `tilerelease`.

use inkwell::module::Linkage;
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, PointerValue};

use super::*;
use crate::codegen::CodegenError;
use crate::tir::{Expr, Intrinsic};

/// Palette 1: 8 tiles of up to 16 rows × 64 bytes.
const PALETTE: u8 = 1;

impl<'ctx> FnGen<'_, 'ctx> {
    /// Emits one AMX statement.
    pub(super) fn amx(&mut self, f: Intrinsic, args: &[Expr]) -> Result<(), CodegenError> {
        if !(self.features.amx || self.features.amx_bf16) {
            return Err(self.unsupported("an AMX tile statement on a target without AMX"));
        }
        let tile = |e: &Expr| -> Result<u64, CodegenError> {
            e.as_int()
                .filter(|t| (0..8).contains(t))
                .map(|t| t as u64)
                .ok_or_else(|| self.unsupported("an AMX tile register that is not a constant in 0..8"))
        };
        let i8t = self.ctx.i8_type();
        match (f, args) {
            (Intrinsic::AmxConfig, shape) if shape.len() == 16 => {
                let ptr = self.tile_config(shape)?;
                self.call_void("llvm.x86.ldtilecfg", &[ptr.into()])
            }
            (Intrinsic::AmxZero, [t]) => {
                let t = i8t.const_int(tile(t)?, false);
                self.call_void("llvm.x86.tilezero", &[t.into()])
            }
            (Intrinsic::AmxLoad | Intrinsic::AmxStore, [t, Expr::Load(buf, idx), stride]) => {
                let t = i8t.const_int(tile(t)?, false);
                let addr = self.address(buf, idx)?;
                let addr = self.byte_pointer(addr)?;
                let stride = self.expr(stride)?;
                let name = if f == Intrinsic::AmxLoad { "llvm.x86.tileloadd64" } else { "llvm.x86.tilestored64" };
                self.call_void(name, &[t.into(), addr.into(), stride.into()])
            }
            (Intrinsic::AmxDotS8U8 | Intrinsic::AmxDotBf16, [c, a, b]) => {
                let [c, a, b] = [tile(c)?, tile(a)?, tile(b)?].map(|t| i8t.const_int(t, false).into());
                if f == Intrinsic::AmxDotBf16 && !self.features.amx_bf16 {
                    return Err(self.unsupported("a bfloat16 tile product on a target without amx-bf16"));
                }
                let name = if f == Intrinsic::AmxDotS8U8 { "llvm.x86.tdpbsud" } else { "llvm.x86.tdpbf16ps" };
                self.call_void(name, &[c, a, b])
            }
            (Intrinsic::AmxRelease, []) => self.call_void("llvm.x86.tilerelease", &[]),
            _ => Err(self.unsupported(&format!("{} with these arguments", f.name()))),
        }
    }

    /// A private constant holding the tile configuration (palette, then
    /// bytes per row of each tile as 16-bit words, then rows as bytes).
    fn tile_config(&mut self, shape: &[Expr]) -> Result<PointerValue<'ctx>, CodegenError> {
        let mut bytes = [0u8; 64];
        bytes[0] = PALETTE;
        for (t, pair) in shape.chunks(2).enumerate() {
            let (rows, width) = (pair[0].as_int(), pair[1].as_int());
            let (Some(rows @ 0..=16), Some(width @ 0..=64)) = (rows, width) else {
                return Err(self.unsupported("an AMX tile shape over 16 rows × 64 bytes"));
            };
            bytes[16 + 2 * t..18 + 2 * t].copy_from_slice(&(width as u16).to_le_bytes());
            bytes[48 + t] = rows as u8;
        }
        let i8t = self.ctx.i8_type();
        let values: Vec<_> = bytes.iter().map(|&b| i8t.const_int(b as u64, false)).collect();
        let init = i8t.const_array(&values);
        let g = self.module.add_global(i8t.array_type(64), None, &format!("{}_amx_config", self.kernel));
        g.set_initializer(&init);
        g.set_constant(true);
        g.set_linkage(Linkage::Private);
        g.set_alignment(64);
        self.byte_pointer(g.as_pointer_value())
    }

    pub(super) fn byte_pointer(&self, p: PointerValue<'ctx>) -> Result<PointerValue<'ctx>, CodegenError> {
        self.e(self.b.build_pointer_cast(p, compat::pointer_to(self.ctx, self.ctx.i8_type()), "bytes"))
    }

    pub(super) fn call_void(&mut self, name: &str, args: &[BasicMetadataValueEnum<'ctx>]) -> Result<(), CodegenError> {
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let params: Vec<BasicMetadataTypeEnum> = args
                    .iter()
                    .map(|a| match a {
                        BasicMetadataValueEnum::IntValue(v) => v.get_type().into(),
                        BasicMetadataValueEnum::PointerValue(v) => v.get_type().into(),
                        _ => self.ctx.i64_type().into(),
                    })
                    .collect();
                self.module.add_function(name, self.ctx.void_type().fn_type(&params, false), Some(Linkage::External))
            }
        };
        self.e(self.b.build_call(f, args, ""))?;
        Ok(())
    }
}
