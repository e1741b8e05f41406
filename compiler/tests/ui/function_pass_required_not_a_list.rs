use kiln::relay::{ExprId, IRModule};
use kiln::transform::PassContext;

#[kiln::function_pass(required = "InferType")]
fn my_pass(func: ExprId, _m: &mut IRModule, _ctx: &PassContext) -> ExprId {
    func
}
fn main() {}
