//! TIR expressions: scalar (and vector) arithmetic over loop variables and buffer loads.
//!
//! TIR trees are small — their depth is the nesting of one kernel's index
//! arithmetic, never the size of a model — so they are plain boxed trees.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::DataType;

/// A TIR value type: an element type and a vector width (`lanes == 1` for scalars).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TirType {
    /// The element type of each lane.
    pub elem: DataType,
    /// The vector width: 1 for a scalar.
    pub lanes: u16,
}

impl TirType {
    /// A one-lane type of `elem`.
    pub const fn scalar(elem: DataType) -> Self {
        TirType { elem, lanes: 1 }
    }
    /// The type of loop variables and indices.
    pub const INDEX: TirType = TirType::scalar(DataType::I64);
    /// The type of conditions (`bool`, one lane).
    pub const BOOL: TirType = TirType::scalar(DataType::Bool);

    /// The same element type with `lanes` lanes.
    pub fn with_lanes(self, lanes: u16) -> Self {
        TirType { lanes, ..self }
    }
}

impl fmt::Display for TirType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lanes == 1 {
            write!(f, "{}", self.elem)
        } else {
            write!(f, "{}x{}", self.elem, self.lanes)
        }
    }
}

static NEXT_VAR: AtomicU32 = AtomicU32::new(0);

/// A scalar variable (loop index, `let` binding). Identity is `id`; the name is for printing.
#[derive(Clone, Debug)]
pub struct Var {
    /// Unique in the process (shared with buffer ids); the identity.
    pub id: u32,
    /// The name for printing; need not be unique.
    pub name: Arc<str>,
    /// The value type (usually [`TirType::INDEX`]).
    pub ty: TirType,
}

impl Var {
    /// A variable with a fresh id.
    pub fn new(name: &str, ty: TirType) -> Var {
        Var { id: NEXT_VAR.fetch_add(1, Ordering::Relaxed), name: Arc::from(name), ty }
    }

    /// An index variable (int64).
    pub fn index(name: &str) -> Var {
        Var::new(name, TirType::INDEX)
    }
}

impl PartialEq for Var {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Var {}
impl std::hash::Hash for Var {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Main memory: kernel parameters and arena slices.
    Global,
    /// A kernel-local temporary (registers or stack).
    Local,
    /// GPU shared memory (per block).
    Shared,
}

/// A multi-dimensional array with a static shape, row-major.
#[derive(Debug)]
pub struct BufferNode {
    /// Unique in the process (shared with variable ids); the identity.
    pub id: u32,
    /// The name for printing; need not be unique.
    pub name: String,
    /// The element type.
    pub elem: DataType,
    /// Dimensions, outermost first, in elements.
    pub shape: Vec<usize>,
    /// Where the buffer lives.
    pub scope: Scope,
}

/// A shared handle to a buffer; identity is the buffer's id.
#[derive(Clone, Debug)]
pub struct Buffer(pub Arc<BufferNode>);

impl Buffer {
    /// A buffer with a fresh id.
    pub fn new(name: &str, elem: DataType, shape: Vec<usize>, scope: Scope) -> Buffer {
        Buffer(Arc::new(BufferNode {
            id: NEXT_VAR.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            elem,
            shape,
            scope,
        }))
    }
    /// The buffer's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// The element type.
    pub fn elem(&self) -> DataType {
        self.0.elem
    }
    /// Dimensions, outermost first, in elements.
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    /// Where the buffer lives.
    pub fn scope(&self) -> Scope {
        self.0.scope
    }
    /// Number of elements (the product of the shape).
    pub fn numel(&self) -> usize {
        self.0.shape.iter().product()
    }
    /// The unique id, the buffer's identity.
    pub fn id(&self) -> u32 {
        self.0.id
    }
}

impl PartialEq for Buffer {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Buffer {}
impl std::hash::Hash for Buffer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

/// A binary arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// Float division, or integer division truncating toward zero.
    Div,
    /// Integer division rounding toward negative infinity (index arithmetic).
    FloorDiv,
    /// The remainder matching `FloorDiv` (never negative for a positive divisor).
    FloorMod,
    /// The smaller operand.
    Min,
    /// The larger operand.
    Max,
}

impl BinOp {
    /// The operator as TVMScript writes it (`+`, `//`, `min`).
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::FloorMod => "%",
            BinOp::Min => "min",
            BinOp::Max => "max",
        }
    }
}

