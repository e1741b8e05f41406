use kiln::relay::IRModule;
use kiln::transform::PassContext;

#[kiln::module_pass(level = 1)]
fn my_pass(m: IRModule, _ctx: &PassContext) -> IRModule {
    m
}
fn main() {}
