//! Frontends: models from other formats into Relay, and the loader that
//! picks one by file name (what `Build` and the `kiln` CLI share).

pub mod onnx;

use std::path::Path;

use kiln_ir::relay::IRModule;
use kiln_ir::Tensor;

/// Why a model file could not be loaded; each variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Io { path: String, source: std::io::Error },
    /// Relay text that does not parse (the error's span is `line:column`).
    #[error("{path}:{source}")]
    Relay { path: String, source: kiln_ir::Error },
    #[error("{path}: {source}")]
    Onnx { path: String, source: onnx::OnnxError },
    #[error("{path}: inputs can be bound to constants only in ONNX models")]
    BindingRelay { path: String },
}

/// What a model file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    RelayText,
    Onnx,
}

impl ModelFormat {
    /// ONNX for a `.onnx` file, Relay text otherwise.
    pub fn of_path(path: &Path) -> ModelFormat {
        if path.extension().is_some_and(|e| e == "onnx") {
            ModelFormat::Onnx
        } else {
            ModelFormat::RelayText
        }
    }
}

/// The model in `path`: ONNX (symbolic input dimensions fixed by `shapes`,
/// inputs named in `bound` made constants) or Relay text. Types are not inferred.
pub fn load_model(
    path: &Path,
    format: ModelFormat,
    shapes: &[(String, Vec<usize>)],
    bound: &[(String, Tensor)],
) -> Result<IRModule, LoadError> {
    let name = path.display().to_string();
    let io = |source| LoadError::Io { path: name.clone(), source };
    if format == ModelFormat::Onnx {
        let file = std::fs::File::open(path).map_err(io)?;
        return onnx::import_from(model_bytes(file).map_err(io)?, shapes, bound)
            .map_err(|source| LoadError::Onnx { path: name, source });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    if !bound.is_empty() {
        return Err(LoadError::BindingRelay { path: name });
    }
    let relay = |source| LoadError::Relay { path: name.clone(), source };
    // Modules without `@main` parse (TVM's do): `print` and `opt` take
    // them, and what runs a model asks for `@main` and says it is missing.
    kiln_ir::relay::parse_module_file(&bytes).map_err(relay)
}

/// Files from this size on are mapped into memory rather than read.
const MAP_FROM_BYTES: u64 = 1 << 20;

/// An ONNX file's bytes: mapped into memory when it is large (its weights
/// are then read in place: a 44 MB model read into a fresh buffer cost 50–80
/// ms of page faults on a 2-core VM, mapped 4 ms), else read.
fn model_bytes(mut file: std::fs::File) -> std::io::Result<prost::bytes::Bytes> {
    if file.metadata()?.len() >= MAP_FROM_BYTES {
        // SAFETY: the map is read-only and private; like every compiler that
        // maps its inputs (rustc, lld), kiln asks that a model file is not
        // rewritten while a build reads it. Where mapping fails, the file is read.
        if let Ok(map) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(prost::bytes::Bytes::from_owner(map));
        }
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes.into())
}