/// A comparison; its result is `bool` with the operands' lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CmpOp {
    /// The operator as TVMScript writes it (`==`, `<=`).
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// Defines [`Intrinsic`] and [`Intrinsic::ALL`] from one list of variants,
/// so that no intrinsic can be missing from the list the TIR parser searches.
macro_rules! intrinsics {
    ($(#[$attr:meta])* pub enum Intrinsic { $($(#[$doc:meta])* $name:ident,)* }) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Intrinsic { $($(#[$doc])* $name,)* }

        impl Intrinsic {
            /// Every intrinsic (the TIR parser finds one by its [`Intrinsic::name`]).
            pub const ALL: &'static [Intrinsic] = &[$(Intrinsic::$name,)*];
        }
    };
}

intrinsics! {
    /// Math intrinsics; `tir::transform::lower_intrinsics` turns the transcendental
    /// ones into polynomial code every backend can vectorize.
    pub enum Intrinsic {
        /// `eˣ` (a polynomial on f32 after LowerIntrinsics).
        Exp,
        /// Natural logarithm.
        Log,
        /// Square root.
        Sqrt,
        /// `1 / sqrt(x)`.
        Rsqrt,
        /// Hyperbolic tangent (a rational approximation on f32 after LowerIntrinsics).
        Tanh,
        /// `1 / (1 + e⁻ˣ)` (polynomial `exp` on f32 after LowerIntrinsics).
        Sigmoid,
        /// The Gauss error function (a polynomial on f32 after LowerIntrinsics).
        Erf,
        /// `pow(x, y)`: two arguments.
        Pow,
        /// Absolute value of a float.
        Fabs,
        /// Round toward negative infinity.
        Floor,
        /// Round toward positive infinity.
        Ceil,
        /// Round to nearest, ties to even (`rint` under the default rounding mode).
        Round,
        /// Truncated remainder (C `fmod`).
        Fmod,
        /// Sine (libm).
        Sin,
        /// Cosine (libm).
        Cos,
        /// Tangent (libm).
        Tan,
        /// Arcsine (libm).
        Asin,
        /// Arccosine (libm).
        Acos,
        /// Arctangent (libm).
        Atan,
        /// Hyperbolic sine (libm).
        Sinh,
        /// Hyperbolic cosine (libm).
        Cosh,
        /// Inverse hyperbolic sine (libm).
        Asinh,
        /// Inverse hyperbolic cosine (libm).
        Acosh,
        /// Inverse hyperbolic tangent (libm).
        Atanh,
        /// `x · 2ⁿ` for `ldexp(x, n)` with `n` an integral float: exponent
        /// construction for the polynomial `exp` (bit-level in LLVM, `ldexpf` in C).
        Ldexp,
        /// `x · 2ⁿ` for an integral float `n` in `[−126, 127]`, where `2ⁿ` is a
        /// normal f32: one exponent construction where `Ldexp` needs two (the
        /// sigmoid's `exp`, whose clamped input keeps `n` in range).
        LdexpNormal,
        /// `a & b` on integers.
        BitAnd,
        /// `a | b` on integers.
        BitOr,
        /// `a ^ b` on integers.
        BitXor,
        /// `~a` on integers.
        BitNot,
        /// `a << n`, `n` in `[0, bits)` (lowering guards the rest).
        ShiftLeft,
        /// `a >> n`, `n` in `[0, bits)`: arithmetic for signed types, logical for unsigned ones.
        ShiftRight,
        /// A barrier across the threads of a GPU block (`__syncthreads()`); no value.
        Barrier,
        /// `check_index(i, n)`: `i` when `0 <= i < n`; otherwise 0, and the
        /// kernel returns `kiln_runtime::STATUS_INDEX_OUT_OF_RANGE` (a GPU
        /// kernel traps). The one run-time check of generated code: indices that
        /// come from the model's inputs.
        CheckIndex,
        /// `dot_u8i8(acc, a, b)`: int32 lanes `acc[l] + Σ_{j<4} a_l,j · b_l,j`
        /// over the unsigned bytes `a_l,j` of uint32 word `a[l]` (little-endian)
        /// and the signed bytes `b_l,j` = `b[4l + j]`: x86 VNNI's `vpdpbusd`,
        /// made by `tir::transform::dot_products` (exact: no saturation). Either
        /// side may be one value for every lane: `a` a scalar word, or `b` 4
        /// bytes.
        DotU8I8,
        /// `kiln.amx_config(rows₀, bytes₀, …, rows₇, bytes₇)`: the shape of
        /// each of the eight AMX tile registers (rows × bytes per row, 0 0
        /// for an unused one), loaded with `ldtilecfg` (palette 1). Every
        /// AMX statement below runs after one in the same kernel task. No value.
        AmxConfig,
        /// `kiln.amx_zero(t)`: tile `t` (a constant) all zero. No value.
        AmxZero,
        /// `kiln.amx_load(t, b[i], stride)`: tile `t`'s rows from the address
        /// of element `b[i]` (the load is not performed: its address is the
        /// operand), `stride` bytes apart. No value.
        AmxLoad,
        /// `kiln.amx_store(t, b[i], stride)`: tile `t`'s rows to the address of
        /// `b[i]`, `stride` bytes apart. No value.
        AmxStore,
        /// `kiln.amx_dot_s8u8(c, a, b)`: int32 tile `c[m][n] += Σₖ a[m][k] · b[k/4][4n + k%4]`,
        /// `a` signed bytes, `b` unsigned bytes four to a 32-bit column (x86
        /// AMX `tdpbsud`). No value.
        AmxDotS8U8,
        /// `kiln.amx_dot_bf16(c, a, b)`: float32 tile `c[m][n] += Σₖ a[m][k] · b[k/2][2n + k%2]`
        /// over bfloat16 pairs (x86 AMX `tdpbf16ps`). No value.
        AmxDotBf16,
        /// `kiln.bf16_bits(x)`: float32 `x` rounded to bfloat16 (nearest, ties
        /// to even; NaN a quiet NaN), its 16 bits in the low half of a uint32.
        Bf16Bits,
        /// `kiln.bf16_value(b)`: the float32 value of the bfloat16 bits in the
        /// low half of uint32 (or uint16) `b`.
        Bf16Value,
        /// `kiln.amx_release()`: the tile registers back to their initial
        /// state (`tilerelease`), so the OS need not save them. No value.
        AmxRelease,
        /// `kiln.prefetch(b[i])`: a hint to bring the cache line holding
        /// element `b[i]` into the first-level cache (the load is not
        /// performed: its address is the operand). An index past the buffer
        /// is clamped to its last element; `kiln.prefetch(b[i], 1)` allows
        /// the address past the buffer (a hint nothing dereferences: no
        /// clamp to compute in a hot loop; C clamps anyway). Backends without
        /// a prefetch instruction emit nothing. No value.
        Prefetch,
    }
}

impl Intrinsic {
    /// Unary functions every CPU backend calls from libm as `<name>f`
    /// (no polynomial lowering, no vector form, none on the GPU).
    pub fn is_libm_unary(self) -> bool {
        use Intrinsic::*;
        matches!(self, Sin | Cos | Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh | Acosh | Atanh)
    }

    /// The AMX tile statements (LLVM x86 targets with `amx-tile` only).
    pub fn is_amx(self) -> bool {
        use Intrinsic::*;
        matches!(self, AmxConfig | AmxZero | AmxLoad | AmxStore | AmxDotS8U8 | AmxDotBf16 | AmxRelease)
    }

    /// The name in TIR text (`exp`, `bitwise_and`, `tvm_storage_sync`, `kiln.check_index`).
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Exp => "exp",
            Intrinsic::Log => "log",
            Intrinsic::Sqrt => "sqrt",
            Intrinsic::Rsqrt => "rsqrt",
            Intrinsic::Tanh => "tanh",
            Intrinsic::Sigmoid => "sigmoid",
            Intrinsic::Erf => "erf",
            Intrinsic::Pow => "pow",
            Intrinsic::Fabs => "fabs",
            Intrinsic::Floor => "floor",
            Intrinsic::Ceil => "ceil",
            Intrinsic::Round => "round",
            Intrinsic::Fmod => "fmod",
            Intrinsic::Sin => "sin",
            Intrinsic::Cos => "cos",
            Intrinsic::Tan => "tan",
            Intrinsic::Asin => "asin",
            Intrinsic::Acos => "acos",
            Intrinsic::Atan => "atan",
            Intrinsic::Sinh => "sinh",
            Intrinsic::Cosh => "cosh",
            Intrinsic::Asinh => "asinh",
            Intrinsic::Acosh => "acosh",
            Intrinsic::Atanh => "atanh",
            Intrinsic::Ldexp => "ldexp",
            Intrinsic::LdexpNormal => "kiln.ldexp_normal",
            Intrinsic::BitAnd => "bitwise_and",
            Intrinsic::BitOr => "bitwise_or",
            Intrinsic::BitXor => "bitwise_xor",
            Intrinsic::BitNot => "bitwise_not",
            Intrinsic::ShiftLeft => "shift_left",
            Intrinsic::ShiftRight => "shift_right",
            Intrinsic::Barrier => "tvm_storage_sync",
            Intrinsic::CheckIndex => "kiln.check_index",
            Intrinsic::DotU8I8 => "kiln.dot_u8i8",
            Intrinsic::AmxConfig => "kiln.amx_config",
            Intrinsic::AmxZero => "kiln.amx_zero",
            Intrinsic::AmxLoad => "kiln.amx_load",
            Intrinsic::AmxStore => "kiln.amx_store",
            Intrinsic::AmxDotS8U8 => "kiln.amx_dot_s8u8",
            Intrinsic::AmxDotBf16 => "kiln.amx_dot_bf16",
            Intrinsic::Bf16Bits => "kiln.bf16_bits",
            Intrinsic::Bf16Value => "kiln.bf16_value",
            Intrinsic::AmxRelease => "kiln.amx_release",
            Intrinsic::Prefetch => "kiln.prefetch",
        }
    }
}

