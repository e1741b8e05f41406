//! The operator registry: for each operator, its name, attribute schema with
//! defaults, type relation, fusion pattern and reference implementation.
//!
//! Operators are registered once, in a fixed order, by the category modules
//! below; an [`OpId`] is the operator's position in that order.

use crate::OpError;
use std::fmt;
use std::sync::OnceLock;

use indexmap::IndexMap;

use crate::attrs::{AttrSpec, Attrs};
use crate::relay::ty::Type;
use crate::relay::value::Value;

mod bf16;
mod bitwise;
mod conv_transpose;
mod elemwise;
mod image;
mod layout;
mod matmul;
mod nn;
mod quantized;
mod reduce;
mod select;
mod transform;
pub(crate) mod util;
mod winograd;

pub use bf16::{bf16_bits, bf16_value, BF16_INPUT_GROUP};
pub use conv_transpose::ConvTranspose2d;
pub use image::{resize_plan, ResizeAxis, ResizeMethod, ResizePlan, Rounding};
pub use layout::{IndexOps, Layout, LayoutTransform};
pub use matmul::dense_pack_block;
pub use nn::conv2d_weight_block;
pub use nn::{adaptive_bin, conv2d_nchw_attrs, HWIO_TO_OIHW, NCHW_TO_NHWC, NHWC_TO_NCHW};
pub use quantized::{
    u8s8_amx_step, u8s8_weight_dims, u8s8_weight_index, U8S8Layout, U8S8_INPUT_GROUP, U8S8_OUTPUT_BLOCK,
};
pub use transform::{ndarray_size_tensor, shape_of_tensor};
pub use util::broadcast_shapes;
pub use winograd::{winograd_matrices, WinogradMatrices, WinogradTiles};

/// How an operator may fuse with its neighbours (TVM's `OpPatternKind`;
/// the order matters: a fused group's pattern is the maximum of its members').
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpPattern {
    /// One output element from the same-index input element (`add` of equal shapes, `exp`).
    ElemWise = 0,
    /// Like elementwise, with broadcasting of some inputs (`add`, `bias_add`).
    Broadcast = 1,
    /// Each output element from some input elements, no reduction (`reshape`, `transpose`, `concatenate`).
    Injective = 2,
    /// A commutative reduction (`sum`, `max`).
    CommReduce = 3,
    /// A complex op whose output can take an elementwise epilogue (`conv2d`, `dense`).
    OutEWiseFusable = 4,
    /// A tuple node (never an operator pattern on its own).
    Tuple = 7,
    /// Never fused (`softmax`-like ops with their own schedule can be, but these are not).
    Opaque = 8,
}

impl OpPattern {
    /// The pattern's name in messages and dumps (`"out-elemwise-fusable"`).
    pub fn name(self) -> &'static str {
        match self {
            OpPattern::ElemWise => "elemwise",
            OpPattern::Broadcast => "broadcast",
            OpPattern::Injective => "injective",
            OpPattern::CommReduce => "comm-reduce",
            OpPattern::OutEWiseFusable => "out-elemwise-fusable",
            OpPattern::Tuple => "tuple",
            OpPattern::Opaque => "opaque",
        }
    }
}

/// Infers the output type from the argument types and the (normalized) attributes.
/// The error text says what is wrong; the caller adds the operator and location.
pub type TypeRelFn = fn(&[Type], &Attrs) -> Result<Type, OpError>;

/// The types of the arguments a call's other arguments and attributes
/// determine (TVM's type relations solving an incomplete input, such as a
/// convolution's weight from the data, `channels` and `kernel_size`): given
/// each argument's type where known (`None` where not), the type of each
/// unknown one it can tell (`None` for the others).
pub type InferInputsFn = fn(&[Option<Type>], &Attrs) -> Vec<Option<Type>>;

/// Computes the output from argument values (the reference implementation).
pub type EvalFn = fn(&[Value], &Attrs) -> Result<Value, OpError>;

/// One registered operator.
#[derive(Clone)]
pub struct OpDef {
    /// The name as written in Relay text (`add`, `nn.conv2d`).
    pub name: &'static str,
    /// The names of the inputs, which also fixes their number.
    pub inputs: &'static [&'static str],
    /// Number of arguments (`inputs.len()`).
    pub num_inputs: usize,
    /// The attribute schema: names, kinds and defaults, in the order attributes are stored and printed.
    pub attrs: Vec<AttrSpec>,
    /// How the operator fuses with its neighbours.
    pub pattern: OpPattern,
    /// The type relation.
    pub type_rel: TypeRelFn,
    /// The reference implementation, used by the interpreter and constant folding.
    pub eval: EvalFn,
    /// A stateful operator is never constant-folded (e.g. a random op).
    pub stateful: bool,
    /// How untyped arguments take their types from the others, if the operator can tell.
    pub infer_inputs: Option<InferInputsFn>,
    /// Only the shape changes, the bytes do not (TVM's `TReshapeOp`): a kernel
    /// of such operators is `relay.reshape_only`.
    pub reshape_like: bool,
    /// A one-line description (what it computes, layouts).
    pub doc: &'static str,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpDef")
            .field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("pattern", &self.pattern)
            .finish_non_exhaustive()
    }
}

