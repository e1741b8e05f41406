//! `kiln viz`: the kernel graph or the memory plan of a model as a picture.

use std::sync::{Arc, Mutex};

use kiln::relay::IRModule;
use kiln::transform::instrument::PassInstrument;
use kiln::transform::{PassBodyError, PassContext, PassInfo};
use kiln::viz::{graph_dot, graph_svg, html_page, memory_svg, KernelGraph};

use super::args::VizOptions;
use super::{compile_file, execute_timed, CompileArgs};

/// What the output file's extension asks for.
enum Format {
    Svg,
    Dot,
    Html,
}

pub fn viz(o: VizOptions) -> Result<(), String> {
    let format = match std::path::Path::new(&o.out).extension().and_then(|e| e.to_str()) {
        Some("svg") => Format::Svg,
        Some("dot" | "gv") => Format::Dot,
        Some("html" | "htm") => Format::Html,
        _ => return Err(format!("-o {}: name a .svg, .dot or .html file", o.out)),
    };
    if o.memory && (o.after.is_some() || matches!(format, Format::Dot)) {
        return Err("--memory draws the memory plan as .svg or .html (not with --after, not as .dot)".into());
    }
    if o.profile && o.after.is_some() {
        return Err("--profile times the compiled kernels; it does not apply to --after".into());
    }
    let (after, memory, profile, out_path) = (o.after.clone(), o.memory, o.profile, o.out.clone());
    let mut c = CompileArgs::new(o.compile);
    c.threads = o.threads;
    let name = std::path::Path::new(&c.file).file_stem().and_then(|s| s.to_str()).unwrap_or("model").to_string();
    super::progress::stage("drawing");
    let svg_or_dot = if let Some(pass) = after {
        let m = module_after(&c, &pass)?;
        let g = KernelGraph::of_module(&name, &m, None, None)?;
        render(&g, &format)
    } else {
        let (fused, plan) = compile_file(&c)?;
        if memory {
            memory_svg(&name, &plan)
        } else {
            let times = if profile { Some(execute_timed(&c, &plan)?) } else { None };
            let g = KernelGraph::of_module(&name, &fused, Some(&plan), times.as_deref())?;
            render(&g, &format)
        }
    };
    let text = match format {
        Format::Html => html_page(&name, &svg_or_dot),
        _ => svg_or_dot,
    };
    std::fs::write(&out_path, text).map_err(|e| format!("{out_path}: {e}"))?;
    super::progress::finish();
    eprintln!("wrote {out_path}");
    Ok(())
}

fn render(g: &KernelGraph, format: &Format) -> String {
    match format {
        Format::Dot => graph_dot(g),
        _ => graph_svg(g),
    }
}

/// Keeps the module after the first run of one pass.
struct Capture {
    pass: String,
    module: Mutex<Option<IRModule>>,
}

impl PassInstrument for Capture {
    fn name(&self) -> &str {
        "VizCapture"
    }

    fn run_after_pass(&self, module: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        let mut slot = self.module.lock().unwrap_or_else(|e| e.into_inner());
        if info.name == self.pass && slot.is_none() {
            *slot = Some(module.clone());
        }
        Ok(())
    }
}

/// The model after pass `pass` of the default pipeline.
fn module_after(c: &CompileArgs, pass: &str) -> Result<IRModule, String> {
    let pipeline = kiln::relay::transform::default_pipeline().map_err(|e| e.to_string())?;
    let mut names: Vec<String> = Vec::new();
    for p in pipeline.passes() {
        if !names.contains(&p.info().name) {
            names.push(p.info().name.clone());
        }
    }
    if !names.iter().any(|n| n == pass) {
        return Err(format!("--after {pass}: not a pass of the default pipeline ({})", names.join(", ")));
    }
    let m = super::builder(c, "model", &c.input_shapes, Vec::new()).prepare().map_err(|e| e.to_string())?;
    let capture = Arc::new(Capture { pass: pass.to_string(), module: Mutex::new(None) });
    let mut ctx = PassContext::new().with_opt_level(c.opt_level);
    super::set_config(&mut ctx, &c.config)?;
    kiln::target::configure_context(&c.target, &mut ctx);
    let ctx = Arc::new(ctx.with_instruments(vec![capture.clone()]));
    ctx.scope(|ctx| kiln::transform::apply(&pipeline, m, ctx)).map_err(|e| format!("{}: {e}", c.file))?;
    let captured = capture.module.lock().unwrap_or_else(|e| e.into_inner()).take();
    captured.ok_or_else(|| format!("--after {pass}: the pass did not run at --opt-level {}", c.opt_level))
}
