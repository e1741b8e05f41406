//! The proc-macros at work: `relay_model!` builds the same modules as Relay
//! text, and passes declared with `#[module_pass]` / `#[function_pass]`
//! behave like built-in passes in a `Sequential` (requirements, enabling
//! rules, instruments, results).

use std::sync::{Arc, Mutex};

use kiln::relay::{infer_module, parse_module, print_module, ExprId, IRModule};
use kiln::transform::{apply, PassContext, PassInfo, PassInstrument, Sequential};
use kiln::{function_pass, module_pass, relay_model};

relay_model! {
    /// The 784-128-10 MLP of the seeds.
    pub fn mlp(x: Tensor<[1, 784], f32>) -> Tensor<[1, 10], f32> {
        weight w1: [784, 128]; weight b1: [128];
        weight w2: [128, 10];  weight b2: [10];
        let h = relu(matmul(x, w1) + b1);
        matmul(h, w2) + b2
    }

    /// conv → batch norm → relu.
    fn conv_block(x: Tensor<[1, 3, 16, 16], f32>) -> Tensor<[1, 8, 16, 16], f32> {
        weight w: [8, 3, 3, 3];
        weight g: [8]; weight b: [8]; weight m: [8]; weight v: [8];
        let y = batch_norm(conv2d(x, w, padding = [1, 1, 1, 1], channels = 8, kernel_size = [3, 3]), g, b, m, v, epsilon = 1e-5);
        relu(y.0)
    }

    /// A ResNet basic block.
    fn residual_block(x: Tensor<[1, 8, 8, 8], f32>) -> Tensor<[1, 8, 8, 8], f32> {
        weight w1: [8, 8, 3, 3]; weight g1: [8]; weight b1: [8]; weight m1: [8]; weight v1: [8];
        weight w2: [8, 8, 3, 3]; weight g2: [8]; weight b2: [8]; weight m2: [8]; weight v2: [8];
        let (a, _, _) = nn::batch_norm(nn::conv2d(x, w1, padding = [1, 1]), g1, b1, m1, v1);
        let h = nn::relu(a);
        let c = nn::batch_norm(nn::conv2d(h, w2, padding = [1, 1]), g2, b2, m2, v2).0;
        relu(c + x)
    }

    /// Tuples, several outputs, unary minus and scalar literals.
    fn two_outputs(a: Tensor<[2, 3], f32>, b: Tensor<[3], f32>) -> (Tensor<[2, 3], f32>, Tensor<[2], f32>) {
        let d = (a - b) * 0.5;
        (-d / b, sum(d, axis = [1]))
    }
}

fn text(t: &str) -> IRModule {
    parse_module(&format!("#[version = \"0.0.5\"]\n{t}")).expect("parse")
}

#[test]
fn models_equal_their_relay_text() {
    let mlp_text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/relay/mlp.relay"))
        .expect("mlp.relay");
    assert!(mlp().structural_eq(&parse_module(&mlp_text).expect("parse")), "{}", print_module(&mlp()));
    let conv = text(
        "def @main(%x: Tensor[(1, 3, 16, 16), float32], %w: Tensor[(8, 3, 3, 3), float32], %g: Tensor[(8), float32], %b: Tensor[(8), float32], %m: Tensor[(8), float32], %v: Tensor[(8), float32]) -> Tensor[(1, 8, 16, 16), float32] {
           %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
           %1 = nn.batch_norm(%0, %g, %b, %m, %v, epsilon=1e-05f);
           nn.relu(%1.0)
         }",
    );
    assert!(conv_block().structural_eq(&conv), "{}", print_module(&conv_block()));
    let residual = text(
        "def @main(%x: Tensor[(1, 8, 8, 8), float32], %w1: Tensor[(8, 8, 3, 3), float32], %g1: Tensor[(8), float32], %b1: Tensor[(8), float32], %m1: Tensor[(8), float32], %v1: Tensor[(8), float32],
                   %w2: Tensor[(8, 8, 3, 3), float32], %g2: Tensor[(8), float32], %b2: Tensor[(8), float32], %m2: Tensor[(8), float32], %v2: Tensor[(8), float32]) -> Tensor[(1, 8, 8, 8), float32] {
           %0 = nn.conv2d(%x, %w1, padding=[1, 1]);
           %1 = nn.batch_norm(%0, %g1, %b1, %m1, %v1);
           %2 = nn.relu(%1.0);
           %3 = nn.conv2d(%2, %w2, padding=[1, 1]);
           %4 = nn.batch_norm(%3, %g2, %b2, %m2, %v2);
           %5 = add(%4.0, %x);
           nn.relu(%5)
         }",
    );
    assert!(residual_block().structural_eq(&residual), "{}", print_module(&residual_block()));
    let mut two = two_outputs();
    infer_module(&mut two).expect("typed");
    let printed = print_module(&two);
    assert!(
        printed.contains("multiply(%0, 0.5f)") && printed.contains("negative(") && printed.contains("sum("),
        "{printed}"
    );
}

