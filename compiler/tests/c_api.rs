//! The C API of a built model (`<model>.h`, `libkiln_<model>.a`): C programs
//! that use nothing else run the models and match the interpreter; the
//! packed DLPack entry refuses every malformed call with its documented
//! code; Python's ctypes calls it on ResNet-18 and matches ONNX Runtime; and
//! models cross-compiled for AArch64 Linux and a Cortex-M4 run under QEMU.
//!
//! Cases needing a tool or model that is absent are ignored with the reason
//! (`scripts/cross-tools.sh` installs the cross tools; CI runs it).

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]

mod common;
#[path = "c_api/cross.rs"]
mod cross;
#[path = "c_api/support.rs"]
mod support;

use common::sweep::{Completion, Failed, Trial};
use kiln::Tensor;
use support::*;

fn main() {
    let mut trials = vec![
        Trial::test("packed_entry_refuses_malformed_calls::llvm", || packed_entry_refuses_malformed_calls("")),
        Trial::test("packed_entry_refuses_malformed_calls::c", || packed_entry_refuses_malformed_calls("c")),
        Trial::test("typed_and_packed_entries_match_the_interpreter", typed_and_packed_entries_agree),
        Trial::test("header_declares_the_api", header_declares_the_api),
        Trial::test("kernels_from_the_cache_run_with_new_weights", kernels_from_the_cache_run_with_new_weights),
    ];
    for model in ["mlp_example", "mlp", "lenet"] {
        trials.push(Trial::ignorable_test(format!("c_program_runs::{model}"), move || c_program_runs(model)));
    }
    trials.push(Trial::ignorable_test("python_ctypes_packed_call::resnet18", python_ctypes_resnet18));
    trials.extend(cross::trials());
    libtest_mimic::run(&libtest_mimic::Arguments::from_args(), trials).exit()
}

/// A change that makes a well-formed call malformed.
type Edit = Box<dyn Fn(&mut Call)>;

/// Every malformed call through the packed entry answers with its code,
/// and the code's string says what it is; a good call still runs after them.
fn packed_entry_refuses_malformed_calls(target: &str) -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let built = build_small(dir.path(), target)?;
    let lib = SharedModel::load(dir.path(), "small")?;
    let info = lib.describe();
    assert_eq!((info.num_inputs, info.num_outputs), (2, 2));
    let names: Vec<String> = (0..2).map(|i| info.input(i).name()).collect();
    assert_eq!(names, ["x", "ids"]);
    assert_eq!(info.input(1).shape(), [2]);
    assert_eq!((info.input(1).dtype.code, info.input(1).dtype.bits), (0, 64));
    assert_eq!((info.output(0).shape(), info.output(1).shape()), (vec![2, 4], vec![2, 3]));
    assert_eq!(info.arena_bytes as usize, built.plan.arena_bytes);
    assert!(info.arena_bytes > 0, "the small model has an intermediate in the arena");

    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let ids: Vec<i64> = vec![3, -1];
    let mut calls = Calls::new(&lib, &x, &ids);
    assert_eq!(calls.call(|_| {}), 0, "a well-formed call");
    let want = small_reference(&x, &ids);
    assert_close(&calls.outputs(), &want, "outputs of the packed entry");

    let cases: Vec<(&str, i32, Edit)> = vec![
        ("one input too few", 3, Box::new(|c: &mut Call| c.num_inputs = 1)),
        ("one output too many", 3, Box::new(|c: &mut Call| c.num_outputs = 3)),
        ("inputs array is null", 2, Box::new(|c: &mut Call| c.inputs_null = true)),
        ("input data is null", 2, Box::new(|c: &mut Call| c.tensors[0].data = std::ptr::null_mut())),
        ("output data is null", 2, Box::new(|c: &mut Call| c.tensors[3].data = std::ptr::null_mut())),
        ("shape pointer is null", 2, Box::new(|c: &mut Call| c.tensors[1].shape = std::ptr::null_mut())),
        ("arena is null", 2, Box::new(|c: &mut Call| c.arena_null = true)),
        ("on a CUDA device", 4, Box::new(|c: &mut Call| c.tensors[0].device.device_type = 2)),
        ("int32 ids", 5, Box::new(|c: &mut Call| c.tensors[1].dtype.bits = 32)),
        ("float64 x", 5, Box::new(|c: &mut Call| c.tensors[0].dtype.bits = 64)),
        ("two lanes", 5, Box::new(|c: &mut Call| c.tensors[0].dtype.lanes = 2)),
        ("wrong rank", 6, Box::new(|c: &mut Call| c.tensors[0].ndim = 1)),
        ("wrong extent", 6, Box::new(|c: &mut Call| c.shapes[0][1] = 4)),
        ("transposed strides", 7, Box::new(|c: &mut Call| c.strides[0] = Some(vec![1, 2]))),
        ("padded rows", 7, Box::new(|c: &mut Call| c.strides[0] = Some(vec![4, 1]))),
        ("misaligned arena", 8, Box::new(|c: &mut Call| c.arena_offset = 4)),
        ("misaligned data", 8, Box::new(|c: &mut Call| c.tensors[0].byte_offset = 2)),
        ("an id past the table", 1, Box::new(|c: &mut Call| c.ids_override = Some(vec![4, 0]))),
        ("an id before the table", 1, Box::new(|c: &mut Call| c.ids_override = Some(vec![0, -5]))),
    ];
    for (what, code, edit) in &cases {
        let got = calls.call(|c| edit(c));
        assert_eq!(got, *code, "{what}: code {got} ({})", lib.error_string(got));
    }
    // Strides given but compact, and any stride on an axis of extent 1, are fine.
    assert_eq!(calls.call(|c| c.strides[0] = Some(vec![3, 1])), 0, "compact strides");
    assert_eq!(calls.call(|c| c.strides[2] = Some(vec![4, 1])), 0, "compact output strides");
    assert_eq!(calls.call(|c| c.strides[1] = Some(vec![1])), 0, "compact strides of a vector");
    // Every documented code has its own message; others are unknown.
    for (name, code, meaning) in kiln::build::c_api::STATUS_CODES {
        assert_eq!(lib.error_string(*code), *meaning, "{name}");
    }
    assert_eq!(lib.error_string(42), "unknown status");
    assert_eq!(calls.call(|_| {}), 0, "a well-formed call after the refusals");
    assert_close(&calls.outputs(), &want, "after the refusals");
    Ok(())
}