/// A TIR expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer (or bool) constant of the given type.
    Int(i64, TirType),
    /// A float constant of the given type.
    Float(f64, TirType),
    /// A variable.
    Var(Var),
    /// Arithmetic on two operands of one type.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// A comparison: `bool` with the operands' lanes.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// Logical and of two `bool`s.
    And(Box<Expr>, Box<Expr>),
    /// Logical or of two `bool`s.
    Or(Box<Expr>, Box<Expr>),
    /// Logical negation of a `bool`.
    Not(Box<Expr>),
    /// `cond ? a : b`, both sides evaluated.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Conversion to the type.
    Cast(TirType, Box<Expr>),
    /// A buffer element; one index per dimension until buffers are flattened, then one.
    Load(Buffer, Vec<Expr>),
    /// An intrinsic call with its arguments and result type.
    Call(Intrinsic, Vec<Expr>, TirType),
    /// `[base, base + stride, …]` with `lanes` elements (vectorized indices).
    Ramp {
        /// The first element.
        base: Box<Expr>,
        /// The step between lanes.
        stride: Box<Expr>,
        /// Number of lanes.
        lanes: u16,
    },
    /// A scalar repeated over `lanes`.
    Broadcast(Box<Expr>, u16),
    /// A reduction over `axes` (TE only: lowering turns it into loops).
    Reduce(Box<Reduce>),
}

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// `a + b`; identity 0.
    Sum,
    /// The largest; identity the lowest value (−∞ for floats).
    Max,
    /// The smallest; identity the highest value (+∞ for floats).
    Min,
    /// `a * b`; identity 1.
    Prod,
}

