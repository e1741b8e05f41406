//! `relay_model!`: a model written in Rust syntax becomes a function that
//! returns its Relay `IRModule`.
//!
//! The macro parses the model, builds the IR with `kiln-ir`'s builders and
//! runs each operator's own type relation while it goes, so an unknown
//! operator, a bad attribute, a wrong argument count or a shape mismatch is a
//! compile error on the user's token. The checked program is embedded as
//! Relay text and parsed back by the generated function.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{bracketed, Attribute, BinOp, Expr, Ident, Lit, LitInt, Pat, Token, UnOp, Visibility};

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{op_registry, ExprId, IRModule, Store, TensorType, Type};
use kiln_ir::{DataType, Tensor};

/// `Tensor<[d0, d1, …], dtype>`, a bare `[d0, …]` (float32), or a tuple of them.
#[derive(Clone)]
struct TypeAst {
    ty: Type,
    span: Span,
}

fn parse_dtype(input: ParseStream) -> syn::Result<DataType> {
    let id: Ident = input.parse()?;
    DataType::from_name(&id.to_string()).ok_or_else(|| {
        syn::Error::new(
            id.span(),
            format!("unknown dtype `{id}`; expected one of f32, f16, f64, i64, i32, i16, i8, u8, u16, u32, u64, bool"),
        )
    })
}

fn parse_dims(input: ParseStream) -> syn::Result<Vec<usize>> {
    let content;
    bracketed!(content in input);
    let dims: Punctuated<LitInt, Token![,]> = content.parse_terminated(LitInt::parse, Token![,])?;
    dims.iter().map(|d| d.base10_parse::<usize>()).collect()
}

impl Parse for TypeAst {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let span = input.span();
        if input.peek(syn::token::Bracket) {
            let shape = parse_dims(input)?;
            return Ok(TypeAst { ty: Type::tensor(shape, DataType::F32), span });
        }
        if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            let fields: Punctuated<TypeAst, Token![,]> = content.parse_terminated(TypeAst::parse, Token![,])?;
            return Ok(TypeAst { ty: Type::Tuple(fields.into_iter().map(|f| f.ty).collect()), span });
        }
        let head: Ident = input.parse()?;
        if head != "Tensor" {
            return Err(syn::Error::new(head.span(), "expected a tensor type: `Tensor<[dims], dtype>` or `[dims]`"));
        }
        input.parse::<Token![<]>()?;
        let shape = parse_dims(input)?;
        input.parse::<Token![,]>()?;
        let dtype = parse_dtype(input)?;
        input.parse::<Token![>]>()?;
        Ok(TypeAst { ty: Type::tensor(shape, dtype), span })
    }
}

enum Stmt {
    /// `weight name: [dims];` — a parameter bound to real values at build time.
    Weight(Ident, TypeAst),
    /// `let pat = expr;` with `pat` a name or a tuple of names.
    Let(Box<Pat>, Box<Expr>),
}

struct ModelFn {
    attrs: Vec<Attribute>,
    vis: Visibility,
    name: Ident,
    inputs: Vec<(Ident, TypeAst)>,
    ret: Option<TypeAst>,
    stmts: Vec<Stmt>,
    result: Expr,
}

impl Parse for ModelFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        let args;
        syn::parenthesized!(args in input);
        let mut inputs = Vec::new();
        while !args.is_empty() {
            let n: Ident = args.parse()?;
            args.parse::<Token![:]>()?;
            let t: TypeAst = args.parse()?;
            inputs.push((n, t));
            if args.is_empty() {
                break;
            }
            args.parse::<Token![,]>()?;
        }
        let ret = if input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        let body;
        syn::braced!(body in input);
        let mut stmts = Vec::new();
        loop {
            if body.peek(Ident) && body.peek2(Ident) && body.fork().parse::<Ident>()? == "weight" {
                body.parse::<Ident>()?;
                let n: Ident = body.parse()?;
                body.parse::<Token![:]>()?;
                let t: TypeAst = body.parse()?;
                body.parse::<Token![;]>()?;
                stmts.push(Stmt::Weight(n, t));
            } else if body.peek(Token![let]) {
                body.parse::<Token![let]>()?;
                let pat = Pat::parse_single(&body)?;
                body.parse::<Token![=]>()?;
                let e: Expr = body.parse()?;
                body.parse::<Token![;]>()?;
                stmts.push(Stmt::Let(Box::new(pat), Box::new(e)));
            } else {
                break;
            }
        }
        if body.is_empty() {
            return Err(syn::Error::new(name.span(), "the model has no result expression at the end of its body"));
        }
        let result: Expr = body.parse()?;
        if !body.is_empty() {
            return Err(body.error("expected the end of the model body after its result expression"));
        }
        Ok(ModelFn { attrs, vis, name, inputs, ret, stmts, result })
    }
}