/// The typed entry (`kiln_small_run`) and the packed one give the interpreter's outputs.
fn typed_and_packed_entries_agree() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    build_small(dir.path(), "")?;
    let lib = SharedModel::load(dir.path(), "small")?;
    let x: Vec<f32> = (0..6).map(|i| (i as f32 * 0.7).sin()).collect();
    let ids: Vec<i64> = vec![0, 2];
    let (mut y0, mut y1) = ([0f32; 8], [0f32; 6]);
    let mut arena = AlignedArena::new(lib.describe().arena_bytes as usize);
    let status = lib.run_small(&x, &ids, &mut y0, &mut y1, arena.as_mut_ptr());
    assert_eq!(status, 0, "{}", lib.error_string(status));
    let want = small_reference(&x, &ids);
    assert_close(&[y0.to_vec(), y1.to_vec()], &want, "typed entry");
    let mut calls = Calls::new(&lib, &x, &ids);
    assert_eq!(calls.call(|_| {}), 0);
    assert_close(&calls.outputs(), &want, "packed entry");
    // The typed entry checks its pointers too.
    assert_eq!(lib.run_small(&x, &ids, &mut y0, &mut y1, std::ptr::null_mut()), 2);
    Ok(())
}

/// A rebuild with new weights takes the kernels from the kernel cache and
/// links them with the new weights' object: the library computes with them.
fn kernels_from_the_cache_run_with_new_weights() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let x: Vec<f32> = (0..6).map(|i| (i as f32 * 0.3).cos()).collect();
    let ids: Vec<i64> = vec![3, 1];
    let doubled =
        Tensor::from_f32(vec![4, 3], &small_table().to_f32_vec().iter().map(|v| 2.0 * v - 1.0).collect::<Vec<_>>());
    for (round, table) in [small_table(), doubled].into_iter().enumerate() {
        let built = build_small_with(dir.path(), "", table.clone())?;
        let reused = if round == 0 { "0 reused" } else { "0 compiled" };
        assert!(built.timings.contains(reused), "round {round}: {}", built.timings);
        let lib = SharedModel::load(dir.path(), "small")?;
        let (mut y0, mut y1) = ([0f32; 8], [0f32; 6]);
        let mut arena = AlignedArena::new(lib.describe().arena_bytes as usize);
        let status = lib.run_small(&x, &ids, &mut y0, &mut y1, arena.as_mut_ptr());
        assert_eq!(status, 0, "{}", lib.error_string(status));
        assert_close(&[y0.to_vec(), y1.to_vec()], &small_reference_with(&x, &ids, table), &format!("round {round}"));
    }
    Ok(())
}

