//! Pictures of what the compiler did: the kernel graph (DOT, SVG, or an
//! HTML page that pans and zooms) and the memory plan (SVG). Used by
//! `kiln viz` and, with `KILN_VIZ=1`, by [`crate::Build`].

pub mod dot;
pub mod graph;
pub mod html;
pub mod layout;
pub mod memory;
pub mod svg;

pub use dot::graph_dot;
pub use graph::KernelGraph;
pub use html::html_page;
pub use memory::memory_svg;
pub use svg::graph_svg;

/// `text` safe inside XML text and attribute values.
pub fn xml_escape(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push('?'),
            c => o.push(c),
        }
    }
    o
}
