//! Pass instruments: code run around every pass of a context, and the built-in ones.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kiln_ir::relay::{print_module, IRModule};

use super::pass::{PassBodyError, PassInfo};

/// Hooks around the passes of a [`super::PassContext`] (TVM's `PassInstrument`).
/// Call order and failure semantics are the seed document's; see `PassContext`.
#[allow(unused_variables)]
pub trait PassInstrument: Send + Sync {
    /// The instrument's name, as errors from its hooks name it.
    fn name(&self) -> &str;
    /// Called when a context holding the instrument is entered; an error leaves the context unentered.
    fn enter_pass_ctx(&self) -> Result<(), PassBodyError> {
        Ok(())
    }
    /// Called when a context holding the instrument is left.
    fn exit_pass_ctx(&self) -> Result<(), PassBodyError> {
        Ok(())
    }
    /// Whether the pass should run (not asked for passes the context requires).
    fn should_run(&self, module: &IRModule, info: &PassInfo) -> Result<bool, PassBodyError> {
        Ok(true)
    }
    /// Called before each pass that runs.
    fn run_before_pass(&self, module: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        Ok(())
    }
    /// Called after each pass that ran, with its result.
    fn run_after_pass(&self, module: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        Ok(())
    }
}

/// How IR is rendered by the printing instruments.
pub type IrPrinter = fn(&IRModule) -> String;

/// One timed pass: nesting depth (a Sequential's passes are one deeper), name, time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassTime {
    /// Nesting depth: 0 for a pass applied directly, one more for each enclosing `Sequential`.
    pub depth: usize,
    /// The pass's name.
    pub name: String,
    /// Wall-clock time the pass took.
    pub time: Duration,
}

/// Passes under way (name, start) and the finished rows.
type TimingState = (Vec<(String, Instant)>, Vec<PassTime>);

/// Times every pass; [`PassTimingInstrument::render`] gives a nested table.
/// As in TVM, the profiles last while the context is entered: leaving it (and
/// so `override_instruments`) clears them, so render inside the scope.
#[derive(Debug, Default)]
pub struct PassTimingInstrument {
    state: Mutex<TimingState>,
}

impl PassTimingInstrument {
    /// A timer with nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every timed pass in the order they started.
    pub fn times(&self) -> Vec<PassTime> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// `pass: time (share of the total)`, indented by nesting; empty when
    /// nothing was profiled (TVM's `render()`).
    pub fn render(&self) -> String {
        let times = self.times();
        if times.is_empty() {
            return String::new();
        }
        let total: Duration = times.iter().filter(|t| t.depth == 0).map(|t| t.time).sum();
        let mut out = format!("pass timing (total {:.3} ms):\n", total.as_secs_f64() * 1e3);
        for t in &times {
            let share = if total.is_zero() { 0.0 } else { 100.0 * t.time.as_secs_f64() / total.as_secs_f64() };
            out.push_str(&format!(
                "{}{}: {:.3} ms ({share:.1}%)\n",
                "  ".repeat(t.depth + 1),
                t.name,
                t.time.as_secs_f64() * 1e3
            ));
        }
        out
    }
}

impl PassInstrument for PassTimingInstrument {
    fn name(&self) -> &str {
        "PassTiming"
    }

    fn exit_pass_ctx(&self) -> Result<(), PassBodyError> {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Default::default();
        Ok(())
    }

    fn run_before_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let depth = s.0.len();
        // Reserve the row now so that nested passes come after their parent.
        s.1.push(PassTime { depth, name: info.name.clone(), time: Duration::ZERO });
        s.0.push((info.name.clone(), Instant::now()));
        Ok(())
    }

    fn run_after_pass(&self, _: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((name, start)) = s.0.pop() else { return Ok(()) };
        let depth = s.0.len();
        let elapsed = start.elapsed();
        if let Some(row) = s.1.iter_mut().rev().find(|t| t.depth == depth && t.name == name && t.time.is_zero()) {
            row.time = elapsed;
        }
        debug_assert_eq!(name, info.name);
        Ok(())
    }
}

