//! The fuzz targets on stable, in plain `cargo test`: every target of
//! `fuzz/targets.rs` runs over each seed of `fuzz/corpus/<target>/` and a
//! fixed set of byte-level mutations of it (`fuzz/harness.rs`: bit flips,
//! bytes set to 0/0xff/0x7f/0x80, truncation, deleted and duplicated slices,
//! 2^31, 2^32, -1 … as little-endian bytes or as decimal text). Nightly
//! libFuzzer (`cargo fuzz`) and the long-running `examples/fuzz.rs` go
//! further; this keeps what they found found, without either. The ONNX
//! target's byte-level mutations complement `onnx_fuzz_structure.rs`, which
//! mutates models as protobuf messages.
//!
//! Each input must come back as an error or a result, never a panic. One
//! test per target and seed (`<target>::<seed>`); a failure names the
//! mutation number, and
//! writes the input to `$TMPDIR/kiln-fuzz/`; `KILN_FUZZ_MUTATIONS=<n>` tries
//! `n` mutations per seed instead of the default. Inputs that panic because
//! of a known, not yet fixed defect are listed in `KNOWN_DEFECTS`.

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]

use harness::{catch, Rng};
use libtest_mimic::{Failed, Trial};

#[path = "../../fuzz/targets.rs"]
mod targets;

// `splice` and `BACKTRACES` are for the long-running fuzzer.
#[allow(dead_code)]
#[path = "../../fuzz/harness.rs"]
mod harness;

/// Inputs of the sweep that panic because of a defect not fixed yet (the
/// target, the seed, the mutation, the defect). Each must still panic:
/// delete its line once the defect is fixed. Any other panic fails the test.
const KNOWN_DEFECTS: &[(&str, &str, u64, &str)] = &[];

/// FNV-1a: a stable hash of a seed's name, so a mutation's number means the
/// same bytes on every machine and whatever the other files are.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A fuzz target's sweep: its body, the mutations per seed, and the outcome
/// that means "refused" (which an unmutated seed must not be, unless listed
/// in [`REFUSED_SEEDS`]: a corpus worth mutating gets past the first stage).
#[derive(Clone, Copy)]
struct Target {
    name: &'static str,
    body: fn(&[u8]) -> targets::Outcome,
    per_seed: u64,
    refused: &'static str,
}

const TARGETS: [Target; 4] = [
    Target { name: "relay_parser", body: targets::relay_parser, per_seed: 1000, refused: "parse error" },
    Target { name: "relay_typecheck", body: targets::relay_typecheck, per_seed: 200, refused: "type error" },
    Target { name: "onnx_import", body: targets::onnx_import, per_seed: 100, refused: "import error" },
    Target { name: "npy_reader", body: targets::npy_reader, per_seed: 3000, refused: "read error" },
];

/// Seeds that kiln refuses by design (Fortran order, big-endian data).
const REFUSED_SEEDS: &[(&str, &str)] = &[("npy_reader", "f32_fortran.npy"), ("npy_reader", "f64_big_endian.npy")];

/// One test per target and seed (`<target>::<seed>`).
fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = Vec::new();
    for target in TARGETS {
        let seeds = harness::corpus(target.name);
        assert!(!seeds.is_empty(), "no seeds in fuzz/corpus/{}", target.name);
        for (name, seed) in seeds {
            let test = format!("{}::{name}", target.name);
            trials.push(Trial::test(test, move || sweep_seed(&target, &name, &seed)));
        }
    }
    libtest_mimic::run(&args, trials).exit()
}

/// Runs the target's body over `seed` and its mutations.
fn sweep_seed(target: &Target, name: &str, seed: &[u8]) -> Result<(), Failed> {
    let per_seed = std::env::var("KILN_FUZZ_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(target.per_seed);
    let t = target.name;
    let (mut outcomes, mut failures) = (std::collections::BTreeMap::new(), Vec::new());
    // Mutation 0 is the seed itself.
    for k in 0..=per_seed {
        let mut r = Rng::new(stable_hash(name) ^ k);
        let (input, what) = match k {
            0 => (seed.to_vec(), "unmutated".to_string()),
            _ => {
                let stack = 1 + r.below(2);
                harness::mutate(seed, stack, &mut r)
            }
        };
        let known = KNOWN_DEFECTS.iter().find(|d| (d.0, d.1, d.2) == (t, name, k));
        let mut outcome = "";
        match catch(|| outcome = (target.body)(&input)) {
            Ok(()) if known.is_some() => {
                failures.push(format!("mutation {k} no longer panics: remove it from KNOWN_DEFECTS"))
            }
            Err(p) if known.is_some() => eprintln!("{t}: seed {name}, mutation {k}: known defect, {}", p.location),
            Ok(()) => {
                *outcomes.entry(outcome).or_insert(0) += 1;
                let expected = REFUSED_SEEDS.contains(&(t, name));
                if k == 0 && (outcome == target.refused) != expected {
                    failures.push(match expected {
                        true => format!("the seed is no longer {}: remove it from REFUSED_SEEDS", target.refused),
                        false => format!("the seed itself is a {}: it does not get past the first stage", outcome),
                    });
                }
            }
            Err(p) => {
                let dir = std::env::temp_dir().join("kiln-fuzz").join(t);
                let path = dir.join(format!("{name}.{k}"));
                let saved = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &input));
                let saved = saved.map_or_else(|e| format!("not saved: {e}"), |_| path.display().to_string());
                failures.push(format!("mutation {k} ({what}; input {saved}): {p}"));
            }
        }
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "{t}: seed {name}: {} of {} inputs failed ({outcomes:?} came back):\n{}",
            failures.len(),
            per_seed + 1,
            failures.join("\n\n")
        )
        .into()),
    }
}
