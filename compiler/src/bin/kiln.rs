//! The `kiln` command line: a thin shell over the library.
//!
//! Every user error is one message on stderr that says what and where, and
//! exit code 1 — never a panic.

use std::process::ExitCode;

use kiln::relay::{infer_module, parse_module, print_module, IRModule};

const USAGE: &str = "\
usage: kiln <command> [options]

commands:
  print FILE      parse Relay text and print it back, type-annotated
";

fn read_module(path: &str) -> Result<IRModule, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("{path}: not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))?;
    let mut m = parse_module(&text).map_err(|e| format!("{path}:{e}"))?;
    infer_module(&mut m).map_err(|e| format!("{path}:{e}"))?;
    Ok(m)
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("print") => {
            let [_, file] = args else { return Err(format!("`kiln print` takes one FILE\n\n{USAGE}")) };
            let m = read_module(file)?;
            print!("{}", print_module(&m));
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