/// A module pass: counts functions into a diagnostic and leaves the module as is.
#[module_pass(opt_level = 1, name = "CountFunctions", required = ["InferType"])]
fn count_functions(m: IRModule, ctx: &PassContext) -> IRModule {
    ctx.diagnose("CountFunctions", kiln::transform::Severity::Note, format!("{} function(s)", m.len()));
    m
}

/// A stateful function pass (the seeds' `TestReplaceFunc`): replaces every
/// function it sees by the one given to its constructor.
#[function_pass(opt_level = 2, required = ["CountFunctions"])]
struct ReplaceFunc {
    replacement: String,
}

impl ReplaceFunc {
    fn new(replacement: &str) -> Self {
        ReplaceFunc { replacement: replacement.to_string() }
    }

    fn transform_function(&self, _func: ExprId, module: &mut IRModule, _ctx: &PassContext) -> Result<ExprId, String> {
        let new = parse_module(&self.replacement).map_err(|e| e.to_string())?;
        let main = new.main().map_err(|e| e.to_string())?;
        Ok(module.store.import(&new.store, main))
    }
}

/// A function-pass function: renames nothing, but proves the signature works.
#[function_pass(opt_level = 0)]
fn identity_function(func: ExprId, _module: &mut IRModule, _ctx: &PassContext) -> ExprId {
    func
}

struct Log(Arc<Mutex<Vec<String>>>);
impl PassInstrument for Log {
    fn name(&self) -> &str {
        "Log"
    }
    fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), kiln::transform::PassBodyError> {
        self.0.lock().unwrap().push(info.name.clone());
        Ok(())
    }
}

#[test]
fn macro_passes_behave_like_builtin_passes() {
    CountFunctions::register().expect("register");
    CountFunctions::register().expect("registering the same pass again is fine");
    assert_eq!(CountFunctions::pass().info(), &PassInfo::new("CountFunctions", 1, &["InferType"]));
    assert_eq!(IdentityFunction::pass().info().name, "IdentityFunction");
    let replacement = "#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(1, 784), float32]) { negative(%x) }";
    let replace: Arc<dyn kiln::transform::Pass> = Arc::new(ReplaceFunc::new(replacement));
    assert_eq!(replace.info(), &PassInfo::new("ReplaceFunc", 2, &["CountFunctions"]));
    let seq =
        Sequential::new("UserPipeline", vec![IdentityFunction::pass(), replace.clone()]).expect("requirements resolve");

    // opt level 2: ReplaceFunc runs after what it requires (CountFunctions, which requires InferType);
    // as in TVM, every function pass is followed by an InferType of its own.
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = PassContext::new().with_instruments(vec![Arc::new(Log(log.clone()))]);
    let out = apply(&seq, mlp(), &ctx).expect("pipeline");
    assert_eq!(
        *log.lock().unwrap(),
        ["UserPipeline", "IdentityFunction", "InferType", "InferType", "CountFunctions", "ReplaceFunc", "InferType"]
    );
    assert!(print_module(&out).contains("negative(%x)"));
    assert_eq!(ctx.diagnostics()[0].message, "1 function(s)");

    // opt level 1: ReplaceFunc (level 2) does not run; disabled never runs.
    let log = Arc::new(Mutex::new(Vec::new()));
    let ctx = PassContext::new().with_opt_level(1).with_instruments(vec![Arc::new(Log(log.clone()))]);
    let out = apply(&seq, mlp(), &ctx).expect("pipeline");
    assert_eq!(*log.lock().unwrap(), ["UserPipeline", "IdentityFunction", "InferType"]);
    assert!(out.structural_eq(&mlp()));
    let ctx = PassContext::new().with_disabled(&["ReplaceFunc"]);
    assert!(apply(&seq, mlp(), &ctx).expect("pipeline").structural_eq(&mlp()));

    // A failing transform_function is a pass error naming the pass.
    let broken: Arc<dyn kiln::transform::Pass> = Arc::new(ReplaceFunc::new("not relay"));
    let e = apply(broken.as_ref(), mlp(), &PassContext::new()).unwrap_err().to_string();
    assert!(e.starts_with("pass `ReplaceFunc` failed: in `@main`: 1:1: parse error"), "{e}");
}

#[module_pass(opt_level = 0)]
fn refuse_everything(_m: IRModule, _ctx: &PassContext) -> Result<IRModule, std::io::Error> {
    Err(std::io::Error::other("disk on fire"))
}

#[test]
fn a_failing_macro_pass_reports_its_error_as_the_source() {
    let e = apply(RefuseEverything::pass().as_ref(), mlp(), &PassContext::new()).unwrap_err();
    assert_eq!(e.to_string(), "pass `RefuseEverything` failed: disk on fire");
    let source = std::error::Error::source(&e).expect("the body's error is the source");
    assert_eq!(source.to_string(), "disk on fire");
}
