//! Pictures of a compiled model (`kiln::viz`, `kiln viz`, `KILN_VIZ`): the
//! kernel graph shows every kernel with its operators and every tensor
//! passed; the memory plan shows every arena tensor where and when it
//! lives; the SVGs are well-formed XML, and (where Debian's chromium is
//! installed) render in a browser.

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;

use common::sweep::{Completion, Failed, Trial};
use kiln::backend::aot::ExecutorPlan;
use kiln::build::optimize_and_plan;
use kiln::relay::{infer_module, parse_module, IRModule};
use kiln::transform::PassContext;
use kiln::viz::graph::NodeKind;
use kiln::viz::memory::placements;
use kiln::viz::{graph_dot, graph_svg, html_page, memory_svg, KernelGraph};

const MLP: &str = include_str!("../../examples/relay/mlp.relay");

fn main() {
    let mut trials = vec![
        Trial::test("mlp_graph_has_every_kernel_and_tensor", mlp_graph),
        Trial::test("memory_plan_picture_shows_every_arena_tensor", memory_picture),
        Trial::test("residual_and_tuple_edges", residual_and_tuple),
    ];
    for model in ["resnet18", "gpt_tiny"] {
        trials.push(Trial::ignorable_test(format!("pictures_of_reference_models::{model}"), move || reference(model)));
    }
    libtest_mimic::run(&libtest_mimic::Arguments::from_args(), trials).exit()
}

fn compile(m: IRModule) -> Result<(IRModule, ExecutorPlan), Failed> {
    Ok(optimize_and_plan(m, Arc::new(PassContext::new().with_opt_level(3)))?)
}

fn parsed(text: &str) -> Result<IRModule, Failed> {
    let mut m = parse_module(text).map_err(|e| e.to_string())?;
    infer_module(&mut m).map_err(|e| e.to_string())?;
    Ok(m)
}

/// Well-formed XML; the number of elements `<tag class="class">`.
fn count(svg: &str, tag: &str, class: &str) -> Result<usize, Failed> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| format!("not well-formed XML: {e}"))?;
    Ok(doc.descendants().filter(|n| n.has_tag_name(tag) && n.attribute("class") == Some(class)).count())
}

fn mlp_graph() -> Result<(), Failed> {
    let (fused, plan) = compile(parsed(MLP)?)?;
    let times = vec![12.5; plan.calls.len()];
    let g = KernelGraph::of_module("mlp", &fused, Some(&plan), Some(&times))?;
    let kinds: Vec<&NodeKind> = g.nodes.iter().map(|n| &n.kind).collect();
    // Five inputs (x and the four weights, not bound here), two kernels, one output.
    assert_eq!(kinds.iter().filter(|k| ***k == NodeKind::Input).count(), 5);
    assert_eq!(g.kernels().count(), 2);
    assert_eq!(kinds.last(), Some(&&NodeKind::Output));
    let first = g.kernels().next().ok_or("a kernel")?;
    assert_eq!(first.title, plan.kernels[plan.calls[0].kernel].name, "kernels take the plan's names");
    assert_eq!(first.ops, ["nn.matmul", "add", "nn.relu"]);
    assert_eq!(first.anchor, Some(0), "the matmul is the anchor");
    assert_eq!(first.micros, Some(12.5));
    assert!(g.edges.iter().any(|e| e.label == "1x128 float32"), "{:?}", g.edges);
    // Every node and tensor is drawn, in every format.
    let svg = graph_svg(&g);
    assert_eq!(count(&svg, "g", "kernel")?, 2);
    assert_eq!(count(&svg, "g", "input")?, 5);
    assert!(svg.contains(">nn.matmul</text>") && svg.contains("12.5 µs") && svg.contains("1x10 float32"), "{svg}");
    let dot = graph_dot(&g);
    assert!(dot.starts_with("digraph \"mlp\" {") && dot.matches(" -> ").count() == g.edges.len(), "{dot}");
    let html = html_page("mlp", &svg);
    assert!(html.contains("<svg") && html.contains("addEventListener('wheel'"), "self-contained, pans and zooms");
    Ok(())
}

