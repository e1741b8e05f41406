//! The converter table: ONNX operator name → the function that converts
//! it and the attributes it understands. One file per operator family.

use std::collections::HashMap;
use std::sync::OnceLock;

use kiln_ir::relay::ExprId;

use super::importer::{Importer, Node};
use super::OnnxError;

mod attention;
mod conv_transpose;
mod loss;
mod math;
mod nn;
mod quantize;
mod reduce;
mod resize;
mod scatter;
mod shape;

/// Converts one node; returns its outputs in order.
pub(crate) type ConvertFn = fn(&mut Importer, &Node) -> Result<Vec<ExprId>, OnnxError>;

pub(crate) struct Converter {
    pub convert: ConvertFn,
    /// Every attribute the converter reads; any other is refused.
    pub attrs: &'static [&'static str],
}

/// Registers converters: `(names, function, attributes)`.
pub(crate) struct Table(HashMap<&'static str, Converter>);

impl Table {
    pub fn add(&mut self, names: &[&'static str], convert: ConvertFn, attrs: &'static [&'static str]) {
        for &n in names {
            let previous = self.0.insert(n, Converter { convert, attrs });
            assert!(previous.is_none(), "ONNX operator `{n}` registered twice");
        }
    }
}

pub(crate) fn table() -> &'static HashMap<&'static str, Converter> {
    static TABLE: OnceLock<HashMap<&'static str, Converter>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Table(HashMap::new());
        attention::register(&mut t);
        conv_transpose::register(&mut t);
        loss::register(&mut t);
        math::register(&mut t);
        quantize::register(&mut t);
        nn::register(&mut t);
        reduce::register(&mut t);
        resize::register(&mut t);
        scatter::register(&mut t);
        shape::register(&mut t);
        t.0
    })
}

/// One output.
pub(crate) fn one(e: ExprId) -> Result<Vec<ExprId>, OnnxError> {
    Ok(vec![e])
}
