//! `kiln::Build` outside a build script: artifacts are byte-identical for the
//! same inputs, an unchanged build reuses them, and mistakes are errors that
//! say what to fix.

use kiln::{Build, DataType, Tensor};

const MLP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/relay/mlp.relay");
const WEIGHTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mlp/weights/mlp.safetensors");

fn build(out: &std::path::Path) -> Build {
    let mut b = Build::new("mlp");
    b.relay_file(MLP).weights(WEIGHTS).target("llvm -mcpu=haswell").out_dir(out).cargo_metadata(false);
    b
}

#[test]
fn same_inputs_same_bytes_and_reuse() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = build(d1.path()).compile().expect("build");
    let b = build(d2.path()).compile().expect("build");
    assert!(!a.reused && !b.reused);
    for f in ["mlp.rs", "mlp.h", "mlp.json", "mlp.o", "libkiln_mlp.a"] {
        let x = std::fs::read(d1.path().join("kiln").join(f)).expect(f);
        let y = std::fs::read(d2.path().join("kiln").join(f)).expect(f);
        assert!(x == y, "{f} differs between two identical builds");
    }
    let again = build(d1.path()).compile().expect("rebuild");
    assert!(again.reused, "an unchanged build reuses its artifacts");
    assert_eq!(again.glue, a.glue);
    let report = &a.report;
    assert!(report.contains("\"arena_bytes\"") && report.contains("fused_nn_matmul_add_nn_relu"), "{report}");
    assert!(a.timings.contains("FuseOps"), "{}", a.timings);
    // The glue: typed, shape-checked, no allocation in run.
    assert!(a.glue.contains("pub fn run(&mut self, x: &[f32; 784], output0: &mut [f32; 10])"), "{}", a.glue);
    assert!(a.glue.contains("pub const ARENA_BYTES: usize"));
    // The C target builds too (no LLVM involved).
    let d3 = tempfile::tempdir().unwrap();
    let c = build(d3.path()).target("c").compile().expect("C build");
    assert!(c.c_source.is_some() && d3.path().join("kiln/libkiln_mlp.a").exists());
}

#[test]
fn mistakes_are_errors_that_say_what_to_fix() {
    let d = tempfile::tempdir().unwrap();
    let e = Build::new("m").out_dir(d.path()).cargo_metadata(false).compile().unwrap_err().to_string();
    assert_eq!(e, "kiln: model `m`: no model given; call .module(…) or .relay_file(…)");
    let e = build(d.path()).weight("w9", Tensor::zeros(DataType::F32, vec![2])).compile().unwrap_err().to_string();
    assert!(e.contains("weights: `w9` is not a parameter of @main (parameters: x, w1, b1, w2, b2)"), "{e}");
    let mut b = Build::new("mlp");
    b.relay_file(MLP)
        .weight("w1", Tensor::zeros(DataType::F32, vec![128, 784]))
        .out_dir(d.path())
        .cargo_metadata(false);
    let e = b.compile().unwrap_err().to_string();
    assert!(
        e.contains(
            "`w1` is Tensor[(128, 784), float32] in the weights, but the model declares Tensor[(784, 128), float32]"
        ),
        "{e}"
    );
    let e = build(d.path()).target("llvm -mcpu=native -O9").compile().unwrap_err().to_string();
    assert!(e.contains("unknown option `-O9`"), "{e}");
    let e = build(d.path()).weights("/no/such/weights.safetensors").compile().unwrap_err().to_string();
    assert!(e.starts_with("kiln: model `mlp`: /no/such/weights.safetensors:"), "{e}");
    let junk = d.path().join("junk.safetensors");
    std::fs::write(&junk, b"not safetensors").unwrap();
    let e = build(d.path()).weights(&junk).compile().unwrap_err().to_string();
    assert!(e.contains("not a valid safetensors file"), "{e}");
    let e = Build::new("mlp").relay_file(MLP).cargo_metadata(false).compile();
    // Outside a build script without .out_dir(): OUT_DIR is unset in tests.
    if std::env::var_os("OUT_DIR").is_none() {
        assert!(e.unwrap_err().to_string().contains("OUT_DIR is not set"));
    }
}
