//! The kernel graph as SVG: boxes from [`super::layout`], one line per
//! operator (the anchor bold and red), edges as curves labelled with the
//! tensor's type, a tooltip per box. Self-contained (no fonts or scripts).

use std::fmt::Write;

use super::graph::{KernelGraph, LineStyle, NodeKind};
use super::layout::{layered, Placed};
use super::xml_escape;

const LINE_HEIGHT: f64 = 15.0;
const CHAR_WIDTH: f64 = 7.2;
const PAD: f64 = 8.0;

/// The graph as a standalone SVG document.
pub fn graph_svg(g: &KernelGraph) -> String {
    let lines: Vec<Vec<(String, LineStyle)>> = g.nodes.iter().map(|n| g.lines(n)).collect();
    let sizes: Vec<(f64, f64)> = lines
        .iter()
        .map(|ls| {
            let widest = ls.iter().map(|(t, _)| t.chars().count()).max().unwrap_or(1) as f64;
            (widest * CHAR_WIDTH + 2.0 * PAD, ls.len() as f64 * LINE_HEIGHT + PAD)
        })
        .collect();
    let edges: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
    let layout = layered(&sizes, &edges);
    let (boxes, (width, height)) = (&layout.boxes, layout.size);
    // Edges that skip layers go around the boxes on the right, each a little further out.
    let width = width
        + 40.0
        + 12.0
            * g.edges.iter().filter(|e| layout.right_of_layers_between(e.from, e.to).is_some()).count().min(8) as f64;
    let title_height = 28.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="monospace" font-size="12">"#,
        w = width.max(320.0),
        h = height + title_height
    );
    let kernels = g.kernels().count();
    let total: f64 = g.kernels().filter_map(|n| n.micros).sum();
    let timing = if total > 0.0 { format!(", {total:.0} µs per run") } else { String::new() };
    let _ = writeln!(
        o,
        r#"<rect width="100%" height="100%" fill="white"/><text x="12" y="19" font-size="14" font-weight="bold">{} — {kernels} kernels{timing}</text>"#,
        xml_escape(&g.name)
    );
    let _ = writeln!(o, r#"<g transform="translate(0 {title_height})">"#);
    let _ = writeln!(
        o,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>"##
    );
    let mut incoming = vec![0usize; g.nodes.len()];
    let mut detours = 0usize;
    for e in &g.edges {
        let around = layout.right_of_layers_between(e.from, e.to).map(|right| {
            detours += 1;
            right + 16.0 + 12.0 * ((detours - 1) % 8) as f64
        });
        edge(&mut o, &boxes[e.from], &boxes[e.to], around, incoming[e.to], &e.label);
        incoming[e.to] += 1;
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let b = &boxes[i];
        let (fill, stroke, rx) = match n.kind {
            NodeKind::Input => ("#e3f4e1", "#3a7d33", 14.0),
            NodeKind::Output => ("#fdebd3", "#b8620b", 14.0),
            NodeKind::Kernel if n.anchor.is_some() => ("#e6eefb", "#2b5cab", 4.0),
            NodeKind::Kernel => ("#f4f4f4", "#777", 4.0),
            NodeKind::Alias => ("#ffffff", "#aaa", 4.0),
        };
        let tooltip: Vec<String> = lines[i].iter().map(|(t, _)| t.clone()).collect();
        let _ = writeln!(o, r#"<g class="{}"><title>{}</title>"#, kind_class(&n.kind), xml_escape(&tooltip.join("\n")));
        let _ = writeln!(
            o,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="{rx}" fill="{fill}" stroke="{stroke}"/>"#,
            b.x, b.y, b.w, b.h
        );
        for (k, (text, style)) in lines[i].iter().enumerate() {
            let y = b.y + PAD / 2.0 + LINE_HEIGHT * (k as f64 + 0.8);
            let attrs = match style {
                LineStyle::Title => r#" font-weight="bold""#,
                LineStyle::Anchor => r##" font-weight="bold" fill="#c0272d""##,
                LineStyle::Op => "",
                LineStyle::Note => r##" fill="#555""##,
                LineStyle::Time => r##" fill="#7a3db8""##,
            };
            let _ = writeln!(o, r#"<text x="{:.1}" y="{y:.1}"{attrs}>{}</text>"#, b.x + PAD, xml_escape(text));
        }
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>\n</svg>");
    o
}

fn kind_class(k: &NodeKind) -> &'static str {
    match k {
        NodeKind::Input => "input",
        NodeKind::Kernel => "kernel",
        NodeKind::Alias => "alias",
        NodeKind::Output => "output",
    }
}

/// A curve from the bottom of `a` to the top of `b` — around the boxes
/// between them at `around` when it skips layers — labelled near `b`
/// (the `k`-th label there one line higher).
fn edge(o: &mut String, a: &Placed, b: &Placed, around: Option<f64>, k: usize, label: &str) {
    let (x1, y1, x2, y2) = (a.center_x(), a.y + a.h, b.center_x(), b.y);
    let d = match around {
        None => {
            let dy = (y2 - y1) / 2.0;
            format!("M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x2:.1},{:.1} {x2:.1},{y2:.1}", y1 + dy, y2 - dy)
        }
        Some(x) => format!(
            "M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x:.1},{:.1} {x:.1},{:.1} L{x:.1},{:.1} C{x:.1},{:.1} {x2:.1},{:.1} {x2:.1},{y2:.1}",
            y1 + 20.0,
            y1 + 10.0,
            y1 + 30.0,
            y2 - 30.0,
            y2 - 10.0,
            y2 - 20.0
        ),
    };
    let _ = writeln!(
        o,
        r##"<path d="{d}" fill="none" stroke="#888" marker-end="url(#arrow)"><title>{}</title></path>"##,
        xml_escape(label)
    );
    // The label near the consumer, where it reads as "this kernel takes …".
    let (lx, ly) = (x2 + 4.0, y2 - 6.0 - 12.0 * k as f64);
    let _ = writeln!(o, r##"<text x="{lx:.1}" y="{ly:.1}" font-size="10" fill="#666">{}</text>"##, xml_escape(label));
}