/// Every model in one `relay_model!` invocation.
pub struct Models(Vec<ModelFn>);

impl Parse for Models {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut v = Vec::new();
        while !input.is_empty() {
            v.push(input.parse()?);
        }
        Ok(Models(v))
    }
}

/// Builds the IR of one model, tracking each node's type as it goes.
struct Builder {
    store: Store,
    env: HashMap<String, ExprId>,
    types: HashMap<ExprId, Type>,
}

/// The registry name for a call path: `nn::conv2d` → `nn.conv2d`; a bare
/// `relu` finds `relu` or else `nn.relu`.
fn resolve_op(path: &syn::Path) -> Result<&'static str, String> {
    let joined: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let dotted = joined.join(".");
    let registry = op_registry();
    for candidate in [dotted.clone(), format!("nn.{dotted}")] {
        if let Some(def) = registry.by_name(&candidate) {
            return Ok(def.name);
        }
    }
    let hint =
        registry.suggest(&dotted).map(|s| format!("; did you mean `{}`?", s.replace('.', "::"))).unwrap_or_default();
    Err(format!("unknown operator `{}`{hint}", joined.join("::")))
}

fn lit_value(expr: &Expr) -> syn::Result<AttrValue> {
    let err =
        || syn::Error::new(expr.span(), "expected an attribute value: a number, bool, string, dtype, None or a list");
    match expr {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Ok(AttrValue::Int(i.base10_parse()?)),
            Lit::Float(f) => Ok(AttrValue::Float(f.base10_parse()?)),
            Lit::Bool(b) => Ok(AttrValue::Bool(b.value)),
            Lit::Str(s) => Ok(AttrValue::Str(s.value())),
            _ => Err(err()),
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match lit_value(&u.expr)? {
            AttrValue::Int(i) => Ok(AttrValue::Int(-i)),
            AttrValue::Float(f) => Ok(AttrValue::Float(-f)),
            _ => Err(err()),
        },
        Expr::Path(p) if p.path.is_ident("None") => Ok(AttrValue::None),
        Expr::Path(p) => {
            let name = p.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
            DataType::from_name(&name).map(AttrValue::DType).ok_or_else(err)
        }
        Expr::Array(a) => {
            let items = a.elems.iter().map(lit_value).collect::<syn::Result<Vec<_>>>()?;
            if items.iter().all(|v| matches!(v, AttrValue::Int(_))) {
                Ok(AttrValue::Ints(items.iter().map(|v| if let AttrValue::Int(i) = v { *i } else { 0 }).collect()))
            } else if items.iter().all(|v| matches!(v, AttrValue::Int(_) | AttrValue::Float(_))) {
                let floats = items
                    .iter()
                    .map(|v| match v {
                        AttrValue::Int(i) => *i as f64,
                        AttrValue::Float(f) => *f,
                        _ => 0.0,
                    })
                    .collect();
                Ok(AttrValue::Floats(floats))
            } else {
                Err(err())
            }
        }
        _ => Err(err()),
    }
}

impl Builder {
    fn ty(&self, id: ExprId) -> &Type {
        &self.types[&id]
    }

    fn describe(&self, args: &[ExprId]) -> String {
        args.iter().map(|a| self.ty(*a).to_string()).collect::<Vec<_>>().join(", ")
    }

    /// A call of the operator `name`; errors point at `span`.
    fn call(&mut self, name: &str, args: Vec<ExprId>, attrs: Attrs, span: Span) -> syn::Result<ExprId> {
        let registry = op_registry();
        let def = registry.by_name(name).ok_or_else(|| syn::Error::new(span, format!("unknown operator `{name}`")))?;
        if args.len() != def.num_inputs {
            return Err(syn::Error::new(
                span,
                format!(
                    "`{}` takes {} argument(s) ({}), found {}",
                    def.name,
                    def.num_inputs,
                    def.inputs.join(", "),
                    args.len()
                ),
            ));
        }
        let id = self.store.call_op(name, args.clone(), attrs).map_err(|e| syn::Error::new(span, e.message()))?;
        let normalized = self.store.as_call(id).map(|c| c.attrs.clone()).unwrap_or_default();
        let arg_types: Vec<Type> = args.iter().map(|a| self.ty(*a).clone()).collect();
        let out = (def.type_rel)(&arg_types, &normalized).map_err(|e| {
            syn::Error::new(
                span,
                format!("type error in `{}`: {e} (argument types: {})", def.name, self.describe(&args)),
            )
        })?;
        self.types.insert(id, out);
        Ok(id)
    }

