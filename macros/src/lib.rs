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
