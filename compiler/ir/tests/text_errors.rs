//! Malformed Relay text: every error is a `line:column` message saying what
//! was expected and what was found; no input makes the parser panic.

use expect_test::{expect, Expect};
use kiln_ir::relay::{infer_module, parse_module, print_module};

fn check(src: &str, expected: Expect) {
    let err = match parse_module(src) {
        Ok(mut m) => match infer_module(&mut m) {
            Ok(()) => panic!("expected an error for:\n{src}"),
            Err(e) => e,
        },
        Err(e) => e,
    };
    expected.assert_eq(&err.to_string());
}

const HEAD: &str = "#[version = \"0.0.5\"]\n";

#[test]
fn syntax_errors() {
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  %0 = exp(%x)\n  %0\n}}"),
        expect!["4:3: parse error: expected `;`, found `%0`"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  exp(%y)\n}}"),
        expect!["3:7: parse error: unknown variable `%y`"],
    );
    check(
        &format!("{HEAD}def main() {{ 1f }}"),
        expect!["2:5: parse error: expected a function name `@name` after `def`, found `main`"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float33]) {{ %x }}"),
        expect![
            "2:27: parse error: unknown dtype `float33`; expected float32, float16, int64, int32, int8, uint8 or bool"
        ],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  add(%x, %x, axis=1\n}}"),
        expect!["4:1: parse error: expected `,` or `)` in the argument list, found `}`"],
    );
    check(&format!("{HEAD}def @main() {{ /* never closed"), expect!["2:15: parse error: unterminated comment `/* …`"]);
    check(&format!("{HEAD}def @main() {{ \"abc }}"), expect!["2:15: parse error: unterminated string"]);
    check(
        &format!("{HEAD}def @main() {{ meta[relay.Constant][0] }}"),
        expect!["2:15: parse error: meta[relay.Constant][0] is not in the #[metadata] section"],
    );
    check(
        &format!("{HEAD}def @main() {{ 1f }}\ndef @main() {{ 2f }}"),
        expect!["3:1: parse error: `@main` is defined twice"],
    );
    check(&format!("{HEAD}def @main(%x: float32) {{ %x $ }}"), expect!["2:29: parse error: unexpected character `$`"]);
}

