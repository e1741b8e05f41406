//! The compiled-kernel cache of [`Build::compile`](super::Build::compile):
//! each object of a model's kernels (the groups of
//! [`partition_kernels`](crate::codegen::llvm::partition_kernels)) is kept as
//! `<out dir>/kernel-cache/<model>.<key>.o`, the key hashing the kernels'
//! TIR text, the target description, the LLVM version and the kiln binary.
//! The weights are not in it: they go into an object of their own. So a
//! rebuild whose kernels did not change — new weights of the same network,
//! the most common rebuild while a model is trained — runs the passes and
//! writes the weights' object, but no kernel through LLVM's back end, most
//! of a cold build's time.
//!
//! Entries of the model that the build no longer uses are removed; another
//! model's are left alone (several models may share one directory).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::target::TargetDescription;
use crate::tir::PrimFunc;

pub(super) struct KernelCache {
    dir: PathBuf,
    model: String,
    /// What every key of this build shares: the target and the compiler.
    salt: u64,
}

impl KernelCache {
    /// The cache under `out_dir` for `model` built for `target`.
    pub(super) fn new(out_dir: &Path, model: &str, target: &TargetDescription) -> KernelCache {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        super::hash_code_generator(target, &mut h);
        KernelCache { dir: out_dir.join("kernel-cache"), model: model.to_string(), salt: h.finish() }
    }

    /// The key of the object compiled from `kernels`.
    pub(super) fn key(&self, kernels: &[PrimFunc]) -> String {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.salt.hash(&mut h);
        for k in kernels {
            // The printed kernel is everything codegen reads: names, attributes, body.
            crate::tir::print_prim_func(k).hash(&mut h);
        }
        format!("{:016x}", h.finish())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.{key}.o", self.model))
    }

    /// The object stored under `key`, if any.
    pub(super) fn get(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)).ok().filter(|bytes| !bytes.is_empty())
    }

    /// Store `object` under `key` (written aside, then renamed: a build
    /// stopped halfway leaves no truncated entry).
    pub(super) fn put(&self, key: &str, object: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!("{}.{key}.o.tmp", self.model));
        std::fs::write(&tmp, object)?;
        std::fs::rename(&tmp, self.path(key))
    }

    /// Remove this model's entries other than `keep`.
    pub(super) fn prune(&self, keep: &[String]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let prefix = format!("{}.", self.model);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(".o")) else { continue };
            // `<model>.<16 hex digits>.o` only: `a.b` is not model `a`'s entry `b…` unless it is a key.
            let is_key = key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit());
            if is_key && !keep.iter().any(|k| k == key) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