impl Combiner {
    /// The combiner's name in TIR text (`sum`, `max`, `min`, `prod`).
    pub fn name(self) -> &'static str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Max => "max",
            Combiner::Min => "min",
            Combiner::Prod => "prod",
        }
    }

    /// The identity element for `elem`.
    pub fn identity(self, elem: DataType) -> Expr {
        let v = match self {
            Combiner::Sum => 0.0,
            Combiner::Prod => 1.0,
            Combiner::Max if elem.is_float() => f64::NEG_INFINITY,
            Combiner::Min if elem.is_float() => f64::INFINITY,
            Combiner::Max => elem.value_range().0,
            Combiner::Min => elem.value_range().1,
        };
        Expr::constant(v, elem)
    }

    /// `acc ⊕ value`.
    pub fn combine(self, acc: Expr, value: Expr) -> Expr {
        match self {
            Combiner::Sum => Expr::bin(BinOp::Add, acc, value),
            Combiner::Max => Expr::bin(BinOp::Max, acc, value),
            Combiner::Min => Expr::bin(BinOp::Min, acc, value),
            Combiner::Prod => Expr::bin(BinOp::Mul, acc, value),
        }
    }
}

/// `combiner` over `source` for every value of the reduction `axes` (variable, extent).
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// How values combine.
    pub combiner: Combiner,
    /// The value per point of the reduction domain, in terms of the axes.
    pub source: Expr,
    /// The reduction variables with their extents (each from 0).
    pub axes: Vec<(Var, usize)>,
}

