//! TIR → portable C99. Compiled with the system C compiler (through `cc` in
//! build scripts); needs no LLVM. Vectorization is left to the C compiler.

use std::fmt::Write;

use kiln_ir::DataType;

use super::CodegenError;
use crate::arith::{simplify, Bounds};
use crate::tir::transform::{lane_at, lane_of};
use crate::tir::{BinOp, Buffer, Expr, ForKind, Intrinsic, PrimFunc, Scope, Stmt, TirType, Var};

/// Largest kernel-local buffer placed on the stack.
const MAX_LOCAL_BYTES: usize = 1 << 20;

/// The helpers every generated file starts with.
pub const PRELUDE: &str = "\
#include <stdint.h>
#include <math.h>
static inline int64_t kiln_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t kiln_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
/* `i` if 0 <= i < n, else 0 with the kernel's status set to 1 (STATUS_INDEX_OUT_OF_RANGE). */
static inline int64_t kiln_check_index(int64_t i, int64_t n, int32_t* status) { if ((uint64_t)i < (uint64_t)n) return i; *status = 1; return 0; }
/* NumPy minimum/maximum: a NaN operand gives NaN (fminf/fmaxf would drop it). */
static inline float kiln_fmaxf(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float kiln_fminf(float a, float b) { return (a < b || a != a) ? a : b; }
static inline double kiln_fmax(double a, double b) { return (a > b || a != a) ? a : b; }
static inline double kiln_fmin(double a, double b) { return (a < b || a != a) ? a : b; }
/* bfloat16: `x` rounded to nearest even (NaN a quiet NaN), its bits; bits back to float. */
static inline uint32_t kiln_bf16_bits(float x) { union { float f; uint32_t u; } v = { x }; if ((v.u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u; return (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16; }
static inline float kiln_bf16_value(uint32_t b) { union { uint32_t u; float f; } v = { (b & 0xffffu) << 16 }; return v.f; }
/* A prefetch hint where the compiler has one (GCC, Clang), nothing elsewhere. */
#if defined(__GNUC__)
#define KILN_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define KILN_PREFETCH(p) ((void)(p))
#endif
";

/// The C math library suffix: `f` for float, none for double.
fn libm_suffix(t: DataType) -> &'static str {
    if t == DataType::F64 {
        ""
    } else {
        "f"
    }
}

struct Emitter<'a> {
    kernel: &'a str,
    out: String,
    names: std::collections::HashMap<u32, String>,
    used: std::collections::HashMap<String, usize>,
    /// The outermost parallel loop has been sliced already.
    sliced: bool,
}

fn c_type(kernel: &str, t: DataType) -> Result<&'static str, CodegenError> {
    Ok(match t {
        DataType::F32 => "float",
        DataType::F64 => "double",
        DataType::I64 => "int64_t",
        DataType::I32 => "int32_t",
        DataType::I16 => "int16_t",
        DataType::I8 => "int8_t",
        DataType::U8 | DataType::Bool => "uint8_t",
        DataType::U16 => "uint16_t",
        DataType::U32 => "uint32_t",
        DataType::U64 => "uint64_t",
        DataType::F16 => {
            return Err(CodegenError::Unsupported { kernel: kernel.into(), backend: "C", what: "float16".into() })
        }
    })
}

impl Emitter<'_> {
    fn unsupported(&self, what: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported { kernel: self.kernel.to_string(), backend: "C", what: what.into() }
    }

    fn name(&mut self, id: u32, base: &str) -> String {
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        let clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let clean = if clean.starts_with(|c: char| c.is_ascii_digit()) || clean.is_empty() {
            format!("v_{clean}")
        } else {
            clean
        };
        let n = self.used.entry(clean.clone()).or_insert(0);
        let name = if *n == 0 { clean } else { format!("{clean}_{n}") };
        *n += 1;
        self.names.insert(id, name.clone());
        name
    }

    fn var(&mut self, v: &Var) -> String {
        self.name(v.id, &v.name)
    }

    fn buffer(&mut self, b: &Buffer) -> String {
        self.name(b.id(), b.name())
    }

    fn expr(&mut self, e: &Expr) -> Result<String, CodegenError> {
        let ty = e.ty();
        if ty.lanes != 1 {
            return Err(self.unsupported("a vector expression"));
        }
        Ok(match e {
            Expr::Int(v, t) => match t.elem {
                // `INT64_C(-9223372036854775808)` negates a literal that overflows int64_t.
                DataType::I64 if *v == i64::MIN => "(-INT64_C(9223372036854775807) - 1)".into(),
                DataType::I64 => format!("INT64_C({v})"),
                DataType::U64 => format!("UINT64_C({})", *v as u64),
                _ => format!("(({}){v})", c_type(self.kernel, t.elem)?),
            },
            Expr::Float(v, t) => {
                if v.is_nan() {
                    "NAN".into()
                } else if v.is_infinite() {
                    if *v > 0.0 {
                        "INFINITY".into()
                    } else {
                        "(-INFINITY)".into()
                    }
                } else if t.elem == DataType::F64 {
                    format!("{v:?}")
                } else {
                    format!("{:?}f", *v as f32)
                }
            }
            Expr::Var(v) => self.var(v),
            Expr::Bin(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                let float = ty.elem.is_float();
                let f = libm_suffix(ty.elem);
                match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => format!("({x} {} {y})", op.symbol()),
                    BinOp::FloorDiv if float => format!("floor{f}({x} / {y})"),
                    BinOp::FloorMod if float => format!("({x} - floor{f}({x} / {y}) * {y})"),
                    // Unsigned: truncation is flooring.
                    BinOp::FloorDiv if ty.elem.is_unsigned() => format!("({x} / {y})"),
                    BinOp::FloorMod if ty.elem.is_unsigned() => format!("({x} % {y})"),
                    BinOp::FloorDiv => format!("kiln_floordiv({x}, {y})"),
                    BinOp::FloorMod => format!("kiln_floormod({x}, {y})"),
                    BinOp::Min if float => format!("kiln_fmin{f}({x}, {y})"),
                    BinOp::Max if float => format!("kiln_fmax{f}({x}, {y})"),
                    BinOp::Min => format!("(({x}) < ({y}) ? ({x}) : ({y}))"),
                    BinOp::Max => format!("(({x}) > ({y}) ? ({x}) : ({y}))"),
                }
            }
            Expr::Cmp(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                format!("({x} {} {y})", op.symbol())
            }
            Expr::And(a, b) => format!("({} && {})", self.expr(a)?, self.expr(b)?),
            Expr::Or(a, b) => format!("({} || {})", self.expr(a)?, self.expr(b)?),
            Expr::Not(a) => format!("(!{})", self.expr(a)?),
            Expr::Select(c, a, b) => format!("({} ? {} : {})", self.expr(c)?, self.expr(a)?, self.expr(b)?),
            Expr::Cast(t, a) => {
                let inner = self.expr(a)?;
                if t.elem == DataType::Bool {
                    format!("((uint8_t)({inner} != 0))")
                } else {
                    format!("(({})({inner}))", c_type(self.kernel, t.elem)?)
                }
            }
            Expr::Load(b, idx) => {
                if idx.len() != 1 {
                    return Err(self.unsupported("a multi-dimensional access (run flatten_buffers first)"));
                }
                let (name, i) = (self.buffer(b), self.expr(&idx[0])?);
                format!("{name}[{i}]")
            }
            Expr::Call(intrinsic, args, t) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect::<Result<_, _>>()?;
                let first = a.first().cloned().unwrap_or_default();
                let second = a.get(1).cloned().unwrap_or_default();
                // `expf` for float, `exp` for double.
                let f = libm_suffix(t.elem);
                let one = if t.elem == DataType::F64 { "1.0" } else { "1.0f" };
                match intrinsic {
                    Intrinsic::Rsqrt => format!("({one} / sqrt{f}({first}))"),
                    Intrinsic::Sigmoid => format!("({one} / ({one} + exp{f}(-({first}))))"),
                    Intrinsic::Pow => format!("pow{f}({first}, {second})"),
                    Intrinsic::Round => format!("rint{f}({first})"),
                    Intrinsic::Fmod => format!("fmod{f}({first}, {second})"),
                    Intrinsic::Barrier => return Err(self.unsupported("a GPU barrier")),
                    Intrinsic::DotU8I8 => return Err(self.unsupported("an int8 dot product (vector code)")),
                    f if f.is_amx() => return Err(self.unsupported("an AMX tile statement (LLVM backend only)")),
                    Intrinsic::Prefetch => return Err(self.unsupported("a prefetch used as a value")),
                    Intrinsic::Bf16Bits => format!("kiln_bf16_bits({first})"),
                    Intrinsic::Bf16Value => format!("kiln_bf16_value((uint32_t)({first}))"),
                    Intrinsic::CheckIndex => format!("kiln_check_index({first}, {second}, &kiln_status)"),
                    // Cast back: C promotes narrow operands to int.
                    Intrinsic::BitAnd => format!("(({})({first} & {second}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::BitOr => format!("(({})({first} | {second}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::BitXor => format!("(({})({first} ^ {second}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::BitNot => format!("(({})(~{first}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::ShiftLeft => format!("(({})({first} << {second}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::ShiftRight => format!("(({})({first} >> {second}))", c_type(self.kernel, t.elem)?),
                    Intrinsic::Ldexp | Intrinsic::LdexpNormal => format!("ldexp{f}({first}, (int)({second}))"),
                    // The rest are unary and spelled as their name: exp, log,
                    // sqrt, tanh, erf, fabs, floor, ceil and the libm functions.
                    other => format!("{}{f}({first})", other.name()),
                }
            }
            Expr::Ramp { .. } | Expr::Broadcast(..) => return Err(self.unsupported("a vector expression")),
            Expr::Reduce(_) => return Err(self.unsupported("an unlowered reduction")),
        })
    }

    fn line(&mut self, depth: usize, s: &str) {
        let _ = writeln!(self.out, "{}{s}", "  ".repeat(depth));
    }

    /// `{ declaration; body }`: a block of its own, since an unrolled loop
    /// repeats an allocation (or a let's name) in one scope.
    fn declared_block(&mut self, declaration: &str, body: &Stmt, depth: usize) -> Result<(), CodegenError> {
        self.line(depth, "{");
        self.line(depth + 1, declaration);
        self.stmt(body, depth + 1)?;
        self.line(depth, "}");
        Ok(())
    }

    /// `buffer[index] = value` for vectors of `lanes` as a loop over the lanes
    /// (false, and nothing written, where a node has no form for a symbolic lane).
    fn lane_loop(
        &mut self,
        buffer: &Buffer,
        index: &Expr,
        value: &Expr,
        lanes: u16,
        depth: usize,
    ) -> Result<bool, CodegenError> {
        let lane = Var::index("lane");
        let at = Expr::var(&lane);
        let (Some(i), Some(v)) = (lane_at(index, &at), lane_at(value, &at)) else { return Ok(false) };
        let store = Stmt::Store { buffer: buffer.clone(), indices: vec![simplify(&i, &Bounds::new())], value: v };
        let l = self.var(&lane);
        self.line(depth, &format!("for (int64_t {l} = 0; {l} < {lanes}; ++{l}) {{"));
        self.stmt(&store, depth + 1)?;
        self.line(depth, "}");
        Ok(true)
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<(), CodegenError> {
        match s {
            Stmt::For(l) => {
                let v = self.var(&l.var);
                let (min, ext) = (self.expr(&l.min)?, self.expr(&l.extent)?);
                if l.kind == ForKind::Parallel && !self.sliced {
                    // This task's contiguous slice of the iterations.
                    self.sliced = true;
                    self.line(depth, &format!("const int64_t {v}_n = {ext};"));
                    self.line(depth, &format!("const int64_t {v}_begin = {min} + {v}_n * task_id / num_tasks;"));
                    self.line(depth, &format!("const int64_t {v}_end = {min} + {v}_n * (task_id + 1) / num_tasks;"));
                    self.line(depth, &format!("for (int64_t {v} = {v}_begin; {v} < {v}_end; ++{v}) {{"));
                } else {
                    self.line(depth, &format!("for (int64_t {v} = {min}; {v} < {min} + {ext}; ++{v}) {{"));
                }
                self.stmt(&l.body, depth + 1)?;
                self.line(depth, "}");
            }
            Stmt::Store { buffer, indices, value } => {
                if indices.len() != 1 {
                    return Err(self.unsupported("a multi-dimensional store (run flatten_buffers first)"));
                }
                let lanes = indices[0].ty().lanes.max(value.ty().lanes);
                if lanes > 1 {
                    // Vector code from tir.VectorizeLoop: one scalar store per lane
                    // (each lane reads only its own element, so the order is free).
                    // A large value (a sigmoid's exponential as a polynomial:
                    // hundreds of nodes) in a loop over the lanes: written out
                    // per lane, a tile's write-back of 16-lane SiLU vectors was
                    // megabytes of C that GCC took minutes over.
                    if expr_nodes(value) > MAX_UNROLLED_LANE_NODES
                        && self.lane_loop(buffer, &indices[0], value, lanes, depth)?
                    {
                        return Ok(());
                    }
                    for k in 0..lanes {
                        let (i, v) = (lane_of(&indices[0], k), lane_of(value, k));
                        let i = simplify(&i, &Bounds::new());
                        self.stmt(&Stmt::Store { buffer: buffer.clone(), indices: vec![i], value: v }, depth)?;
                    }
                    return Ok(());
                }
                let (b, i, v) = (self.buffer(buffer), self.expr(&indices[0])?, self.expr(value)?);
                self.line(depth, &format!("{b}[{i}] = {v};"));
            }
            Stmt::Allocate { buffer, body } => {
                let bytes = buffer.numel() * buffer.elem().size_bytes();
                if bytes > MAX_LOCAL_BYTES {
                    return Err(self.unsupported(format!("a {bytes}-byte kernel-local buffer `{}`", buffer.name())));
                }
                let (t, b) = (c_type(self.kernel, buffer.elem())?, self.buffer(buffer));
                self.declared_block(&format!("{t} {b}[{}];", buffer.numel().max(1)), body, depth)?;
            }
            Stmt::If { cond, then_case, else_case } => {
                let c = self.expr(cond)?;
                self.line(depth, &format!("if ({c}) {{"));
                self.stmt(then_case, depth + 1)?;
                if let Some(e) = else_case {
                    self.line(depth, "} else {");
                    self.stmt(e, depth + 1)?;
                }
                self.line(depth, "}");
            }
            Stmt::Seq(v) => {
                for s in v {
                    self.stmt(s, depth)?;
                }
            }
            Stmt::Let { var, value, body } => {
                let t = c_type(self.kernel, var.ty.elem)?;
                let (n, v) = (self.var(var), self.expr(value)?);
                self.declared_block(&format!("const {t} {n} = {v};"), body, depth)?;
            }
            Stmt::Evaluate(Expr::Call(Intrinsic::Barrier, ..)) => {
                // A GPU-scheduled kernel run serially: its thread loops run one
                // after another, so every barrier between them already holds.
                self.line(depth, "/* barrier */");
            }
            Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, args, _)) => {
                let Some((buf, clamped)) = super::prefetch_operand(args, true) else {
                    return Err(self.unsupported("kiln.prefetch without one flat element operand"));
                };
                let (b, i) = (self.buffer(buf), self.expr(&clamped)?);
                self.line(depth, &format!("KILN_PREFETCH(&{b}[{i}]);"));
            }
            Stmt::Evaluate(e) => {
                if !s.is_nop() {
                    let v = self.expr(e)?;
                    self.line(depth, &format!("(void)({v});"));
                }
            }
        }
        Ok(())
    }
}

/// The C definition of one kernel (without the prelude).
pub fn codegen_prim_func(f: &PrimFunc) -> Result<String, CodegenError> {
    let mut e = Emitter {
        kernel: &f.name,
        out: String::new(),
        names: Default::default(),
        used: Default::default(),
        sliced: false,
    };
    let n_in = f.params.len().saturating_sub(f.num_outputs);
    let mut params = Vec::new();
    for (i, b) in f.params.iter().enumerate() {
        if b.scope() != Scope::Global {
            return Err(e.unsupported(format!("parameter `{}` outside global memory", b.name())));
        }
        let t = c_type(&f.name, b.elem())?;
        let constness = if i < n_in { "const " } else { "" };
        let name = e.buffer(b);
        params.push(format!("{constness}{t}* restrict {name}"));
    }
    params.push("int64_t task_id".into());
    params.push("int64_t num_tasks".into());
    let _ = writeln!(e.out, "int32_t {}({}) {{", f.name, params.join(", "));
    if !f.body.has_parallel_loop() {
        e.line(1, "(void)num_tasks;");
        e.line(1, "if (task_id != 0) return 0;");
    }
    e.line(1, "int32_t kiln_status = 0;");
    e.stmt(&f.body, 1)?;
    e.line(1, "return kiln_status;");
    e.out.push_str("}\n");
    // The packed entry point shared by every backend (see `codegen`).
    let mut casts = Vec::new();
    for (i, b) in f.params.iter().enumerate() {
        casts.push(format!("({}*)args[{i}]", c_type(&f.name, b.elem())?));
    }
    casts.push("task_id".into());
    casts.push("num_tasks".into());
    let _ = writeln!(
        e.out,
        "int32_t {name}_packed(void** args, int64_t task_id, int64_t num_tasks) {{\n  return {name}({});\n}}",
        casts.join(", "),
        name = f.name
    );
    Ok(e.out)
}

/// A complete C file: the prelude, then every kernel.
pub fn codegen_module(funcs: &[PrimFunc]) -> Result<String, CodegenError> {
    codegen_module_with_data(funcs, &[])
}

/// [`codegen_module`], with read-only data symbols `(symbol, bytes)` (the model's weights).
pub fn codegen_module_with_data(funcs: &[PrimFunc], data: &[(String, &[u8])]) -> Result<String, CodegenError> {
    let mut out = String::from(PRELUDE);
    for (symbol, bytes) in data {
        let _ = write!(out, "\n__attribute__((aligned(64))) const uint8_t {symbol}[{}] = {{", bytes.len().max(1));
        for (i, b) in bytes.iter().enumerate() {
            if i % 32 == 0 {
                out.push('\n');
            }
            let _ = write!(out, "{b},");
        }
        out.push_str("\n};\n");
    }
    for f in funcs {
        out.push('\n');
        out.push_str(&codegen_prim_func(f)?);
    }
    Ok(out)
}

/// The type a kernel parameter is declared with (for glue code).
pub fn param_c_type(t: TirType) -> Option<&'static str> {
    c_type("", t.elem).ok()
}

/// The most nodes of a vector store's value written out lane by lane (see
/// `lane_loop`): a bias, clamp and residual add stay unrolled.
const MAX_UNROLLED_LANE_NODES: usize = 64;

/// The nodes of an expression tree.
fn expr_nodes(e: &Expr) -> usize {
    let mut n = 1;
    e.for_each_child(|c| n += expr_nodes(c));
    n
}
