//! The Relay text corpus: every program parses, type-checks, prints to its
//! blessed snapshot (`data/relay/<name>.expected`, bless with UPDATE_EXPECT=1),
//! and print → parse → print is a fixed point. Together the programs use
//! every registered operator, and each runs in the reference interpreter.
//! One test per program, named after its file.

use std::collections::BTreeSet;
use std::path::Path;

use kiln_ir::relay::{
    eval_function, infer_module, op_registry, parse_module, post_order, print_module, IRModule, Type, Value,
};
use kiln_ir::{DataType, Tensor};
use libtest_mimic::Trial;

#[path = "support/corpus.rs"]
mod corpus;

fn corpus() -> Vec<(String, String)> {
    corpus::relay_programs(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/relay"))
}

fn typed(text: &str, name: &str) -> IRModule {
    let mut m = parse_module(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    infer_module(&mut m).unwrap_or_else(|e| panic!("{name}: {e}"));
    m
}

/// One test per program (`<name>`: parse, type-check, round trip, snapshot,
/// run), and one over the whole corpus (every operator used).
fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = vec![Trial::test("corpus_uses_every_operator", || {
        corpus_uses_every_operator();
        Ok(())
    })];
    for (name, text) in corpus() {
        trials.push(Trial::test(name.clone(), move || {
            round_trips_and_matches_its_snapshot(&name, &text);
            runs_in_the_interpreter(&name, &text);
            Ok(())
        }));
    }
    libtest_mimic::run(&args, trials).exit()
}

fn round_trips_and_matches_its_snapshot(name: &str, text: &str) {
    let m1 = typed(text, name);
    let p1 = print_module(&m1);
    let m2 = typed(&p1, name);
    let p2 = print_module(&m2);
    assert_eq!(p1, p2, "{name}: print → parse → print is not a fixed point");
    assert!(m1.structural_eq(&m2), "{name}: the reparsed module differs");
    expect_test::expect_file![format!("data/relay/{name}.expected")].assert_eq(&p1);
}

fn corpus_uses_every_operator() {
    let programs = corpus();
    assert!(programs.len() >= 40, "the corpus has {} programs", programs.len());
    let mut used = BTreeSet::new();
    for (name, text) in programs {
        let m = typed(&text, &name);
        for (_, f) in m.functions() {
            for id in post_order(&m.store, &[f]) {
                if let Some(op) = m.store.op_name(id) {
                    used.insert(op);
                }
            }
        }
    }
    let missing: Vec<&str> = op_registry().iter().map(|(_, d)| d.name).filter(|n| !used.contains(n)).collect();
    assert!(missing.is_empty(), "operators no corpus program uses: {missing:?}");
}

/// A deterministic input for a parameter type: values in [0.5, 1.5) (safe for log and sqrt).
fn input_for(ty: &Type, seed: &mut u64) -> Value {
    match ty {
        Type::Tensor(t) => {
            let n = t.numel();
            let vals: Vec<f64> = (0..n)
                .map(|_| {
                    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    if t.dtype == DataType::Bool {
                        1.0
                    } else {
                        0.5 + ((*seed >> 33) % 1000) as f64 / 1000.0
                    }
                })
                .collect();
            Value::Tensor(Tensor::from_f64(t.dtype, t.shape.clone(), &vals))
        }
        Type::Tuple(f) => Value::Tuple(f.iter().map(|t| input_for(t, seed)).collect()),
        Type::Func(_) | Type::Var(_) => Value::Tuple(vec![]),
    }
}

/// The program runs in the reference interpreter and its value has the checked type.
fn runs_in_the_interpreter(name: &str, text: &str) {
    let m = typed(text, name);
    let main = m.main().expect("main");
    let f = m.store.as_function(main).expect("function");
    let mut seed = 42;
    let args: Vec<Value> =
        f.params.iter().map(|&p| input_for(m.store.checked_type(p).expect("typed"), &mut seed)).collect();
    let out = eval_function(&m, "main", &args).unwrap_or_else(|e| panic!("{name}: {e}"));
    // The value has the checked type of the body.
    let ret = m.store.checked_type(f.body).expect("typed body").clone();
    fn type_of(v: &Value) -> Type {
        match v {
            Value::Tensor(t) => Type::tensor(t.shape().to_vec(), t.dtype()),
            Value::Tuple(f) => Type::Tuple(f.iter().map(type_of).collect()),
            Value::Closure(_) => Type::Tuple(vec![]),
        }
    }
    assert_eq!(type_of(&out), ret, "{name}: the interpreter's result does not have the checked type");
}
