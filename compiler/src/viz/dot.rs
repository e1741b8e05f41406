//! The kernel graph as Graphviz DOT: the source of truth a user can feed to
//! `dot`, with the same boxes, lines and labels as the SVG.

use std::fmt::Write;

use super::graph::{KernelGraph, LineStyle, NodeKind};

/// `text` as the inside of a DOT HTML-like label.
fn html(text: &str) -> String {
    super::xml_escape(text)
}

/// The graph in DOT.
pub fn graph_dot(g: &KernelGraph) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "digraph \"{}\" {{", g.name.replace('"', "\\\""));
    let _ = writeln!(o, "  node [shape=box, fontname=\"monospace\", fontsize=10];");
    let _ = writeln!(o, "  edge [fontname=\"monospace\", fontsize=8, color=\"#888888\"];");
    for (i, n) in g.nodes.iter().enumerate() {
        let rows: Vec<String> = g
            .lines(n)
            .iter()
            .map(|(t, style)| match style {
                LineStyle::Title => format!("<B>{}</B>", html(t)),
                LineStyle::Anchor => format!("<FONT COLOR=\"#c0272d\"><B>{}</B></FONT>", html(t)),
                LineStyle::Time => format!("<FONT COLOR=\"#7a3db8\">{}</FONT>", html(t)),
                LineStyle::Note => format!("<FONT COLOR=\"#555555\">{}</FONT>", html(t)),
                LineStyle::Op => html(t),
            })
            .collect();
        let (style, fill) = match n.kind {
            NodeKind::Input => ("rounded,filled", "#e3f4e1"),
            NodeKind::Output => ("rounded,filled", "#fdebd3"),
            NodeKind::Kernel if n.anchor.is_some() => ("filled", "#e6eefb"),
            NodeKind::Kernel => ("filled", "#f4f4f4"),
            NodeKind::Alias => ("dashed", "#ffffff"),
        };
        let _ = writeln!(
            o,
            "  n{i} [style=\"{style}\", fillcolor=\"{fill}\", label=<{}>];",
            rows.join("<BR ALIGN=\"LEFT\"/>") + "<BR ALIGN=\"LEFT\"/>"
        );
    }
    for e in &g.edges {
        let _ = writeln!(o, "  n{} -> n{} [label=\"{}\"];", e.from, e.to, e.label.replace('"', "\\\""));
    }
    let _ = writeln!(o, "}}");
    o
}
