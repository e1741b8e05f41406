//! Host tensors: constants in the IR and values in the reference interpreter.
//!
//! Data is kept as little-endian bytes of the element type, so a tensor hashes,
//! compares and serializes the same way whatever its dtype, and constants can be
//! hash-consed. Arithmetic goes through `f64` (exact for every float16/float32
//! value and for integers up to 2^53), which is what the interpreter wants of
//! an oracle: simple and at least as precise as the kernels it checks.

use std::fmt;
use std::sync::{Arc, OnceLock};

use half::f16;

use crate::dtype::DataType;

/// A dense, row-major tensor with a static shape.
#[derive(Clone, PartialEq, Eq)]
pub struct Tensor {
    dtype: DataType,
    shape: Vec<usize>,
    /// Shared: a clone (a folded reshape, an argument handed to an operator's
    /// reference implementation) copies no bytes, nor hashes them again.
    data: Arc<Bytes>,
}

/// A tensor's bytes, with their digest once it has been computed (the bytes
/// never change: every tensor that shares them hashes them once).
#[derive(Debug)]
struct Bytes {
    bytes: Storage,
    digest: OnceLock<u64>,
}

/// Where a tensor's bytes live.
enum Storage {
    Owned(Vec<u8>),
    /// Inside a buffer another owner keeps alive: a weight read in place
    /// from a memory-mapped model file, never copied.
    Shared(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl std::ops::Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Owned(v) => v,
            Storage::Shared(s) => (**s).as_ref(),
        }
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.len())
    }
}

impl Bytes {
    fn new(bytes: Vec<u8>) -> Arc<Bytes> {
        Arc::new(Bytes { bytes: Storage::Owned(bytes), digest: OnceLock::new() })
    }

    /// A 64-bit digest of the bytes (foldhash, fixed seed).
    fn digest(&self) -> u64 {
        use std::hash::BuildHasher;
        *self.digest.get_or_init(|| foldhash::quality::FixedState::with_seed(0x6b69_6c6e).hash_one(&*self.bytes))
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        // Digests already computed that differ settle it without reading the bytes.
        match (self.digest.get(), other.digest.get()) {
            (Some(a), Some(b)) if a != b => false,
            _ => *self.bytes == *other.bytes,
        }
    }
}

impl Eq for Bytes {}

impl std::hash::Hash for Tensor {
    /// The data enters the hasher as one 64-bit digest of all its bytes
    /// (foldhash, fixed seed, computed once per shared buffer): equal
    /// tensors hash equally, and a key over a model's weights costs one pass
    /// of a fast hash instead of SipHash over every byte at every use.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dtype.hash(state);
        self.shape.hash(state);
        state.write_u64(self.data.digest());
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{:?}, {}>", self.shape, self.dtype)?;
        if self.numel() <= 16 {
            write!(f, "{:?}", self.to_f64_vec())?;
        }
        Ok(())
    }
}

/// Number of elements of a shape (1 for a scalar); `usize::MAX` when the
/// product overflows, so that a size check after it fails instead of wrapping.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX)
}

/// Row-major strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

impl Tensor {
    /// A tensor from raw little-endian bytes; `None` if the length does not fit the shape.
    pub fn from_bytes(dtype: DataType, shape: Vec<usize>, data: Vec<u8>) -> Option<Tensor> {
        // Checked: a hostile shape's byte count may not fit a usize.
        let bytes = shape.iter().try_fold(dtype.size_bytes(), |a, &d| a.checked_mul(d));
        (bytes == Some(data.len())).then(|| Tensor { dtype, shape, data: Bytes::new(data) })
    }

    /// A tensor over bytes that `owner` keeps (a weight inside a
    /// memory-mapped model file): shared, not copied; `None` if their length
    /// does not fit the shape.
    pub fn from_shared(
        dtype: DataType,
        shape: Vec<usize>,
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Option<Tensor> {
        let bytes = numel(&shape).checked_mul(dtype.size_bytes());
        let data = Arc::new(Bytes { bytes: Storage::Shared(owner), digest: OnceLock::new() });
        (bytes == Some(data.bytes.len())).then(|| Tensor { dtype, shape, data })
    }

    /// A tensor of zeros.
    pub fn zeros(dtype: DataType, shape: Vec<usize>) -> Tensor {
        let n = numel(&shape) * dtype.size_bytes();
        Tensor { dtype, shape, data: Bytes::new(vec![0; n]) }
    }

    /// A tensor whose elements are `values` converted to `dtype` (floats are
    /// rounded to nearest, integers truncated toward zero and wrapped, bools are `!= 0`).
    /// `values.len()` must equal the shape's element count.
    pub fn from_f64(dtype: DataType, shape: Vec<usize>, values: &[f64]) -> Tensor {
        assert_eq!(values.len(), numel(&shape), "Tensor::from_f64: {} values for shape {shape:?}", values.len());
        let mut data = Vec::with_capacity(values.len() * dtype.size_bytes());
        if dtype == DataType::F32 {
            // The common case without the per-element dispatch (constant folding of weights).
            data.extend(values.iter().flat_map(|&v| (v as f32).to_le_bytes()));
        } else {
            for &v in values {
                encode(dtype, v, &mut data);
            }
        }
        Tensor { dtype, shape, data: Bytes::new(data) }
    }

    /// A `float32` tensor of `values`, row-major; `values.len()` must equal the shape's element count.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Tensor {
        assert_eq!(values.len(), numel(&shape), "Tensor::from_f32: {} values for shape {shape:?}", values.len());
        let mut data = Vec::with_capacity(values.len() * 4);
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        Tensor { dtype: DataType::F32, shape, data: Bytes::new(data) }
    }