#[test]
fn operator_and_attribute_errors() {
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  relu(%x)\n}}"),
        expect!["3:3: unknown operator `relu`; did you mean `nn.relu`?"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  nn.softmax(%x, axes=1)\n}}"),
        expect!["3:3: type error: unknown attribute `axes` for operator `nn.softmax`; valid attributes: axis"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  exp(%x, %x)\n}}"),
        expect!["3:3: type error: operator `exp` takes 1 argument(s), found 2"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2), float32]) {{\n  nn.softmax(%x, axis=\"one\")\n}}"),
        expect![[r#"3:3: type error: attribute `axis` of `nn.softmax`: expected integer, found string `"one"`"#]],
    );
}

#[test]
fn type_errors_name_the_operator_shapes_and_place() {
    check(
        &format!("{HEAD}def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4), float32]) {{\n  %0 = exp(%x);\n  add(%0, %y)\n}}"),
        expect!["4:3: type error: add: cannot broadcast shapes (2, 3) and (4,); argument types: (Tensor[(2, 3), float32], Tensor[(4), float32])"],
    );
    check(
        &format!("{HEAD}def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 2, 3, 3), float32]) {{\n  nn.conv2d(%x, %w)\n}}"),
        expect!["3:3: type error: nn.conv2d: mismatched channels: data has 3 channels, weight expects 2 × groups 1; argument types: (Tensor[(1, 3, 8, 8), float32], Tensor[(4, 2, 3, 3), float32])"],
    );
    check(&format!("{HEAD}def @main(%x: Tensor[(2), float32]) -> Tensor[(3), float32] {{\n  exp(%x)\n}}"), expect!["2:1: type error: the function is annotated to return Tensor[(3), float32], but its body has type Tensor[(2), float32]"]);
    check(
        &format!("{HEAD}def @main(%c: Tensor[(2), bool], %x: float32) {{\n  if (%c) {{ %x }} else {{ %x }}\n}}"),
        expect!["3:3: type error: an `if` condition must be a scalar bool, found Tensor[(2), bool]"],
    );
    check(
        &format!("{HEAD}def @main(%x: float32) {{\n  %x.0\n}}"),
        expect!["3:5: type error: `.0` of a value of type float32, which is not a tuple"],
    );
}

/// The mutations' random choices, drawn (and shrunk) by proptest.
#[path = "support/randomized.rs"]
mod randomized;

use randomized::Choices;

#[test]
fn ten_thousand_mutated_inputs_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/relay");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .expect("corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "relay"))
        .map(|p| std::fs::read(p).expect("read"))
        .collect();
    seeds.sort();
    let pieces: &[&[u8]] = &[
        b"(",
        b")",
        b"{",
        b"}",
        b"%0",
        b"%x",
        b",",
        b";",
        b"=",
        b"fn",
        b"if",
        b"let",
        b"meta[relay.Constant][0]",
        b".0",
        b"-1",
        b"1e999f",
        b"\"",
        b"/*",
        b"Tensor[(",
        b"@main",
        b"\xff",
        b"\n",
    ];
    let errors = std::cell::Cell::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(randomized::config(10_000));
    let result = runner.run(&Choices::strategy(20), |mut r| {
        let mut text = seeds[r.below(seeds.len())].clone();
        for _ in 0..1 + r.below(4) {
            let at = r.below(text.len() + 1);
            match r.below(5) {
                0 if !text.is_empty() => {
                    let end = (at + 1 + r.below(8)).min(text.len());
                    text.drain(at.min(end)..end);
                }
                1 => {
                    let p = r.pick(pieces);
                    text.splice(at..at, p.iter().copied());
                }
                2 if at < text.len() => {
                    let alphabet = b"(){}%,;=.0123456789abcdefxyz@:[]\"-/* \n";
                    text[at] = r.pick(alphabet);
                }
                3 if !text.is_empty() => {
                    let start = r.below(text.len());
                    let end = (start + r.below(40)).min(text.len());
                    let dup = text[start..end].to_vec();
                    text.splice(at..at, dup);
                }
                _ => text.truncate(at),
            }
        }
        let src = String::from_utf8_lossy(&text);
        match parse_module(&src) {
            Err(e) => {
                errors.set(errors.get() + 1);
                let msg = e.to_string();
                let loc = msg.split(':').take(2).collect::<Vec<_>>();
                proptest::prop_assert!(
                    loc.len() == 2 && loc.iter().all(|p| p.trim().parse::<u32>().is_ok()),
                    "error without a line:column: {}\n--- input ---\n{}",
                    msg,
                    src
                );
            }
            Ok(mut m) => {
                // Whatever parses must type-check or fail cleanly, and print.
                let _ = infer_module(&mut m);
                let _ = print_module(&m);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let errors = errors.get();
    assert!(errors > 5_000, "only {errors} of 10000 mutated inputs were rejected");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let src = format!("{HEAD}def @main(%x: float32) {{ {}%x{} }}", "(".repeat(5000), ")".repeat(5000));
    let e = parse_module(&src).unwrap_err().to_string();
    assert!(e.contains("nesting deeper than"), "{e}");
}

#[test]
fn type_parameter_errors() {
    // A name that is not a type parameter in scope is not a type.
    check(
        &format!("{HEAD}def @main[A](%x: B) {{ %x }}"),
        expect!["2:18: parse error: expected a type (`Tensor[(…), dtype]`, a dtype, a tuple type or `fn (…) -> …`), found `B`"],
    );
    check(
        &format!("{HEAD}def @main[A, A](%x: A) {{ %x }}"),
        expect!["2:14: parse error: type parameter `A` is declared twice"],
    );
    // Inside its function a type parameter is opaque: no operator takes it.
    check(
        &format!("{HEAD}def @twice[A](%x: A) -> A {{ add(%x, %x) }}"),
        expect!["2:29: type error: add: lhs must be a tensor, found A; argument types: (A, A)"],
    );
    // At a call, the argument types must agree on every type parameter.
    check(
        &format!(
            "{HEAD}def @pair[A](%x: A, %y: A) -> (A, A) {{ (%x, %y) }}\n\
             def @main(%a: float32, %b: int32) {{ @pair(%a, %b) }}"
        ),
        expect!["3:42: type error: argument 1 has type int32, the function expects A (float32 at this call)"],
    );
    // A result type the arguments do not determine.
    check(
        &format!(
            "{HEAD}def @make[A](%x: float32) -> fn (A) -> A {{ fn (%y: A) -> A {{ %y }} }}\n\
             def @main() {{ @make(1f) }}"
        ),
        expect!["3:20: type error: the arguments do not determine the function's type parameter `A` in its result fn (A) -> A"],
    );
}
