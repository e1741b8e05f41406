//! Reproducers of the hostile-input report, as regression tests: each is a
//! clean error or the value NumPy / ONNX Runtime computes, on both CPU
//! backends — never a signal, an abort or a silently different number.

use std::process::Command;

use kiln::Tensor;

fn kiln(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).expect("write");
    p.to_string_lossy().into_owned()
}

/// Runs `text` on `x` for `target`; the outputs, read back.
fn run(dir: &tempfile::TempDir, text: &str, x: &Tensor, target: &str) -> Vec<Vec<f32>> {
    let model = write(dir, "m.relay", text.as_bytes());
    let input = write(dir, "x.npy", &kiln::npy::write_npy(x));
    let outs: Vec<String> = (0..8).map(|k| dir.path().join(format!("{target}{k}.npy")).display().to_string()).collect();
    let mut args = vec!["run", &model, "--target", target, "--input"];
    let bind = format!("x={input}");
    args.push(&bind);
    for o in &outs {
        args.extend(["--output", o]);
    }
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 0, "{target}: {err}");
    outs.iter()
        .take_while(|o| std::path::Path::new(o).exists())
        .map(|o| kiln::npy::read_npy(&std::fs::read(o).expect("read")).expect("npy").to_f32_vec())
        .collect()
}

/// relu, maximum, minimum, clip, max/min reductions and max pooling keep a
/// NaN, as NumPy and ONNX Runtime do (LLVM's maxnum and C's fmaxf drop it).
#[test]
fn nan_propagates_through_max_min_relu_clip_and_pooling() {
    let dir = tempfile::tempdir().expect("dir");
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 2, 4), float32]) {
  %0 = reshape(%x, newshape=[8]);
  %1 = subtract(0f, %0);
  (nn.relu(%0), maximum(%0, %1), minimum(%0, %1), clip(%0, a_min=-1f, a_max=1f),
   max(%0), min(%0), nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]))
}
"#;
    let v = [1.0, f32::NAN, -3.0, 2.0, 0.5, -0.5, 4.0, -2.0];
    let x = Tensor::from_f32(vec![1, 1, 2, 4], &v);
    for target in ["llvm", "c"] {
        let out = run(&dir, text, &x, target);
        assert_eq!(out.len(), 7, "{target}");
        let nan_at = |o: &[f32]| o.iter().map(|v| v.is_nan()).collect::<Vec<_>>();
        let one_nan = [false, true, false, false, false, false, false, false];
        assert_eq!(nan_at(&out[0]), one_nan, "{target} relu: {:?}", out[0]);
        assert_eq!(nan_at(&out[3]), one_nan, "{target} clip: {:?}", out[3]);
        assert_eq!(nan_at(&out[1]), one_nan, "{target} maximum: {:?}", out[1]);
        assert_eq!(nan_at(&out[2]), one_nan, "{target} minimum: {:?}", out[2]);
        assert_eq!((out[1][2], out[2][2]), (3.0, -3.0), "{target}");
        assert!(out[4][0].is_nan() && out[5][0].is_nan(), "{target} reductions: {:?} {:?}", out[4], out[5]);
        assert!(out[6][0].is_nan() && out[6][1] == 4.0, "{target} max pool: {:?}", out[6]);
        assert_eq!(out[0][0], 1.0);
        assert_eq!(out[0][2], 0.0);
    }
}

/// `%i = add(%{i-1}, %{i-2})`: every value feeds the next two. Lowering the
/// fused kernel inlined each value at every use, exponential in the depth
/// (28 adds took 20 s; TVM's 1,555-add test program aborted after 45 s and
/// 7.9 GB). Repeated values are now computed once: the 1,555-add program
/// builds and runs in a fraction of a second (the bound here only catches
/// a return of the blow-up on a slow, shared machine).
#[test]
fn shared_subexpressions_lower_in_linear_time() {
    let dir = tempfile::tempdir().expect("dir");
    for n in [28usize, 1555] {
        let mut text = String::from("#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4), float32]) {\n");
        text += "  %0 = add(%x, %x);\n  %1 = add(%0, %x);\n";
        for i in 2..n {
            text += &format!("  %{i} = add(%{}, %{});\n", i - 1, i - 2);
        }
        text += &format!("  %{}\n}}\n", n - 1);
        let x = Tensor::from_f32(vec![4], &[1.0, 0.5, -1.0, 0.0]);
        let start = std::time::Instant::now();
        let out = run(&dir, &text, &x, "llvm");
        assert!(start.elapsed().as_secs() < 30, "{n} adds took {:?}", start.elapsed());
        if n == 28 {
            // 2x, 3x, then Fibonacci: the 28th value is 832040·x.
            assert_eq!(out[0], vec![832040.0, 416020.0, -832040.0, 0.0]);
        }
    }
}

