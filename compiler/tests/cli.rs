//! The `kiln` binary: good input prints, bad input is one `error:` line with
//! the file and `line:column` on stderr and exit code 1 — never a panic.

use std::process::Command;

fn kiln(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &tempfile::TempDir, name: &str, text: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write");
    p.to_string_lossy().into_owned()
}

const MLP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/relay/mlp.relay");

#[test]
fn print_annotates_types() {
    let (code, out, err) = kiln(&["print", MLP]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("%0 = nn.matmul(%x, %w1) /* ty=Tensor[(1, 128), float32] */;"), "{out}");
}

#[test]
fn user_errors_exit_1_with_a_location() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = write(&dir, "bad.relay", b"#[version = \"0.0.5\"]\ndef @main(%x: float32) {\n  exp(%x\n}\n");
    let (code, out, err) = kiln(&["print", &bad]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err.trim(),
        format!("error: {bad}:4:1: parse error: expected `,` or `)` in the argument list, found `}}`")
    );
    let ill = write(
        &dir,
        "ill.relay",
        b"#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32], %y: Tensor[(3), float32]) {\n  add(%x, %y)\n}\n",
    );
    let (code, _, err) = kiln(&["print", &ill]);
    assert_eq!(code, 1);
    assert!(err.contains(":3:3: type error: add: cannot broadcast shapes (2,) and (3,)"), "{err}");
    let binary = write(&dir, "bin.relay", b"\xff\xfe\x00");
    let (code, _, err) = kiln(&["print", &binary]);
    assert_eq!(code, 1);
    assert!(err.contains("not UTF-8"), "{err}");
    for args in [
        vec!["print", "/no/such/file.relay"],
        vec!["print", "/"],
        vec!["frobnicate"],
        vec![],
        vec!["opt", MLP, "--disable", "FoldConstnt"],
        vec!["opt", MLP, "--config", "nope=1"],
        vec!["opt", MLP, "--opt-level", "x"],
    ] {
        let (code, _, err) = kiln(&args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.starts_with("error: ") && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn opt_runs_the_pipeline_with_instruments() {
    let dir = tempfile::tempdir().expect("dir");
    let dump = dir.path().join("dump");
    let (code, out, err) = kiln(&[
        "opt",
        MLP,
        "--opt-level",
        "3",
        "--time-passes",
        "--print-ir-after",
        "FuseOps",
        "--dump-ir",
        dump.to_str().unwrap_or_default(),
        "--verify",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("Primitive=1").count(), 2, "two kernels (matmul+add+relu, matmul+add):\n{out}");
    assert!(err.contains("// IR after FuseOps") && err.contains("pass timing"), "{err}");
    assert!(std::fs::read_dir(&dump).map(|d| d.count()).unwrap_or(0) > 5);
    let (code, out, _) = kiln(&["opt", MLP, "--passes", "FuseOps", "--opt-level", "0"]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("Primitive=1").count(), 5, "opt level 0 keeps one operator per kernel:\n{out}");
}
