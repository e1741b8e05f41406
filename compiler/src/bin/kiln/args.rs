//! The command line's grammar: every command and option, parsed by clap, so
//! that `kiln --help` and `kiln <command> --help` describe them and a wrong
//! option is an error that names it.

use clap::{Args, Parser, Subcommand};

/// More threads than any machine kiln runs on has cores: a typo, not a plan.
pub const MAX_THREADS: usize = 1024;

/// What `--emit` can write.
pub const EMIT_KINDS: [&str; 8] = ["relay", "tir", "llvm", "asm", "obj", "c", "ptx", "lib"];

#[derive(Parser, Debug)]
#[command(
    name = "kiln",
    version,
    about = "Compile deep-learning models (Relay text or ONNX) into machine code",
    after_help = "Every user error is one message on stderr and exit code 1."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Parse a model (Relay text or ONNX) and print it as Relay text, type-annotated
    Print {
        /// A Relay text file, or an ONNX model (`.onnx`)
        file: String,
        /// (ONNX) fix the symbolic dimensions of an input (repeatable)
        #[arg(long, value_name = "NAME=1x3x224x224", value_parser = input_shape)]
        input_shape: Vec<(String, Vec<usize>)>,
    },
    /// Optimize a model and print it
    Opt(OptOptions),
    /// Compile a model and write what --emit asks for
    Build(BuildOptions),
    /// Compile in process (LLVM JIT, or C) and run on .npy inputs
    Run(RunOptions),
    /// Like run, then time the compiled model
    Bench(BenchOptions),
    /// Search each kernel's schedule space (register tiles, loop orders, threads) by timing
    /// candidates against the rule's schedule, and write the fastest to a tuning log that
    /// `--tuning FILE` and `Build::tuning_log` apply
    Tune(TuneOptions),
    /// Run a model and a reference model (for a quantized model, its float original) on the
    /// same inputs and print how far each output is from the reference's: largest and mean
    /// absolute error, the largest relative to the reference's largest magnitude, and top-1
    /// agreement along the last axis. An input of N × … where the model takes 1 × … is N
    /// samples, run one at a time (an ONNX model whose first dimension is fixed above 1 needs
    /// its --input-shape)
    Accuracy(AccuracyOptions),
    /// List the registered passes
    Passes,
    /// Measure this CPU's fp32 multiply-add peak (GFLOP/s) on 1 to N threads, for comparing a
    /// model's GFLOP/s with what the machine does in the same run
    Peak {
        /// The most threads to measure on (default: every CPU this process may use)
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Draw the compiled model: its kernels (fused operators, anchor in red, tensor types on the
    /// edges), or with --memory its memory plan; -o NAME.svg, .dot or .html (pans and zooms)
    Viz(VizOptions),
}

#[derive(Args, Debug)]
pub struct VizOptions {
    #[command(flatten)]
    pub compile: CompileOptions,
    /// The picture to write: `.svg`, `.dot` (Graphviz) or `.html` (one self-contained page)
    #[arg(short = 'o', value_name = "FILE")]
    pub out: String,
    /// Draw the module after this pass of the default pipeline (its first run) instead of the
    /// kernels after fusion
    #[arg(long, value_name = "PASS")]
    pub after: Option<String>,
    /// Draw the memory plan (tensors' arena offsets over the kernel calls) instead of the graph
    #[arg(long)]
    pub memory: bool,
    /// Time each kernel (on zero-filled inputs) and show the times in the boxes
    #[arg(long)]
    pub profile: bool,
    /// Threads for --profile
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads)]
    pub threads: usize,
}

