//! The `kiln` command line: a thin shell over the library.
//!
//! Every user error is one message on stderr that says what and where, and
//! exit code 1 — never a panic.

use std::process::ExitCode;
use std::sync::Arc;

use kiln::relay::transform::default_pipeline;
use kiln::relay::{infer_module, parse_module, print_module, IRModule};
use kiln::transform::instrument::{DumpIr, PassTimingInstrument, PrintIr, Selection, WellFormedChecker};
use kiln::transform::{apply, registry, ConfigValue, Pass, PassContext, PassInstrument, Sequential};

const USAGE: &str = "\
usage: kiln <command> [options]

commands:
  print FILE      parse Relay text and print it back, type-annotated
  opt FILE        optimize a Relay module and print it
      --opt-level N              optimization level (default 2)
      --passes P1,P2,…           run these registered passes instead of the default pipeline
      --disable P                never run pass P (repeatable)
      --require P                always run pass P (repeatable)
      --config KEY=VALUE         set a pass configuration key (repeatable)
      --print-ir-before P|all    print the module before pass P (repeatable)
      --print-ir-after P|all     print the module after pass P (repeatable)
      --time-passes              print a pass timing report
      --dump-ir DIR              write the module after every pass to DIR/NNN_<pass>.relay
      --verify                   check the module is well-formed and well-typed after every pass
  passes          list the registered passes
";

fn read_module(path: &str) -> Result<IRModule, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("{path}: not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))?;
    let mut m = parse_module(&text).map_err(|e| format!("{path}:{e}"))?;
    infer_module(&mut m).map_err(|e| format!("{path}:{e}"))?;
    Ok(m)
}

/// Options of `kiln opt`.
#[derive(Default)]
struct OptArgs {
    file: Option<String>,
    opt_level: u32,
    passes: Option<Vec<String>>,
    disable: Vec<String>,
    require: Vec<String>,
    config: Vec<(String, String)>,
    before: Vec<String>,
    after: Vec<String>,
    time: bool,
    dump: Option<String>,
    verify: bool,
}

fn selection(names: &[String]) -> Selection {
    if names.iter().any(|n| n == "all") {
        Selection::All
    } else if names.is_empty() {
        Selection::None
    } else {
        Selection::Names(names.to_vec())
    }
}

fn parse_opt_args(args: &[String]) -> Result<OptArgs, String> {
    let mut o = OptArgs { opt_level: 2, ..Default::default() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        match a.as_str() {
            "--opt-level" => {
                let v = value(a)?;
                o.opt_level = v.parse().map_err(|_| format!("--opt-level takes a number, not `{v}`"))?;
            }
            "--passes" => {
                o.passes = Some(value(a)?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
            }
            "--disable" => o.disable.push(value(a)?),
            "--require" => o.require.push(value(a)?),
            "--config" => {
                let v = value(a)?;
                let (k, x) = v.split_once('=').ok_or_else(|| format!("--config takes KEY=VALUE, not `{v}`"))?;
                o.config.push((k.to_string(), x.to_string()));
            }
            "--print-ir-before" => o.before.push(value(a)?),
            "--print-ir-after" => o.after.push(value(a)?),
            "--time-passes" => o.time = true,
            "--dump-ir" => o.dump = Some(value(a)?),
            "--verify" => o.verify = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option `{flag}`\n\n{USAGE}")),
            file if o.file.is_none() => o.file = Some(file.to_string()),
            extra => return Err(format!("unexpected argument `{extra}`")),
        }
    }
    Ok(o)
}

fn opt(args: &[String]) -> Result<(), String> {
    let o = parse_opt_args(args)?;
    let file = o.file.clone().ok_or_else(|| format!("`kiln opt` needs a FILE\n\n{USAGE}"))?;
    let module = read_module(&file)?;
    // Every pass name given must exist.
    for name in o.disable.iter().chain(&o.require).chain(o.before.iter().chain(&o.after).filter(|n| *n != "all")) {
        registry::lookup(name).map_err(|e| e.to_string())?;
    }
    let pipeline: Arc<dyn Pass> = match &o.passes {
        Some(names) => {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            Sequential::from_names("Passes", &refs).map_err(|e| e.to_string())?.arc()
        }
        None => default_pipeline().map_err(|e| e.to_string())?.arc(),
    };
    let mut ctx = PassContext::new().with_opt_level(o.opt_level);
    ctx.disabled = o.disable.clone();
    ctx.required = o.require.clone();
    for (k, v) in &o.config {
        let kind = kiln::transform::config_kind(k).map_err(|e| e.to_string())?;
        let value = ConfigValue::parse(kind, v).ok_or_else(|| format!("config key `{k}` takes a {kind}, not `{v}`"))?;
        ctx.set_config(k, value).map_err(|e| e.to_string())?;
    }
    let timing = Arc::new(PassTimingInstrument::new());
    let mut instruments: Vec<Arc<dyn PassInstrument>> = Vec::new();
    if o.verify {
        instruments.push(Arc::new(WellFormedChecker::with_type_check()));
    }
    if o.time {
        instruments.push(timing.clone());
    }
    if !o.before.is_empty() || !o.after.is_empty() {
        instruments.push(Arc::new(PrintIr::new(selection(&o.before), selection(&o.after))));
    }
    if let Some(dir) = &o.dump {
        instruments.push(Arc::new(DumpIr::new(dir)));
    }
    let ctx = Arc::new(ctx.with_instruments(instruments));
    let out = ctx.scope(|ctx| apply(pipeline.as_ref(), module, ctx)).map_err(|e| format!("{file}: {e}"))?;
    if o.time {
        eprint!("{}", timing.report());
    }
    print!("{}", print_module(&out));
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("print") => {
            let [_, file] = args else { return Err(format!("`kiln print` takes one FILE\n\n{USAGE}")) };
            let m = read_module(file)?;
            print!("{}", print_module(&m));
            Ok(())
        }
        Some("opt") => opt(&args[1..]),
        Some("passes") => {
            for name in registry::pass_names() {
                if let Some(p) = registry::get_pass(&name) {
                    let i = p.info();
                    println!("{name} (opt_level {}, requires [{}])", i.opt_level, i.required.join(", "));
                }
            }
            Ok(())
        }
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
