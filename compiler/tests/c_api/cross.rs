//! Models cross-compiled and run under emulation: AArch64 Linux
//! (`aarch64-linux-gnu-gcc`, `qemu-aarch64`) and a bare-metal Cortex-M4
//! (`arm-none-eabi-gcc` with newlib, `qemu-system-arm -M mps2-an386`).
//! Installed by `scripts/cross-tools.sh`; without them the cases are
//! ignored with the reason.

use std::fmt::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::common::sweep::{Completion, Failed, Trial};
use super::support::{which, ModelCase};

/// AArch64 with NEON (4 f32 lanes, FMA), as a Cortex-A72 (a Raspberry Pi 4).
const AARCH64_TARGET: &str = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72";
/// A Cortex-M4 with its single-precision FPU, hard-float ABI.
const CORTEX_M4_TARGET: &str = "llvm -mtriple=thumbv7em-none-eabihf -mcpu=cortex-m4";

pub fn trials() -> Vec<Trial> {
    let mut trials = Vec::new();
    for model in ["mlp_example", "lenet", "resnet18"] {
        trials.push(Trial::ignorable_test(format!("aarch64_under_qemu::{model}"), move || aarch64(model)));
    }
    for model in ["mlp_example", "mlp"] {
        trials.push(Trial::ignorable_test(format!("cortex_m4_under_qemu::{model}"), move || cortex_m4(model)));
    }
    trials
}

/// The first of `tools` that does not run, as a reason to skip.
fn missing(tools: &[&str]) -> Option<String> {
    tools.iter().find(|t| !which(t)).map(|t| format!("`{t}` is not installed (scripts/cross-tools.sh installs it)"))
}

fn model_case(model: &str) -> Result<Result<ModelCase, Completion>, Failed> {
    Ok(ModelCase::load(model)?
        .ok_or_else(|| Completion::ignored_with(format!("{model} is not in ../shared/models (or $KILN_MODELS)"))))
}

/// `model` for AArch64: the library cross-compiled (kernels by LLVM, the C
/// API by `aarch64-linux-gnu-gcc`), `examples/c/run_model.c` linked
/// statically, run by `qemu-aarch64`, compared with the interpreter.
fn aarch64(model: &str) -> Result<Completion, Failed> {
    if let Some(why) = missing(&["aarch64-linux-gnu-gcc", "qemu-aarch64"]) {
        return Ok(Completion::ignored_with(why));
    }
    let case = match model_case(model)? {
        Ok(c) => c,
        Err(skip) => return Ok(skip),
    };
    let dir = tempfile::tempdir()?;
    let built = case.build(dir.path(), AARCH64_TARGET)?;
    assert!(built.report.contains("\"f32_lanes\": 4"), "NEON schedules: {}", built.report);
    let prog = super::support::link_run_model("aarch64-linux-gnu-gcc", dir.path(), &case.name, &["-static"])?;
    let got = super::support::run_program(&["qemu-aarch64".into(), prog.display().to_string()], dir.path(), &case)?;
    case.check(&got, "AArch64 under qemu-aarch64")?;
    Ok(Completion::Completed)
}