/// `<model>.h` is self-contained C that two models' headers can share.
fn header_declares_the_api() -> Result<(), Failed> {
    let dir = tempfile::tempdir()?;
    let a = build_small(dir.path(), "")?;
    let h = &a.header;
    for needle in [
        "#define KILN_SMALL_ARENA_BYTES",
        "#define KILN_SMALL_ARENA_ALIGN 64u",
        "#define KILN_SMALL_IN1_SHAPE {2}",
        "#define KILN_SMALL_IN1_DTYPE_CODE 0",
        "#define KILN_SMALL_IN1_DTYPE_BITS 64",
        "#define KILN_SMALL_OUT0_SHAPE {2, 4}",
        "#define KILN_SMALL_OUT1_LEN 6u",
        "int kiln_small_run(const float* in0, const int64_t* in1, float* out0, float* out1, void* arena);",
        "int kiln_small_call(const DLTensor* inputs, int num_inputs, DLTensor* outputs, int num_outputs, void* arena);",
        "const char* kiln_small_error_string(int code);",
        "const kiln_model_info* kiln_small_describe(void);",
        "#define KILN_ERR_STRIDES 7",
    ] {
        assert!(h.contains(needle), "`{needle}` missing from the header:\n{h}");
    }
    let Some(cc) = c_compiler() else { return Ok(()) };
    // Two models' headers, and C++, in one translation unit.
    let other = Build::new("other")
        .module(small_module()?)
        .weight("w", small_table())
        .out_dir(dir.path())
        .cargo_metadata(false)
        .compile();
    other?;
    let src = dir.path().join("both.cc");
    std::fs::write(&src, "#include \"small.h\"\n#include \"other.h\"\nint main() { return kiln_small_describe()->num_inputs + kiln_other_describe()->num_inputs == 4 ? 0 : 1; }\n")?;
    let kiln = dir.path().join("kiln");
    let cxx = if cc.ends_with("gcc") { cc.replace("gcc", "g++") } else { "c++".to_string() };
    if which(&cxx) {
        let prog = dir.path().join("both");
        let out = std::process::Command::new(&cxx)
            .arg("-I")
            .arg(&kiln)
            .arg(&src)
            .arg("-L")
            .arg(&kiln)
            .args(["-lkiln_small", "-lkiln_other", "-lm", "-o"])
            .arg(&prog)
            .output()?;
        assert!(out.status.success(), "C++ with two headers: {}", String::from_utf8_lossy(&out.stderr));
        assert!(std::process::Command::new(&prog).status()?.success());
    }
    Ok(())
}

/// `examples/c/run_model.c` linked against a model's library runs it and matches the interpreter.
fn c_program_runs(model: &str) -> Result<Completion, Failed> {
    let Some(cc) = c_compiler() else { return Ok(Completion::ignored_with("no C compiler (`cc`)")) };
    let Some(reference) = ModelCase::load(model)? else {
        return Ok(Completion::ignored_with(format!("{model} is not in ../shared/models (or $KILN_MODELS)")));
    };
    let dir = tempfile::tempdir()?;
    reference.build(dir.path(), "")?;
    let prog = link_run_model(&cc, dir.path(), &reference.name, &[])?;
    let got = run_program(&[prog.display().to_string()], dir.path(), &reference)?;
    reference.check(&got, "C program (host)")?;
    Ok(Completion::Completed)
}

/// `examples/c/packed_call.py`: ctypes, NumPy arrays as DLTensors, on ResNet-18; ONNX Runtime's output.
fn python_ctypes_resnet18() -> Result<Completion, Failed> {
    let Some(cc) = c_compiler() else { return Ok(Completion::ignored_with("no C compiler (`cc`)")) };
    if let Some(why) = python_with_numpy() {
        return Ok(Completion::ignored_with(why));
    }
    let models = common::models_dir();
    if !models.join("resnet18.onnx").is_file() {
        return Ok(Completion::ignored_with("resnet18 is not in ../shared/models (or $KILN_MODELS)"));
    }
    let dir = tempfile::tempdir()?;
    let mut b = Build::new("resnet18");
    b.onnx(models.join("resnet18.onnx")).out_dir(dir.path()).cargo_metadata(false);
    b.compile()?;
    let so = shared_library(&cc, dir.path(), "resnet18")?;
    let script = common::manifest_dir().join("../examples/c/packed_call.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&so)
        .arg("resnet18")
        .arg(models.join("resnet18.input.npy"))
        .arg(models.join("resnet18.output.npy"))
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{}", text.trim());
    if !out.status.success() {
        return Err(format!("packed_call.py failed:\n{text}").into());
    }
    Ok(Completion::Completed)
}

/// Outputs within 1e-5 × max(1, |want|) of the interpreter's (the kernels may reassociate sums).
fn assert_close(got: &[Vec<f32>; 2], want: &[Vec<f32>; 2], what: &str) {
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{what}");
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{what}: {got:?} vs {want:?}");
        }
    }
}
