//! `Sequential`: passes in order, each after the passes it requires.

use std::sync::Arc;

use kiln_ir::relay::IRModule;

use super::context::PassContext;
use super::pass::{apply, Pass, PassError, PassInfo};
use super::registry::get_pass;

/// A pipeline of passes. Building one checks every `required` name exists
/// and that requirements have no cycle (TVM checks neither, and fails late).
///
/// ```
/// use kiln::transform::{apply, PassContext, Sequential};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Registered passes by name; a misspelt one is an error naming it.
/// let simplify = Sequential::from_names("Simplify", &["FoldConstant", "DeadCodeElimination"])?;
/// assert!(Sequential::from_names("Oops", &["FoldConstants"]).is_err());
/// let mut m = kiln::relay::parse_module("def @main(%x: float32) { let %unused = 2f; add(%x, multiply(2f, 3f)) }")?;
/// kiln::relay::infer_module(&mut m)?;
/// let out = apply(&simplify, m, &PassContext::new().with_opt_level(3))?;
/// let text = kiln::relay::print_module(&out);
/// assert!(text.contains("add(%x, 6f") && !text.contains("%unused"), "{text}");
/// # Ok(())
/// # }
/// ```
pub struct Sequential {
    info: PassInfo,
    passes: Vec<Arc<dyn Pass>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.passes.iter().map(|p| p.info().name.as_str()).collect();
        f.debug_struct("Sequential").field("name", &self.info.name).field("passes", &names).finish()
    }
}

/// The passes `pass` requires, transitively, in the order they must run
/// (dependencies first); errors on unknown names and cycles.
fn resolve(pass: &dyn Pass) -> Result<Vec<Arc<dyn Pass>>, PassError> {
    let mut order: Vec<Arc<dyn Pass>> = Vec::new();
    // Depth-first with an explicit path for cycle reports.
    fn visit(
        name: &str,
        required_by: &str,
        path: &mut Vec<String>,
        order: &mut Vec<Arc<dyn Pass>>,
    ) -> Result<(), PassError> {
        if path.iter().any(|p| p == name) {
            let mut chain: Vec<String> = path.clone();
            chain.push(name.to_string());
            return Err(PassError::Cycle { chain: chain.join(" -> ") });
        }
        if order.iter().any(|p| p.info().name == name) {
            return Ok(());
        }
        let Some(p) = get_pass(name) else {
            let mut chain = path.clone();
            chain.push(name.to_string());
            return Err(PassError::MissingRequired {
                pass: required_by.to_string(),
                required: name.to_string(),
                chain: chain.join(" -> "),
            });
        };
        path.push(name.to_string());
        for r in &p.info().required {
            visit(r, name, path, order)?;
        }
        path.pop();
        order.push(p);
        Ok(())
    }
    let me = pass.info().name.clone();
    let mut path = vec![me.clone()];
    for r in &pass.info().required {
        visit(r, &me, &mut path, &mut order)?;
    }
    Ok(order)
}

impl Sequential {
    /// A pipeline named `name` running `passes` in order.
    pub fn new(name: &str, passes: Vec<Arc<dyn Pass>>) -> Result<Sequential, PassError> {
        Self::with_info(PassInfo::new(name, 0, &[]), passes)
    }

    /// A pipeline with its own opt level and requirements (so it can sit in another `Sequential`).
    pub fn with_info(info: PassInfo, passes: Vec<Arc<dyn Pass>>) -> Result<Sequential, PassError> {
        for p in &passes {
            resolve(p.as_ref())?;
        }
        Ok(Sequential { info, passes })
    }

    /// A pipeline of registered passes, by name.
    pub fn from_names(name: &str, names: &[&str]) -> Result<Sequential, PassError> {
        let passes = names.iter().map(|n| super::registry::lookup(n)).collect::<Result<Vec<_>, _>>()?;
        Self::new(name, passes)
    }

    /// A pipeline built without checking requirements: for the registry's own
    /// built-in pipelines, whose requirements are the registry (checked by tests).
    pub(crate) fn unchecked(info: PassInfo, passes: Vec<Arc<dyn Pass>>) -> Sequential {
        Sequential { info, passes }
    }

    /// The passes as given, in order (their requirements are resolved when the pipeline runs).
    pub fn passes(&self) -> &[Arc<dyn Pass>] {
        &self.passes
    }

    /// The pipeline as a shared [`Pass`] (to nest it, or to register it).
    pub fn arc(self) -> Arc<dyn Pass> {
        Arc::new(self)
    }
}

impl Pass for Sequential {
    fn info(&self) -> &PassInfo {
        &self.info
    }

    fn run(&self, mut module: IRModule, ctx: &PassContext) -> Result<IRModule, PassError> {
        for p in &self.passes {
            if !ctx.pass_enabled(p.info()) {
                continue;
            }
            // Requirements run first, whatever their opt level; a disabled pass never runs.
            for req in resolve(p.as_ref())? {
                if !ctx.disabled.contains(&req.info().name) {
                    module = apply(req.as_ref(), module, ctx)?;
                }
            }
            module = apply(p.as_ref(), module, ctx)?;
        }
        Ok(module)
    }
}
