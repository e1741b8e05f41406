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
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: name.clone(), source })?;
    if format == ModelFormat::Onnx {
        return onnx::import_with(&bytes, shapes, bound).map_err(|source| LoadError::Onnx { path: name, source });
    }
    if !bound.is_empty() {
        return Err(LoadError::BindingRelay { path: name });
    }
    let relay = |source| LoadError::Relay { path: name.clone(), source };
    // Modules without `@main` parse (TVM's do): `print` and `opt` take
    // them, and what runs a model asks for `@main` and says it is missing.
    kiln_ir::relay::parse_module_file(&bytes).map_err(relay)
}
