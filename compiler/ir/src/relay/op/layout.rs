//! Data layouts written as TVM does (`NCHW`, `NHWC`, `NCHW16c`,
//! `OIHW16i16o`) and `layout_transform` between two of them.
//!
//! An uppercase letter is a primal axis; a number followed by a lowercase
//! letter is a block of that many positions of the primal axis of the same
//! letter, so `NCHW16c` holds channel `c` at `[n, c / 16, h, w, c % 16]`.

use super::util::{shape_str, tensor_arg, tensor_val};
use super::{OpDef, OpPattern};
use crate::attrs::{AttrKind, AttrSpec, Attrs};
use crate::relay::ty::Type;
use crate::relay::value::Value;
use crate::tensor::{numel, strides, Tensor};
use crate::OpError;

/// One axis of a layout: a primal axis (`factor` None) or a block of
/// `factor` positions of primal axis `letter` (uppercase in both cases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutAxis {
    pub letter: char,
    pub factor: Option<usize>,
}

/// A parsed layout string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub axes: Vec<LayoutAxis>,
}

impl Layout {
    /// Parse `text`; every block's primal axis must be present, and no axis
    /// may appear twice.
    pub fn parse(text: &str) -> Result<Layout, OpError> {
        let bad = |why: String| OpError::from(format!("layout \"{text}\": {why}"));
        let mut axes = Vec::new();
        let mut digits = String::new();
        for ch in text.chars() {
            if ch.is_ascii_digit() {
                digits.push(ch);
            } else if ch.is_ascii_uppercase() && digits.is_empty() {
                axes.push(LayoutAxis { letter: ch, factor: None });
            } else if ch.is_ascii_lowercase() && !digits.is_empty() {
                let f: usize = digits
                    .parse()
                    .ok()
                    .filter(|&f| f > 0 && f <= 1 << 20)
                    .ok_or_else(|| bad(format!("block size {digits} is not between 1 and 2^20")))?;
                digits.clear();
                axes.push(LayoutAxis { letter: ch.to_ascii_uppercase(), factor: Some(f) });
            } else {
                return Err(bad(format!(
                    "unexpected `{ch}` (primal axes are uppercase letters, blocks a size and a lowercase letter)"
                )));
            }
        }
        if !digits.is_empty() {
            return Err(bad("ends with a block size and no axis letter".into()));
        }
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].contains(a)
                || (a.factor.is_some() && axes[..i].iter().any(|b| b.letter == a.letter && b.factor.is_some()))
            {
                return Err(bad(format!("axis {} appears twice", a.letter)));
            }
        }
        for a in axes.iter().filter(|a| a.factor.is_some()) {
            if !axes.iter().any(|b| b.letter == a.letter && b.factor.is_none()) {
                return Err(bad(format!(
                    "block {}{} has no primal axis {}",
                    a.factor.unwrap_or(0),
                    a.letter.to_ascii_lowercase(),
                    a.letter
                )));
            }
        }
        Ok(Layout { axes })
    }

    /// The block size of primal axis `letter` (1 when it is not blocked).
    fn block(&self, letter: char) -> usize {
        self.axes.iter().find(|a| a.letter == letter && a.factor.is_some()).and_then(|a| a.factor).unwrap_or(1)
    }

    fn primal_letters(&self) -> Vec<char> {
        let mut v: Vec<char> = self.axes.iter().filter(|a| a.factor.is_none()).map(|a| a.letter).collect();
        v.sort_unstable();
        v
    }
}

/// `layout_transform` from `src` to `dst` of a tensor of `shape`: the
/// output shape, and for each output index the input index.
#[derive(Clone, Debug)]
pub struct LayoutTransform {
    src: Layout,
    dst: Layout,
    pub out_shape: Vec<usize>,
}

