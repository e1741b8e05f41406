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
//! A second index skips lowering's expensive half: `<model>.<key>.lowered`
//! maps the optimized (fused) module — its structure, the values of the
//! constants inside its fused functions (lowering reads those), not the
//! weights passed to kernels — to the keys of the objects its kernels
//! compiled to, and to the tuning notes the report shows. A rebuild whose
//! fused module is unchanged plans its executor but runs no TIR pass and
//! compiles no kernel.
//!
//! Entries of the model that the build no longer uses are removed; another
//! model's are left alone (several models may share one directory).

// Without LLVM there are no kernel objects: the cache is made, never filled.
#![cfg_attr(not(feature = "llvm"), allow(dead_code))]

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use kiln_ir::relay::{post_order, ExprKind, IRModule};
use rustc_hash::FxHashSet;

use crate::target::TargetDescription;
use crate::tir::PrimFunc;

/// What a lowered-module entry holds: the kernel objects, in order, and
/// what the generated code and the report need of each scheduled kernel
/// that its lowered form does not say.
#[derive(Debug)]
pub(super) struct LoweredKernels {
    pub(super) objects: Vec<Vec<u8>>,
    pub(super) kernels: Vec<KernelFacts>,
}

/// A scheduled kernel's facts, by name: whether it runs on the thread pool
/// (it has a parallel loop), and its tuning note (`tuning` attribute).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct KernelFacts {
    pub(super) name: String,
    pub(super) parallel: bool,
    pub(super) tuning: Option<String>,
}

impl KernelFacts {
    pub(super) fn of(k: &PrimFunc) -> KernelFacts {
        KernelFacts {
            name: k.name.clone(),
            parallel: k.body.has_parallel_loop(),
            tuning: k.attrs.get("tuning").cloned(),
        }
    }
}

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

    fn lowered_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.{key}.lowered", self.model))
    }

    /// The key of the lowered-module entry for the fused module `fused`
    /// under `settings` (the hash of what else steers lowering and
    /// scheduling: tuning knobs, target, optimization level, disabled
    /// passes, the model's name).
    pub(super) fn lowered_key(&self, fused: &IRModule, settings: u64) -> String {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.salt, settings).hash(&mut h);
        // The structure, with every non-scalar constant as its type only.
        kiln_ir::relay::print_module_structure(fused).hash(&mut h);
        // Constants inside fused functions become part of the kernels (LowerTE
        // reads them): their values count. The others are kernel arguments.
        let mut inside = FxHashSet::default();
        for (_, f) in fused.functions() {
            for id in post_order(&fused.store, &[f]) {
                if let ExprKind::Function(g) = fused.store.kind(id) {
                    if g.is_primitive() {
                        for inner in post_order(&fused.store, &[g.body]) {
                            if let ExprKind::Constant(c) = fused.store.kind(inner) {
                                if inside.insert(*c) {
                                    fused.store.constant_data(*c).hash(&mut h);
                                }
                            }
                        }
                    }
                }
            }
        }
        format!("{:016x}", h.finish())
    }

    /// The kernels of the lowered-module entry `key`, if it and every object
    /// it names are there and readable.
    pub(super) fn lowered(&self, key: &str) -> Option<LoweredKernels> {
        let text = std::fs::read_to_string(self.lowered_path(key)).ok()?;
        let entry: serde_json::Value = serde_json::from_str(&text).ok()?;
        let objects = (entry.get("objects")?.as_array()?.iter())
            .map(|k| k.as_str().filter(|k| is_key(k)).and_then(|k| self.get(k)))
            .collect::<Option<Vec<_>>>()?;
        let kernels = (entry.get("kernels")?.as_array()?.iter())
            .map(|k| {
                Some(KernelFacts {
                    name: k.get("name")?.as_str()?.to_string(),
                    parallel: k.get("parallel")?.as_bool()?,
                    tuning: match k.get("tuning")? {
                        serde_json::Value::Null => None,
                        note => Some(note.as_str()?.to_string()),
                    },
                })
            })
            .collect::<Option<Vec<_>>>()?;
        (!objects.is_empty()).then_some(LoweredKernels { objects, kernels })
    }

    /// Record that the fused module of `key` compiled to the objects
    /// `object_keys`, its scheduled kernels being `kernels`.
    pub(super) fn put_lowered(
        &self,
        key: &str,
        object_keys: &[String],
        kernels: &[KernelFacts],
    ) -> std::io::Result<()> {
        let kernels: Vec<serde_json::Value> = (kernels.iter())
            .map(|k| serde_json::json!({"name": k.name, "parallel": k.parallel, "tuning": k.tuning}))
            .collect();
        let entry = serde_json::json!({ "objects": object_keys, "kernels": kernels });
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!("{}.{key}.lowered.tmp", self.model));
        std::fs::write(&tmp, entry.to_string())?;
        std::fs::rename(&tmp, self.lowered_path(key))
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

    /// Remove this model's objects other than `keep` and lowered-module
    /// entries other than `keep_lowered`.
    pub(super) fn prune(&self, keep: &[String], keep_lowered: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let prefix = format!("{}.", self.model);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else { continue };
            // `<model>.<16 hex digits>.o` or `.lowered` only: `a.b` is not model `a`'s entry `b…` unless it is a key.
            let stale = match (rest.strip_suffix(".o"), rest.strip_suffix(".lowered")) {
                (Some(key), _) => is_key(key) && !keep.iter().any(|k| k == key),
                (_, Some(key)) => is_key(key) && key != keep_lowered,
                _ => false,
            };
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Whether `key` is a cache key: 16 hex digits.
fn is_key(key: &str) -> bool {
    key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())
}
