//! Proc-macros of kiln, re-exported by the `kiln` crate: use them as
//! `kiln::relay_model!`, `#[kiln::module_pass]`, `#[kiln::function_pass]`.
//! See the `kiln` crate's documentation for runnable examples.

use proc_macro::TokenStream;

mod model;

/// Declare a model in Rust syntax; expands to a function returning its `IRModule`.
///
/// ```text
/// relay_model! {
///     /// The 784-128-10 MLP of the seeds.
///     pub fn mlp(x: Tensor<[1, 784], f32>) -> Tensor<[1, 10], f32> {
///         weight w1: [784, 128]; weight b1: [128];
///         weight w2: [128, 10];  weight b2: [10];
///         let h = relu(matmul(x, w1) + b1);
///         matmul(h, w2) + b2
///     }
/// }
/// ```
///
/// Inputs and weights become the parameters of `@main` (inputs first, then
/// weights in declaration order); weights are bound to values at build time.
/// `+ - * /` and unary `-` are the broadcasting `add`, `subtract`, `multiply`,
/// `divide`, `negative`; any registered operator is called by its name
/// (`nn::conv2d(x, w, padding = [1, 1])`, or just `conv2d`) with attributes
/// given by name; `t.0` reads a tuple field; `let (a, b) = split(…);` destructures.
/// Every shape is checked while the macro expands.
#[proc_macro]
pub fn relay_model(input: TokenStream) -> TokenStream {
    let models = syn::parse_macro_input!(input as model::Models);
    model::expand(models).unwrap_or_else(syn::Error::into_compile_error).into()
}

mod pass;

/// Turn `fn(IRModule, &PassContext) -> IRModule` (or `-> Result<IRModule, E>`)
/// into a registered module pass.
///
/// Arguments: `opt_level = N` (default 0), `name = "Name"` (default: the
/// function's name in CamelCase), `required = ["InferType", …]` (default none).
/// Generates a unit struct of the pass's name with `pass()` and `register()`.
#[proc_macro_attribute]
pub fn module_pass(args: TokenStream, item: TokenStream) -> TokenStream {
    let original: proc_macro2::TokenStream = item.clone().into();
    let result = syn::parse::<pass::PassArgs>(args)
        .and_then(|args| Ok((args, syn::parse::<syn::ItemFn>(item)?)))
        .and_then(|(args, item)| pass::module_pass(args, item));
    with_original_on_error(result, original)
}

/// On error, keep the user's item next to the error so that one mistake
/// does not cascade into "unused" and "not found" diagnostics.
fn with_original_on_error(
    result: syn::Result<proc_macro2::TokenStream>,
    original: proc_macro2::TokenStream,
) -> TokenStream {
    match result {
        Ok(t) => t.into(),
        Err(e) => {
            let mut t = e.into_compile_error();
            t.extend(original);
            t.into()
        }
    }
}

/// Turn `fn(ExprId, &mut IRModule, &PassContext) -> ExprId` (or `-> Result<ExprId, E>`),
/// or a struct with a `transform_function(&self, func, module, ctx)` method of
/// that shape, into a function pass (which skips `SkipOptimization` functions).
///
/// Same arguments as [`module_pass`]. kiln's functions live in the module's
/// arena, so a function pass gets the function's handle and the module
/// mutably (to build new nodes), and returns the new function's handle.
#[proc_macro_attribute]
pub fn function_pass(args: TokenStream, item: TokenStream) -> TokenStream {
    let original: proc_macro2::TokenStream = item.clone().into();
    let result = syn::parse::<pass::PassArgs>(args).and_then(|args| pass::function_pass(args, item.into()));
    with_original_on_error(result, original)
}