    /// An `int64` tensor of `values`, row-major; `values.len()` must equal the shape's element count.
    pub fn from_i64(shape: Vec<usize>, values: &[i64]) -> Tensor {
        let v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
        Tensor::from_f64(DataType::I64, shape, &v)
    }

    /// A 0-d tensor.
    pub fn scalar(dtype: DataType, value: f64) -> Tensor {
        Tensor::from_f64(dtype, vec![], &[value])
    }

    /// A tensor of `shape` filled with `value`.
    pub fn full(dtype: DataType, shape: Vec<usize>, value: f64) -> Tensor {
        let n = numel(&shape);
        Tensor::from_f64(dtype, shape, &vec![value; n])
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The dimensions, outermost first (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// The 64-bit digest of the data that hashing the tensor uses (foldhash,
    /// fixed seed), computed once per shared buffer: a caller that made a
    /// large tensor on a worker thread computes it there, so that interning
    /// the tensor later (hash-consing reads it) costs the main thread nothing.
    pub fn digest(&self) -> u64 {
        self.data.digest()
    }

    /// The data: the elements row-major, each as little-endian bytes of the dtype.
    pub fn bytes(&self) -> &[u8] {
        &self.data.bytes
    }

    /// The element at flat index `i`, as `f64`.
    pub fn get_f64(&self, i: usize) -> f64 {
        let w = self.dtype.size_bytes();
        decode(self.dtype, &self.data.bytes[i * w..(i + 1) * w])
    }

    /// Every element as `f64`, row-major.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        if self.dtype == DataType::F32 {
            return self.f32_values().map(f64::from).collect();
        }
        let w = self.dtype.size_bytes();
        self.data.bytes.chunks_exact(w).map(|c| decode(self.dtype, c)).collect()
    }

    /// Every element as `f32`, row-major.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        if self.dtype == DataType::F32 {
            return self.f32_values().collect();
        }
        self.to_f64_vec().into_iter().map(|x| x as f32).collect()
    }

    /// The elements of a `float32` tensor, decoded without a per-element dtype dispatch.
    fn f32_values(&self) -> impl Iterator<Item = f32> + '_ {
        self.data.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The same data under another shape with the same element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Option<Tensor> {
        (numel(&shape) == self.numel()).then(|| Tensor { dtype: self.dtype, shape, data: self.data.clone() })
    }

    /// Element-wise conversion to another dtype.
    pub fn cast(&self, dtype: DataType) -> Tensor {
        Tensor::from_f64(dtype, self.shape.clone(), &self.to_f64_vec())
    }
}

fn encode(dtype: DataType, v: f64, out: &mut Vec<u8>) {
    // Integer conversion follows C/Rust `as` casts: truncate toward zero, wrap on overflow.
    let as_int = |v: f64| -> i64 {
        if v.is_nan() {
            0
        } else {
            v.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64
        }
    };
    match dtype {
        DataType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DataType::F16 => out.extend_from_slice(&f16::from_f64(v).to_le_bytes()),
        DataType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DataType::I64 => out.extend_from_slice(&as_int(v).to_le_bytes()),
        DataType::I32 => out.extend_from_slice(&(as_int(v) as i32).to_le_bytes()),
        DataType::I16 => out.extend_from_slice(&(as_int(v) as i16).to_le_bytes()),
        DataType::I8 => out.push(as_int(v) as i8 as u8),
        DataType::U8 => out.push(as_int(v) as u8),
        DataType::U16 => out.extend_from_slice(&(as_int(v) as u16).to_le_bytes()),
        DataType::U32 => out.extend_from_slice(&(as_int(v) as u32).to_le_bytes()),
        // Values past i64::MAX do not fit the signed path; `as u64` saturates them.
        DataType::U64 if v >= i64::MAX as f64 => out.extend_from_slice(&(v as u64).to_le_bytes()),
        DataType::U64 => out.extend_from_slice(&(as_int(v) as u64).to_le_bytes()),
        DataType::Bool => out.push((v != 0.0) as u8),
    }
}

fn decode(dtype: DataType, b: &[u8]) -> f64 {
    match dtype {
        DataType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DataType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DataType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        DataType::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
        DataType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DataType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        DataType::I8 => b[0] as i8 as f64,
        DataType::U8 => b[0] as f64,
        DataType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
        DataType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DataType::U64 => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
        DataType::Bool => (b[0] != 0) as u8 as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let t = Tensor::from_f64(DataType::I8, vec![3], &[1.7, -1.7, 200.0]);
        assert_eq!(t.to_f64_vec(), vec![1.0, -1.0, -56.0]);
        let b = Tensor::from_f64(DataType::Bool, vec![2], &[0.0, 3.0]);
        assert_eq!(b.to_f64_vec(), vec![0.0, 1.0]);
        let h = Tensor::from_f64(DataType::F16, vec![1], &[0.1]);
        assert!((h.get_f64(0) - 0.1).abs() < 1e-3);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(Tensor::scalar(DataType::F32, 2.5).shape(), &[] as &[usize]);
    }
}