    /// A scalar constant for a literal, of the dtype of the other operand when there is one.
    fn literal(&mut self, lit: &Lit, dtype: DataType) -> syn::Result<ExprId> {
        let v = match lit {
            Lit::Int(i) => i.base10_parse::<i64>()? as f64,
            Lit::Float(f) => f.base10_parse::<f64>()?,
            Lit::Bool(b) => b.value as u8 as f64,
            _ => return Err(syn::Error::new(lit.span(), "only numeric and bool literals can be tensors")),
        };
        let dtype = if matches!(lit, Lit::Bool(_)) { DataType::Bool } else { dtype };
        let id = self.store.constant(Tensor::scalar(dtype, v));
        self.types.insert(id, Type::Tensor(TensorType::scalar(dtype)));
        Ok(id)
    }

    fn dtype_hint(&self, id: ExprId) -> DataType {
        self.ty(id).as_tensor().map(|t| t.dtype).unwrap_or(DataType::F32)
    }

    fn lower_hinted(&mut self, e: &Expr, hint: DataType) -> syn::Result<ExprId> {
        match e {
            Expr::Lit(l) => self.literal(&l.lit, hint),
            _ => self.lower(e),
        }
    }

    fn lower(&mut self, e: &Expr) -> syn::Result<ExprId> {
        match e {
            Expr::Paren(p) => self.lower(&p.expr),
            Expr::Group(g) => self.lower(&g.expr),
            Expr::Lit(l) => self.literal(&l.lit, DataType::F32),
            Expr::Path(p) => {
                let name = p.path.get_ident().map(|i| i.to_string()).unwrap_or_else(|| p.to_token_stream().to_string());
                self.env.get(&name).copied().ok_or_else(|| {
                    syn::Error::new(p.span(), format!("unknown name `{name}`: not an input, weight or `let` binding"))
                })
            }
            Expr::Binary(b) => {
                let name = match b.op {
                    BinOp::Add(_) => "add",
                    BinOp::Sub(_) => "subtract",
                    BinOp::Mul(_) => "multiply",
                    BinOp::Div(_) => "divide",
                    _ => return Err(syn::Error::new(b.op.span(), "only `+`, `-`, `*` and `/` are tensor operators")),
                };
                // A literal on either side takes the dtype of the other side.
                let (l, r) = if matches!(*b.left, Expr::Lit(_)) {
                    let r = self.lower(&b.right)?;
                    (self.lower_hinted(&b.left, self.dtype_hint(r))?, r)
                } else {
                    let l = self.lower(&b.left)?;
                    (l, self.lower_hinted(&b.right, self.dtype_hint(l))?)
                };
                self.call(name, vec![l, r], Attrs::new(), b.op.span())
            }
            Expr::Unary(u) => match u.op {
                UnOp::Neg(_) => {
                    let x = self.lower(&u.expr)?;
                    self.call("negative", vec![x], Attrs::new(), u.op.span())
                }
                _ => Err(syn::Error::new(u.op.span(), "only unary `-` is a tensor operator")),
            },
            Expr::Tuple(t) => {
                let fields = t.elems.iter().map(|f| self.lower(f)).collect::<syn::Result<Vec<_>>>()?;
                let types = fields.iter().map(|f| self.ty(*f).clone()).collect();
                let id = self.store.tuple(fields);
                self.types.insert(id, Type::Tuple(types));
                Ok(id)
            }
            Expr::Field(f) => {
                let syn::Member::Unnamed(index) = &f.member else {
                    return Err(syn::Error::new(f.member.span(), "only tuple fields (`.0`, `.1`, …) can be read"));
                };
                let tuple = self.lower(&f.base)?;
                let Some(fields) = self.ty(tuple).as_tuple().map(|f| f.to_vec()) else {
                    return Err(syn::Error::new(
                        f.member.span(),
                        format!("`.{}` of a non-tuple of type {}", index.index, self.ty(tuple)),
                    ));
                };
                let i = index.index as usize;
                let Some(field) = fields.get(i).cloned() else {
                    return Err(syn::Error::new(
                        index.span,
                        format!("index {i} out of range for a tuple of {} fields", fields.len()),
                    ));
                };
                let id = self.store.tuple_get_item(tuple, i);
                self.types.insert(id, field);
                Ok(id)
            }
            Expr::Call(c) => {
                let Expr::Path(p) = &*c.func else {
                    return Err(syn::Error::new(c.func.span(), "expected an operator name"));
                };
                let name = resolve_op(&p.path).map_err(|m| syn::Error::new(p.span(), m))?;
                let def = op_registry().by_name(name).ok_or_else(|| syn::Error::new(p.span(), "unknown operator"))?;
                let mut args = Vec::new();
                let mut attrs = Attrs::new();
                for a in &c.args {
                    if let Expr::Assign(assign) = a {
                        let key = match &*assign.left {
                            Expr::Path(k) if k.path.get_ident().is_some() => {
                                k.path.get_ident().map(|i| i.to_string()).unwrap_or_default()
                            }
                            other => return Err(syn::Error::new(other.span(), "expected an attribute name")),
                        };
                        let Some(spec) = def.attrs.iter().find(|s| s.name == key) else {
                            let valid: Vec<&str> = def.attrs.iter().map(|s| s.name).collect();
                            let msg = if valid.is_empty() {
                                format!("`{}` takes no attributes", def.name)
                            } else {
                                format!(
                                    "unknown attribute `{key}` for `{}`; valid attributes: {}",
                                    def.name,
                                    valid.join(", ")
                                )
                            };
                            return Err(syn::Error::new(assign.left.span(), msg));
                        };
                        let value = lit_value(&assign.right)?;
                        let value = spec.kind.coerce(value).map_err(|m| {
                            syn::Error::new(assign.right.span(), format!("attribute `{key}` of `{}`: {m}", def.name))
                        })?;
                        attrs.set(key, value);
                    } else {
                        if !attrs.is_empty() {
                            return Err(syn::Error::new(a.span(), "positional arguments must come before attributes"));
                        }
                        args.push(self.lower(a)?);
                    }
                }
                self.call(name, args, attrs, p.span())
            }
            other => Err(syn::Error::new(other.span(), "unsupported expression in a model")),
        }
    }

