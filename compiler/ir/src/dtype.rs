//! Element data types shared by every IR level.

use std::fmt;

/// The element type of a tensor. Names follow TVM (`float32`, `int64`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    F32,
    F16,
    I64,
    I32,
    I8,
    U8,
    Bool,
}

impl DataType {
    /// Every data type, in a fixed order (for tests and error messages).
    pub const ALL: [DataType; 7] =
        [DataType::F32, DataType::F16, DataType::I64, DataType::I32, DataType::I8, DataType::U8, DataType::Bool];

    /// The TVM name: `float32`, `float16`, `int64`, `int32`, `int8`, `uint8`, `bool`.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float32",
            DataType::F16 => "float16",
            DataType::I64 => "int64",
            DataType::I32 => "int32",
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::Bool => "bool",
        }
    }

    /// Parse a TVM name (`float32`) or a Rust name (`f32`).
    pub fn from_name(name: &str) -> Option<DataType> {
        Some(match name {
            "float32" | "f32" => DataType::F32,
            "float16" | "f16" => DataType::F16,
            "int64" | "i64" => DataType::I64,
            "int32" | "i32" => DataType::I32,
            "int8" | "i8" => DataType::I8,
            "uint8" | "u8" => DataType::U8,
            "bool" => DataType::Bool,
            _ => return None,
        })
    }

    /// Bytes per element (bool is stored as one byte, 0 or 1).
    pub const fn size_bytes(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::F16 => 2,
            DataType::I64 => 8,
            DataType::I8 | DataType::U8 | DataType::Bool => 1,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16)
    }

    pub const fn is_int(self) -> bool {
        matches!(self, DataType::I64 | DataType::I32 | DataType::I8 | DataType::U8)
    }

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
        assert_eq!(DataType::from_name("float64"), None);
    }
}
