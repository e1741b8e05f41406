//! A long-running fuzzer on stable Rust, for machines without nightly and
//! cargo-fuzz: the targets of `fuzz/targets.rs` fed with mutants of
//! `fuzz/corpus/` (the operators of `fuzz/harness.rs` stacked 1–8 deep, or two
//! seeds spliced). No coverage feedback, so it finds less per input than
//! libFuzzer; it checks what libFuzzer checks besides panics:
//!
//! - no input runs over 10 s (a watchdog thread saves it and exits);
//! - no input takes the live heap over 1 GiB (a counting global allocator
//!   tracks the peak; the input is saved and reported, and kept out of the
//!   pool). A request that would go over `--max-live-gib` (4 by default) is
//!   refused: the input is saved first, then the process aborts with an
//!   allocation error (and its backtrace), or goes on if the caller handled
//!   the refusal.
//!
//! ```sh
//! cargo run --release -p kiln --example fuzz -- --target all --inputs 100000 [--seed N] [--out DIR]
//! # one saved input again; --max-live-gib 1 aborts at the allocation that goes over 1 GiB
//! cargo run --release -p kiln --example fuzz -- --target onnx_import --replay FILE [--max-live-gib 1]
//! ```
//!
//! Inputs that panic, hang or allocate too much are written to `--out`
//! (default `fuzz/found/`), with the panic message and backtrace next to
//! them. Release builds have no overflow checks; to catch arithmetic
//! overflow as cargo-fuzz does, build with
//! `CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true`.
//! The exit code is 0 only when nothing was found.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use harness::Rng;

#[path = "../../fuzz/targets.rs"]
mod targets;

#[path = "../../fuzz/harness.rs"]
mod harness;

type Body = fn(&[u8]) -> targets::Outcome;

/// The fuzz targets, then two that check the checks (`--target selftest_…`,
/// never part of `all`).
const TARGETS: [(&str, Body); 6] = [
    ("relay_parser", targets::relay_parser),
    ("relay_typecheck", targets::relay_typecheck),
    ("onnx_import", targets::onnx_import),
    ("npy_reader", targets::npy_reader),
    ("selftest_alloc", selftest_alloc),
    ("selftest_hang", selftest_hang),
];
const ALL: usize = 4;

/// Takes 2 GiB (reported), asks for more than the cap as a fallible
/// reservation (refused and counted), then as a plain `Vec` (refused: the
/// input is saved, the process aborts).
fn selftest_alloc(_: &[u8]) -> targets::Outcome {
    drop(std::hint::black_box(vec![0u8; 2 << 30]));
    let over = MAX_LIVE.load(Ordering::SeqCst) + 1;
    if Vec::<u8>::new().try_reserve(over).is_ok() {
        return "the cap does not work";
    }
    drop(std::hint::black_box(vec![0u8; over]));
    "the cap does not work"
}

/// Sleeps past the watchdog's limit.
fn selftest_hang(_: &[u8]) -> targets::Outcome {
    std::thread::sleep(MAX_TIME + Duration::from_secs(2));
    "the watchdog did not fire"
}
/// An input that takes the live heap over this is a finding (and one that
/// asks for more than `--max-live-gib` is refused).
const BIG_LIVE: usize = 1 << 30;
const MAX_TIME: Duration = Duration::from_secs(10);
/// Inputs saved per distinct panic location (the rest are only counted).
const SAVED_PER_SITE: usize = 3;
/// Inputs over [`BIG_LIVE`] saved per target.
const SAVED_BIG: u64 = 10;

// ---- the input being run, where the allocator and the watchdog can see it ----

static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
static INPUT_TARGET: AtomicUsize = AtomicUsize::new(0);
/// The input's number, plus one (0: none running).
static INPUT_NO: AtomicU64 = AtomicU64::new(0);
static OUT: OnceLock<PathBuf> = OnceLock::new();
static SAVING: AtomicBool = AtomicBool::new(false);