/// `model` for a Cortex-M4: the library cross-compiled (kernels by LLVM's
/// thumbv7em back end, the C API by `arm-none-eabi-gcc`), linked with
/// `examples/c/cortex-m` into a bare-metal image, run on QEMU's mps2-an386
/// with semihosting; prints the image's flash and RAM use.
fn cortex_m4(model: &str) -> Result<Completion, Failed> {
    if let Some(why) = missing(&["arm-none-eabi-gcc", "qemu-system-arm"]) {
        return Ok(Completion::ignored_with(why));
    }
    let rdimon = Command::new("arm-none-eabi-gcc").args(["-print-file-name=librdimon.a"]).output()?;
    if !String::from_utf8_lossy(&rdimon.stdout).contains('/') {
        return Ok(Completion::ignored_with("newlib for arm-none-eabi is not installed (scripts/cross-tools.sh)"));
    }
    let case = match model_case(model)? {
        Ok(c) => c,
        Err(skip) => return Ok(skip),
    };
    let dir = tempfile::tempdir()?;
    let built = case.build(dir.path(), CORTEX_M4_TARGET)?;
    let kiln = dir.path().join("kiln");
    write_model_data(&kiln.join("model_data.h"), &case, built.plan.arena_bytes)?;
    let harness = super::common::manifest_dir().join("../examples/c/cortex-m");
    let elf = dir.path().join(format!("{}.elf", case.name));
    let out = Command::new("arm-none-eabi-gcc")
        .args(["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2", "-std=c99"])
        .args(["--specs=rdimon.specs", "-nostartfiles", "-Wl,--gc-sections", "-ffunction-sections"])
        .arg("-T")
        .arg(harness.join("mps2_an386.ld"))
        .arg("-I")
        .arg(&kiln)
        .arg(harness.join("startup.c"))
        .arg(harness.join("main.c"))
        .arg("-L")
        .arg(&kiln)
        .arg(format!("-lkiln_{}", case.name))
        .args(["-lm", "-o"])
        .arg(&elf)
        .output()?;
    if !out.status.success() {
        return Err(format!("linking the Cortex-M4 image: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let (flash, ram) = image_size(&elf)?;
    let (code, data) = library_size(&kiln.join(format!("libkiln_{}.a", case.name)))?;
    println!(
        "{} for Cortex-M4: image flash {flash} bytes ({:.1} KiB), RAM {ram} bytes ({:.1} KiB) without stack; \
         of it kiln's code (kernels + C API) {code} bytes, weights {data} bytes, arena {} bytes",
        case.name,
        flash as f64 / 1024.0,
        ram as f64 / 1024.0,
        built.plan.arena_bytes
    );
    let text = run_with_timeout(
        Command::new("qemu-system-arm")
            .args(["-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none"])
            .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
            .arg(&elf),
        Duration::from_secs(120),
    )?;
    println!("{}", text.trim());
    if !text.contains("KILN_RESULT ok") {
        return Err(format!("{} on the Cortex-M4 did not match:\n{text}", case.name).into());
    }
    Ok(Completion::Completed)
}

/// `model_data.h` for the Cortex-M harness: the entry, sizes, input and expected output.
fn write_model_data(path: &Path, case: &ModelCase, arena_bytes: usize) -> Result<(), Failed> {
    let upper = case.name.to_uppercase();
    let floats = |v: Vec<f32>| v.iter().map(|x| format!("{x:e}f")).collect::<Vec<_>>().join(", ");
    let mut o = String::new();
    writeln!(o, "#include \"{}.h\"", case.name)?;
    writeln!(o, "#define MODEL_RUN kiln_{}_run", case.name)?;
    writeln!(o, "#define MODEL_ERROR_STRING kiln_{}_error_string", case.name)?;
    writeln!(o, "#define MODEL_ARENA_BYTES KILN_{upper}_ARENA_BYTES")?;
    writeln!(o, "#define MODEL_OUTPUT_LEN KILN_{upper}_OUT0_LEN")?;
    writeln!(o, "#if KILN_{upper}_ARENA_BYTES != {arena_bytes}u\n#error arena size\n#endif")?;
    writeln!(o, "static const float model_input[] = {{{}}};", floats(case.input.to_f32_vec()))?;
    writeln!(o, "static const float model_expected[] = {{{}}};", floats(case.want.to_f32_vec()))?;
    std::fs::write(path, o)?;
    Ok(())
}

/// Flash (code, read-only data, initial values of .data) and RAM (.data, .bss) of an ELF image.
fn image_size(elf: &Path) -> Result<(u64, u64), Failed> {
    let out = Command::new("arm-none-eabi-size").arg("-A").arg(elf).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut flash, mut ram) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [name, size, _addr] = f.as_slice() {
            let size: u64 = size.parse().unwrap_or(0);
            match *name {
                ".text" | ".ARM.exidx" => flash += size,
                ".data" => {
                    flash += size;
                    ram += size;
                }
                ".bss" => ram += size,
                _ => {}
            }
        }
    }
    Ok((flash, ram))
}

/// Code and read-only data of a static library (every member, as linked whole).
fn library_size(lib: &Path) -> Result<(u64, u64), Failed> {
    let out = Command::new("arm-none-eabi-size").arg("-A").arg(lib).output()?;
    let (mut code, mut data) = (0, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let [name, size, _addr] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
            let size: u64 = size.parse().unwrap_or(0);
            if name.starts_with(".text") {
                code += size;
            } else if name.starts_with(".rodata") || name.starts_with(".data") {
                data += size;
            }
        }
    }
    Ok((code, data))
}

/// Run `cmd`, killing it after `limit`; its stdout and stderr.
fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Result<String, Failed> {
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn()?;
    let start = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output()?;
            return Err(format!("timed out after {limit:?}: {}", String::from_utf8_lossy(&out.stdout)).into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    Ok(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}