impl Expr {
    /// An `int64` constant (an index).
    pub fn int(v: i64) -> Expr {
        Expr::Int(v, TirType::INDEX)
    }

    /// A one-lane float constant of type `elem`.
    pub fn float(v: f64, elem: DataType) -> Expr {
        Expr::Float(v, TirType::scalar(elem))
    }

    /// A constant of element type `elem` (integers and bools become `Int`;
    /// a `uint64` past `i64::MAX` keeps its bit pattern).
    pub fn constant(v: f64, elem: DataType) -> Expr {
        if elem.is_float() {
            Expr::Float(v, TirType::scalar(elem))
        } else if elem == DataType::U64 && v >= i64::MAX as f64 {
            Expr::Int(v as u64 as i64, TirType::scalar(elem))
        } else {
            Expr::Int(v as i64, TirType::scalar(elem))
        }
    }

    /// A use of `v`.
    pub fn var(v: &Var) -> Expr {
        Expr::Var(v.clone())
    }

    /// `a op b`.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    /// `a op b`, a `bool`.
    pub fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        Expr::Cmp(op, Box::new(a), Box::new(b))
    }

    /// `c ? a : b`, both sides evaluated.
    pub fn select(c: Expr, a: Expr, b: Expr) -> Expr {
        Expr::Select(Box::new(c), Box::new(a), Box::new(b))
    }

    /// `e` converted to `ty`.
    pub fn cast(ty: TirType, e: Expr) -> Expr {
        Expr::Cast(ty, Box::new(e))
    }

    /// The intrinsic `f` of `args`, with result type `ty`.
    pub fn call(f: Intrinsic, args: Vec<Expr>, ty: TirType) -> Expr {
        Expr::Call(f, args, ty)
    }

    /// `a && b`.
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::And(Box::new(a), Box::new(b))
    }

    /// `a || b`.
    pub fn or(a: Expr, b: Expr) -> Expr {
        Expr::Or(Box::new(a), Box::new(b))
    }

    /// The constant value, if this is an integer constant.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int(v, _) => Some(*v),
            _ => None,
        }
    }

    /// The value type of the expression.
    pub fn ty(&self) -> TirType {
        match self {
            Expr::Int(_, t) | Expr::Float(_, t) | Expr::Cast(t, _) | Expr::Call(_, _, t) => *t,
            Expr::Var(v) => v.ty,
            Expr::Bin(_, a, _) => a.ty(),
            Expr::Cmp(_, a, _) => TirType::BOOL.with_lanes(a.ty().lanes),
            Expr::And(a, _) | Expr::Or(a, _) | Expr::Not(a) => a.ty(),
            Expr::Select(_, a, _) => a.ty(),
            // A vector of loads when any index is a vector (after flattening, the one index).
            Expr::Load(b, idx) => {
                TirType::scalar(b.elem()).with_lanes(idx.iter().map(|i| i.ty().lanes).max().unwrap_or(1))
            }
            Expr::Ramp { lanes, .. } => TirType::INDEX.with_lanes(*lanes),
            Expr::Broadcast(e, lanes) => e.ty().with_lanes(*lanes),
            Expr::Reduce(r) => r.source.ty(),
        }
    }

    /// Whether `self` loads from `buf` anywhere.
    pub fn reads(&self, buf: &Buffer) -> bool {
        let mut found = matches!(self, Expr::Load(b, _) if b == buf);
        self.for_each_child(|c| found |= c.reads(buf));
        found
    }

    /// Calls `f` on each direct sub-expression.
    pub fn for_each_child(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => {}
            Expr::Bin(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                f(a);
                f(b);
            }
            Expr::Not(a) | Expr::Cast(_, a) | Expr::Broadcast(a, _) => f(a),
            Expr::Select(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            Expr::Load(_, idx) => idx.iter().for_each(f),
            Expr::Call(_, args, _) => args.iter().for_each(f),
            Expr::Ramp { base, stride, .. } => {
                f(base);
                f(stride);
            }
            Expr::Reduce(r) => f(&r.source),
        }
    }

    /// The same node with each direct sub-expression replaced by `f(child)`.
    pub fn map_children(&self, mut f: impl FnMut(&Expr) -> Expr) -> Expr {
        let mut b = |e: &Expr| Box::new(f(e));
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => self.clone(),
            Expr::Bin(op, x, y) => Expr::Bin(*op, b(x), b(y)),
            Expr::Cmp(op, x, y) => Expr::Cmp(*op, b(x), b(y)),
            Expr::And(x, y) => Expr::And(b(x), b(y)),
            Expr::Or(x, y) => Expr::Or(b(x), b(y)),
            Expr::Not(x) => Expr::Not(b(x)),
            Expr::Cast(t, x) => Expr::Cast(*t, b(x)),
            Expr::Broadcast(x, l) => Expr::Broadcast(b(x), *l),
            Expr::Select(c, x, y) => Expr::Select(b(c), b(x), b(y)),
            Expr::Load(buf, idx) => Expr::Load(buf.clone(), idx.iter().map(|e| *b(e)).collect()),
            Expr::Call(i, args, t) => Expr::Call(*i, args.iter().map(|e| *b(e)).collect(), *t),
            Expr::Ramp { base, stride, lanes } => Expr::Ramp { base: b(base), stride: b(stride), lanes: *lanes },
            Expr::Reduce(r) => {
                Expr::Reduce(Box::new(Reduce { combiner: r.combiner, source: *b(&r.source), axes: r.axes.clone() }))
            }
        }
    }

    /// Replace variables by expressions.
    pub fn substitute(&self, map: &dyn Fn(&Var) -> Option<Expr>) -> Expr {
        match self {
            Expr::Var(v) => map(v).unwrap_or_else(|| self.clone()),
            _ => self.map_children(|c| c.substitute(map)),
        }
    }

    /// Whether the expression calls an intrinsic (a transcendental function
    /// before LowerIntrinsics makes it a polynomial, a SiLU's sigmoid).
    pub fn calls_a_function(&self) -> bool {
        let mut found = matches!(self, Expr::Call(..));
        self.for_each_child(|c| found |= c.calls_a_function());
        found
    }

    /// Whether `v` occurs in the expression.
    pub fn uses_var(&self, v: &Var) -> bool {
        match self {
            Expr::Var(w) => w == v,
            _ => {
                let mut found = false;
                self.for_each_child(|c| found |= c.uses_var(v));
                found
            }
        }
    }
}

impl std::ops::Add for Expr {
    type Output = Expr;
    fn add(self, rhs: Expr) -> Expr {
        Expr::bin(BinOp::Add, self, rhs)
    }
}
impl std::ops::Sub for Expr {
    type Output = Expr;
    fn sub(self, rhs: Expr) -> Expr {
        Expr::bin(BinOp::Sub, self, rhs)
    }
}
impl std::ops::Mul for Expr {
    type Output = Expr;
    fn mul(self, rhs: Expr) -> Expr {
        Expr::bin(BinOp::Mul, self, rhs)
    }
}
impl std::ops::Div for Expr {
    type Output = Expr;
    fn div(self, rhs: Expr) -> Expr {
        Expr::bin(BinOp::Div, self, rhs)
    }
}
