use kiln::relay::IRModule;

#[kiln::module_pass(opt_level = 1)]
fn my_pass(m: IRModule, level: u32) -> IRModule {
    let _ = level;
    m
}
fn main() {}
