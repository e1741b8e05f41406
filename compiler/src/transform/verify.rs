//! Well-formedness of a Relay module, checked between passes.

use rustc_hash::FxHashSet;

use kiln_ir::relay::{post_order, ExprKind, IRModule};

/// Well-typed: kiln's type inference succeeds on a copy (the module's own
/// checked types stay as they are).
pub fn well_typed(m: &IRModule) -> Result<(), kiln_ir::Error> {
    let mut copy = m.clone();
    kiln_ir::relay::infer_module(&mut copy)
}

/// Every global is a function; children precede parents; binders are
/// variables; every variable used is bound by an enclosing function or `let`
/// (checked per function: a use must come after its binder was seen); every
/// `@name` refers to a function of the module.
pub fn well_formed(m: &IRModule) -> Result<(), kiln_ir::Error> {
    check(m).map_err(|message| kiln_ir::Error::invalid(kiln_ir::Span::Unknown, message))
}

fn check(m: &IRModule) -> Result<(), String> {
    let store = &m.store;
    for (name, f) in m.functions() {
        if !store.contains(f) || store.as_function(f).is_none() {
            return Err(format!("`@{name}` is not bound to a function"));
        }
        let order = post_order(store, &[f]);
        let mut bound: FxHashSet<_> = FxHashSet::default();
        for &id in &order {
            match store.kind(id) {
                ExprKind::Let { var, .. } => {
                    if store.as_var(*var).is_none() {
                        return Err(format!("in `@{name}`: a `let` binds something that is not a variable"));
                    }
                    bound.insert(*var);
                }
                ExprKind::Function(func) => {
                    for p in &func.params {
                        if store.as_var(*p).is_none() {
                            return Err(format!("in `@{name}`: a function parameter is not a variable"));
                        }
                        bound.insert(*p);
                    }
                }
                ExprKind::GlobalVar(g) if m.function(g).is_none() => {
                    return Err(format!("in `@{name}`: `@{g}` is not a function of the module"));
                }
                _ => {}
            }
            let mut bad = None;
            store.kind(id).for_each_child(|c| {
                if c >= id {
                    bad = Some(c);
                }
            });
            if let Some(c) = bad {
                return Err(format!("in `@{name}`: node {id:?} has child {c:?} that does not precede it"));
            }
        }
        for &id in &order {
            if let ExprKind::Var(v) = store.kind(id) {
                if !bound.contains(&id) {
                    return Err(format!("in `@{name}`: variable `%{}` is used but bound nowhere", v.name));
                }
            }
        }
    }
    Ok(())
}
