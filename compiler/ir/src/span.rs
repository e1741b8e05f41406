//! Where an IR node came from: a `line:column` in Relay text, or a node name
//! from an imported model (ONNX), so that every error can say where.

use std::fmt;
use std::sync::Arc;

/// A source location. Cheap to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Span {
    /// Built programmatically, no source.
    #[default]
    Unknown,
    /// 1-based line and column in Relay text.
    Text {
        /// 1-based line.
        line: u32,
        /// 1-based column, in characters.
        column: u32,
    },
    /// A named node of an imported graph (e.g. an ONNX node name).
    Node(Arc<str>),
}

impl Span {
    /// A 1-based `line:column` in Relay text.
    pub fn text(line: u32, column: u32) -> Span {
        Span::Text { line, column }
    }

    /// The node called `name` in an imported graph.
    pub fn node(name: &str) -> Span {
        Span::Node(Arc::from(name))
    }

    /// Whether the span says where (anything but [`Span::Unknown`]).
    pub fn is_known(&self) -> bool {
        !matches!(self, Span::Unknown)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::Unknown => f.write_str("<unknown location>"),
            Span::Text { line, column } => write!(f, "{line}:{column}"),
            Span::Node(name) => write!(f, "node '{name}'"),
        }
    }
}