impl OpDef {
    /// A definition with no attributes, not stateful; chain [`OpDef::attr`] to add some.
    pub fn new(
        name: &'static str,
        inputs: &'static [&'static str],
        pattern: OpPattern,
        type_rel: TypeRelFn,
        eval: EvalFn,
        doc: &'static str,
    ) -> Self {
        OpDef {
            name,
            inputs,
            num_inputs: inputs.len(),
            attrs: Vec::new(),
            pattern,
            type_rel,
            eval,
            stateful: false,
            infer_inputs: None,
            reshape_like: false,
            doc,
        }
    }

    /// Add an attribute to the schema.
    pub fn attr(mut self, spec: AttrSpec) -> Self {
        self.attrs.push(spec);
        self
    }

    /// Mark the operator stateful (TVM's `TOpIsStateful`): never
    /// constant-folded nor merged with an equal call.
    pub fn stateful(mut self) -> Self {
        self.stateful = true;
        self
    }

    /// Mark the operator reshape-like (see [`OpDef::reshape_like`]).
    pub fn reshape_like(mut self) -> Self {
        self.reshape_like = true;
        self
    }

    /// Let the type checker type untyped arguments with `f` (see [`InferInputsFn`]).
    pub fn infer_inputs(mut self, f: InferInputsFn) -> Self {
        self.infer_inputs = Some(f);
        self
    }
}

/// The index of an operator in the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u16);

/// All registered operators.
#[derive(Debug)]
pub struct OpRegistry {
    ops: IndexMap<&'static str, OpDef>,
}

impl OpRegistry {
    fn build() -> Self {
        let mut defs = Vec::new();
        bitwise::register(&mut defs);
        elemwise::register(&mut defs);
        matmul::register(&mut defs);
        nn::register(&mut defs);
        reduce::register(&mut defs);
        transform::register(&mut defs);
        select::register(&mut defs);
        winograd::register(&mut defs);
        image::register(&mut defs);
        conv_transpose::register(&mut defs);
        layout::register(&mut defs);
        quantized::register(&mut defs);
        bf16::register(&mut defs);
        let mut ops = IndexMap::new();
        for d in defs {
            let name = d.name;
            let previous = ops.insert(name, d);
            assert!(previous.is_none(), "operator `{name}` registered twice");
        }
        OpRegistry { ops }
    }

    /// The id of the operator named `name` (as written in Relay text), if registered.
    pub fn lookup(&self, name: &str) -> Option<OpId> {
        self.ops.get_index_of(name).map(|i| OpId(i as u16))
    }

    /// The definition of `id`.
    pub fn get(&self, id: OpId) -> &OpDef {
        &self.ops[id.0 as usize]
    }

    /// The definition of the operator named `name`.
    pub fn by_name(&self, name: &str) -> Option<&OpDef> {
        self.ops.get(name)
    }

    /// Every operator with its id, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = (OpId, &OpDef)> {
        self.ops.values().enumerate().map(|(i, d)| (OpId(i as u16), d))
    }

    /// Number of registered operators.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operator is registered.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The registered name nearest to `name` (for "did you mean" hints), if
    /// one is close enough to be a plausible typo. `relu` suggests `nn.relu`.
    pub fn suggest(&self, name: &str) -> Option<&'static str> {
        let mut best: Option<(usize, &'static str)> = None;
        for &candidate in self.ops.keys() {
            let short = candidate.rsplit('.').next().unwrap_or(candidate);
            let d = edit_distance(name, candidate).min(edit_distance(name, short));
            if best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, candidate));
            }
        }
        best.filter(|&(d, _)| d <= name.len().div_ceil(3).max(1)).map(|(_, n)| n)
    }
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != cb) as usize).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The process-wide operator registry.
pub fn op_registry() -> &'static OpRegistry {
    static REGISTRY: OnceLock<OpRegistry> = OnceLock::new();
    REGISTRY.get_or_init(OpRegistry::build)
}

/// A per-operator attribute that a layer above the registry attaches (TVM's
/// `Op::GetAttrMap<T>`: `FTVMCompute`, `FTVMStrategy`, …): one slot per
/// registered operator, filled by name when that layer builds its table and
/// read by [`OpId`], so the layer dispatches without matching on names.
pub struct OpMap<T> {
    attr: &'static str,
    slots: Vec<Option<T>>,
}

impl<T> OpMap<T> {
    /// An empty map for the attribute named `attr` (for messages).
    pub fn new(attr: &'static str) -> Self {
        OpMap { attr, slots: (0..op_registry().len()).map(|_| None).collect() }
    }

    /// Attach `value` to the operator named `op`.
    ///
    /// # Panics
    /// If `op` is not registered or already has a value: both are mistakes in
    /// the code that builds the table, caught by the first test that builds it.
    pub fn set(&mut self, op: &str, value: T) {
        let id =
            op_registry().lookup(op).unwrap_or_else(|| panic!("{}: `{op}` is not a registered operator", self.attr));
        let slot = &mut self.slots[id.0 as usize];
        assert!(slot.is_none(), "{}: `{op}` is set twice", self.attr);
        *slot = Some(value);
    }

    /// [`OpMap::set`] for several operators that share one value.
    pub fn set_all(&mut self, ops: &[&str], value: T)
    where
        T: Clone,
    {
        for op in ops {
            self.set(op, value.clone());
        }
    }

    /// The value attached to `op`, if any.
    pub fn get(&self, op: OpId) -> Option<&T> {
        self.slots.get(op.0 as usize).and_then(Option::as_ref)
    }

    /// The attribute's name.
    pub fn attr(&self) -> &'static str {
        self.attr
    }

    /// The registered operators without a value, in registration order.
    pub fn unset(&self) -> Vec<&'static str> {
        op_registry().iter().filter(|(id, _)| self.get(*id).is_none()).map(|(_, d)| d.name).collect()
    }
}

impl<T> fmt::Debug for OpMap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpMap").field("attr", &self.attr).field("set", &self.slots.iter().flatten().count()).finish()
    }
}