/// Writes the running input to `<out>/<kind>-<target>-<n>.bin`; its path.
/// Safe to call from the allocator: no lock is held, and what it allocates
/// is small.
fn save_running(kind: &str) -> Option<PathBuf> {
    if SAVING.swap(true, Ordering::SeqCst) {
        return None;
    }
    let (ptr, len) = (INPUT_PTR.load(Ordering::SeqCst), INPUT_LEN.load(Ordering::SeqCst));
    let n = INPUT_NO.load(Ordering::SeqCst);
    let saved = (n > 0 && !ptr.is_null()).then(|| {
        // SAFETY: the main loop publishes the input's buffer for exactly as
        // long as the input runs, and does not touch it meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
        let name = TARGETS[INPUT_TARGET.load(Ordering::SeqCst)].0;
        let path = OUT.get()?.join(format!("{kind}-{name}-{}.bin", n - 1));
        std::fs::create_dir_all(path.parent()?).ok()?;
        std::fs::write(&path, bytes).ok()?;
        Some(path)
    });
    SAVING.store(false, Ordering::SeqCst);
    saved.flatten()
}

// ---- 1 GiB live reported, 4 GiB refused ------------------------------------------

/// The system allocator, counting live bytes (and their peak) and refusing
/// any request that would take them over `--max-live-gib` (4 by default).
struct Capped;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static MAX_LIVE: AtomicUsize = AtomicUsize::new(4 << 30);
/// Refused requests since the last reset.
static REFUSED: AtomicUsize = AtomicUsize::new(0);

impl Capped {
    /// Reserves `size` more live bytes, or records the refusal.
    fn reserve(&self, size: usize) -> bool {
        let live = LIVE.fetch_add(size, Ordering::SeqCst).saturating_add(size);
        if live <= MAX_LIVE.load(Ordering::Relaxed) {
            PEAK.fetch_max(live, Ordering::Relaxed);
            return true;
        }
        LIVE.fetch_sub(size, Ordering::SeqCst);
        if REFUSED.fetch_add(1, Ordering::SeqCst) == 0 {
            // Saved now: the caller will most likely abort on the null.
            let path = save_running("bigalloc");
            let at = path.map_or_else(|| "(not saved)".into(), |p| p.display().to_string());
            eprintln!("fuzz: refused an allocation of {size} bytes ({} live); input {at}", live - size);
        }
        false
    }
}

impl Capped {
    /// `allocate()` if the request is within the cap, its bytes counted as live while it is.
    fn counted(&self, size: usize, allocate: impl FnOnce() -> *mut u8) -> *mut u8 {
        if !self.reserve(size) {
            return std::ptr::null_mut();
        }
        let p = allocate();
        if p.is_null() {
            LIVE.fetch_sub(size, Ordering::SeqCst);
        }
        p
    }
}

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        self.counted(layout.size(), || unsafe { System.alloc(layout) })
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        self.counted(layout.size(), || unsafe { System.alloc_zeroed(layout) })
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        // SAFETY (both calls): forwarded with the caller's pointer, layout and size.
        if new_size > old {
            return self.counted(new_size - old, || unsafe { System.realloc(ptr, layout, new_size) });
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(old - new_size, Ordering::SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

// ---- no input over 10 s ---------------------------------------------------------

/// Milliseconds since `EPOCH` when the running input started.
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Exits with status 3, saving the input, when one input runs over [`MAX_TIME`].
fn watchdog() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(250));
        let (n, started) = (INPUT_NO.load(Ordering::SeqCst), STARTED_MS.load(Ordering::SeqCst));
        if n == 0 || now_ms().saturating_sub(started) <= MAX_TIME.as_millis() as u64 {
            continue;
        }
        if INPUT_NO.load(Ordering::SeqCst) != n {
            continue;
        }
        let name = TARGETS[INPUT_TARGET.load(Ordering::SeqCst)].0;
        let path = save_running("hang");
        let at = path.map_or_else(|| "(not saved)".into(), |p| p.display().to_string());
        eprintln!("fuzz: HANG: {name} input {} ran over {MAX_TIME:?}; saved as {at}", n - 1);
        std::process::exit(3);
    });
}

// ---- the run ------------------------------------------------------------------------

