//! ONNX protobuf values → kiln values: element types, checked shapes, and
//! tensors from initializers and `Constant` attributes.

use onnx_protobuf::{tensor_proto::DataType as OnnxType, TensorProto};
use protobuf::Enum;

use kiln_ir::{DataType, Tensor};

/// The kiln data type of an ONNX element type, if kiln has it.
pub(crate) fn dtype(t: i32) -> Option<DataType> {
    Some(match OnnxType::from_i32(t)? {
        OnnxType::FLOAT => DataType::F32,
        OnnxType::FLOAT16 => DataType::F16,
        OnnxType::DOUBLE => DataType::F64,
        OnnxType::INT64 => DataType::I64,
        OnnxType::INT32 => DataType::I32,
        OnnxType::INT16 => DataType::I16,
        OnnxType::INT8 => DataType::I8,
        OnnxType::UINT8 => DataType::U8,
        OnnxType::UINT16 => DataType::U16,
        OnnxType::UINT32 => DataType::U32,
        OnnxType::UINT64 => DataType::U64,
        OnnxType::BOOL => DataType::Bool,
        _ => return None,
    })
}

/// The ONNX name of an element type code, for error messages.
pub(crate) fn onnx_type_name(t: i32) -> String {
    match OnnxType::from_i32(t) {
        Some(k) => format!("{k:?}").to_lowercase(),
        None => format!("element type {t}"),
    }
}

/// The largest tensor a model may declare or store, in bytes (2 GiB, the
/// protobuf limit of an ONNX file; larger sizes are corrupt or hostile).
pub(crate) const MAX_TENSOR_BYTES: usize = 1 << 31;

/// Dimensions as sizes: negative dimensions and totals over
/// [`MAX_TENSOR_BYTES`] are refused before anything is allocated.
pub(crate) fn checked_shape(dims: &[i64], dt: DataType) -> Result<Vec<usize>, String> {
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let bytes = shape.iter().try_fold(dt.size_bytes(), |a, &d| a.checked_mul(d));
    match bytes {
        Some(b) if b <= MAX_TENSOR_BYTES => Ok(shape),
        _ => Err(format!("shape {dims:?} of {dt} is larger than {MAX_TENSOR_BYTES} bytes")),
    }
}

/// A host tensor from an initializer or a `Constant` value.
pub(crate) fn tensor(t: &TensorProto) -> Result<Tensor, String> {
    if t.data_location.enum_value() == Ok(onnx_protobuf::tensor_proto::DataLocation::EXTERNAL) {
        return Err(format!("tensor `{}` keeps its data in an external file, which kiln does not read", t.name));
    }
    let dt = dtype(t.data_type).ok_or_else(|| {
        format!("tensor `{}` has data type {}, which kiln does not support", t.name, onnx_type_name(t.data_type))
    })?;
    let shape = checked_shape(&t.dims, dt)?;
    let n: usize = shape.iter().product();
    if !t.raw_data.is_empty() {
        return Tensor::from_bytes(dt, shape.clone(), t.raw_data.clone()).ok_or_else(|| {
            format!("tensor `{}`: {} bytes of raw data do not fit shape {shape:?} of {dt}", t.name, t.raw_data.len())
        });
    }
    if dt == DataType::F16 {
        // float16 values are stored as their bit patterns in int32_data.
        if t.int32_data.len() != n {
            return Err(format!("tensor `{}` has {} values for shape {shape:?}", t.name, t.int32_data.len()));
        }
        let bytes = t.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect();
        return Tensor::from_bytes(dt, shape, bytes).ok_or_else(|| format!("tensor `{}`: bad float16 data", t.name));
    }
    // The typed fields: int32_data holds every type of 32 bits or fewer,
    // uint64_data the unsigned 32- and 64-bit ones.
    let vals: Vec<f64> = match dt {
        DataType::F32 => t.float_data.iter().map(|&v| v as f64).collect(),
        DataType::F64 => t.double_data.clone(),
        DataType::I64 => t.int64_data.iter().map(|&v| v as f64).collect(),
        DataType::U32 | DataType::U64 => t.uint64_data.iter().map(|&v| v as f64).collect(),
        _ => t.int32_data.iter().map(|&v| v as f64).collect(),
    };
    if vals.len() != n {
        return Err(format!("tensor `{}` has {} values for shape {shape:?}", t.name, vals.len()));
    }
    Ok(Tensor::from_f64(dt, shape, &vals))
}
