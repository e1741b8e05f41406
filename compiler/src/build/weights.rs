//! Reading weights: `.safetensors` files (through the `safetensors` crate).

use kiln_ir::{DataType, Tensor};

/// Every tensor of a safetensors file, by name, in the file's order.
pub(crate) fn read_safetensors(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, String> {
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| format!("not a valid safetensors file: {e}"))?;
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let view = st.tensor(&name).map_err(|e| format!("`{name}`: {e}"))?;
        use safetensors::Dtype;
        let dtype = match view.dtype() {
            Dtype::F32 => DataType::F32,
            Dtype::F16 => DataType::F16,
            Dtype::F64 => DataType::F64,
            Dtype::I64 => DataType::I64,
            Dtype::I32 => DataType::I32,
            Dtype::I16 => DataType::I16,
            Dtype::I8 => DataType::I8,
            Dtype::U8 => DataType::U8,
            Dtype::U16 => DataType::U16,
            Dtype::U32 => DataType::U32,
            Dtype::U64 => DataType::U64,
            Dtype::BOOL => DataType::Bool,
            other => return Err(format!("`{name}` has dtype {other:?}, which kiln does not support")),
        };
        let t = Tensor::from_bytes(dtype, view.shape().to_vec(), view.data().to_vec())
            .ok_or_else(|| format!("`{name}`: the data does not fit its shape"))?;
        out.push((name, t));
    }
    Ok(out)
}