struct Args {
    targets: Vec<usize>,
    inputs: u64,
    seed: u64,
    out: PathBuf,
    /// Files to run as they are, instead of mutants.
    replay: Vec<PathBuf>,
    max_live_gib: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        targets: (0..ALL).collect(),
        inputs: 100_000,
        seed: 1,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/found"),
        replay: Vec::new(),
        max_live_gib: 4,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => {
                let v = value()?;
                args.targets = match TARGETS.iter().position(|(n, _)| *n == v) {
                    Some(i) => vec![i],
                    None if v == "all" => (0..ALL).collect(),
                    None => return Err(format!("unknown target `{v}`")),
                };
            }
            "--inputs" => args.inputs = value()?.parse().map_err(|e| format!("--inputs: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => args.out = PathBuf::from(value()?),
            "--replay" => args.replay.push(PathBuf::from(value()?)),
            "--max-live-gib" => args.max_live_gib = value()?.parse().map_err(|e| format!("--max-live-gib: {e}"))?,
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    Ok(args)
}

/// Input `n` (of `--seed`), from the pool of its target: 1–8 stacked
/// mutations (fewer more often) of one entry, or of two entries spliced
/// (one input in eight).
fn make_input(pool: &[(String, Vec<u8>)], r: &mut Rng) -> (Vec<u8>, String) {
    let (i, j) = (r.below(pool.len()), r.below(pool.len()));
    let (base, what) = match r.below(8) {
        0 => {
            let (bytes, how) = harness::splice(&pool[i].1, &pool[j].1, r);
            (bytes, format!("{} + {} ({how})", pool[i].0, pool[j].0))
        }
        _ => (pool[i].1.clone(), pool[i].0.clone()),
    };
    let depth = 1 + r.below(8);
    let stack = 1 + r.below(depth);
    let (bytes, steps) = harness::mutate(&base, stack, r);
    (bytes, format!("{what}; {steps}"))
}

/// Outcomes of inputs that the first stage refused; any other input joins
/// its target's pool, so mutants that get far are mutated further (the only
/// feedback a fuzzer without coverage has).
const SHALLOW: [&str; 3] = ["parse error", "import error", "read error"];
/// Outcomes of inputs that join the pool one time in 16 only: the seeds that
/// the middle end refuses (control flow, global calls: not compiled ahead of
/// time) keep being refused when mutated, and would crowd out the rest.
const MIDDLE: [&str; 2] = ["type error", "middle-end error"];
/// Mutants kept per target, besides the seeds.
const POOL: usize = 4096;

/// Whether this build panics on integer overflow (release builds do not,
/// unless told to).
fn overflow_checks() -> bool {
    harness::catch(|| _ = std::hint::black_box(u8::MAX) + std::hint::black_box(1)).is_err()
}

#[derive(Default)]
struct Tally {
    inputs: u64,
    outcomes: BTreeMap<&'static str, u64>,
    panics: u64,
    big_allocs: u64,
    time: Duration,
    /// Distinct panic locations: how often, and the first message.
    sites: BTreeMap<String, (usize, String)>,
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("fuzz: {e}\nusage: fuzz [--target all|relay_parser|relay_typecheck|onnx_import|npy_reader] [--inputs N] [--seed N] [--out DIR] [--replay FILE]... [--max-live-gib N]");
        std::process::exit(2)
    });
    let _ = OUT.set(args.out.clone());
    MAX_LIVE.store(args.max_live_gib << 30, Ordering::SeqCst);
    harness::BACKTRACES.store(true, Ordering::SeqCst);
    let checks = overflow_checks();
    let mut pools: Vec<Vec<(String, Vec<u8>)>> = (0..TARGETS.len())
        .map(|t| match (t < ALL, args.targets.contains(&t)) {
            (true, true) => harness::corpus(TARGETS[t].0),
            _ => vec![("empty".to_string(), Vec::new())],
        })
        .collect();
    let replay: Vec<(String, Vec<u8>)> = args
        .replay
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))))
        .collect();
    let inputs = match replay.is_empty() {
        true => args.inputs,
        false => (replay.len() * args.targets.len()) as u64,
    };
    let seeds: Vec<usize> = pools.iter().map(Vec::len).collect();
    eprintln!(
        "fuzz: {} inputs over {:?}, seed {}, overflow checks {}, debug assertions {}; findings go to {}",
        inputs,
        args.targets.iter().map(|&t| TARGETS[t].0).collect::<Vec<_>>(),
        args.seed,
        if checks { "on" } else { "off" },
        if cfg!(debug_assertions) { "on" } else { "off" },
        args.out.display()
    );
    watchdog();
    let start = Instant::now();
    let mut last_report = Instant::now();
    let mut tallies: Vec<Tally> = TARGETS.iter().map(|_| Tally::default()).collect();
    for n in 0..inputs {
        let t = args.targets[(n % args.targets.len() as u64) as usize];
        let (name, body) = TARGETS[t];
        let mut r = Rng::new(args.seed.wrapping_mul(0x1000_0000_01b3) ^ n);
        let (input, what) = match replay.get((n / args.targets.len() as u64) as usize) {
            Some((file, bytes)) => (bytes.clone(), file.clone()),
            None => make_input(&pools[t], &mut r),
        };
        INPUT_PTR.store(input.as_ptr().cast_mut(), Ordering::SeqCst);
        INPUT_LEN.store(input.len(), Ordering::SeqCst);
        INPUT_TARGET.store(t, Ordering::SeqCst);
        STARTED_MS.store(now_ms(), Ordering::SeqCst);
        PEAK.store(LIVE.load(Ordering::SeqCst), Ordering::SeqCst);
        INPUT_NO.store(n + 1, Ordering::SeqCst);
        let mut outcome = "";
        let t0 = Instant::now();
        let result = harness::catch(|| outcome = body(&input));
        INPUT_NO.store(0, Ordering::SeqCst);
        let tally = &mut tallies[t];
        (tally.inputs, tally.time) = (tally.inputs + 1, tally.time + t0.elapsed());
        let (peak, refused) = (PEAK.load(Ordering::SeqCst), REFUSED.swap(0, Ordering::SeqCst));
        let big = peak > BIG_LIVE || refused > 0;
        if big {
            tally.big_allocs += 1;
            let path = args.out.join(format!("bigalloc-{name}-{n}.bin"));
            // A refused request saved the input already.
            let saved = match refused > 0 || tally.big_allocs > SAVED_BIG {
                true => "not saved again".to_string(),
                false => std::fs::create_dir_all(&args.out)
                    .and_then(|_| std::fs::write(&path, &input))
                    .map_or_else(|e| format!("not saved: {e}"), |_| format!("saved as {}", path.display())),
            };
            eprintln!("fuzz: BIG ALLOCATION: {name} input {n} ({what}): {} MiB live at the peak; {saved}", peak >> 20);
        }
        match result {
            Ok(()) => {
                if !replay.is_empty() {
                    eprintln!("fuzz: {name} {what}: {outcome}");
                }
                *tally.outcomes.entry(outcome).or_insert(0) += 1;
                if !big && !SHALLOW.contains(&outcome) && (!MIDDLE.contains(&outcome) || r.below(16) == 0) {
                    let pool = &mut pools[t];
                    let entry = (format!("mutant {n}"), input.clone());
                    match pool.len() < seeds[t] + POOL {
                        true => pool.push(entry),
                        false => pool[seeds[t] + r.below(POOL)] = entry,
                    }
                }
            }
            Err(p) => {
                tally.panics += 1;
                let first = p.message.lines().next().unwrap_or_default().to_string();
                let entry = tally.sites.entry(p.location.clone()).or_insert((0, first.clone()));
                entry.0 += 1;
                if entry.0 <= SAVED_PER_SITE {
                    let path = args.out.join(format!("panic-{name}-{n}.bin"));
                    let report =
                        format!("target {name}, input {n} (seed {}): {what}\n\n{p}\n\n{}", args.seed, p.backtrace);
                    let ok = std::fs::create_dir_all(&args.out)
                        .and_then(|_| std::fs::write(&path, &input))
                        .and_then(|_| std::fs::write(path.with_extension("txt"), report));
                    eprintln!(
                        "fuzz: PANIC: {name} input {n} at {}: {first}; saved as {} ({ok:?})",
                        p.location,
                        path.display()
                    );
                }
            }
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            let panics: u64 = tallies.iter().map(|t| t.panics).sum();
            eprintln!("fuzz: [{:.0?}] {} inputs, {panics} panics", start.elapsed(), n + 1);
        }
    }
    let elapsed = start.elapsed();
    let total: u64 = tallies.iter().map(|t| t.inputs).sum();
    println!(
        "fuzz summary (seed {}, {total} inputs in {elapsed:.1?}, {:.0}/s):",
        args.seed,
        total as f64 / elapsed.as_secs_f64()
    );
    let (mut panics, mut big) = (0, 0);
    for (t, tally) in tallies.iter().enumerate().filter(|(_, t)| t.inputs > 0) {
        println!(
            "  {:<16} {:>7} inputs in {:.1?}, {} panics, {} big allocations; outcomes {:?}",
            TARGETS[t].0, tally.inputs, tally.time, tally.panics, tally.big_allocs, tally.outcomes
        );
        for (site, (count, first)) in &tally.sites {
            println!("    {count} × panic at {site}: {first}");
        }
        (panics, big) = (panics + tally.panics, big + tally.big_allocs);
    }
    println!("  hangs (> {MAX_TIME:?}): 0; panics: {panics}; inputs over 1 GiB live: {big}");
    if panics + big > 0 {
        std::process::exit(1);
    }
}
