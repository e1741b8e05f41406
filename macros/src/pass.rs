//! `#[module_pass]` and `#[function_pass]`: a Rust function (or, for function
//! passes, a struct with state) becomes a `kiln::transform::Pass` with its
//! `PassInfo`, usable in a `Sequential` and registrable by name.
//!
//! For a function `fn my_pass(…)` the macro keeps the function and adds a
//! unit struct `MyPass` (the pass name in CamelCase, or `name = "…"`) with
//! `MyPass::pass()` (one shared `Arc<dyn Pass>`) and `MyPass::register()`.
//! For a struct it implements `Pass` for the struct, calling its
//! `transform_function` method.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, ItemStruct, Lit, LitInt, LitStr, ReturnType, Token, Type};

/// The arguments of the attribute: `opt_level = N, name = "…", required = ["…", …]`.
pub struct PassArgs {
    opt_level: Option<LitInt>,
    name: Option<LitStr>,
    required: Vec<LitStr>,
}

impl Parse for PassArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = PassArgs { opt_level: None, name: None, required: Vec::new() };
        let items: Punctuated<syn::MetaNameValue, Token![,]> = Punctuated::parse_terminated(input)?;
        for item in items {
            let key = item.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
            match key.as_str() {
                "opt_level" => match &item.value {
                    Expr::Lit(l) if matches!(&l.lit, Lit::Int(_)) => {
                        let Lit::Int(i) = &l.lit else { unreachable_lit() };
                        i.base10_parse::<u32>()
                            .map_err(|_| syn::Error::new(i.span(), "`opt_level` must be a non-negative integer"))?;
                        args.opt_level = Some(i.clone());
                    }
                    other => {
                        return Err(syn::Error::new(
                            other.span(),
                            "`opt_level` must be an integer literal, e.g. `opt_level = 2`",
                        ))
                    }
                },
                "name" => match &item.value {
                    Expr::Lit(l) if matches!(&l.lit, Lit::Str(_)) => {
                        let Lit::Str(s) = &l.lit else { unreachable_lit() };
                        args.name = Some(s.clone());
                    }
                    other => return Err(syn::Error::new(other.span(), "`name` must be a string literal")),
                },
                "required" => match &item.value {
                    Expr::Array(a) => {
                        for e in &a.elems {
                            match e {
                                Expr::Lit(l) if matches!(&l.lit, Lit::Str(_)) => {
                                    let Lit::Str(s) = &l.lit else { unreachable_lit() };
                                    args.required.push(s.clone());
                                }
                                other => {
                                    return Err(syn::Error::new(
                                        other.span(),
                                        "`required` lists pass names as string literals",
                                    ))
                                }
                            }
                        }
                    }
                    other => {
                        return Err(syn::Error::new(
                            other.span(),
                            "`required` must be a list of pass names, e.g. `required = [\"InferType\"]`",
                        ))
                    }
                },
                _ => {
                    return Err(syn::Error::new(
                        item.path.span(),
                        format!("unknown argument `{key}`; expected `opt_level`, `name` or `required`"),
                    ))
                }
            }
        }
        Ok(args)
    }
}

/// Only reached after a `matches!` on the same literal kind.
fn unreachable_lit() -> ! {
    unreachable!("literal kind checked by the enclosing guard")
}

fn camel_case(snake: &str) -> String {
    snake
        .split('_')
        .filter(|s| !s.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_uppercase().chain(c).collect::<String>()).unwrap_or_default()
        })
        .collect()
}

