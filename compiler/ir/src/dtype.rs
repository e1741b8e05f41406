//! Element data types shared by every IR level.

use std::fmt;

/// The element type of a tensor. Names follow TVM (`float32`, `int64`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// `float32`: IEEE binary32.
    F32,
    /// `float16`: IEEE binary16.
    F16,
    /// `float64`: IEEE binary64.
    F64,
    /// `int64`: signed 64-bit integer.
    I64,
    /// `int32`: signed 32-bit integer.
    I32,
    /// `int16`: signed 16-bit integer.
    I16,
    /// `int8`: signed 8-bit integer.
    I8,
    /// `uint8`: unsigned 8-bit integer.
    U8,
    /// `uint16`: unsigned 16-bit integer.
    U16,
    /// `uint32`: unsigned 32-bit integer.
    U32,
    /// `uint64`: unsigned 64-bit integer.
    U64,
    /// `bool`: one byte, 0 or 1.
    Bool,
}

impl DataType {
    /// Every data type, in a fixed order (for tests and error messages).
    pub const ALL: [DataType; 12] = [
        DataType::F32,
        DataType::F16,
        DataType::F64,
        DataType::I64,
        DataType::I32,
        DataType::I16,
        DataType::I8,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::Bool,
    ];

    /// The TVM name: `float32`, `float16`, `float64`, `int64`, …, `uint64`, `bool`.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float32",
            DataType::F16 => "float16",
            DataType::F64 => "float64",
            DataType::I64 => "int64",
            DataType::I32 => "int32",
            DataType::I16 => "int16",
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::U16 => "uint16",
            DataType::U32 => "uint32",
            DataType::U64 => "uint64",
            DataType::Bool => "bool",
        }
    }

    /// Parse a TVM name (`float32`, or TVM's 32-bit shorthands `float`,
    /// `int`, `uint`) or a Rust name (`f32`).
    pub fn from_name(name: &str) -> Option<DataType> {
        Some(match name {
            "float32" | "f32" | "float" => DataType::F32,
            "float16" | "f16" => DataType::F16,
            "float64" | "f64" => DataType::F64,
            "int64" | "i64" => DataType::I64,
            "int32" | "i32" | "int" => DataType::I32,
            "int16" | "i16" => DataType::I16,
            "int8" | "i8" => DataType::I8,
            "uint8" | "u8" => DataType::U8,
            "uint16" | "u16" => DataType::U16,
            "uint32" | "u32" | "uint" => DataType::U32,
            "uint64" | "u64" => DataType::U64,
            "bool" => DataType::Bool,
            _ => return None,
        })
    }

    /// Bytes per element (bool is stored as one byte, 0 or 1).
    pub const fn size_bytes(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F16 | DataType::I16 | DataType::U16 => 2,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
            DataType::I8 | DataType::U8 | DataType::Bool => 1,
        }
    }

    /// `float16`, `float32` or `float64`.
    pub const fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::F64)
    }

    /// Signed or unsigned integer (not bool).
    pub const fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// `int8` to `int64`.
    pub const fn is_signed_int(self) -> bool {
        matches!(self, DataType::I64 | DataType::I32 | DataType::I16 | DataType::I8)
    }

    /// `uint8` to `uint64` (not bool).
    pub const fn is_unsigned_int(self) -> bool {
        matches!(self, DataType::U8 | DataType::U16 | DataType::U32 | DataType::U64)
    }

    /// Unsigned in machine terms: unsigned integers and bool (stored as 0/1).
    pub const fn is_unsigned(self) -> bool {
        self.is_unsigned_int() || self.is_bool()
    }

    /// The smallest and largest values of an integer type (bool: 0 and 1);
    /// ±∞ for floats. As `f64`, so 64-bit limits are rounded.
    pub fn value_range(self) -> (f64, f64) {
        match self {
            DataType::I8 => (i8::MIN as f64, i8::MAX as f64),
            DataType::I16 => (i16::MIN as f64, i16::MAX as f64),
            DataType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DataType::I64 => (i64::MIN as f64, i64::MAX as f64),
            DataType::U8 => (0.0, u8::MAX as f64),
            DataType::U16 => (0.0, u16::MAX as f64),
            DataType::U32 => (0.0, u32::MAX as f64),
            DataType::U64 => (0.0, u64::MAX as f64),
            DataType::Bool => (0.0, 1.0),
            DataType::F32 | DataType::F16 | DataType::F64 => (f64::NEG_INFINITY, f64::INFINITY),
        }
    }

    /// Whether this is `bool`.
    pub const fn is_bool(self) -> bool {
        matches!(self, DataType::Bool)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for dt in DataType::ALL {
            assert_eq!(DataType::from_name(dt.name()), Some(dt));
        }
        assert_eq!(DataType::from_name("float128"), None);
    }
}
