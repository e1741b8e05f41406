//! Kernels compiled as C by the system C compiler into a shared object and
//! loaded into this process: the C backend's [`KernelLibrary`] for `kiln run`
//! and the tests (shipped binaries link the C statically instead).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::host::KernelLibrary;
use super::RunError;
use crate::codegen::PackedKernel;
use crate::tir::PrimFunc;

/// A shared object built from kiln's C for some kernels, and loaded. Its
/// directory is removed when it is dropped.
pub struct CLibrary {
    lib: libloading::Library,
    dir: PathBuf,
}

impl std::fmt::Debug for CLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CLibrary").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl CLibrary {
    /// Generate C for `kernels`, compile it with `$CC` (default `cc`) at
    /// `-O<opt_level>`, and load it.
    pub fn build(kernels: &[PrimFunc], opt_level: u8) -> Result<CLibrary, RunError> {
        let err = |message: String| RunError::CCompiler { message };
        let src = crate::codegen::c::codegen_module(kernels).map_err(|e| err(e.to_string()))?;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kiln-c-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let (cfile, so) = (dir.join("kernels.c"), dir.join("kernels.so"));
        let built = (|| {
            std::fs::write(&cfile, &src).map_err(|e| err(format!("{}: {e}", cfile.display())))?;
            // The C compiler a user points cargo and `cc` at; not a build-script input.
            #[allow(clippy::disallowed_methods)]
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let out = std::process::Command::new(&cc)
                .arg(format!("-O{opt_level}"))
                .args(["-std=c99", "-shared", "-fPIC", "-o"])
                .arg(&so)
                .arg(&cfile)
                .arg("-lm")
                .output()
                .map_err(|e| err(format!("cannot run `{cc}`: {e}")))?;
            if !out.status.success() {
                return Err(err(format!(
                    "`{cc}` rejected the generated kernels: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            // SAFETY: the library is the C just generated; loading it runs no initializers of ours.
            unsafe { libloading::Library::new(&so) }.map_err(|e| err(format!("{}: {e}", so.display())))
        })();
        match built {
            Ok(lib) => Ok(CLibrary { lib, dir }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The loaded library, for the kernels' own (unpacked) symbols.
    pub fn library(&self) -> &libloading::Library {
        &self.lib
    }
}

impl Drop for CLibrary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl KernelLibrary for CLibrary {
    fn packed(&self, name: &str) -> Result<PackedKernel, RunError> {
        // SAFETY: every `<name>_packed` kiln's C backend emits has the PackedKernel signature.
        let sym: libloading::Symbol<PackedKernel> = unsafe { self.lib.get(format!("{name}_packed").as_bytes()) }
            .map_err(|e| RunError::MissingKernel { kernel: name.to_string(), message: e.to_string() })?;
        Ok(*sym)
    }
}