impl PassArgs {
    fn info(&self, default_name: &str) -> TokenStream {
        let name = self.name.as_ref().map(LitStr::value).unwrap_or_else(|| default_name.to_string());
        let level = self.opt_level.as_ref().map(|l| quote!(#l)).unwrap_or(quote!(0));
        let required = &self.required;
        quote! { ::kiln::transform::PassInfo::new(#name, #level, &[#(#required),*]) }
    }
}

/// The last path segment of a type, with `&`/`&mut` stripped: `&PassContext` → `PassContext`.
fn type_name(ty: &Type) -> (String, Option<bool>) {
    match ty {
        Type::Reference(r) => (type_name(&r.elem).0, Some(r.mutability.is_some())),
        Type::Path(p) => (p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(), None),
        _ => (String::new(), None),
    }
}

fn arg_types(f: &syn::Signature) -> syn::Result<Vec<&Type>> {
    f.inputs
        .iter()
        .map(|a| match a {
            FnArg::Typed(t) => Ok(&*t.ty),
            FnArg::Receiver(r) => Err(syn::Error::new(r.span(), "a pass function takes no `self`")),
        })
        .collect()
}

/// Whether the return type is `Result<…>` (errors become pass failures) or the plain value.
fn returns_result(ret: &ReturnType) -> bool {
    matches!(ret, ReturnType::Type(_, t) if type_name(t).0 == "Result")
}

fn expect_sig(sig: &syn::Signature, expected: &[(&str, Option<bool>)], ret: &str, shape: &str) -> syn::Result<()> {
    let types = arg_types(sig)?;
    if types.len() != expected.len() {
        return Err(syn::Error::new(
            sig.inputs.span().join(sig.ident.span()).unwrap_or(sig.ident.span()),
            format!("expected the signature `{shape}`"),
        ));
    }
    for (ty, (name, reference)) in types.iter().zip(expected) {
        let (got, r) = type_name(ty);
        if got != *name || r != *reference {
            return Err(syn::Error::new(
                ty.span(),
                format!(
                    "expected `{}{name}` here; the signature is `{shape}`",
                    match reference {
                        Some(true) => "&mut ",
                        Some(false) => "&",
                        None => "",
                    }
                ),
            ));
        }
    }
    let ok = match &sig.output {
        ReturnType::Type(_, t) => {
            let (n, _) = type_name(t);
            n == ret || n == "Result"
        }
        ReturnType::Default => false,
    };
    if !ok {
        let span = match &sig.output {
            ReturnType::Type(_, t) => t.span(),
            ReturnType::Default => sig.paren_token.span.close(),
        };
        return Err(syn::Error::new(
            span,
            format!("a pass returns `{ret}` or `Result<{ret}, E>`; the signature is `{shape}`"),
        ));
    }
    Ok(())
}

/// `#[module_pass]` on `fn(IRModule, &PassContext) -> IRModule`.
pub fn module_pass(args: PassArgs, item: ItemFn) -> syn::Result<TokenStream> {
    let shape = "fn(IRModule, &PassContext) -> IRModule";
    expect_sig(&item.sig, &[("IRModule", None), ("PassContext", Some(false))], "IRModule", shape)?;
    let fname = &item.sig.ident;
    let default_name = camel_case(&fname.to_string());
    let type_ident = args
        .name
        .as_ref()
        .map(|n| Ident::new(&camel_case(&n.value()), n.span()))
        .unwrap_or_else(|| format_ident!("{}", default_name));
    let info = args.info(&default_name);
    let call = if returns_result(&item.sig.output) {
        quote!(#fname(module, ctx).map_err(|e| ::kiln::transform::PassBodyError::from(e.to_string())))
    } else {
        quote!(Ok(#fname(module, ctx)))
    };
    let vis = &item.vis;
    let doc = format!("The module pass generated from [`{fname}`].");
    Ok(quote_spanned! {Span::call_site()=>
        #item

        #[doc = #doc]
        #[derive(Debug, Clone, Copy, Default)]
        #vis struct #type_ident;

        #[automatically_derived]
        impl #type_ident {
            /// The pass (one shared instance).
            #vis fn pass() -> ::std::sync::Arc<dyn ::kiln::transform::Pass> {
                static PASS: ::std::sync::OnceLock<::std::sync::Arc<dyn ::kiln::transform::Pass>> = ::std::sync::OnceLock::new();
                PASS.get_or_init(|| {
                    ::kiln::transform::ModulePass::new(#info, |module, ctx| #call).arc()
                }).clone()
            }

            /// Register the pass by name, so other passes can list it in `required`.
            #vis fn register() -> ::std::result::Result<(), ::kiln::transform::PassError> {
                ::kiln::transform::register_pass(Self::pass())
            }
        }
    })
}

/// `#[function_pass]` on `fn(ExprId, &mut IRModule, &PassContext) -> ExprId`,
/// or on a struct with a `transform_function(&self, …)` method of that shape.
pub fn function_pass(args: PassArgs, item: TokenStream) -> syn::Result<TokenStream> {
    if let Ok(s) = syn::parse2::<ItemStruct>(item.clone()) {
        return function_pass_struct(args, s);
    }
    let item: ItemFn = syn::parse2(item)
        .map_err(|e| syn::Error::new(e.span(), "`#[function_pass]` goes on a function or a struct"))?;
    let shape = "fn(ExprId, &mut IRModule, &PassContext) -> ExprId";
    expect_sig(
        &item.sig,
        &[("ExprId", None), ("IRModule", Some(true)), ("PassContext", Some(false))],
        "ExprId",
        shape,
    )?;
    let fname = &item.sig.ident;
    let default_name = camel_case(&fname.to_string());
    let type_ident = args
        .name
        .as_ref()
        .map(|n| Ident::new(&camel_case(&n.value()), n.span()))
        .unwrap_or_else(|| format_ident!("{}", default_name));
    let info = args.info(&default_name);
    let call = if returns_result(&item.sig.output) {
        quote!(#fname(func, module, ctx).map_err(|e| ::kiln::transform::PassBodyError::from(e.to_string())))
    } else {
        quote!(Ok(#fname(func, module, ctx)))
    };
    let vis = &item.vis;
    let doc = format!("The function pass generated from [`{fname}`].");
    Ok(quote! {
        #item

        #[doc = #doc]
        #[derive(Debug, Clone, Copy, Default)]
        #vis struct #type_ident;

        #[automatically_derived]
        impl #type_ident {
            /// The pass (one shared instance).
            #vis fn pass() -> ::std::sync::Arc<dyn ::kiln::transform::Pass> {
                static PASS: ::std::sync::OnceLock<::std::sync::Arc<dyn ::kiln::transform::Pass>> = ::std::sync::OnceLock::new();
                PASS.get_or_init(|| {
                    ::kiln::transform::FunctionPass::new(#info, |module, func, ctx| #call).arc()
                }).clone()
            }

            /// Register the pass by name, so other passes can list it in `required`.
            #vis fn register() -> ::std::result::Result<(), ::kiln::transform::PassError> {
                ::kiln::transform::register_pass(Self::pass())
            }
        }
    })
}

fn function_pass_struct(args: PassArgs, item: ItemStruct) -> syn::Result<TokenStream> {
    let ident = &item.ident;
    let default_name = ident.to_string();
    let info = args.info(&default_name);
    let (impl_generics, ty_generics, where_clause) = item.generics.split_for_impl();
    Ok(quote! {
        #item

        #[automatically_derived]
        impl #impl_generics ::kiln::transform::Pass for #ident #ty_generics #where_clause {
            fn info(&self) -> &::kiln::transform::PassInfo {
                static INFO: ::std::sync::OnceLock<::kiln::transform::PassInfo> = ::std::sync::OnceLock::new();
                INFO.get_or_init(|| #info)
            }

            fn run(
                &self,
                module: ::kiln::relay::IRModule,
                ctx: &::kiln::transform::PassContext,
            ) -> ::std::result::Result<::kiln::relay::IRModule, ::kiln::transform::PassError> {
                ::kiln::transform::run_function_pass(self.info(), module, ctx, |module, func, ctx| {
                    ::kiln::__private::IntoPassResult::into_pass_result(self.transform_function(func, module, ctx))
                })
            }
        }
    })
}