impl LayoutTransform {
    pub fn new(shape: &[usize], src: &str, dst: &str) -> Result<LayoutTransform, OpError> {
        let (src, dst) = (Layout::parse(src)?, Layout::parse(dst)?);
        if src.axes.len() != shape.len() {
            return Err(format!(
                "layout {src:?} has {} axes, the data {} has {}",
                src.axes.len(),
                shape_str(shape),
                shape.len()
            )
            .into());
        }
        if src.primal_letters() != dst.primal_letters() {
            return Err("the source and destination layouts have different primal axes".into());
        }
        let mut extents = Vec::new();
        for letter in src.primal_letters() {
            // The position of the letter's primal axis (`blocked` false) or of its block.
            let position =
                |blocked: bool| src.axes.iter().position(|a| a.letter == letter && a.factor.is_some() == blocked);
            let outer = shape[position(false).ok_or("no primal axis")?];
            let whole = match position(true) {
                Some(i) if shape[i] != src.block(letter) => {
                    return Err(format!(
                        "axis {i} of {} is a block of {} but has {} positions",
                        shape_str(shape),
                        src.block(letter),
                        shape[i]
                    )
                    .into())
                }
                _ => outer.checked_mul(src.block(letter)).ok_or("extent overflow")?,
            };
            if whole % dst.block(letter) != 0 {
                return Err(format!(
                    "axis {letter} of {} positions does not split into blocks of {} (kiln does not pad a layout)",
                    whole,
                    dst.block(letter)
                )
                .into());
            }
            extents.push((letter, whole));
        }
        let whole = |l: char| extents.iter().find(|e| e.0 == l).map(|e| e.1).unwrap_or(1);
        let out_shape = dst
            .axes
            .iter()
            .map(|a| match a.factor {
                Some(f) => f,
                None => whole(a.letter) / dst.block(a.letter),
            })
            .collect();
        Ok(LayoutTransform { src, dst, out_shape })
    }

    /// For an output index (one value per destination axis, any integer-like
    /// type), the input index — generic so the TE compute builds
    /// expressions with it and the interpreter plain integers.
    pub fn source_index<T: Clone>(&self, out_index: &[T], ops: &impl IndexOps<T>) -> Vec<T> {
        let whole = |letter: char| -> T {
            let outer = self.dst.axes.iter().position(|a| a.letter == letter && a.factor.is_none()).unwrap_or(0);
            let b = self.dst.block(letter);
            match self.dst.axes.iter().position(|a| a.letter == letter && a.factor.is_some()) {
                Some(inner) => ops.add(ops.mul(out_index[outer].clone(), b as i64), out_index[inner].clone()),
                None => out_index[outer].clone(),
            }
        };
        self.src
            .axes
            .iter()
            .map(|a| {
                let b = self.src.block(a.letter) as i64;
                match (a.factor, b) {
                    (None, 1) => whole(a.letter),
                    (None, b) => ops.div(whole(a.letter), b),
                    (Some(_), b) => ops.rem(whole(a.letter), b),
                }
            })
            .collect()
    }
}

/// Integer index arithmetic, for [`LayoutTransform::source_index`].
pub trait IndexOps<T> {
    fn add(&self, a: T, b: T) -> T;
    fn mul(&self, a: T, k: i64) -> T;
    fn div(&self, a: T, k: i64) -> T;
    fn rem(&self, a: T, k: i64) -> T;
}

struct Plain;

impl IndexOps<usize> for Plain {
    fn add(&self, a: usize, b: usize) -> usize {
        a + b
    }
    fn mul(&self, a: usize, k: i64) -> usize {
        a * k as usize
    }
    fn div(&self, a: usize, k: i64) -> usize {
        a / k as usize
    }
    fn rem(&self, a: usize, k: i64) -> usize {
        a % k as usize
    }
}

fn rel_layout_transform(args: &[Type], attrs: &Attrs) -> Result<Type, OpError> {
    let x = tensor_arg(args, 0, "data")?;
    let t = LayoutTransform::new(&x.shape, attrs.str("src_layout")?, attrs.str("dst_layout")?)?;
    Ok(Type::tensor(t.out_shape, x.dtype))
}

fn eval_layout_transform(args: &[Value], attrs: &Attrs) -> Result<Value, OpError> {
    let x = tensor_val(args, 0)?;
    let t = LayoutTransform::new(x.shape(), attrs.str("src_layout")?, attrs.str("dst_layout")?)?;
    let in_strides = strides(x.shape());
    let xv = x.to_f64_vec();
    let out_strides = strides(&t.out_shape);
    let res: Vec<f64> = (0..numel(&t.out_shape))
        .map(|flat| {
            let idx: Vec<usize> =
                out_strides.iter().zip(&t.out_shape).map(|(&s, &d)| flat / s.max(1) % d.max(1)).collect();
            let src = t.source_index(&idx, &Plain);
            xv[src.iter().zip(&in_strides).map(|(i, s)| i * s).sum::<usize>()]
        })
        .collect();
    Ok(Value::Tensor(Tensor::from_f64(x.dtype(), t.out_shape, &res)))
}

pub(super) fn register(defs: &mut Vec<OpDef>) {
    defs.push(
        OpDef::new(
            "layout_transform",
            &["data"],
            OpPattern::Injective,
            rel_layout_transform,
            eval_layout_transform,
            "Move data from `src_layout` to `dst_layout` (e.g. NCHW to NCHW16c).",
        )
        .attr(AttrSpec::required("src_layout", AttrKind::Str))
        .attr(AttrSpec::required("dst_layout", AttrKind::Str)),
    );
}