    fn bind(&mut self, pat: &Pat, value: ExprId) -> syn::Result<()> {
        match pat {
            Pat::Ident(i) => {
                self.env.insert(i.ident.to_string(), value);
                Ok(())
            }
            Pat::Tuple(t) => {
                let Some(fields) = self.ty(value).as_tuple().map(|f| f.to_vec()) else {
                    return Err(syn::Error::new(
                        t.span(),
                        format!("cannot destructure a value of type {}", self.ty(value)),
                    ));
                };
                if fields.len() != t.elems.len() {
                    return Err(syn::Error::new(
                        t.span(),
                        format!("the tuple has {} fields, the pattern {}", fields.len(), t.elems.len()),
                    ));
                }
                for (i, (p, ty)) in t.elems.iter().zip(fields).enumerate() {
                    if matches!(p, Pat::Wild(_)) {
                        continue;
                    }
                    let item = self.store.tuple_get_item(value, i);
                    self.types.insert(item, ty);
                    self.bind(p, item)?;
                }
                Ok(())
            }
            Pat::Wild(_) => Ok(()),
            other => Err(syn::Error::new(other.span(), "expected a name or a tuple of names")),
        }
    }
}

fn build_module(m: &ModelFn) -> syn::Result<IRModule> {
    let mut b = Builder { store: Store::new(), env: HashMap::new(), types: HashMap::new() };
    let mut params = Vec::new();
    let declared = m.inputs.iter().cloned().chain(m.stmts.iter().filter_map(|s| match s {
        Stmt::Weight(n, t) => Some((n.clone(), t.clone())),
        Stmt::Let(..) => None,
    }));
    for (name, t) in declared {
        if b.env.contains_key(&name.to_string()) {
            return Err(syn::Error::new(name.span(), format!("`{name}` is declared twice")));
        }
        let v = b.store.var(name.to_string(), Some(t.ty.clone()));
        b.types.insert(v, t.ty.clone());
        b.env.insert(name.to_string(), v);
        params.push(v);
    }
    for s in &m.stmts {
        if let Stmt::Let(pat, e) = s {
            let v = b.lower(e)?;
            b.bind(pat, v)?;
        }
    }
    let result = b.lower(&m.result)?;
    if let Some(ret) = &m.ret {
        if b.ty(result) != &ret.ty {
            return Err(syn::Error::new(
                ret.span,
                format!("the model returns {}, but its signature says {}", b.ty(result), ret.ty),
            ));
        }
    }
    let ret_ty = Some(b.ty(result).clone());
    let func = b.store.function(params, result, ret_ty, Attrs::new());
    IRModule::from_main(b.store, func).map_err(|e| syn::Error::new(m.name.span(), e.to_string()))
}

/// Expand every model of one invocation.
pub fn expand(models: Models) -> syn::Result<TokenStream> {
    let mut out = TokenStream::new();
    for m in &models.0 {
        let module = build_module(m)?;
        let text = kiln_ir::relay::printer::print_module(&module);
        // The embedded text must come back as the same program.
        match kiln_ir::relay::parser::parse_module(&text) {
            Ok(back) if back.structural_eq(&module) => {}
            Ok(_) => return Err(syn::Error::new(m.name.span(), "internal error: the model does not survive printing")),
            Err(e) => return Err(syn::Error::new(m.name.span(), format!("internal error: {e}"))),
        }
        let (attrs, vis, name) = (&m.attrs, &m.vis, &m.name);
        out.extend(quote! {
            #(#attrs)*
            #vis fn #name() -> ::kiln::relay::IRModule {
                ::kiln::__private::parse_embedded_model(#text)
            }
        });
    }
    Ok(out)
}