/// Which passes a printing instrument prints around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// No pass.
    None,
    /// Every pass.
    All,
    /// The passes of these names.
    Names(Vec<String>),
}

impl Selection {
    fn matches(&self, name: &str) -> bool {
        match self {
            Selection::None => false,
            Selection::All => true,
            Selection::Names(n) => n.iter().any(|x| x == name),
        }
    }
}

/// Prints the module before and/or after chosen passes.
pub struct PrintIr {
    /// The passes to print the module before.
    pub before: Selection,
    /// The passes to print the module after.
    pub after: Selection,
    sink: Mutex<Box<dyn Write + Send>>,
    printer: IrPrinter,
}

impl std::fmt::Debug for PrintIr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrintIr").field("before", &self.before).field("after", &self.after).finish_non_exhaustive()
    }
}

impl PrintIr {
    /// Print Relay text to stderr.
    pub fn new(before: Selection, after: Selection) -> Self {
        Self::with_sink(before, after, Box::new(std::io::stderr()), print_module)
    }

    /// Print with `printer` into `sink`, each module headed `// IR before <pass>` or `// IR after <pass>`.
    pub fn with_sink(before: Selection, after: Selection, sink: Box<dyn Write + Send>, printer: IrPrinter) -> Self {
        PrintIr { before, after, sink: Mutex::new(sink), printer }
    }

    fn emit(&self, when: &str, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        Ok(writeln!(sink, "// IR {when} {}\n{}", info.name, (self.printer)(m))?)
    }
}

impl PassInstrument for PrintIr {
    fn name(&self) -> &str {
        "PrintIr"
    }

    fn run_before_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        if self.before.matches(&info.name) {
            self.emit("before", m, info)?;
        }
        Ok(())
    }

    fn run_after_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        if self.after.matches(&info.name) {
            self.emit("after", m, info)?;
        }
        Ok(())
    }
}

/// Writes the module after every pass to `dir/NNN_<pass>.relay`.
#[derive(Debug)]
pub struct DumpIr {
    dir: PathBuf,
    counter: Mutex<usize>,
    printer: IrPrinter,
}

impl DumpIr {
    /// Dump Relay text into `dir` (created when the context is entered), numbering from 000.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DumpIr { dir: dir.into(), counter: Mutex::new(0), printer: print_module }
    }
}

impl PassInstrument for DumpIr {
    fn name(&self) -> &str {
        "DumpIr"
    }

    fn enter_pass_ctx(&self) -> Result<(), PassBodyError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("cannot create {}: {e}", self.dir.display()).into())
    }

    fn run_after_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        let mut n = self.counter.lock().unwrap_or_else(|e| e.into_inner());
        let clean: String = info.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let path = self.dir.join(format!("{:03}_{clean}.relay", *n));
        *n += 1;
        std::fs::write(&path, (self.printer)(m)).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
    }
}

/// A type checker the well-formedness instrument can run after each pass.
pub type TypeChecker = fn(&IRModule) -> Result<(), kiln_ir::Error>;

/// After every pass: the module must be well-formed (and well-typed, when a
/// checker is given); otherwise the error names the pass that broke it.
#[derive(Debug, Default)]
pub struct WellFormedChecker {
    type_check: Option<TypeChecker>,
}

impl WellFormedChecker {
    /// Check well-formedness only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also type-check after every pass (with kiln's type inference on a copy).
    pub fn with_type_check() -> Self {
        WellFormedChecker { type_check: Some(super::verify::well_typed) }
    }
}

impl PassInstrument for WellFormedChecker {
    fn name(&self) -> &str {
        "WellFormedChecker"
    }

    fn run_after_pass(&self, m: &IRModule, info: &PassInfo) -> Result<(), PassBodyError> {
        // Well-formedness errors have no span: the message says where.
        super::verify::well_formed(m)
            .map_err(|e| format!("after pass `{}`, the module is malformed: {}", info.name, e.message()))?;
        if let Some(check) = self.type_check {
            check(m).map_err(|e| format!("after pass `{}`, the module is ill-typed: {e}", info.name))?;
        }
        Ok(())
    }
}
