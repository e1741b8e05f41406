//! TVM v0.16's Relay text programs (`data/tvm_corpus/`, gathered from its
//! parser and pass tests; provenance and exclusions in the README there):
//! each parses, type-checks, prints to its blessed snapshot
//! (`<name>.expected`, bless with UPDATE_EXPECT=1), and print → parse →
//! print is a fixed point. A program kiln does not accept would be listed
//! in [`KNOWN_GAPS`] with the error it gives (none is today), so that
//! closing a gap shows up here. One test per program, named after its file.

use std::path::Path;

use kiln_ir::relay::{infer_module, parse_module, print_module, IRModule};
use libtest_mimic::Trial;

#[path = "support/corpus.rs"]
mod corpus;

/// Programs kiln refuses, with (part of) the error each gives, and why.
const KNOWN_GAPS: [(&str, &str, &str); 0] = [];

/// Programs whose `let` in an argument position kiln prints floated out to
/// the enclosing scope (`(let %a = 1; 3) + 2` prints as `let %a = 1; 3 + 2`):
/// the same value, another structure; checked by evaluating both.
const LETS_FLOATED: [&str; 1] = ["test_pass_dead_code_elimination__test_add_with_let_1"];

fn typed(text: &str) -> Result<IRModule, String> {
    let mut m = parse_module(text).map_err(|e| e.to_string())?;
    infer_module(&mut m).map_err(|e| e.to_string())?;
    Ok(m)
}

fn round_trips_and_matches_its_snapshot(name: &str, text: &str) -> Result<(), String> {
    let m1 = typed(text).map_err(|e| format!("{name}: {e}"))?;
    let p1 = print_module(&m1);
    let m2 = typed(&p1).map_err(|e| format!("{name}: the printed module does not parse back: {e}\n{p1}"))?;
    let p2 = print_module(&m2);
    if p1 != p2 {
        return Err(format!("{name}: print → parse → print is not a fixed point:\n{p1}\n!=\n{p2}"));
    }
    if LETS_FLOATED.contains(&name) {
        let eval = |m: &IRModule| kiln_ir::relay::eval_function(m, "main", &[]).map_err(|e| e.to_string());
        if eval(&m1)? != eval(&m2)? {
            return Err(format!("{name}: the reparsed module computes another value"));
        }
    } else if !m1.structural_eq(&m2) {
        return Err(format!("{name}: the reparsed module differs"));
    }
    expect_test::expect_file![format!("data/tvm_corpus/{name}.expected")].assert_eq(&p1);
    Ok(())
}

fn still_refused(name: &str, text: &str, error: &str) -> Result<(), String> {
    match typed(text) {
        Ok(_) => Err(format!("{name} is now accepted: move it out of KNOWN_GAPS")),
        Err(e) if e.contains(error) => Ok(()),
        Err(e) => Err(format!("{name}: expected an error containing `{error}`, got: {e}")),
    }
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tvm_corpus");
    let programs = corpus::relay_programs(&dir);
    assert!(programs.len() >= 130, "the TVM corpus has {} programs", programs.len());
    let trials = programs
        .into_iter()
        .map(|(name, text)| {
            let gap = KNOWN_GAPS.iter().find(|(n, ..)| *n == name).map(|&(_, error, _)| error);
            Trial::test(name.clone(), move || match gap {
                Some(error) => still_refused(&name, &text, error).map_err(Into::into),
                None => round_trips_and_matches_its_snapshot(&name, &text).map_err(Into::into),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
