//! AlterOpLayout: weights known at build time get the layout the kernels read
//! fastest. `nn.dense(x, W)` and `nn.matmul(x, W, transpose_b=true)` with a
//! constant `W` ([units, in]) become `nn.matmul(x, transpose(W))`: the matmul
//! schedule vectorizes over the output columns, which are then contiguous in
//! the weight. FoldConstant turns `transpose(W)` into the transposed constant.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{mutate, ExprId, ExprKind, ExprMutator, Store};

struct Alter;

impl ExprMutator for Alter {
    fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        let Some(name) = store.op_name(post) else { return post };
        let Some(call) = store.as_call(post).cloned() else { return post };
        let transposed_weight = match name {
            "nn.dense" => true,
            "nn.matmul" => {
                call.attrs.bool("transpose_b").unwrap_or(false) && !call.attrs.bool("transpose_a").unwrap_or(true)
            }
            _ => false,
        };
        let [x, w] = call.args[..] else { return post };
        if !transposed_weight || !matches!(store.kind(w), ExprKind::Constant(_)) {
            return post;
        }
        let span = store.span(post).clone();
        let Ok(wt) = store.call_op_at(
            "transpose",
            vec![w],
            Attrs::from_pairs([("axes", AttrValue::Ints(vec![1, 0]))]),
            span.clone(),
        ) else {
            return post;
        };
        let mut attrs = vec![("transpose_a", AttrValue::Bool(false)), ("transpose_b", AttrValue::Bool(false))];
        if let Ok(Some(units)) = call.attrs.opt_int("units") {
            attrs.push(("units", AttrValue::Int(units)));
        }
        store.call_op_at("nn.matmul", vec![x, wt], Attrs::from_pairs(attrs), span).unwrap_or(post)
    }
}

/// Rewrite one function; returns the new function handle.
pub fn alter_op_layout(store: &mut Store, func: ExprId) -> ExprId {
    mutate(store, func, &mut Alter)
}