#[derive(Args, Debug)]
pub struct OptOptions {
    /// A Relay text file, or an ONNX model (`.onnx`)
    pub file: String,
    /// Optimization level
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub opt_level: u32,
    /// Run these registered passes instead of the default pipeline
    #[arg(long, value_name = "P1,P2,…", value_delimiter = ',')]
    pub passes: Option<Vec<String>>,
    /// Never run this pass (repeatable)
    #[arg(long, value_name = "PASS")]
    pub disable: Vec<String>,
    /// Always run this pass (repeatable)
    #[arg(long, value_name = "PASS")]
    pub require: Vec<String>,
    /// Set a pass configuration key (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub config: Vec<(String, String)>,
    /// Print the module before this pass, or `all` (repeatable)
    #[arg(long = "print-ir-before", value_name = "PASS|all")]
    pub before: Vec<String>,
    /// Print the module after this pass, or `all` (repeatable)
    #[arg(long = "print-ir-after", value_name = "PASS|all")]
    pub after: Vec<String>,
    /// Print a pass timing report
    #[arg(long)]
    pub time_passes: bool,
    /// Write the module after every pass to DIR/NNN_<pass>.relay
    #[arg(long, value_name = "DIR")]
    pub dump_ir: Option<String>,
    /// Check that the module is well-formed and well-typed after every pass
    #[arg(long)]
    pub verify: bool,
    /// (ONNX) fix the symbolic dimensions of an input (repeatable)
    #[arg(long, value_name = "NAME=1x3x224x224", value_parser = input_shape)]
    pub input_shape: Vec<(String, Vec<usize>)>,
}

/// What every compiling command takes.
#[derive(Args, Debug)]
pub struct CompileOptions {
    /// A Relay text file, or an ONNX model (`.onnx`)
    pub file: String,
    /// `llvm -mcpu=native`, `llvm -mcpu=<cpu> [-mattr=…] [-mtriple=…] [-fast-math]`, `c`, or
    /// `cuda [-arch=sm_NN]` (NVIDIA GPUs; run and bench need kiln's `cuda` feature)
    #[arg(long, value_name = "T", default_value = "llvm -mcpu=native")]
    pub target: String,
    /// Optimization level
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub opt_level: u32,
    /// Bind @main parameters from a .safetensors or .npy file (repeatable)
    #[arg(long, value_name = "FILE")]
    pub weights: Vec<String>,
    /// Set a pass configuration key (repeatable; `relay.AlterOpLayout.winograd=false` keeps
    /// convolutions direct; an unknown key is an error that lists the valid ones)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub config: Vec<(String, String)>,
    /// (ONNX) fix the symbolic dimensions of an input (repeatable)
    #[arg(long, value_name = "NAME=1x3x224x224", value_parser = input_shape)]
    pub input_shape: Vec<(String, Vec<usize>)>,
    /// Schedule the kernels as this tuning log (from `kiln tune`) says, where it has a record
    /// for the target's CPU
    #[arg(long, value_name = "FILE")]
    pub tuning: Option<String>,
    /// The arithmetic of the convolutions and constant-weight products: `fp32`, or `bf16`
    /// (those that fit AMX tiles as bfloat16 products summed in float32; needs AMX-BF16)
    #[arg(long, value_name = "fp32|bf16", default_value = "fp32", value_parser = kiln::Precision::parse)]
    pub precision: kiln::Precision,
}

#[derive(Args, Debug)]
pub struct TuneOptions {
    #[command(flatten)]
    pub compile: CompileOptions,
    /// An input of @main to time on (repeatable; zero-filled where not given)
    #[arg(long, value_name = "NAME=PATH.npy", value_parser = key_value)]
    pub input: Vec<(String, String)>,
    /// Threads the kernels are timed on and tuned for
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads)]
    pub threads: usize,
    /// Time for the whole search, compilation included: `90s`, `10m`, `1h`
    #[arg(long, value_name = "TIME", default_value = "10m", value_parser = duration)]
    pub budget: std::time::Duration,
    /// Candidates timed per kernel at most (cheapest first by an analytic cost, then near the best
    /// so far); the search ends at the budget or when every listed point is timed
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=400))]
    pub candidates: u32,
    /// The tuning log to write; when it exists, its records for this CPU are reused (not
    /// searched again) and kept with the new ones
    #[arg(short = 'o', value_name = "FILE", default_value = "kiln-tuning.json")]
    pub out: String,
}

#[derive(Args, Debug)]
pub struct BuildOptions {
    #[command(flatten)]
    pub compile: CompileOptions,
    /// What to write (comma-separated); `lib` is the model for C and Rust callers:
    /// `lib<kiln_NAME>.a` (kernels, weights, C API), `NAME.h`, `NAME.rs`, `NAME.json`
    #[arg(long, value_name = "KINDS", value_delimiter = ',', default_value = "obj", value_parser = EMIT_KINDS)]
    pub emit: Vec<String>,
    /// Output directory
    #[arg(short = 'o', value_name = "DIR", default_value = ".")]
    pub out: String,
}

