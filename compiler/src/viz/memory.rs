//! The memory plan as SVG: kernel calls across, arena offset down, one
//! rectangle per intermediate tensor from the call that writes it to the
//! last that reads it; the lower bound (the most bytes ever live at once)
//! and the arena's size marked as lines.

use std::fmt::Write;

use super::graph::bytes;
use super::xml_escape;
use crate::backend::aot::{ExecutorPlan, Storage};

/// One arena tensor's place in time and space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub tensor: usize,
    pub first_call: usize,
    pub last_call: usize,
    pub offset: usize,
    pub bytes: usize,
}

/// Every arena tensor of `plan` with its live range (calls) and bytes.
pub fn placements(plan: &ExecutorPlan) -> Vec<Placement> {
    let mut out: Vec<Placement> = Vec::new();
    for (step, call) in plan.calls.iter().enumerate() {
        // A reshape-only alias is drawn as the tensor whose bytes it shares.
        for t in call.args.iter().map(|&t| plan.tensors[t].alias_of.unwrap_or(t)) {
            let slot = &plan.tensors[t];
            let Storage::Arena { offset } = slot.storage else { continue };
            match out.iter_mut().find(|p| p.tensor == t) {
                Some(p) => p.last_call = step,
                None => out.push(Placement {
                    tensor: t,
                    first_call: step,
                    last_call: step,
                    offset,
                    bytes: slot.shape.iter().product::<usize>() * slot.dtype.size_bytes(),
                }),
            }
        }
    }
    out
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 540.0;
const LEFT: f64 = 90.0;
const TOP: f64 = 50.0;

/// The plan of model `name` as a standalone SVG document.
pub fn memory_svg(name: &str, plan: &ExecutorPlan) -> String {
    let placed = placements(plan);
    let calls = plan.calls.len().max(1) as f64;
    let arena = plan.arena_bytes.max(1) as f64;
    let (x_of, y_of) = (|c: f64| LEFT + c / calls * WIDTH, |b: f64| TOP + b / arena * HEIGHT);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="monospace" font-size="11">"#,
        w = LEFT + WIDTH + 30.0,
        h = TOP + HEIGHT + 50.0
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="12" y="20" font-size="14" font-weight="bold">{} — memory plan: {} tensors in a {} arena (lower bound {}), {} kernel calls</text>"#,
        xml_escape(name),
        placed.len(),
        bytes(plan.arena_bytes),
        bytes(plan.arena_lower_bound),
        plan.calls.len()
    );
    let _ =
        writeln!(o, r##"<rect x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" fill="#fafafa" stroke="#999"/>"##);
    // Axes: calls across (ticks every tenth), offsets down (quarters).
    let step = (plan.calls.len() / 10).max(1);
    for c in (0..=plan.calls.len()).step_by(step) {
        let x = x_of(c as f64);
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{c}</text>"##,
            TOP + HEIGHT,
            TOP + HEIGHT + 5.0,
            TOP + HEIGHT + 18.0
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">kernel call →</text>"#,
        LEFT + WIDTH / 2.0,
        TOP + HEIGHT + 36.0
    );
    for q in 0..=4 {
        let b = plan.arena_bytes as f64 * q as f64 / 4.0;
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y_of(b) + 4.0,
            bytes(b as usize)
        );
    }
    for (i, p) in placed.iter().enumerate() {
        let slot = &plan.tensors[p.tensor];
        let (x, y) = (x_of(p.first_call as f64), y_of(p.offset as f64));
        let (w, h) = (x_of(p.last_call as f64 + 1.0) - x, (y_of((p.offset + p.bytes) as f64) - y).max(0.5));
        // Neighbouring tensors in distinct hues.
        let hue = (i * 137) % 360;
        let _ = writeln!(
            o,
            r#"<rect class="tensor" x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="hsl({hue},60%,72%)" stroke="hsl({hue},50%,40%)" stroke-width="0.5"><title>{} {:?} {}: {} at offset {}, calls {}–{}</title></rect>"#,
            xml_escape(&slot.name),
            slot.shape,
            slot.dtype,
            bytes(p.bytes),
            p.offset,
            p.first_call,
            p.last_call
        );
    }
    let lower = y_of(plan.arena_lower_bound as f64);
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" y1="{lower:.1}" x2="{:.1}" y2="{lower:.1}" stroke="#c0272d" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#c0272d" text-anchor="end">lower bound {}</text>"##,
        LEFT + WIDTH,
        LEFT + WIDTH - 4.0,
        lower - 4.0,
        bytes(plan.arena_lower_bound)
    );
    let end = y_of(arena);
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" y1="{end:.1}" x2="{:.1}" y2="{end:.1}" stroke="#2b5cab" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="#2b5cab">arena {}</text>"##,
        LEFT + WIDTH,
        LEFT + 4.0,
        end - 4.0,
        bytes(plan.arena_bytes)
    );
    let _ = writeln!(o, "</svg>");
    o
}