/// Sizes past what any tensor may take are type errors with a location,
/// never a wrapped product, an abort trying to allocate, or a segfault in
/// generated code that trusted a constant with no bytes.
#[test]
fn absurd_sizes_are_errors_with_a_location() {
    let dir = tempfile::tempdir().expect("dir");
    let cases: [(&str, &str, &str); 5] = [
        (
            "full.relay",
            "def @main() {\n  full(1f, shape=[4294967296, 4294967296], dtype=\"float32\")\n}\n",
            ":3:3: type error:",
        ),
        ("param.relay", "def @main(%x: Tensor[(1000000, 1000000), float32]) {\n  %x\n}\n", ":2:11: type error:"),
        ("bcast.relay", "def @main() {\n  broadcast_to(1f, shape=[100000, 100000])\n}\n", ":3:3: type error:"),
        (
            "expand.relay",
            "def @main(%x: Tensor[(2), float32]) {\n  expand_dims(%x, axis=0, num_newaxis=1000000000)\n}\n",
            ":3:3: type error:",
        ),
        // Found by the fuzzer: 2^63 - 1 sections of an empty axis (a tuple of that many types).
        (
            "split.relay",
            "def @main(%x: Tensor[(0, 4), float32]) {\n  split(%x, indices_or_sections=9223372036854775807)\n}\n",
            ":3:3: type error:",
        ),
    ];
    for (name, body, location) in cases {
        let path = write(&dir, name, format!("#[version = \"0.0.5\"]\n{body}").as_bytes());
        for cmd in ["print", "opt", "run"] {
            let (code, _, err) = kiln(&[cmd, &path]);
            assert_eq!(code, 1, "{cmd} {name}: {err}");
            assert!(err.starts_with("error: ") && err.contains(location), "{cmd} {name}: {err}");
        }
    }
    // A .npy header claiming 2^64 elements (the product wraps in 64 bits) and no data.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    let huge = write(&dir, "huge.npy", &npy);
    let model = write(&dir, "id.relay", b"#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  %x\n}\n");
    let (code, _, err) = kiln(&["run", &model, "--input", &format!("x={huge}")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("huge.npy") && err.contains("too large"), "{err}");
}

/// A CPU name LLVM 14 does not know made LLVM abort the process ("64-bit
/// code requested on a subtarget that doesn't support it"); it is now an
/// error naming the CPU, with the name to use for CPUs newer than the linked
/// LLVM (14; LLVM 19 knows `znver4` and builds it). Unknown `-mattr`
/// features are errors too.
#[test]
fn unknown_cpus_are_errors_not_aborts() {
    let dir = tempfile::tempdir().expect("dir");
    let model = write(&dir, "id.relay", b"#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  %x\n}\n");
    let out = dir.path().display().to_string();
    let (code, _, err) = kiln(&["build", &model, "--target", "llvm -mcpu=foobar", "-o", &out]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("does not know the x86_64 CPU `foobar`"), "{err}");
    let (code, _, err) = kiln(&["build", &model, "--target", "llvm -mcpu=znver4", "-o", &out]);
    if kiln::target::LLVM_VERSION == "14" {
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("LLVM 14, which kiln links, predates the CPU `znver4`; use `-mcpu=znver3"), "{err}");
    } else {
        assert_eq!(code, 0, "LLVM {} knows znver4: {err}", kiln::target::LLVM_VERSION);
    }
    // An unknown -mattr feature was ignored with a warning: `+avx512` built
    // without AVX-512. Now an error with the names it may have meant.
    for (target, says) in [
        ("llvm -mcpu=znver3 -mattr=+avx512", "does not know the x86 feature `avx512` (similar: avx"),
        ("llvm -mcpu=znver3 -mattr=avx2", "`+feature` or `-feature`, not `avx2`"),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -mattr=+dotprod,+foo", "AArch64 feature `foo`"),
    ] {
        let (code, _, err) = kiln(&["build", &model, "--target", target, "-o", &out]);
        assert_eq!(code, 1, "{target}: {err}");
        assert!(err.contains(says), "{target}: {err}");
    }
    let (code, _, err) = kiln(&["build", &model, "--target", "llvm -mcpu=znver3 -mattr=+avx2,-fma", "-o", &out]);
    assert_eq!(code, 0, "known features build: {err}");
}

