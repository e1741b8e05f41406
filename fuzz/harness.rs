//! What kiln's two stable fuzz drivers share (`compiler/tests/fuzz_corpus.rs`
//! in `cargo test`, `compiler/examples/fuzz.rs` for long runs), included by
//! both with `#[path]`: a deterministic PRNG, the byte-level mutation
//! operators, the seed corpus, and catching a panic quietly as its message
//! and location. libFuzzer brings its own of all of these.
//!
//! The operators are the classic ones of byte-level fuzzers: bit flips,
//! bytes set to 0, 0xff, 0x7f or 0x80, truncation, deletion and duplication
//! of a slice, interesting integers (2^31, 2^32, -1, …) written over or
//! inserted as little-endian bytes, and — for the text formats (Relay, the
//! `.npy` header) — as decimal text in place of a number.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// xorshift64*: deterministic and dependency-free.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

/// Integers that break size arithmetic, with the width they are written at.
const INTEGERS: [(u64, usize); 14] = [
    (1 << 31, 4),
    (u32::MAX as u64, 4), // -1 as i32
    (i32::MAX as u64, 4),
    (0, 4),
    (1 << 32, 8),
    (u64::MAX, 8), // -1 as i64
    (i64::MAX as u64, 8),
    (1 << 63, 8), // i64::MIN
    (1 << 40, 8),
    (0x8000, 2),
    (0xffff, 2),
    (0x80, 1),
    (0xff, 1),
    (0x7f, 1),
];

/// The same, as text (and a few floats), for the text formats.
const DECIMALS: [&str; 14] = [
    "2147483648",
    "4294967296",
    "-1",
    "0",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "1099511627776",
    "-2147483649",
    "65536",
    "1e308",
    "nan",
    "-0",
    "99999999999999999999999",
];

/// Applies one mutation operator to `data`; says which, with its arguments.
pub fn mutate_once(data: &mut Vec<u8>, r: &mut Rng) -> String {
    let len = data.len();
    let at = r.below(len);
    let slice = |r: &mut Rng| {
        let a = r.below(len);
        (a, a + 1 + r.below((len - a).min(4096)))
    };
    match r.below(11) {
        0 | 1 if len > 0 => {
            let bit = r.below(8);
            data[at] ^= 1 << bit;
            format!("flip bit {bit} of byte {at}")
        }
        2 if len > 0 => {
            let v = r.pick(&[0u8, 0xff, 0x7f, 0x80]);
            data[at] = v;
            format!("byte {at} = {v:#x}")
        }
        3 if len > 0 => {
            let v = r.next() as u8;
            data[at] = v;
            format!("byte {at} = {v:#x}")
        }
        4 => {
            data.truncate(at);
            format!("truncate to {at} bytes")
        }
        5 if len > 0 => {
            let (a, b) = slice(r);
            data.drain(a..b);
            format!("delete bytes {a}..{b}")
        }
        6 if len > 0 => {
            let (a, b) = slice(r);
            let to = r.below(len + 1);
            let copy = data[a..b].to_vec();
            data.splice(to..to, copy);
            format!("copy bytes {a}..{b} to {to}")
        }
        7 => {
            let (v, w) = r.pick(&INTEGERS);
            let bytes = &v.to_le_bytes()[..w];
            let to = r.below(len + 1);
            if r.below(2) == 0 && to + w <= len {
                data[to..to + w].copy_from_slice(bytes);
                format!("write {v:#x} ({w} bytes) at {to}")
            } else {
                data.splice(to..to, bytes.iter().copied());
                format!("insert {v:#x} ({w} bytes) at {to}")
            }
        }
        8 | 9 => {
            // Replace the run of digits at or after `at` (or insert at `at`).
            let text = r.pick(&DECIMALS);
            let start = (at..len).find(|&i| data[i].is_ascii_digit()).unwrap_or(at.min(len));
            let end = (start..len).find(|&i| !data[i].is_ascii_digit()).unwrap_or(len);
            data.splice(start..end, text.bytes());
            format!("bytes {start}..{end} = `{text}`")
        }
        _ => {
            let (v, w) = r.pick(&INTEGERS);
            data.extend_from_slice(&v.to_le_bytes()[..w]);
            format!("append {v:#x} ({w} bytes)")
        }
    }
}

/// A seed with `stack` mutations applied in a row; what they were.
pub fn mutate(seed: &[u8], stack: usize, r: &mut Rng) -> (Vec<u8>, String) {
    let mut data = seed.to_vec();
    let steps: Vec<String> = (0..stack).map(|_| mutate_once(&mut data, r)).collect();
    (data, steps.join("; "))
}

/// A prefix of `a` followed by a suffix of `b`.
pub fn splice(a: &[u8], b: &[u8], r: &mut Rng) -> (Vec<u8>, String) {
    let (i, j) = (r.below(a.len() + 1), r.below(b.len() + 1));
    let mut out = a[..i].to_vec();
    out.extend_from_slice(&b[j..]);
    (out, format!("bytes ..{i} of one seed, {j}.. of another"))
}

/// The seed files of `target` (`fuzz/corpus/<target>/`), sorted by name.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir().join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).ok()?)))
        .collect();
    files.sort();
    files
}

/// `fuzz/corpus` of this checkout.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

/// Whether the panic hook captures a backtrace (the long-running fuzzer's
/// reports want one; the test's messages do not).
pub static BACKTRACES: AtomicBool = AtomicBool::new(false);

/// A caught panic.
#[derive(Debug, Clone)]
pub struct Panic {
    pub message: String,
    /// `file:line`.
    pub location: String,
    /// Empty unless [`BACKTRACES`] is set.
    pub backtrace: String,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "panicked at {}: {}", self.location, self.message)
    }
}

thread_local! {
    /// Whether this thread is inside [`catch`], and where its last panic
    /// there happened (with the backtrace when [`BACKTRACES`] is set).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static PANIC_AT: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
}

/// Runs `f`; a panic comes back as a [`Panic`], not printed. (Panics
/// outside `catch` print as usual.)
pub fn catch(f: impl FnOnce()) -> Result<(), Panic> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                return default(info);
            }
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            let backtrace = match BACKTRACES.load(Ordering::Relaxed) {
                true => std::backtrace::Backtrace::force_capture().to_string(),
                false => String::new(),
            };
            PANIC_AT.with(|p| *p.borrow_mut() = (at, backtrace));
        }));
    });
    CATCHING.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    result.map_err(|p| {
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        let (location, backtrace) = PANIC_AT.with(|p| p.take());
        Panic { message: msg.unwrap_or_default(), location, backtrace }
    })
}
