//! ConvertLayout: convolutions over NHWC data with HWIO weights become NCHW /
//! OIHW convolutions between transposes — the layouts kiln's kernels take
//! (TVM's `ConvertLayout({"nn.conv2d": ["NCHW", "OIHW"]})`). The transposes
//! are injective, so they fuse into the neighbouring kernels, and a constant
//! weight's transpose is folded by FoldConstant.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::op::{conv2d_nchw_attrs, HWIO_TO_OIHW, NCHW_TO_NHWC, NHWC_TO_NCHW};
use kiln_ir::relay::{mutate, ExprId, ExprMutator, Store};

struct Convert {
    error: Option<String>,
}

fn transpose(store: &mut Store, x: ExprId, perm: [usize; 4], at: ExprId) -> Result<ExprId, String> {
    let axes = Attrs::from_pairs([("axes", AttrValue::Ints(perm.iter().map(|&p| p as i64).collect()))]);
    let span = store.span(at).clone();
    store.call_op_at("transpose", vec![x], axes, span).map_err(|e| e.to_string())
}

impl Convert {
    fn conv2d(&self, store: &mut Store, call: ExprId) -> Result<Option<ExprId>, String> {
        let Some(c) = store.as_call(call).cloned() else { return Ok(None) };
        let Some(nchw) = conv2d_nchw_attrs(&c.attrs).map_err(|e| e.to_string())? else { return Ok(None) };
        let [x, w] = c.args[..] else { return Ok(None) };
        let x = transpose(store, x, NHWC_TO_NCHW, call)?;
        let w = transpose(store, w, HWIO_TO_OIHW, call)?;
        let span = store.span(call).clone();
        let conv = store.call_op_at("nn.conv2d", vec![x, w], nchw, span).map_err(|e| e.to_string())?;
        transpose(store, conv, NCHW_TO_NHWC, call).map(Some)
    }
}

impl ExprMutator for Convert {
    fn rewrite_call(&mut self, store: &mut Store, _pre: ExprId, post: ExprId) -> ExprId {
        if store.op_name(post) != Some("nn.conv2d") {
            return post;
        }
        match self.conv2d(store, post) {
            Ok(new) => new.unwrap_or(post),
            Err(e) => {
                self.error.get_or_insert(e);
                post
            }
        }
    }
}

/// Convert the NHWC convolutions of one function; returns the new function handle.
pub fn convert_layout(store: &mut Store, func: ExprId) -> Result<ExprId, String> {
    let mut c = Convert { error: None };
    let out = mutate(store, func, &mut c);
    match c.error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