/// A build for a Zen CPU (`-mcpu=znver3`, the AVX2 path) ran on an Intel
/// CPU with every AVX2 feature and died of SIGILL in ResNet-18 QOperator's
/// first byte shuffle: LLVM lowers some to SSE4A's INSERTQ, which only AMD
/// CPUs have. `kiln run` now refuses a target whose features this CPU lacks,
/// AMD's own among them, naming the feature; on an Intel CPU the AVX2 path
/// is `-mcpu=znver3 -mattr=-sse4a`. Every x86 CPU lacks one of SSE4A (Intel)
/// and AMX (AMD), so the refusal is checked on both kinds of machine.
#[cfg(target_arch = "x86_64")]
#[test]
fn targets_with_features_this_cpu_lacks_are_refused_by_run() {
    let dir = tempfile::tempdir().expect("dir");
    let model = write(&dir, "id.relay", b"#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  %x\n}\n");
    let x = write(&dir, "x.npy", &kiln::npy::write_npy(&Tensor::from_f32(vec![2], &[1.0, 2.0])));
    let input = format!("x={x}");
    let mut refused = 0;
    for (target, feature) in [("llvm -mcpu=znver3", "sse4a"), ("llvm -mcpu=native -mattr=+amx-tile", "amx-tile")] {
        if kiln_runtime::cpu::has_feature(feature) != Some(false) {
            continue;
        }
        let (code, _, err) = kiln(&["run", &model, "--input", &input, "--target", target]);
        assert_eq!(code, 1, "{target}: {err}");
        assert!(err.contains(&format!("CPU feature `{feature}`, which this CPU lacks")), "{target}: {err}");
        refused += 1;
    }
    assert!(refused >= 1, "this CPU has both SSE4A and AMX");
    if kiln_runtime::cpu::has_feature("sse4a") == Some(false) {
        let (code, _, err) = kiln(&["run", &model, "--input", &input, "--target", "llvm -mcpu=znver3 -mattr=-sse4a"]);
        assert_eq!(code, 0, "the AVX2 path without SSE4A runs here: {err}");
    }
}

/// Gather, GatherElements and GatherND with indices given at run time: an
/// index outside `[-n, n)` made the generated code wrap or clip it (index 10
/// on an axis of 10 returned element 0). The kernels now check the indices
/// and `kiln run` fails with an error naming the kernel, on both backends;
/// negative indices in range count from the end, as in ONNX Runtime.
#[test]
fn run_time_indices_out_of_range_are_errors() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/run_time_indices");
    let dir = tempfile::tempdir().expect("dir");
    let i64s = |name: &str, shape: Vec<usize>, v: &[i64]| {
        write(&dir, name, &kiln::npy::write_npy(&Tensor::from_i64(shape, v)))
    };
    let i32s = |name: &str, shape: Vec<usize>, v: &[f64]| {
        write(&dir, name, &kiln::npy::write_npy(&Tensor::from_f64(kiln::DataType::I32, shape, v)))
    };
    // (model, data, good indices, what they give, bad indices)
    let cases = [
        (
            "gather.onnx",
            "data10x3.npy",
            i64s("g_ok.npy", vec![4], &[0, 9, -1, -10]),
            vec![0.0, 1.0, 2.0, 27.0, 28.0, 29.0, 27.0, 28.0, 29.0, 0.0, 1.0, 2.0],
            vec![
                i64s("g_10.npy", vec![4], &[0, 10, 1, 2]),
                i64s("g_m11.npy", vec![4], &[0, -11, 1, 2]),
                i64s("g_2_40.npy", vec![4], &[0, 1 << 40, 1, 2]),
                i64s("g_min.npy", vec![4], &[i64::MIN, 0, 1, 2]),
            ],
        ),
        (
            "gather_elements.onnx",
            "data2x5.npy",
            i32s("ge_ok.npy", vec![2, 2], &[0.0, -1.0, 4.0, -5.0]),
            vec![0.0, 4.0, 9.0, 5.0],
            vec![i32s("ge_5.npy", vec![2, 2], &[0.0, 5.0, 4.0, 1.0])],
        ),
        (
            "gather_nd.onnx",
            "data3x4.npy",
            i64s("nd_ok.npy", vec![2, 2], &[2, 3, -1, -4]),
            vec![11.0, 8.0],
            // Column 4 of 4: the flat offset (4) would be in range.
            vec![i64s("nd_4.npy", vec![2, 2], &[0, 4, 0, 0])],
        ),
    ];
    for (model, x, good, want, bads) in cases {
        let model = format!("{data}/{model}");
        let x = format!("data={data}/{x}");
        for target in ["llvm", "c"] {
            let out = dir.path().join("y.npy").display().to_string();
            let (code, _, err) = kiln(&[
                "run",
                &model,
                "--target",
                target,
                "--input",
                &x,
                "--input",
                &format!("idx={good}"),
                "--output",
                &out,
            ]);
            assert_eq!(code, 0, "{model} {target}: {err}");
            let y = kiln::npy::read_npy(&std::fs::read(&out).expect("read")).expect("npy").to_f64_vec();
            assert_eq!(y, want, "{model} {target}");
            for bad in &bads {
                let (code, _, err) =
                    kiln(&["run", &model, "--target", target, "--input", &x, "--input", &format!("idx={bad}")]);
                assert_eq!(code, 1, "{model} {target} {bad}: {err}");
                assert!(err.starts_with("error: kernel `") && err.contains("out of range"), "{model} {target}: {err}");
            }
        }
    }
}

