use kiln::relay::{ExprId, IRModule};
use kiln::transform::PassContext;

#[kiln::function_pass(opt_level = 1)]
fn my_pass(func: ExprId, _m: &mut IRModule, _ctx: &PassContext) -> u32 {
    let _ = func;
    0
}
fn main() {}