#[derive(Args, Debug)]
pub struct RunOptions {
    #[command(flatten)]
    pub compile: CompileOptions,
    /// An input of @main (repeatable; every parameter that is not a weight)
    #[arg(long, value_name = "NAME=PATH.npy", value_parser = key_value)]
    pub input: Vec<(String, String)>,
    /// (ONNX) fix an input at build time: it becomes a constant, so shapes, axes or scales fed
    /// as inputs are known to the compiler (repeatable)
    #[arg(long, value_name = "NAME=PATH.npy", value_parser = key_value)]
    pub bind: Vec<(String, String)>,
    /// Where to write each output, in order (repeatable)
    #[arg(long, value_name = "PATH.npy")]
    pub output: Vec<String>,
    /// Threads for the parallel kernels
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = threads)]
    pub threads: usize,
    /// (cuda) run this PTX, from `kiln build --target cuda --emit ptx` on a machine with LLVM,
    /// instead of compiling it here
    #[arg(long, value_name = "FILE")]
    pub ptx: Option<String>,
}

#[derive(Args, Debug)]
pub struct AccuracyOptions {
    #[command(flatten)]
    pub run: RunOptions,
    /// The model whose outputs are the reference: the same inputs and outputs (a Relay text
    /// file or an ONNX model), compiled for the same target, always in fp32 (default: the
    /// model itself — with `--precision bf16`, bf16 against fp32)
    #[arg(long, value_name = "FILE")]
    pub reference: Option<String>,
    /// Bind the reference's @main parameters from a .safetensors or .npy file (repeatable)
    #[arg(long, value_name = "FILE")]
    pub reference_weights: Vec<String>,
}

#[derive(Args, Debug)]
pub struct BenchOptions {
    #[command(flatten)]
    pub run: RunOptions,
    /// Timed runs after 10 warm-up runs
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Also time each kernel, slowest first (on a GPU: each launch repeated
    /// back to back, its launch cost amortized)
    #[arg(long)]
    pub profile: bool,
    /// Paced by another program (a benchmark alternating kiln with another
    /// runtime or another kiln): after the warm-up, time a batch of `--runs`
    /// runs each time a line arrives on standard input, and print
    /// `median_us min_us` of the batch as one line (with `--profile`, then
    /// `kernel=us` per kernel); end at the end of the input
    #[arg(long)]
    pub paced: bool,
}

/// `KEY=VALUE`, split at the first `=`.
fn key_value(v: &str) -> Result<(String, String), String> {
    let (k, x) = v.split_once('=').ok_or_else(|| format!("expected KEY=VALUE, not `{v}`"))?;
    Ok((k.to_string(), x.to_string()))
}

/// `NAME=D1xD2x…`.
fn input_shape(v: &str) -> Result<(String, Vec<usize>), String> {
    let bad = || format!("expected NAME=D1xD2x…, e.g. x=1x3x224x224, not `{v}`");
    let (n, dims) = v.split_once('=').ok_or_else(bad)?;
    let shape = dims.split('x').map(|d| d.trim().parse::<usize>()).collect::<Result<_, _>>().map_err(|_| bad())?;
    Ok((n.to_string(), shape))
}

/// `90s`, `10m`, `1h` or plain seconds; positive.
fn duration(v: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("expected a time such as 90s, 10m or 1h, not `{v}`");
    let (number, unit) = match v.trim().strip_suffix('h') {
        Some(n) => (n, 3600.0),
        None => match v.trim().strip_suffix('m') {
            Some(n) => (n, 60.0),
            None => (v.trim().strip_suffix('s').unwrap_or(v.trim()), 1.0),
        },
    };
    let seconds = number.trim().parse::<f64>().map_err(|_| bad())? * unit;
    if !(seconds > 0.0 && seconds <= 7.0 * 86400.0) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// A positive thread count, at most [`MAX_THREADS`].
fn threads(v: &str) -> Result<usize, String> {
    let n: usize = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| format!("expected a positive number, not `{v}`"))?;
    if n > MAX_THREADS {
        return Err(format!("at most {MAX_THREADS} threads"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }
}