/// Errors that named neither the file nor the place, headers that were not
/// checked, and `--threads 5000`, which panicked spawning threads.
#[test]
fn errors_name_the_file_and_the_place() {
    let dir = tempfile::tempdir().expect("dir");
    let body = "def @main(%x: Tensor[(2), float32]) {\n  %x\n}\n";
    let cases: [(&str, Vec<u8>, &str); 6] = [
        ("nohdr.relay", body.into(), "nohdr.relay:1:1: parse error: expected the text format version"),
        (
            "v4.relay",
            format!("#[version = \"0.0.4\"]\n{body}").into(),
            "v4.relay:1:13: parse error: text format version \"0.0.4\" is not supported",
        ),
        (
            "vneg.relay",
            format!("#[version = \"0.0.-5\"]\n{body}").into(),
            "vneg.relay:1:13: parse error: text format version \"0.0.-5\" is not supported",
        ),
        (
            "bin.relay",
            b"#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(2), float32]) {\n  \xff%x\n}\n".to_vec(),
            "bin.relay:3:3: parse error: not UTF-8 text (byte 0xff)",
        ),
        (
            "nomain.relay",
            b"#[version = \"0.0.5\"]\ndef @foo(%x: Tensor[(2), float32]) {\n  %x\n}\n".to_vec(),
            "nomain.relay:2:1: the module has no `@main` function (it defines `@foo`)",
        ),
        (
            "if.relay",
            b"#[version = \"0.0.5\"]\ndef @main(%c: bool, %x: Tensor[(2), float32]) {\n  if (%c) { %x } else { %x }\n}\n"
                .to_vec(),
            "is not supported ahead of time (at 3:3)",
        ),
    ];
    for (name, bytes, says) in cases {
        let path = write(&dir, name, &bytes);
        // A module without `@main` prints and optimizes (TVM's parser takes
        // any module); only running it needs `@main`.
        let cmds: &[&str] =
            if name == "if.relay" || name == "nomain.relay" { &["run"] } else { &["print", "opt", "run"] };
        for cmd in cmds {
            let (code, _, err) = kiln(&[cmd, &path]);
            assert_eq!(code, 1, "{cmd} {name}: {err}");
            assert!(err.starts_with("error: ") && err.contains(says), "{cmd} {name}: {err}");
        }
    }
    let nomain = dir.path().join("nomain.relay").display().to_string();
    for cmd in ["print", "opt"] {
        let (code, out, err) = kiln(&[cmd, &nomain]);
        assert!(code == 0 && out.contains("def @foo"), "{cmd} nomain.relay: {err}");
    }
    let model = write(&dir, "id.relay", format!("#[version = \"0.0.5\"]\n{body}").as_bytes());
    let (code, _, err) = kiln(&["run", &model, "--threads", "5000"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("'5000' for '--threads <N>': at most 1024 threads"), "{err}");
    // The thread pool itself never panics when the system refuses threads.
    assert!(kiln_runtime::ThreadPool::try_new(3).is_ok_and(|p| p.threads() == 3));
}

/// FoldConstant computed a 1 GiB `broadcast_to` (found by the fuzzer) while
/// compiling; results over `relay.FoldConstant.max_bytes` (256 MiB by
/// default) stay expressions, computed when the model runs.
#[test]
fn constant_folding_does_not_materialize_huge_constants() {
    let dir = tempfile::tempdir().expect("dir");
    let text =
        "#[version = \"0.0.5\"]\ndef @main() {\n  %0 = broadcast_to(1f, shape=[4, 33554435, 2]);\n  sum(%0)\n}\n";
    let path = write(&dir, "huge_fold.relay", text.as_bytes());
    let (code, out, err) = kiln(&["opt", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("broadcast_to(1f, shape=[4, 33554435, 2])"), "{out}");
    // Small results still fold, and the limit is a configuration key.
    let small = write(
        &dir,
        "small.relay",
        b"#[version = \"0.0.5\"]\ndef @main() {\n  sum(broadcast_to(1f, shape=[4, 2]))\n}\n",
    );
    let (code, out, err) = kiln(&["opt", &small]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("broadcast_to"), "{out}");
    let (code, out, err) = kiln(&["opt", &small, "--config", "relay.FoldConstant.max_bytes=16"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("broadcast_to"), "{out}");
}
