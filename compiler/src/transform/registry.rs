//! Passes by name (TVM's `GetPass`): the built-in passes and any user pass
//! registered with [`register_pass`] (the `#[module_pass]` and
//! `#[function_pass]` macros generate a registration function that calls it).
//!
//! The registry sits below the layers whose passes it holds: it never names
//! them. Each layer exports its passes as a provider function and the crate
//! root lists the providers (`BUILTIN_PASS_PROVIDERS` in `lib.rs`), as rustc's
//! driver wires each crate's query providers.

use std::sync::{Arc, OnceLock, RwLock};

use indexmap::IndexMap;

use super::pass::{Pass, PassError};

/// A layer's contribution to the registry: its built-in passes.
pub type PassProvider = fn() -> Vec<Arc<dyn Pass>>;

fn table() -> &'static RwLock<IndexMap<String, Arc<dyn Pass>>> {
    static TABLE: OnceLock<RwLock<IndexMap<String, Arc<dyn Pass>>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut m = IndexMap::new();
        for provide in crate::BUILTIN_PASS_PROVIDERS {
            for p in provide() {
                m.insert(p.info().name.clone(), p);
            }
        }
        RwLock::new(m)
    })
}

/// Register a pass under its name. Registering the same name twice is an
/// error unless it is the very same pass object (so registration can be idempotent).
pub fn register_pass(pass: Arc<dyn Pass>) -> Result<(), PassError> {
    let name = pass.info().name.clone();
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    match t.get(&name) {
        Some(existing) if Arc::ptr_eq(existing, &pass) => Ok(()),
        Some(_) => Err(PassError::Duplicate { name }),
        None => {
            t.insert(name, pass);
            Ok(())
        }
    }
}

/// The pass registered as `name`.
pub fn get_pass(name: &str) -> Option<Arc<dyn Pass>> {
    table().read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
}

/// [`get_pass`], or an error that suggests the nearest registered name.
pub fn lookup(name: &str) -> Result<Arc<dyn Pass>, PassError> {
    get_pass(name).ok_or_else(|| {
        let names = pass_names();
        let suggestion = names
            .iter()
            .map(|n| (strsim(name, n), n))
            .filter(|(d, n)| *d <= n.len() / 3 + 1)
            .min()
            .map(|(_, n)| n.clone());
        PassError::UnknownPass { name: name.to_string(), suggestion }
    })
}

/// Every registered pass name, in registration order.
pub fn pass_names() -> Vec<String> {
    table().read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
}

/// Case-insensitive edit distance, for suggestions.
fn strsim(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.to_lowercase().chars().collect(), b.to_lowercase().chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
