//! NumPy `.npy` files (format versions 1–3): read into and write from [`Tensor`].
//!
//! Little-endian, C order, the dtypes kiln has (`<f8 <f4 <f2 <i8 <i4 <i2 |i1 <u8 <u4 <u2 |u1 |b1`).
//! A malformed file is an error saying what is wrong, never a panic.

use crate::dtype::DataType;
use crate::tensor::{numel, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

/// Why bytes are not an `.npy` file kiln can read; the message says what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NpyError {
    message: String,
}

impl From<String> for NpyError {
    fn from(message: String) -> Self {
        NpyError { message }
    }
}

impl From<&str> for NpyError {
    fn from(message: &str) -> Self {
        NpyError { message: message.to_string() }
    }
}

fn descr(dt: DataType) -> &'static str {
    match dt {
        DataType::F32 => "<f4",
        DataType::F16 => "<f2",
        DataType::F64 => "<f8",
        DataType::I64 => "<i8",
        DataType::I32 => "<i4",
        DataType::I16 => "<i2",
        DataType::I8 => "|i1",
        DataType::U8 => "|u1",
        DataType::U16 => "<u2",
        DataType::U32 => "<u4",
        DataType::U64 => "<u8",
        DataType::Bool => "|b1",
    }
}

fn parse_descr(d: &str) -> Result<DataType, NpyError> {
    Ok(match d {
        "<f4" | "=f4" => DataType::F32,
        "<f2" | "=f2" => DataType::F16,
        "<f8" | "=f8" => DataType::F64,
        "<i8" | "=i8" => DataType::I64,
        "<i4" | "=i4" => DataType::I32,
        "<i2" | "=i2" => DataType::I16,
        "|i1" | "<i1" | "=i1" => DataType::I8,
        "|u1" | "<u1" | "=u1" => DataType::U8,
        "<u2" | "=u2" => DataType::U16,
        "<u4" | "=u4" => DataType::U32,
        "<u8" | "=u8" => DataType::U64,
        "|b1" | "<b1" | "=b1" => DataType::Bool,
        other => {
            return Err(format!(
            "unsupported dtype '{other}' (kiln reads little-endian f8, f4, f2, i8, i4, i2, i1, u8, u4, u2, u1 and b1)"
        )
            .into())
        }
    })
}

/// The value of `key` in the header dictionary, as text.
fn field<'a>(header: &'a str, key: &str) -> Result<&'a str, NpyError> {
    let pat = format!("'{key}':");
    let at = header.find(&pat).ok_or_else(|| format!("the header has no '{key}'"))? + pat.len();
    let rest = header[at..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'').map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    };
    end.map(|e| &rest[..e]).ok_or_else(|| NpyError::from(format!("malformed '{key}' in the header")))
}

/// Parse a `.npy` file's bytes.
pub fn read_npy(bytes: &[u8]) -> Result<Tensor, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".into());
    }
    let (header_len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".into());
            }
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        v => return Err(format!("unsupported .npy version {v}").into()),
    };
    let end = start.checked_add(header_len).filter(|&e| e <= bytes.len()).ok_or("truncated header")?;
    let header = std::str::from_utf8(&bytes[start..end]).map_err(|_| "the header is not text")?;
    let dtype = parse_descr(field(header, "descr")?.trim_matches('\''))?;
    if field(header, "fortran_order")?.trim() != "False" {
        return Err("Fortran-order arrays are not supported".into());
    }
    let shape_text = field(header, "shape")?.trim_start_matches('(').trim_end_matches(')');
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| format!("bad dimension '{s}' in the shape")))
        .collect::<Result<_, _>>()?;
    let want = numel(&shape).checked_mul(dtype.size_bytes()).ok_or("the shape is too large")?;
    let data = &bytes[end..];
    if data.len() != want {
        return Err(
            format!("the data has {} bytes, the shape {:?} of {} needs {want}", data.len(), shape, dtype).into()
        );
    }
    Tensor::from_bytes(dtype, shape, data.to_vec()).ok_or_else(|| "the data does not fit the shape".into())
}

/// The `.npy` (version 1) bytes of a tensor.
pub fn write_npy(t: &Tensor) -> Vec<u8> {
    let shape = match t.shape() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        s => format!("({})", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}", descr(t.dtype()));
    // Pad so the data starts on a 64-byte boundary, ending with a newline.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.bytes().len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(t.bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        for dt in DataType::ALL {
            let t = Tensor::from_f64(dt, vec![2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
            assert_eq!(read_npy(&write_npy(&t)).unwrap(), t);
        }
        let s = Tensor::scalar(DataType::F32, 1.5);
        assert_eq!(read_npy(&write_npy(&s)).unwrap(), s);
        let v = Tensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]);
        let bytes = write_npy(&v);
        assert!(read_npy(&bytes[..bytes.len() - 1]).unwrap_err().to_string().contains("needs 16"));
        assert!(read_npy(b"hello").unwrap_err().to_string().contains("magic"));
        // Every truncation and every single-byte corruption is an Err or a tensor, never a panic.
        for n in 0..bytes.len() {
            let _ = read_npy(&bytes[..n]);
            let mut c = bytes.clone();
            c[n] = c[n].wrapping_add(77);
            let _ = read_npy(&c);
        }
    }

    #[test]
    fn reads_a_numpy_header() {
        // What numpy 1.x writes for np.zeros((1, 10), '<f4').
        let mut b = Vec::new();
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 10), }";
        let mut h = header.to_string();
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&[0u8; 40]);
        let t = read_npy(&b).unwrap();
        assert_eq!((t.shape(), t.dtype()), (&[1usize, 10][..], DataType::F32));
    }
}