fn memory_picture() -> Result<(), Failed> {
    // A chain whose intermediates must share the arena.
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(64, 64), float32]) {
  %0 = nn.softmax(%x);
  %1 = nn.dense(%0, %x);
  %2 = nn.softmax(%1);
  %3 = nn.dense(%2, %1);
  nn.dense(%3, %2)
}
"#;
    let (_, plan) = compile(parsed(text)?)?;
    let placed = placements(&plan);
    assert!(!placed.is_empty());
    // What the picture draws is a valid plan: tensors live at the same time never share bytes.
    for (i, a) in placed.iter().enumerate() {
        for b in &placed[i + 1..] {
            let in_time = a.first_call <= b.last_call && b.first_call <= a.last_call;
            let in_space = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
            assert!(!(in_time && in_space), "{a:?} and {b:?} overlap");
        }
    }
    let svg = memory_svg("chain", &plan);
    assert_eq!(count(&svg, "rect", "tensor")?, placed.len());
    assert!(svg.contains("lower bound") && svg.contains("arena"), "{svg}");
    Ok(())
}

fn residual_and_tuple() -> Result<(), Failed> {
    // A split whose two halves meet again: tuple fields become separate edges.
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  %1 = nn.relu(%0.0);
  add(%1, %0.1)
}
"#;
    let (fused, plan) = compile(parsed(text)?)?;
    let g = KernelGraph::of_module("split", &fused, Some(&plan), None)?;
    for (i, n) in g.nodes.iter().enumerate() {
        if n.kind != NodeKind::Input {
            assert!(g.edges.iter().any(|e| e.to == i), "node {} has no incoming edge: {:?}", n.title, g.edges);
        }
        assert!(g.edges.iter().all(|e| e.from < e.to), "edges point forward");
    }
    count(&graph_svg(&g), "g", "kernel")?;
    Ok(())
}

/// A reference model's two pictures: every kernel call and every arena
/// tensor drawn; rendered to PNG by chromium where it is installed.
fn reference(model: &str) -> Result<Completion, Failed> {
    let Some((m, _, _)) = common::reference_model(model) else {
        return Ok(Completion::ignored_with(format!("{model} is not in ../shared/models (or $KILN_MODELS)")));
    };
    let (fused, plan) = compile(m)?;
    let g = KernelGraph::of_module(model, &fused, Some(&plan), None)?;
    let svg = graph_svg(&g);
    // Every call of the plan is a box (output copies excepted: they are not in the graph).
    let copies = plan.calls.iter().filter(|c| plan.kernels[c.kernel].name.starts_with("copy_")).count();
    assert_eq!(count(&svg, "g", "kernel")?, plan.calls.len() - copies);
    let memory = memory_svg(model, &plan);
    assert_eq!(count(&memory, "rect", "tensor")?, placements(&plan).len());
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        println!("{model}: pictures are well-formed; not rendered (no chromium: apt install chromium)");
        return Ok(Completion::Completed);
    };
    let dir = tempfile::tempdir()?;
    for (name, text) in [("graph", &svg), ("memory", &memory)] {
        let (svg_path, png) = (dir.path().join(format!("{name}.svg")), dir.path().join(format!("{name}.png")));
        std::fs::write(&svg_path, text)?;
        let out = std::process::Command::new(chromium)
            .args(["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--window-size=1200,900"])
            .arg(format!("--screenshot={}", png.display()))
            .arg(format!("file://{}", svg_path.display()))
            .output()?;
        let bytes = std::fs::read(&png)
            .map_err(|e| format!("{chromium} rendered no PNG ({e}): {}", String::from_utf8_lossy(&out.stderr)))?;
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{model} {name}: {} bytes", bytes.len());
        println!("{model}: {name}.svg rendered by {chromium} to a {} byte PNG", bytes.len());
    }
    Ok(Completion::Completed)
}
