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
//! Each input must come back as an error or a result, never a panic. A
//! failure names the target, the seed file and the mutation number, and
//! writes the input to `$TMPDIR/kiln-fuzz/`; `KILN_FUZZ_MUTATIONS=<n>` tries
//! `n` mutations per seed instead of the default. Inputs that panic because
//! of a known, not yet fixed defect are listed in `KNOWN_DEFECTS`.

// Tests read their own knobs from the environment (not the build API).
#![allow(clippy::disallowed_methods)]

use harness::{catch, Rng};

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

/// Runs `body` over every seed of `target` and `per_seed` mutations of each;
/// the seeds that are themselves refused (`body` says `refused`).
fn sweep(target: &str, body: fn(&[u8]) -> targets::Outcome, per_seed: u64, refused: &str) -> Vec<String> {
    let per_seed = std::env::var("KILN_FUZZ_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(per_seed);
    let seeds = harness::corpus(target);
    assert!(!seeds.is_empty(), "no seeds in fuzz/corpus/{target}");
    let start = std::time::Instant::now();
    let (mut runs, mut outcomes, mut failures) = (0, std::collections::BTreeMap::new(), Vec::new());
    let mut refused_seeds = Vec::new();
    for (name, seed) in &seeds {
        // Mutation 0 is the seed itself.
        for k in 0..=per_seed {
            let mut r = Rng::new(stable_hash(name) ^ k);
            let (input, what) = match k {
                0 => (seed.clone(), "unmutated".to_string()),
                _ => {
                    let stack = 1 + r.below(2);
                    harness::mutate(seed, stack, &mut r)
                }
            };
            runs += 1;
            let known = KNOWN_DEFECTS.iter().find(|d| (d.0, d.1, d.2) == (target, name.as_str(), k));
            let mut outcome = "";
            match catch(|| outcome = body(&input)) {
                Ok(()) if known.is_some() => failures.push(format!(
                    "{target}: seed {name}, mutation {k} no longer panics: remove it from KNOWN_DEFECTS"
                )),
                Err(p) if known.is_some() => {
                    eprintln!("{target}: seed {name}, mutation {k}: known defect, {}", p.location)
                }
                Ok(()) => {
                    *outcomes.entry(outcome).or_insert(0) += 1;
                    if k == 0 && outcome == refused {
                        refused_seeds.push(name.clone());
                    }
                }
                Err(p) => {
                    let dir = std::env::temp_dir().join("kiln-fuzz").join(target);
                    let path = dir.join(format!("{name}.{k}"));
                    let saved = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &input));
                    let saved = saved.map_or_else(|e| format!("not saved: {e}"), |_| path.display().to_string());
                    failures.push(format!("{target}: seed {name}, mutation {k} ({what}; input {saved}): {p}"));
                }
            }
        }
    }
    eprintln!(
        "{target}: {runs} inputs ({} seeds × {} each) in {:.2?}: {outcomes:?}, {} panicked",
        seeds.len(),
        per_seed + 1,
        start.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {runs} inputs failed:\n{}", failures.len(), failures.join("\n\n"));
    refused_seeds
}

// The corpus is worth mutating: its seeds get past the first stage (the
// two `.npy` seeds that kiln refuses by design aside).

#[test]
fn relay_parser() {
    assert_eq!(sweep("relay_parser", targets::relay_parser, 1000, "parse error"), Vec::<String>::new());
}

#[test]
fn relay_typecheck() {
    assert_eq!(sweep("relay_typecheck", targets::relay_typecheck, 200, "type error"), Vec::<String>::new());
}

#[test]
fn onnx_import() {
    assert_eq!(sweep("onnx_import", targets::onnx_import, 100, "import error"), Vec::<String>::new());
}

#[test]
fn npy_reader() {
    let refused = sweep("npy_reader", targets::npy_reader, 3000, "read error");
    assert_eq!(refused, ["f32_fortran.npy", "f64_big_endian.npy"]);
}
